//! Reverse-mode differentiation, in the manner of JAX's `lax_autodiff_test.py`.
//!
//! 1. One table of cases ([`cases`]): every differentiable primitive, in several
//!    configurations, plus loops built in the IR (carries, constants, nesting, a loop that
//!    never runs). Each case is a scalar function `sum(prim(args) * w)` with a random
//!    constant `w`; its gradient from `value_and_grad`, on the reference interpreter, must
//!    match central finite differences of the function (Richardson-extrapolated, on the
//!    interpreter, in f32: inputs are drawn away from kinks). Then all the gradient
//!    functions run in ONE module through the PJRT CPU plugin, against the interpreter.
//! 2. Non-differentiable values: an `argmax` or a comparison on the way to the result is
//!    an error naming it; used as an index or a predicate it is not; `stop_gradient`
//!    gives zeros.
//! 3. `.pod` programs using `grad`, `value_and_grad` and `stop_gradient` through loops,
//!    `if`/`where`, `.set` and indexing, reductions and `@`, against finite differences of
//!    the same loss built as its own entry point.
//! 4. Against JAX: `examples/basics/grad.pod`'s `mlp_loss_grad` and four more
//!    compositions (a loop, a softmax/logsumexp loss, products with zero factors, relu
//!    at exactly 0), with arguments and `jax.value_and_grad` results from
//!    `tests/fixtures/grad/gen_grad.py`, through the interpreter and PJRT, to a relative
//!    error of 1e-5.

use crate::common;

use common::prims::{convs, pools, select_and_gather_add, select_and_scatter_add, window_max};
use common::rng::Rng;
use podracer::array::{Array, ArrayTy, DType, Data};
use podracer::driver;
use podracer::ir::build::Builder;
use podracer::ir::eval::eval_func;
use podracer::ir::{Func, Var};
use podracer::lower::lower_module;
use podracer::prims::{
    AllReduce, AllReduceOp, Argmax, Binary, BinaryOp, Broadcast, CmpOp, Compare, Concat, Constant, Convert, Dot,
    DynamicSlice, DynamicUpdateSlice, Gather, Prim, Reduce, ReduceOp, Reshape, Reverse, Scatter, Select, Slice,
    StopGradient, Transpose, Unary, UnaryOp,
};
use podracer::transform::grad::{GradError, value_and_grad};

// ---------------------------------------------------------------------------------------
// Building cases

/// How to draw one argument.
#[derive(Clone, Debug)]
enum Gen {
    /// f32, uniform in `[lo, hi)`.
    F32(Vec<usize>, f32, f32),
    /// f32 with magnitude uniform in `[lo, hi)` and a random sign (away from 0).
    Signed(Vec<usize>, f32, f32),
    /// f32 whose elements are all different, at least 0.1 apart (no ties in max/min).
    Distinct(Vec<usize>),
    /// i32, uniform in `[lo, hi)`; never differentiated.
    I32(Vec<usize>, i32, i32),
    /// bool; never differentiated.
    Bool(Vec<usize>),
    /// This i32 array; never differentiated.
    Fixed(Array),
}

impl Gen {
    fn ty(&self) -> ArrayTy {
        match self {
            Gen::F32(s, ..) | Gen::Signed(s, ..) | Gen::Distinct(s) => ArrayTy::new(DType::F32, s.clone()),
            Gen::I32(s, ..) => ArrayTy::new(DType::I32, s.clone()),
            Gen::Bool(s) => ArrayTy::new(DType::Bool, s.clone()),
            Gen::Fixed(a) => a.ty(),
        }
    }

    fn draw(&self, rng: &mut Rng) -> Array {
        match self {
            Gen::F32(s, lo, hi) => rng.f32s(s, *lo, *hi),
            Gen::Signed(s, lo, hi) => {
                let a = rng.f32s(s, *lo, *hi);
                let Data::F32(v) = a.data else { unreachable!("f32") };
                Array::f32(
                    s.clone(),
                    v.into_iter().map(|x| if rng.next().is_multiple_of(2) { x } else { -x }).collect(),
                )
            }
            Gen::Distinct(s) => {
                let n: usize = s.iter().product();
                let mut v: Vec<f32> = (0..n).map(|k| k as f32 * 0.25 - n as f32 * 0.125).collect();
                for k in (1..n).rev() {
                    v.swap(k, (rng.next() % (k as u64 + 1)) as usize);
                }
                Array::f32(s.clone(), v)
            }
            Gen::I32(s, lo, hi) => rng.i32s(s, *lo, *hi),
            Gen::Bool(s) => rng.bools(s),
            Gen::Fixed(a) => a.clone(),
        }
    }

    fn is_float(&self) -> bool {
        matches!(self, Gen::F32(..) | Gen::Signed(..) | Gen::Distinct(_))
    }
}

type Build = Box<dyn Fn(&mut Builder, &[Var]) -> Var>;

/// One row of the table: a computation on the arguments giving one f32 array.
struct Case {
    name: String,
    args: Vec<Gen>,
    build: Build,
}

fn case(name: impl Into<String>, args: Vec<Gen>, build: impl Fn(&mut Builder, &[Var]) -> Var + 'static) -> Case {
    Case { name: name.into(), args, build: Box::new(build) }
}

/// A case applying one primitive to the arguments.
fn prim(name: impl Into<String>, p: Prim, args: Vec<Gen>) -> Case {
    case(name, args, move |b, vs| b.prim1(p.clone(), vs))
}

fn f32s(shape: &[usize]) -> Gen {
    Gen::F32(shape.to_vec(), -2.0, 2.0)
}

fn unary(op: UnaryOp) -> Prim {
    Prim::Unary(Unary { op })
}

fn binary(op: BinaryOp) -> Prim {
    Prim::Binary(Binary { op })
}

fn add(b: &mut Builder, x: Var, y: Var) -> Var {
    b.prim1(binary(BinaryOp::Add), &[x, y])
}

fn mul(b: &mut Builder, x: Var, y: Var) -> Var {
    b.prim1(binary(BinaryOp::Mul), &[x, y])
}

fn constant(b: &mut Builder, value: Array) -> Var {
    b.prim1(Prim::Constant(Constant { value }), &[])
}

