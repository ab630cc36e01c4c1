//! Collectives: `psum` and `pmean`, all-reduces across the replicas of a data-parallel
//! program.
//!
//! The same program runs on D devices of each of P processes (`lower_module(f, D)`, PJRT
//! with `num_replicas = D`; `LowerCx::processes` = P), and [`AllReduce`] combines values
//! across all D x P replicas, as `jax.lax.psum` and `jax.lax.pmean` do under `pmap`. The
//! reference interpreter runs one replica, so there both are the identity; so is the
//! lowering for a single replica.

use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
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

/// Every replica's results are the elementwise sums (or means) of the operands over all
/// replicas. Variadic, so that a tree of gradients is one all-reduce (across processes,
/// one flat buffer per dtype). The f32 sum's order of addition is XLA's within a process
/// and gloo's across them. Any shapes; the results have the operands' types.
#[derive(Clone, Debug, PartialEq)]
pub struct AllReduce {
    /// Sum or mean.
    pub op: AllReduceOp,
}

/// The FFI handler that sums across processes (`distributed::gloo`): operands `(token,
/// flat)`, results `(token, flat summed)`. The `ui32` token is the local replica's index
/// (which gloo group it reduces in); threading it from call to call orders the calls, so
/// that every process issues them in the same order.
pub const CROSS_PROCESS_SUM: &str = "podc_cross_process_sum";

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
        if args.is_empty() {
            return Err(format!("{} takes at least one operand", self.name()));
        }
        for x in args {
            let ok = match self.op {
                AllReduceOp::Sum => x.dtype != DType::Bool,
                AllReduceOp::Mean => x.dtype == DType::F32,
            };
            if !ok {
                return Err(format!("{} is not defined on {}", self.name(), x.dtype));
            }
        }
        Ok(args.to_vec())
    }

    /// One replica: the identity.
    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        args.iter().map(|&a| a.clone()).collect()
    }

    /// Within the process, `stablehlo.all_reduce` with an add region over the one group of
    /// its replicas (no channel: a cross-replica reduction, as JAX emits under `pmap`), one
    /// per operand; across processes, one [`CROSS_PROCESS_SUM`] call per dtype on the
    /// operands flattened and joined. Then a divide by the replica count for the mean.
    /// Nothing for a single replica.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        let (local, processes) = (cx.replicas(), cx.processes());
        let mut sums: Vec<String> = args
            .iter()
            .zip(arg_tys)
            .map(|(x, ty)| if local > 1 { all_reduce_local(cx, x, ty, local) } else { x.clone() })
            .collect();
        if processes > 1 {
            for dtype in [DType::F32, DType::I32, DType::U32] {
                let group: Vec<usize> = (0..args.len()).filter(|&i| arg_tys[i].dtype == dtype).collect();
                if !group.is_empty() {
                    let tys: Vec<&ArrayTy> = group.iter().map(|&i| &arg_tys[i]).collect();
                    let xs: Vec<String> = group.iter().map(|&i| sums[i].clone()).collect();
                    for (i, s) in group.into_iter().zip(sum_across_processes(cx, &xs, &tys)) {
                        sums[i] = s;
                    }
                }
            }
        }
        let d = local * processes;
        if self.op == AllReduceOp::Sum || d <= 1 {
            return sums;
        }
        sums.into_iter()
            .zip(arg_tys)
            .map(|(r, ty)| {
                let n = cx.splat(&Array::f32(vec![], vec![d as f32]), ty);
                cx.op("stablehlo.divide", &[r, n], "", &[ty.clone(), ty.clone()], ty)
            })
            .collect()
    }

    /// Elementwise across replicas: each operand's batch axis stays where it is.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let vars: Vec<Var> = args.iter().map(|a| a.var).collect();
        let outs = b.prim(Prim::AllReduce(self.clone()), &vars);
        outs.into_iter().zip(args).map(|(var, a)| BVal { var, axis: a.axis }).collect()
    }

    /// Linear and the same on every replica: the cotangents are reduced the same way
    /// (`psum`'s transpose is `psum`, and `pmean`'s is `pmean`).
    fn vjp(
        &self,
        b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(b.prim(Prim::AllReduce(self.clone()), cts).into_iter().map(Some).collect())
    }
}

/// The sum of `x` over the process's `d` replicas.
fn all_reduce_local(cx: &mut LowerCx, x: &str, ty: &ArrayTy, d: usize) -> String {
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
    r
}

/// The sums of `xs` (one dtype) over the processes: flattened, joined, summed by one
/// [`CROSS_PROCESS_SUM`] call, and split again.
fn sum_across_processes(cx: &mut LowerCx, xs: &[String], tys: &[&ArrayTy]) -> Vec<String> {
    let dtype = tys[0].dtype;
    let sizes: Vec<usize> = tys.iter().map(|t| t.shape.iter().product()).collect();
    let total: usize = sizes.iter().sum();
    if total == 0 {
        return xs.to_vec();
    }
    let flat_ty = |n: usize| ArrayTy::new(dtype, vec![n]);
    let flats: Vec<String> =
        xs.iter().zip(tys).zip(&sizes).map(|((x, &ty), &n)| reshape(cx, x, ty, &flat_ty(n))).collect();
    let joined = match &flats[..] {
        [one] => one.clone(),
        _ => {
            let in_tys: Vec<ArrayTy> = sizes.iter().map(|&n| flat_ty(n)).collect();
            cx.op("stablehlo.concatenate", &flats, "dimension = 0 : i64", &in_tys, &flat_ty(total))
        }
    };
    let token = cx.collective_token();
    let token_ty = ArrayTy::scalar(DType::U32);
    let r = cx.fresh();
    cx.line(&format!(
        "{r}:2 = \"stablehlo.custom_call\"({token}, {joined}) <{{api_version = 4 : i32, call_target_name = \"{CROSS_PROCESS_SUM}\", has_side_effect = true}}> : {}",
        fn_type(&[token_ty.clone(), flat_ty(total)], &[token_ty, flat_ty(total)])
    ));
    cx.set_collective_token(format!("{r}#0"));
    let summed = format!("{r}#1");
    let mut at = 0;
    sizes
        .iter()
        .zip(tys)
        .map(|(&n, &ty)| {
            let part = if xs.len() == 1 {
                summed.clone()
            } else {
                let attrs = format!(
                    "start_indices = array<i64: {at}>, limit_indices = array<i64: {}>, strides = array<i64: 1>",
                    at + n
                );
                cx.op("stablehlo.slice", std::slice::from_ref(&summed), &attrs, &[flat_ty(total)], &flat_ty(n))
            };
            at += n;
            reshape(cx, &part, &flat_ty(n), ty)
        })
        .collect()
}

/// `x: from` as `to` (the same elements), nothing when the shapes agree.
fn reshape(cx: &mut LowerCx, x: &str, from: &ArrayTy, to: &ArrayTy) -> String {
    match from.shape == to.shape {
        true => x.to_string(),
        false => cx.op("stablehlo.reshape", &[x.to_string()], "", std::slice::from_ref(from), to),
    }
}
