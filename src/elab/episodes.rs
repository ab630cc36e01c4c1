//! Programs that run a trained agent's episodes without learning, for `podc eval` and
//! `podc play`. The policy is the agent's `act` (a sample) or, greedy, its `greedy` (the
//! most likely action); a recurrent agent's carry goes from step to step and starts
//! afresh with each episode.
//!
//! - Evaluation: `eval_start(key)` resets `B` environments, and
//!   `eval_chunk(state.., learner..)` runs `K` auto-resetting steps of all of them in one
//!   loop, as Anakin's rollout does, returning each step's rewards and episode ends,
//!   `[K, B]`. The host adds up the returns and counts the episodes (`train::eval`), so
//!   that exactly `N` episodes are taken, however long each lasts.
//! - Playing: `play_start(key)` resets one environment and renders it, and
//!   `play_step(state.., learner..)` takes one step with the env's own `step` (no
//!   auto-reset, so the state an episode ends in is rendered too) and renders where it
//!   ends. The host keeps the time limit.
//!
//! - Host envs: `host_act(key, learner.., carry.., obs)` acts for a batch of
//!   environments stepped on the host (`host::HostEnv`); the host resets the carry where
//!   episodes end.
//!
//! The evaluation state is the environments' states, step counters and observations,
//! the carries, and the PRNG key; it comes first among the parameters so that a call's
//! state buffers can be donated to the next.

use super::agent::PolicyFuncs;
use super::env::{Arg, EnvFuncs, split2};
use super::ops::array_ty;
use super::{Elab, Val};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::build::Builder;
use crate::ir::{Func, Var};
use crate::prims::{Binary, BinaryOp, Broadcast, Prim, Select};
use crate::resolve::Program;
use crate::syntax::span::Span;
use crate::transform::vmap::vmap;
use std::collections::HashMap;

/// Which of the agent's functions acts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// `act`, with a key: a sample of the policy.
    Sample,
    /// `greedy`: the most likely action.
    Greedy,
}

fn builder(prog: &Program) -> Elab<'_> {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.scopes.push(HashMap::new());
    cx
}

fn leaf(cx: &Elab, v: Var) -> Val {
    Val::of(array_ty(cx.b.as_ref().expect("build mode").ty(v)), vec![v])
}

fn fresh_params(cx: &mut Elab, tys: &[ArrayTy]) -> Vec<Var> {
    let b = cx.b.as_mut().expect("build mode");
    tys.iter().map(|t| b.fresh(t.clone())).collect()
}

/// The learner's array types, as `act` takes them.
fn learner_types(policy: &PolicyFuncs) -> Vec<ArrayTy> {
    policy.act.graph.params[..policy.learner_len()].iter().map(|&v| policy.act.ty(v).clone()).collect()
}

/// `initial_carry()` for `envs` environments (`[envs, ..]` each), or for one (`None`).
fn initial_carry(cx: &mut Elab, policy: &PolicyFuncs, envs: Option<usize>) -> Vec<Var> {
    let Some(f) = &policy.initial_carry else { return vec![] };
    let f = match envs {
        Some(n) => vmap(f, &[], n),
        None => f.clone(),
    };
    cx.b.as_mut().expect("build mode").inline(&f, &[])
}

/// One action (per environment, with `envs`) and the next carry.
fn act(
    cx: &mut Elab,
    policy: &PolicyFuncs,
    which: Policy,
    (learner, carry, obs): (&[Var], &[Var], Var),
    key: Val,
    envs: Option<usize>,
) -> (Var, Vec<Var>) {
    let f = match which {
        Policy::Sample => &policy.act,
        Policy::Greedy => policy.greedy.as_ref().expect("checked: the agent has `greedy`"),
    };
    let mut args = learner.to_vec();
    args.extend(carry);
    args.push(obs);
    if which == Policy::Sample {
        let keys = match envs {
            Some(n) => cx.call_builtin("split", vec![Arg::Val(key), Arg::Int(n as u64)], Span::default()),
            None => key,
        };
        args.extend(keys.vars);
    }
    let f = match envs {
        Some(n) => {
            let mut batched = vec![false; learner.len()];
            batched.resize(f.graph.params.len(), true);
            vmap(f, &batched, n)
        }
        None => f.clone(),
    };
    let out = cx.b.as_mut().expect("build mode").inline(&f, &args);
    // `act` gives (action, behaviour.., carry..), `greedy` (action, carry..).
    (out[0], out[out.len() - carry.len()..].to_vec())
}

