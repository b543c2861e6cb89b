#!/usr/bin/env bash
# Tests the editor support in editors/ beyond what `cargo test --test editors` checks:
#   1. the generated word lists are up to date (editors/gen-keywords.py --check);
#   2. VS Code: the TextMate grammar tokenises every examples/, stdlib/ and editors/test/ file
#      as in editors/vscode/test/snapshots/ (UPDATE=1 rewrites the snapshots), and
#      extension.js starts `rlc lsp` as configured (against a fake VS Code), and `rlc lsp`
#      announces every capability the extension relies on;
#   3. Vim: indent/rl.vim reindents those files as committed, syntax/rl.vim gives the expected
#      groups (skipped when vim is not installed);
#   3b. Neovim's built-in LSP client against `rlc lsp` (editors/vim/test/lsp.lua): open a
#      program with a mistake, diagnostics, hover, code action, apply the fix, clean. Neovim is
#      installed with apt-get when missing (Debian bookworm's 0.7.2 is the oldest supported);
#   4. tree-sitter: generate (the committed src/ must not change), the corpus and highlight
#      tests, and a parse of every file without ERROR or MISSING nodes. The CLI is installed
#      from crates.io when missing: about 20 min on 2 cores, so cache ~/.cargo/bin/tree-sitter
#      in CI (the npm package downloads a prebuilt binary, which fails without the network).
# Needs python3, node >= 18 with npm, a C compiler and cargo; vim optional; apt-get (as root or
# with sudo) unless nvim >= 0.7 is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

TREE_SITTER_CLI_VERSION=0.27.1
step() { printf '\n== %s\n' "$*"; }

mapfile -t RL_FILES < <(find examples stdlib editors/test -name '*.rl' 2>/dev/null | sort)

# The language server the client tests talk to.
cargo build --quiet --bin rlc
rlc_bin=${CARGO_TARGET_DIR:-target}/debug/rlc
[[ "$rlc_bin" == /* ]] || rlc_bin="$PWD/$rlc_bin"
lsp_cache=$(mktemp -d)
trap 'rm -rf "$lsp_cache"' EXIT

step "generated word lists"
python3 editors/gen-keywords.py --check

step "VS Code: TextMate scopes (vscode-textmate snapshots) and the language client"
(cd editors/vscode/test && npm ci --no-audit --no-fund --loglevel=error && node snapshot.js \
  && RLC="$rlc_bin" XDG_CACHE_HOME="$lsp_cache" node client.test.js)

step "Vim indent and syntax"
if command -v vim >/dev/null; then
  result=$(mktemp)
  trap 'rm -f "$result"; rm -rf "$lsp_cache"' EXIT
  for script in indent syntax; do
    if ! RESULT="$result" vim -N -u NONE -i NONE -es -S "editors/vim/test/$script.vim" "${RL_FILES[@]}"; then
      cat "$result" >&2
      echo "vim $script test failed" >&2
      exit 1
    fi
  done
  echo "ok"
else
  echo "vim not installed: skipped"
fi

step "Neovim's LSP client against rlc lsp"
if ! command -v nvim >/dev/null; then
  echo "installing Debian's neovim"
  sudo=""; [[ "$(id -u)" == 0 ]] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends neovim \
    || { $sudo apt-get update && $sudo apt-get install -y --no-install-recommends neovim; }
fi
nvim_version=$(nvim --version | sed -n '1s/^NVIM v\([0-9]*\.[0-9]*\).*/\1/p')
if [[ -z "$nvim_version" ]] || ! printf '0.7\n%s\n' "$nvim_version" | sort -C -V; then
  echo "Neovim $nvim_version is older than 0.7: the LSP test needs vim.lsp.start_client and vim.diagnostic" >&2
  exit 1
fi
nvim_dir=$(mktemp -d)
# The example with a mistake: `grpo_advantag(` for `grpo_advantage(`.
sed 's/= grpo_advantage(/= grpo_advantag(/' examples/grpo_digits_by_hand.rl > "$nvim_dir/grpo_typo.rl"
if ! RLC="$rlc_bin" RESULT="$nvim_dir/result" XDG_CACHE_HOME="$lsp_cache" \
  timeout 120 nvim --headless -u NONE -i NONE -n -c 'luafile editors/vim/test/lsp.lua' "$nvim_dir/grpo_typo.rl"; then
  cat "$nvim_dir/result" >&2 || true
  echo "Neovim LSP test failed (Neovim $nvim_version)" >&2
  exit 1
fi
cat "$nvim_dir/result"
rm -rf "$nvim_dir"

step "tree-sitter grammar"
if ! command -v tree-sitter >/dev/null; then
  echo "installing tree-sitter-cli $TREE_SITTER_CLI_VERSION from crates.io"
  # Without the default `qjs-rt` feature `generate` runs grammar.js with Node.js instead of an
  # embedded QuickJS, and a light release profile: together about 5 minutes on 2 cores instead
  # of over 20.
  CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false \
    CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=0 \
    cargo install tree-sitter-cli --locked --no-default-features --version "$TREE_SITTER_CLI_VERSION"
  export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
fi
(
  cd editors/tree-sitter-rl
  tree-sitter generate
  # src/ is committed so that editors can build the parser without the CLI: it must be current.
  # Another CLI version writes another parser.c, so only the pinned one can tell.
  if [[ "$(tree-sitter --version)" != *" $TREE_SITTER_CLI_VERSION"* ]]; then
    echo "tree-sitter is not $TREE_SITTER_CLI_VERSION: not checking that src/ is current"
  elif ! git diff --quiet -- src; then
    git diff --stat -- src >&2
    echo "editors/tree-sitter-rl/src is stale: commit the output of \`tree-sitter generate\`" >&2
    exit 1
  fi
  tree-sitter test
  # Exits 1 when a file has an ERROR or MISSING node, and names it.
  tree-sitter parse --quiet "${RL_FILES[@]/#/../../}"
)
echo "all editor tests passed"
