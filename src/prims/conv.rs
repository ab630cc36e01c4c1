//! Convolution: `stablehlo.convolution`, in the generality of JAX's
//! `conv_general_dilated`.
//!
//! The language's `conv2d` is one example in NHWC/HWIO layout (`src/elab/conv.rs`), but
//! the primitive is general because its own rules need it to be: the derivative with
//! respect to the input is a convolution of the cotangent dilated by the strides (lhs
//! dilation) with the flipped kernel, the derivative with respect to the kernel is a
//! convolution of the input with the cotangent in which the batch dimension is contracted
//! (the dimension numbers swap roles), and batching a kernel that differs per example
//! folds the batch into feature groups. Every rule is JAX's (`jax/_src/lax/convolution.py`),
//! so the programs XLA sees are the ones `jax.jit` would give it.

use super::elementwise::flush;
use super::util::{check_axes, expect_arity, i64_array, indices, list, ravel, strides};
use super::{Prim, Reshape, Reverse, Rules, Transpose};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

/// `conv_general_dilated` on f32. Each `*_spec` names dimensions of its operand: for the
/// lhs and the result, the batch dimension, the feature dimension, then the spatial ones;
/// for the rhs (the kernel), the output feature dimension, the input feature dimension,
/// then the spatial ones, paired with the lhs's.
///
/// Along each spatial dimension the lhs is dilated (`lhs_dilation - 1` zeros between
/// elements), padded (`padding`, negative values crop), and the dilated kernel
/// (`rhs_dilation`) slides over it by `strides`; windows that do not fit are dropped, so
/// the size is `(dilated + lo + hi - dilated_kernel) / stride + 1`, or 0 when the kernel
/// is larger. With `feature_groups = G`, the lhs features and the rhs output features
/// split into G groups, and output feature group g sees only lhs feature group g. With
/// `batch_groups = G`, the lhs batch splits into G groups, the result has the batch of one
/// group, and output feature group g sees lhs batch group g. At most one of them is above
/// 1. Products are summed over the input features, then the window, in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    /// The lhs's batch, feature and spatial dimensions.
    pub lhs_spec: Vec<usize>,
    /// The rhs's output feature, input feature and spatial dimensions.
    pub rhs_spec: Vec<usize>,
    /// The result's batch, feature and spatial dimensions.
    pub out_spec: Vec<usize>,
    /// The step of the window, per spatial dimension.
    pub strides: Vec<usize>,
    /// Padding before and after, per spatial dimension; negative values crop.
    pub padding: Vec<(i64, i64)>,
    /// Dilation of the lhs (the transposed convolution of a strided one).
    pub lhs_dilation: Vec<usize>,
    /// Dilation of the kernel (atrous convolution).
    pub rhs_dilation: Vec<usize>,
    /// Groups of features convolved separately.
    pub feature_groups: usize,
    /// Groups of the batch, each paired with a group of output features.
    pub batch_groups: usize,
}

/// The size of `n` elements with `d - 1` zeros between each two.
fn dilated(n: usize, d: usize) -> i64 {
    if n == 0 { 0 } else { ((n - 1) * d + 1) as i64 }
}

