//! Surface types: what the checker assigns to every expression.
//!
//! Unlike the IR's [`ArrayTy`], a surface type may be a tuple or a
//! struct, and its dimensions may be generic size parameters, because generic functions
//! are checked once, symbolically, before they are monomorphised.

pub mod error;
pub mod shape;

use crate::array::{ArrayTy, DType};
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// One dimension: a known size, or a generic size parameter of the function being
/// checked, possibly times others and a constant (`MB * 4`, so that a batch splits into
/// minibatches; `H * W * C`, an image flattened).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Known(u64),
    Param(Rc<str>),
    /// A product of parameters (sorted, repeats allowed) times `c >= 1`: at least two
    /// parameters, or one with `c >= 2`; anything less is a `Param` or `Known`.
    Scaled(Rc<[Rc<str>]>, u64),
}

impl Dim {
    /// The parameters of the product and its constant factor.
    fn monomial(&self) -> (Vec<Rc<str>>, u64) {
        match self {
            Dim::Known(n) => (vec![], *n),
            Dim::Param(p) => (vec![p.clone()], 1),
            Dim::Scaled(ps, c) => (ps.to_vec(), *c),
        }
    }

    /// The dimension `params * c`, in its normal form.
    fn of_monomial(mut params: Vec<Rc<str>>, c: u64) -> Dim {
        params.sort();
        match (params.len(), c) {
            (0, _) | (_, 0) => Dim::Known(if params.is_empty() { c } else { 0 }),
            (1, 1) => Dim::Param(params.remove(0)),
            _ => Dim::Scaled(params.into(), c),
        }
    }

    /// The product of two sizes (`None` on overflow).
    pub fn mul(&self, other: &Dim) -> Option<Dim> {
        let ((mut ps, a), (qs, b)) = (self.monomial(), other.monomial());
        ps.extend(qs);
        Some(Dim::of_monomial(ps, a.checked_mul(b)?))
    }

    /// The `k`-th root of a product, when it is exact: of `M * M * 4` the square root is
    /// `M * 2`, of 9 it is 3.
    pub fn root(&self, k: usize) -> Option<Dim> {
        let (ps, c) = self.monomial();
        let k32 = u32::try_from(k).ok().filter(|&k| k > 0)?;
        let guess = (c as f64).powf(1.0 / k as f64).round() as u64;
        let r = (guess.saturating_sub(1)..=guess + 1).find(|r| r.checked_pow(k32) == Some(c))?;
        let mut roots = vec![];
        for p in ps.iter().step_by(k) {
            // `ps` is sorted, so each parameter's repeats are adjacent.
            if ps.iter().filter(|q| *q == p).count() % k != 0 {
                return None;
            }
            roots.push(p.clone());
        }
        Some(Dim::of_monomial(roots, r))
    }

    /// The quotient `self / other`, when `other` divides `self` exactly as a product.
    pub fn div(&self, other: &Dim) -> Option<Dim> {
        let ((mut ps, a), (qs, b)) = (self.monomial(), other.monomial());
        if b == 0 || a % b != 0 {
            return None;
        }
        for q in qs {
            let i = ps.iter().position(|p| *p == q)?;
            ps.remove(i);
        }
        Some(Dim::of_monomial(ps, a / b))
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Param(p) => f.write_str(p),
            Dim::Scaled(ps, c) => {
                f.write_str(&ps.join(" * "))?;
                if *c > 1 {
                    write!(f, " * {c}")?;
                }
                Ok(())
            }
        }
    }
}

