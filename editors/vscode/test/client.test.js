// Smoke test of extension.js without VS Code: `vscode` and `vscode-languageclient/node` are
// replaced by fakes, and the test checks that activation starts `<rl.server.path> lsp` over
// stdio for `rl` documents, and that a server that fails to start gives one warning.
'use strict';

const assert = require('assert');
const Module = require('module');
const path = require('path');

function fakes(settings, startFails) {
  const log = { clients: [], warnings: [], commands: {} };
  const vscode = {
    workspace: {
      getConfiguration: () => ({ get: (key, dflt) => (key in settings ? settings[key] : dflt) }),
      createFileSystemWatcher: (glob) => ({ glob }),
      onDidChangeConfiguration: () => ({ dispose() {} }),
    },
    window: { showWarningMessage: (msg) => log.warnings.push(msg) },
    commands: {
      registerCommand: (name, fn) => {
        log.commands[name] = fn;
        return { dispose() {} };
      },
    },
  };
  class LanguageClient {
    constructor(id, name, serverOptions, clientOptions) {
      Object.assign(this, { id, serverOptions, clientOptions, stopped: false });
      log.clients.push(this);
    }
    start() {
      return startFails ? Promise.reject(new Error('spawn rlc ENOENT')) : Promise.resolve();
    }
    stop() {
      this.stopped = true;
      return Promise.resolve();
    }
  }
  const client = { LanguageClient, TransportKind: { stdio: 0 } };
  return { log, modules: { vscode, 'vscode-languageclient/node': client } };
}

async function activate(settings, startFails = false) {
  const { log, modules } = fakes(settings, startFails);
  const load = Module._load;
  Module._load = (request, ...rest) => (request in modules ? modules[request] : load(request, ...rest));
  const file = require.resolve(path.join(__dirname, '../extension.js'));
  delete require.cache[file];
  try {
    const extension = require(file);
    await extension.activate({ subscriptions: [] });
    return { log, extension };
  } finally {
    Module._load = load;
  }
}

async function main() {
  {
    const { log, extension } = await activate({});
    assert.strictEqual(log.clients.length, 1);
    const { run } = log.clients[0].serverOptions;
    assert.deepStrictEqual([run.command, run.args, run.transport], ['rlc', ['lsp'], 0]);
    assert.deepStrictEqual(log.clients[0].clientOptions.documentSelector, [{ language: 'rl' }]);
    assert.ok(log.commands['rl.server.restart'], 'the restart command is registered');
    await extension.deactivate();
    assert.ok(log.clients[0].stopped, 'deactivate stops the client');
  }
  {
    const { log } = await activate({ 'server.path': '/opt/rlc/bin/rlc' });
    assert.strictEqual(log.clients[0].serverOptions.run.command, '/opt/rlc/bin/rlc');
  }
  {
    const { log } = await activate({}, true);
    assert.strictEqual(log.warnings.length, 1);
    assert.match(log.warnings[0], /rl\.server\.path/);
  }
  {
    const { log } = await activate({ 'server.enable': false });
    assert.strictEqual(log.clients.length, 0);
  }
  console.log('extension.js: client starts `rlc lsp` as configured');
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
