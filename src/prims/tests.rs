//! Unit tests of the primitives' rules: evaluation on small inputs with hand-computed
//! results, and the type rules' errors. (`tests/compiler/prims.rs` checks evaluation against the
//! device; these pin down the intended semantics on their own.)

use super::*;
use crate::array::{Array, ArrayTy, DType, Data};
use crate::prims::emit::{dense, f32_literal};

/// Evaluates `p`, checking first that its type rule accepts the arguments and predicts
/// the results' types.
fn ev(p: Prim, args: Vec<Array>) -> Vec<Array> {
    let tys: Vec<ArrayTy> = args.iter().map(Array::ty).collect();
    let want = p.rules().infer(&tys).unwrap_or_else(|e| panic!("{} rejects {tys:?}: {e}", p.rules().name()));
    let refs: Vec<&Array> = args.iter().collect();
    let out = p.rules().eval(&refs);
    let got: Vec<ArrayTy> = out.iter().map(Array::ty).collect();
    assert_eq!(got, want, "{}: eval and infer disagree", p.rules().name());
    out
}

fn ev1(p: Prim, args: Vec<Array>) -> Array {
    ev(p, args).remove(0)
}

/// The type rule's error for these argument types.
fn err(p: Prim, tys: &[ArrayTy]) -> String {
    match p.rules().infer(tys) {
        Ok(t) => panic!("{} accepts {tys:?}, giving {t:?}", p.rules().name()),
        Err(e) => e,
    }
}

fn f(shape: &[usize], v: &[f32]) -> Array {
    Array::f32(shape.to_vec(), v.to_vec())
}

fn i(shape: &[usize], v: &[i32]) -> Array {
    Array::i32(shape.to_vec(), v.to_vec())
}

fn u(shape: &[usize], v: &[u32]) -> Array {
    Array::new(shape.to_vec(), Data::U32(v.to_vec()))
}

fn y(shape: &[usize], v: &[u8]) -> Array {
    Array::new(shape.to_vec(), Data::U8(v.to_vec()))
}

fn b(shape: &[usize], v: &[bool]) -> Array {
    Array::new(shape.to_vec(), Data::Bool(v.to_vec()))
}

fn t(d: DType, shape: &[usize]) -> ArrayTy {
    ArrayTy::new(d, shape.to_vec())
}

fn un(op: UnaryOp) -> Prim {
    Prim::Unary(Unary { op })
}

fn bin(op: BinaryOp) -> Prim {
    Prim::Binary(Binary { op })
}

fn cmp(op: CmpOp) -> Prim {
    Prim::Compare(Compare { op })
}

fn f32s(a: &Array) -> &[f32] {
    match &a.data {
        Data::F32(v) => v,
        Data::I32(_) | Data::U32(_) | Data::U8(_) | Data::Bool(_) => panic!("not f32: {a:?}"),
    }
}

/// Bit patterns, so that `-0.0` and NaN are compared exactly.
fn bits(a: &Array) -> Vec<u32> {
    f32s(a).iter().map(|x| x.to_bits()).collect()
}

fn approx(a: &Array, want: &[f32]) {
    for (x, y) in f32s(a).iter().zip(want) {
        assert!((x - y).abs() <= 1e-6 * y.abs().max(1.0), "{x} vs {y} in {a:?}");
    }
}

// ---------------------------------------------------------------------------------------
// elementwise

#[test]
fn unary_arithmetic() {
    assert_eq!(bits(&ev1(un(UnaryOp::Neg), vec![f(&[3], &[1.0, -2.0, 0.0])])), bits(&f(&[3], &[-1.0, 2.0, -0.0])));
    assert_eq!(ev1(un(UnaryOp::Neg), vec![i(&[2], &[i32::MIN, 5])]), i(&[2], &[i32::MIN, -5]));
    assert_eq!(ev1(un(UnaryOp::Neg), vec![u(&[2], &[1, 0])]), u(&[2], &[u32::MAX, 0]));
    assert_eq!(ev1(un(UnaryOp::Abs), vec![i(&[2], &[i32::MIN, -3])]), i(&[2], &[i32::MIN, 3]));
    assert_eq!(bits(&ev1(un(UnaryOp::Abs), vec![f(&[2], &[-0.5, -0.0])])), bits(&f(&[2], &[0.5, 0.0])));
    assert_eq!(bits(&ev1(un(UnaryOp::Floor), vec![f(&[3], &[-1.5, 1.5, -0.0])])), bits(&f(&[3], &[-2.0, 1.0, -0.0])));
    assert_eq!(bits(&ev1(un(UnaryOp::Ceil), vec![f(&[3], &[-1.5, 1.5, -0.5])])), bits(&f(&[3], &[-1.0, 2.0, -0.0])));
    let halves = f(&[4], &[-2.5, -0.5, 0.5, 1.5]);
    assert_eq!(bits(&ev1(un(UnaryOp::Round), vec![halves])), bits(&f(&[4], &[-2.0, -0.0, 0.0, 2.0])));
    let signs = ev1(un(UnaryOp::Sign), vec![f(&[4], &[-3.0, -0.0, 1e-40, f32::NAN])]);
    assert_eq!(bits(&signs)[..3], bits(&f(&[3], &[-1.0, -0.0, 0.0])));
    assert!(f32s(&signs)[3].is_nan());
    assert_eq!(ev1(un(UnaryOp::Sign), vec![i(&[3], &[i32::MIN, 0, 9])]), i(&[3], &[-1, 0, 1]));
    assert_eq!(ev1(un(UnaryOp::Sqrt), vec![f(&[2], &[4.0, 2.0])]), f(&[2], &[2.0, std::f32::consts::SQRT_2]));
}

#[test]
fn unary_transcendental() {
    let e = std::f32::consts::E;
    approx(&ev1(un(UnaryOp::Exp), vec![f(&[2], &[0.0, 1.0])]), &[1.0, e]);
    approx(&ev1(un(UnaryOp::Log), vec![f(&[2], &[1.0, e])]), &[0.0, 1.0]);
    approx(&ev1(un(UnaryOp::Tanh), vec![f(&[3], &[0.0, 20.0, -20.0])]), &[0.0, 1.0, -1.0]);
    approx(&ev1(un(UnaryOp::Sin), vec![f(&[2], &[0.0, std::f32::consts::FRAC_PI_2])]), &[0.0, 1.0]);
    approx(&ev1(un(UnaryOp::Cos), vec![f(&[2], &[0.0, std::f32::consts::PI])]), &[1.0, -1.0]);
    let nan = ev1(un(UnaryOp::Log), vec![f(&[2], &[-1.0, 0.0])]);
    assert!(f32s(&nan)[0].is_nan() && f32s(&nan)[1] == f32::NEG_INFINITY);
}

#[test]
fn not_is_logical_on_bool_and_bitwise_on_integers() {
    assert_eq!(ev1(un(UnaryOp::Not), vec![b(&[2], &[true, false])]), b(&[2], &[false, true]));
    assert_eq!(ev1(un(UnaryOp::Not), vec![i(&[3], &[0, -1, 5])]), i(&[3], &[-1, 0, -6]));
    assert_eq!(ev1(un(UnaryOp::Not), vec![u(&[1], &[0])]), u(&[1], &[u32::MAX]));
}

#[test]
fn integer_arithmetic_wraps() {
    assert_eq!(ev1(bin(BinaryOp::Add), vec![i(&[1], &[i32::MAX]), i(&[1], &[1])]), i(&[1], &[i32::MIN]));
    assert_eq!(ev1(bin(BinaryOp::Sub), vec![u(&[1], &[0]), u(&[1], &[1])]), u(&[1], &[u32::MAX]));
    assert_eq!(ev1(bin(BinaryOp::Mul), vec![i(&[1], &[0x4000_0000]), i(&[1], &[4])]), i(&[1], &[0]));
}

