//! Primitives: the operations of the IR.
//!
//! Every primitive is defined in exactly one place, in the file of its family, and that
//! place carries all of its rules through the [`Rules`] trait: the type/shape rule, the
//! reference evaluation, the StableHLO lowering, the batching rule (for `vmap`) and the
//! derivative (for `grad`). The trait has no default bodies, so a new primitive does not
//! compile until every rule exists, and "not differentiable" is a written decision.

pub mod ad;
pub mod batching;
pub mod collective;
pub mod conv;
pub mod derivative;
pub mod dot;
pub mod elementwise;
pub mod emit;
pub mod gather;
pub mod indexing;
pub mod layout;
pub mod literal;
pub mod reduce;
pub mod sort;
pub mod threefry;
pub mod util;
pub mod window;

#[cfg(test)]
mod tests;

use crate::array::{Array, ArrayTy};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::BVal;
use crate::prims::derivative::NotDifferentiable;
use crate::prims::emit::LowerCx;

pub use ad::StopGradient;
pub use collective::{AllReduce, AllReduceOp, CROSS_PROCESS_SUM};
pub use conv::Conv;
pub use dot::Dot;
pub use elementwise::{Binary, BinaryOp, CmpOp, Compare, Convert, Select, Unary, UnaryOp};
pub use gather::{Gather, Scatter};
pub use indexing::{DynamicSlice, DynamicUpdateSlice, Slice};
pub use layout::{Broadcast, Concat, Reshape, Reverse, Transpose};
pub use literal::{Constant, Iota};
pub use reduce::{Argmax, Reduce, ReduceOp};
pub use sort::Argsort;
pub use threefry::Threefry;
pub use window::{SelectAndGatherAdd, SelectAndScatterAdd, WindowMax, Windows};

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

    /// The batching rule (see `transform::vmap`): emits into `b` this primitive applied to
    /// a batch of examples and returns its results. `args[k].axis` is the batch axis of
    /// argument `k`, or `None` when every example shares it; at least one argument is
    /// batched (the machinery copies an equation with none unchanged). Each result's batch
    /// axis may be wherever is cheapest, or `None` if it does not vary.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal>;

    /// The derivative, as a vector-Jacobian product (see `transform::grad`): given the
    /// arguments `args` and results `outs` of one application and a cotangent for each
    /// result (`cts`, f32, of the results' types), emits into `b` the cotangent of each
    /// argument: `Some` of the argument's type, or `None` where no derivative flows
    /// (integer and bool arguments such as indices and predicates, or a derivative that
    /// is zero wherever it exists). `Err(NotDifferentiable)` says that the result has no
    /// derivative at all (argmax, comparisons, conversions between integers and floats).
    /// Only called on f32 results, so a rule may assume its results are f32.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable>;
}

/// Every primitive of the IR. Each variant's rules live in its family's module.
#[derive(Clone, Debug, PartialEq)]
pub enum Prim {
    // elementwise
    /// `op(x)` elementwise: neg, not, exp, log, log1p, tanh, sqrt, abs, floor, sin, cos.
    Unary(Unary),
    /// `op(x, y)` elementwise on operands of one type: arithmetic, max/min, bitwise, shifts.
    Binary(Binary),
    /// `x op y` elementwise, giving bool.
    Compare(Compare),
    /// `select(pred, on_true, on_false)` elementwise.
    Select(Select),
    /// Elementwise conversion to another dtype.
    Convert(Convert),
    // literals
    /// A constant array.
    Constant(Constant),
    /// Indices along one dimension.
    Iota(Iota),
    // layout
    /// `broadcast_in_dim`: maps operand dimensions into a larger shape.
    Broadcast(Broadcast),
    /// The same row-major elements under another shape.
    Reshape(Reshape),
    /// Permutes dimensions.
    Transpose(Transpose),
    /// Joins arrays along one axis.
    Concat(Concat),
    /// Reverses the order of elements along some dimensions.
    Reverse(Reverse),
    // indexing
    /// A static window with stride 1.
    Slice(Slice),
    /// A window at run-time (clamped) start indices.
    DynamicSlice(DynamicSlice),
    /// Overwrites a window at run-time (clamped) start indices.
    DynamicUpdateSlice(DynamicUpdateSlice),
    /// Windows at start indices held in an array (clamped): a batch of dynamic slices.
    Gather(Gather),
    /// Overwrites windows at start indices held in an array (clamped): a batch of
    /// dynamic update slices.
    Scatter(Scatter),
    // reductions
    /// Sum, max or min over axes.
    Reduce(Reduce),
    /// Index of the first maximum along an axis.
    Argmax(Argmax),
    // sorting
    /// Indices that sort along an axis (stable).
    Argsort(Argsort),
    // random bits
    /// The threefry2x32 hash of counter pairs under keys.
    Threefry(Threefry),
    // linear algebra
    /// `dot_general`: contraction with batch dimensions.
    Dot(Dot),
    /// `conv_general_dilated`: convolution with strides, padding, dilations and groups.
    Conv(Conv),
    // windows
    /// The maximum over sliding windows (`max_pool`).
    WindowMax(WindowMax),
    /// Adds one value per window at the window's first maximum: `WindowMax`'s derivative.
    SelectAndScatterAdd(SelectAndScatterAdd),
    /// Reads one value per window at the window's first maximum: the scatter's transpose.
    SelectAndGatherAdd(SelectAndGatherAdd),
    // differentiation
    /// The identity, through which no derivative flows.
    StopGradient(StopGradient),
    // collectives
    /// Sum or mean across the replicas of a data-parallel program.
    AllReduce(AllReduce),
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
            Prim::Reverse(p) => p,
            Prim::Slice(p) => p,
            Prim::DynamicSlice(p) => p,
            Prim::DynamicUpdateSlice(p) => p,
            Prim::Gather(p) => p,
            Prim::Scatter(p) => p,
            Prim::Reduce(p) => p,
            Prim::Argmax(p) => p,
            Prim::Argsort(p) => p,
            Prim::Threefry(p) => p,
            Prim::Dot(p) => p,
            Prim::Conv(p) => p,
            Prim::WindowMax(p) => p,
            Prim::SelectAndScatterAdd(p) => p,
            Prim::SelectAndGatherAdd(p) => p,
            Prim::StopGradient(p) => p,
            Prim::AllReduce(p) => p,
        }
    }
}
