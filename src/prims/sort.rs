//! Sorting: `argsort` along one axis.
//!
//! Keys compare as `jnp.argsort` compares them (`lax.sort` with JAX's
//! `_sort_lt_comparator`): f32 keys are canonicalised, every zero to `+0` and every NaN
//! to the positive quiet NaN, then ordered by IEEE total order, so `-inf < … < 0 < … <
//! inf < NaN` with `-0 == 0` and all NaNs equal. The sort is stable, so equal keys keep
//! their order and `argsort` is fully determined.

use super::elementwise::{CmpOp, flush, lower_compare};
use super::util::{expect_arity, indices, ravel, strides};
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::{LowerCx, fn_type, tensor_type};
use std::cmp::Ordering;

/// The i32 indices that sort the operand along `axis`, ascending and stable (see the
/// module docs for how f32 keys order). Keys are f32, i32 or u32; the result has the
/// operand's shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Argsort {
    /// The dimension sorted along.
    pub axis: usize,
}

/// An f32 key as the comparator sees it: zeros as `+0`, NaNs as the positive quiet NaN.
/// Subnormals compare as zero, as the device's float compare flushes them.
fn canonical(x: f32) -> f32 {
    let x = flush(x);
    if x == 0.0 {
        0.0
    } else if x.is_nan() {
        f32::NAN
    } else {
        x
    }
}

/// The stable argsort of every lane of `v` (of `shape`) along `axis`.
fn argsort<T: Copy>(v: &[T], shape: &[usize], axis: usize, cmp: impl Fn(T, T) -> Ordering) -> Vec<i32> {
    let st = strides(shape);
    let mut out = vec![0; v.len()];
    let mut lane_shape = shape.to_vec();
    lane_shape[axis] = 1;
    for start in indices(&lane_shape) {
        let base = ravel(&start, &st);
        let at = |j: usize| base + j * st[axis];
        let mut order: Vec<usize> = (0..shape[axis]).collect();
        order.sort_by(|&i, &j| cmp(v[at(i)], v[at(j)]));
        for (j, &i) in order.iter().enumerate() {
            out[at(j)] = i as i32;
        }
    }
    out
}

impl Rules for Argsort {
    fn name(&self) -> &'static str {
        "argsort"
    }

    fn attrs(&self) -> String {
        format!("[axis={}]", self.axis)
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("argsort", args, 1)?;
        let x = &args[0];
        if x.dtype == DType::Bool {
            return Err(format!("argsort: keys must be numbers, got {x}"));
        }
        if self.axis >= x.rank() {
            return Err(format!("argsort: axis {} is out of range for {x}", self.axis));
        }
        if x.shape[self.axis] > i32::MAX as usize {
            return Err(format!("argsort: axis {} of {x} is too long for an i32 index", self.axis));
        }
        Ok(vec![ArrayTy::new(DType::I32, x.shape.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let (s, a) = (&x.shape, self.axis);
        let out = match &x.data {
            Data::F32(v) => argsort(v, s, a, |p, q| canonical(p).total_cmp(&canonical(q))),
            Data::I32(v) => argsort(v, s, a, |p, q| p.cmp(&q)),
            Data::U32(v) => argsort(v, s, a, |p, q| p.cmp(&q)),
            Data::U8(v) => argsort(v, s, a, |p, q| p.cmp(&q)),
            Data::Bool(_) => unreachable!("infer rejects bool keys"),
        };
        vec![Array::new(s.clone(), Data::I32(out))]
    }

    /// `stablehlo.sort` of the keys with an iota along the axis, stable, whose
    /// comparator is JAX's: canonicalise f32 keys, then compare with `TOTALORDER`
    /// (`SIGNED` / `UNSIGNED` for integers). The sorted iota is the result.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let (x, t) = (&args[0], &arg_tys[0]);
        let idx_ty = &outs[0];
        let iota = cx.op("stablehlo.iota", &[], &format!("iota_dimension = {} : i64", self.axis), &[], idx_ty);
        let r = cx.fresh();
        cx.open(&format!(
            "{r}:2 = \"stablehlo.sort\"({x}, {iota}) <{{dimension = {} : i64, is_stable = true}}> ({{",
            self.axis
        ));
        let key = ArrayTy::scalar(t.dtype);
        let idx = ArrayTy::scalar(DType::I32);
        let params: Vec<String> = (0..4).map(|_| cx.fresh()).collect();
        let (kt, it) = (tensor_type(&key), tensor_type(&idx));
        cx.label(&format!("^bb0({}: {kt}, {}: {kt}, {}: {it}, {}: {it}):", params[0], params[1], params[2], params[3]));
        let (a, b) = (comparable(cx, &params[0], &key), comparable(cx, &params[1], &key));
        let kind = match t.dtype {
            DType::F32 => "TOTALORDER",
            DType::I32 => "SIGNED",
            DType::U32 | DType::U8 | DType::Bool => "UNSIGNED",
        };
        let attrs = format!(
            "comparison_direction = #stablehlo<comparison_direction LT>, compare_type = #stablehlo<comparison_type {kind}>"
        );
        let bool_ty = ArrayTy::scalar(DType::Bool);
        let lt = cx.op("stablehlo.compare", &[a, b], &attrs, &[key.clone(), key.clone()], &bool_ty);
        cx.ret(&[lt], &[bool_ty]);
        cx.close(&format!("}}) : {}", fn_type(&[t.clone(), idx_ty.clone()], &[t.clone(), idx_ty.clone()])));
        vec![format!("{r}#1")]
    }

    /// Sorts along the same axis, renumbered around the batch axis, which stays.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let axis = if self.axis >= a { self.axis + 1 } else { self.axis };
        vec![BVal::batched(b.prim1(Prim::Argsort(Argsort { axis }), &[x.var]), a)]
    }

    /// Indices: piecewise constant in the keys, no derivative.
    fn vjp(
        &self,
        _b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        _cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Err(NotDifferentiable)
    }
}

/// A comparator operand as JAX's `_canonicalize_float_for_sort` leaves it: for f32,
/// `select(x == 0, 0, x)` then `select(x != x, NaN, ·)`; integers unchanged.
fn comparable(cx: &mut LowerCx, x: &str, ty: &ArrayTy) -> String {
    if ty.dtype != DType::F32 {
        return x.to_string();
    }
    let bool_ty = ArrayTy::scalar(DType::Bool);
    let zero = cx.constant(&Array::f32(vec![], vec![0.0]));
    let is_zero = lower_compare(cx, CmpOp::Eq, x, &zero, ty);
    let sel = [bool_ty, ty.clone(), ty.clone()];
    let y = cx.op("stablehlo.select", &[is_zero, zero, x.to_string()], "", &sel, ty);
    let nan = cx.constant(&Array::f32(vec![], vec![f32::NAN]));
    let is_nan = lower_compare(cx, CmpOp::Ne, x, x, ty);
    cx.op("stablehlo.select", &[is_nan, nan, y], "", &sel, ty)
}
