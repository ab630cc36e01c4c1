//! A stable, readable dump of the syntax tree, without spans: what `podc build --emit ast`
//! prints and what the parser's snapshot tests record.
//!
//! Expressions are S-expressions (`(+ a (* b c))`, `(call f x)`, `(field p w)`); types and
//! patterns are written in source syntax (`f32[I, O]`, `(a, _)`). A list that does not fit
//! in [`WIDTH`] columns is broken after its head, one child per line, indented by two:
//!
//! ```text
//! (fn dense <I O> (p: Dense<I, O>) (x: f32[I]) -> f32[O]
//!   (call tanh (+ (@ x (field p w)) (field p b))))
//! ```

use crate::syntax::ast::*;

/// Lines longer than this are broken.
pub const WIDTH: usize = 80;

/// Prints a whole module: `use` declarations first, then the items, a blank line apart.
pub fn print_module(m: &Module) -> String {
    let mut out = String::new();
    for u in &m.uses {
        out.push_str(&print_use(u));
        out.push('\n');
    }
    for (i, item) in m.items.iter().enumerate() {
        if i > 0 || !m.uses.is_empty() {
            out.push('\n');
        }
        item_doc(item).render(0, &mut out);
        out.push('\n');
    }
    out
}

/// Prints one expression, as [`print_module`] would inside an item.
pub fn print_expr(e: &Expr) -> String {
    let mut out = String::new();
    expr_doc(e).render(0, &mut out);
    out
}

/// Prints a type in source syntax: `f32`, `f32[I, 4]`, `Dense<I, O>`, `(f32, i32)`, `(T,)`.
pub fn print_type(t: &Type) -> String {
    match &t.kind {
        TypeKind::Array { dtype, dims } if dims.is_empty() => dtype.name.clone(),
        TypeKind::Array { dtype, dims } => format!("{}[{}]", dtype.name, dims_str(dims)),
        TypeKind::Named { name, args } if args.is_empty() => name.name.clone(),
        TypeKind::Named { name, args } => {
            let args: Vec<String> = args
                .iter()
                .map(|a| match a {
                    TypeArg::Dim(d) => dim_str(d),
                    TypeArg::Type(t) => print_type(t),
                })
                .collect();
            format!("{}<{}>", name.name, args.join(", "))
        }
        TypeKind::Tuple(items) => tuple_str(items.iter().map(print_type).collect()),
    }
}

/// Prints a pattern in source syntax: `x`, `_`, `(a, (b, _))`.
pub fn print_pat(p: &Pat) -> String {
    match p {
        Pat::Name(name) => name.name.clone(),
        Pat::Wild(_) => "_".to_string(),
        Pat::Tuple(items, _) => tuple_str(items.iter().map(print_pat).collect()),
    }
}

fn dims_str(dims: &[DimExpr]) -> String {
    dims.iter().map(dim_str).collect::<Vec<_>>().join(", ")
}

fn dim_str(d: &DimExpr) -> String {
    match d {
        DimExpr::Lit(n, _) => n.to_string(),
        DimExpr::Name(name) => name.name.clone(),
        DimExpr::Mul(a, b) => format!("{} * {}", dim_str(a), dim_str(b)),
    }
}

/// `()`, `(a,)`, `(a, b)`: a one-element tuple keeps its comma.
fn tuple_str(items: Vec<String>) -> String {
    match items.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", items.join(", ")),
    }
}

fn print_use(u: &Use) -> String {
    let path: Vec<&str> = u.path.iter().map(|i| i.name.as_str()).collect();
    let names: Vec<&str> = u.names.iter().map(|i| i.name.as_str()).collect();
    match names.as_slice() {
        [one] => format!("(use {}::{one})", path.join("::")),
        _ => format!("(use {}::{{{}}})", path.join("::"), names.join(", ")),
    }
}

/// An S-expression being laid out.
enum Doc {
    Atom(String),
    /// `(items...)`. When broken, the first `head` items stay on the opening line. `force`
    /// breaks it even when it would fit (item bodies always read one statement a line).
    List {
        items: Vec<Doc>,
        head: usize,
        force: bool,
    },
}

fn atom(s: impl Into<String>) -> Doc {
    Doc::Atom(s.into())
}

fn list(head: usize, items: Vec<Doc>) -> Doc {
    Doc::List { items, head, force: false }
}

