//! Batching against per-example evaluation, for every primitive and for loops, in the
//! manner of JAX's `lax_vmap_op_test.py`.
//!
//! One table of cases ([`cases`]): a case is a small function (one primitive, or a
//! program with loops and dynamic indexing) with generators for its arguments, drawn
//! from a deterministic PRNG (with NaN, ±inf, ±0, subnormals and out-of-range indices
//! where the values matter to the rule). Three checks run over it, with `B` examples:
//!
//! 1. each primitive's batching rule, for every placement of every argument's batch axis
//!    (absent, or before any dimension): the rule's results, moved to axis 0, hold the
//!    per-example results, bit for bit, on the reference interpreter;
//! 2. `vmap` of each case, for every subset of batched parameters, the same way. The
//!    programs cover loops with batched constants, batched carries, carries that only
//!    the body makes batched (through a chain of carries, and in a loop that never
//!    runs), nested loops, and reads and writes at batched dynamic indices;
//! 3. all the batched functions of (1) and (2) in ONE module compiled by the PJRT CPU
//!    plugin (one compile keeps XLA's time small), against the interpreter on the same
//!    batched functions, within `tests/compiler/prims.rs`'s tolerances.

use crate::common;

use common::prims::{convs, gather, pools, scatter, select_and_gather_add, select_and_scatter_add, window_max};
use common::rng::Rng;
use podracer::array::{Array, ArrayTy, DType, Data};
use podracer::ir::build::Builder;
use podracer::ir::eval::eval_func;
use podracer::ir::verify::verify;
use podracer::ir::{Func, Var};
use podracer::lower::lower_module;
use podracer::prims::batching::{BVal, batched_ty, bdim_at};
use podracer::prims::{
    AllReduce, AllReduceOp, Argmax, Argsort, Binary, BinaryOp, Broadcast, CmpOp, Compare, Concat, Constant, Convert,
    Dot, DynamicSlice, DynamicUpdateSlice, Iota, Prim, Reduce, ReduceOp, Reshape, Reverse, Select, Slice, StopGradient,
    Threefry, Transpose, Unary, UnaryOp,
};
use podracer::transform::vmap::{batch_into, vmap};

/// The batch size.
const B: usize = 3;

// ---------------------------------------------------------------------------------------
// Inputs

/// Values that batching must move exactly: the gathers and scatters of batched dynamic
/// indexing, in particular, must keep NaN, -0.0, infinities and subnormals.
const F32_EDGES: [f32; 7] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, -1e-40];

/// Edge values for max and min reductions. Zeros and subnormals compare equal on the
/// device, and which of them a reduction returns depends on the order XLA combines
/// elements in, batched or not, so they are left out.
const F32_UNTIED_EDGES: [f32; 3] = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];

/// How to draw one argument.
#[derive(Clone, Debug)]
enum Gen {
    /// f32, uniform in `[lo, hi)`.
    F32(Vec<usize>, f32, f32),
    /// f32, uniform in `[-4, 4)` with these edge values mixed in.
    Edgy(Vec<usize>, &'static [f32]),
    /// i32, uniform in `[lo, hi)`.
    I32(Vec<usize>, i32, i32),
    U32(Vec<usize>),
    U8(Vec<usize>),
    Bool(Vec<usize>),
}

impl Gen {
    fn ty(&self) -> ArrayTy {
        match self {
            Gen::F32(s, ..) | Gen::Edgy(s, _) => ArrayTy::new(DType::F32, s.clone()),
            Gen::I32(s, ..) => ArrayTy::new(DType::I32, s.clone()),
            Gen::U32(s) => ArrayTy::new(DType::U32, s.clone()),
            Gen::U8(s) => ArrayTy::new(DType::U8, s.clone()),
            Gen::Bool(s) => ArrayTy::new(DType::Bool, s.clone()),
        }
    }

    fn draw(&self, rng: &mut Rng) -> Array {
        match self {
            Gen::F32(s, lo, hi) => rng.f32s(s, *lo, *hi),
            Gen::Edgy(s, edges) => {
                let n = s.iter().product();
                let v = (0..n)
                    .map(|_| {
                        if rng.next().is_multiple_of(3) {
                            edges[(rng.next() % edges.len() as u64) as usize]
                        } else {
                            rng.f32(-4.0, 4.0)
                        }
                    })
                    .collect();
                Array::f32(s.clone(), v)
            }
            Gen::I32(s, lo, hi) => rng.i32s(s, *lo, *hi),
            Gen::U32(s) => rng.u32s(s),
            Gen::U8(s) => rng.u8s(s),
            Gen::Bool(s) => rng.bools(s),
        }
    }
}

fn f32s(shape: &[usize]) -> Gen {
    Gen::F32(shape.to_vec(), -4.0, 4.0)
}

fn edgy(shape: &[usize]) -> Gen {
    Gen::Edgy(shape.to_vec(), &F32_EDGES)
}

fn i32s(shape: &[usize]) -> Gen {
    Gen::I32(shape.to_vec(), -50, 50)
}

/// A dynamic start index for a dimension of `n`: in range, and out of it on both sides
/// (XLA clamps it).
fn index(n: usize) -> Gen {
    Gen::I32(vec![], -2, n as i32 + 3)
}

/// The examples stacked along a new dimension `axis`.
fn stack(xs: &[Array], axis: usize) -> Array {
    let ty = xs[0].ty();
    let bytes: Vec<Vec<u8>> = xs.iter().map(Array::to_bytes).collect();
    let inner = ty.shape[axis..].iter().product::<usize>() * ty.dtype.size();
    let outer: usize = ty.shape[..axis].iter().product();
    let mut out = vec![];
    for o in 0..outer {
        for x in &bytes {
            out.extend_from_slice(&x[o * inner..(o + 1) * inner]);
        }
    }
    let ty = batched_ty(&ty, axis, xs.len());
    Array::from_bytes(&ty, &out).expect("stacked bytes fit the type")
}

/// Example `e` of an array batched at axis 0.
fn example(x: &Array, e: usize) -> Array {
    let ty = ArrayTy::new(x.dtype(), x.shape[1..].to_vec());
    let n = ty.numel() * ty.dtype.size();
    Array::from_bytes(&ty, &x.to_bytes()[e * n..(e + 1) * n]).expect("one example")
}

/// Bit for bit, except that any NaN matches any NaN.
fn same(a: &Array, b: &Array) -> bool {
    if let (Data::F32(x), Data::F32(y)) = (&a.data, &b.data) {
        a.shape == b.shape
            && x.len() == y.len()
            && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()))
    } else {
        a == b
    }
}

