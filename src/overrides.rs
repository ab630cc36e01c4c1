//! `--set NAME=VALUE`: this run's value for a top-level `const` of the root file, so that
//! a hyperparameter changes without editing the file.
//!
//! The value is JSON (`0.001`, `true`, `[1, 2]`), as `--args` is. It is parsed here; the
//! checker reads it as the const's declared type where the const is elaborated
//! (`elab::items`), so that a const used in shapes or by other consts changes them too,
//! and a value of the wrong dtype or shape is a diagnostic at the declaration (E0232).

use crate::array::{Array, ArrayTy};
use crate::resolve::Program;
use crate::syntax::ast;
use serde_json::{Map, Value};

/// One `--set NAME=VALUE`.
#[derive(Clone, Debug, PartialEq)]
pub struct Override {
    pub name: String,
    pub value: Value,
}

impl Override {
    /// Parses `NAME=VALUE`.
    pub fn parse(arg: &str) -> Result<Override, String> {
        let Some((name, text)) = arg.split_once('=') else {
            return Err(format!("`--set {arg}`: expected NAME=VALUE, e.g. `--set LR=0.001`"));
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Err(format!("`--set {arg}`: `{name}` is not the name of a const"));
        }
        let value = serde_json::from_str(text.trim()).map_err(|_| {
            format!(
                "`--set {arg}`: `{text}` is not a value: write a number (`0.001`, `-3`), `true` or `false`, or a list (`[1, 2]`)"
            )
        })?;
        Ok(Override { name: name.to_string(), value })
    }

    /// The value as an array of the const's type.
    pub fn read(&self, ty: &ArrayTy) -> Result<Array, String> {
        crate::io::read_value(ty, &self.value)
    }
}

/// Parses each `--set`; a name given twice is an error.
pub fn parse_all(args: &[String]) -> Result<Vec<Override>, String> {
    let mut out: Vec<Override> = vec![];
    for arg in args {
        let o = Override::parse(arg)?;
        if out.iter().any(|p| p.name == o.name) {
            return Err(format!("`--set {}` is given twice", o.name));
        }
        out.push(o);
    }
    Ok(out)
}

/// The overrides as a run's config records them: one object, by name.
pub fn to_json(overrides: &[Override]) -> Value {
    let mut sorted: Vec<&Override> = overrides.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    Value::Object(sorted.into_iter().map(|o| (o.name.clone(), o.value.clone())).collect::<Map<_, _>>())
}

/// The overrides a run's config recorded (none when it has none).
pub fn from_json(v: &Value) -> Vec<Override> {
    v.as_object()
        .map(|m| m.iter().map(|(name, value)| Override { name: name.clone(), value: value.clone() }).collect())
        .unwrap_or_default()
}

/// Checks that every override names a `const` of the root file; the error lists the
/// nearest names, or all the file's consts.
pub fn check_names(prog: &Program, overrides: &[Override]) -> Result<(), String> {
    let Some(root) = prog.modules.first() else { return Ok(()) };
    let consts: Vec<&str> = root
        .ast
        .items
        .iter()
        .filter_map(|i| match i {
            ast::Item::Const(c) => Some(c.name.name.as_str()),
            _ => None,
        })
        .collect();
    for o in overrides {
        if consts.contains(&o.name.as_str()) {
            continue;
        }
        let file = &root.name;
        let what = match root.scope.get(&o.name).filter(|r| r.module == 0).map(|&r| prog.item(r)) {
            Some(item) => format!("`{}` in `{file}` is {}, not a const", o.name, kind(item)),
            None => format!("`{file}` has no const `{}`", o.name),
        };
        let mut near: Vec<(usize, &str)> = consts
            .iter()
            .map(|c| (crate::diag::edit_distance(&c.to_lowercase(), &o.name.to_lowercase()), *c))
            .collect();
        near.sort();
        let close: Vec<String> =
            near.iter().filter(|(d, c)| *d <= (c.len() / 2).max(1)).map(|(_, c)| format!("`{c}`")).collect();
        let hint = match (&close[..], &consts[..]) {
            (_, []) => "it declares no consts".to_string(),
            ([], all) => format!("its consts: {}", all.join(", ")),
            (some, _) => format!("did you mean {}?", some.join(" or ")),
        };
        return Err(format!("`--set {}`: {what}; {hint}", o.name));
    }
    Ok(())
}

fn kind(item: &ast::Item) -> &'static str {
    match item {
        ast::Item::Const(_) => "a const",
        ast::Item::Struct(_) => "a struct",
        ast::Item::Fn(_) => "a function",
        ast::Item::Env(_) => "an env",
        ast::Item::Agent(_) => "an agent",
    }
}