impl Doc {
    fn flat(&self, out: &mut String) {
        match self {
            Doc::Atom(s) => out.push_str(s),
            Doc::List { items, .. } => {
                out.push('(');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    item.flat(out);
                }
                out.push(')');
            }
        }
    }

    fn flat_string(&self) -> String {
        let mut s = String::new();
        self.flat(&mut s);
        s
    }

    /// Renders at column `indent` (the caller has already written the indentation).
    fn render(&self, indent: usize, out: &mut String) {
        let Doc::List { items, head, force } = self else {
            return self.flat(out);
        };
        let flat = self.flat_string();
        if !force && indent + flat.len() <= WIDTH {
            out.push_str(&flat);
            return;
        }
        let mut head_line: Vec<String> = items.iter().take(*head).map(Doc::flat_string).collect();
        // A head too long for the line keeps only its leading atoms there (a function's
        // header, say), and its lists break on the lines below like the other children.
        if indent + 1 + head_line.join(" ").len() > WIDTH {
            let atoms = items.iter().take(*head).take_while(|d| matches!(d, Doc::Atom(_))).count();
            head_line.truncate(atoms.max(1));
        }
        out.push('(');
        out.push_str(&head_line.join(" "));
        for item in items.iter().skip(head_line.len()) {
            out.push('\n');
            out.push_str(&" ".repeat(indent + 2));
            item.render(indent + 2, out);
        }
        out.push(')');
    }
}

fn generics_doc(generics: &[Ident]) -> Option<Doc> {
    if generics.is_empty() {
        return None;
    }
    let names: Vec<&str> = generics.iter().map(|g| g.name.as_str()).collect();
    Some(atom(format!("<{}>", names.join(" "))))
}

fn item_doc(item: &Item) -> Doc {
    match item {
        Item::Const(c) => {
            list(2, vec![atom("const"), atom(format!("{}: {}", c.name.name, print_type(&c.ty))), expr_doc(&c.value)])
        }
        Item::Struct(s) => {
            let mut items = vec![atom("struct"), atom(&s.name.name)];
            items.extend(generics_doc(&s.generics));
            let head = items.len();
            items.extend(s.fields.iter().map(|(name, ty)| atom(format!("({}: {})", name.name, print_type(ty)))));
            Doc::List { force: !s.fields.is_empty(), items, head }
        }
        Item::Fn(f) => fn_doc(f),
        Item::Env(e) => {
            let mut items = vec![atom(if e.external { "extern env" } else { "env" }), atom(&e.name.name)];
            items.extend(e.members.iter().map(|m| atom(format!("({}: {})", m.name.name, print_env_spec(&m.spec)))));
            items.extend(e.fns.iter().map(fn_doc));
            Doc::List { force: items.len() > 2, items, head: 2 }
        }
        Item::Agent(a) => {
            let mut items = vec![atom("agent"), atom(&a.name.name), atom(format!("for {}", a.env.name))];
            items.extend(a.fns.iter().map(fn_doc));
            Doc::List { force: items.len() > 3, items, head: 3 }
        }
    }
}

fn fn_doc(f: &Fn) -> Doc {
    let mut items = vec![atom("fn"), atom(&f.name.name)];
    items.extend(generics_doc(&f.generics));
    items.extend(f.params.iter().map(|(name, ty)| atom(format!("({}: {})", name.name, print_type(ty)))));
    items.push(atom("->"));
    items.push(atom(print_type(&f.ret)));
    let head = items.len();
    items.extend(block_docs(&f.body));
    Doc::List { items, head, force: true }
}

/// Prints what an env member says: `f32[R, C]`, `discrete(3)`, `500` (a space's arguments
/// as expressions are printed).
pub fn print_env_spec(spec: &EnvSpec) -> String {
    match spec {
        EnvSpec::Type(t) => print_type(t),
        EnvSpec::Space { kind, args, .. } => {
            format!("{}({})", kind.name, args.iter().map(print_expr).collect::<Vec<_>>().join(", "))
        }
        EnvSpec::Int(n, _) => n.to_string(),
    }
}

/// A block's statements then its value, as children of the enclosing list.
fn block_docs(b: &Block) -> Vec<Doc> {
    let mut docs: Vec<Doc> = b.stmts.iter().map(let_doc).collect();
    docs.push(expr_doc(&b.value));
    docs
}

fn let_doc(l: &Let) -> Doc {
    let binder = match &l.ty {
        Some(ty) => format!("{}: {}", print_pat(&l.pat), print_type(ty)),
        None => print_pat(&l.pat),
    };
    list(2, vec![atom("let"), atom(binder), expr_doc(&l.value)])
}