#[test]
fn integer_division_follows_xla() {
    let x = i(&[6], &[7, -7, 7, i32::MIN, 5, -5]);
    let y = i(&[6], &[2, 2, 0, -1, -3, 0]);
    // truncating; x / 0 == -1; MIN / -1 == MIN
    assert_eq!(ev1(bin(BinaryOp::Div), vec![x.clone(), y.clone()]), i(&[6], &[3, -3, -1, i32::MIN, -1, -1]));
    // the dividend's sign; x % 0 == x; MIN % -1 == 0
    assert_eq!(ev1(bin(BinaryOp::Rem), vec![x, y]), i(&[6], &[1, -1, 7, 0, 2, -5]));
    assert_eq!(ev1(bin(BinaryOp::Div), vec![u(&[2], &[7, 7]), u(&[2], &[2, 0])]), u(&[2], &[3, u32::MAX]));
    assert_eq!(ev1(bin(BinaryOp::Rem), vec![u(&[2], &[7, 7]), u(&[2], &[2, 0])]), u(&[2], &[1, 7]));
}

#[test]
fn float_arithmetic() {
    assert_eq!(ev1(bin(BinaryOp::Rem), vec![f(&[2], &[5.5, -5.5]), f(&[2], &[2.0, 2.0])]), f(&[2], &[1.5, -1.5]));
    assert_eq!(ev1(bin(BinaryOp::Pow), vec![f(&[2], &[2.0, 4.0]), f(&[2], &[3.0, 0.5])]), f(&[2], &[8.0, 2.0]));
    assert_eq!(
        ev1(bin(BinaryOp::Div), vec![f(&[2], &[1.0, -1.0]), f(&[2], &[0.0, 0.0])]),
        f(&[2], &[f32::INFINITY, f32::NEG_INFINITY])
    );
}

#[test]
fn float_max_and_min_propagate_nan_and_prefer_the_first_of_equals() {
    let x = f(&[5], &[1.0, f32::NAN, 2.0, -0.0, 0.0]);
    let y = f(&[5], &[2.0, 1.0, f32::NAN, 0.0, -0.0]);
    let max = ev1(bin(BinaryOp::Max), vec![x.clone(), y.clone()]);
    let mx = f32s(&max);
    assert_eq!(mx[0], 2.0);
    assert!(mx[1].is_nan() && mx[2].is_nan());
    assert_eq!((mx[3].to_bits(), mx[4].to_bits()), ((-0.0f32).to_bits(), 0.0f32.to_bits()));
    let min = ev1(bin(BinaryOp::Min), vec![x, y]);
    let mn = f32s(&min);
    assert_eq!(mn[0], 1.0);
    assert!(mn[1].is_nan() && mn[2].is_nan());
    assert_eq!((mn[3].to_bits(), mn[4].to_bits()), ((-0.0f32).to_bits(), 0.0f32.to_bits()));
}

#[test]
fn integer_and_bool_max_min() {
    assert_eq!(ev1(bin(BinaryOp::Max), vec![i(&[2], &[-1, 3]), i(&[2], &[0, 2])]), i(&[2], &[0, 3]));
    // unsigned order
    assert_eq!(ev1(bin(BinaryOp::Max), vec![u(&[1], &[0x8000_0000]), u(&[1], &[1])]), u(&[1], &[0x8000_0000]));
    assert_eq!(ev1(bin(BinaryOp::Min), vec![u(&[1], &[0x8000_0000]), u(&[1], &[1])]), u(&[1], &[1]));
    let (p, q) = (b(&[4], &[false, false, true, true]), b(&[4], &[false, true, false, true]));
    assert_eq!(ev1(bin(BinaryOp::Max), vec![p.clone(), q.clone()]), b(&[4], &[false, true, true, true]));
    assert_eq!(ev1(bin(BinaryOp::Min), vec![p, q]), b(&[4], &[false, false, false, true]));
}

#[test]
fn bitwise_and_logical() {
    let (p, q) = (b(&[4], &[false, false, true, true]), b(&[4], &[false, true, false, true]));
    assert_eq!(ev1(bin(BinaryOp::And), vec![p.clone(), q.clone()]), b(&[4], &[false, false, false, true]));
    assert_eq!(ev1(bin(BinaryOp::Or), vec![p.clone(), q.clone()]), b(&[4], &[false, true, true, true]));
    assert_eq!(ev1(bin(BinaryOp::Xor), vec![p, q]), b(&[4], &[false, true, true, false]));
    assert_eq!(ev1(bin(BinaryOp::And), vec![i(&[1], &[0b1100]), i(&[1], &[0b1010])]), i(&[1], &[0b1000]));
    assert_eq!(ev1(bin(BinaryOp::Or), vec![i(&[1], &[0b1100]), i(&[1], &[0b1010])]), i(&[1], &[0b1110]));
    assert_eq!(ev1(bin(BinaryOp::Xor), vec![u(&[1], &[0b1100]), u(&[1], &[0b1010])]), u(&[1], &[0b0110]));
}

#[test]
fn shifts_past_the_bit_width_give_zero() {
    let sl = ev1(bin(BinaryOp::ShiftLeft), vec![i(&[5], &[1, 1, 1, -1, 1]), i(&[5], &[3, 31, 32, 1, -1])]);
    assert_eq!(sl, i(&[5], &[8, i32::MIN, 0, -2, 0]));
    let sr = ev1(bin(BinaryOp::ShiftRightLogical), vec![i(&[4], &[-1, -8, 5, 5]), i(&[4], &[28, 1, 32, -1])]);
    assert_eq!(sr, i(&[4], &[15, 0x7FFF_FFFC, 0, 0]));
    let su = ev1(bin(BinaryOp::ShiftRightLogical), vec![u(&[2], &[u32::MAX, 8]), u(&[2], &[31, 40])]);
    assert_eq!(su, u(&[2], &[1, 0]));
}

#[test]
fn subnormals_flush_like_the_device() {
    let tiny = 1e-40f32;
    assert!(tiny.is_subnormal());
    // arithmetic reads and writes subnormals as zero
    assert_eq!(bits(&ev1(bin(BinaryOp::Add), vec![f(&[1], &[tiny]), f(&[1], &[0.0])])), [0]);
    assert_eq!(bits(&ev1(bin(BinaryOp::Mul), vec![f(&[1], &[1e-20]), f(&[1], &[1e-20])])), [0]);
    assert_eq!(ev1(cmp(CmpOp::Eq), vec![f(&[1], &[tiny]), f(&[1], &[0.0])]), b(&[1], &[true]));
    let to_bool = Prim::Convert(Convert { to: DType::Bool });
    assert_eq!(ev1(to_bool, vec![f(&[1], &[tiny])]), b(&[1], &[false]));
    // sign-bit operations and moves keep them
    assert_eq!(bits(&ev1(un(UnaryOp::Neg), vec![f(&[1], &[tiny])])), [(-tiny).to_bits()]);
    assert_eq!(bits(&ev1(bin(BinaryOp::Max), vec![f(&[1], &[tiny]), f(&[1], &[0.0])])), [tiny.to_bits()]);
}

#[test]
fn comparisons() {
    let x = f(&[3], &[1.0, f32::NAN, -0.0]);
    let y = f(&[3], &[2.0, f32::NAN, 0.0]);
    assert_eq!(ev1(cmp(CmpOp::Lt), vec![x.clone(), y.clone()]), b(&[3], &[true, false, false]));
    assert_eq!(ev1(cmp(CmpOp::Le), vec![x.clone(), y.clone()]), b(&[3], &[true, false, true]));
    assert_eq!(ev1(cmp(CmpOp::Eq), vec![x.clone(), y.clone()]), b(&[3], &[false, false, true]));
    assert_eq!(ev1(cmp(CmpOp::Ne), vec![x.clone(), y.clone()]), b(&[3], &[true, true, false]));
    assert_eq!(ev1(cmp(CmpOp::Gt), vec![x.clone(), y.clone()]), b(&[3], &[false, false, false]));
    assert_eq!(ev1(cmp(CmpOp::Ge), vec![x, y]), b(&[3], &[false, false, true]));
    assert_eq!(ev1(cmp(CmpOp::Gt), vec![u(&[1], &[0x8000_0000]), u(&[1], &[1])]), b(&[1], &[true]));
    assert_eq!(ev1(cmp(CmpOp::Gt), vec![i(&[1], &[i32::MIN]), i(&[1], &[1])]), b(&[1], &[false]));
    assert_eq!(ev1(cmp(CmpOp::Lt), vec![b(&[2], &[false, true]), b(&[2], &[true, true])]), b(&[2], &[true, false]));
}

