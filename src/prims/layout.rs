//! Layout primitives: they move elements without computing on them. Each evaluates as a
//! gather (see [`super::util`]): the flat source position of every output element.

use super::util::{check_axes, concat_data, expect_arity, i64_array, indices, list, ravel, strides, take};
use super::{Prim, Rules};
use super::{Reduce, ReduceOp, Slice};
use crate::array::{Array, ArrayTy};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, batch_size, bdim_at};
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

/// `stablehlo.broadcast_in_dim`: operand dimension `k` becomes result dimension
/// `dims[k]`, where it must have the result's size or size 1 (then it is repeated).
/// Result dimensions not named in `dims` are new.
#[derive(Clone, Debug, PartialEq)]
pub struct Broadcast {
    /// The result shape.
    pub shape: Vec<usize>,
    /// For each operand dimension, the result dimension it maps to.
    pub dims: Vec<usize>,
}

/// Reinterprets the row-major elements under a new shape of the same size.
#[derive(Clone, Debug, PartialEq)]
pub struct Reshape {
    /// The result shape.
    pub shape: Vec<usize>,
}

/// Permutes dimensions: result dimension `i` is operand dimension `perm[i]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Transpose {
    /// A permutation of the operand's dimensions.
    pub perm: Vec<usize>,
}

/// `stablehlo.reverse`: reverses the order of the elements along each of `dims`. The
/// derivative of a convolution flips its kernel with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Reverse {
    /// The dimensions reversed, distinct.
    pub dims: Vec<usize>,
}

/// Joins one or more arrays of one dtype along `axis`; their other dimensions agree.
#[derive(Clone, Debug, PartialEq)]
pub struct Concat {
    /// The dimension to join along.
    pub axis: usize,
}

impl Rules for Broadcast {
    fn name(&self) -> &'static str {
        "broadcast"
    }

    fn attrs(&self) -> String {
        format!("[shape={}, dims={}]", list(&self.shape), list(&self.dims))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("broadcast", args, 1)?;
        let x = &args[0];
        if self.dims.len() != x.rank() {
            return Err(format!("broadcast: {} dims given for an operand of rank {}", self.dims.len(), x.rank()));
        }
        check_axes("broadcast", "dim", &self.dims, self.shape.len())?;
        for (k, (&n, &d)) in x.shape.iter().zip(&self.dims).enumerate() {
            if n != 1 && n != self.shape[d] {
                return Err(format!(
                    "broadcast: operand dimension {k} has size {n}, but result dimension {d} has size {}",
                    self.shape[d]
                ));
            }
        }
        Ok(vec![ArrayTy::new(x.dtype, self.shape.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let st = strides(&x.shape);
        let src: Vec<usize> = indices(&self.shape)
            .map(|out| {
                let idx: Vec<usize> =
                    self.dims.iter().zip(&x.shape).map(|(&d, &n)| if n == 1 { 0 } else { out[d] }).collect();
                ravel(&idx, &st)
            })
            .collect();
        vec![Array::new(self.shape.clone(), take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let attrs = format!("broadcast_dimensions = {}", i64_array(&self.dims));
        vec![cx.op("stablehlo.broadcast_in_dim", args, &attrs, arg_tys, &outs[0])]
    }

    /// The batch axis moves to the front and becomes a new leading result dimension, so
    /// `dims` stays in the order it had (XLA wants it increasing).
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let x = bdim_at(b, args[0], 0, size);
        let shape = std::iter::once(size).chain(self.shape.iter().copied()).collect();
        let dims = std::iter::once(0).chain(self.dims.iter().map(|d| d + 1)).collect();
        vec![BVal::batched(b.prim1(Prim::Broadcast(Broadcast { shape, dims }), &[x]), 0)]
    }

    /// Every element of the operand was copied to several places: its cotangent is the
    /// sum over them. Sum the new dimensions and those the operand repeated (size 1),
    /// put the rest in the operand's order, and reshape the 1s back in.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let x_shape = b.ty(args[0]).shape.clone();
        let repeated = |k: usize| x_shape[k] == 1 && self.shape[self.dims[k]] != 1;
        let kept: Vec<usize> = (0..x_shape.len()).filter(|&k| !repeated(k)).collect();
        let summed: Vec<usize> = (0..self.shape.len()).filter(|d| !kept.iter().any(|&k| self.dims[k] == *d)).collect();
        let mut ct = cts[0];
        if !summed.is_empty() {
            ct = b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes: summed }), &[ct]);
        }
        // The summed result holds the kept dimensions in the order of `dims`.
        let mut order: Vec<usize> = kept.clone();
        order.sort_by_key(|&k| self.dims[k]);
        let perm: Vec<usize> = kept.iter().map(|k| order.iter().position(|o| o == k).expect("kept")).collect();
        if perm.iter().enumerate().any(|(i, &p)| i != p) {
            ct = b.prim1(Prim::Transpose(Transpose { perm }), &[ct]);
        }
        if b.ty(ct).shape != x_shape {
            ct = b.prim1(Prim::Reshape(Reshape { shape: x_shape }), &[ct]);
        }
        Ok(vec![Some(ct)])
    }
}

