//! Window reductions: the maximum over sliding windows (`max_pool`) and the scatter that
//! is its derivative.
//!
//! Both take a window size, a stride and a padding for every dimension of the operand (1,
//! 1 and none for the dimensions not pooled, such as channels and the batch), so batching
//! adds one trivial window dimension.

use super::elementwise::{BinaryOp, CmpOp, lower_binary, lower_compare};
use super::util::{expect_arity, i64_array, indices, list, ravel, strides};
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, batch_size, bdim_at};
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::{LowerCx, fn_type, tensor_type};

/// Where the windows are: per dimension, the window size, the step and the padding
/// before and after. Padding holds `-inf`, so a window's maximum is that of its real
/// elements (as `flax.linen.max_pool` pads).
#[derive(Clone, Debug, PartialEq)]
pub struct Windows {
    /// The window size per dimension.
    pub window: Vec<usize>,
    /// The step between windows per dimension, positive.
    pub strides: Vec<usize>,
    /// Padding before and after per dimension.
    pub padding: Vec<(usize, usize)>,
}

/// `stablehlo.reduce_window` with `max`, on f32: the maximum of each window, NaN
/// propagating. The size along each dimension is `(n + lo + hi - window) / stride + 1`.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowMax {
    /// The windows.
    pub windows: Windows,
}

/// `stablehlo.select_and_scatter` with `>=` and `+` (JAX's `_select_and_scatter_add`):
/// the derivative of [`WindowMax`]. Arguments: the source (one value per window) and the
/// operand that was pooled; the result has the operand's shape, zero except where each
/// window's source value was added: at the window's first maximum in row-major order
/// (ties go to the first, as in JAX). Padding counts as `-inf`, so it is chosen (and the
/// value dropped) only when it comes first in a window whose real elements are `-inf`.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectAndScatterAdd {
    /// The windows of the [`WindowMax`] it differentiates.
    pub windows: Windows,
}

/// `t` at each window's first maximum of `x` in row-major order (ties: the first), or 0
/// for a window of padding only: JAX's `_select_and_gather_add`, the transpose of
/// [`SelectAndScatterAdd`] with respect to its source, and so the derivative of the
/// derivative of [`WindowMax`]. The two choose alike except in windows holding NaN, or
/// whose real elements are all `-inf` (there the scatter may choose padding). Arguments:
/// `t` and `x`, of one shape; the result has one value per window.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectAndGatherAdd {
    /// The windows of the [`WindowMax`] it differentiates.
    pub windows: Windows,
}

impl Windows {
    /// The shape of the window results over an operand of `shape`, or what does not fit.
    fn out_shape(&self, name: &str, shape: &[usize]) -> Result<Vec<usize>, String> {
        let n = shape.len();
        if self.window.len() != n || self.strides.len() != n || self.padding.len() != n {
            return Err(format!("{name}: window, strides and padding must have one entry per dimension of rank {n}"));
        }
        (0..n)
            .map(|d| {
                let padded = shape[d] + self.padding[d].0 + self.padding[d].1;
                if self.strides[d] == 0 || self.window[d] == 0 || self.window[d] > padded {
                    return Err(format!(
                        "{name}: window {} with stride {} does not fit dimension {d} ({padded} padded)",
                        self.window[d], self.strides[d]
                    ));
                }
                Ok((padded - self.window[d]) / self.strides[d] + 1)
            })
            .collect()
    }

    fn attrs(&self) -> String {
        let pads: Vec<String> = self.padding.iter().map(|(lo, hi)| format!("({lo}, {hi})")).collect();
        format!("[window={}, strides={}, padding=[{}]]", list(&self.window), list(&self.strides), pads.join(", "))
    }

    /// The StableHLO attributes.
    fn lower_attrs(&self) -> String {
        let pads: Vec<String> = self.padding.iter().map(|(lo, hi)| format!("[{lo}, {hi}]")).collect();
        format!(
            "padding = dense<[{}]> : tensor<{}x2xi64>, window_dimensions = {}, window_strides = {}",
            pads.join(", "),
            self.padding.len(),
            i64_array(&self.window),
            i64_array(&self.strides)
        )
    }

    /// For every window (row-major over the result), the flat operand position of each
    /// of its elements in row-major window order, `None` for padding.
    fn members(&self, shape: &[usize]) -> Vec<Vec<Option<usize>>> {
        let out = self.out_shape("window", shape).expect("checked by infer");
        let st = strides(shape);
        indices(&out)
            .map(|o| {
                indices(&self.window)
                    .map(|k| {
                        let idx: Option<Vec<usize>> = (0..shape.len())
                            .map(|d| {
                                let p = (o[d] * self.strides[d] + k[d]).checked_sub(self.padding[d].0)?;
                                (p < shape[d]).then_some(p)
                            })
                            .collect();
                        idx.map(|i| ravel(&i, &st))
                    })
                    .collect()
            })
            .collect()
    }