// ---------------------------------------------------------------------------------------
// The table

/// How closely the device must agree with the interpreter.
#[derive(Clone, Copy, Debug)]
enum Tol {
    /// Bit for bit; any NaN matches any NaN.
    Exact,
    /// Floats within this many units in the last place (XLA's own transcendentals).
    Ulps(u32),
    /// Floats within `rel * max(1, |x|)` (sums, which XLA may associate differently).
    Close(f32),
}

type Build = Box<dyn Fn(&mut Builder, &[Var]) -> Vec<Var>>;

/// One row of the table.
struct Case {
    name: String,
    args: Vec<Gen>,
    tol: Tol,
    /// The primitive, for a case of one (its rule is also tested on its own).
    prim: Option<Prim>,
    build: Build,
}

impl Case {
    /// The case's function on one example.
    fn func(&self) -> Func {
        let mut b = Builder::new();
        let params: Vec<Var> = self.args.iter().map(|g| b.fresh(g.ty())).collect();
        let results = (self.build)(&mut b, &params);
        let f = b.finish("case", params, results);
        verify(&f).unwrap_or_else(|e| panic!("{}: the case does not verify: {e}", self.name));
        f
    }
}

fn case(name: impl Into<String>, prim: Prim, args: Vec<Gen>, tol: Tol) -> Case {
    let p = prim.clone();
    Case { name: name.into(), args, tol, prim: Some(prim), build: Box::new(move |b, vs| b.prim(p.clone(), vs)) }
}

fn exact(name: impl Into<String>, prim: Prim, args: Vec<Gen>) -> Case {
    case(name, prim, args, Tol::Exact)
}

fn program(name: &str, args: Vec<Gen>, tol: Tol, build: Build) -> Case {
    Case { name: name.to_string(), args, tol, prim: None, build }
}

fn unary(op: UnaryOp) -> Prim {
    Prim::Unary(Unary { op })
}

fn binary(op: BinaryOp) -> Prim {
    Prim::Binary(Binary { op })
}

fn cases() -> Vec<Case> {
    let mut cs = prim_cases();
    cs.extend(program_cases());
    cs
}

