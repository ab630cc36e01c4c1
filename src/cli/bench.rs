//! `podc bench run`: the time of one call of a compiled entry point, for comparing a
//! program with the same computation written in another framework (`bench/`).

use super::{Failure, SourceArgs, entry, load, open_runtime, read_args};
use crate::array::{Array, ArrayTy, DType, Data};
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// What `podc bench run` was asked.
pub(super) struct BenchRunArgs<'a> {
    pub file: &'a Path,
    pub entry: &'a str,
    pub args: Option<&'a str>,
    pub runs: usize,
    pub json: bool,
    pub source: &'a SourceArgs,
}

/// Compiles the entry, uploads its arguments once (`--args`, else random f32 in [-1, 1)
/// and zero integers), calls it once to warm up, then times `runs` calls, each waited
/// for on the device; reports the median.
pub(super) fn run(a: BenchRunArgs, target: &super::Target) -> Result<(), Failure> {
    let runs = a.runs;
    let opts = a.source.options()?;
    let prog = load(a.file, &opts)?;
    let e = entry(&prog, &opts.overrides, a.entry)?;
    let args = match a.args {
        Some(_) => read_args(&e, a.args)?,
        None => e.func.param_types().iter().enumerate().map(|(k, t)| filler(t, k as u64)).collect(),
    };
    let client = open_runtime(target, None)?;
    let t0 = Instant::now();
    let exe = client.compile(&crate::lower::stablehlo::lower_module(&e.func, 1), 1)?;
    let compile_s = t0.elapsed().as_secs_f64();
    let bufs = args.iter().map(|x| client.upload(x, 0)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<_> = bufs.iter().collect();
    exe.execute(&refs)?;
    let mut times = vec![];
    for _ in 0..runs {
        let t0 = Instant::now();
        exe.execute(&refs)?;
        times.push(t0.elapsed().as_secs_f64());
    }
    let median = crate::stats::median(&times);
    if a.json {
        let j = json!({
            "entry": a.entry,
            "compile_s": compile_s,
            "cache": exe.cache_status().as_str(),
            "median_s": median,
            "runs_s": times,
        });
        println!("{j}");
    } else {
        println!("compile: {compile_s:.2} s (compilation cache: {})", exe.cache_status().as_str());
        println!("{:.3} ms per call (median of {runs} calls)", median * 1e3);
    }
    Ok(())
}

/// An argument of type `t`: f32 uniform in [-1, 1) from a fixed stream per argument
/// (SplitMix64), integers zero, bools false.
fn filler(t: &ArrayTy, seed: u64) -> Array {
    let n = t.numel();
    let data = match t.dtype {
        DType::F32 => {
            let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            Data::F32(
                (0..n)
                    .map(|_| {
                        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
                        let mut z = s;
                        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                        z ^= z >> 31;
                        (z >> 40) as f32 / (1u64 << 23) as f32 - 1.0
                    })
                    .collect(),
            )
        }
        DType::I32 | DType::U32 | DType::U8 | DType::Bool => return Array::zeros(t),
    };
    Array::new(t.shape.clone(), data)
}
