//! Reverse-mode differentiation: `value_and_grad(f)` computes `f` and its gradient with
//! respect to some of its parameters, as `jax.value_and_grad` does.
//!
//! # Rules
//!
//! Each primitive's derivative is its *vector-Jacobian product*, [`Rules::vjp`] in its
//! family's file: given the primal arguments and results of one application and the
//! cotangents of its results, it emits the cotangents of its arguments. This is what
//! JAX obtains by transposing a JVP rule (`ad.defjvp` then `ad.deflinear`/transpose);
//! podc writes the transposed form directly, because every transform here runs on a
//! closed first-order graph and only reverse mode is needed: one rule per primitive, not
//! two. [`unary`], [`binary`], [`full_like`] and friends keep the elementwise rules to a
//! line each.
//!
//! A rule answers per argument: `Some(ct)`, or `None` when no derivative flows to it
//! (integer and bool arguments: indices, predicates; or a derivative that is zero
//! wherever it exists, as `floor`'s). A primitive whose result has no derivative at all
//! says so with `Err(`[`NotDifferentiable`]`)`: argmax, comparisons, conversions to or
//! from integers, bitwise operations.
//!
//! [`Rules::vjp`]: crate::prims::Rules::vjp
//!
//! # Machinery
//!
//! Only `f32` values have cotangents. Before differentiating, a forward analysis marks
//! the values that depend on a differentiated parameter (*varied*, JAX's "not a symbolic
//! zero"); [`Prim::StopGradient`] is where that dependence is cut. Then:
//!
//! 1. the forward pass copies `f`'s equations into the new function (its value);
//! 2. the reverse pass walks them backwards from the result's cotangent, 1.0, calling
//!    the rule of every equation that has a cotangent on a result and a varied argument,
//!    and adding up the cotangents each varied `f32` argument receives. Equations that
//!    the gradient does not need are left for dead-code elimination.
//!
//! # Loops
//!
//! A loop is differentiated as JAX differentiates `scan`, with the body checkpointed:
//!
//! - forward, a loop with a varied carry also writes every iteration's carries (the
//!   body's inputs) into stacked buffers `[T, ...]` with `dynamic_update_slice` at
//!   `i - lo`;
//! - backward, a loop of `T` iterations runs from the last iteration to the first: it
//!   reads that iteration's carries back (`dynamic_slice` at `T - 1 - k`), recomputes the
//!   body from them, and runs the body's reverse pass from the carries' cotangents. Its
//!   carries are the cotangents of the loop's carries and the cotangents accumulated for
//!   the loop constants.
//!
//! Storing the carries and recomputing the body, rather than storing every intermediate
//! of every iteration, costs one more evaluation of the body per iteration and keeps the
//! memory at `T` times the carries (what `jax.checkpoint` around a `scan` body does).
//! Nested loops follow: the recomputed body stacks its own inner loops' carries.
//!
//! # Non-differentiable values
//!
//! An integer or bool value computed from a differentiated parameter (by `argmax`, a
//! comparison, a conversion) has no derivative. Using it as an index or a predicate is
//! fine: its rule sends nothing to it. Converting it back to `f32` on the way to the
//! result is not: the conversion's rule refuses, and [`value_and_grad`] reports the
//! primitive that made the integer from floats ([`GradError`]), which the elaborator
//! points at in the source. JAX silently differentiates such a path as zero; podc asks
//! the user to say so with `stop_gradient`.

use std::collections::HashMap;

use crate::array::{ArrayTy, DType};
use crate::ir::build::Builder;
use crate::ir::verify::verify;
use crate::ir::{Eqn, Func, Graph, Op, Var};
use crate::prims::derivative::{NotDifferentiable, binary, full_like, index, zeros};
use crate::prims::{BinaryOp, DynamicSlice, DynamicUpdateSlice, Prim, Reshape};

/// Why a function cannot be differentiated.
#[derive(Clone, Debug, PartialEq)]
pub enum GradError {
    /// The result depends, through a derivative, on a value that has none: `at`, a
    /// value of the differentiated function, is the result of `prim`, which made an
    /// integer or bool from values that depend on a differentiated parameter (or, when
    /// that primitive cannot be found, the conversion of such a value back to `f32`).
    NotDifferentiable {
        /// The primitive whose result has no derivative.
        prim: Box<Prim>,
        /// Its result, a value of the function given to [`value_and_grad`].
        at: Var,
    },
}

