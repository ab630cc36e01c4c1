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
}
