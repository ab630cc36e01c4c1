//! The compiler's entry points, as the CLI and the tests use them.

use crate::array::Array;
use crate::diag::Diag;
use crate::ir::Func;
use crate::overrides::Override;
use crate::resolve::{self, Program};
use crate::types::Ty;

pub use crate::elab::env::{build_env, pick_env};
use std::path::{Path, PathBuf};

/// An entry point, compiled to IR.
pub struct Entry {
    pub func: Func,
    /// Surface types of the parameters (for reading `--args`) and of the result.
    pub params: Vec<Ty>,
    pub ret: Ty,
}

/// How a root file is loaded: where its modules are found, and which of its consts this
/// run overrides.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Directories to look for `use`d modules in after the root file's (`--lib`, `PODC_PATH`).
    pub lib: Vec<PathBuf>,
    /// `--set NAME=VALUE`: values for consts of the root file.
    pub overrides: Vec<Override>,
}

/// Loads and checks a program from a file. `Err` only when the root file cannot be read.
pub fn check_file(path: &Path) -> Result<(Program, Vec<Diag>), String> {
    check_file_with(path, &LoadOptions::default())
}

/// [`check_file`] with library directories and overrides. `Err` also when an override
/// names no const of the root file.
pub fn check_file_with(path: &Path, opts: &LoadOptions) -> Result<(Program, Vec<Diag>), String> {
    let (prog, diags) = resolve::load_file(path, &opts.lib)?;
    if !prog.syntax_errors {
        crate::overrides::check_names(&prog, &opts.overrides)?;
    }
    Ok(check(prog, &opts.overrides, diags))
}

/// Loads and checks a program from source text (user modules are looked up in `dir`).
pub fn check_source(name: &str, src: &str, dir: Option<&Path>) -> (Program, Vec<Diag>) {
    let (prog, diags) = resolve::load_source(name, src, dir.map(Path::to_path_buf).into_iter().collect());
    check(prog, &[], diags)
}

/// Type-checks a loaded program, unless it has syntax errors (then only those are reported).
/// A `--set` value that does not fit its const (E0232) is reported alone: what the const
/// reaches then fails to check for no fault of the file's.
fn check(prog: Program, overrides: &[Override], mut diags: Vec<Diag>) -> (Program, Vec<Diag>) {
    if !prog.syntax_errors {
        let mut found = crate::elab::check(&prog, overrides);
        if found.iter().any(|d| d.code == "E0232") {
            found.retain(|d| d.code == "E0232");
        }
        diags.extend(found);
    }
    (prog, diags)
}

/// Builds the IR of `entry` in a program that checked cleanly (with the same overrides),
/// and verifies it.
pub fn build(prog: &Program, overrides: &[Override], entry: &str) -> Result<Entry, Box<Diag>> {
    let (func, params, ret) = crate::elab::build(prog, overrides, entry)?;
    if let Err(e) = crate::ir::verify::verify(&func) {
        panic!("internal compiler error: the IR of `{entry}` does not verify: {e}");
    }
    Ok(Entry { func, params, ret })
}

/// Runs an entry through the reference interpreter.
pub fn eval(entry: &Entry, args: &[Array]) -> Vec<Array> {
    crate::ir::eval::eval_func(&entry.func, args)
}