/// `f(case) = sum(case(args) * w)` with `w` a random constant: a scalar whose gradient
/// exercises every element's cotangent.
fn scalar_function(c: &Case, rng: &mut Rng) -> Func {
    let mut b = Builder::new();
    let params: Vec<Var> = c.args.iter().map(|g| b.fresh(g.ty())).collect();
    let y = (c.build)(&mut b, &params);
    let shape = b.ty(y).shape.clone();
    let w = constant(&mut b, rng.f32s(&shape, -1.0, 1.0));
    let yw = mul(&mut b, y, w);
    let axes = (0..shape.len()).collect();
    let s = b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes }), &[yw]);
    b.finish(&c.name, params, vec![s])
}

/// Every differentiable primitive, and loops.
fn cases() -> Vec<Case> {
    let mut cs = vec![];

    // unary
    let positive = Gen::F32(vec![2, 3], 0.5, 2.0);
    for (op, arg) in [
        (UnaryOp::Neg, f32s(&[2, 3])),
        (UnaryOp::Exp, f32s(&[2, 3])),
        (UnaryOp::Log, positive.clone()),
        (UnaryOp::Log1p, Gen::F32(vec![2, 3], -0.5, 1.5)),
        (UnaryOp::Tanh, f32s(&[2, 3])),
        (UnaryOp::Sqrt, positive.clone()),
        (UnaryOp::Abs, Gen::Signed(vec![2, 3], 0.2, 2.0)),
        (UnaryOp::Floor, Gen::F32(vec![2, 3], 0.2, 0.8)),
        (UnaryOp::Ceil, Gen::F32(vec![2, 3], 0.2, 0.8)),
        (UnaryOp::Round, Gen::F32(vec![2, 3], 0.2, 0.4)),
        (UnaryOp::Sign, Gen::Signed(vec![2, 3], 0.2, 2.0)),
        (UnaryOp::Sin, f32s(&[2, 3])),
        (UnaryOp::Cos, f32s(&[2, 3])),
        (UnaryOp::Logistic, Gen::F32(vec![2, 3], -6.0, 6.0)),
        (UnaryOp::Relu, Gen::Signed(vec![2, 3], 0.2, 2.0)),
    ] {
        cs.push(prim(format!("{op:?}"), unary(op), vec![arg]));
    }

    // binary
    let away = Gen::Signed(vec![2, 3], 0.5, 2.0);
    for (op, x, y) in [
        (BinaryOp::Add, f32s(&[2, 3]), f32s(&[2, 3])),
        (BinaryOp::Sub, f32s(&[2, 3]), f32s(&[2, 3])),
        (BinaryOp::Mul, f32s(&[2, 3]), f32s(&[2, 3])),
        (BinaryOp::Div, f32s(&[2, 3]), away.clone()),
        (BinaryOp::Pow, positive.clone(), Gen::F32(vec![2, 3], -1.5, 2.5)),
        (BinaryOp::Max, Gen::Distinct(vec![2, 3]), Gen::Distinct(vec![2, 3])),
        (BinaryOp::Min, Gen::Distinct(vec![2, 3]), Gen::Distinct(vec![2, 3])),
    ] {
        cs.push(prim(format!("{op:?}"), binary(op), vec![x, y]));
    }
    // rem(x, y) = x - y * trunc(x / y): x = (k + frac) * y keeps x / y away from the
    // integers, where it jumps.
    cs.push(case(
        "Rem",
        vec![Gen::F32(vec![2, 3], 0.2, 0.8), Gen::I32(vec![2, 3], -3, 3), Gen::Signed(vec![2, 3], 1.0, 2.0)],
        |b, v| {
            let k = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[v[1]]);
            let q = add(b, k, v[0]);
            let x = mul(b, q, v[2]);
            b.prim1(binary(BinaryOp::Rem), &[x, v[2]])
        },
    ));
    // max with a tie: each side gets half.
    cs.push(case("max tie", vec![f32s(&[3])], |b, v| b.prim1(binary(BinaryOp::Max), &[v[0], v[0]])));
    cs.push(prim("Select", Prim::Select(Select), vec![Gen::Bool(vec![2, 3]), f32s(&[2, 3]), f32s(&[2, 3])]));
    cs.push(prim("Convert f32", Prim::Convert(Convert { to: DType::F32 }), vec![f32s(&[4])]));
    // collectives: one replica here (tests/compiler/collective.rs runs two against jax.pmap)
    for op in [AllReduceOp::Sum, AllReduceOp::Mean] {
        cs.push(prim(format!("{op:?} across replicas"), Prim::AllReduce(AllReduce { op }), vec![f32s(&[2, 3])]));
    }

    // layout
    let bc =
        |shape: &[usize], dims: &[usize]| Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: dims.to_vec() });
    cs.push(prim("Broadcast new dim", bc(&[2, 3], &[1]), vec![f32s(&[3])]));
    cs.push(prim("Broadcast repeat", bc(&[3, 4], &[0, 1]), vec![f32s(&[3, 1])]));
    cs.push(prim("Broadcast scalar", bc(&[2, 2], &[]), vec![f32s(&[])]));
    cs.push(prim("Broadcast reordered", bc(&[3, 4, 2], &[2, 0]), vec![f32s(&[2, 3])]));
    cs.push(prim("Broadcast keeps 1", bc(&[1, 2, 3], &[0, 2]), vec![f32s(&[1, 3])]));
    cs.push(prim("Reshape", Prim::Reshape(Reshape { shape: vec![3, 2] }), vec![f32s(&[2, 3])]));
    cs.push(prim("Transpose", Prim::Transpose(Transpose { perm: vec![2, 0, 1] }), vec![f32s(&[2, 3, 4])]));
    cs.push(prim("Concat", Prim::Concat(Concat { axis: 1 }), vec![f32s(&[2, 1]), f32s(&[2, 3]), f32s(&[2, 2])]));

    // indexing
    cs.push(prim("Slice", Prim::Slice(Slice { start: vec![1, 0], limit: vec![3, 4] }), vec![f32s(&[4, 5])]));
    // Starts drawn past both ends: the window clamps, and so does its cotangent.
    let starts = || Gen::I32(vec![], -2, 6);
    cs.push(prim(
        "DynamicSlice",
        Prim::DynamicSlice(DynamicSlice { sizes: vec![2, 3] }),
        vec![f32s(&[4, 5]), starts(), starts()],
    ));
    for k in 0..3 {
        cs.push(prim(
            format!("DynamicUpdateSlice {k}"),
            Prim::DynamicUpdateSlice(DynamicUpdateSlice),
            vec![f32s(&[4, 5]), f32s(&[2, 3]), starts(), starts()],
        ));
    }

    // gather and scatter, as the batching rules of the dynamic slices emit them
    let gather = |offset: &[usize], collapsed: &[usize], ob: &[usize], ib: &[usize], map: &[usize], sizes: &[usize]| {
        Prim::Gather(Gather {
            offset_dims: offset.to_vec(),
            collapsed_slice_dims: collapsed.to_vec(),
            operand_batching_dims: ob.to_vec(),
            indices_batching_dims: ib.to_vec(),
            start_index_map: map.to_vec(),
            slice_sizes: sizes.to_vec(),
        })
    };
    // Rows of one operand at per-example starts: repeated rows add up, and a start past
    // the end clamps.
    cs.push(prim(
        "Gather shared operand",
        gather(&[1], &[0], &[], &[], &[0], &[1, 3]),
        vec![f32s(&[5, 3]), Gen::Fixed(Array::i32(vec![4, 1], vec![2, 0, 2, 7]))],
    ));
    // Each example reads its own operand: one window each.
    cs.push(prim(
        "Gather own operand",
        gather(&[1, 2], &[], &[0], &[0], &[1], &[1, 2, 2]),
        vec![f32s(&[3, 5, 2]), Gen::I32(vec![3, 1], -1, 6)],
    ));
    // Both: several windows per example, in its own operand.
    cs.push(prim(
        "Gather mixed",
        gather(&[2], &[1], &[0], &[0], &[1], &[1, 1, 3]),
        vec![f32s(&[2, 4, 3]), Gen::Fixed(Array::i32(vec![2, 3, 1], vec![1, 1, 3, 0, 2, 9]))],
    ));
    let scatter = |window: &[usize], inserted: &[usize], ob: &[usize], ib: &[usize], map: &[usize]| {
        Prim::Scatter(Scatter {
            update_window_dims: window.to_vec(),
            inserted_window_dims: inserted.to_vec(),
            operand_batching_dims: ob.to_vec(),
            indices_batching_dims: ib.to_vec(),
            scatter_dims_to_operand_dims: map.to_vec(),
        })
    };
    // Windows that do not overlap (which write wins an overlap is unspecified).
    cs.push(prim(
        "Scatter rows",
        scatter(&[1], &[0], &[], &[], &[0]),
        vec![f32s(&[5, 3]), Gen::Fixed(Array::i32(vec![2, 1], vec![3, 0])), f32s(&[2, 3])],
    ));
    cs.push(prim(
        "Scatter own operand",
        scatter(&[1], &[1], &[0], &[0], &[1]),
        vec![f32s(&[3, 4, 2]), Gen::I32(vec![3, 1], -1, 6), f32s(&[3, 2])],
    ));

    // reductions
    let reduce = |op, axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
    cs.push(prim("Reduce sum", reduce(ReduceOp::Sum, &[0, 2]), vec![f32s(&[2, 3, 4])]));
    cs.push(prim("Reduce max", reduce(ReduceOp::Max, &[1]), vec![Gen::Distinct(vec![2, 3, 4])]));
    cs.push(prim("Reduce min", reduce(ReduceOp::Min, &[0]), vec![Gen::Distinct(vec![3, 4])]));
    cs.push(prim("Reduce max all", reduce(ReduceOp::Max, &[0, 1]), vec![Gen::Distinct(vec![3, 2])]));
    let near_one = |s: &[usize]| Gen::Signed(s.to_vec(), 0.5, 1.5);
    cs.push(prim("Reduce prod", reduce(ReduceOp::Prod, &[0, 2]), vec![near_one(&[2, 3, 5])]));
    cs.push(prim("Reduce prod all", reduce(ReduceOp::Prod, &[1, 0]), vec![near_one(&[3, 2])]));
    cs.push(prim("Reduce prod one", reduce(ReduceOp::Prod, &[1]), vec![near_one(&[3, 1])]));
    // Zeros among the factors: none, one (its derivative is the product of the others)
    // and two (every derivative is 0) in the three rows.
    cs.push(case("Reduce prod zeros", vec![near_one(&[3, 4])], |b, v| {
        let mask = [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0];
        let mask = constant(b, Array::f32(vec![3, 4], mask.to_vec()));
        let x = mul(b, v[0], mask);
        b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Prod, axes: vec![1] }), &[x])
    }));
    // A tie shares the derivative: the maximum of [x, x] is half x's each.
    cs.push(case("Reduce max tie", vec![f32s(&[3])], |b, v| {
        let both = b.prim1(Prim::Concat(Concat { axis: 0 }), &[v[0], v[0]]);
        b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Max, axes: vec![0] }), &[both])
    }));

    // dot_general
    let dot = |lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]| {
        Prim::Dot(Dot {
            lhs_batch: lb.to_vec(),
            rhs_batch: rb.to_vec(),
            lhs_contract: lc.to_vec(),
            rhs_contract: rc.to_vec(),
        })
    };
    cs.push(prim("Dot matmul", dot(&[], &[], &[1], &[0]), vec![f32s(&[2, 3]), f32s(&[3, 4])]));
    cs.push(prim("Dot matvec", dot(&[], &[], &[1], &[0]), vec![f32s(&[2, 3]), f32s(&[3])]));
    cs.push(prim("Dot inner", dot(&[], &[], &[0], &[0]), vec![f32s(&[3]), f32s(&[3])]));
    cs.push(prim("Dot outer", dot(&[], &[], &[], &[]), vec![f32s(&[2]), f32s(&[3])]));
    cs.push(prim("Dot batched", dot(&[0], &[0], &[2], &[1]), vec![f32s(&[2, 3, 4]), f32s(&[2, 4, 5])]));
    cs.push(prim("Dot transposed", dot(&[], &[], &[0], &[1]), vec![f32s(&[3, 2]), f32s(&[4, 3])]));
    cs.push(prim("Dot two contractions", dot(&[], &[], &[0, 2], &[2, 0]), vec![f32s(&[2, 3, 4]), f32s(&[4, 5, 2])]));
    cs.push(prim("Dot batch not first", dot(&[1], &[0], &[0], &[2]), vec![f32s(&[3, 2]), f32s(&[2, 4, 3])]));

    // convolutions and windows
    for (name, p, l, r) in convs() {
        cs.push(prim(name, p, vec![f32s(&l), f32s(&r)]));
    }
    for (name, w, x) in pools() {
        cs.push(prim(name, window_max(&w), vec![Gen::Distinct(x.clone())]));
        // Linear in the first argument; the operand only chooses (no derivative).
        let out = window_max(&w).rules().infer(&[ArrayTy::new(DType::F32, x.clone())]).expect("fits").remove(0);
        cs.push(prim(
            format!("{name}, scatter"),
            select_and_scatter_add(&w),
            vec![f32s(&out.shape), Gen::Distinct(x.clone())],
        ));
        cs.push(prim(format!("{name}, gather"), select_and_gather_add(&w), vec![f32s(&x), Gen::Distinct(x)]));
    }
    cs.push(prim("Reverse", Prim::Reverse(Reverse { dims: vec![0, 2] }), vec![f32s(&[2, 3, 2])]));

    // loops
    cs.extend(loop_cases());
    cs
}

