//! Agents: checking an `agent` declaration's interface, and building its functions for
//! the training drivers.
//!
//! `agent A2C for Catch { .. }` says how to act in and learn from one environment:
//! - `fn init(key: Key) -> L`: the learner state, any record (parameters and optimiser
//!   state), so that checkpoints name every array by its field path;
//! - `fn act(l: L, obs: OBS, key: Key) -> A`: an action for one observation (the driver
//!   batches it over the environments), `A` being the env's action type (`i32` for
//!   `discrete(n)`, `f32[n]` for `box(n)`); or `-> (A, B)` with `B` a struct of `f32` arrays
//!   (say the action's log-probability, or the logits), which the driver records as
//!   `traj.behaviour` so that `update` can correct for the policy the actions came from;
//! - `fn update<T, B>(l: L, traj: Trajectory<T, B>, key: Key) -> (L, M)`: one learning
//!   step from a rollout of `T` steps of `B` environments, with metrics `M`, a struct of
//!   `f32` scalars (reported by field name). With several devices each runs `update` on
//!   its own environments; the update averages its gradients with `pmean`.
//!
//! Inside an agent, `Trajectory<T, B>` is the built-in record of a rollout (time-major):
//! `obs: OBS[T, B]`, `action: A[T, B]` (`i32[T, B]`, `f32[T, B, n]`), `reward: f32[T, B]`, `terminated`,
//! `truncated: bool[T, B]`, `final_obs: OBS[T, B]` (the observation each step ended in,
//! before an auto-reset: what to bootstrap a truncated episode from) and
//! `last_obs: OBS[B]` (the observation after the last step, to bootstrap from), and, when
//! `act` returns `(A, B)`, `behaviour`: `B` with every field stacked to `[T, B, ..]`.

use super::env::EnvInfo;
use super::{Elab, TypeSubst, Val};
use crate::array::DType;
use crate::diag::Diag;
use crate::ir::Func;
use crate::ir::build::Builder;
use crate::resolve::{ItemRef, Program};
use crate::syntax::ast;
use crate::types::error::TypeError;
use crate::types::{Dim, Origin, StructDef, Subst, Ty};
use std::collections::HashMap;
use std::rc::Rc;

/// The built-in record of a rollout.
pub(crate) const TRAJECTORY: &str = "Trajectory";

/// What the checker learned about an agent.
pub struct AgentInfo {
    pub name: String,
    pub env: EnvInfo,
    /// The learner state `L`.
    pub learner: Ty,
    /// The metrics `M` that `update` returns.
    pub metrics: Ty,
    /// The struct `B` of `act -> (A, B)`, if `act` returns one.
    pub behaviour: Option<Ty>,
}

impl AgentInfo {
    /// What `Trajectory<T, B>` is made for (see [`traj_key`]).
    pub(crate) fn traj_key(&self) -> Ty {
        traj_key(&self.env, self.behaviour.as_ref())
    }
}

/// The type the built-in `Trajectory` is made for: `(observation, action)`, or with a
/// behaviour record `(observation, action, B)`. It is what `Elab::trajectory` holds while
/// an agent is checked.
pub(crate) fn traj_key(env: &EnvInfo, behaviour: Option<&Ty>) -> Ty {
    Ty::Tuple([env.observation.clone(), env.action.ty()].into_iter().chain(behaviour.cloned()).collect())
}

/// The record `B` of `act -> (A, B)`: a struct (without size parameters) of `f32` arrays.
fn behaviour_of<'t>(ret: &'t Ty, action: &Ty) -> Option<&'t Ty> {
    match ret {
        Ty::Tuple(ts) if ts.len() == 2 && ts[0] == *action => match &ts[1] {
            b @ Ty::Struct(def, args) if !Ty::struct_fields(def, args).is_empty() => Ty::struct_fields(def, args)
                .iter()
                .all(|(_, t)| matches!(t, Ty::Array(DType::F32, d) if d.iter().all(|d| matches!(d, Dim::Known(_)))))
                .then_some(b),
            _ => None,
        },
        _ => None,
    }
}

/// An agent's functions, built for `B` environments per device and rollouts of `T` steps.
pub struct AgentFuncs {
    pub info: AgentInfo,
    /// `(key) -> L`.
    pub init: Func,
    /// `(L.., obs, key) -> (action, behaviour..)`.
    pub act: Func,
    /// `(L.., obs[T, B], action, reward, terminated, truncated, final_obs[T, B], last_obs[B],
    /// behaviour[T, B].., key) -> (L.., M..)`.
    pub update: Func,
}

