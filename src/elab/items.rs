//! Items and types: functions, structs, consts, and the types written in source.

use super::*;
use crate::overrides::Override;

impl<'p> Elab<'p> {
    // ---------------------------------------------------------------- items

    pub(super) fn check_fn(&mut self, f: &ast::Fn) {
        // A function with type parameters is checked at each use, with them bound.
        if !self.fn_type_params(f).is_empty() {
            return;
        }
        self.sizes =
            f.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect();
        self.scopes = vec![HashMap::new()];
        let mut seen: HashMap<&str, Span> = HashMap::new();
        for (name, ty) in &f.params {
            if let Some(first) = seen.insert(&name.name, name.span) {
                self.err(TypeError::Duplicate { name: name.name.clone(), span: name.span, first });
            }
            let ty = self.resolve_ty(ty);
            self.bind_name(&name.name, Val::of(ty, vec![]));
        }
        let ret = self.resolve_ty(&f.ret);
        self.expr_expect(&f.body_expr(), &ret);
        self.scopes.clear();
        self.sizes.clear();
    }

    /// A struct's definition; for a struct with type parameters, its instance for
    /// `type_args` (one per type parameter, in order), and the sizes taken out of those,
    /// which follow the struct's own sizes among its arguments ([`Ty::abstract_sizes`]).
    pub(super) fn struct_def(&mut self, r: ItemRef, s: &ast::Struct, type_args: &[Ty]) -> (Rc<StructDef>, Vec<Dim>) {
        let kinds = self.struct_kinds(r);
        let generic = kinds.iter().any(|&k| k);
        if let Some(d) = self.structs.get(&r).filter(|_| !generic) {
            return (d.clone(), vec![]);
        }
        let (type_args, taken) = Ty::abstract_sizes(type_args);
        if let Some((_, _, d)) = self.instances.iter().find(|(i, a, _)| *i == r && *a == type_args) {
            return (d.clone(), taken);
        }
        let (mut types, mut sizes) = (type_args.iter(), 0..);
        let written = kinds
            .iter()
            .map(|&k| match k {
                true => Written::Type(types.next().cloned().unwrap_or(Ty::Error)),
                false => Written::Size(sizes.next().unwrap_or_default()),
            })
            .collect();
        let (type_params, size_params): (Vec<_>, Vec<_>) = s.generics.iter().zip(&kinds).partition(|(_, k)| **k);
        let size_params: Vec<Rc<str>> = size_params.into_iter().map(|(g, _)| Rc::from(g.name.as_str())).collect();
        let types = type_params.iter().map(|(g, _)| Rc::from(g.name.as_str())).zip(type_args.iter().cloned());
        let saved = (
            std::mem::replace(&mut self.module, r.module),
            std::mem::replace(
                &mut self.sizes,
                size_params.iter().map(|g| (g.clone(), Dim::Param(g.clone()))).collect(),
            ),
            std::mem::replace(&mut self.types, types.collect()),
        );
        let mut fields: Vec<(String, Ty)> = vec![];
        for (n, t) in &s.fields {
            if let Some(first) =
                s.fields.iter().find(|(m, _)| m.name == n.name).map(|(m, _)| m.span).filter(|sp| *sp != n.span)
                && !fields.iter().any(|(f, _)| *f == n.name)
            {
                self.err(TypeError::Duplicate { name: n.name.clone(), span: n.span, first });
            }
            let ty = self.resolve_ty(t);
            fields.push((n.name.clone(), ty));
        }
        (self.module, self.sizes, self.types) = saved;
        let generics = size_params.into_iter().chain((0..taken.len()).map(|k| Rc::from(format!("#{k}")))).collect();
        let origin = Origin::Item(r, type_args.clone());
        let def = Rc::new(StructDef { name: s.name.name.clone(), generics, fields, origin, written });
        match generic {
            false => drop(self.structs.insert(r, def.clone())),
            true => self.instances.push((r, type_args, def.clone())),
        }
        (def, taken)
    }

