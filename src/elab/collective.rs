//! The surface `psum(x)` and `pmean(x)`: sum and mean across the replicas of a
//! data-parallel program, leaf by leaf over a tuple or struct (a pytree of gradients,
//! say), as `jax.lax.psum` / `jax.lax.pmean` over a `pmap` axis.
//!
//! The value is never folded at compile time, even when known: a constant summed over D
//! replicas is D times itself.

use super::{Elab, Val};
use crate::array::DType;
use crate::prims::{AllReduce, AllReduceOp, Prim};
use crate::syntax::ast;
use crate::types::Ty;
use crate::types::error::TypeError;

impl Elab<'_> {
    /// `psum(x)` or `pmean(x)` (`name`): the same type as `x`, whose leaves must be `f32`
    /// arrays (or, for `psum`, any numbers).
    pub(crate) fn all_reduce(&mut self, name: &str, e: &ast::Expr) -> Val {
        let op = if name == "pmean" { AllReduceOp::Mean } else { AllReduceOp::Sum };
        let mut v = self.expr(e);
        if v.weak && op == AllReduceOp::Mean && matches!(v.ty, Ty::Array(d, _) if d != DType::F32) {
            v = self.convert(v, DType::F32, e.span);
        }
        let ok = |d: DType| if op == AllReduceOp::Mean { d == DType::F32 } else { d != DType::Bool };
        if !leaves_all(&v.ty, &ok) {
            let expected = match op {
                AllReduceOp::Mean => "`f32` arrays, or a tuple or struct of them",
                AllReduceOp::Sum => "number arrays, or a tuple or struct of them",
            };
            return self.err(TypeError::BadOperand {
                op: name.into(),
                ty: v.ty.clone(),
                span: e.span,
                expected: expected.into(),
            });
        }
        let vars = match self.b.as_mut() {
            // One all-reduce for the whole tree.
            Some(b) if !v.vars.is_empty() => b.prim(Prim::AllReduce(AllReduce { op }), &v.vars),
            _ => vec![],
        };
        Val { vars, known: None, ..v }
    }
}

/// Whether every array in a type has a dtype that satisfies `ok` (an erroneous type
/// passes: it was reported).
fn leaves_all(t: &Ty, ok: &dyn Fn(DType) -> bool) -> bool {
    match t {
        Ty::Array(d, _) => ok(*d),
        Ty::Tuple(ts) => ts.iter().all(|t| leaves_all(t, ok)),
        Ty::Struct(def, args) => Ty::struct_fields(def, args).iter().all(|(_, t)| leaves_all(t, ok)),
        Ty::Error => true,
    }
}
