//! Linear algebra: `dot_general`, the one contraction every product (`@`, matrix-vector,
//! batched matmul) is built from.

use super::elementwise::flush;
use super::reduce::{Reduce, ReduceOp};
use super::util::{check_axes, expect_arity, indices, list, strides};
use super::{Prim, Rules};
use super::{Reshape, Transpose};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

/// `stablehlo.dot_general`: multiplies along the contracting dimensions and sums them
/// away, pairing the batch dimensions. The result's dimensions are the batch dimensions
/// (in `lhs_batch` order), then the remaining lhs dimensions, then the remaining rhs
/// dimensions, each in their operand's order. Defined on f32, i32 and u32 (integers
/// wrap); f32 sums in contraction order, while the device may associate differently.
#[derive(Clone, Debug, PartialEq)]
pub struct Dot {
    /// Batch dimensions of the lhs.
    pub lhs_batch: Vec<usize>,
    /// Batch dimensions of the rhs, paired with `lhs_batch`.
    pub rhs_batch: Vec<usize>,
    /// Contracting dimensions of the lhs.
    pub lhs_contract: Vec<usize>,
    /// Contracting dimensions of the rhs, paired with `lhs_contract`.
    pub rhs_contract: Vec<usize>,
}

/// The dimensions of a rank-`rank` operand that are neither batch nor contracting.
fn free(rank: usize, batch: &[usize], contract: &[usize]) -> Vec<usize> {
    (0..rank).filter(|d| !batch.contains(d) && !contract.contains(d)).collect()
}

impl Dot {
    fn out_shape(&self, l: &[usize], r: &[usize]) -> Vec<usize> {
        let mut shape: Vec<usize> = self.lhs_batch.iter().map(|&d| l[d]).collect();
        shape.extend(free(l.len(), &self.lhs_batch, &self.lhs_contract).iter().map(|&d| l[d]));
        shape.extend(free(r.len(), &self.rhs_batch, &self.rhs_contract).iter().map(|&d| r[d]));
        shape
    }
}

/// A run of consecutive dimensions `first..first + len` of an operand, merged into one.
type Run = (usize, usize);

/// `dims` as one run, when they are two or more consecutive ascending dimensions.
fn run(dims: &[usize]) -> Option<Run> {
    let consecutive = dims.windows(2).all(|w| w[1] == w[0] + 1);
    (dims.len() > 1 && consecutive).then(|| (dims[0], dims.len()))
}

/// `shape` with each run merged into one dimension, and where each old dimension went
/// (a run's dimensions all go to its one).
fn merge(shape: &[usize], runs: &[Run]) -> (Vec<usize>, Vec<usize>) {
    let (mut merged, mut to) = (vec![], vec![]);
    let mut d = 0;
    while d < shape.len() {
        let len = runs.iter().find(|r| r.0 == d).map_or(1, |r| r.1);
        to.extend(std::iter::repeat_n(merged.len(), len));
        merged.push(shape[d..d + len].iter().product());
        d += len;
    }
    (merged, to)
}

/// `x` reshaped from `from` to `to`, or `x` itself when they are the same.
fn reshaped(cx: &mut LowerCx, x: &str, from: &ArrayTy, to: &ArrayTy) -> String {
    match from == to {
        true => x.to_string(),
        false => Reshape { shape: to.shape.clone() }
            .lower(cx, &[x.to_string()], std::slice::from_ref(from), std::slice::from_ref(to))
            .remove(0),
    }
}