/// Loops built in the IR, as the elaborator builds them.
fn loop_cases() -> Vec<Case> {
    let f32t = |s: &[usize]| ArrayTy::new(DType::F32, s.to_vec());
    let i32s = || ArrayTy::scalar(DType::I32);
    vec![
        // h = tanh(h * w + x[i]) over 4 steps; w and x are loop constants, h a carry.
        case("loop rnn", vec![f32s(&[3]), f32s(&[3]), f32s(&[4, 3])], move |b, v| {
            let (h0, w, xs) = (v[0], v[1], v[2]);
            b.begin_loop();
            let i = b.fresh(i32s());
            let h = b.fresh(f32t(&[3]));
            let zero = b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![0]) }), &[]);
            let row = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: vec![1, 3] }), &[xs, i, zero]);
            let row = b.prim1(Prim::Reshape(Reshape { shape: vec![3] }), &[row]);
            let hw = mul(b, h, w);
            let pre = add(b, hw, row);
            let next = b.prim1(unary(UnaryOp::Tanh), &[pre]);
            b.end_loop(0, 4, &[h0], vec![i, h], vec![next])[0]
        }),
        // Two carries that swap and scale, with a non-zero lower bound and an index used
        // as a float: (p, q) = (q * s, p + i).
        case("loop swap", vec![f32s(&[2]), f32s(&[2]), f32s(&[2])], move |b, v| {
            let (p0, q0, s) = (v[0], v[1], v[2]);
            b.begin_loop();
            let i = b.fresh(i32s());
            let (p, q) = (b.fresh(f32t(&[2])), b.fresh(f32t(&[2])));
            let fi = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[i]);
            let fi = b.prim1(Prim::Broadcast(Broadcast { shape: vec![2], dims: vec![] }), &[fi]);
            let np = mul(b, q, s);
            let nq = add(b, p, fi);
            let outs = b.end_loop(2, 5, &[p0, q0], vec![i, p, q], vec![np, nq]);
            mul(b, outs[0], outs[1])
        }),
        // Nested: the inner loop squashes the outer carry three times per outer step.
        case("loop nested", vec![Gen::F32(vec![2], -1.0, 1.0), Gen::F32(vec![2], 0.5, 1.0)], move |b, v| {
            let (x0, a) = (v[0], v[1]);
            b.begin_loop();
            let i = b.fresh(i32s());
            let x = b.fresh(f32t(&[2]));
            b.begin_loop();
            let j = b.fresh(i32s());
            let y = b.fresh(f32t(&[2]));
            let ya = mul(b, y, a);
            let s = b.prim1(unary(UnaryOp::Sin), &[ya]);
            let y2 = add(b, s, y);
            let inner = b.end_loop(0, 3, &[x], vec![j, y], vec![y2])[0];
            let next = b.prim1(unary(UnaryOp::Tanh), &[inner]);
            b.end_loop(0, 2, &[x0], vec![i, x], vec![next])[0]
        }),
        // A loop that never runs yields its initial carry.
        case("loop empty", vec![f32s(&[2]), f32s(&[2])], move |b, v| {
            b.begin_loop();
            let i = b.fresh(i32s());
            let x = b.fresh(f32t(&[2]));
            let next = mul(b, x, v[1]);
            b.end_loop(3, 3, &[v[0]], vec![i, x], vec![next])[0]
        }),
        // A carry that depends on a differentiated value only from the body, and one
        // that never does (an integer counter).
        case("loop late carry", vec![f32s(&[2])], move |b, v| {
            let zero = constant(b, Array::f32(vec![2], vec![0.0, 0.0]));
            let n0 = constant(b, Array::i32(vec![], vec![0]));
            b.begin_loop();
            let i = b.fresh(i32s());
            let (acc, n) = (b.fresh(f32t(&[2])), b.fresh(i32s()));
            let sq = mul(b, v[0], v[0]);
            let acc2 = add(b, acc, sq);
            let one = constant(b, Array::i32(vec![], vec![1]));
            let n2 = b.prim1(binary(BinaryOp::Add), &[n, one]);
            let outs = b.end_loop(0, 3, &[zero, n0], vec![i, acc, n], vec![acc2, n2]);
            let nf = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[outs[1]]);
            let nf = b.prim1(Prim::Broadcast(Broadcast { shape: vec![2], dims: vec![] }), &[nf]);
            mul(b, outs[0], nf)
        }),
        // dynamic_update_slice in a loop: x.set(i, x[i] * w) for each row.
        case("loop set rows", vec![f32s(&[3, 2]), f32s(&[2])], move |b, v| {
            b.begin_loop();
            let i = b.fresh(i32s());
            let x = b.fresh(f32t(&[3, 2]));
            let zero = b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![0]) }), &[]);
            let row = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: vec![1, 2] }), &[x, i, zero]);
            let row = b.prim1(Prim::Reshape(Reshape { shape: vec![2] }), &[row]);
            let scaled = mul(b, row, v[1]);
            let sq = mul(b, scaled, row);
            let upd = b.prim1(Prim::Reshape(Reshape { shape: vec![1, 2] }), &[sq]);
            let next = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[x, upd, i, zero]);
            b.end_loop(0, 3, &[v[0]], vec![i, x], vec![next])[0]
        }),
    ]
}

