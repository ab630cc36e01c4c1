//! The examples and the test programs: each gives the same result through PJRT and
//! through the reference interpreter, and the basics give their known values.

use crate::common;

use common::{assert_close, entry, run_both};
use podracer::array::Array;
use podracer::driver::Entry;
use podracer::io::show;
use podracer::prims::{Convert, Prim};
use std::path::Path;

fn example(name: &str) -> Vec<Array> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/basics").join(name);
    run_both(&entry(&path), &[])
}

#[test]
fn matmul() {
    assert_close(&example("matmul.pod"), &[Array::f32(vec![], vec![64.0])], 1e-5);
}

#[test]
fn dense() {
    assert_close(&example("dense.pod"), &[Array::f32(vec![2], vec![0.999_329_3, 0.800_499])], 1e-5);
}

#[test]
fn loop_() {
    let out = example("loop.pod");
    assert_eq!(out[0], Array::i32(vec![], vec![45]));
    assert_close(&out[1..], &[Array::f32(vec![], vec![57.665_04])], 1e-5);
}

#[test]
fn select() {
    let out = example("select.pod");
    assert_eq!(out, vec![Array::i32(vec![8], vec![5, 0, 3, 4, 7, 2, 10, -1]), Array::i32(vec![], vec![6])]);
}

#[test]
fn reduce() {
    let want =
        [Array::f32(vec![], vec![4.440_19]), Array::f32(vec![4], vec![0.0320586, 0.0871443, 0.2368828, 0.6439142])];
    assert_close(&example("reduce.pod"), &want, 1e-5);
}

/// At zero weights the MLP predicts b2 = 0.5 for targets of 1: the loss is 0.25, and
/// only b2 has a gradient, 2 * (0.5 - 1).
#[test]
fn grad() {
    let want = [Array::f32(vec![], vec![0.25]), Array::f32(vec![1], vec![-1.0])];
    assert_close(&example("grad.pod"), &want, 1e-5);
}

/// Arguments for an entry's parameters: entry k of each is `(k * 37) % 251`, converted
/// to the parameter's dtype (so bytes above 128, and not all zero).
fn sample_args(e: &Entry) -> Vec<Array> {
    e.func
        .graph
        .params
        .iter()
        .map(|&v| {
            let ty = e.func.ty(v);
            let ints = (0..ty.numel() as i32).map(|k| (k * 37) % 251).collect();
            let ints = Array::i32(ty.shape.clone(), ints);
            Prim::Convert(Convert { to: ty.dtype }).rules().eval(&[&ints]).remove(0)
        })
        .collect()
}

/// Every test program under `tests/pass/`: the device agrees with the interpreter, and
/// the results, as `podc run` prints them, are snapshotted. A `main` with parameters gets
/// `sample_args`.
#[test]
fn pass_programs_agree() {
    insta::glob!("../pass", "*.pod", |path| {
        let e = entry(path);
        let out = run_both(&e, &sample_args(&e));
        insta::assert_snapshot!(show(&e.ret, &out));
    });
}
