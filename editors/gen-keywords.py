#!/usr/bin/env python3
"""Writes the word lists of the editor grammars from grammar/rl.pest, so they cannot drift.

Reads the `keyword`, `item_start`, `bool_lit`, statement and contextual-keyword rules and the
`*_op` rules of rl.pest, and the units of `Unit::as_str` in compiler/syntax/src/ast.rs (the
grammar reads any word as a unit; the list of valid ones lives in the AST). Writes:

  editors/words.json                          the lists (tree-sitter's grammar.js requires it)
  editors/vscode/syntaxes/rl.tmLanguage.json  the `match` of the generated repository rules
  editors/vim/syntax/rl.vim                   the block between the GENERATED markers
  editors/tree-sitter-rl/queries/highlights.scm  the block between the GENERATED markers

`--check` writes nothing and exits 1 listing the files that are out of date (tests/editors.rs
runs it). Python 3 standard library only.
"""

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEST = ROOT / "grammar/rl.pest"
AST = ROOT / "compiler/syntax/src/ast.rs"
WORDS = ROOT / "editors/words.json"
TEXTMATE = ROOT / "editors/vscode/syntaxes/rl.tmLanguage.json"
VIM = ROOT / "editors/vim/syntax/rl.vim"
HIGHLIGHTS = ROOT / "editors/tree-sitter-rl/queries/highlights.scm"

# Names the checker gives a meaning (LANGUAGE.md, "Types" and "model"): they are ordinary names
# to the grammar, so rl.pest cannot list them. Kept here so every editor gets the same lists.
SCALAR_TYPES = ["f32", "bf16", "f16", "i32", "i64", "bool"]
TENSOR_TYPES = ["Tokens", "Mask"]
ROLE_KINDS = ["CausalLM", "ValueModel", "RewardModel"]
# What else a recipe's (a generic pipeline's) parameter may take besides a role:
# `rlc_check::recipes::GenericParam::from_type` (tests/editors.rs checks the two agree).
GENERIC_TYPES = ["Dataset", "Verifier", "Environment", "Fn"]


# ---------------------------------------------------------------------------------------------
# Reading rl.pest


def pest_rules(text):
    """Rule name -> body, with `//` comments removed (string literals may contain `/`)."""
    code = "\n".join(strip_comment(line) for line in text.splitlines())
    rules = {}
    for m in re.finditer(r"^(\w+)\s*=\s*[_@$!]?\{", code, re.M):
        depth, i = 1, m.end()
        while depth:
            c = code[i]
            i = skip_string(code, i) if c == '"' else i + 1
            depth += {"{": 1, "}": -1}.get(c, 0)
        rules[m.group(1)] = code[m.end() : i - 1]
    return rules


def skip_string(code, i):
    """The index after the string literal that starts at `i`."""
    i += 1
    while code[i] != '"':
        i += 2 if code[i] == "\\" else 1
    return i + 1


def strip_comment(line):
    i = 0
    while i < len(line):
        if line[i] == '"':
            i = skip_string(line, i)
        elif line.startswith("//", i):
            return line[:i]
        else:
            i += 1
    return line


def literals(body):
    return re.findall(r'"((?:[^"\\]|\\.)*)"', body)


def first_token_literal(body):
    m = re.match(r'\s*"((?:[^"\\]|\\.)*)"', body)
    return m and m.group(1)


