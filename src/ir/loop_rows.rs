//! Rows a loop already computed, read from the loop instead of computed again after it.
//!
//! An Anakin update runs the policy over the rollout's observations with the parameters
//! that acting used on them a moment before: the rollout loop computed every step's
//! activations from that step's observations, and the loss computes them all again,
//! batched over the steps (in A2C, a seventh of the FLOPs of an update).
//!
//! The pattern, in general: a loop writes a value `x` of each trip `t` into row `t` of a
//! carried buffer, and after the loop an equation does to the whole buffer what an
//! equation of the body does to `x` (with the same loop constants). Row `t` of its result
//! is then the body's result on trip `t`. Such results are stacked into new carries of
//! the loop and read from there, and what computed them after the loop becomes dead code.
//!
//! A value after the loop corresponds to one in the body as [`Corr::Same`] (equal: a loop
//! constant, or an equation of equal values that the body also has) or [`Corr::Rows`]
//! (its row `t` is the body's value on trip `t`: a stacked buffer, or an equation on rows
//! that the body makes on the row, [`row_prim`]). Only the rows that follow a contraction
//! are stacked: a stored row costs a write, which saves something when it replaces a dot
//! over every row.
//!
//! The body's values were computed with the shapes of one trip, and a kernel may round
//! a contraction of one shape otherwise than of another. On the CPU plugin they agree:
//! training's checkpoints are the same bytes with and without this (docs/performance.md).

use std::collections::{HashMap, HashSet};

use super::build::dce;
use super::{Eqn, Func, Graph, Op, Var, emit};
use crate::array::{Array, ArrayTy, Data};
use crate::prims::{Argmax, Broadcast, Constant, Dot, DynamicUpdateSlice, Prim, Reduce, Reshape, Transpose};

/// Reuses, in every graph of `f`, the rows its loops computed.
pub fn reuse_loop_rows(f: &mut Func) {
    let mut graph = std::mem::take(&mut f.graph);
    reuse_graph(f, &mut graph);
    f.graph = graph;
}

/// How a value after a loop relates to one of its body.
#[derive(Clone, Copy, Debug)]
enum Corr {
    /// Equal to the body's value.
    Same(Var),
    /// Its leading axis is the trip: row `t` is the body's value on trip `t`.
    Rows(Var),
}

fn reuse_graph(f: &mut Func, g: &mut Graph) {
    for e in &mut g.eqns {
        if let Op::Loop { body, .. } = &mut e.op {
            reuse_graph(f, body);
        }
    }
    let mut changed = false;
    let mut i = 0;
    while i < g.eqns.len() {
        if matches!(g.eqns[i].op, Op::Loop { .. }) {
            let inits = reuse_after(f, g, i);
            changed |= inits > 0;
            i += inits;
        }
        i += 1;
    }
    if changed {
        dce(g);
    }
}

