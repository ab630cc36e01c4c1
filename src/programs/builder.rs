//! A small typed API for putting programs together from built functions: parameters,
//! inlined calls, keys (`split`, `fold_in`), draws, constants, elementwise operations,
//! reductions across replicas, loops. Values are IR variables; the keys and draws are
//! the language's own builtins (their cores in `elab`), so a derived program's random
//! bits are exactly those a user's program gets from the same calls.

use crate::array::{Array, ArrayTy, DType};
use crate::elab::{Elab, Val, array_ty};
use crate::ir::build::Builder;
use crate::ir::{Func, Var};
use crate::prims::{
    AllReduce, AllReduceOp, Binary, BinaryOp, Broadcast, Constant, Convert, DynamicUpdateSlice, Prim, Reduce, ReduceOp,
    Reshape, Select,
};
use crate::resolve::Program;
use crate::types::Dim;

pub struct ProgramBuilder<'p> {
    cx: Elab<'p>,
}

impl<'p> ProgramBuilder<'p> {
    pub fn new(prog: &'p Program) -> ProgramBuilder<'p> {
        ProgramBuilder { cx: Elab::building_only(prog) }
    }

    fn b(&mut self) -> &mut Builder {
        self.cx.b.as_mut().expect("a program builder always builds")
    }

    pub fn ty(&self, v: Var) -> &ArrayTy {
        self.cx.b.as_ref().expect("a program builder always builds").ty(v)
    }

    fn val(&self, v: Var) -> Val {
        Val::of(array_ty(self.ty(v)), vec![v])
    }

    fn var(v: Val) -> Var {
        v.vars[0]
    }

    /// A new parameter (or loop variable) of type `ty`.
    pub fn param(&mut self, ty: ArrayTy) -> Var {
        self.b().fresh(ty)
    }

    pub fn params(&mut self, tys: &[ArrayTy]) -> Vec<Var> {
        tys.iter().map(|t| self.param(t.clone())).collect()
    }

    /// A `Key` parameter, `u32[2]`.
    pub fn key_param(&mut self) -> Var {
        self.param(ArrayTy::new(DType::U32, vec![2]))
    }

    /// `f` called on `args`; its results.
    pub fn inline(&mut self, f: &Func, args: &[Var]) -> Vec<Var> {
        self.b().inline(f, args)
    }

    // ---------------------------------------------------------------- keys and draws

    /// `split(k)`.
    pub fn split2(&mut self, k: Var) -> (Var, Var) {
        let k = self.val(k);
        let pair = self.cx.split_pair(&k);
        (pair.vars[0], pair.vars[1])
    }

    /// `split(k, n)`: `u32[n, 2]`.
    pub fn split(&mut self, k: Var, n: usize) -> Var {
        let k = self.val(k);
        Self::var(self.cx.split_n(&k, n))
    }

    /// `fold_in(k, d)` for an integer scalar `d`.
    pub fn fold_in(&mut self, k: Var, d: Var) -> Var {
        let (k, d) = (self.val(k), self.val(d));
        Self::var(self.cx.fold_in(&k, &d))
    }

    /// `randint(k, shape, lo, hi)`.
    pub fn randint(&mut self, k: Var, shape: &[usize], lo: i32, hi: i32) -> Var {
        let k = self.val(k);
        let lo = self.known(Array::i32(vec![], vec![lo]));
        let hi = self.known(Array::i32(vec![], vec![hi]));
        Self::var(self.cx.randint(&k, shape, &lo, &hi))
    }

    /// `normal(k, shape)`.
    pub fn normal(&mut self, k: Var, shape: &[usize]) -> Var {
        let k = self.val(k);
        Self::var(self.cx.normal(&k, shape))
    }

    /// `uniform(k, shape)`, in `[0, 1)`.
    pub fn uniform(&mut self, k: Var, shape: &[usize]) -> Var {
        let k = self.val(k);
        Self::var(self.cx.uniform01(&k, shape))
    }

    // ---------------------------------------------------------------- arrays

    fn known(&mut self, a: Array) -> Val {
        let ty = array_ty(&a.ty());
        self.cx.known_val(a, ty, false)
    }

    /// A constant array.
    pub fn constant(&mut self, a: Array) -> Var {
        Self::var(self.known(a))
    }

    /// `full(shape, x)` for a scalar `x`, folded into one constant.
    pub fn full(&mut self, x: Array, shape: &[usize]) -> Var {
        let s = self.known(x);
        let dims: Vec<Dim> = shape.iter().map(|&d| Dim::Known(d as u64)).collect();
        Self::var(self.cx.broadcast_to(&s, &dims))
    }

    /// An elementwise binary operation on arrays of one shape.
    pub fn binary(&mut self, op: BinaryOp, a: Var, b: Var) -> Var {
        self.b().prim1(Prim::Binary(Binary { op }), &[a, b])
    }

    pub fn convert(&mut self, v: Var, to: DType) -> Var {
        if self.ty(v).dtype == to {
            return v;
        }
        self.b().prim1(Prim::Convert(Convert { to }), &[v])
    }

    /// `where(pred, a, b)`; a `pred` with fewer axes than `a` is broadcast along `a`'s
    /// leading ones (one flag per environment choosing whole rows).
    pub fn select(&mut self, pred: Var, a: Var, b: Var) -> Var {
        let shape = self.ty(a).shape.clone();
        let rank = self.ty(pred).shape.len();
        let pred = match rank < shape.len() {
            true => self.b().prim1(Prim::Broadcast(Broadcast { shape, dims: (0..rank).collect() }), &[pred]),
            false => pred,
        };
        self.b().prim1(Prim::Select(Select), &[pred, a, b])
    }

    /// The sum of all elements.
    pub fn sum(&mut self, v: Var) -> Var {
        let axes = (0..self.ty(v).shape.len()).collect();
        self.b().prim1(Prim::Reduce(Reduce { op: ReduceOp::Sum, axes }), &[v])
    }

    /// `psum(v)`: the sum across replicas.
    pub fn psum(&mut self, v: Var) -> Var {
        self.b().prim1(Prim::AllReduce(AllReduce { op: AllReduceOp::Sum }), &[v])
    }

    /// `pmean(v)`: the mean across replicas.
    pub fn pmean(&mut self, v: Var) -> Var {
        self.b().prim1(Prim::AllReduce(AllReduce { op: AllReduceOp::Mean }), &[v])
    }

    /// `buf.set([t], x)`: writes row `t` of a `[T, ...]` buffer.
    pub fn write_row(&mut self, buf: Var, x: Var, t: Var) -> Var {
        let ty = self.ty(x).clone();
        let row: Vec<usize> = std::iter::once(1).chain(ty.shape.iter().copied()).collect();
        let b = self.b();
        let x = b.prim1(Prim::Reshape(Reshape { shape: row }), &[x]);
        let zero = b.prim1(Prim::Constant(Constant { value: Array::i32(vec![], vec![0]) }), &[]);
        let mut args = vec![buf, x, t];
        args.extend(std::iter::repeat_n(zero, ty.shape.len()));
        b.prim1(Prim::DynamicUpdateSlice(DynamicUpdateSlice), &args)
    }

    // ---------------------------------------------------------------- loops and results

    /// `for i in 0..n` carrying `init`: `body(builder, i, carried)` gives the next values.
    pub fn fori(&mut self, n: usize, init: &[Var], body: impl FnOnce(&mut Self, Var, &[Var]) -> Vec<Var>) -> Vec<Var> {
        let b = self.b();
        let i = b.fresh(ArrayTy::scalar(DType::I32));
        b.begin_loop();
        let carried: Vec<Var> = init.iter().map(|&v| b.fresh(b.ty(v).clone())).collect();
        let yields = body(self, i, &carried);
        let params = std::iter::once(i).chain(carried).collect();
        self.b().end_loop(0, n as i64, init, params, yields)
    }

    /// The function, verified in debug and test builds: these programs are the compiler's
    /// own, so a malformed one is an internal error.
    pub fn finish(self, name: &str, params: Vec<Var>, results: Vec<Var>) -> Func {
        let f = self.cx.finish_internal(name, params, results);
        #[cfg(debug_assertions)]
        if let Err(e) = crate::ir::verify::verify(&f) {
            panic!("internal compiler error: `{name}` does not verify: {e}");
        }
        f
    }
}

/// The `[envs, ..]` type of a per-environment array of type `t`.
pub fn batched(t: &ArrayTy, envs: usize) -> ArrayTy {
    ArrayTy::new(t.dtype, std::iter::once(envs).chain(t.shape.iter().copied()).collect())
}
