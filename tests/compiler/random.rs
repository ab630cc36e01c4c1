//! The random builtins against `jax.random`: every case of `tests/fixtures/random/random.json`
//! (made by `gen_random.py` with jax on CPU) is one output of a generated program, run
//! through the reference interpreter and through PJRT. The program is built twice: with
//! the seeds as literals, so that each draw folds into a constant at compile time, and
//! with the seeds offset by a run-time parameter, so that the device runs the hashes.
//!
//! Integers, bools and keys must match exactly. The device's floats must be within 1 ulp
//! of jax's (they are identical: XLA compiles the same operations as for jax). The
//! interpreter's may differ a little where XLA computes differently by design (see
//! `tests/compiler/prims.rs`): XLA's CPU backend fuses a multiply and an add into one rounding
//! (`u * (hi - lo) + lo`, `erf_inv`'s polynomial) and has its own `log`, so an
//! interpreted draw is within 4 ulp of `max(|value|, 1)` (measured on 20000 draws each of
//! `normal`, `gumbel` and `uniform(k, s, -3.0, 7.0)`: 2). The draws of keys known at
//! compile time fold, so they are the interpreter's values on either side.

use crate::common;

use common::{client, entry};
use podracer::array::{Array, Data};
use podracer::driver::{self, Entry};
use serde_json::Value;
use std::path::Path;

/// One fixture case: a `.pod` expression and what `jax.random` gave for it.
#[derive(Clone)]
struct Case {
    name: String,
    pod: String,
    dtype: String,
    shape: Vec<usize>,
    want: Array,
}

fn fixture() -> Vec<Case> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/random/random.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let cases = doc["cases"].as_array().expect("cases");
    cases
        .iter()
        .map(|c| {
            let text = |k: &str| c[k].as_str().expect(k).to_string();
            let shape: Vec<usize> =
                c["shape"].as_array().expect("shape").iter().map(|d| d.as_u64().unwrap() as usize).collect();
            let ints =
                |k: &str| -> Vec<i64> { c[k].as_array().expect(k).iter().map(|x| x.as_i64().unwrap()).collect() };
            let dtype = text("dtype");
            let data = match dtype.as_str() {
                "u32" => Data::U32(ints("data").iter().map(|&x| x as u32).collect()),
                "i32" => Data::I32(ints("data").iter().map(|&x| x as i32).collect()),
                "bool" => {
                    Data::Bool(c["data"].as_array().expect("data").iter().map(|x| x.as_bool().unwrap()).collect())
                }
                "f32" => Data::F32(ints("bits").iter().map(|&x| f32::from_bits(x as u32)).collect()),
                other => panic!("unknown dtype {other}"),
            };
            Case { name: text("name"), pod: text("pod"), dtype, shape: shape.clone(), want: Array::new(shape, data) }
        })
        .collect()
}

/// `fn main(z: i32) -> (...) { (case, ...) }`; with `runtime`, every `key(N)` becomes
/// `key(z + N)` (the tests pass `z = 0`), so nothing about the keys is known at compile time.
fn program(cases: &[Case], runtime: bool) -> String {
    let tys: Vec<String> = cases
        .iter()
        .map(|c| {
            let dims: Vec<String> = c.shape.iter().map(|d| d.to_string()).collect();
            if dims.is_empty() { c.dtype.clone() } else { format!("{}[{}]", c.dtype, dims.join(", ")) }
        })
        .collect();
    let exprs: Vec<String> = cases
        .iter()
        .map(|c| {
            let e = if runtime { c.pod.replace("key(", "key(z + ") } else { c.pod.clone() };
            format!("        {e}, // {}\n", c.name)
        })
        .collect();
    format!("fn main(z: i32) -> ({}) {{\n    (\n{}    )\n}}\n", tys.join(", "), exprs.concat())
}

fn build(src: &str) -> Entry {
    let (prog, diags) = driver::check_source("random_cases.pod", src, None);
    assert!(diags.is_empty(), "{}\n{src}", podracer::diag::render_plain(&prog.map, &diags));
    driver::build(&prog, "main").unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

/// Distance in units in the last place, counting across zero.
fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let i = x.to_bits() as i32;
        i64::from(if i < 0 { i32::MIN - i } else { i })
    };
    (key(a) - key(b)).unsigned_abs()
}

/// How far the interpreter's floats may be from jax's: 4 ulp of `max(|want|, 1)` (see
/// the module's comment).
fn host_tolerance(want: f32) -> f32 {
    let scale = want.abs().max(1.0);
    4.0 * (f32::from_bits(scale.to_bits() + 1) - scale)
}

/// Compares one run's outputs with the fixture; `device` results must be within 1 ulp.
fn compare(cases: &[Case], got: &[Array], run: &str, device: bool) {
    assert_eq!(got.len(), cases.len(), "{run}: number of outputs");
    let mut worst = 0;
    for (c, g) in cases.iter().zip(got) {
        assert_eq!(g.shape, c.want.shape, "{run}: {}: shape", c.name);
        match (&g.data, &c.want.data) {
            (Data::F32(g), Data::F32(w)) => {
                for (i, (&x, &y)) in g.iter().zip(w).enumerate() {
                    worst = worst.max(ulps(x, y));
                    let ok = if device { ulps(x, y) <= 1 } else { (x - y).abs() <= host_tolerance(y) };
                    assert!(
                        ok,
                        "{run}: {} ({}) [{i}]: {x:e} ({:#x}), jax {y:e} ({:#x})",
                        c.name,
                        c.pod,
                        x.to_bits(),
                        y.to_bits()
                    );
                }
            }
            _ => assert_eq!(g.data, c.want.data, "{run}: {} ({})", c.name, c.pod),
        }
    }
    println!("{run}: {} cases, floats at most {worst} ulp from jax", cases.len());
}

fn zero() -> Vec<Array> {
    vec![Array::i32(vec![], vec![0])]
}

#[test]
fn folded_seeds_match_jax() {
    let cases = fixture();
    let e = build(&program(&cases, false));
    compare(&cases, &driver::eval(&e, &zero()), "interpreter, folded", false);
    let dev = podracer::cli::run_on_device(client(), &e, &zero()).expect("runs on the device");
    compare(&cases, &dev, "device, folded", true);
}

#[test]
fn runtime_seeds_match_jax() {
    let cases = fixture();
    let e = build(&program(&cases, true));
    compare(&cases, &driver::eval(&e, &zero()), "interpreter, run-time keys", false);
    let dev = podracer::cli::run_on_device(client(), &e, &zero()).expect("runs on the device");
    compare(&cases, &dev, "device, run-time keys", true);
}

/// `examples/basics/random.pod` shows four draws; each is a fixture case.
#[test]
fn example() {
    let cases = fixture();
    let pick = |n: &str| cases.iter().position(|c| c.name == n).expect(n);
    let shown: Vec<Case> =
        ["uniform_4", "normal_3", "randint_fold", "categorical_1d"].iter().map(|n| cases[pick(n)].clone()).collect();
    let e = entry(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/basics/random.pod"));
    compare(&shown, &driver::eval(&e, &[]), "example, interpreter", false);
    let dev = podracer::cli::run_on_device(client(), &e, &[]).expect("runs on the device");
    compare(&shown, &dev, "example, device", true);
}
