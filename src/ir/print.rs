//! The IR printer: a stable, readable text form, used for `--emit ir` and as the format
//! of IR snapshots.
//!
//! ```text
//! func @main(%0: f32[2, 3], %1: f32[3, 2]) -> (f32[2, 2]) {
//!   %2 = dot_general[lhs_contract=[1], rhs_contract=[0]](%0, %1) : f32[2, 2]
//!   %3, %4 = loop[0..10, consts=1](%0, %2, %2) {
//!     ^(%5: i32, %6: f32[2, 3], %7: f32[2, 2], %8: f32[2, 2])
//!     ...
//!     yield %9, %10
//!   } : f32[2, 2], f32[2, 2]
//!   return %3
//! }
//! ```
//!
//! Values print as `%N` after their [`Var`] number, so a printed function reads back to
//! the same numbering. A loop's arguments are its constants then its initial carries
//! (`consts=` says how many are constants), and its block parameters are
//! `i, consts.., carries..`.

use super::{Func, Graph, Op, Var};

/// Prints `f` in the IR's text form, ending with a newline.
pub fn print_func(f: &Func) -> String {
    let mut out = String::new();
    let params: Vec<String> = f.graph.params.iter().map(|&p| typed(f, p)).collect();
    let results: Vec<String> = f.result_types().iter().map(|t| t.to_string()).collect();
    out.push_str(&format!("func @{}({}) -> ({}) {{\n", f.name, params.join(", "), results.join(", ")));
    print_body(f, &f.graph, 1, &mut out);
    push_line(&mut out, 1, &format!("return {}", vars(&f.graph.results)));
    out.push_str("}\n");
    out
}

fn typed(f: &Func, v: Var) -> String {
    format!("%{}: {}", v.0, f.ty(v))
}

fn vars(vs: &[Var]) -> String {
    let names: Vec<String> = vs.iter().map(|v| format!("%{}", v.0)).collect();
    names.join(", ")
}

fn push_line(out: &mut String, depth: usize, text: &str) {
    for _ in 0..depth {
        out.push_str("  ");
    }
    out.push_str(text.trim_end());
    out.push('\n');
}

/// Prints the equations of `g` at indentation `depth`.
fn print_body(f: &Func, g: &Graph, depth: usize, out: &mut String) {
    for e in &g.eqns {
        let out_tys: Vec<String> = e.outs.iter().map(|&v| f.ty(v).to_string()).collect();
        let out_tys = out_tys.join(", ");
        match &e.op {
            Op::Prim(p) => {
                let r = p.rules();
                let line = format!("{} = {}{}({}) : {out_tys}", vars(&e.outs), r.name(), r.attrs(), vars(&e.args));
                push_line(out, depth, &line);
            }
            Op::Loop { lo, hi, n_consts, body } => {
                let consts = if *n_consts > 0 { format!(", consts={n_consts}") } else { String::new() };
                let lhs = if e.outs.is_empty() { String::new() } else { format!("{} = ", vars(&e.outs)) };
                push_line(out, depth, &format!("{lhs}loop[{lo}..{hi}{consts}]({}) {{", vars(&e.args)));
                let params: Vec<String> = body.params.iter().map(|&p| typed(f, p)).collect();
                push_line(out, depth + 1, &format!("^({})", params.join(", ")));
                print_body(f, body, depth + 1, out);
                push_line(out, depth + 1, &format!("yield {}", vars(&body.results)));
                push_line(out, depth, &format!("}} : {out_tys}"));
            }
        }
    }
}
