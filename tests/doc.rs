//! `rlc doc`: the pages of docs/std/ are what `rlc doc --std --format markdown` writes today
//! (`std_pages_are_current`, the drift check); the HTML of a small program has an index, a page
//! per module with its items, cross-links to the items its signatures and definitions name
//! (in its own modules and in std) and a search index (`html_pages_link_and_search`); its
//! Markdown is a reviewed snapshot (`markdown_of_a_small_module`); the output is the same
//! bytes on every run (`output_is_deterministic`); a program with errors is refused with its
//! coded diagnostics and nothing written (`bad_input_is_refused`).

use common::{refused, rlc, scratch, text};
use std::collections::BTreeMap;
use std::path::Path;

mod common;

/// The program of these tests: `lib.rl` imports `weights.rl` and `std.task.digits`; `job.rl`
/// (in the same folder) imports both and has a pipeline.
const LIB: &str = "tests/programs/doc/lib.rl";
const FOLDER: &str = "tests/programs/doc";

/// Every file of `dir` (not recursive), by name.
fn files_in(dir: &Path) -> BTreeMap<String, String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            (name, text)
        })
        .collect()
}

/// Runs `rlc doc ARGS… --out DIR` (which must succeed) and returns the files it wrote.
fn doc(dir: &Path, args: &[&str]) -> BTreeMap<String, String> {
    let out = dir.to_string_lossy().into_owned();
    let all = [&["doc"][..], args, &["--out", &out]].concat();
    let run = rlc(&all);
    assert!(
        run.status.success(),
        "rlc {}: {}",
        all.join(" "),
        text(&run)
    );
    files_in(dir)
}

#[test]
fn std_pages_are_current() {
    let dir = scratch("std");
    let fresh = doc(&dir, &["--std", "--format", "markdown"]);
    let published = files_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/std"));
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    let regenerate = "regenerate them: `cargo run -- doc --std --format markdown --out docs/std` \
                      (and delete pages of modules that are gone)";
    assert_eq!(
        names(&published),
        names(&fresh),
        "docs/std/ does not hold one page per std module; {regenerate}"
    );
    for (name, text) in &fresh {
        assert!(
            published[name] == *text,
            "docs/std/{name} is stale; {regenerate}"
        );
    }
    assert!(fresh.contains_key("std.algo.md") && fresh.contains_key("README.md"));
}

