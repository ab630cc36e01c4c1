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

mod builtins;
pub mod env;
mod ops;
mod random;
mod vmap;

use crate::array::{Array, DType};
use crate::diag::Diag;
use crate::ir::build::Builder;
use crate::ir::{Func, Var};
use crate::prims::{Constant, Convert, Prim};
use crate::resolve::{ItemRef, Program};
use crate::syntax::ast::{self, ExprKind};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::{Dim, StructDef, Subst, Ty};
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

    fn of(ty: Ty, vars: Vec<Var>) -> Val {
        Val { ty, vars, weak: false, known: None }
    }
}

/// Checks every function of every module; returns all diagnostics.
pub fn check(prog: &Program) -> Vec<Diag> {
    let mut cx = Elab::new(prog, None);
    for (m, module) in prog.modules.iter().enumerate() {
        for (index, item) in module.ast.items.iter().enumerate() {
            let r = ItemRef { module: m, index };
            cx.module = m;
            // Calls are recorded against the function or env whose body makes them.
            cx.current = matches!(item, ast::Item::Fn(_) | ast::Item::Env(_)).then_some(r);
            match item {
                ast::Item::Fn(f) => cx.check_fn(f),
                ast::Item::Struct(s) => {
                    cx.struct_def(r, s);
                }
                ast::Item::Const(c) => {
                    cx.const_val(r, c);
                }
                ast::Item::Env(e) => {
                    cx.check_env(e);
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
pub fn build(prog: &Program, entry: &str) -> Result<(Func, Vec<Ty>, Ty), Box<Diag>> {
    let r = prog.root_fn(entry).ok_or_else(|| {
        let span = prog.modules.first().and_then(|m| m.ast.items.first()).map(|i| crate::resolve::item_name(i).span);
        Diag::new(
            "E0223",
            format!("no function `{entry}` in the root module"),
            span.unwrap_or_default(),
            "expected an entry point",
        )
        .with_help("choose one with `--entry NAME`")
    });
    let r = r.map_err(Box::new)?;
    let ast::Item::Fn(f) = prog.item(r) else { unreachable!("root_fn returns functions") };
    if let Some(g) = f.generics.first() {
        let detail = format!("an entry point cannot be generic over `{}`", g.name);
        return Err(Box::new(TypeError::Entry { detail, span: g.span }.into_diag()));
    }
    let mut cx = Elab::new(prog, Some(Builder::new()));
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
    if let Some(d) = cx.diags.into_iter().next() {
        return Err(Box::new(d));
    }
    let b = cx.b.take().expect("build mode");
    Ok((b.finish(entry, params, v.vars), param_tys, ret))
}

impl ast::Fn {
    /// The body as an expression (a block).
    fn body_expr(&self) -> ast::Expr {
        ast::Expr { kind: ExprKind::Block(self.body.clone()), span: self.body.span }
    }
}

pub(crate) struct Elab<'p> {
    prog: &'p Program,
    pub(crate) b: Option<Builder>,
    pub(crate) diags: Vec<Diag>,
    module: usize,
    scopes: Vec<HashMap<String, Val>>,
    /// Size parameters in scope: symbolic while checking, known while building.
    sizes: Subst,
    structs: HashMap<ItemRef, Rc<StructDef>>,
    /// Instances of the built-in `Step<S>`, by name.
    steps: HashMap<String, Rc<StructDef>>,
    consts: HashMap<ItemRef, Val>,
    /// Functions being inlined (build mode), to stop at recursion.
    stack: Vec<ItemRef>,
    /// The function being checked, and every call seen while checking (caller, callee,
    /// call site): calls are inlined, so a cycle among them is an error.
    current: Option<ItemRef>,
    calls: Vec<(ItemRef, ItemRef, Span)>,
}

impl<'p> Elab<'p> {
    fn new(prog: &'p Program, b: Option<Builder>) -> Elab<'p> {
        Elab {
            prog,
            b,
            diags: vec![],
            module: 0,
            scopes: vec![],
            sizes: Subst::new(),
            structs: HashMap::new(),
            steps: HashMap::new(),
            consts: HashMap::new(),
            stack: vec![],
            current: None,
            calls: vec![],
        }
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

    pub(crate) fn err(&mut self, e: TypeError) -> Val {
        self.diags.push(e.into_diag());
        Val::error()
    }

    fn building(&self) -> bool {
        self.b.is_some()
    }

    // ---------------------------------------------------------------- items

    fn check_fn(&mut self, f: &ast::Fn) {
        self.sizes =
            f.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect();
        self.scopes = vec![HashMap::new()];
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for (name, ty) in &f.params {
            if let Some(first) = seen.insert(&name.name, name.span) {
                self.err(TypeError::Duplicate { name: name.name.clone(), span: name.span, first });
            }
            let ty = self.resolve_ty(ty);
            self.bind_name(&name.name, Val::of(ty, vec![]));
        }
        let ret = self.resolve_ty(&f.ret);
        self.expr_expect(&f.body_expr(), &ret);
        self.scopes.clear();
        self.sizes.clear();
    }

    fn struct_def(&mut self, r: ItemRef, s: &ast::Struct) -> Rc<StructDef> {
        if let Some(d) = self.structs.get(&r) {
            return d.clone();
        }
        let saved = (std::mem::replace(&mut self.module, r.module), std::mem::take(&mut self.sizes));
        self.sizes =
            s.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect();
        let mut fields: Vec<(String, Ty)> = vec![];
        for (n, t) in &s.fields {
            if let Some(first) =
                s.fields.iter().find(|(m, _)| m.name == n.name).map(|(m, _)| m.span).filter(|sp| *sp != n.span)
                && !fields.iter().any(|(f, _)| *f == n.name)
            {
                self.err(TypeError::Duplicate { name: n.name.clone(), span: n.span, first });
            }
            let ty = self.resolve_ty(t);
            fields.push((n.name.clone(), ty));
        }
        (self.module, self.sizes) = saved;
        let def = Rc::new(StructDef {
            name: s.name.name.clone(),
            generics: s.generics.iter().map(|g| Rc::from(g.name.as_str())).collect(),
            fields,
        });
        self.structs.insert(r, def.clone());
        def
    }

    /// The built-in record `Step<S>` that an environment's `step` returns: one definition
    /// per state type, so that equal types share it.
    fn step_def(&mut self, state: Ty) -> Rc<StructDef> {
        let name = format!("{STEP}<{state}>");
        if let Some(d) = self.steps.get(&name) {
            return d.clone();
        }
        let fields = vec![
            ("state".to_string(), state),
            ("reward".to_string(), Ty::scalar(DType::F32)),
            ("terminated".to_string(), Ty::scalar(DType::Bool)),
            ("truncated".to_string(), Ty::scalar(DType::Bool)),
        ];
        let def = Rc::new(StructDef { name: name.clone(), generics: vec![], fields });
        self.steps.insert(name, def.clone());
        def
    }

    /// A const's value, evaluated once; consts must be compile-time scalars.
    fn const_val(&mut self, r: ItemRef, c: &ast::Const) -> Val {
        if let Some(v) = self.consts.get(&r) {
            return self.rematerialize(v.clone());
        }
        // Mark it in progress, so that a const defined by itself is an error, not a loop.
        self.consts.insert(r, Val::error());
        let saved = (
            std::mem::replace(&mut self.module, r.module),
            std::mem::take(&mut self.scopes),
            std::mem::take(&mut self.sizes),
        );
        let ty = self.resolve_ty(&c.ty);
        let v = self.expr_expect(&c.value, &ty);
        let v = if v.known.is_none() && !v.ty.is_error() {
            self.err(TypeError::NotStatic { what: "a `const` value".into(), span: c.value.span })
        } else {
            v
        };
        (self.module, self.scopes, self.sizes) = saved;
        self.consts.insert(r, Val { vars: vec![], ..v.clone() });
        self.rematerialize(v)
    }

    /// A known value's constant in the current graph (values of consts are cached
    /// across functions, their IR variables are not).
    fn rematerialize(&mut self, v: Val) -> Val {
        match (&v.known, self.b.as_mut()) {
            (Some(a), Some(b)) => Val { vars: vec![b.prim1(Prim::Constant(Constant { value: a.clone() }), &[])], ..v },
            _ => v,
        }
    }

    // ---------------------------------------------------------------- types

    pub(crate) fn resolve_ty(&mut self, t: &ast::Type) -> Ty {
        match &t.kind {
            ast::TypeKind::Array { dtype, dims } => {
                let Some(d) = DType::from_name(&dtype.name) else {
                    self.err(TypeError::UnknownType { name: dtype.name.clone(), span: dtype.span });
                    return Ty::Error;
                };
                let dims: Option<Vec<Dim>> = dims.iter().map(|x| self.resolve_dim(x)).collect();
                dims.map(|dims| Ty::Array(d, dims)).unwrap_or(Ty::Error)
            }
            ast::TypeKind::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| self.resolve_ty(t)).collect()),
            ast::TypeKind::Named { name, args } => {
                let item = self.prog.modules[self.module].scope.get(&name.name).copied();
                if item.is_none() && name.name == "Key" && args.is_empty() {
                    return random::key_ty();
                }
                if let (None, STEP, [ast::DimExpr::Name(state)]) = (item, name.name.as_str(), &args[..]) {
                    let span = state.span;
                    let kind = match DType::from_name(&state.name) {
                        Some(_) => ast::TypeKind::Array { dtype: state.clone(), dims: vec![] },
                        None => ast::TypeKind::Named { name: state.clone(), args: vec![] },
                    };
                    let state = self.resolve_ty(&ast::Type { kind, span });
                    return if state.is_error() { state } else { Ty::Struct(self.step_def(state), vec![]) };
                }
                let Some(r) = item.filter(|r| matches!(self.prog.item(*r), ast::Item::Struct(_))) else {
                    self.err(TypeError::UnknownType { name: name.name.clone(), span: name.span });
                    return Ty::Error;
                };
                let ast::Item::Struct(s) = self.prog.item(r) else { unreachable!("filtered to structs") };
                let def = self.struct_def(r, s);
                if def.generics.len() != args.len() {
                    self.err(TypeError::Arity {
                        what: format!("struct `{}`", def.name),
                        expected: def.generics.len(),
                        found: args.len(),
                        span: t.span,
                        decl: Some(s.name.span),
                    });
                    return Ty::Error;
                }
                let dims: Option<Vec<Dim>> = args.iter().map(|x| self.resolve_dim(x)).collect();
                dims.map(|dims| Ty::Struct(def, dims)).unwrap_or(Ty::Error)
            }
        }
    }

    fn resolve_dim(&mut self, d: &ast::DimExpr) -> Option<Dim> {
        match d {
            ast::DimExpr::Lit(n, _) => Some(Dim::Known(*n)),
            ast::DimExpr::Name(id) => {
                let e = ast::Expr { kind: ExprKind::Name(id.clone()), span: id.span };
                self.static_dim(&e, "an array dimension")
            }
        }
    }

    /// A size known at compile time: a literal, a const, a size parameter, or `+ - *`
    /// of known sizes.
    pub(crate) fn static_dim(&mut self, e: &ast::Expr, what: &str) -> Option<Dim> {
        match self.static_int(e) {
            Ok(d) => Some(d),
            Err(true) => None,
            Err(false) => {
                self.err(TypeError::NotStatic { what: what.into(), span: e.span });
                None
            }
        }
    }

    /// `Err(true)` when an error was already reported, `Err(false)` when not static.
    fn static_int(&mut self, e: &ast::Expr) -> Result<Dim, bool> {
        match &e.kind {
            ExprKind::Int(n) => Ok(Dim::Known(*n)),
            ExprKind::Name(id) if self.lookup_local(&id.name).is_none() => {
                if let Some(d) = self.sizes.get(id.name.as_str()) {
                    return Ok(d.clone());
                }
                let v = self.expr(e);
                match (&v.ty, &v.known) {
                    (Ty::Error, _) => Err(true),
                    (_, Some(a)) => match &a.data {
                        crate::array::Data::I32(x) if a.shape.is_empty() && x[0] >= 0 => Ok(Dim::Known(x[0] as u64)),
                        _ => Err(false),
                    },
                    _ => Err(false),
                }
            }
            ExprKind::Binary(op @ (ast::BinOp::Add | ast::BinOp::Sub | ast::BinOp::Mul), l, r) => {
                match (self.static_int(l)?, self.static_int(r)?) {
                    (Dim::Known(a), Dim::Known(b)) => match op {
                        ast::BinOp::Add => Ok(Dim::Known(a + b)),
                        ast::BinOp::Sub => a.checked_sub(b).map(Dim::Known).ok_or(false),
                        _ => Ok(Dim::Known(a * b)),
                    },
                    _ => Err(false),
                }
            }
            _ => Err(false),
        }
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

    // ---------------------------------------------------------------- expressions

    /// Elaborates `e` where a value of type `expected` is needed (a `let` annotation, a
    /// return type, an argument): weak literals adapt, and a mismatch is reported.
    pub(crate) fn expr_expect(&mut self, e: &ast::Expr, expected: &Ty) -> Val {
        let v = self.expr_with(e, Some(expected));
        self.coerce(v, expected, tail_span(e), None)
    }

    pub(crate) fn coerce(&mut self, v: Val, expected: &Ty, span: Span, because: Option<(Span, String)>) -> Val {
        // A value that meets an expected type takes it on, and is no longer weak.
        if v.ty == *expected {
            return Val { ty: if v.ty.is_error() { expected.clone() } else { v.ty }, weak: false, ..v };
        }
        if let (true, Ty::Array(want, wd), Ty::Array(have, hd)) = (v.weak, expected, &v.ty)
            && wd == hd
            && (want.is_float() || !have.is_float())
        {
            return Val { weak: false, ..self.convert(v, *want, span) };
        }
        self.err(TypeError::Mismatch { expected: expected.clone(), found: v.ty, span, because })
    }

    /// Converts an array value to another dtype (weak values keep being weak).
    pub(crate) fn convert(&mut self, v: Val, to: DType, span: Span) -> Val {
        let Ty::Array(from, dims) = &v.ty else { return v };
        if *from == to {
            return v;
        }
        let ty = Ty::Array(to, dims.clone());
        if let Some(a) = &v.known {
            return match ops::cast_known(a, to) {
                Some(a) => self.known_val(a, ty, v.weak),
                None => self.err(TypeError::LiteralRange { value: ops::show_known(a), ty: to.name().into(), span }),
            };
        }
        let vars = match self.b.as_mut() {
            Some(b) => vec![b.prim1(Prim::Convert(Convert { to }), &v.vars)],
            None => vec![],
        };
        Val { ty, vars, weak: v.weak, known: None }
    }

    /// A value known at compile time, materialised as a constant when building.
    pub(crate) fn known_val(&mut self, a: Array, ty: Ty, weak: bool) -> Val {
        let vars = match self.b.as_mut() {
            Some(b) => vec![b.prim1(Prim::Constant(Constant { value: a.clone() }), &[])],
            None => vec![],
        };
        Val { ty, vars, weak, known: Some(a) }
    }

    pub(crate) fn expr(&mut self, e: &ast::Expr) -> Val {
        self.expr_with(e, None)
    }

    fn expr_with(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Val {
        match &e.kind {
            ExprKind::Int(n) => match i32::try_from(*n) {
                Ok(x) => self.known_val(Array::i32(vec![], vec![x]), Ty::scalar(DType::I32), true),
                // Too big for i32: it may still fit a u32 or an f32 where one is expected.
                Err(_) => match expected {
                    Some(Ty::Array(DType::U32, d)) if d.is_empty() && *n <= u32::MAX as u64 => self.known_val(
                        Array::new(vec![], crate::array::Data::U32(vec![*n as u32])),
                        Ty::scalar(DType::U32),
                        false,
                    ),
                    _ => self.err(TypeError::LiteralRange { value: n.to_string(), ty: "i32".into(), span: e.span }),
                },
            },
            ExprKind::Float(x) => self.known_val(Array::f32(vec![], vec![*x as f32]), Ty::scalar(DType::F32), true),
            ExprKind::Bool(x) => {
                let a = Array::new(vec![], crate::array::Data::Bool(vec![*x]));
                self.known_val(a, Ty::scalar(DType::Bool), false)
            }
            ExprKind::Name(id) => self.name(id),
            ExprKind::Array(elems) => self.array_lit(elems, e.span),
            ExprKind::Tuple(elems) => {
                let vals: Vec<Val> = elems.iter().map(|x| self.expr(x)).collect();
                let ty = Ty::Tuple(vals.iter().map(|v| v.ty.clone()).collect());
                Val::of(ty, vals.into_iter().flat_map(|v| v.vars).collect())
            }
            ExprKind::Struct { name, fields } => self.struct_lit(name, fields, e.span),
            ExprKind::Field(recv, field) => {
                let v = self.expr(recv);
                self.field(v, field)
            }
            ExprKind::TupleField(recv, index, span) => {
                let v = self.expr(recv);
                match &v.ty {
                    Ty::Tuple(ts) if (*index as usize) < ts.len() => self.split(&v).swap_remove(*index as usize),
                    Ty::Tuple(_) => self.err(TypeError::TupleIndex { ty: v.ty.clone(), index: *index, span: *span }),
                    Ty::Error => v,
                    _ => self.err(TypeError::NotATuple { ty: v.ty.clone(), span: recv.span }),
                }
            }
            ExprKind::Call { func, args } => self.call(func, args, None, e.span, expected),
            ExprKind::Method { receiver, method, args } => self.call(method, args, Some(receiver), e.span, expected),
            ExprKind::Index(x, idx) => self.index(x, idx, e.span),
            ExprKind::Unary(op, x) => self.unary(*op, x, e.span),
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r, e.span),
            ExprKind::Cast(x, dtype) => {
                let v = self.expr(x);
                let Some(to) = DType::from_name(&dtype.name) else {
                    return self.err(TypeError::UnknownType { name: dtype.name.clone(), span: dtype.span });
                };
                match v.ty {
                    Ty::Array(..) => Val { weak: false, ..self.convert(v, to, e.span) },
                    Ty::Error => v,
                    _ => self.err(TypeError::BadOperand {
                        op: "as".into(),
                        ty: v.ty.clone(),
                        span: x.span,
                        expected: "an array".into(),
                    }),
                }
            }
            ExprKind::If { cond, then, else_ } => self.if_(cond, then, else_, expected),
            ExprKind::For { var, lo, hi, carry, init, body } => self.for_(var, lo, hi, carry, init, body),
            ExprKind::Block(b) => self.block(b, expected),
        }
    }

    fn block(&mut self, b: &ast::Block, expected: Option<&Ty>) -> Val {
        self.scopes.push(HashMap::new());
        for s in &b.stmts {
            let v = match &s.ty {
                Some(t) => {
                    let t = self.resolve_ty(t);
                    self.expr_expect(&s.value, &t)
                }
                None => self.expr(&s.value),
            };
            self.bind(&s.pat, v);
        }
        let v = self.expr_with(&b.value, expected);
        self.scopes.pop();
        v
    }

    fn name(&mut self, id: &ast::Ident) -> Val {
        if let Some(v) = self.lookup_local(&id.name) {
            return v.clone();
        }
        if let Some(d) = self.sizes.get(id.name.as_str()).cloned() {
            return match d {
                Dim::Known(n) => self.known_val(Array::i32(vec![], vec![n as i32]), Ty::scalar(DType::I32), true),
                Dim::Param(_) => Val { weak: true, ..Val::of(Ty::scalar(DType::I32), vec![]) },
            };
        }
        match self.prog.modules[self.module].scope.get(&id.name).copied() {
            Some(r) => match self.prog.item(r) {
                ast::Item::Const(c) => self.const_val(r, c),
                ast::Item::Fn(_) | ast::Item::Env(_) => {
                    self.err(TypeError::NotAValue { name: id.name.clone(), span: id.span })
                }
                ast::Item::Struct(_) => {
                    self.err(TypeError::UnknownName { name: id.name.clone(), span: id.span, similar: None })
                }
            },
            None => {
                let similar = self.similar_name(&id.name);
                self.err(TypeError::UnknownName { name: id.name.clone(), span: id.span, similar })
            }
        }
    }

    /// A visible name within edit distance 2, for "did you mean" help.
    fn similar_name(&self, name: &str) -> Option<String> {
        let locals = self.scopes.iter().flat_map(|s| s.keys());
        let items = self.prog.modules[self.module].scope.keys();
        let sizes = self.sizes.keys().map(|k| k.as_ref());
        let builtins = builtins::NAMES.iter().chain(random::NAMES).chain(&["vmap"]).copied();
        locals
            .map(String::as_str)
            .chain(items.map(String::as_str))
            .chain(sizes)
            .chain(builtins)
            .filter(|c| *c != name)
            .map(|c| (edit_distance(c, name), c))
            .filter(|(d, c)| *d <= 2.min(c.len() / 2).max(1))
            .min()
            .map(|(_, c)| c.to_string())
    }

    fn array_lit(&mut self, elems: &[ast::Expr], span: Span) -> Val {
        let vals: Vec<Val> = elems.iter().map(|x| self.expr(x)).collect();
        if vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        let Some(first) = vals.first() else {
            return self.err(TypeError::BadOperand {
                op: "[]".into(),
                ty: Ty::unit(),
                span,
                expected: "at least one element".into(),
            });
        };
        // The element type: the first non-weak one, else f32 if any weak element is.
        let pick =
            vals.iter().find(|v| !v.weak).or_else(|| vals.iter().find(|v| matches!(v.ty, Ty::Array(DType::F32, _))));
        let target = pick.unwrap_or(first).ty.clone();
        let weak = vals.iter().all(|v| v.weak);
        let Ty::Array(dtype, dims) = target.clone() else {
            return self.err(TypeError::BadOperand {
                op: "[]".into(),
                ty: target,
                span: elems[0].span,
                expected: "array elements".into(),
            });
        };
        let mut out = vec![];
        for (v, x) in vals.into_iter().zip(elems) {
            let v = self.coerce(v, &target, x.span, Some((elems[0].span, format!("the first element is `{target}`"))));
            if v.ty.is_error() {
                return v;
            }
            out.push(v);
        }
        let mut shape = vec![Dim::Known(out.len() as u64)];
        shape.extend(dims);
        let ty = Ty::Array(dtype, shape);
        if let Some(known) = out.iter().map(|v| v.known.clone()).collect::<Option<Vec<Array>>>() {
            return Val { weak, ..self.known_val(ops::stack_known(&known), ty, weak) };
        }
        let vars = ops::emit_stack(self.b.as_mut(), &out);
        Val { ty, vars, weak, known: None }
    }

    fn struct_lit(&mut self, name: &ast::Ident, fields: &[(ast::Ident, ast::Expr)], span: Span) -> Val {
        let vals: Vec<Val> = fields.iter().map(|(_, x)| self.expr(x)).collect();
        let item = self.prog.modules[self.module].scope.get(&name.name).copied();
        let def = match item.map(|r| (r, self.prog.item(r))) {
            Some((r, ast::Item::Struct(s))) => self.struct_def(r, s),
            // The built-in `Step<S>` record takes its state type from its `state` field.
            None if name.name == STEP => {
                let state = fields.iter().zip(&vals).find(|((f, _), _)| f.name == "state");
                match state {
                    Some((_, v)) if v.ty.is_error() => return Val::error(),
                    Some((_, v)) => self.step_def(v.ty.clone()),
                    None => {
                        return self.err(TypeError::MissingField { ty: STEP.into(), field: "state".into(), span });
                    }
                }
            }
            _ => return self.err(TypeError::UnknownType { name: name.name.clone(), span: name.span }),
        };
        let mut given: HashMap<&str, (Val, Span)> = HashMap::new();
        for ((f, x), v) in fields.iter().zip(vals) {
            if !def.fields.iter().any(|(n, _)| *n == f.name) {
                let ty = Ty::Struct(def.clone(), def.generics.iter().map(|g| Dim::Param(g.clone())).collect());
                let names = def.fields.iter().map(|(n, _)| n.clone()).collect();
                self.err(TypeError::UnknownField { ty, field: f.name.clone(), span: f.span, fields: names });
            } else if let Some((_, first)) = given.get(f.name.as_str()) {
                let first = *first;
                self.err(TypeError::Duplicate { name: f.name.clone(), span: f.span, first });
            } else {
                given.insert(&f.name, (v, x.span));
            }
        }
        let mut sizes = Subst::new();
        let mut ok = true;
        for (n, t) in &def.fields {
            match given.get(n.as_str()) {
                Some((v, sp)) => ok &= self.unify(t, &v.ty, v.weak, &mut sizes, *sp),
                None => {
                    ok = false;
                    self.err(TypeError::MissingField { ty: def.name.clone(), field: n.clone(), span });
                }
            }
        }
        if !ok {
            return Val::error();
        }
        let mut args = vec![];
        for g in &def.generics {
            match sizes.get(g) {
                Some(d) => args.push(d.clone()),
                None => {
                    return self.err(TypeError::CannotInferSize { param: g.to_string(), func: def.name.clone(), span });
                }
            }
        }
        let mut vars = vec![];
        for (n, t) in Ty::struct_fields(&def, &args) {
            if let Some((v, sp)) = given.remove(n.as_str()) {
                let v = self.coerce(v, &t, sp, None);
                vars.extend(v.vars);
            }
        }
        Val::of(Ty::Struct(def, args), vars)
    }

    fn field(&mut self, v: Val, field: &ast::Ident) -> Val {
        match &v.ty {
            Ty::Struct(def, args) => {
                let fields = Ty::struct_fields(def, args);
                match fields.iter().position(|(n, _)| *n == field.name) {
                    Some(i) => self.split(&v).swap_remove(i),
                    None => {
                        let names = fields.into_iter().map(|(n, _)| n).collect();
                        self.err(TypeError::UnknownField {
                            ty: v.ty.clone(),
                            field: field.name.clone(),
                            span: field.span,
                            fields: names,
                        })
                    }
                }
            }
            Ty::Error => v,
            _ => self.err(TypeError::NotAStruct { ty: v.ty.clone(), field: field.name.clone(), span: field.span }),
        }
    }

    /// Matches a declared type (with the callee's size parameters) against an actual one,
    /// extending `sizes`. Reports and returns false on a mismatch.
    pub(crate) fn unify(&mut self, decl: &Ty, actual: &Ty, weak: bool, sizes: &mut Subst, span: Span) -> bool {
        let mut conflict = None;
        let ok = unify_dims(decl, actual, weak, sizes, &mut conflict);
        if let Some((param, first, second)) = conflict {
            self.err(TypeError::SizeConflict { param, first, second, span });
            return false;
        }
        if !ok {
            self.err(TypeError::Mismatch { expected: decl.subst(sizes), found: actual.clone(), span, because: None });
        }
        ok
    }

    // ---------------------------------------------------------------- calls

    fn call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Expr],
        recv: Option<&ast::Expr>,
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let all: Vec<ast::Expr> = recv.into_iter().cloned().chain(args.iter().cloned()).collect();
        let user = self.prog.modules[self.module].scope.get(&func.name).copied();
        match user.map(|r| (r, self.prog.item(r))) {
            Some((r, ast::Item::Fn(f))) => self.call_user(r, f, func, &all, span, expected),
            Some(_) => {
                for a in &all {
                    self.expr(a);
                }
                self.err(TypeError::BadOperand {
                    op: "call".into(),
                    ty: Ty::Error,
                    span: func.span,
                    expected: "a function".into(),
                })
            }
            None => match self.builtin(func, &all, span, expected) {
                Some(v) => v,
                None => {
                    for a in &all {
                        self.expr(a);
                    }
                    let similar = self.similar_name(&func.name);
                    self.err(TypeError::UnknownName { name: func.name.clone(), span: func.span, similar })
                }
            },
        }
    }

    fn call_user(
        &mut self,
        r: ItemRef,
        f: &ast::Fn,
        name: &ast::Ident,
        args: &[ast::Expr],
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let vals: Vec<Val> = args.iter().map(|a| self.expr(a)).collect();
        if vals.len() != f.params.len() {
            return self.err(TypeError::Arity {
                what: format!("function `{}`", f.name.name),
                expected: f.params.len(),
                found: vals.len(),
                span,
                decl: Some(f.name.span),
            });
        }
        if let Some(caller) = self.current.filter(|_| !self.building()) {
            self.calls.push((caller, r, name.span));
        }
        if self.stack.contains(&r) {
            return self.err(TypeError::Recursive { name: f.name.name.clone(), span: name.span });
        }
        let (params, ret) = self.callee_signature(r, f);

        let mut sizes = Subst::new();
        let mut ok = true;
        for ((p, v), a) in params.iter().zip(&vals).zip(args) {
            ok &= self.unify(p, &v.ty, v.weak, &mut sizes, a.span);
        }
        if !ok || vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        if let Some(exp) = expected {
            let mut trial = sizes.clone();
            if unify_dims(&ret, exp, false, &mut trial, &mut None) {
                sizes = trial;
            }
        }
        for g in &f.generics {
            if !sizes.contains_key(g.name.as_str()) {
                return self.err(TypeError::CannotInferSize {
                    param: g.name.clone(),
                    func: f.name.name.clone(),
                    span: name.span,
                });
            }
        }
        let ret = ret.subst(&sizes);
        if !self.building() {
            return Val::of(ret, vec![]);
        }
        // Build mode: inline the body with the sizes now known.
        let args: Vec<Val> = vals
            .into_iter()
            .zip(&params)
            .zip(args)
            .map(|((v, p), a)| self.coerce(v, &p.subst(&sizes), a.span, None))
            .collect();
        self.stack.push(r);
        let v = self.inline(f, r.module, sizes, args, &ret);
        self.stack.pop();
        v
    }

    /// A function's parameter and result types, resolved in its own module with its size
    /// parameters symbolic.
    pub(crate) fn callee_signature(&mut self, r: ItemRef, f: &ast::Fn) -> (Vec<Ty>, Ty) {
        let saved_module = std::mem::replace(&mut self.module, r.module);
        let saved_sizes = std::mem::replace(
            &mut self.sizes,
            f.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect(),
        );
        let params: Vec<Ty> = f.params.iter().map(|(_, t)| self.resolve_ty(t)).collect();
        let ret = self.resolve_ty(&f.ret);
        self.module = saved_module;
        self.sizes = saved_sizes;
        (params, ret)
    }

    /// A fresh parameter of the function being built, of a surface type with known sizes.
    pub(crate) fn param(&mut self, ty: Ty) -> Val {
        let leaves = ty.leaves().unwrap_or_default();
        let b = self.b.as_mut().expect("build mode");
        let vars = leaves.into_iter().map(|t| b.fresh(t)).collect();
        Val::of(ty, vars)
    }

    /// Elaborates a function's body with its parameters bound to `args` and its size
    /// parameters to `sizes` (build mode: this is inlining).
    pub(crate) fn inline(&mut self, f: &ast::Fn, module: usize, sizes: Subst, args: Vec<Val>, ret: &Ty) -> Val {
        let saved = (
            std::mem::replace(&mut self.module, module),
            std::mem::replace(&mut self.sizes, sizes),
            std::mem::replace(&mut self.scopes, vec![HashMap::new()]),
        );
        for ((pname, _), v) in f.params.iter().zip(args) {
            self.bind_name(&pname.name, v);
        }
        let v = self.expr_expect(&f.body_expr(), ret);
        (self.module, self.sizes, self.scopes) = saved;
        v
    }

    // ---------------------------------------------------------------- control flow

    fn if_(&mut self, cond: &ast::Expr, then: &ast::Block, else_: &ast::Expr, expected: Option<&Ty>) -> Val {
        let c = self.expr(cond);
        let c = match &c.ty {
            Ty::Array(DType::Bool, d) if d.is_empty() => c,
            Ty::Error => c,
            _ => self.err(TypeError::Mismatch {
                expected: Ty::scalar(DType::Bool),
                found: c.ty.clone(),
                span: cond.span,
                because: None,
            }),
        };
        let t = self.block(then, expected);
        let f = self.expr_with(else_, expected);
        // Weak literals in one branch adapt to the other branch.
        let (t, f) = match (t.weak, f.weak) {
            (true, false) => (self.coerce(t.clone(), &f.ty, then.span, None), f),
            (false, true) => {
                let ty = t.ty.clone();
                (t, self.coerce(f, &ty, else_.span, None))
            }
            _ => ops::unify_weak(self, t, f, then.span, else_.span),
        };
        if t.ty.is_error() || f.ty.is_error() || c.ty.is_error() {
            return Val::error();
        }
        if t.ty != f.ty {
            return self.err(TypeError::BranchMismatch {
                then_ty: t.ty,
                else_ty: f.ty,
                then_span: then.value.span,
                else_span: else_.span,
            });
        }
        let weak = t.weak && f.weak;
        // A condition known at compile time picks its branch; the other becomes dead code.
        if let Some(crate::array::Data::Bool(b)) = c.known.as_ref().map(|a| &a.data) {
            let chosen = if b[0] { t } else { f };
            return Val { ty: chosen.ty.clone(), weak, ..chosen };
        }
        // Both branches are pure and already evaluated: choose between them, leaf by leaf.
        let vars = match self.b.as_mut() {
            Some(b) => {
                let tys: Vec<_> = t.vars.iter().map(|&v| b.ty(v).clone()).collect();
                t.vars
                    .iter()
                    .zip(&f.vars)
                    .zip(tys)
                    .map(|((&x, &y), ty)| ops::emit_select(b, c.vars[0], x, y, &ty))
                    .collect()
            }
            None => vec![],
        };
        Val { ty: t.ty, vars, weak, known: None }
    }

    fn for_(
        &mut self,
        var: &ast::Pat,
        lo: &ast::Expr,
        hi: &ast::Expr,
        carry: &ast::Pat,
        init: &ast::Expr,
        body: &ast::Block,
    ) -> Val {
        let lo_d = self.static_dim(lo, "a loop bound");
        let hi_d = self.static_dim(hi, "a loop bound");
        let init_v = self.expr(init);
        // The carry has the init's type; a weak literal init stays weak only if the body agrees.
        let carry_ty = init_v.ty.clone();
        self.scopes.push(HashMap::new());
        let (params, carry_v, index_v) = match self.b.as_mut() {
            Some(b) => {
                let i = b.fresh(crate::array::ArrayTy::scalar(DType::I32));
                let leaves: Vec<_> = init_v.vars.iter().map(|&v| b.ty(v).clone()).collect();
                b.begin_loop();
                let cs: Vec<Var> = leaves.into_iter().map(|t| b.fresh(t)).collect();
                let mut params = vec![i];
                params.extend(cs.iter().copied());
                (params, Val::of(carry_ty.clone(), cs), Val::of(Ty::scalar(DType::I32), vec![i]))
            }
            None => (vec![], Val::of(carry_ty.clone(), vec![]), Val::of(Ty::scalar(DType::I32), vec![])),
        };
        self.bind(var, index_v);
        self.bind(carry, Val { weak: init_v.weak, ..carry_v });
        let next = self.block(body, Some(&carry_ty));
        let next = self.coerce(
            next,
            &carry_ty,
            body.value.span,
            Some((init.span, format!("the carry starts as `{carry_ty}` here"))),
        );
        self.scopes.pop();
        let (Some(Dim::Known(lo)), Some(Dim::Known(hi)), Some(b)) = (lo_d, hi_d, self.b.as_mut()) else {
            return Val::of(carry_ty, vec![]);
        };
        let outs = b.end_loop(lo as i64, hi as i64, &init_v.vars, params, next.vars);
        Val::of(carry_ty, outs)
    }
}

/// Where a value comes from: a block's final expression rather than the whole block.
fn tail_span(e: &ast::Expr) -> Span {
    match &e.kind {
        ExprKind::Block(b) => tail_span(&b.value),
        _ => e.span,
    }
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

/// Structural matching of a declared type against an actual one, binding the declared
/// type's size parameters. `conflict` receives a parameter bound to two different sizes.
fn unify_dims(
    decl: &Ty,
    actual: &Ty,
    weak: bool,
    sizes: &mut Subst,
    conflict: &mut Option<(String, String, String)>,
) -> bool {
    let dims = |ds: &[Dim], xs: &[Dim], sizes: &mut Subst, conflict: &mut Option<(String, String, String)>| {
        ds.len() == xs.len()
            && ds.iter().zip(xs).all(|(d, x)| match d {
                Dim::Param(p) => match sizes.get(p) {
                    Some(bound) if bound != x => {
                        *conflict = Some((p.to_string(), bound.to_string(), x.to_string()));
                        false
                    }
                    Some(_) => true,
                    None => {
                        sizes.insert(p.clone(), x.clone());
                        true
                    }
                },
                Dim::Known(_) => d == x,
            })
    };
    match (decl, actual) {
        (_, Ty::Error) | (Ty::Error, _) => true,
        (Ty::Array(dd, ds), Ty::Array(ad, xs)) => {
            (dd == ad || (weak && (dd.is_float() || !ad.is_float()))) && dims(ds, xs, sizes, conflict)
        }
        (Ty::Tuple(a), Ty::Tuple(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| unify_dims(x, y, false, sizes, conflict))
        }
        (Ty::Struct(a, xs), Ty::Struct(b, ys)) => Rc::ptr_eq(a, b) && dims(xs, ys, sizes, conflict),
        _ => false,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
