//! Reductions: sum, product, max and min over axes, and argmax along one axis.
//!
//! A reduction's combiner is a binary operator's row from [`super::elementwise`], so the
//! reference evaluation combines elements with exactly the scalar function that the
//! elementwise primitive uses (NaN propagation included), and the lowering puts that
//! operator's StableHLO op in the `stablehlo.reduce` region.

use super::elementwise::{BinaryOp, BinaryRow, CmpOp, flush, lower_binary, lower_compare};
use super::util::{check_axes, expect_arity, i64_array, indices, list, ravel, strides};
use super::{Broadcast, Concat, Reshape, Reverse, Select, Slice, Transpose};
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::{NotDifferentiable, binary, compare, full_like, mul, splat};
use crate::prims::emit::{LowerCx, fn_type, tensor_type};

/// A reduction operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (wrapping on integers; not defined on bool). The interpreter adds f32 in
    /// row-major order; XLA may associate differently, so f32 sums agree to rounding.
    Sum,
    /// Product (wrapping on integers; not defined on bool), associated as `Sum` is.
    Prod,
    /// Maximum: NaN-propagating on f32, `or` on bool; the empty maximum is `-inf`,
    /// the dtype's minimum, or false.
    Max,
    /// Minimum: NaN-propagating on f32, `and` on bool; the empty minimum is `+inf`,
    /// the dtype's maximum, or true.
    Min,
}

/// Reduces the operand over `axes`, which are removed from the shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    /// The operator.
    pub op: ReduceOp,
    /// The dimensions reduced, distinct.
    pub axes: Vec<usize>,
}

/// The i32 index of the maximum along `axis`, which is removed from the shape.
///
/// Ties go to the first index. A NaN counts as larger than every number, so a slice
/// holding NaN gives the index of its first NaN (as `jnp.argmax` does). Values compare as
/// the device compares them, subnormals as zero.
#[derive(Clone, Debug, PartialEq)]
pub struct Argmax {
    /// The dimension searched; it must not be empty.
    pub axis: usize,
}

impl ReduceOp {
    fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "reduce_sum",
            ReduceOp::Prod => "reduce_prod",
            ReduceOp::Max => "reduce_max",
            ReduceOp::Min => "reduce_min",
        }
    }

    /// The binary operator that combines two elements of dtype `d`; bool max and min
    /// are `or` and `and`. `None` where the reduction is not defined.
    fn combiner(self, d: DType) -> Option<BinaryOp> {
        match (self, d) {
            (ReduceOp::Sum, DType::Bool) => None,
            (ReduceOp::Sum, DType::F32 | DType::I32 | DType::U32 | DType::U8) => Some(BinaryOp::Add),
            (ReduceOp::Prod, DType::Bool) => None,
            (ReduceOp::Prod, DType::F32 | DType::I32 | DType::U32 | DType::U8) => Some(BinaryOp::Mul),
            (ReduceOp::Max, DType::Bool) => Some(BinaryOp::Or),
            (ReduceOp::Max, DType::F32 | DType::I32 | DType::U32 | DType::U8) => Some(BinaryOp::Max),
            (ReduceOp::Min, DType::Bool) => Some(BinaryOp::And),
            (ReduceOp::Min, DType::F32 | DType::I32 | DType::U32 | DType::U8) => Some(BinaryOp::Min),
        }
    }

    /// The identity of the combiner: the result of reducing nothing.
    fn init(self, d: DType) -> Array {
        let data = match (self, d) {
            (ReduceOp::Sum, DType::F32) => Data::F32(vec![0.0]),
            (ReduceOp::Sum, DType::I32) => Data::I32(vec![0]),
            (ReduceOp::Sum, DType::U32) => Data::U32(vec![0]),
            (ReduceOp::Sum, DType::U8) => Data::U8(vec![0]),
            (ReduceOp::Sum, DType::Bool) => Data::Bool(vec![false]),
            (ReduceOp::Prod, DType::F32) => Data::F32(vec![1.0]),
            (ReduceOp::Prod, DType::I32) => Data::I32(vec![1]),
            (ReduceOp::Prod, DType::U32) => Data::U32(vec![1]),
            (ReduceOp::Prod, DType::U8) => Data::U8(vec![1]),
            (ReduceOp::Prod, DType::Bool) => Data::Bool(vec![true]),
            (ReduceOp::Max, DType::F32) => Data::F32(vec![f32::NEG_INFINITY]),
            (ReduceOp::Max, DType::I32) => Data::I32(vec![i32::MIN]),
            (ReduceOp::Max, DType::U32) => Data::U32(vec![0]),
            (ReduceOp::Max, DType::U8) => Data::U8(vec![0]),
            (ReduceOp::Max, DType::Bool) => Data::Bool(vec![false]),
            (ReduceOp::Min, DType::F32) => Data::F32(vec![f32::INFINITY]),
            (ReduceOp::Min, DType::I32) => Data::I32(vec![i32::MAX]),
            (ReduceOp::Min, DType::U32) => Data::U32(vec![u32::MAX]),
            (ReduceOp::Min, DType::U8) => Data::U8(vec![u8::MAX]),
            (ReduceOp::Min, DType::Bool) => Data::Bool(vec![true]),
        };
        Array::new(vec![], data)
    }
}

