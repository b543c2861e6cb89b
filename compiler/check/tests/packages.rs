//! Packages through an in-memory loader (no IO, as the checker reads everything through
//! `SourceLoader`): the default `find_manifest` goes up the folders a path names; imports
//! resolve to `src/` first, then the package's folder; any manifest text is a clean result or
//! coded diagnostics, never a panic.

use proptest::prelude::*;
use rlc_diagnostics::Files;
use std::collections::BTreeMap;

struct Texts(BTreeMap<String, String>);

impl rlc_check::SourceLoader for Texts {
    fn read(&self, path: &str) -> Result<String, String> {
        self.0
            .get(path)
            .cloned()
            .ok_or_else(|| "entity not found".to_string())
    }
}

fn loader(files: &[(&str, &str)]) -> Texts {
    Texts(
        files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect(),
    )
}

const BONUS: &str =
    "/// A bonus.\npub fn bonus(reward: f32[B]) -> f32[B] {\n  where(reward > 0.5, 0.1, 0.0)\n}\n";
const MAIN: &str = "import recipes.shaping { bonus }\n\n/// Shaped.\npub fn shaped(reward: f32[B]) -> f32[B] {\n  reward + bonus(reward)\n}\n";

fn codes(loader: &Texts, root: &str, text: &str) -> Vec<String> {
    let mut files = Files::new();
    let checked = rlc_check::check(loader, &mut files, root, text.to_string());
    checked
        .diagnostics
        .iter()
        .map(|d| d.code.as_str().to_string())
        .collect()
}

#[test]
fn the_manifest_is_found_in_a_folder_above() {
    let l = loader(&[
        (
            "w/job/rl.toml",
            "[package]\nname = \"job\"\nversion = \"1\"\n[dependencies]\nrecipes = { path = \"../recipes\" }\n",
        ),
        (
            "w/recipes/rl.toml",
            "[package]\nname = \"recipes\"\nversion = \"1\"\n",
        ),
        ("w/recipes/src/shaping.rl", BONUS),
    ]);
    use rlc_check::SourceLoader;
    assert_eq!(
        l.find_manifest("w/job/src/deep/main.rl").as_deref(),
        Some("w/job/rl.toml")
    );
    assert_eq!(l.find_manifest("other/main.rl"), None);
    assert_eq!(
        codes(&l, "w/job/src/deep/main.rl", MAIN),
        Vec::<String>::new()
    );
    let mut files = Files::new();
    let checked = rlc_check::check(&l, &mut files, "w/job/main.rl", MAIN.to_string());
    let m = checked
        .modules
        .modules
        .iter()
        .find(|m| m.package_path.as_deref() == Some("recipes.shaping"))
        .expect("the package module is loaded");
    assert_eq!(m.name, "w/recipes/src/shaping.rl");
    assert_eq!(
        checked.modules.packages.get(m.package.unwrap()).name,
        "recipes"
    );
}

#[test]
fn src_comes_before_the_package_folder() {
    let manifest = "[package]\nname = \"job\"\nversion = \"1\"\n[dependencies]\nrecipes = { path = \"recipes\" }\n";
    let recipes = "[package]\nname = \"recipes\"\nversion = \"1\"\n";
    // Only at the package's root: found there.
    let l = loader(&[
        ("rl.toml", manifest),
        ("recipes/rl.toml", recipes),
        ("recipes/shaping.rl", BONUS),
    ]);
    assert_eq!(codes(&l, "main.rl", MAIN), Vec::<String>::new());
    // In both: src/ wins (its `bonus` is private, so the import is E0205).
    let l = loader(&[
        ("rl.toml", manifest),
        ("recipes/rl.toml", recipes),
        ("recipes/shaping.rl", BONUS),
        ("recipes/src/shaping.rl", &BONUS.replace("pub fn", "fn")),
    ]);
    assert_eq!(codes(&l, "main.rl", MAIN), ["E0205"]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Manifests made of TOML's pieces, valid or not: coded diagnostics at most, never a panic,
    /// and every diagnostic of the manifest is one of the package codes.
    #[test]
    fn any_manifest_is_diagnosed_never_a_panic(
        pieces in proptest::collection::vec(
            prop_oneof![
                Just("[package]\n"), Just("[dependencies]\n"), Just("name = \"job\"\n"),
                Just("version = \"0.1\"\n"), Just("vendor = \"v\"\n"), Just("recipes = "),
                Just("{ path = \"r\" }\n"), Just("{ path = 3 }\n"), Just("\"0.1\"\n"),
                Just("job = { path = \".\" }\n"), Just("[[x]]\n"), Just("= \"\n"), Just("{"),
                Just("name = \"std\"\n"), Just("\u{e9}"), Just("[package.x]\n"), Just("\n"),
            ],
            0..12,
        )
    ) {
        let manifest: String = pieces.concat();
        let l = loader(&[
            ("rl.toml", &manifest),
            ("r/rl.toml", "[package]\nname = \"recipes\"\nversion = \"1\"\n"),
            ("r/src/shaping.rl", BONUS),
        ]);
        let mut files = Files::new();
        let checked = rlc_check::check(&l, &mut files, "main.rl", MAIN.to_string());
        for d in &checked.diagnostics {
            if files.get(d.primary().file).name == "rl.toml" {
                prop_assert!(
                    ["E0207", "E0208", "E0210", "E0212"].contains(&d.code.as_str()),
                    "{manifest:?}: {d:?}"
                );
            }
        }
    }
}
