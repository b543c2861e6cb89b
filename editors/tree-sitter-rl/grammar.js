/**
 * @file tree-sitter grammar for `.rl` files, following grammar/rl.pest rule for rule.
 *
 * The word lists (reserved and contextual keywords, operators) come from ../words.json, which
 * editors/gen-keywords.py derives from rl.pest; this file only arranges them. Reserved keywords
 * are never identifiers; contextual ones are keywords only where a rule names them, which
 * tree-sitter gives for free through `word` (a keyword is lexed only where it is valid).
 */

/// <reference types="tree-sitter-cli/dsl" />
// @ts-check

const words = require('../words.json');

// Binding power, loosest first, as in rl.pest's expression section.
const PREC = { range: 1, or: 2, and: 3, compare: 4, add: 5, mul: 6, prefix: 7, postfix: 8 };
const BINARY = {
  '..': PREC.range,
  '||': PREC.or,
  '&&': PREC.and,
  '==': PREC.compare, '!=': PREC.compare, '<': PREC.compare, '<=': PREC.compare,
  '>': PREC.compare, '>=': PREC.compare,
  '+': PREC.add, '-': PREC.add,
  '*': PREC.mul, '/': PREC.mul, '%': PREC.mul,
};
// An operator added to rl.pest needs a binding power here: fail the build rather than drop it.
const missing = words.binary_operators.filter((op) => !(op in BINARY));
if (missing.length) throw new Error(`grammar.js: no precedence for ${missing.join(' ')}`);

// Every item may start with `pub` (rl.pest's `pub_kw`).
const item = (...rules) => seq(optional(field('visibility', 'pub')), ...rules);
// A choice of literal words from words.json (tree-sitter warns about a choice of one).
const oneOf = (ws) => (ws.length === 1 ? ws[0] : choice(...ws));
const commaSep1 = (rule) => seq(rule, repeat(seq(',', rule)), optional(','));
const commaSep = (rule) => optional(commaSep1(rule));

