//! The verifier worker pool (`rlc_runtime::verify`) against tiny Python workers the tests write:
//! the happy path over two workers with batching, each fault (crash, hang, garbage, NaN, wrong
//! count, wrong id, missing metric, error responses), the sandbox, HTTP, `on_error`, and the
//! shipped example `examples/verifiers/answer.py`. Timeouts are short (≤ 1 s) so the whole file
//! runs in seconds.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rlc_plan::model::{OnError, Verifier, VerifierEndpoint, WorkerLimits};
use rlc_runtime::exec::RunError;
use rlc_runtime::verify::{Item, Outcome, Pool, Scored, apply};

/// A folder for one test's scripts, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "rlc-verify-test-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }

    /// Writes a worker script: `PRELUDE` then `body`, which defines `handle(request)` returning
    /// the line to print (or None to print nothing).
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, format!("{PRELUDE}\n{body}\nmain()\n")).unwrap();
        path.to_string_lossy().into_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const PRELUDE: &str = r#"
import json, os, sys, time
def ok(req, results):
    return json.dumps({"id": req["id"], "results": results})
def main():
    for line in sys.stdin:
        out = handle(json.loads(line))
        if out is not None:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
"#;

fn verifier(command: Vec<String>) -> Verifier {
    Verifier {
        name: "check".into(),
        endpoint: VerifierEndpoint::Program { command },
        workers: 1,
        batch: 64,
        timeout_ms: 1000,
        limits: WorkerLimits {
            cpu_seconds: Some(10),
            memory_bytes: Some(1 << 30),
            file_bytes: Some(16 << 20),
            processes: None,
            no_network: false,
        },
        on_error: OnError::Zero,
        metrics: Vec::new(),
    }
}

fn python(script: String) -> Vec<String> {
    vec!["python3".into(), script]
}

/// Items whose responses are `texts`.
fn items(texts: &[&str]) -> Vec<Item> {
    texts
        .iter()
        .map(|t| Item {
            prompt: "p".into(),
            response: t.to_string(),
            ..Item::default()
        })
        .collect()
}

fn cause(o: &Outcome) -> &str {
    o.as_ref().expect_err("a failure")
}

