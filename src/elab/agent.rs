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
//!   its own environments; the update averages its gradients with `pmean`;
//! - optionally, for a policy with memory, `fn initial_carry() -> C`: each environment's
//!   carry at the start of an episode (say a GRU's hidden state). `act` then takes the
//!   carry after the learner and returns the next one last: `fn act(l: L, c: C, obs: OBS,
//!   key: Key) -> (A, C)` or `-> (A, B, C)`. The driver keeps a carry per environment and
//!   sets it back to `initial_carry()` after every step that ends an episode;
//! - optionally, `fn greedy(l: L, obs: OBS) -> A` (with a carry, `fn greedy(l: L, c: C,
//!   obs: OBS) -> (A, C)`): the policy's most likely action, with no key, which
//!   `podc eval --greedy` and `podc play --greedy` take instead of `act`'s sample. Only the
//!   agent knows its distribution, so it says what its mode is (the argmax of the logits,
//!   a Gaussian's mean).
//!
//! Inside an agent, `Trajectory<T, B>` is the built-in record of a rollout (time-major):
//! `obs: OBS[T, B]`, `action: A[T, B]` (`i32[T, B]`, `f32[T, B, n]`), `reward: f32[T, B]`, `terminated`,
//! `truncated: bool[T, B]`, `final_obs: OBS[T, B]` (the observation each step ended in,
//! before an auto-reset: what to bootstrap a truncated episode from) and
//! `last_obs: OBS[B]` (the observation after the last step, to bootstrap from), and, when
//! `act` returns `(A, B)`, `behaviour`: `B` with every field stacked to `[T, B, ..]`, and,
//! with a carry, `carry: C[B]`: the carry each environment's first `act` of the rollout
//! was given, from which `update` replays the policy over the rollout.

use super::env::EnvInfo;
use super::{Elab, TypeSubst, Val};
use crate::array::DType;
use crate::diag::Diag;
use crate::ir::Func;
use crate::ir::build::Builder;
use crate::overrides::Override;
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
    /// The carry `C` of `initial_carry() -> C`, if the agent has one.
    pub carry: Option<Ty>,
}

impl AgentInfo {
    /// What `Trajectory<T, B>` is made for (see [`traj_key`]).
    pub(crate) fn traj_key(&self) -> Ty {
        traj_key(&self.env, self.behaviour.as_ref(), self.carry.as_ref())
    }

    /// The definition of the agent's `Trajectory<T, B>`.
    pub fn trajectory(&self) -> Rc<StructDef> {
        trajectory_def(&self.traj_key())
    }
}

/// The type the built-in `Trajectory` is made for: `(observation, action, (B?), (C?))`,
/// with the behaviour record and the carry when the agent has them. It is what
/// `Elab::trajectory` holds while an agent is checked.
pub(crate) fn traj_key(env: &EnvInfo, behaviour: Option<&Ty>, carry: Option<&Ty>) -> Ty {
    let maybe = |t: Option<&Ty>| Ty::Tuple(t.into_iter().cloned().collect());
    Ty::Tuple(vec![env.observation.clone(), env.action.ty(), maybe(behaviour), maybe(carry)])
}

/// The record `B` of `act -> (A, B)` (with a carry: `(A, B, C)`): a struct (without size
/// parameters) of `f32` arrays.
fn behaviour_of<'t>(ret: &'t Ty, action: &Ty, carried: bool) -> Option<&'t Ty> {
    match ret {
        Ty::Tuple(ts) if ts.len() == 2 + usize::from(carried) && ts[0] == *action => match &ts[1] {
            b @ Ty::Struct(def, args) if !Ty::struct_fields(def, args).is_empty() => Ty::struct_fields(def, args)
                .iter()
                .all(|(_, t)| matches!(t, Ty::Array(DType::F32, d) if d.iter().all(|d| matches!(d, Dim::Known(_)))))
                .then_some(b),
            _ => None,
        },
        _ => None,
    }
}

/// Whether a carry type is arrays of fixed sizes (in any tuples and structs).
fn fixed_size(t: &Ty) -> bool {
    t.leaves().is_some_and(|l| !l.is_empty())
}

