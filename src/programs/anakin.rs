//! The Anakin programs: an agent learning on its environment, `K` updates per call, in
//! one XLA program that every device runs on its own share of the environments.
//!
//! - `init(seed: Key, device: i32) -> state`: the learner from the seed (identical on
//!   every device), the device's environments reset from `fold_in(seed', device)`.
//! - `train(state) -> (state, metrics)`: `K` times: a rollout of `T` steps of the `B`
//!   auto-resetting environments (the agent's `act` and the env's step batched over them),
//!   then the agent's `update` on the trajectory. The metrics are reduced on the devices:
//!   the sums of the returns and lengths of the episodes that ended, their count (summed
//!   over devices), and the mean of each of the agent's metrics (over updates and devices).
//!
//! The state is the learner, then per device: the environments' states, step counters and
//! observations, the PRNG key, each environment's running return and length, and, for an
//! agent with a carry, each environment's carry.

use super::act::{Policy, act};
use super::builder::ProgramBuilder;
use super::{initial_carries, leaf_names, reset_envs, step_envs};
use crate::array::{Array, ArrayTy, DType};
use crate::elab::agent::AgentFuncs;
use crate::elab::env::EnvFuncs;
use crate::ir::{Func, Var};
use crate::prims::BinaryOp;
use crate::resolve::Program;
use crate::transform::vmap::vmap;
use crate::types::Ty;

/// The sizes of one training program.
#[derive(Clone, Copy, Debug)]
pub struct DeviceShape {
    /// Environments per device.
    pub envs: usize,
    /// Steps per rollout (`T`).
    pub steps: usize,
    /// Updates per call (`K`).
    pub updates: usize,
}

/// One array of the training state.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// A dotted path: `learner.params.actor.hidden0.w`, `env.obs`, `rng`.
    pub name: String,
    pub ty: ArrayTy,
    pub kind: LeafKind,
    /// Whether the array has a leading seed axis (see [`with_seeds`]); a per-environment
    /// array's environments are then its second axis.
    pub seeded: bool,
}

/// How an array of the state is spread over the devices.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LeafKind {
    /// The same on every device: the learner.
    Shared,
    /// One row per environment, each device holding its own environments' rows.
    PerEnv,
    /// One per device: the PRNG key.
    PerDevice,
}

pub struct AnakinPrograms {
    pub init: Func,
    pub train: Func,
    /// The state's arrays, in the programs' order.
    pub state: Vec<Leaf>,
    /// The names of the metrics `train` returns after the state, all `f32` scalars:
    /// [`EPISODE_METRICS`], then the agent's metrics.
    pub metrics: Vec<String>,
}

/// The episode statistics `train` returns first among its metrics, summed over the
/// episodes that ended during the call.
pub const EPISODE_METRICS: [&str; 3] = ["return_sum", "length_sum", "episodes"];

/// Builds the two programs for an agent (built for `shape.envs` environments and
/// `shape.steps` steps) and its environment.
pub fn anakin_programs(prog: &Program, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape) -> AnakinPrograms {
    let init = init_program(prog, agent, env, shape);
    let mut state = vec![];
    let learner_n = agent.init.graph.results.len();
    let names = leaf_names(&agent.info.learner, "learner")
        .into_iter()
        .chain(leaf_names(&env.info.state, "env.state"))
        .chain(["env.t", "env.obs", "rng", "episode.return", "episode.length"].map(String::from))
        .chain(agent.info.carry.iter().flat_map(|c| leaf_names(c, "agent.carry")));
    let rng = init.graph.results.len() - 3 - agent.carry_len();
    for (i, (name, &v)) in names.zip(&init.graph.results).enumerate() {
        // The order of `init`'s results: learner, env state, t, obs, key, return, length,
        // carry.
        let kind = match i {
            _ if i < learner_n => LeafKind::Shared,
            _ if i == rng => LeafKind::PerDevice,
            _ => LeafKind::PerEnv,
        };
        state.push(Leaf { name, ty: init.types[v.0 as usize].clone(), kind, seeded: false });
    }
    let train = train_program(prog, agent, env, shape, &state);
    let mut metrics: Vec<String> = EPISODE_METRICS.map(String::from).to_vec();
    if let Ty::Struct(def, args) = &agent.info.metrics {
        metrics.extend(Ty::struct_fields(def, args).into_iter().map(|(n, _)| n));
    }
    AnakinPrograms { init, train, state, metrics }
}

/// The programs for `seeds` independent runs in one: `init` and `train` batched by `vmap`
/// over a leading seed axis of every state array (the learner included) and metric.
/// `init` takes one key per seed, `[seeds, 2]`. Seed `i`'s run computes what a solo run
/// from its key computes: `vmap` adds an axis and changes no operation (XLA may fuse the
/// batched program differently, which can move floats by rounding).
pub fn with_seeds(p: AnakinPrograms, seeds: usize) -> AnakinPrograms {
    let init = vmap(&p.init, &[true, false], seeds);
    let train = vmap(&p.train, &vec![true; p.train.graph.params.len()], seeds);
    let state = p
        .state
        .into_iter()
        .map(|l| {
            let shape = std::iter::once(seeds).chain(l.ty.shape.iter().copied()).collect();
            Leaf { ty: ArrayTy::new(l.ty.dtype, shape), seeded: true, ..l }
        })
        .collect();
    AnakinPrograms { init, train, state, metrics: p.metrics }
}

