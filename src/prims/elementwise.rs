//! Elementwise primitives: unary and binary arithmetic, comparison, select and convert.
//!
//! Unary and binary operators are tables, in the spirit of JAX's `standard_unop` and
//! `defvectorized`: each operator is one row (`UnaryOp::rule`, `BinaryOp::rule`) giving
//! its printer name, its StableHLO op and its scalar function on every dtype it accepts.
//! The shared code below turns a row into all three rules: the type rule accepts exactly
//! the dtypes that have a function, evaluation maps the function over the elements, and
//! lowering emits the one StableHLO op (f32 max and min, and so relu, excepted, see
//! `lower_binary`).
//!
//! The scalar functions follow XLA on CPU, the device the results are checked against
//! (`tests/compiler/prims.rs` compares them bit for bit):
//! - integer arithmetic wraps; `x / 0` is all ones (`-1`, `u32::MAX`, or 255) and `x % 0`
//!   is `x`; `i32::MIN / -1` is `i32::MIN` and `i32::MIN % -1` is 0;
//! - shifts by the bit width or more (amounts read as unsigned) give 0;
//! - u8 has no column of its own: it runs the u32 function and keeps the low byte, which
//!   is exact for every u32 row (each commutes with reduction mod 256, `x / 0` and
//!   shifts by 8 to 31 included), so u8 accepts what u32 accepts;
//! - f32 `max`/`min` propagate NaN;
//! - f32 arithmetic flushes subnormals to zero, as XLA's CPU runtime does (see `flush`).

use super::util::expect_arity;
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, broadcasting, vectorized};
use crate::prims::derivative::{NotDifferentiable, binary, compare, full_like, mul, scaled, select, unary};
use crate::prims::emit::LowerCx;

/// A unary elementwise operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// Negation; wraps on integers (`-i32::MIN == i32::MIN`).
    Neg,
    /// Logical not on bool, bitwise not on integers.
    Not,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Hyperbolic tangent.
    Tanh,
    /// Square root.
    Sqrt,
    /// Absolute value; wraps on i32 (`abs(i32::MIN) == i32::MIN`).
    Abs,
    /// Rounds toward negative infinity.
    Floor,
    /// Rounds toward positive infinity.
    Ceil,
    /// Rounds to the nearest integer, halves to even (`jnp.round`).
    Round,
    /// -1, 0 or 1 by the sign; on f32, `-0.0` and NaN are themselves (`jnp.sign`).
    Sign,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// `log(1 + x)`, accurate near 0 (XLA's `log-plus-one`).
    Log1p,
    /// The logistic sigmoid `1 / (1 + e^-x)` (`lax.logistic`); its derivative is written
    /// from the result, so it stays finite where `e^-x` overflows.
    Logistic,
    /// The rectified linear unit `max(x, 0)`, NaN-propagating as `max`; its derivative is
    /// `jax.nn.relu`'s, 1 above 0 and 0 elsewhere (where `max`'s splits a tie at 0).
    Relu,
}

/// A binary elementwise operator. Both operands have the same dtype and shape: the IR
/// builder inserts explicit broadcasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// Addition (wrapping on integers).
    Add,
    /// Subtraction (wrapping on integers).
    Sub,
    /// Multiplication (wrapping on integers).
    Mul,
    /// Division: IEEE on f32, truncating on integers, `x / 0` is all ones.
    Div,
    /// Remainder with the dividend's sign (`fmod` on f32); `x % 0 == x` on integers.
    Rem,
    /// `x^y` on f32.
    Pow,
    /// Maximum (NaN-propagating on f32, `or` on bool).
    Max,
    /// Minimum (NaN-propagating on f32, `and` on bool).
    Min,
    /// Logical and on bool, bitwise on integers.
    And,
    /// Logical or on bool, bitwise on integers.
    Or,
    /// Logical xor on bool, bitwise on integers.
    Xor,
    /// Left shift; amounts of 32 or more (as unsigned) give 0.
    ShiftLeft,
    /// Logical right shift; amounts of 32 or more (as unsigned) give 0.
    ShiftRightLogical,
}

/// A comparison, producing bool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `==` (false when either side is NaN).
    Eq,
    /// `!=` (true when either side is NaN).
    Ne,
    /// `<`.
    Lt,
    /// `<=`.
    Le,
    /// `>`.
    Gt,
    /// `>=`.
    Ge,
}

/// `op(x)` elementwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Unary {
    /// The operator.
    pub op: UnaryOp,
}

/// `op(x, y)` elementwise, on operands of one dtype and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Binary {
    /// The operator.
    pub op: BinaryOp,
}

/// `x op y` elementwise, giving bool of the operands' shape. u32 compares unsigned and
/// bool orders `false < true`.
#[derive(Clone, Debug, PartialEq)]
pub struct Compare {
    /// The comparison.
    pub op: CmpOp,
}

/// `select(pred, on_true, on_false)` elementwise; all three have one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Select;

/// Converts elements to another dtype, as XLA does: f32 to an integer truncates toward
/// zero and saturates, with NaN giving 0; an integer to f32 rounds to nearest; i32 and
/// u32 reinterpret each other's bits; a wider integer to u8 keeps the low byte (mod
/// 256), u8 to a wider one zero-extends; bool gives 0 or 1; anything to bool is `x != 0`
/// (so NaN is true).
#[derive(Clone, Debug, PartialEq)]
pub struct Convert {
    /// The target dtype.
    pub to: DType,
}

