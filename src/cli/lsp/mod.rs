//! `rlc lsp`: a language server over standard input and output (JSON-RPC with Content-Length
//! framing), for any editor with an LSP client.
//!
//! - Diagnostics: each open document is checked as the root of its program on open and on
//!   every change (full text sync), with imports served from open documents first, then from
//!   disk. Diagnostics are published per file: those of the document itself, and those of
//!   imported files that are not open (an open one publishes its own).
//! - Hover: the type of the innermost expression under the cursor; on a name that refers to an
//!   item, its signature and `///` docs (a recipe's, one parameter a line, marked as a recipe);
//!   on a role, its kind, arch, placements with layouts and the memory estimate per device per
//!   phase; on a named argument, the callee's parameter; on a pipeline's parameter (in a
//!   recipe's body, which has no types of its own), the parameter as declared and what kind of
//!   value a generic one takes.
//! - Go to definition: locals, parameters, items, imported names and import paths, into other
//!   modules and into std; from a named argument to the callee's parameter.
//! - Completion: keywords and names in scope; after `role.` its operations; after a
//!   record-typed local (a `Rollout`) its fields; after `module.` and inside
//!   `import std.x { … }` (or a package's `import recipes.x { … }`) the module's pub items;
//!   after `import ` the std modules and those of the package and its dependencies; in a call's
//!   arguments ([`calls`]), the parameters not yet given and, for a recipe's generic parameter,
//!   the items of its kind (the job's `CausalLM` models, its datasets, its functions).
//! - Signature help: the callee's parameters, the one being given active.
//! - Formatting (one whole-document edit; none while the document has syntax errors) and
//!   document symbols.
//! - Code actions ([`actions`]): the checker's fixes of the diagnostics a range touches, as
//!   quick fixes.
//!
//! The wire is read by [`transport`]: a malformed message is answered with a JSON-RPC error or
//! skipped with a line on standard error, and the server goes on serving.
//!
//! Checking runs off the message loop, on one thread of its own ([`checking`]): the loop goes
//! on answering while a document is checked, and of a burst of changes only the newest
//! version is checked. A request on a document whose check is under way waits for that check
//! (so that its answer matches the text the client sent last); requests on other documents,
//! `shutdown` and `exit` are answered at once. `$/cancelRequest` cancels a waiting request.
//!
//! Std sources are embedded in the compiler; for go-to-definition the server writes them once,
//! read-only, under the user's cache directory (see [`text::std_dir`]) and answers with
//! ordinary `file:` URIs, which every editor can open without an extension.

mod actions;
mod analysis;
mod calls;
mod checking;
mod features;
mod hints;
mod navigation;
mod resolve;
mod text;
mod tokens;
mod transport;

use analysis::{Analysis, Documents, UriMap, doc_name};
use lsp_server::{Connection, ErrorCode, Message, Notification, Request, Response};
use lsp_types::{
    CompletionOptions, CompletionParams, CompletionResponse, DidChangeTextDocumentParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DocumentFormattingParams,
    DocumentSymbolParams, DocumentSymbolResponse, GotoDefinitionParams, GotoDefinitionResponse,
    HoverParams, HoverProviderCapability, InitializeResult, OneOf, PositionEncodingKind,
    PublishDiagnosticsParams, ServerCapabilities, ServerInfo, TextDocumentSyncCapability,
    TextDocumentSyncKind, Uri,
};
use serde_json::Value;
use std::collections::HashMap;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use text::LineIndex;

/// Serves one client until `shutdown` and `exit` (exit status 0), or until `exit` without
/// `shutdown` or the end of input (exit status 1, as the protocol asks).
pub fn run() -> Result<ExitCode, String> {
    let (conn, transport) = transport::stdio();
    let code = serve(&conn);
    drop(conn);
    transport
        .join()
        .map_err(|e| format!("language server output: {e}"))?;
    code
}

fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        position_encoding: Some(PositionEncodingKind::UTF16),
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::FULL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        definition_provider: Some(OneOf::Left(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(vec![".".into(), "{".into()]),
            ..Default::default()
        }),
        signature_help_provider: Some(lsp_types::SignatureHelpOptions {
            trigger_characters: Some(vec!["(".into(), ",".into()]),
            retrigger_characters: None,
            work_done_progress_options: Default::default(),
        }),
        document_formatting_provider: Some(OneOf::Left(true)),
        document_symbol_provider: Some(OneOf::Left(true)),
        inlay_hint_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(lsp_types::CodeActionProviderCapability::Options(
            lsp_types::CodeActionOptions {
                code_action_kinds: Some(vec![lsp_types::CodeActionKind::QUICKFIX]),
                ..Default::default()
            },
        )),
        references_provider: Some(OneOf::Left(true)),
        document_highlight_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(lsp_types::RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        semantic_tokens_provider: Some(
            lsp_types::SemanticTokensOptions {
                legend: tokens::legend(),
                full: Some(lsp_types::SemanticTokensFullOptions::Bool(true)),
                ..Default::default()
            }
            .into(),
        ),
        ..Default::default()
    }
}

/// Waits for `initialize`: other requests are answered `ServerNotInitialized`, notifications
/// and responses are dropped. `None` at `exit` or the end of input.
fn initialize_request(conn: &Connection) -> Option<lsp_server::RequestId> {
    while let Ok(msg) = conn.receiver.recv() {
        match msg {
            Message::Request(req) if req.method == "initialize" => {
                navigation::set_roots(&req.params);
                return Some(req.id);
            }
            Message::Request(req) => refuse(
                conn,
                req,
                ErrorCode::ServerNotInitialized,
                "before `initialize`",
            ),
            Message::Notification(n) if n.method == "exit" => return None,
            Message::Notification(_) | Message::Response(_) => {}
        }
    }
    None
}

/// Answers `req` (outside the session: before `initialize` or after `shutdown`) with the error
/// `code`, naming its method and `when`.
fn refuse(conn: &Connection, req: Request, code: ErrorCode, when: &str) {
    let message = format!("`{}` {when}", req.method);
    let _ = conn
        .sender
        .send(Response::new_err(req.id, code as i32, message).into());
}

/// After `shutdown`: waits for `exit` (exit status 0), answering requests with an error; the
/// end of input without `exit` is exit status 1.
fn shut_down(conn: &Connection) -> ExitCode {
    while let Ok(msg) = conn.receiver.recv() {
        match msg {
            Message::Notification(n) if n.method == "exit" => return ExitCode::SUCCESS,
            Message::Request(req) => {
                refuse(conn, req, ErrorCode::InvalidRequest, "after `shutdown`")
            }
            Message::Notification(_) | Message::Response(_) => {}
        }
    }
    ExitCode::from(1)
}

fn serve(conn: &Connection) -> Result<ExitCode, String> {
    let Some(id) = initialize_request(conn) else {
        return Ok(ExitCode::from(1));
    };
    let result = InitializeResult {
        capabilities: capabilities(),
        server_info: Some(ServerInfo {
            name: "rlc".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
    };
    let result = serde_json::to_value(result).map_err(|e| e.to_string())?;
    // Answered by hand rather than with `initialize_finish`, which fails unless the very next
    // message is `initialized`: clients that send a request or a didOpen first still work.
    conn.sender
        .send(Response::new_ok(id, result).into())
        .map_err(|e| format!("language server: {e}"))?;

    let std_dir = match text::materialize_std() {
        Ok(dir) => Some(dir),
        Err(e) => {
            eprintln!("rlc lsp: std sources unavailable for go-to-definition: {e}");
            None
        }
    };
    let (finished, mut done) = crossbeam_channel::unbounded();
    let mut server = Server {
        conn,
        docs: HashMap::new(),
        sources: Documents::default(),
        uris: UriMap { std_dir },
        extra: HashMap::new(),
        checks: checking::spawn(finished),
        generation: 0,
        seq: 0,
        changed: HashMap::new(),
        waiting: Vec::new(),
    };
    loop {
        crossbeam_channel::select! {
            recv(conn.receiver) -> msg => match msg {
                Ok(Message::Request(req)) if req.method == "shutdown" => {
                    server.cancel_waiting(|_| true, "the server is shutting down");
                    server.send(Response::new_ok(req.id, ()));
                    return Ok(shut_down(conn));
                }
                Ok(Message::Request(req)) => server.request_when_checked(req),
                Ok(Message::Notification(n)) if n.method == "exit" => {
                    return Ok(ExitCode::from(1));
                }
                Ok(Message::Notification(n)) => server.notification(n),
                Ok(Message::Response(_)) => {}
                Err(_) => return Ok(ExitCode::from(1)),
            },
            recv(done) -> check => match check {
                Ok(check) => server.finished(check),
                Err(_) => {
                    // The checker thread is gone (it catches the checker's panics, so this is
                    // not expected): go on serving what was checked.
                    eprintln!("rlc lsp: the checker thread stopped; documents are no longer checked");
                    done = crossbeam_channel::never();
                }
            },
        }
    }
}

/// The largest document checked: 1 MiB, fifty times the largest std module. The server checks
/// on every keystroke (off the message loop, newest version only); a document this large
/// already takes a second or more, and a larger one (a 50 MB paste) would keep the checker
/// thread, and requests on the document, waiting for minutes. A larger document is held but
/// not checked: one warning says so, and requests on it answer `null`.
const MAX_CHECKED: usize = 1 << 20;

/// Checks `text` as document `name`. A document over [`MAX_CHECKED`], or one the checker
/// panics on (the server goes on), is not checked: an empty program stands in for it, with why.
fn analyze(sources: &Documents, name: &str, text: &str) -> Analysis {
    if text.len() > MAX_CHECKED {
        let why = format!(
            "this document is {} bytes, over the {MAX_CHECKED} bytes (1 MiB) that `rlc lsp` \
             checks as you type: run `rlc check` on it",
            text.len()
        );
        return Analysis::unchecked(sources, name, why);
    }
    let run = || Analysis::run(sources, name, text.to_string());
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)).unwrap_or_else(|_| {
        let why = "the checker failed on this document (an internal error, logged; the server \
                   recovered: please report it)";
        Analysis::unchecked(sources, name, why.into())
    })
}

