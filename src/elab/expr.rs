//! Expressions: literals, names, arrays, structs and fields, and the coercions of weak
//! literals to the types they meet.

use super::calls::unify_dims;
use super::*;

impl Elab<'_> {
    // ---------------------------------------------------------------- expressions

    /// Elaborates `e` where a value of type `expected` is needed (a `let` annotation, a
    /// return type, an argument): weak literals adapt, and a mismatch is reported.
    pub(crate) fn expr_expect(&mut self, e: &ast::Expr, expected: &Ty) -> Val {
        let v = self.expr_with(e, Some(expected));
        self.coerce(v, expected, tail_span(e), None)
    }

    pub(crate) fn coerce(&mut self, v: Val, expected: &Ty, span: Span, because: Option<(Span, String)>) -> Val {
        // A value that meets an expected type takes it on, and is no longer weak. An
        // erroneous one takes it on only while checking (one mistake, one diagnostic):
        // when building, it has no arrays to stand for the type's.
        if v.ty == *expected {
            let take = v.ty.is_error() && !self.building();
            return Val { ty: if take { expected.clone() } else { v.ty }, weak: false, ..v };
        }
        if let (true, Ty::Array(want, wd), Ty::Array(have, hd)) = (v.weak, expected, &v.ty)
            && wd == hd
            && (want.is_float() || !have.is_float())
        {
            return Val { weak: false, ..self.convert(v, *want, span) };
        }
        self.err(TypeError::Mismatch { expected: expected.clone(), found: v.ty, span, because })
    }

    /// Converts an array value to another dtype (weak values keep being weak).
    pub(crate) fn convert(&mut self, v: Val, to: DType, span: Span) -> Val {
        let Ty::Array(from, dims) = &v.ty else { return v };
        if *from == to {
            return v;
        }
        let ty = Ty::Array(to, dims.clone());
        if let Some(a) = &v.known {
            return match ops::cast_known(a, to, v.weak) {
                Ok(a) => self.known_val(a, ty, v.weak),
                Err(value) => self.err(TypeError::LiteralRange { value, ty: to.name().into(), span }),
            };
        }
        let vars = match self.b.as_mut() {
            Some(b) => vec![b.prim1(Prim::Convert(Convert { to }), &v.vars)],
            None => vec![],
        };
        Val { ty, vars, weak: v.weak, known: None }
    }

    /// A value known at compile time, materialised as a constant when building.
    pub(crate) fn known_val(&mut self, a: Array, ty: Ty, weak: bool) -> Val {
        let vars = match self.b.as_mut() {
            Some(b) => vec![b.prim1(Prim::Constant(Constant { value: a.clone() }), &[])],
            None => vec![],
        };
        Val { ty, vars, weak, known: Some(a) }
    }

    pub(crate) fn expr(&mut self, e: &ast::Expr) -> Val {
        self.expr_with(e, None)
    }

    /// Elaborates `e`; in build mode the values it builds remember `e`'s span (the
    /// innermost expression wins), for diagnostics about IR values (see `elab/grad.rs`).
    pub(super) fn expr_with(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Val {
        let outer = self.b.as_mut().map(|b| b.set_span(Some(e.span)));
        let v = self.expr_kind(e, expected);
        // `vmap` and `grad` build into a builder of their own meanwhile, and put this one
        // back, so this restores the span on the builder that was current at the start.
        if let (Some(b), Some(span)) = (self.b.as_mut(), outer) {
            b.set_span(span);
        }
        v
    }

    fn expr_kind(&mut self, e: &ast::Expr, expected: Option<&Ty>) -> Val {
        match &e.kind {
            ExprKind::Int(n) => match i32::try_from(*n) {
                Ok(x) => self.known_val(Array::i32(vec![], vec![x]), Ty::scalar(DType::I32), true),
                // Too big for i32: it may still fit a u32 or an f32 where one is expected.
                Err(_) => match expected {
                    Some(Ty::Array(DType::U32, d)) if d.is_empty() && *n <= u32::MAX as u64 => self.known_val(
                        Array::new(vec![], crate::array::Data::U32(vec![*n as u32])),
                        Ty::scalar(DType::U32),
                        false,
                    ),
                    _ => self.err(TypeError::LiteralRange { value: n.to_string(), ty: "i32".into(), span: e.span }),
                },
            },
            ExprKind::Float(x) => self.known_val(Array::f32(vec![], vec![*x as f32]), Ty::scalar(DType::F32), true),
            ExprKind::Bool(x) => {
                let a = Array::new(vec![], crate::array::Data::Bool(vec![*x]));
                self.known_val(a, Ty::scalar(DType::Bool), false)
            }
            ExprKind::Name(id) => self.name(id),
            ExprKind::Array(elems) => self.array_lit(elems, e.span),
            ExprKind::Tuple(elems) => {
                // Each element takes its part of an expected tuple type (for a size that
                // only a result fixes, as in `let (a, b): (f32[2], f32[3]) = (f(), g());`).
                let parts = match expected {
                    Some(Ty::Tuple(ts)) if ts.len() == elems.len() => Some(ts),
                    _ => None,
                };
                let vals: Vec<Val> =
                    elems.iter().enumerate().map(|(i, x)| self.expr_with(x, parts.map(|ts| &ts[i]))).collect();
                let ty = Ty::Tuple(vals.iter().map(|v| v.ty.clone()).collect());
                Val::of(ty, vals.into_iter().flat_map(|v| v.vars).collect())
            }
            ExprKind::Struct { name, fields } => self.struct_lit(name, fields, e.span, expected),
            ExprKind::Field(recv, field) => {
                let v = self.expr(recv);
                self.field(v, field)
            }
            ExprKind::TupleField(recv, index, span) => {
                let v = self.expr(recv);
                match &v.ty {
                    Ty::Tuple(ts) if (*index as usize) < ts.len() => self.split(&v).swap_remove(*index as usize),
                    Ty::Tuple(_) => self.err(TypeError::TupleIndex { ty: v.ty.clone(), index: *index, span: *span }),
                    Ty::Error => v,
                    _ => self.err(TypeError::NotATuple { ty: v.ty.clone(), span: recv.span }),
                }
            }
            ExprKind::Call { func, args } => self.call(func, args, None, e.span, expected),
            ExprKind::EnvCall { env, func, args } => self.env_call(env, func, args, e.span, expected),
            ExprKind::Method { receiver, method, args } => self.call(method, args, Some(receiver), e.span, expected),
            ExprKind::Index(x, idx) => self.index(x, idx, e.span),
            ExprKind::Unary(op, x) => self.unary(*op, x, e.span),
            ExprKind::Binary(op, l, r) => self.binary(*op, l, r, e.span),
            ExprKind::Cast(x, dtype) => {
                let v = self.expr(x);
                let Some(to) = DType::from_name(&dtype.name) else {
                    return self.err(TypeError::UnknownType { name: dtype.name.clone(), span: dtype.span });
                };
                match v.ty {
                    Ty::Array(..) => Val { weak: false, ..self.convert(v, to, e.span) },
                    Ty::Error => v,
                    _ => self.err(TypeError::BadOperand {
                        op: "as".into(),
                        ty: v.ty.clone(),
                        span: x.span,
                        expected: "an array".into(),
                    }),
                }
            }
            ExprKind::If { cond, then, else_ } => self.if_(cond, then, else_, expected),
            ExprKind::For { var, lo, hi, carry, init, body } => self.for_(var, lo, hi, carry, init, body),
            ExprKind::Block(b) => self.block(b, expected),
        }
    }

    pub(super) fn block(&mut self, b: &ast::Block, expected: Option<&Ty>) -> Val {
        self.scopes.push(HashMap::new());
        for s in &b.stmts {
            let v = match &s.ty {
                Some(t) => {
                    let t = self.resolve_ty(t);
                    self.expr_expect(&s.value, &t)
                }
                None => self.expr(&s.value),
            };
            self.bind(&s.pat, v);
        }
        let v = self.expr_with(&b.value, expected);
        self.scopes.pop();
        v
    }

    pub(super) fn name(&mut self, id: &ast::Ident) -> Val {
        if let Some(v) = self.lookup_local(&id.name) {
            return v.clone();
        }
        if let Some(d) = self.sizes.get(id.name.as_str()).cloned() {
            return match d {
                Dim::Known(n) => self.known_val(Array::i32(vec![], vec![n as i32]), Ty::scalar(DType::I32), true),
                Dim::Param(_) | Dim::Scaled(..) => Val { weak: true, ..Val::of(Ty::scalar(DType::I32), vec![]) },
            };
        }
        match self.prog.modules[self.module].scope.get(&id.name).copied() {
            Some(r) => match self.prog.item(r) {
                ast::Item::Const(c) => self.const_val(r, c),
                ast::Item::Fn(_) | ast::Item::Env(_) | ast::Item::Agent(_) => {
                    self.err(TypeError::NotAValue { name: id.name.clone(), span: id.span })
                }
                ast::Item::Struct(_) => {
                    self.err(TypeError::UnknownName { name: id.name.clone(), span: id.span, similar: None })
                }
            },
            None if self.unresolved(&id.name) => Val::error(),
            None => {
                let similar = self.similar_name(&id.name);
                self.err(TypeError::UnknownName { name: id.name.clone(), span: id.span, similar })
            }
        }
    }

    /// A visible name within edit distance 2, for "did you mean" help.
    pub(super) fn similar_name(&self, name: &str) -> Option<String> {
        let locals = self.scopes.iter().flat_map(|s| s.keys());
        let items = self.prog.modules[self.module].scope.keys();
        let sizes = self.sizes.keys().map(|k| k.as_ref());
        let builtins = builtins::NAMES.iter().chain(random::NAMES).chain(&["vmap"]).copied();
        locals
            .map(String::as_str)
            .chain(items.map(String::as_str))
            .chain(sizes)
            .chain(builtins)
            .filter(|c| *c != name)
            .map(|c| (crate::diag::edit_distance(c, name), c))
            .filter(|(d, c)| *d <= 2.min(c.len() / 2).max(1))
            .min()
            .map(|(_, c)| c.to_string())
    }

    pub(super) fn array_lit(&mut self, elems: &[ast::Expr], span: Span) -> Val {
        let vals: Vec<Val> = elems.iter().map(|x| self.expr(x)).collect();
        if vals.iter().any(|v| v.ty.is_error()) {
            return Val::error();
        }
        let Some(first) = vals.first() else {
            return self.err(TypeError::BadOperand {
                op: "[]".into(),
                ty: Ty::unit(),
                span,
                expected: "at least one element".into(),
            });
        };
        // The element type: the first non-weak one, else f32 if any weak element is.
        let pick =
            vals.iter().find(|v| !v.weak).or_else(|| vals.iter().find(|v| matches!(v.ty, Ty::Array(DType::F32, _))));
        let target = pick.unwrap_or(first).ty.clone();
        let weak = vals.iter().all(|v| v.weak);
        let Ty::Array(dtype, dims) = target.clone() else {
            return self.err(TypeError::BadOperand {
                op: "[]".into(),
                ty: target,
                span: elems[0].span,
                expected: "array elements".into(),
            });
        };
        let mut out = vec![];
        for (v, x) in vals.into_iter().zip(elems) {
            let v = self.coerce(v, &target, x.span, Some((elems[0].span, format!("the first element is `{target}`"))));
            if v.ty.is_error() {
                return v;
            }
            out.push(v);
        }
        let mut shape = vec![Dim::Known(out.len() as u64)];
        shape.extend(dims);
        let ty = Ty::Array(dtype, shape);
        if let Some(known) = out.iter().map(|v| v.known.clone()).collect::<Option<Vec<Array>>>() {
            return Val { weak, ..self.known_val(ops::stack_known(&known), ty, weak) };
        }
        let vars = ops::emit_stack(self.b.as_mut(), &out);
        Val { ty, vars, weak, known: None }
    }

    pub(super) fn struct_lit(
        &mut self,
        name: &ast::Ident,
        fields: &[(ast::Ident, ast::Expr)],
        span: Span,
        expected: Option<&Ty>,
    ) -> Val {
        let item = self.prog.modules[self.module].scope.get(&name.name).copied();
        // Each field gets its expected type (for a size that only a result fixes, as in
        // `Params { layer: dense_init(key) }`): from the declaration of a struct without
        // generics, else from an expected type of this struct.
        let known = match item.map(|r| (r, self.prog.item(r))) {
            Some((r, ast::Item::Struct(s))) if s.generics.is_empty() => {
                Some(self.struct_def(r, s, &[]).0.fields.clone())
            }
            Some((r, ast::Item::Struct(_))) => match expected {
                Some(Ty::Struct(def, args)) if matches!(&def.origin, Origin::Item(o, _) if *o == r) => {
                    Some(Ty::struct_fields(def, args))
                }
                _ => None,
            },
            _ => None,
        };
        let vals: Vec<Val> = fields
            .iter()
            .map(|(f, x)| {
                let expected = known.as_ref().and_then(|fs| fs.iter().find(|(n, _)| *n == f.name)).map(|(_, t)| t);
                self.expr_with(x, expected)
            })
            .collect();
        let def = match item.map(|r| (r, self.prog.item(r))) {
            Some((r, ast::Item::Struct(s))) => {
                let kinds = self.struct_kinds(r);
                let params: Vec<Rc<str>> = s
                    .generics
                    .iter()
                    .zip(&kinds)
                    .filter(|(_, k)| **k)
                    .map(|(g, _)| Rc::from(g.name.as_str()))
                    .collect();
                let mut types = super::TypeSubst::new();
                let saved = std::mem::replace(&mut self.module, r.module);
                for ((n, _), v) in fields.iter().zip(&vals) {
                    if let Some((_, decl)) = s.fields.iter().find(|(m, _)| m.name == n.name) {
                        self.bind_types(decl, &v.ty, &params, &mut types);
                    }
                }
                self.module = saved;
                let mut args = vec![];
                for p in &params {
                    match types.remove(p) {
                        Some(t) => args.push(t),
                        None if vals.iter().any(|v| v.ty.is_error()) => return Val::error(),
                        None => {
                            let (param, func) = (p.to_string(), s.name.name.clone());
                            return self.err(TypeError::CannotInferType { param, func, span });
                        }
                    }
                }
                self.struct_def(r, s, &args).0
            }
            // The built-in `Step<S>` record takes its state type from its `state` field.
            None if name.name == STEP => {
                let state = fields.iter().zip(&vals).find(|((f, _), _)| f.name == "state");
                match state {
                    Some((_, v)) if v.ty.is_error() => return Val::error(),
                    Some((_, v)) => self.step_def(v.ty.clone()),
                    None => {
                        return self.err(TypeError::MissingField { ty: STEP.into(), field: "state".into(), span });
                    }
                }
            }
            _ if self.unresolved(&name.name) => return Val::error(),
            _ => return self.err(TypeError::UnknownType { name: name.name.clone(), span: name.span }),
        };
        let mut given: HashMap<&str, (Val, Span)> = HashMap::new();
        for ((f, x), v) in fields.iter().zip(vals) {
            if !def.fields.iter().any(|(n, _)| *n == f.name) {
                let ty = Ty::Struct(def.clone(), def.generics.iter().map(|g| Dim::Param(g.clone())).collect());
                let names = def.fields.iter().map(|(n, _)| n.clone()).collect();
                self.err(TypeError::UnknownField { ty, field: f.name.clone(), span: f.span, fields: names });
            } else if let Some((_, first)) = given.get(f.name.as_str()) {
                let first = *first;
                self.err(TypeError::Duplicate { name: f.name.clone(), span: f.span, first });
            } else {
                given.insert(&f.name, (v, x.span));
            }
        }
        let mut sizes = Subst::new();
        let mut ok = true;
        for (n, t) in &def.fields {
            match given.get(n.as_str()) {
                Some((v, sp)) => ok &= self.unify(t, &v.ty, v.weak, &mut sizes, *sp),
                None => {
                    ok = false;
                    self.err(TypeError::MissingField { ty: def.name.clone(), field: n.clone(), span });
                }
            }
        }
        if !ok {
            return Val::error();
        }
        let mut args = vec![];
        for g in &def.generics {
            match sizes.get(g) {
                Some(d) => args.push(d.clone()),
                None => {
                    return self.err(TypeError::CannotInferSize { param: g.to_string(), func: def.name.clone(), span });
                }
            }
        }
        let mut vars = vec![];
        for (n, t) in Ty::struct_fields(&def, &args) {
            if let Some((v, sp)) = given.remove(n.as_str()) {
                let v = self.coerce(v, &t, sp, None);
                vars.extend(v.vars);
            }
        }
        Val::of(Ty::Struct(def, args), vars)
    }

    pub(super) fn field(&mut self, v: Val, field: &ast::Ident) -> Val {
        match &v.ty {
            Ty::Struct(def, args) => {
                let fields = Ty::struct_fields(def, args);
                match fields.iter().position(|(n, _)| *n == field.name) {
                    Some(i) => self.split(&v).swap_remove(i),
                    None => {
                        let names = fields.into_iter().map(|(n, _)| n).collect();
                        self.err(TypeError::UnknownField {
                            ty: v.ty.clone(),
                            field: field.name.clone(),
                            span: field.span,
                            fields: names,
                        })
                    }
                }
            }
            Ty::Error => v,
            _ => self.err(TypeError::NotAStruct { ty: v.ty.clone(), field: field.name.clone(), span: field.span }),
        }
    }

    /// Matches a declared type (with the callee's size parameters) against an actual one,
    /// extending `sizes`. Reports and returns false on a mismatch.
    pub(crate) fn unify(&mut self, decl: &Ty, actual: &Ty, weak: bool, sizes: &mut Subst, span: Span) -> bool {
        let mut conflict = None;
        let ok = unify_dims(decl, actual, weak, sizes, &mut conflict);
        if let Some((param, first, second)) = conflict {
            self.err(TypeError::SizeConflict { param, first, second, span });
            return false;
        }
        if !ok {
            let expected = decl.subst(sizes);
            let found = actual.clone();
            match unmatched_product(&expected, actual) {
                Some(note) => self.err(TypeError::ProductMismatch { expected, found, span, note }),
                None => self.err(TypeError::Mismatch { expected, found, span, because: None }),
            };
        }
        ok
    }
}

