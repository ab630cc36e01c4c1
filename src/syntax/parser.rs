//! Tokens to [`Module`]: drives the lalrpop parser generated from `grammar/pod.lalrpop`,
//! and turns its recovered errors into diagnostics.

use crate::array::DType;
use crate::diag::Diag;
use crate::syntax::ast::*;
use crate::syntax::lexer::{self, Spanned};
use crate::syntax::span::{FileId, Span};
use crate::syntax::token::Tok;
use lalrpop_util::{ErrorRecovery, ParseError};
use std::convert::Infallible;

lalrpop_util::lalrpop_mod!(
    #[allow(clippy::all, clippy::pedantic, unused_qualifications, unused_imports, dead_code)]
    grammar,
    "/pod.rs"
);

/// The deepest nesting the parser accepts (see [`nesting_bound`]). Every later phase walks
/// the tree recursively, so an absurdly deep expression must stop here, not overflow a stack.
const MAX_NESTING: usize = 256;

/// Syntax errors reported per file. Past this many, later ones are almost surely cascades,
/// and explaining each costs a scan of the tokens before it.
const MAX_SYNTAX_ERRORS: usize = 100;

type Recovered<'s> = ErrorRecovery<usize, Tok<'s>, Infallible>;
type SyntaxError<'s> = ParseError<usize, Tok<'s>, Infallible>;

/// What the grammar's actions report besides the tree.
#[derive(Default)]
pub(crate) struct Sink<'s> {
    /// Syntax errors that the grammar recovered from with `!`.
    pub(crate) recovered: Vec<Recovered<'s>>,
    /// Errors found in otherwise well-formed syntax (E0005 tuple index, E0006).
    pub(crate) diags: Vec<Diag>,
}

/// Parses one file. See [`crate::syntax`] for the error codes.
pub fn parse(file: FileId, src: &str) -> (Module, Vec<Diag>) {
    let mut lexed = lexer::lex(file, src);
    mark_env_ends(&mut lexed.tokens);
    let mut diags = lexed.diags;
    let empty = Module { uses: vec![], items: vec![] };
    if let Some((start, end)) = nesting_bound(&lexed.tokens) {
        diags.push(
            Diag::new(
                "E0007",
                "expression nested too deeply",
                Span::new(file, start, end),
                "nesting limit reached here",
            )
            .with_note(format!("podracer accepts at most {MAX_NESTING} levels of nested expressions")),
        );
        return (empty, diags);
    }
    let mut sink = Sink::default();
    let tokens = lexed.tokens.iter().map(|&t| Ok::<_, Infallible>(t));
    let module = match grammar::ModuleParser::new().parse(file, &mut sink, tokens) {
        Ok(module) => module,
        // Only reachable when recovery fails, which the item-level `!` should prevent.
        Err(error) => {
            sink.recovered.push(ErrorRecovery { error, dropped_tokens: vec![] });
            empty
        }
    };
    let ctx = ErrorContext {
        file,
        src,
        tokens: &lexed.tokens,
        after_error: &lexed.after_error,
        eof_after_error: lexed.eof_after_error,
    };
    diags.extend(sink.recovered.into_iter().filter_map(|r| ctx.syntax_error(r.error)).take(MAX_SYNTAX_ERRORS));
    diags.extend(sink.diags);
    diags.sort_by_key(|d| (d.primary.0.start, d.primary.0.end));
    (module, diags)
}

