//! Diagnostics: every phase reports errors as [`Diag`] values, and this module alone
//! renders them, through codespan-reporting.

use crate::syntax::span::{FileId, Span};
use codespan_reporting::diagnostic::{Diagnostic, Label};
use codespan_reporting::files::SimpleFiles;
use codespan_reporting::term::{self, termcolor};

/// The source files of one compilation; spans index into it.
#[derive(Default)]
pub struct SourceMap {
    files: SimpleFiles<String, String>,
}

impl SourceMap {
    pub fn add(&mut self, name: impl Into<String>, source: impl Into<String>) -> FileId {
        self.files.add(name.into(), source.into())
    }

    pub fn source(&self, file: FileId) -> &str {
        self.files.get(file).map(|f| f.source().as_str()).unwrap_or("")
    }

    pub fn name(&self, file: FileId) -> &str {
        self.files.get(file).map(|f| f.name().as_str()).unwrap_or("<unknown>")
    }
}

/// One error: a code (`E0101`), a message, a primary label, secondary labels, notes and help.
#[derive(Clone, Debug, PartialEq)]
pub struct Diag {
    pub code: &'static str,
    pub message: String,
    pub primary: (Span, String),
    pub secondary: Vec<(Span, String)>,
    pub notes: Vec<String>,
    pub help: Option<String>,
}

impl Diag {
    pub fn new(code: &'static str, message: impl Into<String>, span: Span, label: impl Into<String>) -> Diag {
        Diag {
            code,
            message: message.into(),
            primary: (span, label.into()),
            secondary: vec![],
            notes: vec![],
            help: None,
        }
    }

    pub fn with_label(mut self, span: Span, label: impl Into<String>) -> Diag {
        self.secondary.push((span, label.into()));
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Diag {
        self.notes.push(note.into());
        self
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diag {
        self.help = Some(help.into());
        self
    }

    fn to_codespan(&self) -> Diagnostic<FileId> {
        let (span, label) = &self.primary;
        let mut labels =
            vec![Label::primary(span.file, span.start as usize..span.end as usize).with_message(label.clone())];
        labels.extend(
            self.secondary
                .iter()
                .map(|(s, m)| Label::secondary(s.file, s.start as usize..s.end as usize).with_message(m.clone())),
        );
        let mut notes = self.notes.clone();
        if let Some(help) = &self.help {
            notes.push(format!("help: {help}"));
        }
        Diagnostic::error()
            .with_code(self.code)
            .with_message(self.message.clone())
            .with_labels(labels)
            .with_notes(notes)
    }
}

/// Renders diagnostics without colour, as the snapshot tests and `--color never` see them.
pub fn render_plain(map: &SourceMap, diags: &[Diag]) -> String {
    let mut out = String::new();
    let config = term::Config::default();
    for d in diags {
        // Writing into a String cannot fail; a span outside its file degrades to one line.
        if term::emit_to_string(&mut out, &config, &map.files, &d.to_codespan()).is_err() {
            out.push_str(&format!("error[{}]: {}\n", d.code, d.message));
        }
    }
    out
}

/// Renders diagnostics to stderr, in colour when it is a terminal.
pub fn emit_stderr(map: &SourceMap, diags: &[Diag]) {
    let choice = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        termcolor::ColorChoice::Auto
    } else {
        termcolor::ColorChoice::Never
    };
    let writer = termcolor::StandardStream::stderr(choice);
    let config = term::Config::default();
    let styles = term::Styles::default();
    for d in diags {
        let mut lock = writer.lock();
        let mut styled = term::StylesWriter::new(&mut lock, &styles);
        if term::emit_to_write_style(&mut styled, &config, &map.files, &d.to_codespan()).is_err() {
            eprintln!("error[{}]: {}", d.code, d.message);
        }
    }
}

/// Levenshtein distance, for "did you mean" suggestions.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