/// `f` and its gradient with respect to the parameters flagged in `wrt`.
///
/// `f`'s first result is an `f32` scalar, the loss; any others are auxiliary values that
/// come back as they are (JAX's `has_aux`). The flagged parameters are `f32`. The
/// returned function has `f`'s parameters; its results are `f`'s results, then the
/// gradient of the loss with respect to each flagged parameter, in order (of the
/// parameter's type).
pub fn value_and_grad(f: &Func, wrt: &[bool]) -> Result<Func, GradError> {
    assert_eq!(wrt.len(), f.graph.params.len(), "value_and_grad: one flag per parameter of {}", f.name);
    let Some((&result, aux)) = f.graph.results.split_first() else {
        panic!("value_and_grad: {} must have a result", f.name);
    };
    assert_eq!(f.ty(result), &ArrayTy::scalar(DType::F32), "value_and_grad: {} must return an f32 scalar", f.name);
    let mut cx = Grad::new(f);
    let mut b = Builder::new();
    let params: Vec<Var> = f.graph.params.iter().map(|&p| b.fresh(f.ty(p).clone())).collect();
    for ((&p, &new), &d) in f.graph.params.iter().zip(&params).zip(wrt) {
        assert!(!d || f.ty(p).dtype == DType::F32, "value_and_grad: a differentiated parameter must be f32");
        cx.varied[p.0 as usize] = d;
        cx.set(p, new);
    }
    cx.vary(&f.graph.eqns);
    cx.forward(&mut b, &f.graph.eqns, true);
    let value = cx.get(result);
    let mut cts = HashMap::new();
    if cx.is_varied(result) {
        let one = full_like(&mut b, 1.0, value);
        cts.insert(result, one);
    }
    let aux: Vec<Var> = aux.iter().map(|&a| cx.get(a)).collect();
    cx.backward(&mut b, &f.graph.eqns, &mut cts)?;
    let mut results = vec![value];
    results.extend(aux);
    for (&p, _) in f.graph.params.iter().zip(wrt).filter(|(_, d)| **d) {
        let g = match cts.get(&p) {
            Some(&g) => g,
            None => zeros(&mut b, f.ty(p)),
        };
        results.push(g);
    }
    let g = b.finish(&f.name, params, results);
    if cfg!(debug_assertions)
        && let Err(e) = verify(&g)
    {
        panic!("internal compiler error: value_and_grad of @{} does not verify: {e}", f.name);
    }
    Ok(g)
}

// ---------------------------------------------------------------------------------------
// The machinery

/// Differentiation state for one function.
struct Grad<'f> {
    f: &'f Func,
    /// Whether each var of `f` depends on a differentiated parameter. Vars are unique in
    /// the whole function, loop bodies included, so one table serves every graph.
    varied: Vec<bool>,
    /// The value of each var of `f` in the function being built, in the graph being
    /// built (a loop body recomputed backward rebinds its vars).
    primal: Vec<Option<Var>>,
    /// The stacked carries of each differentiated loop, by the loop's first output, as
    /// the forward pass last emitted it.
    stacks: HashMap<Var, Vec<Var>>,
    /// The equation defining each var of `f` (for naming the culprit of an error).
    defs: HashMap<Var, &'f Eqn>,
}

impl<'f> Grad<'f> {
    fn new(f: &'f Func) -> Grad<'f> {
        fn index<'f>(g: &'f Graph, defs: &mut HashMap<Var, &'f Eqn>) {
            for e in &g.eqns {
                for &o in &e.outs {
                    defs.insert(o, e);
                }
                if let Op::Loop { body, .. } = &e.op {
                    index(body, defs);
                }
            }
        }
        let mut defs = HashMap::new();
        index(&f.graph, &mut defs);
        let n = f.types.len();
        Grad { f, varied: vec![false; n], primal: vec![None; n], stacks: HashMap::new(), defs }
    }

    fn is_varied(&self, v: Var) -> bool {
        self.varied[v.0 as usize]
    }

    /// Whether `v` receives a cotangent: it is `f32` and varied.
    fn has_ct(&self, v: Var) -> bool {
        self.is_varied(v) && self.f.ty(v).dtype == DType::F32
    }