/// The shape left after removing `axes`.
fn kept_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &n)| n).collect()
}

/// For every element of `shape` in row-major order, the flat position of the result
/// element it reduces into.
fn destinations<'a>(shape: &'a [usize], axes: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
    let out_strides = strides(&kept_shape(shape, axes));
    indices(shape).map(move |idx| {
        let kept: Vec<usize> = idx.iter().enumerate().filter(|(d, _)| !axes.contains(d)).map(|(_, &i)| i).collect();
        ravel(&kept, &out_strides)
    })
}

/// Folds the elements of `x` over `axes` with `row`'s scalar function, in row-major
/// order, starting from `init`.
fn fold(x: &Array, axes: &[usize], row: &BinaryRow, init: &Array) -> Array {
    fn go<T: Copy>(
        v: &[T],
        init: &[T],
        f: Option<impl Fn(T, T) -> T>,
        n: usize,
        dest: impl Iterator<Item = usize>,
    ) -> Vec<T> {
        let f = f.expect("combiner defined on the dtype");
        let mut out = vec![init[0]; n];
        for (&x, o) in v.iter().zip(dest) {
            out[o] = f(out[o], x);
        }
        out
    }
    let shape = kept_shape(&x.shape, axes);
    let n = shape.iter().product();
    let dest = destinations(&x.shape, axes);
    let data = match (&x.data, &init.data) {
        (Data::F32(v), Data::F32(i)) => Data::F32(go(v, i, row.fns.f32, n, dest)),
        (Data::I32(v), Data::I32(i)) => Data::I32(go(v, i, row.fns.i32, n, dest)),
        (Data::U32(v), Data::U32(i)) => Data::U32(go(v, i, row.fns.u32, n, dest)),
        (Data::U8(v), Data::U8(i)) => Data::U8(go(v, i, row.fns.u8(), n, dest)),
        (Data::Bool(v), Data::Bool(i)) => Data::Bool(go(v, i, row.fns.bool, n, dest)),
        (Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_), _) => {
            panic!("reduce: init of another dtype")
        }
    };
    Array::new(shape, data)
}

