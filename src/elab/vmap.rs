//! The surface `vmap(f, args...)`: `f` applied to a batch of examples at once.
//!
//! Which arguments are batched is chosen by what is passed: an argument whose type is the
//! parameter's type with one more leading axis is batched along that axis (one value per
//! example); one of the parameter's own type is shared by every example. Ranks are static,
//! so the choice is never ambiguous. A type parameter takes its argument's type as it is
//! (shared), unless that leaves nothing batched: then it takes one example's type, and
//! its arguments are batched. Every result gets the leading batch axis.
//!
//! The body of `f` is built on its own, then batched by the IR transformation
//! (`transform::vmap`), so the surface form and the compiler's own batching are one
//! mechanism.

use super::{Elab, TypeSubst, Val};
use crate::ir::Var;
use crate::ir::build::Builder;
use crate::prims::batching::{BVal, bdim_at};
use crate::resolve::ItemRef;
use crate::syntax::ast;
use crate::syntax::span::Span;
use crate::transform::vmap::batch_into;
use crate::types::error::TypeError;
use crate::types::{Dim, Subst, Ty};
use std::rc::Rc;

impl Elab<'_> {
    /// `vmap(f, args...)`.
    pub(crate) fn vmap(&mut self, args: &[ast::Expr], span: Span) -> Val {
        let Some((fname, rest)) = args.split_first() else {
            return self.err(TypeError::Arity { what: "`vmap`".into(), expected: 2, found: 0, span, decl: None });
        };
        let target = self.named_fn(fname);
        let vals: Vec<Val> = rest.iter().map(|a| self.expr(a)).collect();
        let Some((r, f)) = target else {
            if matches!(&fname.kind, ast::ExprKind::Name(id) if self.unresolved(&id.name)) {
                return Val::error();
            }
            let expected = "the name of a function defined with `fn`".into();
            return self.err(TypeError::BadOperand { op: "vmap".into(), ty: Ty::Error, span: fname.span, expected });
        };
        if vals.len() != f.params.len() {
            return self.err(TypeError::Arity {
                what: format!("function `{}`", f.name.name),
                expected: f.params.len(),
                found: vals.len(),
                span,
                decl: Some(f.name.span),
            });
        }
        if vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        if let Some(caller) = self.current.filter(|_| !self.building()) {
            self.calls.push((caller, r, fname.span));
        }
        // A type parameter is bound to its argument as it is (shared); only when that
        // leaves nothing batched, to one example of it (batched along its leading axis).
        let type_params = self.fn_type_params(f);
        let mut attempt = self.vmap_batching(r, f, &vals, rest, &type_params, false);
        if !type_params.is_empty() && matches!(&attempt, Some(Batching { batch: None, .. })) {
            attempt = self.vmap_batching(r, f, &vals, rest, &type_params, true);
        }
        // Its errors are reported.
        let Some(Batching { types, params, ret, sizes, batch, batched }) = attempt else { return Val::error() };
        let Some((b, _)) = batch else {
            let detail = "no argument has a batch axis";
            return self.err(TypeError::Vmap { detail: detail.into(), span });
        };
        for g in f.generics.iter().filter(|g| !types.contains_key(g.name.as_str())) {
            if !sizes.contains_key(g.name.as_str()) {
                return self.err(TypeError::CannotInferSize {
                    param: g.name.clone(),
                    func: f.name.name.clone(),
                    span: fname.span,
                });
            }
        }
        let ret = ret.subst(&sizes);
        let Some(out_ty) = ret.batched(&b) else {
            let detail = format!("`{}` returns `{ret}`, which has no arrays to batch", f.name.name);
            return self.err(TypeError::Vmap { detail, span: fname.span });
        };
        if !self.building() {
            // A function with type parameters is checked here, for these types.
            if !types.is_empty() {
                let args = params.iter().map(|p| Val::of(p.subst(&sizes), vec![])).collect();
                self.stack.push(f);
                self.inline(f, r.module, sizes, types, args, &ret);
                self.stack.pop();
            }
            return Val::of(out_ty, vec![]);
        }
        let Dim::Known(size) = b else { unreachable!("sizes are known when building") };
        // Build `f` alone, on unbatched parameters, then batch it into this function.
        let param_tys: Vec<Ty> = params.iter().map(|p| p.subst(&sizes)).collect();
        let outer = self.b.replace(Builder::new());
        let inner_params: Vec<Val> = param_tys.iter().map(|t| self.param(t.clone())).collect();
        let param_vars: Vec<Var> = inner_params.iter().flat_map(|v| v.vars.iter().copied()).collect();
        self.stack.push(f);
        let out = self.inline(f, r.module, sizes, types, inner_params, &ret);
        self.stack.pop();
        let inner = std::mem::replace(&mut self.b, outer).expect("build mode");
        let func = inner.finish(&f.name.name, param_vars, out.vars);
        let mut args = vec![];
        for ((v, is_batched), t) in vals.into_iter().zip(&batched).zip(&param_tys) {
            let v = if *is_batched { v } else { self.coerce(v, t, span, None) };
            args.extend(v.vars.iter().map(|&x| if *is_batched { BVal::batched(x, 0) } else { BVal::unbatched(x) }));
        }
        let b = self.b.as_mut().expect("build mode");
        let outs = batch_into(b, &func, &args, size as usize);
        let vars = outs.into_iter().map(|o| bdim_at(b, o, 0, size as usize)).collect();
        Val::of(out_ty, vars)
    }

    /// Which arguments of `vmap(f, ..)` are batched, with `f`'s type parameters bound from
    /// the arguments as they are, or (`peel`) from one example of each; `None` after
    /// reporting why they cannot be.
    fn vmap_batching(
        &mut self,
        r: ItemRef,
        f: &ast::Fn,
        vals: &[Val],
        rest: &[ast::Expr],
        type_params: &[Rc<str>],
        peel: bool,
    ) -> Option<Batching> {
        let mut types = TypeSubst::new();
        if !type_params.is_empty() {
            let saved = std::mem::replace(&mut self.module, r.module);
            for ((_, t), v) in f.params.iter().zip(vals) {
                let ty = match v.ty.unbatched() {
                    Some((one, _)) if peel => one,
                    _ => v.ty.clone(),
                };
                self.bind_types(t, &ty, type_params, &mut types);
            }
            self.module = saved;
            if let Some(p) = type_params.iter().find(|p| !types.contains_key(*p)) {
                let (param, func) = (p.to_string(), f.name.name.clone());
                self.err(TypeError::CannotInferType { param, func, span: rest[0].span });
                return None;
            }
        }
        let (params, ret) = self.callee_signature(r, f, &types);
        let mut sizes = Subst::new();
        let mut batch: Option<(Dim, Span)> = None;
        let mut batched = vec![];
        for ((p, v), a) in params.iter().zip(vals).zip(rest) {
            let mut trial = sizes.clone();
            if super::calls::unify_dims(p, &v.ty, v.weak, &mut trial, &mut None) {
                sizes = trial;
                batched.push(false);
                continue;
            }
            let Some((inner, b)) = v.ty.unbatched() else {
                self.err(TypeError::Mismatch {
                    expected: p.subst(&sizes),
                    found: v.ty.clone(),
                    span: a.span,
                    because: None,
                });
                return None;
            };
            match &batch {
                Some((first, _)) if *first != b => {
                    let (param, first, second) = ("batch size".to_string(), first.to_string(), b.to_string());
                    self.err(TypeError::SizeConflict { param, first, second, span: a.span });
                    return None;
                }
                _ => batch = Some((b, a.span)),
            }
            if !self.unify(p, &inner, v.weak, &mut sizes, a.span) {
                return None;
            }
            batched.push(true);
        }
        Some(Batching { types, params, ret, sizes, batch, batched })
    }
}

/// How `vmap(f, ..)` batches its arguments.
struct Batching {
    /// `f`'s type parameters, bound.
    types: TypeSubst,
    /// `f`'s parameter types and result type with them.
    params: Vec<Ty>,
    ret: Ty,
    /// `f`'s sizes, from the arguments (one example of each batched one).
    sizes: Subst,
    /// The batch size and the argument it was first found on; `None` if nothing is batched.
    batch: Option<(Dim, Span)>,
    /// Per argument, whether it is batched.
    batched: Vec<bool>,
}