/// Turns the `}` that matches each `env NAME {` into [`Tok::EnvClose`], which the grammar
/// takes as the end of the env: recovering from an error inside an env then skips to the
/// env's real end, not to the first `}` (which may close a block inside one of its
/// functions). An env whose `{` is never matched keeps plain `}`s only.
fn mark_env_ends(tokens: &mut [Spanned<'_>]) {
    // For each open `{`: whether it opens an env body.
    let mut open: Vec<bool> = vec![];
    // The two tokens before the current one.
    let mut before: [Option<Tok<'_>>; 2] = [None, None];
    for (_, tok, _) in tokens.iter_mut() {
        let this = *tok;
        match this {
            Tok::LBrace => open.push(matches!(before, [Some(Tok::Env), Some(Tok::Name(_))])),
            // The guard pops whether it holds or not: every `}` closes the innermost `{`.
            Tok::RBrace if open.pop() == Some(true) => *tok = Tok::EnvClose,
            _ => {}
        }
        before = [before[1], Some(this)];
    }
}

// ----- helpers for the grammar's actions

/// The members and functions of an env, as the grammar collects them.
#[derive(Default)]
pub(crate) struct EnvBody {
    pub(crate) members: Vec<EnvMember>,
    pub(crate) fns: Vec<Fn>,
}

impl EnvBody {
    pub(crate) fn into_env(self, name: Ident, external: bool, span: Span) -> Env {
        Env { name, external, members: self.members, fns: self.fns, span }
    }
}

pub(crate) fn expr(kind: ExprKind, lo: usize, hi: usize, file: FileId) -> Expr {
    Expr { kind, span: Span::new(file, lo, hi) }
}

pub(crate) fn binary(op: BinOp, l: Expr, r: Expr, span: Span) -> Expr {
    Expr { kind: ExprKind::Binary(op, Box::new(l), Box::new(r)), span }
}

/// `(e)` is `e` (its span widened to the parentheses), `()`, `(e,)` and `(a, b)` are tuples.
pub(crate) fn paren_or_tuple(mut items: Vec<Expr>, last: Option<Expr>, span: Span) -> Expr {
    match last {
        Some(e) if items.is_empty() => Expr { span, ..e },
        last => {
            items.extend(last);
            Expr { kind: ExprKind::Tuple(items), span }
        }
    }
}

/// Like [`paren_or_tuple`], for types.
pub(crate) fn tuple_type(mut items: Vec<Type>, last: Option<Type>, span: Span) -> Type {
    match last {
        Some(t) if items.is_empty() => Type { span, ..t },
        last => {
            items.extend(last);
            Type { kind: TypeKind::Tuple(items), span }
        }
    }
}

/// Like [`paren_or_tuple`], for patterns; `(x)` keeps the span of `x`.
pub(crate) fn tuple_pat(mut items: Vec<Pat>, last: Option<Pat>, span: Span) -> Pat {
    match last {
        Some(p) if items.is_empty() => p,
        last => {
            items.extend(last);
            Pat::Tuple(items, span)
        }
    }
}

/// A type written as a bare name: a scalar if it is a dtype (`f32` alone is a
/// zero-dimensional array), else a struct without arguments (`Key`, `State`).
pub(crate) fn word_type(name: Ident, span: Span) -> Type {
    let kind = if DType::from_name(&name.name).is_some() {
        TypeKind::Array { dtype: name, dims: vec![] }
    } else {
        TypeKind::Named { name, args: vec![] }
    };
    Type { kind, span }
}

/// `e.3`; an index beyond `u32` is reported (E0005) and clamped.
pub(crate) fn tuple_field(sink: &mut Sink<'_>, e: Expr, index: u64, index_span: Span, span: Span) -> Expr {
    let index = u32::try_from(index).unwrap_or_else(|_| {
        sink.diags.push(Diag::new("E0005", "tuple index is too large", index_span, "does not fit in 32 bits"));
        u32::MAX
    });
    Expr { kind: ExprKind::TupleField(Box::new(e), index, index_span), span }
}

/// E0001 for a `let` statement directly in an env body (`let` is three bytes long).
pub(crate) fn stray_let(span: Span) -> Diag {
    Diag::new(
        "E0001",
        "expected a member (`name: type`) or `fn`, found keyword `let`",
        span,
        "unexpected keyword `let`",
    )
    .with_help(STRAY_LET_HELP)
}

const ENV_BODY_HELP: &str = "an `env` body holds members, such as `action: discrete(3)`, and `fn` items";
const STRAY_LET_HELP: &str =
    "`let` statements go inside functions; an `env` body holds members, such as `action: discrete(3)`, and `fn` items";

/// E0006, for the second operator of `a < b < c` (`first` is `a < b`).
pub(crate) fn chained_comparison(first: &Expr, op: Span) -> Diag {
    Diag::new("E0006", "comparison operators cannot be chained", op, "second comparison")
        .with_label(first.span, "this is already a comparison")
        .with_help("join two comparisons with `&&`, as in `a < b && b < c`")
}

// ----- diagnostics

/// What turning a syntax error into a diagnostic needs to know about the file.
struct ErrorContext<'a, 's> {
    file: FileId,
    src: &'s str,
    tokens: &'a [Spanned<'s>],
    after_error: &'a [usize],
    eof_after_error: bool,
}

impl ErrorContext<'_, '_> {
    /// The diagnostic for one syntax error, or `None` when a lexical error already explains it.
    fn syntax_error(&self, error: SyntaxError<'_>) -> Option<Diag> {
        match error {
            ParseError::UnrecognizedToken { token: (start, tok, end), expected } => {
                if self.after_error.contains(&start) {
                    return None;
                }
                Some(self.unexpected(start, tok, end, &expected))
            }
            ParseError::ExtraToken { token: (start, tok, end) } => {
                Some(self.unexpected(start, tok, end, &["end of file".to_string()]))
            }
            ParseError::UnrecognizedEof { location, expected } => {
                if self.eof_after_error {
                    return None;
                }
                Some(self.unexpected_eof(location, &expected))
            }
            // The lexer hands over only known tokens, but a clear message costs nothing.
            ParseError::InvalidToken { location } => {
                let span = Span::new(self.file, location, location);
                Some(Diag::new("E0001", "unexpected token", span, "unexpected token"))
            }
            ParseError::User { error } => match error {},
        }
    }

    /// E0001: "expected one of `)` or `,`, found `;`".
    fn unexpected(&self, start: usize, tok: Tok<'_>, end: usize, expected: &[String]) -> Diag {
        let found = tok.describe(self.src.get(start..end).unwrap_or(""));
        let message = match expected_phrase(expected, false) {
            Some(expected) => format!("{expected}, found {found}"),
            None => format!("unexpected {found}"),
        };
        let diag = Diag::new("E0001", message, Span::new(self.file, start, end), format!("unexpected {found}"));
        let at = self.tokens.partition_point(|&(s, _, _)| s < start);
        // `f(a, b;` or `f(a, b }`: the list ended while a bracket was still open. (A `{` is
        // only blamed for a wrong closer: in `struct S { a: f32; }` it is closed later.)
        let innermost = self.tokens.get(..at).map(unclosed_delimiters).and_then(|open| open.last().copied());
        let diag = match (innermost, tok) {
            (Some((lo, Tok::LParen, hi)), Tok::Semi | Tok::RBracket | Tok::RBrace | Tok::EnvClose)
                if has(expected, ")") =>
            {
                diag.with_label(Span::new(self.file, lo, hi), "unclosed delimiter")
            }
            (Some((lo, Tok::LBracket, hi)), Tok::Semi | Tok::RParen | Tok::RBrace | Tok::EnvClose)
                if has(expected, "]") =>
            {
                diag.with_label(Span::new(self.file, lo, hi), "unclosed delimiter")
            }
            // (or for an item keyword, which cannot be inside braces, except `fn` right in an env)
            (
                Some((lo, Tok::LBrace, hi)),
                Tok::RParen
                | Tok::RBracket
                | Tok::Fn
                | Tok::Env
                | Tok::Extern
                | Tok::Agent
                | Tok::Struct
                | Tok::Const
                | Tok::Use,
            ) if has(expected, "}") => diag.with_label(Span::new(self.file, lo, hi), "unclosed delimiter"),
            _ => diag,
        };
        self.with_help(diag, at, Some(tok), expected)
    }

    /// E0002, with a secondary label on each delimiter left open.
    fn unexpected_eof(&self, location: usize, expected: &[String]) -> Diag {
        let message = match expected_phrase(expected, true) {
            Some(expected) => format!("unexpected end of file, {expected}"),
            None => "unexpected end of file".to_string(),
        };
        let span = Span::new(self.file, location, location);
        let mut diag = Diag::new("E0002", message, span, "the file ends here");
        for (start, _, end) in unclosed_delimiters(self.tokens) {
            diag = diag.with_label(Span::new(self.file, start, end), "unclosed delimiter");
        }
        self.with_help(diag, self.tokens.len(), None, expected)
    }

    /// Adds the help that fits the error at token index `at` (`found`, or the end of file).
    fn with_help(&self, diag: Diag, at: usize, found: Option<Tok<'_>>, expected: &[String]) -> Diag {
        let before = |n: usize| at.checked_sub(n).and_then(|i| self.tokens.get(i)).map(|t| t.1);
        let help = if in_env_body(expected) && found.is_some() {
            ENV_BODY_HELP.to_string()
        } else if found != Some(Tok::Colon) && expected.len() == 1 && has(expected, ":") && self.in_env(at) {
            // `env E { x + 1 }`: `x` was taken for a member's name.
            ENV_BODY_HELP.to_string()
        } else if has(expected, "else") {
            "`if` is an expression, so it needs an `else` branch".to_string()
        } else if has(expected, "carry") {
            "a `for` loop carries a value: `for i in 0..N carry acc = init { ... }`".to_string()
        } else if matches!(found, Some(Tok::RBrace | Tok::EnvClose)) && has(expected, "let") {
            "a block must end with an expression, which is its value".to_string()
        } else if found == Some(Tok::Assign) && has(expected, "==") {
            "to compare two values, use `==`".to_string()
        } else if let (Some(Tok::Colon), Some(Tok::Name(_)), Some(Tok::LBrace), Some(Tok::Name(_))) =
            (found, before(1), before(2), before(3))
        {
            // `if x == S { a: 1 } { ... }`: `S` ended the condition, and `{ a:` opened a block.
            "a struct literal in an `if` condition or a `for` header needs parentheses: `(S { .. })`".to_string()
        } else if matches!(before(1), Some(Tok::Name("while" | "loop"))) {
            // `while c { .. }`: `while` was taken for a value, and what follows it is unexpected.
            "there is no `while` loop: loops have trip counts known at compile time, \
             `for i in 0..N carry x = init { ... }`"
                .to_string()
        } else if found == Some(Tok::PathSep) {
            "`::` joins a module path in a `use` declaration (import the item, then call it by name), \
             or calls an env's function: `CartPole::step(s, a, key)`"
                .to_string()
        } else if has(expected, ";") {
            let what = match self.enclosing_statement(at) {
                Some(Tok::Let) => "the `let` statement",
                Some(Tok::Const) => "the `const` item",
                Some(Tok::Use) => "the `use` declaration",
                _ => return diag,
            };
            format!("add `;` after {what}")
        } else {
            return diag;
        };
        diag.with_help(help)
    }

    /// Whether token `at` is directly in an env body: the innermost `{` still open before it
    /// follows `env NAME`.
    fn in_env(&self, at: usize) -> bool {
        let Some(before) = self.tokens.get(..at) else { return false };
        let Some(&(start, Tok::LBrace, _)) = unclosed_delimiters(before).last() else { return false };
        let i = before.partition_point(|&(s, _, _)| s < start);
        i >= 2 && matches!(before.get(i - 2..i), Some([(_, Tok::Env, _), (_, Tok::Name(_), _)]))
    }

    /// The keyword that starts the statement containing token `at` (at the same bracket
    /// depth, with no `;` in between), if any.
    fn enclosing_statement(&self, at: usize) -> Option<Tok<'_>> {
        let mut depth = 0usize;
        for &(_, tok, _) in self.tokens.get(..at)?.iter().rev() {
            match tok {
                Tok::RParen | Tok::RBracket | Tok::RBrace | Tok::EnvClose => depth += 1,
                Tok::LParen | Tok::LBracket | Tok::LBrace => depth = depth.checked_sub(1)?,
                Tok::Semi if depth == 0 => return None,
                Tok::Let | Tok::Const | Tok::Use if depth == 0 => return Some(tok),
                _ => {}
            }
        }
        None
    }
}