/// Stacks into the loop `g.eqns[at]` the rows that the equations after it recompute;
/// returns the number of equations inserted before the loop (the new carries' initial
/// values).
fn reuse_after(f: &mut Func, g: &mut Graph, at: usize) -> usize {
    let Op::Loop { lo: 0, hi, n_consts, body } = &g.eqns[at].op else { return 0 };
    let trips = *hi as usize;
    let loop_eqn = &g.eqns[at];
    let mut corr: HashMap<Var, Corr> = HashMap::new();
    for (&outer, &inner) in loop_eqn.args[..*n_consts].iter().zip(&body.params[1..]) {
        corr.insert(outer, Corr::Same(inner));
    }
    for (k, &out) in loop_eqn.outs.iter().enumerate() {
        if let Some(x) = stacked_row(f, body, k, trips) {
            corr.insert(out, Corr::Rows(x));
        }
    }
    if !corr.values().any(|c| matches!(c, Corr::Rows(_))) {
        return 0;
    }
    // The body's equations by their arguments.
    let mut by_args: HashMap<&[Var], Vec<&Eqn>> = HashMap::new();
    for e in &body.eqns {
        if matches!(e.op, Op::Prim(_)) {
            by_args.entry(&e.args[..]).or_default().push(e);
        }
    }
    let find = |prim: &Prim, args: &[Var]| {
        by_args.get(args)?.iter().find(|e| matches!(&e.op, Op::Prim(p) if p == prim)).map(|e| e.outs.clone())
    };

    // Match the other equations, in order (before the loop, only values equal to the
    // body's can match). `computed`: the values whose rows the body computes, each with
    // whether a contraction leads to it.
    let mut computed: HashMap<Var, bool> = HashMap::new();
    for e in g.eqns[..at].iter().chain(&g.eqns[at + 1..]) {
        let Op::Prim(prim) = &e.op else { continue };
        let Some(args) = e.args.iter().map(|a| corr.get(a).copied()).collect::<Option<Vec<Corr>>>() else {
            continue;
        };
        let inner: Vec<Var> = args
            .iter()
            .map(|c| match *c {
                Corr::Same(v) | Corr::Rows(v) => v,
            })
            .collect();
        if args.iter().all(|c| matches!(c, Corr::Same(_)))
            && let Some(outs) = find(prim, &inner)
        {
            corr.extend(e.outs.iter().zip(outs).map(|(&o, v)| (o, Corr::Same(v))));
            continue;
        }
        let rows: Vec<bool> = args.iter().map(|c| matches!(c, Corr::Rows(_))).collect();
        let types: Vec<&ArrayTy> = e.args.iter().map(|&a| f.ty(a)).collect();
        match row_prim(prim, &rows, &types, trips) {
            Some(RowPrim::Repeat) => {
                corr.insert(e.outs[0], Corr::Rows(inner[0]));
            }
            Some(RowPrim::Eqn(p)) => {
                if let Some(outs) = find(&p, &inner) {
                    let heavy = matches!(prim, Prim::Dot(_))
                        || e.args.iter().any(|a| computed.get(a).copied().unwrap_or(false));
                    for (&o, v) in e.outs.iter().zip(outs) {
                        corr.insert(o, Corr::Rows(v));
                        computed.insert(o, heavy);
                    }
                }
            }
            None => {}
        }
    }

    // Stack the rows that a contraction leads to and that something else reads.
    let mut read_elsewhere: HashSet<Var> = g.results.iter().copied().collect();
    for e in &g.eqns[at + 1..] {
        if e.outs.iter().any(|o| computed.contains_key(o)) {
            continue;
        }
        read_elsewhere.extend(e.args.iter().copied());
    }
    let mut stacked: Vec<(Var, Var)> = vec![];
    for e in &g.eqns[at + 1..] {
        for &o in &e.outs {
            if computed.get(&o) == Some(&true) && read_elsewhere.contains(&o) {
                let Some(Corr::Rows(v)) = corr.get(&o) else { unreachable!("a computed row has one") };
                stacked.push((o, *v));
            }
        }
    }
    if stacked.is_empty() {
        return 0;
    }

    let mut inits = vec![];
    let mut rename: HashMap<Var, Var> = HashMap::new();
    let Op::Loop { body, .. } = &mut g.eqns[at].op else { unreachable!() };
    let index = body.params[0];
    let mut writes = vec![];
    let zero = emit(f, &mut writes, Prim::Constant(Constant { value: Array::i32(vec![], vec![0]) }), &[], None);
    let mut news = vec![];
    for &(outer, row) in &stacked {
        let ty = f.ty(outer).clone();
        let init = filled(f, &mut inits, &ty);
        let param = f.fresh(ty.clone());
        let one: Vec<usize> = [1].into_iter().chain(f.ty(row).shape.iter().copied()).collect();
        let update = emit(f, &mut writes, Prim::Reshape(Reshape { shape: one }), &[row], None);
        let mut starts = vec![param, update, index];
        starts.extend(std::iter::repeat_n(zero, ty.rank() - 1));
        let next = emit(f, &mut writes, Prim::DynamicUpdateSlice(DynamicUpdateSlice), &starts, None);
        body.params.push(param);
        body.results.push(next);
        let out = f.fresh(ty);
        rename.insert(outer, out);
        news.push((init, out));
    }
    body.eqns.extend(writes);
    let e = &mut g.eqns[at];
    for (init, out) in news {
        e.args.push(init);
        e.outs.push(out);
    }
    for e in &mut g.eqns[at + 1..] {
        for a in &mut e.args {
            *a = rename.get(a).copied().unwrap_or(*a);
        }
    }
    for r in &mut g.results {
        *r = rename.get(r).copied().unwrap_or(*r);
    }
    let n = inits.len();
    g.eqns.splice(at..at, inits);
    n
}