module.exports = grammar({
  name: 'rl',

  word: ($) => $.identifier,
  reserved: { global: () => words.keywords },
  extras: ($) => [/\s/, $.comment],

  // A `{` after a call may open its closure or, statements needing no separator, a record or
  // the body of the enclosing `loop`/`every`; the next tokens decide (rl.pest tries the closure).
  conflicts: ($) => [[$.call_expression]],

  supertypes: ($) => [$._item, $._statement, $._expression],

  rules: {
    source_file: ($) => repeat($._item),

    comment: () => token(seq('//', /[^\n]*/)),

    // -----------------------------------------------------------------------------------------
    // Items

    _item: ($) => choice(
      $.import_item, $.cluster_item, $.model_item, $.dataset_item, $.struct_item, $.fn_item,
      $.const_item, $.place_item, $.pipeline_item, $.verifier_item, $.environment_item,
    ),

    import_item: ($) => item(
      'import',
      field('source', choice($.string, $.module_path)),
      optional(seq('as', field('alias', $.identifier))),
      optional($.import_names),
    ),
    module_path: ($) => seq($.identifier, repeat(seq('.', $.identifier))),
    import_names: ($) => seq('{', commaSep1($.import_name), '}'),
    import_name: ($) => seq(field('name', $.identifier), optional(seq('as', field('alias', $.identifier)))),

    cluster_item: ($) => item('cluster', field('name', $.identifier), $._definition),
    model_item: ($) => item(
      'model', field('name', $.identifier), ':', field('kind', $.identifier),
      $._definition,
    ),
    dataset_item: ($) => item('dataset', field('name', $.identifier), $._definition),
    // verifier answer = program("python3", "answer.py", workers: 2, timeout: 10s)
    verifier_item: ($) => item('verifier', field('name', $.identifier), $._definition),
    // environment calc = program("python3", "calc.py", workers: 2, fields: ["answer"])
    environment_item: ($) => item('environment', field('name', $.identifier), $._definition),
    _definition: ($) => choice(seq('=', field('value', $._expression)), field('body', $.field_block)),
    field_block: ($) => seq('{', repeat($.field), '}'),
    field: ($) => seq(field('name', $.identifier), '=', field('value', $._expression)),

    struct_item: ($) => item(
      'struct', field('name', $.identifier), '{', commaSep($.struct_field), '}',
    ),
    struct_field: ($) => seq(field('name', $.identifier), ':', field('type', $.type)),

    fn_item: ($) => item(
      'fn', field('name', $.identifier), field('parameters', $.parameters),
      optional(seq('->', field('return_type', $.type))), field('body', $.block),
    ),
    parameters: ($) => seq('(', commaSep($.parameter), ')'),
    parameter: ($) => seq(
      field('name', $.identifier),
      optional(seq(':', field('type', $.type))),
      optional(seq('=', field('default', $._expression))),
    ),

    const_item: ($) => item(
      'let', field('name', $.identifier),
      optional(seq(':', field('type', $.type))), '=', field('value', $._expression),
    ),

    place_item: ($) => item('place', choice(
      seq('auto', optional(seq('on', field('target', $._expression)))),
      seq(
        field('role', $.role_ref),
        optional(seq('on', field('target', $._expression))),
        field('layout', choice('auto', $.layouts)),
      ),
    )),
    role_ref: ($) => seq(field('model', $.identifier), optional(seq('.', field('phase', $.identifier)))),
    layouts: ($) => seq('with', commaSep1($.layout)),
    layout: ($) => seq(field('kind', $.layout_kind), '(', field('size', $._expression), ')'),
    layout_kind: () => oneOf(words.layouts),

    pipeline_item: ($) => item(
      'pipeline', field('name', $.identifier),
      optional(field('parameters', $.parameters)), field('body', $.block),
    ),

    // -----------------------------------------------------------------------------------------
    // Types: `f32`, `f32[B, T]`, `Tokens[B, 8]`, `Rollout`

    type: ($) => seq(field('name', $.identifier), optional($.dimensions)),
    dimensions: ($) => seq('[', commaSep(choice($.dim_size, $.identifier)), ']'),
    dim_size: () => /[0-9]+/,

    // -----------------------------------------------------------------------------------------
    // Statements

    block: ($) => seq('{', repeat($._statement), '}'),
    _statement: ($) => choice(
      $.let_statement, $.loop_statement, $.log_statement, $.every_statement,
      $.checkpoint_statement, $.emit_statement, $.assignment, $.expression_statement,
    ),
    let_statement: ($) => seq(
      'let', field('name', $.identifier), optional(seq(':', field('type', $.type))),
      '=', field('value', $._expression),
    ),
    assignment: ($) => seq(field('name', $.identifier), '=', field('value', $._expression)),
    // loop step in 0..steps with (beta = 0.1) { … }: `with` carries values from step to step.
    loop_statement: ($) => seq(
      'loop', field('variable', $.identifier), 'in', field('range', $._expression),
      optional($._carries), field('body', $.block),
    ),
    log_statement: ($) => seq('log', field('record', $.record)),
    every_statement: ($) => seq(
      'every', field('interval', $._expression), oneOf(words.every_steps), field('body', $.block),
    ),
    checkpoint_statement: ($) => seq('checkpoint', $.identifier, repeat(seq(',', $.identifier))),
    emit_statement: ($) => seq('emit', field('value', $._expression)),
    expression_statement: ($) => $._expression,

    // -----------------------------------------------------------------------------------------
    // Expressions

    _expression: ($) => choice(
      $.binary_expression, $.unary_expression, $.call_expression, $.index_expression,
      $.member_expression, $.scan_expression, $.record, $.list, $.parenthesized_expression,
      $.number, $.string, $.boolean, $.identifier,
    ),

    binary_expression: ($) => choice(...Object.entries(BINARY).map(([op, p]) => prec.left(p, seq(
      field('left', $._expression), field('operator', op), field('right', $._expression),
    )))),
    unary_expression: ($) => prec(PREC.prefix, seq(
      field('operator', oneOf(words.prefix_operators)), field('operand', $._expression),
    )),

    // A call may end in a block that receives values: `policy.update(r) { logp -> loss }`.
    // `log` is also the natural logarithm when called (rl.pest's `log_fn`: `log` before `(`).
    call_expression: ($) => prec(PREC.postfix, seq(
      field('function', choice($._expression, alias('log', $.identifier))),
      field('arguments', $.arguments),
      optional(field('closure', $.closure)),
    )),
    arguments: ($) => seq('(', commaSep($.argument), ')'),
    argument: ($) => seq(optional(seq(field('name', $.identifier), ':')), field('value', $._expression)),
    closure: ($) => seq(
      '{', $.identifier, repeat(seq(',', $.identifier)), '->', repeat($._statement), '}',
    ),
    index_expression: ($) => prec(PREC.postfix, seq(
      field('value', $._expression), '[', commaSep1($._expression), ']',
    )),
    member_expression: ($) => prec(PREC.postfix, seq(
      field('value', $._expression), '.', field('member', $.identifier),
    )),

    parenthesized_expression: ($) => seq('(', $._expression, ')'),
    record: ($) => seq('{', commaSep($.record_field), '}'),
    record_field: ($) => seq(field('name', $.identifier), ':', field('value', $._expression)),
    // `["answer", "steps"]`
    list: ($) => seq('[', commaSep($._expression), ']'),

    // scan reverse over T with (next_v = 0.0, last = 0.0) { t -> … emit last }
    scan_expression: ($) => seq(
      'scan', field('direction', oneOf(words.scan_directions)), oneOf(words.scan_over),
      field('axis', $.identifier),
      optional($._carries),
      '{', field('parameter', $.identifier), '->', repeat($._statement), '}',
    ),
    _carries: ($) => seq('with', '(', commaSep1($.carry), ')'),
    carry: ($) => seq(field('name', $.identifier), '=', field('value', $._expression)),

    // -----------------------------------------------------------------------------------------
    // Literals

    // `3`, `0.2`, `3e-4`, and quantities with the unit written against the number: `80GiB`.
    number: ($) => seq($._number_body, optional(field('unit', $.unit))),
    _number_body: () => token(/[0-9][0-9_]*(\.[0-9][0-9_]*)?([eE][+-]?[0-9][0-9_]*)?/),
    unit: () => token.immediate(/[A-Za-z][A-Za-z0-9_]*/),

    string: ($) => seq('"', repeat(choice($.string_content, $.escape_sequence)), token.immediate('"')),
    string_content: () => token.immediate(prec(1, /[^"\\\n]+/)),
    escape_sequence: () => token.immediate(/\\./),

    boolean: () => oneOf(words.booleans),
    identifier: () => /[A-Za-z_][A-Za-z0-9_]*/,
  },
});
