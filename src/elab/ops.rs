//! Operators and indexing: their surface rules (dtypes, broadcasting, `@`) and how they
//! become primitives.
//!
//! Every operation first computes its surface type, symbolically. Then, when its operands
//! are concrete (always in build mode; in check mode only for values known at compile
//! time), it is applied through [`Elab::apply`], which either emits the primitive or,
//! when every operand is known, evaluates it with the primitive's own reference rule.

use super::{Elab, Val};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::*;
use crate::syntax::ast::{self, BinOp, UnOp};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::shape::{self, MatMulError};
use crate::types::{Dim, Ty};

impl Elab<'_> {
    /// Whether operations on these values must be carried out now (building, or folding
    /// values known at compile time) rather than only typed.
    pub(crate) fn concrete(&self, args: &[&Val]) -> bool {
        self.building() || args.iter().all(|v| v.known.is_some())
    }

    /// Applies a single-result primitive to concrete values.
    pub(crate) fn apply(&mut self, prim: Prim, args: &[&Val]) -> Val {
        self.apply_all(prim, args).remove(0)
    }

    /// [`Elab::apply`] for a primitive with several results; after an error, one error
    /// value.
    pub(crate) fn apply_all(&mut self, prim: Prim, args: &[&Val]) -> Vec<Val> {
        if let Some(known) = args.iter().map(|v| v.known.as_ref()).collect::<Option<Vec<&Array>>>() {
            let outs = prim.rules().eval(&known);
            return outs
                .into_iter()
                .map(|out| {
                    let ty = array_ty(&out.ty());
                    self.known_val(out, ty, false)
                })
                .collect();
        }
        // After an error (reported, and returned by `finish`), building goes on without arrays.
        let Some(vars) = args.iter().map(|v| v.vars.first().copied()).collect::<Option<Vec<Var>>>() else {
            return vec![Val::error()];
        };
        let b = self.b.as_mut().expect("apply on unknown values happens in build mode");
        let outs = b.prim(prim, &vars);
        outs.into_iter().map(|out| Val::of(array_ty(b.ty(out)), vec![out])).collect()
    }

    /// Broadcasts a concrete array value to `dims` (NumPy rules, already checked).
    pub(crate) fn broadcast_to(&mut self, v: &Val, dims: &[Dim]) -> Val {
        let to = known_shape(dims);
        let from = val_shape(v);
        if from == to {
            return v.clone();
        }
        let offset = to.len() - from.len();
        let p = Prim::Broadcast(Broadcast { shape: to, dims: (offset..offset + from.len()).collect() });
        Val { weak: v.weak, ..self.apply(p, &[v]) }
    }

    pub(crate) fn unary(&mut self, op: UnOp, x: &ast::Expr, span: Span) -> Val {
        let v = self.expr(x);
        let vals = [v];
        if let Some(t) = self.leafwise("-", &vals, span, |cx, mut l| cx.unary_val(op, l.remove(0), span)) {
            return t;
        }
        let [v] = vals;
        self.unary_val(op, v, span)
    }

    fn unary_val(&mut self, op: UnOp, v: Val, span: Span) -> Val {
        let (name, refused, uop) = match op {
            UnOp::Neg => ("-", DType::Bool, UnaryOp::Neg),
            UnOp::Not => ("!", DType::F32, UnaryOp::Not),
        };
        match &v.ty {
            Ty::Array(d, _) if *d != refused => {}
            Ty::Error => return v,
            _ => {
                let expected = if op == UnOp::Neg { "a number" } else { "a bool or an integer" };
                return self.err(TypeError::BadOperand {
                    op: name.into(),
                    ty: v.ty.clone(),
                    span,
                    expected: expected.into(),
                });
            }
        }
        if !self.concrete(&[&v]) {
            return v;
        }
        let weak = v.weak;
        Val { weak, ..self.apply(Prim::Unary(Unary { op: uop }), &[&v]) }
    }

    pub(crate) fn binary(&mut self, op: BinOp, l: &ast::Expr, r: &ast::Expr, span: Span) -> Val {
        let a = self.expr(l);
        let b = self.expr(r);
        if op == BinOp::MatMul {
            return self.matmul(a, b, l.span, r.span);
        }
        let (name, ls, rs) = (op_name(op), l.span, r.span);
        let vals = [a, b];
        let each = |cx: &mut Self, mut xs: Vec<Val>| {
            let b = xs.pop().expect("two operands");
            let a = xs.pop().expect("two operands");
            cx.elementwise2(name, a, b, ls, rs, span, |d| binary_prim(op, d))
        };
        if let Some(t) = self.leafwise(name, &vals, span, each) {
            return t;
        }
        let [a, b] = vals;
        self.elementwise2(name, a, b, ls, rs, span, |d| binary_prim(op, d))
    }

    /// A binary elementwise operation with weak-literal adaptation and broadcasting.
    /// `prim` gives the primitive for the unified dtype, or what was expected instead.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn elementwise2(
        &mut self,
        name: &str,
        a: Val,
        b: Val,
        ls: Span,
        rs: Span,
        span: Span,
        prim: impl Fn(DType) -> Result<Prim, &'static str>,
    ) -> Val {
        if a.ty.is_error() || b.ty.is_error() {
            return Val::error();
        }
        for (v, s) in [(&a, ls), (&b, rs)] {
            if !matches!(v.ty, Ty::Array(..)) {
                return self.err(TypeError::BadOperand {
                    op: name.into(),
                    ty: v.ty.clone(),
                    span: s,
                    expected: "an array".into(),
                });
            }
        }
        let (a, b) = unify_weak(self, a, b, ls, rs);
        let (Ty::Array(da, sa), Ty::Array(db, sb)) = (&a.ty, &b.ty) else { return Val::error() };
        if da != db {
            return self.err(TypeError::DTypeMismatch {
                op: name.into(),
                left: a.ty.clone(),
                right: b.ty.clone(),
                span,
                left_span: ls,
                right_span: rs,
            });
        }
        let p = match prim(*da) {
            Ok(p) => p,
            Err(expected) => {
                return self.err(TypeError::BadOperand {
                    op: name.into(),
                    ty: a.ty.clone(),
                    span,
                    expected: expected.into(),
                });
            }
        };
        let Some(out) = shape::broadcast(sa, sb) else {
            return self.err(TypeError::BroadcastMismatch {
                op: name.into(),
                left: a.ty.clone(),
                right: b.ty.clone(),
                left_span: ls,
                right_span: rs,
            });
        };
        let weak = a.weak && b.weak && !matches!(p, Prim::Compare(_));
        let out_dtype = if matches!(p, Prim::Compare(_)) { DType::Bool } else { *da };
        if !self.concrete(&[&a, &b]) {
            return Val { weak, ..Val::of(Ty::Array(out_dtype, out), vec![]) };
        }
        let a = self.broadcast_to(&a, &out);
        let b = self.broadcast_to(&b, &out);
        Val { weak, ..self.apply(p, &[&a, &b]) }
    }

    fn matmul(&mut self, a: Val, b: Val, ls: Span, rs: Span) -> Val {
        if a.ty.is_error() || b.ty.is_error() {
            return Val::error();
        }
        let (a, b) = unify_weak(self, a, b, ls, rs);
        let (Ty::Array(da, sa), Ty::Array(db, sb)) = (&a.ty, &b.ty) else {
            let bad = if matches!(a.ty, Ty::Array(..)) { (&b.ty, rs) } else { (&a.ty, ls) };
            return self.err(TypeError::BadOperand {
                op: "@".into(),
                ty: bad.0.clone(),
                span: bad.1,
                expected: "an array".into(),
            });
        };
        if da != db || *da == DType::Bool {
            return self.err(TypeError::DTypeMismatch {
                op: "@".into(),
                left: a.ty.clone(),
                right: b.ty.clone(),
                span: ls.to(rs),
                left_span: ls,
                right_span: rs,
            });
        }
        let m = match shape::matmul(sa, sb) {
            Ok(m) => m,
            Err(e) => {
                let detail = match e {
                    MatMulError::Rank => {
                        "`@` takes vectors and matrices (or stacks of matrices with equal leading dimensions)"
                            .to_string()
                    }
                    MatMulError::Contract(x, y) => {
                        format!("the contracted dimensions differ: {x} (last of the left) and {y}")
                    }
                };
                return self.err(TypeError::MatMulMismatch {
                    left: a.ty.clone(),
                    right: b.ty.clone(),
                    left_span: ls,
                    right_span: rs,
                    detail,
                });
            }
        };
        if !self.concrete(&[&a, &b]) {
            return Val::of(Ty::Array(*da, m.out), vec![]);
        }
        let p = Prim::Dot(Dot {
            lhs_batch: m.batch.clone(),
            rhs_batch: m.batch,
            lhs_contract: vec![m.lhs_contract],
            rhs_contract: vec![m.rhs_contract],
        });
        self.apply(p, &[&a, &b])
    }

    /// `x[i, :, a:b]`: static ranges slice, run-time indices pick (negative ones count
    /// from the end, as in NumPy, and out-of-range ones are clamped, as in JAX). On a batch
    /// of records (`State[B]`, a tuple of arrays) the indices apply to every leaf's leading
    /// axes: `states[i]` is one `State`, `states[2:4]` a `State[2]`.
    pub(crate) fn index(&mut self, x: &ast::Expr, idx: &[ast::Index], span: Span) -> Val {
        let v = self.expr(x);
        if super::leafwise::is_tree(&v.ty) {
            return self.index_tree(v, x.span, idx, span);
        }
        let Ty::Array(dtype, dims) = v.ty.clone() else {
            for i in idx {
                if let ast::Index::At(e) = i {
                    self.expr(e);
                }
            }
            if v.ty.is_error() {
                return v;
            }
            return self.err(TypeError::BadOperand {
                op: "[]".into(),
                ty: v.ty.clone(),
                span: x.span,
                expected: "an array".into(),
            });
        };
        if idx.len() > dims.len() {
            let detail = format!("{} indices for an array of rank {}", idx.len(), dims.len());
            return self.err(TypeError::BadIndex { detail, span });
        }
        let Some(picks) = self.picks(idx, &dims) else { return Val::error() };
        let Some(kept) = self.kept_dims(&picks, &dims, span) else { return Val::error() };
        let mut out_dims = kept;
        out_dims.extend(dims[picks.len()..].iter().cloned());
        self.pick(v, &picks, Ty::Array(dtype, out_dims))
    }

    /// `x[..]` on a batch of records: each leaf indexed alike.
    fn index_tree(&mut self, v: Val, x_span: Span, idx: &[ast::Index], span: Span) -> Val {
        let mut one = v.ty.clone();
        let mut lead = vec![];
        for _ in idx {
            let Some((inner, b)) = one.unbatched() else {
                let expected = super::leafwise::batch_of_records(idx.len());
                return self.err(TypeError::BadOperand { op: "[]".into(), ty: v.ty.clone(), span: x_span, expected });
            };
            lead.push(b);
            one = inner;
        }
        let Some(picks) = self.picks(idx, &lead) else { return Val::error() };
        let Some(kept) = self.kept_dims(&picks, &lead, span) else { return Val::error() };
        // The kept ranges batch the record again, innermost first.
        let Some(ty) = kept.iter().rev().try_fold(one, |t, d| t.batched(d)) else { return Val::error() };
        let mut vars = vec![];
        for leaf in self.leaves(&v) {
            let Ty::Array(dtype, dims) = leaf.ty.clone() else { return Val::error() };
            let mut out_dims = kept.clone();
            out_dims.extend(dims[picks.len()..].iter().cloned());
            vars.extend(self.pick(leaf, &picks, Ty::Array(dtype, out_dims)).vars);
        }
        Val::of(ty, vars)
    }

    /// The indices of `x[..]`, checked against the dimensions they index.
    fn picks(&mut self, idx: &[ast::Index], dims: &[Dim]) -> Option<Vec<Pick>> {
        let mut picks = vec![];
        let mut failed = false;
        for (i, d) in idx.iter().zip(dims) {
            match i {
                ast::Index::At(e) => {
                    let iv = self.expr(e);
                    match &iv.ty {
                        Ty::Array(t, s) if t.is_int() && s.is_empty() => {
                            picks.push(Pick::At(self.convert(iv, DType::I32, e.span)))
                        }
                        Ty::Error => failed = true,
                        _ => {
                            failed = true;
                            self.err(TypeError::BadIndex {
                                detail: format!("an index must be an integer scalar, found `{}`", iv.ty),
                                span: e.span,
                            });
                        }
                    }
                }
                ast::Index::Range { start, end, span } => {
                    let s = match start {
                        Some(e) => self.static_dim(e, "a slice bound"),
                        None => Some(Dim::Known(0)),
                    };
                    let t = match end {
                        Some(e) => self.static_dim(e, "a slice bound"),
                        None => Some(d.clone()),
                    };
                    match (s, t) {
                        (Some(s), Some(t)) => {
                            if let (Dim::Known(a), Dim::Known(b), Dim::Known(n)) = (&s, &t, d)
                                && (a > b || b > n)
                            {
                                failed = true;
                                self.err(TypeError::BadIndex {
                                    detail: format!("range {a}..{b} is outside 0..{n}"),
                                    span: *span,
                                });
                            }
                            picks.push(Pick::Range(s, t));
                        }
                        _ => failed = true,
                    }
                }
            }
        }
        (!failed).then_some(picks)
    }

    /// The dimensions the picks keep: ranges keep their length, indices drop their axis.
    fn kept_dims(&mut self, picks: &[Pick], dims: &[Dim], span: Span) -> Option<Vec<Dim>> {
        let mut out_dims = vec![];
        for (p, d) in picks.iter().zip(dims) {
            match p {
                Pick::Range(Dim::Known(0), e) if e == d => out_dims.push(d.clone()),
                Pick::Range(Dim::Known(a), Dim::Known(b)) => out_dims.push(Dim::Known(b - a)),
                Pick::Range(s, e) => {
                    let what = format!("a slice `{s}..{e}` of a symbolic dimension");
                    self.err(TypeError::BadIndex { detail: format!("{what} needs known bounds"), span });
                    return None;
                }
                Pick::At(_) => {}
            }
        }
        Some(out_dims)
    }

    /// Emits the picks on one array, giving a value of type `ty`.
    fn pick(&mut self, v: Val, picks: &[Pick], ty: Ty) -> Val {
        let all: Vec<&Val> = std::iter::once(&v)
            .chain(picks.iter().filter_map(|p| if let Pick::At(i) = p { Some(i) } else { None }))
            .collect();
        if !self.concrete(&all) {
            return Val::of(ty, vec![]);
        }
        let shape = val_shape(&v);
        // 1. Static slice for the ranges.
        let mut start = vec![0; shape.len()];
        let mut limit = shape.clone();
        for (k, p) in picks.iter().enumerate() {
            if let Pick::Range(Dim::Known(a), Dim::Known(b)) = p {
                (start[k], limit[k]) = (*a as usize, *b as usize);
            }
        }
        let mut cur = if limit != shape || start.iter().any(|&s| s != 0) {
            self.apply(Prim::Slice(Slice { start, limit }), &[&v])
        } else {
            v.clone()
        };
        // 2. Dynamic slice of size one along each indexed axis, then drop those axes.
        if picks.iter().any(|p| matches!(p, Pick::At(_))) {
            let zero = self.known_val(Array::i32(vec![], vec![0]), Ty::scalar(DType::I32), false);
            let mut starts = vec![];
            let sliced_shape = val_shape(&cur);
            let mut sizes = sliced_shape.clone();
            for (k, n) in sliced_shape.iter().enumerate() {
                match picks.get(k) {
                    Some(Pick::At(i)) => {
                        sizes[k] = 1;
                        starts.push(self.wrap_negative(i, *n));
                    }
                    _ => starts.push(zero.clone()),
                }
            }
            let mut args = vec![&cur];
            args.extend(starts.iter());
            let sliced = self.apply(Prim::DynamicSlice(DynamicSlice { sizes }), &args);
            cur = self.apply(Prim::Reshape(Reshape { shape: known_shape(dims_of(&ty)) }), &[&sliced]);
        }
        Val { ty, ..cur }
    }

    /// NumPy's negative indices: `i < 0` means `i + n`.
    pub(crate) fn wrap_negative(&mut self, i: &Val, n: usize) -> Val {
        if let Some(Data::I32(x)) = i.known.as_ref().map(|a| &a.data) {
            let k = if x[0] < 0 { x[0] + n as i32 } else { x[0] };
            return self.known_val(Array::i32(vec![], vec![k]), Ty::scalar(DType::I32), false);
        }
        let zero = self.known_val(Array::i32(vec![], vec![0]), Ty::scalar(DType::I32), false);
        let nv = self.known_val(Array::i32(vec![], vec![n as i32]), Ty::scalar(DType::I32), false);
        let neg = self.apply(Prim::Compare(Compare { op: CmpOp::Lt }), &[i, &zero]);
        let plus = self.apply(Prim::Binary(Binary { op: BinaryOp::Add }), &[i, &nv]);
        self.apply(Prim::Select(Select), &[&neg, &plus, i])
    }
}