impl Conv {
    /// Checks the attributes and operand types; returns the result shape.
    fn out_shape(&self, l: &ArrayTy, r: &ArrayTy) -> Result<Vec<usize>, String> {
        let n = self.strides.len();
        let lists = [self.padding.len(), self.lhs_dilation.len(), self.rhs_dilation.len()];
        if lists.iter().any(|&k| k != n) {
            return Err("conv: strides, padding and dilations must have one entry per spatial dimension".into());
        }
        for (what, spec, t) in [("lhs", &self.lhs_spec, l), ("rhs", &self.rhs_spec, r)] {
            if spec.len() != n + 2 || t.rank() != n + 2 {
                return Err(format!(
                    "conv: {what} {t} and its dimension numbers {} must have rank {}",
                    list(spec),
                    n + 2
                ));
            }
            check_axes("conv", &format!("{what} dimension"), spec, n + 2)?;
        }
        if self.out_spec.len() != n + 2 {
            return Err(format!("conv: result dimension numbers {} must have length {}", list(&self.out_spec), n + 2));
        }
        check_axes("conv", "result dimension", &self.out_spec, n + 2)?;
        let steps = self.strides.iter().chain(&self.lhs_dilation).chain(&self.rhs_dilation);
        if steps.into_iter().any(|&s| s == 0) {
            return Err("conv: strides and dilations must be positive".into());
        }
        let (fg, bg) = (self.feature_groups, self.batch_groups);
        if fg == 0 || bg == 0 || (fg > 1 && bg > 1) {
            return Err(format!("conv: feature_groups {fg} and batch_groups {bg}: both positive, one of them 1"));
        }
        let batch = l.shape[self.lhs_spec[0]];
        let (c, i, o) = (l.shape[self.lhs_spec[1]], r.shape[self.rhs_spec[1]], r.shape[self.rhs_spec[0]]);
        if c != i * fg || !o.is_multiple_of(fg) || !o.is_multiple_of(bg) || !batch.is_multiple_of(bg) {
            return Err(format!(
                "conv: lhs {l} (features {c}, batch {batch}) and rhs {r} (in {i}, out {o}) do not fit \
                 feature_groups {fg} and batch_groups {bg}"
            ));
        }
        let mut shape = vec![0; n + 2];
        shape[self.out_spec[0]] = batch / bg;
        shape[self.out_spec[1]] = o;
        for k in 0..n {
            let (lo, hi) = self.padding[k];
            let padded = dilated(l.shape[self.lhs_spec[k + 2]], self.lhs_dilation[k]) + lo + hi;
            let window = dilated(r.shape[self.rhs_spec[k + 2]], self.rhs_dilation[k]);
            shape[self.out_spec[k + 2]] =
                if padded < window { 0 } else { ((padded - window) / self.strides[k] as i64 + 1) as usize };
        }
        Ok(shape)
    }
}

/// `dimension_numbers` in StableHLO's short form, `[b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f]`:
/// each operand's dimensions in order, named by their role.
fn dimension_numbers(c: &Conv) -> String {
    let names = |spec: &[usize], first: &str, second: &str| {
        let mut out = vec![String::new(); spec.len()];
        out[spec[0]] = first.to_string();
        out[spec[1]] = second.to_string();
        for (k, &d) in spec[2..].iter().enumerate() {
            out[d] = k.to_string();
        }
        format!("[{}]", out.join(", "))
    };
    format!(
        "#stablehlo.conv<{}x{}->{}>",
        names(&c.lhs_spec, "b", "f"),
        names(&c.rhs_spec, "o", "i"),
        names(&c.out_spec, "b", "f")
    )
}

/// `x` (of type `ty`) transposed by `perm`, lowered; its name and type.
fn transposed(cx: &mut LowerCx, x: &str, ty: &ArrayTy, perm: &[usize]) -> (String, ArrayTy) {
    let t = Transpose { perm: perm.to_vec() };
    let out_ty = t.infer(std::slice::from_ref(ty)).expect("a permutation").remove(0);
    let name = t.lower(cx, &[x.to_string()], std::slice::from_ref(ty), std::slice::from_ref(&out_ty)).remove(0);
    (name, out_ty)
}

