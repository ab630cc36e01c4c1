//! The Sebulba programs: an agent split into an actor and a learner, for environments
//! stepped on the host (`train::sebulba` drives them).
//!
//! - `act`: the acting program of host envs ([`act_program`]) for one actor thread's
//!   environments, sampling with the agent's `act`; the actor resets the carry where
//!   episodes end. It takes only the policy, not the optimiser state.
//! - `learn(learner.., key, traj..) -> (learner.., key, metrics..)`: the agent's `update` on
//!   one learner device's share of the environments; replicated over the learner devices,
//!   the update's own `pmean` averages the gradients and the metrics are averaged here.

use super::act::{Policy, act_program};
use super::builder::ProgramBuilder;
use crate::array::{Array, ArrayTy, DType};
use crate::elab::agent::AgentFuncs;
use crate::ir::Func;
use crate::ir::eval::eval_func;
use crate::resolve::Program;
use crate::types::{StructDef, Ty};
use std::rc::Rc;

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
    /// The definition of the agent's `Trajectory<T, B>`, which the host's rollouts follow.
    pub trajectory: Rc<StructDef>,
    /// The carry's arrays at the start of an episode, for one environment (empty without
    /// a carry).
    pub initial_carry: Vec<Array>,
    /// The names of the agent's metrics, which `learn` returns after the key.
    pub metrics: Vec<String>,
    /// `(seed: Key, i: i32, start: i32) -> (init, learn, act)`: the learner's init key (as
    /// Anakin's: the seed's first half), the update key of learner device `i`, and the
    /// key of actor thread `i` for a run (or resumption) starting at update `start`.
    pub keys: Func,
}

/// Builds the actor program for `envs` environments per actor batch, and the learner
/// program for the trajectory `agent.update` was built for.
pub fn sebulba_programs(prog: &Program, agent: &AgentFuncs, envs: usize) -> SebulbaPrograms {
    let learner: Vec<ArrayTy> = agent.init.result_types();
    let act = act_program(prog, &agent.act, Policy::Sample, (learner.len(), agent.carry_len()), envs);
    SebulbaPrograms {
        act: act.func,
        policy: act.policy,
        learn: learn_program(prog, agent),
        learner,
        trajectory: agent.info.trajectory(),
        initial_carry: agent.initial_carry.as_ref().map_or(vec![], |f| eval_func(f, &[])),
        metrics: match &agent.info.metrics {
            Ty::Struct(def, args) => Ty::struct_fields(def, args).into_iter().map(|(n, _)| n).collect(),
            _ => vec![],
        },
        keys: keys_program(prog),
    }
}

fn keys_program(prog: &Program) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let seed = p.key_param();
    let [i, start] = [(); 2].map(|_| p.param(ArrayTy::scalar(DType::I32)));
    let (k_init, k_run) = p.split2(seed);
    let (k_learn, k_act) = p.split2(k_run);
    let learn = p.fold_in(k_learn, i);
    let act = p.fold_in(k_act, i);
    let act = p.fold_in(act, start);
    p.finish("sebulba_keys", vec![seed, i, start], vec![k_init, learn, act])
}

fn learn_program(prog: &Program, agent: &AgentFuncs) -> Func {
    let mut p = ProgramBuilder::new(prog);
    let n_learner = agent.init.graph.results.len();
    let update_tys = agent.update.param_types();
    // `update`'s parameters: the learner, the trajectory's arrays, the key.
    let n_traj = update_tys.len() - n_learner - 1;
    let learner = p.params(&update_tys[..n_learner]);
    let key = p.key_param();
    let traj = p.params(&update_tys[n_learner..n_learner + n_traj]);
    let (key_out, k_update) = p.split2(key);
    let args = [&learner[..], &traj, &[k_update]].concat();
    let outs = p.inline(&agent.update, &args);
    let mut results = outs[..n_learner].to_vec();
    results.push(key_out);
    for &m in &outs[n_learner..] {
        results.push(p.pmean(m));
    }
    let params = [learner, vec![key], traj].concat();
    p.finish("sebulba_learn", params, results)
}
