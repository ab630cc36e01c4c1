//! The builtin functions: their signatures and how they become primitives.
//!
//! Arguments that fix a shape (`reshape`'s target, an axis, `zeros`' dims) must be known
//! at compile time; everything else is an ordinary value.

use super::ops::{dims_of, known_shape, val_shape};
use super::{Elab, Val};
use crate::array::{Array, DType};
use crate::prims::*;
use crate::syntax::ast::{self, ExprKind};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::{Dim, Ty};

/// The elementwise builtins on `f32` that are one unary primitive each.
pub(super) fn float_unary(name: &str) -> Option<UnaryOp> {
    Some(match name {
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "log1p" => UnaryOp::Log1p,
        "logistic" => UnaryOp::Logistic,
        "relu" => UnaryOp::Relu,
        "tanh" => UnaryOp::Tanh,
        "sqrt" => UnaryOp::Sqrt,
        "floor" => UnaryOp::Floor,
        "ceil" => UnaryOp::Ceil,
        "round" => UnaryOp::Round,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        _ => return None,
    })
}

/// Every builtin's name, for "did you mean" suggestions.
pub(crate) const NAMES: &[&str] = &[
    "exp",
    "log",
    "log1p",
    "logistic",
    "relu",
    "tanh",
    "sqrt",
    "abs",
    "floor",
    "ceil",
    "round",
    "sign",
    "sin",
    "cos",
    "min",
    "max",
    "clamp",
    "where",
    "sum",
    "prod",
    "mean",
    "reduce_max",
    "reduce_min",
    "argmax",
    "logsumexp",
    "softmax",
    "reshape",
    "transpose",
    "concatenate",
    "arange",
    "zeros",
    "ones",
    "full",
    "set",
    "grad",
    "value_and_grad",
    "stop_gradient",
    "zeros_like",
    "psum",
    "pmean",
    "argsort",
    "conv2d",
    "max_pool",
];

