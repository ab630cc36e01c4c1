//! `podc` as a user runs it: exit statuses and output, `--set`, `--lib` and `PODC_PATH`.
//! One test binary; each module was once a file of its own under `tests/` and keeps its
//! tests' names (`cargo test --test cli overrides::`).

mod cli;
mod module_path;
mod overrides;