    fn get(&self, v: Var) -> Var {
        self.primal[v.0 as usize].unwrap_or_else(|| panic!("grad: %{} used before its definition", v.0))
    }

    fn set(&mut self, v: Var, x: Var) {
        self.primal[v.0 as usize] = Some(x);
    }

    // ----------------------------------------------------------- which values vary

    /// Marks the results of `eqns` that depend on a varied value, their parameters
    /// already marked. A loop's carries are a least fixpoint, as in `vmap`'s analysis:
    /// a carry varies if its initial value does or the body makes it vary.
    fn vary(&mut self, eqns: &[Eqn]) {
        for e in eqns {
            let any = e.args.iter().any(|&a| self.is_varied(a));
            match &e.op {
                // The one primitive defined by its effect on differentiation.
                Op::Prim(Prim::StopGradient(_)) => {}
                Op::Prim(_) => {
                    for &o in &e.outs {
                        self.varied[o.0 as usize] = any;
                    }
                }
                Op::Loop { n_consts, body, .. } => {
                    let (consts, init) = e.args.split_at(*n_consts);
                    let params = &body.params[1..];
                    for (&p, &a) in params.iter().zip(consts.iter().chain(init)) {
                        self.varied[p.0 as usize] = self.is_varied(a);
                    }
                    let carries = &params[*n_consts..];
                    loop {
                        self.vary(&body.eqns);
                        let mut changed = false;
                        for (&p, &r) in carries.iter().zip(&body.results) {
                            if self.is_varied(r) && !self.is_varied(p) {
                                self.varied[p.0 as usize] = true;
                                changed = true;
                            }
                        }
                        if !changed {
                            break;
                        }
                    }
                    for (&o, &p) in e.outs.iter().zip(carries) {
                        self.varied[o.0 as usize] = self.is_varied(p);
                    }
                }
            }
        }
    }

    /// Whether a loop is differentiated: it runs, and a carry varies.
    fn loop_active(&self, e: &Eqn, lo: i64, hi: i64) -> bool {
        hi > lo && e.outs.iter().any(|&o| self.is_varied(o))
    }

    // ----------------------------------------------------------- forward

    /// Emits `eqns` into `b` on the primal values. With `stack`, differentiated loops
    /// also stack their carries: not in a loop body, since the backward loop recomputes
    /// the body, stacking inner loops there.
    fn forward(&mut self, b: &mut Builder, eqns: &[Eqn], stack: bool) {
        for e in eqns {
            let args: Vec<Var> = e.args.iter().map(|&a| self.get(a)).collect();
            let outs = match &e.op {
                Op::Prim(p) => b.prim(p.clone(), &args),
                Op::Loop { lo, hi, n_consts, body } => {
                    let stacked = stack && self.loop_active(e, *lo, *hi);
                    let (outs, stacks) = self.forward_loop(b, (*lo, *hi, *n_consts, body), &args, stacked);
                    if stacked {
                        self.stacks.insert(e.outs[0], stacks);
                    }
                    outs
                }
            };
            for (&o, v) in e.outs.iter().zip(outs) {
                self.set(o, v);
            }
        }
    }

