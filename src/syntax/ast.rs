//! The untyped syntax tree, exactly as written, with a span on every node.
//!
//! Names are plain strings here; `types::check` resolves them. Nothing in this
//! module knows about dtypes beyond their spelling.

use crate::syntax::span::Span;

/// A name with the place it was written.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    pub name: String,
    pub span: Span,
}

/// One source file: its `use` declarations and its items, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    pub uses: Vec<Use>,
    pub items: Vec<Item>,
}

/// `use std::nn::{Mlp, mlp};` or `use basics::dense::Dense;`
///
/// `path` is the module path (`["std", "nn"]`), `names` the imported items.
#[derive(Clone, Debug, PartialEq)]
pub struct Use {
    pub path: Vec<Ident>,
    pub names: Vec<Ident>,
    pub span: Span,
}

/// A top-level item.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Const(Const),
    Struct(Struct),
    Fn(Fn),
    Env(Env),
    Agent(Agent),
}

/// `const ROWS: i32 = 10;`
#[derive(Clone, Debug, PartialEq)]
pub struct Const {
    pub name: Ident,
    pub ty: Type,
    pub value: Expr,
    pub span: Span,
}

/// `struct Dense<I, O> { w: f32[I, O], b: f32[O] }`
#[derive(Clone, Debug, PartialEq)]
pub struct Struct {
    pub name: Ident,
    /// Generic size parameters.
    pub generics: Vec<Ident>,
    pub fields: Vec<(Ident, Type)>,
    pub span: Span,
}

/// `fn dense<I, O>(p: Dense<I, O>, x: f32[I]) -> f32[O] { ... }`
#[derive(Clone, Debug, PartialEq)]
pub struct Fn {
    pub name: Ident,
    /// Generic size parameters, inferred at call sites.
    pub generics: Vec<Ident>,
    pub params: Vec<(Ident, Type)>,
    pub ret: Type,
    pub body: Block,
    pub span: Span,
}

/// An environment: its members and its functions, each kind in source order.
///
/// ```text
/// env Catch {
///     observation: f32[ROWS, COLS]
///     action: discrete(3)
///     time_limit: 500
///     fn reset(key: Key) -> State { ... }
///     fn step(s: State, a: i32, key: Key) -> Step<State> { ... }
///     fn observe(s: State) -> f32[ROWS, COLS] { ... }
/// }
/// ```
///
/// The parser accepts any members and functions; which ones an environment must have is
/// checked later.
#[derive(Clone, Debug, PartialEq)]
pub struct Env {
    pub name: Ident,
    /// `extern env`: a host environment's spaces, stepped by the Sebulba driver; no functions.
    pub external: bool,
    pub members: Vec<EnvMember>,
    pub fns: Vec<Fn>,
    pub span: Span,
}

/// `agent A2C for Catch { fn init(..) fn act(..) fn update(..) }`: how to act in and
/// learn from an environment, for the training drivers.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    pub name: Ident,
    pub env: Ident,
    pub fns: Vec<Fn>,
    pub span: Span,
}

/// `observation: f32[ROWS, COLS]`, `action: discrete(3)`, `time_limit: 500`. The span
/// covers `name: spec`, not a `,` or `;` after it.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvMember {
    pub name: Ident,
    pub spec: EnvSpec,
    pub span: Span,
}

/// What an environment member says.
#[derive(Clone, Debug, PartialEq)]
pub enum EnvSpec {
    /// A type: `f32[ROWS, COLS]`, `State`, `Dense<3, 4>`, `(f32, i32)`.
    Type(Type),
    /// A space: `discrete(3)`, `box(2, -1.0, 1.0)`: a name, then arguments in parentheses
    /// (expressions known at compile time).
    Space { kind: Ident, args: Vec<Expr>, span: Span },
    /// An integer: `500`.
    Int(u64, Span),
}

/// A written type.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeKind {
    /// `f32`, `i32[3]`, `bool[N, 4]`: a dtype name and its dimensions (empty for scalars).
    Array { dtype: Ident, dims: Vec<DimExpr> },
    /// `(f32, i32[3])`; `()` is the empty tuple.
    Tuple(Vec<Type>),
    /// `Dense<4, O>`, `Adam<Params<C, A>>`: a struct name and its arguments.
    Named { name: Ident, args: Vec<TypeArg> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Type {
    pub kind: TypeKind,
    pub span: Span,
}

/// An argument of a struct type as written. A bare name (`Dense<I, O>`, `Adam<Params>`) is
/// a `Dim` whichever it names: the struct's declaration says whether it takes a size or a
/// type there.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeArg {
    Dim(DimExpr),
    /// A type that cannot be a size: `f32[3]`, `Params<C, A>`, `(f32, i32)`.
    Type(Type),
}

