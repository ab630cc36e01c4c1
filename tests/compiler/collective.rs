//! `psum` and `pmean` across replicas: the interpreter (one replica: the identity), the
//! IR and StableHLO for two replicas, and real two-device runs on the CPU plugin against
//! `jax.pmap` fixtures (`tests/fixtures/collective/gen_collective.py`), gradients
//! through the collectives included.

use crate::common;

use common::{assert_close, client, run_both};
use podracer::array::{Array, Data};
use podracer::driver::{self, Entry};
use podracer::lower::stablehlo::lower_module;
use serde_json::Value;
use std::path::Path;

/// One program with an entry point `t_NAME` per fixture case `NAME`.
const SRC: &str = "
struct Rec { a: f32[4], n: i32 }

fn t_pmean(x: f32[2, 3]) -> f32[2, 3] { pmean(x) }
fn t_psum_record(r: Rec) -> Rec { psum(r) }

fn loss_mean(w: f32[3], x: f32[3]) -> f32 { sum(pmean(w * x) ** 2.0) }
fn loss_sum(w: f32[3], x: f32[3]) -> f32 { sum(psum(w * x) ** 2.0) }
fn t_grad_pmean(w: f32[3], x: f32[3]) -> f32[3] { grad(loss_mean, w, x) }
fn loss_varying(w: f32[3], x: f32[3]) -> f32 { sum(pmean(w * x) * x) }
fn t_grad_pmean_varying(w: f32[3], x: f32[3]) -> f32[3] { grad(loss_varying, w, x) }
fn t_grad_psum(w: f32[3], x: f32[3]) -> f32[3] { grad(loss_sum, w, x) }

fn local(w: f32[3], x: f32[3]) -> f32 { sum(tanh(w * x)) }
fn t_pmean_of_grads(w: f32[3], x: f32[3]) -> f32[3] { pmean(grad(local, w, x)) }

// Inside a loop (a `stablehlo.while` body).
fn doubling(x: f32[3]) -> f32[3] { for i in 0..3 carry y = x { psum(y) } }

// Bytes add up modulo 256 across replicas.
fn bytes(x: u8[3]) -> u8[3] { psum(x) }

// A constant is not folded through `psum`: on D replicas it is D times itself.
fn count() -> (f32, i32) { (psum(1.0), psum(1)) }
";

fn entry(name: &str) -> Entry {
    let (prog, diags) = driver::check_source("collective.pod", SRC, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    driver::build(&prog, &[], name).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

fn array(v: &Value) -> Array {
    let shape: Vec<usize> =
        v["shape"].as_array().expect("shape").iter().map(|d| d.as_u64().unwrap() as usize).collect();
    let ints = |k: &str| v[k].as_array().expect(k).iter().map(|x| x.as_i64().unwrap());
    let data = match v["dtype"].as_str() {
        Some("f32") => Data::F32(ints("bits").map(|b| f32::from_bits(b as u32)).collect()),
        Some("i32") => Data::I32(ints("data").map(|x| x as i32).collect()),
        other => panic!("dtype {other:?}"),
    };
    Array::new(shape, data)
}

/// Arrays per device.
type PerDevice = Vec<Vec<Array>>;

/// (name, inputs per device, outputs per device) of every fixture case.
fn fixture() -> Vec<(String, PerDevice, PerDevice)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/collective/collective.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let per_device = |v: &Value| -> Vec<Vec<Array>> {
        v.as_array().unwrap().iter().map(|d| d.as_array().unwrap().iter().map(array).collect()).collect()
    };
    doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), per_device(&c["inputs"]), per_device(&c["outputs"])))
        .collect()
}

/// Compiles `e` for `inputs.len()` replicas and runs replica `d` on device `d` with
/// `inputs[d]`; returns each replica's outputs.
fn run_replicated(e: &Entry, inputs: &[Vec<Array>]) -> Vec<Vec<Array>> {
    let client = client();
    let d = inputs.len();
    let exe = client.compile(&lower_module(&e.func, d), d).unwrap_or_else(|err| panic!("{}: {err}", e.func.name));
    let bufs: Vec<Vec<_>> = inputs
        .iter()
        .enumerate()
        .map(|(dev, args)| args.iter().map(|a| client.upload(a, dev).expect("upload")).collect())
        .collect();
    let refs: Vec<Vec<_>> = bufs.iter().map(|b| b.iter().collect()).collect();
    let outs = exe.execute_replicated(&refs).expect("runs");
    outs.iter().map(|o| o.iter().map(|b| b.download().expect("download")).collect()).collect()
}

/// Every case on two devices agrees with `jax.pmap`.
#[test]
fn two_devices_match_jax_pmap() {
    for (name, inputs, want) in fixture() {
        assert_eq!(inputs.len(), 2);
        let got = run_replicated(&entry(&format!("t_{name}")), &inputs);
        for (d, (g, w)) in got.iter().zip(&want).enumerate() {
            println!("{name}, device {d}: {g:?}");
            assert_close(g, w, 1e-6);
        }
    }
}