/// One index of `x[..]`: a run-time position, or a static range.
enum Pick {
    At(Val),
    Range(Dim, Dim),
}

/// Makes the dtypes of two operands agree when one of them is a weak literal.
pub(crate) fn unify_weak(cx: &mut Elab, a: Val, b: Val, ls: Span, rs: Span) -> (Val, Val) {
    let (Ty::Array(da, _), Ty::Array(db, _)) = (&a.ty, &b.ty) else { return (a, b) };
    let (da, db) = (*da, *db);
    if da == db {
        return (a, b);
    }
    match (a.weak, b.weak) {
        (true, false) if db.is_float() || !da.is_float() => (cx.convert(a, db, ls), b),
        (false, true) if da.is_float() || !db.is_float() => {
            let b = cx.convert(b, da, rs);
            (a, b)
        }
        // Two weak operands: an integer literal joins a float one.
        (true, true) if da.is_float() => {
            let b = cx.convert(b, da, rs);
            (a, b)
        }
        (true, true) if db.is_float() => (cx.convert(a, db, ls), b),
        _ => (a, b),
    }
}

/// Emits `select(pred, x, y)`, broadcasting a scalar predicate to the leaf's shape.
pub(crate) fn emit_select(b: &mut Builder, pred: Var, x: Var, y: Var, ty: &ArrayTy) -> Var {
    let pred = if ty.shape.is_empty() {
        pred
    } else {
        b.prim1(Prim::Broadcast(Broadcast { shape: ty.shape.clone(), dims: vec![] }), &[pred])
    };
    b.prim1(Prim::Select(Select), &[pred, x, y])
}

