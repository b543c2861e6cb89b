//! SARIF 2.1.0, for code-scanning tools.

use super::{file, first_paragraph};
use crate::{Code, Diagnostic, FileId, Files, Severity, Span};
use serde::Serialize;
use std::collections::BTreeSet;

/// The `tool.driver.informationUri` of the SARIF log; left out while `None` (the project has no
/// public address yet).
pub const SARIF_INFORMATION_URI: Option<&str> = None;

const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Log {
    #[serde(rename = "$schema")]
    schema: &'static str,
    version: &'static str,
    runs: Vec<Run>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Run {
    tool: Tool,
    /// Columns and `charOffset`/`charLength` count Unicode code points, as `LineCol` does.
    column_kind: &'static str,
    results: Vec<SarifResult>,
}

#[derive(Serialize)]
struct Tool {
    driver: Driver,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Driver {
    name: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    information_uri: Option<&'static str>,
    version: &'static str,
    rules: Vec<Rule>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Rule {
    id: &'static str,
    name: String,
    short_description: Text,
    full_description: Text,
    default_configuration: Configuration,
}

#[derive(Serialize)]
struct Configuration {
    level: &'static str,
}

#[derive(Serialize)]
struct Text {
    text: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifResult {
    rule_id: &'static str,
    rule_index: usize,
    level: &'static str,
    message: Text,
    locations: Vec<Location>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    related_locations: Vec<Location>,
    #[serde(skip_serializing_if = "Option::is_none")]
    properties: Option<Properties>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fixes: Vec<SarifFix>,
}

/// SARIF's `fix`: a description and, per file, the regions to replace.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SarifFix {
    description: Text,
    artifact_changes: Vec<ArtifactChange>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactChange {
    artifact_location: ArtifactLocation,
    replacements: Vec<Replacement>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Replacement {
    deleted_region: Region,
    inserted_content: Text,
}

#[derive(Serialize)]
struct Properties {
    #[serde(skip_serializing_if = "Option::is_none")]
    help: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Location {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<usize>,
    physical_location: PhysicalLocation,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<Text>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PhysicalLocation {
    artifact_location: ArtifactLocation,
    region: Region,
}

#[derive(Serialize)]
struct ArtifactLocation {
    uri: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Region {
    start_line: u32,
    start_column: u32,
    end_line: u32,
    end_column: u32,
    char_offset: usize,
    char_length: usize,
}

fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
    }
}

/// A SARIF 2.1.0 log with one run: the driver `rlc` with one rule per code used (in code order),
/// and one result per diagnostic in the order given. A result's location is its primary label,
/// its related locations the secondary ones; help and notes go in its `properties`. Pretty
/// printed; the same input gives the same bytes.
pub fn sarif(diags: &[Diagnostic], files: &Files) -> String {
    let used: BTreeSet<Code> = diags.iter().map(|d| d.code).collect();
    let used: Vec<Code> = used.into_iter().collect();
    let rules = used
        .iter()
        .map(|&code| {
            let info = code.info();
            Rule {
                id: info.id,
                name: format!("{code:?}"),
                short_description: Text {
                    text: info.title.to_string(),
                },
                full_description: Text {
                    text: first_paragraph(info.explain),
                },
                default_configuration: Configuration {
                    level: level(info.severity),
                },
            }
        })
        .collect();
    let results = diags
        .iter()
        .map(|d| {
            let mut locations = Vec::new();
            let mut related_locations = Vec::new();
            for label in &d.labels {
                let Some(physical_location) = physical(files, label.file, label.span) else {
                    continue;
                };
                let message = (!label.message.is_empty()).then(|| Text {
                    text: label.message.clone(),
                });
                if label.primary && locations.is_empty() {
                    locations.push(Location {
                        id: None,
                        physical_location,
                        message,
                    });
                } else {
                    let id = Some(related_locations.len());
                    related_locations.push(Location {
                        id,
                        physical_location,
                        message,
                    });
                }
            }
            let properties = (d.help.is_some() || !d.notes.is_empty()).then(|| Properties {
                help: d.help.clone(),
                notes: d.notes.clone(),
            });
            let fixes = d
                .fixes
                .iter()
                .map(|f| {
                    let mut artifact_changes: Vec<ArtifactChange> = Vec::new();
                    for e in &f.edits {
                        let Some(at) = physical(files, e.file, e.span) else {
                            continue;
                        };
                        let replacement = Replacement {
                            deleted_region: at.region,
                            inserted_content: Text {
                                text: e.text.clone(),
                            },
                        };
                        match artifact_changes
                            .iter_mut()
                            .find(|c| c.artifact_location.uri == at.artifact_location.uri)
                        {
                            Some(c) => c.replacements.push(replacement),
                            None => artifact_changes.push(ArtifactChange {
                                artifact_location: at.artifact_location,
                                replacements: vec![replacement],
                            }),
                        }
                    }
                    SarifFix {
                        description: Text {
                            text: f.message.clone(),
                        },
                        artifact_changes,
                    }
                })
                .collect();
            SarifResult {
                rule_id: d.code.info().id,
                rule_index: used.binary_search(&d.code).unwrap_or_default(),
                level: level(d.severity),
                message: Text {
                    text: d.message.clone(),
                },
                locations,
                related_locations,
                properties,
                fixes,
            }
        })
        .collect();
    let log = Log {
        schema: SCHEMA,
        version: "2.1.0",
        runs: vec![Run {
            tool: Tool {
                driver: Driver {
                    name: "rlc",
                    information_uri: SARIF_INFORMATION_URI,
                    version: env!("CARGO_PKG_VERSION"),
                    rules,
                },
            },
            column_kind: "unicodeCodePoints",
            results,
        }],
    };
    let mut out = serde_json::to_string_pretty(&log).expect("a SARIF log serialises");
    out.push('\n');
    out
}

fn physical(files: &Files, id: FileId, span: Span) -> Option<PhysicalLocation> {
    let f = file(files, id)?;
    let (start, end) = (f.line_col(span.start), f.line_col(span.end));
    let chars_before = |offset: u32| {
        let mut offset = (offset as usize).min(f.text.len());
        while !f.text.is_char_boundary(offset) {
            offset -= 1;
        }
        f.text[..offset].chars().count()
    };
    let char_offset = chars_before(span.start);
    let char_length = chars_before(span.end).saturating_sub(char_offset);
    Some(PhysicalLocation {
        artifact_location: ArtifactLocation { uri: uri(&f.name) },
        region: Region {
            start_line: start.line,
            start_column: start.column,
            end_line: end.line,
            end_column: end.column,
            char_offset,
            char_length,
        },
    })
}

/// A file name as a relative URI reference: `\` becomes `/`, and every byte outside the
/// unreserved set and `/` is percent-encoded.
fn uri(name: &str) -> String {
    let mut out = String::new();
    for b in name.replace('\\', "/").bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