/// An agent's functions, built for `B` environments per device and rollouts of `T` steps.
pub struct AgentFuncs {
    pub info: AgentInfo,
    /// `(key) -> L`.
    pub init: Func,
    /// `(L.., carry.., obs, key) -> (action, behaviour.., carry..)`.
    pub act: Func,
    /// `() -> carry..`, for an agent with a carry.
    pub initial_carry: Option<Func>,
    /// `(L.., obs[T, B], action, reward, terminated, truncated, final_obs[T, B], last_obs[B],
    /// behaviour[T, B].., carry[B].., key) -> (L.., M..)`.
    pub update: Func,
}

impl AgentFuncs {
    /// How many arrays the carry has (0 without one).
    pub fn carry_len(&self) -> usize {
        self.initial_carry.as_ref().map_or(0, |f| f.graph.results.len())
    }

    /// How many arrays the behaviour record has (0 without one).
    pub fn behaviour_len(&self) -> usize {
        self.act.graph.results.len() - 1 - self.carry_len()
    }
}

/// The functions an agent may have.
const FUNCTIONS: [&str; 5] = ["init", "act", "update", "initial_carry", "greedy"];

/// The signature `name` should have; `carry` is the carry's type, if the agent has one.
fn signature(name: &str, learner: &str, obs: &str, action: &str, carry: Option<&str>) -> String {
    match (name, carry) {
        ("init", _) => format!("fn init(key: Key) -> {learner}"),
        ("act", None) => format!("fn act(l: {learner}, obs: {obs}, key: Key) -> {action}"),
        ("act", Some(c)) => format!("fn act(l: {learner}, c: {c}, obs: {obs}, key: Key) -> ({action}, {c})"),
        ("initial_carry", c) => format!("fn initial_carry() -> {}", c.unwrap_or("C")),
        ("greedy", None) => format!("fn greedy(l: {learner}, obs: {obs}) -> {action}"),
        ("greedy", Some(c)) => format!("fn greedy(l: {learner}, c: {c}, obs: {obs}) -> ({action}, {c})"),
        _ => format!("fn update<T, B>(l: {learner}, traj: Trajectory<T, B>, key: Key) -> ({learner}, Metrics)"),
    }
}

/// The built-in `Trajectory<T, B>` for a [`traj_key`]: the observation's and the
/// action's types, and the behaviour record if `act` returns one.
pub fn trajectory_def(key: &Ty) -> Rc<StructDef> {
    let (t, b) = (Dim::Param(Rc::from("T")), Dim::Param(Rc::from("B")));
    let Ty::Tuple(parts) = key else { unreachable!("a trajectory key is a tuple") };
    let optional = |t: &Ty| match t {
        Ty::Tuple(ts) => ts.first().cloned(),
        _ => unreachable!("see traj_key"),
    };
    let (obs, action, behaviour, carry) = (&parts[0], &parts[1], optional(&parts[2]), optional(&parts[3]));
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
    // `C[B]`: each environment's carry at the start of the rollout.
    if let Some(start) = carry.and_then(|c| c.batched(&b)) {
        fields.push(("carry".to_string(), start));
    }
    Rc::new(StructDef {
        name: TRAJECTORY.into(),
        generics: vec!["T".into(), "B".into()],
        fields,
        origin: Origin::Builtin(TRAJECTORY, key.clone()),
        written: vec![],
    })
}

