//! Random numbers: the `Key` type and the `jax.random`-compatible builtins.
//!
//! A key is what `jax.random.key_data` shows of a threefry2x32 key: two `u32` words. Each
//! builtin gives the same bits as its `jax.random` namesake under JAX's default
//! configuration (threefry2x32, `jax_threefry_partitionable=True`, 32-bit types):
//!
//! - the threefry2x32 hash (Random123's 20 rounds) is the primitive
//!   [`Threefry`](crate::prims::Threefry), lowered to u32 add, xor, shifts and or, so
//!   the interpreter and every backend compute the same bits;
//! - a draw of shape `S` hashes the counter pairs `(0, i)`, `i` the row-major index in `S`
//!   (jax's `iota_2x32_shape`; the high word is 0 below 2^32 elements), and keeps the xor
//!   of the two output words (`_threefry_random_bits_partitionable`);
//! - `split(k, n)` hashes `(0, i)` and keeps both words as key `i`
//!   (`_threefry_split_foldlike`); `fold_in(k, d)` hashes `(0, d)`.
//!
//! Floats follow jax's samplers operation for operation (`normal` computes XLA's f32
//! `erf_inv`, see [`Elab::erf_inv`]), so on the device, where XLA compiles the same
//! operations as it does for jax, they are jax's bits. The interpreter rounds each
//! operation alone where XLA's CPU backend fuses a multiply and an add, and uses the
//! host's `log`, so its floats can differ from jax's by an ulp or two (of `max(|x|, 1)`).
//!
//! Like every operation, a draw from a key known at compile time folds into a constant
//! (computed by the interpreter's rules). A run-time key gives IR that broadcasts scalar
//! constants rather than holding full-size ones, so large draws stay small in the IR.

use super::ops::{dims_of, known_shape};
use super::{Elab, Val};
use crate::array::{Array, ArrayTy, DType, Data};
use crate::prims::*;
use crate::syntax::ast;
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::shape;
use crate::types::{Dim, Ty};

/// The random builtins' names, for "did you mean" suggestions.
pub(crate) const NAMES: &[&str] =
    &["key", "split", "fold_in", "uniform", "normal", "randint", "bernoulli", "gumbel", "categorical", "permutation"];

/// `Key`: a threefry2x32 key, two u32 words, as `jax.random.key_data` gives them.
pub(crate) fn key_ty() -> Ty {
    Ty::Array(DType::U32, vec![Dim::Known(2)])
}

/// jax's uniform floats are `bitcast((bits >> 9) | 0x3F800000) - 1`, i.e. `1 + m * 2^-23`
/// minus 1 with `m < 2^23`: exactly `m * 2^-23`, which needs no bitcast.
const MANTISSA_ULP: f32 = 1.0 / (1 << 23) as f32;

/// The low end of `normal`'s uniform draw: the float after -1 toward 0 (`_normal_real`).
const NORMAL_LO: f32 = -(1.0 - f32::EPSILON / 2.0);

/// XLA's f32 `erf_inv` (Giles' single-precision approximation): the polynomial
/// coefficients for `w < 5` and for `w >= 5`, highest degree first, as written in XLA.
#[allow(clippy::excessive_precision)]
const ERF_INV_W_LT_5: [f32; 9] = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
];
#[allow(clippy::excessive_precision)]
const ERF_INV_W_GE_5: [f32; 9] = [
    -0.000200214257,
    0.000100950558,
    0.00134934322,
    -0.00367342844,
    0.00573950773,
    -0.0076224613,
    0.00943887047,
    1.00167406,
    2.83297682,
];

