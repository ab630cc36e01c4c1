//! Automatic batching: `vmap(f)` computes `f` on a batch of examples at once, as
//! `jax.vmap` does (JAX's `interpreters/batching.py`).
//!
//! # Batched values
//!
//! While batching, every value of the original function stands for a [`BVal`]: a var of
//! the batched function and the position of its batch axis, or `None` when the value is
//! the same for every example (JAX's `not_mapped`). An unbatched value keeps its original
//! type; a batched one has one more dimension, of the batch size, at `axis`. Values stay
//! unbatched as long as they can, which is what keeps the result cheap: constants, iotas
//! and whatever is computed from unbatched parameters alone are computed once, not once
//! per example.
//!
//! The batch axis is wherever the rule that produced the value found it convenient, not
//! necessarily 0: a static slice leaves it in place, a reduction or a dot puts it where
//! the remaining dimensions land. A rule that needs it elsewhere moves it ([`bdim_at`],
//! one transpose), so no data moves unless something needs it to. Two places fix it at
//! 0: the results of [`vmap`] (as `jax.vmap` with `out_axes=0`) and loop carries (below).
//!
//! # Machinery and rules
//!
//! [`batch_into`] walks a graph in order. An equation whose arguments are all unbatched
//! is copied unchanged. Otherwise the primitive's batching rule, [`Rules::batch`] in its
//! family's file, emits the batched computation; [`vectorized`] and [`broadcasting`] make
//! the elementwise rules one line each, as JAX's `defvectorized` and `defbroadcasting`
//! do. The machinery checks every rule's results against the original types, so a wrong
//! rule fails where it runs rather than in a later pass.
//!
//! A run-time index that differs per example is the case that needs a primitive of its
//! own: as in JAX, a `dynamic_slice` or `dynamic_update_slice` at batched starts becomes
//! a gather or a scatter (`prims/indexing.rs`, `prims/gather.rs`), which read each
//! example's window where it is. (One-hot masks built from the starts would do the same
//! with elementwise operations only, but XLA then recomputes the starts, with everything
//! they are computed from, for every element of the masks.)
//!
//! [`Rules::batch`]: crate::prims::Rules::batch
//!
//! # Loops
//!
//! A carry has one type in every iteration, so a batched carry is batched at axis 0 from
//! its initial value to its final one. Which carries are batched does not follow from the
//! initial values alone: in `for i in 0..n { s = s + x }` with `s` starting unbatched and
//! `x` batched, `s` is batched from the second iteration on. So, as in JAX's batching rule
//! for `scan`, the assignment is a fixpoint: start from the batched initial values, add
//! every carry the body makes batched under the current assignment, repeat until nothing
//! changes (`carries_batched`, a cheap analysis that emits nothing; carries only ever
//! join, so it takes at most one round per carry). The body is then batched once under the
//! final assignment, with unbatched initial values and yields of batched carries
//! broadcast. Loop constants never change, so each stays as it comes, batched or not, its
//! batch axis wherever it is. The trip count stays static: every example runs the same
//! iterations.

use std::collections::HashSet;

use crate::array::{ArrayTy, DType};
use crate::ir::build::Builder;
use crate::ir::verify::verify;
use crate::ir::{Eqn, Func, Graph, Op, Var};
use crate::prims::Prim;
use crate::prims::batching::{BVal, batched_ty, bdim_at};

/// Batches `f` over `size` examples.
///
/// `batched[k]` says whether parameter `k` gets a leading batch axis of length `size`
/// (one value per example) or keeps its type (one value shared by all). Every result of
/// the batched function has a leading batch axis; a result that does not depend on the
/// batched parameters is broadcast.
pub fn vmap(f: &Func, batched: &[bool], size: usize) -> Func {
    assert_eq!(batched.len(), f.graph.params.len(), "vmap: one flag per parameter of {}", f.name);
    let mut b = Builder::new();
    let params: Vec<BVal> = f
        .graph
        .params
        .iter()
        .zip(batched)
        .map(|(&p, &is_batched)| {
            if is_batched {
                BVal::batched(b.fresh(batched_ty(f.ty(p), 0, size)), 0)
            } else {
                BVal::unbatched(b.fresh(f.ty(p).clone()))
            }
        })
        .collect();
    let outs = batch_into(&mut b, f, &params, size);
    let results = outs.into_iter().map(|o| bdim_at(&mut b, o, 0, size)).collect();
    let g = b.finish(&f.name, params.iter().map(|p| p.var).collect(), results);
    if cfg!(debug_assertions)
        && let Err(e) = verify(&g)
    {
        panic!("internal compiler error: vmap of @{} does not verify: {e}", f.name);
    }
    g
}

