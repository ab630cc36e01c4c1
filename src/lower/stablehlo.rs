//! StableHLO text emission.
//!
//! Operations are printed in MLIR's *generic* form,
//! `%3 = "stablehlo.add"(%1, %2) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>`,
//! with inherent attributes as properties (`<{dimensions = array<i64: 1>}>`). The generic
//! form spells every operand and result type out, so it does not depend on any op's
//! custom assembly format, which is the part of the syntax that changes between StableHLO
//! releases; it is also what MLIR itself prints when asked for an unambiguous dump.
//! Only the enclosing `module`, `func.func` and `return` use the pretty form.
//!
//! SSA names are `%N` from one counter per module, so they are unique across nested
//! regions too (`stablehlo.while` regions are not isolated from above, so MLIR would
//! reject a name reused inside one).
//!
//! [`Op::Loop`] lowers to `stablehlo.while` carrying `(i, consts.., carries..)`: the cond
//! region tests `i < hi`, and the body runs the loop's graph, increments `i` and passes
//! the constants through unchanged.

use std::collections::HashMap;

use crate::array::{Array, ArrayTy, DType};
use crate::ir::{Func, Graph, Op, Var};
use crate::prims::emit::{LowerCx, block_header, fn_type, tensor_type};

/// Lowers `f` to a complete StableHLO module whose entry point is `@main` (what PJRT
/// runs); `f.name` becomes the module's name. `num_replicas` must equal the replica count in the
/// compile options.
pub fn lower_module(f: &Func, num_replicas: usize) -> String {
    lower_module_donating(f, num_replicas, 0)
}

/// [`lower_module`], with the first `donated` parameters donated to the results at the
/// same positions (which must have their types): XLA may then update them in place, and
/// the caller's input buffers are consumed by the call.
pub fn lower_module_donating(f: &Func, num_replicas: usize, donated: usize) -> String {
    lower_module_across(f, num_replicas, 1, donated)
}

/// [`lower_module_donating`] for a program that `processes` processes each run on
/// `num_replicas` devices: collectives reduce over all of their replicas.
pub fn lower_module_across(f: &Func, num_replicas: usize, processes: usize, donated: usize) -> String {
    // Every program compiled passes here, the staged ones (Anakin, Sebulba, eval, bench)
    // included, which no other pass verifies.
    if cfg!(debug_assertions)
        && let Err(e) = crate::ir::verify::verify(f)
    {
        panic!("internal compiler error: program @{} does not verify before lowering: {e}", f.name);
    }
    let mut merged = f.clone();
    crate::ir::loop_rows::reuse_loop_rows(&mut merged);
    crate::ir::merge_hashes::merge_hashes(&mut merged);
    if cfg!(debug_assertions)
        && let Err(e) = crate::ir::verify::verify(&merged)
    {
        panic!(
            "internal compiler error: program @{} does not verify after reusing loop rows and merging hashes: {e}",
            f.name
        );
    }
    let f = &merged;
    let mut cx = LowerCx::with_replicas(num_replicas).across_processes(processes);
    cx.open(&format!(
        "module @{} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = {num_replicas} : i32}} {{",
        symbol(&f.name)
    ));
    let mut env: HashMap<Var, String> = HashMap::new();
    let mut params = vec![];
    for (i, &p) in f.graph.params.iter().enumerate() {
        let name = cx.fresh();
        let alias = if i < donated { format!(" {{tf.aliasing_output = {i} : i32}}") } else { String::new() };
        params.push(format!("{name}: {}{alias}", tensor_type(f.ty(p))));
        env.insert(p, name);
    }
    let results: Vec<String> = f.result_types().iter().map(tensor_type).collect();
    cx.open(&format!("func.func public @main({}) -> ({}) {{", params.join(", "), results.join(", ")));
    let outs = lower_graph(&mut cx, f, &f.graph, &mut env);
    if outs.is_empty() {
        cx.line("return");
    } else {
        cx.line(&format!("return {} : {}", outs.join(", "), results.join(", ")));
    }
    cx.close("}");
    cx.close("}");
    cx.finish()
}

/// `name` as an MLIR symbol: bare when it is an identifier, quoted otherwise.
fn symbol(name: &str) -> String {
    let bare = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '$');
    if bare { name.to_string() } else { format!("{name:?}") }
}