impl Dot {
    /// The same contraction on reshaped operands, when that has fewer dimensions: the
    /// contracting dimensions merged into one where they are consecutive and in the same
    /// order in both operands, and each operand's free dimensions merged where they are
    /// consecutive. Merging consecutive dimensions of a row-major array moves no data,
    /// and the result's merged dimensions split back the same way. XLA's CPU backend
    /// otherwise copies an operand whose contraction spans several dimensions into a
    /// transposed layout (a weight gradient over `[T, B, H]` activations, as `vmap` of
    /// `vmap` makes); JAX users flatten such batches by hand.
    fn collapsed(&self, l: &[usize], r: &[usize]) -> Option<(Dot, Vec<usize>, Vec<usize>)> {
        let contract = run(&self.lhs_contract).zip(run(&self.rhs_contract));
        let lhs_free = run(&free(l.len(), &self.lhs_batch, &self.lhs_contract));
        let rhs_free = run(&free(r.len(), &self.rhs_batch, &self.rhs_contract));
        let lhs_runs: Vec<Run> = contract.map(|c| c.0).into_iter().chain(lhs_free).collect();
        let rhs_runs: Vec<Run> = contract.map(|c| c.1).into_iter().chain(rhs_free).collect();
        if lhs_runs.is_empty() && rhs_runs.is_empty() {
            return None;
        }
        let (lhs, lhs_to) = merge(l, &lhs_runs);
        let (rhs, rhs_to) = merge(r, &rhs_runs);
        let renumber = |dims: &[usize], to: &[usize]| -> Vec<usize> {
            let mut out: Vec<usize> = dims.iter().map(|&d| to[d]).collect();
            out.dedup();
            out
        };
        let dot = Dot {
            lhs_batch: renumber(&self.lhs_batch, &lhs_to),
            rhs_batch: renumber(&self.rhs_batch, &rhs_to),
            lhs_contract: renumber(&self.lhs_contract, &lhs_to),
            rhs_contract: renumber(&self.rhs_contract, &rhs_to),
        };
        Some((dot, lhs, rhs))
    }

    /// A long contraction with a small result (a weight gradient: `[N, H]` activations
    /// contracted with `[N, O]` cotangents over the N samples) lowered as `N / SPLIT`
    /// contractions of `SPLIT` samples each, summed, whose pieces stay in cache. On the CPU
    /// plugin the split dot ran 1.16-1.29x faster for 64x64 and 64x2 results at N =
    /// 16,384-32,768, and slower for a 50x64 one (`bench/profile_hlo.py split`; the gains
    /// were larger on a loaded machine; docs/performance.md). The sum's order changes: f32
    /// results agree to rounding.
    fn lower_split(
        &self,
        cx: &mut LowerCx,
        args: &[String],
        arg_tys: &[ArrayTy],
        outs: &[ArrayTy],
    ) -> Option<Vec<String>> {
        const SPLIT: usize = 128;
        let ([lc], [rc]) = (&self.lhs_contract[..], &self.rhs_contract[..]) else { return None };
        let (l, r) = (&arg_tys[0], &arg_tys[1]);
        let n = l.shape[*lc];
        let small = outs[0].shape.iter().product::<usize>() <= 1 << 14;
        if !self.lhs_batch.is_empty() || l.dtype != DType::F32 || n % SPLIT != 0 || n < 16 * SPLIT || !small {
            return None;
        }
        let split = |ty: &ArrayTy, d: usize| {
            let mut shape = ty.shape.clone();
            shape.splice(d..=d, [n / SPLIT, SPLIT]);
            ArrayTy::new(ty.dtype, shape)
        };
        let (lhs_ty, rhs_ty) = (split(l, *lc), split(r, *rc));
        let lhs = reshaped(cx, &args[0], l, &lhs_ty);
        let rhs = reshaped(cx, &args[1], r, &rhs_ty);
        let pieces =
            Dot { lhs_batch: vec![*lc], rhs_batch: vec![*rc], lhs_contract: vec![lc + 1], rhs_contract: vec![rc + 1] };
        let pieces_ty = ArrayTy::new(DType::F32, pieces.out_shape(&lhs_ty.shape, &rhs_ty.shape));
        let y = pieces.lower(cx, &[lhs, rhs], &[lhs_ty, rhs_ty], std::slice::from_ref(&pieces_ty)).remove(0);
        let sum = Reduce { op: ReduceOp::Sum, axes: vec![0] };
        Some(sum.lower(cx, &[y], &[pieces_ty], outs))
    }
}

