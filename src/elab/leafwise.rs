//! Arithmetic on records and tuples, leaf by leaf, as `jax.tree_util.tree_map` does:
//! `params - lr * grads` on two `Params`, `sqrt(nu)`, `where(done, zeros_like(s), s)`.
//!
//! An operand that is a record or tuple fixes the result's type; every other operand must
//! have that type too, or be an array, which each leaf then combines with (a scalar
//! learning rate, a shared condition). Each leaf's result must keep the leaf's type, so
//! that the result is a value of the record's type. `sum(x)` of a record adds up every
//! leaf's sum: the squared global norm is `sum(g * g)`.

use super::{Elab, Val};
use crate::array::{Array, ArrayTy};
use crate::prims::{Binary, BinaryOp, Prim};
use crate::syntax::ast::{self, ExprKind};
use crate::syntax::span::Span;
use crate::types::Ty;
use crate::types::error::TypeError;
use std::collections::HashMap;

/// Whether the builtin `name` maps over the leaves of a record.
fn leafwise(name: &str) -> bool {
    super::builtins::float_unary(name).is_some()
        || matches!(name, "abs" | "sign" | "min" | "max" | "clamp" | "where" | "zeros_like")
}

pub(super) fn is_tree(t: &Ty) -> bool {
    matches!(t, Ty::Tuple(_) | Ty::Struct(..))
}

/// What indexing with `n` indices expects, for its error.
pub(super) fn batch_of_records(n: usize) -> String {
    let axes = if n == 1 { "a leading axis".to_string() } else { format!("{n} leading axes") };
    format!("an array, or a batch of records (`State[B]`) with {axes}")
}

impl Elab<'_> {
    /// The arrays of a value, in flattening order.
    pub(super) fn leaves(&self, v: &Val) -> Vec<Val> {
        match &v.ty {
            Ty::Tuple(_) | Ty::Struct(..) => self.split(v).iter().flat_map(|p| self.leaves(p)).collect(),
            Ty::Array(..) | Ty::Error => vec![v.clone()],
        }
    }

    /// Applies `op` to the leaves of the record operands (see the module docs); `None` when
    /// no operand is a record or tuple.
    pub(super) fn leafwise(
        &mut self,
        name: &str,
        vals: &[Val],
        span: Span,
        mut op: impl FnMut(&mut Self, Vec<Val>) -> Val,
    ) -> Option<Val> {
        let tree = vals.iter().find(|v| is_tree(&v.ty))?.ty.clone();
        if vals.iter().any(|v| v.ty.is_error()) {
            return Some(Val::error());
        }
        if let Some(other) = vals.iter().find(|v| is_tree(&v.ty) && v.ty != tree) {
            let (left, right) = (tree, other.ty.clone());
            return Some(self.err(TypeError::Leafwise { op: name.into(), left, right, span }));
        }
        let split: Vec<Option<Vec<Val>>> = vals.iter().map(|v| is_tree(&v.ty).then(|| self.leaves(v))).collect();
        let n = split.iter().flatten().next().map_or(0, Vec::len);
        let mut vars = vec![];
        for i in 0..n {
            let args: Vec<Val> =
                vals.iter().zip(&split).map(|(v, s)| s.as_ref().map_or_else(|| v.clone(), |l| l[i].clone())).collect();
            let leaf = split.iter().flatten().next().map(|l| l[i].ty.clone()).unwrap_or(Ty::Error);
            let out = op(self, args);
            if out.ty.is_error() {
                return Some(out);
            }
            if out.ty != leaf {
                let (left, right) = (leaf, out.ty);
                return Some(self.err(TypeError::Leafwise { op: name.into(), left, right, span }));
            }
            vars.extend(out.vars);
        }
        Some(Val::of(tree, vars))
    }

    /// The builtins that accept records: elementwise ones leaf by leaf, `zeros_like`, and
    /// `sum` of a whole record. `None` for every other builtin.
    pub(super) fn leafwise_builtin(&mut self, func: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<Val> {
        let name = func.name.as_str();
        let whole_sum = name == "sum" && args.len() == 1;
        if !leafwise(name) && !whole_sum {
            return None;
        }
        let vals: Vec<Val> = args.iter().map(|a| self.expr(a)).collect();
        let spans: Vec<Span> = args.iter().map(|a| a.span).collect();
        let each = |cx: &mut Self, leaves: Vec<Val>| match name {
            "zeros_like" => cx.zeros_like(&leaves[0]),
            _ => cx.builtin_on(func, leaves, &spans, span),
        };
        if name == "zeros_like" && vals.len() != 1 {
            let found = vals.len();
            return Some(self.err(TypeError::Arity {
                what: "`zeros_like`".into(),
                expected: 1,
                found,
                span,
                decl: None,
            }));
        }
        if whole_sum && is_tree(&vals[0].ty) {
            let leaves = self.leaves(&vals[0]);
            let sums: Vec<Val> = leaves.into_iter().map(|l| each(self, vec![l])).collect();
            let mut total = sums.first().cloned().unwrap_or_else(|| {
                self.known_val(Array::f32(vec![], vec![0.0]), Ty::scalar(crate::array::DType::F32), false)
            });
            for s in &sums[1..] {
                let add = |_| Ok(Prim::Binary(Binary { op: BinaryOp::Add }));
                total = self.elementwise2("sum", total, s.clone(), spans[0], spans[0], span, add);
            }
            return Some(total);
        }
        match self.leafwise(name, &vals, span, each) {
            Some(v) => Some(v),
            None => Some(each(self, vals)),
        }
    }

    /// A builtin applied to evaluated arguments (bound to names the lexer cannot produce,
    /// with the arguments' own spans, so that diagnostics point at the source).
    fn builtin_on(&mut self, func: &ast::Ident, vals: Vec<Val>, spans: &[Span], span: Span) -> Val {
        self.scopes.push(HashMap::new());
        let mut exprs = vec![];
        for (i, (v, s)) in vals.into_iter().zip(spans).enumerate() {
            let var = format!("#leaf{i}");
            self.bind_name(&var, v);
            exprs.push(ast::Expr { kind: ExprKind::Name(ast::Ident { name: var, span: *s }), span: *s });
        }
        let v = self.array_builtin(func, &exprs, span).expect("leafwise builtins are array builtins");
        self.scopes.pop();
        v
    }

    /// Zeros of an array's type.
    fn zeros_like(&mut self, v: &Val) -> Val {
        let Ty::Array(dtype, dims) = &v.ty else { return Val::error() };
        if !self.building() {
            return Val::of(v.ty.clone(), vec![]);
        }
        let shape = super::ops::known_shape(dims);
        let z = Array::zeros(&ArrayTy::new(*dtype, shape));
        let ty = v.ty.clone();
        self.known_val(z, ty, false)
    }
}
