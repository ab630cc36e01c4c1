//! Snapshot tests of the IR printer and the StableHLO lowering, on small hand-built
//! functions ([`fixtures`]) that together exercise every kind of lowering: plain ops,
//! regions (reduce, argmax, scatter), NaN-propagating max, dynamic indexing, gather and
//! scatter, and loops with constants and carries, nested. Review a changed snapshot by reading it: the text is
//! what the plugin compiles. (`tests/compiler/prims.rs` runs lowered code on the device.)

use crate::array::{Array, ArrayTy, DType};
use crate::ir::eval::eval_func;
use crate::ir::print::print_func;
use crate::ir::verify::verify;
use crate::ir::{Eqn, Func, Graph, Op, Var};
use crate::lower::lower_module;
use crate::prims::*;

/// A minimal function builder for hand-written test IR.
#[derive(Default)]
pub(crate) struct Fb {
    pub(crate) types: Vec<ArrayTy>,
    /// Equation lists of the graphs being built; the last is innermost.
    frames: Vec<Vec<Eqn>>,
}

impl Fb {
    pub(crate) fn new() -> Fb {
        Fb { types: vec![], frames: vec![vec![]] }
    }

    pub(crate) fn fresh(&mut self, ty: ArrayTy) -> Var {
        self.types.push(ty);
        Var(self.types.len() as u32 - 1)
    }

    /// Appends `prim(args)`, typed by the primitive's own rule.
    pub(crate) fn prim(&mut self, prim: Prim, args: &[Var]) -> Var {
        let tys: Vec<ArrayTy> = args.iter().map(|v| self.types[v.0 as usize].clone()).collect();
        let outs = prim.rules().infer(&tys).unwrap_or_else(|e| panic!("fixture does not type: {e}"));
        let outs: Vec<Var> = outs.into_iter().map(|t| self.fresh(t)).collect();
        self.push(Eqn { outs: outs.clone(), op: Op::Prim(prim), args: args.to_vec() });
        outs[0]
    }

    pub(crate) fn push(&mut self, e: Eqn) {
        self.frames.last_mut().expect("a frame").push(e);
    }

    /// Starts a loop body; [`Fb::end_loop`] closes it.
    pub(crate) fn begin_loop(&mut self) {
        self.frames.push(vec![]);
    }

    /// Closes the innermost body (params `[i, consts.., carries..]`) and appends the
    /// loop over `args` (`consts ++ init`).
    pub(crate) fn end_loop(
        &mut self,
        (lo, hi, n_consts): (i64, i64, usize),
        params: Vec<Var>,
        yields: Vec<Var>,
        args: &[Var],
    ) -> Vec<Var> {
        let eqns = self.frames.pop().expect("a loop frame");
        let outs: Vec<Var> = yields.iter().map(|v| self.fresh(self.types[v.0 as usize].clone())).collect();
        let body = Graph { params, eqns, results: yields };
        self.push(Eqn { outs: outs.clone(), op: Op::Loop { lo, hi, n_consts, body }, args: args.to_vec() });
        outs
    }

    pub(crate) fn finish(mut self, name: &str, params: Vec<Var>, results: Vec<Var>) -> Func {
        let eqns = self.frames.pop().expect("the top frame");
        Func { name: name.to_string(), graph: Graph { params, eqns, results }, types: self.types }
    }
}

fn f32t(shape: &[usize]) -> ArrayTy {
    ArrayTy::new(DType::F32, shape.to_vec())
}

fn i32s() -> ArrayTy {
    ArrayTy::scalar(DType::I32)
}

fn bin(op: BinaryOp) -> Prim {
    Prim::Binary(Binary { op })
}

/// `dot`, a sum over a row, and the argmax of each row.
fn dense_layer() -> Func {
    let mut b = Fb::new();
    let x = b.fresh(f32t(&[2, 3]));
    let w = b.fresh(f32t(&[3, 4]));
    let y = b.prim(
        Prim::Dot(Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![1], rhs_contract: vec![0] }),
        &[x, w],
    );
    let s = b.prim(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes: vec![1] }), &[y]);
    let m = b.prim(Prim::Argmax(Argmax { axis: 1 }), &[y]);
    b.finish("dense_layer", vec![x, w], vec![s, m])
}

