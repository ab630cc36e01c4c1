//! What batching rules work with (JAX's `batching.py` helpers): a value and its batch
//! axis, and the rules most primitives share. The machinery is `transform::vmap`.

use super::{Broadcast, Prim, Transpose};
use crate::array::ArrayTy;
use crate::ir::Var;
use crate::ir::build::Builder;

/// A value while batching: a var of the batched function and where its batch axis is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BVal {
    /// The value in the batched function.
    pub var: Var,
    /// The dimension of `var` that indexes the examples, or `None` when every example
    /// sees the same value (then `var` has the original, unbatched type).
    pub axis: Option<usize>,
}

impl BVal {
    /// A value shared by every example.
    pub fn unbatched(var: Var) -> BVal {
        BVal { var, axis: None }
    }

    /// A value whose dimension `axis` indexes the examples.
    pub fn batched(var: Var, axis: usize) -> BVal {
        BVal { var, axis: Some(axis) }
    }

    pub fn is_batched(&self) -> bool {
        self.axis.is_some()
    }
}

/// The type of a batched value: `ty` with a dimension of `size` inserted at `axis`.
pub fn batched_ty(ty: &ArrayTy, axis: usize, size: usize) -> ArrayTy {
    assert!(axis <= ty.rank(), "batch axis {axis} is out of range for {ty}");
    let mut shape = ty.shape.clone();
    shape.insert(axis, size);
    ArrayTy::new(ty.dtype, shape)
}

/// The batch size: the length of the batch axis of the first batched argument. Rules
/// are only called with at least one.
pub fn batch_size(b: &Builder, args: &[BVal]) -> usize {
    let x = args.iter().find(|a| a.is_batched()).expect("a batching rule gets a batched argument");
    b.ty(x.var).shape[x.axis.expect("batched")]
}

/// `x` with its batch axis at `to`: moved there by a transpose (none when it is already
/// there), or, when `x` is unbatched, broadcast to `size` examples.
pub fn bdim_at(b: &mut Builder, x: BVal, to: usize, size: usize) -> Var {
    let ty = b.ty(x.var).clone();
    match x.axis {
        Some(from) if from == to => x.var,
        Some(from) => {
            let mut perm: Vec<usize> = (0..ty.rank()).filter(|&d| d != from).collect();
            perm.insert(to, from);
            b.prim1(Prim::Transpose(Transpose { perm }), &[x.var])
        }
        None => {
            let out = batched_ty(&ty, to, size);
            let dims = (0..ty.rank()).map(|d| if d < to { d } else { d + 1 }).collect();
            b.prim1(Prim::Broadcast(Broadcast { shape: out.shape, dims }), &[x.var])
        }
    }
}

/// The batching rule of a primitive that maps each element of its one operand
/// independently, keeping its shape (JAX's `defvectorized`): applied to the batched
/// operand as it is, with the batch axis left in place.
pub fn vectorized(b: &mut Builder, prim: Prim, args: &[BVal]) -> Vec<BVal> {
    let [x] = args else { panic!("{}: a vectorized rule takes one operand", prim.rules().name()) };
    b.prim(prim, &[x.var]).into_iter().map(|v| BVal { var: v, axis: x.axis }).collect()
}

/// The batching rule of an elementwise primitive over operands of one shape (JAX's
/// `defbroadcasting`): every operand is brought to the batch axis of the first batched
/// one, unbatched operands broadcast, and the results have their batch axis there too.
pub fn broadcasting(b: &mut Builder, prim: Prim, args: &[BVal]) -> Vec<BVal> {
    let size = batch_size(b, args);
    let axis = args.iter().find_map(|a| a.axis).expect("a batched operand");
    let vars: Vec<Var> = args.iter().map(|&a| bdim_at(b, a, axis, size)).collect();
    b.prim(prim, &vars).into_iter().map(|v| BVal::batched(v, axis)).collect()
}
