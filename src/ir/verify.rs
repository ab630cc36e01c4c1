//! The IR verifier: checks the invariants every pass relies on.
//!
//! - every var has a type in `Func::types` and is defined exactly once, before its uses;
//! - every primitive's `infer` rule agrees with the types recorded for its results;
//! - loop bodies are closed: they use only their own parameters and values defined
//!   inside them (outer values come in as loop constants);
//! - loop parameters, arguments, results and outputs have consistent types, the index
//!   is an i32 scalar and the bounds fit in i32.
//!
//! A failure is a compiler bug, not a user error, so the message is for compiler
//! developers: it names the equation and the mismatch.

use std::collections::HashSet;

use super::{Func, Graph, Op, Var};
use crate::array::{ArrayTy, DType};

/// Checks `f`'s invariants; the error names the first violation found.
pub fn verify(f: &Func) -> Result<(), String> {
    let mut cx = Verifier { f, defined: vec![false; f.types.len()] };
    cx.graph(&f.graph, &format!("func @{}", f.name))
}

struct Verifier<'a> {
    f: &'a Func,
    /// Vars defined so far, anywhere in the function.
    defined: Vec<bool>,
}

impl Verifier<'_> {
    fn ty(&self, v: Var) -> Result<&ArrayTy, String> {
        self.f.types.get(v.0 as usize).ok_or_else(|| format!("%{} has no type (only {} types)", v.0, self.f.types.len()))
    }

    fn tys(&self, vs: &[Var]) -> Result<Vec<ArrayTy>, String> {
        vs.iter().map(|&v| self.ty(v).cloned()).collect()
    }

    /// Records a definition of `v` and makes it visible in the current graph.
    fn define(&mut self, v: Var, scope: &mut HashSet<Var>) -> Result<(), String> {
        self.ty(v)?;
        let slot = &mut self.defined[v.0 as usize];
        if *slot {
            return Err(format!("%{} is defined twice", v.0));
        }
        *slot = true;
        scope.insert(v);
        Ok(())
    }

    fn use_var(v: Var, scope: &HashSet<Var>, what: &str) -> Result<(), String> {
        if scope.contains(&v) {
            Ok(())
        } else {
            Err(format!("{what} uses %{}, which is not defined before it in this graph", v.0))
        }
    }

    /// Checks a graph whose only visible values are its own parameters and definitions.
    fn graph(&mut self, g: &Graph, what: &str) -> Result<(), String> {
        let mut scope = HashSet::new();
        for &p in &g.params {
            self.define(p, &mut scope)?;
        }
        for (k, e) in g.eqns.iter().enumerate() {
            let here = format!("{what}, equation {k}");
            for &a in &e.args {
                Self::use_var(a, &scope, &here)?;
            }
            let arg_tys = self.tys(&e.args)?;
            let out_tys = self.tys(&e.outs)?;
            match &e.op {
                Op::Prim(p) => {
                    let r = p.rules();
                    let inferred = r.infer(&arg_tys).map_err(|m| format!("{here} ({}): {m}", r.name()))?;
                    if inferred != out_tys {
                        return Err(format!(
                            "{here} ({}): records result types {} but its rule gives {}",
                            r.name(),
                            show(&out_tys),
                            show(&inferred)
                        ));
                    }
                }
                Op::Loop { lo, hi, n_consts, body } => {
                    self.check_loop(&here, (*lo, *hi, *n_consts, body), &arg_tys, &out_tys)?;
                    self.graph(body, &format!("{here} (loop body)"))?;
                }
            }
            for &o in &e.outs {
                self.define(o, &mut scope)?;
            }
        }
        for &r in &g.results {
            Self::use_var(r, &scope, &format!("{what} result"))?;
        }
        Ok(())
    }

    fn check_loop(
        &self,
        here: &str,
        (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
        arg_tys: &[ArrayTy],
        out_tys: &[ArrayTy],
    ) -> Result<(), String> {
        if i32::try_from(lo).is_err() || i32::try_from(hi).is_err() {
            return Err(format!("{here}: loop bounds {lo}..{hi} do not fit in i32"));
        }
        if n_consts > arg_tys.len() {
            return Err(format!("{here}: {n_consts} loop constants but only {} arguments", arg_tys.len()));
        }
        let (consts, init) = arg_tys.split_at(n_consts);
        let params = self.tys(&body.params)?;
        let results = self.tys(&body.results)?;
        if params.len() != 1 + arg_tys.len() {
            return Err(format!(
                "{here}: the body has {} parameters, expected 1 + {n_consts} constants + {} carries",
                params.len(),
                init.len()
            ));
        }
        if params[0] != ArrayTy::scalar(DType::I32) {
            return Err(format!("{here}: the loop index has type {}, expected i32", params[0]));
        }
        let checks = [
            ("constant parameters", &params[1..=n_consts], consts, "constant arguments"),
            ("carry parameters", &params[1 + n_consts..], init, "initial carries"),
            ("body results", &results[..], init, "initial carries"),
            ("loop outputs", out_tys, init, "initial carries"),
        ];
        for (what, got, want, against) in checks {
            if got != want {
                return Err(format!("{here}: {what} {} do not match {against} {}", show(got), show(want)));
            }
        }
        Ok(())
    }
}

fn show(tys: &[ArrayTy]) -> String {
    let names: Vec<String> = tys.iter().map(|t| t.to_string()).collect();
    format!("({})", names.join(", "))
}
