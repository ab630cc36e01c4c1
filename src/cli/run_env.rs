//! The host env a run or an evaluation steps when it names none with `--env`: the
//! agent's own `.pod` env, loaded as the run's root file is.

use crate::driver::LoadOptions;
use crate::resolve::Program;
use crate::syntax::ast;
use std::path::Path;

/// `pod:FILE?env=NAME` for the program's `.pod` env `name`; `None` for an `extern` one.
pub(super) fn own_env_uri(prog: &Program, name: &str) -> Option<String> {
    let env = prog.modules.iter().flat_map(|m| &m.ast.items).find_map(|i| match i {
        ast::Item::Env(e) if e.name.name == *name => Some(e),
        _ => None,
    })?;
    (!env.external).then(|| format!("pod:{}?env={name}", prog.map.name(env.span.file)))
}

/// Whether two paths name the same existing file.
pub(super) fn same_file(a: &Path, b: &Path) -> bool {
    a.canonicalize().ok().is_some_and(|a| b.canonicalize().ok() == Some(a))
}

/// How a `pod:` env is loaded: with the run's `--lib` directories, and its `--set` values
/// when the env's file is the run's root file (they name the root file's consts).
pub(super) fn pod_load(uri: &str, root: &Path, opts: &LoadOptions) -> LoadOptions {
    let is_root = crate::host::uri::EnvUri::parse(uri)
        .is_ok_and(|u| u.backend == crate::host::Backend::Pod && same_file(Path::new(&u.id), root));
    LoadOptions { lib: opts.lib.clone(), overrides: if is_root { opts.overrides.clone() } else { vec![] } }
}
