//! Gather and scatter: windows read and written at start indices that differ from one
//! example to the next, the batched forms of `dynamic_slice` and `dynamic_update_slice`.
//!
//! [`Gather`] and [`Scatter`] are `stablehlo.gather` and `stablehlo.scatter` as JAX uses
//! them (`lax.gather`, `lax.scatter`), with the index vector always the last dimension of
//! the indices, and starts clamped as `dynamic_slice` and `dynamic_update_slice` clamp
//! them (JAX's `GatherScatterMode.CLIP`): the window is moved inside the operand. The
//! scatter replaces (no combining function). The batching rules of the dynamic slices
//! emit them when a start is batched (see `indexing.rs`): XLA then reads and writes each
//! example's window directly, where masks built from the starts would have XLA recompute
//! the starts' producers for every element of the masks.

use super::util::{check_axes, clamp_start, concat_data, expect_arity, i64_array, indices, list, ravel, strides, take};
use super::{Binary, BinaryOp, DynamicSlice, Reshape, Transpose};
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, batch_size, bdim_at};
use crate::prims::derivative::{self, NotDifferentiable};
use crate::prims::emit::{LowerCx, fn_type, tensor_type};

/// `stablehlo.gather`: windows of `operand` at the start indices held by `indices`.
/// Arguments: the operand, then the indices (i32, whose last dimension is the index
/// vector: one start per entry of `start_index_map`).
///
/// Every other dimension of the indices is a *batch dimension*: the result holds one
/// window per position in them. For result position `r`, with `i` its batch position
/// (the result dimensions not in `offset_dims`, in order) and `w` its window position
/// (the result dimensions in `offset_dims`), the element read is the operand's at
/// - `clamp(indices[i, j], 0, operand_dim - slice_size)` in operand dimension
///   `start_index_map[j]`, as `dynamic_slice` clamps: the window always lies inside the
///   operand, and an out-of-range index never faults;
/// - `i[indices_batching_dims[k]]` in operand dimension `operand_batching_dims[k]` (each
///   example reads its own operand);
/// - 0 in the other dimensions;
///
/// plus `w`, spread over the operand dimensions that are neither collapsed nor batching
/// (the *window dimensions*), in order. Collapsed and batching dimensions have a window
/// of 1 and no dimension in the result. Only data moves: elements arrive bit for bit.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    /// The result dimensions that hold the window dimensions, in increasing order.
    pub offset_dims: Vec<usize>,
    /// Operand dimensions with a window of 1 that the result drops, in increasing order.
    pub collapsed_slice_dims: Vec<usize>,
    /// Operand dimensions indexed by a batch dimension of the indices, in increasing order.
    pub operand_batching_dims: Vec<usize>,
    /// The batch dimensions of the indices paired with `operand_batching_dims`.
    pub indices_batching_dims: Vec<usize>,
    /// The operand dimension that each entry of an index vector starts.
    pub start_index_map: Vec<usize>,
    /// The window's size in every operand dimension.
    pub slice_sizes: Vec<usize>,
}

/// Checks that `axes` are distinct dimensions of a rank-`rank` array, in increasing order.
fn check_sorted_axes(name: &str, what: &str, axes: &[usize], rank: usize) -> Result<(), String> {
    check_axes(name, what, axes, rank)?;
    if axes.is_sorted() { Ok(()) } else { Err(format!("{name}: {what}s {} are not in order", list(axes))) }
}

/// `d`, renumbered for a dimension inserted at `at`.
fn past(d: usize, at: usize) -> usize {
    if d >= at { d + 1 } else { d }
}

/// Every entry of `dims`, renumbered for a dimension inserted at `at`.
fn shifted(dims: &[usize], at: usize) -> Vec<usize> {
    dims.iter().map(|&d| past(d, at)).collect()
}

/// `name=[..]` for attribute text, or nothing when the list is empty.
fn named_list(parts: &mut Vec<String>, name: &str, xs: &[usize], sep: &str) {
    if !xs.is_empty() {
        parts.push(format!("{name}{sep}{}", list(xs)));
    }
}

impl Gather {
    /// The operand dimensions that are neither collapsed nor batching, in order: the
    /// ones `offset_dims` gives a place in the result.
    fn window_dims(&self, rank: usize) -> Vec<usize> {
        (0..rank)
            .filter(|d| !self.collapsed_slice_dims.contains(d) && !self.operand_batching_dims.contains(d))
            .collect()
    }