fn signature(name: &str, learner: &str, obs: &str, action: &str) -> String {
    match name {
        "init" => format!("fn init(key: Key) -> {learner}"),
        "act" => format!("fn act(l: {learner}, obs: {obs}, key: Key) -> {action}"),
        _ => format!("fn update<T, B>(l: {learner}, traj: Trajectory<T, B>, key: Key) -> ({learner}, Metrics)"),
    }
}

impl Elab<'_> {
    /// The built-in `Trajectory<T, B>` for a [`traj_key`]: the observation's and the
    /// action's types, and the behaviour record if `act` returns one.
    pub(super) fn trajectory_def(&self, key: &Ty) -> Rc<StructDef> {
        let (t, b) = (Dim::Param(Rc::from("T")), Dim::Param(Rc::from("B")));
        let Ty::Tuple(parts) = key else { unreachable!("a trajectory key is a tuple") };
        let (obs, action, behaviour) = (&parts[0], &parts[1], parts.get(2));
        let Ty::Array(dtype, dims) = obs else { unreachable!("checked: observations are arrays") };
        let stacked = |d: DType, lead: &[Dim]| Ty::Array(d, lead.iter().cloned().chain(dims.iter().cloned()).collect());
        let tb = [t.clone(), b.clone()];
        let per_step = |d: DType| Ty::Array(d, tb.to_vec());
        let Ty::Array(a_dtype, a_dims) = action else { unreachable!("actions are arrays") };
        let actions = Ty::Array(*a_dtype, tb.iter().chain(a_dims).cloned().collect());
        let mut fields = vec![
            ("obs".to_string(), stacked(*dtype, &tb)),
            ("action".to_string(), actions),
            ("reward".to_string(), per_step(DType::F32)),
            ("terminated".to_string(), per_step(DType::Bool)),
            ("truncated".to_string(), per_step(DType::Bool)),
            ("final_obs".to_string(), stacked(*dtype, &tb)),
            ("last_obs".to_string(), stacked(*dtype, std::slice::from_ref(&b))),
        ];
        // `B[T, B]`: the behaviour record batched over the rollout (`traj.behaviour.log_prob:
        // f32[T, B]`), as `vmap` batches structs.
        if let Some(rows) = behaviour.and_then(|r| r.batched(&b)).and_then(|r| r.batched(&t)) {
            fields.push(("behaviour".to_string(), rows));
        }
        Rc::new(StructDef {
            name: TRAJECTORY.into(),
            generics: vec!["T".into(), "B".into()],
            fields,
            origin: Origin::Builtin(TRAJECTORY, key.clone()),
        })
    }

    /// Checks an `agent`: its environment, and that its three functions exist with the
    /// right types.
    pub(crate) fn check_agent(&mut self, a: &ast::Agent) -> Option<AgentInfo> {
        let found = self.prog.modules[self.module].scope.get(&a.env.name).copied();
        let Some((r, e)) = found.and_then(|r| match self.prog.item(r) {
            ast::Item::Env(e) => Some((r, e)),
            _ => None,
        }) else {
            let detail = format!("`{}` is not an env", a.env.name);
            self.err(TypeError::AgentMember { detail, span: a.env.span });
            return None;
        };
        let module = std::mem::replace(&mut self.module, r.module);
        let env = self.check_env(e);
        self.module = module;
        let env = env?;
        if !matches!(env.observation, Ty::Array(..)) {
            let detail = format!("an agent's env must observe an array, not `{}`", env.observation);
            self.err(TypeError::AgentMember { detail, span: a.env.span });
            return None;
        }
        // `Trajectory` has a `behaviour` field when `act` returns one, so `act`'s declared
        // result is read before any function body is checked.
        let act_ret = a.fns.iter().find(|f| f.name.name == "act").map(|f| self.signature_types(f).1);
        let behaviour = act_ret.as_ref().and_then(|r| behaviour_of(r, &env.action.ty())).cloned();
        let saved = self.trajectory.replace(traj_key(&env, behaviour.as_ref()));
        let info = self.check_agent_fns(a, env, behaviour);
        self.trajectory = saved;
        info
    }

    fn check_agent_fns(&mut self, a: &ast::Agent, env: EnvInfo, behaviour: Option<Ty>) -> Option<AgentInfo> {
        let what = format!("agent `{}`", a.name.name);
        let mut fns: HashMap<&str, &ast::Fn> = HashMap::new();
        for f in &a.fns {
            self.check_fn(f);
            if let Some(first) = fns.insert(&f.name.name, f) {
                self.err(TypeError::Duplicate { name: f.name.name.clone(), span: f.name.span, first: first.name.span });
            }
            if !["init", "act", "update"].contains(&f.name.name.as_str()) {
                let detail = "an agent has exactly the functions `init`, `act` and `update`".to_string();
                self.err(TypeError::AgentMember { detail, span: f.name.span });
            }
        }
        let learner = fns.get("init").map(|f| self.signature_types(f).1);
        let learner_s = learner.as_ref().map_or_else(|| "L".to_string(), |t| t.to_string());
        let obs_s = env.observation.to_string();
        let action = env.action.ty();
        let action_s = action.to_string();
        for name in ["init", "act", "update"] {
            if !fns.contains_key(name) {
                let help = Some(signature(name, &learner_s, &obs_s, &action_s));
                let (env, what) = (what.clone(), format!("`fn {name}`"));
                self.err(TypeError::EnvMissing { env, what, span: a.name.span, help });
            }
        }
        let (learner, init, act, update) = (learner?, fns.get("init")?, fns.get("act")?, fns.get("update")?);
        let key = super::random::key_ty();
        let wrong = |cx: &mut Self, f: &ast::Fn, span: crate::syntax::span::Span, label: String| {
            let written: Vec<String> =
                f.params.iter().map(|(n, t)| format!("{}: {}", n.name, crate::syntax::print::print_type(t))).collect();
            let generics = match f.generics.is_empty() {
                true => String::new(),
                false => format!("<{}>", f.generics.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")),
            };
            let found = format!(
                "fn {}{generics}({}) -> {}",
                f.name.name,
                written.join(", "),
                crate::syntax::print::print_type(&f.ret)
            );
            let expected = signature(&f.name.name, &learner_s, &obs_s, &action_s);
            let (env, func) = (what.clone(), f.name.name.clone());
            cx.err(TypeError::EnvSignature { env, func, expected, found, label, span });
        };
        let mut ok = true;
        // init(key: Key) -> L
        let (p, _) = self.signature_types(init);
        if p != [key.clone()] {
            wrong(self, init, init.name.span, "expected one parameter, a `Key`".into());
            ok = false;
        }
        // act(l: L, obs: OBS, key: Key) -> A or (A, B)
        let (p, r) = self.signature_types(act);
        let want = [learner.clone(), env.observation.clone(), key.clone()];
        if p != want || (r != action && behaviour.is_none()) {
            let (span, label) = match &r {
                Ty::Tuple(ts) if p == want && ts.len() == 2 && ts[0] == action => {
                    (act.ret.span, format!("the behaviour `{}` must be a struct of `f32` arrays of fixed sizes", ts[1]))
                }
                _ if p == want => (
                    act.ret.span,
                    format!("expected an action of env `{}`, `{action}` (or `({action}, B)`), found `{r}`", env.name),
                ),
                _ => (
                    act.name.span,
                    format!(
                        "expected the learner state, an observation and a key, giving `{action}` or `({action}, B)`"
                    ),
                ),
            };
            wrong(self, act, span, label);
            ok = false;
        }
        // update<T, B>(l: L, traj: Trajectory<T, B>, key: Key) -> (L, M), where the
        // trajectory's sizes may also be products (`Trajectory<T, MB * 4>`) or fixed.
        let (p, r) = self.update_signature(update);
        let traj_def = self.trajectory_def(&traj_key(&env, behaviour.as_ref()));
        let metrics = match &r {
            Ty::Tuple(ts) if ts.len() == 2 && ts[0] == learner && is_metrics(&ts[1]) => Some(ts[1].clone()),
            _ => None,
        };
        let traj_ok = matches!(p.get(1), Some(Ty::Struct(d, _)) if *d == traj_def);
        if p.len() != 3 || p[0] != learner || !traj_ok || p[2] != key || metrics.is_none() {
            let label = "expected the learner state, a `Trajectory<T, B>` and a key, giving the new state and a struct of `f32` metrics";
            wrong(self, update, update.ret.span, label.into());
            ok = false;
        }
        let metrics = metrics.filter(|_| ok)?;
        Some(AgentInfo { name: a.name.name.clone(), env, learner, metrics, behaviour })
    }

    /// `update`'s parameter and result types, its size parameters symbolic.
    fn update_signature(&mut self, update: &ast::Fn) -> (Vec<Ty>, Ty) {
        let sizes: Subst = update
            .generics
            .iter()
            .map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str()))))
            .collect();
        let saved = std::mem::replace(&mut self.sizes, sizes);
        let p: Vec<Ty> = update.params.iter().map(|(_, t)| self.resolve_ty(t)).collect();
        let r = self.resolve_ty(&update.ret);
        self.sizes = saved;
        (p, r)
    }
}