/// Lowers the equations of `g`, whose parameters are already bound in `env`, and
/// returns the names of its results.
fn lower_graph(cx: &mut LowerCx, f: &Func, g: &Graph, env: &mut HashMap<Var, String>) -> Vec<String> {
    let name = |env: &HashMap<Var, String>, v: &Var| -> String {
        env.get(v).unwrap_or_else(|| panic!("lowering: %{} used before definition", v.0)).clone()
    };
    for e in &g.eqns {
        let args: Vec<String> = e.args.iter().map(|v| name(env, v)).collect();
        let arg_tys: Vec<ArrayTy> = e.args.iter().map(|&v| f.ty(v).clone()).collect();
        let out_tys: Vec<ArrayTy> = e.outs.iter().map(|&v| f.ty(v).clone()).collect();
        let outs = match &e.op {
            Op::Prim(p) => p.rules().lower(cx, &args, &arg_tys, &out_tys),
            Op::Loop { lo, hi, n_consts, body } => lower_loop(cx, f, (*lo, *hi, *n_consts, body), &args, &arg_tys, env),
        };
        debug_assert_eq!(outs.len(), e.outs.len());
        for (&v, n) in e.outs.iter().zip(outs) {
            env.insert(v, n);
        }
    }
    g.results.iter().map(|v| name(env, v)).collect()
}

/// Lowers a loop to `stablehlo.while` over `(i, consts.., carries..)` and returns the
/// names of the final carries.
fn lower_loop(
    cx: &mut LowerCx,
    f: &Func,
    (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
    args: &[String],
    arg_tys: &[ArrayTy],
    env: &mut HashMap<Var, String>,
) -> Vec<String> {
    let i32_ty = ArrayTy::scalar(DType::I32);
    let start = cx.constant(&Array::i32(vec![], vec![index(lo)]));
    let mut operands = vec![start];
    operands.extend_from_slice(args);
    let mut tys = vec![i32_ty.clone()];
    tys.extend_from_slice(arg_tys);

    let w = cx.fresh();
    let k = tys.len();
    let lhs = if k == 1 { w.clone() } else { format!("{w}:{k}") };
    cx.open(&format!("{lhs} = \"stablehlo.while\"({}) ({{", operands.join(", ")));

    // cond: i < hi
    let cond_params: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
    cx.label(&block_header(&cond_params, &tys));
    let bound = cx.constant(&Array::i32(vec![], vec![index(hi)]));
    let attrs = "comparison_direction = #stablehlo<comparison_direction LT>, \
                 compare_type = #stablehlo<comparison_type SIGNED>";
    let pred_ty = ArrayTy::scalar(DType::Bool);
    let go = cx.op(
        "stablehlo.compare",
        &[cond_params[0].clone(), bound],
        attrs,
        &[i32_ty.clone(), i32_ty.clone()],
        &pred_ty,
    );
    cx.ret(&[go], &[pred_ty]);
    cx.reopen("}, {");

    // body: the graph, then i + 1
    let body_params: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
    cx.label(&block_header(&body_params, &tys));
    for (&p, n) in body.params.iter().zip(&body_params) {
        env.insert(p, n.clone());
    }
    let next = cx.region(|cx| lower_graph(cx, f, body, env));
    let one = cx.constant(&Array::i32(vec![], vec![1]));
    let i_next = cx.op("stablehlo.add", &[body_params[0].clone(), one], "", &[i32_ty.clone(), i32_ty.clone()], &i32_ty);
    let mut yields = vec![i_next];
    yields.extend_from_slice(&body_params[1..=n_consts]);
    yields.extend(next);
    cx.ret(&yields, &tys);
    cx.close(&format!("}}) : {}", fn_type(&tys, &tys)));

    (1 + n_consts..k).map(|j| format!("{w}#{j}")).collect()
}

/// A loop bound as the i32 the loop counter holds. `ir::verify` rejects bounds outside
/// i32, so this cannot truncate.
fn index(bound: i64) -> i32 {
    i32::try_from(bound).unwrap_or_else(|_| panic!("loop bound {bound} does not fit in i32"))
}
