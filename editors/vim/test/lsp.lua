-- Neovim's built-in LSP client against `rlc lsp`, as a user meets it: open a program with a
-- mistake, wait for its diagnostics, hover, ask for code actions, apply the quick fix, and wait
-- until the diagnostics are clean. Written for Neovim 0.7 (Debian bookworm's) and later: the
-- client is started with vim.lsp.start_client (vim.lsp.start is 0.8+), requests go through
-- vim.lsp.buf_request_sync, and the fix is applied with vim.lsp.util.apply_workspace_edit, as
-- `vim.lsp.buf.code_action()` does once the user picks it.
--
-- Run (from the repository root; scripts/test-editors.sh does):
--   RLC=target/debug/rlc RESULT=FILE nvim --headless -u NONE -i NONE -n \
--     -c 'luafile editors/vim/test/lsp.lua' PROGRAM.rl
-- PROGRAM.rl holds `grpo_advantag(` where `grpo_advantage(` is meant (a copy of
-- examples/grpo_digits_by_hand.rl, the main job with its loop written out). Exits 0 when every
-- step passed; otherwise the failed step and what the client saw go to $RESULT (headless
-- Neovim's own output is not reliable at exit).

local TIMEOUT = 20000 -- ms; every wait is bounded, so a silent server fails instead of hanging
local rlc = os.getenv('RLC') or 'rlc'
local result_file = os.getenv('RESULT')
local steps = {}

local function finish(failure)
  local lines = vim.deepcopy(steps)
  if failure then
    table.insert(lines, 'FAILED: ' .. failure)
  end
  if result_file and result_file ~= '' then
    vim.fn.writefile(lines, result_file)
  else
    io.stderr:write(table.concat(lines, '\n') .. '\n')
  end
  vim.cmd(failure and 'cquit!' or 'qall!')
end

local function step(what)
  table.insert(steps, 'ok: ' .. what)
end

local function check(cond, failure)
  if not cond then
    finish(failure)
    error(failure) -- not reached: cquit exits
  end
end

local bufnr = vim.api.nvim_get_current_buf()
local path = vim.api.nvim_buf_get_name(bufnr)
check(path ~= '' and vim.fn.filereadable(path) == 1, 'no program given')

-- Every publishDiagnostics as sent (the raw LSP diagnostics, with their `data`), then Neovim's
-- own handler, so that vim.diagnostic sees them as a user would.
local published = {}
local default_handler = vim.lsp.handlers['textDocument/publishDiagnostics']
vim.lsp.handlers['textDocument/publishDiagnostics'] = function(err, result, ctx, config)
  table.insert(published, result)
  return default_handler(err, result, ctx, config)
end

local client_id = vim.lsp.start_client({
  name = 'rlc',
  cmd = { rlc, 'lsp' },
  root_dir = vim.fn.fnamemodify(path, ':h'),
})
check(client_id, 'vim.lsp.start_client failed for ' .. rlc)
vim.lsp.buf_attach_client(bufnr, client_id)
local uri = vim.uri_from_bufnr(bufnr)

-- The latest diagnostics published for this buffer, after the `after`-th publish.
local function latest(after)
  for i = #published, after + 1, -1 do
    if published[i].uri == uri then
      return published[i].diagnostics
    end
  end
  return nil
end

-- 1. Diagnostics: the unknown name, with the checker's suggestion.
check(vim.wait(TIMEOUT, function() return latest(0) ~= nil end, 20), 'no diagnostics published')
local diags = latest(0)
check(#diags == 1, 'expected one diagnostic, got ' .. vim.inspect(diags))
local diag = diags[1]
check(diag.code == 'E0201' and diag.message:find('grpo_advantag', 1, true),
  'expected E0201 on grpo_advantag, got ' .. vim.inspect(diag))
check(#vim.diagnostic.get(bufnr, { severity = vim.diagnostic.severity.ERROR }) == 1,
  'vim.diagnostic does not show the error')
step('diagnostics: ' .. diag.code .. ' at line ' .. (diag.range.start.line + 1))

-- The position of the first `needle` in the buffer (0-based line, byte column: the program is
-- ASCII, so UTF-16 columns are the same).
local function find(needle)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    local col = line:find(needle, 1, true)
    if col then
      return { line = i - 1, character = col - 1 }
    end
  end
  check(false, '`' .. needle .. '` not in the buffer')
end

local function request(method, params)
  local answers, err = vim.lsp.buf_request_sync(bufnr, method, params, TIMEOUT)
  check(answers and answers[client_id], method .. ': no answer ('
    .. (err or 'is it among the server\'s capabilities?') .. ')')
  local answer = answers[client_id]
  check(not answer.err, method .. ': ' .. vim.inspect(answer.err))
  return answer.result
end

-- 2. Hover on a call of the program's own fn: its signature and doc comment.
local at = find('exact(rollout')
local hover = request('textDocument/hover', { textDocument = { uri = uri }, position = at })
local text = hover and hover.contents and (hover.contents.value or hover.contents) or ''
check(type(text) == 'string' and text:find('fn exact(', 1, true)
  and text:find("The fraction of the answer's tokens", 1, true),
  'hover: ' .. vim.inspect(hover))
step('hover: the signature and docs of `exact`')

-- 3. Code actions for the diagnostic: the checker's rename, as a quick fix.
if os.getenv('RLC_NVIM_SKIP_ACTIONS') == '1' then
  step('code actions: skipped (RLC_NVIM_SKIP_ACTIONS=1)')
  finish(nil)
end
local actions = request('textDocument/codeAction', {
  textDocument = { uri = uri },
  range = diag.range,
  context = { diagnostics = { diag } },
})
local fix
for _, action in ipairs(actions or {}) do
  if action.kind == 'quickfix' and action.edit and action.title:find('grpo_advantage', 1, true) then
    fix = action
    break
  end
end
check(fix, 'no quick fix renaming to grpo_advantage among ' .. vim.inspect(actions))
step('code action: "' .. fix.title .. '"')

-- 4. Apply it, as vim.lsp.buf.code_action() does: Neovim sends the didChange.
local before = #published
local client = vim.lsp.get_client_by_id(client_id)
vim.lsp.util.apply_workspace_edit(fix.edit, client.offset_encoding or 'utf-16')
local fixed = vim.api.nvim_buf_get_lines(bufnr, at.line + 1, at.line + 2, false)[1] or ''
check(fixed:find('= grpo_advantage(score', 1, true), 'the edit gave: ' .. fixed)
step('applied: ' .. vim.trim(fixed))

-- 5. Clean: the diagnostics of the edited text are empty.
check(vim.wait(TIMEOUT, function()
  local now = latest(before)
  return now ~= nil and #now == 0
end, 20), 'diagnostics after the fix: ' .. vim.inspect(latest(before)))
check(#vim.diagnostic.get(bufnr) == 0, 'vim.diagnostic still shows diagnostics')
step('diagnostics clean after the fix')

vim.lsp.stop_client(client_id)
finish(nil)
