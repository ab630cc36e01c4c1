//! The standard library (`stdlib/*.pod`) against JAX, optax and the formulas of rlax,
//! distrax and PureJaxRL. `tests/stdlib/<module>.pod` calls the module's functions from
//! entry points; `tests/fixtures/stdlib/<module>.json` (made by `gen_stdlib.py`) holds
//! arguments for them and what the references computed. Every case runs through the
//! reference interpreter and through PJRT; integers must match exactly, floats to a
//! relative error of 1e-5 unless a test says why it allows more. Where the fixture also
//! has the computation in float64, a float result further than that from JAX's float32
//! one passes if its error from the float64 one is of the order of JAX's own float32
//! error (at most 4 times it): sums that cancel (a bias gradient) round differently in
//! every order, and the interpreter does not fuse multiply-adds as XLA does.

use crate::common;

use podracer::array::{Array, Data};
use podracer::driver::{self, Entry};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(module: &str) -> Value {
    let path = root().join("tests/fixtures/stdlib").join(format!("{module}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn cases(doc: &Value) -> &[Value] {
    doc["cases"].as_array().expect("cases")
}

fn flat(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Array(xs) => xs.iter().for_each(|x| flat(x, out)),
        Value::Bool(b) => out.push(f64::from(u8::from(*b))),
        x => out.push(x.as_f64().expect("a number")),
    }
}

/// How close a float result must be to the reference: `rtol` relative to each entry, but
/// entries below `floor` times the array's largest are judged relative to that instead
/// (they are sums that cancel, whose rounding error follows the terms, not the sum).
#[derive(Clone, Copy)]
struct Tol {
    rtol: f64,
    floor: f64,
}

/// 1e-5, entries below 1% of the largest judged relative to that 1%.
const TOL: Tol = Tol { rtol: 1e-5, floor: 1e-2 };

/// The largest error of an element of `got` relative to `want`'s, as [`Tol`] says.
fn relative_error(got: &[f32], want: &[f64], floor: f64) -> f64 {
    let floor = floor * want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (&g, &w)| {
        let err = (f64::from(g) - w).abs();
        let scale = w.abs().max(floor);
        m.max(if scale == 0.0 { err } else { err / scale })
    })
}

