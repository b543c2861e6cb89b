// Tokenises every examples/*.rl, stdlib/**/*.rl and editors/test/*.rl with the engine VS Code uses (vscode-textmate
// on the Oniguruma wasm) and compares the scopes with snapshots/<path>.scopes.txt, one line per
// token: `line:col "text" scopes`. Fails on a difference or a stale snapshot; UPDATE=1 rewrites.
'use strict';

const fs = require('fs');
const path = require('path');
const oniguruma = require('vscode-oniguruma');
const textmate = require('vscode-textmate');

const ROOT = path.resolve(__dirname, '../../..');
const GRAMMAR = path.resolve(__dirname, '../syntaxes/rl.tmLanguage.json');
const SNAPSHOTS = path.join(__dirname, 'snapshots');
const UPDATE = process.env.UPDATE === '1';

function rlFiles() {
  const found = [];
  const walk = (dir) => {
    if (!fs.existsSync(dir)) return;
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(p);
      else if (entry.name.endsWith('.rl')) found.push(path.relative(ROOT, p));
    }
  };
  walk(path.join(ROOT, 'examples'));
  walk(path.join(ROOT, 'stdlib'));
  walk(path.join(ROOT, 'editors/test'));
  return found.sort();
}

async function loadGrammar() {
  const wasm = fs.readFileSync(require.resolve('vscode-oniguruma/release/onig.wasm'));
  await oniguruma.loadWASM(wasm.buffer.slice(wasm.byteOffset, wasm.byteOffset + wasm.byteLength));
  const registry = new textmate.Registry({
    onigLib: Promise.resolve({
      createOnigScanner: (sources) => new oniguruma.OnigScanner(sources),
      createOnigString: (s) => new oniguruma.OnigString(s),
    }),
    loadGrammar: async () => textmate.parseRawGrammar(fs.readFileSync(GRAMMAR, 'utf8'), GRAMMAR),
  });
  return registry.loadGrammar('source.rl');
}

// Tokens are shown trimmed, whitespace-only ones left out: white space carries no highlighting.
// `-` stands for no scope but the file's.
function scopes(grammar, text) {
  const out = [];
  let stack = textmate.INITIAL;
  text.split('\n').forEach((line, i) => {
    const result = grammar.tokenizeLine(line, stack);
    for (const t of result.tokens) {
      const raw = line.slice(t.startIndex, t.endIndex);
      const piece = raw.trim();
      if (piece === '') continue;
      const col = t.startIndex + raw.indexOf(piece) + 1;
      out.push(`${i + 1}:${col} ${JSON.stringify(piece)} ${t.scopes.slice(1).join(' ') || '-'}`);
    }
    stack = result.ruleStack;
  });
  return out.join('\n') + '\n';
}

async function main() {
  const grammar = await loadGrammar();
  const files = rlFiles();
  const expected = new Set();
  let failed = 0;
  for (const file of files) {
    const snap = path.join(SNAPSHOTS, file + '.scopes.txt');
    expected.add(snap);
    const actual = scopes(grammar, fs.readFileSync(path.join(ROOT, file), 'utf8'));
    const old = fs.existsSync(snap) ? fs.readFileSync(snap, 'utf8') : null;
    if (old === actual) continue;
    if (UPDATE) {
      fs.mkdirSync(path.dirname(snap), { recursive: true });
      fs.writeFileSync(snap, actual);
      console.log(`updated ${path.relative(ROOT, snap)}`);
      continue;
    }
    failed++;
    console.error(old === null ? `missing snapshot for ${file}` : `scopes differ for ${file}:\n${firstDiff(old, actual)}`);
  }
  // A snapshot whose .rl file is gone would otherwise linger unnoticed.
  for (const snap of listSnapshots(SNAPSHOTS)) {
    if (expected.has(snap)) continue;
    if (UPDATE) {
      fs.unlinkSync(snap);
      console.log(`removed ${path.relative(ROOT, snap)}`);
    } else {
      failed++;
      console.error(`stale snapshot ${path.relative(ROOT, snap)}`);
    }
  }
  if (failed) {
    console.error(`${failed} snapshot(s) differ; rerun with UPDATE=1 after reading the change`);
    process.exit(1);
  }
  console.log(`${files.length} files tokenised, snapshots match`);
}

function firstDiff(old, actual) {
  const a = old.split('\n');
  const b = actual.split('\n');
  const i = a.findIndex((line, k) => line !== b[k]);
  const at = i === -1 ? a.length : i;
  return `  snapshot: ${a[at] ?? '(end)'}\n  actual:   ${b[at] ?? '(end)'}`;
}

function listSnapshots(dir) {
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.scopes.txt'))
    .map((e) => path.join(e.parentPath ?? e.path, e.name));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
