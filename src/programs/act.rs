//! Acting: the agent's `act` (a sample of its policy, with a key) or `greedy` (its most
//! likely action), for one environment or batched over many; and the one acting program
//! of environments stepped on the host (Sebulba's actors, `podc eval` and `podc play`).

use super::builder::{ProgramBuilder, batched};
use crate::array::ArrayTy;
use crate::ir::{Func, Var};
use crate::resolve::Program;
use crate::transform::vmap::vmap;
use std::collections::HashSet;

/// Which of the agent's functions acts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// `act`, with a key: a sample of the policy.
    Sample,
    /// `greedy`: the most likely action.
    Greedy,
}

/// What acting gives.
pub(super) struct Acted {
    pub action: Var,
    /// The behaviour record's arrays (`act` only).
    pub behaviour: Vec<Var>,
    /// The next carry.
    pub carry: Vec<Var>,
}

/// One action (per environment, with `envs`) and the next carry, from `f`: the agent's
/// `act` (`(L.., carry.., obs, key) -> (action, behaviour.., carry..)`) for
/// [`Policy::Sample`], its `greedy` (`(L.., carry.., obs) -> (action, carry..)`) otherwise.
pub(super) fn act(
    p: &mut ProgramBuilder,
    f: &Func,
    which: Policy,
    (learner, carry, obs): (&[Var], &[Var], Var),
    key: Var,
    envs: Option<usize>,
) -> Acted {
    let mut args = [learner, carry, &[obs]].concat();
    if which == Policy::Sample {
        args.push(match envs {
            Some(n) => p.split(key, n),
            None => key,
        });
    }
    let f = match envs {
        Some(n) => {
            let mut flags = vec![false; learner.len()];
            flags.resize(f.graph.params.len(), true);
            vmap(f, &flags, n)
        }
        None => f.clone(),
    };
    let out = p.inline(&f, &args);
    let (rest, carry) = out.split_at(out.len() - carry.len());
    Acted { action: rest[0], behaviour: rest[1..].to_vec(), carry: carry.to_vec() }
}

/// The acting program of a batch of environments stepped on the host.
pub struct ActProgram {
    /// `(key, policy.., carry[B, ..].., obs[B, ..]) -> (key, action[B, ..], behaviour[B, ..]..,
    /// carry[B, ..]..)`; the behaviour only from `act`.
    pub func: Func,
    /// Indices into the learner's leaves of the ones the program takes (the policy): found
    /// by dependency, so that for an agent whose learner is `{ params, opt }` and whose
    /// `act` reads `params.actor`, the learner sends the actors just those.
    pub policy: Vec<usize>,
}

/// The acting program for `envs` environments, of `f` (`act` or `greedy`, as `which`
/// says) of an agent whose learner has `learner` arrays and whose carry has `carry`.
pub fn act_program(
    prog: &Program,
    f: &Func,
    which: Policy,
    (learner_len, carry_len): (usize, usize),
    envs: usize,
) -> ActProgram {
    let mut p = ProgramBuilder::new(prog);
    let key = p.key_param();
    let tys = f.param_types();
    let learner = p.params(&tys[..learner_len]);
    let inputs: Vec<ArrayTy> = tys[learner_len..learner_len + carry_len + 1].iter().map(|t| batched(t, envs)).collect();
    let mut inputs = p.params(&inputs);
    let obs = inputs.pop().expect("the observation");
    let (key_out, k_act) = p.split2(key);
    let acted = act(&mut p, f, which, (&learner, &inputs, obs), k_act, Some(envs));
    let params = [vec![key], learner.clone(), inputs, vec![obs]].concat();
    let results = [vec![key_out, acted.action], acted.behaviour, acted.carry].concat();
    let mut func = p.finish("act", params, results);
    // Keep only the learner leaves that the (dead-code-eliminated) program reads.
    let read = reads(&func);
    let policy: Vec<usize> = (0..learner_len).filter(|&i| read.contains(&learner[i])).collect();
    func.graph.params.retain(|v| !learner.contains(v) || read.contains(v));
    ActProgram { func, policy }
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