/// Every primitive, on a few shapes and dtypes.
fn prim_cases() -> Vec<Case> {
    let mut cs = vec![];
    let s = [2, 3];

    // elementwise
    for op in [
        UnaryOp::Neg,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sqrt,
        UnaryOp::Abs,
        UnaryOp::Floor,
        UnaryOp::Round,
        UnaryOp::Sign,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Log1p,
        UnaryOp::Logistic,
        UnaryOp::Relu,
        UnaryOp::Not,
    ] {
        let (arg, tol) = match op {
            UnaryOp::Exp | UnaryOp::Tanh | UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Logistic => (f32s(&s), Tol::Ulps(4)),
            UnaryOp::Log | UnaryOp::Log1p => (Gen::F32(s.to_vec(), 1e-3, 50.0), Tol::Ulps(4)),
            UnaryOp::Sqrt => (Gen::F32(s.to_vec(), 0.0, 50.0), Tol::Exact),
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sign
            | UnaryOp::Relu => (edgy(&s), Tol::Exact),
            UnaryOp::Not => (i32s(&s), Tol::Exact),
        };
        cs.push(case(format!("{op:?}"), unary(op), vec![arg], tol));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Pow,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
        BinaryOp::ShiftLeft,
        BinaryOp::ShiftRightLogical,
    ] {
        let (args, tol) = match op {
            BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Rem => {
                (vec![edgy(&s), edgy(&s)], Tol::Exact)
            }
            BinaryOp::Max | BinaryOp::Min => (vec![edgy(&s), edgy(&s)], Tol::Exact),
            BinaryOp::Pow => (vec![Gen::F32(s.to_vec(), 0.0, 4.0), Gen::F32(s.to_vec(), -3.0, 3.0)], Tol::Ulps(4)),
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor => {
                (vec![Gen::U32(s.to_vec()), Gen::U32(s.to_vec())], Tol::Exact)
            }
            BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical => {
                (vec![i32s(&s), Gen::I32(s.to_vec(), -1, 34)], Tol::Exact)
            }
        };
        cs.push(case(format!("{op:?}"), binary(op), args, tol));
    }
    cs.push(exact("And bool", binary(BinaryOp::And), vec![Gen::Bool(s.to_vec()), Gen::Bool(s.to_vec())]));
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        cs.push(exact(format!("{op:?}"), Prim::Compare(Compare { op }), vec![edgy(&s), edgy(&s)]));
    }
    cs.push(exact("Lt i32", Prim::Compare(Compare { op: CmpOp::Lt }), vec![Gen::I32(vec![4], -2, 2); 2]));
    cs.push(exact("select", Prim::Select(Select), vec![Gen::Bool(s.to_vec()), edgy(&s), edgy(&s)]));
    cs.push(exact("select scalar", Prim::Select(Select), vec![Gen::Bool(vec![]), i32s(&[]), i32s(&[])]));
    cs.push(exact("stop_gradient", Prim::StopGradient(StopGradient), vec![edgy(&s)]));
    cs.push(exact("convert f32 to i32", Prim::Convert(Convert { to: DType::I32 }), vec![edgy(&s)]));
    cs.push(exact("convert bool to f32", Prim::Convert(Convert { to: DType::F32 }), vec![Gen::Bool(s.to_vec())]));

    // literals: no arguments, never batched (the results are broadcast)
    cs.push(exact("constant", Prim::Constant(Constant { value: Array::f32(vec![2], vec![-0.0, f32::NAN]) }), vec![]));
    cs.push(exact("iota", Prim::Iota(Iota { ty: ArrayTy::new(DType::I32, vec![2, 3]), dim: 1 }), vec![]));

    // layout
    let bcast =
        |shape: &[usize], dims: &[usize]| Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: dims.to_vec() });
    cs.push(exact("broadcast row", bcast(&[2, 3], &[1]), vec![edgy(&[3])]));
    cs.push(exact("broadcast size-1 dim", bcast(&[3, 4], &[0, 1]), vec![edgy(&[3, 1])]));
    cs.push(exact("broadcast scalar", bcast(&[2, 2], &[]), vec![i32s(&[])]));
    cs.push(exact("broadcast middle", bcast(&[2, 4, 3], &[0, 2]), vec![i32s(&[2, 3])]));
    let reshape = |shape: &[usize]| Prim::Reshape(Reshape { shape: shape.to_vec() });
    cs.push(exact("reshape 3x4 to 2x6", reshape(&[2, 6]), vec![edgy(&[3, 4])]));
    cs.push(exact("reshape to scalar", reshape(&[]), vec![i32s(&[1, 1])]));
    let transpose = |perm: &[usize]| Prim::Transpose(Transpose { perm: perm.to_vec() });
    cs.push(exact("transpose 2d", transpose(&[1, 0]), vec![edgy(&[3, 4])]));
    cs.push(exact("transpose 3d", transpose(&[2, 0, 1]), vec![i32s(&[2, 3, 4])]));
    cs.push(exact("concat axis 0", Prim::Concat(Concat { axis: 0 }), vec![edgy(&[2, 3]), edgy(&[1, 3])]));
    cs.push(exact(
        "concat axis 1, three",
        Prim::Concat(Concat { axis: 1 }),
        vec![i32s(&[2, 1]), i32s(&[2, 2]), i32s(&[2, 3])],
    ));

    // indexing
    let slice = |start: &[usize], limit: &[usize]| Prim::Slice(Slice { start: start.to_vec(), limit: limit.to_vec() });
    cs.push(exact("slice 2d", slice(&[1, 0], &[3, 5]), vec![edgy(&[4, 5])]));
    cs.push(exact("slice 1d", slice(&[2], &[5]), vec![i32s(&[6])]));
    let ds = |sizes: &[usize]| Prim::DynamicSlice(DynamicSlice { sizes: sizes.to_vec() });
    for sizes in [[2, 3], [1, 1], [5, 1], [2, 6], [0, 2]] {
        cs.push(exact(format!("dynamic_slice {sizes:?}"), ds(&sizes), vec![edgy(&[5, 6]), index(5), index(6)]));
    }
    cs.push(exact("dynamic_slice 1d i32", ds(&[3]), vec![i32s(&[7]), index(7)]));
    cs.push(exact("dynamic_slice bool", ds(&[1, 2]), vec![Gen::Bool(vec![3, 4]), index(3), index(4)]));
    cs.push(exact("dynamic_slice 3d", ds(&[1, 2, 2]), vec![i32s(&[2, 3, 4]), index(2), index(3), index(4)]));
    let dus = Prim::DynamicUpdateSlice(DynamicUpdateSlice);
    for window in [[2, 3], [1, 1], [5, 2], [1, 6], [0, 2]] {
        cs.push(exact(
            format!("dynamic_update_slice {window:?}"),
            dus.clone(),
            vec![edgy(&[5, 6]), edgy(&window), index(5), index(6)],
        ));
    }
    cs.push(exact("dynamic_update_slice 1d i32", dus.clone(), vec![i32s(&[7]), i32s(&[3]), index(7)]));
    cs.push(exact(
        "dynamic_update_slice bool",
        dus.clone(),
        vec![Gen::Bool(vec![3, 4]), Gen::Bool(vec![1, 2]), index(3), index(4)],
    ));
    cs.push(exact("dynamic_update_slice whole", dus, vec![i32s(&[2, 3]), i32s(&[2, 3]), index(2), index(3)]));

    // gather and scatter, with index vectors out of range on both sides. Each scatter
    // writes one window per operand (per batching position), so windows never overlap,
    // batched or not.
    let none: (&[usize], &[usize]) = (&[], &[]);
    let starts = |shape: &[usize]| Gen::I32(shape.to_vec(), -2, 8);
    cs.push(exact(
        "gather windows",
        gather(&[1, 2], &[], none, &[0, 1], &[2, 3]),
        vec![edgy(&[5, 6]), starts(&[2, 2])],
    ));
    cs.push(exact(
        "gather rows, collapsed",
        gather(&[1], &[0], none, &[0], &[1, 6]),
        vec![i32s(&[5, 6]), starts(&[3, 1])],
    ));
    cs.push(exact(
        "gather one cell per example",
        gather(&[1, 2], &[], (&[0], &[0]), &[2], &[1, 2, 2]),
        vec![edgy(&[3, 4, 5]), starts(&[3, 1])],
    ));
    cs.push(exact(
        "gather, batching dims in the middle",
        gather(&[0, 3], &[], (&[1], &[1]), &[0, 2], &[2, 1, 3]),
        vec![i32s(&[4, 3, 5]), starts(&[2, 3, 2])],
    ));
    cs.push(exact(
        "scatter one window",
        scatter(&[1, 2], &[], none, &[0, 1]),
        vec![edgy(&[5, 6]), starts(&[1, 2]), edgy(&[1, 2, 3])],
    ));
    cs.push(exact(
        "scatter one cell per example",
        scatter(&[], &[1], (&[0], &[0]), &[1]),
        vec![edgy(&[3, 4]), starts(&[3, 1]), edgy(&[3])],
    ));
    cs.push(exact(
        "scatter, batching dims in the middle",
        scatter(&[1, 2], &[], (&[1], &[0]), &[0, 2]),
        vec![i32s(&[4, 3, 5]), starts(&[3, 2]), i32s(&[3, 2, 2])],
    ));

    // reductions
    let reduce = |op, axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
    for axes in [&[0][..], &[1], &[0, 1], &[]] {
        cs.push(case(format!("Sum axes {axes:?}"), reduce(ReduceOp::Sum, axes), vec![f32s(&[3, 4])], Tol::Close(1e-5)));
    }
    cs.push(case("Sum 3d axes [2, 0]", reduce(ReduceOp::Sum, &[2, 0]), vec![f32s(&[2, 3, 4])], Tol::Close(1e-5)));
    let untied = |shape: &[usize]| Gen::Edgy(shape.to_vec(), &F32_UNTIED_EDGES);
    cs.push(exact("Max axes [1]", reduce(ReduceOp::Max, &[1]), vec![untied(&[3, 4])]));
    cs.push(exact("Min 3d axes [0, 2]", reduce(ReduceOp::Min, &[0, 2]), vec![untied(&[2, 3, 4])]));
    cs.push(exact("Sum i32", reduce(ReduceOp::Sum, &[0]), vec![i32s(&[3, 4])]));
    cs.push(case("Prod 3d axes [0, 2]", reduce(ReduceOp::Prod, &[0, 2]), vec![f32s(&[2, 3, 4])], Tol::Close(1e-5)));
    cs.push(exact("Prod i32", reduce(ReduceOp::Prod, &[1]), vec![i32s(&[3, 4])]));
    cs.push(exact("Max bool", reduce(ReduceOp::Max, &[1]), vec![Gen::Bool(vec![4, 3])]));
    let argmax = |axis| Prim::Argmax(Argmax { axis });
    cs.push(exact("argmax axis 1", argmax(1), vec![edgy(&[3, 4])]));
    cs.push(exact("argmax axis 0", argmax(0), vec![edgy(&[3, 4])]));
    cs.push(exact("argmax i32 3d", argmax(1), vec![Gen::I32(vec![2, 3, 2], -2, 2)]));
    let argsort = |axis| Prim::Argsort(Argsort { axis });
    cs.push(exact("argsort axis 1", argsort(1), vec![edgy(&[3, 4])]));
    cs.push(exact("argsort axis 0 ties", argsort(0), vec![Gen::I32(vec![4, 3], -2, 2)]));
    cs.push(exact("argsort u32 3d", argsort(2), vec![Gen::U32(vec![2, 3, 2])]));
    let (key, counters) = (Gen::U32(vec![]), Gen::U32(vec![2, 3]));
    cs.push(exact("threefry scalar key", Prim::Threefry(Threefry), vec![key.clone(), key, counters.clone(), counters]));
    let (keys, counters) = (Gen::U32(vec![2]), Gen::U32(vec![2, 3]));
    cs.push(exact("threefry keys [2]", Prim::Threefry(Threefry), vec![keys.clone(), keys, counters.clone(), counters]));
    cs.push(exact("pmean", Prim::AllReduce(AllReduce { op: AllReduceOp::Mean }), vec![edgy(&s)]));
    cs.push(exact("psum i32", Prim::AllReduce(AllReduce { op: AllReduceOp::Sum }), vec![i32s(&s)]));

    // dot_general
    let dot = |lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]| {
        Prim::Dot(Dot {
            lhs_batch: lb.to_vec(),
            rhs_batch: rb.to_vec(),
            lhs_contract: lc.to_vec(),
            rhs_contract: rc.to_vec(),
        })
    };
    let close = Tol::Close(1e-5);
    cs.push(case("matmul", dot(&[], &[], &[1], &[0]), vec![f32s(&[3, 4]), f32s(&[4, 2])], close));
    cs.push(case("matvec", dot(&[], &[], &[1], &[0]), vec![f32s(&[3, 4]), f32s(&[4])], close));
    cs.push(case("vecdot", dot(&[], &[], &[0], &[0]), vec![f32s(&[4]), f32s(&[4])], close));
    cs.push(case("lhs transposed", dot(&[], &[], &[0], &[0]), vec![f32s(&[4, 3]), f32s(&[4, 2])], close));
    cs.push(case("batched matmul", dot(&[0], &[0], &[2], &[1]), vec![f32s(&[2, 3, 4]), f32s(&[2, 4, 2])], close));
    cs.push(case(
        "batch in the middle, two contractions",
        dot(&[1], &[1], &[2, 0], &[0, 2]),
        vec![f32s(&[3, 2, 4]), f32s(&[4, 2, 3])],
        close,
    ));
    cs.push(case("outer product", dot(&[], &[], &[], &[]), vec![f32s(&[3]), f32s(&[2])], close));
    cs.push(exact("matmul i32", dot(&[], &[], &[1], &[0]), vec![i32s(&[2, 3]), i32s(&[3, 2])]));

    // convolutions and windows
    for (name, p, l, r) in convs() {
        cs.push(case(name, p, vec![f32s(&l), f32s(&r)], close));
    }
    for (name, w, x) in pools() {
        let out = window_max(&w).rules().infer(&[ArrayTy::new(DType::F32, x.clone())]).expect("fits").remove(0);
        cs.push(exact(name, window_max(&w), vec![f32s(&x)]));
        cs.push(case(format!("{name}, scatter"), select_and_scatter_add(&w), vec![f32s(&out.shape), f32s(&x)], close));
        cs.push(exact(format!("{name}, gather"), select_and_gather_add(&w), vec![f32s(&x), f32s(&x)]));
    }
    cs.push(exact("reverse", Prim::Reverse(Reverse { dims: vec![0, 2] }), vec![edgy(&[2, 3, 4])]));

    // u8: nothing in batching depends on the dtype; these keep it so
    let u8s = |shape: &[usize]| Gen::U8(shape.to_vec());
    for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Div] {
        cs.push(exact(format!("{op:?} u8"), binary(op), vec![u8s(&s), u8s(&s)]));
    }
    cs.push(exact("Lt u8", Prim::Compare(Compare { op: CmpOp::Lt }), vec![u8s(&s), u8s(&s)]));
    cs.push(exact("convert f32 to u8", Prim::Convert(Convert { to: DType::U8 }), vec![edgy(&s)]));
    cs.push(exact("convert u8 to f32", Prim::Convert(Convert { to: DType::F32 }), vec![u8s(&s)]));
    cs.push(exact("Sum u8", reduce(ReduceOp::Sum, &[1]), vec![u8s(&[3, 4])]));
    cs.push(exact("argsort u8", argsort(1), vec![u8s(&[3, 4])]));
    cs.push(exact("matmul u8", dot(&[], &[], &[1], &[0]), vec![u8s(&[2, 3]), u8s(&[3, 2])]));
    cs
}