// ---------------------------------------------------------------------------------------
// Finite differences

/// The arguments with element `k` of argument `a` moved by `h`.
fn nudge(args: &[Array], a: usize, k: usize, h: f32) -> Vec<Array> {
    let mut out = args.to_vec();
    if let Data::F32(v) = &mut out[a].data {
        v[k] += h;
    }
    out
}

fn scalar(a: &Array) -> f32 {
    match &a.data {
        Data::F32(v) if v.len() == 1 => v[0],
        Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => {
            panic!("expected an f32 scalar, got {}", a.ty())
        }
    }
}

/// d f / d args[a][k] by central differences, Richardson-extrapolated: with
/// `D(h) = (f(x + h) - f(x - h)) / 2h`, `(4 D(h/2) - D(h)) / 3` has error O(h⁴), so `h`
/// can be large enough for f32 rounding to stay small.
fn finite_difference(f: &Func, args: &[Array], a: usize, k: usize) -> f32 {
    let h = 1e-2f32;
    let eval = |d: f32| f64::from(scalar(&eval_func(f, &nudge(args, a, k, d))[0]));
    let d = |h: f32| (eval(h) - eval(-h)) / (2.0 * f64::from(h));
    ((4.0 * d(h / 2.0) - d(h)) / 3.0) as f32
}

