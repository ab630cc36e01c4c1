//! The learning curve: mean episode return against environment steps, as an 800x500 PNG;
//! for a run of several seeds, each seed's curve, light, and their mean. Under it, when
//! the run has them, one small panel per loss term (the agent's metrics, averaged over
//! seeds), two to a row.
//!
//! Text needs a font, and plotters' pure-Rust `ab_glyph` backend loads none by itself, so
//! the first plot looks for a common system font (DejaVu Sans, Liberation Sans, Arial).
//! Without one the curve is drawn without title and axis labels rather than not at all.

use super::metrics::Record;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};
use std::fs;
use std::io;
use std::ops::Range;
use std::path::Path;
use std::sync::OnceLock;

pub const WIDTH: u32 = 800;
pub const HEIGHT: u32 = 500;
/// The height of a row of loss-term panels.
pub const TERM_HEIGHT: u32 = 200;
/// The line's colour (matplotlib's first).
pub const LINE: RGBColor = RGBColor(31, 119, 180);
/// Each seed's line under the mean: `LINE` half way to white.
pub const SEED_LINE: RGBColor = RGBColor(143, 187, 217);

const FAMILY: &str = "podracer-sans";
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Registers the first system font found, once per process; whether there is one.
fn system_font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        FONT_PATHS.iter().any(|p| {
            // plotters keeps fonts for the life of the process; one font file is leaked once.
            fs::read(p).is_ok_and(|b| register_font(FAMILY, FontStyle::Normal, b.leak()).is_ok())
        })
    })
}

/// The `(env_steps, episode_return)` points of a metrics log, skipping reports in which
/// no episode ended (`episode_return` null).
pub fn curve_points(records: &[Record]) -> Vec<(f64, f64)> {
    let num = |r: &Record, k: &str| r.get(k).and_then(serde_json::Value::as_f64);
    records.iter().filter_map(|r| Some((num(r, "env_steps")?, num(r, "episode_return")?))).collect()
}

/// Each seed's points (see [`curve_points`]), in the order the seeds first appear; records
/// without a `seed` field are one run's.
pub fn seed_curves(records: &[Record]) -> Vec<Vec<(f64, f64)>> {
    let mut seeds: Vec<Option<i64>> = vec![];
    for r in records {
        let s = r.get("seed").and_then(serde_json::Value::as_i64);
        if !seeds.contains(&s) {
            seeds.push(s);
        }
    }
    let seed_of = |r: &Record| r.get("seed").and_then(serde_json::Value::as_i64);
    let curves: Vec<Vec<(f64, f64)>> = seeds
        .iter()
        .map(|&s| curve_points(&records.iter().filter(|r| seed_of(r) == s).cloned().collect::<Vec<_>>()))
        .collect();
    if curves.is_empty() { vec![vec![]] } else { curves }
}

/// The mean of several curves at every step any of them has a point at.
fn mean_curve(curves: &[Vec<(f64, f64)>]) -> Vec<(f64, f64)> {
    let mut xs: Vec<f64> = curves.iter().flatten().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs.into_iter()
        .map(|x| {
            let ys: Vec<f64> = curves.iter().flatten().filter(|p| p.0 == x).map(|p| p.1).collect();
            (x, ys.iter().sum::<f64>() / ys.len() as f64)
        })
        .collect()
}

/// Draws the curve through `points` (env steps, mean return) to the PNG file `path`.
/// Non-finite points are skipped; no points give empty axes.
pub fn plot_curve(path: &Path, points: &[(f64, f64)], title: &str) -> io::Result<()> {
    plot_curves(path, &[points.to_vec()], title)
}

/// [`plot_curve`] for one curve per seed: each drawn light, their mean over them.
pub fn plot_curves(path: &Path, curves: &[Vec<(f64, f64)>], title: &str) -> io::Result<()> {
    plot_run(path, curves, &[], title)
}

/// [`plot_curves`] with a panel under it for each loss term: `(name, (env steps, value))`.
pub fn plot_run(
    path: &Path,
    curves: &[Vec<(f64, f64)>],
    terms: &[(String, Vec<(f64, f64)>)],
    title: &str,
) -> io::Result<()> {
    draw(path, curves, terms, title, system_font())
}