impl Elab<'_> {
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
        // `Trajectory` has a `behaviour` field when `act` returns one, and a `carry` when
        // the agent has one, so those declared types are read before any body is checked.
        let declared =
            |cx: &mut Self, name: &str| a.fns.iter().find(|f| f.name.name == name).map(|f| cx.signature_types(f).1);
        let carry = declared(self, "initial_carry");
        let act_ret = declared(self, "act");
        let behaviour = act_ret.as_ref().and_then(|r| behaviour_of(r, &env.action.ty(), carry.is_some())).cloned();
        let saved =
            self.trajectory.replace(traj_key(&env, behaviour.as_ref(), carry.as_ref().filter(|c| fixed_size(c))));
        let info = self.check_agent_fns(a, env, behaviour, carry);
        self.trajectory = saved;
        info
    }

    fn check_agent_fns(
        &mut self,
        a: &ast::Agent,
        env: EnvInfo,
        behaviour: Option<Ty>,
        carry: Option<Ty>,
    ) -> Option<AgentInfo> {
        let what = format!("agent `{}`", a.name.name);
        let errors_before = self.diags.len();
        let mut fns: HashMap<&str, &ast::Fn> = HashMap::new();
        for f in &a.fns {
            self.check_fn(f);
            if let Some(first) = fns.insert(&f.name.name, f) {
                self.err(TypeError::Duplicate { name: f.name.name.clone(), span: f.name.span, first: first.name.span });
            }
            if !FUNCTIONS.contains(&f.name.name.as_str()) {
                let detail =
                    "an agent has the functions `init`, `act` and `update`, and optionally `initial_carry` and `greedy`"
                        .to_string();
                self.err(TypeError::AgentMember { detail, span: f.name.span });
            }
        }
        let learner = fns.get("init").map(|f| self.signature_types(f).1);
        let learner_s = learner.as_ref().map_or_else(|| "L".to_string(), |t| t.to_string());
        let obs_s = env.observation.to_string();
        let action = env.action.ty();
        let action_s = action.to_string();
        let carry_s = carry.as_ref().map(Ty::to_string);
        for name in ["init", "act", "update"] {
            if !fns.contains_key(name) {
                let help = Some(signature(name, &learner_s, &obs_s, &action_s, carry_s.as_deref()));
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
            let expected = signature(&f.name.name, &learner_s, &obs_s, &action_s, carry_s.as_deref());
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
        // initial_carry() -> C
        if let (Some(f), Some(c)) = (fns.get("initial_carry"), &carry)
            && (!f.params.is_empty() || !fixed_size(c))
        {
            let label = "expected no parameters, giving arrays of fixed sizes (or a tuple or struct of them)";
            wrong(self, f, f.name.span, label.into());
            ok = false;
        }
        // act(l: L, obs: OBS, key: Key) -> A or (A, B); with a carry,
        // act(l: L, c: C, obs: OBS, key: Key) -> (A, C) or (A, B, C)
        let (p, r) = self.signature_types(act);
        let want: Vec<Ty> = [Some(learner.clone()), carry.clone(), Some(env.observation.clone()), Some(key.clone())]
            .into_iter()
            .flatten()
            .collect();
        let (plain, with_behaviour, given) = match &carry_s {
            None => (action_s.clone(), format!("({action_s}, B)"), "an observation and a key"),
            Some(c) => {
                (format!("({action_s}, {c})"), format!("({action_s}, B, {c})"), "the carry, an observation and a key")
            }
        };
        let returns_ok = match (&carry, &r) {
            (None, r) => *r == action || behaviour.is_some(),
            (Some(c), Ty::Tuple(ts)) => {
                ts[0] == action && ts.last() == Some(c) && (ts.len() == 2 || behaviour.is_some())
            }
            _ => false,
        };
        if p != want || !returns_ok {
            let carried = usize::from(carry.is_some());
            let behaviour_slot = match &r {
                Ty::Tuple(ts)
                    if ts.len() == 2 + carried
                        && ts[0] == action
                        && carry.as_ref().is_none_or(|c| ts.last() == Some(c)) =>
                {
                    ts.get(1)
                }
                _ => None,
            };
            let (span, label) = match behaviour_slot {
                Some(b) if p == want => {
                    (act.ret.span, format!("the behaviour `{b}` must be a struct of `f32` arrays of fixed sizes"))
                }
                _ if p == want => (
                    act.ret.span,
                    format!("expected an action of env `{}`, `{plain}` (or `{with_behaviour}`), found `{r}`", env.name),
                ),
                _ if carry.is_none() && p.len() == 4 => (
                    act.name.span,
                    "an `act` that takes a carry needs the agent to say where it starts: `fn initial_carry() -> C`"
                        .into(),
                ),
                _ => (
                    act.name.span,
                    format!("expected the learner state, {given}, giving `{plain}` or `{with_behaviour}`"),
                ),
            };
            wrong(self, act, span, label);
            ok = false;
        }
        // greedy(l: L, obs: OBS) -> A; with a carry, greedy(l: L, c: C, obs: OBS) -> (A, C)
        if let Some(f) = fns.get("greedy") {
            let (p, r) = self.signature_types(f);
            let want: Vec<Ty> =
                [Some(learner.clone()), carry.clone(), Some(env.observation.clone())].into_iter().flatten().collect();
            let ret = match &carry {
                None => action.clone(),
                Some(c) => Ty::Tuple(vec![action.clone(), c.clone()]),
            };
            if p != want || r != ret {
                let label = match p == want {
                    true => format!("expected the most likely action of env `{}`, `{plain}`, found `{r}`", env.name),
                    false => match carry {
                        None => "expected the learner state and an observation, and no key".to_string(),
                        Some(_) => "expected the learner state, the carry and an observation, and no key".to_string(),
                    },
                };
                let span = if p == want { f.ret.span } else { f.name.span };
                wrong(self, f, span, label);
                ok = false;
            }
        }
        // update<T, B>(l: L, traj: Trajectory<T, B>, key: Key) -> (L, M), where the
        // trajectory's sizes may also be products (`Trajectory<T, MB * 4>`) or fixed.
        let (p, r) = self.update_signature(update);
        let traj_def = trajectory_def(&traj_key(&env, behaviour.as_ref(), carry.as_ref()));
        let (metrics, not_metrics) = match &r {
            Ty::Tuple(ts) if ts.len() == 2 && ts[0] == learner => match not_metrics(&ts[1]) {
                None => (Some(ts[1].clone()), None),
                why => (None, why),
            },
            _ => (None, None),
        };
        let traj_ok = matches!(p.get(1), Some(Ty::Struct(d, _)) if *d == traj_def);
        let params_ok = p.len() == 3 && p[0] == learner && traj_ok && p[2] == key;
        if !params_ok || metrics.is_none() {
            let label = match not_metrics.filter(|_| params_ok) {
                Some(why) => why,
                None => "expected the learner state, a `Trajectory<T, B>` and a key, giving the new state and a struct of `f32` metrics".into(),
            };
            wrong(self, update, update.ret.span, label);
            ok = false;
        }
        // Only for an agent without other errors: the name matters once the agent runs.
        if let Some(m @ Ty::Struct(def, args)) = metrics.as_ref().filter(|_| ok && self.diags.len() == errors_before)
            && Ty::struct_fields(def, args).iter().any(|(name, _)| name == "loss")
        {
            self.err(TypeError::LossMetric { metrics: m.to_string(), span: update.ret.span });
            ok = false;
        }
        let metrics = metrics.filter(|_| ok)?;
        Some(AgentInfo { name: a.name.name.clone(), env, learner, metrics, behaviour, carry })
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

/// Why `t` cannot be `update`'s metrics, a struct of `f32` scalars; `None` when it can.
fn not_metrics(t: &Ty) -> Option<String> {
    let Ty::Struct(def, args) = t else {
        return Some(format!("the metrics must be a struct of `f32` scalars, not `{t}`"));
    };
    let fields = Ty::struct_fields(def, args);
    let (name, ty) = fields.iter().find(|(_, t)| !matches!(t, Ty::Array(DType::F32, d) if d.is_empty()))?;
    Some(format!("the metrics must be `f32` scalars: field `{name}` of `{t}` is `{ty}`"))
}

/// Checks the agent named `name` in the root module and builds its functions for `envs`
/// environments per device and rollouts of `steps` steps.
pub fn build_agent(
    prog: &Program,
    overrides: &[Override],
    name: &str,
    envs: usize,
    steps: usize,
) -> Result<AgentFuncs, Box<Diag>> {
    let Some((r, a)) = root_agent(prog, name) else {
        return Err(Box::new(no_agent(prog, name)));
    };
    let fun = |n: &str| a.fns.iter().find(|f| f.name.name == n).expect("checked: the agent has its functions");
    let mut cx = Elab::new(prog, overrides, None);
    cx.module = r.module;
    let info =
        cx.check_agent(a).ok_or_else(|| Box::new(cx.diags.first().cloned().unwrap_or_else(|| no_agent(prog, name))))?;
    // The sizes of `update` follow from the rollout's.
    let key = info.traj_key();
    cx.trajectory = Some(key.clone());
    let update = fun("update");
    let (p, _) = cx.update_signature(update);
    let known = Ty::Struct(trajectory_def(&key), vec![Dim::Known(steps as u64), Dim::Known(envs as u64)]);
    let mut sizes = Subst::new();
    let fits = super::calls::unify_dims(&p[1], &known, false, &mut sizes, &mut None);
    if !fits || update.generics.iter().any(|g| !sizes.contains_key(g.name.as_str())) {
        let detail = format!("`update` takes `{}`, not rollouts of {steps} steps of {envs} envs per device", p[1]);
        return Err(Box::new(TypeError::RolloutMismatch { detail, span: update.params[1].1.span }.into_diag()));
    }
    let init = derive(prog, overrides, r, &key, fun("init"), Subst::new())?;
    let act = derive(prog, overrides, r, &key, fun("act"), Subst::new())?;
    let update = derive(prog, overrides, r, &key, fun("update"), sizes)?;
    let initial_carry = match info.carry {
        Some(_) => Some(derive(prog, overrides, r, &key, fun("initial_carry"), Subst::new())?),
        None => None,
    };
    Ok(AgentFuncs { info, init, act, initial_carry, update })
}

/// What runs a trained agent without learning: its policy, for `podc eval` and `podc play`.
pub struct PolicyFuncs {
    pub info: AgentInfo,
    /// `(L.., carry.., obs, key) -> (action, behaviour.., carry..)`, as [`AgentFuncs::act`].
    pub act: Func,
    /// `(L.., carry.., obs) -> (action, carry..)`: the agent's `greedy`, if it has one.
    pub greedy: Option<Func>,
    /// `() -> carry..`, for an agent with a carry.
    pub initial_carry: Option<Func>,
}

/// Checks the agent named `name` in the root module and builds its policy's functions.
/// `update` is checked but not built, so no rollout size is needed.
pub fn build_policy(prog: &Program, overrides: &[Override], name: &str) -> Result<PolicyFuncs, Box<Diag>> {
    let Some((r, a)) = root_agent(prog, name) else {
        return Err(Box::new(no_agent(prog, name)));
    };
    let mut cx = Elab::new(prog, overrides, None);
    cx.module = r.module;
    let info =
        cx.check_agent(a).ok_or_else(|| Box::new(cx.diags.first().cloned().unwrap_or_else(|| no_agent(prog, name))))?;
    let key = info.traj_key();
    let built = |n: &str| match a.fns.iter().find(|f| f.name.name == n) {
        Some(f) => derive(prog, overrides, r, &key, f, Subst::new()).map(Some),
        None => Ok(None),
    };
    let act = built("act")?.expect("checked: the agent has `act`");
    let (greedy, initial_carry) = (built("greedy")?, built("initial_carry")?);
    Ok(PolicyFuncs { info, act, greedy, initial_carry })
}

impl PolicyFuncs {
    /// How many arrays the carry has (0 without one).
    pub fn carry_len(&self) -> usize {
        self.initial_carry.as_ref().map_or(0, |f| f.graph.results.len())
    }

    /// How many arrays the learner state has.
    pub fn learner_len(&self) -> usize {
        self.act.graph.params.len() - self.carry_len() - 2
    }
}

/// The rollout length that the agent's `update` fixes (`Trajectory<128, B>`), if it does.
pub fn fixed_rollout(prog: &Program, overrides: &[Override], name: &str) -> Option<usize> {
    let (r, a) = root_agent(prog, name)?;
    let mut cx = Elab::new(prog, overrides, None);
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
fn derive(
    prog: &Program,
    overrides: &[Override],
    r: ItemRef,
    key: &Ty,
    f: &ast::Fn,
    sizes: Subst,
) -> Result<Func, Box<Diag>> {
    let mut cx = Elab::new(prog, overrides, Some(Builder::new()));
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
