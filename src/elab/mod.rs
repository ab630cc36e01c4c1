//! Elaboration: type checking and IR building in one walk over the syntax tree.
//!
//! The same walker runs in two modes, so that every surface rule (broadcasting, `@`,
//! indexing, the builtins) is written once:
//! - **check** (`b` is `None`): every function is checked once, generic ones with their
//!   size parameters kept symbolic. Calls are typed from the callee's signature alone.
//! - **build** (`b` is `Some`): starting from a non-generic entry point, every call is
//!   monomorphised and inlined, dimensions are all known, and each operation appends
//!   primitives to the [`Builder`]. Build runs only on programs that checked cleanly.
//!
//! A value is a [`Val`]: its surface type and, in build mode, the IR variables of its
//! flattened leaves.

pub mod agent;
mod builtins;
mod calls;
mod collective;
mod control;
mod conv;
pub mod env;
mod expr;
mod grad;
mod items;
mod leafwise;
mod ops;
mod random;
mod sort;
mod vmap;

pub(crate) use ops::array_ty;

use crate::array::{Array, DType};
use crate::diag::Diag;
use crate::ir::build::Builder;
use crate::ir::{Func, Var};
use crate::overrides::Override;
use crate::prims::{Constant, Convert, Prim};
use crate::resolve::{ItemRef, Program};
use crate::syntax::ast::{self, ExprKind};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::{Dim, Origin, StructDef, Subst, Ty, Written};

/// A binding of type parameters.
pub(crate) type TypeSubst = HashMap<Rc<str>, Ty>;
use std::collections::HashMap;
use std::rc::Rc;

/// The built-in record an environment's `step` returns.
pub(crate) const STEP: &str = "Step";

/// A value during elaboration.
#[derive(Clone, Debug)]
pub struct Val {
    pub ty: Ty,
    /// The IR variables of the flattened leaves (build mode only).
    pub vars: Vec<Var>,
    /// A numeric literal (or an expression of literals) whose dtype adapts to the other
    /// operand, as JAX's weakly typed Python scalars do: `x * 2` with `x: f32`.
    pub weak: bool,
    /// The value, when it is known at compile time (literals, consts, size parameters).
    pub known: Option<Array>,
}

impl Val {
    fn error() -> Val {
        Val { ty: Ty::Error, vars: vec![], weak: false, known: None }
    }

    pub(crate) fn of(ty: Ty, vars: Vec<Var>) -> Val {
        Val { ty, vars, weak: false, known: None }
    }
}

/// Checks every function of every module; returns all diagnostics.
pub fn check(prog: &Program, overrides: &[Override]) -> Vec<Diag> {
    let mut cx = Elab::new(prog, overrides, None);
    for (m, module) in prog.modules.iter().enumerate() {
        for (index, item) in module.ast.items.iter().enumerate() {
            let r = ItemRef { module: m, index };
            cx.module = m;
            // Calls are recorded against the function or env whose body makes them.
            cx.current = matches!(item, ast::Item::Fn(_) | ast::Item::Env(_) | ast::Item::Agent(_)).then_some(r);
            match item {
                ast::Item::Fn(f) => cx.check_fn(f),
                // A struct with type parameters is checked per instance, where it is used.
                ast::Item::Struct(s) if !cx.struct_kinds(r).contains(&true) => {
                    cx.struct_def(r, s, &[]);
                }
                ast::Item::Struct(_) => {}
                ast::Item::Const(c) => {
                    cx.const_val(r, c);
                }
                ast::Item::Env(e) => {
                    cx.check_env(e);
                }
                ast::Item::Agent(a) => {
                    cx.check_agent(a);
                }
            }
        }
    }
    cx.report_recursion();
    // A signature is resolved wherever it is used (an env's functions are checked, then
    // matched against the interface), so the same error can come twice: report it once.
    let mut seen = std::collections::HashSet::new();
    cx.diags.retain(|d| seen.insert((d.code, d.primary.0, d.message.clone())));
    cx.diags
}