// ---------------------------------------------------------------------------------------
// The operator tables.

/// Scalar functions of one operator, one per dtype; `None` where it is not defined.
pub(super) struct Fns<F, I, U, B> {
    pub(super) f32: Option<F>,
    pub(super) i32: Option<I>,
    pub(super) u32: Option<U>,
    pub(super) bool: Option<B>,
}

impl<F, I, U, B> Fns<F, I, U, B> {
    fn supports(&self, d: DType) -> bool {
        match d {
            DType::F32 => self.f32.is_some(),
            DType::I32 => self.i32.is_some(),
            DType::U32 | DType::U8 => self.u32.is_some(),
            DType::Bool => self.bool.is_some(),
        }
    }

    /// The dtypes the operator accepts, for error messages.
    fn accepted(&self) -> String {
        let names: Vec<&str> = DType::ALL.iter().filter(|&&d| self.supports(d)).map(|d| d.name()).collect();
        names.join(", ")
    }
}

/// One row of an operator table.
pub(super) struct Row<F, I, U, B> {
    /// The printer's name.
    pub(super) name: &'static str,
    /// The StableHLO op.
    pub(super) hlo: &'static str,
    /// The scalar functions.
    pub(super) fns: Fns<F, I, U, B>,
}

type UnaryRow = Row<fn(f32) -> f32, fn(i32) -> i32, fn(u32) -> u32, fn(bool) -> bool>;
/// A binary operator's row; reductions reuse these as their combiners.
pub(super) type BinaryRow = Row<fn(f32, f32) -> f32, fn(i32, i32) -> i32, fn(u32, u32) -> u32, fn(bool, bool) -> bool>;

impl<F, I, B> Fns<F, I, fn(u32) -> u32, B> {
    /// The u8 function: the u32 one on the low byte (see the module comment).
    fn u8(&self) -> Option<impl Fn(u8) -> u8> {
        self.u32.map(|f| move |x: u8| f(x.into()) as u8)
    }
}

impl<F, I, B> Fns<F, I, fn(u32, u32) -> u32, B> {
    /// The u8 function: the u32 one on the low byte (see the module comment).
    pub(super) fn u8(&self) -> Option<impl Fn(u8, u8) -> u8> {
        self.u32.map(|f| move |x: u8, y: u8| f(x.into(), y.into()) as u8)
    }
}

/// A unary row defined on f32 only (the transcendental functions).
fn float_unop(name: &'static str, hlo: &'static str, f: fn(f32) -> f32) -> UnaryRow {
    Row { name, hlo, fns: Fns { f32: Some(f), i32: None, u32: None, bool: None } }
}

impl UnaryOp {
    fn rule(self) -> UnaryRow {
        match self {
            UnaryOp::Neg => Row {
                name: "neg",
                hlo: "stablehlo.negate",
                fns: Fns { f32: Some(|x| -x), i32: Some(i32::wrapping_neg), u32: Some(u32::wrapping_neg), bool: None },
            },
            UnaryOp::Not => Row {
                name: "not",
                hlo: "stablehlo.not",
                fns: Fns { f32: None, i32: Some(|x| !x), u32: Some(|x| !x), bool: Some(|x| !x) },
            },
            UnaryOp::Abs => Row {
                name: "abs",
                hlo: "stablehlo.abs",
                fns: Fns { f32: Some(f32::abs), i32: Some(i32::wrapping_abs), u32: None, bool: None },
            },
            UnaryOp::Exp => float_unop("exp", "stablehlo.exponential", |x| flush(flush(x).exp())),
            // For a few array lengths XLA's log takes a code path that reads subnormals
            // exactly; the interpreter follows the flushing path most lengths take.
            UnaryOp::Log => float_unop("log", "stablehlo.log", |x| flush(x).ln()),
            // XLA's tanh and sine return tiny arguments unchanged, subnormals included.
            UnaryOp::Tanh => float_unop("tanh", "stablehlo.tanh", f32::tanh),
            UnaryOp::Sqrt => float_unop("sqrt", "stablehlo.sqrt", |x| flush(x).sqrt()),
            UnaryOp::Floor => float_unop("floor", "stablehlo.floor", |x| flush(x).floor()),
            UnaryOp::Ceil => float_unop("ceil", "stablehlo.ceil", |x| flush(x).ceil()),
            UnaryOp::Round => float_unop("round", "stablehlo.round_nearest_even", |x| flush(x).round_ties_even()),
            UnaryOp::Sign => Row {
                name: "sign",
                hlo: "stablehlo.sign",
                fns: Fns {
                    f32: Some(|x| if flush(x) == 0.0 || x.is_nan() { flush(x) } else { 1.0f32.copysign(x) }),
                    i32: Some(i32::signum),
                    u32: None,
                    bool: None,
                },
            },
            UnaryOp::Sin => float_unop("sin", "stablehlo.sine", f32::sin),
            UnaryOp::Cos => float_unop("cos", "stablehlo.cosine", f32::cos),
            UnaryOp::Log1p => float_unop("log1p", "stablehlo.log_plus_one", log1p_f32),
            UnaryOp::Logistic => {
                float_unop("logistic", "stablehlo.logistic", |x| flush(1.0 / (1.0 + flush(flush(-x).exp()))))
            }
            UnaryOp::Relu => float_unop("relu", "stablehlo.maximum", |x| max_f32(flush(x), 0.0)),
        }
    }
}

