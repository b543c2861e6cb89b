//! Verifier pool throughput (#24 item 6): requests/s of the pool against a trivial Python
//! verifier (reward = response length, written with `python/rlc_verifier.py`), and the
//! overhead of one call — a request of one item to one worker, encoding, the pipe round trip,
//! decoding and checking — against the same work done inside the worker alone.
//!
//! Under `cargo bench` it reports: single-item calls/s on one worker (the per-call overhead),
//! items/s and requests/s at batch 64 on 1 and 2 workers, and the worker's own time per
//! request (measured inside Python) for comparison. `cargo test --benches` runs one round.
//!
//! `cargo bench -p rlc-runtime --bench verify`

mod common;

use std::path::PathBuf;
use std::time::Instant;

use rlc_plan::model::{OnError, Verifier, VerifierEndpoint, WorkerLimits};
use rlc_runtime::verify::{Item, Pool};

fn trivial(workers: u32, batch: u32) -> Verifier {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = std::env::temp_dir().join(format!("rlc-bench-verifier-{}.py", std::process::id()));
    let helper = root.join("python");
    std::fs::write(
        &script,
        format!(
            "import sys\nsys.path.insert(0, {:?})\nimport rlc_verifier\n\
             rlc_verifier.serve(lambda item: float(len(item['response'])))\n",
            helper.to_string_lossy()
        ),
    )
    .expect("a temporary script");
    Verifier {
        name: "trivial".into(),
        endpoint: VerifierEndpoint::Program {
            command: vec!["python3".into(), script.to_string_lossy().into_owned()],
        },
        workers,
        batch,
        timeout_ms: 10_000,
        limits: WorkerLimits {
            cpu_seconds: Some(10),
            memory_bytes: Some(1 << 30),
            file_bytes: Some(64 << 20),
            processes: None,
            no_network: true,
        },
        on_error: OnError::Fail,
        metrics: Vec::new(),
    }
}

/// `n` items shaped like a digit task's rows (prompt 8 tokens, response 5).
fn items(n: usize) -> Vec<Item> {
    (0..n)
        .map(|i| Item {
            prompt: "12345+678=".into(),
            response: format!("{}", 13023 + i),
            prompt_ids: vec![12, 1, 2, 3, 4, 5, 10, 6, 7, 8, 11],
            response_ids: vec![1, 3, 0, 2, 3, 13],
            fields: [("answer".to_string(), "13023".to_string())].into(),
        })
        .collect()
}

/// Runs `calls` scorings of `items` and returns seconds per call.
fn time(pool: &Pool, items: &[Item], calls: usize) -> f64 {
    // One warm-up call (the workers' first request imports nothing more, but pages in code).
    assert!(pool.score(items).iter().all(Result::is_ok));
    let start = Instant::now();
    for _ in 0..calls {
        let out = pool.score(items);
        assert!(
            out.iter().all(Result::is_ok),
            "{:?}",
            out.iter().find(|o| o.is_err())
        );
    }
    start.elapsed().as_secs_f64() / calls as f64
}

fn main() {
    let full = common::benchmarking();
    let (single_calls, batch_calls) = if full { (2000, 200) } else { (3, 2) };
    let root = std::env::temp_dir();

    let one = Pool::start(&trivial(1, 64), &root).expect("the trivial verifier starts");
    let per_call = time(&one, &items(1), single_calls);
    println!(
        "verify/one item, one worker: {:.0} calls/s, {:.1} µs per call",
        1.0 / per_call,
        per_call * 1e6
    );
    let batch = items(256);
    let t1 = time(&one, &batch, batch_calls);
    println!(
        "verify/256 items, batch 64, 1 worker: {:.0} items/s, {:.0} requests/s",
        256.0 / t1,
        4.0 / t1
    );
    drop(one);
    let two = Pool::start(&trivial(2, 64), &root).expect("the trivial verifier starts");
    let t2 = time(&two, &batch, batch_calls);
    println!(
        "verify/256 items, batch 64, 2 workers: {:.0} items/s, {:.0} requests/s ({:.2}x one worker)",
        256.0 / t2,
        4.0 / t2,
        t1 / t2
    );
    drop(two);

    // The same work inside Python alone: json.loads, scoring, json.dumps per request.
    let request = serde_json::to_string(&serde_json::json!({"id": 1, "items": items(1)})).unwrap();
    let probe = format!(
        "import json, sys, time\nsys.path.insert(0, {:?})\nimport rlc_verifier\n\
         line = {:?}\nn = {}\nt = time.perf_counter()\n\
         for _ in range(n):\n    json.dumps(rlc_verifier.score_request(json.loads(line), \
         lambda item: float(len(item['response']))))\n\
         print((time.perf_counter() - t) / n)\n",
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../python")
            .to_string_lossy(),
        request,
        single_calls
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &probe])
        .output()
        .expect("python3 runs");
    let inside: f64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("seconds");
    println!(
        "verify/one item inside the worker alone: {:.1} µs; the pool's overhead per call: {:.1} µs",
        inside * 1e6,
        (per_call - inside) * 1e6
    );
}