impl Elab<'_> {
    /// Elaborates a random builtin, or returns `None` if `func` is not one.
    pub(crate) fn random(&mut self, func: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<Val> {
        let name = func.name.as_str();
        let (min, max) = match name {
            "key" => (1, 1),
            "split" => (1, 2),
            "fold_in" | "normal" | "gumbel" | "categorical" | "permutation" => (2, 2),
            "bernoulli" => (2, 3),
            "uniform" => (2, 4),
            "randint" => (4, 4),
            _ => return None,
        };
        // `uniform` takes its range whole or not at all.
        let bad_uniform = name == "uniform" && args.len() == 3;
        if args.len() < min || args.len() > max || bad_uniform {
            for a in args {
                self.expr(a);
            }
            let expected = if args.len() < min { min } else { max };
            return Some(self.err(TypeError::Arity {
                what: format!("`{name}`"),
                expected,
                found: args.len(),
                span,
                decl: None,
            }));
        }
        Some(match name {
            "key" => self.seed_key(&args[0]),
            "split" => self.split_key(args),
            "fold_in" => self.fold_in_key(args),
            "uniform" => self.uniform_draw(args),
            "normal" | "gumbel" => self.float_draw(name, args),
            "randint" => self.randint_draw(args),
            "bernoulli" => self.bernoulli_draw(args),
            "categorical" => self.categorical_draw(args),
            "permutation" => self.permutation_draw(args),
            _ => unreachable!("the arity table lists exactly the random builtins"),
        })
    }

    // ---------------------------------------------------------------- the builtins

    /// `key(seed)`: `jax.random.key(seed)`'s data for a 32-bit seed (`threefry_seed`):
    /// the seed shifted right by 32, which is 0, then the seed's bits.
    fn seed_key(&mut self, e: &ast::Expr) -> Val {
        let s = self.scalar_arg("key", e, None);
        if s.ty.is_error() {
            return s;
        }
        if !self.concrete(&[&s]) {
            return Val::of(key_ty(), vec![]);
        }
        let lo = self.u32_bits(&s);
        let hi = self.u32c(0);
        self.pair(&hi, &lo)
    }

    /// `split(k)`, a pair of keys, and `split(k, n)`, `u32[n, 2]`: `jax.random.split`
    /// (`_threefry_split_foldlike`): key `i` is both words of the hash of `(0, i)`.
    fn split_key(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("split", &args[0]);
        let n = match args.get(1) {
            Some(e) => match self.static_dim(e, "the number of keys") {
                Some(d) => Some(d),
                None => return Val::error(),
            },
            None => None,
        };
        if k.ty.is_error() {
            return k;
        }
        let ty = match &n {
            Some(d) => Ty::Array(DType::U32, vec![d.clone(), Dim::Known(2)]),
            None => Ty::Tuple(vec![key_ty(), key_ty()]),
        };
        // A pair is a tuple, which is never known at compile time: only build it.
        match n {
            Some(Dim::Known(n)) if self.concrete(&[&k]) => self.split_n(&k, n as usize),
            None if self.building() => self.split_pair(&k),
            _ => Val::of(ty, vec![]),
        }
    }

    /// `split(k)`: a pair of keys. Each is hashed on its own, so that when only one of
    /// them is used (an env whose `step` ignores its key) the other is dead code.
    pub(crate) fn split_pair(&mut self, k: &Val) -> Val {
        let (k0, k1) = self.key_words(k);
        let mut vars = vec![];
        for i in 0..2 {
            let (hi, lo) = (self.u32c(0), self.u32c(i));
            let (y0, y1) = self.threefry(&k0, &k1, hi, lo);
            vars.extend(self.pair(&y0, &y1).vars);
        }
        Val::of(Ty::Tuple(vec![key_ty(), key_ty()]), vars)
    }

    /// `split(k, n)`: `u32[n, 2]`.
    pub(crate) fn split_n(&mut self, k: &Val, count: usize) -> Val {
        let (k0, k1) = self.key_words(k);
        let (x0, x1) = self.counters(&[count], k.known.is_some());
        let (y0, y1) = self.threefry(&k0, &k1, x0, x1);
        let column = Prim::Reshape(Reshape { shape: vec![count, 1] });
        let (c0, c1) = (self.apply(column.clone(), &[&y0]), self.apply(column, &[&y1]));
        self.apply(Prim::Concat(Concat { axis: 1 }), &[&c0, &c1])
    }

    /// `fold_in(k, data)`: `jax.random.fold_in` (`_threefry_fold_in`): both words of the
    /// hash of `(0, data)`, the data's bits read as u32.
    fn fold_in_key(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("fold_in", &args[0]);
        let d = self.scalar_arg("fold_in", &args[1], None);
        if k.ty.is_error() || d.ty.is_error() {
            return Val::error();
        }
        if !self.concrete(&[&k, &d]) {
            return Val::of(key_ty(), vec![]);
        }
        self.fold_in(&k, &d)
    }

    /// `fold_in(k, d)` on a key and an integer scalar.
    pub(crate) fn fold_in(&mut self, k: &Val, d: &Val) -> Val {
        let (k0, k1) = self.key_words(k);
        let x0 = self.u32c(0);
        let x1 = self.u32_bits(d);
        let (y0, y1) = self.threefry(&k0, &k1, x0, x1);
        self.pair(&y0, &y1)
    }

    /// `uniform(k, [dims])` in `[0, 1)` and `uniform(k, [dims], lo, hi)` in `[lo, hi)`:
    /// `jax.random.uniform`.
    fn uniform_draw(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("uniform", &args[0]);
        let dims = self.shape_arg(&args[1]);
        let range = match args.get(2..4) {
            Some([lo, hi]) => Some((
                self.scalar_arg("uniform", lo, Some(DType::F32)),
                self.scalar_arg("uniform", hi, Some(DType::F32)),
            )),
            _ => None,
        };
        let mut vals = vec![&k];
        vals.extend(range.iter().flat_map(|(lo, hi)| [lo, hi]));
        let Some(dims) = dims.filter(|_| vals.iter().all(|v| !v.ty.is_error())) else { return Val::error() };
        let ty = Ty::Array(DType::F32, dims.clone());
        if !self.ready(&vals, &dims) {
            return Val::of(ty, vec![]);
        }
        let u = self.uniform01(&k, &known_shape(&dims));
        match &range {
            Some((lo, hi)) => self.scale(&u, lo, hi),
            None => u,
        }
    }

    /// `normal(k, [dims])` (`jax.random.normal`: `sqrt(2) * erf_inv(u)`, `u` uniform in
    /// `[nextafter(-1, 0), 1)`) and `gumbel(k, [dims])` (`jax.random.gumbel`, its default
    /// "low" mode: `-log(-log(u))`, `u` uniform in `[tiny, 1)`).
    fn float_draw(&mut self, name: &str, args: &[ast::Expr]) -> Val {
        let k = self.key_arg(name, &args[0]);
        let dims = self.shape_arg(&args[1]);
        let Some(dims) = dims.filter(|_| !k.ty.is_error()) else { return Val::error() };
        let ty = Ty::Array(DType::F32, dims.clone());
        if !self.ready(&[&k], &dims) {
            return Val::of(ty, vec![]);
        }
        let shape = known_shape(&dims);
        if name == "normal" { self.normal(&k, &shape) } else { self.gumbel(&k, &shape) }
    }

    /// `randint(k, [dims], lo, hi)`: `jax.random.randint` with `i32` bounds, `_randint`'s
    /// algorithm: two draws from the halves of `split(k)`, combined modulo the span.
    fn randint_draw(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("randint", &args[0]);
        let dims = self.shape_arg(&args[1]);
        let lo = self.scalar_arg("randint", &args[2], Some(DType::I32));
        let hi = self.scalar_arg("randint", &args[3], Some(DType::I32));
        let Some(dims) = dims.filter(|_| [&k, &lo, &hi].iter().all(|v| !v.ty.is_error())) else {
            return Val::error();
        };
        let ty = Ty::Array(DType::I32, dims.clone());
        if !self.ready(&[&k, &lo, &hi], &dims) {
            return Val::of(ty, vec![]);
        }
        self.randint(&k, &known_shape(&dims), &lo, &hi)
    }

    /// `randint(k, shape, lo, hi)` on a key and `i32` scalar bounds.
    pub(crate) fn randint(&mut self, k: &Val, shape: &[usize], lo: &Val, hi: &Val) -> Val {
        let (k1, k2) = self.split2(k);
        let higher = self.random_bits(&k1, shape);
        let lower = self.random_bits(&k2, shape);
        // span = hi - lo as u32, or 1 when hi <= lo so that lo is always returned. (jax
        // widens the span by one when `hi` exceeds the dtype's maximum; an i32 never does.)
        let diff = self.bin(BinaryOp::Sub, hi, lo);
        let diff = self.u32_bits(&diff);
        let one = self.u32c(1);
        let empty = self.apply(Prim::Compare(Compare { op: CmpOp::Le }), &[hi, lo]);
        let span = self.apply(Prim::Select(Select), &[&empty, &one, &diff]);
        // 2^32 mod span, as (2^16 mod span)^2 mod span, so that the 64 random bits
        // (higher, lower) reduce to (higher mod span) * multiplier + (lower mod span).
        let half = self.u32c(1 << 16);
        let m = self.bin(BinaryOp::Rem, &half, &span);
        let m2 = self.bin(BinaryOp::Mul, &m, &m);
        let multiplier = self.bin(BinaryOp::Rem, &m2, &span);
        let span_b = self.splat(&span, &higher);
        let multiplier = self.splat(&multiplier, &higher);
        let h = self.bin(BinaryOp::Rem, &higher, &span_b);
        let h = self.bin(BinaryOp::Mul, &h, &multiplier);
        let l = self.bin(BinaryOp::Rem, &lower, &span_b);
        let offset = self.bin(BinaryOp::Add, &h, &l);
        let offset = self.bin(BinaryOp::Rem, &offset, &span_b);
        let offset = self.apply(Prim::Convert(Convert { to: DType::I32 }), &[&offset]);
        let lo = self.splat(lo, &offset);
        self.bin(BinaryOp::Add, &lo, &offset)
    }

    /// `bernoulli(k, p)` and `bernoulli(k, p, [dims])`: `jax.random.bernoulli` (its
    /// default "low" mode), `uniform(k, dims) < p` with `p` broadcast to `dims`.
    fn bernoulli_draw(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("bernoulli", &args[0]);
        let p = self.float_array_arg("bernoulli", &args[1]);
        let dims = match args.get(2) {
            Some(e) => self.shape_arg(e),
            None => Some(dims_of(&p.ty).to_vec()),
        };
        let Some(dims) = dims.filter(|_| !k.ty.is_error() && !p.ty.is_error()) else { return Val::error() };
        let pd = dims_of(&p.ty);
        if shape::broadcast(pd, &dims).as_deref() != Some(&dims[..]) {
            let expected = format!("probabilities that broadcast to `[{}]`", crate::types::join(&dims));
            return self.err(TypeError::BadOperand { op: "bernoulli".into(), ty: p.ty, span: args[1].span, expected });
        }
        let ty = Ty::Array(DType::Bool, dims.clone());
        if !self.ready(&[&k, &p], &dims) {
            return Val::of(ty, vec![]);
        }
        let u = self.uniform01(&k, &known_shape(&dims));
        let p = self.broadcast_to(&p, &dims);
        self.apply(Prim::Compare(Compare { op: CmpOp::Lt }), &[&u, &p])
    }

    /// `categorical(k, logits)`: `jax.random.categorical` over the last axis, by the
    /// Gumbel-max trick: `argmax(gumbel(k, shape(logits)) + logits)`.
    fn categorical_draw(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("categorical", &args[0]);
        let logits = self.float_array_arg("categorical", &args[1]);
        if k.ty.is_error() || logits.ty.is_error() {
            return Val::error();
        }
        let dims = dims_of(&logits.ty).to_vec();
        let Some((_, batch)) = dims.split_last() else {
            let expected = "logits of rank 1 or more".into();
            return self.err(TypeError::BadOperand {
                op: "categorical".into(),
                ty: logits.ty,
                span: args[1].span,
                expected,
            });
        };
        let ty = Ty::Array(DType::I32, batch.to_vec());
        if !self.ready(&[&k, &logits], &dims) {
            return Val::of(ty, vec![]);
        }
        let g = self.gumbel(&k, &known_shape(&dims));
        let scores = self.bin(BinaryOp::Add, &g, &logits);
        self.apply(Prim::Argmax(Argmax { axis: dims.len() - 1 }), &[&scores])
    }

    /// `permutation(k, n)`: `jax.random.permutation(k, n)` for a static `n`, `_shuffle`'s
    /// algorithm: starting from `arange(n)`, `ceil(3 ln n / ln(2^32 - 1))` rounds (one up
    /// to n = 1625), each splitting the key, drawing 32-bit sort keys from the second half
    /// and stably sorting the values by them.
    fn permutation_draw(&mut self, args: &[ast::Expr]) -> Val {
        let k = self.key_arg("permutation", &args[0]);
        let n = self.static_dim(&args[1], "the length of `permutation`");
        let Some(n) = n.filter(|_| !k.ty.is_error()) else { return Val::error() };
        let ty = Ty::Array(DType::I32, vec![n.clone()]);
        let Dim::Known(n) = n else { return Val::of(ty, vec![]) };
        if !self.concrete(&[&k]) {
            return Val::of(ty, vec![]);
        }
        let Ok(n) = i32::try_from(n).map(|n| n as usize) else {
            let (value, ty) = (n.to_string(), "i32".into());
            return self.err(TypeError::LiteralRange { value, ty, span: args[1].span });
        };
        let rounds = (3.0 * (n.max(1) as f64).ln() / (u32::MAX as f64).ln()).ceil() as usize;
        let (mut key, mut x) = (k, None::<Val>);
        for _ in 0..rounds {
            let (next, sub) = self.split2(&key);
            key = next;
            let bits = self.random_bits(&sub, &[n]);
            let order = self.apply(Prim::Argsort(Argsort { axis: 0 }), &[&bits]);
            // Sorting the values by the keys is reading them in the keys' sorted order.
            x = Some(match x {
                None => order,
                Some(x) => {
                    let idx = self.apply(Prim::Reshape(Reshape { shape: vec![n, 1] }), &[&order]);
                    let take = Gather {
                        offset_dims: vec![],
                        collapsed_slice_dims: vec![0],
                        operand_batching_dims: vec![],
                        indices_batching_dims: vec![],
                        start_index_map: vec![0],
                        slice_sizes: vec![1],
                    };
                    self.apply(Prim::Gather(take), &[&x, &idx])
                }
            });
        }
        let x = x.unwrap_or_else(|| {
            let iota = Array::new(vec![n], Data::I32((0..n as i32).collect()));
            self.known_val(iota, ty.clone(), false)
        });
        Val { ty, ..x }
    }

    // ---------------------------------------------------------------- arguments

    /// A key: `Key`, that is `u32[2]`.
    fn key_arg(&mut self, name: &str, e: &ast::Expr) -> Val {
        let v = self.expr(e);
        if v.ty.is_error() || v.ty == key_ty() {
            return v;
        }
        let expected = "a key (`Key`, that is `u32[2]`)".into();
        self.err(TypeError::BadOperand { op: name.into(), ty: v.ty.clone(), span: e.span, expected })
    }

    /// A scalar of dtype `want`, or of an integer dtype when `want` is `None`; a weak
    /// literal adapts.
    fn scalar_arg(&mut self, name: &str, e: &ast::Expr, want: Option<DType>) -> Val {
        let v = self.expr(e);
        match (&v.ty, want) {
            (Ty::Error, _) => v,
            (Ty::Array(d, s), None) if s.is_empty() && d.is_int() => v,
            (Ty::Array(d, s), Some(w)) if s.is_empty() && *d == w => v,
            (Ty::Array(d, s), Some(w)) if s.is_empty() && v.weak && (w.is_float() || !d.is_float()) => {
                self.convert(v, w, e.span)
            }
            _ => {
                let expected = match want {
                    Some(w) => format!("an `{w}` scalar"),
                    None => "an integer scalar (`i32` or `u32`)".into(),
                };
                self.err(TypeError::BadOperand { op: name.into(), ty: v.ty.clone(), span: e.span, expected })
            }
        }
    }

    /// An `f32` array of any shape; weak integer literals become floats.
    fn float_array_arg(&mut self, name: &str, e: &ast::Expr) -> Val {
        let v = self.expr(e);
        match &v.ty {
            Ty::Array(DType::F32, _) | Ty::Error => v,
            Ty::Array(..) if v.weak => self.convert(v, DType::F32, e.span),
            _ => self.err(TypeError::BadOperand {
                op: name.into(),
                ty: v.ty.clone(),
                span: e.span,
                expected: "`f32` values".into(),
            }),
        }
    }

    /// Whether a draw can be carried out now: its values are concrete (see
    /// [`Elab::concrete`]) and its shape known (check mode may see symbolic sizes).
    fn ready(&self, vals: &[&Val], dims: &[Dim]) -> bool {
        self.concrete(vals) && dims.iter().all(|d| matches!(d, Dim::Known(_)))
    }

    // ---------------------------------------------------------------- samplers

    /// Uniform floats in `[0, 1)` (`_uniform` with its default range, where
    /// `floats * (1 - 0) + 0` and the final `max(0, ...)` change nothing).
    pub(crate) fn uniform01(&mut self, k: &Val, shape: &[usize]) -> Val {
        let bits = self.random_bits(k, shape);
        let nine = self.u32c(9);
        let nine = self.splat(&nine, &bits);
        let m = self.bin(BinaryOp::ShiftRightLogical, &bits, &nine);
        let m = self.apply(Prim::Convert(Convert { to: DType::F32 }), &[&m]);
        let ulp = self.f32c(MANTISSA_ULP);
        let ulp = self.splat(&ulp, &m);
        self.bin(BinaryOp::Mul, &m, &ulp)
    }

    /// Uniform floats `u` in `[0, 1)` moved to `[lo, hi)` as `_uniform` does:
    /// `max(lo, u * (hi - lo) + lo)`.
    fn scale(&mut self, u: &Val, lo: &Val, hi: &Val) -> Val {
        let span = self.bin(BinaryOp::Sub, hi, lo);
        let span = self.splat(&span, u);
        let lo = self.splat(lo, u);
        let x = self.bin(BinaryOp::Mul, u, &span);
        let x = self.bin(BinaryOp::Add, &x, &lo);
        self.bin(BinaryOp::Max, &lo, &x)
    }

    /// `jax.random.normal` (`_normal_real`).
    pub(crate) fn normal(&mut self, k: &Val, shape: &[usize]) -> Val {
        let u = self.uniform01(k, shape);
        let (lo, hi) = (self.f32c(NORMAL_LO), self.f32c(1.0));
        let u = self.scale(&u, &lo, &hi);
        let e = self.erf_inv(&u);
        let sqrt2 = self.fconst(std::f32::consts::SQRT_2, &e);
        self.bin(BinaryOp::Mul, &sqrt2, &e)
    }

    /// `jax.random.gumbel` in its default "low" mode (`_gumbel`).
    fn gumbel(&mut self, k: &Val, shape: &[usize]) -> Val {
        let u = self.uniform01(k, shape);
        let (lo, hi) = (self.f32c(f32::MIN_POSITIVE), self.f32c(1.0));
        let u = self.scale(&u, &lo, &hi);
        let l = self.un(UnaryOp::Log, &u);
        let l = self.un(UnaryOp::Neg, &l);
        let l = self.un(UnaryOp::Log, &l);
        self.un(UnaryOp::Neg, &l)
    }

    /// The inverse error function of f32 values, operation for operation as XLA expands
    /// `chlo.erf_inv` for f32 (`erfInv32` in StableHLO's CHLO legalization, which jax's
    /// `lax.erf_inv` lowers to): `w = -log1p(-x * x)`, then Giles' polynomial in `w - 2.5`
    /// (`w < 5`) or `sqrt(w) - 3`, times `x`; `±1` give `±inf`. XLA's CPU backend compiles
    /// these same operations, so the device agrees with jax bit for bit; the interpreter
    /// rounds each operation alone where XLA may fuse a multiply and an add.
    fn erf_inv(&mut self, x: &Val) -> Val {
        let neg = self.un(UnaryOp::Neg, x);
        let minus_x2 = self.bin(BinaryOp::Mul, x, &neg);
        let l = self.un(UnaryOp::Log1p, &minus_x2);
        let w = self.un(UnaryOp::Neg, &l);
        let five = self.fconst(5.0, x);
        let lt = self.apply(Prim::Compare(Compare { op: CmpOp::Lt }), &[&w, &five]);
        let c = self.fconst(2.5, x);
        let small = self.bin(BinaryOp::Sub, &w, &c);
        let root = self.un(UnaryOp::Sqrt, &w);
        let c = self.fconst(3.0, x);
        let large = self.bin(BinaryOp::Sub, &root, &c);
        let w = self.apply(Prim::Select(Select), &[&lt, &small, &large]);
        let mut p = self.coefficient(0, &lt, x);
        for i in 1..ERF_INV_W_LT_5.len() {
            let c = self.coefficient(i, &lt, x);
            let pw = self.bin(BinaryOp::Mul, &p, &w);
            p = self.bin(BinaryOp::Add, &c, &pw);
        }
        let result = self.bin(BinaryOp::Mul, &p, x);
        let ax = self.un(UnaryOp::Abs, x);
        let one = self.fconst(1.0, x);
        let edge = self.apply(Prim::Compare(Compare { op: CmpOp::Eq }), &[&ax, &one]);
        let inf = self.fconst(f32::INFINITY, x);
        let inf = self.bin(BinaryOp::Mul, x, &inf);
        self.apply(Prim::Select(Select), &[&edge, &inf, &result])
    }

    /// `erf_inv`'s `i`-th coefficient: one of the two polynomials', chosen by `lt`.
    fn coefficient(&mut self, i: usize, lt: &Val, like: &Val) -> Val {
        let a = self.fconst(ERF_INV_W_LT_5[i], like);
        let b = self.fconst(ERF_INV_W_GE_5[i], like);
        self.apply(Prim::Select(Select), &[lt, &a, &b])
    }

    // ---------------------------------------------------------------- threefry

    /// 32 random bits per element of `shape` (`_threefry_random_bits_partitionable`).
    fn random_bits(&mut self, k: &Val, shape: &[usize]) -> Val {
        let (k0, k1) = self.key_words(k);
        let (x0, x1) = self.counters(shape, k.known.is_some());
        let (y0, y1) = self.threefry(&k0, &k1, x0, x1);
        self.bin(BinaryOp::Xor, &y0, &y1)
    }

    /// The counter pairs of a draw (`iota_2x32_shape`): the high words 0, the low words
    /// the row-major index. Known when `fold` (the key is known), else an iota.
    fn counters(&mut self, shape: &[usize], fold: bool) -> (Val, Val) {
        let n: usize = shape.iter().product();
        let ty = Ty::Array(DType::U32, shape.iter().map(|&d| Dim::Known(d as u64)).collect());
        if fold || !self.building() {
            let lo = Array::new(shape.to_vec(), Data::U32((0..n).map(|i| i as u32).collect()));
            let hi = Array::new(shape.to_vec(), Data::U32(vec![0; n]));
            return (self.known_val(hi, ty.clone(), false), self.known_val(lo, ty, false));
        }
        let b = self.b.as_mut().expect("building");
        let iota = b.prim1(Prim::Iota(Iota { ty: ArrayTy::new(DType::U32, vec![n]), dim: 0 }), &[]);
        let lo =
            if shape.len() == 1 { iota } else { b.prim1(Prim::Reshape(Reshape { shape: shape.to_vec() }), &[iota]) };
        let lo = Val::of(ty, vec![lo]);
        let zero = self.u32c(0);
        (self.splat(&zero, &lo), lo)
    }

    /// The threefry2x32 hash of the counter pairs `(x0, x1)` (u32 arrays of one shape)
    /// under the key `(k0, k1)` (u32 scalars): the primitive, folded when all is known.
    fn threefry(&mut self, k0: &Val, k1: &Val, x0: Val, x1: Val) -> (Val, Val) {
        let mut outs = self.apply_all(Prim::Threefry(Threefry), &[k0, k1, &x0, &x1]).into_iter();
        let mut next = || outs.next().unwrap_or_else(Val::error);
        (next(), next())
    }

    /// The two words of a key, as u32 scalars.
    fn key_words(&mut self, k: &Val) -> (Val, Val) {
        let word = |cx: &mut Self, i: usize| {
            let w = cx.apply(Prim::Slice(Slice { start: vec![i], limit: vec![i + 1] }), &[k]);
            cx.apply(Prim::Reshape(Reshape { shape: vec![] }), &[&w])
        };
        (word(self, 0), word(self, 1))
    }

    /// The two keys of `split(k)`, for samplers that need them (`randint`).
    fn split2(&mut self, k: &Val) -> (Val, Val) {
        let (k0, k1) = self.key_words(k);
        let (x0, x1) = self.counters(&[2], k.known.is_some());
        let (y0, y1) = self.threefry(&k0, &k1, x0, x1);
        let key = |cx: &mut Self, i: usize| {
            let slice = Prim::Slice(Slice { start: vec![i], limit: vec![i + 1] });
            let (a, b) = (cx.apply(slice.clone(), &[&y0]), cx.apply(slice, &[&y1]));
            cx.apply(Prim::Concat(Concat { axis: 0 }), &[&a, &b])
        };
        (key(self, 0), key(self, 1))
    }

    /// The key `[a, b]` from two u32 scalars.
    fn pair(&mut self, a: &Val, b: &Val) -> Val {
        let one = Prim::Reshape(Reshape { shape: vec![1] });
        let (a, b) = (self.apply(one.clone(), &[a]), self.apply(one, &[b]));
        self.apply(Prim::Concat(Concat { axis: 0 }), &[&a, &b])
    }

    // ---------------------------------------------------------------- small helpers

    fn u32c(&mut self, x: u32) -> Val {
        self.known_val(Array::new(vec![], Data::U32(vec![x])), Ty::scalar(DType::U32), false)
    }

    fn f32c(&mut self, x: f32) -> Val {
        self.known_val(Array::f32(vec![], vec![x]), Ty::scalar(DType::F32), false)
    }

    /// The f32 constant `x` in the shape of `like`.
    fn fconst(&mut self, x: f32, like: &Val) -> Val {
        let s = self.f32c(x);
        self.splat(&s, like)
    }

    /// A scalar broadcast to the shape of `like`. Unless `like` is known too (then it all
    /// folds), a known scalar stays a scalar constant that the IR broadcasts.
    fn splat(&mut self, s: &Val, like: &Val) -> Val {
        let dims = dims_of(&like.ty).to_vec();
        if like.known.is_some() {
            return self.broadcast_to(s, &dims);
        }
        self.broadcast_to(&Val { known: None, ..s.clone() }, &dims)
    }

    /// An integer's bits as u32.
    fn u32_bits(&mut self, v: &Val) -> Val {
        match &v.ty {
            Ty::Array(DType::U32, _) => v.clone(),
            _ => self.apply(Prim::Convert(Convert { to: DType::U32 }), &[v]),
        }
    }

    fn bin(&mut self, op: BinaryOp, a: &Val, b: &Val) -> Val {
        self.apply(Prim::Binary(Binary { op }), &[a, b])
    }

    fn un(&mut self, op: UnaryOp, a: &Val) -> Val {
        self.apply(Prim::Unary(Unary { op }), &[a])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::build::Builder;
    use crate::prims::threefry::KAT;

    fn words(v: &Val) -> Vec<u32> {
        match v.known.as_ref().map(|a| &a.data) {
            Some(Data::U32(w)) => w.clone(),
            other => panic!("expected known u32 data, got {other:?}"),
        }
    }

    #[test]
    fn threefry_folds_when_known() {
        let (prog, _) = crate::resolve::load_source("kat.pod", "", vec![]);
        let mut cx = Elab::new(&prog, &[], None);
        for (k, x, want) in KAT {
            let (k0, k1, x0, x1) = (cx.u32c(k[0]), cx.u32c(k[1]), cx.u32c(x[0]), cx.u32c(x[1]));
            let (y0, y1) = cx.threefry(&k0, &k1, x0, x1);
            assert_eq!([words(&y0)[0], words(&y1)[0]], want, "key {k:x?}, counter {x:x?}");
        }
    }

    /// The emitted IR (keys and counters unknown) verifies, and the interpreter runs it.
    #[test]
    fn threefry_known_answers_emitted() {
        let (prog, _) = crate::resolve::load_source("kat.pod", "", vec![]);
        let mut cx = Elab::new(&prog, &[], Some(Builder::new()));
        let scalar = ArrayTy::scalar(DType::U32);
        let b = cx.b.as_mut().expect("building");
        let params: Vec<_> = (0..4).map(|_| b.fresh(scalar.clone())).collect();
        let val = |v| Val::of(Ty::scalar(DType::U32), vec![v]);
        let (y0, y1) = cx.threefry(&val(params[0]), &val(params[1]), val(params[2]), val(params[3]));
        let f = cx.b.take().expect("building").finish("kat", params, vec![y0.vars[0], y1.vars[0]]);
        crate::ir::verify::verify(&f).expect("the IR verifies");
        for (k, x, want) in KAT {
            let args: Vec<Array> =
                [k[0], k[1], x[0], x[1]].iter().map(|&w| Array::new(vec![], Data::U32(vec![w]))).collect();
            let out = crate::ir::eval::eval_func(&f, &args);
            let got: Vec<u32> = out.iter().map(|a| if let Data::U32(w) = &a.data { w[0] } else { 0 }).collect();
            assert_eq!(got, want, "key {k:x?}, counter {x:x?}");
        }
    }

    /// jax's uniform floats, `bitcast((bits >> 9) | 0x3F800000) - 1`, are exactly
    /// `(bits >> 9) * 2^-23`, for every 23-bit mantissa.
    #[test]
    fn uniform_mantissa_needs_no_bitcast() {
        for m in 0..1u32 << 23 {
            let jax = f32::from_bits(m | 0x3F80_0000) - 1.0;
            assert_eq!(jax.to_bits(), (m as f32 * MANTISSA_ULP).to_bits(), "mantissa {m:#x}");
        }
    }

    #[test]
    fn normal_low_end_is_after_minus_one() {
        assert_eq!(NORMAL_LO.to_bits(), 0xBF7F_FFFF);
        assert_eq!(NORMAL_LO, f32::from_bits((-1.0f32).to_bits() - 1));
    }
}