/// A binary row on the numeric dtypes, integers wrapping.
fn arith(
    name: &'static str,
    hlo: &'static str,
    f: fn(f32, f32) -> f32,
    i: fn(i32, i32) -> i32,
    u: fn(u32, u32) -> u32,
) -> BinaryRow {
    Row { name, hlo, fns: Fns { f32: Some(f), i32: Some(i), u32: Some(u), bool: None } }
}

/// A binary row on bool and the integers.
fn bitwise(
    name: &'static str,
    hlo: &'static str,
    i: fn(i32, i32) -> i32,
    u: fn(u32, u32) -> u32,
    b: fn(bool, bool) -> bool,
) -> BinaryRow {
    Row { name, hlo, fns: Fns { f32: None, i32: Some(i), u32: Some(u), bool: Some(b) } }
}

/// A binary row on the integers only (shifts).
fn shift(name: &'static str, hlo: &'static str, i: fn(i32, i32) -> i32, u: fn(u32, u32) -> u32) -> BinaryRow {
    Row { name, hlo, fns: Fns { f32: None, i32: Some(i), u32: Some(u), bool: None } }
}

impl BinaryOp {
    /// The operator's row of the table.
    pub(super) fn rule(self) -> BinaryRow {
        match self {
            BinaryOp::Add => {
                arith("add", "stablehlo.add", |a, b| flush(flush(a) + flush(b)), i32::wrapping_add, u32::wrapping_add)
            }
            BinaryOp::Sub => arith(
                "sub",
                "stablehlo.subtract",
                |a, b| flush(flush(a) - flush(b)),
                i32::wrapping_sub,
                u32::wrapping_sub,
            ),
            BinaryOp::Mul => arith(
                "mul",
                "stablehlo.multiply",
                |a, b| flush(flush(a) * flush(b)),
                i32::wrapping_mul,
                u32::wrapping_mul,
            ),
            BinaryOp::Div => arith("div", "stablehlo.divide", |a, b| flush(flush(a) / flush(b)), div_i32, div_u32),
            // XLA's fmod flushes the divisor only, and may return a subnormal.
            BinaryOp::Rem => arith("rem", "stablehlo.remainder", |a, b| a % flush(b), rem_i32, rem_u32),
            BinaryOp::Pow => Row {
                name: "pow",
                hlo: "stablehlo.power",
                // XLA's pow reads subnormal operands exactly; only its result is flushed.
                fns: Fns { f32: Some(|a, b| flush(a.powf(b))), i32: None, u32: None, bool: None },
            },
            BinaryOp::Max => Row {
                name: "max",
                hlo: "stablehlo.maximum",
                fns: Fns { f32: Some(max_f32), i32: Some(Ord::max), u32: Some(Ord::max), bool: Some(|a, b| a | b) },
            },
            BinaryOp::Min => Row {
                name: "min",
                hlo: "stablehlo.minimum",
                fns: Fns { f32: Some(min_f32), i32: Some(Ord::min), u32: Some(Ord::min), bool: Some(|a, b| a & b) },
            },
            BinaryOp::And => bitwise("and", "stablehlo.and", |a, b| a & b, |a, b| a & b, |a, b| a & b),
            BinaryOp::Or => bitwise("or", "stablehlo.or", |a, b| a | b, |a, b| a | b, |a, b| a | b),
            BinaryOp::Xor => bitwise("xor", "stablehlo.xor", |a, b| a ^ b, |a, b| a ^ b, |a, b| a ^ b),
            BinaryOp::ShiftLeft => {
                shift("shift_left", "stablehlo.shift_left", |a, b| shl_u32(a as u32, b as u32) as i32, shl_u32)
            }
            BinaryOp::ShiftRightLogical => shift(
                "shift_right_logical",
                "stablehlo.shift_right_logical",
                |a, b| shr_u32(a as u32, b as u32) as i32,
                shr_u32,
            ),
        }
    }
}

fn div_i32(a: i32, b: i32) -> i32 {
    if b == 0 { -1 } else { a.wrapping_div(b) }
}

fn div_u32(a: u32, b: u32) -> u32 {
    a.checked_div(b).unwrap_or(u32::MAX)
}

fn rem_i32(a: i32, b: i32) -> i32 {
    if b == 0 { a } else { a.wrapping_rem(b) }
}

fn rem_u32(a: u32, b: u32) -> u32 {
    a.checked_rem(b).unwrap_or(a)
}

fn shl_u32(a: u32, b: u32) -> u32 {
    a.checked_shl(b).unwrap_or(0)
}

fn shr_u32(a: u32, b: u32) -> u32 {
    a.checked_shr(b).unwrap_or(0)
}

/// XLA's CPU runtime runs with denormals flushed to zero (the FTZ and DAZ bits of MXCSR):
/// arithmetic reads a subnormal operand as zero of the same sign and writes a subnormal
/// result as zero. Evaluation flushes wherever the device's instructions do; sign-bit
/// operations (neg, abs), moves (select, layout) and a few library routines (noted at
/// their rows) do not flush.
pub(super) fn flush(x: f32) -> f32 {
    if x.is_subnormal() { 0.0f32.copysign(x) } else { x }
}