fn init_program(prog: &Program, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let seed = p.key_param();
    let device = p.param(ArrayTy::scalar(DType::I32));
    let (k_init, k_env) = p.split2(seed);
    let learner = p.inline(&agent.init, &[k_init]);
    let dk = p.fold_in(k_env, device);
    let (k_reset, k_run) = p.split2(dk);
    let envs = reset_envs(&mut p, env, shape.envs, k_reset);
    let ret = p.full(Array::f32(vec![], vec![0.0]), &[shape.envs]);
    let len = p.full(Array::i32(vec![], vec![0]), &[shape.envs]);
    let carry = initial_carries(&mut p, agent.initial_carry.as_ref(), Some(shape.envs));
    let results = [learner, envs, vec![k_run, ret, len], carry].concat();
    p.finish("anakin_init", vec![seed, device], results)
}

fn train_program(prog: &Program, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape, state: &[Leaf]) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let n_learner = agent.init.graph.results.len();
    let n_env = env.state_len();
    let params: Vec<Var> = state.iter().map(|l| p.param(l.ty.clone())).collect();
    let n_metrics = agent.update.graph.results.len() - n_learner;
    let zero = p.constant(Array::f32(vec![], vec![0.0]));
    // Carried over the updates: the state, then the three episode sums (per environment,
    // added up once at the end rather than reduced at every step) and the metric sums.
    let per_env = p.full(Array::f32(vec![], vec![0.0]), &[shape.envs]);
    let sums_init = std::iter::repeat_n(per_env, 3).chain(std::iter::repeat_n(zero, n_metrics));
    let init: Vec<Var> = params.iter().copied().chain(sums_init).collect();

    let finals = p.fori(shape.updates, &init, |p, _, carried| {
        let learner = &carried[..n_learner];
        let envs = &carried[n_learner..n_learner + n_env + 2]; // state, t, obs
        let rest = &carried[n_learner + n_env + 2..];
        let (key, ep_ret, ep_len) = (rest[0], rest[1], rest[2]);
        let (carry, rest) = rest[3..].split_at(agent.carry_len());
        let (sums, metric_sums) = rest.split_at(3);
        let (key, k_roll) = p.split2(key);
        let (key, k_update) = p.split2(key);
        let begin = RolloutStart { learner, envs, key: k_roll, episodes: [ep_ret, ep_len], carry, sums };
        let rollout = rollout(p, agent, env, shape, begin);
        let update_args = [learner, &rollout.trajectory, &[k_update]].concat();
        let out = p.inline(&agent.update, &update_args);
        let mut yields = out[..n_learner].to_vec();
        yields.extend(&rollout.envs);
        yields.push(key);
        yields.extend(rollout.episodes);
        yields.extend(rollout.carry);
        yields.extend(rollout.sums);
        for (&s, &m) in metric_sums.iter().zip(&out[n_learner..]) {
            yields.push(p.binary(BinaryOp::Add, s, m));
        }
        yields
    });

    let mut results = finals[..state.len()].to_vec();
    for (i, &v) in finals[state.len()..].iter().enumerate() {
        let reduced = if i < 3 {
            let total = p.sum(v);
            p.psum(total)
        } else {
            let k = p.constant(Array::f32(vec![], vec![shape.updates as f32]));
            let mean = p.binary(BinaryOp::Div, v, k);
            p.pmean(mean)
        };
        results.push(reduced);
    }
    p.finish("anakin_train", params, results)
}

/// What a rollout starts from.
struct RolloutStart<'a> {
    learner: &'a [Var],
    /// The environments' state, step counters and observations.
    envs: &'a [Var],
    key: Var,
    /// Each environment's running return and length.
    episodes: [Var; 2],
    /// Each environment's carry (none without one).
    carry: &'a [Var],
    /// The per-environment episode sums.
    sums: &'a [Var],
}

/// What one rollout leaves behind.
struct Rollout {
    /// The environments' state, step counters and observations after the last step.
    envs: Vec<Var>,
    /// Each environment's running return and length.
    episodes: [Var; 2],
    /// Each environment's carry after the last step.
    carry: Vec<Var>,
    /// The per-environment episode sums, updated.
    sums: Vec<Var>,
    /// The `Trajectory<T, B>`'s arrays.
    trajectory: Vec<Var>,
}