/// Why a product of unknown sizes in `decl`, an array of `actual`'s dtype and rank, was not
/// matched: it has several unknowns, or one that the length does not divide or root exactly.
fn unmatched_product(decl: &Ty, actual: &Ty) -> Option<String> {
    let (Ty::Array(dd, ds), Ty::Array(ad, xs)) = (decl, actual) else { return None };
    if dd != ad || ds.len() != xs.len() {
        return None;
    }
    ds.iter().zip(xs).find_map(|(d, x)| {
        let Dim::Scaled(ps, c) = d else { return None };
        let mut unknown = ps.to_vec();
        unknown.dedup();
        if unknown.len() == 1 && x.div(&Dim::Known(*c)).and_then(|q| q.root(ps.len())).is_some() {
            return None; // this product matches: the mismatch is elsewhere
        }
        Some(match (unknown.len(), ps.len(), c) {
            (1, 1, c) => format!("`{d}` is matched by dividing the length by {c}, and {x} is not a multiple of {c}"),
            (1, k, 1) => format!("`{d}` is matched by {} of the length, and {x} has no exact one", root(k)),
            (1, k, c) => {
                format!("`{d}` is matched by {} of the length divided by {c}, and {x} gives no exact one", root(k))
            }
            (u, ..) => format!(
                "`{d}` has {u} unknown sizes: a product is matched once all but one of its sizes are known from earlier arguments"
            ),
        })
    })
}

/// "the square root", "the cube root", "the 4th root".
fn root(k: usize) -> String {
    match k {
        2 => "the square root".into(),
        3 => "the cube root".into(),
        k => format!("the {k}th root"),
    }
}

/// Where a value comes from: a block's final expression rather than the whole block.
pub(super) fn tail_span(e: &ast::Expr) -> Span {
    match &e.kind {
        ExprKind::Block(b) => tail_span(&b.value),
        _ => e.span,
    }
}