    /// Which generics of a struct are type parameters (see [`Elab::is_type_param`]).
    pub(super) fn struct_kinds(&mut self, r: ItemRef) -> Vec<bool> {
        if let Some(k) = self.kinds.get(&r) {
            return k.clone();
        }
        let ast::Item::Struct(s) = self.prog.item(r) else { return vec![] };
        // A struct that contains itself is reported elsewhere; stop the walk here.
        self.kinds.insert(r, vec![false; s.generics.len()]);
        let saved = std::mem::replace(&mut self.module, r.module);
        let fields: Vec<&ast::Type> = s.fields.iter().map(|(_, t)| t).collect();
        let kinds = s.generics.iter().map(|g| self.is_type_param(&g.name, &fields)).collect::<Vec<_>>();
        self.module = saved;
        self.kinds.insert(r, kinds.clone());
        kinds
    }

    /// Whether the generic `g` is a type parameter: written as a whole type somewhere in
    /// `types`, or passed where a struct takes a type. Other generics are sizes.
    pub(super) fn is_type_param(&mut self, g: &str, types: &[&ast::Type]) -> bool {
        types.iter().any(|t| match &t.kind {
            // `T[N]`: a batch of a type parameter.
            ast::TypeKind::Array { dtype, .. } => dtype.name == g && DType::from_name(g).is_none(),
            ast::TypeKind::Tuple(ts) => self.is_type_param(g, &ts.iter().collect::<Vec<_>>()),
            ast::TypeKind::Named { name, args } if args.is_empty() => name.name == g,
            ast::TypeKind::Named { name, args } => {
                let Some(r) = self.struct_ref(&name.name) else { return false };
                let kinds = self.struct_kinds(r);
                args.iter().zip(kinds).any(|(a, k)| {
                    k && match a {
                        ast::TypeArg::Dim(ast::DimExpr::Name(id)) => id.name == g,
                        ast::TypeArg::Dim(_) => false,
                        ast::TypeArg::Type(t) => self.is_type_param(g, &[t]),
                    }
                })
            }
        })
    }

    /// A function's type parameters, in order.
    pub(super) fn fn_type_params(&mut self, f: &ast::Fn) -> Vec<Rc<str>> {
        let mut types: Vec<&ast::Type> = f.params.iter().map(|(_, t)| t).collect();
        types.push(&f.ret);
        f.generics.iter().filter(|g| self.is_type_param(&g.name, &types)).map(|g| Rc::from(g.name.as_str())).collect()
    }

    fn struct_ref(&self, name: &str) -> Option<ItemRef> {
        let r = self.prog.modules[self.module].scope.get(name).copied()?;
        matches!(self.prog.item(r), ast::Item::Struct(_)).then_some(r)
    }

