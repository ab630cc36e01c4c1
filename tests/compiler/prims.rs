//! Differential test of every primitive: the reference interpreter (`ir::eval`) against
//! the lowered StableHLO compiled and run by the PJRT CPU plugin.
//!
//! One table of cases ([`cases`]), in the manner of JAX's `op_record` table: a case is a
//! primitive (or a small loop) and its argument arrays, drawn from a deterministic PRNG
//! plus hand-picked edge values (NaN, ±inf, ±0, `i32::MIN`, zero divisors, shift amounts
//! past the bit width, out-of-range dynamic indices, …). All cases go into ONE function
//! with one output per case, so XLA compiles a single module; if that module is
//! rejected, each case is compiled alone to name the culprit.
//!
//! Results must agree bit for bit (any NaN matches any NaN), subnormals included (the
//! interpreter flushes them as XLA's CPU runtime does), except where XLA computes
//! differently by design, each with a bound that leaves room over what was measured
//! (printed with `--nocapture`):
//! - transcendental functions (exp, log, tanh, sin, cos, pow): XLA's CPU backend uses
//!   its own approximations, within a few ulp of the host's libm ([`Tol::Ulps`], 4;
//!   measured: exp and log 1 ulp, tanh 3, sin, cos and pow exact on these inputs);
//! - sums and dot products: XLA may associate the additions differently
//!   ([`Tol::Accumulated`], 4 eps relative to the sum of absolute terms; measured
//!   1.2e-7, about 1 eps).
//!
//! Not covered, because XLA itself is inconsistent there: the log of a subnormal, which
//! XLA's CPU code reads exactly for a few array lengths (3 and 7 elements, say) and as
//! zero for the others; the interpreter gives the flushed answer, `-inf`.
//!
//! The plugin is found the way users find it (`PODC_PJRT_PLUGIN`, else the cache,
//! installing it if missing); if that fails, the test fails rather than skips.

use crate::common;

use std::sync::OnceLock;

use common::prims::{convs, gather, pools, scatter, select_and_gather_add, select_and_scatter_add, window_max};
use common::rng::Rng;
use podracer::array::{Array, ArrayTy, DType, Data};
use podracer::ir::eval::eval_func;
use podracer::ir::verify::verify;
use podracer::ir::{Eqn, Func, Graph, Op, Var};
use podracer::lower::lower_module;
use podracer::prims::{
    AllReduce, AllReduceOp, Argmax, Argsort, Binary, BinaryOp, Broadcast, CmpOp, Compare, Concat, Constant, Convert,
    Dot, DynamicSlice, DynamicUpdateSlice, Iota, Prim, Reduce, ReduceOp, Reshape, Reverse, Select, Slice, StopGradient,
    Threefry, Transpose, Unary, UnaryOp,
};
use podracer::runtime::{Client, Runtime};

static CLIENT: OnceLock<Client> = OnceLock::new();

/// The one client of this test process (creating one is costly).
fn client() -> &'static Client {
    CLIENT.get_or_init(|| Runtime::open(None, None).unwrap_or_else(|e| panic!("cannot open the PJRT CPU plugin: {e}")))
}

// ---------------------------------------------------------------------------------------
// Inputs

const F32_EDGES: [f32; 10] = [0.0, -0.0, 1.0, -1.5, 2.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e30, -7e-30];
/// Subnormals and their neighbours: XLA's CPU runtime flushes subnormals to zero, and
/// the interpreter follows it.
const F32_TINY: [f32; 7] = [0.0, -0.0, 1.0, 1e-40, -1e-40, 1e-20, 1.2e-38];
const I32_EDGES: [i32; 8] = [0, 1, -1, 7, -7, 31, i32::MIN, i32::MAX];
const U32_EDGES: [u32; 7] = [0, 1, 7, 31, 32, 0x8000_0000, u32::MAX];
const U8_EDGES: [u8; 8] = [0, 1, 7, 8, 127, 128, 200, 255];
/// Shift amounts: in range, at and past the bit width, and negative (huge as unsigned).
const SHIFTS: [i32; 6] = [0, 1, 5, 31, 32, -1];

/// Every pair of edge values, as two flat arrays (a cross product).
fn pairs<T: Copy>(xs: &[T], ys: &[T]) -> (Vec<T>, Vec<T>) {
    let a = xs.iter().flat_map(|&x| ys.iter().map(move |_| x)).collect();
    let b = xs.iter().flat_map(|_| ys.iter().copied()).collect();
    (a, b)
}

fn f32v(v: &[f32]) -> Array {
    Array::f32(vec![v.len()], v.to_vec())
}

fn i32v(v: &[i32]) -> Array {
    Array::i32(vec![v.len()], v.to_vec())
}

fn u32v(v: &[u32]) -> Array {
    Array::new(vec![v.len()], Data::U32(v.to_vec()))
}

fn u8v(v: &[u8]) -> Array {
    Array::new(vec![v.len()], Data::U8(v.to_vec()))
}

fn boolv(v: &[bool]) -> Array {
    Array::new(vec![v.len()], Data::Bool(v.to_vec()))
}

fn scalar_i32(x: i32) -> Array {
    Array::i32(vec![], vec![x])
}

// ---------------------------------------------------------------------------------------
// Building the one function

/// Accumulates the equations of the test function.
#[derive(Default)]
struct Fb {
    types: Vec<ArrayTy>,
    /// Equation lists of the graphs being built; the last is innermost.
    frames: Vec<Vec<Eqn>>,
}

impl Fb {
    fn fresh(&mut self, ty: ArrayTy) -> Var {
        self.types.push(ty);
        Var(self.types.len() as u32 - 1)
    }

    fn prim(&mut self, prim: Prim, args: &[Var]) -> Vec<Var> {
        let tys: Vec<ArrayTy> = args.iter().map(|v| self.types[v.0 as usize].clone()).collect();
        let outs = prim.rules().infer(&tys).unwrap_or_else(|e| panic!("case does not type: {e}"));
        let outs: Vec<Var> = outs.into_iter().map(|t| self.fresh(t)).collect();
        self.push(Eqn { outs: outs.clone(), op: Op::Prim(prim), args: args.to_vec() });
        outs
    }

    fn prim1(&mut self, prim: Prim, args: &[Var]) -> Var {
        self.prim(prim, args)[0]
    }

    fn push(&mut self, e: Eqn) {
        self.frames.last_mut().expect("a frame").push(e);
    }
}

/// How closely the device must agree with the interpreter.
#[derive(Clone, Copy, Debug)]
enum Tol {
    /// Bit for bit; any NaN matches any NaN.
    Exact,
    /// Floats within this many units in the last place.
    Ulps(u32),
    /// Floats within `rel * (sum of |terms|)` (for sums whose association may differ);
    /// the scale is computed by the case as an extra interpreter-only output.
    Accumulated(f32),
}

type Build = Box<dyn Fn(&mut Fb, &[Var]) -> Vec<Var>>;

/// One row of the table.
struct Case {
    name: String,
    args: Vec<Array>,
    tol: Tol,
    build: Build,
}