/// XLA's CPU `log-plus-one` (`xla/codegen/intrinsic/log1p.cc`): for `|x| < sqrt(2) - 1`,
/// Cephes' rational approximation `x - x²/2 + x³·P(x)/Q(x)`, whose multiply-adds LLVM
/// fuses (XLA's CPU backend allows FMA contraction); beyond it, `log(1 + x)` (with the
/// host's log, as the `log` row). Subnormals flush, as everywhere on XLA's CPU runtime.
fn log1p_f32(x: f32) -> f32 {
    // Cephes' coefficients (highest degree first), as XLA writes them in f64.
    #[allow(clippy::excessive_precision)]
    const NUMERATOR: [f64; 7] = [
        4.5270000862445199635215E-5,
        4.9854102823193375972212E-1,
        6.5787325942061044846969E0,
        2.9911919328553073277375E1,
        6.0949667980987787057556E1,
        5.7112963590585538103336E1,
        2.0039553499201281259648E1,
    ];
    #[allow(clippy::excessive_precision)]
    const DENOMINATOR: [f64; 7] = [
        1.,
        1.5062909083469192043167E1,
        8.3047565967967209469434E1,
        2.2176239823732856465394E2,
        3.0909872225312059774938E2,
        2.1642788614495947685003E2,
        6.0118660497603843919306E1,
    ];
    // sqrt(2) - 1, rounded to f32 as XLA's constant is.
    const SMALL: f32 = 0.414_213_57;
    let x = flush(x);
    if x.abs() < SMALL {
        let poly = |cs: &[f64]| cs.iter().fold(0.0f32, |p, &c| flush(p.mul_add(x, c as f32)));
        let x2 = flush(x * x);
        let ratio = flush(poly(&NUMERATOR) / poly(&DENOMINATOR));
        let cubic = flush(flush(x * x2) * ratio);
        flush(x + flush((-0.5f32).mul_add(x2, cubic)))
    } else {
        // NaN lands here too, as in XLA's select.
        flush(flush(x + 1.0).ln())
    }
}

/// NaN-propagating maximum, as lowered: `a` when `a >= b` or `a` is NaN, else `b`. So
/// equal operands give the first (`max(-0, +0)` is `-0`), and the comparison flushes
/// subnormals while the result is an operand, unflushed.
fn max_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() || flush(a) >= flush(b) { a } else { b }
}

/// NaN-propagating minimum, the mirror of [`max_f32`].
fn min_f32(a: f32, b: f32) -> f32 {
    if a.is_nan() || flush(a) <= flush(b) { a } else { b }
}

/// Applies a unary row to an array; the dtype is known to be supported.
fn map1(row: &UnaryRow, x: &Array) -> Array {
    fn go<T: Copy>(f: Option<impl Fn(T) -> T>, v: &[T], name: &str) -> Vec<T> {
        let f = f.unwrap_or_else(|| panic!("{name}: dtype not supported"));
        v.iter().map(|&x| f(x)).collect()
    }
    let data = match &x.data {
        Data::F32(v) => Data::F32(go(row.fns.f32, v, row.name)),
        Data::I32(v) => Data::I32(go(row.fns.i32, v, row.name)),
        Data::U32(v) => Data::U32(go(row.fns.u32, v, row.name)),
        Data::U8(v) => Data::U8(go(row.fns.u8(), v, row.name)),
        Data::Bool(v) => Data::Bool(go(row.fns.bool, v, row.name)),
    };
    Array::new(x.shape.clone(), data)
}

/// Applies a binary row to two arrays of one dtype and shape.
fn map2(row: &BinaryRow, x: &Array, y: &Array) -> Array {
    fn go<T: Copy>(f: Option<impl Fn(T, T) -> T>, a: &[T], b: &[T], name: &str) -> Vec<T> {
        let f = f.unwrap_or_else(|| panic!("{name}: dtype not supported"));
        a.iter().zip(b).map(|(&x, &y)| f(x, y)).collect()
    }
    let data = match (&x.data, &y.data) {
        (Data::F32(a), Data::F32(b)) => Data::F32(go(row.fns.f32, a, b, row.name)),
        (Data::I32(a), Data::I32(b)) => Data::I32(go(row.fns.i32, a, b, row.name)),
        (Data::U32(a), Data::U32(b)) => Data::U32(go(row.fns.u32, a, b, row.name)),
        (Data::U8(a), Data::U8(b)) => Data::U8(go(row.fns.u8(), a, b, row.name)),
        (Data::Bool(a), Data::Bool(b)) => Data::Bool(go(row.fns.bool, a, b, row.name)),
        (Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_), _) => {
            panic!("{}: operands of different dtypes", row.name)
        }
    };
    Array::new(x.shape.clone(), data)
}

/// The type rule shared by every elementwise operator: `arity` arguments of one type,
/// whose dtype the operator supports.
fn same_type<F, I, U, B>(row: &Row<F, I, U, B>, args: &[ArrayTy], arity: usize) -> Result<ArrayTy, String> {
    expect_arity(row.name, args, arity)?;
    let t = &args[0];
    if let Some(other) = args.iter().find(|a| *a != t) {
        return Err(format!("{}: operands must have the same type, got {t} and {other}", row.name));
    }
    if !row.fns.supports(t.dtype) {
        return Err(format!("{} is not defined on {} (accepts {})", row.name, t.dtype, row.fns.accepted()));
    }
    Ok(t.clone())
}