#[test]
fn select_picks_per_element() {
    let p = b(&[3], &[true, false, true]);
    let out = ev1(Prim::Select(Select), vec![p, i(&[3], &[1, 2, 3]), i(&[3], &[4, 5, 6])]);
    assert_eq!(out, i(&[3], &[1, 5, 3]));
}

#[test]
fn convert_truncates_and_saturates() {
    let conv = |to| Prim::Convert(Convert { to });
    let x = f(&[6], &[1.9, -1.9, f32::NAN, 3e9, -3e9, f32::INFINITY]);
    assert_eq!(ev1(conv(DType::I32), vec![x.clone()]), i(&[6], &[1, -1, 0, i32::MAX, i32::MIN, i32::MAX]));
    assert_eq!(ev1(conv(DType::U32), vec![x]), u(&[6], &[1, 0, 0, 3_000_000_000, 0, u32::MAX]));
    assert_eq!(ev1(conv(DType::U32), vec![i(&[1], &[-1])]), u(&[1], &[u32::MAX]));
    assert_eq!(ev1(conv(DType::I32), vec![u(&[1], &[u32::MAX])]), i(&[1], &[-1]));
    assert_eq!(ev1(conv(DType::F32), vec![u(&[1], &[u32::MAX])]), f(&[1], &[4_294_967_296.0]));
    assert_eq!(ev1(conv(DType::F32), vec![i(&[1], &[16_777_217])]), f(&[1], &[16_777_216.0]));
    assert_eq!(ev1(conv(DType::F32), vec![b(&[2], &[true, false])]), f(&[2], &[1.0, 0.0]));
    assert_eq!(ev1(conv(DType::I32), vec![b(&[2], &[true, false])]), i(&[2], &[1, 0]));
    let to_bool = ev1(conv(DType::Bool), vec![f(&[4], &[0.5, 0.0, -0.0, f32::NAN])]);
    assert_eq!(to_bool, b(&[4], &[true, false, false, true]));
    assert_eq!(ev1(conv(DType::Bool), vec![i(&[2], &[0, -7])]), b(&[2], &[false, true]));
}

/// u8 is JAX's `uint8`: everything wraps mod 256, and `x / 0` is 255 as on the device.
#[test]
fn u8_arithmetic_wraps_mod_256() {
    let x = y(&[4], &[0, 1, 128, 255]);
    assert_eq!(ev1(un(UnaryOp::Neg), vec![x.clone()]), y(&[4], &[0, 255, 128, 1]));
    assert_eq!(ev1(un(UnaryOp::Not), vec![x.clone()]), y(&[4], &[255, 254, 127, 0]));
    let one = y(&[4], &[1; 4]);
    assert_eq!(ev1(bin(BinaryOp::Add), vec![x.clone(), one.clone()]), y(&[4], &[1, 2, 129, 0]));
    assert_eq!(ev1(bin(BinaryOp::Sub), vec![x.clone(), one]), y(&[4], &[255, 0, 127, 254]));
    assert_eq!(ev1(bin(BinaryOp::Mul), vec![x.clone(), x.clone()]), y(&[4], &[0, 1, 0, 1]));
    let d = y(&[4], &[0, 3, 3, 0]);
    assert_eq!(ev1(bin(BinaryOp::Div), vec![x.clone(), d.clone()]), y(&[4], &[255, 0, 42, 255]));
    assert_eq!(ev1(bin(BinaryOp::Rem), vec![x.clone(), d]), y(&[4], &[0, 1, 2, 255]));
    assert_eq!(ev1(bin(BinaryOp::Max), vec![x.clone(), y(&[4], &[7; 4])]), y(&[4], &[7, 7, 128, 255]));
    assert_eq!(ev1(bin(BinaryOp::Xor), vec![x.clone(), y(&[4], &[0xF0; 4])]), y(&[4], &[0xF0, 0xF1, 0x70, 0x0F]));
    // shifts by 8 or more give 0, as for the other integers past their width
    let s = y(&[5], &[1, 7, 8, 9, 200]);
    assert_eq!(ev1(bin(BinaryOp::ShiftLeft), vec![y(&[5], &[255; 5]), s.clone()]), y(&[5], &[254, 128, 0, 0, 0]));
    assert_eq!(ev1(bin(BinaryOp::ShiftRightLogical), vec![y(&[5], &[255; 5]), s]), y(&[5], &[127, 1, 0, 0, 0]));
    // unsigned order
    assert_eq!(ev1(cmp(CmpOp::Gt), vec![x.clone(), y(&[4], &[127; 4])]), b(&[4], &[false, false, true, true]));
    let p = b(&[4], &[true, false, true, false]);
    assert_eq!(ev1(Prim::Select(Select), vec![p, x.clone(), y(&[4], &[9; 4])]), y(&[4], &[0, 9, 128, 9]));
}

#[test]
fn u8_accepts_what_u32_accepts() {
    assert!(err(un(UnaryOp::Abs), &[t(DType::U8, &[2])]).contains("not defined on u8"));
    assert!(err(bin(BinaryOp::Pow), &[t(DType::U8, &[2]), t(DType::U8, &[2])]).contains("not defined on u8"));
    assert!(err(bin(BinaryOp::Add), &[t(DType::U8, &[2]), t(DType::U32, &[2])]).contains("same type"));
    assert!(err(un(UnaryOp::Exp), &[t(DType::U8, &[2])]).contains("accepts f32"));
}

#[test]
fn u8_conversions() {
    let conv = |to| Prim::Convert(Convert { to });
    // f32 truncates toward zero and saturates into 0..=255; NaN is 0
    let x = f(&[9], &[-1.5, -0.5, 0.9, 254.9, 255.5, 256.0, 1e10, f32::NAN, f32::INFINITY]);
    assert_eq!(ev1(conv(DType::U8), vec![x]), y(&[9], &[0, 0, 0, 254, 255, 255, 255, 0, 255]));
    // wider integers keep the low byte
    assert_eq!(ev1(conv(DType::U8), vec![i(&[4], &[-1, 256, 300, -129])]), y(&[4], &[255, 0, 44, 127]));
    assert_eq!(ev1(conv(DType::U8), vec![u(&[2], &[511, u32::MAX])]), y(&[2], &[255, 255]));
    assert_eq!(ev1(conv(DType::U8), vec![b(&[2], &[true, false])]), y(&[2], &[1, 0]));
    // and u8 widens exactly
    let x = y(&[3], &[0, 128, 255]);
    assert_eq!(ev1(conv(DType::F32), vec![x.clone()]), f(&[3], &[0.0, 128.0, 255.0]));
    assert_eq!(ev1(conv(DType::I32), vec![x.clone()]), i(&[3], &[0, 128, 255]));
    assert_eq!(ev1(conv(DType::U32), vec![x.clone()]), u(&[3], &[0, 128, 255]));
    assert_eq!(ev1(conv(DType::Bool), vec![x]), b(&[3], &[false, true, true]));
}

#[test]
fn u8_reductions_wrap() {
    let red = |op| Prim::Reduce(Reduce { op, axes: vec![1] });
    let x = y(&[2, 3], &[200, 100, 1, 0, 0, 0]);
    assert_eq!(ev1(red(ReduceOp::Sum), vec![x.clone()]), y(&[2], &[45, 0]));
    assert_eq!(ev1(red(ReduceOp::Prod), vec![x.clone()]), y(&[2], &[32, 0]));
    assert_eq!(ev1(red(ReduceOp::Max), vec![x.clone()]), y(&[2], &[200, 0]));
    assert_eq!(ev1(red(ReduceOp::Min), vec![x]), y(&[2], &[1, 0]));
    assert_eq!(ev1(red(ReduceOp::Min), vec![y(&[1, 0], &[])]), y(&[1], &[255]));
    assert_eq!(ev1(Prim::Argmax(Argmax { axis: 0 }), vec![y(&[3], &[5, 255, 128])]), i(&[], &[1]));
}

