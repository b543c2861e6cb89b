// Smoke test of extension.js without VS Code: `vscode` and `vscode-languageclient/node` are
// replaced by fakes, and the test checks that activation starts `<rl.server.path> lsp` over
// stdio for `rl` documents, and that a server that fails to start gives one warning.
//
// With RLC=path/to/rlc (scripts/test-editors.sh sets it) it also starts `rlc lsp`, initializes
// it as vscode-languageclient does, and checks that the server announces every capability the
// extension relies on: vscode-languageclient registers a feature (code actions, inlay hints,
// semantic tokens, references, rename, highlights, …) for each provider the server announces,
// unless the client options turn it off, which extension.js must not do.
'use strict';

const assert = require('assert');
const { spawn } = require('child_process');
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
    // Nothing that would keep vscode-languageclient from registering a feature the server
    // announces: no middleware, no diagnostic pull or other feature switches.
    const options = log.clients[0].clientOptions;
    assert.deepStrictEqual(
      Object.keys(options).sort(),
      ['connectionOptions', 'documentSelector', 'synchronize'],
      'client options beyond the known ones: check they turn no feature off',
    );
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
  if (process.env.RLC) {
    await serverCapabilities(process.env.RLC);
  } else {
    console.log('RLC not set: the server capabilities were not checked');
  }
}

// The providers vscode-languageclient 9 turns into VS Code features, and the server's answer
// each must have.
const FEATURES = {
  hoverProvider: 'hover',
  definitionProvider: 'go to definition',
  completionProvider: 'completion',
  documentFormattingProvider: 'formatting',
  documentSymbolProvider: 'outline',
  codeActionProvider: 'quick fixes (code actions)',
  inlayHintProvider: 'inlay hints',
  semanticTokensProvider: 'semantic tokens',
  referencesProvider: 'find references',
  renameProvider: 'rename',
  documentHighlightProvider: 'document highlights',
};

// Sends `initialize` (with the client capabilities that matter here, as vscode-languageclient
// sends them), then `shutdown` and `exit`; checks the capabilities in the answer.
function serverCapabilities(rlc) {
  return new Promise((resolve, reject) => {
    const server = spawn(rlc, ['lsp'], { stdio: ['pipe', 'pipe', 'inherit'] });
    const timer = setTimeout(() => {
      server.kill();
      reject(new Error(`${rlc} lsp did not answer initialize in 20 s`));
    }, 20000);
    const send = (msg) => {
      const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...msg }));
      server.stdin.write(`Content-Length: ${body.length}\r\n\r\n`);
      server.stdin.write(body);
    };
    let buffer = Buffer.alloc(0);
    server.stdout.on('data', (chunk) => {
      buffer = Buffer.concat([buffer, chunk]);
      for (;;) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        const length = Number(/Content-Length: (\d+)/i.exec(buffer.slice(0, end).toString())[1]);
        if (buffer.length < end + 4 + length) return;
        const msg = JSON.parse(buffer.slice(end + 4, end + 4 + length).toString());
        buffer = buffer.slice(end + 4 + length);
        if (msg.id === 1) {
          try {
            const caps = msg.result.capabilities;
            const missing = Object.keys(FEATURES).filter((k) => !caps[k]);
            assert.deepStrictEqual(missing, [], `rlc lsp does not announce: ${missing.map((k) => FEATURES[k])}`);
            assert.ok(caps.renameProvider.prepareProvider, 'rename without prepareRename');
            assert.ok(caps.semanticTokensProvider.full, 'semantic tokens without full documents');
            assert.ok(caps.semanticTokensProvider.legend.tokenTypes.length > 0, 'an empty legend');
          } catch (e) {
            clearTimeout(timer);
            server.kill();
            reject(e);
            return;
          }
          send({ id: 2, method: 'shutdown', params: null });
        } else if (msg.id === 2) {
          send({ method: 'exit', params: null });
        }
      }
    });
    server.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) {
        reject(new Error(`${rlc} lsp exited with ${code}`));
        return;
      }
      console.log(`rlc lsp announces every capability the extension uses: ${Object.values(FEATURES).join(', ')}`);
      resolve();
    });
    server.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    send({
      id: 1,
      method: 'initialize',
      params: {
        processId: process.pid,
        rootUri: null,
        capabilities: {
          general: { positionEncodings: ['utf-16'] },
          textDocument: {
            synchronization: { dynamicRegistration: true, didSave: true },
            codeAction: {
              dynamicRegistration: true,
              isPreferredSupport: true,
              dataSupport: true,
              resolveSupport: { properties: ['edit'] },
              codeActionLiteralSupport: {
                codeActionKind: { valueSet: ['', 'quickfix', 'refactor', 'source'] },
              },
            },
            inlayHint: { dynamicRegistration: true, resolveSupport: { properties: ['tooltip'] } },
            semanticTokens: {
              dynamicRegistration: true,
              requests: { range: true, full: { delta: true } },
              formats: ['relative'],
              multilineTokenSupport: false,
              overlappingTokenSupport: false,
            },
            references: { dynamicRegistration: true },
            rename: { dynamicRegistration: true, prepareSupport: true },
            documentHighlight: { dynamicRegistration: true },
            publishDiagnostics: { relatedInformation: true, versionSupport: false, dataSupport: true },
          },
        },
      },
    });
  });
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