// ---------------------------------------------------------------------------------------
// Programs: loops and dynamic indexing

fn i32_scalar() -> ArrayTy {
    ArrayTy::scalar(DType::I32)
}

fn constant(b: &mut Builder, value: Array) -> Var {
    b.prim1(Prim::Constant(Constant { value }), &[])
}

fn bin(b: &mut Builder, op: BinaryOp, x: Var, y: Var) -> Var {
    b.prim1(binary(op), &[x, y])
}

fn program_cases() -> Vec<Case> {
    let mut cs = vec![];

    // `for i in 2..12 { acc += x * f32(i); n += 1 }`: `x` is a loop constant. With `x`
    // batched alone, `acc` becomes batched through the body.
    cs.push(program(
        "loop with a constant and two carries",
        vec![f32s(&[3]), f32s(&[3]), i32s(&[])],
        Tol::Close(1e-5),
        Box::new(|b, vs| {
            let (x, acc, n) = (vs[0], vs[1], vs[2]);
            b.begin_loop();
            let i = b.fresh(i32_scalar());
            let acc_c = b.fresh(b.ty(acc).clone());
            let n_c = b.fresh(i32_scalar());
            let fi = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[i]);
            let fi = b.prim1(Prim::Broadcast(Broadcast { shape: vec![3], dims: vec![] }), &[fi]);
            let t = bin(b, BinaryOp::Mul, x, fi);
            let acc2 = bin(b, BinaryOp::Add, acc_c, t);
            let one = constant(b, Array::i32(vec![], vec![1]));
            let n2 = bin(b, BinaryOp::Add, n_c, one);
            b.end_loop(2, 12, &[acc, n], vec![i, acc_c, n_c], vec![acc2, n2])
        }),
    ));

    // `for _ in 0..4 { (p, q, r) = (p + x, p, q) }`: with `x` batched alone, `p` is
    // batched after one round of the fixpoint, `q` after two, `r` after three.
    cs.push(program(
        "carries batched through a chain",
        vec![edgy(&[2]), edgy(&[2]), edgy(&[2]), edgy(&[2])],
        Tol::Exact,
        Box::new(|b, vs| {
            let x = vs[0];
            let init = &vs[1..];
            b.begin_loop();
            let i = b.fresh(i32_scalar());
            let c: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
            let p2 = bin(b, BinaryOp::Add, c[0], x);
            let outs = b.end_loop(0, 4, init, vec![i, c[0], c[1], c[2]], vec![p2, c[0], c[1]]);
            vec![outs[2], outs[1], outs[0]]
        }),
    ));

    // The same kind of loop that never runs: the carry the body would make batched is
    // its (broadcast) initial value.
    cs.push(program(
        "loop that never runs",
        vec![f32s(&[2]), f32s(&[2])],
        Tol::Exact,
        Box::new(|b, vs| {
            let (x, acc) = (vs[0], vs[1]);
            b.begin_loop();
            let i = b.fresh(i32_scalar());
            let a = b.fresh(b.ty(acc).clone());
            let a2 = bin(b, BinaryOp::Add, a, x);
            b.end_loop(3, 3, &[acc], vec![i, a], vec![a2])
        }),
    ));

    // Nested loops: `for i in 0..3 { for j in 0..4 { s = s * 2 + (i - j) + y } }`. The
    // inner loop takes `i` and `y` as constants; `y` reaches it through the outer loop.
    cs.push(program(
        "nested loops",
        vec![Gen::I32(vec![], -9, 9), Gen::I32(vec![], -9, 9)],
        Tol::Exact,
        Box::new(|b, vs| {
            let (s, y) = (vs[0], vs[1]);
            b.begin_loop();
            let i = b.fresh(i32_scalar());
            let s_o = b.fresh(i32_scalar());
            b.begin_loop();
            let j = b.fresh(i32_scalar());
            let s_i = b.fresh(i32_scalar());
            let two = constant(b, Array::i32(vec![], vec![2]));
            let s2 = bin(b, BinaryOp::Mul, s_i, two);
            let d = bin(b, BinaryOp::Sub, i, j);
            let s3 = bin(b, BinaryOp::Add, s2, d);
            let s4 = bin(b, BinaryOp::Add, s3, y);
            let inner = b.end_loop(0, 4, &[s_o], vec![j, s_i], vec![s4]);
            b.end_loop(0, 3, &[s], vec![i, s_o], inner)
        }),
    ));

    // An environment step, as RL code writes it: read and write one cell of a grid at
    // (batched) coordinates that walk off the grid (clamped), accumulating what it read.
    cs.push(program(
        "grid cell reads and writes in a loop",
        vec![edgy(&[4, 5]), index(4), index(5), f32s(&[])],
        Tol::Exact,
        Box::new(|b, vs| {
            let (g, y, x, v) = (vs[0], vs[1], vs[2], vs[3]);
            let zero = constant(b, Array::f32(vec![], vec![0.0]));
            b.begin_loop();
            let t = b.fresh(i32_scalar());
            let g_c = b.fresh(b.ty(g).clone());
            let acc = b.fresh(ArrayTy::scalar(DType::F32));
            let yy = bin(b, BinaryOp::Add, y, t);
            let xx = bin(b, BinaryOp::Sub, x, t);
            let cell = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: vec![1, 1] }), &[g_c, yy, xx]);
            let cell = b.prim1(Prim::Reshape(Reshape { shape: vec![] }), &[cell]);
            let acc2 = bin(b, BinaryOp::Max, acc, cell);
            let w = bin(b, BinaryOp::Add, v, cell);
            let w = b.prim1(Prim::Broadcast(Broadcast { shape: vec![1, 1], dims: vec![] }), &[w]);
            let g2 = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[g_c, w, yy, xx]);
            b.end_loop(0, 3, &[g, zero], vec![t, g_c, acc], vec![g2, acc2])
        }),
    ));

    // Windows longer than one at batched starts: copy a 3x2 block to another place.
    cs.push(program(
        "window copies in a loop",
        vec![edgy(&[6, 4]), index(6)],
        Tol::Exact,
        Box::new(|b, vs| {
            let (g, k) = (vs[0], vs[1]);
            let one = constant(b, Array::i32(vec![], vec![1]));
            let two = constant(b, Array::i32(vec![], vec![2]));
            b.begin_loop();
            let t = b.fresh(i32_scalar());
            let g_c = b.fresh(b.ty(g).clone());
            let r = bin(b, BinaryOp::Add, k, t);
            let w = b.prim1(Prim::DynamicSlice(DynamicSlice { sizes: vec![3, 2] }), &[g_c, r, one]);
            let w = b.prim1(unary(UnaryOp::Neg), &[w]);
            let r2 = bin(b, BinaryOp::Sub, k, t);
            let g2 = b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &[g_c, w, r2, two]);
            b.end_loop(0, 3, &[g], vec![t, g_c], vec![g2])
        }),
    ));

    // A greedy policy rolled out: a dot with one batched operand, argmax and a carry of
    // another dtype, in a loop.
    cs.push(program(
        "policy rollout",
        vec![f32s(&[3, 4]), f32s(&[3])],
        Tol::Close(1e-5),
        Box::new(|b, vs| {
            let (w, obs) = (vs[0], vs[1]);
            let a0 = constant(b, Array::i32(vec![], vec![0]));
            b.begin_loop();
            let t = b.fresh(i32_scalar());
            let o = b.fresh(b.ty(obs).clone());
            let a = b.fresh(i32_scalar());
            let dot = Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![0], rhs_contract: vec![0] };
            let logits = b.prim1(Prim::Dot(dot), &[o, w]);
            let a2 = b.prim1(Prim::Argmax(Argmax { axis: 0 }), &[logits]);
            let fa = b.prim1(Prim::Convert(Convert { to: DType::F32 }), &[a2]);
            let fa = b.prim1(Prim::Broadcast(Broadcast { shape: vec![3], dims: vec![] }), &[fa]);
            let half = constant(b, Array::f32(vec![3], vec![0.5; 3]));
            let o2 = bin(b, BinaryOp::Mul, o, half);
            let o3 = bin(b, BinaryOp::Sub, o2, fa);
            b.end_loop(0, 3, &[obs, a0], vec![t, o, a], vec![o3, a2])
        }),
    ));

    // Results that do not depend on the batch (a constant, an unbatched parameter) are
    // broadcast; a parameter may be a result, twice.
    cs.push(program(
        "results of every kind",
        vec![edgy(&[2]), i32s(&[])],
        Tol::Exact,
        Box::new(|b, vs| {
            let (a, c) = (vs[0], vs[1]);
            let k = constant(b, Array::f32(vec![2], vec![1.5, -0.0]));
            let one = constant(b, Array::i32(vec![], vec![1]));
            let c1 = bin(b, BinaryOp::Add, c, one);
            vec![a, k, c1, a]
        }),
    ));
    cs
}