    /// For every window, the position [`SelectAndScatterAdd`] chooses in `v`: XLA's
    /// selection keeps the current choice while `current >= candidate`, padding counting
    /// as `-inf`; `None` when that is padding.
    fn choices(&self, shape: &[usize], v: &[f32]) -> Vec<Option<usize>> {
        let at = |p: Option<usize>| p.map_or(f32::NEG_INFINITY, |p| v[p]);
        self.members(shape)
            .iter()
            .map(|m| m.iter().copied().reduce(|cur, p| if at(cur) >= at(p) { cur } else { p }).flatten())
            .collect()
    }

    /// The same windows with a trivial dimension inserted at `axis` (a batch axis).
    fn with_batch(&self, axis: usize) -> Windows {
        let mut w = self.clone();
        w.window.insert(axis, 1);
        w.strides.insert(axis, 1);
        w.padding.insert(axis, (0, 0));
        w
    }
}

fn f32_data(a: &Array) -> &[f32] {
    match &a.data {
        Data::F32(v) => v,
        Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => panic!("window primitives are defined on f32"),
    }
}

fn expect_f32(name: &str, t: &ArrayTy) -> Result<(), String> {
    if t.dtype == DType::F32 { Ok(()) } else { Err(format!("{name} is defined on f32, got {t}")) }
}

/// Emits a region `^bb0(%a, %b): return op(%a, %b)` on f32 scalars.
fn region(cx: &mut LowerCx, body: impl FnOnce(&mut LowerCx, &str, &str, &ArrayTy) -> String, out: DType) {
    let scalar = ArrayTy::scalar(DType::F32);
    let (a, b) = (cx.fresh(), cx.fresh());
    let t = tensor_type(&scalar);
    cx.label(&format!("^bb0({a}: {t}, {b}: {t}):"));
    let r = body(cx, &a, &b, &scalar);
    cx.ret(&[r], &[ArrayTy::scalar(out)]);
}

impl Rules for WindowMax {
    fn name(&self) -> &'static str {
        "reduce_window_max"
    }

    fn attrs(&self) -> String {
        self.windows.attrs()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("reduce_window_max", args, 1)?;
        expect_f32("reduce_window_max", &args[0])?;
        Ok(vec![ArrayTy::new(DType::F32, self.windows.out_shape("reduce_window_max", &args[0].shape)?)])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        let v = f32_data(x);
        let max = BinaryOp::Max.rule().fns.f32.expect("max is defined on f32");
        let members = self.windows.members(&x.shape);
        let out =
            members.iter().map(|m| m.iter().flatten().fold(f32::NEG_INFINITY, |acc, &p| max(acc, v[p]))).collect();
        let shape = self.windows.out_shape("reduce_window_max", &x.shape).expect("checked by infer");
        vec![Array::new(shape, Data::F32(out))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let init = cx.constant(&Array::f32(vec![], vec![f32::NEG_INFINITY]));
        let r = cx.fresh();
        let x = &args[0];
        cx.open(&format!("{r} = \"stablehlo.reduce_window\"({x}, {init}) <{{{}}}> ({{", self.windows.lower_attrs()));
        region(cx, |cx, a, b, t| lower_binary(cx, BinaryOp::Max, a, b, t), DType::F32);
        let scalar = ArrayTy::scalar(DType::F32);
        cx.close(&format!("}}) : {}", fn_type(&[arg_tys[0].clone(), scalar], outs)));
        vec![r]
    }

    /// A window of 1 along the batch axis, which stays.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let x = args[0];
        let a = x.axis.expect("the operand is batched");
        let p = WindowMax { windows: self.windows.with_batch(a) };
        vec![BVal::batched(b.prim1(Prim::WindowMax(p), &[x.var]), a)]
    }

    /// Each window's cotangent goes to its first maximum (JAX's `reduce_window_max`
    /// derivative, through `_select_and_gather_add` transposed).
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let p = SelectAndScatterAdd { windows: self.windows.clone() };
        Ok(vec![Some(b.prim1(Prim::SelectAndScatterAdd(p), &[cts[0], args[0]]))])
    }
}

