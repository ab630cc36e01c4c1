//! podracer: a compiler and runtime for `.pod`, a typed array language for reinforcement
//! learning, after DeepMind's Podracer architectures.
//!
//! The pipeline, one module per phase (see `docs/architecture.md`):
//!
//! ```text
//! source ─ syntax (logos + lalrpop) ─ resolve (modules, `use`) ─ elab (type check;
//!   monomorphise and inline into the IR) ─ ir (typed SSA; verify, eval) ─ lower (StableHLO
//!   text) ─ runtime (PJRT plugin: compile, transfer, execute)
//! ```
//!
//! `programs` puts the drivers' programs (Anakin, Sebulba, eval, bench) together from the
//! built functions of an agent and an env.
//!
//! Every primitive has one home under `prims/` holding all of its rules. The core is pure;
//! IO lives in `resolve` (reading modules), `runtime`, `train` (a run's checkpoints,
//! metrics and plots), `host` (env workers) and `cli`, and `unsafe` only in `runtime::pjrt::ffi`
//! `host::shm` (the memory shared with env workers) and `distributed::gloo` (XLA's FFI
//! calling into gloo).

#![deny(unsafe_code)]

pub mod animation;
pub mod array;
pub mod binding;
pub mod cli;
pub mod diag;
pub mod distributed;
pub mod driver;
pub mod elab;
pub mod host;
pub mod io;
pub mod ir;
pub mod lower;
pub mod overrides;
pub mod prims;
pub mod programs;
pub mod resolve;
pub mod runtime;
pub mod space;
pub mod stats;
pub mod syntax;
pub mod train;
pub mod transform;
pub mod types;
