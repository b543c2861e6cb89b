//! The diagnostic value every pass produces.

use crate::{Code, FileId, Span};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    Note,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        }
    }
}

/// A labelled span. The primary label says where the problem is; secondary labels say where
/// the facts it depends on came from (e.g. the `arch` line that fixes the number of heads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Label {
    pub file: FileId,
    pub span: Span,
    pub message: String,
    pub primary: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub code: Code,
    pub severity: Severity,
    pub message: String,
    /// The first label is primary; the rest are secondary.
    pub labels: Vec<Label>,
    pub help: Option<String>,
    /// Extra lines shown after the labels (e.g. a memory breakdown table).
    pub notes: Vec<String>,
    /// Machine-applicable fixes (editors offer them as quick fixes; `--format json` and SARIF
    /// carry them for CI tools).
    pub fixes: Vec<Fix>,
}

/// A fix the checker knows: applying every edit makes the mistake go away.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fix {
    /// What it does, as a command: "use `tp(2), dp(2)`".
    pub message: String,
    /// Non-overlapping replacements, in source order within each file.
    pub edits: Vec<Edit>,
}

/// Replace the text at `span` of `file` by `text`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Edit {
    pub file: FileId,
    pub span: Span,
    pub text: String,
}

impl Diagnostic {
    /// A diagnostic with the code's default severity and a primary label.
    pub fn new(code: Code, message: impl Into<String>, file: FileId, span: Span) -> Self {
        Diagnostic {
            code,
            severity: code.info().severity,
            message: message.into(),
            labels: vec![Label {
                file,
                span,
                message: String::new(),
                primary: true,
            }],
            help: None,
            notes: Vec::new(),
            fixes: Vec::new(),
        }
    }

    /// Adds a machine-applicable fix.
    pub fn fix(mut self, message: impl Into<String>, edits: Vec<Edit>) -> Self {
        self.fixes.push(Fix {
            message: message.into(),
            edits,
        });
        self
    }

    /// Adds a fix when there is one (`(message, edits)`).
    pub fn fix_opt(self, fix: Option<(String, Vec<Edit>)>) -> Self {
        match fix {
            Some((message, edits)) => self.fix(message, edits),
            None => self,
        }
    }

    /// Sets the primary label's text.
    pub fn primary_label(mut self, message: impl Into<String>) -> Self {
        self.labels[0].message = message.into();
        self
    }

    pub fn label(mut self, file: FileId, span: Span, message: impl Into<String>) -> Self {
        self.labels.push(Label {
            file,
            span,
            message: message.into(),
            primary: false,
        });
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    pub fn primary(&self) -> &Label {
        &self.labels[0]
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// Orders diagnostics by file, position, then code, so output does not depend on pass order.
    pub fn sort_key(&self) -> (FileId, u32, u32, Code) {
        let p = self.primary();
        (p.file, p.span.start, p.span.end, self.code)
    }
}