    /// The result's shape, for operands of these shapes (known to satisfy `infer`).
    fn out_shape(&self, x: &[usize], idx: &[usize]) -> Vec<usize> {
        let mut batch = idx[..idx.len() - 1].iter().copied();
        let mut window = self.window_dims(x.len()).into_iter().map(|d| self.slice_sizes[d]);
        (0..self.offset_dims.len() + idx.len() - 1)
            .map(|r| if self.offset_dims.contains(&r) { window.next() } else { batch.next() })
            .map(|n| n.expect("infer matches the result's rank"))
            .collect()
    }
}

impl Rules for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn attrs(&self) -> String {
        let mut parts = vec![];
        named_list(&mut parts, "offset_dims", &self.offset_dims, "=");
        named_list(&mut parts, "collapsed", &self.collapsed_slice_dims, "=");
        named_list(&mut parts, "operand_batching", &self.operand_batching_dims, "=");
        named_list(&mut parts, "indices_batching", &self.indices_batching_dims, "=");
        parts.push(format!("start_index_map={}", list(&self.start_index_map)));
        parts.push(format!("sizes={}", list(&self.slice_sizes)));
        format!("[{}]", parts.join(", "))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("gather", args, 2)?;
        let (x, idx) = (&args[0], &args[1]);
        if idx.dtype != DType::I32 || idx.rank() == 0 {
            return Err(format!("gather: indices must be i32 with the index vector last, got {idx}"));
        }
        let ivd = idx.rank() - 1;
        if idx.shape[ivd] != self.start_index_map.len() {
            return Err(format!(
                "gather: index vectors of {idx} do not have one entry per start_index_map dim {}",
                list(&self.start_index_map)
            ));
        }
        if self.slice_sizes.len() != x.rank() || self.slice_sizes.iter().zip(&x.shape).any(|(s, n)| s > n) {
            return Err(format!("gather: sizes {} do not fit inside {x}", list(&self.slice_sizes)));
        }
        check_sorted_axes("gather", "collapsed dim", &self.collapsed_slice_dims, x.rank())?;
        check_sorted_axes("gather", "operand batching dim", &self.operand_batching_dims, x.rank())?;
        check_axes("gather", "start_index_map dim", &self.start_index_map, x.rank())?;
        check_axes("gather", "indices batching dim", &self.indices_batching_dims, ivd)?;
        for &d in &self.operand_batching_dims {
            if self.collapsed_slice_dims.contains(&d) || self.start_index_map.contains(&d) {
                return Err(format!("gather: operand batching dim {d} is also collapsed or started"));
            }
        }
        for &d in self.collapsed_slice_dims.iter().chain(&self.operand_batching_dims) {
            if self.slice_sizes[d] != 1 {
                return Err(format!("gather: dim {d} of {x} is collapsed or batching but its size is not 1"));
            }
        }
        check_batching_pairs("gather", &self.operand_batching_dims, &self.indices_batching_dims, x, idx)?;
        if self.offset_dims.len() != self.window_dims(x.rank()).len() {
            return Err(format!(
                "gather: offset dims {} do not place every window dim of {x}",
                list(&self.offset_dims)
            ));
        }
        check_sorted_axes("gather", "offset dim", &self.offset_dims, self.offset_dims.len() + ivd)?;
        Ok(vec![ArrayTy::new(x.dtype, self.out_shape(&x.shape, &idx.shape))])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (x, idx) = (args[0], args[1]);
        let Data::I32(starts) = &idx.data else { panic!("gather: i32 indices") };
        let out = self.out_shape(&x.shape, &idx.shape);
        let batch_dims: Vec<usize> = (0..out.len()).filter(|r| !self.offset_dims.contains(r)).collect();
        let window_dims = self.window_dims(x.shape.len());
        let (x_st, idx_st) = (strides(&x.shape), strides(&idx.shape));
        let ivd = idx.shape.len() - 1;
        let src: Vec<usize> = indices(&out)
            .map(|r| {
                let batch: Vec<usize> = batch_dims.iter().map(|&d| r[d]).collect();
                let base = ravel(&batch, &idx_st[..ivd]);
                let mut pos = vec![0; x.shape.len()];
                for (j, &d) in self.start_index_map.iter().enumerate() {
                    pos[d] = clamp_start(starts[base + j * idx_st[ivd]], x.shape[d], self.slice_sizes[d]);
                }
                for (&o, &i) in self.operand_batching_dims.iter().zip(&self.indices_batching_dims) {
                    pos[o] = batch[i];
                }
                for (&d, &o) in window_dims.iter().zip(&self.offset_dims) {
                    pos[d] += r[o];
                }
                ravel(&pos, &x_st)
            })
            .collect();
        vec![Array::new(out, take(&x.data, &src))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let mut dn = vec![];
        named_list(&mut dn, "offset_dims", &self.offset_dims, " = ");
        named_list(&mut dn, "collapsed_slice_dims", &self.collapsed_slice_dims, " = ");
        named_list(&mut dn, "operand_batching_dims", &self.operand_batching_dims, " = ");
        named_list(&mut dn, "start_indices_batching_dims", &self.indices_batching_dims, " = ");
        dn.push(format!("start_index_map = {}", list(&self.start_index_map)));
        dn.push(format!("index_vector_dim = {}", arg_tys[1].rank() - 1));
        let attrs = format!(
            "dimension_numbers = #stablehlo.gather<{}>, indices_are_sorted = false, slice_sizes = {}",
            dn.join(", "),
            i64_array(&self.slice_sizes)
        );
        vec![cx.op("stablehlo.gather", args, &attrs, arg_tys, &outs[0])]
    }

