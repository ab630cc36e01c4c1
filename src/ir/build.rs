//! Building IR: a [`Builder`] appends equations, infers their result types through each
//! primitive's own rule, closes loop bodies over what they capture, and drops dead code.
//!
//! The builder also remembers, for each value, the source span it was built for, when
//! the elaborator says ([`Builder::set_span`]). The IR itself carries no spans; this side
//! table lets a transform's error about a value (`grad`'s "not differentiable") point at
//! the expression that made it.

use super::{Eqn, Func, Graph, Op, Var};
use crate::array::ArrayTy;
use crate::prims::Prim;
use crate::syntax::span::Span;
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct Builder {
    types: Vec<ArrayTy>,
    /// The source span each value was built for, if known.
    origins: Vec<Option<Span>>,
    /// The span given to the values built from now on.
    span: Option<Span>,
    /// Equations of the graphs being built; the last is the innermost open loop body.
    frames: Vec<Vec<Eqn>>,
}

impl Builder {
    pub fn new() -> Builder {
        Builder { types: vec![], origins: vec![], span: None, frames: vec![vec![]] }
    }

    pub fn ty(&self, v: Var) -> &ArrayTy {
        &self.types[v.0 as usize]
    }

    /// Sets the source span of the values built from now on; returns the previous one,
    /// for the caller to restore.
    pub fn set_span(&mut self, span: Option<Span>) -> Option<Span> {
        std::mem::replace(&mut self.span, span)
    }

    /// The source span each value was built for (indexed by var), where the builder
    /// was told one.
    pub fn origins(&self) -> &[Option<Span>] {
        &self.origins
    }

    /// A new value of a type, defined by whoever asks (a parameter).
    pub fn fresh(&mut self, ty: ArrayTy) -> Var {
        self.types.push(ty);
        self.origins.push(self.span);
        Var(self.types.len() as u32 - 1)
    }

    /// Appends `prim(args)` and returns its results.
    ///
    /// Panics when the primitive's type rule rejects the arguments: the checker has
    /// already accepted the program, so that is a compiler bug, not a user error.
    pub fn prim(&mut self, prim: Prim, args: &[Var]) -> Vec<Var> {
        let arg_tys: Vec<ArrayTy> = args.iter().map(|&a| self.ty(a).clone()).collect();
        let outs = match prim.rules().infer(&arg_tys) {
            Ok(t) => t,
            Err(e) => panic!("internal compiler error: {} on {arg_tys:?}: {e}", prim.rules().name()),
        };
        let outs: Vec<Var> = outs.into_iter().map(|t| self.fresh(t)).collect();
        self.push(Eqn { outs: outs.clone(), op: Op::Prim(prim), args: args.to_vec() });
        outs
    }

    /// [`Builder::prim`] for single-result primitives.
    pub fn prim1(&mut self, prim: Prim, args: &[Var]) -> Var {
        self.prim(prim, args)[0]
    }

    fn push(&mut self, eqn: Eqn) {
        self.frames.last_mut().expect("builder has a frame").push(eqn);
    }

    /// Opens a loop body; values built until [`Builder::end_loop`] belong to it.
    pub fn begin_loop(&mut self) {
        self.frames.push(vec![]);
    }

