//! The surface `conv2d` and `max_pool`: one example, channels last (flax's NHWC and
//! HWIO without the batch; `vmap` adds it). Strides, padding and the pooling window are
//! static, and the output size is computed in the type:
//! `H' = (H + PT + PB - KH) / SH + 1`.
//!
//! The output size is known when the input's and the window's sizes are. A size
//! parameter is allowed where the result does not depend on it: stride 1 with
//! `PT + PB = KH - 1` (SAME padding) keeps the size, so `f32[H, W, C]` stays `H, W`.

use super::ops::{dims_of, known_shape};
use super::{Elab, Val};
use crate::array::DType;
use crate::prims::{Conv, Prim, Reshape, WindowMax, Windows};
use crate::syntax::ast::{self, ExprKind};
use crate::syntax::span::Span;
use crate::types::error::TypeError;
use crate::types::{Dim, Ty};

/// Static strides and padding for the two spatial dimensions.
struct Geometry {
    strides: [u64; 2],
    padding: [(u64, u64); 2],
}

impl Elab<'_> {
    /// `conv2d(x: f32[H, W, C], w: f32[KH, KW, C, O], [SH, SW], [[PT, PB], [PL, PR]])`.
    pub(crate) fn conv2d(&mut self, args: &[ast::Expr]) -> Val {
        let x = self.image_arg("conv2d", &args[0], 3, "an image `f32[H, W, C]`");
        let w = self.image_arg("conv2d", &args[1], 4, "a kernel `f32[KH, KW, C, O]`");
        let geo = self.geometry("conv2d", &args[2], &args[3]);
        let (Some(x), Some(w), Some(geo)) = (x, w, geo) else { return Val::error() };
        let (xd, wd) = (dims_of(&x.ty).to_vec(), dims_of(&w.ty).to_vec());
        if xd[2] != wd[2] {
            return self.err(TypeError::Window {
                op: "conv2d".into(),
                title: "channel mismatch".into(),
                span: args[1].span,
                label: format!("the kernel `{}` takes {} input channels", w.ty, wd[2]),
                other: Some((args[0].span, format!("the image `{}` has {} channels", x.ty, xd[2]))),
                note: None,
            });
        }
        let mut out = vec![];
        for d in 0..2 {
            let what = ["height", "width"][d];
            match self.window_out("conv2d", what, &xd[d], &wd[d], &geo, d, args[0].span, args[1].span) {
                Some(n) => out.push(n),
                None => return Val::error(),
            }
        }
        out.push(wd[3].clone());
        let ty = Ty::Array(DType::F32, out.clone());
        if !self.concrete(&[&x, &w]) {
            return Val::of(ty, vec![]);
        }
        // The primitive wants a batch dimension: a batch of one, NHWC / HWIO.
        let xs = known_shape(&xd);
        let x1 = self.apply(Prim::Reshape(Reshape { shape: [1].into_iter().chain(xs).collect() }), &[&x]);
        let conv = Conv {
            lhs_spec: vec![0, 3, 1, 2],
            rhs_spec: vec![3, 2, 0, 1],
            out_spec: vec![0, 3, 1, 2],
            strides: geo.strides.iter().map(|&s| s as usize).collect(),
            padding: geo.padding.iter().map(|&(lo, hi)| (lo as i64, hi as i64)).collect(),
            lhs_dilation: vec![1, 1],
            rhs_dilation: vec![1, 1],
            feature_groups: 1,
            batch_groups: 1,
        };
        let y = self.apply(Prim::Conv(conv), &[&x1, &w]);
        Val { ty, ..self.apply(Prim::Reshape(Reshape { shape: known_shape(&out) }), &[&y]) }
    }

    /// `max_pool(x: f32[H, W, C], [KH, KW], [SH, SW], [[PT, PB], [PL, PR]])`, padding
    /// with `-inf` as `flax.linen.max_pool` does.
    pub(crate) fn max_pool(&mut self, args: &[ast::Expr]) -> Val {
        let x = self.image_arg("max_pool", &args[0], 3, "an image `f32[H, W, C]`");
        let window = self.static_list("max_pool", &args[1], "the window", 1);
        let geo = self.geometry("max_pool", &args[2], &args[3]);
        let (Some(x), Some(window), Some(geo)) = (x, window, geo) else { return Val::error() };
        let xd = dims_of(&x.ty).to_vec();
        let mut out = vec![];
        for d in 0..2 {
            let what = ["height", "width"][d];
            let k = Dim::Known(window[d]);
            match self.window_out("max_pool", what, &xd[d], &k, &geo, d, args[0].span, args[1].span) {
                Some(n) => out.push(n),
                None => return Val::error(),
            }
        }
        out.push(xd[2].clone());
        let ty = Ty::Array(DType::F32, out);
        if !self.concrete(&[&x]) {
            return Val::of(ty, vec![]);
        }
        let windows = Windows {
            window: vec![window[0] as usize, window[1] as usize, 1],
            strides: vec![geo.strides[0] as usize, geo.strides[1] as usize, 1],
            padding: vec![
                (geo.padding[0].0 as usize, geo.padding[0].1 as usize),
                (geo.padding[1].0 as usize, geo.padding[1].1 as usize),
                (0, 0),
            ],
        };
        Val { ty, ..self.apply(Prim::WindowMax(WindowMax { windows }), &[&x]) }
    }

    /// An `f32` array of the given rank, or `None` after reporting what was expected.
    fn image_arg(&mut self, op: &str, e: &ast::Expr, rank: usize, expected: &str) -> Option<Val> {
        let v = self.expr(e);
        match &v.ty {
            Ty::Array(DType::F32, d) if d.len() == rank => Some(v),
            Ty::Error => None,
            _ => {
                self.err(TypeError::BadOperand {
                    op: op.into(),
                    ty: v.ty.clone(),
                    span: e.span,
                    expected: expected.into(),
                });
                None
            }
        }
    }

    /// The strides (positive) and padding (two pairs, not negative).
    fn geometry(&mut self, op: &str, strides: &ast::Expr, padding: &ast::Expr) -> Option<Geometry> {
        let s = self.static_list(op, strides, "the strides", 1);
        let p = match &padding.kind {
            ExprKind::Array(pairs) if pairs.len() == 2 => {
                let mut out = vec![];
                for pair in pairs {
                    let v = self.static_list(op, pair, "the padding", 0)?;
                    out.push((v[0], v[1]));
                }
                Some(out)
            }
            _ => {
                self.list_error(op, padding.span, "the padding", "two pairs `[[PT, PB], [PL, PR]]`");
                None
            }
        };
        let (s, p) = (s?, p?);
        Some(Geometry { strides: [s[0], s[1]], padding: [p[0], p[1]] })
    }

    /// A list of two integers known at compile time, each at least `min`.
    fn static_list(&mut self, op: &str, e: &ast::Expr, what: &str, min: u64) -> Option<[u64; 2]> {
        let ExprKind::Array(xs) = &e.kind else {
            self.list_error(op, e.span, what, "a list of two integers known at compile time, like `[2, 2]`");
            return None;
        };
        if xs.len() != 2 {
            self.list_error(op, e.span, what, &format!("two integers, one per spatial dimension; found {}", xs.len()));
            return None;
        }
        let mut out = [0; 2];
        for (k, x) in xs.iter().enumerate() {
            let n = match &x.kind {
                ExprKind::Unary(ast::UnOp::Neg, _) => None,
                _ => match self.static_dim(x, what)? {
                    Dim::Known(n) => Some(n),
                    Dim::Param(_) | Dim::Scaled(..) => {
                        self.err(TypeError::NotStatic { what: format!("{what} of `{op}`"), span: x.span });
                        return None;
                    }
                },
            };
            match n {
                Some(n) if n >= min => out[k] = n,
                _ => {
                    let bound = if min == 0 { "cannot be negative" } else { "must be positive" };
                    let found = if n.is_some() { "this is 0" } else { "this is negative" };
                    self.err(TypeError::Window {
                        op: op.into(),
                        title: format!("{} {bound}", noun(what)),
                        span: x.span,
                        label: found.into(),
                        other: None,
                        note: None,
                    });
                    return None;
                }
            }
        }
        Some(out)
    }

    fn list_error(&mut self, op: &str, span: Span, what: &str, expected: &str) {
        self.err(TypeError::Window {
            op: op.into(),
            title: format!("malformed {}", what.trim_start_matches("the ")),
            span,
            label: format!("expected {expected}"),
            other: None,
            note: None,
        });
    }

    /// The output size along spatial dimension `d`: `(n + lo + hi - k) / s + 1`.
    #[allow(clippy::too_many_arguments)]
    fn window_out(
        &mut self,
        op: &str,
        what: &str,
        n: &Dim,
        k: &Dim,
        geo: &Geometry,
        d: usize,
        x_span: Span,
        k_span: Span,
    ) -> Option<Dim> {
        let (s, (lo, hi)) = (geo.strides[d], geo.padding[d]);
        match (n, k) {
            (Dim::Known(n), Dim::Known(k)) => {
                let padded = n + lo + hi;
                if *k > padded {
                    self.err(TypeError::Window {
                        op: op.into(),
                        title: format!("the window is larger than the padded input ({what})"),
                        span: k_span,
                        label: format!("the window's {what} is {k}"),
                        other: Some((x_span, format!("the input's {what} is {n}, {padded} with padding {lo} + {hi}"))),
                        note: None,
                    });
                    return None;
                }
                Some(Dim::Known((padded - k) / s + 1))
            }
            (_, Dim::Known(k)) if s == 1 && lo + hi + 1 == *k => Some(n.clone()),
            _ => {
                self.err(TypeError::Window {
                    op: op.into(),
                    title: format!("the output {what} depends on a size parameter"),
                    span: if matches!(k, Dim::Known(_)) { x_span } else { k_span },
                    label: format!("the input's {what} is `{n}` and the window's is `{k}`"),
                    other: None,
                    note: Some(
                        "the output size `(n + lo + hi - k) / stride + 1` must be computable at compile time; \
                         with a size parameter, only stride 1 with `lo + hi = k - 1` (same padding) is"
                            .into(),
                    ),
                });
                None
            }
        }
    }
}

/// What a list holds, for "... must be positive".
fn noun(what: &str) -> &str {
    match what {
        "the window" => "window sizes",
        other => other.trim_start_matches("the "),
    }
}