fn case(name: impl Into<String>, prim: Prim, args: Vec<Array>, tol: Tol) -> Case {
    Case { name: name.into(), args, tol, build: Box::new(move |fb, vs| fb.prim(prim.clone(), vs)) }
}

fn exact(name: impl Into<String>, prim: Prim, args: Vec<Array>) -> Case {
    case(name, prim, args, Tol::Exact)
}

/// Builds the function computing `cases`, each case's outputs in turn; also returns how
/// many outputs each case has.
fn build(cases: &[&Case]) -> (Func, Vec<usize>) {
    let mut fb = Fb { frames: vec![vec![]], ..Fb::default() };
    let mut params = vec![];
    let mut results = vec![];
    let mut counts = vec![];
    for c in cases {
        let vs: Vec<Var> = c.args.iter().map(|a| fb.fresh(a.ty())).collect();
        params.extend_from_slice(&vs);
        let outs = (c.build)(&mut fb, &vs);
        counts.push(outs.len());
        results.extend(outs);
    }
    let eqns = fb.frames.pop().expect("the top frame");
    let f = Func { name: "prims".to_string(), graph: Graph { params, eqns, results }, types: fb.types };
    (f, counts)
}

// ---------------------------------------------------------------------------------------
// The table

fn unary(op: UnaryOp) -> Prim {
    Prim::Unary(Unary { op })
}

fn binary(op: BinaryOp) -> Prim {
    Prim::Binary(Binary { op })
}