impl Rules for Reshape {
    fn name(&self) -> &'static str {
        "reshape"
    }

    fn attrs(&self) -> String {
        format!("[shape={}]", list(&self.shape))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("reshape", args, 1)?;
        let x = &args[0];
        let n: usize = self.shape.iter().product();
        if n != x.numel() {
            return Err(format!(
                "reshape: cannot reshape {x} ({} elements) to {} ({n} elements)",
                x,
                list(&self.shape)
            ));
        }
        Ok(vec![ArrayTy::new(x.dtype, self.shape.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        vec![Array::new(self.shape.clone(), args[0].data.clone())]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.op("stablehlo.reshape", args, "", arg_tys, &outs[0])]
    }

    /// Row-major order keeps each example's elements together only with the batch axis
    /// in front, so it moves there first.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let x = bdim_at(b, args[0], 0, size);
        let shape = std::iter::once(size).chain(self.shape.iter().copied()).collect();
        vec![BVal::batched(b.prim1(Prim::Reshape(Reshape { shape }), &[x]), 0)]
    }

    /// The cotangent, reshaped back.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let shape = b.ty(args[0]).shape.clone();
        Ok(vec![Some(b.prim1(Prim::Reshape(Reshape { shape }), &[cts[0]]))])
    }
}

impl Rules for Transpose {
    fn name(&self) -> &'static str {
        "transpose"
    }

    fn attrs(&self) -> String {
        format!("[perm={}]", list(&self.perm))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("transpose", args, 1)?;
        let x = &args[0];
        if self.perm.len() != x.rank() {
            return Err(format!("transpose: permutation {} does not fit rank {}", list(&self.perm), x.rank()));
        }
        check_axes("transpose", "dimension", &self.perm, x.rank())?;
        Ok(vec![ArrayTy::new(x.dtype, self.perm.iter().map(|&p| x.shape[p]).collect())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let st = strides(&x.shape);
        // Result dimension i walks operand dimension perm[i].
        let src_strides: Vec<usize> = self.perm.iter().map(|&p| st[p]).collect();
        let shape: Vec<usize> = self.perm.iter().map(|&p| x.shape[p]).collect();
        let src: Vec<usize> = indices(&shape).map(|out| ravel(&out, &src_strides)).collect();
        vec![Array::new(shape, take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let attrs = format!("permutation = {}", i64_array(&self.perm));
        vec![cx.op("stablehlo.transpose", args, &attrs, arg_tys, &outs[0])]
    }

    /// One transpose that also brings the batch axis to the front.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let perm = std::iter::once(a).chain(self.perm.iter().map(|&p| if p >= a { p + 1 } else { p })).collect();
        vec![BVal::batched(b.prim1(Prim::Transpose(Transpose { perm }), &[x.var]), 0)]
    }

    /// The cotangent, transposed by the inverse permutation.
    fn vjp(
        &self,
        b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let mut inverse = vec![0; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inverse[p] = i;
        }
        Ok(vec![Some(b.prim1(Prim::Transpose(Transpose { perm: inverse }), &[cts[0]]))])
    }
}

impl Rules for Reverse {
    fn name(&self) -> &'static str {
        "reverse"
    }

    fn attrs(&self) -> String {
        format!("[dims={}]", list(&self.dims))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("reverse", args, 1)?;
        check_axes("reverse", "dimension", &self.dims, args[0].rank())?;
        Ok(vec![args[0].clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let st = strides(&x.shape);
        let src: Vec<usize> = indices(&x.shape)
            .map(|mut idx| {
                for &d in &self.dims {
                    idx[d] = x.shape[d] - 1 - idx[d];
                }
                ravel(&idx, &st)
            })
            .collect();
        vec![Array::new(x.shape.clone(), take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let attrs = format!("dimensions = {}", i64_array(&self.dims));
        vec![cx.op("stablehlo.reverse", args, &attrs, arg_tys, &outs[0])]
    }

    /// The same dimensions, renumbered around the batch axis, which stays.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let dims = self.dims.iter().map(|&d| if d >= a { d + 1 } else { d }).collect();
        vec![BVal::batched(b.prim1(Prim::Reverse(Reverse { dims }), &[x.var]), a)]
    }

    /// The cotangent, reversed back.
    fn vjp(
        &self,
        b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(vec![Some(b.prim1(Prim::Reverse(self.clone()), &[cts[0]]))])
    }
}

impl Rules for Concat {
    fn name(&self) -> &'static str {
        "concatenate"
    }

    fn attrs(&self) -> String {
        format!("[axis={}]", self.axis)
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        let Some(first) = args.first() else {
            return Err("concatenate needs at least one operand".to_string());
        };
        if self.axis >= first.rank() {
            return Err(format!("concatenate: axis {} is out of range for {first}", self.axis));
        }
        let mut shape = first.shape.clone();
        shape[self.axis] = 0;
        for a in args {
            let same_elsewhere = a.rank() == first.rank()
                && a.shape.iter().zip(&first.shape).enumerate().all(|(d, (x, y))| d == self.axis || x == y);
            if a.dtype != first.dtype || !same_elsewhere {
                return Err(format!(
                    "concatenate: {a} does not match {first} outside axis {} (or in dtype)",
                    self.axis
                ));
            }
            shape[self.axis] += a.shape[self.axis];
        }
        Ok(vec![ArrayTy::new(first.dtype, shape)])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        // Gather from the operands laid end to end: find each output element's operand
        // by its coordinate along the axis.
        let mut shape = args[0].shape.clone();
        shape[self.axis] = args.iter().map(|a| a.shape[self.axis]).sum();
        struct Part {
            offset: usize,
            len: usize,
            base: usize,
            strides: Vec<usize>,
        }
        let mut parts = vec![];
        let (mut offset, mut base) = (0, 0);
        for a in args {
            let len = a.shape[self.axis];
            parts.push(Part { offset, len, base, strides: strides(&a.shape) });
            offset += len;
            base += a.data.len();
        }
        let src: Vec<usize> = indices(&shape)
            .map(|mut idx| {
                let c = idx[self.axis];
                let p = parts
                    .iter()
                    .find(|p| p.offset <= c && c < p.offset + p.len)
                    .expect("coordinate inside some operand");
                idx[self.axis] = c - p.offset;
                p.base + ravel(&idx, &p.strides)
            })
            .collect();
        let data: Vec<&_> = args.iter().map(|a| &a.data).collect();
        vec![Array::new(shape, take(&concat_data(&data), &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let attrs = format!("dimension = {} : i64", self.axis);
        vec![cx.op("stablehlo.concatenate", args, &attrs, arg_tys, &outs[0])]
    }

    /// Every operand gets its batch axis in front (unbatched ones broadcast), and the
    /// join moves one dimension along.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let vars: Vec<_> = args.iter().map(|&x| bdim_at(b, x, 0, size)).collect();
        vec![BVal::batched(b.prim1(Prim::Concat(Concat { axis: self.axis + 1 }), &vars), 0)]
    }

    /// Each operand gets its own stretch of the cotangent along the axis.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let ct_shape = b.ty(cts[0]).shape.clone();
        let mut offset = 0;
        let mut out = vec![];
        for &a in args {
            let len = b.ty(a).shape[self.axis];
            let mut start = vec![0; ct_shape.len()];
            let mut limit = ct_shape.clone();
            start[self.axis] = offset;
            limit[self.axis] = offset + len;
            offset += len;
            out.push(Some(b.prim1(Prim::Slice(Slice { start, limit }), &[cts[0]])));
        }
        Ok(out)
    }
}