/// The value whose trip-`t` value the loop's `k`-th carry holds in row `t` when the loop
/// ends: the carry is a buffer of `trips` rows, and each trip writes the value into the
/// row of its index, all of it.
fn stacked_row(f: &Func, body: &Graph, k: usize, trips: usize) -> Option<Var> {
    let n_consts = body.params.len() - 1 - body.results.len();
    let (index, buffer, next) = (body.params[0], body.params[1 + n_consts + k], body.results[k]);
    let def = |v: Var| body.eqns.iter().find(|e| e.outs.contains(&v));
    let write = def(next)?;
    if !matches!(write.op, Op::Prim(Prim::DynamicUpdateSlice(_)))
        || write.args[0] != buffer
        || write.args.get(2) != Some(&index)
    {
        return None;
    }
    let is_zero = |v: Var| {
        def(v).is_some_and(|e| matches!(&e.op, Op::Prim(Prim::Constant(c)) if c.value.data == Data::I32(vec![0])))
    };
    if !write.args[3..].iter().all(|&s| is_zero(s)) {
        return None;
    }
    let reshape = def(write.args[1])?;
    let x = *reshape.args.first()?;
    let (whole, update, row) = (&f.ty(buffer).shape, &f.ty(write.args[1]).shape, &f.ty(x).shape);
    let fits = whole.first() == Some(&trips) && whole[1..] == row[..] && update[0] == 1 && update[1..] == row[..];
    (matches!(reshape.op, Op::Prim(Prim::Reshape(_))) && fits).then_some(x)
}

/// What a primitive applied to whole rows (`rows[i]`: argument `i` has the trip as its
/// leading axis; the others are the same on every trip) does to each row.
enum RowPrim {
    /// The primitive with the trip axis taken out, applied to the rows.
    Eqn(Prim),
    /// Every row is the one argument itself (a broadcast over the trips).
    Repeat,
}

fn row_prim(prim: &Prim, rows: &[bool], types: &[&ArrayTy], trips: usize) -> Option<RowPrim> {
    let down = |dims: &[usize]| -> Option<Vec<usize>> { dims.iter().map(|&d| d.checked_sub(1)).collect() };
    let all_rows = rows.iter().all(|&r| r);
    Some(match prim {
        Prim::Unary(_)
        | Prim::Binary(_)
        | Prim::Compare(_)
        | Prim::Select(_)
        | Prim::Convert(_)
        | Prim::StopGradient(_)
            if all_rows =>
        {
            RowPrim::Eqn(prim.clone())
        }
        Prim::Broadcast(b) if b.shape.first() == Some(&trips) => {
            if rows[0] {
                if b.dims.first() != Some(&0) {
                    return None;
                }
                RowPrim::Eqn(Prim::Broadcast(Broadcast { shape: b.shape[1..].to_vec(), dims: down(&b.dims[1..])? }))
            } else {
                let dims = down(&b.dims)?;
                let row = Broadcast { shape: b.shape[1..].to_vec(), dims };
                let identity = row.shape == types[0].shape && row.dims.iter().enumerate().all(|(i, &d)| i == d);
                if identity { RowPrim::Repeat } else { RowPrim::Eqn(Prim::Broadcast(row)) }
            }
        }
        Prim::Reshape(r) if all_rows && r.shape.first() == Some(&trips) => {
            RowPrim::Eqn(Prim::Reshape(Reshape { shape: r.shape[1..].to_vec() }))
        }
        Prim::Transpose(t) if all_rows && t.perm.first() == Some(&0) => {
            RowPrim::Eqn(Prim::Transpose(Transpose { perm: down(&t.perm[1..])? }))
        }
        Prim::Reduce(r) if all_rows => RowPrim::Eqn(Prim::Reduce(Reduce { op: r.op, axes: down(&r.axes)? })),
        Prim::Argmax(a) if all_rows => RowPrim::Eqn(Prim::Argmax(Argmax { axis: a.axis.checked_sub(1)? })),
        // Rows times a matrix the same on every trip: the rows' free dimensions lead.
        Prim::Dot(d) if rows == [true, false] && d.lhs_batch.is_empty() => RowPrim::Eqn(Prim::Dot(Dot {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: down(&d.lhs_contract)?,
            rhs_contract: d.rhs_contract.clone(),
        })),
        _ => return None,
    })
}

