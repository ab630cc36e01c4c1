//! The surface `grad(f, args...)` and `value_and_grad(f, args...)`: the derivative of a
//! scalar loss with respect to its first argument, as JAX's with `argnums=0`.
//!
//! `f` must return an `f32` scalar, and its first parameter must be made of `f32` arrays
//! (an array, or a tuple or struct of them: a pytree). `grad` returns the gradient, of
//! the first argument's type; `value_and_grad` returns `(loss, gradient)`. A function
//! that returns a pair `(loss, aux)` is differentiated through its loss, and `aux` comes
//! back too (JAX's `has_aux`): `grad` gives `(gradient, aux)`, `value_and_grad`
//! `((loss, aux), gradient)`.
//!
//! As with `vmap`, the body of `f` is built on its own, then transformed by the IR
//! transformation (`transform::grad`), and the result is inlined at the call.
//!
//! Whether a derivative exists is known only once the IR is built, so "not
//! differentiable" is reported when an entry point that differentiates is built (`podc
//! build`, `run`), not by `podc check`. To point at the offending expression, the
//! builder remembers the span each IR value was built for (`Builder::set_span`, set by
//! the elaborator for every expression), and the transform's error names a value.

use super::{Elab, Val};
use crate::array::DType;
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::{CmpOp, Prim};
use crate::syntax::ast;
use crate::syntax::span::Span;
use crate::transform::grad::{GradError, value_and_grad};
use crate::types::error::TypeError;
use crate::types::{Subst, Ty};

impl Elab<'_> {
    /// `grad(f, args...)`, or `value_and_grad(f, args...)` when `with_value`.
    pub(crate) fn grad(&mut self, name: &str, with_value: bool, args: &[ast::Expr], span: Span) -> Val {
        let Some((fname, rest)) = args.split_first() else {
            return self.err(TypeError::Arity { what: format!("`{name}`"), expected: 2, found: 0, span, decl: None });
        };
        let target = self.named_fn(fname);
        let vals: Vec<Val> = rest.iter().map(|a| self.expr(a)).collect();
        let Some((r, f)) = target else {
            if matches!(&fname.kind, ast::ExprKind::Name(id) if self.unresolved(&id.name)) {
                return Val::error();
            }
            let expected = "the name of a function defined with `fn`".into();
            return self.err(TypeError::BadOperand { op: name.into(), ty: Ty::Error, span: fname.span, expected });
        };
        if vals.len() != f.params.len() || vals.is_empty() {
            let (what, expected, decl) = if f.params.is_empty() {
                (format!("`{name}`"), 2, None)
            } else {
                (format!("function `{}`", f.name.name), f.params.len(), Some(f.name.span))
            };
            return self.err(TypeError::Arity { what, expected, found: vals.len(), span, decl });
        }
        if vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        if let Some(caller) = self.current.filter(|_| !self.building()) {
            self.calls.push((caller, r, fname.span));
        }
        if self.stack.contains(&std::ptr::from_ref(f)) {
            return self.err(TypeError::Recursive { name: f.name.name.clone(), span: fname.span });
        }
        let (params, ret) = self.callee_signature(r, f, &Default::default());
        let mut sizes = Subst::new();
        let mut ok = true;
        for ((p, v), a) in params.iter().zip(&vals).zip(rest) {
            ok &= self.unify(p, &v.ty, v.weak, &mut sizes, a.span);
        }
        if !ok {
            return Val::error();
        }
        for g in &f.generics {
            if !sizes.contains_key(g.name.as_str()) {
                return self.err(TypeError::CannotInferSize {
                    param: g.name.clone(),
                    func: f.name.name.clone(),
                    span: fname.span,
                });
            }
        }
        let ret = ret.subst(&sizes);
        let loss = Ty::scalar(DType::F32);
        let aux = match &ret {
            Ty::Tuple(ts) if ts.len() == 2 && ts[0] == loss => Some(ts[1].clone()),
            _ => None,
        };
        if ret != loss && aux.is_none() && !ret.is_error() {
            let func = f.name.name.clone();
            return self.err(TypeError::GradResult { func, found: ret, span: fname.span, ret: f.ret.span });
        }
        let param_tys: Vec<Ty> = params.iter().map(|p| p.subst(&sizes)).collect();
        let wrt_ty = param_tys[0].clone();
        if !all_f32(&wrt_ty) {
            let func = f.name.name.clone();
            return self.err(TypeError::GradArgument { func, found: wrt_ty, span: rest[0].span });
        }
        let out_ty = match (with_value, &aux) {
            (true, None) => Ty::Tuple(vec![loss, wrt_ty]),
            (true, Some(_)) => Ty::Tuple(vec![ret.clone(), wrt_ty]),
            (false, None) => wrt_ty,
            (false, Some(a)) => Ty::Tuple(vec![wrt_ty, a.clone()]),
        };
        if !self.building() {
            return Val::of(out_ty, vec![]);
        }

        // Build `f` alone, then differentiate it and inline the result here.
        let args: Vec<Var> = vals
            .into_iter()
            .zip(&param_tys)
            .zip(rest)
            .flat_map(|((v, t), a)| self.coerce(v, t, a.span, None).vars)
            .collect();
        let outer = self.b.replace(Builder::new());
        let inner_params: Vec<Val> = param_tys.iter().map(|t| self.param(t.clone())).collect();
        let wrt: Vec<bool> =
            inner_params.iter().enumerate().flat_map(|(k, p)| p.vars.iter().map(move |_| k == 0)).collect();
        let param_vars: Vec<Var> = inner_params.iter().flat_map(|v| v.vars.iter().copied()).collect();
        self.stack.push(f);
        let errors = self.diags.len();
        let out = self.inline(f, r.module, sizes, Default::default(), inner_params, &ret);
        self.stack.pop();
        let inner = std::mem::replace(&mut self.b, outer).expect("build mode");
        // An error inside `f` (a derivative it takes itself) leaves it incomplete.
        if self.diags.len() > errors {
            return Val::error();
        }
        let origins = inner.origins().to_vec();
        let n_aux = out.vars.len().saturating_sub(1);
        let func = inner.finish(&f.name.name, param_vars, out.vars);
        match value_and_grad(&func, &wrt) {
            Ok(g) => {
                let b = self.b.as_mut().expect("build mode");
                // The transform gives the loss, the auxiliary leaves, then the gradient.
                let mut outs = b.inline(&g, &args);
                if !with_value {
                    outs.remove(0);
                    outs.rotate_left(n_aux);
                }
                Val::of(out_ty, outs)
            }
            Err(GradError::NotDifferentiable { prim, at }) => {
                let at = origins.get(at.0 as usize).copied().flatten().unwrap_or(span);
                self.err(TypeError::NotDifferentiable { what: describe(&prim), span: at, call: span })
            }
        }
    }

    /// `stop_gradient(x)`: `x`, through which `grad` sees no derivative.
    pub(crate) fn stop_gradient(&mut self, e: &ast::Expr) -> Val {
        let v = self.expr(e);
        // Values known at compile time have no derivative anyway.
        if v.known.is_some() {
            return v;
        }
        let vars = match self.b.as_mut() {
            Some(b) => v.vars.iter().map(|&x| b.prim1(Prim::StopGradient(crate::prims::StopGradient), &[x])).collect(),
            None => vec![],
        };
        Val { vars, ..v }
    }
}

