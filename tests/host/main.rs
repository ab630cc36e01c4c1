//! Host environments and the Sebulba driver, with Python env workers (slow tier: the cache
//! venv, made with pip on first use). One test binary; each module was once a file of its
//! own under `tests/` and keeps its tests' names (`cargo test --test host sebulba::`).

#[path = "../tier/mod.rs"]
mod tier;

mod gpu_check;
mod host;
mod host_play;
mod sebulba;
