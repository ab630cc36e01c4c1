//! Errors of name resolution and type checking, as data. `into_diag` is the one place
//! that words them.

use super::Ty;
use crate::array::DType;
use crate::diag::Diag;
use crate::syntax::span::Span;

#[derive(Clone, Debug)]
pub enum TypeError {
    UnknownName {
        name: String,
        span: Span,
        similar: Option<String>,
    },
    UnknownType {
        name: String,
        span: Span,
    },
    UnknownModule {
        path: String,
        span: Span,
        looked_in: String,
    },
    UnknownImport {
        module: String,
        name: String,
        span: Span,
    },
    Duplicate {
        name: String,
        span: Span,
        first: Span,
    },
    Arity {
        what: String,
        expected: usize,
        found: usize,
        span: Span,
        decl: Option<Span>,
    },
    DTypeMismatch {
        op: String,
        left: Ty,
        right: Ty,
        span: Span,
        left_span: Span,
        right_span: Span,
    },
    BroadcastMismatch {
        op: String,
        left: Ty,
        right: Ty,
        left_span: Span,
        right_span: Span,
    },
    MatMulMismatch {
        left: Ty,
        right: Ty,
        left_span: Span,
        right_span: Span,
        detail: String,
    },
    Mismatch {
        expected: Ty,
        found: Ty,
        span: Span,
        because: Option<(Span, String)>,
    },
    /// A mismatch at a product of sizes that cannot be matched, with why.
    ProductMismatch {
        expected: Ty,
        found: Ty,
        span: Span,
        note: String,
    },
    BranchMismatch {
        then_ty: Ty,
        else_ty: Ty,
        then_span: Span,
        else_span: Span,
    },
    CannotInferSize {
        param: String,
        func: String,
        span: Span,
    },
    SizeConflict {
        param: String,
        first: String,
        second: String,
        span: Span,
    },
    UnknownField {
        ty: Ty,
        field: String,
        span: Span,
        fields: Vec<String>,
    },
    MissingField {
        ty: String,
        field: String,
        span: Span,
    },
    NotAStruct {
        ty: Ty,
        field: String,
        span: Span,
    },
    NotATuple {
        ty: Ty,
        span: Span,
    },
    TupleIndex {
        ty: Ty,
        index: u32,
        span: Span,
    },
    NotStatic {
        what: String,
        span: Span,
    },
    /// A `--set NAME=VALUE` whose value does not fit the const's type; `span` is the type.
    BadOverride {
        name: String,
        value: String,
        ty: Ty,
        reason: String,
        span: Span,
    },
    BadOperand {
        op: String,
        ty: Ty,
        span: Span,
        expected: String,
    },
    BadIndex {
        detail: String,
        span: Span,
    },
    BadAxis {
        axis: i64,
        rank: usize,
        span: Span,
    },
    Reshape {
        from: Ty,
        to: String,
        span: Span,
    },
    PatternMismatch {
        ty: Ty,
        span: Span,
        detail: String,
    },
    Recursive {
        name: String,
        span: Span,
    },
    NotAValue {
        name: String,
        span: Span,
    },
    LiteralRange {
        value: String,
        ty: String,
        span: Span,
    },
    Entry {
        detail: String,
        span: Span,
    },
    /// `env` names the item: "env `Catch`", "agent `A2C`".
    EnvMissing {
        env: String,
        what: String,
        span: Span,
        help: Option<String>,
    },
    EnvSignature {
        env: String,
        func: String,
        expected: String,
        found: String,
        label: String,
        span: Span,
    },
    EnvMember {
        detail: String,
        span: Span,
    },
    AgentMember {
        detail: String,
        span: Span,
    },
    /// An `extern env` where its steps are needed (`podc sim`, Anakin training).
    ExternEnv {
        name: String,
        span: Span,
    },
    RolloutMismatch {
        detail: String,
        span: Span,
    },
    /// An agent's metrics with a field `loss`, the name `metrics.jsonl` gives `total`.
    LossMetric {
        metrics: String,
        span: Span,
    },
    Vmap {
        detail: String,
        span: Span,
    },
    /// `X::f(..)` where `X` is not an env with a function `f`.
    EnvPath {
        detail: String,
        span: Span,
    },
    // `grad`: `f` (at `span`) does not return an f32 scalar (`ret`: its declared type);
    // the differentiated argument is not made of f32 arrays; the loss depends, through a
    // derivative, on a value with none (`span`: what made it, `call`: the `grad` call).
    GradResult {
        func: String,
        found: Ty,
        span: Span,
        ret: Span,
    },
    GradArgument {
        func: String,
        found: Ty,
        span: Span,
    },
    NotDifferentiable {
        what: String,
        span: Span,
        call: Span,
    },
    ExpectedType {
        what: String,
        span: Span,
    },
    ExpectedSize {
        what: String,
        span: Span,
    },
    CannotInferType {
        param: String,
        func: String,
        span: Span,
    },
    Leafwise {
        op: String,
        left: Ty,
        right: Ty,
        span: Span,
    },
    /// A `conv2d` or `max_pool` whose operands, window, strides or padding do not fit.
    Window {
        op: String,
        title: String,
        span: Span,
        label: String,
        other: Option<(Span, String)>,
        note: Option<String>,
    },
}

