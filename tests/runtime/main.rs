//! The runtime and training: the PJRT binding, the compilation cache, the Anakin programs,
//! `podc train` with its checkpoints, `podc eval` and `podc play`, and the learning runs
//! (slow tier). One test binary; each module was once a file of its own under `tests/`
//! and keeps its tests' names (`cargo test --test runtime train::`).

#[path = "../common/mod.rs"]
mod common;
#[path = "../tier/mod.rs"]
mod tier;

mod anakin;
mod compile_cache;
mod eval;
mod run_length;
mod runtime;
mod train;
mod train_checkpoint;