struct Doc {
    name: String,
    version: i32,
    text: String,
    /// The latest check's (a stand-in until the first one is done).
    analysis: Analysis,
    /// The latest analysis without syntax errors, while the current one has some.
    good: Option<Analysis>,
    /// The generation of the newest check asked for, and of the one in `analysis`.
    generation: u64,
    checked: u64,
}

impl Doc {
    /// Whether a check newer than `analysis` is queued or under way.
    fn pending(&self) -> bool {
        self.generation != self.checked
    }
}

/// The document a request concerns (`textDocument.uri` of its parameters), if any.
fn request_uri(req: &Request) -> Option<&str> {
    req.params.pointer("/textDocument/uri")?.as_str()
}

struct Server<'c> {
    conn: &'c Connection,
    /// Open documents by URI.
    docs: HashMap<String, Doc>,
    /// Open documents' texts by checker name, for imports.
    sources: Documents,
    uris: UriMap,
    /// Per open document, the other files it last published diagnostics for.
    extra: HashMap<String, Vec<Uri>>,
    /// The checker thread's queue.
    checks: crossbeam_channel::Sender<checking::Job>,
    /// The last check generation handed out (see [`Doc::generation`]).
    generation: u64,
    /// Edits so far (opens, changes and closes), and per document name the edit that last
    /// changed it: a check that read a file edited after its job was made is stale.
    seq: u64,
    changed: HashMap<String, u64>,
    /// Requests waiting for their document's check, in the order they came.
    waiting: Vec<Request>,
}

