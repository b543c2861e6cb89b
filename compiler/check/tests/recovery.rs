//! Checking goes on after syntax errors (#29): the items that parsed are checked, and a name
//! that an item cut short by a syntax error declares is unknown without a diagnostic, in its
//! own module and in those that import it.

use rlc_diagnostics::Files;
use std::collections::BTreeMap;

struct Texts(BTreeMap<&'static str, &'static str>);

impl rlc_check::SourceLoader for Texts {
    fn read(&self, path: &str) -> Result<String, String> {
        self.0
            .get(path)
            .map(|t| t.to_string())
            .ok_or_else(|| "not found".into())
    }
}

/// The codes reported, with the file each is in, in order.
fn codes(main: &'static str, lib: &'static str) -> Vec<(String, &'static str)> {
    let loader = Texts(BTreeMap::from([("lib.rl", lib)]));
    let mut files = Files::new();
    let checked = rlc_check::check(&loader, &mut files, "main.rl", main.to_string());
    checked
        .diagnostics
        .iter()
        .map(|d| {
            let file = &files.get(d.labels[0].file).name;
            (file.clone(), d.code.as_str())
        })
        .collect()
}

const LIB: &str =
    "pub fn twice(x: f32 -> f32 {\n  x * 2.0\n}\n\npub fn thrice(x: f32) -> f32 {\n  x * 3.0\n}\n";

#[test]
fn names_of_broken_items_are_silent_across_modules() {
    // `twice` is cut short in lib.rl: imported by name or used through the module, it is not
    // reported; `y` is a real mistake beside it.
    let main = "import \"./lib.rl\" { twice, thrice }\nimport \"./lib.rl\" as lib\n\npub fn f(x: f32) -> f32 {\n  twice(x) + lib.twice(x) + thrice(y)\n}\n";
    assert_eq!(
        codes(main, LIB),
        [
            ("main.rl".to_string(), "E0201"),
            ("lib.rl".to_string(), "E0101")
        ]
    );
}

#[test]
fn an_item_with_a_refused_expression_is_not_evaluated() {
    // The lowering refuses `1 < 2 < 3` (E0115) and keeps the item: its value is unknown, so
    // using it is no type error.
    let main = "let limit = 1 < 2 < 3\n\npub fn f(x: f32) -> f32 {\n  x + limit + z\n}\n";
    assert_eq!(
        codes(main, LIB),
        [
            ("main.rl".to_string(), "E0115"),
            ("main.rl".to_string(), "E0201")
        ]
    );
}

#[test]
fn a_misspelt_item_keyword_poisons_the_name_after_it() {
    // `modle policy …` starts no item: its second word is taken for the name it declares.
    let main =
        "modle policy: CausalLM {\n}\n\npub fn f(x: f32) -> f32 {\n  x + policy + policy_lr\n}\n";
    let found = codes(main, LIB);
    assert_eq!(
        found,
        [
            ("main.rl".to_string(), "E0117"),
            ("main.rl".to_string(), "E0201")
        ]
    );
}

#[test]
fn a_broken_import_silences_the_unknown_names_of_its_module() {
    // Nothing tells which names the import would have bound: no unknown name of the module is
    // reported, but other mistakes are (`true + 1.0`).
    let main = "import std.algo { whiten,, token_mean }\n\npub fn f(x: f32) -> f32 {\n  x + whiten + other + (true + 1.0)\n}\n";
    let found = codes(main, LIB);
    assert!(found.iter().all(|(_, c)| *c != "E0201"), "{found:?}");
    assert!(found.iter().any(|(_, c)| c.starts_with("E01")), "{found:?}");
    assert!(found.iter().any(|(_, c)| c.starts_with("E03")), "{found:?}");
}
