//! Literal primitives, which take no arguments: constants and iota.

use super::util::{expect_arity, indices};
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

/// A constant array. Lowered as `stablehlo.constant` with every float written so that it
/// parses back to the same bits (NaN and infinities included).
#[derive(Clone, Debug, PartialEq)]
pub struct Constant {
    /// The value.
    pub value: Array,
}

/// An array of type `ty` whose elements are their own index along `dim`.
#[derive(Clone, Debug, PartialEq)]
pub struct Iota {
    /// The result type (f32, i32 or u32).
    pub ty: ArrayTy,
    /// The dimension that counts.
    pub dim: usize,
}

/// Arrays longer than this print elided in the IR, to keep dumps readable.
const PRINT_LIMIT: usize = 16;

/// One element as the IR printer shows it: floats in Rust's shortest round-trip form
/// (`1.0`, `-0.0`, `NaN`, `inf`).
fn element(data: &Data, i: usize) -> String {
    match data {
        Data::F32(v) => format!("{:?}", v[i]),
        Data::I32(v) => v[i].to_string(),
        Data::U32(v) => v[i].to_string(),
        Data::U8(v) => v[i].to_string(),
        Data::Bool(v) => v[i].to_string(),
    }
}

/// The printer's text for an array value: nested lists following the shape, or the
/// first elements and a count when it is long.
fn value_text(a: &Array) -> String {
    let n = a.data.len();
    if n > PRINT_LIMIT {
        let head: Vec<String> = (0..PRINT_LIMIT / 2).map(|i| element(&a.data, i)).collect();
        return format!("[{}, … {n} elements]", head.join(", "));
    }
    fn nest(a: &Array, offset: usize, shape: &[usize]) -> String {
        match shape.split_first() {
            None => element(&a.data, offset),
            Some((&len, rest)) => {
                let chunk: usize = rest.iter().product();
                let items: Vec<String> = (0..len).map(|i| nest(a, offset + i * chunk, rest)).collect();
                format!("[{}]", items.join(", "))
            }
        }
    }
    nest(a, 0, &a.shape)
}

impl Rules for Constant {
    fn name(&self) -> &'static str {
        "constant"
    }

    fn attrs(&self) -> String {
        format!("[{}]", value_text(&self.value))
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("constant", args, 0)?;
        if self.value.shape.iter().product::<usize>() != self.value.data.len() {
            return Err(format!(
                "constant: {} elements do not fill shape {:?}",
                self.value.data.len(),
                self.value.shape
            ));
        }
        Ok(vec![self.value.ty()])
    }

    fn eval(&self, _args: &[&Array]) -> Vec<Array> {
        vec![self.value.clone()]
    }

    fn lower(&self, cx: &mut LowerCx, _args: &[String], _arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.constant(&self.value)]
    }

    /// A constant takes no arguments, so it is the same for every example: `vmap` copies
    /// it unchanged, and so does this rule.
    fn batch(&self, b: &mut Builder, _args: &[BVal]) -> Vec<BVal> {
        vec![BVal::unbatched(b.prim1(Prim::Constant(self.clone()), &[]))]
    }

    /// No arguments, so nothing to differentiate: a constant depends on no parameter.
    fn vjp(
        &self,
        _b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        _cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(vec![])
    }
}

impl Rules for Iota {
    fn name(&self) -> &'static str {
        "iota"
    }

    fn attrs(&self) -> String {
        format!("[dim={}]", self.dim)
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("iota", args, 0)?;
        if self.dim >= self.ty.rank() {
            return Err(format!("iota: dim {} is out of range for {}", self.dim, self.ty));
        }
        if self.ty.dtype == DType::Bool {
            return Err("iota is not defined on bool".to_string());
        }
        Ok(vec![self.ty.clone()])
    }

    fn eval(&self, _args: &[&Array]) -> Vec<Array> {
        let k: Vec<usize> = indices(&self.ty.shape).map(|idx| idx[self.dim]).collect();
        let data = match self.ty.dtype {
            // Indices beyond 2^24 round in f32, exactly as the device's convert does.
            DType::F32 => Data::F32(k.iter().map(|&i| i as f32).collect()),
            DType::I32 => Data::I32(k.iter().map(|&i| i as i32).collect()),
            DType::U32 => Data::U32(k.iter().map(|&i| i as u32).collect()),
            // Wraps past 255, as the device's convert of the index does.
            DType::U8 => Data::U8(k.iter().map(|&i| i as u8).collect()),
            DType::Bool => panic!("iota is not defined on bool"),
        };
        vec![Array::new(self.ty.shape.clone(), data)]
    }

    fn lower(&self, cx: &mut LowerCx, _args: &[String], _arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.op("stablehlo.iota", &[], &format!("iota_dimension = {} : i64", self.dim), &[], &outs[0])]
    }

    /// Never batched, as a constant.
    fn batch(&self, b: &mut Builder, _args: &[BVal]) -> Vec<BVal> {
        vec![BVal::unbatched(b.prim1(Prim::Iota(self.clone()), &[]))]
    }

    /// No arguments, as a constant: an iota depends on no parameter, so `grad` never
    /// asks; an f32 iota in a differentiated computation is a constant.
    fn vjp(
        &self,
        _b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        _cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Ok(vec![])
    }
}
