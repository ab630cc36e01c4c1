//! A generator of random well-typed `.pod` programs, to find the compiler's panics and
//! miscompilations before users do (`tests/compiler/generated.rs` runs a fixed corpus; the fuzz
//! target `generated` drives it from libFuzzer's bytes).
//!
//! Programs are typed by construction: every expression is generated for a type it must
//! have, from the variables in scope, helpers made on demand (plain, generic over a size,
//! batched by `vmap`, differentiated by `grad`), structs, the generic struct `W<T>` with
//! any type argument (`W<S0>`, `W<(f32, i32[2])>`, `W<f32[N]>` in a helper generic over
//! `N`), tuples, `if`, `where`, `for` loops, indexing, slicing, `.set`, reductions, `@`,
//! layout builtins and random draws. A program is a `main` and, sometimes, an `env`
//! (discrete or `box` actions, sometimes an `auto_reset`) and an `agent` for it (sometimes
//! with a carry).
//!
//! Choices are drawn from [`Choices`], which reads the fuzzer's bytes first and a seeded
//! generator after them, so every program is reproducible from its seed or its bytes.

use std::fmt::Write;

/// Where the generator's choices come from.
pub struct Choices {
    bytes: Vec<u8>,
    pos: usize,
    state: u64,
}

impl Choices {
    pub fn seeded(seed: u64) -> Choices {
        Choices { bytes: vec![], pos: 0, state: seed }
    }

    /// The bytes' choices, then a generator seeded by them.
    pub fn from_bytes(bytes: &[u8]) -> Choices {
        let state =
            bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Choices { bytes: bytes.to_vec(), pos: 0, state }
    }

    /// A number in `0..n` (0 when `n` is 0 or 1).
    pub fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        if let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            return b as usize % n;
        }
        // splitmix64
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub enum D {
    F,
    I,
    /// u8: bytes, wrapping mod 256.
    U,
    B,
}

/// A size: known, or the size parameter `N` of the generic helper being written.
const N: usize = usize::MAX;

#[derive(Clone, PartialEq, Debug)]
pub enum Ty {
    Arr(D, Vec<usize>),
    Tuple(Vec<Ty>),
    /// The generator's `structs[i]`.
    Struct(usize),
    /// A batch of `structs[i]` (`S[b]`): its fields with a leading axis `b`.
    Batch(usize, usize),
    /// `W<T>`, the generic struct of [`PRELUDE`].
    Wrap(Box<Ty>),
    Key,
}

/// What every program starts with: a struct generic over a type, and a function generic
/// over one that takes it apart (binding `T` through the written `W<T>`).
const PRELUDE: &str = "struct W<T> { v: T, k: f32 }\nfn unwrap<T>(w: W<T>) -> T { w.v }\n";

fn wrap(t: Ty) -> Ty {
    Ty::Wrap(Box::new(t))
}

fn f(shape: &[usize]) -> Ty {
    Ty::Arr(D::F, shape.to_vec())
}

fn scalar(d: D) -> Ty {
    Ty::Arr(d, vec![])
}

fn dims(shape: &[usize]) -> String {
    shape.iter().map(|&d| if d == N { "N".to_string() } else { d.to_string() }).collect::<Vec<_>>().join(", ")
}

/// What an expression may use.
#[derive(Clone, Default)]
struct Scope {
    vars: Vec<(String, Ty)>,
    /// Inside a function differentiated by `grad`: no integer may be computed from a float
    /// (`as i32`, `argmax`), since the loss could depend on it (E0227).
    diff: bool,
    /// Inside a helper generic over `N`, whose parameter `x0: f32[N]` is always in scope.
    generic: bool,
}

pub struct Gen<'c> {
    c: &'c mut Choices,
    structs: Vec<Vec<(String, Ty)>>,
    items: Vec<String>,
    fresh: usize,
    /// Expression nodes left to write, so that programs stay small.
    budget: usize,
}

/// A generated program and the names of what it defines.
pub struct Program {
    pub source: String,
    pub env: Option<String>,
    pub agent: Option<(String, usize, usize)>,
}

/// An env's action space, as the agent needs it: `discrete(n)` or `box(n)`.
#[derive(Clone, Copy)]
enum Action {
    Discrete(usize),
    Box(usize),
}

/// Writes one program: a `main`, and with some probability an env and an agent.
pub fn program(c: &mut Choices) -> Program {
    let mut g = Gen { c, structs: vec![], items: vec![], fresh: 0, budget: 120 };
    let params: Vec<(String, Ty)> = (0..1 + g.c.below(3)).map(|i| (format!("p{i}"), g.ty(2))).collect();
    let results: Vec<Ty> = (0..1 + g.c.below(3)).map(|_| g.ty(2)).collect();
    let scope = Scope { vars: params.clone(), ..Scope::default() };
    let body: Vec<String> = results.iter().map(|t| g.expr(t, &scope, 4)).collect();
    let ps: Vec<String> = params.iter().map(|(n, t)| format!("{n}: {}", g.show(t))).collect();
    let rs: Vec<String> = results.iter().map(|t| g.show(t)).collect();
    let main = format!("fn main({}) -> ({},) {{\n    ({},)\n}}", ps.join(", "), rs.join(", "), body.join(",\n    "));
    g.items.push(main);
    let (env, agent) = if g.c.chance(12) {
        let (env, obs, actions) = g.env();
        let agent = g.c.chance(50).then(|| g.agent(&env, obs, actions));
        (Some(env), agent)
    } else {
        (None, None)
    };
    let mut source = PRELUDE.to_string();
    for (i, fields) in g.structs.iter().enumerate() {
        let fs: Vec<String> = fields.iter().map(|(n, t)| format!("{n}: {}", g.show(t))).collect();
        let _ = writeln!(source, "struct S{i} {{ {} }}", fs.join(", "));
    }
    for item in &g.items {
        let _ = writeln!(source, "{item}");
    }
    Program { source, env, agent }
}