impl Rules for Unary {
    fn name(&self) -> &'static str {
        self.op.rule().name
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        Ok(vec![same_type(&self.op.rule(), args, 1)?])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        vec![map1(&self.op.rule(), args[0])]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        if self.op == UnaryOp::Relu {
            let zero = cx.splat(&Array::f32(vec![], vec![0.0]), &outs[0]);
            return vec![lower_binary(cx, BinaryOp::Max, &args[0], &zero, &outs[0])];
        }
        vec![cx.op(self.op.rule().hlo, args, "", arg_tys, &outs[0])]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        vectorized(b, Prim::Unary(self.clone()), args)
    }

    /// The derivatives JAX gives: `abs` has `sign(x)` (0 at 0), `relu` 0 at 0, the
    /// roundings and `sign` none (zero wherever it exists), and `not` is defined on
    /// integers and bool only.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (x, y, ct) = (args[0], outs[0], cts[0]);
        let dydx = match self.op {
            UnaryOp::Neg => return Ok(vec![Some(unary(b, UnaryOp::Neg, ct))]),
            UnaryOp::Exp => y,
            UnaryOp::Log => return Ok(vec![Some(binary(b, BinaryOp::Div, ct, x))]),
            UnaryOp::Log1p => {
                let one = full_like(b, 1.0, x);
                let one_plus_x = binary(b, BinaryOp::Add, one, x);
                return Ok(vec![Some(binary(b, BinaryOp::Div, ct, one_plus_x))]);
            }
            UnaryOp::Tanh => {
                let (one, y2) = (full_like(b, 1.0, y), mul(b, y, y));
                binary(b, BinaryOp::Sub, one, y2)
            }
            // `ct * y * (1 - y)`, associated as JAX's rule.
            UnaryOp::Logistic => {
                let one = full_like(b, 1.0, y);
                let rest = binary(b, BinaryOp::Sub, one, y);
                let ct_y = mul(b, ct, y);
                return Ok(vec![Some(mul(b, ct_y, rest))]);
            }
            UnaryOp::Sqrt => {
                let two_y = binary(b, BinaryOp::Add, y, y);
                return Ok(vec![Some(binary(b, BinaryOp::Div, ct, two_y))]);
            }
            UnaryOp::Abs => sign(b, x),
            // `select(x > 0, ct, 0)`, as `jax.nn.relu`'s custom derivative.
            UnaryOp::Relu => {
                let zero = full_like(b, 0.0, x);
                let above = compare(b, CmpOp::Gt, x, zero);
                return Ok(vec![Some(select(b, above, ct, zero))]);
            }
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign => return Ok(vec![None]),
            UnaryOp::Sin => unary(b, UnaryOp::Cos, x),
            UnaryOp::Cos => {
                let s = unary(b, UnaryOp::Sin, x);
                unary(b, UnaryOp::Neg, s)
            }
            UnaryOp::Not => return Err(NotDifferentiable),
        };
        scaled(b, ct, dydx)
    }
}

/// `sign(x)` of an f32 array: -1 below zero, 1 above, 0 at zero (and at NaN).
fn sign(b: &mut Builder, x: Var) -> Var {
    let zero = full_like(b, 0.0, x);
    let pos = compare(b, CmpOp::Gt, x, zero);
    let neg = compare(b, CmpOp::Lt, x, zero);
    let one = full_like(b, 1.0, x);
    let minus_one = full_like(b, -1.0, x);
    let s = select(b, neg, minus_one, zero);
    select(b, pos, one, s)
}

/// JAX's `_balanced_eq(x, z, y)`: where `x` is the result `z` of a max or min, 1, halved
/// when `y` is too (a tie shares the derivative); elsewhere 0.
fn balanced(b: &mut Builder, x: Var, z: Var, y: Var) -> Var {
    let x_won = compare(b, CmpOp::Eq, x, z);
    let y_won = compare(b, CmpOp::Eq, y, z);
    let (zero, half, one) = (full_like(b, 0.0, z), full_like(b, 0.5, z), full_like(b, 1.0, z));
    let share = select(b, y_won, half, one);
    select(b, x_won, share, zero)
}

/// Emits `op(a, b)` on operands of type `ty`.
///
/// f32 max and min are spelled out as `select(a >= b | a != a, a, b)` rather than
/// `stablehlo.maximum`: XLA's CPU backend compiles `maximum` with fast min/max, which
/// drops NaNs, and this keeps the documented NaN-propagating semantics whatever the
/// backend's flags.
pub(super) fn lower_binary(cx: &mut LowerCx, op: BinaryOp, a: &str, b: &str, ty: &ArrayTy) -> String {
    let (a, b) = (a.to_string(), b.to_string());
    let dir = match op {
        BinaryOp::Max if ty.dtype == DType::F32 => CmpOp::Ge,
        BinaryOp::Min if ty.dtype == DType::F32 => CmpOp::Le,
        BinaryOp::Div | BinaryOp::Rem if ty.dtype.is_int() => return lower_int_div(cx, op, &a, &b, ty),
        BinaryOp::Add
        | BinaryOp::Sub
        | BinaryOp::Mul
        | BinaryOp::Div
        | BinaryOp::Rem
        | BinaryOp::Pow
        | BinaryOp::Max
        | BinaryOp::Min
        | BinaryOp::And
        | BinaryOp::Or
        | BinaryOp::Xor
        | BinaryOp::ShiftLeft
        | BinaryOp::ShiftRightLogical => {
            return cx.op(op.rule().hlo, &[a, b], "", &[ty.clone(), ty.clone()], ty);
        }
    };
    let mask = ArrayTy::new(DType::Bool, ty.shape.clone());
    let wins = lower_compare(cx, dir, &a, &b, ty);
    let nan = lower_compare(cx, CmpOp::Ne, &a, &a, ty);
    let pick = cx.op("stablehlo.or", &[wins, nan], "", &[mask.clone(), mask.clone()], &mask);
    cx.op("stablehlo.select", &[pick, a, b], "", &[mask, ty.clone(), ty.clone()], ty)
}