fn has(expected: &[String], terminal: &str) -> bool {
    expected.iter().any(|t| terminal_name(t) == terminal)
}

/// How a message writes an expected terminal: without lalrpop's quotes, and the end of an
/// env (a token of its own, see [`mark_env_ends`]) as the `}` it is.
fn terminal_name(t: &str) -> &str {
    match t.trim_matches('"') {
        "env}" => "}",
        t => t,
    }
}

/// Whether the parser was in an env body, where members and functions go: only there are
/// both an identifier and `fn` expected.
fn in_env_body(expected: &[String]) -> bool {
    has(expected, "identifier") && has(expected, "fn")
}

/// Tokens that can start an expression: when all are expected, the message says
/// "an expression" instead of listing them.
const EXPR_START: [&str; 12] =
    ["identifier", "integer", "float", "true", "false", "(", "[", "{", "-", "!", "if", "for"];

/// Binary operators: when several are expected, the message says "an operator".
const BINARY_OPS: [&str; 15] = ["+", "-", "*", "/", "%", "**", "@", "==", "!=", "<", "<=", ">", ">=", "&&", "||"];

/// Postfix forms, folded into "an operator" along with the binary operators.
const POSTFIX_OPS: [&str; 5] = ["as", ".", "[", "(", "::"];

/// "expected `;`", "expected one of `)`, `,` or an operator": lalrpop's list of expected
/// terminals, sorted, deduplicated and summarised. `None` if nothing was expected. At the
/// end of the file (`eof`), an env body's `}` is worth mentioning.
fn expected_phrase(expected: &[String], eof: bool) -> Option<String> {
    let mut terms: Vec<&str> = expected.iter().map(|t| terminal_name(t)).collect();
    terms.sort_unstable();
    terms.dedup();
    let mut words = vec![];
    if in_env_body(expected) {
        // Separators are optional, and a spec that could go on (`f32[`, `Dense<`, `box(`) is a detail.
        terms.retain(|t| !["identifier", "fn", "let", ",", ";", "<", "[", "("].contains(t) && (eof || *t != "}"));
        words.push("a member (`name: type`)");
        words.push("`fn`");
    }
    if EXPR_START.iter().all(|t| terms.contains(t)) {
        terms.retain(|t| !EXPR_START.contains(t));
        words.push("an expression");
    }
    if terms.iter().filter(|t| BINARY_OPS.contains(t)).count() >= 3 {
        terms.retain(|t| !BINARY_OPS.contains(t) && !POSTFIX_OPS.contains(t));
        words.push("an operator");
    }
    let mut items: Vec<String> = vec![];
    for t in terms {
        match t {
            "identifier" => words.push("an identifier"),
            "integer" => words.push("an integer"),
            "float" => words.push("a float"),
            "end of file" => words.push("end of file"),
            t => items.push(format!("`{t}`")),
        }
    }
    // "one of" only where it helps: "expected one of `,` or `]`", "expected `;` or an operator".
    let one_of = if items.len() >= 2 { "one of " } else { "" };
    items.extend(words.into_iter().map(String::from));
    match items.as_slice() {
        [] => None,
        [one] => Some(format!("expected {one}")),
        [init @ .., last] => Some(format!("expected {one_of}{} or {last}", init.join(", "))),
    }
}