fn cases() -> Vec<Case> {
    let mut rng = Rng(0x5EED);
    let mut cs = vec![];

    // unary on f32: random values, then the edge values
    let transcendental =
        [UnaryOp::Exp, UnaryOp::Log, UnaryOp::Tanh, UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Log1p, UnaryOp::Logistic];
    for op in [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Sign,
        UnaryOp::Sqrt,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Tanh,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Log1p,
        UnaryOp::Logistic,
        UnaryOp::Relu,
    ] {
        let tol = if transcendental.contains(&op) { Tol::Ulps(4) } else { Tol::Exact };
        let (lo, hi) = match op {
            UnaryOp::Log | UnaryOp::Sqrt => (1e-3, 50.0),
            UnaryOp::Exp | UnaryOp::Logistic => (-20.0, 20.0),
            UnaryOp::Log1p => (-0.99, 5.0),
            UnaryOp::Neg
            | UnaryOp::Abs
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Sign
            | UnaryOp::Relu
            | UnaryOp::Tanh
            | UnaryOp::Sin
            | UnaryOp::Cos
            | UnaryOp::Not => (-6.0, 6.0),
        };
        cs.push(case(format!("{op:?} f32"), unary(op), vec![rng.f32s(&[4, 8], lo, hi)], tol));
        cs.push(case(format!("{op:?} f32 edges"), unary(op), vec![f32v(&F32_EDGES)], tol));
        // XLA's log reads subnormals exactly for a few array lengths (7 elements here)
        // and flushes them for others; the interpreter flushes, so leave log out.
        if op != UnaryOp::Log {
            cs.push(case(format!("{op:?} f32 subnormals"), unary(op), vec![f32v(&F32_TINY)], tol));
        }
    }
    let exp_range = f32v(&[-87.0, -87.5, -88.0, -88.5, -89.0, -100.0, -104.0, -200.0, 88.0, 88.7, 89.0, 1e-3, -1e-3]);
    cs.push(case("Exp f32 range ends", unary(UnaryOp::Exp), vec![exp_range], Tol::Ulps(4)));
    let log_range = f32v(&[1.2e-38, 1e-30, 1e-10, 0.999, 1.001, 1e10, 3.4e38]);
    cs.push(case("Log f32 range ends", unary(UnaryOp::Log), vec![log_range], Tol::Ulps(4)));
    // Below sqrt(2) - 1 in magnitude, XLA's log1p is a rational function with fused
    // multiply-adds, which the interpreter reproduces exactly; beyond, it is log(1 + x).
    let log1p_small = rng.f32s(&[4, 8], -0.414, 0.414);
    cs.push(case("Log1p f32 small", unary(UnaryOp::Log1p), vec![log1p_small], Tol::Exact));
    let log1p_edges = f32v(&[-1.0, -0.999_999_9, -0.414_213_57, 0.414_213_57, -0.414_213_54, 1e-5, -1e-20, 2e30]);
    cs.push(case("Log1p f32 range ends", unary(UnaryOp::Log1p), vec![log1p_edges], Tol::Ulps(4)));
    let logistic_ends = f32v(&[-200.0, -104.0, -89.0, -88.7, -87.0, -17.0, 17.0, 88.7, 89.0, 200.0]);
    cs.push(case("Logistic f32 range ends", unary(UnaryOp::Logistic), vec![logistic_ends], Tol::Ulps(4)));
    // Halves, which round to even.
    let halves = f32v(&[-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 1e7 + 0.5]);
    cs.push(exact("Round f32 halves", unary(UnaryOp::Round), vec![halves]));
    for op in [UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Not, UnaryOp::Sign] {
        cs.push(exact(format!("{op:?} i32"), unary(op), vec![i32v(&I32_EDGES)]));
    }
    for op in [UnaryOp::Neg, UnaryOp::Not] {
        cs.push(exact(format!("{op:?} u32"), unary(op), vec![u32v(&U32_EDGES)]));
    }
    cs.push(exact("Not bool", unary(UnaryOp::Not), vec![boolv(&[true, false])]));

    // binary on f32
    let (ea, eb) = pairs(&F32_EDGES, &F32_EDGES);
    let (ta, tb) = pairs(&F32_TINY, &F32_TINY);
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::Pow,
    ] {
        let tol = if op == BinaryOp::Pow { Tol::Ulps(4) } else { Tol::Exact };
        let (a, b) = if op == BinaryOp::Pow {
            (rng.f32s(&[3, 5], 0.0, 4.0), rng.f32s(&[3, 5], -3.0, 3.0))
        } else {
            (rng.f32s(&[3, 5], -10.0, 10.0), rng.f32s(&[3, 5], -10.0, 10.0))
        };
        cs.push(case(format!("{op:?} f32"), binary(op), vec![a, b], tol));
        cs.push(case(format!("{op:?} f32 edges"), binary(op), vec![f32v(&ea), f32v(&eb)], tol));
        cs.push(case(format!("{op:?} f32 subnormals"), binary(op), vec![f32v(&ta), f32v(&tb)], tol));
    }
    // binary on integers: every pair of edge values (zero divisors, MIN / -1, …)
    let (ia, ib) = pairs(&I32_EDGES, &I32_EDGES);
    let (ua, ub) = pairs(&U32_EDGES, &U32_EDGES);
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
    ] {
        cs.push(exact(format!("{op:?} i32"), binary(op), vec![i32v(&ia), i32v(&ib)]));
        cs.push(exact(format!("{op:?} u32"), binary(op), vec![u32v(&ua), u32v(&ub)]));
    }
    let (sa, sb) = pairs(&I32_EDGES, &SHIFTS);
    let shifts_u: Vec<u32> = SHIFTS.iter().map(|&s| s as u32).collect();
    let (usa, usb) = pairs(&U32_EDGES, &shifts_u);
    for op in [BinaryOp::ShiftLeft, BinaryOp::ShiftRightLogical] {
        cs.push(exact(format!("{op:?} i32"), binary(op), vec![i32v(&sa), i32v(&sb)]));
        cs.push(exact(format!("{op:?} u32"), binary(op), vec![u32v(&usa), u32v(&usb)]));
    }
    let (ba, bb) = pairs(&[false, true], &[false, true]);
    for op in [BinaryOp::And, BinaryOp::Or, BinaryOp::Xor, BinaryOp::Max, BinaryOp::Min] {
        cs.push(exact(format!("{op:?} bool"), binary(op), vec![boolv(&ba), boolv(&bb)]));
    }

    // compare
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        let p = Prim::Compare(Compare { op });
        cs.push(exact(format!("{op:?} f32"), p.clone(), vec![f32v(&ea), f32v(&eb)]));
        cs.push(exact(format!("{op:?} f32 subnormals"), p.clone(), vec![f32v(&ta), f32v(&tb)]));
        cs.push(exact(format!("{op:?} i32"), p.clone(), vec![i32v(&ia), i32v(&ib)]));
        cs.push(exact(format!("{op:?} u32"), p.clone(), vec![u32v(&ua), u32v(&ub)]));
        cs.push(exact(format!("{op:?} bool"), p, vec![boolv(&ba), boolv(&bb)]));
    }

    // select
    cs.push(exact(
        "select f32",
        Prim::Select(Select),
        vec![rng.bools(&[3, 4]), rng.f32s(&[3, 4], -1.0, 1.0), rng.f32s(&[3, 4], -1.0, 1.0)],
    ));
    cs.push(exact("select bool", Prim::Select(Select), vec![rng.bools(&[5]), rng.bools(&[5]), rng.bools(&[5])]));

    // convert: every pair of dtypes, on values that probe rounding and saturation
    let conv_f32 = f32v(&[
        1.5,
        -1.5,
        2.5,
        -0.0,
        0.9999,
        -0.9999,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        3e9,
        -3e9,
        2147483520.0,
        2147483648.0,
        4294967040.0,
        4294967296.0,
        16777217.0,
        -2147483648.0,
        1e-40,
    ]);
    let conv_i32 = i32v(&[i32::MIN, -1, 0, 1, i32::MAX, 16777217, -16777217]);
    let conv_u32 = u32v(&[0, 1, 0x8000_0000, u32::MAX, 16777217]);
    let conv_bool = boolv(&[false, true]);
    for to in [DType::I32, DType::U32, DType::Bool] {
        cs.push(exact(format!("convert f32 subnormals to {to}"), Prim::Convert(Convert { to }), vec![f32v(&F32_TINY)]));
    }
    for src in [&conv_f32, &conv_i32, &conv_u32, &conv_bool] {
        for to in [DType::F32, DType::I32, DType::U32, DType::Bool] {
            cs.push(exact(
                format!("convert {} to {to}", src.dtype()),
                Prim::Convert(Convert { to }),
                vec![src.clone()],
            ));
        }
    }

    // stop_gradient: the identity; values pass bit for bit
    cs.push(exact("stop_gradient f32", Prim::StopGradient(StopGradient), vec![f32v(&F32_EDGES)]));
    cs.push(exact("stop_gradient i32", Prim::StopGradient(StopGradient), vec![i32v(&I32_EDGES)]));

    // literals: floats must reach the device bit for bit
    let constants = [
        f32v(&[0.1, -0.0, 1e-45, 3.4028235e38, f32::NAN, f32::NEG_INFINITY, 1.0 / 3.0, 16777215.0]),
        Array::f32(vec![], vec![-2.75]),
        Array::f32(vec![2, 2], vec![0.5; 4]),
        Array::i32(vec![2, 3], vec![i32::MIN, -1, 0, 1, 2, i32::MAX]),
        u32v(&[0, u32::MAX, 12345]),
        Array::new(vec![2, 2], Data::Bool(vec![true, false, false, true])),
    ];
    for c in constants {
        cs.push(exact(format!("constant {}", c.ty()), Prim::Constant(Constant { value: c }), vec![]));
    }
    for (ty, dim) in [
        (ArrayTy::new(DType::F32, vec![3, 4]), 1),
        (ArrayTy::new(DType::I32, vec![2, 3, 4]), 0),
        (ArrayTy::new(DType::U32, vec![5]), 0),
    ] {
        cs.push(exact(format!("iota {ty} dim {dim}"), Prim::Iota(Iota { ty, dim }), vec![]));
    }

    // layout
    let bcast =
        |shape: &[usize], dims: &[usize]| Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: dims.to_vec() });
    cs.push(exact("broadcast row", bcast(&[2, 3], &[1]), vec![rng.f32s(&[3], -1.0, 1.0)]));
    cs.push(exact("broadcast size-1 dim", bcast(&[3, 4], &[0, 1]), vec![rng.f32s(&[3, 1], -1.0, 1.0)]));
    cs.push(exact("broadcast scalar", bcast(&[2, 2], &[]), vec![Array::f32(vec![], vec![7.0])]));
    cs.push(exact("broadcast middle", bcast(&[2, 4, 3], &[0, 2]), vec![rng.i32s(&[2, 3], -9, 9)]));
    let reshape = |shape: &[usize]| Prim::Reshape(Reshape { shape: shape.to_vec() });
    cs.push(exact("reshape 3x4 to 2x6", reshape(&[2, 6]), vec![rng.f32s(&[3, 4], -1.0, 1.0)]));
    cs.push(exact("reshape to scalar", reshape(&[]), vec![Array::i32(vec![1, 1], vec![5])]));
    let transpose = |perm: &[usize]| Prim::Transpose(Transpose { perm: perm.to_vec() });
    cs.push(exact("transpose 2d", transpose(&[1, 0]), vec![rng.f32s(&[3, 4], -1.0, 1.0)]));
    cs.push(exact("transpose 3d", transpose(&[2, 0, 1]), vec![rng.i32s(&[2, 3, 4], -99, 99)]));
    cs.push(exact(
        "concat axis 0",
        Prim::Concat(Concat { axis: 0 }),
        vec![rng.f32s(&[2, 3], -1.0, 1.0), rng.f32s(&[1, 3], -1.0, 1.0)],
    ));
    cs.push(exact(
        "concat axis 1, three",
        Prim::Concat(Concat { axis: 1 }),
        vec![rng.i32s(&[2, 1], -9, 9), rng.i32s(&[2, 2], -9, 9), rng.i32s(&[2, 3], -9, 9)],
    ));
    cs.push(exact("concat one bool", Prim::Concat(Concat { axis: 0 }), vec![rng.bools(&[3])]));

    // indexing
    let slice = |start: &[usize], limit: &[usize]| Prim::Slice(Slice { start: start.to_vec(), limit: limit.to_vec() });
    cs.push(exact("slice 2d", slice(&[1, 0], &[3, 5]), vec![rng.f32s(&[4, 5], -1.0, 1.0)]));
    cs.push(exact("slice 1d", slice(&[2], &[5]), vec![rng.i32s(&[6], -9, 9)]));
    let grid = rng.f32s(&[5, 6], -1.0, 1.0);
    for (r, c) in [(1, 2), (-1, 10), (4, 4), (i32::MIN, i32::MAX), (3, 3)] {
        cs.push(exact(
            format!("dynamic_slice at ({r}, {c})"),
            Prim::DynamicSlice(DynamicSlice { sizes: vec![2, 3] }),
            vec![grid.clone(), scalar_i32(r), scalar_i32(c)],
        ));
        cs.push(exact(
            format!("dynamic_update_slice at ({r}, {c})"),
            Prim::DynamicUpdateSlice(DynamicUpdateSlice),
            vec![grid.clone(), rng.f32s(&[2, 3], 5.0, 6.0), scalar_i32(r), scalar_i32(c)],
        ));
    }
    cs.push(exact(
        "dynamic_update_slice bool 1d",
        Prim::DynamicUpdateSlice(DynamicUpdateSlice),
        vec![boolv(&[false; 6]), boolv(&[true, true]), scalar_i32(5)],
    ));

    // gather and scatter: windows at index vectors (clamped), with batching dimensions.
    // Scatter windows never overlap here: which write wins is up to XLA where they do.
    let none: (&[usize], &[usize]) = (&[], &[]);
    let starts = Array::i32(vec![5, 2], vec![1, 2, -1, 10, 4, 4, i32::MIN, i32::MAX, 3, 3]);
    cs.push(exact("gather windows", gather(&[1, 2], &[], none, &[0, 1], &[2, 3]), vec![grid.clone(), starts.clone()]));
    cs.push(exact("gather empty windows", gather(&[1, 2], &[], none, &[0, 1], &[0, 3]), vec![grid.clone(), starts]));
    cs.push(exact(
        "gather rows, collapsed",
        gather(&[1], &[0], none, &[0], &[1, 6]),
        vec![grid.clone(), Array::i32(vec![3, 1], vec![-1, 2, 9])],
    ));
    cs.push(exact(
        "gather one cell per example",
        gather(&[1, 2], &[], (&[0], &[0]), &[2], &[1, 2, 2]),
        vec![rng.f32s(&[3, 4, 5], -1.0, 1.0), Array::i32(vec![3, 1], vec![-3, 1, 7])],
    ));
    cs.push(exact(
        "gather, batching dims in the middle",
        gather(&[0, 3], &[], (&[1], &[1]), &[0, 2], &[2, 1, 3]),
        vec![rng.i32s(&[4, 3, 5], -9, 9), rng.i32s(&[2, 3, 2], -2, 7)],
    ));
    cs.push(exact(
        "gather bool",
        gather(&[1], &[0], none, &[0, 1], &[1, 2]),
        vec![rng.bools(&[3, 4]), Array::i32(vec![2, 2], vec![2, 3, -1, 1])],
    ));
    cs.push(exact(
        "scatter windows",
        scatter(&[1, 2], &[], none, &[0, 1]),
        vec![grid.clone(), Array::i32(vec![2, 2], vec![-5, -1, 9, 4]), rng.f32s(&[2, 2, 3], 5.0, 6.0)],
    ));
    cs.push(exact(
        "scatter one cell per example",
        scatter(&[], &[1], (&[0], &[0]), &[1]),
        vec![rng.f32s(&[3, 4], -1.0, 1.0), Array::i32(vec![3, 1], vec![-2, 1, 7]), f32v(&[f32::NAN, -0.0, 1e-40])],
    ));
    cs.push(exact(
        "scatter, batching dims in the middle",
        scatter(&[1, 2], &[], (&[1], &[0]), &[0, 2]),
        vec![rng.i32s(&[4, 3, 5], -9, 9), rng.i32s(&[3, 2], -2, 7), rng.i32s(&[3, 2, 2], 10, 20)],
    ));
    cs.push(exact(
        "scatter bool whole rows",
        scatter(&[1], &[0], none, &[0]),
        vec![
            Array::new(vec![2, 4], Data::Bool(vec![false; 8])),
            Array::i32(vec![1, 1], vec![5]),
            Array::new(vec![1, 4], Data::Bool(vec![true; 4])),
        ],
    ));

    // reductions
    let reduce = |op, axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
    let with_nan = {
        let mut a = rng.f32s(&[3, 4], -5.0, 5.0);
        if let Data::F32(v) = &mut a.data {
            v[5] = f32::NAN;
            v[11] = f32::INFINITY;
        }
        a
    };
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
        // Sums and products may associate differently on the device.
        let tol = match op {
            ReduceOp::Sum => Tol::Accumulated(4.0 * f32::EPSILON),
            ReduceOp::Prod => Tol::Ulps(16),
            ReduceOp::Max | ReduceOp::Min => Tol::Exact,
        };
        for axes in [&[0][..], &[1], &[0, 1], &[]] {
            cs.push(case(
                format!("{op:?} f32 axes {axes:?}"),
                reduce(op, axes),
                vec![rng.f32s(&[3, 4], -5.0, 5.0)],
                tol,
            ));
        }
        cs.push(case(
            format!("{op:?} f32 3d axes [2, 0]"),
            reduce(op, &[2, 0]),
            vec![rng.f32s(&[2, 3, 4], -5.0, 5.0)],
            tol,
        ));
        cs.push(case(format!("{op:?} f32 with NaN"), reduce(op, &[1]), vec![with_nan.clone()], tol));
        cs.push(exact(format!("{op:?} i32"), reduce(op, &[1]), vec![rng.i32s(&[3, 4], i32::MIN, i32::MAX)]));
        cs.push(exact(format!("{op:?} u32"), reduce(op, &[0]), vec![rng.u32s(&[3, 4])]));
    }
    for op in [ReduceOp::Max, ReduceOp::Min] {
        cs.push(exact(format!("{op:?} bool"), reduce(op, &[1]), vec![rng.bools(&[4, 3])]));
    }
    let tiny = Array::f32(vec![3, 3], vec![1e-40, -1e-40, 0.0, -0.0, 1e-40, -1e-40, 1e-20, 1e-40, 1.2e-38]);
    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
        cs.push(exact(format!("{op:?} f32 subnormals"), reduce(op, &[1]), vec![tiny.clone()]));
    }
    let argmax = |axis| Prim::Argmax(Argmax { axis });
    let ties = Array::f32(
        vec![4, 4],
        vec![
            1.0,
            3.0,
            3.0,
            2.0, // a tie: the first wins
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
            0.0,
            f32::NAN,
            5.0,
            f32::NAN, // the first NaN wins
            -0.0,
            0.0,
            -1.0,
            0.0,
        ],
    );
    cs.push(exact("argmax f32 ties and NaN", argmax(1), vec![ties.clone()]));
    cs.push(exact("argmax f32 axis 0", argmax(0), vec![ties]));
    cs.push(exact("argmax f32 random", argmax(1), vec![rng.f32s(&[3, 7], -1.0, 1.0)]));
    cs.push(exact("argmax f32 subnormals", argmax(1), vec![tiny.clone()]));
    cs.push(exact("argmax i32", argmax(0), vec![rng.i32s(&[6, 3], -3, 3)]));
    cs.push(exact("argmax u32", argmax(0), vec![u32v(&[5, u32::MAX, 0x8000_0000, u32::MAX])]));
    cs.push(exact(
        "argmax bool",
        argmax(1),
        vec![Array::new(vec![2, 3], Data::Bool(vec![false, true, true, false, false, false]))],
    ));

    // threefry2x32: a scalar key over every counter, keys over the rows below them, one pair
    let threefry = Prim::Threefry(Threefry);
    let u32_array = |shape: Vec<usize>, v: Vec<u32>| Array::new(shape, Data::U32(v));
    let scalar_key = vec![rng.u32s(&[]), u32_array(vec![], vec![u32::MAX]), rng.u32s(&[4, 8]), rng.u32s(&[4, 8])];
    cs.push(exact("threefry scalar key", threefry.clone(), scalar_key));
    let k1 = u32_array(vec![2, 3], vec![0, 1, 2, u32::MAX, 7, 0x8000_0000]);
    let keys = vec![rng.u32s(&[2, 3]), k1, rng.u32s(&[2, 3, 5]), u32_array(vec![2, 3, 5], vec![0; 30])];
    cs.push(exact("threefry keys [2, 3]", threefry.clone(), keys));
    // One counter pair.
    let one_pair = vec![rng.u32s(&[]), rng.u32s(&[]), u32_array(vec![], vec![0]), rng.u32s(&[])];
    cs.push(exact("threefry one pair", threefry.clone(), one_pair));
    let one_pair = vec![rng.u32s(&[1]), rng.u32s(&[1]), rng.u32s(&[1, 1]), rng.u32s(&[1, 1])];
    cs.push(exact("threefry one pair [1, 1]", threefry, one_pair));

    // argsort: stable; f32 keys in JAX's order (-0 == 0, NaNs equal and last)
    let argsort = |axis| Prim::Argsort(Argsort { axis });
    let keys = Array::f32(
        vec![2, 8],
        vec![
            f32::NAN,
            1.0,
            -0.0,
            f32::NEG_INFINITY,
            0.0,
            -f32::NAN,
            f32::INFINITY,
            -0.0,
            2.0,
            -1.0,
            2.0,
            1e-40, // a subnormal, compared as zero
            -1.0,
            0.0,
            2.0,
            -1e-40,
        ],
    );
    cs.push(exact("argsort f32 edges", argsort(1), vec![keys.clone()]));
    cs.push(exact("argsort f32 axis 0", argsort(0), vec![keys]));
    cs.push(exact("argsort f32 random", argsort(1), vec![rng.f32s(&[3, 9], -1.0, 1.0)]));
    cs.push(exact("argsort i32 ties", argsort(0), vec![rng.i32s(&[7, 3], -2, 2)]));
    cs.push(exact("argsort i32 edges", argsort(0), vec![i32v(&I32_EDGES)]));
    cs.push(exact("argsort u32 edges", argsort(0), vec![u32v(&[7, u32::MAX, 0, 0x8000_0000, 7, 1])]));
    cs.push(exact("argsort 3d middle axis", argsort(1), vec![rng.i32s(&[2, 5, 3], 0, 3)]));

    // collectives, on one replica: the identity
    for op in [AllReduceOp::Sum, AllReduceOp::Mean] {
        cs.push(exact(format!("{op:?} f32 one replica"), Prim::AllReduce(AllReduce { op }), vec![f32v(&F32_EDGES)]));
    }
    cs.push(exact("psum i32 one replica", Prim::AllReduce(AllReduce { op: AllReduceOp::Sum }), vec![i32v(&I32_EDGES)]));

    // dot_general
    let dot = |lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]| {
        Prim::Dot(Dot {
            lhs_batch: lb.to_vec(),
            rhs_batch: rb.to_vec(),
            lhs_contract: lc.to_vec(),
            rhs_contract: rc.to_vec(),
        })
    };
    let acc = Tol::Accumulated(4.0 * f32::EPSILON);
    cs.push(case(
        "matmul",
        dot(&[], &[], &[1], &[0]),
        vec![rng.f32s(&[3, 4], -2.0, 2.0), rng.f32s(&[4, 5], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "matvec",
        dot(&[], &[], &[1], &[0]),
        vec![rng.f32s(&[3, 4], -2.0, 2.0), rng.f32s(&[4], -2.0, 2.0)],
        acc,
    ));
    cs.push(case("vecdot", dot(&[], &[], &[0], &[0]), vec![rng.f32s(&[6], -2.0, 2.0), rng.f32s(&[6], -2.0, 2.0)], acc));
    cs.push(case(
        "lhs transposed",
        dot(&[], &[], &[0], &[0]),
        vec![rng.f32s(&[4, 3], -2.0, 2.0), rng.f32s(&[4, 5], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "batched matmul",
        dot(&[0], &[0], &[2], &[1]),
        vec![rng.f32s(&[2, 3, 4], -2.0, 2.0), rng.f32s(&[2, 4, 5], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "batch in the middle, two contractions",
        dot(&[1], &[1], &[2, 0], &[0, 2]),
        vec![rng.f32s(&[3, 2, 4], -2.0, 2.0), rng.f32s(&[4, 2, 3], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "outer product",
        dot(&[], &[], &[], &[]),
        vec![rng.f32s(&[3], -2.0, 2.0), rng.f32s(&[4], -2.0, 2.0)],
        acc,
    ));
    // Runs of consecutive dimensions are merged before XLA sees them (`Dot::collapsed`).
    cs.push(case(
        "rows over two free dimensions ([T, B, H] x [H, O])",
        dot(&[], &[], &[2], &[0]),
        vec![rng.f32s(&[3, 5, 4], -2.0, 2.0), rng.f32s(&[4, 6], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "weight gradient, two contractions ([T, B, H] x [T, B, O])",
        dot(&[], &[], &[0, 1], &[0, 1]),
        vec![rng.f32s(&[3, 5, 4], -2.0, 2.0), rng.f32s(&[3, 5, 6], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "batch, then merged free and contracting runs on both sides",
        dot(&[0], &[2], &[3, 4], &[0, 1]),
        vec![rng.f32s(&[2, 3, 4, 2, 3], -2.0, 2.0), rng.f32s(&[2, 3, 2, 5, 2], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "a long contraction to a small result, split into summed pieces",
        dot(&[], &[], &[0], &[0]),
        vec![rng.f32s(&[4096, 8], -2.0, 2.0), rng.f32s(&[4096, 6], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "a long contraction in the middle of both operands",
        dot(&[], &[], &[1], &[0]),
        vec![rng.f32s(&[3, 2048], -2.0, 2.0), rng.f32s(&[2048, 2, 2], -2.0, 2.0)],
        acc,
    ));
    cs.push(case(
        "contractions consecutive in one operand only",
        dot(&[], &[], &[0, 1], &[1, 0]),
        vec![rng.f32s(&[3, 4, 2], -2.0, 2.0), rng.f32s(&[4, 3, 5], -2.0, 2.0)],
        acc,
    ));
    cs.push(exact("matmul subnormals", dot(&[], &[], &[1], &[0]), vec![tiny.clone(), tiny]));
    cs.push(exact(
        "matmul i32",
        dot(&[], &[], &[1], &[0]),
        vec![rng.i32s(&[3, 4], i32::MIN, i32::MAX), rng.i32s(&[4, 2], -99, 99)],
    ));
    cs.push(exact("matmul u32", dot(&[], &[], &[1], &[0]), vec![rng.u32s(&[2, 3]), rng.u32s(&[3, 2])]));

    // convolutions (the groups' and dilations' semantics are XLA's, checked here) and
    // windows; small integers make ties, which both must break as XLA does
    for (name, p, l, r) in convs() {
        cs.push(case(name, p, vec![rng.f32s(&l, -2.0, 2.0), rng.f32s(&r, -2.0, 2.0)], acc));
    }
    let small_ints = |rng: &mut Rng, shape: &[usize]| {
        let Data::I32(v) = rng.i32s(shape, 0, 3).data else { unreachable!("i32s") };
        Array::f32(shape.to_vec(), v.into_iter().map(|x| x as f32).collect())
    };
    for (name, w, x) in pools() {
        let out = window_max(&w).rules().infer(&[ArrayTy::new(DType::F32, x.clone())]).expect("fits").remove(0);
        cs.push(exact(name, window_max(&w), vec![rng.f32s(&x, -2.0, 2.0)]));
        let edges: Vec<f32> = (0..x.iter().product()).map(|k| F32_EDGES[k % F32_EDGES.len()]).collect();
        cs.push(exact(format!("{name} edges"), window_max(&w), vec![Array::f32(x.clone(), edges)]));
        let source = rng.f32s(&out.shape, -2.0, 2.0);
        let ties = small_ints(&mut rng, &x);
        cs.push(case(format!("{name} scatter ties"), select_and_scatter_add(&w), vec![source, ties.clone()], acc));
        let t = rng.f32s(&x, -2.0, 2.0);
        cs.push(exact(format!("{name} gather ties"), select_and_gather_add(&w), vec![t, ties]));
    }
    cs.push(exact("reverse", Prim::Reverse(Reverse { dims: vec![2, 0] }), vec![rng.f32s(&[2, 3, 4], -1.0, 1.0)]));

    // zero-size arrays
    let empty = Array::f32(vec![2, 0], vec![]);
    cs.push(exact("slice to nothing", slice(&[1, 0], &[1, 3]), vec![rng.f32s(&[2, 3], -1.0, 1.0)]));
    cs.push(exact("sum over an empty axis", reduce(ReduceOp::Sum, &[1]), vec![empty.clone()]));
    cs.push(exact("max over an empty axis", reduce(ReduceOp::Max, &[1]), vec![empty.clone()]));
    cs.push(exact("product over an empty axis", reduce(ReduceOp::Prod, &[1]), vec![empty]));

    // plumbing: results that are parameters, twice
    cs.push(Case {
        name: "parameters returned directly".to_string(),
        args: vec![f32v(&[1.0, f32::NAN]), i32v(&[3])],
        tol: Tol::Exact,
        build: Box::new(|_, vs| vec![vs[1], vs[0], vs[1]]),
    });

    cs.extend(u8_cases());
    for x in [u8v(&U8_EDGES), i32v(&I32_EDGES), u32v(&U32_EDGES)] {
        cs.push(foldable_division_case(x));
    }

    cs.push(loop_case("loop with a constant and two carries", 2, 12));
    cs.push(loop_case("loop that never runs", 3, 3));
    cs.push(loop_case("loop with lo above hi", 5, -2));
    cs.push(loop_case("loop over negative indices", -4, 1));
    cs.push(nested_loop_case());
    cs
}

/// Bytes: arithmetic mod 256 (the interpreter computes it in u32 and keeps the low byte),
/// unsigned comparisons, conversions to and from every dtype (f32 saturating into
/// 0..=255), and the dtype-generic primitives on u8 data. A PRNG of their own, so that
/// the other cases keep their inputs.
fn u8_cases() -> Vec<Case> {
    let mut rng = Rng(0x0808);
    let mut cs = vec![];
    for op in [UnaryOp::Neg, UnaryOp::Not] {
        cs.push(exact(format!("{op:?} u8"), unary(op), vec![u8v(&U8_EDGES)]));
    }
    let (a, b) = pairs(&U8_EDGES, &U8_EDGES);
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Rem,
        BinaryOp::Max,
        BinaryOp::Min,
        BinaryOp::And,
        BinaryOp::Or,
        BinaryOp::Xor,
    ] {
        cs.push(exact(format!("{op:?} u8"), binary(op), vec![u8v(&a), u8v(&b)]));
        cs.push(exact(format!("{op:?} u8 random"), binary(op), vec![rng.u8s(&[4, 8]), rng.u8s(&[4, 8])]));
    }
    let (sa, sb) = pairs(&U8_EDGES, &[0, 1, 5, 7, 8, 9, 31, 32, 200, 255]);
    for op in [BinaryOp::ShiftLeft, BinaryOp::ShiftRightLogical] {
        cs.push(exact(format!("{op:?} u8"), binary(op), vec![u8v(&sa), u8v(&sb)]));
    }
    for op in [CmpOp::Eq, CmpOp::Ne, CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
        cs.push(exact(format!("{op:?} u8"), Prim::Compare(Compare { op }), vec![u8v(&a), u8v(&b)]));
    }
    cs.push(exact("select u8", Prim::Select(Select), vec![rng.bools(&[6]), rng.u8s(&[6]), rng.u8s(&[6])]));

    let from_f32 = f32v(&[
        -1.5,
        -0.5,
        -0.0,
        0.5,
        0.9999,
        127.5,
        254.9,
        255.0,
        255.5,
        256.0,
        300.0,
        1e10,
        -1e10,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
    ]);
    let sources = [
        from_f32,
        i32v(&[i32::MIN, -129, -128, -1, 0, 1, 127, 128, 255, 256, 300, i32::MAX]),
        u32v(&[0, 1, 255, 256, 511, 0x8000_0080, u32::MAX]),
        u8v(&U8_EDGES),
        boolv(&[false, true]),
    ];
    for src in &sources {
        for to in [DType::F32, DType::I32, DType::U32, DType::U8, DType::Bool] {
            if src.dtype() == DType::U8 || to == DType::U8 {
                let name = format!("convert {} to {to}", src.dtype());
                cs.push(exact(name, Prim::Convert(Convert { to }), vec![src.clone()]));
            }
        }
    }

    let bytes = Array::new(vec![2, 3], Data::U8(vec![0, 1, 127, 128, 200, 255]));
    cs.push(exact("constant u8", Prim::Constant(Constant { value: bytes }), vec![]));
    // Past 255 the index wraps, as the device's conversion of it does.
    let iota = ArrayTy::new(DType::U8, vec![300]);
    cs.push(exact("iota u8[300] wraps", Prim::Iota(Iota { ty: iota, dim: 0 }), vec![]));

    let frames = rng.u8s(&[2, 3, 4]);
    let transpose = Prim::Transpose(Transpose { perm: vec![2, 0, 1] });
    cs.push(exact("transpose u8", transpose, vec![frames.clone()]));
    cs.push(exact("reshape u8", Prim::Reshape(Reshape { shape: vec![6, 4] }), vec![frames.clone()]));
    cs.push(exact(
        "broadcast u8",
        Prim::Broadcast(Broadcast { shape: vec![3, 4], dims: vec![1] }),
        vec![rng.u8s(&[4])],
    ));
    let concat = Prim::Concat(Concat { axis: 1 });
    cs.push(exact("concat u8", concat, vec![rng.u8s(&[2, 1, 4]), frames.clone()]));
    let slice = Prim::Slice(Slice { start: vec![0, 1, 1], limit: vec![2, 3, 3] });
    cs.push(exact("slice u8", slice, vec![frames.clone()]));
    cs.push(exact(
        "dynamic_slice u8, clamped",
        Prim::DynamicSlice(DynamicSlice { sizes: vec![1, 2, 4] }),
        vec![frames.clone(), scalar_i32(5), scalar_i32(-1), scalar_i32(0)],
    ));
    cs.push(exact(
        "dynamic_update_slice u8",
        Prim::DynamicUpdateSlice(DynamicUpdateSlice),
        vec![frames.clone(), rng.u8s(&[1, 2, 2]), scalar_i32(1), scalar_i32(1), scalar_i32(2)],
    ));
    let none: (&[usize], &[usize]) = (&[], &[]);
    cs.push(exact(
        "gather u8 rows",
        gather(&[1, 2], &[0], none, &[0], &[1, 3, 4]),
        vec![frames.clone(), Array::i32(vec![3, 1], vec![1, 0, 7])],
    ));
    cs.push(exact(
        "scatter u8 rows",
        scatter(&[1, 2], &[0], none, &[0]),
        vec![frames.clone(), Array::i32(vec![1, 1], vec![1]), rng.u8s(&[1, 3, 4])],
    ));

    for op in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min] {
        let reduce = |axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
        cs.push(exact(format!("{op:?} u8 axes [1]"), reduce(&[1]), vec![rng.u8s(&[3, 40])]));
        cs.push(exact(format!("{op:?} u8 all"), reduce(&[0, 1, 2]), vec![frames.clone()]));
    }
    cs.push(exact("argmax u8", Prim::Argmax(Argmax { axis: 1 }), vec![rng.u8s(&[3, 9])]));
    let matmul = Prim::Dot(Dot { lhs_batch: vec![], rhs_batch: vec![], lhs_contract: vec![1], rhs_contract: vec![0] });
    cs.push(exact("matmul u8 wraps", matmul, vec![rng.u8s(&[3, 5]), rng.u8s(&[5, 2])]));
    cs.push(exact("argsort u8", Prim::Argsort(Argsort { axis: 0 }), vec![u8v(&[7, 255, 0, 128, 7, 1])]));
    cs
}

/// Integer divisions that XLA can work out while compiling: `(x * 0) / (x * 0)`, `x / 0`
/// with a constant 0, and for i32 a constant `MIN / -1`. XLA's constant folder divides
/// natively and dies of SIGFPE on them, so the lowering must keep such divisors from it.
fn foldable_division_case(x: Array) -> Case {
    let name = format!("foldable divisions {}", x.dtype());
    let build: Build = Box::new(|fb, vs| {
        let (x, ty) = (vs[0], fb.types[vs[0].0 as usize].clone());
        let zero = fb.prim1(Prim::Constant(Constant { value: Array::zeros(&ty) }), &[]);
        let z = fb.prim1(binary(BinaryOp::Mul), &[x, zero]);
        let mut outs = vec![];
        for op in [BinaryOp::Div, BinaryOp::Rem] {
            outs.push(fb.prim1(binary(op), &[z, z]));
            outs.push(fb.prim1(binary(op), &[x, zero]));
        }
        if ty.dtype == DType::I32 {
            let min = fb.prim1(Prim::Constant(Constant { value: i32v(&[i32::MIN, i32::MIN]) }), &[]);
            let minus_one = fb.prim1(Prim::Constant(Constant { value: i32v(&[-1, -1]) }), &[]);
            for op in [BinaryOp::Div, BinaryOp::Rem] {
                outs.push(fb.prim1(binary(op), &[min, minus_one]));
            }
        }
        outs
    });
    Case { name, args: vec![x], tol: Tol::Exact, build }
}

/// `for i in lo..hi { acc += x * f32(i); n += 1 }` with `x` a loop constant.
fn loop_case(name: &str, lo: i64, hi: i64) -> Case {
    let build: Build = Box::new(move |fb, vs| {
        let f3 = ArrayTy::new(DType::F32, vec![3]);
        let i32s = ArrayTy::scalar(DType::I32);
        fb.frames.push(vec![]);
        let i = fb.fresh(i32s.clone());
        let x = fb.fresh(f3.clone());
        let acc = fb.fresh(f3.clone());
        let n = fb.fresh(i32s.clone());
        let fi = fb.prim1(Prim::Convert(Convert { to: DType::F32 }), &[i]);
        let fi3 = fb.prim1(Prim::Broadcast(Broadcast { shape: vec![3], dims: vec![] }), &[fi]);
        let t = fb.prim1(binary(BinaryOp::Mul), &[x, fi3]);
        let acc2 = fb.prim1(binary(BinaryOp::Add), &[acc, t]);
        let one = fb.prim1(Prim::Constant(Constant { value: scalar_i32(1) }), &[]);
        let n2 = fb.prim1(binary(BinaryOp::Add), &[n, one]);
        let eqns = fb.frames.pop().expect("the body frame");
        let body = Graph { params: vec![i, x, acc, n], eqns, results: vec![acc2, n2] };
        let outs = vec![fb.fresh(f3), fb.fresh(i32s)];
        fb.push(Eqn { outs: outs.clone(), op: Op::Loop { lo, hi, n_consts: 1, body }, args: vs.to_vec() });
        outs
    });
    Case {
        name: name.to_string(),
        args: vec![f32v(&[0.5, -1.25, 2.0]), f32v(&[0.0, 1.0, 2.0]), scalar_i32(0)],
        tol: Tol::Exact,
        build,
    }
}

/// Nested loops: `for i in 0..3 { for j in 0..4 { s = s * 2 + (i - j) } }`, the inner
/// loop taking the outer index as its constant.
fn nested_loop_case() -> Case {
    let build: Build = Box::new(|fb, vs| {
        let i32s = ArrayTy::scalar(DType::I32);
        fb.frames.push(vec![]);
        let i = fb.fresh(i32s.clone());
        let s = fb.fresh(i32s.clone());
        {
            fb.frames.push(vec![]);
            let j = fb.fresh(i32s.clone());
            let ic = fb.fresh(i32s.clone());
            let s_in = fb.fresh(i32s.clone());
            let two = fb.prim1(Prim::Constant(Constant { value: scalar_i32(2) }), &[]);
            let s2 = fb.prim1(binary(BinaryOp::Mul), &[s_in, two]);
            let d = fb.prim1(binary(BinaryOp::Sub), &[ic, j]);
            let s3 = fb.prim1(binary(BinaryOp::Add), &[s2, d]);
            let eqns = fb.frames.pop().expect("the inner frame");
            let body = Graph { params: vec![j, ic, s_in], eqns, results: vec![s3] };
            let out = fb.fresh(i32s.clone());
            fb.push(Eqn { outs: vec![out], op: Op::Loop { lo: 0, hi: 4, n_consts: 1, body }, args: vec![i, s] });
            let eqns = fb.frames.pop().expect("the outer frame");
            let body = Graph { params: vec![i, s], eqns, results: vec![out] };
            let outer = fb.fresh(i32s);
            fb.push(Eqn { outs: vec![outer], op: Op::Loop { lo: 0, hi: 3, n_consts: 0, body }, args: vs.to_vec() });
            vec![outer]
        }
    });
    Case { name: "nested loops".to_string(), args: vec![scalar_i32(1)], tol: Tol::Exact, build }
}

// ---------------------------------------------------------------------------------------
// Running and comparing

/// Runs `f` on the device.
fn run_device(f: &Func, args: &[Array]) -> Result<Vec<Array>, String> {
    let client = client();
    let exe = client.compile(&lower_module(f, 1), 1).map_err(|e| e.to_string())?;
    let bufs: Vec<_> = args.iter().map(|a| client.upload(a, 0).expect("upload")).collect();
    let refs: Vec<_> = bufs.iter().collect();
    let outs = exe.execute(&refs).map_err(|e| e.to_string())?;
    Ok(outs.iter().map(|b| b.download().expect("download")).collect())
}

/// Distance in units in the last place between two finite floats of one sign class.
fn ulps(a: f32, b: f32) -> u32 {
    let key = |x: f32| {
        let bits = x.to_bits() as i64;
        if bits < 0x8000_0000 { bits } else { 0x8000_0000 - bits }
    };
    (key(a) - key(b)).unsigned_abs().min(u64::from(u32::MAX)) as u32
}

/// Compares a device result with the interpreter's; `scale` is the per-element sum of
/// absolute terms for [`Tol::Accumulated`]. Returns the worst error seen (in the
/// tolerance's unit) or a description of the first mismatch.
fn compare(dev: &Array, want: &Array, tol: Tol, scale: Option<&[f32]>) -> Result<f64, String> {
    if dev.ty() != want.ty() {
        return Err(format!("type {} instead of {}", dev.ty(), want.ty()));
    }
    let (Data::F32(d), Data::F32(w)) = (&dev.data, &want.data) else {
        return if dev == want {
            Ok(0.0)
        } else {
            Err(format!("device {:?}\n   interpreter {:?}", dev.data, want.data))
        };
    };
    let mut worst = 0.0f64;
    for (k, (&x, &y)) in d.iter().zip(w).enumerate() {
        let same = x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan());
        let err = match tol {
            _ if same => 0.0,
            Tol::Exact => f64::INFINITY,
            Tol::Ulps(_) if x.is_finite() && y.is_finite() => f64::from(ulps(x, y)),
            Tol::Accumulated(_) if x.is_finite() && y.is_finite() => {
                let s = scale.map_or(0.0, |s| s[k]).max(f32::MIN_POSITIVE);
                f64::from((x - y).abs() / s)
            }
            Tol::Ulps(_) | Tol::Accumulated(_) => f64::INFINITY,
        };
        let bound = match tol {
            Tol::Exact => 0.0,
            Tol::Ulps(n) => f64::from(n),
            Tol::Accumulated(r) => f64::from(r),
        };
        if err > bound {
            return Err(format!(
                "element {k}: device {x:e} ({:#010x}), interpreter {y:e} ({:#010x}), error {err:e} > {bound:e}\n   device {d:?}\n   interpreter {w:?}",
                x.to_bits(),
                y.to_bits()
            ));
        }
        worst = worst.max(err);
    }
    Ok(worst)
}

/// The sum of absolute terms behind each element of an accumulated case's result: the
/// same case evaluated on the absolute values of its float arguments.
fn abs_scale(c: &Case) -> Option<Vec<f32>> {
    let Tol::Accumulated(_) = c.tol else {
        return None;
    };
    let args: Vec<Array> = c
        .args
        .iter()
        .map(|a| match &a.data {
            Data::F32(v) => Array::f32(a.shape.clone(), v.iter().map(|x| x.abs()).collect()),
            Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => a.clone(),
        })
        .collect();
    let (f, _) = build(&[c]);
    let out = eval_func(&f, &args);
    match &out[0].data {
        Data::F32(v) => Some(v.clone()),
        Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => None,
    }
}

#[test]
fn every_primitive_matches_the_interpreter_on_the_device() {
    let cases = cases();
    let all: Vec<&Case> = cases.iter().collect();
    let (f, counts) = build(&all);
    verify(&f).unwrap_or_else(|e| panic!("the test function does not verify: {e}"));
    let args: Vec<Array> = cases.iter().flat_map(|c| c.args.iter().cloned()).collect();
    let want = eval_func(&f, &args);

    let dev = match run_device(&f, &args) {
        Ok(d) => d,
        Err(e) => {
            // Name the cases the plugin rejects, one module each.
            let mut rejected = vec![];
            for c in &cases {
                if let Err(e) = run_device(&build(&[c]).0, &c.args) {
                    rejected.push(format!("{}: {e}", c.name));
                }
            }
            panic!("the plugin rejected the module: {e}\n\nrejected cases:\n{}", rejected.join("\n"));
        }
    };

    let mut failures = vec![];
    let mut worst: Vec<(String, f64)> = vec![];
    let mut k = 0;
    for (c, &n) in cases.iter().zip(&counts) {
        let scale = abs_scale(c);
        for j in 0..n {
            match compare(&dev[k + j], &want[k + j], c.tol, scale.as_deref()) {
                Ok(e) if e > 0.0 => worst.push((c.name.clone(), e)),
                Ok(_) => {}
                Err(m) => failures.push(format!("{} (output {j}): {m}", c.name)),
            }
        }
        k += n;
    }
    assert_eq!(k, want.len());
    for (name, e) in &worst {
        println!("inexact but within tolerance: {name}: {e:e}");
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
