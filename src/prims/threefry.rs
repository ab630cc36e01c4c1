//! The threefry2x32 hash (Random123's 20 rounds), the primitive under every random
//! builtin, as JAX's `threefry2x32_p`. It is made of u32 operations, but as one primitive
//! its lowering is decided in one place and the interpreter hashes in Rust.
//!
//! Lowered to u32 adds, xors, shifts and ors, so every backend computes the bits the
//! interpreter does. The first of the five groups of four rounds runs in line; groups 2-5
//! are a `stablehlo.while` of two trips, two groups each. JAX rolls the groups into a
//! five-trip loop on CPU for the same reason: unrolled, a hash is 80 dependent operations
//! that XLA fuses with their neighbours into loops that LLVM's vectoriser takes minutes
//! on (XLA 0.11 never finishes). Two groups per trip keep the rotation distances
//! constants and pay for half as many trips as JAX's loop.

use super::util::expect_arity;
use super::{Prim, Rules};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, batch_size, bdim_at};
use crate::prims::derivative::NotDifferentiable;
use crate::prims::elementwise::{BinaryOp, CmpOp, lower_binary, lower_compare};
use crate::prims::emit::{LowerCx, block_header, fn_type};
use crate::prims::layout::Broadcast;

/// threefry2x32's rotation distances, for the even and the odd groups of four rounds.
const ROTATIONS: [[u32; 4]; 2] = [[13, 15, 26, 6], [17, 29, 16, 24]];

/// The key schedule's parity constant (Threefish's C240): `ks[2] = k0 ^ k1 ^ C240`.
const KS_PARITY: u32 = 0x1BD1_1BDA;

/// `(y0, y1) = threefry2x32((k0, k1), (x0, x1))`. The keys `k0`, `k1` are u32 of one
/// shape `P`, the counters `x0`, `x1` u32 of a shape `P ++ S` that extends it: each key
/// hashes the counters below its index (a scalar key hashes them all). The results have
/// the counters' shape.
#[derive(Clone, Debug, PartialEq)]
pub struct Threefry;

/// The hash of one counter pair under one key.
pub fn threefry2x32(k: [u32; 2], x: [u32; 2]) -> [u32; 2] {
    let ks = [k[0], k[1], k[0] ^ k[1] ^ KS_PARITY];
    let (mut x0, mut x1) = (x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1]));
    for group in 0..5 {
        for r in ROTATIONS[group % 2] {
            x0 = x0.wrapping_add(x1);
            x1 = x1.rotate_left(r) ^ x0;
        }
        x0 = x0.wrapping_add(ks[(group + 1) % 3]);
        x1 = x1.wrapping_add(ks[(group + 2) % 3]).wrapping_add(group as u32 + 1);
    }
    [x0, x1]
}

fn u32s(a: &Array) -> &[u32] {
    match &a.data {
        Data::U32(v) => v,
        _ => unreachable!("infer admits u32 only"),
    }
}

