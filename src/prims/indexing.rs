//! Indexing primitives: static slices, and slices and updates at run-time offsets.
//!
//! Run-time start indices are i32 scalars, one per dimension, clamped as XLA clamps them:
//! `start = clamp(start, 0, dim - size)`, so the window always lies inside the operand
//! and an out-of-range index never faults.
//!
//! # Batching with per-example starts
//!
//! A start shared by all examples batches trivially: the batch axis is one more
//! dimension, taken (or written) whole. A batched start is the interesting case, and the
//! common one in RL environments (`obs.set([y, x], 1.0)` with `y` and `x` per
//! environment). JAX turns it into a gather or scatter; podc has neither, and instead
//! works dimension by dimension with masks built from iotas, which XLA fuses into a few
//! elementwise kernels and which run well on any device:
//!
//! - *dynamic_slice*: shared starts first, in one `dynamic_slice` for all examples (it
//!   shrinks the operand); then each dimension with a batched start moves its window to
//!   the front by a one-hot selection, `out[e, w] = the x[e, j] with j == s[e] + w` (see
//!   [`shift`]), at O(batch × window × dimension × rest) work. A window of length 1
//!   (reading one cell) costs about one pass over the operand, as the read itself does.
//! - *dynamic_update_slice*: `select(mask, placed, x)`, where `mask` is the product of
//!   one interval test `s[e] <= i < s[e] + k` per dimension and `placed` is the update
//!   moved to its window by the same one-hot selection; an update of length 1 along a
//!   dimension (writing one cell) is just broadcast along it. So `obs.set([y, x], v)`
//!   becomes `select((iota_y == y) & (iota_x == x), v, obs)`: one fused elementwise pass.
//!
//! The one-hot selection is made of `select`s only ([`select_one`]), so elements arrive
//! bit for bit, NaN, -0.0 and subnormals included. A one-hot matmul would not (`0 * inf`
//! is NaN), nor does a `max` over a fill of -inf: XLA's CPU code flushes subnormals
//! through it. Whole windows (length equal to the dimension) are skipped: their start
//! always clamps to 0. A window much longer than 1 at a batched start costs a factor of
//! its length; a loop over the examples would avoid that, but run them one by one.

use super::elementwise::{BinaryOp, CmpOp};
use super::util::{
    concat_data, expect_arity, expect_index, i64_array, indices, list, ravel, scalar_i32, strides, take,
};
use super::{Binary, Broadcast, Compare, Concat, Constant, Iota, Prim, Reshape, Rules, Select};
use crate::array::{Array, ArrayTy, DType};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::lower::stablehlo::LowerCx;
use crate::transform::vmap::{BVal, batch_size, bdim_at};

/// `x[start[0]..limit[0], ...]` with stride 1.
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    /// First index taken in each dimension.
    pub start: Vec<usize>,
    /// One past the last index taken in each dimension.
    pub limit: Vec<usize>,
}

/// A window of `sizes` at run-time start indices. Arguments: the operand, then one i32
/// scalar start per dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicSlice {
    /// The window's size in each dimension.
    pub sizes: Vec<usize>,
}

/// The operand with a window overwritten by `update`, at run-time start indices.
/// Arguments: the operand, the update (same dtype and rank, no larger), then one i32
/// scalar start per dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicUpdateSlice;

/// XLA's clamp of a run-time start: the window `[start, start + size)` is moved inside
/// `[0, dim)`.
fn clamp_start(start: i32, dim: usize, size: usize) -> usize {
    let max = i64::try_from(dim - size).unwrap_or(i64::MAX);
    i64::from(start).clamp(0, max) as usize
}

/// The flat positions of a window of `sizes` at `start` inside an array of `shape`.
fn window(shape: &[usize], start: &[usize], sizes: &[usize]) -> Vec<usize> {
    let st = strides(shape);
    indices(sizes)
        .map(|w| {
            let idx: Vec<usize> = w.iter().zip(start).map(|(i, s)| i + s).collect();
            ravel(&idx, &st)
        })
        .collect()
}