/// A struct declaration after resolution: field types mention its size generics as
/// `Dim::Param`. A struct with type parameters (`struct Adam<P> { mu: P, .. }`) has one
/// definition per list of type arguments, with the sizes in those taken out
/// ([`Ty::abstract_sizes`]): `Adam<Params<4, 64>>` is the definition for `Params<#0, #1>`
/// at sizes 4 and 64. Its `generics` are its size parameters, then those sizes.
///
/// Two definitions are the same type when they come from the same place ([`Origin`]), not
/// when they are the same allocation: every elaborator resolves declarations afresh, and
/// a type resolved by one (an env's state, found while checking) must equal the same type
/// resolved by another (the one that builds the env's derived functions).
#[derive(Debug)]
pub struct StructDef {
    pub name: String,
    pub generics: Vec<Rc<str>>,
    pub fields: Vec<(String, Ty)>,
    pub origin: Origin,
    /// The arguments a declared struct is written with, in declared order, for messages;
    /// empty for one without arguments and for built-in records (shown with `generics`).
    pub written: Vec<Written>,
}

/// One argument of a struct as written: a size (the index of one of the definition's
/// `generics`) or a type argument (whose sizes are the definition's `generics`).
#[derive(Debug)]
pub enum Written {
    Size(usize),
    Type(Ty),
}

/// Where a struct definition comes from, which is what makes two of them the same type.
#[derive(Debug, PartialEq)]
pub enum Origin {
    /// A declared struct, with its type arguments (none unless it has type parameters).
    Item(crate::resolve::ItemRef, Vec<Ty>),
    /// A built-in record (`Step<S>`, `Trajectory<T, B>`) and the type it is made for.
    Builtin(&'static str, Ty),
    /// A batch of another struct (`State[B]`): its fields with one more leading axis, the
    /// batch size its last generic (as `vmap` batches a pytree).
    Batched(Rc<StructDef>),
}

impl PartialEq for StructDef {
    fn eq(&self, other: &StructDef) -> bool {
        self.origin == other.origin
    }
}

#[derive(Clone, Debug)]
pub enum Ty {
    Array(DType, Vec<Dim>),
    Tuple(Vec<Ty>),
    Struct(Rc<StructDef>, Vec<Dim>),
    /// The type of an expression that already has a reported error; it unifies with
    /// everything, so that one mistake gives one diagnostic.
    Error,
}

impl PartialEq for Ty {
    fn eq(&self, other: &Ty) -> bool {
        match (self, other) {
            (Ty::Array(d1, s1), Ty::Array(d2, s2)) => d1 == d2 && s1 == s2,
            (Ty::Tuple(a), Ty::Tuple(b)) => a == b,
            (Ty::Struct(a, x), Ty::Struct(b, y)) => a == b && x == y,
            (Ty::Error, _) | (_, Ty::Error) => true,
            _ => false,
        }
    }
}

/// A substitution of generic size parameters.
pub type Subst = HashMap<Rc<str>, Dim>;

impl Ty {
    pub fn scalar(dtype: DType) -> Ty {
        Ty::Array(dtype, vec![])
    }

    pub fn unit() -> Ty {
        Ty::Tuple(vec![])
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Ty::Error) || self.contains_error()
    }

    fn contains_error(&self) -> bool {
        match self {
            Ty::Array(..) => false,
            Ty::Tuple(ts) => ts.iter().any(Ty::is_error),
            Ty::Struct(..) => false,
            Ty::Error => true,
        }
    }