impl Conv {
    /// Whether the lhs needs its padding and dilation applied by a `stablehlo.pad` of its
    /// own, which leaves XLA a convolution without either (false once it has neither):
    /// - where a dimension is padded on one side and cropped on the other, XLA's CPU
    ///   convolution computes wrong values (jax 0.10.2's `conv_general_dilated` with
    ///   padding `(-1, 1)` does too);
    /// - where the kernel is larger than the lhs along some dimension (it fits thanks to
    ///   the padding; the input derivative of a strided convolution often does), XLA's
    ///   simplifier swaps the operands, and builds a wrong window for a dimension it takes
    ///   for a feature group (lhs dilation = kernel size = stride + 1): a CHECK fails and
    ///   the process aborts (jax 0.10.2 aborts too). Once padded, the lhs is at least as
    ///   large as the kernel everywhere, and XLA keeps the operands in place.
    fn needs_padding(&self, l: &ArrayTy, r: &ArrayTy) -> bool {
        let mixed = self.padding.iter().any(|&(lo, hi)| (lo < 0 && hi > 0) || (lo > 0 && hi < 0));
        let spatial = |t: &ArrayTy, spec: &[usize], k: usize| t.shape[spec[k + 2]];
        let kernel_larger =
            (0..self.strides.len()).any(|k| spatial(r, &self.rhs_spec, k) > spatial(l, &self.lhs_spec, k));
        let padded = self.padding.iter().any(|&p| p != (0, 0)) || self.lhs_dilation.iter().any(|&d| d != 1);
        padded && (mixed || kernel_larger)
    }

    /// The layout XLA's CPU backend runs as a fast (Eigen) convolution: batch first and
    /// features last in the lhs and result, the kernel's spatial dimensions first, then
    /// input and output features.
    fn is_canonical(&self) -> bool {
        let n = self.strides.len();
        let spatial: Vec<usize> = (1..=n).collect();
        self.lhs_spec[0] == 0
            && self.lhs_spec[1] == n + 1
            && self.lhs_spec[2..] == spatial[..]
            && self.out_spec == self.lhs_spec
            && self.rhs_spec[0] == n + 1
            && self.rhs_spec[1] == n
            && self.rhs_spec[2..].iter().copied().eq(0..n)
    }

    /// A convolution without groups in another layout (a derivative's: the kernel's
    /// cotangent convolves with batch and features swapped), lowered as the canonical one
    /// between transposes. XLA canonicalises such convolutions itself, but not inside a
    /// loop body, where it falls back to a naive loop 10-20x slower (a PPO epoch's
    /// gradient steps). `None` when the convolution needs no change.
    fn lower_canonical(
        &self,
        cx: &mut LowerCx,
        args: &[String],
        arg_tys: &[ArrayTy],
        outs: &[ArrayTy],
    ) -> Option<Vec<String>> {
        if self.feature_groups != 1 || self.batch_groups != 1 || self.is_canonical() {
            return None;
        }
        let n = self.strides.len();
        // New dimension i of each operand is its old dimension perm[i].
        let lhs_perm: Vec<usize> = [self.lhs_spec[0]]
            .into_iter()
            .chain(self.lhs_spec[2..].iter().copied())
            .chain([self.lhs_spec[1]])
            .collect();
        let rhs_perm: Vec<usize> =
            self.rhs_spec[2..].iter().copied().chain([self.rhs_spec[1], self.rhs_spec[0]]).collect();
        let out_perm: Vec<usize> = [self.out_spec[0]]
            .into_iter()
            .chain(self.out_spec[2..].iter().copied())
            .chain([self.out_spec[1]])
            .collect();
        let (lhs, lhs_ty) = transposed(cx, &args[0], &arg_tys[0], &lhs_perm);
        let (rhs, rhs_ty) = transposed(cx, &args[1], &arg_tys[1], &rhs_perm);
        let spatial: Vec<usize> = (1..=n).collect();
        let canonical = Conv {
            lhs_spec: [0, n + 1].into_iter().chain(spatial.iter().copied()).collect(),
            rhs_spec: [n + 1, n].into_iter().chain(0..n).collect(),
            out_spec: [0, n + 1].into_iter().chain(spatial.iter().copied()).collect(),
            ..self.clone()
        };
        let out_ty = ArrayTy::new(outs[0].dtype, out_perm.iter().map(|&d| outs[0].shape[d]).collect());
        let y = canonical.lower(cx, &[lhs, rhs], &[lhs_ty, rhs_ty], std::slice::from_ref(&out_ty)).remove(0);
        // Back: result dimension d is canonical dimension k where out_perm[k] = d.
        let mut back = vec![0; out_perm.len()];
        for (k, &d) in out_perm.iter().enumerate() {
            back[d] = k;
        }
        let (out, _) = transposed(cx, &y, &out_ty, &back);
        Some(vec![out])
    }
}