impl Rules for Slice {
    fn name(&self) -> &'static str {
        "slice"
    }

    fn attrs(&self) -> String {
        format!("[start={}, limit={}]", list(&self.start), list(&self.limit))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("slice", args, 1)?;
        let x = &args[0];
        if self.start.len() != x.rank() || self.limit.len() != x.rank() {
            return Err(format!("slice: start and limit must have one entry per dimension of {x}"));
        }
        for (d, ((&s, &l), &n)) in self.start.iter().zip(&self.limit).zip(&x.shape).enumerate() {
            if s > l || l > n {
                return Err(format!("slice: {s}..{l} is not a range inside dimension {d} of {x}"));
            }
        }
        let shape = self.start.iter().zip(&self.limit).map(|(s, l)| l - s).collect();
        Ok(vec![ArrayTy::new(x.dtype, shape)])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let sizes: Vec<usize> = self.start.iter().zip(&self.limit).map(|(s, l)| l - s).collect();
        let src = window(&x.shape, &self.start, &sizes);
        vec![Array::new(sizes, take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let ones = vec![1; self.start.len()];
        let attrs = format!(
            "start_indices = {}, limit_indices = {}, strides = {}",
            i64_array(&self.start),
            i64_array(&self.limit),
            i64_array(&ones)
        );
        vec![cx.op("stablehlo.slice", args, &attrs, arg_tys, &outs[0])]
    }

    /// The batch axis is taken whole and stays where it is.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let (mut start, mut limit) = (self.start.clone(), self.limit.clone());
        start.insert(a, 0);
        limit.insert(a, b.ty(x.var).shape[a]);
        vec![BVal::batched(b.prim1(Prim::Slice(Slice { start, limit }), &[x.var]), a)]
    }
}

impl Rules for DynamicSlice {
    fn name(&self) -> &'static str {
        "dynamic_slice"
    }

    fn attrs(&self) -> String {
        format!("[sizes={}]", list(&self.sizes))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        let Some(x) = args.first() else {
            return Err("dynamic_slice needs an operand".to_string());
        };
        expect_arity("dynamic_slice", args, 1 + x.rank())?;
        for t in &args[1..] {
            expect_index("dynamic_slice", t)?;
        }
        if self.sizes.len() != x.rank() || self.sizes.iter().zip(&x.shape).any(|(s, n)| s > n) {
            return Err(format!("dynamic_slice: sizes {} do not fit inside {x}", list(&self.sizes)));
        }
        Ok(vec![ArrayTy::new(x.dtype, self.sizes.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let start: Vec<usize> = args[1..]
            .iter()
            .zip(x.shape.iter().zip(&self.sizes))
            .map(|(s, (&n, &size))| clamp_start(scalar_i32(s), n, size))
            .collect();
        let src = window(&x.shape, &start, &self.sizes);
        vec![Array::new(self.sizes.clone(), take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let attrs = format!("slice_sizes = {}", i64_array(&self.sizes));
        vec![cx.op("stablehlo.dynamic_slice", args, &attrs, arg_tys, &outs[0])]
    }

    /// Shared starts: the batch axis is one more dimension, taken whole. Batched starts:
    /// see the module documentation.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, starts) = (args[0], &args[1..]);
        if !starts.iter().any(BVal::is_batched) {
            let a = x.axis.expect("the operand is batched");
            let mut vars: Vec<Var> = starts.iter().map(|s| s.var).collect();
            vars.insert(a, const_i32(b, 0));
            vars.insert(0, x.var);
            let mut sizes = self.sizes.clone();
            sizes.insert(a, size);
            return vec![BVal::batched(b.prim1(Prim::DynamicSlice(DynamicSlice { sizes }), &vars), a)];
        }
        // From here on a batched operand has its batch axis in front.
        let mut x = if x.is_batched() { BVal::batched(bdim_at(b, x, 0, size), 0) } else { x };
        let shape = unbatched_shape(b, x);
        let sliced = |d: usize| self.sizes[d] < shape[d];
        // The shared starts, in one dynamic_slice; dimensions with batched starts whole.
        if (0..shape.len()).any(|d| !starts[d].is_batched() && sliced(d)) {
            let zero = const_i32(b, 0);
            let (mut vars, mut sizes) = (vec![x.var], vec![]);
            if x.is_batched() {
                vars.push(zero);
                sizes.push(size);
            }
            for (d, s) in starts.iter().enumerate() {
                let (start, len) = if s.is_batched() { (zero, shape[d]) } else { (s.var, self.sizes[d]) };
                vars.push(start);
                sizes.push(len);
            }
            x.var = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes }), &vars);
        }
        for (d, &s) in starts.iter().enumerate() {
            if s.is_batched() && sliced(d) {
                let s = clamped_starts(b, s, size, shape[d], self.sizes[d]);
                x = BVal::batched(shift(b, x, d, self.sizes[d], s, Shift::Take, size), 0);
            }
        }
        vec![x]
    }
}