// ---------------------------------------------------------------------------------------
// Instances: a case with its arguments' batch axes

/// A case with a placement of every argument's batch axis.
struct Instance<'c> {
    case: &'c Case,
    axes: Vec<Option<usize>>,
    /// Through the primitive's rule directly (check 1) rather than `vmap` (check 2).
    rule: bool,
}

/// Every placement of the arguments' batch axes: absent, or before any dimension. With
/// `leading`, only absent or 0 (what `vmap` offers).
fn placements(args: &[Gen], leading: bool) -> Vec<Vec<Option<usize>>> {
    let mut all = vec![vec![]];
    for g in args {
        let last = if leading { 0 } else { g.ty().rank() };
        let choices: Vec<Option<usize>> = std::iter::once(None).chain((0..=last).map(Some)).collect();
        all = all.iter().flat_map(|p| choices.iter().map(move |&c| [p.clone(), vec![c]].concat())).collect();
    }
    all
}

/// Check 1's instances: each primitive's rule with at least one batched argument (or,
/// for a literal, none).
fn rule_instances(cases: &[Case]) -> Vec<Instance<'_>> {
    let mut out = vec![];
    for c in cases.iter().filter(|c| c.prim.is_some()) {
        for axes in placements(&c.args, false) {
            if c.args.is_empty() || axes.iter().any(Option::is_some) {
                out.push(Instance { case: c, axes, rule: true });
            }
        }
    }
    out
}