/// Builds the IR of an entry function of a program that checked cleanly.
pub fn build(prog: &Program, overrides: &[Override], entry: &str) -> Result<(Func, Vec<Ty>, Ty), Box<Diag>> {
    let r = prog.root_fn(entry).ok_or_else(|| {
        let items = prog.modules.first().map_or(&[][..], |m| &m.ast.items[..]);
        // A file of agents is trained and evaluated, not run: say how, at its first agent.
        let agent = items.iter().find(|i| matches!(i, ast::Item::Agent(_)));
        let span = agent.or(items.first()).map(|i| crate::resolve::item_name(i).span);
        let d = Diag::new(
            "E0223",
            format!("no function `{entry}` in the root module"),
            span.unwrap_or_default(),
            "expected an entry point",
        );
        match agent {
            Some(a) => d.with_help(format!(
                "`{}` is an agent: train it with `podc train`, evaluate a trained one with `podc eval FILE --checkpoint RUN_DIR`; or choose a function with `--entry NAME`",
                crate::resolve::item_name(a).name
            )),
            None => d.with_help("choose one with `--entry NAME`"),
        }
    });
    let r = r.map_err(Box::new)?;
    let ast::Item::Fn(f) = prog.item(r) else { unreachable!("root_fn returns functions") };
    if let Some(g) = f.generics.first() {
        let detail = format!("an entry point cannot be generic over `{}`", g.name);
        return Err(Box::new(TypeError::Entry { detail, span: g.span }.into_diag()));
    }
    let mut cx = Elab::new(prog, overrides, Some(Builder::new()));
    cx.module = r.module;
    let mut params = vec![];
    let mut param_tys = vec![];
    cx.scopes.push(HashMap::new());
    for (name, ty) in &f.params {
        let ty = cx.resolve_ty(ty);
        let leaves = ty.leaves().ok_or_else(|| {
            Box::new(
                TypeError::Entry { detail: "the parameter's type must have known sizes".into(), span: name.span }
                    .into_diag(),
            )
        })?;
        let b = cx.b.as_mut().expect("build mode");
        let vars: Vec<Var> = leaves.into_iter().map(|t| b.fresh(t)).collect();
        params.extend(vars.iter().copied());
        cx.bind_name(&name.name, Val::of(ty.clone(), vars));
        param_tys.push(ty);
    }
    let ret = cx.resolve_ty(&f.ret);
    let v = cx.expr_expect(&f.body_expr(), &ret);
    Ok((cx.finish(entry, params, v.vars)?, param_tys, ret))
}

impl ast::Fn {
    /// The body as an expression (a block).
    fn body_expr(&self) -> ast::Expr {
        ast::Expr { kind: ExprKind::Block(self.body.clone()), span: self.body.span }
    }
}

pub(crate) struct Elab<'p> {
    prog: &'p Program,
    /// This run's values for consts of the root module (`--set`).
    overrides: &'p [Override],
    pub(crate) b: Option<Builder>,
    pub(crate) diags: Vec<Diag>,
    module: usize,
    scopes: Vec<HashMap<String, Val>>,
    /// Size parameters in scope: symbolic while checking, known while building.
    sizes: Subst,
    /// Type parameters in scope, always bound: generic functions are checked per use.
    types: TypeSubst,
    structs: HashMap<ItemRef, Rc<StructDef>>,
    /// Instances of structs with type parameters, by their type arguments.
    instances: Vec<(ItemRef, Vec<Ty>, Rc<StructDef>)>,
    /// Which generics of each struct are type parameters.
    kinds: HashMap<ItemRef, Vec<bool>>,
    /// The observation type inside an agent, where `Trajectory<T, B>` is defined.
    trajectory: Option<Ty>,
    consts: HashMap<ItemRef, Val>,
    /// Functions being inlined (build mode), to stop at recursion; by identity, since an
    /// env's functions are not items of their own.
    stack: Vec<*const ast::Fn>,
    /// The function being checked, and every call seen while checking (caller, callee,
    /// call site): calls are inlined, so a cycle among them is an error.
    current: Option<ItemRef>,
    calls: Vec<(ItemRef, ItemRef, Span)>,
}