impl Rules for DynamicUpdateSlice {
    fn name(&self) -> &'static str {
        "dynamic_update_slice"
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        let (Some(x), Some(u)) = (args.first(), args.get(1)) else {
            return Err("dynamic_update_slice needs an operand and an update".to_string());
        };
        expect_arity("dynamic_update_slice", args, 2 + x.rank())?;
        for t in &args[2..] {
            expect_index("dynamic_update_slice", t)?;
        }
        if u.dtype != x.dtype || u.rank() != x.rank() || u.shape.iter().zip(&x.shape).any(|(a, b)| a > b) {
            return Err(format!("dynamic_update_slice: update {u} does not fit inside {x}"));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (x, u) = (args[0], args[1]);
        let start: Vec<usize> = args[2..]
            .iter()
            .zip(x.shape.iter().zip(&u.shape))
            .map(|(s, (&n, &size))| clamp_start(scalar_i32(s), n, size))
            .collect();
        // Gather from `x ++ u`: positions inside the window read the update.
        let n = x.data.len();
        let mut src: Vec<usize> = (0..n).collect();
        for (k, pos) in window(&x.shape, &start, &u.shape).into_iter().enumerate() {
            src[pos] = n + k;
        }
        vec![Array::new(x.shape.clone(), take(&concat_data(&[&x.data, &u.data]), &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.op("stablehlo.dynamic_update_slice", args, "", arg_tys, &outs[0])]
    }

    /// Shared starts: the batch axis is one more dimension, written whole. Batched
    /// starts: see the module documentation.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, u, starts) = (args[0], args[1], &args[2..]);
        let x = bdim_at(b, x, 0, size);
        if !starts.iter().any(BVal::is_batched) {
            let mut vars = vec![x, bdim_at(b, u, 0, size), const_i32(b, 0)];
            vars.extend(starts.iter().map(|s| s.var));
            return vec![BVal::batched(b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &vars), 0)];
        }
        // From here on a batched update has its batch axis in front.
        let u = if u.is_batched() { BVal::batched(bdim_at(b, u, 0, size), 0) } else { u };
        let shape = b.ty(x).shape[1..].to_vec();
        let window = unbatched_shape(b, u);
        if window.contains(&0) {
            // An empty update leaves the operand as it is.
            return vec![BVal::batched(x, 0)];
        }
        let (mut placed, mut mask) = (u, None);
        for (d, &s) in starts.iter().enumerate() {
            let (n, k) = (shape[d], window[d]);
            if k == n {
                continue;
            }
            let s = clamped_starts(b, s, size, n, k);
            placed = if k == 1 {
                // Repeat the one element along the dimension; the mask keeps one.
                let ty = b.ty(placed.var).clone();
                let lead = usize::from(placed.is_batched());
                let mut to = ty.shape.clone();
                to[lead + d] = n;
                let dims = (0..ty.rank()).collect();
                BVal { var: b.prim1(Prim::Broadcast(Broadcast { shape: to, dims }), &[placed.var]), axis: placed.axis }
            } else {
                BVal::batched(shift(b, placed, d, n, s, Shift::Place, size), 0)
            };
            let inside = interval_mask(b, s, size, n, k);
            let full: Vec<usize> = std::iter::once(size).chain(shape.iter().copied()).collect();
            let inside = b.prim1(Prim::Broadcast(Broadcast { shape: full, dims: vec![0, 1 + d] }), &[inside]);
            mask = Some(match mask {
                None => inside,
                Some(m) => b.prim1(Prim::Binary(Binary { op: BinaryOp::And }), &[m, inside]),
            });
        }
        let placed = bdim_at(b, placed, 0, size);
        // With every window whole, the update replaces the operand.
        let out = match mask {
            None => placed,
            Some(m) => b.prim1(Prim::Select(Select), &[m, placed, x]),
        };
        vec![BVal::batched(out, 0)]
    }
}

