//! The tokens of `.pod` source, recognised by a logos-generated automaton.
//!
//! [`lexer::lex`](crate::syntax::lexer::lex) wraps this automaton: it turns its errors into
//! diagnostics and keeps going, so the parser only ever sees valid tokens.

use logos::{Lexer, Logos};

/// What can go wrong inside one token. The lexer turns each into a diagnostic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LexError {
    /// A character that starts no token (`$`, `#`, a lone `&`).
    #[default]
    InvalidChar,
    /// A `/*` whose `*/` never comes.
    UnterminatedComment,
    /// An integer literal above `u64::MAX`.
    IntTooLarge,
    /// `0x` not followed by hexadecimal digits only (`0x`, `0xFG`).
    BadHex,
}

/// One token. Whitespace and comments are skipped; nothing else is.
#[derive(Logos, Clone, Copy, Debug, PartialEq)]
#[logos(error = LexError)]
#[logos(skip r"[ \t\r\n\f]+")]
// A line comment runs to the end of its line, which is what the greedy `[^\n]*` means.
#[logos(skip(r"//[^\n]*", allow_greedy = true))]
#[logos(skip("/\\*", callback = block_comment))]
pub enum Tok<'s> {
    /// `x`, `Dense`, `f32`: dtype names are ordinary identifiers.
    #[regex("[A-Za-z_][A-Za-z0-9_]*")]
    Name(&'s str),
    /// `42`, `1_000`, `0x1BD1_1BDA`. The hexadecimal pattern takes in any letters after `0x`,
    /// so that `0xFG` is one bad literal rather than `0xF` followed by a name.
    #[regex("[0-9][0-9_]*", |lex| parse_int(lex.slice()))]
    #[regex("0[xX][0-9A-Za-z_]*", |lex| parse_hex(lex.slice()))]
    Int(u64),
    /// `1.5`, `1e-3`, `2.5E+4`. A dot must be followed by a digit, so `0..10` is not a float.
    #[regex(r"[0-9][0-9_]*\.[0-9][0-9_]*([eE][+-]?[0-9][0-9_]*)?", |lex| parse_float(lex.slice()))]
    #[regex(r"[0-9][0-9_]*[eE][+-]?[0-9][0-9_]*", |lex| parse_float(lex.slice()))]
    Float(f64),
    /// The wildcard `_` (while `_x` is a name).
    #[token("_", priority = 3)]
    Underscore,

    // keywords
    #[token("use")]
    Use,
    #[token("const")]
    Const,
    #[token("struct")]
    Struct,
    #[token("fn")]
    Fn,
    #[token("env")]
    Env,
    #[token("agent")]
    Agent,
    #[token("extern")]
    Extern,
    #[token("let")]
    Let,
    #[token("if")]
    If,
    #[token("else")]
    Else,
    #[token("for")]
    For,
    #[token("in")]
    In,
    #[token("carry")]
    Carry,
    #[token("as")]
    As,
    #[token("true")]
    True,
    #[token("false")]
    False,

    // delimiters
    #[token("(")]
    LParen,
    #[token(")")]
    RParen,
    #[token("[")]
    LBracket,
    #[token("]")]
    RBracket,
    #[token("{")]
    LBrace,
    #[token("}")]
    RBrace,
    /// The `}` that closes an `env` body. The lexer never produces it: the parser's driver
    /// puts it in place of the `}` that matches an env's `{`, so that recovery from an error
    /// inside the env can skip to the env's real end (an LR parser cannot count braces).
    EnvClose,

    // punctuation
    #[token(",")]
    Comma,
    #[token(";")]
    Semi,
    #[token(":")]
    Colon,
    #[token("::")]
    PathSep,
    #[token(".")]
    Dot,
    #[token("..")]
    DotDot,
    #[token("->")]
    Arrow,
    #[token("=")]
    Assign,

    // operators
    #[token("+")]
    Plus,
    #[token("-")]
    Minus,
    #[token("*")]
    Star,
    #[token("/")]
    Slash,
    #[token("%")]
    Percent,
    #[token("**")]
    StarStar,
    #[token("@")]
    At,
    #[token("==")]
    EqEq,
    #[token("!=")]
    Ne,
    #[token("<")]
    Lt,
    #[token("<=")]
    Le,
    #[token(">")]
    Gt,
    #[token(">=")]
    Ge,
    #[token("&&")]
    AndAnd,
    #[token("||")]
    OrOr,
    #[token("!")]
    Bang,
}

/// Skips a block comment whose `/*` was just matched. Block comments nest, as in Rust,
/// so `/* a /* b */ c */` is one comment; logos regexes cannot count, hence this callback.
fn block_comment<'s>(lex: &mut Lexer<'s, Tok<'s>>) -> Result<(), LexError> {
    let rest = lex.remainder().as_bytes();
    let mut depth = 1usize;
    let mut i = 0;
    while let (Some(&a), Some(&b)) = (rest.get(i), rest.get(i + 1)) {
        match (a, b) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    lex.bump(i);
                    return Ok(());
                }
            }
            _ => i += 1,
        }
    }
    // Swallow the rest of the file: it is all comment, and lexing it would only add noise.
    lex.bump(rest.len());
    Err(LexError::UnterminatedComment)
}

/// Parses the digits (and `_` separators) of an integer literal.
pub(crate) fn parse_int(digits: &str) -> Result<u64, LexError> {
    digits.chars().filter(|&c| c != '_').try_fold(0u64, |n, c| {
        let d = c.to_digit(10).ok_or(LexError::InvalidChar)?;
        n.checked_mul(10).and_then(|n| n.checked_add(u64::from(d))).ok_or(LexError::IntTooLarge)
    })
}

/// Parses a hexadecimal literal, `0x` included (and `_` separators).
pub(crate) fn parse_hex(text: &str) -> Result<u64, LexError> {
    let digits = text.get(2..).unwrap_or("");
    let valid = digits.chars().all(|c| c == '_' || c.is_ascii_hexdigit());
    if !valid || !digits.chars().any(|c| c.is_ascii_hexdigit()) {
        return Err(LexError::BadHex);
    }
    digits
        .chars()
        .filter_map(|c| c.to_digit(16))
        .try_fold(0u64, |n, d| n.checked_mul(16).and_then(|n| n.checked_add(u64::from(d))).ok_or(LexError::IntTooLarge))
}

/// Parses a float literal already validated by the regex; too large a value becomes infinity.
fn parse_float(text: &str) -> Option<f64> {
    text.replace('_', "").parse().ok()
}

impl Tok<'_> {
    /// Whether the token is a keyword (messages call it "keyword `let`").
    pub fn is_keyword(&self) -> bool {
        matches!(
            self,
            Tok::Use
                | Tok::Const
                | Tok::Struct
                | Tok::Fn
                | Tok::Env
                | Tok::Agent
                | Tok::Extern
                | Tok::Let
                | Tok::If
                | Tok::Else
                | Tok::For
                | Tok::In
                | Tok::Carry
                | Tok::As
                | Tok::True
                | Tok::False
        )
    }

    /// How messages name the token, given its source text: "`;`", "keyword `let`",
    /// "identifier `x`", "integer `1_000`".
    pub fn describe(&self, text: &str) -> String {
        match self {
            Tok::Name(_) => format!("identifier `{text}`"),
            Tok::Int(_) => format!("integer `{text}`"),
            Tok::Float(_) => format!("float `{text}`"),
            tok if tok.is_keyword() => format!("keyword `{text}`"),
            _ => format!("`{text}`"),
        }
    }
}