/// Emits integer `a / b` or `a % b` with a divisor that cannot trap. XLA defines `x / 0`,
/// `x % 0` and `MIN / -1` (see the module comment) and computes them so at run time, but
/// its constant folder divides natively: a division it can prove is by zero, such as
/// `(x * 0) / (x * 0)`, kills the compiler with SIGFPE (`jax.jit` of
/// `lax.div(x * 0, x * 0)` does the same in JAX 0.10.2). So the divisor is 1 where it is
/// 0 (or -1 under MIN), which gives MIN / -1 and MIN % -1 as they are, and the results at
/// 0 are selected.
fn lower_int_div(cx: &mut LowerCx, op: BinaryOp, a: &str, b: &str, ty: &ArrayTy) -> String {
    let int = |v: i64| {
        let data = match ty.dtype {
            DType::I32 => Data::I32(vec![v as i32]),
            DType::U32 => Data::U32(vec![v as u32]),
            DType::U8 => Data::U8(vec![v as u8]),
            DType::F32 | DType::Bool => unreachable!("{} is no integer", ty.dtype),
        };
        Array::new(vec![], data)
    };
    let mask = ArrayTy::new(DType::Bool, ty.shape.clone());
    let (zero, one, all_ones) = (cx.splat(&int(0), ty), cx.splat(&int(1), ty), cx.splat(&int(-1), ty));
    let by_zero = lower_compare(cx, CmpOp::Eq, b, &zero, ty);
    let trap = if ty.dtype == DType::I32 {
        let min = cx.splat(&int(i32::MIN.into()), ty);
        let a_min = lower_compare(cx, CmpOp::Eq, a, &min, ty);
        let b_minus_one = lower_compare(cx, CmpOp::Eq, b, &all_ones, ty);
        let overflow = cx.op("stablehlo.and", &[a_min, b_minus_one], "", &[mask.clone(), mask.clone()], &mask);
        cx.op("stablehlo.or", &[by_zero.clone(), overflow], "", &[mask.clone(), mask.clone()], &mask)
    } else {
        by_zero.clone()
    };
    let (a, b) = (a.to_string(), b.to_string());
    let safe = cx.op("stablehlo.select", &[trap, one, b], "", &[mask.clone(), ty.clone(), ty.clone()], ty);
    let q = cx.op(op.rule().hlo, &[a.clone(), safe], "", &[ty.clone(), ty.clone()], ty);
    let at_zero = if op == BinaryOp::Div { all_ones } else { a };
    cx.op("stablehlo.select", &[by_zero, at_zero, q], "", &[mask, ty.clone(), ty.clone()], ty)
}

/// Emits the comparison `a op b` of operands of type `ty`.
pub(super) fn lower_compare(cx: &mut LowerCx, op: CmpOp, a: &str, b: &str, ty: &ArrayTy) -> String {
    let attrs = format!(
        "comparison_direction = #stablehlo<comparison_direction {}>, compare_type = #stablehlo<comparison_type {}>",
        op.direction(),
        compare_type(ty.dtype)
    );
    let mask = ArrayTy::new(DType::Bool, ty.shape.clone());
    cx.op("stablehlo.compare", &[a.to_string(), b.to_string()], &attrs, &[ty.clone(), ty.clone()], &mask)
}