/// Check 2's instances: `vmap` of each case with each subset of batched parameters.
fn vmap_instances(cases: &[Case]) -> Vec<Instance<'_>> {
    let mut out = vec![];
    for c in cases {
        for axes in placements(&c.args, true) {
            out.push(Instance { case: c, axes, rule: false });
        }
    }
    out
}

impl Instance<'_> {
    fn name(&self) -> String {
        let how = if self.rule { "rule" } else { "vmap" };
        format!("{} ({how}, batch axes {:?})", self.case.name, self.axes)
    }

    /// Emits the batched computation into `b`; returns its parameters and its results,
    /// batched at axis 0.
    fn emit(&self, b: &mut Builder, f: &Func) -> (Vec<Var>, Vec<Var>) {
        let params: Vec<BVal> = self
            .case
            .args
            .iter()
            .zip(&self.axes)
            .map(|(g, axis)| match axis {
                Some(a) => BVal::batched(b.fresh(batched_ty(&g.ty(), *a, B)), *a),
                None => BVal::unbatched(b.fresh(g.ty())),
            })
            .collect();
        let outs = match (&self.case.prim, self.rule) {
            (Some(p), true) => p.rules().batch(b, &params),
            (Some(_) | None, false) | (None, true) => batch_into(b, f, &params, B),
        };
        let results = outs.into_iter().map(|o| bdim_at(b, o, 0, B)).collect();
        (params.iter().map(|p| p.var).collect(), results)
    }

    /// The batched function on its own: through `vmap` itself when the placement is one
    /// `vmap` offers.
    fn func(&self, f: &Func) -> Func {
        if !self.rule {
            let batched: Vec<bool> = self.axes.iter().map(Option::is_some).collect();
            return vmap(f, &batched, B);
        }
        let mut b = Builder::new();
        let (params, results) = self.emit(&mut b, f);
        let g = b.finish("batched", params, results);
        verify(&g).unwrap_or_else(|e| panic!("{}: does not verify: {e}", self.name()));
        g
    }

    /// Arguments for the batched function, and the same split into examples.
    fn inputs(&self, rng: &mut Rng) -> (Vec<Array>, Vec<Vec<Array>>) {
        let mut batched = vec![];
        let mut examples = vec![vec![]; B];
        for (g, axis) in self.case.args.iter().zip(&self.axes) {
            match axis {
                Some(a) => {
                    let xs: Vec<Array> = (0..B).map(|_| g.draw(rng)).collect();
                    batched.push(stack(&xs, *a));
                    for (e, x) in xs.into_iter().enumerate() {
                        examples[e].push(x);
                    }
                }
                None => {
                    let x = g.draw(rng);
                    for ex in &mut examples {
                        ex.push(x.clone());
                    }
                    batched.push(x);
                }
            }
        }
        (batched, examples)
    }
}