/// `eval_start(key: Key) -> (state.., t, obs, carry.., key)` for `envs` environments.
pub fn eval_start(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs, envs: usize) -> Func {
    let mut cx = builder(prog);
    let key = cx.param(super::random::key_ty());
    let (k_reset, k_run) = split2(&mut cx, key.clone(), Span::default());
    let keys = cx.call_builtin("split", vec![Arg::Val(k_reset), Arg::Int(envs as u64)], Span::default());
    let reset = vmap(&env.reset, &[true], envs);
    let mut results = cx.b.as_mut().expect("build mode").inline(&reset, &keys.vars);
    results.extend(initial_carry(&mut cx, policy, Some(envs)));
    results.extend(k_run.vars);
    cx.finish_internal("eval_start", key.vars, results)
}

/// `eval_chunk(state.., learner..) -> (state.., reward: f32[K, B], done: bool[K, B])`:
/// `steps` (K) auto-resetting steps of the `B` environments of [`eval_start`]'s state.
/// `done` is where an episode ended (terminated or truncated); the carry of an
/// environment whose episode ended is its initial carry again.
pub fn eval_chunk(
    prog: &Program,
    policy: &PolicyFuncs,
    env: &EnvFuncs,
    which: Policy,
    envs: usize,
    steps: usize,
) -> Func {
    let mut cx = builder(prog);
    let span = Span::default();
    let start = eval_start(prog, policy, env, envs);
    let state = fresh_params(&mut cx, &start.result_types());
    let learner = fresh_params(&mut cx, &learner_types(policy));
    let (n_env, n_carry) = (env.state_len(), policy.carry_len());
    let step = vmap(&env.step, &vec![true; env.step.graph.params.len()], envs);
    let fresh_carry = initial_carry(&mut cx, policy, Some(envs));
    let zeros = |cx: &mut Elab, dtype: DType| {
        let zero = Array::zeros(&ArrayTy::scalar(dtype));
        let zero = cx.known_val(zero.clone(), array_ty(&zero.ty()), false);
        let shape = Arg::Shape(vec![steps as u64, envs as u64]);
        cx.call_builtin("full", vec![shape, Arg::Val(zero)], span).vars[0]
    };
    let buffers = [zeros(&mut cx, DType::F32), zeros(&mut cx, DType::Bool)];
    let init: Vec<Var> = state.iter().copied().chain(buffers).collect();

    let b = cx.b.as_mut().expect("build mode");
    let t_index = b.fresh(ArrayTy::scalar(DType::I32));
    b.begin_loop();
    let carries: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
    let (envs_now, rest) = carries.split_at(n_env + 2); // state, t, obs
    let (carry, rest) = rest.split_at(n_carry);
    let (key, [rewards, dones]) = (leaf(&cx, rest[0]), [rest[1], rest[2]]);
    let (key, k_act) = split2(&mut cx, key, span);
    let (key, k_step) = split2(&mut cx, key, span);
    let (action, next_carry) = act(&mut cx, policy, which, (&learner, carry, envs_now[n_env + 1]), k_act, Some(envs));
    let step_keys = cx.call_builtin("split", vec![Arg::Val(k_step), Arg::Int(envs as u64)], span);
    let mut step_args = envs_now[..n_env + 1].to_vec();
    step_args.push(action);
    step_args.extend(&step_keys.vars);
    // outs: state.., t, obs, reward, terminated, truncated, final obs
    let outs = cx.b.as_mut().expect("build mode").inline(&step, &step_args);
    let (reward, terminated, truncated) = (outs[n_env + 2], leaf(&cx, outs[n_env + 3]), leaf(&cx, outs[n_env + 4]));
    let done = cx.apply(Prim::Binary(Binary { op: BinaryOp::Or }), &[&terminated, &truncated]);
    let mut yields = outs[..n_env + 2].to_vec();
    for (&fresh, &c) in fresh_carry.iter().zip(&next_carry) {
        let (fresh, c) = (leaf(&cx, fresh), leaf(&cx, c));
        let shape = cx.b.as_ref().expect("build mode").ty(c.vars[0]).shape.clone();
        let done = cx.apply(Prim::Broadcast(Broadcast { shape, dims: vec![0] }), &[&done]);
        yields.push(cx.apply(Prim::Select(Select), &[&done, &fresh, &c]).vars[0]);
    }
    yields.push(key.vars[0]);
    yields.push(super::anakin::write_row(&mut cx, rewards, reward, t_index));
    yields.push(super::anakin::write_row(&mut cx, dones, done.vars[0], t_index));
    let loop_params = std::iter::once(t_index).chain(carries.iter().copied()).collect();
    let b = cx.b.as_mut().expect("build mode");
    let results = b.end_loop(0, steps as i64, &init, loop_params, yields);
    let params = state.into_iter().chain(learner).collect();
    cx.finish_internal("eval_chunk", params, results)
}

