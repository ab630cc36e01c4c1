//! Envs as values: a wrapper is an ordinary env that steps the env it wraps through
//! `Env::step`. Gymnasium's `FrameStackObservation` (`examples/cartpole_stacked.pod`) must
//! step as CartPole does, with the last four observations stacked, the first repeated at
//! reset; `NormalizeObservation` (`examples/cartpole_normalized.pod`) must step as CartPole
//! does, add every observation to its statistics (kept across episodes by `auto_reset`)
//! and standardise with them; and compiled, both must agree with the interpreter as every
//! env does. The statistics themselves are checked against Gymnasium in tests/compiler/stdlib.rs.

use crate::common;

use common::{assert_close, client};
use podracer::array::{Array, Data};
use podracer::elab::env::{EnvFuncs, build_env};
use podracer::ir::eval::eval_func;
use std::path::Path;

fn env(file: &str, name: &str) -> EnvFuncs {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    build_env(&prog, name).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

fn floats(a: &Array) -> Vec<f32> {
    match &a.data {
        Data::F32(v) => v.clone(),
        d => panic!("expected floats, got {d:?}"),
    }
}

fn key(i: u32) -> Array {
    Array::new(vec![2], Data::U32(vec![7, i]))
}

#[test]
fn frame_stacking_wrapper_steps_cartpole_and_stacks_its_observations() {
    let (stacked, cart) =
        (env("examples/cartpole_stacked.pod", "StackedCartPole"), env("examples/envs/cartpole.pod", "CartPole"));
    // reset: state.., t, obs; raw_step: state.., action, key -> state.., obs, reward, terminated, truncated
    let (w, c) = (eval_func(&stacked.reset, &[key(0)]), eval_func(&cart.reset, &[key(0)]));
    let (nw, nc) = (w.len() - 2, c.len() - 2);
    let mut history = vec![floats(&c[nc + 1]); 4];
    assert_eq!(floats(&w[nw + 1]), history.concat(), "reset: the first observation, four times");
    let (mut ws, mut cs) = (w[..nw].to_vec(), c[..nc].to_vec());
    for t in 0..40u32 {
        let a = Array::i32(vec![], vec![(t * 7 % 3 % 2) as i32]);
        let wo = eval_func(&stacked.raw_step, &[&ws[..], &[a.clone(), key(t + 1)]].concat());
        let co = eval_func(&cart.raw_step, &[&cs[..], &[a, key(t + 1)]].concat());
        assert_eq!(wo[nw + 1..], co[nc + 1..], "step {t}: reward and flags are CartPole's");
        history.remove(0);
        history.push(floats(&co[nc]));
        assert_eq!(floats(&wo[nw]), history.concat(), "step {t}: the last four observations");
        if matches!(&co[nc + 2].data, Data::Bool(b) if b[0]) {
            break;
        }
        (ws, cs) = (wo[..nw].to_vec(), co[..nc].to_vec());
    }
}

#[test]
fn the_wrapper_compiles_to_what_the_interpreter_computes() {
    let stacked = env("examples/cartpole_stacked.pod", "StackedCartPole");
    let mut args = eval_func(&stacked.reset, &[key(3)]);
    args.pop(); // the observation: the auto-resetting step takes the state and t
    args.extend([Array::i32(vec![], vec![1]), key(4)]);
    let host = eval_func(&stacked.step, &args);
    let dev = common::oracle::run_compiled(client(), &stacked.step, &args).expect("compiles and runs");
    assert_close(&host, &dev, 1e-6);
}

/// The normalising wrapper's state: CartPole's 4 leaves, then the statistics' mean, var, n.
const INNER: usize = 4;

fn count(state: &[Array]) -> i32 {
    match &state[INNER + 2].data {
        Data::I32(n) => n[0],
        d => panic!("expected the count, got {d:?}"),
    }
}

/// `(x - mean) / sqrt(var + 1e-8)` with the statistics in the wrapper's state.
fn standardised(state: &[Array], x: &[f32]) -> Vec<f32> {
    let (mean, var) = (floats(&state[INNER]), floats(&state[INNER + 1]));
    x.iter().zip(mean.iter().zip(&var)).map(|(x, (m, v))| (x - m) / (v + 1e-8).sqrt()).collect()
}

#[test]
fn normalising_wrapper_steps_cartpole_and_standardises_with_running_statistics() {
    let (norm, cart) =
        (env("examples/cartpole_normalized.pod", "NormalizedCartPole"), env("examples/envs/cartpole.pod", "CartPole"));
    let (w, c) = (eval_func(&norm.reset, &[key(0)]), eval_func(&cart.reset, &[key(0)]));
    let n = w.len() - 2;
    assert_eq!(n, INNER + 3);
    assert_eq!(w[..INNER], c[..INNER], "reset: CartPole's state");
    assert_eq!(count(&w), 1, "reset: the first observation is counted");
    assert_eq!(floats(&w[n + 1]), standardised(&w, &floats(&c[INNER + 1])), "reset: standardised");
    let (mut ws, mut cs) = (w[..n].to_vec(), c[..INNER].to_vec());
    for t in 0..40u32 {
        let a = Array::i32(vec![], vec![(t * 7 % 3 % 2) as i32]);
        let wo = eval_func(&norm.raw_step, &[&ws[..], &[a.clone(), key(t + 1)]].concat());
        let co = eval_func(&cart.raw_step, &[&cs[..], &[a, key(t + 1)]].concat());
        assert_eq!(wo[..INNER], co[..INNER], "step {t}: CartPole's state");
        assert_eq!(wo[n + 1..], co[INNER + 1..], "step {t}: reward and flags are CartPole's");
        assert_eq!(count(&wo), t as i32 + 2, "step {t}: one more observation counted");
        assert_eq!(floats(&wo[n]), standardised(&wo, &floats(&co[INNER])), "step {t}: standardised");
        if matches!(&co[INNER + 2].data, Data::Bool(b) if b[0]) {
            break;
        }
        (ws, cs) = (wo[..n].to_vec(), co[..INNER].to_vec());
    }
}

/// Where an episode ends, the auto-resetting step starts the next from `auto_reset`: a
/// fresh CartPole, the statistics kept (the final observation and the new first one
/// added), not `reset`'s fresh ones.
#[test]
fn the_statistics_outlive_an_episode() {
    let norm = env("examples/cartpole_normalized.pod", "NormalizedCartPole");
    let mut args = eval_func(&norm.reset, &[key(5)]);
    let n = args.len() - 2;
    // A pole about to fall: theta past the threshold after one push.
    args[2] = Array::f32(vec![], vec![0.2]);
    args[3] = Array::f32(vec![], vec![2.0]);
    args.pop();
    args.pop();
    let seen = count(&args);
    let step_args = [&args[..], &[Array::i32(vec![], vec![7]), Array::i32(vec![], vec![1]), key(6)]].concat();
    let out = eval_func(&norm.step, &step_args);
    assert!(matches!(&out[n + 3].data, Data::Bool(b) if b[0]), "the episode terminates");
    assert_eq!(out[n], Array::i32(vec![], vec![0]), "a new episode");
    assert_eq!(count(&out), seen + 2, "the statistics go on: the final and the first observation added");
    assert_ne!(out[INNER], args[INNER], "the statistics moved");
    let dev = common::oracle::run_compiled(client(), &norm.step, &step_args).expect("compiles and runs");
    assert_close(&out, &dev, 1e-6);
}