fn f32_data(a: &Array) -> &[f32] {
    match &a.data {
        Data::F32(v) => v,
        Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => panic!("expected f32, got {}", a.ty()),
    }
}

/// How far a gradient may be from finite differences: `|g - fd| <= FD_TOL * (1 + |fd|)`.
/// The extrapolated differences of these small functions are good to a few 1e-4 in f32
/// (the largest error measured is printed with `--nocapture`); a wrong rule is off by
/// far more.
const FD_TOL: f32 = 2e-3;

/// Checks `g = value_and_grad(f)` against `f` and finite differences at `args`; returns
/// the largest error, in units of the tolerance's scale `1 + |fd|`.
fn check_against_fd(name: &str, f: &Func, g: &Func, args: &[Array], wrt: &[bool]) -> Result<f32, String> {
    let out = eval_func(g, args);
    let value = eval_func(f, args);
    if out[0] != value[0] {
        return Err(format!("{name}: value {:?}, but f gives {:?}", out[0], value[0]));
    }
    let mut grads = out[1..].iter();
    let mut worst = 0.0f32;
    for (a, _) in wrt.iter().enumerate().filter(|(_, d)| **d) {
        let grad = grads.next().expect("one gradient per differentiated argument");
        if grad.ty() != args[a].ty() {
            return Err(format!("{name}: the gradient of argument {a} is {}, not {}", grad.ty(), args[a].ty()));
        }
        for (k, &gk) in f32_data(grad).iter().enumerate() {
            let fd = finite_difference(f, args, a, k);
            let err = (gk - fd).abs() / (1.0 + fd.abs());
            if err > FD_TOL {
                return Err(format!("{name}: d/d arg{a}[{k}] is {gk}, finite differences give {fd}"));
            }
            worst = worst.max(err);
        }
    }
    Ok(worst)
}

/// Every case: its function, gradient function and arguments.
fn prepared() -> Vec<(String, Func, Func, Vec<Array>)> {
    let mut rng = Rng(0x6EAD);
    cases()
        .iter()
        .map(|c| {
            let f = scalar_function(c, &mut rng);
            let wrt: Vec<bool> = c.args.iter().map(Gen::is_float).collect();
            let g = value_and_grad(&f, &wrt).unwrap_or_else(|e| panic!("{}: {e:?}", c.name));
            let args = c.args.iter().map(|a| a.draw(&mut rng)).collect();
            (c.name.clone(), f, g, args)
        })
        .collect()
}

#[test]
fn every_rule_matches_finite_differences() {
    let mut failures = vec![];
    let mut worst = (0.0f32, String::new());
    for (name, f, g, args) in prepared() {
        let wrt: Vec<bool> = args.iter().map(|a| a.dtype() == DType::F32).collect();
        match check_against_fd(&name, &f, &g, &args, &wrt) {
            Ok(err) if err > worst.0 => worst = (err, name),
            Ok(_) => {}
            Err(e) => failures.push(e),
        }
    }
    println!("largest error against finite differences: {:.1e} ({})", worst.0, worst.1);
    assert!(failures.is_empty(), "{} case(s) failed:\n{}", failures.len(), failures.join("\n"));
}

/// All the gradient functions of the table in one module, through PJRT, against the
/// interpreter.
#[test]
fn every_rule_runs_on_the_device() {
    let cases = prepared();
    let mut b = Builder::new();
    let mut params = vec![];
    let mut results = vec![];
    let mut all_args = vec![];
    for (_, _, g, args) in &cases {
        let ps: Vec<Var> = args.iter().map(|a| b.fresh(a.ty())).collect();
        results.extend(b.inline(g, &ps));
        params.extend(ps);
        all_args.extend(args.iter().cloned());
    }
    let all = b.finish("grads", params, results);
    let host = eval_func(&all, &all_args);
    let dev = run_on_device(&all, &all_args);
    let mut at = 0;
    for (name, _, g, _) in &cases {
        let n = g.graph.results.len();
        for (k, (h, d)) in host[at..at + n].iter().zip(&dev[at..at + n]).enumerate() {
            for (x, y) in f32_data(h).iter().zip(f32_data(d)) {
                assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{name}, result {k}: interpreter {h:?}, device {d:?}");
            }
        }
        at += n;
    }
}

fn run_on_device(f: &Func, args: &[Array]) -> Vec<Array> {
    let client = common::client();
    let exe = client.compile(&lower_module(f, 1), 1).unwrap_or_else(|e| panic!("{} does not compile: {e}", f.name));
    let bufs: Vec<_> = args.iter().map(|a| client.upload(a, 0).expect("upload")).collect();
    let refs: Vec<_> = bufs.iter().collect();
    exe.execute(&refs).expect("runs").iter().map(|b| b.download().expect("download")).collect()
}

// ---------------------------------------------------------------------------------------
// Non-differentiable values