    /// Binds the type parameters `params` that the written type `decl` mentions to the
    /// matching parts of `actual` (first binding wins; a conflict shows up when the
    /// signature is then checked with the bindings).
    pub(super) fn bind_types(&mut self, decl: &ast::Type, actual: &Ty, params: &[Rc<str>], out: &mut TypeSubst) {
        match (&decl.kind, actual) {
            (ast::TypeKind::Named { name, args }, _) if args.is_empty() && params.iter().any(|p| **p == name.name) => {
                out.entry(Rc::from(name.name.as_str())).or_insert_with(|| actual.clone());
            }
            // `T[N, ..]` against a batch: `T` is one example of it.
            (ast::TypeKind::Array { dtype, dims }, _) if params.iter().any(|p| **p == dtype.name) => {
                let inner = dims.iter().try_fold(actual.clone(), |t, _| t.unbatched().map(|(t, _)| t));
                if let Some(inner) = inner {
                    out.entry(Rc::from(dtype.name.as_str())).or_insert(inner);
                }
            }
            (ast::TypeKind::Tuple(ds), Ty::Tuple(ts)) if ds.len() == ts.len() => {
                for (d, t) in ds.iter().zip(ts) {
                    self.bind_types(d, t, params, out);
                }
            }
            (ast::TypeKind::Named { name, args }, Ty::Struct(def, sizes)) => {
                let Origin::Item(r, type_args) = &def.origin else { return };
                if self.struct_ref(&name.name) != Some(*r) {
                    return;
                }
                let kinds = self.struct_kinds(*r);
                let sizes: Subst = def.generics.iter().cloned().zip(sizes.iter().cloned()).collect();
                let written = args.iter().zip(kinds).filter(|(_, k)| *k).map(|(a, _)| a);
                for (a, t) in written.zip(type_args) {
                    let t = t.subst(&sizes);
                    match a {
                        ast::TypeArg::Dim(ast::DimExpr::Name(id)) => {
                            let named = ast::TypeKind::Named { name: id.clone(), args: vec![] };
                            self.bind_types(&ast::Type { kind: named, span: id.span }, &t, params, out);
                        }
                        ast::TypeArg::Type(d) => self.bind_types(d, &t, params, out),
                        ast::TypeArg::Dim(_) => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// The built-in record `Step<S>` that an environment's `step` returns.
    pub(super) fn step_def(&self, state: Ty) -> Rc<StructDef> {
        let name = format!("{STEP}<{state}>");
        let fields = vec![
            ("state".to_string(), state.clone()),
            ("reward".to_string(), Ty::scalar(DType::F32)),
            ("terminated".to_string(), Ty::scalar(DType::Bool)),
            ("truncated".to_string(), Ty::scalar(DType::Bool)),
        ];
        let origin = Origin::Builtin(STEP, state);
        Rc::new(StructDef { name, generics: vec![], fields, origin, written: vec![] })
    }

    /// A const's value, evaluated once; consts must be compile-time scalars.
    pub(super) fn const_val(&mut self, r: ItemRef, c: &ast::Const) -> Val {
        if let Some(v) = self.consts.get(&r) {
            return self.rematerialize(v.clone());
        }
        // Mark it in progress, so that a const defined by itself is an error, not a loop.
        self.consts.insert(r, Val::error());
        let saved = (
            std::mem::replace(&mut self.module, r.module),
            std::mem::take(&mut self.scopes),
            std::mem::take(&mut self.sizes),
        );
        let ty = self.resolve_ty(&c.ty);
        // The written value is checked even when `--set` replaces it, but not against the
        // declared type then: the set values of other consts may change its shape
        // (`const LOW: f32[ACTIONS] = [-2.0]` with `ACTIONS` taken from an env).
        let v = match self.override_of(r, c) {
            Some(o) => {
                self.expr(&c.value);
                self.override_val(o, ty, c)
            }
            None => self.expr_expect(&c.value, &ty),
        };
        let v = if v.known.is_none() && !v.ty.is_error() {
            self.err(TypeError::NotStatic { what: "a `const` value".into(), span: c.value.span })
        } else {
            v
        };
        (self.module, self.scopes, self.sizes) = saved;
        self.consts.insert(r, Val { vars: vec![], ..v.clone() });
        self.rematerialize(v)
    }

    /// The override of a const, if it is one of the root module's and is overridden.
    fn override_of(&self, r: ItemRef, c: &ast::Const) -> Option<&'p Override> {
        (r.module == 0).then(|| self.overrides.iter().find(|o| o.name == c.name.name)).flatten()
    }

    /// A const's `--set` value, read as its declared type.
    fn override_val(&mut self, o: &Override, ty: Ty, c: &ast::Const) -> Val {
        if ty.is_error() {
            return Val::error();
        }
        let value = match ty.leaves().as_deref() {
            Some([leaf]) if matches!(ty, Ty::Array(..)) => o.read(leaf),
            _ => Err(format!("a const of type `{ty}` cannot be set from the command line")),
        };
        match value {
            Ok(a) => Val { ty, vars: vec![], weak: false, known: Some(a) },
            Err(reason) => self.err(TypeError::BadOverride {
                name: o.name.clone(),
                value: o.value.to_string(),
                ty,
                reason,
                span: c.ty.span,
            }),
        }
    }

    /// A known value's constant in the current graph (values of consts are cached
    /// across functions, their IR variables are not).
    pub(super) fn rematerialize(&mut self, v: Val) -> Val {
        match (&v.known, self.b.as_mut()) {
            (Some(a), Some(b)) => Val { vars: vec![b.prim1(Prim::Constant(Constant { value: a.clone() }), &[])], ..v },
            _ => v,
        }
    }

    // ---------------------------------------------------------------- types

    pub(crate) fn resolve_ty(&mut self, t: &ast::Type) -> Ty {
        match &t.kind {
            ast::TypeKind::Array { dtype, dims } => {
                let sizes: Option<Vec<Dim>> = dims.iter().map(|x| self.resolve_dim(x)).collect();
                let Some(d) = DType::from_name(&dtype.name) else {
                    // `State[B]`: a batch of structs.
                    let named = ast::TypeKind::Named { name: dtype.clone(), args: vec![] };
                    let inner = self.resolve_ty(&ast::Type { kind: named, span: dtype.span });
                    let batch = sizes.and_then(|s| s.iter().rev().try_fold(inner, |t, b| t.batched(b)));
                    return batch.unwrap_or(Ty::Error);
                };
                sizes.map(|dims| Ty::Array(d, dims)).unwrap_or(Ty::Error)
            }
            ast::TypeKind::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| self.resolve_ty(t)).collect()),
            ast::TypeKind::Named { name, args } => {
                if let Some(t) = self.types.get(name.name.as_str()).filter(|_| args.is_empty()) {
                    return t.clone();
                }
                let item = self.prog.modules[self.module].scope.get(&name.name).copied();
                if item.is_none() && name.name == "Key" && args.is_empty() {
                    return random::key_ty();
                }
                if let (None, super::agent::TRAJECTORY, Some(obs)) = (item, name.name.as_str(), self.trajectory.clone())
                {
                    let def = super::agent::trajectory_def(&obs);
                    if args.len() != 2 {
                        let (what, found) = (format!("`{}`", super::agent::TRAJECTORY), args.len());
                        self.err(TypeError::Arity { what, expected: 2, found, span: t.span, decl: None });
                        return Ty::Error;
                    }
                    let what = format!("`{}`", super::agent::TRAJECTORY);
                    let dims: Option<Vec<Dim>> = args.iter().map(|x| self.size_arg(x, &what)).collect();
                    return dims.map(|dims| Ty::Struct(def, dims)).unwrap_or(Ty::Error);
                }
                if let (None, STEP, [state]) = (item, name.name.as_str(), &args[..]) {
                    let state = self.type_arg(state, &format!("`{STEP}`"));
                    return if state.is_error() { state } else { Ty::Struct(self.step_def(state), vec![]) };
                }
                let Some(r) = item.filter(|r| matches!(self.prog.item(*r), ast::Item::Struct(_))) else {
                    if !self.unresolved(&name.name) {
                        self.err(TypeError::UnknownType { name: name.name.clone(), span: name.span });
                    }
                    return Ty::Error;
                };
                let ast::Item::Struct(s) = self.prog.item(r) else { unreachable!("filtered to structs") };
                if s.generics.len() != args.len() {
                    self.err(TypeError::Arity {
                        what: format!("struct `{}`", s.name.name),
                        expected: s.generics.len(),
                        found: args.len(),
                        span: t.span,
                        decl: Some(s.name.span),
                    });
                    return Ty::Error;
                }
                let kinds = self.struct_kinds(r);
                let what = format!("struct `{}`", s.name.name);
                let mut type_args = vec![];
                let mut dims = Some(vec![]);
                for (a, is_type) in args.iter().zip(kinds) {
                    match is_type {
                        true => type_args.push(self.type_arg(a, &what)),
                        false => {
                            let d = self.size_arg(a, &what);
                            dims = dims.zip(d).map(|(mut ds, d)| {
                                ds.push(d);
                                ds
                            });
                        }
                    }
                }
                if type_args.iter().any(Ty::is_error) {
                    return Ty::Error;
                }
                let (def, taken) = self.struct_def(r, s, &type_args);
                dims.map(|dims| Ty::Struct(def, dims.into_iter().chain(taken).collect())).unwrap_or(Ty::Error)
            }
        }
    }

    /// A type argument of `what`: a bare name (a dtype, a struct or a type parameter) or a
    /// written type.
    fn type_arg(&mut self, a: &ast::TypeArg, what: &str) -> Ty {
        match a {
            ast::TypeArg::Dim(ast::DimExpr::Name(id)) => {
                self.resolve_ty(&crate::syntax::parser::word_type(id.clone(), id.span))
            }
            ast::TypeArg::Type(t) => self.resolve_ty(t),
            ast::TypeArg::Dim(d) => self.err(TypeError::ExpectedType { what: what.into(), span: d.span() }).ty,
        }
    }

    /// A size argument of `what`.
    fn size_arg(&mut self, a: &ast::TypeArg, what: &str) -> Option<Dim> {
        match a {
            ast::TypeArg::Dim(d) => self.resolve_dim(d),
            ast::TypeArg::Type(t) => {
                self.err(TypeError::ExpectedSize { what: what.into(), span: t.span });
                None
            }
        }
    }

    pub(super) fn resolve_dim(&mut self, d: &ast::DimExpr) -> Option<Dim> {
        match d {
            ast::DimExpr::Lit(n, _) => Some(Dim::Known(*n)),
            ast::DimExpr::Name(id) => {
                let e = ast::Expr { kind: ExprKind::Name(id.clone()), span: id.span };
                self.static_dim(&e, "an array dimension")
            }
            ast::DimExpr::Mul(a, b) => {
                let (x, y) = (self.resolve_dim(a)?, self.resolve_dim(b)?);
                let product = x.mul(&y);
                if product.is_none() {
                    self.err(TypeError::NotStatic { what: "an array dimension".into(), span: d.span() });
                }
                product
            }
        }
    }

    /// A size known at compile time: a literal, a const, a size parameter, or `+ - *`
    /// of known sizes.
    pub(crate) fn static_dim(&mut self, e: &ast::Expr, what: &str) -> Option<Dim> {
        match self.static_int(e) {
            Ok(d) => Some(d),
            Err(true) => None,
            Err(false) => {
                self.err(TypeError::NotStatic { what: what.into(), span: e.span });
                None
            }
        }
    }

    /// `Err(true)` when an error was already reported, `Err(false)` when not static.
    pub(super) fn static_int(&mut self, e: &ast::Expr) -> Result<Dim, bool> {
        match &e.kind {
            ExprKind::Int(n) => Ok(Dim::Known(*n)),
            ExprKind::Name(id) if self.lookup_local(&id.name).is_none() => {
                if let Some(d) = self.sizes.get(id.name.as_str()) {
                    return Ok(d.clone());
                }
                let v = self.expr(e);
                match (&v.ty, &v.known) {
                    (Ty::Error, _) => Err(true),
                    (_, Some(a)) => match &a.data {
                        crate::array::Data::I32(x) if a.shape.is_empty() && x[0] >= 0 => Ok(Dim::Known(x[0] as u64)),
                        _ => Err(false),
                    },
                    _ => Err(false),
                }
            }
            ExprKind::Binary(op @ (ast::BinOp::Add | ast::BinOp::Sub | ast::BinOp::Mul), l, r) => {
                match (self.static_int(l)?, self.static_int(r)?) {
                    (Dim::Known(a), Dim::Known(b)) => match op {
                        ast::BinOp::Add => Ok(Dim::Known(a + b)),
                        ast::BinOp::Sub => a.checked_sub(b).map(Dim::Known).ok_or(false),
                        _ => Ok(Dim::Known(a * b)),
                    },
                    (x, y) if *op == ast::BinOp::Mul => x.mul(&y).ok_or(false),
                    _ => Err(false),
                }
            }
            _ => Err(false),
        }
    }
}
