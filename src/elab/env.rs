//! Environments: checking an `env` declaration's interface, and deriving from it the
//! functions the drivers run.
//!
//! An environment is written for one instance:
//! `reset(key) -> S`, `step(s, a, key) -> Step<S>` and `observe(s) -> OBS`, with an
//! `observation` type, an `action` space and an optional `time_limit`. From these the
//! compiler derives [`EnvFuncs`]:
//! - `reset(key) -> (S, t, OBS)`;
//! - the **auto-resetting step** `(S, t, a, key) -> (S, t, OBS, reward, terminated,
//!   truncated, final OBS)`: it splits the key as gymnax does (the first half steps,
//!   the second resets), counts the steps `t` of the episode for the time limit, and when
//!   the episode ends returns the next episode's first state and observation while
//!   reporting the final observation of the one that ended. `terminated` (the task
//!   ended) and `truncated` (the time limit, or the env's own truncation) stay distinct.
//!   The next episode starts from `reset(key)`, or, when the env defines the optional
//!   `auto_reset(s, key) -> S`, from that: a state that keeps what must outlive an
//!   episode (a wrapper's running statistics) from the state `s` the episode ended in;
//! - `render(s) -> f32[H, W, 3]`, when the env defines it: a picture of a state, RGB in
//!   [0, 1], that `podc play` and `podc sim --gif` turn into animations.
//!
//! Both branches of the reset are computed and selected, which is what batching needs.

use super::ops::array_ty;
use super::{Elab, Val};
use crate::array::{Array, DType};
use crate::diag::Diag;
use crate::ir::Func;
use crate::ir::build::Builder;
use crate::overrides::Override;
use crate::prims::{Binary, BinaryOp, CmpOp, Compare, Prim};
use crate::resolve::{ItemRef, Program};
use crate::space::ActionSpace;
use crate::syntax::ast::{self, EnvSpec, ExprKind, TypeKind};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::{Dim, Ty};
use std::collections::HashMap;
use std::path::Path;

/// The members an `env` may declare, for diagnostics.
const MEMBERS: &str = "`observation`, `action` and `time_limit`";

impl ActionSpace {
    /// One action's type: `i32` or `f32[n]`.
    pub fn ty(&self) -> Ty {
        array_ty(&self.array_ty())
    }
}

/// What the checker learned about an environment.
pub struct EnvInfo {
    pub name: String,
    pub observation: Ty,
    pub action: ActionSpace,
    pub time_limit: Option<u64>,
    pub state: Ty,
    /// `[H, W]` of the frames of `render(s) -> f32[H, W, 3]`, if the env defines it.
    pub frame: Option<[usize; 2]>,
}

/// The functions derived from an environment, ready to compile.
pub struct EnvFuncs {
    pub info: EnvInfo,
    /// `(key: u32[2]) -> (state.., t: i32, obs)`.
    pub reset: Func,
    /// `(state.., t: i32, action, key: u32[2]) -> (state.., t, obs, reward: f32,
    /// terminated: bool, truncated: bool, final_obs)`.
    pub step: Func,
    /// The env's own `step` then `observe`, with no time limit and no reset, for checking
    /// an env against its reference from injected states and keys:
    /// `(state.., action, key: u32[2]) -> (state.., obs, reward, terminated, truncated)`.
    pub raw_step: Func,
    /// `(state..) -> f32[H, W, 3]`: the env's `render`, if it has one.
    pub render: Option<Func>,
}

impl EnvFuncs {
    /// How many arrays the env's state has: `step` takes them, then `t`, the action and
    /// the key.
    pub fn state_len(&self) -> usize {
        self.step.graph.params.len() - 3
    }
}

/// The env functions that may be left out.
const OPTIONAL: [&str; 2] = ["auto_reset", "render"];

/// `[H, W]` of a frame type, `f32[H, W, 3]` with known sizes.
fn frame_size(t: &Ty) -> Option<[usize; 2]> {
    match t {
        Ty::Array(DType::F32, d) => match d[..] {
            [Dim::Known(h), Dim::Known(w), Dim::Known(3)] if h > 0 && w > 0 => Some([h as usize, w as usize]),
            _ => None,
        },
        _ => None,
    }
}