impl TypeArg {
    pub fn span(&self) -> Span {
        match self {
            TypeArg::Dim(d) => d.span(),
            TypeArg::Type(t) => t.span,
        }
    }
}

/// A dimension as written: a literal size, the name of a const or size parameter, or a
/// product of them (`MB * 4`).
#[derive(Clone, Debug, PartialEq)]
pub enum DimExpr {
    Lit(u64, Span),
    Name(Ident),
    Mul(Box<DimExpr>, Box<DimExpr>),
}

impl DimExpr {
    pub fn span(&self) -> Span {
        match self {
            DimExpr::Lit(_, s) => *s,
            DimExpr::Name(id) => id.span,
            DimExpr::Mul(a, b) => a.span().to(b.span()),
        }
    }
}

/// `{ let a = x; let (b, c) = y; a + b }`
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub stmts: Vec<Let>,
    pub value: Box<Expr>,
    pub span: Span,
}

/// `let PAT (: TYPE)? = EXPR;`
#[derive(Clone, Debug, PartialEq)]
pub struct Let {
    pub pat: Pat,
    pub ty: Option<Type>,
    pub value: Expr,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pat {
    /// `x`
    Name(Ident),
    /// `_`
    Wild(Span),
    /// `(a, (b, _))`
    Tuple(Vec<Pat>, Span),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    /// `**`
    Pow,
    /// `@`: matrix and vector products.
    MatMul,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// `&&`, elementwise on bool (both sides are evaluated).
    And,
    /// `||`, elementwise on bool (both sides are evaluated).
    Or,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

/// One position inside `x[...]`.
#[derive(Clone, Debug, PartialEq)]
pub enum Index {
    /// `x[i]`: a scalar integer, possibly computed at run time; drops the axis.
    At(Expr),
    /// `x[a:b]`, `x[:b]`, `x[a:]`, `x[:]`: a static range; keeps the axis.
    Range { start: Option<Expr>, end: Option<Expr>, span: Span },
}

#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    /// `42`
    Int(u64),
    /// `1.5`, `1e-3`
    Float(f64),
    /// `true`, `false`
    Bool(bool),
    /// `x`, `ROWS`
    Name(Ident),
    /// `[a, b, c]`
    Array(Vec<Expr>),
    /// `(a, b)`; `()` is the empty tuple. `(a)` is just `a` and has no node.
    Tuple(Vec<Expr>),
    /// `Dense { w: ..., b }`: field shorthand `b` means `b: b`.
    Struct {
        name: Ident,
        fields: Vec<(Ident, Expr)>,
    },
    /// `e.name`
    Field(Box<Expr>, Ident),
    /// `e.0`
    TupleField(Box<Expr>, u32, Span),
    /// `f(a, b)`
    Call {
        func: Ident,
        args: Vec<Expr>,
    },
    /// `CartPole::step(s, a, k)`: one of an env's functions, called as any function.
    EnvCall {
        env: Ident,
        func: Ident,
        args: Vec<Expr>,
    },
    /// `e.f(a, b)`, which means `f(e, a, b)`.
    Method {
        receiver: Box<Expr>,
        method: Ident,
        args: Vec<Expr>,
    },
    /// `e[i, :, a:b]`
    Index(Box<Expr>, Vec<Index>),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `e as f32`
    Cast(Box<Expr>, Ident),
    /// `if c { a } else { b }`; `else if` nests another `If` in `else_`.
    If {
        cond: Box<Expr>,
        then: Block,
        else_: Box<Expr>,
    },
    /// `for i in LO..HI carry PAT = INIT { BODY }`: the body's value is the next carry,
    /// and the loop's value is the last carry.
    For {
        var: Pat,
        lo: Box<Expr>,
        hi: Box<Expr>,
        carry: Pat,
        init: Box<Expr>,
        body: Block,
    },
    Block(Block),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}