impl Rules for Binary {
    fn name(&self) -> &'static str {
        self.op.rule().name
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        Ok(vec![same_type(&self.op.rule(), args, 2)?])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        vec![map2(&self.op.rule(), args[0], args[1])]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        vec![lower_binary(cx, self.op, &args[0], &args[1], &arg_tys[0])]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        broadcasting(b, Prim::Binary(self.clone()), args)
    }

    /// JAX's derivatives: `rem(x, y) = x - y * trunc(x / y)`, `pow` with JAX's guards (no
    /// derivative in `y` where `x` is 0, none in `x` where `y` is 0), max and min sharing
    /// ties equally. The bitwise operators and shifts are defined on integers and bool
    /// only.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (x, y, z, ct) = (args[0], args[1], outs[0], cts[0]);
        let neg = |b: &mut Builder, v| unary(b, UnaryOp::Neg, v);
        let (dx, dy) = match self.op {
            BinaryOp::Add => (ct, ct),
            BinaryOp::Sub => (ct, neg(b, ct)),
            BinaryOp::Mul => (mul(b, ct, y), mul(b, ct, x)),
            BinaryOp::Div => {
                let dx = binary(b, BinaryOp::Div, ct, y);
                let dz = mul(b, dx, z);
                (dx, neg(b, dz))
            }
            BinaryOp::Rem => {
                let q = binary(b, BinaryOp::Div, x, y);
                let t = trunc(b, q);
                let d = mul(b, ct, t);
                (ct, neg(b, d))
            }
            BinaryOp::Pow => {
                let (zero, one) = (full_like(b, 0.0, x), full_like(b, 1.0, x));
                let y_is_0 = compare(b, CmpOp::Eq, y, zero);
                let y_minus_1 = binary(b, BinaryOp::Sub, y, one);
                let p = binary(b, BinaryOp::Pow, x, y_minus_1);
                let jac = mul(b, y, p);
                let jac = select(b, y_is_0, zero, jac);
                let x_is_0 = compare(b, CmpOp::Eq, x, zero);
                let safe_x = select(b, x_is_0, one, x);
                let log_x = unary(b, UnaryOp::Log, safe_x);
                let dy = mul(b, log_x, z);
                (mul(b, ct, jac), mul(b, ct, dy))
            }
            BinaryOp::Max | BinaryOp::Min => {
                let (sx, sy) = (balanced(b, x, z, y), balanced(b, y, z, x));
                (mul(b, ct, sx), mul(b, ct, sy))
            }
            BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::ShiftLeft | BinaryOp::ShiftRightLogical => {
                return Err(NotDifferentiable);
            }
        };
        Ok(vec![Some(dx), Some(dy)])
    }
}

/// Rounds toward zero: `floor(|q|)` with `q`'s sign.
fn trunc(b: &mut Builder, q: Var) -> Var {
    let a = unary(b, UnaryOp::Abs, q);
    let f = unary(b, UnaryOp::Floor, a);
    let zero = full_like(b, 0.0, q);
    let negative = compare(b, CmpOp::Lt, q, zero);
    let minus_f = unary(b, UnaryOp::Neg, f);
    select(b, negative, minus_f, f)
}

// ---------------------------------------------------------------------------------------
// compare

impl CmpOp {
    fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// StableHLO's `comparison_direction`.
    fn direction(self) -> &'static str {
        match self {
            CmpOp::Eq => "EQ",
            CmpOp::Ne => "NE",
            CmpOp::Lt => "LT",
            CmpOp::Le => "LE",
            CmpOp::Gt => "GT",
            CmpOp::Ge => "GE",
        }
    }

    fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// StableHLO's `compare_type` for a dtype: it decides signedness and NaN handling.
fn compare_type(d: DType) -> &'static str {
    match d {
        DType::F32 => "FLOAT",
        DType::I32 => "SIGNED",
        DType::U32 | DType::U8 | DType::Bool => "UNSIGNED",
    }
}

impl Rules for Compare {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity(self.name(), args, 2)?;
        if args[0] != args[1] {
            return Err(format!("{}: operands must have the same type, got {} and {}", self.name(), args[0], args[1]));
        }
        Ok(vec![ArrayTy::new(DType::Bool, args[0].shape.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        fn go<T: PartialOrd + Copy>(op: CmpOp, a: &[T], b: &[T]) -> Vec<bool> {
            a.iter().zip(b).map(|(&x, &y)| op.apply(x, y)).collect()
        }
        let flushed = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| flush(x)).collect() };
        let out = match (&args[0].data, &args[1].data) {
            (Data::F32(a), Data::F32(b)) => go(self.op, &flushed(a), &flushed(b)),
            (Data::I32(a), Data::I32(b)) => go(self.op, a, b),
            (Data::U32(a), Data::U32(b)) => go(self.op, a, b),
            (Data::U8(a), Data::U8(b)) => go(self.op, a, b),
            (Data::Bool(a), Data::Bool(b)) => go(self.op, a, b),
            (Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_), _) => {
                panic!("{}: operands of different dtypes", self.name())
            }
        };
        vec![Array::new(args[0].shape.clone(), Data::Bool(out))]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], _outs: &[ArrayTy]) -> Vec<String> {
        vec![lower_compare(cx, self.op, &args[0], &args[1], &arg_tys[0])]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        broadcasting(b, Prim::Compare(self.clone()), args)
    }

    /// A bool result: piecewise constant, no derivative. (As a `select` predicate it
    /// needs none: `select` sends nothing to its predicate.)
    fn vjp(
        &self,
        _b: &mut Builder,
        _args: &[Var],
        _outs: &[Var],
        _cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        Err(NotDifferentiable)
    }
}

// ---------------------------------------------------------------------------------------
// select

