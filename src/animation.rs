//! Animated GIFs of an env's rendered frames (`podc play`, `podc sim --gif`).
//!
//! A frame is what a `.pod` env's `render` gives, `f32[H, W, 3]` RGB in [0, 1], or what a
//! host env draws, `u8[H, W, 3]`. Small frames (Catch's is 10x5) are scaled up, every
//! cell a square of `scale` pixels, until the longer side is at least [`MIN_SIDE`]
//! pixels. A frame of at most 256 colours (drawn frames usually are) is written with
//! exactly its colours; others are quantised.

use crate::array::{Array, Data};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The smallest longer side of a written frame, in pixels.
pub const MIN_SIDE: usize = 240;

/// The integer factor that brings a frame of `h` by `w` cells to [`MIN_SIDE`].
pub fn scale(h: usize, w: usize) -> usize {
    MIN_SIDE.div_ceil(h.max(w).max(1)).max(1)
}

/// Writes `frames` (each `[H, W, 3]`, all the same size) to `path`, looping, at `fps`
/// frames per second.
pub fn write(path: &Path, frames: &[Array], fps: u32) -> Result<(), String> {
    let Some(first) = frames.first() else { return Err("no frames to write".into()) };
    let mut gif = Gif::create(path, first, fps)?;
    frames.iter().try_for_each(|f| gif.push(f))
}

/// A GIF written a frame at a time, so that long episodes of large frames are never all
/// in memory.
pub struct Gif {
    enc: gif::Encoder<File>,
    path: PathBuf,
    /// The frames' `[H, W]`, and the factor each cell is scaled by.
    size: [usize; 2],
    k: usize,
    /// In hundredths of a second.
    delay: u16,
}

impl Gif {
    /// Starts a looping GIF at `path` of frames the size of `first` (not written yet).
    pub fn create(path: &Path, first: &Array, fps: u32) -> Result<Gif, String> {
        let &[h, w, 3] = &first.shape[..] else { return Err(format!("a frame is [H, W, 3], not {}", first.ty())) };
        let k = scale(h, w);
        let (width, height) = (u16::try_from(w * k), u16::try_from(h * k));
        let (Ok(width), Ok(height)) = (width, height) else {
            return Err(format!("frames of {h}x{w} are too large for a GIF"));
        };
        let file = File::create(path).map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
        let mut enc = gif::Encoder::new(file, width, height, &[]).map_err(|e| e.to_string())?;
        enc.set_repeat(gif::Repeat::Infinite).map_err(|e| e.to_string())?;
        let delay = (100 / fps.max(1)).max(2) as u16; // viewers slow delays of 0 and 1
        Ok(Gif { enc, path: path.to_path_buf(), size: [h, w], k, delay })
    }

    /// Appends a frame of the first one's size.
    pub fn push(&mut self, f: &Array) -> Result<(), String> {
        let [h, w] = self.size;
        if f.shape != [h, w, 3] {
            return Err(format!("a frame of {} among frames of [{h}, {w}, 3]", f.ty()));
        }
        let rgb = match &f.data {
            Data::F32(x) => x.iter().map(|&v| (v.clamp(0.0, 1.0) * 255.0).round() as u8).collect(),
            Data::U8(x) => x.clone(),
            _ => return Err(format!("a frame is f32 or u8, not {}", f.ty())),
        };
        let rgb = scaled(&rgb, h, w, self.k);
        let (width, height) = ((w * self.k) as u16, (h * self.k) as u16);
        let mut frame =
            indexed(width, height, &rgb).unwrap_or_else(|| gif::Frame::from_rgb_speed(width, height, &rgb, 10));
        frame.delay = self.delay;
        self.enc.write_frame(&frame).map_err(|e| format!("cannot write `{}`: {e}", self.path.display()))
    }
}

/// The frame's 8-bit RGB, each cell a `k` by `k` square.
fn scaled(x: &[u8], h: usize, w: usize, k: usize) -> Vec<u8> {
    if k == 1 {
        return x.to_vec();
    }
    let mut out = Vec::with_capacity(h * w * k * k * 3);
    for row in 0..h * k {
        for col in 0..w * k {
            let cell = ((row / k) * w + col / k) * 3;
            out.extend_from_slice(&x[cell..cell + 3]);
        }
    }
    out
}

/// The frame with a palette of its own exact colours, if it has at most 256.
fn indexed(width: u16, height: u16, rgb: &[u8]) -> Option<gif::Frame<'static>> {
    let (mut palette, mut seen) = (vec![], std::collections::HashMap::new());
    let mut index = Vec::with_capacity(rgb.len() / 3);
    // Drawn frames are mostly runs of one colour: the last pixel's index spares most lookups.
    let mut last = None;
    for px in rgb.chunks(3) {
        let c = [px[0], px[1], px[2]];
        let i = match last {
            Some((l, i)) if l == c => i,
            _ => match seen.get(&c) {
                Some(&i) => i,
                None if palette.len() < 256 => {
                    palette.push(c);
                    seen.insert(c, palette.len() - 1);
                    palette.len() - 1
                }
                None => return None,
            },
        };
        last = Some((c, i));
        index.push(i as u8);
    }
    let flat: Vec<u8> = palette.concat();
    Some(gif::Frame::from_palette_pixels(width, height, index, flat, None))
}
