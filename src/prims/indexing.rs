//! Indexing primitives: static slices, and slices and updates at run-time offsets.
//!
//! Run-time start indices are i32 scalars, one per dimension, clamped as XLA clamps them:
//! `start = clamp(start, 0, dim - size)`, so the window always lies inside the operand
//! and an out-of-range index never faults.
//!
//! # Batching with per-example starts
//!
//! A start shared by all examples batches trivially: the batch axis is one more
//! dimension, taken (or written) whole, where it is. A batched start is the interesting
//! case, and the common one in RL environments (`grid[y, x]`, `obs.set([y, x], 1.0)` with
//! `y` and `x` per environment). As in JAX, it becomes a gather or a scatter
//! (`gather.rs`), whose index vectors, `[batch, k]`, hold the starts of the `k`
//! dimensions whose window is not whole (a shared start broadcast; a whole window's start
//! always clamps to 0, so it is left out), and whose clamping is the dynamic slices':
//!
//! - *dynamic_slice* becomes a [`Gather`] of the windows, batched at 0. A batched operand
//!   is paired with the index vectors by a batching dimension, wherever its batch axis is.
//! - *dynamic_update_slice* becomes a [`Scatter`] of the windows into the operand (an
//!   unbatched operand is broadcast first: each example writes its own copy), paired with
//!   the index vectors by a batching dimension, so windows never overlap.
//!
//! Both move data only, so elements arrive bit for bit. This replaced one-hot masks
//! (`iota == start`, as wide as the operand): XLA fuses a mask with the whole chain of
//! cheap operations that computes the start (a random draw's hash, say) and recomputes
//! that chain for every element of the mask, where a gather or a scatter reads each start
//! once per window element at most.

use super::util::{
    clamp_start, concat_data, expect_arity, expect_index, i64_array, indices, list, ravel, scalar_i32, strides, take,
};
use super::{Concat, Constant, Gather, Prim, Reshape, Rules, Scatter};
use crate::array::{Array, ArrayTy};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, batch_size, bdim_at};
use crate::prims::derivative::{self, NotDifferentiable};
use crate::prims::emit::LowerCx;

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

    /// The cotangent written into zeros at the window (there is no pad primitive; a
    /// `dynamic_update_slice` at constant starts is one).
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let ty = b.ty(args[0]).clone();
        let mut vars = vec![derivative::zeros(b, &ty), cts[0]];
        for &s in &self.start {
            vars.push(derivative::index(b, s as i64));
        }
        Ok(vec![Some(b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &vars))])
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

    /// Shared starts: the batch axis is one more dimension, taken whole, where it is.
    /// Batched starts: a gather (see the module documentation).
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, starts) = (args[0], &args[1..]);
        let shape = example_shape(b, x);
        let sliced: Vec<usize> = (0..shape.len()).filter(|&d| self.sizes[d] < shape[d]).collect();
        if sliced.iter().any(|&d| starts[d].is_batched()) {
            return vec![gather_windows(b, x, starts, &sliced, &self.sizes, size)];
        }
        // Any batched start is that of a whole window, which always clamps to 0.
        let zero = const_i32(b, 0);
        let mut vars: Vec<Var> = starts.iter().map(|s| if s.is_batched() { zero } else { s.var }).collect();
        let mut sizes = self.sizes.clone();
        if let Some(a) = x.axis {
            vars.insert(a, zero);
            sizes.insert(a, size);
        }
        vars.insert(0, x.var);
        vec![BVal { var: b.prim1(Prim::DynamicSlice(DynamicSlice { sizes }), &vars), axis: x.axis }]
    }

    /// The cotangent written into zeros at the same starts, which clamp the same way
    /// (the update has the window's size); the starts get none.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let ty = b.ty(args[0]).clone();
        let mut vars = vec![derivative::zeros(b, &ty), cts[0]];
        vars.extend_from_slice(&args[1..]);
        let mut out = vec![Some(b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &vars))];
        out.extend(args[1..].iter().map(|_| None));
        Ok(out)
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
    /// starts: a scatter (see the module documentation).
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, u, starts) = (args[0], args[1], &args[2..]);
        let (shape, window) = (example_shape(b, x), example_shape(b, u));
        let sliced: Vec<usize> = (0..shape.len()).filter(|&d| window[d] < shape[d]).collect();
        if sliced.iter().any(|&d| starts[d].is_batched()) {
            // Each example writes its own copy of an unbatched operand.
            let a = x.axis.unwrap_or(0);
            let x = bdim_at(b, x, a, size);
            let u = bdim_at(b, u, 0, size);
            let idx = start_vectors(b, starts, &sliced, size);
            let s = Scatter {
                update_window_dims: (1..=window.len()).collect(),
                inserted_window_dims: vec![],
                operand_batching_dims: vec![a],
                indices_batching_dims: vec![0],
                scatter_dims_to_operand_dims: sliced.iter().map(|&d| if d >= a { d + 1 } else { d }).collect(),
            };
            return vec![BVal::batched(b.prim1(Prim::Scatter(s), &[x, idx, u]), a)];
        }
        // Any batched start is that of a whole window, which always clamps to 0.
        let zero = const_i32(b, 0);
        let mut vars = vec![bdim_at(b, x, 0, size), bdim_at(b, u, 0, size), zero];
        vars.extend(starts.iter().map(|s| if s.is_batched() { zero } else { s.var }));
        vec![BVal::batched(b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &vars), 0)]
    }

    /// The operand gets the cotangent with the window zeroed (it was overwritten); the
    /// update gets the window, read at the same starts, which clamp the same way; the
    /// starts get none.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (u, starts) = (args[1], &args[2..]);
        let u_ty = b.ty(u).clone();
        let mut vars = vec![cts[0], derivative::zeros(b, &u_ty)];
        vars.extend_from_slice(starts);
        let dx = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &vars);
        let mut vars = vec![cts[0]];
        vars.extend_from_slice(starts);
        let du = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: u_ty.shape }), &vars);
        let mut out = vec![Some(dx), Some(du)];
        out.extend(starts.iter().map(|_| None));
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------
// Batching helpers