/// Stacks equal-typed values along a new leading axis.
pub(crate) fn emit_stack(b: Option<&mut Builder>, vals: &[Val]) -> Vec<Var> {
    let Some(b) = b else { return vec![] };
    let parts: Vec<Var> = vals
        .iter()
        .map(|v| {
            let mut shape = vec![1];
            shape.extend(b.ty(v.vars[0]).shape.iter().copied());
            b.prim1(Prim::Reshape(Reshape { shape }), &v.vars)
        })
        .collect();
    vec![b.prim1(Prim::Concat(Concat { axis: 0 }), &parts)]
}

/// Stacks host arrays of one type along a new leading axis.
pub(crate) fn stack_known(parts: &[Array]) -> Array {
    let mut shape = vec![parts.len()];
    shape.extend(parts[0].shape.iter().copied());
    let data = match &parts[0].data {
        Data::F32(_) => {
            Data::F32(parts.iter().flat_map(|p| if let Data::F32(v) = &p.data { v.clone() } else { vec![] }).collect())
        }
        Data::I32(_) => {
            Data::I32(parts.iter().flat_map(|p| if let Data::I32(v) = &p.data { v.clone() } else { vec![] }).collect())
        }
        Data::U32(_) => {
            Data::U32(parts.iter().flat_map(|p| if let Data::U32(v) = &p.data { v.clone() } else { vec![] }).collect())
        }
        Data::U8(_) => {
            Data::U8(parts.iter().flat_map(|p| if let Data::U8(v) = &p.data { v.clone() } else { vec![] }).collect())
        }
        Data::Bool(_) => Data::Bool(
            parts.iter().flat_map(|p| if let Data::Bool(v) = &p.data { v.clone() } else { vec![] }).collect(),
        ),
    };
    Array::new(shape, data)
}

