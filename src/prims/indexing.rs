//! Indexing primitives: static slices, and slices and updates at run-time offsets.
//!
//! Run-time start indices are i32 scalars, one per dimension, clamped as XLA clamps them:
//! `start = clamp(start, 0, dim - size)`, so the window always lies inside the operand
//! and an out-of-range index never faults.

use super::Rules;
use super::util::{
    concat_data, expect_arity, expect_index, i64_array, indices, list, ravel, scalar_i32, strides, take,
};
use crate::array::{Array, ArrayTy};
use crate::lower::stablehlo::LowerCx;

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
}