/// Emits `f`'s computation on batched arguments into `b` and returns its results, each
/// with its batch axis wherever the computation left it (use [`bdim_at`] to place it).
///
/// This is [`vmap`] without the new function around it, for callers that build the
/// batched computation into a function of their own. `size` is the batch size of the
/// batched arguments; it is needed to broadcast unbatched values (loop carries that
/// become batched), even when no argument is batched.
pub fn batch_into(b: &mut Builder, f: &Func, args: &[BVal], size: usize) -> Vec<BVal> {
    assert_eq!(args.len(), f.graph.params.len(), "batch_into: one argument per parameter of {}", f.name);
    let mut cx = Batcher { f, env: vec![None; f.types.len()], size };
    for (&p, &a) in f.graph.params.iter().zip(args) {
        cx.set(p, a);
    }
    cx.eqns(b, &f.graph.eqns);
    f.graph.results.iter().map(|&r| cx.get(r)).collect()
}

// ---------------------------------------------------------------------------------------
// The machinery

/// Batching state for one function.
struct Batcher<'f> {
    f: &'f Func,
    /// The batched value of each var of `f`, once it is defined. Vars are unique in the
    /// whole function, loop bodies included, so one table serves every graph.
    env: Vec<Option<BVal>>,
    size: usize,
}

impl Batcher<'_> {
    fn get(&self, v: Var) -> BVal {
        self.env[v.0 as usize].unwrap_or_else(|| panic!("vmap: %{} used before its definition", v.0))
    }

    fn set(&mut self, v: Var, x: BVal) {
        self.env[v.0 as usize] = Some(x);
    }

    fn eqns(&mut self, b: &mut Builder, eqns: &[Eqn]) {
        for e in eqns {
            let args: Vec<BVal> = e.args.iter().map(|&a| self.get(a)).collect();
            match &e.op {
                Op::Prim(p) => self.prim(b, p, &args, &e.outs),
                Op::Loop { lo, hi, n_consts, body } => self.batch_loop(b, (*lo, *hi, *n_consts, body), &args, &e.outs),
            }
        }
    }

    fn prim(&mut self, b: &mut Builder, p: &Prim, args: &[BVal], outs: &[Var]) {
        let results = if args.iter().any(BVal::is_batched) {
            p.rules().batch(b, args)
        } else {
            let vars: Vec<Var> = args.iter().map(|a| a.var).collect();
            b.prim(p.clone(), &vars).into_iter().map(BVal::unbatched).collect()
        };
        let name = p.rules().name();
        assert_eq!(
            results.len(),
            outs.len(),
            "internal compiler error: the batching rule of {name} gives a wrong number of results"
        );
        for (&o, x) in outs.iter().zip(results) {
            let want = match x.axis {
                Some(axis) => batched_ty(self.f.ty(o), axis, self.size),
                None => self.f.ty(o).clone(),
            };
            let got = b.ty(x.var);
            assert!(
                *got == want,
                "internal compiler error: the batching rule of {name} gives {got} (batch axis {:?}) for {}",
                x.axis,
                self.f.ty(o)
            );
            self.set(o, x);
        }
    }

    /// Batches a loop: finds which carries are batched, brings those to axis 0, and
    /// batches the body once under that assignment. The body reads the constants as the
    /// outer values they stand for; [`Builder::end_loop`] turns those back into loop
    /// constants, keeping only the ones still used.
    fn batch_loop(
        &mut self,
        b: &mut Builder,
        (lo, hi, n_consts, body): (i64, i64, usize, &Graph),
        args: &[BVal],
        outs: &[Var],
    ) {
        let (consts, init) = args.split_at(n_consts);
        let consts_batched: Vec<bool> = consts.iter().map(BVal::is_batched).collect();
        let init_batched: Vec<bool> = init.iter().map(BVal::is_batched).collect();
        let carried = carries_batched(body, &consts_batched, &init_batched);
        let size = self.size;
        let place = |b: &mut Builder, x: BVal, batched: bool| {
            if batched {
                bdim_at(b, x, 0, size)
            } else {
                assert!(!x.is_batched(), "vmap: the carry analysis missed a batched carry");
                x.var
            }
        };
        let init: Vec<Var> = init.iter().zip(&carried).map(|(&x, &c)| place(b, x, c)).collect();
        let axis = |c: bool| c.then_some(0);

        b.begin_loop();
        let i = b.fresh(ArrayTy::scalar(DType::I32));
        let carries: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
        let (index, rest) = body.params.split_first().expect("a loop body has an index");
        let (const_params, carry_params) = rest.split_at(n_consts);
        self.set(*index, BVal::unbatched(i));
        for (&p, &c) in const_params.iter().zip(consts) {
            self.set(p, c);
        }
        for ((&p, &v), &c) in carry_params.iter().zip(&carries).zip(&carried) {
            self.set(p, BVal { var: v, axis: axis(c) });
        }
        self.eqns(b, &body.eqns);
        let yields: Vec<Var> = body.results.iter().zip(&carried).map(|(&r, &c)| place(b, self.get(r), c)).collect();
        let mut params = vec![i];
        params.extend(carries);
        let finals = b.end_loop(lo, hi, &init, params, yields);

        for ((&o, v), &c) in outs.iter().zip(finals).zip(&carried) {
            self.set(o, BVal { var: v, axis: axis(c) });
        }
    }
}