// ---------------------------------------------------------------------------------------
// literals

#[test]
fn constant_and_iota() {
    let c = i(&[2], &[4, 5]);
    assert_eq!(ev1(Prim::Constant(Constant { value: c.clone() }), vec![]), c);
    let iota = |d, shape: &[usize], dim| Prim::Iota(Iota { ty: t(d, shape), dim });
    assert_eq!(ev1(iota(DType::I32, &[2, 3], 1), vec![]), i(&[2, 3], &[0, 1, 2, 0, 1, 2]));
    assert_eq!(ev1(iota(DType::I32, &[2, 3], 0), vec![]), i(&[2, 3], &[0, 0, 0, 1, 1, 1]));
    assert_eq!(ev1(iota(DType::F32, &[3], 0), vec![]), f(&[3], &[0.0, 1.0, 2.0]));
    assert_eq!(ev1(iota(DType::U32, &[2], 0), vec![]), u(&[2], &[0, 1]));
    let wrapped = ev1(iota(DType::U8, &[258], 0), vec![]);
    assert_eq!(Array::new(vec![3], crate::prims::util::take(&wrapped.data, &[0, 255, 257])), y(&[3], &[0, 255, 1]));
}

#[test]
fn float_literals_round_trip_through_their_text() {
    for x in [1.0f32, -2.5, 0.1, 1e-45, -0.0, 3.402_823_5e38, 1.175_494_4e-38, 16_777_215.0] {
        let s = f32_literal(x);
        assert!(s.contains('.') && s.contains('e'), "{s} is not an MLIR float literal");
        let back: f32 = s.parse().expect("Rust parses it");
        assert_eq!(back.to_bits(), x.to_bits(), "{s}");
    }
    assert_eq!(f32_literal(1.0), "1.0e0");
    assert_eq!(f32_literal(f32::INFINITY), "0x7F800000");
    assert_eq!(f32_literal(f32::NEG_INFINITY), "0xFF800000");
    assert_eq!(f32_literal(f32::NAN), "0x7FC00000");
}

#[test]
fn dense_attributes() {
    assert_eq!(dense(&f(&[], &[0.5])), "dense<5.0e-1>");
    assert_eq!(dense(&f(&[2, 2], &[0.0; 4])), "dense<0.0e0>");
    assert_eq!(dense(&i(&[2, 2], &[1, 2, 3, -4])), "dense<[[1, 2], [3, -4]]>");
    assert_eq!(dense(&u(&[2], &[u32::MAX, 0])), "dense<[4294967295, 0]>");
    assert_eq!(dense(&y(&[2], &[255, 0])), "dense<[255, 0]>");
    assert_eq!(dense(&b(&[3], &[true, false, true])), "dense<[true, false, true]>");
    assert_eq!(dense(&f(&[2], &[f32::NAN, -0.0])), "dense<[0x7FC00000, -0.0e0]>");
    assert_eq!(dense(&f(&[0], &[])), "dense<[]>");
    // A splat is equal values, and 0.0 and -0.0 are not.
    assert_eq!(dense(&f(&[2], &[0.0, -0.0])), "dense<[0.0e0, -0.0e0]>");
    assert_eq!(dense(&i(&[3], &[7, 7, 7])), "dense<7>");
}

// ---------------------------------------------------------------------------------------
// layout

fn grid() -> Array {
    i(&[3, 3], &[1, 2, 3, 4, 5, 6, 7, 8, 9])
}

#[test]
fn broadcast_in_dim() {
    let bc =
        |shape: &[usize], dims: &[usize]| Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: dims.to_vec() });
    assert_eq!(ev1(bc(&[2, 3], &[1]), vec![i(&[3], &[1, 2, 3])]), i(&[2, 3], &[1, 2, 3, 1, 2, 3]));
    assert_eq!(ev1(bc(&[2, 3], &[0]), vec![i(&[2], &[1, 2])]), i(&[2, 3], &[1, 1, 1, 2, 2, 2]));
    assert_eq!(ev1(bc(&[2, 3], &[0, 1]), vec![i(&[2, 1], &[1, 2])]), i(&[2, 3], &[1, 1, 1, 2, 2, 2]));
    assert_eq!(ev1(bc(&[2], &[]), vec![i(&[], &[7])]), i(&[2], &[7, 7]));
}

#[test]
fn reshape_and_transpose() {
    let r = ev1(Prim::Reshape(Reshape { shape: vec![9] }), vec![grid()]);
    assert_eq!(r, i(&[9], &[1, 2, 3, 4, 5, 6, 7, 8, 9]));
    let tr = |perm: &[usize]| Prim::Transpose(Transpose { perm: perm.to_vec() });
    assert_eq!(ev1(tr(&[1, 0]), vec![i(&[2, 3], &[1, 2, 3, 4, 5, 6])]), i(&[3, 2], &[1, 4, 2, 5, 3, 6]));
    // out[a][b][c] = in[b][c][a]
    let x = i(&[2, 3, 4], &(0..24).collect::<Vec<_>>());
    let y = ev1(tr(&[2, 0, 1]), vec![x]);
    assert_eq!(y.shape, [4, 2, 3]);
    let Data::I32(v) = &y.data else { panic!() };
    for (a, bb, c) in [(0, 0, 0), (3, 1, 2), (1, 0, 2), (2, 1, 0)] {
        assert_eq!(v[a * 6 + bb * 3 + c], (bb * 12 + c * 4 + a) as i32);
    }
}

#[test]
fn concatenate() {
    let cat = |axis| Prim::Concat(Concat { axis });
    let out = ev1(cat(0), vec![i(&[1, 2], &[1, 2]), i(&[2, 2], &[3, 4, 5, 6])]);
    assert_eq!(out, i(&[3, 2], &[1, 2, 3, 4, 5, 6]));
    let out = ev1(cat(1), vec![i(&[2, 1], &[1, 2]), i(&[2, 2], &[3, 4, 5, 6]), i(&[2, 0], &[])]);
    assert_eq!(out, i(&[2, 3], &[1, 3, 4, 2, 5, 6]));
    assert_eq!(ev1(cat(0), vec![b(&[2], &[true, false])]), b(&[2], &[true, false]));
}

// ---------------------------------------------------------------------------------------
// indexing

#[test]
fn static_slice() {
    let s = Prim::Slice(Slice { start: vec![1, 1], limit: vec![3, 3] });
    assert_eq!(ev1(s, vec![grid()]), i(&[2, 2], &[5, 6, 8, 9]));
    let empty = Prim::Slice(Slice { start: vec![2, 0], limit: vec![2, 3] });
    assert_eq!(ev1(empty, vec![grid()]), i(&[0, 3], &[]));
}

#[test]
fn dynamic_slice_clamps_its_start() {
    let ds = || Prim::DynamicSlice(DynamicSlice { sizes: vec![2, 2] });
    let at = |r, c| ev1(ds(), vec![grid(), i(&[], &[r]), i(&[], &[c])]);
    assert_eq!(at(1, 1), i(&[2, 2], &[5, 6, 8, 9]));
    assert_eq!(at(5, -3), i(&[2, 2], &[4, 5, 7, 8]));
    assert_eq!(at(i32::MIN, i32::MAX), i(&[2, 2], &[2, 3, 5, 6]));
}

#[test]
fn dynamic_update_slice_clamps_its_start() {
    let dus = Prim::DynamicUpdateSlice(DynamicUpdateSlice);
    let zeros = i(&[3, 3], &[0; 9]);
    let out = ev1(dus.clone(), vec![zeros.clone(), i(&[1, 2], &[1, 2]), i(&[], &[2]), i(&[], &[2])]);
    assert_eq!(out, i(&[3, 3], &[0, 0, 0, 0, 0, 0, 0, 1, 2]));
    let out = ev1(dus, vec![zeros, i(&[2, 1], &[7, 8]), i(&[], &[-1]), i(&[], &[1])]);
    assert_eq!(out, i(&[3, 3], &[0, 7, 0, 0, 8, 0, 0, 0, 0]));
}