impl Rules for SelectAndScatterAdd {
    fn name(&self) -> &'static str {
        "select_and_scatter_add"
    }

    fn attrs(&self) -> String {
        self.windows.attrs()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("select_and_scatter_add", args, 2)?;
        let (source, x) = (&args[0], &args[1]);
        expect_f32("select_and_scatter_add", source)?;
        expect_f32("select_and_scatter_add", x)?;
        let want = self.windows.out_shape("select_and_scatter_add", &x.shape)?;
        if source.shape != want {
            return Err(format!("select_and_scatter_add: source {source} does not have one value per window of {x}"));
        }
        Ok(vec![x.clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (source, x) = (f32_data(args[0]), args[1]);
        let v = f32_data(x);
        let mut out = vec![0.0f32; v.len()];
        for (chosen, &s) in self.windows.choices(&x.shape, v).into_iter().zip(source) {
            if let Some(p) = chosen {
                out[p] += s;
            }
        }
        vec![Array::new(x.shape.clone(), Data::F32(out))]
    }

    /// As JAX lowers it on CPU and GPU (`expand_padding`): XLA's `select_and_scatter`
    /// with padding is unreliable there, so the operand is padded with `-inf` first and
    /// the padding sliced off the result.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let (source, x) = (&args[0], &args[1]);
        let w = &self.windows;
        let scalar = ArrayTy::scalar(DType::F32);
        let padded_ty = ArrayTy::new(
            DType::F32,
            arg_tys[1].shape.iter().zip(&w.padding).map(|(n, (lo, hi))| n + lo + hi).collect(),
        );
        let lows: Vec<usize> = w.padding.iter().map(|p| p.0).collect();
        let highs: Vec<usize> = w.padding.iter().map(|p| p.1).collect();
        let neg_inf = cx.constant(&Array::f32(vec![], vec![f32::NEG_INFINITY]));
        let attrs = format!(
            "edge_padding_high = {}, edge_padding_low = {}, interior_padding = {}",
            i64_array(&highs),
            i64_array(&lows),
            i64_array(&vec![0; lows.len()])
        );
        let padded =
            cx.op("stablehlo.pad", &[x.clone(), neg_inf], &attrs, &[arg_tys[1].clone(), scalar.clone()], &padded_ty);
        let unpadded = Windows { padding: vec![(0, 0); lows.len()], ..w.clone() };
        let zero = cx.constant(&Array::f32(vec![], vec![0.0]));
        let r = cx.fresh();
        cx.open(&format!(
            "{r} = \"stablehlo.select_and_scatter\"({padded}, {source}, {zero}) <{{{}}}> ({{",
            unpadded.lower_attrs()
        ));
        region(cx, |cx, a, b, t| lower_compare(cx, CmpOp::Ge, a, b, t), DType::Bool);
        cx.reopen("}, {");
        region(cx, |cx, a, b, t| lower_binary(cx, BinaryOp::Add, a, b, t), DType::F32);
        cx.close(&format!(
            "}}) : {}",
            fn_type(&[padded_ty.clone(), arg_tys[0].clone(), scalar], std::slice::from_ref(&padded_ty))
        ));
        let limits: Vec<usize> = lows.iter().zip(&arg_tys[1].shape).map(|(lo, n)| lo + n).collect();
        let attrs = format!(
            "limit_indices = {}, start_indices = {}, strides = {}",
            i64_array(&limits),
            i64_array(&lows),
            i64_array(&vec![1; lows.len()])
        );
        vec![cx.op("stablehlo.slice", &[r], &attrs, &[padded_ty], &outs[0])]
    }

    /// Source and operand get their batch axes at one place (an unbatched one is
    /// broadcast), with a window of 1 there.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let a = args.iter().find_map(|x| x.axis).expect("a batched operand");
        let vars: Vec<Var> = args.iter().map(|&x| bdim_at(b, x, a, size)).collect();
        let p = SelectAndScatterAdd { windows: self.windows.with_batch(a) };
        vec![BVal::batched(b.prim1(Prim::SelectAndScatterAdd(p), &vars), a)]
    }

    /// Linear in the source: its transpose gathers the cotangent at each window's choice
    /// ([`SelectAndGatherAdd`]). The choice itself is piecewise constant in the operand,
    /// which gets no derivative.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let p = SelectAndGatherAdd { windows: self.windows.clone() };
        Ok(vec![Some(b.prim1(Prim::SelectAndGatherAdd(p), &[cts[0], args[1]])), None])
    }
}