impl Rules for Threefry {
    fn name(&self) -> &'static str {
        "threefry2x32"
    }

    fn attrs(&self) -> String {
        String::new()
    }

    fn infer(&self, args: &[ArrayTy]) -> Result<Vec<ArrayTy>, String> {
        expect_arity("threefry2x32", args, 4)?;
        if let Some(t) = args.iter().find(|t| t.dtype != DType::U32) {
            return Err(format!("threefry2x32: operands must be u32, got {t}"));
        }
        let (k, x) = (&args[0], &args[2]);
        if args[1] != *k || args[3] != *x {
            return Err(format!(
                "threefry2x32: the key words ({k}, {}) or the counters ({x}, {}) differ",
                args[1], args[3]
            ));
        }
        if !x.shape.starts_with(&k.shape) {
            return Err(format!("threefry2x32: the keys' shape {k} does not begin the counters' shape {x}"));
        }
        Ok(vec![x.clone(), x.clone()])
    }

    fn eval(&self, args: &[&Array]) -> Vec<Array> {
        let (k0, k1, x0, x1) = (u32s(args[0]), u32s(args[1]), u32s(args[2]), u32s(args[3]));
        // Row-major, a key covers a run of `per_key` consecutive counters.
        let per_key = x0.len().checked_div(k0.len()).unwrap_or(0);
        let (mut y0, mut y1) = (Vec::with_capacity(x0.len()), Vec::with_capacity(x0.len()));
        for (i, (&a, &b)) in x0.iter().zip(x1).enumerate() {
            let j = i / per_key;
            let [c, d] = threefry2x32([k0[j], k1[j]], [a, b]);
            y0.push(c);
            y1.push(d);
        }
        let shape = &args[2].shape;
        vec![Array::new(shape.clone(), Data::U32(y0)), Array::new(shape.clone(), Data::U32(y1))]
    }

    /// The first group in line, then `stablehlo.while` over `(i, k0, k1, k2, x0, x1)` for
    /// two trips: trip `j` runs groups `2 + 2j` and `3 + 2j`, injecting the key schedule
    /// rotated by 2, then by 1, which it picks by `i` (carrying it rotated would cost XLA a
    /// copy of each key word every trip). The keys stay in their own shape until an
    /// injection broadcasts them over the counters.
    fn lower(&self, cx: &mut LowerCx, args: &[String], arg_tys: &[ArrayTy], outs: &[ArrayTy]) -> Vec<String> {
        let (kt, xt) = (&arg_tys[0], &outs[0]);
        let hx = Hash { kt, xt };
        let parity = cx.splat(&u32c(KS_PARITY), kt);
        let k01 = cx.op("stablehlo.xor", &[args[0].clone(), args[1].clone()], "", &[kt.clone(), kt.clone()], kt);
        let k2 = cx.op("stablehlo.xor", &[k01, parity], "", &[kt.clone(), kt.clone()], kt);
        let x0 = hx.add_key(cx, &args[2], &args[0]);
        let x1 = hx.add_key(cx, &args[3], &args[1]);
        let one = cx.splat(&u32c(1), kt);
        let (x0, x1) = hx.group(cx, [x0, x1], 0, &args[1], &k2, &one);

        let i32_ty = ArrayTy::scalar(DType::I32);
        let tys = [i32_ty.clone(), kt.clone(), kt.clone(), kt.clone(), xt.clone(), xt.clone()];
        let start = cx.constant(&Array::i32(vec![], vec![0]));
        let operands = [start, args[0].clone(), args[1].clone(), k2, x0, x1];
        let w = cx.fresh();
        cx.open(&format!("{w}:6 = \"stablehlo.while\"({}) ({{", operands.join(", ")));

        // cond: i < 2
        let params: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
        cx.label(&block_header(&params, &tys));
        let trips = cx.constant(&Array::i32(vec![], vec![2]));
        let pred_ty = ArrayTy::scalar(DType::Bool);
        let go = lower_compare(cx, CmpOp::Lt, &params[0], &trips, &i32_ty);
        cx.ret(&[go], std::slice::from_ref(&pred_ty));
        cx.reopen("}, {");

        // body: the schedule rotated by 2 on the first trip, by 1 on the second
        let p: Vec<String> = tys.iter().map(|_| cx.fresh()).collect();
        cx.label(&block_header(&p, &tys));
        let zero = cx.constant(&Array::i32(vec![], vec![0]));
        let first = lower_compare(cx, CmpOp::Eq, &p[0], &zero, &i32_ty);
        let mask = ArrayTy::new(DType::Bool, kt.shape.clone());
        let first = hx.broadcast(cx, &first, &pred_ty, &mask);
        let ks = [&p[1], &p[2], &p[3]];
        let schedule: Vec<String> = (0..3)
            .map(|t| {
                let (a, b) = (ks[(2 + t) % 3].clone(), ks[(1 + t) % 3].clone());
                cx.op("stablehlo.select", &[first.clone(), a, b], "", &[mask.clone(), kt.clone(), kt.clone()], kt)
            })
            .collect();
        // The injections 2 + 2i and 3 + 2i.
        let u32_ty = ArrayTy::scalar(DType::U32);
        let trip = cx.op("stablehlo.convert", &[p[0].clone()], "", std::slice::from_ref(&i32_ty), &u32_ty);
        let twice = cx.op("stablehlo.add", &[trip.clone(), trip], "", &[u32_ty.clone(), u32_ty.clone()], &u32_ty);
        let two = cx.constant(&u32c(2));
        let count = cx.op("stablehlo.add", &[twice, two], "", &[u32_ty.clone(), u32_ty.clone()], &u32_ty);
        let count = hx.broadcast(cx, &count, &u32_ty, kt);
        let (x0, x1) = hx.group(cx, [p[4].clone(), p[5].clone()], 1, &schedule[0], &schedule[1], &count);
        let one = cx.splat(&u32c(1), kt);
        let next = cx.op("stablehlo.add", &[count, one], "", &[kt.clone(), kt.clone()], kt);
        let (x0, x1) = hx.group(cx, [x0, x1], 0, &schedule[1], &schedule[2], &next);
        let step = cx.constant(&Array::i32(vec![], vec![1]));
        let i = cx.op("stablehlo.add", &[p[0].clone(), step], "", &[i32_ty.clone(), i32_ty.clone()], &i32_ty);
        let yields = [i, p[1].clone(), p[2].clone(), p[3].clone(), x0, x1];
        cx.ret(&yields, &tys);
        cx.close(&format!("}}) : {}", fn_type(&tys, &tys)));
        vec![format!("{w}#4"), format!("{w}#5")]
    }

    /// Every operand's batch axis moved to the front: the batch extends the keys' shape
    /// and the counters' alike, so the keys still begin the counters.
    fn batch(&self, b: &mut Builder, args: &[BVal]) -> Vec<BVal> {
        let size = batch_size(b, args);
        let vars: Vec<Var> = args.iter().map(|&a| bdim_at(b, a, 0, size)).collect();
        b.prim(Prim::Threefry(Threefry), &vars).into_iter().map(|v| BVal::batched(v, 0)).collect()
    }

    /// Bits: no derivative.
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

fn u32c(x: u32) -> Array {
    Array::new(vec![], Data::U32(vec![x]))
}