// ---------------------------------------------------------------------------------------
// Batching helpers

/// The shape of one example of `x` (batched at axis 0, if at all).
fn unbatched_shape(b: &Builder, x: BVal) -> Vec<usize> {
    let shape = &b.ty(x.var).shape;
    if x.is_batched() { shape[1..].to_vec() } else { shape.clone() }
}

/// An i32 scalar constant.
fn const_i32(b: &mut Builder, v: i32) -> Var {
    b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![v]) }), &[])
}

/// A scalar constant broadcast to `shape`.
fn splat(b: &mut Builder, value: Array, shape: &[usize]) -> Var {
    let c = b.prim1(Prim::Constant(Constant { value }), &[]);
    b.prim1(Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: vec![] }), &[c])
}

/// The per-example starts of a window of `k` in a dimension of `n`, as an i32 vector of
/// `size`, clamped as XLA clamps them: `clamp(s, 0, n - k)`.
fn clamped_starts(b: &mut Builder, s: BVal, size: usize, n: usize, k: usize) -> Var {
    let s = bdim_at(b, s, 0, size);
    let hi = i32::try_from(n - k).unwrap_or(i32::MAX);
    let lo = splat(b, Array::i32(vec![], vec![0]), &[size]);
    let hi = splat(b, Array::i32(vec![], vec![hi]), &[size]);
    let s = b.prim1(Prim::Binary(Binary { op: BinaryOp::Max }), &[s, lo]);
    b.prim1(Prim::Binary(Binary { op: BinaryOp::Min }), &[s, hi])
}

/// `s[e] <= i < s[e] + k` as a bool `[size, n]` mask, for clamped starts `s`; for one
/// cell (`k == 1`), `i == s[e]`.
fn interval_mask(b: &mut Builder, s: Var, size: usize, n: usize, k: usize) -> Var {
    let shape = [size, n];
    let i = b.prim1(Prim::Iota(Iota { ty: ArrayTy::new(DType::I32, shape.to_vec()), dim: 1 }), &[]);
    let lo = b.prim1(Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: vec![0] }), &[s]);
    if k == 1 {
        return b.prim1(Prim::Compare(Compare { op: CmpOp::Eq }), &[i, lo]);
    }
    let k = splat(b, Array::i32(vec![], vec![i32::try_from(k).unwrap_or(i32::MAX)]), &shape);
    let hi = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[lo, k]);
    let above = b.prim1(Prim::Compare(Compare { op: CmpOp::Ge }), &[i, lo]);
    let below = b.prim1(Prim::Compare(Compare { op: CmpOp::Lt }), &[i, hi]);
    b.prim1(Prim::Binary(Binary { op: BinaryOp::And }), &[above, below])
}

/// Which way [`shift`] moves a window.
#[derive(Clone, Copy)]
enum Shift {
    /// Read the window at the start: `out[w] = x[s + w]`.
    Take,
    /// Write `x` at the start: `out[s + w] = x[w]`; other positions get any element.
    Place,
}