/// `play_start(key: Key) -> (state.., obs, carry.., key, frame)`: one environment, reset
/// and rendered.
pub fn play_start(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs) -> Func {
    let mut cx = builder(prog);
    let key = cx.param(super::random::key_ty());
    let (k_reset, k_run) = split2(&mut cx, key.clone(), Span::default());
    let b = cx.b.as_mut().expect("build mode");
    let mut reset = b.inline(&env.reset, &k_reset.vars);
    let state = reset[..reset.len() - 2].to_vec();
    reset.remove(reset.len() - 2); // the step counter: the host keeps it
    let frame = b.inline(env.render.as_ref().expect("checked: the env renders"), &state);
    let mut results = reset;
    results.extend(initial_carry(&mut cx, policy, None));
    results.extend(k_run.vars);
    results.extend(frame);
    cx.finish_internal("play_start", key.vars, results)
}

/// `play_step(state.., obs, carry.., key, learner..) -> (state.., obs, carry.., key,
/// reward, terminated, truncated, frame)`: one step of the env's own `step` (no time
/// limit, no reset), and the frame of the state it ends in.
pub fn play_step(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs, which: Policy) -> Func {
    let mut cx = builder(prog);
    let span = Span::default();
    let start = play_start(prog, policy, env);
    let tys = start.result_types();
    let state = fresh_params(&mut cx, &tys[..tys.len() - 1]);
    let learner = fresh_params(&mut cx, &learner_types(policy));
    let n_env = env.raw_step.graph.params.len() - 2; // the env state, then action, key
    let (carry, key) = (&state[n_env + 1..state.len() - 1], leaf(&cx, state[state.len() - 1]));
    let (key, k_act) = split2(&mut cx, key, span);
    let (key, k_step) = split2(&mut cx, key, span);
    let (action, next_carry) = act(&mut cx, policy, which, (&learner, carry, state[n_env]), k_act, None);
    let mut args = state[..n_env].to_vec();
    args.push(action);
    args.extend(k_step.vars);
    let b = cx.b.as_mut().expect("build mode");
    // outs: state.., obs, reward, terminated, truncated
    let outs = b.inline(&env.raw_step, &args);
    let frame = b.inline(env.render.as_ref().expect("checked: the env renders"), &outs[..n_env]);
    let mut results = outs[..n_env + 1].to_vec();
    results.extend(next_carry);
    results.extend(key.vars);
    results.extend(&outs[n_env + 1..]);
    results.extend(frame);
    let params = state.into_iter().chain(learner).collect();
    cx.finish_internal("play_step", params, results)
}

/// `host_act(key, learner.., carry.., obs) -> (key, action, carry..)` for `envs`
/// environments stepped on the host: the carry and the observation `[envs, ..]`, the
/// action `[envs, ..]` of the env's action type.
pub fn host_act(prog: &Program, policy: &PolicyFuncs, which: Policy, envs: usize) -> Func {
    let mut cx = builder(prog);
    let key = cx.param(super::random::key_ty());
    let learner = fresh_params(&mut cx, &learner_types(policy));
    let batched = |t: &ArrayTy| ArrayTy::new(t.dtype, std::iter::once(envs).chain(t.shape.iter().copied()).collect());
    let n = policy.learner_len();
    let tys: Vec<ArrayTy> = policy.act.param_types()[n..n + policy.carry_len() + 1].iter().map(batched).collect();
    let mut inputs = fresh_params(&mut cx, &tys);
    let obs = inputs.pop().expect("the observation");
    let (key_out, k_act) = split2(&mut cx, key.clone(), Span::default());
    let (action, carry) = act(&mut cx, policy, which, (&learner, &inputs, obs), k_act, Some(envs));
    let params = [key.vars, learner, inputs, vec![obs]].concat();
    let results = [key_out.vars, vec![action], carry].concat();
    cx.finish_internal("host_act", params, results)
}