#[test]
fn html_pages_link_and_search() {
    let dir = scratch("html");
    let pages = doc(&dir, &[FOLDER, "--std"]);
    let lib = &pages["tests.programs.doc.lib.html"];
    let job = &pages["tests.programs.doc.job.html"];
    let index = &pages["index.html"];

    // The index lists the program's modules and std's, with their summaries.
    assert!(
        index.contains(
            "<a href=\"tests.programs.doc.lib.html\"><code>tests/programs/doc/lib.rl</code></a>"
        ),
        "{index}"
    );
    assert!(index.contains("href=\"tests.programs.doc.weights.html\""));
    assert!(index.contains("href=\"std.task.digits.html\""));
    assert!(index.contains("A small library for <code>rlc doc</code>"));

    // The module page: its `//!` text (Markdown rendered, HTML escaped), each pub item with
    // its header, parameters and `///` text; the private helper left out.
    assert!(lib.contains("<li>and another, with <code>code</code> and a &lt;tag&gt;</li>"));
    assert!(
        lib.contains("<section class=\"item\" id=\"fn-net\">"),
        "{lib}"
    );
    assert!(lib.contains("<p>The reward less <code>beta</code> times the penalty"));
    assert!(lib.contains("<tr><td><code>penalty</code></td><td><code>f32[B]</code></td>"));
    assert!(lib.contains("id=\"let-width\"") && lib.contains("id=\"dataset-task\""));
    assert!(!lib.contains("fn-helper"), "a private fn is not documented");

    // Cross-links: a constant used in a default (another module), a struct named in a
    // signature, a std fn in a definition, a constant of the same page.
    assert!(
        lib.contains(
            "<td><code><a href=\"tests.programs.doc.weights.html#let-beta\" \
             title=\"beta in tests/programs/doc/weights.rl\">beta</a></code></td>"
        ),
        "{lib}"
    );
    assert!(
        lib.contains("s: <a href=\"tests.programs.doc.weights.html#struct-scores\""),
        "{lib}"
    );
    assert!(lib.contains("= <a href=\"std.task.digits.html#fn-reverse_task\""));
    assert!(lib.contains("(digits: <a href=\"#let-width\""));
    // The constant's checked type, and the parameter type inferred from its default.
    assert!(lib.contains("pub let width: i64 = 6"), "{lib}");
    assert!(lib.contains("<span class=\"note\">(of the default)</span>"));

    // A pipeline (documented though not `pub`) with its parameters, their types and defaults
    // linked to the constants of the modules it imports.
    assert!(
        job.contains("<section class=\"item\" id=\"pipeline-train\">"),
        "{job}"
    );
    assert!(
        job.contains(
            "<tr><td><code>scale</code></td><td><code>f32</code></td><td><code>\
             <a href=\"tests.programs.doc.weights.html#let-beta\""
        ),
        "{job}"
    );
    assert!(
        job.contains("pipeline train(steps = <a href=\"tests.programs.doc.lib.html#let-width\"")
    );

    // Search: the index holds every module and item; each page loads it, nothing external.
    let search = &pages["search-index.js"];
    assert!(search.contains(
        "\"kind\":\"fn\",\"module\":\"tests/programs/doc/lib.rl\",\"name\":\"net\",\
         \"path\":\"net in tests/programs/doc/lib.rl\",\"summary\":\"The reward less `beta` times the penalty: `r − β·p`.\",\
         \"url\":\"tests.programs.doc.lib.html#fn-net\""
    ), "{search}");
    assert!(search.contains("\"path\":\"std.algo.masked_mean\""));
    for (name, page) in pages.iter().filter(|(n, _)| n.ends_with(".html")) {
        assert!(page.contains("<input id=\"search\""), "{name}");
        assert!(
            page.contains("<script src=\"search-index.js\"></script>"),
            "{name}"
        );
        for external in [
            "src=\"http",
            "href=\"http",
            "src=\"//",
            "href=\"//",
            "@import",
        ] {
            assert!(!page.contains(external), "{name} loads {external}");
        }
    }
}

#[test]
fn markdown_of_a_small_module() {
    let dir = scratch("markdown");
    let pages = doc(&dir, &[LIB, "--format", "markdown"]);
    assert_eq!(
        pages.keys().collect::<Vec<_>>(),
        [
            "README.md",
            "tests.programs.doc.lib.md",
            "tests.programs.doc.weights.md"
        ],
        "without --std, std's modules are not documented"
    );
    insta::assert_snapshot!("doc_lib_markdown", pages["tests.programs.doc.lib.md"]);
}

#[test]
fn private_items_on_request() {
    let dir = scratch("private");
    let pages = doc(&dir, &[LIB, "--format", "markdown", "--private"]);
    assert!(pages["tests.programs.doc.lib.md"].contains("## fn helper"));
}

#[test]
fn output_is_deterministic() {
    let (a, b) = (scratch("same-a"), scratch("same-b"));
    assert_eq!(doc(&a, &[LIB, "--std"]), doc(&b, &[LIB, "--std"]));
}