/// Whether every array in a type is `f32` (an erroneous type passes: it was reported).
fn all_f32(t: &Ty) -> bool {
    match t {
        Ty::Array(d, _) => *d == DType::F32,
        Ty::Tuple(ts) => ts.iter().all(all_f32),
        Ty::Struct(def, args) => Ty::struct_fields(def, args).iter().all(|(_, t)| all_f32(t)),
        Ty::Error => true,
    }
}

/// How a diagnostic names the primitive whose result has no derivative.
fn describe(prim: &Prim) -> String {
    match prim {
        Prim::Compare(c) => {
            let op = match c.op {
                CmpOp::Eq => "==",
                CmpOp::Ne => "!=",
                CmpOp::Lt => "<",
                CmpOp::Le => "<=",
                CmpOp::Gt => ">",
                CmpOp::Ge => ">=",
            };
            format!("the comparison `{op}`")
        }
        // The machinery blames a conversion to f32 when it cannot find where the integer
        // came from (through a loop carry, say).
        Prim::Convert(c) if c.to == DType::F32 => "an integer converted to `f32`".into(),
        Prim::Convert(c) => format!("the conversion to `{}`", c.to),
        p @ (Prim::Unary(_)
        | Prim::Binary(_)
        | Prim::Select(_)
        | Prim::Constant(_)
        | Prim::Iota(_)
        | Prim::Broadcast(_)
        | Prim::Reshape(_)
        | Prim::Transpose(_)
        | Prim::Concat(_)
        | Prim::Reverse(_)
        | Prim::Slice(_)
        | Prim::DynamicSlice(_)
        | Prim::DynamicUpdateSlice(_)
        | Prim::Gather(_)
        | Prim::Scatter(_)
        | Prim::Reduce(_)
        | Prim::Argmax(_)
        | Prim::Argsort(_)
        | Prim::Threefry(_)
        | Prim::Dot(_)
        | Prim::Conv(_)
        | Prim::WindowMax(_)
        | Prim::SelectAndScatterAdd(_)
        | Prim::SelectAndGatherAdd(_)
        | Prim::StopGradient(_)
        | Prim::AllReduce(_)) => format!("`{}`", p.rules().name()),
    }
}