    /// JAX's rule, with the batch axes left where they are (the index vector stays last:
    /// a batch axis behind it moves to the front). A batched operand alone gets one more
    /// window dimension, taken whole; batched indices alone one more batch dimension;
    /// both, a batching dimension pairing the two.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, mut idx) = (args[0], args[1]);
        let idx_rank = b.ty(idx.var).rank();
        if idx.axis == Some(idx_rank - 1) {
            idx = BVal::batched(bdim_at(b, idx, 0, size), 0);
        }
        let mut g = self.clone();
        let rank = self.slice_sizes.len();
        if let Some(a) = x.axis {
            g.collapsed_slice_dims = shifted(&self.collapsed_slice_dims, a);
            g.operand_batching_dims = shifted(&self.operand_batching_dims, a);
            g.start_index_map = shifted(&self.start_index_map, a);
            g.slice_sizes.insert(a, if idx.is_batched() { 1 } else { size });
        }
        let out_axis = match (x.axis, idx.axis) {
            (Some(a), None) => {
                // The j-th window dimension: its place in the result follows the previous one's.
                let j = self.window_dims(rank).iter().filter(|&&d| d < a).count();
                let p = if j == 0 { 0 } else { self.offset_dims[j - 1] + 1 };
                g.offset_dims = shifted(&self.offset_dims, p);
                g.offset_dims.insert(j, p);
                p
            }
            (a, Some(c)) => {
                // The c-th batch dimension of the indices: the c-th of the result too.
                let out_rank = self.offset_dims.len() + idx_rank - 2;
                let batch_dims: Vec<usize> = (0..out_rank).filter(|r| !self.offset_dims.contains(r)).collect();
                let p = if c == 0 { 0 } else { batch_dims[c - 1] + 1 };
                g.offset_dims = shifted(&self.offset_dims, p);
                g.indices_batching_dims = shifted(&self.indices_batching_dims, c);
                if let Some(a) = a {
                    let k = g.operand_batching_dims.iter().filter(|&&d| d < a).count();
                    g.operand_batching_dims.insert(k, a);
                    g.indices_batching_dims.insert(k, c);
                }
                p
            }
            (None, None) => unreachable!("a batching rule gets a batched argument"),
        };
        vec![BVal::batched(b.prim1(Prim::Gather(g), &[x.var, idx.var]), out_axis)]
    }

    /// The transpose of a gather adds each window's cotangent into the operand where the
    /// window was read (JAX's scatter-add), at the same clamped starts; the indices get
    /// none. With a scatter that replaces, that is one [`Scatter`] into zeros when no two
    /// windows can meet: every batch dimension of the indices pairs with an operand
    /// batching dimension (each example reads its own operand once, as `dynamic_slice`'s
    /// batching rule emits it). Windows that may overlap (batched starts into a shared
    /// operand) are added one batch position at a time, in a loop over the unpaired batch
    /// dimensions, each step a scatter of the windows that cannot meet.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (x, idx, ct) = (args[0], args[1], cts[0]);
        let x_ty = b.ty(x).clone();
        let idx_shape = b.ty(idx).shape.clone();
        let ivd = idx_shape.len() - 1;
        let scatter = |indices_batching_dims: Vec<usize>, update_window_dims: Vec<usize>| Scatter {
            update_window_dims,
            inserted_window_dims: self.collapsed_slice_dims.clone(),
            operand_batching_dims: self.operand_batching_dims.clone(),
            indices_batching_dims,
            scatter_dims_to_operand_dims: self.start_index_map.clone(),
        };
        // Batch dimensions of the indices whose windows may meet, and the result dimension
        // holding each batch dimension of the indices.
        let unpaired: Vec<usize> = (0..ivd).filter(|c| !self.indices_batching_dims.contains(c)).collect();
        let out_rank = b.ty(ct).rank();
        let batch_out: Vec<usize> = (0..out_rank).filter(|r| !self.offset_dims.contains(r)).collect();
        let zeros = derivative::zeros(b, &x_ty);
        if unpaired.is_empty() {
            let s = scatter(self.indices_batching_dims.clone(), self.offset_dims.clone());
            return Ok(vec![Some(b.prim1(Prim::Scatter(s), &[zeros, idx, ct])), None]);
        }
        // Bring the unpaired dimensions to the front, flattened into one of `m`.
        let m: usize = unpaired.iter().map(|&c| idx_shape[c]).product();
        let paired: Vec<usize> = (0..ivd).filter(|c| !unpaired.contains(c)).collect();
        let idx_perm: Vec<usize> = unpaired.iter().chain(&paired).copied().chain([ivd]).collect();
        let idx_rows = to_rows(b, idx, &idx_perm, unpaired.len(), m);
        let dropped: Vec<usize> = unpaired.iter().map(|&c| batch_out[c]).collect();
        let kept: Vec<usize> = (0..out_rank).filter(|r| !dropped.contains(r)).collect();
        let ct_perm: Vec<usize> = dropped.iter().chain(&kept).copied().collect();
        let ct_rows = to_rows(b, ct, &ct_perm, dropped.len(), m);
        // Without them, the paired batch dimensions are numbered in order, and so are the
        // result's dimensions that remain.
        let renumbered = |d: usize, gone: &[usize]| d - gone.iter().filter(|&&g| g < d).count();
        let s = scatter(
            self.indices_batching_dims.iter().map(|&c| renumbered(c, &unpaired)).collect(),
            self.offset_dims.iter().map(|&r| renumbered(r, &dropped)).collect(),
        );

        b.begin_loop();
        let k = b.fresh(ArrayTy::scalar(DType::I32));
        let acc = b.fresh(x_ty.clone());
        let idx_k = row(b, idx_rows, k);
        let ct_k = row(b, ct_rows, k);
        let zeros_k = derivative::zeros(b, &x_ty);
        let add = b.prim1(Prim::Scatter(s), &[zeros_k, idx_k, ct_k]);
        let next = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[acc, add]);
        let m = i64::try_from(m).expect("sizes fit in i64");
        let out = b.end_loop(0, m, &[zeros], vec![k, acc], vec![next])[0];
        Ok(vec![Some(out), None])
    }
}

