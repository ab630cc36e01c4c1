//! The host side of `podc train`: what a training run writes besides its progress on the
//! device. Checkpoints (safetensors + a JSON commit record, never torn), the metrics log
//! (JSONL, cut back to the last checkpoint on resume), the learning-curve plot and the
//! progress bar. `docs/training.md` describes the files.

pub mod anakin;
mod atomic;
pub mod checkpoint;
pub mod eval;
pub mod fingerprint;
pub mod interrupt;
pub mod metrics;
pub mod plot;
pub mod progress;
pub mod run;
pub mod runs;
pub mod sebulba;
pub mod state;
pub mod tensorboard;