impl Rules for Conv {
    fn name(&self) -> &'static str {
        "conv"
    }

    fn attrs(&self) -> String {
        let pads: Vec<String> = self.padding.iter().map(|(lo, hi)| format!("({lo}, {hi})")).collect();
        let mut parts = vec![
            format!("lhs={}", list(&self.lhs_spec)),
            format!("rhs={}", list(&self.rhs_spec)),
            format!("out={}", list(&self.out_spec)),
            format!("strides={}", list(&self.strides)),
            format!("padding=[{}]", pads.join(", ")),
        ];
        if self.lhs_dilation.iter().any(|&d| d != 1) {
            parts.push(format!("lhs_dilation={}", list(&self.lhs_dilation)));
        }
        if self.rhs_dilation.iter().any(|&d| d != 1) {
            parts.push(format!("rhs_dilation={}", list(&self.rhs_dilation)));
        }
        if self.feature_groups != 1 {
            parts.push(format!("feature_groups={}", self.feature_groups));
        }
        if self.batch_groups != 1 {
            parts.push(format!("batch_groups={}", self.batch_groups));
        }
        format!("[{}]", parts.join(", "))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("conv", args, 2)?;
        let (l, r) = (&args[0], &args[1]);
        if l.dtype != DType::F32 || r.dtype != DType::F32 {
            return Err(format!("conv is defined on f32, got {l} and {r}"));
        }
        Ok(vec![ArrayTy::new(DType::F32, self.out_shape(l, r)?)])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (l, r) = (args[0], args[1]);
        let shape = self.out_shape(&l.ty(), &r.ty()).expect("checked by infer");
        let (Data::F32(lv), Data::F32(rv)) = (&l.data, &r.data) else { panic!("conv: f32 operands") };
        let (ls, rs) = (strides(&l.shape), strides(&r.shape));
        let n = self.strides.len();
        let in_features = r.shape[self.rhs_spec[1]];
        let out_features = r.shape[self.rhs_spec[0]];
        let out_batch = shape[self.out_spec[0]];
        let kernel: Vec<usize> = (0..n).map(|k| r.shape[self.rhs_spec[k + 2]]).collect();
        let (f_group, b_group) = (out_features / self.feature_groups, out_features / self.batch_groups);
        let data = indices(&shape)
            .map(|out| {
                let o = out[self.out_spec[1]];
                let batch = out[self.out_spec[0]] + (o / b_group) * out_batch;
                let mut acc = 0.0f32;
                for k in indices(&kernel) {
                    // The lhs position of this tap, if it is a real element (not padding
                    // or a dilation hole).
                    let mut lhs_idx = vec![0; n + 2];
                    lhs_idx[self.lhs_spec[0]] = batch;
                    let mut inside = true;
                    for s in 0..n {
                        let (lo, _) = self.padding[s];
                        let p = (out[self.out_spec[s + 2]] * self.strides[s] + k[s] * self.rhs_dilation[s]) as i64 - lo;
                        let d = self.lhs_dilation[s] as i64;
                        let q = p.div_euclid(d);
                        if p < 0 || p % d != 0 || q >= l.shape[self.lhs_spec[s + 2]] as i64 {
                            inside = false;
                            break;
                        }
                        lhs_idx[self.lhs_spec[s + 2]] = q as usize;
                    }
                    if !inside {
                        continue;
                    }
                    let mut rhs_idx = vec![0; n + 2];
                    rhs_idx[self.rhs_spec[0]] = o;
                    for (s, &ks) in k.iter().enumerate() {
                        rhs_idx[self.rhs_spec[s + 2]] = ks;
                    }
                    for i in 0..in_features {
                        lhs_idx[self.lhs_spec[1]] = (o / f_group) * in_features + i;
                        rhs_idx[self.rhs_spec[1]] = i;
                        let (x, w) = (lv[ravel(&lhs_idx, &ls)], rv[ravel(&rhs_idx, &rs)]);
                        acc = flush(acc + flush(flush(x) * flush(w)));
                    }
                }
                acc
            })
            .collect();
        vec![Array::new(shape, Data::F32(data))]
    }

    /// One `stablehlo.convolution`, as JAX emits it, except where `needs_padding`: there
    /// the lhs is first padded, cropped and dilated by a `stablehlo.pad` (exact), behind an
    /// optimisation barrier so that XLA does not fold the padding back into the
    /// convolution, which then has neither padding nor lhs dilation.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        if self.needs_padding(&arg_tys[0], &arg_tys[1]) {
            let n = self.strides.len();
            let (mut low, mut high, mut interior) = (vec![0i64; n + 2], vec![0i64; n + 2], vec![0i64; n + 2]);
            let mut shape = arg_tys[0].shape.clone();
            for k in 0..n {
                let d = self.lhs_spec[k + 2];
                (low[d], high[d]) = self.padding[k];
                interior[d] = self.lhs_dilation[k] as i64 - 1;
                shape[d] = (dilated(shape[d], self.lhs_dilation[k]) + low[d] + high[d]) as usize;
            }
            let zero = cx.constant(&Array::f32(vec![], vec![0.0]));
            let padded_ty = ArrayTy::new(DType::F32, shape);
            let i64s =
                |v: &[i64]| format!("array<i64: {}>", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "));
            let attrs = format!(
                "edge_padding_high = {}, edge_padding_low = {}, interior_padding = {}",
                i64s(&high),
                i64s(&low),
                i64s(&interior)
            );
            let scalar = ArrayTy::scalar(DType::F32);
            let padded =
                cx.op("stablehlo.pad", &[args[0].clone(), zero], &attrs, &[arg_tys[0].clone(), scalar], &padded_ty);
            let tys = std::slice::from_ref(&padded_ty);
            let padded = cx.op("stablehlo.optimization_barrier", &[padded], "", tys, &padded_ty);
            let plain = Conv { padding: vec![(0, 0); n], lhs_dilation: vec![1; n], ..self.clone() };
            return plain.lower(cx, &[padded, args[1].clone()], &[padded_ty, arg_tys[1].clone()], outs);
        }
        if let Some(lowered) = self.lower_canonical(cx, args, arg_tys, outs) {
            return lowered;
        }
        let pads: Vec<String> = self.padding.iter().map(|(lo, hi)| format!("[{lo}, {hi}]")).collect();
        let attrs = format!(
            "batch_group_count = {} : i64, dimension_numbers = {}, feature_group_count = {} : i64, \
             lhs_dilation = {}, padding = dense<[{}]> : tensor<{}x2xi64>, rhs_dilation = {}, window_strides = {}",
            self.batch_groups,
            dimension_numbers(self),
            self.feature_groups,
            i64_array(&self.lhs_dilation),
            pads.join(", "),
            self.padding.len(),
            i64_array(&self.rhs_dilation),
            i64_array(&self.strides),
        );
        vec![cx.op("stablehlo.convolution", args, &attrs, arg_tys, &outs[0])]
    }

    /// JAX's `_conv_general_dilated_batch_rule`: the batch folds into a dimension the
    /// convolution already has. A batched lhs alone joins the lhs batch; a batched kernel
    /// alone joins the output features; both batched make one feature group per example
    /// (what `vmap` over parameters, `--seeds N`, gives), or with batch groups already in
    /// use (a kernel derivative), one batch group per example. The batch comes back out
    /// of the result's batch or feature dimension, where it is the major part.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let (l, r) = (args[0], args[1]);
        let (ls, rs, os) = (&self.lhs_spec, &self.rhs_spec, &self.out_spec);
        let mut conv = self.clone();
        match (l.axis, r.axis) {
            (Some(la), Some(ra)) => {
                let size = b.ty(l.var).shape[la];
                let lhs = if self.batch_groups > 1 {
                    conv.batch_groups *= size;
                    axis_into(b, la, ls[0], l.var)
                } else {
                    conv.feature_groups *= size;
                    axis_into(b, la, ls[1], l.var)
                };
                let rhs = axis_into(b, ra, rs[0], r.var);
                let out = b.prim1(Prim::Conv(conv), &[lhs, rhs]);
                vec![BVal::batched(axis_out_of(b, os[1], size, out), os[1])]
            }
            (Some(la), None) => {
                let size = b.ty(l.var).shape[la];
                let lhs = if self.batch_groups == 1 {
                    axis_into(b, la, ls[0], l.var)
                } else {
                    // The batch goes inside each batch group.
                    let lhs = axis_out_of(b, ls[0] + usize::from(la <= ls[0]), self.batch_groups, l.var);
                    let lhs = axis_into(b, la + usize::from(ls[0] < la), ls[0] + 1, lhs);
                    axis_into(b, ls[0], ls[0], lhs)
                };
                let out = b.prim1(Prim::Conv(conv), &[lhs, r.var]);
                vec![BVal::batched(axis_out_of(b, os[0], size, out), os[0])]
            }
            (None, Some(ra)) => {
                let size = b.ty(r.var).shape[ra];
                let groups = self.feature_groups.max(self.batch_groups);
                if groups == 1 {
                    let rhs = axis_into(b, ra, rs[0], r.var);
                    let out = b.prim1(Prim::Conv(conv), &[l.var, rhs]);
                    return vec![BVal::batched(axis_out_of(b, os[1], size, out), os[1])];
                }
                // Groups stay outermost in the output features: the batch goes inside
                // each group, and comes out of it.
                let rhs = axis_out_of(b, rs[0] + usize::from(ra <= rs[0]), groups, r.var);
                let rhs = axis_into(b, ra + usize::from(rs[0] < ra), rs[0] + 1, rhs);
                let rhs = axis_into(b, rs[0], rs[0], rhs);
                let out = b.prim1(Prim::Conv(conv), &[l.var, rhs]);
                let out = axis_out_of(b, os[1], groups, out);
                let out = axis_out_of(b, os[1] + 1, size, out);
                vec![BVal::batched(axis_into(b, os[1], os[1] + 1, out), os[1])]
            }
            (None, None) => panic!("conv: batching rule called without a batched operand"),
        }
    }

    /// JAX's `_conv_general_dilated_transpose_lhs` and `_rhs`. The input's cotangent
    /// convolves the cotangent, dilated by the strides, with the kernel flipped in space
    /// and its feature roles swapped; the kernel's convolves the input with the
    /// cotangent, contracting the batch (the input's batch acts as its features).
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (lhs, rhs, ct) = (args[0], args[1], cts[0]);
        let (l_ty, r_ty, ct_ty) = (b.ty(lhs).clone(), b.ty(rhs).clone(), b.ty(ct).clone());
        let n = self.strides.len();
        let (ls, rs, os) = (&self.lhs_spec, &self.rhs_spec, &self.out_spec);
        let sizes = |t: &ArrayTy, spec: &[usize]| -> Vec<usize> { spec[2..].iter().map(|&d| t.shape[d]).collect() };
        let (in_sp, k_sp, out_sp) = (sizes(&l_ty, ls), sizes(&r_ty, rs), sizes(&ct_ty, os));
        let swap = |spec: &[usize]| -> Vec<usize> {
            let mut s = spec.to_vec();
            s.swap(0, 1);
            s
        };
        let lhs_d: Vec<i64> = (0..n).map(|k| dilated(in_sp[k], self.lhs_dilation[k])).collect();
        let rhs_d: Vec<i64> = (0..n).map(|k| dilated(k_sp[k], self.rhs_dilation[k])).collect();
        let out_d: Vec<i64> = (0..n).map(|k| dilated(out_sp[k], self.strides[k])).collect();

        // The input's cotangent.
        let (mut kernel, mut groups) = (rhs, self.feature_groups);
        if self.feature_groups > 1 || self.batch_groups > 1 {
            // Move the group axis from the kernel's output features into its input ones.
            let g = self.feature_groups.max(self.batch_groups);
            kernel = axis_out_of(b, rs[0], g, kernel);
            kernel = axis_into(b, rs[0], rs[1], kernel);
            groups = g;
        }
        let kernel = b.prim1(Prim::Reverse(Reverse { dims: rs[2..].to_vec() }), &[kernel]);
        let padding: Vec<(i64, i64)> = (0..n)
            .map(|k| {
                let before = rhs_d[k] - self.padding[k].0 - 1;
                (before, lhs_d[k] + rhs_d[k] - 1 - out_d[k] - before)
            })
            .collect();
        let d_lhs = Conv {
            lhs_spec: os.clone(),
            rhs_spec: swap(rs),
            out_spec: ls.clone(),
            strides: self.lhs_dilation.clone(),
            padding,
            lhs_dilation: self.strides.clone(),
            rhs_dilation: self.rhs_dilation.clone(),
            feature_groups: groups,
            batch_groups: 1,
        };
        let mut d_lhs = b.prim1(Prim::Conv(d_lhs), &[ct, kernel]);
        if self.batch_groups > 1 {
            d_lhs = axis_out_of(b, ls[1], self.batch_groups, d_lhs);
            d_lhs = axis_into(b, ls[1], ls[0], d_lhs);
        }

        // The kernel's cotangent.
        let (feature_groups, batch_groups) =
            if self.batch_groups > 1 { (self.batch_groups, 1) } else { (1, self.feature_groups) };
        let padding: Vec<(i64, i64)> =
            (0..n).map(|k| (self.padding[k].0, out_d[k] - lhs_d[k] + rhs_d[k] - self.padding[k].0 - 1)).collect();
        let d_rhs = Conv {
            lhs_spec: swap(ls),
            rhs_spec: swap(os),
            out_spec: swap(rs),
            strides: self.rhs_dilation.clone(),
            padding,
            lhs_dilation: self.lhs_dilation.clone(),
            rhs_dilation: self.strides.clone(),
            feature_groups,
            batch_groups,
        };
        let d_rhs = b.prim1(Prim::Conv(d_rhs), &[lhs, ct]);
        debug_assert_eq!(b.ty(d_lhs), &l_ty);
        debug_assert_eq!(b.ty(d_rhs), &r_ty);
        Ok(vec![Some(d_lhs), Some(d_rhs)])
    }
}

