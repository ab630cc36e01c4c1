//! Envs as values: a wrapper is an ordinary env that steps the env it wraps through
//! `Env::step` (`examples/cartpole_stacked.pod`, Gymnasium's `FrameStackObservation`). Its
//! steps must be CartPole's, with the last four observations stacked, the first repeated
//! at reset; and compiled, it must agree with the interpreter as every env does.

mod common;

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
