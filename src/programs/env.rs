//! Programs around an env alone: the one `podc bench env` times, the per-step keys and
//! frames of `podc sim`, and the keys of `.pod` envs stepped as host envs.

use super::builder::ProgramBuilder;
use super::{reset_envs, step_envs};
use crate::array::{Array, ArrayTy, DType};
use crate::elab::env::EnvFuncs;
use crate::ir::{Func, Var};
use crate::prims::BinaryOp;
use crate::resolve::Program;
use crate::space::ActionSpace;

/// The program `podc bench env` times: `steps` steps of `envs` auto-resetting
/// environments with random actions (see [`random_actions`]), in one loop on the device.
///
/// `(key: u32[2]) -> (total reward: f32, episodes ended: i32)`; the results depend on
/// every step, so nothing is optimised away.
pub fn bench_program(prog: &Program, env: &EnvFuncs, envs: usize, steps: usize) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let key = p.key_param();
    let n_state = env.state_len();
    let (k0, k) = p.split2(key);
    let reset = reset_envs(&mut p, env, envs, k0);
    let zero_f = p.constant(Array::f32(vec![], vec![0.0]));
    let zero_i = p.constant(Array::i32(vec![], vec![0]));
    let init = [&reset[..n_state + 1], &[k, zero_f, zero_i]].concat();
    let finals = p.fori(steps, &init, |p, _, carried| {
        let (state_t, rest) = carried.split_at(n_state + 1);
        let (k, total, episodes) = (rest[0], rest[1], rest[2]);
        let (k, k_act) = p.split2(k);
        let (k, k_env) = p.split2(k);
        let actions = random_actions(p, &env.info.action, k_act, envs);
        let stepped = step_envs(p, env, envs, state_t, actions, k_env);
        let r = p.sum(stepped.reward);
        let total = p.binary(BinaryOp::Add, total, r);
        let done = p.binary(BinaryOp::Or, stepped.terminated, stepped.truncated);
        let done = p.convert(done, DType::I32);
        let ended = p.sum(done);
        let episodes = p.binary(BinaryOp::Add, episodes, ended);
        [&stepped.next[..n_state + 1], &[k, total, episodes]].concat()
    });
    let results = finals[finals.len() - 2..].to_vec();
    p.finish(&format!("{}_bench", env.info.name), vec![key], results)
}

/// Random actions for `envs` environments: uniform over `discrete(n)` or within a `box`'s
/// bounds, standard normal for an unbounded `box`.
fn random_actions(p: &mut ProgramBuilder, space: &ActionSpace, k: Var, envs: usize) -> Var {
    match space {
        ActionSpace::Discrete(n) => p.randint(k, &[envs], 0, *n as i32),
        ActionSpace::Box { n, bounds: None } => p.normal(k, &[envs, *n as usize]),
        ActionSpace::Box { n, bounds: Some((lo, hi)) } => {
            // lo + (hi - lo) * u, the bounds repeated for every env.
            let u = p.uniform(k, &[envs, *n as usize]);
            let rows = |x: Vec<f32>| Array::f32(vec![envs, x.len()], x.repeat(envs));
            let width = p.constant(rows(lo.iter().zip(hi).map(|(l, h)| h - l).collect()));
            let lo = p.constant(rows(lo.clone()));
            let scaled = p.binary(BinaryOp::Mul, width, u);
            p.binary(BinaryOp::Add, lo, scaled)
        }
    }
}

/// `(key: u32[2], t: i32) -> fold_in(key, t)`: the per-step keys of `podc sim`.
pub fn fold_in_program(prog: &Program) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let key = p.key_param();
    let t = p.param(ArrayTy::scalar(DType::I32));
    let k = p.fold_in(key, t);
    p.finish("fold_in", vec![key, t], vec![k])
}

/// `(state.., action, key: u32[2]) -> f32[H, W, 3]`: the frame of the state that the
/// auto-resetting step with this key ends in, before any reset (the env's own `step`
/// with the key's first half, as the derived step takes it), for `podc sim --gif`.
pub fn render_step_program(prog: &Program, env: &EnvFuncs) -> Option<Func> {
    let render = env.render.as_ref()?;
    let mut p = ProgramBuilder::new(prog);
    // The raw step's parameters: the state, the action, the key.
    let params = p.params(&env.raw_step.param_types());
    let (key, state_action) = params.split_last().expect("the raw step takes a key");
    let (k_step, _) = p.split2(*key);
    let outs = p.inline(&env.raw_step, &[state_action, &[k_step]].concat());
    let frame = p.inline(render, &outs[..env.state_len()]);
    Some(p.finish("render_step", params, frame))
}

/// `(base: Key, t: i32) -> u32[B, 2]`: `split(fold_in(base, t), B)`, the keys of batch
/// step `t` of a `.pod` env stepped as a host env.
pub fn host_keys_program(prog: &Program, envs: usize) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let base = p.key_param();
    let t = p.param(ArrayTy::scalar(DType::I32));
    let k = p.fold_in(base, t);
    let keys = p.split(k, envs);
    p.finish("host_keys", vec![base, t], vec![keys])
}