/// JAX's `_reshape_axis_into`: moves dimension `src` next to dimension `dst` (numbered
/// without `src`) and merges the two, `src` as the major part.
fn axis_into(b: &mut Builder, src: usize, dst: usize, x: Var) -> Var {
    let shape = b.ty(x).shape.clone();
    let mut perm: Vec<usize> = (0..shape.len()).filter(|&d| d != src).collect();
    perm.insert(dst, src);
    let x = if perm.iter().enumerate().all(|(i, &p)| i == p) {
        x
    } else {
        b.prim1(Prim::Transpose(Transpose { perm }), &[x])
    };
    let mut new: Vec<usize> = shape.iter().enumerate().filter(|&(d, _)| d != src).map(|(_, &n)| n).collect();
    new[dst] *= shape[src];
    b.prim1(Prim::Reshape(Reshape { shape: new }), &[x])
}

/// JAX's `_reshape_axis_out_of`: splits dimension `src` into `size` (major) by the rest.
fn axis_out_of(b: &mut Builder, src: usize, size: usize, x: Var) -> Var {
    let mut shape = b.ty(x).shape.clone();
    let rest = shape[src] / size;
    shape.splice(src..=src, [size, rest]);
    b.prim1(Prim::Reshape(Reshape { shape }), &[x])
}