/// Emits a `stablehlo.reduce` of `x` over `axes` with `combiner` in its region.
fn lower_reduce(cx: &mut LowerCx, x: &str, x_ty: &ArrayTy, init: &Array, combiner: BinaryOp, axes: &[usize]) -> String {
    let init_name = cx.constant(init);
    let scalar = ArrayTy::scalar(x_ty.dtype);
    let out = ArrayTy::new(x_ty.dtype, kept_shape(&x_ty.shape, axes));
    let mut dims = axes.to_vec();
    dims.sort_unstable();
    let r = cx.fresh();
    cx.open(&format!("{r} = \"stablehlo.reduce\"({x}, {init_name}) <{{dimensions = {}}}> ({{", i64_array(&dims)));
    let (a, b) = (cx.fresh(), cx.fresh());
    let t = tensor_type(&scalar);
    cx.label(&format!("^bb0({a}: {t}, {b}: {t}):"));
    let c = lower_binary(cx, combiner, &a, &b, &scalar);
    cx.ret(&[c], std::slice::from_ref(&scalar));
    cx.close(&format!("}}) : {}", fn_type(&[x_ty.clone(), scalar], &[out])));
    r
}

impl Rules for Reduce {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self) -> String {
        format!("[axes={}]", list(&self.axes))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity(self.name(), args, 1)?;
        let x = &args[0];
        if self.op.combiner(x.dtype).is_none() {
            return Err(format!("{} is not defined on {}", self.name(), x.dtype));
        }
        check_axes(self.name(), "axis", &self.axes, x.rank())?;
        Ok(vec![ArrayTy::new(x.dtype, kept_shape(&x.shape, &self.axes))])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let combiner = self.op.combiner(x.dtype()).expect("reduction defined on the dtype");
        vec![fold(x, &self.axes, &combiner.rule(), &self.op.init(x.dtype()))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        let d = arg_tys[0].dtype;
        let combiner = self.op.combiner(d).expect("reduction defined on the dtype");
        vec![lower_reduce(cx, &args[0], &arg_tys[0], &self.op.init(d), combiner, &self.axes)]
    }

    /// Reduces the same axes, renumbered around the batch axis, which stays; it moves
    /// forward by the number of reduced axes before it.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let axes: Vec<usize> = self.axes.iter().map(|&d| if d >= a { d + 1 } else { d }).collect();
        let out = a - axes.iter().filter(|&&d| d < a).count();
        vec![BVal::batched(b.prim1(Prim::Reduce(Reduce { op: self.op, axes }), &[x.var]), out)]
    }

    /// A sum sends its cotangent to every element it summed, a product to every element
    /// times the product of the others. A max or min sends it to the elements equal to
    /// the result, shared equally among ties (JAX's `_reduce_chooser_jvp_rule`).
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let x = args[0];
        let shape = b.ty(x).shape.clone();
        let kept: Vec<usize> = (0..shape.len()).filter(|d| !self.axes.contains(d)).collect();
        let widen = |b: &mut Builder, v: Var| {
            b.prim1(Prim::Broadcast(Broadcast { shape: shape.clone(), dims: kept.clone() }), &[v])
        };
        match self.op {
            ReduceOp::Sum => Ok(vec![Some(widen(b, cts[0]))]),
            ReduceOp::Prod => {
                let ct = widen(b, cts[0]);
                let others = products_of_others(b, x, &self.axes);
                Ok(vec![Some(mul(b, ct, others))])
            }
            ReduceOp::Max | ReduceOp::Min => {
                let z = widen(b, outs[0]);
                let at = compare(b, CmpOp::Eq, x, z);
                let (one, zero) = (full_like(b, 1.0, x), full_like(b, 0.0, x));
                let hits = b.prim1(Prim::Select(Select), &[at, one, zero]);
                let counts = b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes: self.axes.clone() }), &[hits]);
                let share = binary(b, BinaryOp::Div, cts[0], counts);
                let share = widen(b, share);
                Ok(vec![Some(mul(b, share, hits))])
            }
        }
    }
}