impl Gen<'_> {
    fn name(&mut self, prefix: &str) -> String {
        self.fresh += 1;
        format!("{prefix}{}", self.fresh)
    }

    fn show(&self, t: &Ty) -> String {
        match t {
            Ty::Arr(d, shape) => {
                let d = match d {
                    D::F => "f32",
                    D::I => "i32",
                    D::U => "u8",
                    D::B => "bool",
                };
                if shape.is_empty() { d.to_string() } else { format!("{d}[{}]", dims(shape)) }
            }
            Ty::Tuple(ts) if ts.len() == 1 => format!("({},)", self.show(&ts[0])),
            Ty::Tuple(ts) => format!("({})", ts.iter().map(|t| self.show(t)).collect::<Vec<_>>().join(", ")),
            Ty::Struct(i) => format!("S{i}"),
            Ty::Batch(i, b) => format!("S{i}[{b}]"),
            Ty::Wrap(t) => format!("W<{}>", self.show(t)),
            Ty::Key => "Key".into(),
        }
    }

    fn shape(&mut self) -> Vec<usize> {
        let rank = *self.c.pick(&[0, 0, 1, 1, 1, 2, 2, 3]);
        (0..rank).map(|_| 1 + self.c.below(4)).collect()
    }

    fn dtype(&mut self) -> D {
        *self.c.pick(&[D::F, D::F, D::F, D::F, D::I, D::I, D::U, D::B, D::B])
    }

    /// A random type; records nest `depth` deep at most.
    fn ty(&mut self, depth: usize) -> Ty {
        match self.c.below(10) {
            0 | 1 if depth > 0 => {
                let n = 1 + self.c.below(3);
                Ty::Tuple((0..n).map(|_| self.ty(depth - 1)).collect())
            }
            2 | 3 if depth > 0 => self.struct_ty(depth - 1, false),
            4 if depth > 0 => match self.struct_ty(depth - 1, false) {
                Ty::Struct(i) => Ty::Batch(i, 1 + self.c.below(3)),
                other => other,
            },
            5 if depth > 0 => wrap(self.ty(depth - 1)),
            _ => {
                let (d, s) = (self.dtype(), self.shape());
                Ty::Arr(d, s)
            }
        }
    }

    /// A struct: an existing one, or a new one (all `f32` for `floats`).
    fn struct_ty(&mut self, depth: usize, floats: bool) -> Ty {
        let fits = |fs: &Vec<(String, Ty)>, g: &Gen| !floats || fs.iter().all(|(_, t)| g.all_float(t));
        let existing: Vec<usize> = (0..self.structs.len()).filter(|&i| fits(&self.structs[i], self)).collect();
        if !existing.is_empty() && self.c.chance(50) {
            return Ty::Struct(*self.c.pick(&existing));
        }
        let n = 1 + self.c.below(3);
        let fields = (0..n)
            .map(|i| {
                let t = if floats { self.float_ty(depth) } else { self.ty(depth) };
                (format!("f{i}"), Self::no_batch(&t))
            })
            .collect();
        self.structs.push(fields);
        Ty::Struct(self.structs.len() - 1)
    }

    /// A type made of `f32` arrays only (what `grad` differentiates).
    fn float_ty(&mut self, depth: usize) -> Ty {
        match self.c.below(6) {
            0 if depth > 0 => Ty::Tuple((0..1 + self.c.below(2)).map(|_| self.float_ty(depth - 1)).collect()),
            1 if depth > 0 => self.struct_ty(depth - 1, true),
            2 if depth > 0 => wrap(self.float_ty(depth - 1)),
            _ => {
                let s = self.shape();
                f(&s)
            }
        }
    }

    fn all_float(&self, t: &Ty) -> bool {
        match t {
            Ty::Arr(d, _) => *d == D::F,
            Ty::Tuple(ts) => ts.iter().all(|t| self.all_float(t)),
            Ty::Struct(i) | Ty::Batch(i, _) => self.structs[*i].iter().all(|(_, t)| self.all_float(t)),
            Ty::Wrap(t) => self.all_float(t),
            Ty::Key => false,
        }
    }

    fn is_record(t: &Ty) -> bool {
        matches!(t, Ty::Tuple(_) | Ty::Struct(_) | Ty::Batch(..) | Ty::Wrap(_))
    }

    /// `t` with batches of structs replaced by one struct and `W<T>` by `T`: what a
    /// struct's field may be here, so that every struct can itself be batched (and a batch
    /// of a `W<T>` has no written type).
    fn no_batch(t: &Ty) -> Ty {
        match t {
            Ty::Batch(i, _) => Ty::Struct(*i),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(Self::no_batch).collect()),
            Ty::Wrap(t) => Self::no_batch(t),
            other => other.clone(),
        }
    }

    /// A batch of `b` values of type `t`: a leading axis on every array.
    fn batch_of(t: &Ty, b: usize) -> Ty {
        match t {
            Ty::Arr(d, shape) => Ty::Arr(*d, std::iter::once(b).chain(shape.iter().copied()).collect()),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| Self::batch_of(t, b)).collect()),
            Ty::Struct(i) => Ty::Batch(*i, b),
            Ty::Batch(..) | Ty::Wrap(_) | Ty::Key => unreachable!("structs hold no batches, `W`s or keys: {t:?}"),
        }
    }

    /// The fields of a struct or a batch of structs, as their types are.
    fn fields(&self, t: &Ty) -> Vec<(String, Ty)> {
        match t {
            Ty::Struct(i) => self.structs[*i].clone(),
            Ty::Batch(i, b) => self.structs[*i].iter().map(|(n, ft)| (n.clone(), Self::batch_of(ft, *b))).collect(),
            Ty::Wrap(t) => vec![("v".into(), (**t).clone()), ("k".into(), scalar(D::F))],
            _ => vec![],
        }
    }

    /// `t` with the size parameter `N` at `n`.
    fn at_n(t: &Ty, n: usize) -> Ty {
        match t {
            Ty::Arr(d, s) => Ty::Arr(*d, s.iter().map(|&x| if x == N { n } else { x }).collect()),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| Self::at_n(t, n)).collect()),
            Ty::Wrap(t) => wrap(Self::at_n(t, n)),
            other => other.clone(),
        }
    }

    fn has_n(t: &Ty) -> bool {
        match t {
            Ty::Arr(_, s) => s.contains(&N),
            Ty::Tuple(ts) => ts.iter().any(Self::has_n),
            Ty::Wrap(t) => Self::has_n(t),
            Ty::Struct(_) | Ty::Batch(..) | Ty::Key => false,
        }
    }

    // ------------------------------------------------------------ expressions

    /// An expression of type `t`, at most about `depth` deep.
    fn expr(&mut self, t: &Ty, s: &Scope, depth: usize) -> String {
        // Variables, and the parts of records in scope, that have the type.
        let mut paths = vec![];
        for (n, vt) in &s.vars {
            self.paths_to(n.clone(), vt, t, &mut paths);
        }
        if *t == Ty::Key && s.diff {
            return self.key(s, depth);
        }
        if !paths.is_empty() && (depth == 0 || self.c.chance(30)) {
            return self.c.pick(&paths).clone();
        }
        if depth == 0 || self.budget == 0 {
            return self.leaf(t, s);
        }
        self.budget -= 1;
        let d = depth - 1;
        match self.c.below(14) {
            0 => {
                let c = self.expr(&scalar(D::B), s, d);
                format!("if ({c}) {{ {} }} else {{ {} }}", self.expr(t, s, d), self.expr(t, s, d))
            }
            1 => {
                let vt = self.ty(1);
                let vt = match s.generic && self.c.chance(50) {
                    true if self.c.chance(30) => wrap(f(&[N])),
                    true => f(&[N]),
                    false => vt,
                };
                let v = self.name("v");
                let e = self.expr(&vt, s, d);
                let mut inner = s.clone();
                inner.vars.push((v.clone(), vt));
                format!("{{ let {v} = {e}; {} }}", self.expr(t, &inner, d))
            }
            2 if !s.generic => self.call(t, s, d),
            3 => self.for_loop(t, s, d),
            4 => {
                // A record built and taken apart.
                let k = self.c.below(3);
                let mut parts: Vec<Ty> = (0..2).map(|_| self.ty(0)).collect();
                parts.insert(k.min(parts.len()), t.clone());
                let k = k.min(2);
                if self.c.chance(50) && !Self::has_n(t) && Self::no_batch(t) == *t && *t != Ty::Key {
                    let fields: Vec<(String, Ty)> =
                        parts.into_iter().enumerate().map(|(i, t)| (format!("f{i}"), t)).collect();
                    self.structs.push(fields);
                    let st = Ty::Struct(self.structs.len() - 1);
                    format!("{}.f{k}", self.paren(&st, s, d))
                } else if self.c.chance(50) {
                    let names: Vec<String> = (0..parts.len()).map(|_| self.name("t")).collect();
                    let e = self.expr(&Ty::Tuple(parts.clone()), s, d);
                    let mut inner = s.clone();
                    let pats: Vec<String> = names
                        .iter()
                        .zip(&parts)
                        .enumerate()
                        .map(|(i, (n, pt))| {
                            if i != k && self.c.chance(30) {
                                "_".to_string()
                            } else {
                                inner.vars.push((n.clone(), pt.clone()));
                                n.clone()
                            }
                        })
                        .collect();
                    format!("{{ let ({}) = {e}; {} }}", pats.join(", "), self.expr(t, &inner, d))
                } else {
                    format!("{}.{k}", self.paren(&Ty::Tuple(parts), s, d))
                }
            }
            5 if Self::is_record(t) => {
                let c = self.expr(&scalar(D::B), s, d);
                format!("where({c}, {}, {})", self.expr(t, s, d), self.expr(t, s, d))
            }
            6 if Self::is_record(t) && self.all_float(t) => {
                let op = self.c.pick(&["+", "-", "*"]);
                let b = if self.c.chance(50) { self.expr(t, s, d) } else { self.float_lit() };
                format!("({} {op} {b})", self.expr(t, s, d))
            }
            7 if Self::is_record(t) && self.all_float(t) => {
                let u = self.c.pick(&["tanh", "abs", "zeros_like", "stop_gradient"]);
                format!("{u}({})", self.expr(t, s, d))
            }
            8 if !s.generic && self.all_float(t) && !Self::has_n(t) => self.grad(t, s, d),
            9 if !s.generic && self.batchable(t) => self.vmap(t, s, d),
            10 if *t != Ty::Key => format!("unwrap({})", self.expr(&wrap(t.clone()), s, d)),
            _ => match t {
                Ty::Arr(dt, shape) => self.array(*dt, shape, s, d),
                Ty::Tuple(ts) => {
                    let es: Vec<String> = ts.iter().map(|t| self.expr(t, s, d)).collect();
                    if es.len() == 1 { format!("({},)", es[0]) } else { format!("({})", es.join(", ")) }
                }
                Ty::Struct(i) => {
                    let fields = self.structs[*i].clone();
                    let fs: Vec<String> =
                        fields.iter().map(|(n, ft)| format!("{n}: {}", self.expr(ft, s, d))).collect();
                    format!("S{i} {{ {} }}", fs.join(", "))
                }
                Ty::Batch(..) => self.vmap(t, s, d),
                Ty::Wrap(vt) => format!("W {{ v: {}, k: {} }}", self.expr(vt, s, d), self.expr(&scalar(D::F), s, d)),
                Ty::Key => self.key(s, d),
            },
        }
    }

    /// `e`, parenthesised unless it is a name or a call, for a postfix operator.
    fn paren(&mut self, t: &Ty, s: &Scope, d: usize) -> String {
        format!("({})", self.expr(t, s, d))
    }

    /// Every `name.path` in a variable of type `vt` that has type `t`.
    fn paths_to(&self, at: String, vt: &Ty, t: &Ty, out: &mut Vec<String>) {
        if vt == t {
            out.push(at.clone());
        }
        match vt {
            Ty::Tuple(ts) => {
                for (i, et) in ts.iter().enumerate() {
                    self.paths_to(format!("{at}.{i}"), et, t, out);
                }
            }
            Ty::Struct(_) | Ty::Batch(..) | Ty::Wrap(_) => {
                for (n, ft) in self.fields(vt) {
                    self.paths_to(format!("{at}.{n}"), &ft, t, out);
                }
            }
            Ty::Arr(..) | Ty::Key => {}
        }
    }

    /// Every array in a variable of type `vt`, with its dtype.
    fn arrays_in(&self, at: String, vt: &Ty, out: &mut Vec<(String, D)>) {
        match vt {
            Ty::Arr(d, shape) if !shape.contains(&N) => out.push((at, *d)),
            Ty::Arr(..) | Ty::Key => {}
            Ty::Tuple(ts) => {
                for (i, et) in ts.iter().enumerate() {
                    self.arrays_in(format!("{at}.{i}"), et, out);
                }
            }
            Ty::Struct(_) | Ty::Batch(..) | Ty::Wrap(_) => {
                for (n, ft) in self.fields(vt) {
                    self.arrays_in(format!("{at}.{n}"), &ft, out);
                }
            }
        }
    }

    /// An expression with no subexpressions to speak of.
    fn leaf(&mut self, t: &Ty, s: &Scope) -> String {
        match t {
            Ty::Arr(d, shape) if shape.contains(&N) => {
                // `x0: f32[N]` is in scope in a generic helper.
                let base = if shape.len() == 1 { "x0".to_string() } else { format!("reshape(x0, [{}])", dims(shape)) };
                match d {
                    D::F => format!("({base} * {})", self.float_lit()),
                    D::B => format!("({base} > {})", self.float_lit()),
                    D::I => format!("full([{}], {})", dims(shape), self.int_lit()),
                    D::U => format!("full([{}], {} as u8)", dims(shape), self.u8_lit()),
                }
            }
            Ty::Arr(d, shape) => {
                // Mostly from what is in scope, so that results depend on the inputs.
                let mut arrays = vec![];
                for (n, vt) in &s.vars {
                    self.arrays_in(n.clone(), vt, &mut arrays);
                }
                // In a differentiated function no integer comes from a float or a bool, and
                // no float from an integer, which may have been chosen by a float (E0227).
                let usable: Vec<&(String, D)> = arrays
                    .iter()
                    .filter(|(_, from)| {
                        !s.diff || matches!((from, d), (D::F, D::F | D::B) | (D::I | D::U, D::I | D::U | D::B))
                    })
                    .collect();
                if usable.is_empty() || self.c.chance(25) {
                    return self.literal(*d, shape);
                }
                let (x, from) = (*self.c.pick(&usable)).clone();
                // (The sum of bytes is a u32.)
                let total = match from {
                    D::B => format!("(sum({x} as i32) > 0)"),
                    _ => format!("sum({x})"),
                };
                let v = match (from, d) {
                    (D::B, D::B) | (D::F, D::F) | (D::I, D::I) => total,
                    (D::B, D::F) => format!("(sum({x} as i32) as f32)"),
                    (D::B, D::I) => format!("sum({x} as i32)"),
                    (D::B, D::U) => format!("(sum({x} as i32) as u8)"),
                    (D::F, D::I) => format!("({total} as i32)"),
                    (D::I, D::F) | (D::U, D::F) => format!("({total} as f32)"),
                    (D::U, D::I) => format!("({total} as i32)"),
                    (D::F | D::I | D::U, D::U) => format!("({total} as u8)"),
                    (D::F, D::B) => format!("({total} > 0.0)"),
                    (D::I | D::U, D::B) => format!("({total} > 0)"),
                };
                if shape.is_empty() { v } else { format!("full([{}], {v})", dims(shape)) }
            }
            Ty::Tuple(ts) => {
                let es: Vec<String> = ts.iter().map(|t| self.leaf(t, s)).collect();
                if es.len() == 1 { format!("({},)", es[0]) } else { format!("({})", es.join(", ")) }
            }
            Ty::Struct(i) => {
                let fields = self.structs[*i].clone();
                let fs: Vec<String> = fields.iter().map(|(n, ft)| format!("{n}: {}", self.leaf(ft, s))).collect();
                format!("S{i} {{ {} }}", fs.join(", "))
            }
            Ty::Batch(i, b) => {
                // The one way to write a batch of structs: `vmap` of a function making one.
                let name = self.name("h");
                let one = self.leaf(&Ty::Struct(*i), &Scope { vars: vec![("z".into(), f(&[]))], ..Scope::default() });
                self.items.push(format!("fn {name}(z: f32) -> S{i} {{\n    {one}\n}}"));
                format!("vmap({name}, zeros([{b}]))")
            }
            Ty::Wrap(vt) => format!("W {{ v: {}, k: {} }}", self.leaf(vt, s), self.leaf(&scalar(D::F), s)),
            Ty::Key => format!("key({})", self.c.below(100)),
        }
    }

    fn float_lit(&mut self) -> String {
        self.c.pick(&["0.5", "1.0", "-1.5", "2.0", "0.25", "-0.75", "3.0"]).to_string()
    }

    fn int_lit(&mut self) -> String {
        self.c.pick(&["0", "1", "2", "-1", "3", "-3", "5"]).to_string()
    }

    fn u8_lit(&mut self) -> String {
        self.c.pick(&["0", "1", "2", "7", "128", "200", "255"]).to_string()
    }

    /// A literal of dtype `d`. Byte literals are typed (`(200 as u8)`): two weak ones
    /// combine as integers (`200 + 128` is the literal 328, which no u8 holds).
    fn literal(&mut self, d: D, shape: &[usize]) -> String {
        match d {
            D::U => format!("({} as u8)", self.weak_literal(d, shape)),
            D::F | D::I | D::B => self.weak_literal(d, shape),
        }
    }

    fn weak_literal(&mut self, d: D, shape: &[usize]) -> String {
        let lit = |g: &mut Gen| match d {
            D::F => g.float_lit(),
            D::I => g.int_lit(),
            D::U => g.u8_lit(),
            D::B => g.c.pick(&["true", "false"]).to_string(),
        };
        match shape {
            [] => lit(self),
            _ if self.c.chance(40) => match d {
                D::F => {
                    let mk = self.c.pick(&["zeros", "ones"]).to_string();
                    if self.c.chance(50) {
                        format!("{mk}([{}])", dims(shape))
                    } else {
                        format!("full([{}], {})", dims(shape), lit(self))
                    }
                }
                _ => format!("full([{}], {})", dims(shape), lit(self)),
            },
            [n, rest @ ..] => {
                let rows: Vec<String> = (0..*n).map(|_| self.weak_literal(d, rest)).collect();
                format!("[{}]", rows.join(", "))
            }
        }
    }

    /// A new helper returning `t`, called with arguments from this scope.
    fn call(&mut self, t: &Ty, s: &Scope, d: usize) -> String {
        // Generic over a size, when `t` is a vector: `fn g<N>(x0: f32[N], ..) -> ..[N]`.
        if let Ty::Arr(dt, shape) = t
            && shape.len() == 1
            && self.c.chance(40)
        {
            let name = self.name("g");
            // Sometimes `x1: W<f32[N]>`: `N` is then inferred through a type argument too.
            let extra = if self.c.chance(30) { wrap(f(&[N])) } else { self.ty(1) };
            let inner =
                Scope { vars: vec![("x0".into(), f(&[N])), ("x1".into(), extra.clone())], diff: s.diff, generic: true };
            let rt = Ty::Arr(*dt, vec![N]);
            let depth = self.helper_depth();
            let body = self.expr(&rt, &inner, depth);
            let item =
                format!("fn {name}<N>(x0: f32[N], x1: {}) -> {} {{\n    {body}\n}}", self.show(&extra), self.show(&rt));
            self.items.push(item);
            let a0 = self.expr(&f(shape), s, d);
            let a1 = self.expr(&Self::at_n(&extra, shape[0]), s, d);
            return format!("{name}({a0}, {a1})");
        }
        let name = self.name("h");
        let params: Vec<(String, Ty)> = (0..1 + self.c.below(3)).map(|i| (format!("a{i}"), self.ty(1))).collect();
        let inner = Scope { vars: params.clone(), diff: s.diff, generic: false };
        let depth = self.helper_depth();
        let body = self.expr(t, &inner, depth);
        let ps: Vec<String> = params.iter().map(|(n, pt)| format!("{n}: {}", self.show(pt))).collect();
        self.items.push(format!("fn {name}({}) -> {} {{\n    {body}\n}}", ps.join(", "), self.show(t)));
        let args: Vec<String> = params.iter().map(|(_, pt)| self.expr(pt, s, d)).collect();
        format!("{name}({})", args.join(", "))
    }

    /// A helper's body starts afresh (the budget still bounds the whole program).
    fn helper_depth(&mut self) -> usize {
        2 + self.c.below(2)
    }

    fn for_loop(&mut self, t: &Ty, s: &Scope, d: usize) -> String {
        let (i, c) = (self.name("i"), self.name("c"));
        let lo = self.c.below(2);
        let hi = lo + self.c.below(4);
        let init = self.expr(t, s, d);
        let mut inner = s.clone();
        inner.vars.push((i.clone(), scalar(D::I)));
        inner.vars.push((c.clone(), t.clone()));
        format!("for {i} in {lo}..{hi} carry {c} = ({init}) {{ {} }}", self.expr(t, &inner, d.max(2)))
    }

    /// `grad` (or `value_and_grad`) of a new loss with respect to a value of type `t`.
    fn grad(&mut self, t: &Ty, s: &Scope, d: usize) -> String {
        let name = self.name("loss");
        let other = self.ty(1);
        let inner =
            Scope { vars: vec![("w".into(), t.clone()), ("x".into(), other.clone())], diff: true, generic: false };
        // The loss depends on `w` at least through a penalty, whatever the body does.
        let depth = self.helper_depth();
        let body = format!("({} + 0.1 * sum(w * w))", self.expr(&scalar(D::F), &inner, depth));
        let aux = self.c.chance(30);
        let (ret, body) = if aux {
            ("(f32, f32)".to_string(), format!("{{ let l = {body}; (l, l * 2.0) }}"))
        } else {
            ("f32".into(), body)
        };
        self.items.push(format!(
            "fn {name}(w: {}, x: {}) -> {ret} {{\n    {body}\n}}",
            self.show(t),
            self.show(&other)
        ));
        let (w, x) = (self.expr(t, s, d), self.expr(&other, s, d));
        match (aux, self.c.below(2)) {
            (false, 0) => format!("grad({name}, {w}, {x})"),
            (false, _) => format!("value_and_grad({name}, {w}, {x}).1"),
            (true, 0) => format!("grad({name}, {w}, {x}).0"),
            (true, _) => format!("value_and_grad({name}, {w}, {x}).1"),
        }
    }

    /// Whether `vmap` can make a value of type `t`: arrays (or tuples of arrays) with a
    /// common leading axis.
    fn batchable(&self, t: &Ty) -> bool {
        match t {
            Ty::Arr(_, s) => !s.is_empty() && !s.contains(&N),
            Ty::Batch(..) => true,
            Ty::Tuple(ts) => {
                !ts.is_empty() && ts.iter().all(|t| self.batchable(t) && Self::lead(t) == Self::lead(&ts[0]))
            }
            Ty::Struct(_) | Ty::Wrap(_) | Ty::Key => false,
        }
    }

    /// The batch size of a batchable type.
    fn lead(t: &Ty) -> Option<usize> {
        match t {
            Ty::Arr(_, s) => s.first().copied(),
            Ty::Batch(_, b) => Some(*b),
            Ty::Tuple(ts) => ts.first().and_then(Self::lead),
            Ty::Struct(_) | Ty::Wrap(_) | Ty::Key => None,
        }
    }

    /// One example's type of a batchable type.
    fn unbatch(t: &Ty) -> Ty {
        match t {
            Ty::Arr(dt, s) => Ty::Arr(*dt, s[1..].to_vec()),
            Ty::Batch(i, _) => Ty::Struct(*i),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(Self::unbatch).collect()),
            other => other.clone(),
        }
    }

    /// `vmap` of a new per-example helper whose result, batched, has type `t`.
    fn vmap(&mut self, t: &Ty, s: &Scope, d: usize) -> String {
        let (b, rt) = (Self::lead(t).expect("batchable"), Self::unbatch(t));
        let name = self.name("e");
        let n = 1 + self.c.below(3);
        let params: Vec<(String, Ty, bool)> = (0..n)
            .map(|i| {
                // The first is batched; a batched one is an array or a struct.
                let batched = i == 0 || self.c.chance(50);
                let pt = match (batched, self.c.below(4)) {
                    (true, 0) => self.struct_ty(1, false),
                    (true, _) => {
                        let (dt, sh) = (self.dtype(), self.shape());
                        Ty::Arr(dt, sh)
                    }
                    (false, _) => self.ty(1),
                };
                (format!("a{i}"), pt, batched)
            })
            .collect();
        let inner = Scope {
            vars: params.iter().map(|(n, t, _)| (n.clone(), t.clone())).collect(),
            diff: s.diff,
            generic: false,
        };
        let depth = self.helper_depth();
        let body = self.expr(&rt, &inner, depth);
        let ps: Vec<String> = params.iter().map(|(n, pt, _)| format!("{n}: {}", self.show(pt))).collect();
        self.items.push(format!("fn {name}({}) -> {} {{\n    {body}\n}}", ps.join(", "), self.show(&rt)));
        let args: Vec<String> = params
            .iter()
            .map(
                |(_, pt, batched)| if *batched { self.expr(&Self::batch_of(pt, b), s, d) } else { self.expr(pt, s, d) },
            )
            .collect();
        format!("vmap({name}, {})", args.join(", "))
    }

    fn key(&mut self, s: &Scope, d: usize) -> String {
        // In a differentiated function a key chosen by the parameter would make the
        // draws depend on it without a derivative (E0227).
        if s.diff {
            return format!("key({})", self.c.below(1000));
        }
        let k = self.expr(&Ty::Key, s, d.min(1));
        match self.c.below(3) {
            0 => format!("split({k}).{}", self.c.below(2)),
            1 => format!("fold_in({k}, {})", self.expr(&scalar(D::I), s, d.min(1))),
            _ => format!("key({})", self.c.below(1000)),
        }
    }

    /// An array expression of a known dtype and shape.
    fn array(&mut self, dt: D, shape: &[usize], s: &Scope, d: usize) -> String {
        let sym = shape.contains(&N);
        let t = Ty::Arr(dt, shape.to_vec());
        let any = self.c.below(12);
        match any {
            // Indexing: one more leading axis, read at a static or a run-time index.
            0 if !sym => {
                let n = 1 + self.c.below(4);
                let mut big = vec![n];
                big.extend(shape);
                let x = self.paren(&Ty::Arr(dt, big), s, d);
                let i = if self.c.chance(50) {
                    format!("{}", self.c.below(2 * n) as i64 - n as i64)
                } else {
                    self.expr(&scalar(D::I), s, d.min(1))
                };
                format!("{x}[{i}]")
            }
            // A slice of a longer axis.
            1 if !sym && !shape.is_empty() => {
                let extra = self.c.below(3);
                let lo = self.c.below(extra + 1);
                let mut big = shape.to_vec();
                big[0] += extra;
                let x = self.paren(&Ty::Arr(dt, big), s, d);
                format!("{x}[{lo}:{}]", lo + shape[0])
            }
            2 if !shape.is_empty() => {
                let i = if self.c.chance(50) {
                    format!("{}", self.c.below(shape[0].min(8)))
                } else {
                    self.expr(&scalar(D::I), s, d.min(1))
                };
                let v = self.expr(&Ty::Arr(dt, shape[1..].to_vec()), s, d);
                format!("{}.set({i}, {v})", self.paren(&t, s, d))
            }
            3 if !sym => {
                // Layout: the same elements in another shape.
                match (self.c.below(3), shape) {
                    (0, [a, b]) => format!("transpose({})", self.paren(&Ty::Arr(dt, vec![*b, *a]), s, d)),
                    (1, [n, rest @ ..]) if *n >= 2 => {
                        let k = 1 + self.c.below(n - 1);
                        let mut s1 = vec![k];
                        s1.extend(rest);
                        let mut s2 = vec![n - k];
                        s2.extend(rest);
                        let (x, y) = (self.expr(&Ty::Arr(dt, s1), s, d), self.expr(&Ty::Arr(dt, s2), s, d));
                        format!("concatenate([{x}, {y}])")
                    }
                    _ => {
                        let count: usize = shape.iter().product();
                        let from = if self.c.chance(50) { vec![count] } else { vec![1, count] };
                        format!("reshape({}, [{}])", self.expr(&Ty::Arr(dt, from), s, d), dims(shape))
                    }
                }
            }
            4 if dt != D::B && !sym => {
                // A reduction over an inserted axis, or of everything.
                let (e, op) = if shape.is_empty() && self.c.chance(50) {
                    let sh = self.shape();
                    let op = match dt {
                        D::F => *self.c.pick(&["sum", "prod", "mean", "reduce_max", "reduce_min"]),
                        D::U => *self.c.pick(&["sum", "prod", "reduce_max", "reduce_min"]),
                        D::I | D::B => *self.c.pick(&["sum", "prod", "reduce_max"]),
                    };
                    (format!("{op}({})", self.expr(&Ty::Arr(dt, sh), s, d)), op)
                } else {
                    let axis = self.c.below(shape.len() + 1);
                    let mut big = shape.to_vec();
                    big.insert(axis, 1 + self.c.below(3));
                    let op = match dt {
                        D::F | D::U => *self.c.pick(&["sum", "prod", "reduce_max", "reduce_min"]),
                        D::I | D::B => *self.c.pick(&["sum", "prod"]),
                    };
                    (format!("{op}({}, {axis})", self.expr(&Ty::Arr(dt, big), s, d)), op)
                };
                // Bytes add up and multiply in u32.
                if dt == D::U && matches!(op, "sum" | "prod") { format!("({e} as u8)") } else { e }
            }
            5 if dt == D::F && !sym && shape.len() <= 2 => {
                // `@` in NumPy's four forms.
                let k = 1 + self.c.below(3);
                let (a, b) = match shape {
                    [] => (vec![k], vec![k]),
                    [m] if self.c.chance(50) => (vec![*m, k], vec![k]),
                    [m] => (vec![k], vec![k, *m]),
                    [m, n] => (vec![*m, k], vec![k, *n]),
                    _ => unreachable!(),
                };
                format!("({} @ {})", self.expr(&f(&a), s, d), self.expr(&f(&b), s, d))
            }
            6 => {
                let c = if self.c.chance(50) { scalar(D::B) } else { Ty::Arr(D::B, shape.to_vec()) };
                format!("where({}, {}, {})", self.expr(&c, s, d), self.expr(&t, s, d), self.expr(&t, s, d))
            }
            7 if !sym && dt != D::B && !s.diff => {
                // Conversions (none in a differentiated function: see `leaf`).
                let (from, ty) = match dt {
                    D::F => (*self.c.pick(&[D::I, D::U]), "f32"),
                    D::I => (*self.c.pick(&[D::F, D::U, D::B]), "i32"),
                    D::U => (*self.c.pick(&[D::F, D::I, D::B]), "u8"),
                    D::B => unreachable!("no conversion to bool is generated"),
                };
                let x = self.expr(&Ty::Arr(from, shape.to_vec()), s, d);
                // An integer literal must fit u8; typed first, an i32 wraps.
                let x = if (from, dt) == (D::I, D::U) { format!("({x} as i32)") } else { x };
                format!("({x} as {ty})")
            }
            8 if !sym && !s.generic && self.c.chance(30) => self.random(dt, shape, s, d),
            _ => match dt {
                D::F => self.float_op(shape, s, d),
                D::I => self.int_op(shape, s, d),
                D::U => self.u8_op(shape, s, d),
                D::B => self.bool_op(shape, s, d),
            },
        }
    }

    fn float_op(&mut self, shape: &[usize], s: &Scope, d: usize) -> String {
        let t = f(shape);
        match self.c.below(8) {
            0 => {
                let u = self.c.pick(&["tanh", "abs", "-", "floor", "logistic", "relu", "ceil", "round", "sign"]);
                format!("{u}({})", self.expr(&t, s, d))
            }
            // XLA's sine is accurate near zero, not to 1e-4 at 1e6 (as libm's is).
            1 if self.c.chance(50) => {
                let u = self.c.pick(&["sin", "cos"]);
                format!("{u}(clamp({}, -8.0, 8.0))", self.expr(&t, s, d))
            }
            1 => format!("exp(tanh({}))", self.expr(&t, s, d)),
            2 if self.c.chance(30) => format!("log1p(tanh({}) * 0.9)", self.expr(&t, s, d)),
            2 => {
                let u = self.c.pick(&["sqrt", "log"]);
                format!("{u}(abs({}) + 1.0)", self.expr(&t, s, d))
            }
            3 => {
                let m = self.c.pick(&["min", "max"]);
                format!("{m}({}, {})", self.expr(&t, s, d), self.operand(D::F, shape, s, d))
            }
            4 => format!("clamp({}, -1.0, 1.0)", self.expr(&t, s, d)),
            5 if !shape.is_empty() && !shape.contains(&N) => {
                let op = self.c.pick(&["softmax", "tanh"]);
                format!("{op}({})", self.expr(&t, s, d))
            }
            6 if shape.contains(&N) && s.generic => format!("({} * (N as f32))", self.expr(&t, s, d)),
            _ => {
                let op = self.c.pick(&["+", "-", "*", "+", "*", "/", "**"]);
                match *op {
                    "/" => format!("({} / {})", self.expr(&t, s, d), self.c.pick(&["2.0", "-4.0", "0.5"])),
                    "**" => format!("({} ** 2.0)", self.paren(&t, s, d)),
                    _ => format!("({} {op} {})", self.expr(&t, s, d), self.operand(D::F, shape, s, d)),
                }
            }
        }
    }

    fn int_op(&mut self, shape: &[usize], s: &Scope, d: usize) -> String {
        let t = Ty::Arr(D::I, shape.to_vec());
        let sym = shape.contains(&N);
        match self.c.below(6) {
            0 if !s.diff && !sym => {
                let k = 1 + self.c.below(4);
                let mut big = shape.to_vec();
                big.push(k);
                format!("argmax({})", self.expr(&f(&big), s, d))
            }
            1 if shape.len() == 1 && !sym => format!("arange({})", shape[0]),
            2 => {
                let op = self.c.pick(&["/", "%"]);
                format!("({} {op} {})", self.expr(&t, s, d), self.c.pick(&["2", "3", "-2"]))
            }
            3 => format!("abs({})", self.expr(&t, s, d)),
            _ => {
                let op = self.c.pick(&["+", "-", "*"]);
                format!("({} {op} {})", self.expr(&t, s, d), self.operand(D::I, shape, s, d))
            }
        }
    }

    /// Byte arithmetic, which wraps; `/` and `%` by zero are the device's (255 and `x`).
    fn u8_op(&mut self, shape: &[usize], s: &Scope, d: usize) -> String {
        let t = Ty::Arr(D::U, shape.to_vec());
        match self.c.below(6) {
            0 => {
                let op = self.c.pick(&["/", "%"]);
                let by = if self.c.chance(50) { self.u8_lit() } else { self.operand(D::U, shape, s, d) };
                format!("({} {op} {by})", self.expr(&t, s, d))
            }
            1 => {
                let u = self.c.pick(&["-", "!", "abs"]);
                format!("{u}({})", self.expr(&t, s, d))
            }
            2 => {
                let m = self.c.pick(&["min", "max"]);
                format!("{m}({}, {})", self.expr(&t, s, d), self.operand(D::U, shape, s, d))
            }
            3 => format!("clamp({}, 16, 240)", self.expr(&t, s, d)),
            _ => {
                let op = self.c.pick(&["+", "-", "*"]);
                let b = if self.c.chance(30) { self.u8_lit() } else { self.operand(D::U, shape, s, d) };
                format!("({} {op} {b})", self.expr(&t, s, d))
            }
        }
    }

    fn bool_op(&mut self, shape: &[usize], s: &Scope, d: usize) -> String {
        let t = Ty::Arr(D::B, shape.to_vec());
        match self.c.below(4) {
            0 => format!("!{}", self.paren(&t, s, d)),
            1 => {
                let op = self.c.pick(&["&&", "||"]);
                format!("({} {op} {})", self.expr(&t, s, d), self.operand(D::B, shape, s, d))
            }
            _ => {
                let dt = if shape.contains(&N) { D::F } else { *self.c.pick(&[D::F, D::I, D::U]) };
                let op = self.c.pick(&["<", "<=", ">", ">=", "==", "!="]);
                let x = Ty::Arr(dt, shape.to_vec());
                format!("({} {op} {})", self.expr(&x, s, d), self.operand(dt, shape, s, d))
            }
        }
    }

    /// A second operand: of the same shape, or one that broadcasts to it.
    fn operand(&mut self, dt: D, shape: &[usize], s: &Scope, d: usize) -> String {
        let sub = if shape.is_empty() || self.c.chance(60) {
            shape.to_vec()
        } else {
            shape[self.c.below(shape.len() + 1)..].to_vec()
        };
        self.expr(&Ty::Arr(dt, sub), s, d)
    }

    fn random(&mut self, dt: D, shape: &[usize], s: &Scope, d: usize) -> String {
        let k = self.key(s, d);
        let sh = dims(shape);
        match dt {
            D::F => match self.c.below(3) {
                0 => format!("uniform({k}, [{sh}])"),
                1 => format!("normal({k}, [{sh}])"),
                _ => format!("uniform({k}, [{sh}], -2.0, 2.0)"),
            },
            D::I => format!("randint({k}, [{sh}], {}, {})", self.int_lit(), self.expr(&scalar(D::I), s, d.min(1))),
            D::U => format!("(randint({k}, [{sh}], 0, 256) as u8)"),
            D::B => format!("bernoulli({k}, 0.5, [{sh}])"),
        }
    }

    // ------------------------------------------------------------ envs and agents

    /// An env `E` with a state struct; returns its name, observation size and action type:
    /// `i32` for `discrete(n)`, or `f32[n]` for `box(n)`, bounded or not.
    fn env(&mut self) -> (String, usize, Action) {
        let (obs, actions) = (1 + self.c.below(4), 2 + self.c.below(3));
        let (action, space) = match self.c.below(4) {
            0 => (Action::Box(actions - 1), format!("box({})", actions - 1)),
            1 => (Action::Box(actions), format!("box({actions}, -1.0, [{}])", vec!["2.5"; actions].join(", "))),
            _ => (Action::Discrete(actions), format!("discrete({actions})")),
        };
        let (a_ty, a_show) = match action {
            Action::Discrete(_) => (scalar(D::I), "i32".to_string()),
            Action::Box(n) => (f(&[n]), format!("f32[{n}]")),
        };
        let state = self.struct_ty(1, false);
        let st = self.show(&state);
        let ks = Scope { vars: vec![("key".into(), Ty::Key)], ..Scope::default() };
        let reset = self.expr(&state, &ks, 3);
        let ss = Scope {
            vars: vec![("s".into(), state.clone()), ("a".into(), a_ty), ("key".into(), Ty::Key)],
            ..Scope::default()
        };
        let next = self.expr(&state, &ss, 3);
        let reward = self.expr(&scalar(D::F), &ss, 2);
        let terminated = self.expr(&scalar(D::B), &ss, 2);
        let truncated = if self.c.chance(50) { "false".to_string() } else { self.expr(&scalar(D::B), &ss, 2) };
        // Sometimes an `auto_reset` that may keep something of the ended episode's state.
        let auto_reset = if self.c.chance(30) {
            let rs = Scope { vars: vec![("s".into(), state.clone()), ("key".into(), Ty::Key)], ..Scope::default() };
            format!("\n    fn auto_reset(s: {st}, key: Key) -> {st} {{ {} }}", self.expr(&state, &rs, 3))
        } else {
            String::new()
        };
        let os = Scope { vars: vec![("s".into(), state)], ..Scope::default() };
        let observe = self.expr(&f(&[obs]), &os, 3);
        let limit =
            if self.c.chance(50) { format!("\n    time_limit: {}", 1 + self.c.below(6)) } else { String::new() };
        self.items.push(format!(
            "env E {{
    observation: f32[{obs}]
    action: {space}{limit}
    fn reset(key: Key) -> {st} {{ {reset} }}
    fn step(s: {st}, a: {a_show}, key: Key) -> Step<{st}> {{
        Step {{ state: {next}, reward: {reward}, terminated: {terminated}, truncated: {truncated} }}
    }}
    fn observe(s: {st}) -> f32[{obs}] {{ {observe} }}{auto_reset}
}}"
        ));
        ("E".into(), obs, action)
    }

    /// An agent for the env with a fixed rollout; returns its name, steps and envs. It
    /// samples a discrete action from logits, or a `box` action around a mean; sometimes it
    /// carries a value from step to step (`initial_carry`).
    fn agent(&mut self, env: &str, obs: usize, action: Action) -> (String, usize, usize) {
        let (t, b) = (1 + self.c.below(3), 1 + self.c.below(3));
        let p = self.struct_ty(1, true);
        let ps = self.show(&p);
        let ks = Scope { vars: vec![("key".into(), Ty::Key)], ..Scope::default() };
        let init = self.expr(&p, &ks, 3);
        let act_scope = Scope { vars: vec![("p".into(), p.clone()), ("obs".into(), f(&[obs]))], ..Scope::default() };
        let (actions, traj_action, sample, ret) = match action {
            Action::Discrete(n) => {
                (n, Ty::Arr(D::I, vec![t, b]), "categorical(key, agent_logits(p, obs))".to_string(), "i32".to_string())
            }
            Action::Box(n) => {
                (n, f(&[t, b, n]), format!("agent_logits(p, obs) + normal(key, [{n}])"), format!("f32[{n}]"))
            }
        };
        let logits = self.expr(&f(&[actions]), &act_scope, 3);
        // The carry, if any: its declaration, `act`'s parameter and result, and what
        // `update` reads of `traj.carry` (an `f32` array carry adds to a metric).
        let (carry_fn, carry_param, act_ret, act_body, carry_read) = if self.c.chance(35) {
            let c = if self.c.chance(50) { f(&[1 + self.c.below(3)]) } else { self.struct_ty(1, false) };
            let cs = self.show(&c);
            let start = self.expr(&c, &Scope::default(), 2);
            let mut next_scope = act_scope.clone();
            next_scope.vars.push(("c".into(), c.clone()));
            let next = self.expr(&c, &next_scope, 3);
            let read = if matches!(c, Ty::Arr(D::F, _)) { " + sum(traj.carry)" } else { "" };
            (
                format!("\n    fn initial_carry() -> {cs} {{ {start} }}"),
                format!(", c: {cs}"),
                format!("({ret}, {cs})"),
                format!("({sample}, {next})"),
                read,
            )
        } else {
            (String::new(), String::new(), ret.clone(), sample.clone(), "")
        };
        let traj_show = self.show(&traj_action);
        let loss_scope = Scope {
            vars: vec![
                ("p".into(), p.clone()),
                ("obs".into(), f(&[t, b, obs])),
                ("action".into(), traj_action),
                ("reward".into(), f(&[t, b])),
            ],
            diff: true,
            generic: false,
        };
        let loss = self.expr(&scalar(D::F), &loss_scope, 3);
        let metric = self.expr(&scalar(D::F), &loss_scope, 2);
        let pmean = if self.c.chance(50) { "pmean(g)" } else { "g" };
        self.items.push(format!(
            "struct AgentMetrics {{ total: f32, other: f32 }}
fn agent_logits(p: {ps}, obs: f32[{obs}]) -> f32[{actions}] {{ {logits} }}
fn agent_loss(p: {ps}, obs: f32[{t}, {b}, {obs}], action: {traj_show}, reward: f32[{t}, {b}]) -> f32 {{ {loss} }}
fn agent_metric(p: {ps}, obs: f32[{t}, {b}, {obs}], action: {traj_show}, reward: f32[{t}, {b}]) -> f32 {{ {metric} }}
agent A for {env} {{
    fn init(key: Key) -> {ps} {{ {init} }}{carry_fn}
    fn act(p: {ps}{carry_param}, obs: f32[{obs}], key: Key) -> {act_ret} {{ {act_body} }}
    fn update(p: {ps}, traj: Trajectory<{t}, {b}>, key: Key) -> ({ps}, AgentMetrics) {{
        let (l, g) = value_and_grad(agent_loss, p, traj.obs, traj.action, traj.reward);
        let m = agent_metric(p, traj.obs, traj.action, traj.reward){carry_read};
        (p - 0.01 * {pmean}, AgentMetrics {{ total: l, other: m }})
    }}
}}"
        ));
        ("A".into(), t, b)
    }
}