    /// Replaces size parameters by what `s` maps them to; unmapped ones stay.
    pub fn subst(&self, s: &Subst) -> Ty {
        match self {
            Ty::Array(d, dims) => Ty::Array(*d, dims.iter().map(|x| subst_dim(x, s)).collect()),
            Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| t.subst(s)).collect()),
            Ty::Struct(def, args) => Ty::Struct(def.clone(), args.iter().map(|x| subst_dim(x, s)).collect()),
            Ty::Error => Ty::Error,
        }
    }

    /// The type of a batch of `b` values of this type: every array in it gets a leading
    /// axis `b`. A batch of structs is a struct ([`Origin::Batched`]).
    pub fn batched(&self, b: &Dim) -> Option<Ty> {
        match self {
            Ty::Array(d, dims) => Some(Ty::Array(*d, std::iter::once(b.clone()).chain(dims.iter().cloned()).collect())),
            Ty::Tuple(ts) => ts.iter().map(|t| t.batched(b)).collect::<Option<_>>().map(Ty::Tuple),
            Ty::Struct(def, args) => {
                // The batch size is a generic of its own, named so as to differ from the inner ones.
                let size: Rc<str> = Rc::from(format!("#batch{}", def.generics.len()));
                let lead = Dim::Param(size.clone());
                let fields =
                    def.fields.iter().map(|(n, t)| Some((n.clone(), t.batched(&lead)?))).collect::<Option<_>>()?;
                let generics = def.generics.iter().cloned().chain([size]).collect();
                let origin = Origin::Batched(def.clone());
                let batch = StructDef { name: def.name.clone(), generics, fields, origin, written: vec![] };
                Some(Ty::Struct(Rc::new(batch), args.iter().cloned().chain([b.clone()]).collect()))
            }
            Ty::Error => None,
        }
    }

    /// The type of one example of a batch (the inverse of [`Ty::batched`]) and the batch
    /// size, when every array in the type has the same leading axis.
    pub fn unbatched(&self) -> Option<(Ty, Dim)> {
        match self {
            Ty::Array(d, dims) => dims.split_first().map(|(b, rest)| (Ty::Array(*d, rest.to_vec()), b.clone())),
            Ty::Tuple(ts) => {
                let parts: Vec<(Ty, Dim)> = ts.iter().map(Ty::unbatched).collect::<Option<_>>()?;
                let b = parts.first()?.1.clone();
                parts.iter().all(|(_, d)| *d == b).then(|| (Ty::Tuple(parts.into_iter().map(|(t, _)| t).collect()), b))
            }
            Ty::Struct(def, args) => match (&def.origin, args.split_last()) {
                (Origin::Batched(inner), Some((b, rest))) => {
                    Some((Ty::Struct(inner.clone(), rest.to_vec()), b.clone()))
                }
                _ => None,
            },
            Ty::Error => None,
        }
    }

    /// Type arguments with every size in them made a generic of the struct, so that
    /// `Adam<Params<4, 64>>` and `Adam<Params<C, A>>` are one struct at two sizes, as
    /// `Dense<4, 2>` and `Dense<I, O>` are: the arguments with the `k`-th size replaced by
    /// `#k` (a name no source can write), and the sizes taken out, in order.
    pub fn abstract_sizes(types: &[Ty]) -> (Vec<Ty>, Vec<Dim>) {
        fn walk(t: &Ty, sizes: &mut Vec<Dim>) -> Ty {
            let mut take = |d: &Dim| {
                sizes.push(d.clone());
                Dim::Param(Rc::from(format!("#{}", sizes.len() - 1)))
            };
            match t {
                Ty::Array(d, dims) => Ty::Array(*d, dims.iter().map(&mut take).collect()),
                Ty::Struct(def, args) => Ty::Struct(def.clone(), args.iter().map(&mut take).collect()),
                Ty::Tuple(ts) => Ty::Tuple(ts.iter().map(|t| walk(t, sizes)).collect()),
                Ty::Error => Ty::Error,
            }
        }
        let mut sizes = vec![];
        let types = types.iter().map(|t| walk(t, &mut sizes)).collect();
        (types, sizes)
    }

    /// The fields of a struct type, with its size arguments substituted.
    pub fn struct_fields(def: &StructDef, args: &[Dim]) -> Vec<(String, Ty)> {
        let s: Subst = def.generics.iter().cloned().zip(args.iter().cloned()).collect();
        def.fields.iter().map(|(n, t)| (n.clone(), t.subst(&s))).collect()
    }

    /// The arrays this type flattens to, in order (tuple elements, then struct fields in
    /// declaration order). `None` if a dimension is still symbolic.
    pub fn leaves(&self) -> Option<Vec<ArrayTy>> {
        let mut out = vec![];
        self.push_leaves(&mut out)?;
        Some(out)
    }

    fn push_leaves(&self, out: &mut Vec<ArrayTy>) -> Option<()> {
        match self {
            Ty::Array(d, dims) => {
                let shape = dims
                    .iter()
                    .map(|x| match x {
                        Dim::Known(n) => Some(*n as usize),
                        Dim::Param(_) | Dim::Scaled(..) => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                out.push(ArrayTy::new(*d, shape));
            }
            Ty::Tuple(ts) => ts.iter().try_for_each(|t| t.push_leaves(out))?,
            Ty::Struct(def, args) => Ty::struct_fields(def, args).iter().try_for_each(|(_, t)| t.push_leaves(out))?,
            Ty::Error => return None,
        }
        Some(())
    }
}

pub fn subst_dim(d: &Dim, s: &Subst) -> Dim {
    match d {
        Dim::Param(p) => s.get(p).cloned().unwrap_or_else(|| d.clone()),
        Dim::Scaled(ps, c) => ps
            .iter()
            .try_fold(Dim::Known(*c), |acc, p| acc.mul(&s.get(p).cloned().unwrap_or_else(|| Dim::Param(p.clone()))))
            .unwrap_or_else(|| d.clone()),
        Dim::Known(_) => d.clone(),
    }
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Array(d, dims) => {
                write!(f, "{d}")?;
                if !dims.is_empty() {
                    write!(f, "[{}]", join(dims))?;
                }
                Ok(())
            }
            Ty::Tuple(ts) if ts.len() == 1 => write!(f, "({},)", ts[0]),
            Ty::Tuple(ts) => write!(f, "({})", join(ts)),
            Ty::Struct(def, args) if matches!(def.origin, Origin::Batched(_)) => {
                // `State[A, B]`: the batch sizes, outermost first, after the inner type.
                let (mut t, mut sizes) = (self.clone(), vec![]);
                while let Some((inner, b)) = t.unbatched().filter(|_| matches!(&t, Ty::Struct(..))) {
                    sizes.push(b);
                    t = inner;
                }
                write!(f, "{t}[{}]", join(&sizes))
            }
            Ty::Struct(def, args) if !def.written.is_empty() => {
                let s: Subst = def.generics.iter().cloned().zip(args.iter().cloned()).collect();
                let shown: Vec<String> = def
                    .written
                    .iter()
                    .map(|w| match w {
                        Written::Size(i) => args.get(*i).map(Dim::to_string).unwrap_or_default(),
                        Written::Type(t) => t.subst(&s).to_string(),
                    })
                    .collect();
                write!(f, "{}<{}>", def.name, shown.join(", "))
            }
            Ty::Struct(def, args) if args.is_empty() => f.write_str(&def.name),
            Ty::Struct(def, args) => write!(f, "{}<{}>", def.name, join(args)),
            Ty::Error => f.write_str("{error}"),
        }
    }
}

pub fn join<T: fmt::Display>(xs: &[T]) -> String {
    xs.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::Dim;

    fn dim(ps: &[&str], c: u64) -> Dim {
        Dim::of_monomial(ps.iter().map(|&p| p.into()).collect(), c)
    }

    #[test]
    fn roots_are_exact_or_none() {
        assert_eq!(Dim::Known(9).root(2), Some(Dim::Known(3)));
        assert_eq!(Dim::Known(64).root(3), Some(Dim::Known(4)));
        assert_eq!(Dim::Known(1 << 62).root(2), Some(Dim::Known(1 << 31)));
        assert_eq!(Dim::Known(8).root(2), None);
        assert_eq!(dim(&["M", "M"], 4).root(2), Some(dim(&["M"], 2)));
        assert_eq!(dim(&["A", "A", "B", "B"], 1).root(2), Some(dim(&["A", "B"], 1)));
        assert_eq!(dim(&["A", "B"], 1).root(2), None);
        assert_eq!(dim(&["M", "M", "M"], 1).root(2), None);
        assert_eq!(dim(&["M"], 5).root(1), Some(dim(&["M"], 5)));
    }
}