/// `sum(stage(x) * x)` where `stage` makes something of `x`.
fn through(stage: impl Fn(&mut Builder, Var) -> Var) -> Func {
    let mut b = Builder::new();
    let x = b.fresh(ArrayTy::new(DType::F32, vec![4]));
    let y = stage(&mut b, x);
    let yx = mul(&mut b, y, x);
    let s = b.prim1(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes: vec![0] }), &[yx]);
    b.finish("f", vec![x], vec![s])
}

fn to_f32(b: &mut Builder, v: Var) -> Var {
    b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[v])
}

fn widen(b: &mut Builder, v: Var) -> Var {
    b.prim1(Prim::Broadcast(Broadcast { shape: vec![4], dims: vec![] }), &[v])
}

#[test]
fn an_argmax_on_the_way_is_an_error_naming_it() {
    let f = through(|b, x| {
        let i = b.prim1(Prim::Argmax(Argmax { axis: 0 }), &[x]);
        let one = constant(b, Array::i32(vec![], vec![1]));
        let j = b.prim1(binary(BinaryOp::Add), &[i, one]);
        let jf = to_f32(b, j);
        widen(b, jf)
    });
    let argmax = f.graph.eqns.iter().find(|e| matches!(e.op, podracer::ir::Op::Prim(Prim::Argmax(_)))).expect("argmax");
    match value_and_grad(&f, &[true]) {
        Err(GradError::NotDifferentiable { prim, at }) if matches!(*prim, Prim::Argmax(_)) => {
            assert_eq!(at, argmax.outs[0])
        }
        other => panic!("expected argmax to be blamed, got {other:?}"),
    }
}

#[test]
fn a_comparison_or_a_conversion_on_the_way_is_an_error() {
    let compared = through(|b, x| {
        let zero = constant(b, Array::f32(vec![4], vec![0.0; 4]));
        let pos = b.prim1(Prim::Compare(Compare { op: CmpOp::Gt }), &[x, zero]);
        to_f32(b, pos)
    });
    let blamed = |f: &Func| match value_and_grad(f, &[true]) {
        Err(GradError::NotDifferentiable { prim, .. }) => *prim,
        Ok(_) => panic!("differentiable"),
    };
    assert!(matches!(blamed(&compared), Prim::Compare(_)));
    let rounded = through(|b, x| {
        let i = b.prim1(Prim::Convert(Convert { to: DType::I32 }), &[x]);
        to_f32(b, i)
    });
    assert!(matches!(blamed(&rounded), Prim::Convert(Convert { to: DType::I32 })));
}