impl Rules for Select {
    fn name(&self) -> &'static str {
        "select"
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("select", args, 3)?;
        let (p, t, f) = (&args[0], &args[1], &args[2]);
        if p.dtype != DType::Bool {
            return Err(format!("select: the predicate must be bool, got {p}"));
        }
        if t != f {
            return Err(format!("select: branches must have the same type, got {t} and {f}"));
        }
        if p.shape != t.shape {
            return Err(format!("select: predicate {p} and branches {t} differ in shape"));
        }
        Ok(vec![t.clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        fn go<T: Copy>(p: &[bool], a: &[T], b: &[T]) -> Vec<T> {
            p.iter().zip(a.iter().zip(b)).map(|(&c, (&x, &y))| if c { x } else { y }).collect()
        }
        let Data::Bool(p) = &args[0].data else { panic!("select: predicate is not bool") };
        let data = match (&args[1].data, &args[2].data) {
            (Data::F32(a), Data::F32(b)) => Data::F32(go(p, a, b)),
            (Data::I32(a), Data::I32(b)) => Data::I32(go(p, a, b)),
            (Data::U32(a), Data::U32(b)) => Data::U32(go(p, a, b)),
            (Data::U8(a), Data::U8(b)) => Data::U8(go(p, a, b)),
            (Data::Bool(a), Data::Bool(b)) => Data::Bool(go(p, a, b)),
            (Data::F32(_) | Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_), _) => {
                panic!("select: branches of different dtypes")
            }
        };
        vec![Array::new(args[1].shape.clone(), data)]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.op("stablehlo.select", args, "", arg_tys, &outs[0])]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        broadcasting(b, Prim::Select(Select), args)
    }

    /// Each branch gets the cotangent where it was chosen; the predicate none.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        let (p, ct) = (args[0], cts[0]);
        let zero = full_like(b, 0.0, ct);
        Ok(vec![None, Some(select(b, p, ct, zero)), Some(select(b, p, zero, ct))])
    }
}

// ---------------------------------------------------------------------------------------
// convert

impl Rules for Convert {
    fn name(&self) -> &'static str {
        "convert"
    }

    fn attrs(&self) -> String {
        format!("[to={}]", self.to)
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("convert", args, 1)?;
        Ok(vec![ArrayTy::new(self.to, args[0].shape.clone())])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let x = args[0];
        // Rust's `as` from float to integer is exactly XLA's conversion: truncate toward
        // zero, saturate, NaN to 0. Between i32 and u32 it reinterprets the bits; to u8 it
        // keeps the low byte.
        let data = match (&x.data, self.to) {
            (Data::F32(v), DType::F32) => Data::F32(v.clone()),
            (Data::F32(v), DType::I32) => Data::I32(v.iter().map(|&a| a as i32).collect()),
            (Data::F32(v), DType::U32) => Data::U32(v.iter().map(|&a| a as u32).collect()),
            (Data::F32(v), DType::U8) => Data::U8(v.iter().map(|&a| a as u8).collect()),
            (Data::F32(v), DType::Bool) => Data::Bool(v.iter().map(|&a| flush(a) != 0.0).collect()),
            (Data::I32(v), DType::F32) => Data::F32(v.iter().map(|&a| a as f32).collect()),
            (Data::I32(v), DType::I32) => Data::I32(v.clone()),
            (Data::I32(v), DType::U32) => Data::U32(v.iter().map(|&a| a as u32).collect()),
            (Data::I32(v), DType::U8) => Data::U8(v.iter().map(|&a| a as u8).collect()),
            (Data::I32(v), DType::Bool) => Data::Bool(v.iter().map(|&a| a != 0).collect()),
            (Data::U32(v), DType::F32) => Data::F32(v.iter().map(|&a| a as f32).collect()),
            (Data::U32(v), DType::I32) => Data::I32(v.iter().map(|&a| a as i32).collect()),
            (Data::U32(v), DType::U32) => Data::U32(v.clone()),
            (Data::U32(v), DType::U8) => Data::U8(v.iter().map(|&a| a as u8).collect()),
            (Data::U32(v), DType::Bool) => Data::Bool(v.iter().map(|&a| a != 0).collect()),
            (Data::U8(v), DType::F32) => Data::F32(v.iter().map(|&a| f32::from(a)).collect()),
            (Data::U8(v), DType::I32) => Data::I32(v.iter().map(|&a| i32::from(a)).collect()),
            (Data::U8(v), DType::U32) => Data::U32(v.iter().map(|&a| u32::from(a)).collect()),
            (Data::U8(v), DType::U8) => Data::U8(v.clone()),
            (Data::U8(v), DType::Bool) => Data::Bool(v.iter().map(|&a| a != 0).collect()),
            (Data::Bool(v), DType::F32) => Data::F32(v.iter().map(|&a| f32::from(u8::from(a))).collect()),
            (Data::Bool(v), DType::I32) => Data::I32(v.iter().map(|&a| i32::from(a)).collect()),
            (Data::Bool(v), DType::U32) => Data::U32(v.iter().map(|&a| u32::from(a)).collect()),
            (Data::Bool(v), DType::U8) => Data::U8(v.iter().map(|&a| u8::from(a)).collect()),
            (Data::Bool(v), DType::Bool) => Data::Bool(v.clone()),
        };
        vec![Array::new(x.shape.clone(), data)]
    }

    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        vec![cx.op("stablehlo.convert", args, "", arg_tys, &outs[0])]
    }

    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        vectorized(b, Prim::Convert(self.clone()), args)
    }

    /// The identity from f32 to f32. A conversion between an integer or bool and a float
    /// has no derivative: an integer made from floats is piecewise constant in them.
    fn vjp(
        &self,
        b: &mut Builder,
        args: &[Var],
        _outs: &[Var],
        cts: &[Var],
    ) -> Result<Vec<Option<Var>>, NotDifferentiable> {
        match (b.ty(args[0]).dtype, self.to) {
            (DType::F32, DType::F32) => Ok(vec![Some(cts[0])]),
            (DType::F32 | DType::I32 | DType::U32 | DType::U8 | DType::Bool, _) => Err(NotDifferentiable),
        }
    }
}