/// For each element of `x`, the product of the other elements it is reduced with over
/// `axes`: the derivative of their product. It multiplies the products of the elements
/// before and after it (exclusive scans), without dividing, so zeros and large values
/// among the others come out as in the product itself (JAX builds its rule from
/// products too, as a tree).
fn products_of_others(b: &mut Builder, x: Var, axes: &[usize]) -> Var {
    let shape = b.ty(x).shape.clone();
    if shape.contains(&0) {
        return full_like(b, 0.0, x);
    }
    let mut reduced = axes.to_vec();
    reduced.sort_unstable();
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !reduced.contains(d)).collect();
    // The reduced elements along axis 0 of an `[n, m]` matrix.
    let perm: Vec<usize> = reduced.iter().chain(&kept).copied().collect();
    let permuted: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let n: usize = reduced.iter().map(|&d| shape[d]).product();
    let m: usize = kept.iter().map(|&d| shape[d]).product();
    let xt = b.prim1(Prim::Transpose(Transpose { perm: perm.clone() }), &[x]);
    let flat = b.prim1(Prim::Reshape(Reshape { shape: vec![n, m] }), &[xt]);
    let before = exclusive_products(b, flat);
    let flipped = b.prim1(Prim::Reverse(Reverse { dims: vec![0] }), &[flat]);
    let after = exclusive_products(b, flipped);
    let after = b.prim1(Prim::Reverse(Reverse { dims: vec![0] }), &[after]);
    let others = mul(b, before, after);
    let others = b.prim1(Prim::Reshape(Reshape { shape: permuted }), &[others]);
    let mut inverse = vec![0; perm.len()];
    for (i, &d) in perm.iter().enumerate() {
        inverse[d] = i;
    }
    b.prim1(Prim::Transpose(Transpose { perm: inverse }), &[others])
}

/// Row `i` of the result is the product of rows `0..i` of the f32 matrix `v` (`[n, m]`),
/// by doubling: `log2(n)` steps, each multiplying by the rows `2^k` above.
fn exclusive_products(b: &mut Builder, v: Var) -> Var {
    let [n, m] = b.ty(v).shape[..] else { panic!("exclusive_products takes a matrix") };
    let ones = |b: &mut Builder, rows: usize| splat(b, Array::f32(vec![], vec![1.0]), &[rows, m]);
    let shifted = |b: &mut Builder, y: Var, k: usize| {
        let head = ones(b, k);
        let tail = b.prim1(Prim::Slice(Slice { start: vec![0, 0], limit: vec![n - k, m] }), &[y]);
        b.prim1(Prim::Concat(Concat { axis: 0 }), &[head, tail])
    };
    if n == 1 {
        return ones(b, 1);
    }
    let mut y = shifted(b, v, 1);
    let mut k = 1;
    while k < n {
        let above = shifted(b, y, k);
        y = mul(b, y, above);
        k *= 2;
    }
    y
}