/// Each series' `(env_steps, NAME)` points, averaged over the seeds at each step.
pub fn term_series(records: &[Record], names: &[String]) -> Vec<(String, Vec<(f64, f64)>)> {
    let num = |r: &Record, k: &str| r.get(k).and_then(serde_json::Value::as_f64);
    names
        .iter()
        .map(|n| {
            let points: Vec<(f64, f64)> =
                records.iter().filter_map(|r| Some((num(r, "env_steps")?, num(r, n)?))).collect();
            (n.clone(), mean_curve(&[points]))
        })
        .collect()
}

fn finite(c: &[(f64, f64)]) -> Vec<(f64, f64)> {
    c.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect()
}

fn draw(
    path: &Path,
    curves: &[Vec<(f64, f64)>],
    terms: &[(String, Vec<(f64, f64)>)],
    title: &str,
    text: bool,
) -> io::Result<()> {
    if !path.extension().is_some_and(|e| e.eq_ignore_ascii_case("png")) {
        let msg = format!("{}: the learning curve is written as PNG; name it `*.png`", path.display());
        return Err(io::Error::new(io::ErrorKind::InvalidInput, msg));
    }
    let curves: Vec<Vec<(f64, f64)>> = curves.iter().map(|c| finite(c)).collect();
    let points: Vec<(f64, f64)> = curves.iter().flatten().copied().collect();
    let xs = span(points.iter().map(|p| p.0), 0.0);
    let ys = span(points.iter().map(|p| p.1), 0.05);
    let err = |e: DrawingAreaErrorKind<_>| io::Error::other(format!("{}: {e}", path.display()));

    // Terms the log has no values of get no panel.
    let terms: Vec<&(String, Vec<(f64, f64)>)> = terms.iter().filter(|(_, s)| !finite(s).is_empty()).collect();
    let rows = terms.len().div_ceil(2) as u32;
    let whole = BitMapBackend::new(path, (WIDTH, HEIGHT + rows * TERM_HEIGHT)).into_drawing_area();
    whole.fill(&WHITE).map_err(err)?;
    let (root, below) = whole.split_vertically(HEIGHT);
    for (area, (name, series)) in below.split_evenly((rows.max(1) as usize, 2)).iter().zip(terms) {
        let series = finite(series);
        let (txs, tys) = (span(series.iter().map(|p| p.0), 0.0), span(series.iter().map(|p| p.1), 0.05));
        let mut b = ChartBuilder::on(area);
        b.margin(12);
        if text {
            b.caption(name, (FAMILY, 15)).x_label_area_size(25).y_label_area_size(55);
        }
        let mut chart = b.build_cartesian_2d(txs, tys).map_err(err)?;
        let mut mesh = chart.configure_mesh();
        if text {
            mesh.x_labels(5)
                .y_labels(4)
                .x_label_formatter(&|x| si(*x))
                .y_label_formatter(&|y| si(*y))
                .label_style((FAMILY, 11));
        }
        mesh.draw().map_err(err)?;
        chart.draw_series(LineSeries::new(series, LINE.stroke_width(2))).map_err(err)?;
    }
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder.caption(title, (FAMILY, 22)).x_label_area_size(45).y_label_area_size(60);
    }
    let mut chart = builder.build_cartesian_2d(xs, ys).map_err(err)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("env steps")
            .y_desc("mean episode return")
            .x_label_formatter(&|x| si(*x))
            .y_label_formatter(&|y| si(*y))
            .label_style((FAMILY, 14))
            .axis_desc_style((FAMILY, 16));
    }
    mesh.draw().map_err(err)?;
    let main = match &curves[..] {
        [one] => one.clone(),
        several => {
            for c in several {
                chart.draw_series(LineSeries::new(c.clone(), SEED_LINE.stroke_width(1))).map_err(err)?;
            }
            mean_curve(several)
        }
    };
    chart.draw_series(LineSeries::new(main, LINE.stroke_width(2))).map_err(err)?;
    whole.present().map_err(err)
}

