//! Transformations of the IR: functions from [`crate::ir::Func`] to `Func`.
//!
//! Each transform keeps its machinery (how it walks graphs, loops included) in its own
//! module, while the per-primitive part of it is a method of [`crate::prims::Rules`],
//! next to the primitive's other rules (see `docs/adding-a-primitive.md`). The result of
//! every transform passes [`crate::ir::verify::verify`]; debug builds check it.
//!
//! - [`vmap`]: automatic batching, as `jax.vmap`;
//! - [`grad`]: reverse-mode differentiation, as `jax.value_and_grad`.

pub mod grad;
pub mod vmap;
