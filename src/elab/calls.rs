//! Calls of user functions: signatures, size inference by unification, and inlining.

use super::*;

impl<'p> Elab<'p> {
    // ---------------------------------------------------------------- calls

    pub(super) fn call(
        &mut self,
        func: &ast::Ident,
        args: &[ast::Expr],
        recv: Option<&ast::Expr>,
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let all: Vec<ast::Expr> = recv.into_iter().cloned().chain(args.iter().cloned()).collect();
        let user = self.prog.modules[self.module].scope.get(&func.name).copied();
        match user.map(|r| (r, self.prog.item(r))) {
            Some((r, ast::Item::Fn(f))) => self.call_user(r, f, func, &all, span, expected),
            Some(_) => {
                for a in &all {
                    self.expr(a);
                }
                self.err(TypeError::BadOperand {
                    op: "call".into(),
                    ty: Ty::Error,
                    span: func.span,
                    expected: "a function".into(),
                })
            }
            None => match self.builtin(func, &all, span) {
                Some(v) => v,
                None => {
                    for a in &all {
                        self.expr(a);
                    }
                    if self.unresolved(&func.name) {
                        return Val::error();
                    }
                    let similar = self.similar_name(&func.name);
                    self.err(TypeError::UnknownName { name: func.name.clone(), span: func.span, similar })
                }
            },
        }
    }

    pub(super) fn call_user(
        &mut self,
        r: ItemRef,
        f: &ast::Fn,
        name: &ast::Ident,
        args: &[ast::Expr],
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let vals: Vec<Val> = args.iter().map(|a| self.expr(a)).collect();
        if vals.len() != f.params.len() {
            return self.err(TypeError::Arity {
                what: format!("function `{}`", f.name.name),
                expected: f.params.len(),
                found: vals.len(),
                span,
                decl: Some(f.name.span),
            });
        }
        if let Some(caller) = self.current.filter(|_| !self.building()) {
            self.calls.push((caller, r, name.span));
        }
        if self.stack.contains(&std::ptr::from_ref(f)) {
            return self.err(TypeError::Recursive { name: f.name.name.clone(), span: name.span });
        }
        let type_params = self.fn_type_params(f);
        let mut types = TypeSubst::new();
        if !type_params.is_empty() {
            let saved = std::mem::replace(&mut self.module, r.module);
            for ((_, t), v) in f.params.iter().zip(&vals) {
                self.bind_types(t, &v.ty, &type_params, &mut types);
            }
            if let Some(exp) = expected {
                self.bind_types(&f.ret, exp, &type_params, &mut types);
            }
            self.module = saved;
            if vals.iter().any(|v| v.ty.is_error()) {
                return Val::error();
            }
            if let Some(p) = type_params.iter().find(|p| !types.contains_key(*p)) {
                let (param, func) = (p.to_string(), f.name.name.clone());
                return self.err(TypeError::CannotInferType { param, func, span: name.span });
            }
        }
        let (params, ret) = self.callee_signature(r, f, &types);

        let mut sizes = Subst::new();
        let mut ok = true;
        for ((p, v), a) in params.iter().zip(&vals).zip(args) {
            ok &= self.unify(p, &v.ty, v.weak, &mut sizes, a.span);
        }
        if !ok || vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        if let Some(exp) = expected {
            let mut trial = sizes.clone();
            if unify_dims(&ret, exp, false, &mut trial, &mut None) {
                sizes = trial;
            }
        }
        for g in f.generics.iter().filter(|g| !types.contains_key(g.name.as_str())) {
            if !sizes.contains_key(g.name.as_str()) {
                return self.err(TypeError::CannotInferSize {
                    param: g.name.clone(),
                    func: f.name.name.clone(),
                    span: name.span,
                });
            }
        }
        let ret = ret.subst(&sizes);
        if !self.building() {
            // A function with type parameters is checked here, for these types.
            if !types.is_empty() {
                let args = params.iter().map(|p| Val::of(p.subst(&sizes), vec![])).collect();
                self.stack.push(f);
                self.inline(f, r.module, sizes, types, args, &ret);
                self.stack.pop();
            }
            return Val::of(ret, vec![]);
        }
        // Build mode: inline the body with the sizes now known.
        let args: Vec<Val> = vals
            .into_iter()
            .zip(&params)
            .zip(args)
            .map(|((v, p), a)| self.coerce(v, &p.subst(&sizes), a.span, None))
            .collect();
        self.stack.push(f);
        let v = self.inline(f, r.module, sizes, types, args, &ret);
        self.stack.pop();
        v
    }

    /// `Env::f(args)`: an env's function, called as any other (so that a wrapper env can
    /// step the env it wraps).
    pub(super) fn env_call(
        &mut self,
        env: &ast::Ident,
        func: &ast::Ident,
        args: &[ast::Expr],
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let item = self.prog.modules[self.module].scope.get(&env.name).copied();
        let found = item.and_then(|r| match self.prog.item(r) {
            ast::Item::Env(e) => Some((r, e)),
            _ => None,
        });
        let target = match found {
            None => {
                Err(TypeError::EnvPath { detail: format!("`{}` is not an env in scope", env.name), span: env.span })
            }
            Some((_, e)) if e.external => Err(TypeError::ExternEnv { name: e.name.name.clone(), span: env.span }),
            Some((r, e)) => e.fns.iter().find(|f| f.name.name == func.name).map(|f| (r, f)).ok_or_else(|| {
                let detail = format!("env `{}` has no function `{}`", env.name, func.name);
                TypeError::EnvPath { detail, span: func.span }
            }),
        };
        match target {
            Ok((r, f)) => self.call_user(r, f, func, args, span, expected),
            Err(e) => {
                for a in args {
                    self.expr(a);
                }
                self.err(e)
            }
        }
    }