/// Converts a known value as the device would; if `a` is a weak literal, its integers must
/// fit the target dtype exactly (`300000000000` is no i32, `-1` no u32, `256` no u8), as
/// JAX refuses `jnp.uint8(256)`, and the first that does not is the error. A typed value
/// wraps.
pub(crate) fn cast_known(a: &Array, to: DType, weak: bool) -> Result<Array, String> {
    fn ints(d: &Data) -> Option<Vec<i64>> {
        match d {
            Data::I32(v) => Some(v.iter().map(|&x| x.into()).collect()),
            Data::U32(v) => Some(v.iter().map(|&x| x.into()).collect()),
            Data::U8(v) => Some(v.iter().map(|&x| x.into()).collect()),
            Data::F32(_) | Data::Bool(_) => None,
        }
    }
    let out = Convert { to }.eval(&[a]).remove(0);
    match (ints(&a.data), ints(&out.data)) {
        (Some(x), Some(y)) if weak => match x.iter().zip(&y).find(|(p, q)| p != q) {
            Some((p, _)) => Err(p.to_string()),
            None => Ok(out),
        },
        _ => Ok(out),
    }
}

pub(crate) fn array_ty(t: &ArrayTy) -> Ty {
    Ty::Array(t.dtype, t.shape.iter().map(|&n| Dim::Known(n as u64)).collect())
}

