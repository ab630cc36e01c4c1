//! Primitives defined by their effect on differentiation: `stop_gradient`.

use super::util::expect_arity;
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, vectorized};
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

/// The identity on values, through which no derivative flows (`jax.lax.stop_gradient`):
/// `grad` treats its result as a constant. Any dtype and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct StopGradient;

impl Rules for StopGradient {
    fn name(&self) -> &'static str {
        "stop_gradient"
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("stop_gradient", args, 1)?;
        Ok(vec![args[0].clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        vec![args[0].clone()]
    }

    /// Nothing to compute: the result is the operand's SSA value.
    fn lower(&self, _cx: &mut LowerCx, args: &[String], _arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        vec![args[0].clone()]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        vectorized(b, Prim::StopGradient(StopGradient), args)
    }

    /// No derivative flows to the operand. (`transform::grad` also treats the result as
    /// independent of the differentiated parameters, so an integer computed from it,
    /// `argmax(stop_gradient(x))`, is no error.)
    fn vjp(
        &self,
        _b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        _cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(vec![None])
    }
}
