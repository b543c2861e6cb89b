// The client half of the rl language server: starts `rlc lsp` (the path from `rl.server.path`)
// and speaks LSP to it over stdio. Highlighting comes from the TextMate grammar and works
// without the server, so a missing `rlc` is reported once and not retried in a loop.
'use strict';

const vscode = require('vscode');
const { LanguageClient, TransportKind } = require('vscode-languageclient/node');

let client;

function serverOptions() {
  const config = vscode.workspace.getConfiguration('rl');
  const command = config.get('server.path') || 'rlc';
  const run = { command, args: ['lsp'], transport: TransportKind.stdio };
  return { run, debug: run };
}

async function start(context) {
  if (!vscode.workspace.getConfiguration('rl').get('server.enable', true)) return;
  client = new LanguageClient('rl', 'RL language server', serverOptions(), {
    documentSelector: [{ language: 'rl' }],
    synchronize: { fileEvents: vscode.workspace.createFileSystemWatcher('**/*.rl') },
    // Without this the client restarts a crashing server up to five times, each with a popup.
    connectionOptions: { maxRestartCount: 1 },
  });
  try {
    await client.start();
  } catch (err) {
    const path = serverOptions().run.command;
    vscode.window.showWarningMessage(
      `RL: could not start \`${path} lsp\` (${err.message}). Set "rl.server.path" to the rlc executable.`,
    );
    client = undefined;
  }
}

async function stop() {
  if (!client) return;
  const running = client;
  client = undefined;
  await running.stop();
}

async function activate(context) {
  context.subscriptions.push(
    vscode.commands.registerCommand('rl.server.restart', async () => {
      await stop();
      await start(context);
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (e.affectsConfiguration('rl.server')) {
        await stop();
        await start(context);
      }
    }),
  );
  await start(context);
}

function deactivate() {
  return stop();
}

module.exports = { activate, deactivate };