    /// Closes the innermost loop body and appends the loop.
    ///
    /// `params` are the body's `[i, carries..]` and `yields` the next carries. Every
    /// outer value the body uses becomes a loop constant, so the body is closed.
    pub fn end_loop(&mut self, lo: i64, hi: i64, init: &[Var], params: Vec<Var>, yields: Vec<Var>) -> Vec<Var> {
        let eqns = self.frames.pop().expect("end_loop after begin_loop");
        let mut defined: HashSet<Var> = params.iter().copied().collect();
        let mut captured: Vec<Var> = vec![];
        let note = |v: Var, defined: &HashSet<Var>, captured: &mut Vec<Var>| {
            if !defined.contains(&v) && !captured.contains(&v) {
                captured.push(v);
            }
        };
        for e in &eqns {
            for &a in &e.args {
                note(a, &defined, &mut captured);
            }
            defined.extend(e.outs.iter().copied());
        }
        for &y in &yields {
            note(y, &defined, &mut captured);
        }
        let renamed: HashMap<Var, Var> = captured.iter().map(|&c| (c, self.fresh(self.ty(c).clone()))).collect();
        let rename = |v: &Var| *renamed.get(v).unwrap_or(v);
        let eqns = eqns.into_iter().map(|e| Eqn { args: e.args.iter().map(rename).collect(), ..e }).collect();
        let mut body_params = vec![params[0]];
        body_params.extend(captured.iter().map(rename));
        body_params.extend_from_slice(&params[1..]);
        let body = Graph { params: body_params, eqns, results: yields.iter().map(rename).collect() };
        let outs: Vec<Var> = init.iter().map(|&v| self.fresh(self.ty(v).clone())).collect();
        let mut args = captured.clone();
        args.extend_from_slice(init);
        self.push(Eqn { outs: outs.clone(), op: Op::Loop { lo, hi, n_consts: captured.len(), body }, args });
        outs
    }

    /// Appends a copy of `f`'s body with its parameters bound to `args`; returns the
    /// values of its results. Every value of `f` gets a fresh variable here.
    pub fn inline(&mut self, f: &Func, args: &[Var]) -> Vec<Var> {
        let mut map: HashMap<Var, Var> = f.graph.params.iter().copied().zip(args.iter().copied()).collect();
        let eqns = self.copy_eqns(f, &f.graph.eqns, &mut map);
        for e in eqns {
            self.push(e);
        }
        f.graph.results.iter().map(|r| map[r]).collect()
    }

    fn copy_eqns(&mut self, f: &Func, eqns: &[Eqn], map: &mut HashMap<Var, Var>) -> Vec<Eqn> {
        eqns.iter()
            .map(|e| {
                let args = e.args.iter().map(|a| map[a]).collect();
                let op = match &e.op {
                    Op::Prim(p) => Op::Prim(p.clone()),
                    Op::Loop { lo, hi, n_consts, body } => {
                        let mut inner: HashMap<Var, Var> = HashMap::new();
                        for &p in &body.params {
                            inner.insert(p, self.fresh(f.ty(p).clone()));
                        }
                        let eqns = self.copy_eqns(f, &body.eqns, &mut inner);
                        let body = Graph {
                            params: body.params.iter().map(|p| inner[p]).collect(),
                            eqns,
                            results: body.results.iter().map(|r| inner[r]).collect(),
                        };
                        Op::Loop { lo: *lo, hi: *hi, n_consts: *n_consts, body }
                    }
                };
                let outs = e
                    .outs
                    .iter()
                    .map(|&o| {
                        let v = self.fresh(f.ty(o).clone());
                        map.insert(o, v);
                        v
                    })
                    .collect();
                Eqn { outs, op, args }
            })
            .collect()
    }

    /// Finishes the function, dropping equations whose results are never used.
    pub fn finish(mut self, name: &str, params: Vec<Var>, results: Vec<Var>) -> Func {
        let eqns = self.frames.pop().expect("builder has a frame");
        let mut graph = Graph { params, eqns, results };
        dce(&mut graph);
        Func { name: name.to_string(), graph, types: self.types }
    }
}

/// Dead-code elimination: keeps the equations that the results depend on. A loop whose
/// outputs are all unused is dropped whole; loop bodies are cleaned recursively.
pub(super) fn dce(g: &mut Graph) {
    let mut live: HashSet<Var> = g.results.iter().copied().collect();
    let mut kept = vec![];
    for mut e in std::mem::take(&mut g.eqns).into_iter().rev() {
        if e.outs.iter().any(|o| live.contains(o)) {
            if let Op::Loop { body, .. } = &mut e.op {
                dce(body);
            }
            live.extend(e.args.iter().copied());
            kept.push(e);
        }
    }
    kept.reverse();
    g.eqns = kept;
}