/// Whether a type is a struct of `f32` scalars.
fn is_metrics(t: &Ty) -> bool {
    match t {
        Ty::Struct(def, args) => {
            Ty::struct_fields(def, args).iter().all(|(_, t)| matches!(t, Ty::Array(DType::F32, d) if d.is_empty()))
        }
        _ => false,
    }
}

/// Checks the agent named `name` in the root module and builds its functions for `envs`
/// environments per device and rollouts of `steps` steps.
pub fn build_agent(prog: &Program, name: &str, envs: usize, steps: usize) -> Result<AgentFuncs, Box<Diag>> {
    let Some((r, a)) = root_agent(prog, name) else {
        return Err(Box::new(no_agent(prog, name)));
    };
    let fun = |n: &str| a.fns.iter().find(|f| f.name.name == n).expect("checked: the agent has its functions");
    let mut cx = Elab::new(prog, None);
    cx.module = r.module;
    let info =
        cx.check_agent(a).ok_or_else(|| Box::new(cx.diags.first().cloned().unwrap_or_else(|| no_agent(prog, name))))?;
    // The sizes of `update` follow from the rollout's.
    let key = info.traj_key();
    cx.trajectory = Some(key.clone());
    let update = fun("update");
    let (p, _) = cx.update_signature(update);
    let known = Ty::Struct(cx.trajectory_def(&key), vec![Dim::Known(steps as u64), Dim::Known(envs as u64)]);
    let mut sizes = Subst::new();
    let fits = super::calls::unify_dims(&p[1], &known, false, &mut sizes, &mut None);
    if !fits || update.generics.iter().any(|g| !sizes.contains_key(g.name.as_str())) {
        let detail = format!("`update` takes `{}`, not rollouts of {steps} steps of {envs} envs per device", p[1]);
        return Err(Box::new(TypeError::RolloutMismatch { detail, span: update.params[1].1.span }.into_diag()));
    }
    let init = derive(prog, r, &key, fun("init"), Subst::new())?;
    let act = derive(prog, r, &key, fun("act"), Subst::new())?;
    let update = derive(prog, r, &key, fun("update"), sizes)?;
    Ok(AgentFuncs { info, init, act, update })
}