/// A weight gradient over `[T, B, H]` activations (what `grad` of a `vmap` of a `vmap`
/// makes): both operands are reshaped so that XLA sees one contracting dimension.
fn weight_gradient() -> Func {
    let mut b = Fb::new();
    let x = b.fresh(f32t(&[2, 3, 4]));
    let g = b.fresh(f32t(&[2, 3, 5]));
    let y = b.prim(
        Prim::Dot(Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![0, 1], rhs_contract: vec![0, 1] }),
        &[x, g],
    );
    b.finish("weight_gradient", vec![x, g], vec![y])
}

/// Elementwise ops of every kind, NaN-propagating max among them.
fn elementwise() -> Func {
    let mut b = Fb::new();
    let x = b.fresh(f32t(&[3]));
    let n = b.fresh(ArrayTy::new(DType::I32, vec![3]));
    let half = b.prim(Prim::Constant(Constant { value: Array::f32(vec![], vec![0.5]) }), &[]);
    let half3 = b.prim(Prim::Broadcast(Broadcast { shape: vec![3], dims: vec![] }), &[half]);
    let e = b.prim(Prim::Unary(Unary { op: UnaryOp::Exp }), &[x]);
    let m = b.prim(bin(BinaryOp::Max), &[e, half3]);
    let nf = b.prim(Prim::Convert(Convert { to: DType::F32 }), &[n]);
    let lt = b.prim(Prim::Compare(Compare { op: CmpOp::Lt }), &[nf, m]);
    let sel = b.prim(Prim::Select(Select), &[lt, nf, m]);
    let k = b.prim(Prim::Iota(Iota { ty: ArrayTy::new(DType::I32, vec![3]), dim: 0 }), &[]);
    let sh = b.prim(bin(BinaryOp::ShiftLeft), &[n, k]);
    let nan = b.prim(Prim::Constant(Constant { value: Array::f32(vec![2], vec![f32::NAN, -0.0]) }), &[]);
    b.finish("elementwise", vec![x, n], vec![sel, sh, nan])
}

/// Writes a window, then reads one back, both at run-time offsets.
fn dynamic_indexing() -> Func {
    let mut b = Fb::new();
    let grid = b.fresh(f32t(&[4, 4]));
    let upd = b.fresh(f32t(&[2, 2]));
    let r = b.fresh(i32s());
    let c = b.fresh(i32s());
    let g2 = b.prim(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[grid, upd, r, c]);
    let win = b.prim(Prim::DynamicSlice(DynamicSlice { sizes: vec![2, 2] }), &[g2, c, r]);
    let row = b.prim(Prim::Slice(Slice { start: vec![1, 0], limit: vec![2, 4] }), &[g2]);
    let t = b.prim(Prim::Transpose(Transpose { perm: vec![1, 0] }), &[win]);
    let flat = b.prim(Prim::Reshape(Reshape { shape: vec![4] }), &[t]);
    let row = b.prim(Prim::Reshape(Reshape { shape: vec![4] }), &[row]);
    let both = b.prim(Prim::Concat(Concat { axis: 0 }), &[flat, row]);
    b.finish("dynamic_indexing", vec![grid, upd, r, c], vec![g2, both])
}

/// A window of each example's grid read at its own start (a batching dimension), then
/// written back at the same start, clamped (the scatter's starts are clamped first).
fn gather_scatter() -> Func {
    let mut b = Fb::new();
    let grid = b.fresh(f32t(&[2, 4, 4]));
    let starts = b.fresh(ArrayTy::new(DType::I32, vec![2, 2]));
    let win = b.prim(
        Prim::Gather(Gather {
            offset_dims: vec![1, 2],
            collapsed_slice_dims: vec![],
            operand_batching_dims: vec![0],
            indices_batching_dims: vec![0],
            start_index_map: vec![1, 2],
            slice_sizes: vec![1, 2, 2],
        }),
        &[grid, starts],
    );
    let neg = b.prim(Prim::Unary(Unary { op: UnaryOp::Neg }), &[win]);
    let out = b.prim(
        Prim::Scatter(Scatter {
            update_window_dims: vec![1, 2],
            inserted_window_dims: vec![],
            operand_batching_dims: vec![0],
            indices_batching_dims: vec![0],
            scatter_dims_to_operand_dims: vec![1, 2],
        }),
        &[grid, starts, neg],
    );
    b.finish("gather_scatter", vec![grid, starts], vec![win, out])
}

