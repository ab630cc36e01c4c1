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
        self.f
            .types
            .get(v.0 as usize)
            .ok_or_else(|| format!("%{} has no type (only {} types)", v.0, self.f.types.len()))
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

#[cfg(test)]
mod tests {
    use super::verify;
    use crate::array::{Array, ArrayTy, DType};
    use crate::ir::{Op, Var};
    use crate::lower::tests::fixtures;
    use crate::prims::{Binary, BinaryOp, Constant, Prim};

    fn error(f: &crate::ir::Func) -> String {
        verify(f).expect_err("verify accepts a broken function")
    }

    #[test]
    fn accepts_the_fixtures() {
        for (name, f) in fixtures() {
            verify(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn rejects_a_use_before_definition() {
        let (_, mut f) = fixtures().remove(0);
        f.graph.eqns.swap(0, 1);
        assert!(error(&f).contains("not defined before it"), "{}", error(&f));
    }

    #[test]
    fn rejects_a_result_never_defined() {
        let (_, mut f) = fixtures().remove(0);
        f.types.push(ArrayTy::scalar(DType::F32));
        f.graph.results.push(Var(f.types.len() as u32 - 1));
        assert!(error(&f).contains("result uses"), "{}", error(&f));
    }

    #[test]
    fn rejects_a_second_definition() {
        let (_, mut f) = fixtures().remove(1);
        // broadcast and exp both give f32[3]
        let first = f.graph.eqns[1].outs[0];
        f.graph.eqns[2].outs[0] = first;
        assert!(error(&f).contains("defined twice"), "{}", error(&f));
    }

    #[test]
    fn rejects_a_var_without_a_type() {
        let (_, mut f) = fixtures().remove(0);
        f.graph.eqns[0].outs[0] = Var(9999);
        assert!(error(&f).contains("has no type"), "{}", error(&f));
    }

    #[test]
    fn rejects_a_wrong_result_type() {
        let (_, mut f) = fixtures().remove(0);
        let out = f.graph.eqns[0].outs[0];
        f.types[out.0 as usize] = ArrayTy::new(DType::F32, vec![2, 5]);
        let e = error(&f);
        assert!(e.contains("records result types (f32[2, 5]) but its rule gives (f32[2, 4])"), "{e}");
    }

    #[test]
    fn rejects_a_primitive_its_rule_rejects() {
        let (_, mut f) = fixtures().remove(0);
        f.graph.eqns[0].op = Op::Prim(Prim::Binary(Binary { op: BinaryOp::Add }));
        assert!(error(&f).contains("(add): add: operands must have the same type"), "{}", error(&f));
    }

    /// A loop body that reads an outer value directly instead of through a constant.
    #[test]
    fn rejects_an_open_loop_body() {
        let (_, mut f) = fixtures().remove(3);
        let outer = f.graph.params[0];
        let Op::Loop { body, .. } = &mut f.graph.eqns[0].op else { panic!("fixture 3 is a loop") };
        body.eqns[2].args[0] = outer;
        let e = error(&f);
        assert!(e.contains("loop body") && e.contains(&format!("uses %{}", outer.0)), "{e}");
    }

    #[test]
    fn rejects_inconsistent_loop_types() {
        let (_, f) = fixtures().remove(3);
        let mut wrong_carry = f.clone();
        let Op::Loop { body, .. } = &mut wrong_carry.graph.eqns[0].op else { panic!("a loop") };
        let i = body.params[0];
        body.results[1] = i;
        body.results.swap(0, 1);
        assert!(error(&wrong_carry).contains("body results"), "{}", error(&wrong_carry));

        let mut wrong_index = f.clone();
        let Op::Loop { body, .. } = &wrong_index.graph.eqns[0].op else { panic!("a loop") };
        let i = body.params[0];
        wrong_index.types[i.0 as usize] = ArrayTy::scalar(DType::U32);
        assert!(error(&wrong_index).contains("loop index has type u32"), "{}", error(&wrong_index));

        let mut wrong_consts = f.clone();
        let Op::Loop { n_consts, .. } = &mut wrong_consts.graph.eqns[0].op else { panic!("a loop") };
        *n_consts = 0;
        assert!(error(&wrong_consts).contains("body results (f32[3], i32) do not match"), "{}", error(&wrong_consts));

        let mut huge = f;
        let Op::Loop { hi, .. } = &mut huge.graph.eqns[0].op else { panic!("a loop") };
        *hi = 1 << 40;
        assert!(error(&huge).contains("do not fit in i32"), "{}", error(&huge));
    }

    #[test]
    fn constants_need_no_arguments() {
        let (_, mut f) = fixtures().remove(0);
        let x = f.graph.params[0];
        f.graph.eqns[0].op = Op::Prim(Prim::Constant(Constant { value: Array::f32(vec![2, 4], vec![0.0; 8]) }));
        f.graph.eqns[0].args = vec![x, x];
        assert!(error(&f).contains("constant takes 0 argument(s), got 2"), "{}", error(&f));
    }
}