impl Rules for SelectAndGatherAdd {
    fn name(&self) -> &'static str {
        "select_and_gather_add"
    }

    fn attrs(&self) -> String {
        self.windows.attrs()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("select_and_gather_add", args, 2)?;
        let (t, x) = (&args[0], &args[1]);
        expect_f32("select_and_gather_add", t)?;
        expect_f32("select_and_gather_add", x)?;
        if t.shape != x.shape {
            return Err(format!("select_and_gather_add: {t} and {x} differ in shape"));
        }
        Ok(vec![ArrayTy::new(DType::F32, self.windows.out_shape("select_and_gather_add", &x.shape)?)])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (t, x) = (f32_data(args[0]), args[1]);
        let v = f32_data(x);
        // The first of the largest real elements (a later one wins only when larger).
        let first_max =
            |m: &Vec<Option<usize>>| m.iter().flatten().copied().reduce(|c, p| if v[p] > v[c] { p } else { c });
        let out = self.windows.members(&x.shape).iter().map(|m| first_max(m).map_or(0.0, |p| t[p])).collect();
        let shape = self.windows.out_shape("select_and_gather_add", &x.shape).expect("checked by infer");
        vec![Array::new(shape, Data::F32(out))]
    }

    /// A `stablehlo.reduce_window` over triples `(x, -position, t)` keeping the larger
    /// `(x, -position)`: the first maximum, whatever order XLA combines a window's
    /// elements in (a `>=` on `x` alone would break ties in that order, which XLA leaves
    /// open, and did differently from its `select_and_scatter`). Padding is
    /// `(-inf, i32::MIN, 0)`, so it never wins against a real element.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let (t, x) = (&args[0], &args[1]);
        let shape = arg_tys[1].shape.clone();
        let n = shape.iter().product::<usize>();
        let flat = ArrayTy::new(DType::I32, vec![n]);
        let idx_ty = ArrayTy::new(DType::I32, shape);
        let iota = cx.op("stablehlo.iota", &[], "iota_dimension = 0 : i64", &[], &flat);
        let idx = cx.op("stablehlo.reshape", &[iota], "", &[flat], &idx_ty);
        let key = cx.op("stablehlo.negate", &[idx], "", std::slice::from_ref(&idx_ty), &idx_ty);
        let inits = [
            cx.constant(&Array::f32(vec![], vec![f32::NEG_INFINITY])),
            cx.constant(&Array::i32(vec![], vec![i32::MIN])),
            cx.constant(&Array::f32(vec![], vec![0.0])),
        ];
        let r = cx.fresh();
        cx.open(&format!(
            "{r}:3 = \"stablehlo.reduce_window\"({x}, {key}, {t}, {}) <{{{}}}> ({{",
            inits.join(", "),
            self.windows.lower_attrs()
        ));
        let (f, i) = (ArrayTy::scalar(DType::F32), ArrayTy::scalar(DType::I32));
        let tys = [f.clone(), i.clone(), f.clone()];
        let a: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
        let b: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
        let params: Vec<String> =
            a.iter().chain(&b).zip(tys.iter().chain(&tys)).map(|(v, t)| format!("{v}: {}", tensor_type(t))).collect();
        cx.label(&format!("^bb0({}):", params.join(", ")));
        let pred = ArrayTy::scalar(DType::Bool);
        let gt = lower_compare(cx, CmpOp::Gt, &a[0], &b[0], &f);
        let eq = lower_compare(cx, CmpOp::Eq, &a[0], &b[0], &f);
        let first = lower_compare(cx, CmpOp::Ge, &a[1], &b[1], &i);
        let both = [pred.clone(), pred.clone()];
        let tie = cx.op("stablehlo.and", &[eq, first], "", &both, &pred);
        let keep = cx.op("stablehlo.or", &[gt, tie], "", &both, &pred);
        let picked: Vec<String> = (0..3)
            .map(|k| {
                let sel = [pred.clone(), tys[k].clone(), tys[k].clone()];
                cx.op("stablehlo.select", &[keep.clone(), a[k].clone(), b[k].clone()], "", &sel, &tys[k])
            })
            .collect();
        cx.ret(&picked, &tys);
        let out_shape = &outs[0].shape;
        let ins = [arg_tys[1].clone(), idx_ty, arg_tys[0].clone(), f.clone(), i, f];
        let results = [outs[0].clone(), ArrayTy::new(DType::I32, out_shape.clone()), outs[0].clone()];
        cx.close(&format!("}}) : {}", fn_type(&ins, &results)));
        vec![format!("{r}#2")]
    }

    /// Both operands get their batch axes at one place, with a window of 1 there.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let a = args.iter().find_map(|x| x.axis).expect("a batched operand");
        let vars: Vec<Var> = args.iter().map(|&x| bdim_at(b, x, a, size)).collect();
        let p = SelectAndGatherAdd { windows: self.windows.with_batch(a) };
        vec![BVal::batched(b.prim1(Prim::SelectAndGatherAdd(p), &vars), a)]
    }

    /// Linear in `t`: its transpose is the scatter. The operand gets no derivative.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let p = SelectAndScatterAdd { windows: self.windows.clone() };
        Ok(vec![Some(b.prim1(Prim::SelectAndScatterAdd(p), &[cts[0], args[1]])), None])
    }
}