/// `x[argmax(x)]` reads the maximum, whose derivative is one-hot; `where(x > 0, x, 0)`
/// is relu. Neither differentiates the integer or the bool.
#[test]
fn indices_and_predicates_need_no_derivative() {
    let mut rng = Rng(7);
    let x = Gen::Distinct(vec![4]).draw(&mut rng);
    let read_max = through(|b, x| {
        let i = b.prim1(Prim::Argmax(Argmax { axis: 0 }), &[x]);
        let m = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: vec![1] }), &[x, i]);
        let m = b.prim1(Prim::Reshape(Reshape { shape: vec![] }), &[m]);
        widen(b, m)
    });
    let relu = through(|b, x| {
        let zero = constant(b, Array::f32(vec![4], vec![0.0; 4]));
        let pos = b.prim1(Prim::Compare(Compare { op: CmpOp::Gt }), &[x, zero]);
        b.prim1(Prim::Select(Select), &[pos, x, zero])
    });
    for (name, f) in [("read max", read_max), ("relu", relu)] {
        let g = value_and_grad(&f, &[true]).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        check_against_fd(name, &f, &g, std::slice::from_ref(&x), &[true]).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// `stop_gradient` passes values and no derivative; an argmax behind it is no error.
#[test]
fn stop_gradient_stops_the_derivative() {
    let f = through(|b, x| {
        let s = b.prim1(Prim::StopGradient(StopGradient), &[x]);
        let i = b.prim1(Prim::Argmax(Argmax { axis: 0 }), &[s]);
        let i = to_f32(b, i);
        let i = widen(b, i);
        mul(b, s, i)
    });
    let g = value_and_grad(&f, &[true]).expect("differentiable");
    let x = Array::f32(vec![4], vec![0.5, 2.0, -1.0, 1.0]);
    let out = eval_func(&g, std::slice::from_ref(&x));
    // f = sum(x * argmax(x) * x) = 1 * (0.25 + 4 + 1 + 1); the gradient sees only the
    // last factor.
    assert_eq!(out[0], Array::f32(vec![], vec![6.25]));
    assert_eq!(out[1], Array::f32(vec![4], vec![0.5, 2.0, -1.0, 1.0]));
}

/// A function whose result does not depend on the parameter has a zero gradient, and a
/// parameter that is the result has a gradient of one.
#[test]
fn constant_and_identity_functions() {
    let mut b = Builder::new();
    let x = b.fresh(ArrayTy::scalar(DType::F32));
    let c = constant(&mut b, Array::f32(vec![], vec![3.0]));
    let f = b.finish("c", vec![x], vec![c]);
    let out = eval_func(&value_and_grad(&f, &[true]).expect("ok"), &[Array::f32(vec![], vec![2.0])]);
    assert_eq!(out, [Array::f32(vec![], vec![3.0]), Array::f32(vec![], vec![0.0])]);

    let mut b = Builder::new();
    let x = b.fresh(ArrayTy::scalar(DType::F32));
    let f = b.finish("id", vec![x], vec![x]);
    let out = eval_func(&value_and_grad(&f, &[true]).expect("ok"), &[Array::f32(vec![], vec![2.0])]);
    assert_eq!(out, [Array::f32(vec![], vec![2.0]), Array::f32(vec![], vec![1.0])]);
}

// ---------------------------------------------------------------------------------------
// `.pod` programs

/// Checks and builds entry `name` of a program, failing with the rendered diagnostics.
fn build_entry(src: &str, name: &str) -> podracer::driver::Entry {
    let (prog, diags) = driver::check_source("test.pod", src, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    driver::build(&prog, &[], name).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

/// The diagnostic that building entry `main` of a program gives.
fn build_error(src: &str) -> String {
    let (prog, diags) = driver::check_source("test.pod", src, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    match driver::build(&prog, &[], "main") {
        Ok(_) => panic!("builds without an error"),
        Err(d) => podracer::diag::render_plain(&prog.map, &[*d]),
    }
}

/// Programs with a `loss(x, ...)` entry and a `grad_loss` entry giving its gradient with
/// respect to `x`; the gradient must match finite differences of `loss`.
const PROGRAMS: &[(&str, &str)] = &[
    (
        "loop with constants and carries",
        "fn loss(x: f32[3], w: f32[3]) -> f32 {
            let (h, s) = for i in 0..4 carry (h, s) = (x, 0.0) {
                let h2 = tanh(h * w + (i as f32) * 0.1);
                (h2, s + sum(h2 * x))
            };
            sum(h) + s
        }
        fn grad_loss(x: f32[3], w: f32[3]) -> f32[3] { grad(loss, x, w) }",
    ),
    (
        "nested loops",
        "fn loss(x: f32[2], w: f32[2]) -> f32 {
            let y = for i in 0..3 carry y = x {
                let z = for j in 0..2 carry z = y { sin(z * w) + z };
                z * 0.5
            };
            sum(y * y)
        }
        fn grad_loss(x: f32[2], w: f32[2]) -> f32[2] { grad(loss, x, w) }",
    ),
    (
        "if and where",
        "fn loss(x: f32[4], w: f32[4]) -> f32 {
            let y = where(x > 0.0, x * w, exp(x));
            let z = if sum(w) > 0.0 { y * 2.0 } else { y - 1.0 };
            sum(z * z) + max(x, w).sum() + min(x, 0.5).sum()
        }
        fn grad_loss(x: f32[4], w: f32[4]) -> f32[4] { grad(loss, x, w) }",
    ),
    (
        ".set and indexing",
        "fn loss(x: f32[3, 4], w: f32[4]) -> f32 {
            let k = argmax(w);
            let r = x[1] * w + x[2, k];
            let y = x.set(0, r).set([2, 1], x[0, 3] * 3.0);
            sum(y * y) + sum(x[:, 1:3]) + x[-1, -1]
        }
        fn grad_loss(x: f32[3, 4], w: f32[4]) -> f32[3, 4] { grad(loss, x, w) }",
    ),
    (
        "reductions and @",
        "fn loss(x: f32[3, 4], w: f32[4, 2]) -> f32 {
            let h = tanh(x @ w);
            mean(h) + sum(reduce_max(x, 1)) - sum(reduce_min(x, 0)) + logsumexp(h).sum()
                + sum(softmax(x)[:, 0]) + sum(transpose(h) @ h) + sum(reshape(x, [12])[3:5])
                + sum(concatenate([x, x * 2.0], 1)[:, 5])
        }
        fn grad_loss(x: f32[3, 4], w: f32[4, 2]) -> f32[3, 4] { grad(loss, x, w) }",
    ),
    (
        "second order, through a loop",
        "fn inner(x: f32[3], w: f32[3]) -> f32 {
            let y = for i in 0..3 carry y = x { sin(y * w) + y * 0.5 };
            sum(y * x)
        }
        fn loss(x: f32[3], w: f32[3]) -> f32 { sum(grad(inner, x, w) * w) }
        fn grad_loss(x: f32[3], w: f32[3]) -> f32[3] { grad(loss, x, w) }",
    ),
    (
        "per-example gradients with vmap",
        "fn inner(x: f32[3], w: f32[3]) -> f32 { sum(tanh(x * w) * x) }
        fn per_example(x: f32[3], w: f32[3]) -> f32[3] { grad(inner, x, w) }
        fn loss(xs: f32[2, 3], w: f32[3]) -> f32 { sum(vmap(per_example, xs, w) * w) }
        fn grad_loss(xs: f32[2, 3], w: f32[3]) -> f32[2, 3] { grad(loss, xs, w) }",
    ),
    (
        "vmap with per-example indices",
        "fn pick(t: f32[5, 3], i: i32) -> f32[3] { t[i] * t[i] }
        fn put(x: f32[4], i: i32, v: f32) -> f32[4] { x.set(i, v * v) }
        fn loss(t: f32[5, 3], w: f32[3]) -> f32 {
            let shared = vmap(pick, t, [0, 2, 2, 4, 7]);
            let own = vmap(pick, [t, t * 2.0], [1, 3]);
            let written = vmap(put, reshape(t, [3, 5])[:, 0:4], [0, 3, 1], w);
            sum(shared * w) + sum(own) + sum(written * written)
        }
        fn grad_loss(t: f32[5, 3], w: f32[3]) -> f32[5, 3] { grad(loss, t, w) }",
    ),
    (
        "a struct of parameters",
        "struct P { a: f32[2], b: f32 }
        fn loss(p: P, x: f32[2]) -> f32 {
            let y = p.a * x + p.b;
            sum(y * y) + sqrt(p.b * p.b + 1.0)
        }
        fn grad_loss(a: f32[2], b: f32, x: f32[2]) -> (f32[2], f32) {
            let g = grad(loss, P { a: a, b: b }, x);
            (g.a, g.b)
        }",
    ),
];

#[test]
fn programs_match_finite_differences() {
    let mut rng = Rng(0xD1FF);
    for (name, src) in PROGRAMS {
        let loss = build_entry(src, "loss");
        let grad = build_entry(src, "grad_loss");
        let args: Vec<Array> = loss.func.param_types().iter().map(|t| rng.f32s(&t.shape, -1.0, 1.0)).collect();
        // The gradient entry takes the loss's arguments, the first one spread into its
        // leaves (a struct's fields).
        let grads = driver::eval(&grad, &args);
        for (a, g) in grads.iter().enumerate() {
            let param = grad.func.param_types()[a].clone();
            assert_eq!(g.ty(), param, "{name}: gradient {a}");
        }
        let leaves = grads.len();
        for (a, g) in grads.iter().enumerate().take(leaves) {
            for (k, &gk) in f32_data(g).iter().enumerate() {
                let fd = finite_difference(&loss.func, &args, a, k);
                assert!(
                    (gk - fd).abs() <= 2e-3 * (1.0 + fd.abs()),
                    "{name}: d/d x{a}[{k}] is {gk}, finite differences give {fd}"
                );
            }
        }
        // The device agrees with the interpreter.
        let dev = podracer::cli::run_on_device(common::client(), &grad, &args).expect("runs on the device");
        common::assert_close(&grads, &dev, 1e-5);
    }
}