pub(crate) fn dims_of(t: &Ty) -> &[Dim] {
    match t {
        Ty::Array(_, d) => d,
        Ty::Tuple(_) | Ty::Struct(..) | Ty::Error => &[],
    }
}

/// The shape of a concrete array value.
pub(crate) fn val_shape(v: &Val) -> Vec<usize> {
    known_shape(dims_of(&v.ty))
}

/// Dimensions that are known: in build mode, and for compile-time values, they all are.
pub(crate) fn known_shape(dims: &[Dim]) -> Vec<usize> {
    dims.iter()
        .map(|d| match d {
            Dim::Known(n) => *n as usize,
            Dim::Param(_) | Dim::Scaled(..) => {
                panic!("internal compiler error: size `{d}` is symbolic in a concrete operation")
            }
        })
        .collect()
}

fn op_name(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Pow => "**",
        BinOp::MatMul => "@",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "&&",
        BinOp::Or => "||",
    }
}

/// The primitive of a binary operator at a dtype, or what the operator expects instead.
fn binary_prim(op: BinOp, d: DType) -> Result<Prim, &'static str> {
    let arith = |o| if d == DType::Bool { Err("numbers") } else { Ok(Prim::Binary(Binary { op: o })) };
    let cmp = |o| Ok(Prim::Compare(Compare { op: o }));
    match op {
        BinOp::Add => arith(BinaryOp::Add),
        BinOp::Sub => arith(BinaryOp::Sub),
        BinOp::Mul => arith(BinaryOp::Mul),
        BinOp::Div => arith(BinaryOp::Div),
        BinOp::Rem => arith(BinaryOp::Rem),
        BinOp::Pow if d.is_float() => Ok(Prim::Binary(Binary { op: BinaryOp::Pow })),
        BinOp::Pow => Err("floats (convert with `as f32`)"),
        BinOp::Eq => cmp(CmpOp::Eq),
        BinOp::Ne => cmp(CmpOp::Ne),
        BinOp::Lt if d != DType::Bool => cmp(CmpOp::Lt),
        BinOp::Le if d != DType::Bool => cmp(CmpOp::Le),
        BinOp::Gt if d != DType::Bool => cmp(CmpOp::Gt),
        BinOp::Ge if d != DType::Bool => cmp(CmpOp::Ge),
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => Err("numbers"),
        BinOp::And if d == DType::Bool => Ok(Prim::Binary(Binary { op: BinaryOp::And })),
        BinOp::Or if d == DType::Bool => Ok(Prim::Binary(Binary { op: BinaryOp::Or })),
        BinOp::And | BinOp::Or => Err("bools"),
        BinOp::MatMul => Err("arrays"),
    }
}
