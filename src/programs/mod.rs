//! The programs the drivers run, put together from an agent's and an env's built
//! functions on a small typed builder ([`builder`]): Anakin's training programs, Sebulba's
//! actor and learner, the acting program of host envs, evaluation and play, and the
//! programs of `podc sim` and `podc bench env`.

pub mod act;
pub mod anakin;
pub mod builder;
pub mod env;
pub mod episodes;
pub mod sebulba;

use crate::elab::env::EnvFuncs;
use crate::ir::{Func, Var};
use crate::transform::vmap::vmap;
use crate::types::Ty;
use builder::ProgramBuilder;

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

/// `initial_carry()` for `envs` environments (`[envs, ..]` each), or for one (`None`);
/// nothing for an agent without a carry.
fn initial_carries(p: &mut ProgramBuilder, initial_carry: Option<&Func>, envs: Option<usize>) -> Vec<Var> {
    let Some(f) = initial_carry else { return vec![] };
    match envs {
        Some(n) => p.inline(&vmap(f, &[], n), &[]),
        None => p.inline(f, &[]),
    }
}

/// `envs` environments reset, one key each from `key`: their states, step counters and
/// observations.
fn reset_envs(p: &mut ProgramBuilder, env: &EnvFuncs, envs: usize, key: Var) -> Vec<Var> {
    let keys = p.split(key, envs);
    p.inline(&vmap(&env.reset, &[true], envs), &[keys])
}

/// What the derived (auto-resetting) step of a batch of environments gives.
struct Stepped {
    /// The states, step counters and observations the next step starts from.
    next: Vec<Var>,
    reward: Var,
    terminated: Var,
    truncated: Var,
    /// The observation each step ended in, before any reset.
    final_obs: Var,
}

/// One derived step of `envs` environments from their states and step counters
/// (`state_t`), one action and key (from `key`) each.
fn step_envs(p: &mut ProgramBuilder, env: &EnvFuncs, envs: usize, state_t: &[Var], action: Var, key: Var) -> Stepped {
    let keys = p.split(key, envs);
    let step = vmap(&env.step, &vec![true; env.step.graph.params.len()], envs);
    let args = [state_t, &[action, keys]].concat();
    let mut outs = p.inline(&step, &args);
    // outs: state.., t, obs, reward, terminated, truncated, final obs
    let [reward, terminated, truncated, final_obs] = outs.split_off(outs.len() - 4).try_into().expect("four");
    Stepped { next: outs, reward, terminated, truncated, final_obs }
}