    /// Emits a loop on the primal values and returns its final carries; with `stacked`,
    /// also the carries of every iteration, stacked (`[hi - lo, ...]` each). The body reads
    /// the constants as the outer values they stand for; [`Builder::end_loop`] makes them
    /// loop constants again.
    fn forward_loop(
        &mut self,
        b: &mut Builder,
        (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
        args: &[Var],
        stacked: bool,
    ) -> (Vec<Var>, Vec<Var>) {
        let (consts, init) = args.split_at(n_consts);
        let (index_param, rest) = body.params.split_first().expect("a loop body has an index");
        let (const_params, carry_params) = rest.split_at(n_consts);
        let steps = usize::try_from(hi - lo).unwrap_or(0);
        let stack_tys: Vec<ArrayTy> =
            if stacked { carry_params.iter().map(|&p| stacked_ty(self.f.ty(p), steps)).collect() } else { vec![] };
        let mut inits = init.to_vec();
        for t in &stack_tys {
            inits.push(zeros(b, t));
        }

        b.begin_loop();
        let i = b.fresh(ArrayTy::scalar(DType::I32));
        let carries: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
        let stacks: Vec<Var> = stack_tys.iter().map(|t| b.fresh(t.clone())).collect();
        self.set(*index_param, i);
        for (&p, &c) in const_params.iter().zip(consts) {
            self.set(p, c);
        }
        for (&p, &c) in carry_params.iter().zip(&carries) {
            self.set(p, c);
        }
        self.forward(b, &body.eqns, false);
        let mut yields: Vec<Var> = body.results.iter().map(|&r| self.get(r)).collect();
        if stacked {
            let row = if lo == 0 {
                i
            } else {
                let lo = index(b, lo);
                binary(b, BinaryOp::Sub, i, lo)
            };
            for (&s, &c) in stacks.iter().zip(&carries) {
                yields.push(write_row(b, s, c, row));
            }
        }
        let mut params = vec![i];
        params.extend(carries);
        params.extend(stacks);
        let mut outs = b.end_loop(lo, hi, &inits, params, yields);
        let stacks = outs.split_off(init.len());
        (outs, stacks)
    }

    // ----------------------------------------------------------- backward

    /// The reverse pass over `eqns`: `cts` holds the cotangents of their values so far
    /// (of the graph's results, to start with), and gets those of its parameters.
    fn backward(&mut self, b: &mut Builder, eqns: &[Eqn], cts: &mut HashMap<Var, Var>) -> Result<(), GradError> {
        for e in eqns.iter().rev() {
            match &e.op {
                Op::Prim(p) => {
                    // A varied integer argument still calls the rule: a conversion of one to
                    // f32 is where a derivative is missing.
                    if !e.args.iter().any(|&a| self.is_varied(a)) || !e.outs.iter().any(|o| cts.contains_key(o)) {
                        continue;
                    }
                    let out_cts: Vec<Var> = e
                        .outs
                        .iter()
                        .map(|o| match cts.get(o) {
                            Some(&c) => c,
                            None => zeros(b, self.f.ty(*o)),
                        })
                        .collect();
                    let args: Vec<Var> = e.args.iter().map(|&a| self.get(a)).collect();
                    let outs: Vec<Var> = e.outs.iter().map(|&o| self.get(o)).collect();
                    let arg_cts =
                        p.rules().vjp(b, &args, &outs, &out_cts).map_err(|NotDifferentiable| self.blame(e))?;
                    assert_eq!(
                        arg_cts.len(),
                        e.args.len(),
                        "internal compiler error: the vjp rule of {} gives a wrong number of cotangents",
                        p.rules().name()
                    );
                    for (&a, ct) in e.args.iter().zip(arg_cts) {
                        if let Some(ct) = ct.filter(|_| self.has_ct(a)) {
                            let want = self.f.ty(a);
                            assert!(
                                b.ty(ct) == want,
                                "internal compiler error: the vjp rule of {} gives {} for {want}",
                                p.rules().name(),
                                b.ty(ct)
                            );
                            accumulate(b, cts, a, ct);
                        }
                    }
                }
                Op::Loop { lo, hi, n_consts, body } => self.backward_loop(b, e, (*lo, *hi, *n_consts, body), cts)?,
            }
        }
        Ok(())
    }

    /// The reverse pass of a loop: a loop over the iterations in reverse, each reading
    /// its carries from the stacks, recomputing the body and running its reverse pass.
    fn backward_loop(
        &mut self,
        b: &mut Builder,
        e: &Eqn,
        (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
        cts: &mut HashMap<Var, Var>,
    ) -> Result<(), GradError> {
        let out_cts: Vec<Option<Var>> = e.outs.iter().map(|o| cts.get(o).copied()).collect();
        if out_cts.iter().all(Option::is_none) {
            return Ok(());
        }
        let (consts, init) = e.args.split_at(n_consts);
        if !self.loop_active(e, lo, hi) {
            // A loop that never runs yields its initial carries.
            for (&a, ct) in init.iter().zip(out_cts) {
                if let Some(ct) = ct.filter(|_| self.has_ct(a)) {
                    accumulate(b, cts, a, ct);
                }
            }
            return Ok(());
        }
        let stacks = self.stacks.get(&e.outs[0]).expect("a differentiated loop stacked its carries").clone();
        let (index_param, rest) = body.params.split_first().expect("a loop body has an index");
        let (const_params, carry_params) = rest.split_at(n_consts);
        let ct_carries: Vec<usize> = (0..carry_params.len()).filter(|&k| self.has_ct(carry_params[k])).collect();
        let ct_consts: Vec<usize> = (0..n_consts).filter(|&k| self.has_ct(const_params[k])).collect();
        let mut inits = vec![];
        for &k in &ct_carries {
            inits.push(match out_cts[k] {
                Some(c) => c,
                None => zeros(b, self.f.ty(e.outs[k])),
            });
        }
        for &k in &ct_consts {
            inits.push(zeros(b, self.f.ty(consts[k])));
        }
        let const_vals: Vec<Var> = consts.iter().map(|&c| self.get(c)).collect();

        b.begin_loop();
        let k = b.fresh(ArrayTy::scalar(DType::I32));
        let params: Vec<Var> = inits.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
        let (carry_cts, const_accs) = params.split_at(ct_carries.len());
        // Iteration k of this loop undoes iteration `hi - 1 - k` of the forward one,
        // which is row `T - 1 - k` of the stacks.
        let last_row = index(b, hi - lo - 1);
        let row = binary(b, BinaryOp::Sub, last_row, k);
        let last = index(b, hi - 1);
        let i = binary(b, BinaryOp::Sub, last, k);
        self.set(*index_param, i);
        for (&p, &c) in const_params.iter().zip(&const_vals) {
            self.set(p, c);
        }
        for (&p, &s) in carry_params.iter().zip(&stacks) {
            let c = read_row(b, s, row);
            self.set(p, c);
        }
        self.forward(b, &body.eqns, true);
        let mut body_cts = HashMap::new();
        for (&k, &ct) in ct_carries.iter().zip(carry_cts) {
            let r = body.results[k];
            if self.has_ct(r) {
                accumulate(b, &mut body_cts, r, ct);
            }
        }
        self.backward(b, &body.eqns, &mut body_cts)?;
        let mut yields = vec![];
        for &k in &ct_carries {
            let p = carry_params[k];
            yields.push(match body_cts.get(&p) {
                Some(&c) => c,
                None => zeros(b, self.f.ty(p)),
            });
        }
        for (&k, &acc) in ct_consts.iter().zip(const_accs) {
            yields.push(match body_cts.get(&const_params[k]) {
                Some(&c) => binary(b, BinaryOp::Add, acc, c),
                None => acc,
            });
        }
        let mut loop_params = vec![k];
        loop_params.extend_from_slice(&params);
        let steps = hi - lo;
        let outs = b.end_loop(0, steps, &inits, loop_params, yields);

        let (init_cts, const_cts) = outs.split_at(ct_carries.len());
        for (&k, &ct) in ct_carries.iter().zip(init_cts) {
            if self.has_ct(init[k]) {
                accumulate(b, cts, init[k], ct);
            }
        }
        for (&k, &ct) in ct_consts.iter().zip(const_cts) {
            accumulate(b, cts, consts[k], ct);
        }
        Ok(())
    }

    /// The error for equation `e`, whose rule refused: names the primitive that made an
    /// integer or bool from varied floats, found by walking back from `e` through the
    /// varied integer and bool values it reads; `e` itself if that walk leaves the graph.
    fn blame(&self, e: &'f Eqn) -> GradError {
        let culprit = |e: &'f Eqn| GradError::NotDifferentiable {
            prim: match &e.op {
                Op::Prim(p) => Box::new(p.clone()),
                Op::Loop { .. } => unreachable!("only primitives are blamed"),
            },
            at: e.outs[0],
        };
        let mut cur = e;
        loop {
            let from_floats = |e: &Eqn| e.args.iter().any(|&a| self.has_ct(a));
            let next = cur
                .args
                .iter()
                .filter(|&&a| self.is_varied(a) && self.f.ty(a).dtype != DType::F32)
                .filter_map(|a| self.defs.get(a).copied())
                .find(|d| matches!(d.op, Op::Prim(_)));
            match next {
                Some(d) if from_floats(d) => return culprit(d),
                Some(d) => cur = d,
                None => return culprit(e),
            }
        }
    }
}

/// Adds `ct` to the cotangent of `v`.
fn accumulate(b: &mut Builder, cts: &mut HashMap<Var, Var>, v: Var, ct: Var) {
    let sum = match cts.get(&v) {
        Some(&prev) => binary(b, BinaryOp::Add, prev, ct),
        None => ct,
    };
    cts.insert(v, sum);
}

/// `ty` with a leading dimension of `steps`: one row per iteration.
fn stacked_ty(ty: &ArrayTy, steps: usize) -> ArrayTy {
    let mut shape = vec![steps];
    shape.extend_from_slice(&ty.shape);
    ArrayTy::new(ty.dtype, shape)
}

/// `stack` with row `row` (an i32 scalar) replaced by `x`.
fn write_row(b: &mut Builder, stack: Var, x: Var, row: Var) -> Var {
    let mut shape = vec![1];
    shape.extend_from_slice(&b.ty(x).shape);
    let x = b.prim1(Prim::Reshape(Reshape { shape }), &[x]);
    let mut args = vec![stack, x, row];
    let zero = index(b, 0);
    args.extend(std::iter::repeat_n(zero, b.ty(stack).rank() - 1));
    b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &args)
}