fn alive(pid: u32) -> bool {
    // Reaped children are gone; `kill(pid, 0)` fails for them.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

#[test]
fn two_workers_share_batched_requests_and_results_keep_their_order() {
    let dir = Dir::new("happy");
    // Each worker's first request waits (up to 5 s) until the other worker has one too: a pool
    // that did not send requests concurrently would make that wait time out.
    let script = dir.script(
        "echo.py",
        &format!(
            r#"
SEEN = {:?}
first = True
def handle(req):
    global first
    together = 0.0
    if first:
        first = False
        open(os.path.join(SEEN, str(os.getpid())), "w").close()
        for _ in range(500):
            if len([f for f in os.listdir(SEEN) if f.isdigit()]) >= 2:
                together = 1.0
                break
            time.sleep(0.01)
    return ok(req, [{{"reward": float(it["response"]),
                     "metrics": {{"pid": os.getpid(), "size": len(req["items"]),
                                 "together": together}}}}
                    for it in req["items"]])
"#,
            dir.0.to_string_lossy()
        ),
    );
    let mut v = verifier(python(script));
    v.workers = 2;
    v.batch = 3;
    v.timeout_ms = 10_000;
    v.metrics = vec!["pid".into(), "size".into(), "together".into()];
    let pool = Pool::start(&v, &dir.0).unwrap();
    let texts: Vec<String> = (0..10).map(|i| i.to_string()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let outcomes = pool.score(&items(&refs));
    assert_eq!(outcomes.len(), 10);
    let scored: Vec<&Scored> = outcomes.iter().map(|o| o.as_ref().unwrap()).collect();
    for (i, s) in scored.iter().enumerate() {
        assert_eq!(s.reward, i as f32, "results in item order");
    }
    // Requests of 3, 3, 3 and 1 items.
    let sizes: Vec<f32> = scored.iter().map(|s| s.metrics[1]).collect();
    assert_eq!(sizes, [3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 1.0]);
    let pids: std::collections::BTreeSet<u32> =
        scored.iter().map(|s| s.metrics[0] as u32).collect();
    assert_eq!(pids.len(), 2, "both workers served requests");
    assert!(
        scored.iter().any(|s| s.metrics[2] == 1.0),
        "the two workers ran at once"
    );
    assert_eq!(pool.restarts(), 0);
    // The workers are long-lived: a second call reaches the same processes.
    let again = pool.score(&items(&["7"]));
    assert_eq!(again[0].as_ref().unwrap().reward, 7.0);
    assert!(pids.contains(&(again[0].as_ref().unwrap().metrics[0] as u32)));
    let live: Vec<u32> = pool.pids().into_iter().map(Option::unwrap).collect();
    drop(pool);
    for pid in live {
        assert!(!alive(pid), "worker {pid} ends with its pool");
    }
}

#[test]
fn a_crashed_worker_fails_its_items_with_its_stderr_and_is_restarted() {
    let dir = Dir::new("crash");
    let marker = dir.0.join("crashed");
    let script = dir.script(
        "crash.py",
        &format!(
            r#"
MARK = {:?}
def handle(req):
    if not os.path.exists(MARK):
        open(MARK, "w").close()
        sys.stderr.write("Traceback: something broke\n")
        sys.stderr.flush()
        sys.exit(3)
    return ok(req, [{{"reward": 1.0}} for it in req["items"]])
"#,
            marker.to_string_lossy()
        ),
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let out = pool.score(&items(&["a", "b"]));
    for o in &out {
        let c = cause(o);
        assert!(c.contains("exited with status 3"), "{c}");
        assert!(c.contains("Traceback: something broke"), "{c}");
    }
    // The next request starts a new worker, which answers.
    let out = pool.score(&items(&["a"]));
    assert_eq!(out[0].as_ref().unwrap().reward, 1.0);
    assert_eq!(pool.restarts(), 1);
}

#[test]
fn a_hung_worker_is_killed_at_the_timeout_and_replaced() {
    let dir = Dir::new("hang");
    let script = dir.script(
        "hang.py",
        r#"
def handle(req):
    if any(it["response"] == "hang" for it in req["items"]):
        time.sleep(3600)
    return ok(req, [{"reward": 2.0} for it in req["items"]])
"#,
    );
    let mut v = verifier(python(script));
    v.timeout_ms = 1000;
    let pool = Pool::start(&v, &dir.0).unwrap();
    let pid = pool.pids()[0].unwrap();
    let out = pool.score(&items(&["x", "hang"]));
    for o in &out {
        assert!(
            cause(o).contains("did not answer within 1 s; killed"),
            "{}",
            cause(o)
        );
    }
    assert!(!alive(pid), "the hung worker is gone");
    let out = pool.score(&items(&["x"]));
    assert_eq!(out[0].as_ref().unwrap().reward, 2.0);
    assert_ne!(pool.pids()[0].unwrap(), pid);
}

#[test]
fn a_worker_that_never_reads_its_input_times_out_too() {
    // It never reads stdin: a request larger than the pipe cannot even be written.
    let dir = Dir::new("deaf");
    let script = dir.0.join("deaf.py");
    std::fs::write(&script, "import time\ntime.sleep(3600)\n").unwrap();
    let mut v = verifier(python(script.to_string_lossy().into_owned()));
    v.timeout_ms = 300;
    let pool = Pool::start(&v, &dir.0).unwrap();
    let big = "9".repeat(1 << 20);
    let out = pool.score(&items(&[&big]));
    assert!(
        cause(&out[0]).contains("did not answer"),
        "{}",
        cause(&out[0])
    );
}

#[test]
fn garbage_on_stdout_fails_the_request_and_restarts_the_worker() {
    let dir = Dir::new("garbage");
    let script = dir.script(
        "garbage.py",
        r#"
def handle(req):
    if req["items"][0]["response"] == "talk":
        return "debug: scoring now"
    return ok(req, [{"reward": 0.5} for it in req["items"]])
"#,
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let pid = pool.pids()[0].unwrap();
    let out = pool.score(&items(&["talk"]));
    let c = cause(&out[0]);
    assert!(
        c.contains("not a response") && c.contains("debug: scoring now"),
        "{c}"
    );
    assert_eq!(pool.pids()[0], None, "dropped");
    assert!(!alive(pid));
    let out = pool.score(&items(&["fine"]));
    assert_eq!(out[0].as_ref().unwrap().reward, 0.5);
}

#[test]
fn non_finite_or_missing_rewards_fail_their_items() {
    let dir = Dir::new("nan");
    let script = dir.script(
        "nan.py",
        r#"
def handle(req):
    r = req["items"][0]["response"]
    if r == "nan":
        return json.dumps({"id": req["id"], "results": [{"reward": float("nan")}]})
    if r == "big":
        # Finite as a double, infinite as an f32.
        return ok(req, [{"reward": 1e39}])
    if r == "none":
        return ok(req, [{"reward": None}])
    return ok(req, [{"reward": 1.0}, {"metrics": {}}, {"reward": "high"}])
"#,
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let c = pool.score(&items(&["nan"])).remove(0).unwrap_err();
    assert!(c.contains("not finite"), "{c}");
    let c = pool.score(&items(&["big"])).remove(0).unwrap_err();
    assert!(c.contains("the reward is not a finite f32"), "{c}");
    let c = pool.score(&items(&["none"])).remove(0).unwrap_err();
    assert!(c.contains("has no reward"), "{c}");
    // Per item: the first stands, the second has no reward; the third's is not a number (the
    // whole line is not a response then).
    let out = pool.score(&items(&["x", "y", "z"]));
    assert!(
        cause(&out[0]).contains("not a response"),
        "{}",
        cause(&out[0])
    );
}

#[test]
fn a_result_without_its_reward_fails_that_item_alone() {
    let dir = Dir::new("partial");
    let script = dir.script(
        "partial.py",
        r#"
def handle(req):
    return ok(req, [{"reward": 1.0}, {"metrics": {}}, {"error": "cannot parse the answer"}])
"#,
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let out = pool.score(&items(&["a", "b", "c"]));
    assert_eq!(out[0].as_ref().unwrap().reward, 1.0);
    assert!(
        cause(&out[1]).contains("has no reward"),
        "{}",
        cause(&out[1])
    );
    assert!(
        cause(&out[2]).contains("error: cannot parse the answer"),
        "{}",
        cause(&out[2])
    );
}

#[test]
fn the_wrong_number_of_results_fails_the_request_and_keeps_the_worker() {
    let dir = Dir::new("count");
    let script = dir.script(
        "count.py",
        "def handle(req):\n    return ok(req, [{\"reward\": 1.0}])\n",
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let pid = pool.pids()[0];
    let out = pool.score(&items(&["a", "b"]));
    for o in &out {
        assert!(
            cause(o).contains("returned 1 results for 2 items"),
            "{}",
            cause(o)
        );
    }
    assert_eq!(pool.pids()[0], pid, "it speaks the protocol: kept");
    assert!(pool.score(&items(&["a"]))[0].is_ok());
}

#[test]
fn a_response_to_another_request_restarts_the_worker() {
    let dir = Dir::new("id");
    let script = dir.script(
        "id.py",
        r#"
def handle(req):
    return json.dumps({"id": req["id"] + 100, "results": [{"reward": 1.0} for it in req["items"]]})
"#,
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let out = pool.score(&items(&["a"]));
    let c = cause(&out[0]);
    assert!(
        c.contains("answered request 100 when asked request 0"),
        "{c}"
    );
    assert_eq!(pool.pids()[0], None);
}

#[test]
fn a_declared_metric_missing_from_a_result_fails_the_item() {
    let dir = Dir::new("metric");
    let script = dir.script(
        "metric.py",
        r#"
def handle(req):
    return ok(req, [{"reward": 1.0, "metrics": {"format": 1.0, "extra": 3.0}},
                    {"reward": 1.0, "metrics": {"other": 1.0}}])
"#,
    );
    let mut v = verifier(python(script));
    v.metrics = vec!["format".into()];
    let pool = Pool::start(&v, &dir.0).unwrap();
    let out = pool.score(&items(&["a", "b"]));
    assert_eq!(
        out[0].as_ref().unwrap().metrics,
        [1.0],
        "undeclared metrics are ignored"
    );
    assert!(
        cause(&out[1]).contains("has no metric `format`"),
        "{}",
        cause(&out[1])
    );
}

#[test]
fn an_error_response_fails_the_request_with_its_message() {
    let dir = Dir::new("error");
    let script = dir.script(
        "error.py",
        r#"
def handle(req):
    return json.dumps({"id": req["id"], "error": "the model server is down"})
"#,
    );
    let pool = Pool::start(&verifier(python(script)), &dir.0).unwrap();
    let pid = pool.pids()[0];
    let out = pool.score(&items(&["a", "b"]));
    for o in &out {
        assert!(cause(o).contains("answered with an error: the model server is down"));
    }
    assert_eq!(pool.pids()[0], pid);
}

#[test]
fn a_program_that_cannot_start_is_an_error_before_scoring() {
    let v = verifier(vec!["rlc-no-such-verifier-program".into()]);
    let e = Pool::start(&v, Path::new(".")).err().expect("an error");
    assert!(
        e.contains("verifier `check`") && e.contains("cannot start `rlc-no-such-verifier-program`"),
        "{e}"
    );
    let v = Verifier {
        endpoint: VerifierEndpoint::Http {
            url: "https://example.org/score".into(),
        },
        ..verifier(Vec::new())
    };
    let e = Pool::start(&v, Path::new(".")).err().expect("an error");
    assert!(e.contains("https is not supported"), "{e}");
}

#[test]
fn on_error_fail_names_the_verifier_step_sample_and_cause() {
    let v = verifier(Vec::new());
    let outcomes: Vec<Outcome> = vec![
        Ok(Scored {
            reward: 1.0,
            metrics: vec![],
        }),
        Err("worker 7 exited with status 3".into()),
        Err("worker 7 exited with status 3".into()),
    ];
    let zero = apply(&v, outcomes.clone(), 8, 5).unwrap();
    assert_eq!(zero.reward, [1.0, 0.0, 0.0]);
    assert_eq!(zero.failures, 2);
    let fail = Verifier {
        on_error: OnError::Fail,
        ..v
    };
    let e = RunError::from(apply(&fail, outcomes, 8, 5).unwrap_err());
    assert!(
        matches!(
            &e,
            RunError::Verifier {
                sample: 9,
                step: 5,
                ..
            }
        ),
        "{e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains(
            "verifier `check` failed on sample 9 at step 5: worker 7 exited with status 3"
        ) && text.contains("1 more samples"),
        "{text}"
    );
}

#[test]
fn metrics_of_failed_samples_are_zero_and_tensors_follow_declaration_order() {
    let mut v = verifier(Vec::new());
    v.metrics = vec!["a".into(), "b".into()];
    let outcomes: Vec<Outcome> = vec![
        Ok(Scored {
            reward: 0.5,
            metrics: vec![1.0, 2.0],
        }),
        Err("x".into()),
    ];
    let scores = apply(&v, outcomes, 0, 0).unwrap();
    let t = scores.tensors(tch::Device::Cpu);
    assert_eq!(t.len(), 3);
    assert_eq!(Vec::<f32>::try_from(&t[0]).unwrap(), [0.5, 0.0]);
    assert_eq!(Vec::<f32>::try_from(&t[1]).unwrap(), [1.0, 0.0]);
    assert_eq!(Vec::<f32>::try_from(&t[2]).unwrap(), [2.0, 0.0]);
}

#[test]
fn workers_run_in_their_own_folder_under_their_limits() {
    let dir = Dir::new("sandbox");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let script = dir.script(
        "sandbox.py",
        &format!(
            r#"
import resource, socket
def net():
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=0.5).close()
        return 1.0
    except OSError:
        return 0.0
def handle(req):
    r = req["items"][0]["response"]
    if r == "where":
        print(os.getcwd(), file=sys.stderr, flush=True)
        return ok(req, [{{"reward": 0.0, "metrics": {{
            "as": resource.getrlimit(resource.RLIMIT_AS)[0],
            "fsize": resource.getrlimit(resource.RLIMIT_FSIZE)[0],
            "net": net()}}}}])
    if r == "big file":
        with open("out.bin", "wb") as f:
            f.write(b"x" * (2 << 20))
    if r == "memory":
        b = bytearray(400 << 20)
    return ok(req, [{{"reward": 1.0, "metrics": {{"as": 0, "fsize": 0, "net": 0}}}}])
"#
        ),
    );
    let mut v = verifier(python(script));
    v.metrics = vec!["as".into(), "fsize".into(), "net".into()];
    v.limits.memory_bytes = Some(256 << 20);
    v.limits.file_bytes = Some(1 << 20);
    v.limits.no_network = true;
    let pool = Pool::start(&v, &dir.0).unwrap();
    let pid = pool.pids()[0].unwrap();
    let cwd = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    assert!(cwd.starts_with(std::env::temp_dir()), "{}", cwd.display());
    assert!(cwd.to_string_lossy().contains("rlc-verifier-check-"));
    let s = pool.score(&items(&["where"])).remove(0).unwrap();
    assert_eq!(s.metrics[0], (256u64 << 20) as f32);
    assert_eq!(s.metrics[1], (1u64 << 20) as f32);
    // Where the OS refused the namespace the pool warned on stderr instead.
    if pool.isolated() {
        assert_eq!(s.metrics[2], 0.0, "no network");
    } else {
        assert_eq!(s.metrics[2], 1.0, "the network, as the warning said");
    }
    // `network: true`: the same worker reaches the listener.
    let open = Verifier {
        limits: WorkerLimits {
            no_network: false,
            ..v.limits.clone()
        },
        ..v.clone()
    };
    let open = Pool::start(&open, &dir.0).unwrap();
    let s = open.score(&items(&["where"])).remove(0).unwrap();
    assert_eq!(s.metrics[2], 1.0, "with the network");
    drop(open);
    drop(listener);
    // Writing past the file size limit fails (Python ignores SIGXFSZ and sees EFBIG).
    let c = pool.score(&items(&["big file"])).remove(0).unwrap_err();
    assert!(c.contains("File too large"), "{c}");
    // Python cannot allocate past the address-space limit: it dies with a MemoryError.
    let c = pool.score(&items(&["memory"])).remove(0).unwrap_err();
    assert!(c.contains("MemoryError"), "{c}");
    drop(pool);
    assert!(!cwd.exists(), "the working folder is removed");
}

#[test]
fn the_cpu_limit_counts_each_request_alone() {
    let dir = Dir::new("cpu");
    let script = dir.script(
        "cpu.py",
        r#"
def spin(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass
def handle(req):
    import resource
    print(resource.getrlimit(resource.RLIMIT_CPU), time.process_time(), file=sys.stderr, flush=True)
    spin(float(req["items"][0]["response"]))
    return ok(req, [{"reward": 1.0}])
"#,
    );
    let mut v = verifier(python(script));
    v.limits.cpu_seconds = Some(1);
    v.timeout_ms = 20_000;
    let pool = Pool::start(&v, &dir.0).unwrap();
    // Two requests of 0.6 CPU seconds each: 1.2 s in all, but each within its 1 s.
    for _ in 0..2 {
        let out = pool.score(&items(&["0.6"]));
        assert!(out[0].is_ok(), "{out:?}");
    }
    // One that would spin for a minute is stopped by the kernel, long before its timeout.
    let c = pool.score(&items(&["60"])).remove(0).unwrap_err();
    assert!(c.contains("CPU time limit (SIGXCPU)"), "{c}");
}

/// Serves `answers` HTTP requests on a local port: each answer is made from the request body.
fn server(answer: fn(&str) -> Option<String>) -> (String, std::thread::JoinHandle<Vec<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/score", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for stream in listener.incoming().take(1) {
            let mut stream = stream.unwrap();
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            let body = loop {
                let n = stream.read(&mut buf).unwrap();
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    if body.len() >= len {
                        seen.push(head.to_string());
                        break body.to_string();
                    }
                }
            };
            match answer(&body) {
                Some(reply) => {
                    let _ = stream.write_all(reply.as_bytes());
                }
                None => std::thread::sleep(std::time::Duration::from_millis(1500)),
            }
        }
        seen
    });
    (url, handle)
}

fn http_verifier(url: String) -> Verifier {
    Verifier {
        endpoint: VerifierEndpoint::Http { url },
        timeout_ms: 500,
        ..verifier(Vec::new())
    }
}

#[test]
fn an_http_server_scores_a_request() {
    let (url, handle) = server(|body| {
        let request: serde_json::Value = serde_json::from_str(body).unwrap();
        let n = request["items"].as_array().unwrap().len();
        let results: Vec<_> = (0..n).map(|i| serde_json::json!({"reward": i})).collect();
        let body = serde_json::json!({"id": request["id"], "results": results}).to_string();
        Some(format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ))
    });
    let pool = Pool::start(&http_verifier(url), Path::new(".")).unwrap();
    let out = pool.score(&items(&["a", "b"]));
    assert_eq!(out[1].as_ref().unwrap().reward, 1.0);
    let heads = handle.join().unwrap();
    assert!(heads[0].starts_with("POST /score HTTP/1.1"), "{}", heads[0]);
}

#[test]
fn an_http_error_status_or_silence_fails_the_request() {
    let (url, handle) = server(|_| {
        Some("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 8\r\n\r\noverload".into())
    });
    let pool = Pool::start(&http_verifier(url), Path::new(".")).unwrap();
    let c = pool.score(&items(&["a"])).remove(0).unwrap_err();
    assert!(c.contains("HTTP status 503: overload"), "{c}");
    handle.join().unwrap();
    let (url, handle) = server(|_| None);
    let pool = Pool::start(&http_verifier(url), Path::new(".")).unwrap();
    let c = pool.score(&items(&["a"])).remove(0).unwrap_err();
    assert!(c.contains("no answer within 0.5 s"), "{c}");
    handle.join().unwrap();
}

#[test]
fn the_example_verifier_scores_answers_through_the_pool() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut v = verifier(vec![
        "python3".into(),
        "examples/verifiers/answer.py".into(),
    ]);
    v.metrics = vec!["format".into()];
    v.batch = 2;
    // Relative to the root folder, as a program's paths are.
    let pool = Pool::start(&v, &root).unwrap();
    let mut rows = items(&["17", "1x7", "18", ""]);
    for row in &mut rows {
        row.fields.insert("answer".into(), "17".into());
    }
    let out: Vec<(f32, f32)> = pool
        .score(&rows)
        .into_iter()
        .map(|o| {
            let s = o.unwrap();
            (s.reward, s.metrics[0])
        })
        .collect();
    assert_eq!(out, [(1.0, 1.0), (1.0, 0.0), (0.0, 1.0), (0.0, 0.0)]);
    // A row without its `answer` fails that row alone, naming it.
    let mut rows = items(&["17", "17"]);
    rows[0].fields.insert("answer".into(), "17".into());
    let out = pool.score(&rows);
    assert!(out[0].is_ok());
    let c = cause(&out[1]);
    assert!(c.contains("item 1: KeyError: 'answer'"), "{c}");
}
