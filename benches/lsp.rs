//! Re-checking as you type, measured through the language server as an editor sees it: `rlc lsp`
//! is spawned, a generated program of about 1 000 lines (datasets, models with their
//! placements, many fns and a pipeline that uses them, all from the examples' constructs) is
//! opened, and a line is typed into it one character at a time, then deleted the same way. Each
//! keystroke is a full-text `didChange`; its latency is the time until the `publishDiagnostics`
//! of that version arrives (the next keystroke is sent then). Goal: ≤ 50 ms median.
//!
//! A second figure sends a whole line's keystrokes back to back, as fast typing does: the
//! server checks only the newest version of a burst, so the time until the last version's
//! diagnostics stays near one check.
//!
//! `cargo bench --bench lsp` (release build; `RLC_LSP_ROUNDS=N` sets how many times the line
//! is typed and deleted, default 3). The figures are in docs/benchmarks.md ("Editor").

#[path = "../tests/common/lsp_wire.rs"]
mod lsp_wire;

use serde_json::{Value, json};
use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const RLC: &str = env!("CARGO_BIN_EXE_rlc");
/// However slow the machine, a keystroke answered later than this is a hung server.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The generated program: `fns` helper fns between the declarations and the pipeline.
fn program(fns: usize) -> String {
    let mut out = vec![
        "//! Generated for the language server benchmark (benches/lsp.rs).".to_string(),
        String::new(),
        "import std.algo { grpo_advantage, ppo_clip, kl_k3, token_mean }".into(),
        "import std.models { tiny_gpt }".into(),
        "import std.task.digits { reverse_task }".into(),
        String::new(),
    ];
    const DATASETS: usize = 8;
    const MODELS: usize = 16;
    for i in 0..DATASETS {
        out.push(format!(
            "dataset rev{i} = reverse_task(digits: {})",
            4 + i % 3
        ));
    }
    out.push(String::new());
    out.push("cluster local = cpu(devices: 2)".into());
    out.push(String::new());
    for i in 0..MODELS {
        out.push(format!(
            "let arch{i} = tiny_gpt(layers: {}, hidden: 64, heads: 4, vocab: rev{}.vocab, max_len: 16)",
            2 + i % 3,
            i % DATASETS
        ));
    }
    out.push(String::new());
    for i in 0..MODELS {
        out.extend([
            format!("/// Policy {i}."),
            format!("model policy{i}: CausalLM {{"),
            format!("  arch  = arch{i}"),
            format!("  init  = random(seed: {i})"),
            "  optim = adamw(lr: 1e-3, warmup: 10)".into(),
            "}".into(),
            format!("model reference{i}: CausalLM = frozen(policy{i})"),
            String::new(),
        ]);
    }
    for i in 0..MODELS {
        out.extend([
            format!("place policy{i}.train    on local[0..2] with dp(2)"),
            format!("place policy{i}.generate on local[0..2] with dp(2)"),
            format!("place reference{i}       on local[0..2] with dp(2)"),
        ]);
    }
    out.push(String::new());
    for i in 0..fns {
        out.extend([
            format!("/// Helper {i}: a masked mean of a scaled difference."),
            format!("fn helper{i}(x: f32[B, T], y: f32[B, T], mask: Mask[B, T]) -> f32[B] {{"),
            format!("  let a = x * {i}.5 - y"),
            format!("  let b = where(mask, a, 0.0) + {i}.0 * y"),
            "  mean(b, over: T, mask: mask)".into(),
            "}".into(),
            String::new(),
        ]);
    }
    out.extend([
        "fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {".into(),
        "  mean(f32(resp == target), over: T, mask: mask)".into(),
        "}".into(),
        String::new(),
        "pipeline train(steps = 500, prompts_per_step = 16, group = 16) {".into(),
        "  loop step in 0..steps {".into(),
        "    let prompts = rev0.sample(prompts_per_step)".into(),
    ]);
    for i in 0..MODELS {
        out.extend([
            format!("    let rollout{i}  = policy{i}.generate(prompts, n: group, max_new: 4, temperature: 1.0)"),
            format!("    let old_logp{i} = policy{i}.logprobs(rollout{i})"),
            format!("    let ref_logp{i} = reference{i}.logprobs(rollout{i})"),
            format!("    let reward{i}   = exact(rollout{i}.response, rollout{i}.target, rollout{i}.mask) + helper{i}(old_logp{i}, ref_logp{i}, rollout{i}.mask)"),
            format!("    let adv{i}      = grpo_advantage(reward{i}, rollout{i}.group, rollout{i}.mask)"),
            format!("    policy{i}.update(rollout{i}, epochs: 1, minibatch: 128) {{ logp ->"),
            format!("      token_mean(ppo_clip(logp, old_logp{i}, adv{i}, eps: 0.2) + 0.05 * kl_k3(logp, ref_logp{i}), rollout{i}.mask)"),
            "    }".into(),
        ]);
    }
    out.push("    log {".into());
    for i in 0..MODELS {
        out.push(format!("      reward{i}: mean(reward{i}),"));
    }
    out.extend(["    }".into(), "  }".into(), "}".into(), String::new()]);
    out.join("\n")
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
}