fn rollout(
    p: &mut ProgramBuilder,
    agent: &AgentFuncs,
    env: &EnvFuncs,
    shape: DeviceShape,
    start: RolloutStart,
) -> Rollout {
    let RolloutStart { learner, envs, key, episodes, carry, sums } = start;
    let (n, steps) = (shape.envs, shape.steps);
    let (n_env, n_carry, n_behaviour) = (envs.len() - 2, carry.len(), agent.behaviour_len());
    let obs_ty = p.ty(envs[n_env + 1]).clone();
    // The trajectory's buffers, [T, B, ...], written one step at a time.
    let mut buffer = |dtype: DType, inner: &[usize]| {
        let shape: Vec<usize> = [steps].iter().chain(inner).copied().collect();
        p.full(Array::zeros(&ArrayTy::scalar(dtype)), &shape)
    };
    let act_tys = agent.act.result_types();
    let action: Vec<usize> = std::iter::once(n).chain(act_tys[0].shape.iter().copied()).collect();
    let mut buffers = vec![
        buffer(obs_ty.dtype, &obs_ty.shape),
        buffer(act_tys[0].dtype, &action),
        buffer(DType::F32, &[n]),
        buffer(DType::Bool, &[n]),
        buffer(DType::Bool, &[n]),
        buffer(obs_ty.dtype, &obs_ty.shape),
    ];
    // The behaviour record's arrays, if `act` returns one: `[T, B, ..]` each.
    for ty in &act_tys[1..1 + n_behaviour] {
        let inner: Vec<usize> = std::iter::once(n).chain(ty.shape.iter().copied()).collect();
        buffers.push(buffer(ty.dtype, &inner));
    }
    // Where an episode ends, its environment's next carry is the initial one.
    let fresh_carry = initial_carries(p, agent.initial_carry.as_ref(), Some(n));
    let init: Vec<Var> = [envs, &[key], &episodes, carry, sums, &buffers].concat();
    let finals = p.fori(steps, &init, |p, t_index, carried| {
        let (state, rest) = carried.split_at(n_env + 2);
        let (key, ep_ret, ep_len) = (rest[0], rest[1], rest[2]);
        let (carry_now, rest) = rest[3..].split_at(n_carry);
        let (sums, buffers) = rest.split_at(3);
        let (key, k_act) = p.split2(key);
        let (key, k_step) = p.split2(key);
        let obs = state[n_env + 1];
        let acted = act(p, &agent.act, Policy::Sample, (learner, carry_now, obs), k_act, Some(n));
        let action = acted.action;
        let stepped = step_envs(p, env, n, &state[..n_env + 1], action, k_step);

        // Episode bookkeeping: add the reward; at an episode's end, count it and start afresh.
        let done = p.binary(BinaryOp::Or, stepped.terminated, stepped.truncated);
        let ep_ret = p.binary(BinaryOp::Add, ep_ret, stepped.reward);
        let one = p.full(Array::i32(vec![], vec![1]), &[n]);
        let ep_len = p.binary(BinaryOp::Add, ep_len, one);
        let zeros_f = p.full(Array::f32(vec![], vec![0.0]), &[n]);
        let zeros_i = p.full(Array::i32(vec![], vec![0]), &[n]);
        let ended_ret = p.select(done, ep_ret, zeros_f);
        let len_f = p.convert(ep_len, DType::F32);
        let ended_len = p.select(done, len_f, zeros_f);
        let done_f = p.convert(done, DType::F32);
        let mut new_sums = vec![];
        for (&s, x) in sums.iter().zip([ended_ret, ended_len, done_f]) {
            new_sums.push(p.binary(BinaryOp::Add, s, x));
        }
        let ep_ret = p.select(done, zeros_f, ep_ret);
        let ep_len = p.select(done, zeros_i, ep_len);
        let next_carry: Vec<Var> =
            fresh_carry.iter().zip(&acted.carry).map(|(&fresh, &c)| p.select(done, fresh, c)).collect();

        // Record the step: the observation acted on, the action, and what came of it.
        let rows = [obs, action, stepped.reward, stepped.terminated, stepped.truncated, stepped.final_obs]
            .into_iter()
            .chain(acted.behaviour.iter().copied());
        let written: Vec<Var> = buffers.iter().zip(rows).map(|(&buf, x)| p.write_row(buf, x, t_index)).collect();
        [stepped.next, vec![key, ep_ret, ep_len], next_carry, new_sums, written].concat()
    });
    // finals: envs, key, return, length, carry, sums, buffers.
    let (envs_out, rest) = finals.split_at(n_env + 2);
    let (carry_out, rest) = rest[3..].split_at(n_carry);
    let (sums_out, buffers_out) = rest.split_at(3);
    // The trajectory's fields in order: obs .. final_obs, last_obs, the behaviour's, and
    // the carry the rollout started from.
    let mut trajectory = buffers_out[..6].to_vec();
    trajectory.push(envs_out[n_env + 1]);
    trajectory.extend(&buffers_out[6..]);
    trajectory.extend(carry);
    Rollout {
        episodes: [finals[n_env + 3], finals[n_env + 4]],
        carry: carry_out.to_vec(),
        sums: sums_out.to_vec(),
        envs: envs_out.to_vec(),
        trajectory,
    }
}
