//! Source text to tokens, reporting every bad character and carrying on past it.

use crate::diag::Diag;
use crate::syntax::span::{FileId, Span};
use crate::syntax::token::{LexError, Tok, parse_int};
use logos::Logos;

/// A token with its byte range, as lalrpop takes it: `(start, token, end)`.
pub type Spanned<'s> = (usize, Tok<'s>, usize);

/// The lexer's result: every valid token, plus a diagnostic for each invalid stretch.
pub struct Lexed<'s> {
    /// The tokens in source order; comments and whitespace are gone.
    pub tokens: Vec<Spanned<'s>>,
    /// E0003, E0004 and E0005, in source order.
    pub diags: Vec<Diag>,
    /// Start offsets of the tokens that directly follow a skipped invalid stretch. A parse
    /// error at one of them is a consequence of the lexical error, and is not reported twice.
    pub after_error: Vec<usize>,
    /// Whether the file ends in a skipped invalid stretch (e.g. an unterminated comment).
    pub eof_after_error: bool,
}

/// Splits `src` into tokens. Never fails: invalid characters, unterminated comments and
/// oversized integers each give a diagnostic (E0003, E0004, E0005), and lexing goes on.
pub fn lex(file: FileId, src: &str) -> Lexed<'_> {
    let mut out = Lexed { tokens: vec![], diags: vec![], after_error: vec![], eof_after_error: false };
    // A run of adjacent invalid characters is reported once.
    let mut bad_run: Option<(usize, usize)> = None;
    let mut pending_error = false;
    let mut lexer = Tok::lexer(src);
    while let Some(result) = lexer.next() {
        let span = lexer.span();
        match result {
            Ok(tok) => {
                if let Some(run) = bad_run.take() {
                    out.diags.push(invalid_chars(file, src, run));
                }
                if std::mem::take(&mut pending_error) {
                    out.after_error.push(span.start);
                }
                push_token(&mut out, file, src, tok, span.start, span.end);
            }
            Err(LexError::InvalidChar) => {
                bad_run = match bad_run {
                    Some((start, end)) if end == span.start => Some((start, span.end)),
                    Some(run) => {
                        out.diags.push(invalid_chars(file, src, run));
                        Some((span.start, span.end))
                    }
                    None => Some((span.start, span.end)),
                };
                pending_error = true;
            }
            Err(LexError::UnterminatedComment) => {
                if let Some(run) = bad_run.take() {
                    out.diags.push(invalid_chars(file, src, run));
                }
                let open = Span::new(file, span.start, span.start + 2);
                out.diags.push(
                    Diag::new("E0004", "unterminated block comment", open, "this comment is never closed")
                        .with_note("block comments nest: each `/*` needs its own `*/`"),
                );
                pending_error = true;
            }
            // A bad integer literal is still an integer, so that the parse goes on undisturbed.
            Err(error @ (LexError::IntTooLarge | LexError::BadHex)) => {
                if let Some(run) = bad_run.take() {
                    out.diags.push(invalid_chars(file, src, run));
                }
                if std::mem::take(&mut pending_error) {
                    out.after_error.push(span.start);
                }
                let (diag, value) = if error == LexError::BadHex {
                    (bad_hex(file, src, span.start, span.end), 0)
                } else {
                    (int_too_large(file, span.start, span.end), u64::MAX)
                };
                out.diags.push(diag);
                out.tokens.push((span.start, Tok::Int(value), span.end));
            }
        }
    }
    if let Some(run) = bad_run {
        out.diags.push(invalid_chars(file, src, run));
    }
    out.eof_after_error = pending_error;
    out
}

/// Pushes a token, first splitting a float that follows a `.`: in `t.0.1` the automaton
/// sees `t`, `.`, `0.1`, but the only reading that parses is two tuple fields.
fn push_token<'s>(out: &mut Lexed<'s>, file: FileId, src: &'s str, tok: Tok<'s>, start: usize, end: usize) {
    let after_dot = matches!(out.tokens.last(), Some((_, Tok::Dot, _)));
    let text = src.get(start..end).unwrap_or("");
    if let (Tok::Float(_), true) = (tok, after_dot)
        && let Some((a, b)) = text.split_once('.')
        && !a.is_empty()
        && !b.is_empty()
        && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
    {
        let dot = start + a.len();
        push_int(out, file, a, start, dot);
        out.tokens.push((dot, Tok::Dot, dot + 1));
        push_int(out, file, b, dot + 1, end);
        return;
    }
    out.tokens.push((start, tok, end));
}

fn push_int(out: &mut Lexed<'_>, file: FileId, digits: &str, start: usize, end: usize) {
    let value = parse_int(digits).unwrap_or_else(|_| {
        out.diags.push(int_too_large(file, start, end));
        u64::MAX
    });
    out.tokens.push((start, Tok::Int(value), end));
}

fn int_too_large(file: FileId, start: usize, end: usize) -> Diag {
    Diag::new("E0005", "integer literal is too large", Span::new(file, start, end), "does not fit in 64 bits")
        .with_note(format!("the largest integer literal is {}", u64::MAX))
}

/// E0003 for a hexadecimal literal with no digits or a bad one: `0x`, `0xFG`.
fn bad_hex(file: FileId, src: &str, start: usize, end: usize) -> Diag {
    let text = src.get(start..end).unwrap_or("");
    let label = match text.get(2..).and_then(|d| d.chars().find(|&c| c != '_' && !c.is_ascii_hexdigit())) {
        Some(c) => format!("`{c}` is not a hexadecimal digit"),
        None => "no digits after `0x`".to_string(),
    };
    Diag::new("E0003", format!("invalid hexadecimal literal `{text}`"), Span::new(file, start, end), label)
        .with_help("hexadecimal digits are `0`-`9` and `a`-`f` (or `A`-`F`), as in `0x1BD1_1BDA`")
}

/// E0003 for the invalid characters in `start..end`.
fn invalid_chars(file: FileId, src: &str, (start, mut end): (usize, usize)) -> Diag {
    // Keep the span on character boundaries, whatever logos skipped.
    while end < src.len() && !src.is_char_boundary(end) {
        end += 1;
    }
    let text = src.get(start..end).unwrap_or("");
    let shown: String = text
        .chars()
        .map(|c| if c.is_control() || c.is_whitespace() { c.escape_debug().to_string() } else { c.to_string() })
        .collect();
    let several = text.chars().nth(1).is_some();
    let quoted = if shown.contains('`') { format!("'{shown}'") } else { format!("`{shown}`") };
    let message = if several { format!("invalid characters {quoted}") } else { format!("invalid character {quoted}") };
    let diag = Diag::new("E0003", message, Span::new(file, start, end), "not part of any token");
    match text {
        "&" => diag.with_help("logical and is written `&&`"),
        "|" => diag.with_help("logical or is written `||`"),
        "^" => diag.with_help("powers are written `**`"),
        "'" | "\"" => diag.with_help("`.pod` has no character or string literals"),
        _ => diag,
    }
}
