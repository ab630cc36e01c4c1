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

use super::agent::AgentFuncs;
use super::env::{Arg, EnvFuncs, split2};
use super::ops::array_ty;
use super::{Elab, Val};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::build::Builder;
use crate::ir::{Func, Var};
use crate::prims::{Binary, BinaryOp, Broadcast, Convert, DynamicUpdateSlice, Prim, Reshape, Select};
use crate::resolve::Program;
use crate::syntax::span::Span;
use crate::transform::vmap::vmap;
use crate::types::Ty;
use std::collections::HashMap;

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

/// The dotted paths of a type's arrays, in flattening order.
pub fn leaf_names(ty: &Ty, prefix: &str) -> Vec<String> {
    match ty {
        Ty::Array(..) | Ty::Error => vec![prefix.to_string()],
        Ty::Tuple(ts) => ts.iter().enumerate().flat_map(|(i, t)| leaf_names(t, &format!("{prefix}.{i}"))).collect(),
        Ty::Struct(def, args) => {
            Ty::struct_fields(def, args).iter().flat_map(|(n, t)| leaf_names(t, &format!("{prefix}.{n}"))).collect()
        }
    }
}

fn scalar(cx: &mut Elab, a: Array) -> Val {
    let ty = array_ty(&a.ty());
    cx.known_val(a, ty, false)
}

/// `full(shape, x)`.
fn filled(cx: &mut Elab, x: Array, shape: Vec<usize>) -> Val {
    let s = scalar(cx, x);
    let shape = shape.into_iter().map(|d| d as u64).collect();
    cx.call_builtin("full", vec![Arg::Shape(shape), Arg::Val(s)], Span::default())
}

fn leaf(cx: &Elab, v: Var) -> Val {
    Val::of(array_ty(cx.b.as_ref().expect("build mode").ty(v)), vec![v])
}

fn bin(cx: &mut Elab, op: BinaryOp, a: &Val, b: &Val) -> Val {
    cx.apply(Prim::Binary(Binary { op }), &[a, b])
}

fn init_program(prog: &Program, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape) -> Func {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.scopes.push(HashMap::new());
    let span = Span::default();
    let seed = cx.param(super::random::key_ty());
    let device = cx.param(Ty::scalar(DType::I32));
    let (k_init, k_env) = split2(&mut cx, seed.clone(), span);
    let b = cx.b.as_mut().expect("build mode");
    let learner = b.inline(&agent.init, &k_init.vars);
    let dk = cx.call_builtin("fold_in", vec![Arg::Val(k_env), Arg::Val(device.clone())], span);
    let (k_reset, k_run) = split2(&mut cx, dk, span);
    let keys = cx.call_builtin("split", vec![Arg::Val(k_reset), Arg::Int(shape.envs as u64)], span);
    let reset = vmap(&env.reset, &[true], shape.envs);
    let envs = cx.b.as_mut().expect("build mode").inline(&reset, &keys.vars);
    let ret = cx.call_builtin("zeros", vec![Arg::Shape(vec![shape.envs as u64])], span);
    let len = cx.convert(ret.clone(), DType::I32, span);
    let carry = initial_carries(&mut cx, agent, shape.envs);
    let results = [learner, envs, k_run.vars, ret.vars, len.vars, carry].concat();
    let params = [seed.vars, device.vars].concat();
    cx.finish_internal("anakin_init", params, results)
}

/// Every environment's `initial_carry()`, `[envs, ..]` each (nothing without a carry).
fn initial_carries(cx: &mut Elab, agent: &AgentFuncs, envs: usize) -> Vec<Var> {
    match &agent.initial_carry {
        Some(f) => cx.b.as_mut().expect("build mode").inline(&vmap(f, &[], envs), &[]),
        None => vec![],
    }
}

