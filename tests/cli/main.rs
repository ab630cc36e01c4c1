//! `podc` as a user runs it: exit statuses and output, `--set`, `--lib` and `PODC_PATH`,
//! and the learning table's check that its runs are current.
//! One test binary; each module was once a file of its own under `tests/` and keeps its
//! tests' names (`cargo test --test cli overrides::`).

mod cli;
mod learning_table;
mod module_path;
mod overrides;