/// The range covering `values`, widened by `pad` of its width, and never empty.
fn span(values: impl Iterator<Item = f64>, pad: f64) -> Range<f64> {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let w = hi - lo;
    if w > 0.0 {
        lo - pad * w..hi + pad * w
    } else if w == 0.0 {
        lo - 1.0..hi + 1.0
    } else {
        // No values: the fold left lo = inf, hi = -inf.
        0.0..1.0
    }
}

/// Numbers as people write them on axes: 1.5M, 200k, 0.25, and 0 rather than -0.
fn si(x: f64) -> String {
    let (v, unit) = match x.abs() {
        a if a >= 1e9 => (x / 1e9, "G"),
        a if a >= 1e6 => (x / 1e6, "M"),
        a if a >= 1e3 => (x / 1e3, "k"),
        _ => (x, ""),
    };
    let s = format!("{v:.3}");
    match s.trim_end_matches('0').trim_end_matches('.') {
        "-0" => "0".into(),
        s => format!("{s}{unit}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Decodes an RGB PNG, checking its header: (width, height, pixels).
    fn decode(path: &Path) -> (u32, u32, Vec<[u8; 3]>) {
        let bytes = fs::read(path).unwrap();
        assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&bytes[12..16], b"IHDR");
        let dim = |i: usize| u32::from_be_bytes(bytes[i..i + 4].try_into().unwrap());
        let mut reader = png::Decoder::new(&bytes[..]).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        let px = buf[..info.buffer_size()].chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        (dim(16), dim(20), px)
    }

    fn count(px: &[[u8; 3]], region: (Range<u32>, Range<u32>), f: impl Fn([u8; 3]) -> bool) -> usize {
        let (xs, ys) = region;
        ys.flat_map(|y| xs.clone().map(move |x| (x, y))).filter(|&(x, y)| f(px[(y * WIDTH + x) as usize])).count()
    }

    const LINE_PX: [u8; 3] = [LINE.0, LINE.1, LINE.2];
    const WHOLE: (Range<u32>, Range<u32>) = (0..WIDTH, 0..HEIGHT);
    // Where the title is centred, above the plotting area.
    const TITLE: (Range<u32>, Range<u32>) = (300..500, 20..45);

    #[test]
    fn draws_the_curve_with_title_when_a_font_is_found() {
        assert!(system_font(), "this machine has DejaVu Sans; the font search missed it");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curve.png");
        let points: Vec<(f64, f64)> = (0..50).map(|i| (i as f64 * 2e4, (i as f64 / 5.0).sin())).collect();
        plot_curve(&path, &points, "catch a2c").unwrap();
        let (w, h, px) = decode(&path);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        assert!(count(&px, WHOLE, |p| p == LINE_PX) > 500, "no curve drawn");
        let dark = |p: [u8; 3]| p.iter().all(|&c| c < 100);
        assert!(count(&px, TITLE, dark) > 50, "no title drawn");
    }

    #[test]
    fn without_a_font_the_curve_is_drawn_without_text() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curve.png");
        // `draw` with `text: false` must not ask plotters for any font: `FAMILY` may be
        // registered by another test, but the default family never is.
        draw(&path, &[vec![(0.0, 1.0), (1e5, 3.0), (2e5, f64::NAN), (3e5, 2.0)]], &[], "t", false).unwrap();
        let (w, h, px) = decode(&path);
        assert_eq!((w, h), (WIDTH, HEIGHT));
        assert!(count(&px, WHOLE, |p| p == LINE_PX) > 500);
        assert_eq!(count(&px, TITLE, |p| p.iter().all(|&c| c < 100)), 0);
    }

    #[test]
    fn empty_and_degenerate_inputs_give_empty_axes() {
        let dir = tempfile::tempdir().unwrap();
        for (i, pts) in [vec![], vec![(5.0, 2.0)], vec![(f64::NAN, f64::INFINITY)]].iter().enumerate() {
            let path = dir.path().join(format!("c{i}.png"));
            plot_curve(&path, pts, "empty").unwrap();
            let (w, h, px) = decode(&path);
            assert_eq!((w, h), (WIDTH, HEIGHT));
            assert!(count(&px, WHOLE, |p| p == LINE_PX) < 20, "input {i}");
        }
        let e = plot_curve(&dir.path().join("curve.svg"), &[], "x").unwrap_err();
        assert!(e.to_string().contains("name it `*.png`"), "{e}");
        let e = plot_curve(&dir.path().join("no/such/dir/c.png"), &[], "x").unwrap_err();
        assert!(e.to_string().contains("no/such/dir/c.png"), "{e}");
    }

    #[test]
    fn curve_points_skip_reports_without_episodes() {
        let recs: Vec<Record> = [
            json!({"env_steps": 100, "episode_return": null}),
            json!({"env_steps": 200, "episode_return": 1.5}),
            json!({"env_steps": 300}),
            json!({"env_steps": 400, "episode_return": -2}),
        ]
        .iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
        assert_eq!(curve_points(&recs), vec![(200.0, 1.5), (400.0, -2.0)]);
    }

    #[test]
    fn several_seeds_are_drawn_light_under_their_mean() {
        let recs: Vec<Record> = (0..3)
            .flat_map(|i| {
                (1..40)
                    .map(move |s| json!({"seed": 7 + i, "env_steps": s * 1000, "episode_return": (s * (i + 1)) as f64}))
            })
            .map(|v| v.as_object().unwrap().clone())
            .collect();
        let curves = seed_curves(&recs);
        assert_eq!(curves.len(), 3);
        assert_eq!(curves[1][0], (1000.0, 2.0));
        assert_eq!(mean_curve(&curves)[0], (1000.0, 2.0), "the mean of 1, 2 and 3");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("seeds.png");
        plot_curves(&path, &curves, "three seeds").unwrap();
        let (_, _, px) = decode(&path);
        let seed_px = [SEED_LINE.0, SEED_LINE.1, SEED_LINE.2];
        let n = count(&px, WHOLE, |p| p == seed_px);
        assert!(n > 200, "the seeds' lines: {n} pixels");
        assert!(count(&px, WHOLE, |p| p == LINE_PX) > 500, "the mean's line");
        assert_eq!(seed_curves(&recs[..0]), vec![vec![]], "no records: one empty curve");
    }

    #[test]
    fn loss_terms_get_panels_under_the_curve() {
        let recs: Vec<Record> = (0..2)
            .flat_map(|seed| {
                (1..30).map(move |s| json!({"seed": seed, "env_steps": s * 100, "episode_return": s, "loss": seed * s, "value": 1.0}))
            })
            .map(|v| v.as_object().unwrap().clone())
            .collect();
        let names = ["loss".to_string(), "value".to_string(), "entropy".to_string()];
        let terms = term_series(&recs, &names);
        assert_eq!(terms[0].1[0], (100.0, 0.5), "loss at 100 steps, the mean of 0 and 1");
        assert!(terms[2].1.is_empty(), "no `entropy` in the log");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("curve.png");
        plot_run(&path, &seed_curves(&recs), &terms, "terms").unwrap();
        let bytes = fs::read(&path).unwrap();
        let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
        assert_eq!(h, HEIGHT + TERM_HEIGHT, "two terms with values: one row of panels");
        let mut reader = png::Decoder::new(&bytes[..]).read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).unwrap();
        let px: Vec<[u8; 3]> = buf[..info.buffer_size()].chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        let below = (0..WIDTH / 2, HEIGHT..HEIGHT + TERM_HEIGHT);
        assert!(count(&px, below, |p| p == LINE_PX) > 100, "the loss panel's line");
    }

    #[test]
    fn step_labels() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(1500.0), "1.5k");
        assert_eq!(si(2_000_000.0), "2M");
        assert_eq!(si(1.25e9), "1.25G");
        assert_eq!(si(-0.2), "-0.2");
        assert_eq!(si(-1e-17), "0");
    }
}