/// `v` transposed by `perm`, with its first `lead` dimensions flattened into one of `m`.
fn to_rows(b: &mut Builder, v: Var, perm: &[usize], lead: usize, m: usize) -> Var {
    let v = b.prim1(Prim::Transpose(Transpose { perm: perm.to_vec() }), &[v]);
    let shape = b.ty(v).shape.clone();
    let rows: Vec<usize> = std::iter::once(m).chain(shape[lead..].iter().copied()).collect();
    b.prim1(Prim::Reshape(Reshape { shape: rows }), &[v])
}

/// Row `k` (an i32 scalar) of `rows`, without its leading dimension.
fn row(b: &mut Builder, rows: Var, k: Var) -> Var {
    let shape = b.ty(rows).shape.clone();
    let mut sizes = shape.clone();
    sizes[0] = 1;
    let zero = derivative::index(b, 0);
    let mut args = vec![rows, k];
    args.extend(std::iter::repeat_n(zero, shape.len() - 1));
    let r = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes }), &args);
    b.prim1(Prim::Reshape(Reshape { shape: shape[1..].to_vec() }), &[r])
}

/// `stablehlo.scatter` that replaces: `operand` with windows overwritten by `updates`, at
/// the start indices held by `indices`. Arguments: the operand, the indices (i32, the
/// index vector last: one start per entry of `scatter_dims_to_operand_dims`), then the
/// updates (the operand's dtype).
///
/// The dimensions of `updates` not in `update_window_dims` are its *scatter dimensions*,
/// one per batch dimension of the indices (all but the last), in order and of the same
/// sizes: each position `i` in them has a window of the updates, written at
/// - `clamp(indices[i, j], 0, operand_dim - window)` in operand dimension
///   `scatter_dims_to_operand_dims[j]`, as `dynamic_update_slice` clamps: the whole window
///   lands inside the operand (XLA itself would skip a window that sticks out);
/// - `i[indices_batching_dims[k]]` in operand dimension `operand_batching_dims[k]` (each
///   example writes its own operand);
/// - 0 in the other dimensions;
///
/// and spread over the operand dimensions that are neither inserted nor batching (the
/// *window dimensions*, in order, whose window is the size of the matching update window
/// dimension; the others have a window of 1). Where windows overlap, which write wins is
/// unspecified on the device (the interpreter keeps the last, in row-major order of the
/// updates); the batching rules only emit windows that do not overlap.
#[derive(Clone, Debug, PartialEq)]
pub struct Scatter {
    /// The update dimensions that hold the window dimensions, in increasing order.
    pub update_window_dims: Vec<usize>,
    /// Operand dimensions with a window of 1 that the updates lack, in increasing order.
    pub inserted_window_dims: Vec<usize>,
    /// Operand dimensions indexed by a batch dimension of the indices, in increasing order.
    pub operand_batching_dims: Vec<usize>,
    /// The batch dimensions of the indices paired with `operand_batching_dims`.
    pub indices_batching_dims: Vec<usize>,
    /// The operand dimension that each entry of an index vector starts.
    pub scatter_dims_to_operand_dims: Vec<usize>,
}