// ---------------------------------------------------------------------------------------
// gather and scatter

fn gather(
    offset: &[usize],
    collapsed: &[usize],
    batching: (&[usize], &[usize]),
    map: &[usize],
    sizes: &[usize],
) -> Prim {
    Prim::Gather(Gather {
        offset_dims: offset.to_vec(),
        collapsed_slice_dims: collapsed.to_vec(),
        operand_batching_dims: batching.0.to_vec(),
        indices_batching_dims: batching.1.to_vec(),
        start_index_map: map.to_vec(),
        slice_sizes: sizes.to_vec(),
    })
}

fn scatter(window: &[usize], inserted: &[usize], batching: (&[usize], &[usize]), map: &[usize]) -> Prim {
    Prim::Scatter(Scatter {
        update_window_dims: window.to_vec(),
        inserted_window_dims: inserted.to_vec(),
        operand_batching_dims: batching.0.to_vec(),
        indices_batching_dims: batching.1.to_vec(),
        scatter_dims_to_operand_dims: map.to_vec(),
    })
}

/// One window per index vector, clamped as `dynamic_slice` clamps.
#[test]
fn gather_reads_clamped_windows() {
    let windows = gather(&[1, 2], &[], (&[], &[]), &[0, 1], &[2, 2]);
    let starts = i(&[3, 2], &[1, 1, 5, -3, i32::MIN, i32::MAX]);
    let out = ev1(windows, vec![grid(), starts]);
    assert_eq!(out, i(&[3, 2, 2], &[5, 6, 8, 9, 4, 5, 7, 8, 2, 3, 5, 6]));
    // Rows at one start each, the row dimension collapsed; columns taken whole.
    let rows = gather(&[1], &[0], (&[], &[]), &[0], &[1, 3]);
    assert_eq!(ev1(rows, vec![grid(), i(&[2, 1], &[2, -1])]), i(&[2, 3], &[7, 8, 9, 1, 2, 3]));
}

/// A batching dimension: example `e` reads its own operand, the window dims in front.
#[test]
fn gather_pairs_batching_dimensions() {
    let x = i(&[3, 2], &[1, 2, 3, 4, 5, 6]); // three examples of two elements
    let cells = gather(&[0], &[], (&[0], &[1]), &[1], &[1, 1]);
    assert_eq!(ev1(cells, vec![x, i(&[1, 3, 1], &[1, 0, 7])]), i(&[1, 1, 3], &[2, 3, 6]));
}

/// Windows overwritten at clamped starts; later writes win where windows overlap.
#[test]
fn scatter_writes_clamped_windows() {
    let zeros = i(&[3, 3], &[0; 9]);
    let windows = scatter(&[1, 2], &[], (&[], &[]), &[0, 1]);
    let out = ev1(windows.clone(), vec![zeros.clone(), i(&[1, 2], &[2, 2]), i(&[1, 1, 2], &[1, 2])]);
    assert_eq!(out, i(&[3, 3], &[0, 0, 0, 0, 0, 0, 0, 1, 2]));
    let out = ev1(windows, vec![zeros.clone(), i(&[2, 2], &[0, 0, -1, 1]), i(&[2, 1, 2], &[1, 2, 3, 4])]);
    assert_eq!(out, i(&[3, 3], &[1, 3, 4, 0, 0, 0, 0, 0, 0]));
    // One cell per example of a batch of rows.
    let cells = scatter(&[], &[1], (&[0], &[0]), &[1]);
    let out = ev1(cells, vec![zeros, i(&[3, 1], &[2, 9, -4]), i(&[3], &[7, 8, 9])]);
    assert_eq!(out, i(&[3, 3], &[0, 0, 7, 0, 0, 8, 9, 0, 0]));
}

#[test]
fn gather_and_scatter_type_errors() {
    let x = t(DType::F32, &[3, 4]);
    let idx = t(DType::I32, &[2, 2]);
    let g = gather(&[1, 2], &[], (&[], &[]), &[0, 1], &[2, 2]);
    assert!(err(g.clone(), std::slice::from_ref(&x)).contains("takes 2 argument(s)"));
    assert!(err(g.clone(), &[x.clone(), t(DType::U32, &[2, 2])]).contains("i32"));
    assert!(err(g.clone(), &[x.clone(), t(DType::I32, &[2, 3])]).contains("one entry per"));
    assert!(err(gather(&[1, 2], &[], (&[], &[]), &[0, 1], &[4, 2]), &[x.clone(), idx.clone()]).contains("do not fit"));
    assert!(err(gather(&[1], &[0], (&[], &[]), &[0, 1], &[2, 2]), &[x.clone(), idx.clone()]).contains("size is not 1"));
    assert!(
        err(gather(&[2, 1], &[], (&[], &[]), &[0, 1], &[2, 2]), &[x.clone(), idx.clone()]).contains("not in order")
    );
    assert!(err(gather(&[1], &[], (&[], &[]), &[0, 1], &[2, 2]), &[x.clone(), idx.clone()]).contains("every window"));
    let paired = gather(&[1], &[], (&[0], &[0]), &[1], &[1, 2]);
    assert!(err(paired, &[x.clone(), t(DType::I32, &[2, 1])]).contains("do not pair"));
    let s = scatter(&[1, 2], &[], (&[], &[]), &[0, 1]);
    assert!(err(s.clone(), &[x.clone(), idx.clone(), t(DType::I32, &[2, 1, 1])]).contains("dtype"));
    assert!(err(s.clone(), &[x.clone(), idx.clone(), t(DType::F32, &[2, 4, 1])]).contains("do not fit"));
    assert!(err(s, &[x.clone(), idx, t(DType::F32, &[3, 1, 1])]).contains("do not fit"));
    let started_batch = scatter(&[], &[1], (&[0], &[0]), &[0]);
    assert!(err(started_batch, &[x, t(DType::I32, &[3, 1]), t(DType::F32, &[3])]).contains("also inserted or started"));
}

// ---------------------------------------------------------------------------------------
// reductions

#[test]
fn reductions_over_axes() {
    let red = |op, axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
    let x = i(&[2, 3], &[1, 2, 3, 4, 5, 6]);
    assert_eq!(ev1(red(ReduceOp::Sum, &[0]), vec![x.clone()]), i(&[3], &[5, 7, 9]));
    assert_eq!(ev1(red(ReduceOp::Sum, &[1]), vec![x.clone()]), i(&[2], &[6, 15]));
    assert_eq!(ev1(red(ReduceOp::Sum, &[1, 0]), vec![x.clone()]), i(&[], &[21]));
    assert_eq!(ev1(red(ReduceOp::Sum, &[]), vec![x.clone()]), x);
    assert_eq!(ev1(red(ReduceOp::Prod, &[1]), vec![x.clone()]), i(&[2], &[6, 120]));
    assert_eq!(ev1(red(ReduceOp::Max, &[1]), vec![x.clone()]), i(&[2], &[3, 6]));
    assert_eq!(ev1(red(ReduceOp::Min, &[0]), vec![x]), i(&[3], &[1, 2, 3]));
    let fx = f(&[2, 2], &[1.0, f32::NAN, 3.0, 2.0]);
    let m = ev1(red(ReduceOp::Max, &[1]), vec![fx.clone()]);
    assert!(f32s(&m)[0].is_nan() && f32s(&m)[1] == 3.0);
    let m = ev1(red(ReduceOp::Min, &[1]), vec![fx]);
    assert!(f32s(&m)[0].is_nan() && f32s(&m)[1] == 2.0);
    let bx = b(&[2, 2], &[true, false, true, true]);
    assert_eq!(ev1(red(ReduceOp::Max, &[1]), vec![bx.clone()]), b(&[2], &[true, true]));
    assert_eq!(ev1(red(ReduceOp::Min, &[1]), vec![bx]), b(&[2], &[false, true]));
}