/// The rollout length that the agent's `update` fixes (`Trajectory<128, B>`), if it does.
pub fn fixed_rollout(prog: &Program, name: &str) -> Option<usize> {
    let (r, a) = root_agent(prog, name)?;
    let mut cx = Elab::new(prog, None);
    cx.module = r.module;
    let info = cx.check_agent(a)?;
    cx.trajectory = Some(info.traj_key());
    let update = a.fns.iter().find(|f| f.name.name == "update")?;
    match cx.update_signature(update).0.get(1) {
        Some(Ty::Struct(_, dims)) => match dims.first() {
            Some(Dim::Known(n)) => Some(*n as usize),
            _ => None,
        },
        _ => None,
    }
}

/// The agent `name` of the root module.
fn root_agent<'p>(prog: &'p Program, name: &str) -> Option<(ItemRef, &'p ast::Agent)> {
    let r = prog.modules.first()?.scope.get(name).copied()?;
    match prog.item(r) {
        ast::Item::Agent(a) => Some((r, a)),
        _ => None,
    }
}

/// Builds one of an agent's (checked) functions with its sizes known.
fn derive(prog: &Program, r: ItemRef, key: &Ty, f: &ast::Fn, sizes: Subst) -> Result<Func, Box<Diag>> {
    let mut cx = Elab::new(prog, Some(Builder::new()));
    cx.module = r.module;
    cx.trajectory = Some(key.clone());
    cx.scopes.push(HashMap::new());
    let saved = std::mem::replace(&mut cx.sizes, sizes.clone());
    let tys: Vec<Ty> = f.params.iter().map(|(_, t)| cx.resolve_ty(t)).collect();
    let ret = cx.resolve_ty(&f.ret);
    cx.sizes = saved;
    let args: Vec<Val> = tys.into_iter().map(|t| cx.param(t)).collect();
    let vars = args.iter().flat_map(|v| v.vars.clone()).collect();
    let v = cx.inline(f, r.module, sizes, TypeSubst::new(), args, &ret);
    cx.finish(&f.name.name, vars, v.vars)
}

/// The root module's agents, in order (`podc train` picks the only one by default).
pub fn agent_names(prog: &Program) -> Vec<String> {
    super::root_names(prog, |i| matches!(i, ast::Item::Agent(_)))
}

fn no_agent(prog: &Program, name: &str) -> Diag {
    super::no_root_item(prog, "E0304", "agent", name)
}
