//! Nesting limits (E0120): deeply nested or very long expressions are refused with a coded
//! diagnostic, never by exhausting the stack; the deepest accepted ones parse and format in a
//! small stack.

use rlc_diagnostics::{Code, FileId};
use rlc_syntax::{MAX_DEPTH, MAX_NESTING};

/// Runs `f` on a thread with a `kib` KiB stack (a test thread's default is 2 MiB), so that a
/// recursion the limits should bound shows up as a crash here rather than in a larger stack.
fn in_stack<T: Send + 'static>(kib: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(kib * 1024)
        .spawn(f)
        .unwrap()
        .join()
        .unwrap()
}

fn codes(src: &str) -> Vec<Code> {
    rlc_syntax::parse(FileId(0), src)
        .diagnostics
        .iter()
        .map(|d| d.code)
        .collect()
}

fn nested(open: &str, close: &str, n: usize) -> String {
    format!("let x = {}1{}\n", open.repeat(n), close.repeat(n))
}

#[test]
fn a_hundred_thousand_brackets_are_refused_in_a_small_stack() {
    for (open, close) in [("(", ")"), ("[", "]"), ("{", "}"), ("f(", ")")] {
        let src = nested(open, close, 100_000);
        let (parse, format) = in_stack(256, move || {
            let codes = codes(&src);
            let format = rlc_syntax::format::format_source(FileId(0), &src)
                .unwrap_err()
                .iter()
                .map(|d| d.code)
                .collect::<Vec<_>>();
            (codes, format)
        });
        assert_eq!(parse, [Code::NestedTooDeep], "{open}");
        assert_eq!(format, [Code::NestedTooDeep], "{open}");
    }
}

#[test]
fn the_error_points_at_the_first_bracket_past_the_limit() {
    let src = nested("(", ")", MAX_NESTING + 1);
    let parsed = rlc_syntax::parse(FileId(0), &src);
    let at = parsed.diagnostics[0].primary().span.start as usize;
    assert_eq!(at, "let x = ".len() + MAX_NESTING);
}

#[test]
fn the_deepest_accepted_brackets_parse_and_format_in_a_small_stack() {
    let src = nested("(", ")", MAX_NESTING);
    let formatted = in_stack(1024, move || {
        assert_eq!(codes(&src), []);
        rlc_syntax::format::format_source(FileId(0), &src).unwrap()
    });
    assert!(formatted.contains(&"(".repeat(MAX_NESTING)));
}

#[test]
fn brackets_in_strings_and_comments_do_not_count() {
    let deep = "(".repeat(2 * MAX_NESTING);
    let src = format!("// {deep}\nlet s = \"{deep}\"\nlet t = \"\\\"{deep}\"\n");
    assert_eq!(codes(&src), []);
}

#[test]
fn long_chains_of_operators_are_refused() {
    let n = 100_000;
    for src in [
        format!("let a = 1\nlet b = {}a\n", "-".repeat(n)),
        format!("let a = true\nlet b = {}a\n", "!".repeat(n)),
        format!("let a = 1\nlet b = a{}\n", " + a".repeat(n)),
        format!("let a = 1\nlet b = a{}\n", ".x".repeat(n)),
        format!("let a = 1\nlet b = a{}\n", "()".repeat(n)),
        format!("let a = 1\nlet b = a{}\n", "[0]".repeat(n)),
    ] {
        let got = in_stack(256, move || codes(&src));
        assert_eq!(got, [Code::NestedTooDeep]);
    }
    // A chain's operators count towards its depth too.
    let at_limit = format!("let a = 1\nlet b = a{}\n", " + a".repeat(MAX_DEPTH - 1));
    assert_eq!(codes(&at_limit), []);
}

/// Few brackets, each holding a chain of operators: the tree is deep although neither limit on
/// brackets nor on chains is reached.
fn operators_in_brackets(levels: usize, ops: usize) -> String {
    let level = "1 + ".repeat(ops);
    format!(
        "let x = {}1{}\n",
        format!("{level}(").repeat(levels),
        ")".repeat(levels)
    )
}

#[test]
fn depth_counts_operators_inside_brackets() {
    // Each level adds `ops` operators and its bracketed operand.
    let ops = 8;
    let fits = (MAX_DEPTH - 1) / (ops + 1);
    assert_eq!(codes(&operators_in_brackets(fits, ops)), []);
    assert_eq!(
        codes(&operators_in_brackets(fits + 1, ops)),
        [Code::NestedTooDeep]
    );
    // The worst case the chain and bracket limits alone allowed: 128 brackets of 200 operators
    // each, a tree some 25 000 levels deep. Refused once, without exhausting a 1 MiB stack (in
    // a smaller one pest's own guard refuses to go on, with a less precise error).
    let src = operators_in_brackets(MAX_NESTING, 200);
    let got = in_stack(1024, move || codes(&src));
    assert_eq!(got, [Code::NestedTooDeep]);
}

#[test]
fn the_deepest_accepted_expression_formats_in_a_small_stack() {
    let src = operators_in_brackets((MAX_DEPTH - 1) / 9, 8);
    let formatted = in_stack(1024, move || {
        rlc_syntax::format::format_source(FileId(0), &src).unwrap()
    });
    let again = rlc_syntax::format::format_source(FileId(0), &formatted).unwrap();
    assert_eq!(formatted, again);
}