/// An array of `ty` filled with zeros, built in `out`.
fn filled(f: &mut Func, out: &mut Vec<Eqn>, ty: &ArrayTy) -> Var {
    let zero = Array::zeros(&ArrayTy::scalar(ty.dtype));
    let scalar = emit(f, out, Prim::Constant(Constant { value: zero }), &[], None);
    emit(f, out, Prim::Broadcast(Broadcast { shape: ty.shape.clone(), dims: vec![] }), &[scalar], None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::DType;
    use crate::ir::build::Builder;
    use crate::ir::eval::eval_func;
    use crate::ir::verify::verify;
    use crate::prims::{Binary, BinaryOp, Convert, Unary, UnaryOp};

    const TRIPS: usize = 5;

    fn f32t(shape: &[usize]) -> ArrayTy {
        ArrayTy::new(DType::F32, shape.to_vec())
    }

    /// How the loop stores each trip's row, and what is done to the rows after it.
    #[derive(Clone, Copy)]
    struct Case {
        /// The row of trip `i` goes to row `i + shift` (clamped).
        shift: i32,
        /// The matrix after the loop is the loop's (else another of the same type).
        same_matrix: bool,
        /// The body and the code after it multiply by the matrix (else only `tanh`).
        contract: bool,
    }

    /// `W: f32[3, 4]`, `V: f32[3, 4]`, `xs: f32[2, 3]`. Each trip makes a row `x = xs * i`
    /// and `h = tanh(x · W + b)` (or `tanh(x)`), accumulates `sum(h)` and stores `x` into
    /// a `[5, 2, 3]` buffer; after the loop the same is done to the whole buffer, and the
    /// function returns the accumulated sum, the rows' `h` and their sum.
    fn program(case: Case) -> Func {
        let mut b = Builder::new();
        let (w, v, xs) = (b.fresh(f32t(&[3, 4])), b.fresh(f32t(&[3, 4])), b.fresh(f32t(&[2, 3])));
        let bias = b.fresh(f32t(&[4]));
        let zero = b.prim1(Prim::Constant(Constant { value: Array::f32(vec![], vec![0.0]) }), &[]);
        let buffer = b.prim1(Prim::Broadcast(Broadcast { shape: vec![TRIPS, 2, 3], dims: vec![] }), &[zero]);
        let dot = Prim::Dot(Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![1], rhs_contract: vec![0] });
        let act = |b: &mut Builder, x: Var, w: Var, rows: &[usize]| {
            if !case.contract {
                return b.prim1(Prim::Unary(Unary { op: UnaryOp::Tanh }), &[x]);
            }
            let mut d = dot.clone();
            if let Prim::Dot(d) = &mut d {
                d.lhs_contract = vec![rows.len() + 1];
            }
            let y = b.prim1(d, &[x, w]);
            let mut shape = rows.to_vec();
            shape.extend([2, 4]);
            let last = shape.len() - 1;
            let bias = b.prim1(Prim::Broadcast(Broadcast { shape, dims: vec![last] }), &[bias]);
            let y = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[y, bias]);
            b.prim1(Prim::Unary(Unary { op: UnaryOp::Tanh }), &[y])
        };
        let sum = |b: &mut Builder, x: Var, rank: usize| {
            b.prim1(Prim::Reduce(Reduce { op: crate::prims::ReduceOp::Sum, axes: (0..rank).collect() }), &[x])
        };

        b.begin_loop();
        let (i, acc, buf) = (b.fresh(ArrayTy::scalar(DType::I32)), b.fresh(f32t(&[])), b.fresh(f32t(&[TRIPS, 2, 3])));
        let fi = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[i]);
        let fi = b.prim1(Prim::Broadcast(Broadcast { shape: vec![2, 3], dims: vec![] }), &[fi]);
        let x = b.prim1(Prim::Binary(Binary { op: BinaryOp::Mul }), &[xs, fi]);
        let h = act(&mut b, x, w, &[]);
        let s = sum(&mut b, h, 2);
        let acc_next = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[acc, s]);
        let shift = b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![case.shift]) }), &[]);
        let row = b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[i, shift]);
        let row = if case.shift == 0 { i } else { row };
        let z = b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![0]) }), &[]);
        let x1 = b.prim1(Prim::Reshape(Reshape { shape: vec![1, 2, 3] }), &[x]);
        let buf_next = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[buf, x1, row, z, z]);
        let outs = b.end_loop(0, TRIPS as i64, &[zero, buffer], vec![i, acc, buf], vec![acc_next, buf_next]);

        let hs = act(&mut b, outs[1], if case.same_matrix { w } else { v }, &[TRIPS]);
        let total = sum(&mut b, hs, 3);
        b.finish("rows", vec![w, v, xs, bias], vec![outs[0], hs, total])
    }

    fn inputs() -> Vec<Array> {
        let values = |n: usize, k: f32| (0..n).map(|j| ((j as f32 + 1.0) * k).sin()).collect();
        vec![
            Array::f32(vec![3, 4], values(12, 0.7)),
            Array::f32(vec![3, 4], values(12, 1.3)),
            Array::f32(vec![2, 3], values(6, 0.3)),
            Array::f32(vec![4], values(4, 2.1)),
        ]
    }

    fn dots(g: &Graph) -> usize {
        g.eqns.iter().filter(|e| matches!(e.op, Op::Prim(Prim::Dot(_)))).count()
    }

    /// Reuses `f`'s rows, checks that it still verifies and computes the same values;
    /// returns the dots left after the loop and the loop's carries.
    fn reused(f: &Func) -> (usize, usize) {
        let mut r = f.clone();
        reuse_loop_rows(&mut r);
        verify(&r).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(eval_func(&r, &inputs()), eval_func(f, &inputs()));
        let carries = r.graph.eqns.iter().find(|e| matches!(e.op, Op::Loop { .. })).map(|e| e.outs.len());
        (dots(&r.graph), carries.expect("the loop stays"))
    }

    /// The activations after the loop are the body's, stacked: no dot is left after the
    /// loop, and the loop carries one more array (the rows of `h`, read by the result
    /// and by the sum).
    #[test]
    fn rows_the_loop_computed_are_read_from_it() {
        let case = Case { shift: 0, same_matrix: true, contract: true };
        assert_eq!(reused(&program(case)), (0, 3));
    }

    /// Nothing changes where the rows differ from the body's values: stored one row
    /// further, multiplied by another matrix, or where no contraction would be saved.
    #[test]
    fn other_rows_are_left_alone() {
        let base = Case { shift: 0, same_matrix: true, contract: true };
        for case in [Case { shift: 1, ..base }, Case { same_matrix: false, ..base }] {
            assert_eq!(reused(&program(case)), (1, 2));
        }
        assert_eq!(reused(&program(Case { contract: false, ..base })), (0, 2));
    }
}
