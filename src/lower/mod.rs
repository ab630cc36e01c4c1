//! Lowering: the typed array IR to text for the device.
//!
//! There is one back-end, [`stablehlo`], which prints a complete MLIR module that a PJRT
//! plugin compiles. The pass itself only walks graphs and lowers [`crate::ir::Op::Loop`];
//! every primitive lowers itself through its [`crate::prims::Rules::lower`] rule, using
//! the text builder [`crate::prims::emit::LowerCx`].

pub mod stablehlo;

#[cfg(test)]
pub(crate) mod tests;

pub use stablehlo::lower_module;
