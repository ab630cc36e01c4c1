//! Collectives: `psum` and `pmean`, all-reduces across the replicas of a data-parallel
//! program.
//!
//! The same program runs on D devices (`lower_module(f, D)`, PJRT with `num_replicas =
//! D`), and [`AllReduce`] combines a value across all of them, as `jax.lax.psum` and
//! `jax.lax.pmean` do under `pmap`. The reference interpreter runs one replica, so there
//! both are the identity; so is the lowering for a single replica.

use super::util::expect_arity;
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, vectorized};
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::{LowerCx, fn_type, tensor_type};

/// How an all-reduce combines the replicas' values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AllReduceOp {
    /// The sum (wrapping on integers); f32, i32 or u32.
    Sum,
    /// The sum divided by the replica count; f32 only.
    Mean,
}

/// Every replica's result is the elementwise sum (or mean) of the operand over all
/// replicas. The f32 sum's order of addition is XLA's. Any shape; the result has the
/// operand's type.
#[derive(Clone, Debug, PartialEq)]
pub struct AllReduce {
    /// Sum or mean.
    pub op: AllReduceOp,
}

impl Rules for AllReduce {
    fn name(&self) -> &'static str {
        match self.op {
            AllReduceOp::Sum => "psum",
            AllReduceOp::Mean => "pmean",
        }
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity(self.name(), args, 1)?;
        let x = &args[0];
        let ok = match self.op {
            AllReduceOp::Sum => x.dtype != DType::Bool,
            AllReduceOp::Mean => x.dtype == DType::F32,
        };
        if !ok {
            return Err(format!("{} is not defined on {}", self.name(), x.dtype));
        }
        Ok(vec![x.clone()])
    }

    /// One replica: the identity.
    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        vec![args[0].clone()]
    }

    /// `stablehlo.all_reduce` with an add region over the one group of every replica
    /// (no channel: a cross-replica reduction, as JAX emits under `pmap`), then a divide
    /// by the replica count for the mean. Nothing for a single replica.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        let (x, ty) = (&args[0], &arg_tys[0]);
        let d = cx.replicas();
        if d <= 1 {
            return vec![x.clone()];
        }
        let ids: Vec<String> = (0..d).map(|i| i.to_string()).collect();
        let groups = format!("replica_groups = dense<[[{}]]> : tensor<1x{d}xi64>", ids.join(", "));
        let r = cx.fresh();
        cx.open(&format!("{r} = \"stablehlo.all_reduce\"({x}) <{{{groups}}}> ({{"));
        let scalar = ArrayTy::scalar(ty.dtype);
        let (a, b) = (cx.fresh(), cx.fresh());
        let t = tensor_type(&scalar);
        cx.label(&format!("^bb0({a}: {t}, {b}: {t}):"));
        let s = cx.op("stablehlo.add", &[a, b], "", &[scalar.clone(), scalar.clone()], &scalar);
        cx.ret(&[s], std::slice::from_ref(&scalar));
        cx.close(&format!("}}) : {}", fn_type(std::slice::from_ref(ty), std::slice::from_ref(ty))));
        if self.op == AllReduceOp::Sum {
            return vec![r];
        }
        let n = cx.splat(&Array::f32(vec![], vec![d as f32]), ty);
        vec![cx.op("stablehlo.divide", &[r, n], "", &[ty.clone(), ty.clone()], ty)]
    }

    /// Elementwise across replicas: the batch axis stays where it is.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        vectorized(b, Prim::AllReduce(self.clone()), args)
    }

    /// Linear and the same on every replica: the cotangent is reduced the same way
    /// (`psum`'s transpose is `psum`, and `pmean`'s is `pmean`).
    fn vjp(
        &self,
        b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(vec![Some(b.prim1(Prim::AllReduce(self.clone()), &[cts[0]]))])
    }
}
