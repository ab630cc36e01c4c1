//! The reference environments, step by step against their references' fixtures, and envs
//! as values (wrappers). One test binary; each module was once a file of its own under
//! `tests/` and keeps its tests' names (`cargo test --test envs env_catch::`).

#[path = "../common/mod.rs"]
mod common;

mod env_breakout;
mod env_cartpole;
mod env_catch;
mod env_fourrooms;
mod env_memory_chain;
mod env_pendulum;
mod env_time_limit;
mod env_wrappers;
mod gymnax;
