//! Running the checker on an open document and turning its diagnostics into LSP ones.

use super::text::{LineIndex, path_to_uri, std_file, uri_to_path};
use lsp_types::{DiagnosticRelatedInformation, DiagnosticSeverity, Location, NumberOrString, Uri};
use rlc_check::Checked;
use rlc_diagnostics::{Diagnostic, FileId, Files, Severity};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// Open documents, by the name the checker knows them under (the file path for `file:` URIs,
/// else the URI itself).
/// Shared texts (`Arc`), so that the snapshot each check takes (see `checking`) copies none.
#[derive(Default, Clone)]
pub struct Documents {
    pub by_name: HashMap<String, Arc<str>>,
}

impl rlc_check::SourceLoader for Documents {
    fn read(&self, path: &str) -> Result<String, String> {
        if let Some(text) = self.by_name.get(path) {
            return Ok(text.to_string());
        }
        super::super::sources::FileLoader.read(path)
    }
}

/// The checker's name for a document: its path for a `file:` URI (as `/`-separated text, so
/// relative imports join onto it), else the URI.
pub fn doc_name(uri: &str) -> String {
    match uri_to_path(uri) {
        Some(p) => p.to_string_lossy().replace('\\', "/"),
        None => uri.to_string(),
    }
}

/// One check of one document (the root) and everything it imports.
pub struct Analysis {
    pub files: Files,
    pub checked: Checked,
    /// Why the document was not checked, when an empty program stands in for it.
    pub unchecked: Option<String>,
}

impl Analysis {
    pub fn run(docs: &Documents, name: &str, text: String) -> Analysis {
        let mut files = Files::new();
        let checked = rlc_check::check(docs, &mut files, name, text);
        Analysis {
            files,
            checked,
            unchecked: None,
        }
    }

    /// An empty program standing in for a document that was not checked, and why.
    pub fn unchecked(docs: &Documents, name: &str, why: String) -> Analysis {
        Analysis {
            unchecked: Some(why),
            ..Analysis::run(docs, name, String::new())
        }
    }

    pub fn root_file(&self) -> FileId {
        self.checked.modules.get(0).file
    }

    /// Whether a syntax error cut short an item of a module this check read: the items that
    /// parsed are checked, but the broken ones have no types (completion and hover then read
    /// the last analysis without one). A document not checked counts as one.
    pub fn has_syntax_errors(&self) -> bool {
        self.unchecked.is_some()
            || self
                .checked
                .modules
                .modules
                .iter()
                .any(|m| m.is_incomplete())
    }

    /// The names of the user files this analysis read (std excluded).
    pub fn user_files(&self) -> impl Iterator<Item = (FileId, &str)> {
        self.files
            .iter()
            .filter(|(_, f)| !f.name.starts_with("<std>/"))
            .map(|(id, f)| (id, f.name.as_str()))
    }
}

/// Maps the checker's file names to URIs: std files to their on-disk copy, paths to `file:`
/// URIs; a name that is already a URI (an unsaved document) stays as it is.
pub struct UriMap {
    pub std_dir: Option<PathBuf>,
}

impl UriMap {
    pub fn uri(&self, name: &str) -> Option<Uri> {
        if name.starts_with("<std>/") {
            let dir = self.std_dir.as_ref()?;
            return path_to_uri(&std_file(dir, name));
        }
        if !name.starts_with('/') && !is_drive_path(name) && name.contains(':') {
            // Already a URI: a document that is not a file (`untitled:…`).
            return Uri::from_str(name).ok();
        }
        let path = Path::new(name);
        let abs = if path.is_absolute() || is_drive_path(name) {
            path.to_path_buf()
        } else {
            std::env::current_dir().ok()?.join(path)
        };
        path_to_uri(&abs)
    }
}

fn is_drive_path(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'/' || b[2] == b'\\')
}

/// The line indexes of a check's files, each built once however many diagnostics it has (a
/// document with thousands of them would otherwise be indexed thousands of times).
pub struct Lines<'a> {
    files: &'a Files,
    index: HashMap<FileId, LineIndex<'a>>,
}

impl<'a> Lines<'a> {
    pub fn new(files: &'a Files) -> Self {
        Lines {
            files,
            index: HashMap::new(),
        }
    }

    pub fn range(&mut self, file: FileId, span: rlc_diagnostics::Span) -> lsp_types::Range {
        let files = self.files;
        self.index
            .entry(file)
            .or_insert_with(|| LineIndex::new(&files.get(file).text))
            .range(span)
    }
}

/// The LSP form of a diagnostic: its primary label's range, severity, code, the message with
/// the primary label's text, notes and help appended, and secondary labels as related
/// information.
pub fn to_lsp(d: &Diagnostic, lines: &mut Lines<'_>, uris: &UriMap) -> lsp_types::Diagnostic {
    let files = lines.files;
    let primary = d.primary();
    let range = lines.range(primary.file, primary.span);
    let mut message = d.message.clone();
    // The primary label says what is at the range ("expected 4, found 3"), when it adds to
    // the message.
    if !primary.message.is_empty() && !d.message.contains(&primary.message) {
        message.push('\n');
        message.push_str(&primary.message);
    }
    for note in &d.notes {
        message.push('\n');
        message.push_str(note);
    }
    if let Some(help) = &d.help {
        message.push_str("\nhelp: ");
        message.push_str(help);
    }
    let related: Vec<DiagnosticRelatedInformation> = d
        .labels
        .iter()
        .filter(|l| !l.primary)
        .filter_map(|l| {
            let uri = uris.uri(&files.get(l.file).name)?;
            Some(DiagnosticRelatedInformation {
                location: Location::new(uri, lines.range(l.file, l.span)),
                message: if l.message.is_empty() {
                    "related".to_string()
                } else {
                    l.message.clone()
                },
            })
        })
        .collect();
    lsp_types::Diagnostic {
        range,
        severity: Some(match d.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
            Severity::Note => DiagnosticSeverity::INFORMATION,
        }),
        code: Some(NumberOrString::String(d.code.as_str().to_string())),
        source: Some("rlc".to_string()),
        message,
        related_information: (!related.is_empty()).then_some(related),
        ..Default::default()
    }
}
