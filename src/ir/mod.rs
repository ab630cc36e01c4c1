//! The typed array IR.
//!
//! A program reaches the IR after checking, monomorphisation and inlining: what is left
//! is one [`Func`] per entry point, first-order and in SSA form. Every value is an array
//! with a dtype and a concrete shape; tuples and structs have been flattened into lists
//! of arrays (in field order), so the IR never sees them.
//!
//! A [`Graph`] is a list of equations `outs = op(args)`. Ops are either primitives
//! ([`Prim`], each with all its rules in one place under `prims/`) or the one structured
//! op, [`Op::Loop`], whose body is a nested graph. Loop bodies are closed: every value
//! they use from outside is passed in explicitly as a loop constant, as in JAX's `scan`,
//! so that transforms and lowering never deal with captures.

pub mod build;
pub mod eval;
pub mod loop_rows;
pub mod merge_hashes;
pub mod print;
pub mod verify;

use crate::array::ArrayTy;
use crate::prims::Prim;

/// An SSA value. Its type is `Func::types[var.0]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(pub u32);

/// A region: parameters, equations in order, results.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    pub params: Vec<Var>,
    pub eqns: Vec<Eqn>,
    pub results: Vec<Var>,
}

/// `outs = op(args)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Eqn {
    pub outs: Vec<Var>,
    pub op: Op,
    pub args: Vec<Var>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Prim(Prim),
    /// `for i in lo..hi` with a static trip count.
    ///
    /// `args` are `consts ++ init`, where the first `n_consts` are loop-invariant values
    /// the body reads. `body.params` are `[i, consts.., carries..]` (`i` is an i32
    /// scalar), `body.results` the next carries, and `outs` the final carries.
    Loop {
        lo: i64,
        hi: i64,
        n_consts: usize,
        body: Graph,
    },
}

/// One entry point, with the types of all its values (nested bodies included).
#[derive(Clone, Debug, PartialEq)]
pub struct Func {
    pub name: String,
    pub graph: Graph,
    pub types: Vec<ArrayTy>,
}

impl Func {
    pub fn ty(&self, v: Var) -> &ArrayTy {
        &self.types[v.0 as usize]
    }

    pub fn param_types(&self) -> Vec<ArrayTy> {
        self.graph.params.iter().map(|&v| self.ty(v).clone()).collect()
    }

    pub fn result_types(&self) -> Vec<ArrayTy> {
        self.graph.results.iter().map(|&v| self.ty(v).clone()).collect()
    }

    /// A new value of a type, for a pass to define.
    pub fn fresh(&mut self, ty: ArrayTy) -> Var {
        self.types.push(ty);
        Var(self.types.len() as u32 - 1)
    }
}

/// Appends the single-result `prim(args)` to `out` for a pass; its result is `into` if
/// given (which must have the type the primitive infers), else a new value.
fn emit(f: &mut Func, out: &mut Vec<Eqn>, prim: Prim, args: &[Var], into: Option<Var>) -> Var {
    let tys: Vec<ArrayTy> = args.iter().map(|&a| f.ty(a).clone()).collect();
    let ty = prim.rules().infer(&tys).map(|mut t| t.remove(0));
    let ty = ty.unwrap_or_else(|e| panic!("internal compiler error: a pass built an ill-typed {prim:?}: {e}"));
    let v = match into {
        Some(v) => {
            assert_eq!(f.ty(v), &ty, "internal compiler error: a pass changed a type");
            v
        }
        None => f.fresh(ty),
    };
    out.push(Eqn { outs: vec![v], op: Op::Prim(prim), args: args.to_vec() });
    v
}