#[test]
fn bad_input_is_refused() {
    let dir = scratch("bad");
    let out = dir.join("out");
    let out = out.to_string_lossy();
    // A syntax error and an unknown name: `rlc check`'s coded diagnostics, exit 1, no pages.
    for (file, text, code) in [
        ("syntax.rl", "pub fn f( -> f32 { 1.0 }\n", "E01"),
        ("unknown.rl", "pub let x = nowhere\n", "E0201"),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text).unwrap();
        let run = rlc(&[
            "doc",
            &path.to_string_lossy(),
            "--out",
            &out,
            "--color",
            "never",
        ]);
        let t = refused(&run, 1);
        assert!(t.contains(&format!("error[{code}")), "{t}");
        assert!(t.contains("not documented"), "{t}");
        assert!(
            !dir.join("out").exists(),
            "nothing is written for a program with errors"
        );
    }
    // A missing path and a folder without `.rl` files: usage errors (exit 2).
    let missing = dir.join("missing.rl");
    let t = refused(&rlc(&["doc", &missing.to_string_lossy(), "--out", &out]), 2);
    assert!(t.contains("cannot read"), "{t}");
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let t = refused(&rlc(&["doc", &empty.to_string_lossy(), "--out", &out]), 2);
    assert!(t.contains("no `.rl` files"), "{t}");
    // Machine-readable diagnostics, as `rlc check --format json` prints them.
    let run = rlc(&[
        "doc",
        &dir.join("unknown.rl").to_string_lossy(),
        "--out",
        &out,
        "--message-format",
        "json",
    ]);
    let t = refused(&run, 1);
    assert!(t.contains("\"code\":\"E0201\""), "{t}");
}

/// A recipe (a generic pipeline) in a library of its own.
const RECIPE_LIB: &str = r#"//! Loops to share.

import std.algo { grpo_advantage, ppo_clip, token_mean }

/// A short GRPO.
pub pipeline tuned(policy: CausalLM, data: Dataset, reward: Fn, steps = 500, group = 4, minibatch = group * 8) {
  loop step in 0..steps {
    let prompts  = data.sample(8)
    let rollout  = policy.generate(prompts, n: group, max_new: 8, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let score    = reward(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(score, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: minibatch) { logp ->
      token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask)
    }
    log { reward: mean(score) }
  }
}
"#;

#[test]
fn a_recipe_is_marked_with_what_each_parameter_takes() {
    let dir = scratch("recipe");
    let lib = dir.join("loops.rl");
    std::fs::write(&lib, RECIPE_LIB).unwrap();
    let lib = lib.to_string_lossy().into_owned();
    let md = doc(&dir.join("md"), &[&lib, "--format", "markdown"]);
    let (_, page) = md.iter().find(|(n, _)| n.ends_with("loops.md")).unwrap();
    for want in [
        "- pipeline [`tuned`](#pipeline-tuned) (recipe)\n",
        // The header, one parameter a line.
        "```rl\npub pipeline tuned(\n  policy: CausalLM,\n  data: Dataset,\n  reward: Fn,\n  \
         steps = 500,\n  group = 4,\n  minibatch = group * 8,\n)\n```\n",
        "*A recipe: a generic pipeline that a job instantiates",
        "`pipeline train { tuned(…) }`.*\n",
        "| `policy` | `CausalLM` (generic: a role) |  |\n",
        "| `data` | `Dataset` (generic: a dataset) |  |\n",
        "| `reward` | `Fn` (generic: a function) |  |\n",
        "| `steps` | `i64` (of the default) | `500` |\n",
        "| `minibatch` | `i64` (of the default) | `group * 8` |\n",
    ] {
        assert!(page.contains(want), "missing {want:?} in\n{page}");
    }
    let html = doc(&dir.join("html"), &[&lib]);
    let (_, page) = html
        .iter()
        .find(|(n, _)| n.ends_with("loops.html"))
        .unwrap();
    for want in [
        "<span class=\"kw\">pipeline</span> tuned</a> <span class=\"note\">recipe</span></li>",
        "<div class=\"note\">\n<p>A recipe: a generic pipeline",
        "<td><code>CausalLM</code> <span class=\"note\">(generic: a role)</span></td>",
    ] {
        assert!(page.contains(want), "missing {want:?} in\n{page}");
    }
}
