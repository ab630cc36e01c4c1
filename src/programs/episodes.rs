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
//! The evaluation state is the environments' states, step counters and observations,
//! the carries, and the PRNG key; it comes first among the parameters so that a call's
//! state buffers can be donated to the next.

use super::act::{Policy, act};
use super::builder::ProgramBuilder;
use super::{initial_carries, reset_envs, step_envs};
use crate::array::{Array, ArrayTy, DType};
use crate::elab::agent::PolicyFuncs;
use crate::elab::env::EnvFuncs;
use crate::ir::Func;
use crate::prims::BinaryOp;
use crate::resolve::Program;

/// The learner's array types, as `act` takes them.
fn learner_types(policy: &PolicyFuncs) -> Vec<ArrayTy> {
    policy.act.param_types()[..policy.learner_len()].to_vec()
}

/// The function that acts for `which`.
fn acting(policy: &PolicyFuncs, which: Policy) -> &Func {
    match which {
        Policy::Sample => &policy.act,
        Policy::Greedy => policy.greedy.as_ref().expect("checked: the agent has `greedy`"),
    }
}

/// `eval_start(key: Key) -> (state.., t, obs, carry.., key)` for `envs` environments.
pub fn eval_start(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs, envs: usize) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let key = p.key_param();
    let (k_reset, k_run) = p.split2(key);
    let mut results = reset_envs(&mut p, env, envs, k_reset);
    results.extend(initial_carries(&mut p, policy.initial_carry.as_ref(), Some(envs)));
    results.push(k_run);
    p.finish("eval_start", vec![key], results)
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
    let mut p = ProgramBuilder::new(prog);
    let start = eval_start(prog, policy, env, envs);
    let state = p.params(&start.result_types());
    let learner = p.params(&learner_types(policy));
    let (n_env, n_carry) = (env.state_len(), policy.carry_len());
    let fresh_carry = initial_carries(&mut p, policy.initial_carry.as_ref(), Some(envs));
    let rewards = p.full(Array::f32(vec![], vec![0.0]), &[steps, envs]);
    let dones = p.full(Array::zeros(&ArrayTy::scalar(DType::Bool)), &[steps, envs]);
    let init = [&state[..], &[rewards, dones]].concat();
    let results = p.fori(steps, &init, |p, t, carried| {
        let (envs_now, rest) = carried.split_at(n_env + 2); // state, t, obs
        let (carry, rest) = rest.split_at(n_carry);
        let (key, rewards, dones) = (rest[0], rest[1], rest[2]);
        let (key, k_act) = p.split2(key);
        let (key, k_step) = p.split2(key);
        let f = acting(policy, which);
        let acted = act(p, f, which, (&learner, carry, envs_now[n_env + 1]), k_act, Some(envs));
        let stepped = step_envs(p, env, envs, &envs_now[..n_env + 1], acted.action, k_step);
        let done = p.binary(BinaryOp::Or, stepped.terminated, stepped.truncated);
        let mut yields = stepped.next;
        for (&fresh, &c) in fresh_carry.iter().zip(&acted.carry) {
            yields.push(p.select(done, fresh, c));
        }
        yields.push(key);
        yields.push(p.write_row(rewards, stepped.reward, t));
        yields.push(p.write_row(dones, done, t));
        yields
    });
    let params = [state, learner].concat();
    p.finish("eval_chunk", params, results)
}

/// `play_start(key: Key) -> (state.., obs, carry.., key, frame)`: one environment, reset
/// and rendered.
pub fn play_start(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let key = p.key_param();
    let (k_reset, k_run) = p.split2(key);
    let mut reset = p.inline(&env.reset, &[k_reset]);
    let state = reset[..reset.len() - 2].to_vec();
    reset.remove(reset.len() - 2); // the step counter: the host keeps it
    let frame = p.inline(env.render.as_ref().expect("checked: the env renders"), &state);
    let mut results = reset;
    results.extend(initial_carries(&mut p, policy.initial_carry.as_ref(), None));
    results.push(k_run);
    results.extend(frame);
    p.finish("play_start", vec![key], results)
}

/// `play_step(state.., obs, carry.., key, learner..) -> (state.., obs, carry.., key,
/// reward, terminated, truncated, frame)`: one step of the env's own `step` (no time
/// limit, no reset), and the frame of the state it ends in.
pub fn play_step(prog: &Program, policy: &PolicyFuncs, env: &EnvFuncs, which: Policy) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let start = play_start(prog, policy, env);
    let tys = start.result_types();
    let state = p.params(&tys[..tys.len() - 1]);
    let learner = p.params(&learner_types(policy));
    let n_env = env.raw_step.graph.params.len() - 2; // the env state, then action, key
    let (carry, key) = (&state[n_env + 1..state.len() - 1], state[state.len() - 1]);
    let (key, k_act) = p.split2(key);
    let (key, k_step) = p.split2(key);
    let acted = act(&mut p, acting(policy, which), which, (&learner, carry, state[n_env]), k_act, None);
    let args = [&state[..n_env], &[acted.action, k_step]].concat();
    // outs: state.., obs, reward, terminated, truncated
    let outs = p.inline(&env.raw_step, &args);
    let frame = p.inline(env.render.as_ref().expect("checked: the env renders"), &outs[..n_env]);
    let results = [&outs[..n_env + 1], &acted.carry, &[key], &outs[n_env + 1..], &frame].concat();
    let params = [state, learner].concat();
    p.finish("play_step", params, results)
}