impl TypeError {
    pub fn into_diag(self) -> Diag {
        use TypeError as E;
        match self {
            E::UnknownName { name, span, similar } => {
                let d = Diag::new("E0101", format!("cannot find `{name}` in this scope"), span, "not found");
                match similar {
                    Some(s) => d.with_help(format!("a name with a similar spelling exists: `{s}`")),
                    None => d,
                }
            }
            E::UnknownType { name, span } => {
                let dtypes: Vec<String> = DType::ALL.iter().map(|d| format!("`{d}`")).collect();
                let (last, rest) = dtypes.split_last().expect("there are dtypes");
                Diag::new("E0102", format!("unknown type `{name}`"), span, "not a dtype or struct").with_help(format!(
                    "dtypes are {} and {last}; structs must be declared or imported with `use`",
                    rest.join(", ")
                ))
            }
            E::UnknownModule { path, span, looked_in } => {
                let d = Diag::new("E0103", format!("unresolved module `{path}`"), span, "no such module")
                    .with_note(format!("looked for {looked_in}"));
                match path.starts_with("std::") {
                    true => d,
                    false => d.with_help("modules outside the root file's directory are found with `--lib DIR` or `PODC_PATH`"),
                }
            }
            E::UnknownImport { module, name, span } => {
                Diag::new("E0104", format!("no item `{name}` in module `{module}`"), span, "not found in that module")
            }
            E::Duplicate { name, span, first } => {
                Diag::new("E0105", format!("`{name}` is defined more than once"), span, "defined again here")
                    .with_label(first, "first defined here")
            }
            E::Arity { what, expected, found, span, decl } => {
                let s = |n: usize| if n == 1 { "" } else { "s" };
                let d = Diag::new(
                    "E0201",
                    format!(
                        "{what} takes {expected} argument{}, but {found} {} given",
                        s(expected),
                        if found == 1 { "was" } else { "were" }
                    ),
                    span,
                    format!("expected {expected} argument{}", s(expected)),
                );
                match decl {
                    Some(decl) => d.with_label(decl, "defined here"),
                    None => d,
                }
            }
            E::DTypeMismatch { op, left, right, span: _, left_span, right_span } => Diag::new(
                "E0202",
                format!("mismatched dtypes in `{op}`: `{left}` and `{right}`"),
                right_span,
                format!("this is `{right}`"),
            )
            .with_label(left_span, format!("this is `{left}`"))
            .with_help("convert one side with `as`, e.g. `x as f32`"),
            E::BroadcastMismatch { op, left, right, left_span, right_span } => Diag::new(
                "E0203",
                format!("shapes `{left}` and `{right}` cannot be broadcast together in `{op}`"),
                right_span,
                format!("this is `{right}`"),
            )
            .with_label(left_span, format!("this is `{left}`"))
            .with_note("dimensions are aligned from the right; each pair must be equal or one of them 1"),
            E::MatMulMismatch { left, right, left_span, right_span, detail } => Diag::new(
                "E0204",
                format!("cannot multiply `{left}` by `{right}` with `@`"),
                right_span,
                format!("this is `{right}`"),
            )
            .with_label(left_span, format!("this is `{left}`"))
            .with_note(detail),
            E::Mismatch { expected, found, span, because } => {
                let d = Diag::new("E0205", "mismatched types", span, format!("expected `{expected}`, found `{found}`"));
                match because {
                    Some((s, m)) => d.with_label(s, m),
                    None => d,
                }
            }
            E::ProductMismatch { expected, found, span, note } => {
                Diag::new("E0205", "mismatched types", span, format!("expected `{expected}`, found `{found}`"))
                    .with_note(note)
            }
            E::BranchMismatch { then_ty, else_ty, then_span, else_span } => {
                Diag::new("E0206", "`if` and `else` have different types", else_span, format!("this is `{else_ty}`"))
                    .with_label(then_span, format!("this is `{then_ty}`"))
                    .with_note("both branches of an `if` must have the same type")
            }
            E::CannotInferSize { param, func, span } => Diag::new(
                "E0207",
                format!("cannot infer the size `{param}` of `{func}`"),
                span,
                format!("`{param}` is not determined by the arguments"),
            )
            .with_help("give the result a type, e.g. `let y: f32[4] = ...;`"),
            E::SizeConflict { param, first, second, span } => Diag::new(
                "E0208",
                format!("size `{param}` would have to be both {first} and {second}"),
                span,
                format!("here `{param}` is {second}"),
            ),
            E::UnknownField { ty, field, span, fields } => {
                Diag::new("E0209", format!("no field `{field}` on type `{ty}`"), span, "unknown field")
                    .with_note(format!("the fields are: {}", fields.join(", ")))
            }
            E::MissingField { ty, field, span } => {
                Diag::new("E0210", format!("missing field `{field}` in `{ty}`"), span, format!("`{field}` not given"))
            }
            E::NotAStruct { ty, field, span } => {
                Diag::new("E0211", format!("no field `{field}` on type `{ty}`"), span, "not a struct")
            }
            E::NotATuple { ty, span } => {
                Diag::new("E0212", format!("`{ty}` is not a tuple"), span, "cannot take a tuple field")
            }
            E::TupleIndex { ty, index, span } => {
                Diag::new("E0213", format!("no field `{index}` on tuple `{ty}`"), span, "index out of range")
            }
            E::Window { op, title, span, label, other, note } => {
                let mut d = Diag::new("E0233", format!("{title} in `{op}`"), span, label);
                if let Some((s, m)) = other {
                    d = d.with_label(s, m);
                }
                match note {
                    Some(n) => d.with_note(n),
                    None => d,
                }
            }
            E::NotStatic { what, span } => Diag::new(
                "E0214",
                format!("{what} must be known at compile time"),
                span,
                "this is only known at run time",
            )
            .with_help("use an integer literal, a `const`, or a size parameter"),
            E::BadOverride { name, value, ty, reason, span } => {
                Diag::new("E0232", format!("`--set {name}={value}` does not fit `{name}: {ty}`"), span, reason)
                    .with_help(format!("give `--set {name}` a value of type `{ty}`"))
            }
            E::BadOperand { op, ty, span, expected } => {
                Diag::new("E0215", format!("`{op}` cannot be applied to `{ty}`"), span, format!("expected {expected}"))
            }
            E::BadIndex { detail, span } => Diag::new("E0216", "invalid index", span, detail),
            E::BadAxis { axis, rank, span } => Diag::new(
                "E0217",
                format!("axis {axis} is out of range for an array of rank {rank}"),
                span,
                "no such axis",
            ),
            E::Reshape { from, to, span } => Diag::new(
                "E0218",
                format!("cannot reshape `{from}` to `[{to}]`"),
                span,
                "the number of elements differs",
            ),
            E::PatternMismatch { ty, span, detail } => {
                Diag::new("E0219", format!("pattern does not match type `{ty}`"), span, detail)
            }
            E::Recursive { name, span } => Diag::new("E0220", format!("`{name}` calls itself"), span, "recursive call")
                .with_note("functions are inlined, so recursion is not supported; use a `for` loop"),
            E::NotAValue { name, span } => {
                Diag::new("E0221", format!("`{name}` is not a value"), span, "a function or an env, not a value")
            }
            E::LiteralRange { value, ty, span } => {
                Diag::new("E0222", format!("literal `{value}` does not fit in `{ty}`"), span, "out of range")
            }
            E::Entry { detail, span } => Diag::new("E0223", "invalid entry point", span, detail),
            E::EnvMissing { env, what, span, help } => {
                let d = Diag::new("E0301", format!("{env} is missing {what}"), span, format!("{what} is required"));
                match help {
                    Some(h) => d.with_help(format!("add `{h}`")),
                    None => d,
                }
            }
            E::EnvSignature { env, func, expected, found, label, span } => {
                let d = Diag::new("E0302", format!("`{func}` of {env} has the wrong type"), span, label);
                // Signatures that print the same differ inside a named type; the label says how.
                match expected == found {
                    true => d,
                    false => d.with_note(format!("expected `{expected}`")).with_note(format!("   found `{found}`")),
                }
            }
            E::EnvMember { detail, span } => Diag::new("E0303", "invalid env declaration", span, detail),
            E::AgentMember { detail, span } => Diag::new("E0305", "invalid agent declaration", span, detail),
            E::ExternEnv { name, span } => {
                Diag::new("E0307", format!("env `{name}` is `extern`: it has no steps to compile"), span, "declared here")
                    .with_note("an `extern env` declares a host environment's spaces; the host steps it")
                    .with_help("train on the host environment with `podc train AGENT.pod --env URI`")
            }
            E::LossMetric { metrics, span } => {
                Diag::new("E0308", "a metric named `loss`", span, format!("`{metrics}` has a field `loss`"))
                    .with_note("`metrics.jsonl` records the metric `total` as `loss`, so the names would collide")
                    .with_help("rename the field; call it `total` to have it recorded as `loss`")
            }
            E::RolloutMismatch { detail, span } => {
                Diag::new("E0306", "the rollout does not fit the agent's `update`", span, detail).with_help(
                    "choose `--rollout` and `--envs` (per device: `--envs` / `--devices`) to fit the agent's trajectory",
                )
            }
            E::GradResult { func, found, span, ret } => Diag::new(
                "E0225",
                format!("cannot differentiate `{func}`: it returns `{found}`"),
                span,
                "expected a function returning an `f32` scalar",
            )
            .with_label(ret, format!("`{func}` returns `{found}`"))
            .with_note("`grad` differentiates a scalar loss, or the first of a pair `(loss, aux)`"),
            E::GradArgument { func, found, span } => Diag::new(
                "E0226",
                format!("cannot differentiate `{func}` with respect to `{found}`"),
                span,
                "expected `f32` arrays",
            )
            .with_note("the first argument is differentiated: an `f32` array, or a tuple or struct of them")
            .with_help("put the parameters to differentiate first"),
            E::NotDifferentiable { what, span, call } => {
                Diag::new("E0227", format!("{what} is not differentiable"), span, "the loss depends on this")
                    .with_label(call, "differentiated here")
                    .with_note("its result is an integer or bool: a derivative through it would be zero, or not exist")
                    .with_help("wrap its input in `stop_gradient(...)` to treat it as a constant, or choose values with `where` instead")
            }
            E::ExpectedType { what, span } => Diag::new("E0228", format!("{what} takes a type here"), span, "not a type")
                .with_help("write a type: a struct (`Params`, `Params<C, A>`), a type parameter, `f32` or `f32[N]`"),
            E::ExpectedSize { what, span } => Diag::new("E0228", format!("{what} takes a size here"), span, "not a size")
                .with_help("write a number, a const or a size parameter"),
            E::CannotInferType { param, func, span } => Diag::new(
                "E0229",
                format!("cannot infer the type `{param}` of `{func}`"),
                span,
                format!("`{param}` is not determined by the arguments"),
            )
            .with_help("pass an argument of that type, or give the result a type with `let`"),
            E::Leafwise { op, left, right, span } => Diag::new(
                "E0230",
                format!("`{op}` on records needs operands of one type"),
                span,
                format!("`{left}` and `{right}`"),
            )
            .with_note("records and tuples combine leaf by leaf with a record of the same type, or with a scalar"),
            E::Vmap { detail, span } => Diag::new("E0224", "cannot batch this call", span, detail)
                .with_note("an argument with one more leading axis than its parameter is batched; one of the parameter's type is shared"),
            E::EnvPath { detail, span } => Diag::new("E0231", "no such env function", span, detail)
                .with_note("`Env::f(..)` calls the function `f` (`reset`, `step` or `observe`) of the env `Env`"),
        }
    }
}