impl Scatter {
    /// The operand dimensions that are neither inserted nor batching, in order: the ones
    /// `update_window_dims` pairs with update dimensions.
    fn window_dims(&self, rank: usize) -> Vec<usize> {
        (0..rank)
            .filter(|d| !self.inserted_window_dims.contains(d) && !self.operand_batching_dims.contains(d))
            .collect()
    }

    /// The window's size in every operand dimension, for updates of shape `upd`.
    fn window(&self, rank: usize, upd: &[usize]) -> Vec<usize> {
        let mut sizes = vec![1; rank];
        for (d, &u) in self.window_dims(rank).into_iter().zip(&self.update_window_dims) {
            sizes[d] = upd[u];
        }
        sizes
    }
}

impl Rules for Scatter {
    fn name(&self) -> &'static str {
        "scatter"
    }

    fn attrs(&self) -> String {
        let mut parts = vec![];
        named_list(&mut parts, "update_window_dims", &self.update_window_dims, "=");
        named_list(&mut parts, "inserted", &self.inserted_window_dims, "=");
        named_list(&mut parts, "operand_batching", &self.operand_batching_dims, "=");
        named_list(&mut parts, "indices_batching", &self.indices_batching_dims, "=");
        parts.push(format!("start_index_map={}", list(&self.scatter_dims_to_operand_dims)));
        format!("[{}]", parts.join(", "))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("scatter", args, 3)?;
        let (x, idx, upd) = (&args[0], &args[1], &args[2]);
        if idx.dtype != DType::I32 || idx.rank() == 0 {
            return Err(format!("scatter: indices must be i32 with the index vector last, got {idx}"));
        }
        let ivd = idx.rank() - 1;
        if idx.shape[ivd] != self.scatter_dims_to_operand_dims.len() {
            return Err(format!(
                "scatter: index vectors of {idx} do not have one entry per start_index_map dim {}",
                list(&self.scatter_dims_to_operand_dims)
            ));
        }
        if upd.dtype != x.dtype {
            return Err(format!("scatter: updates {upd} do not have the dtype of {x}"));
        }
        check_sorted_axes("scatter", "update window dim", &self.update_window_dims, upd.rank())?;
        check_sorted_axes("scatter", "inserted dim", &self.inserted_window_dims, x.rank())?;
        check_sorted_axes("scatter", "operand batching dim", &self.operand_batching_dims, x.rank())?;
        check_axes("scatter", "start_index_map dim", &self.scatter_dims_to_operand_dims, x.rank())?;
        check_axes("scatter", "indices batching dim", &self.indices_batching_dims, ivd)?;
        for &d in &self.operand_batching_dims {
            if self.inserted_window_dims.contains(&d) || self.scatter_dims_to_operand_dims.contains(&d) {
                return Err(format!("scatter: operand batching dim {d} is also inserted or started"));
            }
        }
        check_batching_pairs("scatter", &self.operand_batching_dims, &self.indices_batching_dims, x, idx)?;
        let windows = self.window_dims(x.rank());
        let scatter_dims: Vec<usize> = (0..upd.rank()).filter(|d| !self.update_window_dims.contains(d)).collect();
        let fits = windows.len() == self.update_window_dims.len()
            && windows.iter().zip(&self.update_window_dims).all(|(&d, &u)| upd.shape[u] <= x.shape[d])
            && scatter_dims.iter().map(|&d| upd.shape[d]).eq(idx.shape[..ivd].iter().copied());
        if !fits {
            return Err(format!("scatter: updates {upd} do not fit {x} at indices {idx}"));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (x, idx, upd) = (args[0], args[1], args[2]);
        let Data::I32(starts) = &idx.data else { panic!("scatter: i32 indices") };
        let rank = x.shape.len();
        let window = self.window(rank, &upd.shape);
        let scatter_dims: Vec<usize> = (0..upd.shape.len()).filter(|d| !self.update_window_dims.contains(d)).collect();
        let window_dims = self.window_dims(rank);
        let (x_st, idx_st) = (strides(&x.shape), strides(&idx.shape));
        let ivd = idx.shape.len() - 1;
        // Gather from `x ++ updates`: positions inside a window read the update.
        let n = x.data.len();
        let mut src: Vec<usize> = (0..n).collect();
        for (k, u) in indices(&upd.shape).enumerate() {
            let batch: Vec<usize> = scatter_dims.iter().map(|&d| u[d]).collect();
            let base = ravel(&batch, &idx_st[..ivd]);
            let mut pos = vec![0; rank];
            for (j, &d) in self.scatter_dims_to_operand_dims.iter().enumerate() {
                pos[d] = clamp_start(starts[base + j * idx_st[ivd]], x.shape[d], window[d]);
            }
            for (&o, &i) in self.operand_batching_dims.iter().zip(&self.indices_batching_dims) {
                pos[o] = batch[i];
            }
            for (&d, &w) in window_dims.iter().zip(&self.update_window_dims) {
                pos[d] += u[w];
            }
            src[ravel(&pos, &x_st)] = n + k;
        }
        vec![Array::new(x.shape.clone(), take(&concat_data(&[&x.data, &upd.data]), &src))]
    }

    /// The starts are clamped first (`stablehlo.clamp` against the largest start of each
    /// index vector entry), then scattered with a region that returns the update.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let (x_ty, idx_ty, upd_ty) = (&arg_tys[0], &arg_tys[1], &arg_tys[2]);
        let ivd = idx_ty.rank() - 1;
        let window = self.window(x_ty.rank(), &upd_ty.shape);
        let last: Vec<i32> = self
            .scatter_dims_to_operand_dims
            .iter()
            .map(|&d| i32::try_from(x_ty.shape[d] - window[d]).unwrap_or(i32::MAX))
            .collect();
        let last = Array::i32(vec![last.len()], last);
        let last_ty = last.ty();
        let hi = cx.constant(&last);
        let hi = cx.op(
            "stablehlo.broadcast_in_dim",
            &[hi],
            &format!("broadcast_dimensions = {}", i64_array(&[ivd])),
            &[last_ty],
            idx_ty,
        );
        let lo = cx.splat(&Array::i32(vec![], vec![0]), idx_ty);
        let starts = cx.op(
            "stablehlo.clamp",
            &[lo, args[1].clone(), hi],
            "",
            &[idx_ty.clone(), idx_ty.clone(), idx_ty.clone()],
            idx_ty,
        );

        let mut dn = vec![];
        named_list(&mut dn, "update_window_dims", &self.update_window_dims, " = ");
        named_list(&mut dn, "inserted_window_dims", &self.inserted_window_dims, " = ");
        named_list(&mut dn, "input_batching_dims", &self.operand_batching_dims, " = ");
        named_list(&mut dn, "scatter_indices_batching_dims", &self.indices_batching_dims, " = ");
        dn.push(format!("scatter_dims_to_operand_dims = {}", list(&self.scatter_dims_to_operand_dims)));
        dn.push(format!("index_vector_dim = {ivd}"));
        let r = cx.fresh();
        cx.open(&format!(
            "{r} = \"stablehlo.scatter\"({}, {starts}, {}) <{{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<{}>, unique_indices = false}}> ({{",
            args[0],
            args[2],
            dn.join(", ")
        ));
        let scalar = ArrayTy::scalar(x_ty.dtype);
        let (old, new) = (cx.fresh(), cx.fresh());
        let t = tensor_type(&scalar);
        cx.label(&format!("^bb0({old}: {t}, {new}: {t}):"));
        cx.ret(&[new], std::slice::from_ref(&scalar));
        cx.close(&format!("}}) : {}", fn_type(arg_tys, &outs[..1])));
        vec![r]
    }

    /// JAX's rule: the operand and the updates get the batch axis in front (an unbatched
    /// operand is broadcast: each example writes its own copy). Unbatched indices: the
    /// batch axis is one more window dimension, written whole. Batched indices: a
    /// batching dimension pairs the operand with them.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let (x, idx, upd) = (args[0], args[1], args[2]);
        let x = bdim_at(b, x, 0, size);
        let upd = bdim_at(b, upd, 0, size);
        let mut s = Scatter {
            update_window_dims: shifted(&self.update_window_dims, 0),
            inserted_window_dims: shifted(&self.inserted_window_dims, 0),
            operand_batching_dims: shifted(&self.operand_batching_dims, 0),
            indices_batching_dims: self.indices_batching_dims.clone(),
            scatter_dims_to_operand_dims: shifted(&self.scatter_dims_to_operand_dims, 0),
        };
        let idx = if idx.is_batched() {
            s.operand_batching_dims.insert(0, 0);
            s.indices_batching_dims = std::iter::once(0).chain(shifted(&self.indices_batching_dims, 0)).collect();
            bdim_at(b, idx, 0, size)
        } else {
            s.update_window_dims.insert(0, 0);
            idx.var
        };
        vec![BVal::batched(b.prim1(Prim::Scatter(s), &[x, idx, upd]), 0)]
    }

    /// The operand gets the cotangent with the windows zeroed (they were overwritten);
    /// the updates get the windows, read by the [`Gather`] of the same dimension numbers
    /// at the same clamped starts; the indices get none. Where windows overlap, which
    /// write won is unspecified, and so is which update gets the cotangent (the batching
    /// rules emit no overlapping windows).
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (idx, upd, ct) = (args[1], args[2], cts[0]);
        let upd_ty = b.ty(upd).clone();
        let rank = b.ty(ct).rank();
        let zeros = derivative::zeros(b, &upd_ty);
        let dx = b.prim1(Prim::Scatter(self.clone()), &[ct, idx, zeros]);
        let g = Gather {
            offset_dims: self.update_window_dims.clone(),
            collapsed_slice_dims: self.inserted_window_dims.clone(),
            operand_batching_dims: self.operand_batching_dims.clone(),
            indices_batching_dims: self.indices_batching_dims.clone(),
            start_index_map: self.scatter_dims_to_operand_dims.clone(),
            slice_sizes: self.window(rank, &upd_ty.shape),
        };
        let du = b.prim1(Prim::Gather(g), &[ct, idx]);
        Ok(vec![Some(dx), None, Some(du)])
    }
}

/// The operand's and the indices' batching dims must pair up, one to one, with equal sizes.
fn check_batching_pairs(
    op: &str,
    operand: &[usize],
    indices: &[usize],
    x: &ArrayTy,
    idx: &ArrayTy,
) -> Result<(), String> {
    if operand.len() != indices.len() || operand.iter().zip(indices).any(|(&o, &i)| x.shape[o] != idx.shape[i]) {
        return Err(format!(
            "{op}: operand batching dims {} of {x} do not pair with indices batching dims {} of {idx}",
            list(operand),
            list(indices)
        ));
    }
    Ok(())
}