/// Row `row` (an i32 scalar) of `stack`.
fn read_row(b: &mut Builder, stack: Var, row: Var) -> Var {
    let shape = b.ty(stack).shape.clone();
    let mut sizes = shape.clone();
    sizes[0] = 1;
    let mut args = vec![stack, row];
    let zero = index(b, 0);
    args.extend(std::iter::repeat_n(zero, shape.len() - 1));
    let r = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes }), &args);
    b.prim1(Prim::Reshape(Reshape { shape: shape[1..].to_vec() }), &[r])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::Array;
    use crate::ir::eval::eval_func;
    use crate::ir::print::print_func;
    use crate::prims::ReduceOp;
    use crate::prims::derivative::mul;

    fn f32t(shape: &[usize]) -> ArrayTy {
        ArrayTy::new(DType::F32, shape.to_vec())
    }

    /// `for i in 1..4 { h = h * w }`, returning `sum(h)`: `h` a carry, `w` a constant.
    fn power() -> Func {
        let mut b = Builder::new();
        let (h0, w) = (b.fresh(f32t(&[2])), b.fresh(f32t(&[2])));
        b.begin_loop();
        let i = b.fresh(ArrayTy::scalar(DType::I32));
        let h = b.fresh(f32t(&[2]));
        let next = mul(&mut b, h, w);
        let out = b.end_loop(1, 4, &[h0], vec![i, h], vec![next])[0];
        let s = b.prim1(Prim::Reduce(crate::prims::Reduce { op: ReduceOp::Sum, axes: vec![0] }), &[out]);
        b.finish("power", vec![h0, w], vec![s])
    }

    /// The forward loop stacks its carry into `f32[3, 2]` at `i - 1`; the backward loop
    /// runs 3 iterations reading row `2 - k`, the carry's cotangent and the constant's
    /// accumulated cotangent as its carries.
    #[test]
    fn a_loop_stacks_its_carries_and_runs_backwards() {
        let g = value_and_grad(&power(), &[true, true]).expect("differentiable");
        insta::assert_snapshot!(print_func(&g));
        // h0 * w^3, summed: d/dh0 = w^3, d/dw = 3 h0 w^2.
        let out = eval_func(&g, &[Array::f32(vec![2], vec![1.0, 2.0]), Array::f32(vec![2], vec![2.0, -1.0])]);
        assert_eq!(out[0], Array::f32(vec![], vec![8.0 - 2.0]));
        assert_eq!(out[1], Array::f32(vec![2], vec![8.0, -1.0]));
        assert_eq!(out[2], Array::f32(vec![2], vec![12.0, 6.0]));
    }

    /// Differentiating with respect to `w` alone: the carry does not vary initially but
    /// does from the first iteration on (a fixpoint, as `vmap`'s), so the gradient flows.
    #[test]
    fn carries_vary_through_the_body() {
        let f = power();
        let mut cx = Grad::new(&f);
        cx.varied[f.graph.params[1].0 as usize] = true;
        cx.vary(&f.graph.eqns);
        let Op::Loop { body, .. } = &f.graph.eqns[0].op else { panic!("a loop first") };
        assert!(cx.is_varied(body.params[2]) && cx.is_varied(f.graph.results[0]));
        let g = value_and_grad(&f, &[false, true]).expect("differentiable");
        let out = eval_func(&g, &[Array::f32(vec![2], vec![1.0, 2.0]), Array::f32(vec![2], vec![2.0, -1.0])]);
        assert_eq!(out[1..], [Array::f32(vec![2], vec![12.0, 6.0])]);
    }
}