impl Server {
    fn start(dir: &std::path::Path) -> Server {
        let mut child = Command::new(RLC)
            .arg("lsp")
            .current_dir(dir)
            .env("XDG_CACHE_HOME", dir.join("cache"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {RLC} lsp: {e}"));
        let stdin = child.stdin.take().unwrap();
        let messages = lsp_wire::messages(child.stdout.take().unwrap());
        Server {
            child,
            stdin,
            messages,
        }
    }

    fn send(&mut self, msg: Value) {
        let body = msg.to_string();
        self.stdin
            .write_all(lsp_wire::frame(&body).as_bytes())
            .unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({ "jsonrpc": "2.0", "method": method, "params": params }));
    }

    /// The first message that satisfies `pred` (others are dropped).
    fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let msg = self
                .messages
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer from rlc lsp in {TIMEOUT:?}: {e}"));
            if pred(&msg) {
                return msg;
            }
        }
    }

    /// The diagnostics published for version `version` of `uri`.
    fn diagnostics(&mut self, uri: &str, version: i64) -> Vec<Value> {
        let msg = self.wait_for(|m| {
            m["method"] == "textDocument/publishDiagnostics"
                && m["params"]["uri"] == uri
                && m["params"]["version"] == version
        });
        msg["params"]["diagnostics"].as_array().unwrap().clone()
    }

    fn change(&mut self, uri: &str, version: i64, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": { "uri": uri, "version": version },
                "contentChanges": [{ "text": text }],
            }),
        );
    }
}

/// The CPU time (user + system) process `pid` has used so far, from /proc/PID/stat in the
/// kernel's USER_HZ ticks (100 per second); zero where it cannot be read. Unlike wall time it
/// hardly changes with the machine's load.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (in parentheses): utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let ticks: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The `q`-quantile of sorted `times` (nearest rank).
fn quantile(times: &[Duration], q: f64) -> Duration {
    let rank = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len());
    times[rank - 1]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter is not supported.
    let rounds: usize = std::env::var("RLC_LSP_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    let dir = std::env::temp_dir().join(format!("rlc-lsp-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let text = program(90);
    let path = dir.join("bench.rl");
    std::fs::write(&path, &text).unwrap();
    let uri = format!("file://{}", path.display());

    let mut server = Server::start(&dir);
    server.send(json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": { "processId": null, "rootUri": null, "capabilities": {} } }));
    server.wait_for(|m| m["id"] == 1);
    server.notify("initialized", json!({}));
    let start = Instant::now();
    server.notify(
        "textDocument/didOpen",
        json!({ "textDocument": { "uri": uri, "languageId": "rl", "version": 1, "text": text } }),
    );
    let diags = server.diagnostics(&uri, 1);
    let open = start.elapsed();
    assert!(
        diags.is_empty(),
        "the generated program is not clean: {diags:#?}"
    );

    // The line typed: into helper45's body, in the middle of the file.
    let anchor = "  let b = where(mask, a, 0.0) + 45.0 * y\n";
    let at = text.find(anchor).expect("helper45") + anchor.len();
    let typed = "  let c = b * 2.0 + where(mask, x, y) - a\n";
    let keystrokes: Vec<String> = (1..=typed.len())
        .chain((0..typed.len()).rev())
        .map(|n| format!("{}{}{}", &text[..at], &typed[..n], &text[at..]))
        .collect();
    let mut version = 1;
    let mut times = Vec::new();
    let pid = server.child.id();
    let cpu_before = cpu(pid);
    let mut errors = 0;
    for _ in 0..rounds {
        for next in &keystrokes {
            version += 1;
            let sent = Instant::now();
            server.change(&uri, version, next);
            let diags = server.diagnostics(&uri, version);
            times.push(sent.elapsed());
            errors += diags.iter().filter(|d| d["severity"] == 1).count();
        }
    }
    let cpu_per_keystroke = (cpu(pid) - cpu_before) / times.len() as u32;
    // Fast typing: a line's keystrokes back to back; only the last version must be answered.
    let mut bursts = Vec::new();
    for _ in 0..rounds {
        let sent = Instant::now();
        for next in &keystrokes[..typed.len()] {
            version += 1;
            server.change(&uri, version, next);
        }
        server.diagnostics(&uri, version);
        bursts.push(sent.elapsed());
        version += 1;
        server.change(&uri, version, &text);
        server.diagnostics(&uri, version);
    }
    server.send(json!({ "jsonrpc": "2.0", "id": 2, "method": "shutdown", "params": null }));
    server.wait_for(|m| m["id"] == 2);
    server.notify("exit", Value::Null);
    let status = server.child.wait().expect("rlc lsp exits");
    let _ = std::fs::remove_dir_all(&dir);

    times.sort();
    bursts.sort();
    let lines = text.lines().count();
    println!(
        "rlc lsp, a generated program of {lines} lines ({} bytes): {} keystrokes ({rounds} × \
         typing and deleting a {}-character line), each a full-text didChange, timed until its \
         publishDiagnostics",
        text.len(),
        times.len(),
        typed.len() - 1,
    );
    println!(
        "  open, until the first diagnostics      {:>8.1} ms",
        ms(open)
    );
    println!(
        "  per keystroke: median {:.1} ms, p90 {:.1} ms, max {:.1} ms ({errors} error diagnostics \
         published along the way, from the half-typed lines)",
        ms(quantile(&times, 0.5)),
        ms(quantile(&times, 0.9)),
        ms(quantile(&times, 1.0)),
    );
    println!(
        "  the server's CPU time (user + system) per keystroke: {:.1} ms on average",
        ms(cpu_per_keystroke)
    );
    println!(
        "  a line's {} keystrokes sent back to back: median {:.1} ms until the last version's \
         diagnostics (only the newest version of a burst is checked)",
        typed.len(),
        ms(quantile(&bursts, 0.5)),
    );
    let median = quantile(&times, 0.5);
    println!(
        "goal: re-checking on each keystroke ≤ 50 ms median: {} ({:.1} ms); server exit: {status}",
        if median <= Duration::from_millis(50) {
            "met"
        } else {
            "MISSED"
        },
        ms(median)
    );
}