/// Moves a window of dimension `d` of `x` (batched at 0, or unbatched) by per-example
/// starts `s` (an i32 vector, clamped), giving `len` elements along `d`, batched at 0.
///
/// The one-hot selection: `x` is broadcast to `[size, .., len, x_d, ..]`, an iota pair
/// marks where output position `i` and input position `j` meet (`j == s[e] + i` to take,
/// `i == s[e] + j` to place), and [`select_one`] keeps, along the input dimension, the
/// element that met.
fn shift(b: &mut Builder, x: BVal, d: usize, len: usize, s: Var, dir: Shift, size: usize) -> Var {
    let one = unbatched_shape(b, x);
    let mut shape = vec![size];
    shape.extend_from_slice(&one[..d]);
    shape.push(len);
    shape.extend_from_slice(&one[d..]);
    // Example dimension j lands after the new one from `d` on; the batch axis stays 0.
    let mut dims: Vec<usize> = (0..one.len()).map(|j| if j < d { 1 + j } else { 2 + j }).collect();
    if x.is_batched() {
        dims.insert(0, 0);
    }
    let xs = b.prim1(Prim::Broadcast(Broadcast { shape: shape.clone(), dims }), &[x.var]);
    let idx = ArrayTy::new(DType::I32, shape.clone());
    let out_pos = b.prim1(Prim::Iota(Iota { ty: idx.clone(), dim: 1 + d }), &[]);
    let in_pos = b.prim1(Prim::Iota(Iota { ty: idx, dim: 2 + d }), &[]);
    let start = b.prim1(Prim::Broadcast(Broadcast { shape: shape.clone(), dims: vec![0] }), &[s]);
    let (at, offset) = match dir {
        Shift::Take => (in_pos, out_pos),
        Shift::Place => (out_pos, in_pos),
    };
    let moved = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[start, offset]);
    let hit = b.prim1(Prim::Compare(Compare { op: CmpOp::Eq }), &[at, moved]);
    select_one(b, hit, xs, 2 + d)
}

/// The element of `values` along `axis` where `hit` (of the same shape) is true, with
/// that axis (not empty) removed. Where `hit` is true nowhere along it, some element is
/// chosen; where it is true more than once, the first.
///
/// A tournament of `select`s: each round pairs the first half of the axis with the
/// second (`select(hit_lo, lo, hi)`, `hit_lo | hit_hi`), carrying an odd element over, so
/// `ceil(log2 n)` rounds of contiguous slices, which XLA fuses, and no arithmetic on the
/// elements.
fn select_one(b: &mut Builder, mut hit: Var, mut values: Var, axis: usize) -> Var {
    let part = |b: &mut Builder, v: Var, lo: usize, hi: usize| {
        let shape = &b.ty(v).shape;
        let mut start = vec![0; shape.len()];
        let mut limit = shape.clone();
        start[axis] = lo;
        limit[axis] = hi;
        b.prim1(Prim::Slice(Slice { start, limit }), &[v])
    };
    loop {
        let n = b.ty(values).shape[axis];
        if n <= 1 {
            break;
        }
        let h = n / 2;
        let (v_lo, v_hi) = (part(b, values, 0, h), part(b, values, h, 2 * h));
        let (m_lo, m_hi) = (part(b, hit, 0, h), part(b, hit, h, 2 * h));
        let mut v = b.prim1(Prim::Select(Select), &[m_lo, v_lo, v_hi]);
        let mut m = b.prim1(Prim::Binary(Binary { op: BinaryOp::Or }), &[m_lo, m_hi]);
        if n % 2 == 1 {
            let (v_odd, m_odd) = (part(b, values, n - 1, n), part(b, hit, n - 1, n));
            v = b.prim1(Prim::Concat(Concat { axis }), &[v, v_odd]);
            m = b.prim1(Prim::Concat(Concat { axis }), &[m, m_odd]);
        }
        (values, hit) = (v, m);
    }
    let mut shape = b.ty(values).shape.clone();
    shape.remove(axis);
    b.prim1(Prim::Reshape(Reshape { shape }), &[values])
}
