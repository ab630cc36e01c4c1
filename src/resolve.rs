//! Loading a program: the root file, the modules its `use` declarations name (recursively),
//! and each module's table of visible items.
//!
//! `use std::x::{..}` reads the standard library, which is compiled into `podc`;
//! `use a::b::{..}` reads `a/b.pod` next to the root file, as a crate root does in Rust,
//! else from the first library directory that has it (`podc --lib DIR`, `PODC_PATH`), so
//! that a user's envs can live outside the agent's folder.

use crate::diag::{Diag, SourceMap};
use crate::syntax::{self, ast};
use crate::types::error::TypeError;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The standard library, embedded so that `podc` works from any directory.
const STDLIB: &[(&str, &str)] = &[
    ("math", include_str!("../stdlib/math.pod")),
    ("nn", include_str!("../stdlib/nn.pod")),
    ("distributions", include_str!("../stdlib/distributions.pod")),
    ("rl", include_str!("../stdlib/rl.pod")),
    ("optim", include_str!("../stdlib/optim.pod")),
    ("replay", include_str!("../stdlib/replay.pod")),
];

/// Which item of which module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ItemRef {
    pub module: usize,
    pub index: usize,
}

pub struct ModuleInfo {
    /// `std::math`, `envs::catch`, or the root file's name.
    pub name: String,
    pub ast: ast::Module,
    /// Own items and imported ones, by name.
    pub scope: HashMap<String, ItemRef>,
    /// Names whose import failed (reported once, at the `use`): their uses are not
    /// reported again as unknown.
    pub unresolved: HashSet<String>,
}

pub struct Program {
    pub map: SourceMap,
    pub modules: Vec<ModuleInfo>,
    /// Whether any module failed to parse. Recovery drops what it skipped, so checking
    /// such a module would report errors that are only echoes of the syntax error.
    pub syntax_errors: bool,
}

impl Program {
    pub fn item(&self, r: ItemRef) -> &ast::Item {
        &self.modules[r.module].ast.items[r.index]
    }

    /// The root module's function called `name`.
    pub fn root_fn(&self, name: &str) -> Option<ItemRef> {
        let r = *self.modules.first()?.scope.get(name)?;
        matches!(self.item(r), ast::Item::Fn(_)).then_some(r)
    }
}

pub fn item_name(item: &ast::Item) -> &ast::Ident {
    match item {
        ast::Item::Const(c) => &c.name,
        ast::Item::Struct(s) => &s.name,
        ast::Item::Fn(f) => &f.name,
        ast::Item::Env(e) => &e.name,
        ast::Item::Agent(a) => &a.name,
    }
}

/// Loads a program from its root file, looking for user modules next to it and then in
/// each of `lib`, in order. IO errors on the root file are returned as `Err`; everything
/// else becomes diagnostics.
pub fn load_file(path: &Path, lib: &[PathBuf]) -> Result<(Program, Vec<Diag>), String> {
    let src = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let search = std::iter::once(dir).chain(lib.iter().cloned()).collect();
    Ok(load_source(&path.display().to_string(), &src, search))
}

/// Loads a program from source text; user modules are looked up in each of `search`, in
/// order (none: only the standard library).
pub fn load_source(name: &str, src: &str, search: Vec<PathBuf>) -> (Program, Vec<Diag>) {
    let mut l = Loader {
        map: SourceMap::default(),
        modules: vec![],
        by_path: HashMap::new(),
        diags: vec![],
        syntax_errors: false,
        search,
    };
    l.add_module(name.to_string(), name.to_string(), src.to_string());
    l.resolve_imports();
    (Program { map: l.map, modules: l.modules, syntax_errors: l.syntax_errors }, l.diags)
}

struct Loader {
    map: SourceMap,
    modules: Vec<ModuleInfo>,
    by_path: HashMap<String, usize>,
    diags: Vec<Diag>,
    syntax_errors: bool,
    /// Where user modules are looked for: the root file's directory, then libraries.
    search: Vec<PathBuf>,
}