impl Elab<'_> {
    /// Elaborates a builtin call, or returns `None` if `func` is not a builtin.
    pub(crate) fn builtin(&mut self, func: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<Val> {
        if let Some(v) = self.random(func, args, span) {
            return Some(v);
        }
        if func.name == "vmap" {
            return Some(self.vmap(args, span));
        }
        if let name @ ("grad" | "value_and_grad") = func.name.as_str() {
            return Some(self.grad(name, name == "value_and_grad", args, span));
        }
        if let Some(v) = self.leafwise_builtin(func, args, span) {
            return Some(v);
        }
        self.array_builtin(func, args, span)
    }

    /// The builtins on arrays; `None` if `func` is not one.
    pub(super) fn array_builtin(&mut self, func: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<Val> {
        let name = func.name.as_str();
        let (min, max) = match name {
            _ if float_unary(name).is_some() => (1, 1),
            "abs" | "sign" => (1, 1),
            "logsumexp" | "softmax" | "arange" | "zeros" | "ones" | "stop_gradient" => (1, 1),
            "min" | "max" | "reshape" | "full" => (2, 2),
            "clamp" | "where" | "set" => (3, 3),
            "psum" | "pmean" => (1, 1),
            "argsort" => (1, 2),
            "conv2d" | "max_pool" => (4, 4),
            "sum" | "prod" | "mean" | "reduce_max" | "reduce_min" | "argmax" | "transpose" | "concatenate" => (1, 2),
            _ => return None,
        };
        if args.len() < min || args.len() > max {
            for a in args {
                self.expr(a);
            }
            let expected = if args.len() < min { min } else { max };
            return Some(self.err(TypeError::Arity {
                what: format!("`{name}`"),
                expected,
                found: args.len(),
                span,
                decl: None,
            }));
        }
        if let Some(op) = float_unary(name) {
            let v = self.float_arg(name, &args[0]);
            return Some(self.map1(v, op));
        }
        Some(match name {
            "sign" => {
                let v = self.array_arg(name, &args[0], |d| matches!(d, DType::F32 | DType::I32), "f32 or i32");
                self.map1(v, UnaryOp::Sign)
            }
            "abs" => {
                let v = self.array_arg(name, &args[0], |d| d != DType::Bool, "a number");
                // As `jnp.abs`: the identity on unsigned integers (StableHLO's abs is signed).
                if matches!(v.ty, Ty::Array(DType::U32 | DType::U8, _)) { v } else { self.map1(v, UnaryOp::Abs) }
            }
            "min" | "max" => {
                let (a, b) = (self.expr(&args[0]), self.expr(&args[1]));
                let op = if name == "min" { BinaryOp::Min } else { BinaryOp::Max };
                self.elementwise2(name, a, b, args[0].span, args[1].span, span, |d| {
                    if d == DType::Bool { Err("numbers") } else { Ok(Prim::Binary(Binary { op })) }
                })
            }
            "clamp" => {
                let (x, lo, hi) = (self.expr(&args[0]), self.expr(&args[1]), self.expr(&args[2]));
                let num = |op| move |d| if d == DType::Bool { Err("numbers") } else { Ok(Prim::Binary(Binary { op })) };
                let m = self.elementwise2(name, x, lo, args[0].span, args[1].span, span, num(BinaryOp::Max));
                self.elementwise2(name, m, hi, args[0].span, args[2].span, span, num(BinaryOp::Min))
            }
            "where" => self.where_(args, span),
            "sum" | "prod" | "reduce_max" | "reduce_min" | "mean" => self.reduce(name, args),
            "argmax" => {
                let v = self.array_arg(name, &args[0], |d| d != DType::Bool, "a number");
                let Some(axis) = self.axis_arg(&v, args.get(1), args[0].span, true) else { return Some(Val::error()) };
                let mut dims = dims_of(&v.ty).to_vec();
                dims.remove(axis);
                if !self.concrete(&[&v]) {
                    return Some(Val::of(Ty::Array(DType::I32, dims), vec![]));
                }
                self.apply(Prim::Argmax(Argmax { axis }), &[&v])
            }
            "logsumexp" | "softmax" => self.normalize(name, &args[0]),
            "reshape" => {
                let v = self.expr(&args[0]);
                let Some(to) = self.shape_arg(&args[1]) else { return Some(Val::error()) };
                let Ty::Array(dtype, from) = &v.ty else { return Some(self.not_array(name, &v, args[0].span)) };
                if size_key(from) != size_key(&to) {
                    let to_s = crate::types::join(&to);
                    return Some(self.err(TypeError::Reshape { from: v.ty.clone(), to: to_s, span: args[1].span }));
                }
                let ty = Ty::Array(*dtype, to.clone());
                if !self.concrete(&[&v]) {
                    return Some(Val::of(ty, vec![]));
                }
                Val { ty, ..self.apply(Prim::Reshape(Reshape { shape: known_shape(&to) }), &[&v]) }
            }
            "transpose" => self.transpose(args),
            "concatenate" => self.concatenate(args, span),
            "arange" => {
                let Some(n) = self.static_dim(&args[0], "the length of `arange`") else { return Some(Val::error()) };
                let ty = Ty::Array(DType::I32, vec![n]);
                match (self.building(), &ty) {
                    (true, Ty::Array(_, d)) => {
                        let t = crate::array::ArrayTy::new(DType::I32, known_shape(d));
                        let out = self.b.as_mut().map(|b| b.prim1(Prim::Iota(Iota { ty: t, dim: 0 }), &[]));
                        Val::of(ty, out.into_iter().collect())
                    }
                    _ => Val::of(ty, vec![]),
                }
            }
            "zeros" | "ones" => {
                let Some(dims) = self.shape_arg(&args[0]) else { return Some(Val::error()) };
                let x = if name == "zeros" { 0.0 } else { 1.0 };
                let s = self.known_val(Array::f32(vec![], vec![x]), Ty::scalar(DType::F32), false);
                self.fill(s, dims)
            }
            "full" => {
                let Some(dims) = self.shape_arg(&args[0]) else { return Some(Val::error()) };
                let v = self.expr(&args[1]);
                match &v.ty {
                    Ty::Array(_, d) if d.is_empty() => self.fill(v, dims),
                    Ty::Error => v,
                    _ => self.err(TypeError::BadOperand {
                        op: "full".into(),
                        ty: v.ty.clone(),
                        span: args[1].span,
                        expected: "a scalar".into(),
                    }),
                }
            }
            "set" => self.set(args),
            "stop_gradient" => self.stop_gradient(&args[0]),
            "psum" | "pmean" => self.all_reduce(name, &args[0]),
            "argsort" => self.argsort(args),
            "conv2d" => self.conv2d(args),
            "max_pool" => self.max_pool(args),
            _ => unreachable!("arity table lists exactly the builtins"),
        })
    }

    fn not_array(&mut self, name: &str, v: &Val, span: Span) -> Val {
        if v.ty.is_error() {
            return Val::error();
        }
        self.err(TypeError::BadOperand { op: name.into(), ty: v.ty.clone(), span, expected: "an array".into() })
    }

    /// An array argument whose dtype satisfies `ok`.
    fn array_arg(&mut self, name: &str, e: &ast::Expr, ok: impl Fn(DType) -> bool, expected: &str) -> Val {
        let v = self.expr(e);
        match &v.ty {
            Ty::Array(d, _) if ok(*d) => v,
            Ty::Error => v,
            _ => self.err(TypeError::BadOperand {
                op: name.into(),
                ty: v.ty.clone(),
                span: e.span,
                expected: expected.into(),
            }),
        }
    }

    /// A float argument; a weak integer literal becomes a float.
    fn float_arg(&mut self, name: &str, e: &ast::Expr) -> Val {
        let v = self.expr(e);
        match &v.ty {
            Ty::Array(DType::F32, _) | Ty::Error => v,
            Ty::Array(_, _) if v.weak => self.convert(v, DType::F32, e.span),
            _ => self.err(TypeError::BadOperand {
                op: name.into(),
                ty: v.ty.clone(),
                span: e.span,
                expected: "`f32` values".into(),
            }),
        }
    }

    /// An elementwise unary primitive.
    fn map1(&mut self, v: Val, op: UnaryOp) -> Val {
        if v.ty.is_error() || !self.concrete(&[&v]) {
            return v;
        }
        let weak = v.weak;
        Val { weak, ..self.apply(Prim::Unary(Unary { op }), &[&v]) }
    }

    /// An axis argument (negative counts from the end); absent means the last axis when
    /// `default_last`. Returns `None` after reporting an error.
    pub(super) fn axis_arg(&mut self, v: &Val, e: Option<&ast::Expr>, span: Span, default_last: bool) -> Option<usize> {
        let rank = match &v.ty {
            Ty::Array(_, d) => d.len(),
            _ => return None,
        };
        let axis = match e {
            None if default_last && rank > 0 => return Some(rank - 1),
            None => return Some(usize::MAX),
            Some(e) => match &e.kind {
                ExprKind::Unary(ast::UnOp::Neg, x) => match self.static_dim(x, "an axis")? {
                    Dim::Known(n) => -(n as i64),
                    Dim::Param(_) | Dim::Scaled(..) => return None,
                },
                _ => match self.static_dim(e, "an axis")? {
                    Dim::Known(n) => n as i64,
                    Dim::Param(_) | Dim::Scaled(..) => {
                        self.err(TypeError::NotStatic { what: "an axis".into(), span: e.span });
                        return None;
                    }
                },
            },
        };
        let k = if axis < 0 { axis + rank as i64 } else { axis };
        if k < 0 || k >= rank as i64 {
            self.err(TypeError::BadAxis { axis, rank, span: e.map(|e| e.span).unwrap_or(span) });
            return None;
        }
        Some(k as usize)
    }

    /// A shape written as a list of sizes known at compile time: `[2, N]`.
    pub(super) fn shape_arg(&mut self, e: &ast::Expr) -> Option<Vec<Dim>> {
        match &e.kind {
            ExprKind::Array(xs) => xs.iter().map(|x| self.static_dim(x, "a shape")).collect(),
            _ => {
                self.expr(e);
                self.err(TypeError::NotStatic { what: "a shape (a list like `[2, 3]`)".into(), span: e.span });
                None
            }
        }
    }

    /// A scalar broadcast to `dims`.
    fn fill(&mut self, s: Val, dims: Vec<Dim>) -> Val {
        let Ty::Array(d, _) = s.ty else { return s };
        let ty = Ty::Array(d, dims.clone());
        if !self.building() {
            return Val { weak: s.weak, ..Val::of(ty, vec![]) };
        }
        let weak = s.weak;
        Val { ty, weak, ..self.broadcast_to(&s, &dims) }
    }

    fn where_(&mut self, args: &[ast::Expr], span: Span) -> Val {
        let c = self.array_arg("where", &args[0], |d| d == DType::Bool, "a `bool` condition");
        let (a, b) = (self.expr(&args[1]), self.expr(&args[2]));
        let (a, b) = super::ops::unify_weak(self, a, b, args[1].span, args[2].span);
        if [&c, &a, &b].iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        let (Ty::Array(da, sa), Ty::Array(db, sb)) = (&a.ty, &b.ty) else {
            let (v, s) = if matches!(a.ty, Ty::Array(..)) { (&b, args[2].span) } else { (&a, args[1].span) };
            return self.not_array("where", &v.clone(), s);
        };
        if da != db {
            return self.err(TypeError::DTypeMismatch {
                op: "where".into(),
                left: a.ty.clone(),
                right: b.ty.clone(),
                span,
                left_span: args[1].span,
                right_span: args[2].span,
            });
        }
        let sc = dims_of(&c.ty).to_vec();
        let Some(ab) = crate::types::shape::broadcast(sa, sb) else {
            return self.err(TypeError::BroadcastMismatch {
                op: "where".into(),
                left: a.ty.clone(),
                right: b.ty.clone(),
                left_span: args[1].span,
                right_span: args[2].span,
            });
        };
        let Some(out) = crate::types::shape::broadcast(&sc, &ab) else {
            let vals = Ty::Array(*da, ab);
            return self.err(TypeError::BroadcastMismatch {
                op: "where".into(),
                left: c.ty.clone(),
                right: vals,
                left_span: args[0].span,
                right_span: args[1].span.to(args[2].span),
            });
        };
        let ty = Ty::Array(*da, out.clone());
        if !self.concrete(&[&c, &a, &b]) {
            return Val::of(ty, vec![]);
        }
        let (c, a, b) = (self.broadcast_to(&c, &out), self.broadcast_to(&a, &out), self.broadcast_to(&b, &out));
        self.apply(Prim::Select(Select), &[&c, &a, &b])
    }

    fn reduce(&mut self, name: &str, args: &[ast::Expr]) -> Val {
        let v = match name {
            "mean" => self.float_arg(name, &args[0]),
            "sum" | "prod" => {
                let v = self.array_arg(name, &args[0], |d| d != DType::Bool, "a number");
                // As `jnp.sum` and `jnp.prod`: bytes combine in u32 (a frame's total would
                // wrap in u8).
                match v.ty {
                    Ty::Array(DType::U8, _) => self.convert(v, DType::U32, args[0].span),
                    _ => v,
                }
            }
            _ => self.array_arg(name, &args[0], |_| true, "an array"),
        };
        let Ty::Array(dtype, dims) = v.ty.clone() else { return v };
        let axes: Vec<usize> = match args.get(1) {
            None => (0..dims.len()).collect(),
            Some(e) => match self.axis_arg(&v, Some(e), e.span, false) {
                Some(a) => vec![a],
                None => return Val::error(),
            },
        };
        let out: Vec<Dim> =
            dims.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, d)| d.clone()).collect();
        let ty = Ty::Array(dtype, out);
        if !self.concrete(&[&v]) {
            return Val::of(ty, vec![]);
        }
        let op = match name {
            "reduce_max" => ReduceOp::Max,
            "reduce_min" => ReduceOp::Min,
            "prod" => ReduceOp::Prod,
            _ => ReduceOp::Sum,
        };
        let r = self.apply(Prim::Reduce(Reduce { op, axes: axes.clone() }), &[&v]);
        if name != "mean" {
            return r;
        }
        let shape = val_shape(&v);
        let count: usize = axes.iter().map(|&a| shape[a]).product();
        let n = self.known_val(Array::f32(vec![], vec![count as f32]), Ty::scalar(DType::F32), false);
        let n = self.broadcast_to(&n, dims_of(&r.ty));
        self.apply(Prim::Binary(Binary { op: BinaryOp::Div }), &[&r, &n])
    }

    /// `logsumexp` and `softmax` over the last axis, shifted by the maximum for stability
    /// (a non-finite maximum shifts by 0, as in JAX, so that all `-inf` rows stay finite).
    /// The shift cancels out of the result, so, as JAX does, it is a `stop_gradient`:
    /// the derivative does not go through the maximum.
    fn normalize(&mut self, name: &str, e: &ast::Expr) -> Val {
        let v = self.float_arg(name, e);
        let Ty::Array(_, dims) = v.ty.clone() else { return v };
        if dims.is_empty() {
            return self.err(TypeError::BadOperand {
                op: name.into(),
                ty: v.ty.clone(),
                span: e.span,
                expected: "an array of rank 1 or more".into(),
            });
        }
        let out_ty =
            if name == "softmax" { v.ty.clone() } else { Ty::Array(DType::F32, dims[..dims.len() - 1].to_vec()) };
        if !self.concrete(&[&v]) {
            return Val::of(out_ty, vec![]);
        }
        let shape = val_shape(&v);
        let last = shape.len() - 1;
        let keep: Vec<usize> = (0..last).collect();
        let m = self.apply(Prim::Reduce(Reduce { op: ReduceOp::Max, axes: vec![last] }), &[&v]);
        let m_shape = val_shape(&m);
        let abs = self.apply(Prim::Unary(Unary { op: UnaryOp::Abs }), &[&m]);
        let inf = self.known_val(Array::f32(vec![], vec![f32::INFINITY]), Ty::scalar(DType::F32), false);
        let inf = self.broadcast_to(&inf, dims_of(&m.ty));
        let finite = self.apply(Prim::Compare(Compare { op: CmpOp::Lt }), &[&abs, &inf]);
        let zero = self.known_val(Array::f32(vec![], vec![0.0]), Ty::scalar(DType::F32), false);
        let zero = self.broadcast_to(&zero, dims_of(&m.ty));
        let m = self.apply(Prim::Select(Select), &[&finite, &m, &zero]);
        let m = self.apply(Prim::StopGradient(StopGradient), &[&m]);
        let widen = |x| Prim::Broadcast(Broadcast { shape: shape.clone(), dims: x });
        let mb = self.apply(widen(keep.clone()), &[&m]);
        let d = self.apply(Prim::Binary(Binary { op: BinaryOp::Sub }), &[&v, &mb]);
        let ex = self.apply(Prim::Unary(Unary { op: UnaryOp::Exp }), &[&d]);
        let s = self.apply(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes: vec![last] }), &[&ex]);
        debug_assert_eq!(val_shape(&s), m_shape);
        if name == "softmax" {
            let sb = self.apply(widen(keep), &[&s]);
            return self.apply(Prim::Binary(Binary { op: BinaryOp::Div }), &[&ex, &sb]);
        }
        let l = self.apply(Prim::Unary(Unary { op: UnaryOp::Log }), &[&s]);
        self.apply(Prim::Binary(Binary { op: BinaryOp::Add }), &[&l, &m])
    }

    fn transpose(&mut self, args: &[ast::Expr]) -> Val {
        let v = self.expr(&args[0]);
        let Ty::Array(dtype, dims) = v.ty.clone() else { return self.not_array("transpose", &v, args[0].span) };
        let perm: Vec<usize> = match args.get(1) {
            None => (0..dims.len()).rev().collect(),
            Some(e) => {
                let Some(p) = self.shape_arg(e) else { return Val::error() };
                let perm: Vec<usize> =
                    p.iter().map(|d| if let Dim::Known(n) = d { *n as usize } else { usize::MAX }).collect();
                let mut sorted = perm.clone();
                sorted.sort_unstable();
                if sorted != (0..dims.len()).collect::<Vec<_>>() {
                    let detail =
                        format!("`[{}]` is not a permutation of the {} axes", crate::types::join(&p), dims.len());
                    return self.err(TypeError::BadIndex { detail, span: e.span });
                }
                perm
            }
        };
        let ty = Ty::Array(dtype, perm.iter().map(|&i| dims[i].clone()).collect());
        if !self.concrete(&[&v]) {
            return Val::of(ty, vec![]);
        }
        self.apply(Prim::Transpose(Transpose { perm }), &[&v])
    }

    fn concatenate(&mut self, args: &[ast::Expr], span: Span) -> Val {
        let ExprKind::Array(elems) = &args[0].kind else {
            self.expr(&args[0]);
            return self.err(TypeError::BadOperand {
                op: "concatenate".into(),
                ty: Ty::Error,
                span: args[0].span,
                expected: "a list of arrays, like `[a, b]`".into(),
            });
        };
        let vals: Vec<Val> = elems.iter().map(|x| self.expr(x)).collect();
        if vals.is_empty() || vals.iter().any(|v| v.ty.is_error()) {
            if vals.is_empty() {
                return self.err(TypeError::BadOperand {
                    op: "concatenate".into(),
                    ty: Ty::unit(),
                    span,
                    expected: "at least one array".into(),
                });
            }
            return Val::error();
        }
        let first = vals[0].clone();
        let Ty::Array(dtype, dims) = first.ty.clone() else {
            return self.not_array("concatenate", &first, elems[0].span);
        };
        let Some(axis) = (if dims.is_empty() {
            self.err(TypeError::BadOperand {
                op: "concatenate".into(),
                ty: first.ty.clone(),
                span: elems[0].span,
                expected: "arrays of rank 1 or more".into(),
            });
            None
        } else if args.len() > 1 {
            self.axis_arg(&first, args.get(1), span, false)
        } else {
            Some(0)
        }) else {
            return Val::error();
        };
        let mut total = 0u64;
        let mut vs = vec![];
        for (v, x) in vals.into_iter().zip(elems) {
            let v = if v.weak && !matches!(v.ty, Ty::Array(d, _) if d == dtype) {
                self.convert(v, dtype, x.span)
            } else {
                v
            };
            let ok = match &v.ty {
                Ty::Array(d, ds) => {
                    *d == dtype
                        && ds.len() == dims.len()
                        && ds.iter().zip(&dims).enumerate().all(|(i, (a, b))| i == axis || a == b)
                }
                _ => false,
            };
            if !ok {
                let detail = format!("every part must be `{}` except along axis {axis}", first.ty);
                return self.err(TypeError::Mismatch {
                    expected: first.ty.clone(),
                    found: v.ty.clone(),
                    span: x.span,
                    because: Some((elems[0].span, detail)),
                });
            }
            match &dims_of(&v.ty)[axis] {
                Dim::Known(n) => total += n,
                Dim::Param(_) | Dim::Scaled(..) => {
                    return self.err(TypeError::NotStatic { what: "the concatenated axis' size".into(), span: x.span });
                }
            }
            vs.push(v);
        }
        let mut out = dims.clone();
        out[axis] = Dim::Known(total);
        let ty = Ty::Array(dtype, out);
        let refs: Vec<&Val> = vs.iter().collect();
        if !self.concrete(&refs) {
            return Val::of(ty, vec![]);
        }
        self.apply(Prim::Concat(Concat { axis }), &refs)
    }

    /// `x.set(i, v)` / `x.set([i, j], v)`: a copy of `x` with the element (or sub-array) at
    /// the given leading indices replaced by `v`, broadcast to fit.
    fn set(&mut self, args: &[ast::Expr]) -> Val {
        let x = self.expr(&args[0]);
        let idx_exprs: Vec<&ast::Expr> = match &args[1].kind {
            ExprKind::Array(xs) => xs.iter().collect(),
            _ => vec![&args[1]],
        };
        let mut idx = vec![];
        for e in &idx_exprs {
            let i = self.expr(e);
            match &i.ty {
                Ty::Array(d, s) if d.is_int() && s.is_empty() => idx.push(self.convert(i, DType::I32, e.span)),
                Ty::Error => {}
                _ => {
                    self.err(TypeError::BadIndex {
                        detail: format!("an index must be an integer scalar, found `{}`", i.ty),
                        span: e.span,
                    });
                }
            }
        }
        let v = self.expr(&args[2]);
        if idx.len() != idx_exprs.len() || v.ty.is_error() || x.ty.is_error() {
            return Val::error();
        }
        if super::leafwise::is_tree(&x.ty) {
            return self.set_tree(x, &idx, v, args);
        }
        self.set_array(x, &idx, v, args)
    }

    /// `.set` on a batch of records (`State[B]`, a tuple of arrays): every leaf's entry at
    /// the leading indices is replaced by the matching leaf of `v`, one record.
    fn set_tree(&mut self, x: Val, idx: &[Val], v: Val, args: &[ast::Expr]) -> Val {
        let Some(one) = idx.iter().try_fold(x.ty.clone(), |t, _| t.unbatched().map(|(t, _)| t)) else {
            let expected = super::leafwise::batch_of_records(idx.len());
            return self.err(TypeError::BadOperand {
                op: "set".into(),
                ty: x.ty.clone(),
                span: args[0].span,
                expected,
            });
        };
        if v.ty != one {
            return self.err(TypeError::Mismatch {
                expected: one,
                found: v.ty.clone(),
                span: args[2].span,
                because: None,
            });
        }
        let (xs, vs) = (self.leaves(&x), self.leaves(&v));
        let mut vars = vec![];
        for (xl, vl) in xs.into_iter().zip(vs) {
            let out = self.set_array(xl, idx, vl, args);
            if out.ty.is_error() {
                return out;
            }
            vars.extend(out.vars);
        }
        Val::of(x.ty, vars)
    }

    /// `.set` on one array (see [`Elab::set`]).
    fn set_array(&mut self, x: Val, idx: &[Val], v: Val, args: &[ast::Expr]) -> Val {
        let Ty::Array(dtype, dims) = x.ty.clone() else { return self.not_array("set", &x, args[0].span) };
        if idx.len() > dims.len() {
            let detail = format!("{} indices for an array of rank {}", idx.len(), dims.len());
            return self.err(TypeError::BadIndex { detail, span: args[1].span });
        }
        let rest = dims[idx.len()..].to_vec();
        let target = Ty::Array(dtype, rest.clone());
        let v = match &v.ty {
            Ty::Array(_, vd) if crate::types::shape::broadcast(vd, &rest).as_deref() == Some(&rest[..]) => {
                let want = Ty::Array(dtype, vd.clone());
                self.coerce(v, &want, args[2].span, None)
            }
            _ => self.err(TypeError::Mismatch {
                expected: target,
                found: v.ty.clone(),
                span: args[2].span,
                because: None,
            }),
        };
        if v.ty.is_error() {
            return v;
        }
        let mut all = vec![&x, &v];
        all.extend(idx.iter());
        if !self.concrete(&all) {
            return Val::of(x.ty.clone(), vec![]);
        }
        let shape = val_shape(&x);
        let v = self.broadcast_to(&v, &rest);
        let mut upd_shape = vec![1; idx.len()];
        upd_shape.extend(known_shape(&rest));
        let upd = self.apply(Prim::Reshape(Reshape { shape: upd_shape }), &[&v]);
        let mut starts = vec![];
        for (k, i) in idx.iter().enumerate() {
            starts.push(self.wrap_negative(i, shape[k]));
        }
        for _ in idx.len()..shape.len() {
            starts.push(self.known_val(Array::i32(vec![], vec![0]), Ty::scalar(DType::I32), false));
        }
        let mut args = vec![&x, &upd];
        args.extend(starts.iter());
        let out = self.apply(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &args);
        // As in JAX, an update at an index out of range is dropped (reads clamp instead).
        let mut in_range: Option<Val> = None;
        for (k, i) in starts.iter().take(idx.len()).enumerate() {
            let zero = self.known_val(Array::i32(vec![], vec![0]), Ty::scalar(DType::I32), false);
            let n = self.known_val(Array::i32(vec![], vec![shape[k] as i32]), Ty::scalar(DType::I32), false);
            let lo = self.apply(Prim::Compare(Compare { op: CmpOp::Ge }), &[i, &zero]);
            let hi = self.apply(Prim::Compare(Compare { op: CmpOp::Lt }), &[i, &n]);
            let ok = self.apply(Prim::Binary(Binary { op: BinaryOp::And }), &[&lo, &hi]);
            in_range = Some(match in_range {
                Some(acc) => self.apply(Prim::Binary(Binary { op: BinaryOp::And }), &[&acc, &ok]),
                None => ok,
            });
        }
        let out = match in_range {
            Some(ok) => {
                let ok = self.broadcast_to(&ok, &dims);
                self.apply(Prim::Select(Select), &[&ok, &out, &x])
            }
            None => out,
        };
        Val { ty: x.ty.clone(), ..out }
    }
}

/// The element count of a shape, comparable across symbolic shapes: the product of the
/// known sizes and the sorted list of size parameters.
fn size_key(dims: &[Dim]) -> (u64, Vec<String>) {
    let mut n = 1u64;
    let mut params = vec![];
    for d in dims {
        match d {
            Dim::Known(k) => n = n.saturating_mul(*k),
            Dim::Param(p) => params.push(p.to_string()),
            Dim::Scaled(ps, c) => {
                n = n.saturating_mul(*c);
                params.extend(ps.iter().map(|p| p.to_string()));
            }
        }
    }
    params.sort();
    (n, params)
}