impl<'p> Elab<'p> {
    fn new(prog: &'p Program, overrides: &'p [Override], b: Option<Builder>) -> Elab<'p> {
        Elab {
            prog,
            overrides,
            b,
            diags: vec![],
            module: 0,
            scopes: vec![],
            sizes: Subst::new(),
            types: TypeSubst::new(),
            trajectory: None,
            structs: HashMap::new(),
            instances: vec![],
            kinds: HashMap::new(),
            consts: HashMap::new(),
            stack: vec![],
            current: None,
            calls: vec![],
        }
    }

    /// An elaborator that only builds, for the programs that `programs` puts together
    /// from built functions and the builtins' cores.
    pub(crate) fn building_only(prog: &'p Program) -> Elab<'p> {
        Elab::new(prog, &[], Some(Builder::new()))
    }

    /// Reports one call site on each cycle of the call graph.
    fn report_recursion(&mut self) {
        let calls = std::mem::take(&mut self.calls);
        let reaches = |from: ItemRef, to: ItemRef| {
            let mut seen = vec![from];
            let mut todo = vec![from];
            while let Some(f) = todo.pop() {
                for &(a, b, _) in &calls {
                    if a == f && !seen.contains(&b) {
                        seen.push(b);
                        todo.push(b);
                    }
                }
            }
            seen.contains(&to)
        };
        let mut reported = vec![];
        for &(caller, callee, span) in &calls {
            if !reported.contains(&caller) && reaches(callee, caller) {
                reported.push(caller);
                let ast::Item::Fn(f) = self.prog.item(callee) else { continue };
                self.err(TypeError::Recursive { name: f.name.name.clone(), span });
            }
        }
    }

    /// The function built, or the first error met while building it. A program that
    /// checked cleanly can still fail here (a derivative through `argmax`), and no error
    /// may be dropped: the values after it are incomplete.
    pub(crate) fn finish(mut self, name: &str, params: Vec<Var>, results: Vec<Var>) -> Result<Func, Box<Diag>> {
        if let Some(d) = self.diags.into_iter().next() {
            return Err(Box::new(d));
        }
        Ok(self.b.take().expect("build mode").finish(name, params, results))
    }

    /// [`Elab::finish`] for the programs the drivers put together from built functions
    /// and builtins, where an error is the compiler's own.
    pub(crate) fn finish_internal(self, name: &str, params: Vec<Var>, results: Vec<Var>) -> Func {
        self.finish(name, params, results)
            .unwrap_or_else(|d| panic!("internal compiler error: building `{name}`: {}", d.message))
    }

    /// Whether `name` was imported by a `use` that failed (reported there): using it is an
    /// error with no diagnostic of its own.
    fn unresolved(&self, name: &str) -> bool {
        self.prog.modules[self.module].unresolved.contains(name)
    }

    pub(crate) fn err(&mut self, e: TypeError) -> Val {
        self.diags.push(e.into_diag());
        Val::error()
    }

    fn building(&self) -> bool {
        self.b.is_some()
    }

    // ---------------------------------------------------------------- scopes

    fn lookup_local(&self, name: &str) -> Option<&Val> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn bind_name(&mut self, name: &str, v: Val) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(name.to_string(), v);
        }
    }

    /// Binds a pattern, splitting tuples into their elements.
    fn bind(&mut self, pat: &ast::Pat, v: Val) {
        match pat {
            ast::Pat::Name(id) => self.bind_name(&id.name, v),
            ast::Pat::Wild(_) => {}
            ast::Pat::Tuple(pats, span) => match &v.ty {
                Ty::Tuple(ts) if ts.len() == pats.len() => {
                    for (p, part) in pats.iter().zip(self.split(&v)) {
                        self.bind(p, part);
                    }
                }
                Ty::Error => {
                    for p in pats {
                        self.bind(p, Val::error());
                    }
                }
                Ty::Tuple(ts) => {
                    let detail = format!("expected a {}-tuple, found {} pattern elements", ts.len(), pats.len());
                    self.err(TypeError::PatternMismatch { ty: v.ty.clone(), span: *span, detail });
                    for p in pats {
                        self.bind(p, Val::error());
                    }
                }
                _ => {
                    self.err(TypeError::PatternMismatch {
                        ty: v.ty.clone(),
                        span: *span,
                        detail: "not a tuple".into(),
                    });
                    for p in pats {
                        self.bind(p, Val::error());
                    }
                }
            },
        }
    }

    /// The components of a tuple or struct value.
    pub(crate) fn split(&self, v: &Val) -> Vec<Val> {
        let parts: Vec<Ty> = match &v.ty {
            Ty::Tuple(ts) => ts.clone(),
            Ty::Struct(def, args) => Ty::struct_fields(def, args).into_iter().map(|(_, t)| t).collect(),
            Ty::Array(..) | Ty::Error => return vec![v.clone()],
        };
        let mut at = 0;
        parts
            .into_iter()
            .map(|t| {
                let n = if self.building() { leaf_count(&t) } else { 0 };
                let vars = v.vars.get(at..at + n).map(<[Var]>::to_vec).unwrap_or_default();
                at += n;
                Val::of(t, vars)
            })
            .collect()
    }
}

/// The names of the root module's items that `pick` selects, in order.
pub(crate) fn root_names(prog: &Program, pick: impl Fn(&ast::Item) -> bool) -> Vec<String> {
    let Some(m) = prog.modules.first() else { return vec![] };
    m.ast.items.iter().filter(|i| pick(i)).map(|i| crate::resolve::item_name(i).name.clone()).collect()
}

/// "no env `X` in the root module", at the root module's first item.
pub(crate) fn no_root_item(prog: &Program, code: &'static str, what: &str, name: &str) -> Diag {
    let span = prog.modules.first().and_then(|m| m.ast.items.first()).map(|i| crate::resolve::item_name(i).span);
    let message = format!("no {what} `{name}` in the root module");
    Diag::new(code, message, span.unwrap_or_default(), format!("expected an {what} here"))
}

/// How many arrays a type flattens to.
pub(crate) fn leaf_count(t: &Ty) -> usize {
    match t {
        Ty::Array(..) => 1,
        Ty::Tuple(ts) => ts.iter().map(leaf_count).sum(),
        Ty::Struct(def, args) => Ty::struct_fields(def, args).iter().map(|(_, t)| leaf_count(t)).sum(),
        Ty::Error => 0,
    }
}