fn build(module: &str, entry: &str) -> Entry {
    let (prog, diags) =
        driver::check_file(&root().join("tests/stdlib").join(format!("{module}.pod"))).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    driver::build(&prog, &[], entry).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

/// Runs the fixture cases `names` of `module` through the interpreter and PJRT, compares
/// them with the reference to `tol`, and returns each case's results from both (for
/// further checks).
fn against_reference(module: &str, names: &[&str], tol: Tol) -> Vec<(Vec<Array>, Vec<Array>)> {
    let doc = fixture(module);
    let mut entries: HashMap<String, Entry> = HashMap::new();
    names
        .iter()
        .map(|&name| {
            let c = cases(&doc).iter().find(|c| c["name"] == name).unwrap_or_else(|| panic!("no case {name}"));
            let entry_name = c["entry"].as_str().expect("entry");
            let e = entries.entry(entry_name.to_string()).or_insert_with(|| build(module, entry_name));
            let args = podracer::io::args_from_json(&e.params, &c["args"]).expect("arguments");
            let host = driver::eval(e, &args);
            let dev = podracer::cli::run_on_device(common::client(), e, &args).expect("runs on the device");
            let want = c["outputs"].as_array().expect("outputs");
            assert_eq!(host.len(), want.len(), "{name}: number of results");
            for (k, ((h, d), w)) in host.iter().zip(&dev).zip(want).enumerate() {
                let mut w64 = vec![];
                flat(w, &mut w64);
                let exact = c.get("f64").map(|x| {
                    let mut e = vec![];
                    flat(&x[k], &mut e);
                    e
                });
                for (what, got) in [("interpreter", h), ("device", d)] {
                    assert_eq!(got.shape.iter().product::<usize>(), w64.len(), "{name} result {k}: size");
                    match &got.data {
                        Data::F32(v) => {
                            let err = relative_error(v, &w64, tol.floor);
                            println!("{name} result {k}: {what} vs reference {err:.2e}");
                            if err <= tol.rtol {
                                continue;
                            }
                            let exact = exact.as_ref().unwrap_or_else(|| panic!("{name} result {k}: the {what} is {err:.2e} off: {v:?} vs {w64:?}"));
                            let jax: Vec<f32> = w64.iter().map(|&x| x as f32).collect();
                            let (ours, theirs) = (relative_error(v, exact, tol.floor), relative_error(&jax, exact, tol.floor));
                            println!("  vs float64: {ours:.2e}, jax's float32 {theirs:.2e}");
                            assert!(ours <= 4.0 * theirs, "{name} result {k}: the {what} is {err:.2e} off jax and {ours:.2e} off float64 (jax {theirs:.2e}): {v:?} vs {w64:?}");
                        }
                        Data::I32(v) => {
                            let v: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
                            assert_eq!(v, w64, "{name} result {k}: the {what} differs");
                        }
                        other => panic!("{name} result {k}: unexpected {other:?}"),
                    }
                }
            }
            (host, dev)
        })
        .collect()
}

fn f32s(a: &Array) -> &[f32] {
    match &a.data {
        Data::F32(v) => v,
        other => panic!("expected f32, got {other:?}"),
    }
}

/// The largest entry of |Q^T Q / gain^2 - I| for an `[r, c]` matrix Q with r >= c, or of
/// |Q Q^T / gain^2 - I| when r < c: how far Q is from orthonormal columns (rows).
fn orthonormality_error(q: &Array, gain: f64) -> f64 {
    let (r, c) = (q.shape[0], q.shape[1]);
    let v = f32s(q);
    let at = |i: usize, j: usize| f64::from(v[i * c + j]) / gain;
    let (n, len) = if r >= c { (c, r) } else { (r, c) };
    let entry = |i: usize, k: usize| if r >= c { at(k, i) } else { at(i, k) };
    let mut worst = 0.0f64;
    for i in 0..n {
        for j in 0..n {
            let dot: f64 = (0..len).map(|k| entry(i, k) * entry(j, k)).sum();
            worst = worst.max((dot - if i == j { 1.0 } else { 0.0 }).abs());
        }
    }
    worst
}

// ---------------------------------------------------------------------------------------
// std::nn

/// Gram-Schmidt and LAPACK's Householder QR round differently: the Q factors differ by
/// about cond(A) * eps in absolute terms (measured against float64: jax's own float32 Q is
/// 1.5e-6 off for a 32 x 32 draw, Gram-Schmidt's 2.4e-7), so entries are judged relative
/// to the largest one.
const ORTHOGONAL: Tol = Tol { rtol: 1e-5, floor: 1.0 };

#[test]
fn orthogonal_matches_jax_and_is_orthonormal() {
    let gains = [1.0, std::f64::consts::SQRT_2, 0.01, 1.0];
    for (host, dev) in against_reference("nn", &["orthogonal_0", "orthogonal_42"], ORTHOGONAL) {
        for (outs, what) in [(host, "interpreter"), (dev, "device")] {
            for (q, gain) in outs.iter().zip(gains) {
                let err = orthonormality_error(q, gain);
                assert!(err < 1e-5, "{what}: {:?} is {err:.2e} from orthonormal", q.shape);
            }
        }
    }
}

#[test]
fn uniform_initialisers_match_jax() {
    against_reference("nn", &["uniform_inits_3", "uniform_inits_4"], Tol { rtol: 1e-6, ..TOL });
}

#[test]
fn layer_initialisers_match_jax() {
    against_reference("nn", &["layer_inits"], ORTHOGONAL);
}

#[test]
fn layers_and_their_gradients_match_jax() {
    against_reference("nn", &["dense", "mlp_tanh", "mlp_relu", "relu", "smooth", "activations", "layer_norm"], TOL);
}

/// The Nature and IMPALA CNNs against CleanRL's and Cleanba's flax modules, with the
/// parameters their initialisers draw: orthogonal kernels judged as `orthogonal` is (their
/// Q factors round differently), so the features too, relative to the largest. On PJRT
/// only: the interpreter's convolutions and products are plain loops, minutes at these
/// sizes; tests/compiler/conv.rs checks every convolution rule on both engines.
#[test]
fn atari_networks_match_flax() {
    let doc = fixture("nn");
    for name in ["nature_cnn", "impala_cnn"] {
        let c = cases(&doc).iter().find(|c| c["name"] == name).expect("case");
        let e = build("nn", c["entry"].as_str().expect("entry"));
        let args = podracer::io::args_from_json(&e.params, &c["args"]).expect("arguments");
        let dev = podracer::cli::run_on_device(common::client(), &e, &args).expect("runs on the device");
        for (k, (got, w)) in dev.iter().zip(c["outputs"].as_array().expect("outputs")).enumerate() {
            let mut want = vec![];
            flat(w, &mut want);
            let err = relative_error(f32s(got), &want, ORTHOGONAL.floor);
            assert!(err <= ORTHOGONAL.rtol, "{name} result {k}: {err:.2e} off flax");
        }
    }
}

#[test]
fn gru_step_and_backpropagation_through_time_match_flax() {
    against_reference("nn", &["gru", "gru_bptt"], TOL);
}

/// `gru_init`: the hidden-state kernels orthonormal, the biases zero, the input kernels
/// inside lecun_uniform's bound sqrt(3 / I) and not all alike (each has its own key).
#[test]
fn gru_init_draws_flax_shaped_parameters() {
    let e = build("nn", "gru_inits");
    let key = Array::new(vec![2], Data::U32(vec![0, 3]));
    let host = driver::eval(&e, std::slice::from_ref(&key));
    let dev = podracer::cli::run_on_device(common::client(), &e, &[key]).expect("runs on the device");
    assert_eq!(host.len(), 10, "xr.w, xr.b, xz.w, xz.b, xn.w, xn.b, hr, hz, hn.w, hn.b");
    for out in [&host, &dev] {
        let bound = (3.0f32 / 8.0).sqrt();
        for i in [0, 2, 4] {
            assert_eq!(out[i].shape, vec![8, 16]);
            assert!(f32s(&out[i]).iter().all(|x| x.abs() <= bound), "input kernel {i} within ±sqrt(3/8)");
        }
        assert_ne!(f32s(&out[0]), f32s(&out[2]), "each kernel has its own key");
        for i in [1, 3, 5, 9] {
            assert!(f32s(&out[i]).iter().all(|&x| x == 0.0), "bias {i} is zero");
        }
        for i in [6, 7, 8] {
            assert_eq!(out[i].shape, vec![16, 16]);
            assert!(orthonormality_error(&out[i], 1.0) < 1e-5, "hidden kernel {i} orthonormal");
        }
    }
}

#[test]
fn log_softmax_and_its_gradient_match_jax() {
    against_reference("nn", &["log_softmax", "log_softmax_large"], TOL);
}

// ---------------------------------------------------------------------------------------
// std::distributions

#[test]
fn categorical_log_prob_and_entropy_match_distrax() {
    against_reference("distributions", &["log_prob", "entropy"], TOL);
}

#[test]
fn categorical_samples_are_jax_random_categorical() {
    against_reference("distributions", &["samples"], TOL);
}

#[test]
fn gaussians_match_jax_scipy_and_distrax() {
    against_reference("distributions", &["gaussian", "gaussian_entropy_grad"], TOL);
}

#[test]
fn gaussian_samples_are_jax_random_normal_scaled() {
    against_reference("distributions", &["gaussian_samples"], TOL);
}

// ---------------------------------------------------------------------------------------
// std::rl

/// Gymnasium's `NormalizeObservation` over two CartPole episodes: every standardised
/// observation and the final statistics.
#[test]
fn running_mean_std_matches_gymnasiums_normalize_observation() {
    against_reference("normalize", &["normalize_stream"], TOL);
}

/// Gymnasium's `RunningMeanStd.update` a batch at a time (`rms_update_batch`).
#[test]
fn running_mean_std_matches_gymnasiums_batch_update() {
    against_reference("normalize", &["normalize_batches"], TOL);
}

/// std::replay against a plain model of CleanRL's replay buffer, with jax.random.randint's
/// draws: the circular writes (wrapping twice, a batch larger than the buffer), `pos`,
/// `size`, and uniform samples of a part-filled and of a full buffer.
#[test]
fn replay_buffer_matches_a_circular_model_and_jax_randint() {
    against_reference("replay", &["replay_wraps", "replay_big_batch"], TOL);
}

#[test]
fn returns_and_gae_match_references() {
    against_reference("rl", &["discounted_returns", "gae"], TOL);
}

#[test]
fn vtrace_matches_rlax() {
    against_reference("rl", &["vtrace", "vtrace_clips"], TOL);
}

#[test]
fn a2c_and_ppo_losses_and_gradients_match_references() {
    against_reference("rl", &["a2c", "ppo"], TOL);
}

#[test]
fn lambda_returns_and_huber_loss_with_their_gradients_match_references() {
    against_reference("rl", &["lambda_returns", "huber"], TOL);
}

// ---------------------------------------------------------------------------------------
// std::optim

#[test]
fn sgd_and_global_norm_clipping_match_optax() {
    against_reference("optim", &["sgd", "norms_clipped", "norms_unclipped"], TOL);
}

#[test]
fn adam_and_rmsprop_trajectories_match_optax() {
    against_reference("optim", &["adam", "rmsprop", "adam_train"], TOL);
}

#[test]
fn adamw_polyak_averaging_and_linear_schedules_match_optax() {
    against_reference("optim", &["adamw", "incremental_update", "linear_schedule"], TOL);
}
