//! The front end: `.pod` source text to an untyped [`ast::Module`].
//!
//! [`lexer`] turns text into [`token::Tok`]s with logos; [`parser`] runs the lalrpop
//! parser generated from `grammar/pod.lalrpop` (by `build.rs`) over them. Both report
//! problems as [`Diag`](crate::diag::Diag)s and keep going, so one run shows several errors,
//! and [`parse`] never panics, whatever the input. [`print`](mod@print) dumps a tree as the
//! S-expressions that `podc build --emit ast` and the snapshot tests show.
//!
//! Error codes of this phase:
//!
//! | code  | meaning |
//! |-------|---------|
//! | E0001 | unexpected token: "expected one of `)` or `,`, found `;`" |
//! | E0002 | unexpected end of file; secondary labels mark delimiters left open |
//! | E0003 | invalid character (a run of them is one error), or malformed hexadecimal literal (`0xFG`) |
//! | E0004 | unterminated block comment (block comments nest) |
//! | E0005 | integer literal above `u64::MAX`, or tuple index above `u32::MAX` |
//! | E0006 | chained comparison, `a < b < c` |
//! | E0007 | expression nested too deeply (more than 256 levels) |
//!
//! After a syntax error the parser skips to the next item (`fn`, `struct`, `const`, `env`,
//! `use`), or, inside a `let` statement, to its `;`; inside an `env` body, to the env's next
//! `fn` or to its closing `}` (the one that matches its `{`, found by counting braces), so
//! a broken member or function loses neither the env nor its other functions. At most 100
//! syntax errors are reported per file. The returned module holds every item that parsed, including those from which a
//! broken `let` was dropped, so later phases should not run on a module whose parse
//! reported errors.

pub mod ast;
pub mod lexer;
pub mod parser;
pub mod print;
pub mod span;
pub mod token;

#[cfg(test)]
mod tests;

pub use parser::parse;