/// `for i in 2..12 { acc += x * f32(i); n += 1 }` with `x` a loop constant.
fn loop_with_consts() -> Func {
    let mut b = Fb::new();
    let x = b.fresh(f32t(&[3]));
    let acc0 = b.fresh(f32t(&[3]));
    let n0 = b.fresh(i32s());
    b.begin_loop();
    let i = b.fresh(i32s());
    let xc = b.fresh(f32t(&[3]));
    let acc = b.fresh(f32t(&[3]));
    let n = b.fresh(i32s());
    let fi = b.prim(Prim::Convert(Convert { to: DType::F32 }), &[i]);
    let fi3 = b.prim(Prim::Broadcast(Broadcast { shape: vec![3], dims: vec![] }), &[fi]);
    let t = b.prim(bin(BinaryOp::Mul), &[xc, fi3]);
    let acc2 = b.prim(bin(BinaryOp::Add), &[acc, t]);
    let one = b.prim(Prim::Constant(Constant { value: Array::i32(vec![], vec![1]) }), &[]);
    let n2 = b.prim(bin(BinaryOp::Add), &[n, one]);
    let outs = b.end_loop((2, 12, 1), vec![i, xc, acc, n], vec![acc2, n2], &[x, acc0, n0]);
    b.finish("loop_with_consts", vec![x, acc0, n0], outs)
}

/// `for i in 0..3 { for j in 0..4 { s = 2 s + (i - j) } }`.
fn nested_loops() -> Func {
    let mut b = Fb::new();
    let s0 = b.fresh(i32s());
    b.begin_loop();
    let i = b.fresh(i32s());
    let s = b.fresh(i32s());
    b.begin_loop();
    let j = b.fresh(i32s());
    let ic = b.fresh(i32s());
    let s_in = b.fresh(i32s());
    let two = b.prim(Prim::Constant(Constant { value: Array::i32(vec![], vec![2]) }), &[]);
    let s2 = b.prim(bin(BinaryOp::Mul), &[s_in, two]);
    let d = b.prim(bin(BinaryOp::Sub), &[ic, j]);
    let s3 = b.prim(bin(BinaryOp::Add), &[s2, d]);
    let inner = b.end_loop((0, 4, 1), vec![j, ic, s_in], vec![s3], &[i, s]);
    let outer = b.end_loop((0, 3, 0), vec![i, s], inner, &[s0]);
    b.finish("nested_loops", vec![s0], outer)
}

/// Every fixture, by name.
pub(crate) fn fixtures() -> Vec<(&'static str, Func)> {
    vec![
        ("dense_layer", dense_layer()),
        ("elementwise", elementwise()),
        ("dynamic_indexing", dynamic_indexing()),
        ("loop_with_consts", loop_with_consts()),
        ("nested_loops", nested_loops()),
        ("gather_scatter", gather_scatter()),
        ("weight_gradient", weight_gradient()),
    ]
}

