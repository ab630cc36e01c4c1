//! The surface `argsort(x)` and `argsort(x, axis)`: the stable ascending argsort along
//! the last axis, or along `axis`, as `jnp.argsort(x, axis, stable=True)`.

use super::{Elab, Val};
use crate::array::DType;
use crate::prims::{Argsort, Prim};
use crate::syntax::ast;
use crate::types::Ty;
use crate::types::error::TypeError;

impl Elab<'_> {
    /// `argsort(x[, axis])`: `i32` indices of `x`'s shape; `x` holds numbers, rank 1 or more.
    pub(crate) fn argsort(&mut self, args: &[ast::Expr]) -> Val {
        let v = self.expr(&args[0]);
        let dims = match &v.ty {
            Ty::Error => return v,
            Ty::Array(d, dims) if *d != DType::Bool && !dims.is_empty() => dims.clone(),
            _ => {
                let expected = "a number array of rank 1 or more".into();
                return self.err(TypeError::BadOperand {
                    op: "argsort".into(),
                    ty: v.ty.clone(),
                    span: args[0].span,
                    expected,
                });
            }
        };
        let Some(axis) = self.axis_arg(&v, args.get(1), args[0].span, true) else { return Val::error() };
        let ty = Ty::Array(DType::I32, dims);
        if !self.concrete(&[&v]) {
            return Val::of(ty, vec![]);
        }
        Val { ty, ..self.apply(Prim::Argsort(Argsort { axis }), &[&v]) }
    }
}
