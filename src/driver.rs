//! The compiler's entry points, as the CLI and the tests use them.

use crate::array::Array;
use crate::diag::Diag;
use crate::ir::Func;
use crate::resolve::{self, Program};
use crate::types::Ty;
use std::path::Path;

/// An entry point, compiled to IR.
pub struct Entry {
    pub func: Func,
    /// Surface types of the parameters (for reading `--args`) and of the result.
    pub params: Vec<Ty>,
    pub ret: Ty,
}

/// Loads and checks a program from a file. `Err` only when the root file cannot be read.
pub fn check_file(path: &Path) -> Result<(Program, Vec<Diag>), String> {
    let (prog, diags) = resolve::load_file(path)?;
    Ok(check(prog, diags))
}

/// Loads and checks a program from source text (user modules are looked up in `dir`).
pub fn check_source(name: &str, src: &str, dir: Option<&Path>) -> (Program, Vec<Diag>) {
    let (prog, diags) = resolve::load_source(name, src, dir.map(Path::to_path_buf));
    check(prog, diags)
}

/// Type-checks a loaded program, unless it has syntax errors (then only those are reported).
fn check(prog: Program, mut diags: Vec<Diag>) -> (Program, Vec<Diag>) {
    if !prog.syntax_errors {
        diags.extend(crate::elab::check(&prog));
    }
    (prog, diags)
}

/// Builds the IR of `entry` in a program that checked cleanly, and verifies it.
pub fn build(prog: &Program, entry: &str) -> Result<Entry, Box<Diag>> {
    let (func, params, ret) = crate::elab::build(prog, entry)?;
    if let Err(e) = crate::ir::verify::verify(&func) {
        panic!("internal compiler error: the IR of `{entry}` does not verify: {e}");
    }
    Ok(Entry { func, params, ret })
}

/// Runs an entry through the reference interpreter.
pub fn eval(entry: &Entry, args: &[Array]) -> Vec<Array> {
    crate::ir::eval::eval_func(&entry.func, args)
}