/// The opening delimiters that are never closed, outermost first. A closer pops back to its
/// matching opener (so a stray `)` inside `{ ... }` does not hide the `{`).
fn unclosed_delimiters<'s>(tokens: &[Spanned<'s>]) -> Vec<Spanned<'s>> {
    let mut open: Vec<Spanned<'s>> = vec![];
    for &(start, tok, end) in tokens {
        let opener = match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => {
                open.push((start, tok, end));
                continue;
            }
            Tok::RParen => Tok::LParen,
            Tok::RBracket => Tok::LBracket,
            Tok::RBrace | Tok::EnvClose => Tok::LBrace,
            _ => continue,
        };
        if let Some(i) = open.iter().rposition(|&(_, t, _)| t == opener) {
            open.truncate(i);
        }
    }
    open
}

/// An upper bound on how deeply the parse tree can nest, computed from tokens alone; if it
/// exceeds [`MAX_NESTING`], returns the place where it did.
///
/// Tree depth comes from brackets and from operators: in `a + b + c` the leaf `a` sits
/// under two additions, even those written after it. So the bound of a stretch of tokens
/// between separators (`,`, `;`, `let` and item keywords, which start sibling subtrees) is
/// its number of operator-like tokens plus the deepest bracket group inside it, and a
/// group adds one to the deepest of its stretches.
fn nesting_bound(tokens: &[Spanned<'_>]) -> Option<(usize, usize)> {
    /// A bracket group being scanned.
    #[derive(Default)]
    struct Group {
        /// Operator-like tokens in the current stretch.
        ops: usize,
        /// The deepest group closed so far in the current stretch.
        inner: usize,
        /// The deepest finished stretch.
        done: usize,
    }
    impl Group {
        fn depth(&self) -> usize {
            self.done.max(self.ops + self.inner)
        }
    }
    let mut stack = vec![Group::default()];
    for &(start, tok, end) in tokens {
        let mut top = stack.pop().unwrap_or_default();
        match tok {
            Tok::LParen | Tok::LBracket | Tok::LBrace => {
                top.ops += 1;
                stack.push(top);
                top = Group::default();
            }
            Tok::RParen | Tok::RBracket | Tok::RBrace | Tok::EnvClose => {
                // An unmatched closer at the top level closes nothing.
                if let Some(mut parent) = stack.pop() {
                    parent.inner = parent.inner.max(top.depth() + 1);
                    top = parent;
                }
            }
            Tok::Comma
            | Tok::Semi
            | Tok::Let
            | Tok::Fn
            | Tok::Env
            | Tok::Extern
            | Tok::Agent
            | Tok::Struct
            | Tok::Const
            | Tok::Use => {
                top.done = top.depth();
                top.ops = 0;
                top.inner = 0;
            }
            Tok::Plus
            | Tok::Minus
            | Tok::Star
            | Tok::Slash
            | Tok::Percent
            | Tok::StarStar
            | Tok::At
            | Tok::EqEq
            | Tok::Ne
            | Tok::Lt
            | Tok::Le
            | Tok::Gt
            | Tok::Ge
            | Tok::AndAnd
            | Tok::OrOr
            | Tok::Bang
            | Tok::As
            | Tok::Dot
            | Tok::If
            | Tok::For => top.ops += 1,
            Tok::Name(_)
            | Tok::Int(_)
            | Tok::Float(_)
            | Tok::Underscore
            | Tok::Else
            | Tok::In
            | Tok::Carry
            | Tok::True
            | Tok::False
            | Tok::Colon
            | Tok::PathSep
            | Tok::DotDot
            | Tok::Arrow
            | Tok::Assign => {}
        }
        let depth = top.depth() + stack.len();
        stack.push(top);
        if depth > MAX_NESTING {
            return Some((start, end));
        }
    }
    // Groups left open at the end still count: fold each into its parent.
    let mut depth = 0;
    while let Some(mut group) = stack.pop() {
        group.inner = group.inner.max(depth);
        depth = group.depth() + 1;
    }
    // `depth` counts the top level as a group too.
    let last = tokens.last().map_or((0, 0), |&(_, _, end)| (end, end));
    (depth > MAX_NESTING + 1).then_some(last)
}
