//! Animated GIFs of an env's rendered frames (`podc play`, `podc sim --gif`).
//!
//! A frame is what an env's `render` gives, `f32[H, W, 3]` RGB in [0, 1]. Frames are
//! small (Catch's is 10x5), so each is scaled up, every cell a square of `scale` pixels,
//! until its longer side is at least [`MIN_SIDE`] pixels. A frame of at most 256 colours
//! (drawn frames usually are) is written with exactly its colours; others are quantised.

use crate::array::{Array, Data};
use std::fs::File;
use std::path::Path;

/// The smallest longer side of a written frame, in pixels.
pub const MIN_SIDE: usize = 240;

/// The integer factor that brings a frame of `h` by `w` cells to [`MIN_SIDE`].
pub fn scale(h: usize, w: usize) -> usize {
    MIN_SIDE.div_ceil(h.max(w).max(1)).max(1)
}

/// Writes `frames` (each `f32[H, W, 3]`, all the same size) to `path`, looping, at `fps`
/// frames per second.
pub fn write(path: &Path, frames: &[Array], fps: u32) -> Result<(), String> {
    let Some(first) = frames.first() else { return Err("no frames to write".into()) };
    let &[h, w, 3] = &first.shape[..] else { return Err(format!("a frame is f32[H, W, 3], not {}", first.ty())) };
    let k = scale(h, w);
    let (width, height) = ((w * k) as u16, (h * k) as u16);
    let file = File::create(path).map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    let mut enc = gif::Encoder::new(file, width, height, &[]).map_err(|e| e.to_string())?;
    enc.set_repeat(gif::Repeat::Infinite).map_err(|e| e.to_string())?;
    let delay = (100 / fps.max(1)).max(2) as u16; // in hundredths of a second; viewers slow 0 and 1
    for f in frames {
        let Data::F32(x) = &f.data else { return Err("a frame is not f32".into()) };
        let rgb: Vec<u8> = scaled(x, h, w, k);
        let mut frame =
            indexed(width, height, &rgb).unwrap_or_else(|| gif::Frame::from_rgb_speed(width, height, &rgb, 10));
        frame.delay = delay;
        enc.write_frame(&frame).map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    Ok(())
}

/// The frame as 8-bit RGB, each cell a `k` by `k` square.
fn scaled(x: &[f32], h: usize, w: usize, k: usize) -> Vec<u8> {
    let byte = |v: f32| (v.clamp(0.0, 1.0) * 255.0).round() as u8;
    let mut out = Vec::with_capacity(h * w * k * k * 3);
    for row in 0..h * k {
        for col in 0..w * k {
            let cell = ((row / k) * w + col / k) * 3;
            out.extend(x[cell..cell + 3].iter().map(|&v| byte(v)));
        }
    }
    out
}

/// The frame with a palette of its own exact colours, if it has at most 256.
fn indexed(width: u16, height: u16, rgb: &[u8]) -> Option<gif::Frame<'static>> {
    let (mut palette, mut seen) = (vec![], std::collections::HashMap::new());
    let mut index = Vec::with_capacity(rgb.len() / 3);
    for px in rgb.chunks(3) {
        let c = [px[0], px[1], px[2]];
        let i = match seen.get(&c) {
            Some(&i) => i,
            None if palette.len() < 256 => {
                palette.push(c);
                seen.insert(c, palette.len() - 1);
                palette.len() - 1
            }
            None => return None,
        };
        index.push(i as u8);
    }
    let flat: Vec<u8> = palette.concat();
    Some(gif::Frame::from_palette_pixels(width, height, index, flat, None))
}
