//! The compiler, program by program: diagnostics and IR/StableHLO snapshots, every
//! primitive's rules (evaluation, batching, derivatives) and the standard library against
//! JAX, interpreter against PJRT, and the generated corpus. One test binary (one link of
//! the crate); each module was once a file of its own under `tests/`, and keeps its tests'
//! names (`cargo test --test compiler grad::`). `docs/architecture.md` has the tiers.

#[path = "../common/mod.rs"]
mod common;
#[path = "../tier/mod.rs"]
mod tier;

mod collective;
mod compiler_output;
mod conv;
mod examples;
mod generated;
mod grad;
mod prims;
mod random;
mod robustness;
mod stdlib;
mod u8;
mod ui;
mod vmap;