#[test]
fn empty_reductions_give_the_identity() {
    let red = |op| Prim::Reduce(Reduce { op, axes: vec![1] });
    let e = f(&[2, 0], &[]);
    assert_eq!(ev1(red(ReduceOp::Sum), vec![e.clone()]), f(&[2], &[0.0, 0.0]));
    assert_eq!(ev1(red(ReduceOp::Prod), vec![e.clone()]), f(&[2], &[1.0, 1.0]));
    assert_eq!(ev1(red(ReduceOp::Max), vec![e.clone()]), f(&[2], &[f32::NEG_INFINITY; 2]));
    assert_eq!(ev1(red(ReduceOp::Min), vec![e]), f(&[2], &[f32::INFINITY; 2]));
    assert_eq!(ev1(red(ReduceOp::Max), vec![i(&[1, 0], &[])]), i(&[1], &[i32::MIN]));
    assert_eq!(ev1(red(ReduceOp::Min), vec![u(&[1, 0], &[])]), u(&[1], &[u32::MAX]));
}

#[test]
fn argmax_takes_the_first_maximum_and_the_first_nan() {
    let am = |axis| Prim::Argmax(Argmax { axis });
    let ninf = f32::NEG_INFINITY;
    let x = f(&[4, 3], &[1.0, 3.0, 3.0, f32::NAN, 5.0, f32::NAN, ninf, ninf, ninf, 2.0, 5.0, f32::NAN]);
    assert_eq!(ev1(am(1), vec![x.clone()]), i(&[4], &[1, 0, 0, 2]));
    assert_eq!(ev1(am(0), vec![x]), i(&[3], &[1, 1, 1]));
    assert_eq!(ev1(am(0), vec![i(&[2, 2], &[1, 5, 2, 5])]), i(&[2], &[1, 0]));
    assert_eq!(ev1(am(0), vec![u(&[3], &[1, u32::MAX, 7])]), i(&[], &[1]));
    assert_eq!(ev1(am(0), vec![b(&[3], &[false, true, true])]), i(&[], &[1]));
}

#[test]
fn argsort_is_stable_with_zeros_equal_and_nans_last() {
    let sort = |axis| Prim::Argsort(Argsort { axis });
    let (nan, inf) = (f32::NAN, f32::INFINITY);
    let x = f(&[7], &[nan, 0.0, -inf, -0.0, -nan, inf, 1e-40]);
    assert_eq!(ev1(sort(0), vec![x]), i(&[7], &[2, 1, 3, 6, 5, 0, 4]));
    let m = i(&[2, 3], &[2, 1, 2, 1, 1, 0]);
    assert_eq!(ev1(sort(1), vec![m.clone()]), i(&[2, 3], &[1, 0, 2, 2, 0, 1]));
    assert_eq!(ev1(sort(0), vec![m]), i(&[2, 3], &[1, 0, 1, 0, 1, 0]));
    assert_eq!(ev1(sort(0), vec![u(&[3], &[u32::MAX, 0, 0x8000_0000])]), i(&[3], &[1, 2, 0]));
}

#[test]
fn collectives_are_the_identity_on_one_replica() {
    let x = f(&[3], &[1.5, -0.0, f32::INFINITY]);
    for op in [AllReduceOp::Sum, AllReduceOp::Mean] {
        assert_eq!(ev1(Prim::AllReduce(AllReduce { op }), vec![x.clone()]), x);
    }
    let mean = Prim::AllReduce(AllReduce { op: AllReduceOp::Mean });
    assert!(err(mean, &[t(DType::I32, &[3])]).contains("pmean is not defined on i32"));
    assert!(err(Prim::AllReduce(AllReduce { op: AllReduceOp::Sum }), &[t(DType::Bool, &[])]).contains("on bool"));
}

// ---------------------------------------------------------------------------------------
// dot_general

fn dot(lb: &[usize], rb: &[usize], lc: &[usize], rc: &[usize]) -> Prim {
    Prim::Dot(Dot {
        lhs_batch: lb.to_vec(),
        rhs_batch: rb.to_vec(),
        lhs_contract: lc.to_vec(),
        rhs_contract: rc.to_vec(),
    })
}

