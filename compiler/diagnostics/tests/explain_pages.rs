//! Every explain page has the shape `rlc explain` and the example tests rely on:
//!
//! ```text
//! # E0103: <the code's title>
//!
//! <a paragraph: what it means and why the language rejects it>
//!
//! ## Wrong
//!
//! ```rl
//! <a program that produces the code>
//! ```
//!
//! ## Fixed
//!
//! ```rl
//! <the corrected program, which produces no diagnostic>
//! ```
//! ```
//!
//! A package manifest's code (`rl.toml`, E0207–E0212) shows its manifest as a ```toml block
//! instead: the example's program is its case folder in `tests/ui/packages/`.

use rlc_diagnostics::CODES;

#[test]
fn pages_have_the_title_a_paragraph_and_both_examples() {
    for info in CODES {
        let page = info.explain;
        let id = info.id;
        let mut lines = page.lines();
        assert_eq!(
            lines.next(),
            Some(format!("# {id}: {}", info.title).as_str()),
            "{id}: first line"
        );
        assert_eq!(lines.next(), Some(""), "{id}: a blank line after the title");
        let paragraph: Vec<&str> = lines.by_ref().take_while(|l| !l.is_empty()).collect();
        assert!(
            !paragraph.is_empty()
                && !paragraph[0].starts_with('#')
                && !paragraph[0].starts_with("```"),
            "{id}: a paragraph follows the title"
        );
        assert!(
            paragraph.concat().len() > 80,
            "{id}: the paragraph says what and why"
        );
        assert!(!page.contains("TODO"), "{id}: page is unfinished");

        let example = |heading: &str| {
            ["rl", "toml"]
                .iter()
                .find_map(|lang| page.find(&format!("\n## {heading}\n\n```{lang}\n")))
                .unwrap_or_else(|| panic!("{id}: `## {heading}` then a ```rl (or ```toml) block"))
        };
        let (wrong, fixed) = (example("Wrong"), example("Fixed"));
        assert!(wrong < fixed, "{id}: `## Wrong` comes before `## Fixed`");
        assert!(
            page.ends_with("```\n"),
            "{id}: the page ends with the fixed example"
        );
        assert_eq!(
            page.matches("```rl\n").count() + page.matches("```toml\n").count(),
            2,
            "{id}: exactly two examples"
        );

        let (w, f) = (info.wrong_example().unwrap(), info.fixed_example().unwrap());
        assert_ne!(w, f, "{id}: the fixed example differs from the wrong one");
        for (what, example) in [("wrong", w), ("fixed", f)] {
            assert!(!example.trim().is_empty(), "{id}: empty {what} example");
            assert!(
                example.lines().count() <= 16,
                "{id}: the {what} example is not tiny"
            );
            assert!(!example.contains('\t'), "{id}: tabs in the {what} example");
        }
    }
}

#[test]
fn examples_are_the_blocks_under_their_headings() {
    let info = rlc_diagnostics::Code::Semicolon.info();
    assert!(info.wrong_example().unwrap().contains(';'));
    assert!(!info.fixed_example().unwrap().contains(';'));
    assert!(info.fixed_example().unwrap().ends_with("}\n"));
}