impl Server<'_> {
    fn send(&self, msg: impl Into<Message>) {
        let _ = self.conn.sender.send(msg.into());
    }

    fn notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "textDocument/didOpen" => {
                if let Ok(p) = serde_json::from_value::<DidOpenTextDocumentParams>(n.params) {
                    self.set_text(
                        p.text_document.uri.as_str(),
                        p.text_document.version,
                        p.text_document.text,
                    );
                }
            }
            "textDocument/didChange" => {
                if let Ok(p) = serde_json::from_value::<DidChangeTextDocumentParams>(n.params) {
                    let uri = p.text_document.uri.as_str().to_string();
                    let Some(mut text) = self.docs.get(&uri).map(|d| d.text.clone()) else {
                        return;
                    };
                    for change in p.content_changes {
                        match change.range {
                            // An incremental change, should a client send one anyway.
                            Some(range) => {
                                let index = LineIndex::new(&text);
                                let (start, end) =
                                    (index.offset(range.start), index.offset(range.end));
                                text.replace_range(start..end.max(start), &change.text);
                            }
                            None => text = change.text,
                        }
                    }
                    self.set_text(&uri, p.text_document.version, text);
                }
            }
            "textDocument/didClose" => {
                if let Ok(p) = serde_json::from_value::<DidCloseTextDocumentParams>(n.params) {
                    let uri = p.text_document.uri.as_str().to_string();
                    if let Some(doc) = self.docs.remove(&uri) {
                        self.sources.by_name.remove(&doc.name);
                        self.edited(&doc.name);
                        self.publish(&p.text_document.uri, Vec::new(), None);
                        for other in self.extra.remove(&uri).unwrap_or_default() {
                            self.publish(&other, Vec::new(), None);
                        }
                        // Requests that waited for its check: "not open" now.
                        self.answer_waiting(&uri);
                        self.reanalyze_dependents(&doc.name, &uri);
                    }
                }
            }
            "$/cancelRequest" => {
                let id = n.params.get("id").cloned().unwrap_or(Value::Null);
                self.cancel_waiting(
                    |r| serde_json::to_value(&r.id).is_ok_and(|v| v == id),
                    "cancelled",
                );
            }
            _ => {}
        }
    }

    /// Answers the waiting requests that satisfy `which` with `RequestCanceled`.
    fn cancel_waiting(&mut self, which: impl Fn(&Request) -> bool, why: &str) {
        let (cancelled, waiting) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<Vec<_>, _>(|r| which(r));
        self.waiting = waiting;
        for req in cancelled {
            let code = ErrorCode::RequestCanceled as i32;
            self.send(Response::new_err(req.id, code, why.into()));
        }
    }

    /// Answers `req` now, or once the check under way of the document it concerns is done.
    fn request_when_checked(&mut self, req: Request) {
        let pending = request_uri(&req)
            .and_then(|uri| self.docs.get(uri))
            .is_some_and(Doc::pending);
        if pending {
            self.waiting.push(req);
        } else {
            self.request(req);
        }
    }

    /// Answers the requests that waited for document `uri`'s check.
    fn answer_waiting(&mut self, uri: &str) {
        let (ready, waiting) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<Vec<_>, _>(|r| request_uri(r) == Some(uri));
        self.waiting = waiting;
        for req in ready {
            self.request(req);
        }
    }

    /// Records an edit of document `name` (see [`Server::seq`]).
    fn edited(&mut self, name: &str) {
        self.seq += 1;
        self.changed.insert(name.to_string(), self.seq);
    }

    /// Queues a check of open document `uri` at its current text.
    fn check(&mut self, uri: &str) {
        let Some(doc) = self.docs.get_mut(uri) else {
            return;
        };
        self.generation += 1;
        doc.generation = self.generation;
        let job = checking::Job {
            uri: uri.to_string(),
            name: doc.name.clone(),
            text: Arc::from(doc.text.as_str()),
            sources: self.sources.clone(),
            generation: self.generation,
            seq: self.seq,
        };
        // Fails only once the checker thread is gone (logged by the loop).
        let _ = self.checks.send(job);
    }

    /// Takes in a finished check: the document's analysis and diagnostics if it is still the
    /// newest check of the document, and the requests that waited for it.
    fn finished(&mut self, check: checking::Done) {
        let Some(doc) = self.docs.get_mut(&check.uri) else {
            return;
        };
        if doc.generation != check.generation {
            return;
        }
        let stale = check.analysis.user_files().any(|(_, name)| {
            name != doc.name && self.changed.get(name).is_some_and(|&at| at > check.seq)
        });
        if stale {
            // It read an imported document that has changed since: check it again.
            self.check(&check.uri);
            return;
        }
        let previous = std::mem::replace(&mut doc.analysis, check.analysis);
        doc.good = if !doc.analysis.has_syntax_errors() {
            None
        } else if previous.has_syntax_errors() {
            doc.good.take()
        } else {
            Some(previous)
        };
        doc.checked = check.generation;
        self.publish_for(&check.uri);
        self.answer_waiting(&check.uri);
    }

    /// A new text for document `uri` (opened or changed): queues its check, and those of the
    /// open documents that import it.
    fn set_text(&mut self, uri: &str, version: i32, text: String) {
        let name = doc_name(uri);
        self.sources
            .by_name
            .insert(name.clone(), Arc::from(text.as_str()));
        self.edited(&name);
        match self.docs.get_mut(uri) {
            Some(doc) => {
                doc.version = version;
                doc.text = text;
            }
            None => {
                // Never read: requests wait for the first check.
                let why = "not checked yet".to_string();
                let analysis = Analysis::unchecked(&Documents::default(), &name, why);
                let doc = Doc {
                    name: name.clone(),
                    version,
                    text,
                    analysis,
                    good: None,
                    generation: 0,
                    checked: 0,
                };
                self.docs.insert(uri.to_string(), doc);
            }
        }
        self.check(uri);
        self.reanalyze_dependents(&name, uri);
    }

    /// Checks again the open documents whose last check read file `name`.
    fn reanalyze_dependents(&mut self, name: &str, except: &str) {
        let dependents: Vec<String> = self
            .docs
            .iter()
            .filter(|(uri, d)| {
                uri.as_str() != except && d.analysis.user_files().any(|(_, n)| n == name)
            })
            .map(|(uri, _)| uri.clone())
            .collect();
        for uri in dependents {
            self.check(&uri);
        }
    }

    fn publish(&self, uri: &Uri, diagnostics: Vec<lsp_types::Diagnostic>, version: Option<i32>) {
        let params = PublishDiagnosticsParams::new(uri.clone(), diagnostics, version);
        self.send(Notification::new(
            "textDocument/publishDiagnostics".into(),
            params,
        ));
    }

    /// Publishes a document's diagnostics, and those of the files it imports that are not open.
    fn publish_for(&mut self, uri: &str) {
        let Some(doc) = self.docs.get(uri) else {
            return;
        };
        let a = &doc.analysis;
        let root = a.root_file();
        let mut by_file: HashMap<rlc_diagnostics::FileId, Vec<lsp_types::Diagnostic>> =
            HashMap::new();
        let mut lines = analysis::Lines::new(&a.files);
        for d in &a.checked.diagnostics {
            by_file
                .entry(d.primary().file)
                .or_default()
                .push(analysis::to_lsp(d, &mut lines, &self.uris));
        }
        let mut out: Vec<(Uri, Vec<lsp_types::Diagnostic>, Option<i32>)> = Vec::new();
        if let Ok(own) = Uri::from_str(uri) {
            let mut diags = by_file.remove(&root).unwrap_or_default();
            if let Some(why) = &a.unchecked {
                // Instead of those of the empty program that stood in for it.
                diags = vec![lsp_types::Diagnostic {
                    range: lsp_types::Range::default(),
                    severity: Some(lsp_types::DiagnosticSeverity::WARNING),
                    source: Some("rlc".into()),
                    message: why.clone(),
                    ..Default::default()
                }];
            }
            out.push((own, diags, Some(doc.version)));
        }
        let mut extra = Vec::new();
        for (file, name) in a.user_files() {
            if file == root || self.sources.by_name.contains_key(name) {
                continue;
            }
            let Some(u) = self.uris.uri(name) else {
                continue;
            };
            if let Some(diags) = by_file.remove(&file) {
                extra.push(u.clone());
                out.push((u, diags, None));
            }
        }
        // Clear the files this document reported on before and no longer does.
        for old in self.extra.remove(uri).unwrap_or_default() {
            if !extra.contains(&old) {
                out.push((old, Vec::new(), None));
            }
        }
        self.extra.insert(uri.to_string(), extra);
        for (u, diags, version) in out {
            self.publish(&u, diags, version);
        }
    }

    fn request(&mut self, req: Request) {
        let id = req.id.clone();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.answer(req)));
        let response = match result {
            Ok(Ok(value)) => Response::new_ok(id, value),
            Ok(Err((code, message))) => Response::new_err(id, code as i32, message),
            Err(_) => Response::new_err(
                id,
                ErrorCode::InternalError as i32,
                "internal error (the server recovered; please report it)".into(),
            ),
        };
        self.send(response);
    }

    fn doc(&self, uri: &Uri) -> Result<&Doc, (ErrorCode, String)> {
        self.docs.get(uri.as_str()).ok_or((
            ErrorCode::InvalidParams,
            format!("`{}` is not open", uri.as_str()),
        ))
    }

    /// What navigation reads: `doc`'s check and those of the other open documents.
    fn world<'s>(&'s self, doc: &'s Doc) -> navigation::World<'s> {
        navigation::World {
            current: &doc.analysis,
            open: (self.docs.values())
                .filter(|d| !std::ptr::eq(*d, doc))
                .map(|d| &d.analysis)
                .collect(),
            sources: &self.sources,
            uris: &self.uris,
        }
    }

    fn answer(&self, req: Request) -> Result<Value, (ErrorCode, String)> {
        macro_rules! params {
            ($ty:ty) => {
                serde_json::from_value::<$ty>(req.params)
                    .map_err(|e| (ErrorCode::InvalidParams, e.to_string()))?
            };
        }
        // An open document, or an answer of `null` for one that was not checked.
        macro_rules! checked {
            ($uri:expr) => {{
                let doc = self.doc($uri)?;
                if doc.analysis.unchecked.is_some() {
                    return Ok(Value::Null);
                }
                doc
            }};
        }
        let json = |v: Result<Value, serde_json::Error>| {
            v.map_err(|e| (ErrorCode::InternalError, e.to_string()))
        };
        match req.method.as_str() {
            "textDocument/hover" => {
                let p = params!(HoverParams);
                let pos = p.text_document_position_params;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position) as u32;
                json(serde_json::to_value(features::hover(&doc.analysis, offset)))
            }
            "textDocument/definition" => {
                let p = params!(GotoDefinitionParams);
                let pos = p.text_document_position_params;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position) as u32;
                let location =
                    features::definition(&doc.analysis, offset).and_then(|(file, span)| {
                        features::location(&doc.analysis, &self.uris, file, span)
                    });
                json(serde_json::to_value(
                    location.map(GotoDefinitionResponse::Scalar),
                ))
            }
            "textDocument/completion" => {
                let p = params!(CompletionParams);
                let pos = p.text_document_position;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position);
                let read = |path: &str| {
                    use rlc_check::SourceLoader;
                    self.sources.read(path).ok()
                };
                let items = features::completion(
                    &doc.analysis,
                    doc.good.as_ref(),
                    &doc.text,
                    offset,
                    &read,
                );
                json(serde_json::to_value(CompletionResponse::Array(items)))
            }
            "textDocument/signatureHelp" => {
                let p = params!(lsp_types::SignatureHelpParams);
                let pos = p.text_document_position_params;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position);
                let help =
                    features::signature_help(&doc.analysis, doc.good.as_ref(), &doc.text, offset);
                json(serde_json::to_value(help))
            }
            "textDocument/formatting" => {
                let p = params!(DocumentFormattingParams);
                let doc = checked!(&p.text_document.uri);
                json(serde_json::to_value(features::format(&doc.text)))
            }
            "textDocument/documentSymbol" => {
                let p = params!(DocumentSymbolParams);
                let doc = checked!(&p.text_document.uri);
                let module = &doc.analysis.checked.modules.get(0).ast;
                json(serde_json::to_value(DocumentSymbolResponse::Nested(
                    features::document_symbols(module, &doc.text),
                )))
            }
            "textDocument/codeAction" => {
                let p = params!(lsp_types::CodeActionParams);
                let doc = checked!(&p.text_document.uri);
                let actions =
                    actions::code_actions(&doc.analysis, &self.uris, &p.text_document.uri, p.range);
                json(serde_json::to_value(actions))
            }
            "textDocument/inlayHint" => {
                let p = params!(lsp_types::InlayHintParams);
                let doc = checked!(&p.text_document.uri);
                let hints = hints::inlay_hints(&doc.analysis, p.range);
                json(serde_json::to_value(hints))
            }
            "textDocument/semanticTokens/full" => {
                let p = params!(lsp_types::SemanticTokensParams);
                let doc = checked!(&p.text_document.uri);
                json(serde_json::to_value(tokens::semantic_tokens(&doc.analysis)))
            }
            "textDocument/references" => {
                let p = params!(lsp_types::ReferenceParams);
                let pos = p.text_document_position;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position) as u32;
                let world = self.world(doc);
                let include = p.context.include_declaration;
                let refs = navigation::references(&world, offset, include);
                json(serde_json::to_value(refs))
            }
            "textDocument/documentHighlight" => {
                let p = params!(lsp_types::DocumentHighlightParams);
                let pos = p.text_document_position_params;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position) as u32;
                let highlights = navigation::highlights(&self.world(doc), offset);
                json(serde_json::to_value(highlights))
            }
            "textDocument/prepareRename" => {
                let p = params!(lsp_types::TextDocumentPositionParams);
                let doc = checked!(&p.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(p.position) as u32;
                let range = navigation::prepare_rename(&self.world(doc), offset)?;
                json(serde_json::to_value(range))
            }
            "textDocument/rename" => {
                let p = params!(lsp_types::RenameParams);
                let pos = p.text_document_position;
                let doc = checked!(&pos.text_document.uri);
                let offset = LineIndex::new(&doc.text).offset(pos.position) as u32;
                let edit = navigation::rename(&self.world(doc), offset, &p.new_name)?;
                json(serde_json::to_value(edit))
            }
            other => Err((
                ErrorCode::MethodNotFound,
                format!("`{other}` is not supported"),
            )),
        }
    }
}