/// Checks on the interpreter that example `e` of each batched result is the case's
/// result on example `e`; returns a description of the first difference.
fn check_examples(inst: &Instance, f: &Func, rng: &mut Rng) -> Result<(), String> {
    let g = inst.func(f);
    let (args, examples) = inst.inputs(rng);
    let got = eval_func(&g, &args);
    for (e, ex) in examples.iter().enumerate() {
        let want = eval_func(f, ex);
        for (k, (r, w)) in got.iter().zip(&want).enumerate() {
            let r = example(r, e);
            if !same(&r, w) {
                return Err(format!("result {k}, example {e}: batched {r:?}, alone {w:?}"));
            }
        }
    }
    Ok(())
}

fn check_all(instances: &[Instance]) {
    let mut rng = Rng(0xBA7C4);
    let mut failures = vec![];
    for inst in instances {
        let f = inst.case.func();
        // A rule that panics fails its instance, named, rather than the whole test.
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_examples(inst, &f, &mut rng))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{}: {e}", inst.name())),
            Err(_) => failures.push(format!("{}: panicked (message above)", inst.name())),
        }
    }
    assert!(failures.is_empty(), "{} of {} differ:\n{}", failures.len(), instances.len(), failures.join("\n"));
}

#[test]
fn every_batching_rule_matches_per_example_evaluation() {
    let cases = cases();
    let instances = rule_instances(&cases);
    let prims = cases.iter().filter(|c| c.prim.is_some()).count();
    assert!(instances.len() > 3 * prims, "only {} instances", instances.len());
    check_all(&instances);
}

