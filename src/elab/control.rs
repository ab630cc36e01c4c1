//! Control flow: `if` (a select of both branches) and `for` (a loop with a static trip
//! count, closed over what it reads).

use super::*;

impl Elab<'_> {
    // ---------------------------------------------------------------- control flow

    pub(super) fn if_(&mut self, cond: &ast::Expr, then: &ast::Block, else_: &ast::Expr, expected: Option<&Ty>) -> Val {
        let c = self.expr(cond);
        let c = match &c.ty {
            Ty::Array(DType::Bool, d) if d.is_empty() => c,
            Ty::Error => c,
            _ => self.err(TypeError::Mismatch {
                expected: Ty::scalar(DType::Bool),
                found: c.ty.clone(),
                span: cond.span,
                because: None,
            }),
        };
        let t = self.block(then, expected);
        let f = self.expr_with(else_, expected);
        // Weak literals in one branch adapt to the other branch.
        let (t, f) = match (t.weak, f.weak) {
            (true, false) => (self.coerce(t.clone(), &f.ty, then.span, None), f),
            (false, true) => {
                let ty = t.ty.clone();
                (t, self.coerce(f, &ty, else_.span, None))
            }
            _ => ops::unify_weak(self, t, f, then.span, else_.span),
        };
        if t.ty.is_error() || f.ty.is_error() || c.ty.is_error() {
            return Val::error();
        }
        if t.ty != f.ty {
            return self.err(TypeError::BranchMismatch {
                then_ty: t.ty,
                else_ty: f.ty,
                then_span: then.value.span,
                else_span: else_.span,
            });
        }
        let weak = t.weak && f.weak;
        // A condition known at compile time picks its branch; the other becomes dead code.
        if let Some(crate::array::Data::Bool(b)) = c.known.as_ref().map(|a| &a.data) {
            let chosen = if b[0] { t } else { f };
            return Val { ty: chosen.ty.clone(), weak, ..chosen };
        }
        // Both branches are pure and already evaluated: choose between them, leaf by leaf.
        let vars = match self.b.as_mut() {
            Some(b) => {
                let tys: Vec<_> = t.vars.iter().map(|&v| b.ty(v).clone()).collect();
                t.vars
                    .iter()
                    .zip(&f.vars)
                    .zip(tys)
                    .map(|((&x, &y), ty)| ops::emit_select(b, c.vars[0], x, y, &ty))
                    .collect()
            }
            None => vec![],
        };
        Val { ty: t.ty, vars, weak, known: None }
    }

    pub(super) fn for_(
        &mut self,
        var: &ast::Pat,
        lo: &ast::Expr,
        hi: &ast::Expr,
        carry: &ast::Pat,
        init: &ast::Expr,
        body: &ast::Block,
    ) -> Val {
        let lo_d = self.static_dim(lo, "a loop bound");
        let hi_d = self.static_dim(hi, "a loop bound");
        let init_v = self.expr(init);
        // The carry has the init's type; a weak literal init stays weak only if the body agrees.
        let carry_ty = init_v.ty.clone();
        self.scopes.push(HashMap::new());
        let (params, carry_v, index_v) = match self.b.as_mut() {
            Some(b) => {
                let i = b.fresh(crate::array::ArrayTy::scalar(DType::I32));
                let leaves: Vec<_> = init_v.vars.iter().map(|&v| b.ty(v).clone()).collect();
                b.begin_loop();
                let cs: Vec<Var> = leaves.into_iter().map(|t| b.fresh(t)).collect();
                let mut params = vec![i];
                params.extend(cs.iter().copied());
                (params, Val::of(carry_ty.clone(), cs), Val::of(Ty::scalar(DType::I32), vec![i]))
            }
            None => (vec![], Val::of(carry_ty.clone(), vec![]), Val::of(Ty::scalar(DType::I32), vec![])),
        };
        self.bind(var, index_v);
        self.bind(carry, Val { weak: init_v.weak, ..carry_v });
        let next = self.block(body, Some(&carry_ty));
        let next = self.coerce(
            next,
            &carry_ty,
            body.value.span,
            Some((init.span, format!("the carry starts as `{carry_ty}` here"))),
        );
        self.scopes.pop();
        let (Some(Dim::Known(lo)), Some(Dim::Known(hi)), Some(b)) = (lo_d, hi_d, self.b.as_mut()) else {
            return Val::of(carry_ty, vec![]);
        };
        let outs = b.end_loop(lo as i64, hi as i64, &init_v.vars, params, next.vars);
        Val::of(carry_ty, outs)
    }
}