impl Rules for Argmax {
    fn name(&self) -> &'static str {
        "argmax"
    }

    fn attrs(&self) -> String {
        format!("[axis={}]", self.axis)
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("argmax", args, 1)?;
        let x = &args[0];
        if self.axis >= x.rank() {
            return Err(format!("argmax: axis {} is out of range for {x}", self.axis));
        }
        if x.shape[self.axis] == 0 {
            return Err(format!("argmax: axis {} of {x} is empty", self.axis));
        }
        if x.shape[self.axis] > i32::MAX as usize {
            return Err(format!("argmax: axis {} of {x} is too long for an i32 index", self.axis));
        }
        Ok(vec![ArrayTy::new(DType::I32, kept_shape(&x.shape, &[self.axis]))])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        /// First index of the maximum in each lane; a NaN wins and stops the search.
        /// Values compare through `key` (the device's compare flushes f32 subnormals).
        fn go<T: Copy + PartialOrd>(
            v: &[T],
            shape: &[usize],
            axis: usize,
            is_nan: fn(T) -> bool,
            key: fn(T) -> T,
        ) -> Vec<i32> {
            let st = strides(shape);
            let lanes = kept_shape(shape, &[axis]);
            indices(&lanes)
                .map(|lane| {
                    let mut idx = lane.clone();
                    idx.insert(axis, 0);
                    let base = ravel(&idx, &st);
                    let at = |j: usize| key(v[base + j * st[axis]]);
                    let mut best = 0;
                    for j in 1..shape[axis] {
                        if is_nan(at(best)) {
                            break;
                        }
                        if is_nan(at(j)) || at(j) > at(best) {
                            best = j;
                        }
                    }
                    best as i32
                })
                .collect()
        }
        let x = args[0];
        let (s, a) = (&x.shape, self.axis);
        let out = match &x.data {
            Data::F32(v) => go(v, s, a, f32::is_nan, flush),
            Data::I32(v) => go(v, s, a, |_| false, |x| x),
            Data::U32(v) => go(v, s, a, |_| false, |x| x),
            Data::U8(v) => go(v, s, a, |_| false, |x| x),
            Data::Bool(v) => go(v, s, a, |_| false, |x| x),
        };
        vec![Array::new(kept_shape(s, &[a]), Data::I32(out))]
    }

    /// StableHLO has no argmax. Rather than a variadic reduce over (value, index) pairs,
    /// whose result with NaNs or ties would depend on the order XLA combines elements
    /// in, this lowers to order-independent steps:
    /// `m = max(x)`, `hit = x == m | x != x`, `argmax = min(select(hit, iota, n))`.
    /// A NaN makes `m` NaN, and then only NaNs are hits, so the first NaN wins.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        let (x, t) = (&args[0], &arg_tys[0]);
        let axis = self.axis;
        let d = t.dtype;
        let max_op = ReduceOp::Max.combiner(d).expect("max is defined on every dtype");
        let m = lower_reduce(cx, x, t, &ReduceOp::Max.init(d), max_op, &[axis]);
        let m_ty = ArrayTy::new(d, kept_shape(&t.shape, &[axis]));
        let dims: Vec<usize> = (0..t.rank()).filter(|&k| k != axis).collect();
        let mb = cx.op(
            "stablehlo.broadcast_in_dim",
            &[m],
            &format!("broadcast_dimensions = {}", i64_array(&dims)),
            &[m_ty],
            t,
        );
        let mask_ty = ArrayTy::new(DType::Bool, t.shape.clone());
        let mut hit = lower_compare(cx, CmpOp::Eq, x, &mb, t);
        if d == DType::F32 {
            let nan = lower_compare(cx, CmpOp::Ne, x, x, t);
            hit = cx.op("stablehlo.or", &[hit, nan], "", &[mask_ty.clone(), mask_ty.clone()], &mask_ty);
        }
        let idx_ty = ArrayTy::new(DType::I32, t.shape.clone());
        let iota = cx.op("stablehlo.iota", &[], &format!("iota_dimension = {axis} : i64"), &[], &idx_ty);
        let n = i32::try_from(t.shape[axis]).expect("infer bounds the axis length");
        let none = cx.splat(&Array::i32(vec![], vec![n]), &idx_ty);
        let cand =
            cx.op("stablehlo.select", &[hit, iota, none], "", &[mask_ty, idx_ty.clone(), idx_ty.clone()], &idx_ty);
        vec![lower_reduce(cx, &cand, &idx_ty, &ReduceOp::Min.init(DType::I32), BinaryOp::Min, &[axis])]
    }

    /// Searches the same axis, renumbered around the batch axis, which stays (one place
    /// forward if the searched axis was before it).
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let axis = if self.axis >= a { self.axis + 1 } else { self.axis };
        let out = if axis < a { a - 1 } else { a };
        vec![BVal::batched(b.prim1(Prim::Argmax(Argmax { axis }), &[x.var]), out)]
    }

    /// An index: piecewise constant in the operand, no derivative. Reading the maximum
    /// through it (`x[argmax(x)]`) differentiates, through the read.
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
