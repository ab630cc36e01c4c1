//! Items and types: functions, structs, consts, and the types written in source.

use super::*;

impl Elab<'_> {
    // ---------------------------------------------------------------- items

    pub(super) fn check_fn(&mut self, f: &ast::Fn) {
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

    pub(super) fn struct_def(&mut self, r: ItemRef, s: &ast::Struct) -> Rc<StructDef> {
        if let Some(d) = self.structs.get(&r) {
            return d.clone();
        }
        let saved = (std::mem::replace(&mut self.module, r.module), std::mem::take(&mut self.sizes));
        self.sizes =
            s.generics.iter().map(|g| (Rc::from(g.name.as_str()), Dim::Param(Rc::from(g.name.as_str())))).collect();
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
        (self.module, self.sizes) = saved;
        let def = Rc::new(StructDef {
            name: s.name.name.clone(),
            generics: s.generics.iter().map(|g| Rc::from(g.name.as_str())).collect(),
            fields,
        });
        self.structs.insert(r, def.clone());
        def
    }

    /// The built-in record `Step<S>` that an environment's `step` returns: one definition
    /// per state type, so that equal types share it.
    pub(super) fn step_def(&mut self, state: Ty) -> Rc<StructDef> {
        let name = format!("{STEP}<{state}>");
        if let Some(d) = self.steps.get(&name) {
            return d.clone();
        }
        let fields = vec![
            ("state".to_string(), state),
            ("reward".to_string(), Ty::scalar(DType::F32)),
            ("terminated".to_string(), Ty::scalar(DType::Bool)),
            ("truncated".to_string(), Ty::scalar(DType::Bool)),
        ];
        let def = Rc::new(StructDef { name: name.clone(), generics: vec![], fields });
        self.steps.insert(name, def.clone());
        def
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
        let v = self.expr_expect(&c.value, &ty);
        let v = if v.known.is_none() && !v.ty.is_error() {
            self.err(TypeError::NotStatic { what: "a `const` value".into(), span: c.value.span })
        } else {
            v
        };
        (self.module, self.scopes, self.sizes) = saved;
        self.consts.insert(r, Val { vars: vec![], ..v.clone() });
        self.rematerialize(v)
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
                let Some(d) = DType::from_name(&dtype.name) else {
                    self.err(TypeError::UnknownType { name: dtype.name.clone(), span: dtype.span });
                    return Ty::Error;
                };
                let dims: Option<Vec<Dim>> = dims.iter().map(|x| self.resolve_dim(x)).collect();
                dims.map(|dims| Ty::Array(d, dims)).unwrap_or(Ty::Error)
            }
            ast::TypeKind::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| self.resolve_ty(t)).collect()),
            ast::TypeKind::Named { name, args } => {
                let item = self.prog.modules[self.module].scope.get(&name.name).copied();
                if item.is_none() && name.name == "Key" && args.is_empty() {
                    return random::key_ty();
                }
                if let (None, STEP, [ast::DimExpr::Name(state)]) = (item, name.name.as_str(), &args[..]) {
                    let span = state.span;
                    let kind = match DType::from_name(&state.name) {
                        Some(_) => ast::TypeKind::Array { dtype: state.clone(), dims: vec![] },
                        None => ast::TypeKind::Named { name: state.clone(), args: vec![] },
                    };
                    let state = self.resolve_ty(&ast::Type { kind, span });
                    return if state.is_error() { state } else { Ty::Struct(self.step_def(state), vec![]) };
                }
                let Some(r) = item.filter(|r| matches!(self.prog.item(*r), ast::Item::Struct(_))) else {
                    self.err(TypeError::UnknownType { name: name.name.clone(), span: name.span });
                    return Ty::Error;
                };
                let ast::Item::Struct(s) = self.prog.item(r) else { unreachable!("filtered to structs") };
                let def = self.struct_def(r, s);
                if def.generics.len() != args.len() {
                    self.err(TypeError::Arity {
                        what: format!("struct `{}`", def.name),
                        expected: def.generics.len(),
                        found: args.len(),
                        span: t.span,
                        decl: Some(s.name.span),
                    });
                    return Ty::Error;
                }
                let dims: Option<Vec<Dim>> = args.iter().map(|x| self.resolve_dim(x)).collect();
                dims.map(|dims| Ty::Struct(def, dims)).unwrap_or(Ty::Error)
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
                    _ => Err(false),
                }
            }
            _ => Err(false),
        }
    }
}
