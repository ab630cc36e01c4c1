//! A run's fingerprint: what decides its numbers beside its command, hashed, so that a
//! result recorded with it (`docs/learning-runs.json`) knows when it has gone stale.
//! `podc train ... --fingerprint` prints it without compiling anything; every run writes
//! it into its directory ([`FILE`]). It is not part of the checkpoint: the same run made
//! by other layouts (two processes, or one with two devices) has the same state from
//! programs compiled for other replica counts.
//!
//! - The StableHLO of every program the run compiles, or runs in the reference
//!   interpreter, at the run's sizes, with its `--set` and bound consts in it. Anakin:
//!   `init` and `train`; Sebulba: `init`, `keys`, `learn`, `act`, and for a `pod:` env
//!   `env.reset`, `env.step` and `env.keys`.
//! - The PJRT plugin ([`plugin::identity`](crate::runtime::plugin::identity)).
//! - For a Python host env, the versions its worker reports (Python, numpy, Gymnasium,
//!   EnvPool, ale-py, Box2D, MuJoCo) and the worker script's own hash.
//! - `XLA_FLAGS`, when it is set.
//!
//! Not in it: what the command says (seed, length, flags), and the host code of the
//! drivers and of the reference interpreter, for which podc's commit stands. The CPU is
//! recorded beside the hash, not in it (`cpu`): XLA:CPU compiles for the host's
//! instruction set, so another CPU may round otherwise, but a table measured on one
//! machine must stay checkable on another.

use crate::host::Packages;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

/// The file in a run's directory that holds the fingerprint of the programs that made it
/// (of its last start, when resumed).
pub const FILE: &str = "fingerprint.json";

/// Writes `fingerprint` (`null`: none) into the run directory `dir`; where the run
/// resumes one made under another fingerprint (`from`'s), says so unless `quiet`.
pub fn record(dir: &Path, fingerprint: &Value, from: Option<&Path>, quiet: bool) -> std::io::Result<()> {
    if fingerprint.is_null() {
        return Ok(());
    }
    if let Some(d) = from.filter(|_| !quiet) {
        let old: Option<Value> = std::fs::read(d.join(FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok());
        if old.is_some_and(|old| old["sha256"] != fingerprint["sha256"]) {
            eprintln!(
                "note: the programs, the plugin or the env's packages differ from those that made `{}` (its {FILE}): the resumed run will not round as one run from the start would",
                d.display()
            );
        }
    }
    let mut text = serde_json::to_vec_pretty(fingerprint)?;
    text.push(b'\n');
    super::atomic::replace(dir, FILE, &text)
}

/// The SHA-256 of `bytes`, in hex.
fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// This machine's CPU: its model name and the first 16 hex digits of the hash of its
/// architecture, vendor, model and feature flags.
fn cpu() -> String {
    let info = crate::runtime::cache::host_cpu();
    let model = info.lines().nth(1).and_then(|l| l.split_once(':')).map_or("", |(_, m)| m.trim());
    format!("{model} ({})", &sha256_hex(info.as_bytes())[..16])
}

/// A fingerprint being put together.
pub struct Fingerprint {
    programs: Map<String, Value>,
    plugin: String,
    host: Option<Value>,
}

impl Fingerprint {
    /// A fingerprint of programs run by `plugin`.
    pub fn new(plugin: String) -> Fingerprint {
        Fingerprint { programs: Map::new(), plugin, host: None }
    }

    /// The program `name` as it is compiled: its StableHLO text.
    pub fn program(&mut self, name: &str, mlir: &str) {
        self.programs.insert(name.into(), json!(sha256_hex(mlir.as_bytes())));
    }

    /// A Python host env stepped by the worker script with these packages.
    pub fn host(&mut self, packages: &Packages) {
        let mut host: Map<String, Value> = packages.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        host.insert("worker.py".into(), json!(sha256_hex(crate::host::worker::SCRIPT.as_bytes())));
        self.host = Some(Value::Object(host));
    }

    /// `{"sha256": .., "programs": {name: sha256}, "plugin": .., "host": .., "xla_flags": ..,
    /// "cpu": ..}`: `sha256` is the hash of the parts between, as compact JSON (their order
    /// is fixed here, the programs' by the driver).
    pub fn to_json(&self) -> Value {
        let mut parts = Map::new();
        parts.insert("programs".into(), Value::Object(self.programs.clone()));
        parts.insert("plugin".into(), json!(self.plugin));
        if let Some(h) = &self.host {
            parts.insert("host".into(), h.clone());
        }
        if let Some(flags) = std::env::var("XLA_FLAGS").ok().filter(|f| !f.trim().is_empty()) {
            parts.insert("xla_flags".into(), json!(flags));
        }
        let sha = sha256_hex(Value::Object(parts.clone()).to_string().as_bytes());
        let mut out = Map::new();
        out.insert("sha256".into(), json!(sha));
        out.extend(parts);
        out.insert("cpu".into(), json!(cpu()));
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_covers_every_part() {
        let fp = |plugin: &str, mlir: &str, host: Option<&str>| {
            let mut f = Fingerprint::new(plugin.into());
            f.program("train", mlir);
            if let Some(v) = host {
                f.host(&Packages::from([("gymnasium".to_string(), v.to_string())]));
            }
            f.to_json()
        };
        let base = fp("p==1", "module {}", None);
        assert_eq!(base["programs"]["train"], json!(sha256_hex(b"module {}")));
        assert_eq!(base, fp("p==1", "module {}", None));
        let others =
            [fp("p==2", "module {}", None), fp("p==1", "module { }", None), fp("p==1", "module {}", Some("1.2.2"))];
        for other in others {
            assert_ne!(base["sha256"], other["sha256"]);
        }
        assert_ne!(fp("p==1", "m", Some("1.2.2"))["sha256"], fp("p==1", "m", Some("1.2.3"))["sha256"]);
    }
}