/// Which carries of a loop are batched, given which constants and initial values are:
/// the least fixpoint of "batched initially, or yielded batched by the body".
fn carries_batched(body: &Graph, consts: &[bool], init: &[bool]) -> Vec<bool> {
    let mut carried = init.to_vec();
    loop {
        let mut params = vec![false];
        params.extend_from_slice(consts);
        params.extend_from_slice(&carried);
        let yielded = results_batched(body, &params);
        let next: Vec<bool> = carried.iter().zip(&yielded).map(|(&c, &y)| c || y).collect();
        if next == carried {
            return carried;
        }
        carried = next;
    }
}

/// Which results of `g` are batched when its parameters are as `params` says.
///
/// A primitive's results count as batched when any argument is. That is what every
/// batching rule does, except where a result happens not to depend on a batched
/// argument (a dynamic slice that takes a whole dimension at a batched start): then the
/// analysis says batched where the rule says not, and a carry is batched (broadcast) a
/// little early, which is correct, only less lean.
fn results_batched(g: &Graph, params: &[bool]) -> Vec<bool> {
    let mut batched: HashSet<Var> = g.params.iter().zip(params).filter(|(_, b)| **b).map(|(&p, _)| p).collect();
    for e in &g.eqns {
        let args: Vec<bool> = e.args.iter().map(|a| batched.contains(a)).collect();
        let outs = match &e.op {
            Op::Prim(_) => vec![args.contains(&true); e.outs.len()],
            Op::Loop { n_consts, body, .. } => {
                let (consts, init) = args.split_at(*n_consts);
                carries_batched(body, consts, init)
            }
        };
        batched.extend(e.outs.iter().zip(outs).filter(|(_, b)| *b).map(|(&o, _)| o));
    }
    g.results.iter().map(|r| batched.contains(r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::{Array, Data};
    use crate::ir::eval::eval_func;
    use crate::ir::print::print_func;
    use crate::prims::{Binary, BinaryOp, Constant, DynamicUpdateSlice, Unary, UnaryOp};

    fn f32t(shape: &[usize]) -> ArrayTy {
        ArrayTy::new(DType::F32, shape.to_vec())
    }

    fn i32s() -> ArrayTy {
        ArrayTy::scalar(DType::I32)
    }

    fn add(b: &mut Builder, x: Var, y: Var) -> Var {
        b.prim1(Prim::Binary(Binary { op: BinaryOp::Add }), &[x, y])
    }

    /// `for _ in 0..4 { (p, q, r) = (p + x, p, q) }`, returning `(r, q, p)`.
    fn chain() -> Func {
        let mut b = Builder::new();
        let params: Vec<Var> = (0..4).map(|_| b.fresh(f32t(&[2]))).collect();
        let (x, init) = (params[0], &params[1..]);
        b.begin_loop();
        let i = b.fresh(i32s());
        let c: Vec<Var> = (0..3).map(|_| b.fresh(f32t(&[2]))).collect();
        let p2 = add(&mut b, c[0], x);
        let outs = b.end_loop(0, 4, init, vec![i, c[0], c[1], c[2]], vec![p2, c[0], c[1]]);
        b.finish("chain", params, vec![outs[2], outs[1], outs[0]])
    }

    /// The body of the first loop of `f`.
    fn first_loop(f: &Func) -> (&Eqn, &Graph, usize) {
        let e = f.graph.eqns.iter().find(|e| matches!(e.op, Op::Loop { .. })).expect("a loop");
        let Op::Loop { body, n_consts, .. } = &e.op else { unreachable!("found a loop") };
        (e, body, *n_consts)
    }

    /// A batched constant reaches the third carry only on the third round.
    #[test]
    fn carries_join_the_batch_through_the_body() {
        let f = chain();
        let (_, body, _) = first_loop(&f);
        assert_eq!(carries_batched(body, &[true], &[false, false, false]), [true, true, true]);
        assert_eq!(carries_batched(body, &[false], &[false, false, false]), [false, false, false]);
        assert_eq!(carries_batched(body, &[false], &[false, true, false]), [false, true, true]);
    }

    #[test]
    fn a_batched_loop_keeps_its_trip_count_and_carries_the_batch_in_front() {
        let g = vmap(&chain(), &[true, false, false, false], 5);
        let (e, body, n_consts) = first_loop(&g);
        assert!(matches!(e.op, Op::Loop { lo: 0, hi: 4, .. }));
        assert_eq!(n_consts, 1);
        for &c in &body.params[1..] {
            assert_eq!(g.ty(c), &f32t(&[5, 2]));
        }
        let x = Array::f32(vec![5, 2], (0..10).map(|k| k as f32).collect());
        let z = Array::f32(vec![2], vec![0.5, -1.0]);
        let out = eval_func(&g, &[x, z.clone(), z.clone(), z]);
        // r = p after two steps = z + 2x, per example
        let Data::F32(r) = &out[0].data else { panic!("f32") };
        assert_eq!(r[..4], [0.5, 1.0, 4.5, 5.0]);
    }

    /// Values that do not depend on a batched parameter are computed once, unbatched.
    #[test]
    fn unbatched_values_stay_unbatched() {
        let mut b = Builder::new();
        let (x, w) = (b.fresh(f32t(&[3])), b.fresh(f32t(&[3])));
        let e = b.prim1(Prim::Unary(Unary { op: UnaryOp::Exp }), &[w]);
        let y = add(&mut b, x, e);
        let f = b.finish("f", vec![x, w], vec![y, e]);
        let g = vmap(&f, &[true, false], 4);
        let exp = g.graph.eqns.iter().find(|e| matches!(&e.op, Op::Prim(Prim::Unary(_)))).expect("exp");
        assert_eq!(g.ty(exp.outs[0]), &f32t(&[3]));
        // Every result is batched: the unbatched one is broadcast.
        assert_eq!(g.result_types(), [f32t(&[4, 3]), f32t(&[4, 3])]);
    }

    /// `obs.set([y, x], 1.0)` with a batch of `(y, x)`, the common write of an RL
    /// environment, becomes one scatter into a copy of `obs` per example.
    #[test]
    fn a_batched_cell_write_is_a_scatter() {
        let mut b = Builder::new();
        let (obs, y, x) = (b.fresh(f32t(&[3, 4])), b.fresh(i32s()), b.fresh(i32s()));
        let one = b.prim1(Prim::Constant(Constant { value: Array::f32(vec![1, 1], vec![1.0]) }), &[]);
        let out = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[obs, one, y, x]);
        let f = b.finish("set_cell", vec![obs, y, x], vec![out]);
        let g = vmap(&f, &[false, true, true], 2);
        insta::assert_snapshot!(print_func(&g));

        let zeros = Array::f32(vec![3, 4], vec![0.0; 12]);
        let out = eval_func(&g, &[zeros, Array::i32(vec![2], vec![0, 9]), Array::i32(vec![2], vec![1, 2])]);
        let mut want = vec![0.0; 24];
        want[1] = 1.0; // example 0: (0, 1)
        want[12 + 2 * 4 + 2] = 1.0; // example 1: (9, 2), the row clamped to 2
        assert_eq!(out[0], Array::f32(vec![2, 3, 4], want));
    }

    /// `obs[y, x]` with a batch of `(y, x)`, `x` shared: one gather, each example
    /// reading its own `obs`.
    #[test]
    fn a_batched_cell_read_is_a_gather() {
        let mut b = Builder::new();
        let (obs, y, x) = (b.fresh(f32t(&[3, 4])), b.fresh(i32s()), b.fresh(i32s()));
        let out = b.prim1(Prim::DynamicSlice(crate::prims::DynamicSlice { sizes: vec![1, 1] }), &[obs, y, x]);
        let f = b.finish("get_cell", vec![obs, y, x], vec![out]);
        let g = vmap(&f, &[true, true, false], 2);
        insta::assert_snapshot!(print_func(&g));

        let obs = Array::f32(vec![2, 3, 4], (0..24).map(|k| k as f32).collect());
        let out = eval_func(&g, &[obs, Array::i32(vec![2], vec![-1, 1]), Array::i32(vec![], vec![3])]);
        assert_eq!(out[0], Array::f32(vec![2, 1, 1], vec![3.0, 12.0 + 4.0 + 3.0]));
    }
}
