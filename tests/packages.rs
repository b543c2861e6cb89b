//! Packages (docs/packages.md) through the CLI, in scratch folders: `rlc new` scaffolds a job and
//! a library that `rlc check` accepts and refuses a folder that is not empty; a job resolves its
//! dependencies by path, vendored ones by name, nested modules and its own modules by its
//! package's name, with the manifest found above the working directory; a dependency's modules
//! resolve through its own manifest; `rlc build` and `rlc doc` resolve them too; a manifest's
//! diagnostic is reported once however many roots share it. With the runtime, the scaffolded job
//! runs. (The codes' single cases are UI
//! cases in tests/ui/packages/.)

mod common;

use common::{refused, text};
use std::path::Path;
use std::process::{Command, Output};

/// `rlc ARGS…` run in `dir`, without colour.
fn rlc_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rlc"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

fn write(dir: &Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The codes of `rlc check --format json ARGS…` in `dir`, each with its file.
fn codes(dir: &Path, args: &[&str]) -> Vec<(String, String)> {
    let mut all = vec!["check", "--format", "json"];
    all.extend(args);
    let out = rlc_in(dir, &all);
    assert!(!text(&out).contains("panicked"), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["code"].as_str().unwrap().to_string(),
                v["file"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn clean(dir: &Path, args: &[&str]) {
    let out = rlc_in(dir, &[&["check"], args].concat());
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(!text(&out).contains("warning"), "{}", text(&out));
}

#[test]
fn new_scaffolds_a_job_and_a_library_that_check() {
    let dir = common::scratch("new");
    let out = rlc_in(&dir, &["new", "digits-job"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = rlc_in(&dir, &["new", "recipes", "--lib"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    for f in ["rl.toml", "main.rl", "src/rewards.rl", "README.md"] {
        assert!(dir.join("digits-job").join(f).is_file(), "{f}");
    }
    for f in [
        "rl.toml",
        "examples/digits.rl",
        "src/rewards.rl",
        "README.md",
    ] {
        assert!(dir.join("recipes").join(f).is_file(), "{f}");
    }
    let manifest = std::fs::read_to_string(dir.join("digits-job/rl.toml")).unwrap();
    assert!(manifest.contains("name = \"digits_job\""), "{manifest}");
    let main = std::fs::read_to_string(dir.join("digits-job/main.rl")).unwrap();
    assert!(
        main.contains("import digits_job.rewards { exact }"),
        "{main}"
    );
    // The README's test: every file of the package checks, and is formatted.
    clean(&dir, &["digits-job", "recipes"]);
    let out = rlc_in(&dir, &["fmt", "--check", "digits-job", "recipes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // From inside the package, as its README says.
    clean(&dir.join("digits-job"), &["."]);
    clean(&dir.join("recipes"), &["examples/digits.rl"]);
    // The job builds to a plan.
    let out = rlc_in(
        &dir,
        &["build", "digits-job/main.rl", "-o", "job.plan.json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(dir.join("job.plan.json").is_file());

    // Not into a folder that holds something; an empty one is fine.
    let t = refused(&rlc_in(&dir, &["new", "digits-job"]), 2);
    assert!(t.contains("already exists and is not empty"), "{t}");
    std::fs::create_dir(dir.join("empty")).unwrap();
    let out = rlc_in(&dir, &["new", "empty", "--lib"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let t = refused(&rlc_in(&dir, &["new", "1bad"]), 2);
    assert!(t.contains("not a package name"), "{t}");
    assert!(!dir.join("1bad").exists());
}

/// The job `rlc new` makes runs: three steps of its GRPO, from inside the package.
#[cfg(feature = "runtime")]
#[test]
fn the_scaffolded_job_runs() {
    let dir = common::scratch("run");
    let out = rlc_in(&dir, &["new", "job"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = rlc_in(
        &dir.join("job"),
        &["run", "main.rl", "--stop-after", "3", "--out", "../out"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let metrics = std::fs::read_to_string(dir.join("out/metrics.jsonl")).unwrap();
    let steps = metrics.lines().filter(|l| l.contains("\"reward\"")).count();
    assert_eq!(steps, 3, "{metrics}");
}

/// A job with a dependency by path (nested modules, an item path, modules that import their
/// own package by name and by relative path) and a vendored one, its root file in `src/`.
fn job_with_dependencies(dir: &Path) {
    write(
        dir,
        "job/rl.toml",
        "[package]\nname = \"job\"\nversion = \"0.1.0\"\n\n[dependencies]\nrecipes = { path = \"../recipes\" }\nshaping = \"0.2.0\"\n",
    );
    write(
        dir,
        "job/vendor/shaping/rl.toml",
        "[package]\nname = \"shaping\"\nversion = \"0.2.0\"\n",
    );
    write(
        dir,
        "job/vendor/shaping/bonus.rl",
        "/// A bonus above one half.\npub fn bonus(reward: f32[B]) -> f32[B] {\n  where(reward > 0.5, 0.1, 0.0)\n}\n",
    );
    write(
        dir,
        "recipes/rl.toml",
        "[package]\nname = \"recipes\"\nversion = \"0.1.0\"\n",
    );
    write(
        dir,
        "recipes/src/util.rl",
        "/// Twice the reward.\npub fn twice(reward: f32[B]) -> f32[B] {\n  reward * 2.0\n}\n",
    );
    write(
        dir,
        "recipes/src/grpo/loss.rl",
        "import recipes.util { twice }\nimport \"../util.rl\" as util\n\n/// Four times the reward.\npub fn scaled(reward: f32[B]) -> f32[B] {\n  twice(util.twice(reward))\n}\n",
    );
    write(
        dir,
        "job/src/local.rl",
        "/// The reward as it is.\npub fn same(reward: f32[B]) -> f32[B] {\n  reward\n}\n",
    );
    write(
        dir,
        "job/src/main.rl",
        "import recipes.grpo.loss { scaled }\nimport recipes.util.twice\nimport shaping.bonus { bonus }\nimport job.local { same }\n\n/// Everything together.\npub fn total(reward: f32[B]) -> f32[B] {\n  same(scaled(reward) + twice(reward) + bonus(reward))\n}\n",
    );
}

#[test]
fn dependencies_by_path_vendored_nested_and_own() {
    let dir = common::scratch("deps");
    job_with_dependencies(&dir);
    clean(&dir, &["job/src/main.rl"]);
    // The manifest is found above the working directory.
    clean(&dir.join("job/src"), &["main.rl"]);
    // Every file of the job and of its dependency, each a root.
    clean(&dir, &["job", "recipes"]);
    // `rlc doc` documents the package through its imports.
    let out = rlc_in(
        &dir,
        &["doc", "job/src", "--format", "markdown", "-o", "docs"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // Without the manifest entry, the vendored import is E0209.
    write(
        &dir,
        "job/rl.toml",
        "[package]\nname = \"job\"\nversion = \"0.1.0\"\n\n[dependencies]\nrecipes = { path = \"../recipes\" }\n",
    );
    assert_eq!(
        codes(&dir, &["job/src/main.rl"]),
        [("E0209".to_string(), "job/src/main.rl".to_string())]
    );
}

#[test]
fn an_unimported_name_of_a_dependency_is_fixed_by_a_package_import() {
    let dir = common::scratch("fix");
    job_with_dependencies(&dir);
    // `twice` is in `recipes.util`, which `recipes.grpo.loss` imports.
    write(
        &dir,
        "job/src/main.rl",
        "import recipes.grpo.loss { scaled }\n\n/// Six times.\npub fn total(reward: f32[B]) -> f32[B] {\n  scaled(reward) + twice(reward)\n}\n",
    );
    let out = rlc_in(&dir, &["check", "--format", "json", "job/src/main.rl"]);
    let t = text(&out);
    assert!(t.contains("E0201"), "{t}");
    assert!(t.contains("`twice` is in recipes.util: import it"), "{t}");
    assert!(t.contains("import recipes.util { twice }"), "{t}");
}

#[test]
fn a_dependency_resolves_through_its_own_manifest() {
    let dir = common::scratch("own");
    job_with_dependencies(&dir);
    // `recipes` imports `shaping`, which the job has but `recipes` does not declare.
    write(
        &dir,
        "recipes/src/util.rl",
        "import shaping.bonus { bonus }\n\n/// Twice the reward.\npub fn twice(reward: f32[B]) -> f32[B] {\n  bonus(reward) * 2.0\n}\n",
    );
    assert_eq!(
        codes(&dir, &["job/src/main.rl"]),
        [("E0209".to_string(), "recipes/src/util.rl".to_string())]
    );
}

#[test]
fn manifest_errors_are_reported_once_in_the_manifest() {
    let dir = common::scratch("once");
    job_with_dependencies(&dir);
    write(
        &dir,
        "job/rl.toml",
        "[package]\nname = \"job\"\nversion = 1\n",
    );
    // Two roots share the manifest (main.rl and local.rl).
    let found = codes(&dir, &["job/src"]);
    assert_eq!(
        found,
        [("E0207".to_string(), "job/rl.toml".to_string())],
        "{found:?}"
    );
    // Not TOML at all.
    write(&dir, "job/rl.toml", "[package\nname = \"job\"\n");
    let found = codes(&dir, &["job/src/local.rl"]);
    assert_eq!(found, [("E0207".to_string(), "job/rl.toml".to_string())]);
    // Not UTF-8.
    std::fs::write(dir.join("job/rl.toml"), b"\xff\xfe[package]").unwrap();
    let found = codes(&dir, &["job/src/local.rl"]);
    assert_eq!(found, [("E0207".to_string(), "job/rl.toml".to_string())]);
    // A dependency on itself is a cycle.
    write(
        &dir,
        "job/rl.toml",
        "[package]\nname = \"job\"\nversion = \"0.1.0\"\n\n[dependencies]\njob = { path = \".\" }\n",
    );
    let found = codes(&dir, &["job/src/local.rl"]);
    assert_eq!(found, [("E0212".to_string(), "job/rl.toml".to_string())]);
    // A vendored dependency that is not in the vendored folder.
    write(
        &dir,
        "job/rl.toml",
        "[package]\nname = \"job\"\nversion = \"0.1.0\"\nvendor = \"third_party\"\n\n[dependencies]\nshaping = \"0.2.0\"\n",
    );
    let found = codes(&dir, &["job/src/local.rl"]);
    assert_eq!(found, [("E0208".to_string(), "job/rl.toml".to_string())]);
}