fn train_program(prog: &Program, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape, state: &[Leaf]) -> Func {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.scopes.push(HashMap::new());
    let span = Span::default();
    let n_learner = agent.init.graph.results.len();
    let n_env = env.state_len();
    let params: Vec<Var> = state.iter().map(|l| cx.b.as_mut().expect("build mode").fresh(l.ty.clone())).collect();
    let n_metrics = agent.update.graph.results.len() - n_learner;
    let zero = scalar(&mut cx, Array::f32(vec![], vec![0.0]));
    // Carried over the updates: the state, then the three episode sums (per environment,
    // added up once at the end rather than reduced at every step) and the metric sums.
    let per_env = filled(&mut cx, Array::f32(vec![], vec![0.0]), vec![shape.envs]);
    let sums_init = std::iter::repeat_n(per_env.vars[0], 3).chain(std::iter::repeat_n(zero.vars[0], n_metrics));
    let init: Vec<Var> = params.iter().copied().chain(sums_init).collect();

    let b = cx.b.as_mut().expect("build mode");
    let k_index = b.fresh(ArrayTy::scalar(DType::I32));
    b.begin_loop();
    let carries: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
    let learner = carries[..n_learner].to_vec();
    let envs = carries[n_learner..n_learner + n_env + 2].to_vec(); // state, t, obs
    let rest = &carries[n_learner + n_env + 2..];
    let (key, ep_ret, ep_len) = (leaf(&cx, rest[0]), rest[1], rest[2]);
    let (carry, rest) = rest[3..].split_at(agent.carry_len());
    let sums = rest[..3].to_vec();
    let metric_sums = rest[3..].to_vec();
    let (key, k_roll) = split2(&mut cx, key, span);
    let (key, k_update) = split2(&mut cx, key, span);

    let begin =
        RolloutStart { learner: &learner, envs: &envs, key: k_roll, episodes: [ep_ret, ep_len], carry, sums: &sums };
    let rollout = rollout(&mut cx, agent, env, shape, begin);
    let mut update_args = learner.clone();
    update_args.extend(&rollout.trajectory);
    update_args.extend(&k_update.vars);
    let out = cx.b.as_mut().expect("build mode").inline(&agent.update, &update_args);
    let mut yields = out[..n_learner].to_vec();
    yields.extend(&rollout.envs);
    yields.push(key.vars[0]);
    yields.extend(rollout.episodes);
    yields.extend(rollout.carry);
    yields.extend(rollout.sums);
    for (s, m) in metric_sums.iter().zip(&out[n_learner..]) {
        let (s, m) = (leaf(&cx, *s), leaf(&cx, *m));
        yields.push(bin(&mut cx, BinaryOp::Add, &s, &m).vars[0]);
    }
    let loop_params = std::iter::once(k_index).chain(carries.iter().copied()).collect();
    let b = cx.b.as_mut().expect("build mode");
    let finals = b.end_loop(0, shape.updates as i64, &init, loop_params, yields);

    let mut results = finals[..state.len()].to_vec();
    for (i, &v) in finals[state.len()..].iter().enumerate() {
        let v = leaf(&cx, v);
        let reduced = if i < 3 {
            let total = cx.call_builtin("sum", vec![Arg::Val(v)], span);
            cx.call_builtin("psum", vec![Arg::Val(total)], span)
        } else {
            let k = scalar(&mut cx, Array::f32(vec![], vec![shape.updates as f32]));
            let mean = bin(&mut cx, BinaryOp::Div, &v, &k);
            cx.call_builtin("pmean", vec![Arg::Val(mean)], span)
        };
        results.extend(reduced.vars);
    }
    cx.finish_internal("anakin_train", params, results)
}

/// What a rollout starts from.
struct RolloutStart<'a> {
    learner: &'a [Var],
    /// The environments' state, step counters and observations.
    envs: &'a [Var],
    key: Val,
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

