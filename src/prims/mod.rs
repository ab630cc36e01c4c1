//! Primitives: the operations of the IR.
//!
//! Every primitive is defined in exactly one place, in the file of its family, and that
//! place carries all of its rules through the [`Rules`] trait: the type/shape rule, the
//! reference evaluation and the StableHLO lowering. The trait has no default bodies, so a
//! new primitive does not compile until every rule exists. (Batching and differentiation
//! rules join the trait when those transforms arrive.)

pub mod dot;
pub mod elementwise;
pub mod indexing;
pub mod layout;
pub mod literal;
pub mod reduce;
pub mod util;

#[cfg(test)]
mod tests;

use crate::array::{Array, ArrayTy};
use crate::lower::stablehlo::LowerCx;

pub use dot::Dot;
pub use elementwise::{Binary, BinaryOp, Compare, CmpOp, Convert, Select, Unary, UnaryOp};
pub use indexing::{DynamicSlice, DynamicUpdateSlice, Slice};
pub use layout::{Broadcast, Concat, Reshape, Transpose};
pub use literal::{Constant, Iota};
pub use reduce::{Argmax, Reduce, ReduceOp};

/// The rules every primitive provides.
pub trait Rules {
    /// The primitive's name in the IR printer (`add`, `dot_general`, …).
    fn name(&self) -> &'static str;

    /// Attributes for the IR printer, e.g. `[axes=[0]]`; empty when there are none.
    fn attrs(&self) -> String;

    /// Result types for the given argument types, or a message naming the mismatch.
    /// `ir::verify` treats an error as an internal bug: the checker rejects bad programs
    /// before the IR is built.
    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String>;

    /// Reference evaluation on the host. Arguments are known to satisfy `infer`.
    fn eval(&self, args: &[&Array]) -> Vec<Array>;

    /// Emits StableHLO for one application. `args` are the SSA names of the operands;
    /// returns the SSA names of the results, one per type in `outs`.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String>;
}

/// Every primitive of the IR. Each variant's rules live in its family's module.
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    // elementwise
    Unary(Unary),
    Binary(Binary),
    Compare(Compare),
    Select(Select),
    Convert(Convert),
    // literals
    Constant(Constant),
    Iota(Iota),
    // layout
    Broadcast(Broadcast),
    Reshape(Reshape),
    Transpose(Transpose),
    Concat(Concat),
    // indexing
    Slice(Slice),
    DynamicSlice(DynamicSlice),
    DynamicUpdateSlice(DynamicUpdateSlice),
    // reductions
    Reduce(Reduce),
    Argmax(Argmax),
    // linear algebra
    Dot(Dot),
}

impl Prim {
    /// The primitive's rules.
    pub fn rules(&self) -> &dyn Rules {
        match self {
            Prim::Unary(p) => p,
            Prim::Binary(p) => p,
            Prim::Compare(p) => p,
            Prim::Select(p) => p,
            Prim::Convert(p) => p,
            Prim::Constant(p) => p,
            Prim::Iota(p) => p,
            Prim::Broadcast(p) => p,
            Prim::Reshape(p) => p,
            Prim::Transpose(p) => p,
            Prim::Concat(p) => p,
            Prim::Slice(p) => p,
            Prim::DynamicSlice(p) => p,
            Prim::DynamicUpdateSlice(p) => p,
            Prim::Reduce(p) => p,
            Prim::Argmax(p) => p,
            Prim::Dot(p) => p,
        }
    }
}