/// The types of one hash's lowering: the keys' and the counters'.
struct Hash<'a> {
    kt: &'a ArrayTy,
    xt: &'a ArrayTy,
}

impl Hash<'_> {
    /// `v` of type `from` broadcast to `to`, whose shape `from`'s begins.
    fn broadcast(&self, cx: &mut LowerCx, v: &str, from: &ArrayTy, to: &ArrayTy) -> String {
        if from.shape == to.shape {
            return v.to_string();
        }
        let b = Broadcast { shape: to.shape.clone(), dims: (0..from.rank()).collect() };
        b.lower(cx, &[v.to_string()], std::slice::from_ref(from), std::slice::from_ref(to)).remove(0)
    }

    /// `x + k`, a key word added to every counter it covers.
    fn add_key(&self, cx: &mut LowerCx, x: &str, k: &str) -> String {
        let k = self.broadcast(cx, k, self.kt, self.xt);
        lower_binary(cx, BinaryOp::Add, x, &k, self.xt)
    }

    /// One group: four rounds with the rotation distances `ROTATIONS[set]`, then the key
    /// injection `x0 += ka; x1 += kb + count`.
    fn group(&self, cx: &mut LowerCx, x: [String; 2], set: usize, ka: &str, kb: &str, count: &str) -> (String, String) {
        let xt = self.xt;
        let [mut x0, mut x1] = x;
        for r in ROTATIONS[set] {
            x0 = lower_binary(cx, BinaryOp::Add, &x0, &x1, xt);
            let (left, right) = (cx.splat(&u32c(r), xt), cx.splat(&u32c(32 - r), xt));
            let hi = lower_binary(cx, BinaryOp::ShiftLeft, &x1, &left, xt);
            let lo = lower_binary(cx, BinaryOp::ShiftRightLogical, &x1, &right, xt);
            let rotated = lower_binary(cx, BinaryOp::Or, &hi, &lo, xt);
            x1 = lower_binary(cx, BinaryOp::Xor, &x0, &rotated, xt);
        }
        let x0 = self.add_key(cx, &x0, ka);
        let k = lower_binary(cx, BinaryOp::Add, kb, count, self.kt);
        let x1 = self.add_key(cx, &x1, &k);
        (x0, x1)
    }
}

/// Random123's known-answer vectors for threefry2x32 with 20 rounds:
/// (key, counter, output).
#[cfg(test)]
pub(crate) const KAT: [([u32; 2], [u32; 2], [u32; 2]); 3] = [
    ([0, 0], [0, 0], [0x6B20_0159, 0x99BA_4EFE]),
    ([u32::MAX, u32::MAX], [u32::MAX, u32::MAX], [0x1CB9_96FC, 0xBB00_2BE7]),
    ([0x1319_8A2E, 0x0370_7344], [0x243F_6A88, 0x85A3_08D3], [0xC492_3A9C, 0x483D_F7A0]),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_answers() {
        for (k, x, want) in KAT {
            assert_eq!(threefry2x32(k, x), want, "key {k:x?}, counter {x:x?}");
        }
    }

    /// Keys of shape `[3]` over counters of shape `[3, 2]`: key `i` hashes row `i`.
    #[test]
    fn each_key_hashes_the_counters_below_it() {
        let u = |shape: Vec<usize>, v: Vec<u32>| Array::new(shape, Data::U32(v));
        let k0 = u(vec![3], KAT.map(|c| c.0[0]).to_vec());
        let k1 = u(vec![3], KAT.map(|c| c.0[1]).to_vec());
        let x0 = u(vec![3, 2], KAT.iter().flat_map(|c| [c.1[0], 7]).collect());
        let x1 = u(vec![3, 2], KAT.iter().flat_map(|c| [c.1[1], 8]).collect());
        let tys: Vec<ArrayTy> = [&k0, &k1, &x0, &x1].iter().map(|a| a.ty()).collect();
        assert_eq!(Threefry.infer(&tys), Ok(vec![x0.ty(), x0.ty()]));
        let out = Threefry.eval(&[&k0, &k1, &x0, &x1]);
        for (i, (k, x, want)) in KAT.into_iter().enumerate() {
            let other = threefry2x32(k, [7, 8]);
            let words = |j: usize| -> [u32; 2] { [u32s(&out[0])[2 * i + j], u32s(&out[1])[2 * i + j]] };
            assert_eq!(words(0), want, "row {i}, counter {x:x?}");
            assert_eq!(words(1), other, "row {i}, counter [7, 8]");
        }
    }

    #[test]
    fn keys_must_begin_the_counters() {
        let t = |shape: Vec<usize>| ArrayTy::new(DType::U32, shape);
        assert!(Threefry.infer(&[t(vec![2]), t(vec![2]), t(vec![3, 2]), t(vec![3, 2])]).is_err());
        assert!(Threefry.infer(&[t(vec![]), t(vec![]), t(vec![3]), t(vec![4])]).is_err());
        let f = ArrayTy::new(DType::F32, vec![]);
        assert!(Threefry.infer(&[f.clone(), f, t(vec![3]), t(vec![3])]).is_err());
    }
}
