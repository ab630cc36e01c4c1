//! The reference interpreter: runs a [`Func`] on the host, one equation at a time, with
//! each primitive's own `eval` rule.
//!
//! It is deliberately simple: compiled results are checked against it, so it favours
//! being obviously right over being fast.

use super::{Func, Graph, Op, Var};
use crate::array::Array;

/// Runs `f` on `args` and returns its results.
///
/// Panics when the arguments do not have `f`'s parameter types, or when `f` does not
/// pass [`super::verify::verify`].
pub fn eval_func(f: &Func, args: &[Array]) -> Vec<Array> {
    let params = f.param_types();
    assert_eq!(args.len(), params.len(), "{} takes {} arguments, got {}", f.name, params.len(), args.len());
    for (k, (a, t)) in args.iter().zip(&params).enumerate() {
        assert_eq!(&a.ty(), t, "argument {k} of {} has the wrong type", f.name);
    }
    // Every var is defined once in the whole function, nested bodies included, so one
    // environment indexed by var serves every graph.
    let mut env: Vec<Option<Array>> = vec![None; f.types.len()];
    run_graph(f, &f.graph, args.to_vec(), &mut env)
}

fn get(env: &[Option<Array>], v: Var) -> &Array {
    env[v.0 as usize].as_ref().unwrap_or_else(|| panic!("eval: %{} used before definition", v.0))
}

/// Binds `g`'s parameters to `args`, runs its equations and returns its results.
fn run_graph(f: &Func, g: &Graph, args: Vec<Array>, env: &mut [Option<Array>]) -> Vec<Array> {
    bind(env, &g.params, args);
    run_eqns(f, g, env)
}

fn bind(env: &mut [Option<Array>], params: &[Var], args: Vec<Array>) {
    for (&p, a) in params.iter().zip(args) {
        env[p.0 as usize] = Some(a);
    }
}

/// Runs `g`'s equations, its parameters already bound, and returns its results.
fn run_eqns(f: &Func, g: &Graph, env: &mut [Option<Array>]) -> Vec<Array> {
    for e in &g.eqns {
        let outs = match &e.op {
            Op::Prim(p) => {
                let args: Vec<&Array> = e.args.iter().map(|&v| get(env, v)).collect();
                p.rules().eval(&args)
            }
            Op::Loop { lo, hi, n_consts, body } => {
                let args: Vec<Array> = e.args.iter().map(|&v| get(env, v).clone()).collect();
                run_loop(f, (*lo, *hi, *n_consts, body), args, env)
            }
        };
        assert_eq!(outs.len(), e.outs.len(), "eval: equation result count");
        bind(env, &e.outs, outs);
    }
    g.results.iter().map(|&v| get(env, v).clone()).collect()
}

/// Runs a loop body for `i` in `lo..hi`, threading the carries. The constants are bound
/// once: the body cannot redefine its own parameters.
fn run_loop(
    f: &Func,
    (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
    mut consts: Vec<Array>,
    env: &mut [Option<Array>],
) -> Vec<Array> {
    let mut carries = consts.split_off(n_consts);
    bind(env, &body.params[1..=n_consts], consts);
    for i in lo..hi {
        let i = i32::try_from(i).expect("loop index fits in i32 (checked by verify)");
        bind(env, &body.params[..1], vec![Array::i32(vec![], vec![i])]);
        bind(env, &body.params[1 + n_consts..], carries);
        carries = run_eqns(f, body, env);
    }
    carries
}
