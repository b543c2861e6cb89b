//! UI tests: every `tests/ui/**/*.rl` file is checked by the `rlc` binary, one test per file.
//!
//! A file states the diagnostics it expects in comments, on the line the diagnostic's primary
//! label points at: `//~ E0103` (several codes separated by spaces; `//~^ E0103` for the line
//! above, `//~^^` two lines above). The test fails if the codes and lines reported differ
//! from those expected, in either direction. The rendered human output (no colour, fixed width,
//! relative paths) is compared with an insta snapshot in `tests/ui/snapshots/`.
//!
//! A case in a folder with a package manifest (`tests/ui/packages/<case>/main.rl` with
//! `rl.toml`; its dependencies under `lib/`) may also expect diagnostics in the manifests of that
//! folder and below, annotated in TOML comments: `#~ E0207`.

use libtest_mimic::{Arguments, Failed, Trial};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let args = Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    collect(&root.join("tests/ui"), &mut files);
    files.sort();
    let trials = files
        .into_iter()
        .map(|path| {
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            Trial::test(rel.clone(), move || run_case(&rel))
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // `lib/` folders hold modules that cases import; they are not cases themselves.
        if path.is_dir() && !path.ends_with("lib") {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rl") {
            out.push(path);
        }
    }
}

/// `(file, line, code)` → how many times.
type Expectations = BTreeMap<(String, u32, String), usize>;

fn expected(file: &str, src: &str, marker: &str, out: &mut Expectations) {
    for (i, line) in src.lines().enumerate() {
        let Some(at) = line.find(marker) else {
            continue;
        };
        let rest = &line[at + marker.len()..];
        let up = rest.chars().take_while(|&c| c == '^').count();
        for code in rest[up..].split_whitespace() {
            *out.entry((file.to_string(), i as u32 + 1 - up as u32, code.to_string()))
                .or_default() += 1;
        }
    }
}

/// The package manifests of a case: every `rl.toml` in its folder and below, when its folder
/// has one.
fn manifests(rel: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(rel).parent().unwrap();
    if !root.join(dir).join("rl.toml").is_file() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(root.join(&d)).unwrap() {
            let entry = entry.unwrap();
            let rel = d.join(entry.file_name());
            if entry.path().is_dir() {
                stack.push(rel);
            } else if entry.file_name() == "rl.toml" {
                out.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    out.sort();
    out
}

fn rlc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run rlc")
}

fn run_case(rel: &str) -> Result<(), Failed> {
    let src = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap();
    let json = rlc(&["check", "--format", "json", rel]);
    let manifests = manifests(rel);
    let stdout = String::from_utf8(json.stdout).unwrap();
    let mut actual = Expectations::new();
    let mut has_error = false;
    for line in stdout.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("bad JSON line {line:?}: {e}"))?;
        let line_no = v["start"]["line"]
            .as_u64()
            .ok_or("diagnostic without a start line")? as u32;
        let code = v["code"]
            .as_str()
            .ok_or("diagnostic without a code")?
            .to_string();
        has_error |= v["severity"] == "error";
        // Expectations are written in the case's own file (or its manifests): a diagnostic
        // elsewhere (an imported module, std) must not satisfy one by its line number.
        let file = v["file"].as_str().unwrap_or_default().to_string();
        if file != rel && !manifests.contains(&file) {
            return Err(format!("diagnostic in another file than the case:\n{line}").into());
        }
        *actual.entry((file, line_no, code)).or_default() += 1;
    }
    let mut want = Expectations::new();
    expected(rel, &src, "//~", &mut want);
    for m in &manifests {
        let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(m)).unwrap();
        expected(m, &text, "#~", &mut want);
    }
    if actual != want {
        return Err(format!(
            "diagnostics differ\n  expected: {want:?}\n  actual:   {actual:?}\n{stdout}"
        )
        .into());
    }
    let status = json.status.code();
    let want_status = if has_error { Some(1) } else { Some(0) };
    if status != want_status {
        return Err(format!("exit status {status:?}, expected {want_status:?}").into());
    }

    let human = rlc(&["check", "--color", "never", rel]);
    let rendered = String::from_utf8(human.stderr).unwrap();
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/snapshots"));
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    settings.set_input_file(rel);
    let name = rel
        .trim_start_matches("tests/ui/")
        .trim_end_matches(".rl")
        .replace('/', "__");
    // libtest-mimic turns the panic of a differing snapshot into this test's failure.
    settings.bind(|| insta::assert_snapshot!(name, rendered));
    Ok(())
}