#[test]
fn vmap_matches_per_example_evaluation() {
    check_all(&vmap_instances(&cases()));
}

// ---------------------------------------------------------------------------------------
// The device

/// Distance in units in the last place between two finite floats.
fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let bits = i64::from(x.to_bits());
        if bits < 0x8000_0000 { bits } else { 0x8000_0000 - bits }
    };
    (key(a) - key(b)).unsigned_abs()
}

fn close(dev: &Array, want: &Array, tol: Tol) -> bool {
    let (Data::F32(d), Data::F32(w)) = (&dev.data, &want.data) else {
        return dev == want;
    };
    dev.shape == want.shape
        && d.iter().zip(w).all(|(&x, &y)| {
            let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
            let finite = x.is_finite() && y.is_finite();
            match tol {
                Tol::Exact => same,
                Tol::Ulps(n) => same || (finite && ulps(x, y) <= u64::from(n)),
                Tol::Close(r) => same || (finite && (x - y).abs() <= r * y.abs().max(1.0)),
            }
        })
}

/// Whether an instance runs on the device too. Per-instance compile time dominates
/// there (each adds parameters, results and kernels), so the device gets a sample that
/// still reaches every primitive and every kind of lowering the rules produce: every
/// program with every subset of batched parameters; the rules that renumber dimensions
/// with their batch axes first or last (or absent); the rest through `vmap`, with all
/// arguments batched and (where the rule takes another path) with each one alone, plus
/// the dynamic slices' rules with every batch axis last (a gather or scatter pairing an
/// operand batched behind its dimensions). The other instances of checks 1 and 2 add only
/// transposes and broadcasts to these.
fn on_device(i: &Instance) -> bool {
    let batched = i.axes.iter().flatten().count();
    let all = batched == i.axes.len();
    let all_or_one = all || batched == 1;
    let at_ends = i.case.args.iter().zip(&i.axes).all(|(g, a)| a.is_none_or(|a| a == 0 || a == g.ty().rank()));
    let at_last = i.case.args.iter().zip(&i.axes).all(|(g, a)| *a == Some(g.ty().rank()));
    let Some(p) = &i.case.prim else {
        return true;
    };
    match p {
        Prim::Unary(_)
        | Prim::Binary(_)
        | Prim::Compare(_)
        | Prim::Select(_)
        | Prim::Convert(_)
        | Prim::StopGradient(_)
        | Prim::AllReduce(_) => !i.rule && all,
        Prim::Constant(_) | Prim::Iota(_) => !i.rule,
        Prim::Reshape(_) | Prim::Concat(_) => !i.rule && all_or_one,
        Prim::Broadcast(_)
        | Prim::Transpose(_)
        | Prim::Slice(_)
        | Prim::Reduce(_)
        | Prim::Argmax(_)
        | Prim::Argsort(_)
        | Prim::Threefry(_)
        | Prim::Dot(_)
        | Prim::Conv(_)
        | Prim::WindowMax(_)
        | Prim::SelectAndScatterAdd(_)
        | Prim::SelectAndGatherAdd(_)
        | Prim::Reverse(_)
        | Prim::Gather(_)
        | Prim::Scatter(_) => i.rule && at_ends,
        // Shared starts renumber; batched ones gather or scatter, pairing the operand's
        // batch axis where it is (last, here) with the index vectors.
        Prim::DynamicSlice(_) | Prim::DynamicUpdateSlice(_) => {
            if i.rule {
                let shared = i.axes[1..].iter().all(Option::is_none);
                (shared && matches!(p, Prim::DynamicSlice(_))) || at_last
            } else {
                all_or_one
            }
        }
    }
}

/// The instances [`on_device`] picks, in one module, run by the PJRT CPU plugin and
/// compared with the interpreter on the same batched function.
#[test]
fn batched_functions_run_on_the_device() {
    let cases = cases();
    let mut instances = rule_instances(&cases);
    instances.extend(vmap_instances(&cases));
    instances.retain(on_device);
    let mut rng = Rng(0xDE71CE);
    let mut b = Builder::new();
    let (mut params, mut results, mut args, mut counts) = (vec![], vec![], vec![], vec![]);
    for inst in &instances {
        let f = inst.case.func();
        let (p, r) = inst.emit(&mut b, &f);
        params.extend(p);
        counts.push(r.len());
        results.extend(r);
        args.extend(inst.inputs(&mut rng).0);
    }
    let f = b.finish("vmap_cases", params, results);
    verify(&f).unwrap_or_else(|e| panic!("the test function does not verify: {e}"));
    let want = eval_func(&f, &args);

    let client = common::client();
    let exe = client.compile(&lower_module(&f, 1), 1).unwrap_or_else(|e| panic!("the plugin rejects the module: {e}"));
    let bufs: Vec<_> = args.iter().map(|a| client.upload(a, 0).expect("upload")).collect();
    let refs: Vec<_> = bufs.iter().collect();
    let outs = exe.execute(&refs).expect("execute");
    let dev: Vec<Array> = outs.iter().map(|o| o.download().expect("download")).collect();

    let mut failures = vec![];
    let mut k = 0;
    for (inst, n) in instances.iter().zip(counts) {
        for j in 0..n {
            if !close(&dev[k + j], &want[k + j], inst.case.tol) {
                failures.push(format!(
                    "{} (result {j}): device {:?}, interpreter {:?}",
                    inst.name(),
                    dev[k + j],
                    want[k + j]
                ));
            }
        }
        k += n;
    }
    assert!(failures.is_empty(), "{} results differ:\n{}", failures.len(), failures.join("\n"));
}