    /// The function that the first argument of a transform names (`vmap(f, ..)`,
    /// `grad(f, ..)`), if it names one defined with `fn`.
    pub(crate) fn named_fn(&self, e: &ast::Expr) -> Option<(ItemRef, &'p ast::Fn)> {
        let ExprKind::Name(id) = &e.kind else { return None };
        let r = self.prog.modules[self.module].scope.get(&id.name).copied()?;
        match self.prog.item(r) {
            ast::Item::Fn(f) => Some((r, f)),
            ast::Item::Const(_) | ast::Item::Struct(_) | ast::Item::Env(_) | ast::Item::Agent(_) => None,
        }
    }

    /// A function's parameter and result types, resolved in its own module with its size
    /// parameters symbolic and its type parameters bound to `types`.
    pub(crate) fn callee_signature(&mut self, r: ItemRef, f: &ast::Fn, types: &TypeSubst) -> (Vec<Ty>, Ty) {
        let saved = (
            std::mem::replace(&mut self.module, r.module),
            std::mem::replace(
                &mut self.sizes,
                f.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect(),
            ),
            std::mem::replace(&mut self.types, types.clone()),
        );
        let params: Vec<Ty> = f.params.iter().map(|(_, t)| self.resolve_ty(t)).collect();
        let ret = self.resolve_ty(&f.ret);
        (self.module, self.sizes, self.types) = saved;
        (params, ret)
    }

    /// A fresh parameter of the function being built, of a surface type with known sizes.
    pub(crate) fn param(&mut self, ty: Ty) -> Val {
        let leaves = ty.leaves().unwrap_or_default();
        let b = self.b.as_mut().expect("build mode");
        let vars = leaves.into_iter().map(|t| b.fresh(t)).collect();
        Val::of(ty, vars)
    }

    /// Elaborates a function's body with its parameters bound to `args`, its size
    /// parameters to `sizes` and its type parameters to `types` (build mode: this is
    /// inlining).
    pub(crate) fn inline(
        &mut self,
        f: &ast::Fn,
        module: usize,
        sizes: Subst,
        types: TypeSubst,
        args: Vec<Val>,
        ret: &Ty,
    ) -> Val {
        let saved = (
            std::mem::replace(&mut self.module, module),
            std::mem::replace(&mut self.sizes, sizes),
            std::mem::replace(&mut self.types, types),
            std::mem::replace(&mut self.scopes, vec![HashMap::new()]),
        );
        for ((pname, _), v) in f.params.iter().zip(args) {
            self.bind_name(&pname.name, v);
        }
        let v = self.expr_expect(&f.body_expr(), ret);
        (self.module, self.sizes, self.types, self.scopes) = saved;
        v
    }
}

/// Structural matching of a declared type against an actual one, binding the declared
/// type's size parameters. `conflict` receives a parameter bound to two different sizes.
pub(super) fn unify_dims(
    decl: &Ty,
    actual: &Ty,
    weak: bool,
    sizes: &mut Subst,
    conflict: &mut Option<(String, String, String)>,
) -> bool {
    let dims = |ds: &[Dim], xs: &[Dim], sizes: &mut Subst, conflict: &mut Option<(String, String, String)>| {
        ds.len() == xs.len()
            && ds.iter().zip(xs).all(|(d, x)| match d {
                Dim::Param(p) => match sizes.get(p) {
                    Some(bound) if bound != x => {
                        *conflict = Some((p.to_string(), bound.to_string(), x.to_string()));
                        false
                    }
                    Some(_) => true,
                    None => {
                        sizes.insert(p.clone(), x.clone());
                        true
                    }
                },
                // A product against a size: with every parameter bound, the same size;
                // with one unbound, that one is the quotient, if it divides exactly; with
                // one unbound k times (`N * N`), the quotient's exact k-th root.
                Dim::Scaled(ps, c) => {
                    let unbound: Vec<&Rc<str>> = ps.iter().filter(|p| !sizes.contains_key(*p)).collect();
                    let bound = ps
                        .iter()
                        .filter(|p| sizes.contains_key(*p))
                        .try_fold(Dim::Known(*c), |acc, p| acc.mul(&sizes[p]));
                    match (unbound.as_slice(), bound) {
                        ([], Some(b)) => b == *x,
                        ([p, rest @ ..], Some(b)) if rest.iter().all(|q| q == p) => {
                            let root = x.div(&b).and_then(|q| q.root(unbound.len()));
                            root.map(|r| sizes.insert((*p).clone(), r)).is_some()
                        }
                        _ => false,
                    }
                }
                Dim::Known(_) => d == x,
            })
    };
    match (decl, actual) {
        (_, Ty::Error) | (Ty::Error, _) => true,
        (Ty::Array(dd, ds), Ty::Array(ad, xs)) => {
            (dd == ad || (weak && (dd.is_float() || !ad.is_float()))) && dims(ds, xs, sizes, conflict)
        }
        (Ty::Tuple(a), Ty::Tuple(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| unify_dims(x, y, false, sizes, conflict))
        }
        (Ty::Struct(a, xs), Ty::Struct(b, ys)) => a == b && dims(xs, ys, sizes, conflict),
        _ => false,
    }
}