#[test]
fn dot_general_products() {
    let a = f(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let bb = f(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    assert_eq!(ev1(dot(&[], &[], &[1], &[0]), vec![a.clone(), bb.clone()]), f(&[2, 2], &[19.0, 22.0, 43.0, 50.0]));
    // aᵀ b
    assert_eq!(ev1(dot(&[], &[], &[0], &[0]), vec![a.clone(), bb.clone()]), f(&[2, 2], &[26.0, 30.0, 38.0, 44.0]));
    // matrix-vector and dot product
    assert_eq!(ev1(dot(&[], &[], &[1], &[0]), vec![a.clone(), f(&[2], &[1.0, -1.0])]), f(&[2], &[-1.0, -1.0]));
    assert_eq!(ev1(dot(&[], &[], &[0], &[0]), vec![f(&[2], &[1.0, 2.0]), f(&[2], &[3.0, 4.0])]), f(&[], &[11.0]));
    // outer product
    assert_eq!(
        ev1(dot(&[], &[], &[], &[]), vec![f(&[2], &[1.0, 2.0]), f(&[2], &[3.0, 4.0])]),
        f(&[2, 2], &[3.0, 4.0, 6.0, 8.0])
    );
    // batched: out[k] = a[k] @ b[k]
    let a3 = f(&[2, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b3 = f(&[2, 2, 1], &[5.0, 6.0, 7.0, 8.0]);
    assert_eq!(ev1(dot(&[0], &[0], &[2], &[1]), vec![a3, b3]), f(&[2, 1, 1], &[17.0, 53.0]));
    // integers wrap
    assert_eq!(ev1(dot(&[], &[], &[1], &[0]), vec![i(&[1, 1], &[i32::MAX]), i(&[1, 1], &[2])]), i(&[1, 1], &[-2]));
}

#[test]
fn dot_general_batch_dims_lead_the_result() {
    // lhs [3, 2, 4] with batch dim 1, rhs [4, 2] with batch dim 1: result [2, 3]
    let l = f(&[3, 2, 4], &(0..24).map(|x| x as f32).collect::<Vec<_>>());
    let r = f(&[4, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]);
    let out = ev1(dot(&[1], &[1], &[2], &[0]), vec![l, r]);
    assert_eq!(out.shape, [2, 3]);
    // out[k][m] = sum_c l[m][k][c] * r[c][k]: k = 0 takes c = 0, 2; k = 1 takes c = 1, 3
    assert_eq!(out, f(&[2, 3], &[2.0, 18.0, 34.0, 12.0, 28.0, 44.0]));
}

// ---------------------------------------------------------------------------------------
// type rules

#[test]
fn elementwise_type_errors() {
    let f3 = t(DType::F32, &[3]);
    let i3 = t(DType::I32, &[3]);
    assert_eq!(err(un(UnaryOp::Exp), std::slice::from_ref(&i3)), "exp is not defined on i32 (accepts f32)");
    assert_eq!(
        err(un(UnaryOp::Not), std::slice::from_ref(&f3)),
        "not is not defined on f32 (accepts i32, u32, u8, bool)"
    );
    assert!(err(bin(BinaryOp::Add), &[f3.clone(), i3.clone()]).contains("same type"));
    assert!(err(bin(BinaryOp::Add), &[f3.clone(), t(DType::F32, &[4])]).contains("same type"));
    assert!(err(bin(BinaryOp::Add), &[t(DType::Bool, &[3]), t(DType::Bool, &[3])]).contains("not defined on bool"));
    assert!(err(bin(BinaryOp::Pow), &[i3.clone(), i3.clone()]).contains("not defined on i32"));
    assert!(err(bin(BinaryOp::ShiftLeft), &[f3.clone(), f3.clone()]).contains("not defined on f32"));
    assert!(err(bin(BinaryOp::And), &[f3.clone(), f3.clone()]).contains("not defined on f32"));
    assert_eq!(err(bin(BinaryOp::Mul), std::slice::from_ref(&f3)), "mul takes 2 argument(s), got 1");
    assert!(err(cmp(CmpOp::Lt), &[f3.clone(), i3.clone()]).contains("same type"));
    let sel = Prim::Select(Select);
    assert!(err(sel.clone(), &[f3.clone(), f3.clone(), f3.clone()]).contains("predicate must be bool"));
    assert!(err(sel.clone(), &[t(DType::Bool, &[3]), f3.clone(), i3]).contains("same type"));
    assert!(err(sel, &[t(DType::Bool, &[2]), f3.clone(), f3]).contains("differ in shape"));
}

#[test]
fn literal_and_layout_type_errors() {
    let iota = |d, shape: &[usize], dim| Prim::Iota(Iota { ty: t(d, shape), dim });
    assert!(err(iota(DType::Bool, &[3], 0), &[]).contains("bool"));
    assert!(err(iota(DType::I32, &[3], 1), &[]).contains("out of range"));
    let bc =
        |shape: &[usize], dims: &[usize]| Prim::Broadcast(Broadcast { shape: shape.to_vec(), dims: dims.to_vec() });
    assert!(err(bc(&[2, 3], &[0]), &[t(DType::F32, &[3])]).contains("has size 3"));
    assert!(err(bc(&[2, 3], &[]), &[t(DType::F32, &[3])]).contains("0 dims given"));
    assert!(err(bc(&[3, 3], &[1, 1]), &[t(DType::F32, &[3, 3])]).contains("twice"));
    let reshape = Prim::Reshape(Reshape { shape: vec![4] });
    assert!(err(reshape, &[t(DType::F32, &[3])]).contains("cannot reshape"));
    let tr = |perm: &[usize]| Prim::Transpose(Transpose { perm: perm.to_vec() });
    assert!(err(tr(&[0, 0]), &[t(DType::F32, &[2, 2])]).contains("twice"));
    assert!(err(tr(&[0]), &[t(DType::F32, &[2, 2])]).contains("does not fit"));
    let cat = |axis| Prim::Concat(Concat { axis });
    assert!(err(cat(0), &[]).contains("at least one"));
    assert!(err(cat(1), &[t(DType::F32, &[2])]).contains("out of range"));
    assert!(err(cat(0), &[t(DType::F32, &[2, 3]), t(DType::F32, &[2, 4])]).contains("does not match"));
    assert!(err(cat(0), &[t(DType::F32, &[2]), t(DType::I32, &[2])]).contains("does not match"));
}

#[test]
fn indexing_type_errors() {
    let x = t(DType::F32, &[3, 3]);
    let idx = t(DType::I32, &[]);
    let s = Prim::Slice(Slice { start: vec![0, 2], limit: vec![3, 4] });
    assert!(err(s, std::slice::from_ref(&x)).contains("not a range"));
    let ds = |sizes: &[usize]| Prim::DynamicSlice(DynamicSlice { sizes: sizes.to_vec() });
    assert!(err(ds(&[2, 2]), &[x.clone(), idx.clone()]).contains("takes 3 argument(s)"));
    assert!(err(ds(&[2, 2]), &[x.clone(), idx.clone(), t(DType::U32, &[])]).contains("i32 scalars"));
    assert!(err(ds(&[4, 2]), &[x.clone(), idx.clone(), idx.clone()]).contains("do not fit"));
    let dus = Prim::DynamicUpdateSlice(DynamicUpdateSlice);
    assert!(err(dus.clone(), &[x.clone(), t(DType::F32, &[4, 1]), idx.clone(), idx.clone()]).contains("does not fit"));
    assert!(err(dus.clone(), &[x.clone(), t(DType::I32, &[1, 1]), idx.clone(), idx.clone()]).contains("does not fit"));
    assert!(err(dus, &[x, t(DType::F32, &[1, 1]), idx, t(DType::I32, &[1])]).contains("i32 scalars"));
}

#[test]
fn reduction_and_dot_type_errors() {
    let red = |op, axes: &[usize]| Prim::Reduce(Reduce { op, axes: axes.to_vec() });
    assert!(err(red(ReduceOp::Sum, &[0]), &[t(DType::Bool, &[3])]).contains("not defined on bool"));
    assert!(err(red(ReduceOp::Max, &[1]), &[t(DType::F32, &[3])]).contains("out of range"));
    assert!(err(red(ReduceOp::Max, &[0, 0]), &[t(DType::F32, &[3])]).contains("twice"));
    let am = |axis| Prim::Argmax(Argmax { axis });
    assert!(err(am(1), &[t(DType::F32, &[3, 0])]).contains("empty"));
    assert!(err(am(2), &[t(DType::F32, &[3, 2])]).contains("out of range"));
    let sort = |axis| Prim::Argsort(Argsort { axis });
    assert!(err(sort(1), &[t(DType::F32, &[3])]).contains("out of range"));
    assert!(err(sort(0), &[t(DType::Bool, &[3])]).contains("must be numbers"));
    let mm = dot(&[], &[], &[1], &[0]);
    assert!(err(mm.clone(), &[t(DType::F32, &[2, 3]), t(DType::F32, &[4, 2])]).contains("differ in size"));
    assert!(err(mm.clone(), &[t(DType::F32, &[2, 3]), t(DType::I32, &[3, 2])]).contains("differ in dtype"));
    assert!(err(mm, &[t(DType::Bool, &[2, 3]), t(DType::Bool, &[3, 2])]).contains("not defined on bool"));
    assert!(err(dot(&[0], &[], &[1], &[0]), &[t(DType::F32, &[2, 3]), t(DType::F32, &[3, 2])]).contains("as many"));
    assert!(err(dot(&[], &[], &[2], &[0]), &[t(DType::F32, &[2, 3]), t(DType::F32, &[3, 2])]).contains("out of range"));
}

#[test]
fn printer_names_and_attributes() {
    let cases: [(Prim, &str, &str); 10] = [
        (bin(BinaryOp::ShiftRightLogical), "shift_right_logical", ""),
        (Prim::Convert(Convert { to: DType::U32 }), "convert", "[to=u32]"),
        (Prim::Reduce(Reduce { op: ReduceOp::Max, axes: vec![0, 2] }), "reduce_max", "[axes=[0, 2]]"),
        (
            dot(&[0], &[0], &[2], &[1]),
            "dot_general",
            "[lhs_batch=[0], rhs_batch=[0], lhs_contract=[2], rhs_contract=[1]]",
        ),
        (Prim::Constant(Constant { value: f(&[2], &[1.5, f32::NAN]) }), "constant", "[[1.5, NaN]]"),
        (
            Prim::Constant(Constant { value: i(&[20], &(0..20).collect::<Vec<_>>()) }),
            "constant",
            "[[0, 1, 2, 3, 4, 5, 6, 7, … 20 elements]]",
        ),
        (
            gather(&[1, 2], &[], (&[0], &[0]), &[2], &[1, 1, 3]),
            "gather",
            "[offset_dims=[1, 2], operand_batching=[0], indices_batching=[0], start_index_map=[2], sizes=[1, 1, 3]]",
        ),
        (scatter(&[], &[1], (&[], &[]), &[1]), "scatter", "[inserted=[1], start_index_map=[1]]"),
        (Prim::Argsort(Argsort { axis: 1 }), "argsort", "[axis=1]"),
        (Prim::AllReduce(AllReduce { op: AllReduceOp::Mean }), "pmean", ""),
    ];
    for (p, name, attrs) in cases {
        assert_eq!((p.rules().name(), p.rules().attrs().as_str()), (name, attrs));
    }
}

// ---------------------------------------------------------------------------------------
// conv and windows

/// A 1-D convolution written as 2-D (height 1), NHWC / HWIO.
fn conv1d(strides: usize, padding: (i64, i64), lhs_dilation: usize, rhs_dilation: usize) -> Prim {
    Prim::Conv(Conv {
        lhs_spec: vec![0, 3, 1, 2],
        rhs_spec: vec![3, 2, 0, 1],
        out_spec: vec![0, 3, 1, 2],
        strides: vec![1, strides],
        padding: vec![(0, 0), padding],
        lhs_dilation: vec![1, lhs_dilation],
        rhs_dilation: vec![1, rhs_dilation],
        feature_groups: 1,
        batch_groups: 1,
    })
}

#[test]
fn conv_is_a_cross_correlation_with_strides_padding_and_dilations() {
    let x = f(&[1, 1, 4, 1], &[1.0, 2.0, 3.0, 4.0]);
    let w = f(&[1, 2, 1, 1], &[10.0, 1.0]);
    // Windows [1 2], [2 3], [3 4]: the kernel is not flipped.
    assert_eq!(ev1(conv1d(1, (0, 0), 1, 1), vec![x.clone(), w.clone()]).data, Data::F32(vec![12.0, 23.0, 34.0]));
    // Stride 2 with a zero on each side: [0 1], [2 3], [4 0].
    assert_eq!(ev1(conv1d(2, (1, 1), 1, 1), vec![x.clone(), w.clone()]).data, Data::F32(vec![1.0, 23.0, 40.0]));
    // Negative padding crops: [2 3] only, the last element dropped too.
    assert_eq!(ev1(conv1d(1, (-1, -1), 1, 1), vec![x.clone(), w.clone()]).data, Data::F32(vec![23.0]));
    // lhs dilation 2: 1 0 2 0 3 0 4.
    assert_eq!(
        ev1(conv1d(1, (0, 0), 2, 1), vec![x.clone(), w.clone()]).data,
        Data::F32(vec![10.0, 2.0, 20.0, 3.0, 30.0, 4.0])
    );
    // rhs dilation 2: taps two apart, [1 _ 3], [2 _ 4].
    assert_eq!(ev1(conv1d(1, (0, 0), 1, 2), vec![x, w]).data, Data::F32(vec![13.0, 24.0]));
}

#[test]
fn conv_groups() {
    let spec = |fg, bg| {
        Prim::Conv(Conv {
            lhs_spec: vec![0, 3, 1, 2],
            rhs_spec: vec![3, 2, 0, 1],
            out_spec: vec![0, 3, 1, 2],
            strides: vec![1, 1],
            padding: vec![(0, 0), (0, 0)],
            lhs_dilation: vec![1, 1],
            rhs_dilation: vec![1, 1],
            feature_groups: fg,
            batch_groups: bg,
        })
    };
    // Two feature groups of one channel: output feature g sees only channel g.
    let x = f(&[1, 1, 1, 2], &[2.0, 3.0]);
    let w = f(&[1, 1, 1, 2], &[10.0, 100.0]);
    assert_eq!(ev1(spec(2, 1), vec![x, w]).data, Data::F32(vec![20.0, 300.0]));
    // Two batch groups: output feature g sees batch element g; the result has batch 1.
    let x = f(&[2, 1, 1, 1], &[2.0, 3.0]);
    let w = f(&[1, 1, 1, 2], &[10.0, 100.0]);
    let y = ev1(spec(1, 2), vec![x, w]);
    assert_eq!((y.shape, y.data), (vec![1, 1, 1, 2], Data::F32(vec![20.0, 300.0])));
    assert!(err(spec(2, 1), &[t(DType::F32, &[1, 1, 1, 3]), t(DType::F32, &[1, 1, 1, 2])]).contains("feature_groups"));
    assert!(err(spec(2, 2), &[t(DType::F32, &[2, 1, 1, 2]), t(DType::F32, &[1, 1, 1, 2])]).contains("one of them 1"));
}

#[test]
fn conv_type_errors() {
    let p = conv1d(1, (0, 0), 1, 1);
    assert!(err(p.clone(), &[t(DType::I32, &[1, 1, 4, 1]), t(DType::F32, &[1, 2, 1, 1])]).contains("f32"));
    assert!(err(p.clone(), &[t(DType::F32, &[1, 4, 1]), t(DType::F32, &[1, 2, 1, 1])]).contains("rank 4"));
    assert!(err(p, &[t(DType::F32, &[1, 1, 4, 2]), t(DType::F32, &[1, 2, 1, 1])]).contains("do not fit"));
    // A kernel larger than the padded input gives an empty result, as in XLA.
    let y = ev1(conv1d(1, (0, 0), 1, 1), vec![f(&[1, 1, 1, 1], &[1.0]), f(&[1, 2, 1, 1], &[1.0, 1.0])]);
    assert_eq!(y.shape, vec![1, 1, 0, 1]);
}

fn pool(window: &[usize], strides: &[usize], padding: &[(usize, usize)]) -> Windows {
    Windows { window: window.to_vec(), strides: strides.to_vec(), padding: padding.to_vec() }
}

#[test]
fn window_max_pads_with_minus_infinity() {
    let w = pool(&[2], &[2], &[(1, 0)]);
    let x = f(&[5], &[-3.0, 1.0, -2.0, f32::NAN, -1.0]);
    // Windows [pad -3], [1 -2], [NaN -1]: padding never wins, NaN propagates.
    let y = ev1(Prim::WindowMax(WindowMax { windows: w.clone() }), vec![x]);
    let Data::F32(v) = y.data else { panic!("f32") };
    assert_eq!((v[0], v[1]), (-3.0, 1.0));
    assert!(v[2].is_nan());
    assert!(
        err(Prim::WindowMax(WindowMax { windows: pool(&[7], &[1], &[(0, 0)]) }), &[t(DType::F32, &[5])])
            .contains("does not fit")
    );
}

#[test]
fn select_and_scatter_add_picks_the_first_maximum() {
    // Overlapping windows of 2 with stride 1 over [1 3 3 2]: [1 3] -> index 1, [3 3] -> the
    // first, index 1, [3 2] -> index 2.
    let w = pool(&[2], &[1], &[(0, 0)]);
    let p = Prim::SelectAndScatterAdd(SelectAndScatterAdd { windows: w });
    let y = ev1(p, vec![f(&[3], &[1.0, 10.0, 100.0]), f(&[4], &[1.0, 3.0, 3.0, 2.0])]);
    assert_eq!(y.data, Data::F32(vec![0.0, 11.0, 100.0, 0.0]));
    // Padding is -inf: a window of padding and -inf keeps the padding (its value is dropped).
    let w = pool(&[2], &[2], &[(1, 0)]);
    let p = Prim::SelectAndScatterAdd(SelectAndScatterAdd { windows: w });
    let y = ev1(p, vec![f(&[2], &[5.0, 7.0]), f(&[3], &[f32::NEG_INFINITY, 0.0, 1.0])]);
    assert_eq!(y.data, Data::F32(vec![0.0, 0.0, 7.0]));
}

#[test]
fn reverse_flips_the_given_dimensions() {
    let x = f(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let y = ev1(Prim::Reverse(Reverse { dims: vec![1] }), vec![x.clone()]);
    assert_eq!(y.data, Data::F32(vec![3.0, 2.0, 1.0, 6.0, 5.0, 4.0]));
    let y = ev1(Prim::Reverse(Reverse { dims: vec![0, 1] }), vec![x]);
    assert_eq!(y.data, Data::F32(vec![6.0, 5.0, 4.0, 3.0, 2.0, 1.0]));
}

#[test]
fn select_and_gather_add_reads_the_first_maximum() {
    // The scatter's example read back: windows [1 3], [3 3], [3 2] choose 1, 1 (the first
    // of the tie) and 2.
    let w = pool(&[2], &[1], &[(0, 0)]);
    let p = Prim::SelectAndGatherAdd(SelectAndGatherAdd { windows: w });
    let y = ev1(p, vec![f(&[4], &[10.0, 20.0, 30.0, 40.0]), f(&[4], &[1.0, 3.0, 3.0, 2.0])]);
    assert_eq!(y.data, Data::F32(vec![20.0, 20.0, 30.0]));
    // A window of padding only reads 0.
    let w = pool(&[1], &[1], &[(1, 0)]);
    let p = Prim::SelectAndGatherAdd(SelectAndGatherAdd { windows: w });
    assert_eq!(ev1(p, vec![f(&[1], &[5.0]), f(&[1], &[1.0])]).data, Data::F32(vec![0.0, 5.0]));
}