fn rollout(cx: &mut Elab, agent: &AgentFuncs, env: &EnvFuncs, shape: DeviceShape, start: RolloutStart) -> Rollout {
    let RolloutStart { learner, envs, key, episodes, carry, sums } = start;
    let span = Span::default();
    let (n, steps) = (shape.envs, shape.steps);
    let (n_env, n_carry, n_behaviour) = (envs.len() - 2, carry.len(), agent.behaviour_len());
    let obs = envs[n_env + 1];
    let mut act_batched = vec![false; learner.len()];
    act_batched.extend(vec![true; n_carry + 2]);
    let act = vmap(&agent.act, &act_batched, n);
    let step = vmap(&env.step, &vec![true; env.step.graph.params.len()], n);
    // The trajectory's buffers, [T, B, ...], written one step at a time.
    let obs_ty = cx.b.as_ref().expect("build mode").ty(obs).clone();
    let buffer = |cx: &mut Elab, dtype: DType, inner: &[usize]| {
        let shape: Vec<usize> = [steps].iter().chain(inner).copied().collect();
        filled(cx, Array::zeros(&ArrayTy::scalar(dtype)), shape).vars[0]
    };
    let act_tys = agent.act.result_types();
    let action: Vec<usize> = std::iter::once(n).chain(act_tys[0].shape.iter().copied()).collect();
    let mut buffers = vec![
        buffer(cx, obs_ty.dtype, &obs_ty.shape),
        buffer(cx, act_tys[0].dtype, &action),
        buffer(cx, DType::F32, &[n]),
        buffer(cx, DType::Bool, &[n]),
        buffer(cx, DType::Bool, &[n]),
        buffer(cx, obs_ty.dtype, &obs_ty.shape),
    ];
    // The behaviour record's arrays, if `act` returns one: `[T, B, ..]` each.
    for ty in &act_tys[1..1 + n_behaviour] {
        let inner: Vec<usize> = std::iter::once(n).chain(ty.shape.iter().copied()).collect();
        buffers.push(buffer(cx, ty.dtype, &inner));
    }
    // Where an episode ends, its environment's next carry is the initial one.
    let fresh_carry = initial_carries(cx, agent, n);
    let init: Vec<Var> = envs
        .iter()
        .copied()
        .chain([key.vars[0]])
        .chain(episodes)
        .chain(carry.iter().copied())
        .chain(sums.iter().copied())
        .chain(buffers)
        .collect();
    let b = cx.b.as_mut().expect("build mode");
    let t_index = b.fresh(ArrayTy::scalar(DType::I32));
    b.begin_loop();
    let carries: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
    let (state, rest) = carries.split_at(n_env + 2);
    let key = leaf(cx, rest[0]);
    let (ep_ret, ep_len) = (leaf(cx, rest[1]), leaf(cx, rest[2]));
    let (carry_now, rest) = rest[3..].split_at(n_carry);
    let sums: Vec<Val> = rest[..3].iter().map(|&v| leaf(cx, v)).collect();
    let buffers = &rest[3..];

    let (key, k_act) = split2(cx, key, span);
    let (key, k_step) = split2(cx, key, span);
    let act_keys = cx.call_builtin("split", vec![Arg::Val(k_act), Arg::Int(n as u64)], span);
    let obs = state[n_env + 1];
    let mut act_args = learner.to_vec();
    act_args.extend(carry_now);
    act_args.push(obs);
    act_args.extend(&act_keys.vars);
    let acted = cx.b.as_mut().expect("build mode").inline(&act, &act_args);
    let action = acted[0];
    let step_keys = cx.call_builtin("split", vec![Arg::Val(k_step), Arg::Int(n as u64)], span);
    let mut step_args = state[..n_env + 1].to_vec();
    step_args.push(action);
    step_args.extend(&step_keys.vars);
    // outs: state.., t, obs, reward, terminated, truncated, final obs
    let outs = cx.b.as_mut().expect("build mode").inline(&step, &step_args);
    let (reward, terminated, truncated, final_obs) =
        (outs[n_env + 2], outs[n_env + 3], outs[n_env + 4], outs[n_env + 5]);

    // Episode bookkeeping: add the reward; at an episode's end, count it and start afresh.
    let (r, term, trunc) = (leaf(cx, reward), leaf(cx, terminated), leaf(cx, truncated));
    let done = bin(cx, BinaryOp::Or, &term, &trunc);
    let ep_ret = bin(cx, BinaryOp::Add, &ep_ret, &r);
    let one = filled(cx, Array::i32(vec![], vec![1]), vec![n]);
    let ep_len = bin(cx, BinaryOp::Add, &ep_len, &one);
    let zeros_f = filled(cx, Array::f32(vec![], vec![0.0]), vec![n]);
    let zeros_i = filled(cx, Array::i32(vec![], vec![0]), vec![n]);
    let select = |cx: &mut Elab, c: &Val, a: &Val, b: &Val| cx.apply(Prim::Select(Select), &[c, a, b]);
    let ended_ret = select(cx, &done, &ep_ret, &zeros_f);
    let len_f = cx.apply(Prim::Convert(Convert { to: DType::F32 }), &[&ep_len]);
    let ended_len = select(cx, &done, &len_f, &zeros_f);
    let done_f = cx.apply(Prim::Convert(Convert { to: DType::F32 }), &[&done]);
    let mut new_sums = vec![];
    for (s, x) in sums.iter().zip([ended_ret, ended_len, done_f]) {
        new_sums.push(bin(cx, BinaryOp::Add, s, &x).vars[0]);
    }
    let ep_ret = select(cx, &done, &zeros_f, &ep_ret);
    let ep_len = select(cx, &done, &zeros_i, &ep_len);
    let mut next_carry = vec![];
    for (&fresh, &c) in fresh_carry.iter().zip(&acted[1 + n_behaviour..]) {
        let (fresh, c) = (leaf(cx, fresh), leaf(cx, c));
        let ty = cx.b.as_ref().expect("build mode").ty(c.vars[0]).clone();
        let done = cx.apply(Prim::Broadcast(Broadcast { shape: ty.shape, dims: vec![0] }), &[&done]);
        next_carry.push(select(cx, &done, &fresh, &c).vars[0]);
    }

    // Record the step: the observation acted on, the action, and what came of it.
    let mut written = vec![];
    let rows = [obs, action, reward, terminated, truncated, final_obs]
        .into_iter()
        .chain(acted[1..1 + n_behaviour].iter().copied());
    for (&buf, x) in buffers.iter().zip(rows) {
        written.push(write_row(cx, buf, x, t_index));
    }
    let mut yields = outs[..n_env + 2].to_vec();
    yields.push(key.vars[0]);
    yields.extend([ep_ret.vars[0], ep_len.vars[0]]);
    yields.extend(next_carry);
    yields.extend(new_sums);
    yields.extend(written);
    let loop_params = std::iter::once(t_index).chain(carries.iter().copied()).collect();
    let b = cx.b.as_mut().expect("build mode");
    let finals = b.end_loop(0, steps as i64, &init, loop_params, yields);
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

/// `buf.set([t], x)`: writes row `t` of a `[T, ...]` buffer.
pub(super) fn write_row(cx: &mut Elab, buf: Var, x: Var, t: Var) -> Var {
    let b = cx.b.as_mut().expect("build mode");
    let ty = b.ty(x).clone();
    let row: Vec<usize> = std::iter::once(1).chain(ty.shape.iter().copied()).collect();
    let x = b.prim1(Prim::Reshape(Reshape { shape: row }), &[x]);
    let zero = b.prim1(Prim::Constant(crate::prims::Constant { value: Array::i32(vec![], vec![0]) }), &[]);
    let mut args = vec![buf, x, t];
    args.extend(std::iter::repeat_n(zero, ty.shape.len()));
    b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &args)
}
