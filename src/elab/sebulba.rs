//! The Sebulba programs: an agent split into an actor and a learner, for environments
//! stepped on the host (`train::sebulba` drives them).
//!
//! - `act(key, policy.., carry[B, ..].., obs[B, ..]) -> (key, action[B], behaviour[B, ..]..,
//!   carry[B, ..]..)`: the agent's `act` batched over one actor thread's environments (the
//!   carry only for an agent with one; the actor resets it where episodes end). It takes only the learner leaves
//!   that `act` reads (found by dependency: for an agent whose learner is
//!   `{ params, opt }` and whose `act` reads `params.actor`, just those), so the learner
//!   sends the actors the policy, not the optimiser state.
//! - `learn(learner.., key, traj..) -> (learner.., key, metrics..)`: the agent's `update` on
//!   one learner device's share of the environments; replicated over the learner devices,
//!   the update's own `pmean` averages the gradients and the metrics are averaged here.

use super::agent::AgentFuncs;
use super::env::{Arg, split2};
use super::ops::array_ty;
use super::{Elab, Val};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::build::Builder;
use crate::ir::eval::eval_func;
use crate::ir::{Func, Var};
use crate::resolve::Program;
use crate::syntax::span::Span;
use crate::transform::vmap::vmap;
use crate::types::Ty;
use std::collections::{HashMap, HashSet};

pub struct SebulbaPrograms {
    /// `(key, policy.., carry.., obs) -> (key, action, behaviour.., carry..)`, for `envs`
    /// environments.
    pub act: Func,
    /// Indices into the learner's leaves of the ones `act` takes, in order.
    pub policy: Vec<usize>,
    /// `(learner.., key, trajectory..) -> (learner.., key, metrics..)`.
    pub learn: Func,
    /// The learner's leaves (as `init` returns them).
    pub learner: Vec<ArrayTy>,
    /// The behaviour record's arrays for one environment (empty when `act` returns none).
    pub behaviour: Vec<ArrayTy>,
    /// The carry's arrays at the start of an episode, for one environment (empty without
    /// a carry).
    pub initial_carry: Vec<Array>,
    /// The names of the agent's metrics, which `learn` returns after the key.
    pub metrics: Vec<String>,
}

/// Builds the actor program for `envs` environments per actor batch, and the learner
/// program for the trajectory `agent.update` was built for.
pub fn sebulba_programs(prog: &Program, agent: &AgentFuncs, envs: usize) -> SebulbaPrograms {
    let learner: Vec<ArrayTy> = agent.init.result_types();
    let (act, policy) = act_program(prog, agent, envs);
    SebulbaPrograms {
        act,
        policy,
        learn: learn_program(prog, agent),
        learner,
        behaviour: agent.act.result_types()[1..1 + agent.behaviour_len()].to_vec(),
        initial_carry: agent.initial_carry.as_ref().map_or(vec![], |f| eval_func(f, &[])),
        metrics: match &agent.info.metrics {
            Ty::Struct(def, args) => Ty::struct_fields(def, args).into_iter().map(|(n, _)| n).collect(),
            _ => vec![],
        },
    }
}

fn fresh(cx: &mut Elab, ty: ArrayTy) -> Var {
    cx.b.as_mut().expect("build mode").fresh(ty)
}

fn leaf(cx: &Elab, v: Var) -> Val {
    Val::of(array_ty(cx.b.as_ref().expect("build mode").ty(v)), vec![v])
}

fn act_program(prog: &Program, agent: &AgentFuncs, envs: usize) -> (Func, Vec<usize>) {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.scopes.push(HashMap::new());
    let span = Span::default();
    let n_learner = agent.init.graph.results.len();
    let key = fresh(&mut cx, ArrayTy::new(DType::U32, vec![2]));
    let learner: Vec<Var> = agent.init.result_types().into_iter().map(|t| fresh(&mut cx, t)).collect();
    let batched = |t: &ArrayTy| ArrayTy::new(t.dtype, std::iter::once(envs).chain(t.shape.iter().copied()).collect());
    let carry_tys = &agent.act.param_types()[n_learner..n_learner + agent.carry_len()];
    let carry: Vec<Var> = carry_tys.iter().map(|t| fresh(&mut cx, batched(t))).collect();
    let obs_ty = agent.act.ty(agent.act.graph.params[n_learner + carry.len()]).clone();
    let obs = fresh(&mut cx, batched(&obs_ty));
    let k = leaf(&cx, key);
    let (key_out, k_act) = split2(&mut cx, k, span);
    let keys = cx.call_builtin("split", vec![Arg::Val(k_act), Arg::Int(envs as u64)], span);
    let mut flags = vec![false; n_learner];
    flags.extend(vec![true; carry.len() + 2]);
    let act = vmap(&agent.act, &flags, envs);
    let mut args = learner.clone();
    args.extend(&carry);
    args.push(obs);
    args.extend(&keys.vars);
    let outs = cx.b.as_mut().expect("build mode").inline(&act, &args);
    let params: Vec<Var> = [vec![key], learner.clone(), carry, vec![obs]].concat();
    let results: Vec<Var> = key_out.vars.into_iter().chain(outs).collect();
    let mut f = cx.finish_internal("sebulba_act", params, results);
    // Keep only the learner leaves that the (dead-code-eliminated) program reads.
    let read = reads(&f);
    let policy: Vec<usize> = (0..n_learner).filter(|&i| read.contains(&learner[i])).collect();
    f.graph.params.retain(|v| !learner.contains(v) || read.contains(v));
    (f, policy)
}

/// The variables a function's top-level equations and results read (a loop reads what it
/// closes over through its arguments).
fn reads(f: &Func) -> HashSet<Var> {
    let mut out: HashSet<Var> = f.graph.results.iter().copied().collect();
    for e in &f.graph.eqns {
        out.extend(&e.args);
    }
    out
}

fn learn_program(prog: &Program, agent: &AgentFuncs) -> Func {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.scopes.push(HashMap::new());
    let span = Span::default();
    let n_learner = agent.init.graph.results.len();
    let update_tys = agent.update.param_types();
    // `update`'s parameters: the learner, the trajectory's arrays, the key.
    let n_traj = update_tys.len() - n_learner - 1;
    let learner: Vec<Var> = update_tys[..n_learner].iter().map(|t| fresh(&mut cx, t.clone())).collect();
    let key = fresh(&mut cx, ArrayTy::new(DType::U32, vec![2]));
    let traj: Vec<Var> = update_tys[n_learner..n_learner + n_traj].iter().map(|t| fresh(&mut cx, t.clone())).collect();
    let k = leaf(&cx, key);
    let (key_out, k_update) = split2(&mut cx, k, span);
    let args: Vec<Var> = [learner.clone(), traj.clone(), k_update.vars].concat();
    let outs = cx.b.as_mut().expect("build mode").inline(&agent.update, &args);
    let mut results = outs[..n_learner].to_vec();
    results.extend(key_out.vars);
    for &m in &outs[n_learner..] {
        let m = leaf(&cx, m);
        results.extend(cx.call_builtin("pmean", vec![Arg::Val(m)], span).vars);
    }
    let params = [learner, vec![key], traj].concat();
    cx.finish_internal("sebulba_learn", params, results)
}
