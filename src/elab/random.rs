//! Random numbers: the `Key` type and the `jax.random`-compatible builtins.

use super::{Elab, Val};
use crate::array::DType;
use crate::syntax::ast;
use crate::syntax::span::Span;
use crate::types::{Dim, Ty};

/// The random builtins' names, for "did you mean" suggestions.
pub(crate) const NAMES: &[&str] = &[];

/// `Key`: a threefry2x32 key, two u32 words, as `jax.random.key_data` gives them.
pub(crate) fn key_ty() -> Ty {
    Ty::Array(DType::U32, vec![Dim::Known(2)])
}

impl Elab<'_> {
    /// Elaborates a random builtin, or returns `None` if `func` is not one.
    pub(crate) fn random(&mut self, func: &ast::Ident, args: &[ast::Expr], span: Span) -> Option<Val> {
        let _ = (func, args, span);
        None
    }
}