/// An `if` branch: just its value when it has no statements, else `(block ...)`.
fn branch_doc(b: &Block) -> Doc {
    if b.stmts.is_empty() { expr_doc(&b.value) } else { block_doc(b) }
}

fn block_doc(b: &Block) -> Doc {
    let mut items = vec![atom("block")];
    items.extend(block_docs(b));
    list(1, items)
}

fn op_str(op: BinOp) -> &'static str {
    match op {
        BinOp::Add => "+",
        BinOp::Sub => "-",
        BinOp::Mul => "*",
        BinOp::Div => "/",
        BinOp::Rem => "%",
        BinOp::Pow => "**",
        BinOp::MatMul => "@",
        BinOp::Eq => "==",
        BinOp::Ne => "!=",
        BinOp::Lt => "<",
        BinOp::Le => "<=",
        BinOp::Gt => ">",
        BinOp::Ge => ">=",
        BinOp::And => "&&",
        BinOp::Or => "||",
    }
}

fn expr_doc(e: &Expr) -> Doc {
    let with = |keyword: &str, head: usize, rest: Vec<Doc>| {
        let mut items = vec![atom(keyword)];
        items.extend(rest);
        list(head, items)
    };
    let all = |es: &[Expr]| es.iter().map(expr_doc).collect::<Vec<_>>();
    match &e.kind {
        ExprKind::Int(n) => atom(n.to_string()),
        ExprKind::Float(x) => atom(format!("{x:?}")),
        ExprKind::Bool(b) => atom(b.to_string()),
        ExprKind::Name(name) => atom(&name.name),
        ExprKind::Array(items) => with("array", 1, all(items)),
        ExprKind::Tuple(items) => with("tuple", 1, all(items)),
        ExprKind::Struct { name, fields } => {
            let mut items = vec![atom(&name.name)];
            items.extend(fields.iter().map(|(f, v)| list(1, vec![atom(format!("{}:", f.name)), expr_doc(v)])));
            with("struct", 2, items)
        }
        ExprKind::Field(base, name) => with("field", 1, vec![expr_doc(base), atom(&name.name)]),
        ExprKind::TupleField(base, i, _) => with("field", 1, vec![expr_doc(base), atom(i.to_string())]),
        ExprKind::Call { func, args } => {
            let mut items = vec![atom(&func.name)];
            items.extend(all(args));
            with("call", 2, items)
        }
        ExprKind::EnvCall { env, func, args } => {
            let mut items = vec![atom(format!("{}::{}", env.name, func.name))];
            items.extend(all(args));
            with("call", 2, items)
        }
        ExprKind::Method { receiver, method, args } => {
            let mut items = vec![atom(&method.name), expr_doc(receiver)];
            items.extend(all(args));
            with("method", 2, items)
        }
        ExprKind::Index(base, indices) => {
            let mut items = vec![expr_doc(base)];
            items.extend(indices.iter().map(|ix| match ix {
                Index::At(i) => expr_doc(i),
                Index::Range { start, end, .. } => {
                    let bound = |b: &Option<Expr>| b.as_ref().map_or_else(|| atom("_"), expr_doc);
                    list(1, vec![atom(":"), bound(start), bound(end)])
                }
            }));
            with("index", 1, items)
        }
        ExprKind::Unary(UnOp::Neg, x) => with("neg", 1, vec![expr_doc(x)]),
        ExprKind::Unary(UnOp::Not, x) => with("not", 1, vec![expr_doc(x)]),
        ExprKind::Binary(op, l, r) => with(op_str(*op), 1, vec![expr_doc(l), expr_doc(r)]),
        ExprKind::Cast(x, ty) => with("as", 1, vec![expr_doc(x), atom(&ty.name)]),
        ExprKind::If { cond, then, else_ } => {
            let else_doc = match &else_.kind {
                ExprKind::Block(b) => branch_doc(b),
                _ => expr_doc(else_),
            };
            with("if", 2, vec![expr_doc(cond), branch_doc(then), else_doc])
        }
        ExprKind::For { var, lo, hi, carry, init, body } => {
            let mut items = vec![
                atom(print_pat(var)),
                list(1, vec![atom("range"), expr_doc(lo), expr_doc(hi)]),
                list(2, vec![atom("carry"), atom(print_pat(carry)), expr_doc(init)]),
            ];
            items.extend(block_docs(body));
            with("for", 4, items)
        }
        ExprKind::Block(b) => block_doc(b),
    }
}