/// The expected signature of each env function, given the state, observation and action types.
fn signature(name: &str, state: &str, obs: &str, action: &str) -> Option<String> {
    match name {
        "reset" => Some("fn reset(key: Key) -> S".to_string()),
        "step" => Some(format!("fn step(s: {state}, a: {action}, key: Key) -> Step<{state}>")),
        "observe" => Some(format!("fn observe(s: {state}) -> {obs}")),
        "auto_reset" => Some(format!("fn auto_reset(s: {state}, key: Key) -> {state}")),
        "render" => Some(format!("fn render(s: {state}) -> f32[H, W, 3]")),
        _ => None,
    }
}

impl Elab<'_> {
    /// Checks an `env`: its members, and that its functions exist with the right types.
    pub(crate) fn check_env(&mut self, e: &ast::Env) -> Option<EnvInfo> {
        let mut seen: HashMap<&str, Span> = HashMap::new();
        let (mut observation, mut action, mut time_limit) = (None, None, None);
        for m in &e.members {
            if let Some(first) = seen.insert(&m.name.name, m.name.span) {
                self.err(TypeError::Duplicate { name: m.name.name.clone(), span: m.name.span, first });
                continue;
            }
            match (m.name.name.as_str(), &m.spec) {
                ("observation", EnvSpec::Type(t)) => observation = Some(self.resolve_ty(t)),
                ("action", EnvSpec::Space { kind, args, span }) => action = self.action_space(kind, args, *span),
                ("time_limit", EnvSpec::Int(n, _)) if *n > 0 => time_limit = Some(*n),
                ("time_limit", EnvSpec::Type(ast::Type { kind: TypeKind::Named { name, args }, span }))
                    if args.is_empty() =>
                {
                    // A member's bare name parses as a type; here it names a const.
                    let e = ast::Expr { kind: ExprKind::Name(name.clone()), span: *span };
                    match self.static_dim(&e, "a time limit") {
                        Some(Dim::Known(n)) if n > 0 => time_limit = Some(n),
                        Some(_) => {
                            self.err(TypeError::EnvMember {
                                detail: "`time_limit` needs N ≥ 1".into(), span: m.span
                            });
                        }
                        None => {}
                    }
                }
                (name @ ("observation" | "action" | "time_limit"), _) => {
                    let detail = match name {
                        "observation" => "`observation` is a type, e.g. `f32[4]`",
                        "action" => "`action` is a space, e.g. `discrete(3)` or `box(2)`",
                        _ => "`time_limit` is a number of steps, e.g. `500` or a const",
                    };
                    self.err(TypeError::EnvMember { detail: detail.into(), span: m.span });
                }
                (other, _) => {
                    let detail = format!("`{other}` is not an env member; the members are {MEMBERS}");
                    self.err(TypeError::EnvMember { detail, span: m.name.span });
                }
            }
        }
        if e.external {
            return self.check_extern_env(e, observation, action, time_limit);
        }
        let mut fns: HashMap<&str, &ast::Fn> = HashMap::new();
        for f in &e.fns {
            if let Some(prev) = fns.get(f.name.name.as_str()) {
                self.err(TypeError::Duplicate { name: f.name.name.clone(), span: f.name.span, first: prev.name.span });
                continue;
            }
            if signature(&f.name.name, "S", "OBS", "A").is_none() {
                let detail = format!("`{}` is not an env function; define helpers outside the env", f.name.name);
                self.err(TypeError::EnvMember { detail, span: f.name.span });
            } else if let Some(g) = f.generics.first() {
                let detail = "env functions cannot be generic".to_string();
                self.err(TypeError::EnvMember { detail, span: g.span });
            }
            self.check_fn(f);
            fns.insert(&f.name.name, f);
        }
        let missing: Vec<&str> = ["observation", "action"].into_iter().filter(|m| !seen.contains_key(m)).collect();
        for m in &missing {
            self.err(TypeError::EnvMissing {
                env: format!("env `{}`", e.name.name),
                what: format!("`{m}`"),
                span: e.name.span,
                help: None,
            });
        }
        // The state type is what `reset` returns; the others must agree with it.
        let state = fns.get("reset").map(|f| self.signature_types(f).1);
        let state_s = state.as_ref().map_or_else(|| "S".to_string(), |t| t.to_string());
        let obs_s = observation.as_ref().map_or_else(|| "OBS".to_string(), |t| t.to_string());
        let action_ty = action.as_ref().map_or(Ty::Error, ActionSpace::ty);
        let action_s = action.as_ref().map_or_else(|| "A".to_string(), |a| a.ty().to_string());
        for name in ["reset", "step", "observe"] {
            if !fns.contains_key(name) {
                let help = signature(name, &state_s, &obs_s, &action_s);
                let what = format!("`fn {name}`");
                self.err(TypeError::EnvMissing {
                    env: format!("env `{}`", e.name.name),
                    what,
                    span: e.name.span,
                    help,
                });
            }
        }
        let state = state?;
        let key = super::random::key_ty();
        let step_ty = if state.is_error() { Ty::Error } else { Ty::Struct(self.step_def(state.clone()), vec![]) };
        // A frame is RGB of any fixed height and width: what `render` declares, when that fits.
        let declared_frame = fns.get("render").map(|f| self.signature_types(f).1).and_then(|t| frame_size(&t));
        let frame_ty = |size: Option<[usize; 2]>| {
            let dims = match size {
                Some([h, w]) => [Dim::Known(h as u64), Dim::Known(w as u64)],
                None => [Dim::Param("H".into()), Dim::Param("W".into())],
            };
            Ty::Array(DType::F32, dims.into_iter().chain([Dim::Known(3)]).collect())
        };
        let want: [(&str, Vec<Ty>, Ty); 5] = [
            ("reset", vec![key.clone()], state.clone()),
            ("step", vec![state.clone(), action_ty, key.clone()], step_ty),
            ("observe", vec![state.clone()], observation.clone().unwrap_or(Ty::Error)),
            ("auto_reset", vec![state.clone(), key], state.clone()),
            ("render", vec![state.clone()], frame_ty(declared_frame)),
        ];
        let mut ok = missing.is_empty();
        for (name, params, ret) in want {
            let Some(f) = fns.get(name) else {
                ok &= OPTIONAL.contains(&name);
                continue;
            };
            let (found_params, found_ret) = self.signature_types(f);
            // Point at the first part that is wrong: the parameter list, a parameter, or the result.
            let wrong = if found_params.len() != params.len() {
                Some((f.name.span, format!("expected {} parameters, found {}", params.len(), found_params.len())))
            } else if let Some(((_, t), (want, have))) =
                f.params.iter().zip(params.iter().zip(&found_params)).find(|(_, (w, h))| w != h && !w.is_error())
            {
                Some((t.span, format!("expected `{want}`, found `{have}`")))
            } else {
                (found_ret != ret).then(|| (f.ret.span, format!("expected `{ret}`, found `{found_ret}`")))
            };
            if let Some((span, label)) = wrong {
                ok = false;
                let written: Vec<String> = f
                    .params
                    .iter()
                    .map(|(n, t)| format!("{}: {}", n.name, crate::syntax::print::print_type(t)))
                    .collect();
                let found =
                    format!("fn {name}({}) -> {}", written.join(", "), crate::syntax::print::print_type(&f.ret));
                let expected = signature(name, &state_s, &obs_s, &action_s).unwrap_or_default();
                let (env, func) = (format!("env `{}`", e.name.name), name.to_string());
                self.err(TypeError::EnvSignature { env, func, expected, found, label, span });
            }
        }
        // An invalid action space was reported where it was declared.
        ok.then_some(EnvInfo {
            name: e.name.name.clone(),
            observation: observation.unwrap_or(Ty::Error),
            action: action?,
            time_limit,
            state,
            frame: declared_frame,
        })
    }

    /// An `extern env`: spaces only, no functions (its state lives on the host).
    fn check_extern_env(
        &mut self,
        e: &ast::Env,
        observation: Option<Ty>,
        action: Option<ActionSpace>,
        time_limit: Option<u64>,
    ) -> Option<EnvInfo> {
        for f in &e.fns {
            let detail = "an `extern env` declares spaces only: the host steps it".to_string();
            self.err(TypeError::EnvMember { detail, span: f.name.span });
        }
        for (m, found) in [("observation", observation.is_some()), ("action", action.is_some())] {
            if !found && !e.members.iter().any(|x| x.name.name == m) {
                let (env, what) = (format!("env `{}`", e.name.name), format!("`{m}`"));
                self.err(TypeError::EnvMissing { env, what, span: e.name.span, help: None });
            }
        }
        if !e.fns.is_empty() {
            return None;
        }
        Some(EnvInfo {
            name: e.name.name.clone(),
            observation: observation?,
            action: action?,
            time_limit,
            state: Ty::unit(),
            frame: None,
        })
    }

    /// `discrete(n)`, `box(n)` or `box(n, lo, hi)`, where `lo` and `hi` are `f32` scalars or
    /// `f32[n]`, all known at compile time.
    fn action_space(&mut self, kind: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<ActionSpace> {
        let bad = |cx: &mut Self, detail: &str, span| {
            cx.err(TypeError::EnvMember { detail: detail.into(), span });
            None
        };
        match (kind.name.as_str(), args) {
            ("discrete", [n]) => match self.static_dim(n, "the number of actions")? {
                Dim::Known(n) if n > 0 => Some(ActionSpace::Discrete(n)),
                _ => bad(self, "`discrete(n)` needs n ≥ 1", n.span),
            },
            ("discrete", _) => bad(self, "`discrete` takes one size", span),
            ("box", [n, bounds @ ..]) if matches!(bounds.len(), 0 | 2) => {
                let n = match self.static_dim(n, "the size of an action")? {
                    Dim::Known(n) if n > 0 => n,
                    _ => return bad(self, "`box(n)` needs n ≥ 1", n.span),
                };
                let bounds = match bounds {
                    [lo, hi] => {
                        let (lo, hi) = (self.action_bound(lo, n), self.action_bound(hi, n));
                        let (lo, hi) = (lo?, hi?);
                        if let Some(i) =
                            (0..lo.len()).find(|&i| lo[i].partial_cmp(&hi[i]) != Some(std::cmp::Ordering::Less))
                        {
                            let detail = format!(
                                "the bounds must have lo < hi: component {i} has lo {:?}, hi {:?}",
                                lo[i], hi[i]
                            );
                            self.err(TypeError::EnvMember { detail, span });
                            return None;
                        }
                        Some((lo, hi))
                    }
                    _ => None,
                };
                Some(ActionSpace::Box { n, bounds })
            }
            ("box", _) => bad(self, "`box` takes a size and optionally bounds: `box(n)` or `box(n, lo, hi)`", span),
            (other, _) => {
                let detail =
                    format!("unknown action space `{other}`; the action spaces are `discrete(n)` and `box(n)`");
                bad(self, &detail, kind.span)
            }
        }
    }

    /// A bound of `box(n, lo, hi)`: an `f32` scalar (for every component) or `f32[n]`, known
    /// at compile time; `n` values.
    fn action_bound(&mut self, e: &ast::Expr, n: u64) -> Option<Vec<f32>> {
        let v = self.expr(e);
        let want = match &v.ty {
            Ty::Error => return None,
            Ty::Array(_, d) if d.is_empty() => Ty::scalar(DType::F32),
            _ => Ty::Array(DType::F32, vec![Dim::Known(n)]),
        };
        let v = self.coerce(v, &want, e.span, None);
        match (&v.ty, v.known.map(|a| a.data)) {
            (Ty::Error, _) => None,
            (_, Some(crate::array::Data::F32(x))) if x.len() == 1 => Some(vec![x[0]; n as usize]),
            (_, Some(crate::array::Data::F32(x))) => Some(x),
            _ => {
                let detail =
                    "a bound of `box` must be known at compile time: a literal, a `const`, or an array of them";
                self.err(TypeError::EnvMember { detail: detail.into(), span: e.span });
                None
            }
        }
    }

    /// A non-generic function's parameter and result types.
    pub(super) fn signature_types(&mut self, f: &ast::Fn) -> (Vec<Ty>, Ty) {
        let saved = std::mem::take(&mut self.sizes);
        let params = f.params.iter().map(|(_, t)| self.resolve_ty(t)).collect();
        let ret = self.resolve_ty(&f.ret);
        self.sizes = saved;
        (params, ret)
    }

    /// Calls one of the env's functions on values.
    fn call_env(&mut self, e: &ast::Env, module: usize, name: &str, args: Vec<Val>) -> Val {
        let f = e.fns.iter().find(|f| f.name.name == name).expect("checked: the env has the function");
        let (_, ret) = self.signature_types(f);
        self.inline(f, module, Default::default(), Default::default(), args, &ret)
    }

    /// `if pred { a } else { b }` on values of one type, leaf by leaf.
    fn select(&mut self, pred: &Val, a: Val, b: Val) -> Val {
        let bld = self.b.as_mut().expect("build mode");
        let vars = a
            .vars
            .iter()
            .zip(&b.vars)
            .map(|(&x, &y)| {
                let ty = bld.ty(x).clone();
                super::ops::emit_select(bld, pred.vars[0], x, y, &ty)
            })
            .collect();
        Val::of(a.ty, vars)
    }
}

