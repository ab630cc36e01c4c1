//! What derivative rules work with (JAX's `ad.py` helpers): the answer of a result
//! without a derivative, and small builders of the operations rules emit. The machinery
//! is `transform::grad`.

use super::{Binary, BinaryOp, Broadcast, CmpOp, Compare, Constant, Prim, Select, Unary, UnaryOp};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;

/// A primitive's answer when asked for the derivative of a result that has none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotDifferentiable;

/// `op(x)`.
pub fn unary(b: &mut Builder, op: UnaryOp, x: Var) -> Var {
    b.prim1(Prim::Unary(Unary { op }), &[x])
}

/// `op(x, y)`, operands of one type.
pub fn binary(b: &mut Builder, op: BinaryOp, x: Var, y: Var) -> Var {
    b.prim1(Prim::Binary(Binary { op }), &[x, y])
}

/// `x * y`.
pub fn mul(b: &mut Builder, x: Var, y: Var) -> Var {
    binary(b, BinaryOp::Mul, x, y)
}

/// `x op y`, giving bool.
pub fn compare(b: &mut Builder, op: CmpOp, x: Var, y: Var) -> Var {
    b.prim1(Prim::Compare(Compare { op }), &[x, y])
}

/// `select(pred, on_true, on_false)`.
pub fn select(b: &mut Builder, pred: Var, on_true: Var, on_false: Var) -> Var {
    b.prim1(Prim::Select(Select), &[pred, on_true, on_false])
}

/// An f32 array of `like`'s shape, every element `value`.
pub fn full_like(b: &mut Builder, value: f32, like: Var) -> Var {
    let shape = b.ty(like).shape.clone();
    splat(b, Array::f32(vec![], vec![value]), &shape)
}

/// A scalar constant broadcast to `shape`.
pub fn splat(b: &mut Builder, value: Array, shape: &[usize]) -> Var {
    let c = b.prim1(Prim::Constant(Constant { value }), &[]);
    if shape.is_empty() {
        return c;
    }
    b.prim1(Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: vec![] }), &[c])
}

/// Zeros of any type (false for bool).
pub fn zeros(b: &mut Builder, ty: &ArrayTy) -> Var {
    let zero = match ty.dtype {
        DType::F32 => Data::F32(vec![0.0]),
        DType::I32 => Data::I32(vec![0]),
        DType::U32 => Data::U32(vec![0]),
        DType::U8 => Data::U8(vec![0]),
        DType::Bool => Data::Bool(vec![false]),
    };
    splat(b, Array::new(vec![], zero), &ty.shape)
}

/// An i32 scalar constant (a start index).
pub fn index(b: &mut Builder, i: i64) -> Var {
    let i = i32::try_from(i).expect("indices fit in i32 (the verifier bounds loops)");
    b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![i]) }), &[])
}

/// `ct * dydx`: the rule of a unary elementwise function whose derivative is `dydx`.
pub fn scaled(b: &mut Builder, ct: Var, dydx: Var) -> Result<Vec<Option<Var>>, NotDifferentiable> {
    Ok(vec![Some(mul(b, ct, dydx))])
}