/// The inputs differ per device, and both devices get their mean, bit for bit the
/// same (a reduction in one order on both).
#[test]
fn pmean_gives_every_device_the_mean() {
    let x = |v: [f32; 6]| vec![Array::f32(vec![2, 3], v.to_vec())];
    let got =
        run_replicated(&entry("t_pmean"), &[x([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), x([3.0, -2.0, 0.5, 0.0, 5.0, 7.0])]);
    let want = Array::f32(vec![2, 3], vec![2.0, 0.0, 1.75, 2.0, 5.0, 6.5]);
    assert_eq!(got, vec![vec![want.clone()], vec![want]]);
}

/// A collective in a loop body runs at every iteration: `y <- psum(y)` three times on
/// two devices is `4 (a + b)`.
#[test]
fn collectives_run_inside_loops() {
    let got = run_replicated(
        &entry("doubling"),
        &[vec![Array::f32(vec![3], vec![1.0, 2.0, -3.0])], vec![Array::f32(vec![3], vec![0.5, 0.0, 1.0])]],
    );
    let want = Array::f32(vec![3], vec![6.0, 8.0, -8.0]);
    assert_eq!(got, vec![vec![want.clone()], vec![want]]);
}

/// `psum` of a constant counts the replicas.
#[test]
fn psum_of_a_constant_counts_replicas() {
    let got = run_replicated(&entry("count"), &[vec![], vec![]]);
    for outs in got {
        assert_eq!(outs, vec![Array::f32(vec![], vec![2.0]), Array::i32(vec![], vec![2])]);
    }
}

/// `psum` of u8 wraps, as any u8 sum does.
#[test]
fn psum_of_bytes_wraps() {
    let x = |v: [u8; 3]| vec![Array::new(vec![3], Data::U8(v.to_vec()))];
    let got = run_replicated(&entry("bytes"), &[x([1, 200, 255]), x([2, 100, 255])]);
    let want = Array::new(vec![3], Data::U8(vec![3, 44, 254]));
    assert_eq!(got, vec![vec![want.clone()], vec![want]]);
}

/// The interpreter runs one replica, where both collectives are the identity; so is the
/// single-replica lowering.
#[test]
fn one_replica_is_the_identity() {
    for (name, inputs, _) in fixture() {
        let e = entry(&format!("t_{name}"));
        let host = run_both(&e, &inputs[0]);
        if name == "pmean" || name == "psum_record" {
            assert_eq!(host, inputs[0], "{name}");
        }
    }
    assert_eq!(run_both(&entry("count"), &[]), vec![Array::f32(vec![], vec![1.0]), Array::i32(vec![], vec![1])]);
}

/// The IR, and the StableHLO for one and for two replicas.
#[test]
fn ir_and_stablehlo() {
    let e = entry("t_grad_pmean");
    insta::assert_snapshot!("grad_pmean_ir", podracer::ir::print::print_func(&e.func));
    insta::assert_snapshot!("grad_pmean_stablehlo_2", lower_module(&e.func, 2));
    let text = lower_module(&entry("t_psum_record").func, 1);
    assert!(!text.contains("all_reduce"), "one replica needs no collective:\n{text}");
    insta::assert_snapshot!("psum_record_stablehlo_2", lower_module(&entry("t_psum_record").func, 2));
}

/// `vmap` over a batch keeps the collective elementwise: each example is reduced across
/// the replicas on its own.
#[test]
fn vmap_of_pmean_reduces_each_example() {
    let src = "fn f(x: f32[3]) -> f32[3] { pmean(x) * 2.0 }
               fn main(xs: f32[2, 3]) -> f32[2, 3] { vmap(f, xs) }";
    let (prog, diags) = driver::check_source("vmap.pod", src, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let e = driver::build(&prog, &[], "main").expect("builds");
    let xs = |v: [f32; 6]| vec![Array::f32(vec![2, 3], v.to_vec())];
    let got = run_replicated(&e, &[xs([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), xs([3.0, 4.0, 5.0, 6.0, 7.0, 8.0])]);
    let want = Array::f32(vec![2, 3], vec![4.0, 6.0, 8.0, 10.0, 12.0, 14.0]);
    assert_eq!(got, vec![vec![want.clone()], vec![want]]);
}

/// `pmean` wants `f32` leaves; `psum` takes numbers, not bools.
#[test]
fn bad_operands_are_diagnosed() {
    for (src, what) in [
        ("fn main(x: i32[3]) -> i32[3] { pmean(x) }", "expected `f32` arrays"),
        ("fn main(x: (f32, bool)) -> (f32, bool) { psum(x) }", "expected number arrays"),
        ("fn main(x: f32) -> f32 { pmean(x, x) }", "E0201"),
    ] {
        let (prog, diags) = driver::check_source("bad.pod", src, None);
        let text = podracer::diag::render_plain(&prog.map, &diags);
        assert!(text.contains(what), "{src}:\n{text}");
    }
}