/// Checks the env named `name` in the root module and derives its functions.
pub fn build_env(prog: &Program, overrides: &[Override], name: &str) -> Result<EnvFuncs, Box<Diag>> {
    let found = prog.modules.first().and_then(|m| m.scope.get(name)).copied();
    let Some((r, e)) = found.and_then(|r| match prog.item(r) {
        ast::Item::Env(e) => Some((r, e)),
        _ => None,
    }) else {
        return Err(Box::new(no_env(prog, name)));
    };
    let info = {
        let mut cx = Elab::new(prog, overrides, None);
        cx.module = r.module;
        cx.check_env(e).ok_or_else(|| Box::new(cx.diags.first().cloned().unwrap_or_else(|| no_env(prog, name))))?
    };
    if e.external {
        return Err(Box::new(TypeError::ExternEnv { name: e.name.name.clone(), span: e.name.span }.into_diag()));
    }
    let reset = derive(prog, overrides, r, e, &info, Derived::Reset)?;
    let step = derive(prog, overrides, r, e, &info, Derived::Step)?;
    let raw_step = derive(prog, overrides, r, e, &info, Derived::RawStep)?;
    let render = match info.frame {
        Some(_) => Some(derive(prog, overrides, r, e, &info, Derived::Render)?),
        None => None,
    };
    Ok(EnvFuncs { info, reset, step, raw_step, render })
}

