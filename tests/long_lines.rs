//! Diagnostics on very long lines: `rlc check` and `rlc fmt` report an error at column 70 000 or
//! 1 000 000 of a line with exit status 1 (miette's renderer used to panic past column 65 535,
//! exit 101), name the real line and column in every format, and draw a snippet clipped around
//! the error rather than the whole line.

use common::{refused, rlc, scratch};
use std::path::Path;

mod common;

/// A file whose line 2 has `@` (not part of the language) at character column `column`.
fn file_with_error_at(dir: &Path, column: usize) -> String {
    let path = dir.join(format!("col{column}.rl"));
    let text = format!("//! generated\n{}@\n", " ".repeat(column - 1));
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().into_owned()
}

fn each_command_reports(column: usize) {
    let dir = scratch(&format!("col{column}"));
    let path = file_with_error_at(&dir, column);
    for command in [&["check"][..], &["fmt"], &["fmt", "--check"]] {
        let what = command.join(" ");

        // Human: the header names the real position, the snippet is clipped.
        let args = [command, &["--color", "never", &path]].concat();
        let out = rlc(&args);
        let text = refused(&out, 1);
        assert!(
            text.contains(&format!("col{column}.rl:2:{column}]")),
            "{what}: the header names line 2, column {column}:\n{text}"
        );
        assert!(text.contains("E0116"), "{what}: {text}");
        assert!(text.contains("…"), "{what}: the line is clipped:\n{text}");
        assert!(
            text.lines().all(|l| l.chars().count() < 300),
            "{what}: no line of the output is long:\n{text}"
        );

        // JSON Lines and SARIF: the real position.
        let args = [command, &["--format", "json", &path]].concat();
        let out = rlc(&args);
        let text = refused(&out, 1);
        let first = String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .map(str::to_string)
            .unwrap_or_else(|| panic!("{what}: no JSON diagnostic:\n{text}"));
        let v: serde_json::Value = serde_json::from_str(&first).unwrap();
        assert_eq!(v["code"], "E0116", "{what}: {first}");
        assert_eq!(v["start"]["line"], 2, "{what}: {first}");
        assert_eq!(v["start"]["column"], column, "{what}: {first}");

        let args = [command, &["--format", "sarif", &path]].concat();
        let out = rlc(&args);
        let text = refused(&out, 1);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{what}: SARIF does not parse ({e}):\n{text}"));
        let region = &v["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"];
        assert_eq!(region["startLine"], 2, "{what}: {region}");
        assert_eq!(region["startColumn"], column, "{what}: {region}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn an_error_at_column_70_000_is_reported() {
    each_command_reports(70_000);
}

#[test]
fn an_error_at_column_1_000_000_is_reported() {
    each_command_reports(1_000_000);
}