impl Loader {
    fn add_module(&mut self, name: String, file_name: String, src: String) -> usize {
        let file = self.map.add(file_name, src);
        let (ast, diags) = syntax::parse(file, self.map.source(file));
        self.syntax_errors |= !diags.is_empty();
        self.diags.extend(diags);
        let id = self.modules.len();
        let mut scope: HashMap<String, ItemRef> = HashMap::new();
        for (index, item) in ast.items.iter().enumerate() {
            let n = item_name(item);
            if let Some(prev) = scope.get(&n.name) {
                let first = item_name(&ast.items[prev.index]).span;
                self.diags.push(TypeError::Duplicate { name: n.name.clone(), span: n.span, first }.into_diag());
            } else {
                scope.insert(n.name.clone(), ItemRef { module: id, index });
            }
        }
        self.by_path.insert(name.clone(), id);
        self.modules.push(ModuleInfo { name, ast, scope, unresolved: HashSet::new() });
        id
    }

    /// Loads the module a `use` path names, once; `None` (with a diagnostic) if it is missing.
    fn module(&mut self, path: &[ast::Ident]) -> Option<usize> {
        let name: Vec<&str> = path.iter().map(|p| p.name.as_str()).collect();
        let key = name.join("::");
        if let Some(&id) = self.by_path.get(&key) {
            return Some(id);
        }
        let span = path.first()?.span.to(path.last()?.span);
        if name[0] == "std" {
            let found = (name.len() == 2).then(|| STDLIB.iter().find(|(n, _)| *n == name[1])).flatten();
            return match found {
                Some((n, src)) => Some(self.add_module(key.clone(), format!("<stdlib>/{n}.pod"), src.to_string())),
                None => {
                    let have: Vec<String> = STDLIB.iter().map(|(n, _)| format!("std::{n}")).collect();
                    self.diags.push(
                        TypeError::UnknownModule {
                            path: key,
                            span,
                            looked_in: format!("the standard library: {}", have.join(", ")),
                        }
                        .into_diag(),
                    );
                    None
                }
            };
        }
        let mut relative = PathBuf::new();
        for seg in &name {
            relative.push(seg);
        }
        relative.set_extension("pod");
        let candidates: Vec<PathBuf> = self.search.iter().map(|dir| dir.join(&relative)).collect();
        for file in &candidates {
            if let Ok(src) = std::fs::read_to_string(file) {
                return Some(self.add_module(key, file.display().to_string(), src));
            }
        }
        let looked_in = match &candidates[..] {
            [] => "no directory: only `std::` modules can be used here".to_string(),
            _ => candidates.iter().map(|f| format!("`{}`", f.display())).collect::<Vec<_>>().join(", "),
        };
        self.diags.push(TypeError::UnknownModule { path: key, span, looked_in }.into_diag());
        None
    }

    /// Resolves every module's `use` declarations, loading modules as they are named.
    fn resolve_imports(&mut self) {
        let mut m = 0;
        while m < self.modules.len() {
            let uses = self.modules[m].ast.uses.clone();
            for u in &uses {
                let Some(target) = self.module(&u.path) else {
                    self.modules[m].unresolved.extend(u.names.iter().map(|n| n.name.clone()));
                    continue;
                };
                for n in &u.names {
                    match self.modules[target].scope.get(&n.name).copied() {
                        Some(r) if r.module == target => {
                            self.modules[m].scope.insert(n.name.clone(), r);
                        }
                        _ => {
                            self.modules[m].unresolved.insert(n.name.clone());
                            self.diags.push(
                                TypeError::UnknownImport {
                                    module: self.modules[target].name.clone(),
                                    name: n.name.clone(),
                                    span: n.span,
                                }
                                .into_diag(),
                            )
                        }
                    }
                }
            }
            m += 1;
        }
    }
}