#[test]
fn fixtures_verify() {
    for (name, f) in fixtures() {
        verify(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn ir_snapshots() {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        for (name, f) in fixtures() {
            insta::assert_snapshot!(format!("{name}.ir"), print_func(&f));
        }
    });
}

#[test]
fn stablehlo_snapshots() {
    insta::with_settings!({ prepend_module_to_snapshot => false }, {
        for (name, f) in fixtures() {
            insta::assert_snapshot!(format!("{name}.stablehlo"), lower_module(&f, 1));
        }
    });
}

#[test]
fn module_attributes_carry_the_replica_count() {
    let text = lower_module(&nested_loops(), 4);
    assert!(
        text.contains("module @nested_loops attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32}"),
        "{text}"
    );
    assert!(text.contains("func.func public @main("), "{text}");
}

#[test]
fn odd_function_names_are_quoted_symbols() {
    let mut f = nested_loops();
    f.name = "policy-v2".to_string();
    assert!(lower_module(&f, 1).contains("module @\"policy-v2\" attributes"));
}

#[test]
fn loops_evaluate() {
    let x = Array::f32(vec![3], vec![0.5, -1.25, 2.0]);
    let acc = Array::f32(vec![3], vec![0.0, 1.0, 2.0]);
    let out = eval_func(&loop_with_consts(), &[x, acc, Array::i32(vec![], vec![0])]);
    // acc + x * (2 + 3 + ... + 11) = acc + 65 x
    assert_eq!(out, [Array::f32(vec![3], vec![32.5, -80.25, 132.0]), Array::i32(vec![], vec![10])]);
    // s = 1, then for each i four steps of s = 2 s + (i - j)
    let mut s = 1i32;
    for i in 0..3 {
        for j in 0..4 {
            s = 2 * s + (i - j);
        }
    }
    assert_eq!(eval_func(&nested_loops(), &[Array::i32(vec![], vec![1])]), [Array::i32(vec![], vec![s])]);
}

#[test]
fn empty_loops_return_their_initial_carries() {
    let mut f = loop_with_consts();
    if let Op::Loop { lo, hi, .. } = &mut f.graph.eqns[0].op {
        (*lo, *hi) = (5, 5);
    }
    let acc = Array::f32(vec![3], vec![0.0, 1.0, 2.0]);
    let out = eval_func(&f, &[Array::f32(vec![3], vec![9.0; 3]), acc.clone(), Array::i32(vec![], vec![7])]);
    assert_eq!(out, [acc, Array::i32(vec![], vec![7])]);
}

#[test]
fn long_contractions_to_small_results_are_split() {
    let mut b = Fb::new();
    let x = b.fresh(f32t(&[4096, 64]));
    let g = b.fresh(f32t(&[4096, 2]));
    let dot = Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![0], rhs_contract: vec![0] };
    let y = b.prim(Prim::Dot(dot), &[x, g]);
    let text = lower_module(&b.finish("weight_gradient", vec![x, g], vec![y]), 1);
    assert!(text.contains("(tensor<4096x64xf32>) -> tensor<32x128x64xf32>"), "{text}");
    assert!(text.contains("lhs_batching_dimensions = [0], rhs_batching_dimensions = [0], lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [1]"), "{text}");
    assert!(text.contains("stablehlo.reduce"), "{text}");
}

/// `pmean` of a tree (two f32 leaves) and `psum` of an i32 before a loop, and `pmean` inside
/// it, for 2 replicas in each of 3 processes.
fn cross_process_collectives() -> Func {
    let mut b = Fb::new();
    let (w, v, n) = (b.fresh(f32t(&[2, 3])), b.fresh(f32t(&[3])), b.fresh(i32s()));
    let mean = |b: &mut Fb, args: &[Var]| {
        let outs: Vec<Var> = args.iter().map(|a| b.fresh(b.types[a.0 as usize].clone())).collect();
        let op = Op::Prim(Prim::AllReduce(AllReduce { op: AllReduceOp::Mean }));
        b.push(Eqn { outs: outs.clone(), op, args: args.to_vec() });
        outs
    };
    let wv = mean(&mut b, &[w, v]);
    let total = b.prim(Prim::AllReduce(AllReduce { op: AllReduceOp::Sum }), &[n]);
    b.begin_loop();
    let (i, acc) = (b.fresh(i32s()), b.fresh(f32t(&[3])));
    let m = mean(&mut b, &[acc])[0];
    let outs = b.end_loop((0, 2, 0), vec![i, acc], vec![m], &[wv[1]]);
    b.finish("cross_process_collectives", vec![w, v, n], vec![wv[0], total, outs[0]])
}

#[test]
fn collectives_across_processes_join_the_leaves_and_chain_their_calls() {
    let f = cross_process_collectives();
    verify(&f).expect("verifies");
    insta::assert_snapshot!(crate::lower::stablehlo::lower_module_across(&f, 2, 3, 0));
}