def contextual_comment(text):
    """The backquoted words of the comment under `keyword`, less the `(in `x`)` notes."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("// Contextual keywords"))
    words = []
    for line in lines[start + 1 :]:
        if not line.startswith("//"):
            break
        words += re.findall(r"`(\w+)`", re.sub(r"\(in [^)]*\)", "", line))
    return words


def unit_names(ast):
    """The string arms of `Unit::as_str` in ast.rs, in order."""
    m = re.search(r"impl Unit \{.*?fn as_str\b.*?\{(.*?)\n    \}\n", ast, re.S)
    if not m:
        sys.exit("gen-keywords: no `Unit::as_str` in ast.rs")
    return re.findall(r'Unit::\w+\s*=>\s*"(\w+)"', m.group(1))


def unique(xs):
    return list(dict.fromkeys(xs))


def derive():
    text = PEST.read_text()
    rules = pest_rules(text)
    keywords = literals(rules["keyword"])
    items = [w for w in literals(rules["item_start"]) if w in keywords]
    booleans = literals(rules["bool_lit"])
    # A keyword that starts a statement or an expression is control flow; `let` stays an item.
    starters = [first_token_literal(b) for n, b in rules.items() if n.endswith(("_stmt", "_expr"))]
    control = [w for w in keywords if w in starters and w not in items]
    other = [w for w in keywords if w not in items + control + booleans]
    scan_dirs, over, steps = literals(rules["scan_dir"]), literals(rules["over_kw"]), literals(rules["steps_kw"])
    layouts = literals(rules["layout_kind"])
    contextual = contextual_comment(text)
    if sorted(contextual) != sorted(scan_dirs + over + steps + layouts):
        sys.exit("gen-keywords: the contextual keyword comment in rl.pest disagrees with its rules")
    # The first literal of each `*_op` rule named by `infix` and by `prefix`.
    binary, prefix = (
        [first_token_literal(rules[op]) for op in re.findall(r"\w+_op", rules[group])]
        for group in ("infix", "prefix")
    )
    if '"->"' not in text:
        sys.exit("gen-keywords: rl.pest has no `->`")
    units = unit_names(AST.read_text())
    return {
        "_generated": "by editors/gen-keywords.py from grammar/rl.pest and ast.rs; do not edit",
        "keywords": keywords,
        "item_keywords": items,
        "control_keywords": control,
        "other_keywords": other,
        "booleans": booleans,
        "contextual_keywords": contextual,
        "scan_directions": scan_dirs,
        "scan_over": over,
        "every_steps": steps,
        "layouts": layouts,
        "binary_operators": binary,
        "prefix_operators": prefix,
        "arrow": "->",
        "units": units,
        "scalar_types": SCALAR_TYPES,
        "tensor_types": TENSOR_TYPES,
        "role_kinds": ROLE_KINDS,
        "generic_types": GENERIC_TYPES,
    }


# ---------------------------------------------------------------------------------------------
# Writing the editor files


def alt(words):
    """A regex alternation, longest first so that `GBps` is tried before `GB`."""
    return "|".join(re.escape(w) for w in sorted(words, key=lambda w: (-len(w), w)))


def textmate(w, old):
    g = json.loads(old)
    repo = g["repository"]
    kw = lambda ws: r"\b(?:" + alt(ws) + r")\b"
    repo["keyword-item"]["match"] = kw(w["item_keywords"])
    repo["keyword-control"]["match"] = kw(w["control_keywords"])
    repo["keyword-other"]["match"] = kw(w["other_keywords"])
    repo["boolean"]["match"] = kw(w["booleans"])
    repo["scan-header"]["match"] = (
        r"\b(scan)\s+(" + alt(w["scan_directions"]) + r")\s+(" + alt(w["scan_over"]) + r")\b(?:\s+([A-Za-z_]\w*))?"
    )
    repo["every-steps"]["match"] = r"\b(every)\b(.*?)\b(" + alt(w["every_steps"]) + r")\b"
    repo["place"]["end"] = r"(?=^\s*(?:(?:" + alt(w["item_keywords"]) + r")\b|$))"
    repo["layout"]["match"] = r"\b(?:" + alt(w["layouts"]) + r")\b(?=\s*\()"
    repo["number"]["match"] = (
        r"\b(\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?)(?:(" + alt(w["units"]) + r")\b|([A-Za-z_]\w*))?"
    )
    repo["operator"]["match"] = "(" + re.escape(w["arrow"]) + ")|(" + alt(w["binary_operators"] + w["prefix_operators"]) + ")"
    repo["type-builtin"]["patterns"][0]["match"] = kw(w["scalar_types"])
    repo["type-builtin"]["patterns"][1]["match"] = kw(w["tensor_types"])
    repo["type-builtin"]["patterns"][2]["match"] = kw(w["generic_types"])
    repo["role-kind"]["match"] = kw(w["role_kinds"])
    return json.dumps(g, indent=2, ensure_ascii=False) + "\n"


def vim_block(w):
    vre = lambda ws: "\\|".join(x.replace("\\", "\\\\") for x in sorted(ws, key=lambda x: (-len(x), x)))
    ctx = lambda ws: "%(" + "|".join(ws) + ")"
    return [
        "syntax keyword rlItem " + " ".join(w["item_keywords"]),
        "syntax keyword rlControl " + " ".join(w["control_keywords"]),
        "syntax keyword rlKeyword " + " ".join(w["other_keywords"]),
        "syntax keyword rlBoolean " + " ".join(w["booleans"]),
        "syntax keyword rlType " + " ".join(w["scalar_types"] + w["tensor_types"] + w["generic_types"]),
        "syntax keyword rlRoleKind " + " ".join(w["role_kinds"]),
        r"syntax match rlContextual /\v(<scan>\s+)@<=<" + ctx(w["scan_directions"]) + ">/",
        r"syntax match rlContextual /\v(<" + ctx(w["scan_directions"]) + r">\s+)@<=<" + ctx(w["scan_over"]) + ">/",
        r"syntax match rlContextual /\v(<every>.{-})@<=<" + ctx(w["every_steps"]) + ">/",
        r"syntax match rlLayout /\v(<with>.*)@<=<" + ctx(w["layouts"]) + r">\ze\s*\(/",
        "syntax match rlUnit /\\v%(" + "|".join(sorted(w["units"], key=lambda x: (-len(x), x))) + ")>/ contained",
        'syntax match rlOperator "\\V' + vre(unique([w["arrow"]] + w["binary_operators"] + w["prefix_operators"])) + '"',
    ]


def scm_strings(ws):
    return "[" + " ".join(json.dumps(x) for x in ws) + "]"


def scm_any_of(capture, ws):
    return f"(#any-of? {capture} " + " ".join(json.dumps(x) for x in ws) + ")"


def highlights_block(w):
    ops = unique([w["arrow"]] + w["binary_operators"] + w["prefix_operators"])
    return [
        scm_strings(w["item_keywords"]) + " @keyword",
        scm_strings(w["control_keywords"]) + " @keyword",
        scm_strings(w["other_keywords"]) + " @keyword",
        scm_strings(w["booleans"]) + " @boolean",
        scm_strings(w["scan_directions"] + w["scan_over"] + w["every_steps"]) + " @keyword",
        scm_strings(w["layouts"]) + " @keyword",
        scm_strings(ops) + " @operator",
        "((unit) @constant.builtin " + scm_any_of("@constant.builtin", w["units"]) + ")",
        "((type name: (identifier) @type.builtin) "
        + scm_any_of("@type.builtin", w["scalar_types"] + w["tensor_types"] + w["role_kinds"] + w["generic_types"])
        + ")",
        "((model_item kind: (identifier) @type.builtin) " + scm_any_of("@type.builtin", w["role_kinds"]) + ")",
    ]


def replace_block(old, lines, comment):
    begin = f"{comment} BEGIN GENERATED by editors/gen-keywords.py from grammar/rl.pest: do not edit"
    end = f"{comment} END GENERATED"
    m = re.search(re.escape(comment) + r" BEGIN GENERATED.*?\n.*?" + re.escape(end) + r"\n", old, re.S)
    if not m:
        sys.exit(f"gen-keywords: no `{comment} BEGIN GENERATED` … `{end}` block")
    return old[: m.start()] + "\n".join([begin, *lines, end]) + "\n" + old[m.end() :]


def main():
    check = "--check" in sys.argv[1:]
    w = derive()
    outputs = {
        WORDS: lambda old: json.dumps(w, indent=2) + "\n",
        TEXTMATE: lambda old: textmate(w, old),
        VIM: lambda old: replace_block(old, vim_block(w), '"'),
        HIGHLIGHTS: lambda old: replace_block(old, highlights_block(w), ";"),
    }
    stale = []
    for path, render in outputs.items():
        old = path.read_text() if path.exists() else "{}"
        new = render(old)
        if new != old:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    if check and stale:
        print("out of date (run python3 editors/gen-keywords.py):", *stale, sep="\n  ")
        sys.exit(1)


if __name__ == "__main__":
    main()