impl Rules for Dot {
    fn name(&self) -> &'static str {
        "dot_general"
    }

    fn attrs(&self) -> String {
        let mut parts = vec![];
        if !self.lhs_batch.is_empty() || !self.rhs_batch.is_empty() {
            parts.push(format!("lhs_batch={}", list(&self.lhs_batch)));
            parts.push(format!("rhs_batch={}", list(&self.rhs_batch)));
        }
        parts.push(format!("lhs_contract={}", list(&self.lhs_contract)));
        parts.push(format!("rhs_contract={}", list(&self.rhs_contract)));
        format!("[{}]", parts.join(", "))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("dot_general", args, 2)?;
        let (l, r) = (&args[0], &args[1]);
        if l.dtype != r.dtype {
            return Err(format!("dot_general: operands {l} and {r} differ in dtype"));
        }
        if !matches!(l.dtype, DType::F32 | DType::I32 | DType::U32 | DType::U8) {
            return Err(format!("dot_general is not defined on {}", l.dtype));
        }
        if self.lhs_batch.len() != self.rhs_batch.len() || self.lhs_contract.len() != self.rhs_contract.len() {
            return Err("dot_general: lhs and rhs must name as many batch and contracting dimensions".to_string());
        }
        let lhs_dims: Vec<usize> = self.lhs_batch.iter().chain(&self.lhs_contract).copied().collect();
        let rhs_dims: Vec<usize> = self.rhs_batch.iter().chain(&self.rhs_contract).copied().collect();
        check_axes("dot_general", "lhs dimension", &lhs_dims, l.rank())?;
        check_axes("dot_general", "rhs dimension", &rhs_dims, r.rank())?;
        for (&a, &b) in lhs_dims.iter().zip(&rhs_dims) {
            if l.shape[a] != r.shape[b] {
                return Err(format!(
                    "dot_general: lhs dimension {a} of {l} and rhs dimension {b} of {r} differ in size"
                ));
            }
        }
        Ok(vec![ArrayTy::new(l.dtype, self.out_shape(&l.shape, &r.shape))])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (l, r) = (args[0], args[1]);
        let (ls, rs) = (strides(&l.shape), strides(&r.shape));
        let lhs_free = free(l.shape.len(), &self.lhs_batch, &self.lhs_contract);
        let rhs_free = free(r.shape.len(), &self.rhs_batch, &self.rhs_contract);
        // Flat offsets of every contraction step, in both operands.
        let contract_shape: Vec<usize> = self.lhs_contract.iter().map(|&d| l.shape[d]).collect();
        let steps: Vec<(usize, usize)> = indices(&contract_shape)
            .map(|k| {
                let lo: usize = k.iter().zip(&self.lhs_contract).map(|(i, &d)| i * ls[d]).sum();
                let ro: usize = k.iter().zip(&self.rhs_contract).map(|(i, &d)| i * rs[d]).sum();
                (lo, ro)
            })
            .collect();
        // Flat base offsets of every result element, in both operands.
        let shape = self.out_shape(&l.shape, &r.shape);
        let nb = self.lhs_batch.len();
        let nl = lhs_free.len();
        let lhs_dims: Vec<usize> = self.lhs_batch.iter().chain(&lhs_free).copied().collect();
        let rhs_dims: Vec<usize> = self.rhs_batch.iter().chain(&rhs_free).copied().collect();
        let bases: Vec<(usize, usize)> = indices(&shape)
            .map(|idx| {
                let lhs_idx = idx[..nb + nl].iter();
                let rhs_idx = idx[..nb].iter().chain(&idx[nb + nl..]);
                let lo: usize = lhs_idx.zip(&lhs_dims).map(|(i, &d)| i * ls[d]).sum();
                let ro: usize = rhs_idx.zip(&rhs_dims).map(|(i, &d)| i * rs[d]).sum();
                (lo, ro)
            })
            .collect();
        fn go<T: Copy>(
            a: &[T],
            b: &[T],
            bases: &[(usize, usize)],
            steps: &[(usize, usize)],
            zero: T,
            mul_add: fn(T, T, T) -> T,
        ) -> Vec<T> {
            bases
                .iter()
                .map(|&(lb, rb)| steps.iter().fold(zero, |acc, &(lo, ro)| mul_add(acc, a[lb + lo], b[rb + ro])))
                .collect()
        }
        let data = match (&l.data, &r.data) {
            (Data::F32(a), Data::F32(b)) => {
                Data::F32(go(a, b, &bases, &steps, 0.0, |acc, x, y| flush(acc + flush(flush(x) * flush(y)))))
            }
            (Data::I32(a), Data::I32(b)) => {
                Data::I32(go(a, b, &bases, &steps, 0, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))))
            }
            (Data::U32(a), Data::U32(b)) => {
                Data::U32(go(a, b, &bases, &steps, 0, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))))
            }
            (Data::U8(a), Data::U8(b)) => {
                Data::U8(go(a, b, &bases, &steps, 0, |acc, x, y| acc.wrapping_add(x.wrapping_mul(y))))
            }
            (Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_), _) => {
                panic!("dot_general: unsupported operand dtypes")
            }
        };
        vec![Array::new(shape, data)]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        if let Some((dot, lhs, rhs)) = self.collapsed(&arg_tys[0].shape, &arg_tys[1].shape) {
            let dtype = outs[0].dtype;
            let (lhs_ty, rhs_ty) = (ArrayTy::new(dtype, lhs), ArrayTy::new(dtype, rhs));
            let l = reshaped(cx, &args[0], &arg_tys[0], &lhs_ty);
            let r = reshaped(cx, &args[1], &arg_tys[1], &rhs_ty);
            let out_ty = ArrayTy::new(dtype, dot.out_shape(&lhs_ty.shape, &rhs_ty.shape));
            let y = dot.lower(cx, &[l, r], &[lhs_ty, rhs_ty], std::slice::from_ref(&out_ty)).remove(0);
            return vec![reshaped(cx, &y, &out_ty, &outs[0])];
        }
        if let Some(lowered) = self.lower_split(cx, args, arg_tys, outs) {
            return lowered;
        }
        // Empty dimension lists are left out, as MLIR prints them.
        let fields = [
            ("lhs_batching_dimensions", &self.lhs_batch),
            ("rhs_batching_dimensions", &self.rhs_batch),
            ("lhs_contracting_dimensions", &self.lhs_contract),
            ("rhs_contracting_dimensions", &self.rhs_contract),
        ];
        let fields: Vec<String> =
            fields.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k} = {}", list(v))).collect();
        let attrs = format!("dot_dimension_numbers = #stablehlo.dot<{}>", fields.join(", "));
        vec![cx.op("stablehlo.dot_general", args, &attrs, arg_tys, &outs[0])]
    }

    /// No data moves: the dimension numbers are renumbered around the batch axes. Two
    /// batched operands pair their batch axes as one more (leading) batch dimension; a
    /// single batched operand's batch axis is one of its free dimensions, which the
    /// result keeps in order after the batch dimensions (lhs free ones, then rhs).
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let (l, r) = (args[0], args[1]);
        let lift = |dims: &[usize], axis: Option<usize>| -> Vec<usize> {
            dims.iter().map(|&d| if axis.is_some_and(|a| d >= a) { d + 1 } else { d }).collect()
        };
        let mut dot = Dot {
            lhs_batch: lift(&self.lhs_batch, l.axis),
            rhs_batch: lift(&self.rhs_batch, r.axis),
            lhs_contract: lift(&self.lhs_contract, l.axis),
            rhs_contract: lift(&self.rhs_contract, r.axis),
        };
        let before = |free: Vec<usize>, a: usize| free.iter().filter(|&&d| d < a).count();
        let lhs_free = free(b.ty(l.var).rank(), &dot.lhs_batch, &dot.lhs_contract);
        let rhs_free = free(b.ty(r.var).rank(), &dot.rhs_batch, &dot.rhs_contract);
        let n_batch = dot.lhs_batch.len();
        let axis = match (l.axis, r.axis) {
            (Some(la), Some(ra)) => {
                dot.lhs_batch.insert(0, la);
                dot.rhs_batch.insert(0, ra);
                0
            }
            (Some(la), None) => n_batch + before(lhs_free, la),
            (None, Some(ra)) => n_batch + lhs_free.len() + before(rhs_free, ra),
            (None, None) => panic!("dot_general: batching rule called without a batched operand"),
        };
        vec![BVal::batched(b.prim1(Prim::Dot(dot), &[l.var, r.var]), axis)]
    }

    /// Each operand's cotangent is the cotangent contracted with the other operand over
    /// the other's free dimensions, batch dimensions paired (JAX's
    /// `_dot_general_transpose_lhs`/`_rhs`), then transposed into the operand's order.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (x, y, ct) = (args[0], args[1], cts[0]);
        let (x_rank, y_rank) = (b.ty(x).rank(), b.ty(y).rank());
        let x_free = free(x_rank, &self.lhs_batch, &self.lhs_contract);
        let y_free = free(y_rank, &self.rhs_batch, &self.rhs_contract);
        let nb = self.lhs_batch.len();
        let ct_batch: Vec<usize> = (0..nb).collect();
        let ct_x_free: Vec<usize> = (nb..nb + x_free.len()).collect();
        let ct_y_free: Vec<usize> = (nb + x_free.len()..nb + x_free.len() + y_free.len()).collect();
        // Contracting dimensions of one operand, in the order of their partners in the
        // other: that is the order the other's leftover dimensions come out in.
        let by_partner = |mine: &[usize], theirs: &[usize]| {
            let mut pairs: Vec<(usize, usize)> = theirs.iter().copied().zip(mine.iter().copied()).collect();
            pairs.sort_unstable();
            pairs.into_iter().map(|(_, m)| m).collect::<Vec<usize>>()
        };
        // ct_x = dot(ct, y): [batch, x free, y's contracting (in y's order)].
        let dx = Dot {
            lhs_batch: ct_batch.clone(),
            rhs_batch: self.rhs_batch.clone(),
            lhs_contract: ct_y_free,
            rhs_contract: y_free.clone(),
        };
        let dx = b.prim1(Prim::Dot(dx), &[ct, y]);
        let src: Vec<usize> = self
            .lhs_batch
            .iter()
            .chain(&x_free)
            .copied()
            .chain(by_partner(&self.lhs_contract, &self.rhs_contract))
            .collect();
        let dx = into_order(b, dx, &src);
        // ct_y = dot(x, ct): [batch, y's contracting (in x's order), y free].
        let dy = Dot {
            lhs_batch: self.lhs_batch.clone(),
            rhs_batch: ct_batch,
            lhs_contract: x_free,
            rhs_contract: ct_x_free,
        };
        let dy = b.prim1(Prim::Dot(dy), &[x, ct]);
        let src: Vec<usize> = self
            .rhs_batch
            .iter()
            .copied()
            .chain(by_partner(&self.rhs_contract, &self.lhs_contract))
            .chain(y_free)
            .collect();
        let dy = into_order(b, dy, &src);
        Ok(vec![Some(dx), Some(dy)])
    }
}

/// `v`, whose dimension `p` is dimension `src[p]` of an operand, transposed into the
/// operand's order.
fn into_order(b: &mut Builder, v: Var, src: &[usize]) -> Var {
    let perm: Vec<usize> = (0..src.len()).map(|d| src.iter().position(|&s| s == d).expect("a permutation")).collect();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return v;
    }
    b.prim1(Prim::Transpose(Transpose { perm }), &[v])
}