/// `stop_gradient(y)` is `y` as a constant: the gradient of `sum(x * stop_gradient(x))`
/// is `x`, and an `argmax` behind it needs no derivative.
#[test]
fn programs_stop_the_gradient() {
    let src = "fn loss(x: f32[3]) -> f32 {
            let s = stop_gradient(x);
            sum(x * s) + (argmax(s) as f32) * x[0]
        }
        fn main(x: f32[3]) -> (f32, f32[3]) { value_and_grad(loss, x) }";
    let e = build_entry(src, "main");
    let x = Array::f32(vec![3], vec![0.5, 2.0, -1.0]);
    let out = driver::eval(&e, &[x]);
    assert_eq!(out, [Array::f32(vec![], vec![0.25 + 4.0 + 1.0 + 0.5]), Array::f32(vec![3], vec![1.5, 2.0, -1.0])]);
}

/// Differentiating through an `argmax` is an error at the `argmax`; through a
/// comparison, at the comparison; an integer carried by a loop, at its conversion.
#[test]
fn programs_that_are_not_differentiable() {
    let argmax = build_error(
        "fn loss(x: f32[3]) -> f32 { (argmax(x) as f32) * sum(x) }
        fn main() -> f32[3] { grad(loss, [1.0, 2.0, 3.0]) }",
    );
    assert!(argmax.contains("error[E0227]: `argmax` is not differentiable"), "{argmax}");
    assert!(argmax.contains("(argmax(x) as f32)"), "{argmax}");
    let compare = build_error(
        "fn step(x: f32[3]) -> f32[3] { (x > 0.0) as f32 }
        fn loss(x: f32[3]) -> f32 { sum(step(x) * x) }
        fn main() -> f32[3] { grad(loss, [1.0, -2.0, 3.0]) }",
    );
    assert!(compare.contains("the comparison `>` is not differentiable"), "{compare}");
    let carried = build_error(
        "fn loss(x: f32[3]) -> f32 {
            let n = for i in 0..2 carry n = 0 { n + argmax(x) };
            (n as f32) * sum(x)
        }
        fn main() -> f32[3] { grad(loss, [1.0, 2.0, 3.0]) }",
    );
    assert!(carried.contains("an integer converted to `f32` is not differentiable"), "{carried}");
}

// ---------------------------------------------------------------------------------------
// Against JAX

/// The largest error of an element of `got` relative to `want`'s element. Entries
/// below 1% of the array's largest are judged relative to that 1% instead: they are sums
/// that cancel, whose rounding error follows the terms, not the sum.
fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let floor = 1e-2 * want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    got.iter().zip(want).fold(0.0f64, |m, (&g, &w)| {
        let err = (f64::from(g) - w).abs();
        let scale = w.abs().max(floor);
        m.max(if scale == 0.0 { err } else { err / scale })
    })
}

fn flat(v: &serde_json::Value, out: &mut Vec<f64>) {
    match v {
        serde_json::Value::Array(xs) => xs.iter().for_each(|x| flat(x, out)),
        x => out.push(x.as_f64().expect("a number")),
    }
}

/// Runs fixture `case` of `fixtures/grad/<file>` on `source` through the interpreter and
/// PJRT, as `podc run FILE --entry E --args ARGS --json` would, and compares with JAX.
fn against_jax(source: &str, file: &str, case: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/fixtures/grad").join(file)).expect("fixture");
    let fixture: serde_json::Value = serde_json::from_str(&text).expect("json");
    let c = &fixture[case];
    let (prog, diags) = driver::check_file(&root.join(source)).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let name = c["entry"].as_str().expect("entry");
    let e = driver::build(&prog, &[], name)
        .unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])));
    let args = podracer::io::args_from_json(&e.params, &c["args"]).expect("arguments");
    let host = driver::eval(&e, &args);
    let dev = podracer::cli::run_on_device(common::client(), &e, &args).expect("runs on the device");
    let want = c["value_and_grad"].as_array().expect("results");
    let exact = c["f64"].as_array().expect("results");
    assert_eq!(host.len(), want.len(), "{case}: number of results");
    for (k, ((h, d), (w, x))) in host.iter().zip(&dev).zip(want.iter().zip(exact)).enumerate() {
        let (mut w32, mut w64) = (vec![], vec![]);
        flat(w, &mut w32);
        flat(x, &mut w64);
        let jax_err = relative_error(&w32.iter().map(|&v| v as f32).collect::<Vec<_>>(), &w64);
        for (what, got) in [("interpreter", h), ("device", d)] {
            let err = relative_error(f32_data(got), &w32);
            println!("{case} result {k}: {what} vs jax {err:.2e} (jax f32 vs f64 {jax_err:.2e})");
            assert!(err <= 1e-5, "{case} result {k}: the {what} is {err:.2e} from jax: {got:?} vs {w32:?}");
        }
    }
}

#[test]
fn mlp_matches_jax() {
    against_jax("examples/basics/grad.pod", "mlp.json", "mlp");
}

#[test]
fn a_loop_matches_jax() {
    against_jax("tests/fixtures/grad/compositions.pod", "compositions.json", "rnn");
}

#[test]
fn softmax_and_logsumexp_match_jax() {
    against_jax("tests/fixtures/grad/compositions.pod", "compositions.json", "ce");
}

#[test]
fn products_match_jax() {
    against_jax("tests/fixtures/grad/compositions.pod", "compositions.json", "prod");
}

#[test]
fn relu_at_zero_matches_jax() {
    against_jax("tests/fixtures/grad/compositions.pod", "compositions.json", "relu");
}

/// `(loss, aux)` functions: the value and gradient are those of the loss alone, and `aux`
/// comes back unchanged, from `grad` and `value_and_grad` alike.
#[test]
fn an_auxiliary_result_rides_along() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pass/grad-aux.pod");
    let out = common::run_both(&common::entry(&path), &[]);
    // value, stats.norm, stats.pred, g, g2, stats2.norm, stats2.pred, plain value, plain g
    let [value, norm, pred, g, g2, norm2, pred2, plain_value, plain_g] = &out[..] else {
        panic!("nine arrays, got {}", out.len())
    };
    assert_eq!((value, g, g2), (plain_value, plain_g, plain_g));
    assert_eq!((norm, pred), (norm2, pred2));
    common::assert_close(std::slice::from_ref(norm), &[Array::f32(vec![], vec![5.25f32.sqrt()])], 1e-6);
}