/// The shape of one example of `x`: its shape without the batch axis.
fn example_shape(b: &Builder, x: BVal) -> Vec<usize> {
    let mut shape = b.ty(x.var).shape.clone();
    if let Some(a) = x.axis {
        shape.remove(a);
    }
    shape
}

/// An i32 scalar constant.
fn const_i32(b: &mut Builder, v: i32) -> Var {
    b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![v]) }), &[])
}

/// The index vectors of a gather or scatter for `size` examples, `[size, dims.len()]`:
/// the starts of `dims`, each example's (a shared start is broadcast).
fn start_vectors(b: &mut Builder, starts: &[BVal], dims: &[usize], size: usize) -> Var {
    let columns: Vec<Var> = dims
        .iter()
        .map(|&d| {
            let s = bdim_at(b, starts[d], 0, size);
            b.prim1(Prim::Reshape(Reshape { shape: vec![size, 1] }), &[s])
        })
        .collect();
    match columns[..] {
        [one] => one,
        _ => b.prim1(Prim::Concat(Concat { axis: 1 }), &columns),
    }
}

/// The windows of `sizes` at `starts` for each of `size` examples, as a [`Gather`] whose
/// result is batched at 0. The index vectors hold the starts of the `sliced` dimensions
/// (those whose window is not whole); a batched operand stays as it is, paired with them
/// by a batching dimension.
fn gather_windows(b: &mut Builder, x: BVal, starts: &[BVal], sliced: &[usize], sizes: &[usize], size: usize) -> BVal {
    let idx = start_vectors(b, starts, sliced, size);
    let mut g = Gather {
        offset_dims: (1..=sizes.len()).collect(),
        collapsed_slice_dims: vec![],
        operand_batching_dims: vec![],
        indices_batching_dims: vec![],
        start_index_map: sliced.to_vec(),
        slice_sizes: sizes.to_vec(),
    };
    if let Some(a) = x.axis {
        g.start_index_map = sliced.iter().map(|&d| if d >= a { d + 1 } else { d }).collect();
        g.slice_sizes.insert(a, 1);
        g.operand_batching_dims = vec![a];
        g.indices_batching_dims = vec![0];
    }
    BVal::batched(b.prim1(Prim::Gather(g), &[x.var, idx]), 0)
}