/// The root module's environments, in order (`podc sim` picks the only one by default).
pub fn env_names(prog: &Program) -> Vec<String> {
    super::root_names(prog, |i| matches!(i, ast::Item::Env(_)))
}

/// The env `name`, else the file's only env; why not, naming `how` to choose one.
pub fn pick_env(prog: &Program, file: &Path, name: Option<&str>, how: &str) -> Result<String, String> {
    let names = env_names(prog);
    match (name, &names[..]) {
        (Some(n), _) => Ok(n.to_string()),
        (None, [only]) => Ok(only.clone()),
        (None, []) => Err(format!("`{}` declares no `env`", file.display())),
        (None, _) => {
            Err(format!("`{}` declares several envs ({}): choose one with {how}", file.display(), names.join(", ")))
        }
    }
}

fn no_env(prog: &Program, name: &str) -> Diag {
    super::no_root_item(prog, "E0301", "env", name)
}

enum Derived {
    Reset,
    Step,
    RawStep,
    Render,
}

fn derive(
    prog: &Program,
    overrides: &[Override],
    r: ItemRef,
    e: &ast::Env,
    info: &EnvInfo,
    which: Derived,
) -> Result<Func, Box<Diag>> {
    let mut cx = Elab::new(prog, overrides, Some(Builder::new()));
    cx.module = r.module;
    cx.scopes.push(HashMap::new());
    let i32_ty = Ty::scalar(DType::I32);
    let zero = |cx: &mut Elab| cx.known_val(Array::i32(vec![], vec![0]), Ty::scalar(DType::I32), false);
    let (params, outs): (Vec<Val>, Vec<Val>) = match which {
        Derived::Reset => {
            let key = cx.param(super::random::key_ty());
            let s = cx.call_env(e, r.module, "reset", vec![key.clone()]);
            let obs = cx.call_env(e, r.module, "observe", vec![s.clone()]);
            let t = zero(&mut cx);
            (vec![key], vec![s, t, obs])
        }
        Derived::RawStep => {
            let s = cx.param(info.state.clone());
            let a = cx.param(info.action.ty());
            let key = cx.param(super::random::key_ty());
            let st = cx.call_env(e, r.module, "step", vec![s.clone(), a.clone(), key.clone()]);
            let mut f = cx.split(&st).into_iter();
            let next = f.next().expect("Step has four fields");
            let obs = cx.call_env(e, r.module, "observe", vec![next.clone()]);
            let mut outs = vec![next, obs];
            outs.extend(f);
            (vec![s, a, key], outs)
        }
        Derived::Render => {
            let s = cx.param(info.state.clone());
            let frame = cx.call_env(e, r.module, "render", vec![s.clone()]);
            (vec![s], vec![frame])
        }
        Derived::Step => {
            let s = cx.param(info.state.clone());
            let t = cx.param(i32_ty.clone());
            let a = cx.param(info.action.ty());
            let key = cx.param(super::random::key_ty());
            let pair = cx.split_pair(&key);
            let [k_step, k_reset]: [Val; 2] = cx.split(&pair).try_into().expect("split gives two keys");
            let st = cx.call_env(e, r.module, "step", vec![s.clone(), a.clone(), k_step]);
            let mut f = cx.split(&st).into_iter();
            let (next, reward, terminated, truncated) = (
                f.next().expect("Step has four fields"),
                f.next().expect("Step has four fields"),
                f.next().expect("Step has four fields"),
                f.next().expect("Step has four fields"),
            );
            let one = cx.known_val(Array::i32(vec![], vec![1]), i32_ty.clone(), false);
            let t1 = cx.apply(Prim::Binary(Binary { op: BinaryOp::Add }), &[&t, &one]);
            let truncated = match info.time_limit {
                Some(n) => {
                    let limit = cx.known_val(Array::i32(vec![], vec![n as i32]), i32_ty.clone(), false);
                    let over = cx.apply(Prim::Compare(Compare { op: CmpOp::Ge }), &[&t1, &limit]);
                    cx.apply(Prim::Binary(Binary { op: BinaryOp::Or }), &[&truncated, &over])
                }
                None => truncated,
            };
            let done = cx.apply(Prim::Binary(Binary { op: BinaryOp::Or }), &[&terminated, &truncated]);
            let final_obs = cx.call_env(e, r.module, "observe", vec![next.clone()]);
            let fresh = match e.fns.iter().any(|f| f.name.name == "auto_reset") {
                true => cx.call_env(e, r.module, "auto_reset", vec![next.clone(), k_reset]),
                false => cx.call_env(e, r.module, "reset", vec![k_reset]),
            };
            let next = cx.select(&done, fresh, next);
            let z = zero(&mut cx);
            let t_next = cx.select(&done, z, t1);
            let obs = cx.call_env(e, r.module, "observe", vec![next.clone()]);
            (vec![s, t, a, key], vec![next, t_next, obs, reward, terminated, truncated, final_obs])
        }
    };
    let params = params.into_iter().flat_map(|v| v.vars).collect();
    let results = outs.into_iter().flat_map(|v| v.vars).collect();
    let name = match which {
        Derived::Reset => format!("{}_reset", info.name),
        Derived::Step => format!("{}_step", info.name),
        Derived::RawStep => format!("{}_raw_step", info.name),
        Derived::Render => format!("{}_render", info.name),
    };
    cx.finish(&name, params, results)
}
