//! Parallel layouts: the time of one training step (forward, backward, clipping to norm 1, AdamW)
//! and the memory per rank of each layout against one rank, with the checker's per-device
//! estimate of the same model and layout.
//!
//! Model: 4 layers, hidden 256, 8 query / 4 key-value heads, MLP 768, vocabulary 1024 (3.7 M
//! parameters, untied, no q/k/v biases: what the checker's parameter count assumes); batch 8 × 64
//! tokens, supervised token-mean loss. Layouts: one rank, TP 2 and 4, FSDP 2 and 4, PP 2 (4
//! micro-batches, 1F1B), DP 2 (replicas on half the batch each, gradients all-reduced) and TP 2 ×
//! DP 2.
//!
//! Ranks are threads of this process (in-process collectives), one libtorch thread each, on
//! whatever cores the machine has: on a 2-core machine 4 ranks cannot be faster than one, so the
//! time ratio is the overhead of the layout's collectives and sharding, not a speed-up.
//!
//! Memory per rank, in bytes, counted from the tensors each rank holds after a step: `state` is
//! its parameters + their gradients + AdamW's two moments (FSDP: its flat shards, padding
//! included). `peak` (FSDP only) is FSDP's measured `MemoryReport::peak`: the state plus the
//! largest working set of gathered parameters, full gradients and collective buffers, plus the
//! activations it keeps between units. Activations inside a unit and those of the other layouts
//! are not counted (libtorch reports no CPU allocations). The largest rank is reported (pipeline
//! stages differ). The checker's estimate (`tests/common/estimate.rs`, the E0801 breakdown) is
//! compared term for term: its weights + gradients + optimiser state with `state`, its total
//! (with activations) with FSDP's `peak`.
//!
//! `cargo bench -p rlc-runtime --bench layouts`

mod common;

use std::collections::BTreeMap;
use std::sync::{Barrier, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use rlc_plan::model::Layout;
use rlc_runtime::collectives::{Communicator, ReduceOp};
use rlc_runtime::model::{Heads, ModelConfig, Transformer, token_logprobs};
use rlc_runtime::optim::{AdamW, AdamWConfig, clip_grad_norm};
use rlc_runtime::parallel::combined::sum_gradients;
use rlc_runtime::parallel::fsdp::Fsdp;
#[path = "../tests/common/estimate.rs"]
mod estimate;
use estimate::checker_estimate;
use rlc_runtime::parallel::pp::PipelineModel;
use rlc_runtime::parallel::tp::TpTransformer;
use rlc_runtime::parallel::{RankGroups, Tape, process_groups};
use rlc_runtime::rng::Rng;
use tch::{Device, Kind, Tensor, nn};

const ROWS: i64 = 8;
const SEQ: i64 = 64;
const MICRO: usize = 4;
const LR: f64 = 1e-4;
const CLIP: f64 = 1.0;

fn config() -> ModelConfig {
    ModelConfig {
        layers: 4,
        hidden: 256,
        heads: 8,
        kv_heads: 4,
        ffn: 768,
        vocab: 1024,
        max_len: SEQ,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tie_embeddings: false,
        qkv_bias: false,
        positions: Default::default(),
    }
}

/// How a layout's ranks train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scheme {
    One,
    Tp,
    Fsdp,
    Pp,
    Dp,
}

#[derive(Clone, Copy)]
struct Case {
    name: &'static str,
    kind: Scheme,
    layout: Layout,
}

fn layout(dp: u32, fsdp: u32, tp: u32, pp: u32) -> Layout {
    Layout::new(dp, fsdp, tp, pp)
}

fn cases() -> Vec<Case> {
    let case = |name, kind, layout| Case { name, kind, layout };
    vec![
        case("one rank", Scheme::One, layout(1, 1, 1, 1)),
        case("TP 2", Scheme::Tp, layout(1, 1, 2, 1)),
        case("TP 4", Scheme::Tp, layout(1, 1, 4, 1)),
        case("FSDP 2", Scheme::Fsdp, layout(1, 2, 1, 1)),
        case("FSDP 4", Scheme::Fsdp, layout(1, 4, 1, 1)),
        case("PP 2 (4 micro)", Scheme::Pp, layout(1, 1, 1, 2)),
        case("DP 2", Scheme::Dp, layout(2, 1, 1, 1)),
        case("TP 2 x DP 2", Scheme::Tp, layout(2, 1, 2, 1)),
    ]
}

/// The full model's weights (same seed on every rank: tensors are not `Sync`).
fn full_weights(config: &ModelConfig) -> BTreeMap<String, Tensor> {
    let vs = nn::VarStore::new(Device::Cpu);
    Transformer::new(&vs.root(), config, Heads::POLICY, 7).expect("a valid model");
    vs.variables()
        .into_iter()
        .map(|(n, t)| (n, t.detach().copy()))
        .collect()
}

/// The batch: random token ids, every position real.
fn batch(vocab: i64) -> (Tensor, Tensor) {
    let mut rng = Rng::new(5);
    let ids: Vec<i64> = (0..ROWS * SEQ)
        .map(|_| (rng.next_u64() % vocab as u64) as i64)
        .collect();
    let ids = Tensor::from_slice(&ids).view([ROWS, SEQ]);
    let mask = ids.ones_like();
    (ids, mask)
}

/// Minus the log-probabilities of the next tokens, over the whole batch's count (so a data
/// rank's loss on its rows is its share of the global mean).
fn sft_loss(logprobs: &Tensor) -> Tensor {
    -logprobs.sum(Kind::Float) / (ROWS * (SEQ - 1)) as f64
}

/// `[first, first + n)`: a data rank's rows.
fn rows_of(groups: &RankGroups) -> (i64, i64) {
    let n = ROWS / i64::from(groups.layout.data_ranks());
    (groups.data_rank() as i64 * n, n)
}

fn bytes<'t>(tensors: impl IntoIterator<Item = &'t Tensor>) -> u64 {
    tensors
        .into_iter()
        .filter(|t| t.defined())
        .map(|t| t.numel() as u64 * t.kind().elt_size_in_bytes() as u64)
        .sum()
}

/// Parameters, their gradients and the optimiser's moments, counted tensor by tensor.
fn state_bytes(params: &[Tensor], adam: &AdamW) -> u64 {
    let grads: Vec<Tensor> = params.iter().map(Tensor::grad).collect();
    let moments: Vec<Tensor> = adam.state_tensors().into_iter().map(|(_, t)| t).collect();
    bytes(params) + bytes(&grads) + bytes(&moments)
}

/// One rank's memory after a step: `(state, FSDP's measured peak)`.
type Memory = (u64, Option<u64>);

/// One rank of a layout, ready to train.
trait Rank {
    fn step(&mut self);
    fn memory(&mut self) -> Memory;
}

/// One rank holding the whole model; with `replicas`, a plain data-parallel replica.
struct One<'c> {
    vs: nn::VarStore,
    model: Transformer,
    adam: AdamW,
    ids: Tensor,
    mask: Tensor,
    replicas: Option<&'c Communicator>,
}

impl Rank for One<'_> {
    fn step(&mut self) {
        self.adam.zero_grad();
        sft_loss(&self.model.logprobs(&self.ids, &self.mask)).backward();
        let params = self.adam.params();
        if let Some(replicas) = self.replicas {
            // Plain data parallelism: one all-reduce of every gradient, flattened together.
            let grads: Vec<Tensor> = params.iter().map(|p| p.grad().reshape([-1])).collect();
            let summed = replicas
                .all_reduce(&Tensor::cat(&grads, 0), ReduceOp::Sum)
                .expect("all-reduce");
            tch::no_grad(|| {
                let mut at = 0;
                for p in &params {
                    let n = p.numel() as i64;
                    p.grad()
                        .copy_(&summed.narrow(0, at, n).view(p.size().as_slice()));
                    at += n;
                }
            });
        }
        clip_grad_norm(&params, CLIP);
        self.adam.step(LR);
    }

    fn memory(&mut self) -> Memory {
        let params: Vec<Tensor> = self.vs.variables().into_values().collect();
        (state_bytes(&params, &self.adam), None)
    }
}

/// A tensor-parallel rank; under `dp` its group's rows, gradients summed over the replicas.
struct Tp<'c> {
    vs: nn::VarStore,
    model: TpTransformer<'c>,
    adam: AdamW,
    ids: Tensor,
    mask: Tensor,
    replicas: Option<&'c Communicator>,
}

impl Rank for Tp<'_> {
    fn step(&mut self) {
        self.adam.zero_grad();
        let tape = Tape::new();
        let logprobs = self
            .model
            .logprobs(&tape, &self.ids, &self.mask)
            .expect("TP forward");
        tape.backward(&[(&sft_loss(&logprobs), None)])
            .expect("TP backward");
        if let Some(replicas) = self.replicas {
            sum_gradients(&self.adam.params(), replicas).expect("data all-reduce");
        }
        self.model.clip_grad_norm(CLIP).expect("TP clip");
        self.adam.step(LR);
    }

    fn memory(&mut self) -> Memory {
        let params: Vec<Tensor> = self.vs.variables().into_values().collect();
        (state_bytes(&params, &self.adam), None)
    }
}

struct Sharded<'c> {
    model: Fsdp<'c>,
    ids: Tensor,
    mask: Tensor,
}

impl Rank for Sharded<'_> {
    fn step(&mut self) {
        self.model
            .train_step(&self.ids, &self.mask, sft_loss, Some(CLIP), LR)
            .expect("FSDP step");
    }

    fn memory(&mut self) -> Memory {
        // The peak of one whole step, from a state that holds no gathered unit.
        self.model.reset_peak();
        self.step();
        let report = self.model.memory();
        (report.state(), Some(report.peak))
    }
}

struct Pipeline<'c> {
    model: PipelineModel<'c>,
    adam: AdamW,
    ids: Tensor,
    mask: Tensor,
}

impl Rank for Pipeline<'_> {
    fn step(&mut self) {
        self.adam.zero_grad();
        self.model
            .forward_backward(&self.ids, &self.mask, MICRO, |logits, micro| {
                sft_loss(&token_logprobs(logits, &micro.ids))
            })
            .expect("1F1B step");
        self.model.clip_grad_norm(CLIP).expect("PP clip");
        self.adam.step(LR);
    }

    fn memory(&mut self) -> Memory {
        let params: Vec<Tensor> = self.model.var_store().variables().into_values().collect();
        (state_bytes(&params, &self.adam), None)
    }
}

enum Command {
    Step,
    Memory,
}

/// Builds `case`'s rank for `groups` and serves commands until the sender hangs up.
fn serve(
    case: Case,
    groups: RankGroups,
    commands: mpsc::Receiver<Command>,
    done: mpsc::Sender<Option<Memory>>,
    start: &Barrier,
) {
    tch::set_num_threads(1);
    // libtorch's per-thread set-up happens here, before any model: the memory baseline.
    let _ = Tensor::ones([8], (Kind::Float, Device::Cpu)).sum(Kind::Float);
    start.wait();
    start.wait();
    let config = config();
    let weights = full_weights(&config);
    let (ids, mask) = batch(config.vocab);
    let adamw = AdamWConfig::default();
    let groups = &groups;
    let mut rank: Box<dyn Rank + '_> = match case.kind {
        Scheme::One | Scheme::Dp => {
            let (first, n) = rows_of(groups);
            let vs = nn::VarStore::new(Device::Cpu);
            let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 7).expect("model");
            let adam = AdamW::for_var_store(&vs, adamw);
            Box::new(One {
                vs,
                model,
                adam,
                ids: ids.narrow(0, first, n),
                mask: mask.narrow(0, first, n),
                replicas: (case.kind == Scheme::Dp).then_some(&groups.dp),
            })
        }
        Scheme::Tp => {
            let (first, n) = rows_of(groups);
            let vs = nn::VarStore::new(Device::Cpu);
            let model =
                TpTransformer::new(&vs.root(), &weights, &config, Heads::POLICY, &groups.tp)
                    .expect("TP model");
            let adam = AdamW::for_var_store(&vs, adamw);
            Box::new(Tp {
                vs,
                model,
                adam,
                ids: ids.narrow(0, first, n),
                mask: mask.narrow(0, first, n),
                replicas: (case.layout.dp > 1).then_some(&groups.data),
            })
        }
        Scheme::Fsdp => {
            let (first, n) = rows_of(groups);
            let model = Fsdp::for_rank(&weights, &config, groups, adamw).expect("FSDP model");
            Box::new(Sharded {
                model,
                ids: ids.narrow(0, first, n),
                mask: mask.narrow(0, first, n),
            })
        }
        Scheme::Pp => {
            let model = PipelineModel::new(&weights, &config, &groups.pp).expect("stage");
            let adam = AdamW::for_var_store(model.var_store(), adamw);
            Box::new(Pipeline {
                model,
                adam,
                ids,
                mask,
            })
        }
    };
    drop(weights);
    while let Ok(command) = commands.recv() {
        let reply = match command {
            Command::Step => {
                rank.step();
                None
            }
            Command::Memory => Some(rank.memory()),
        };
        if done.send(reply).is_err() {
            break;
        }
    }
}

/// The ranks of one layout, driven from the bench's thread.
struct Ranks {
    commands: Vec<mpsc::Sender<Command>>,
    done: mpsc::Receiver<Option<Memory>>,
}

impl Ranks {
    fn run(&self, command: fn() -> Command) -> Vec<Option<Memory>> {
        for c in &self.commands {
            c.send(command()).expect("rank alive");
        }
        (0..self.commands.len())
            .map(|_| self.done.recv().expect("rank alive"))
            .collect()
    }
}

/// One row of the table.
struct Row {
    case: Case,
    step: f64,
    state: u64,
    peak: Option<u64>,
}

/// Starts `case`'s ranks; `between` runs once every rank thread is set up and before any
/// builds its model.
fn start_ranks<'s>(
    scope: &'s thread::Scope<'s, '_>,
    case: Case,
    start: &'s Barrier,
    between: impl FnOnce(),
) -> Ranks {
    let (done_tx, done) = mpsc::channel();
    let mut commands = Vec::new();
    for groups in process_groups(case.layout) {
        let (tx, rx) = mpsc::channel();
        commands.push(tx);
        let done_tx = done_tx.clone();
        scope.spawn(move || serve(case, groups, rx, done_tx, start));
    }
    start.wait();
    between();
    start.wait();
    Ranks { commands, done }
}

fn measure(criterion: &mut Criterion, case: Case, budget: Duration) -> Row {
    let start = Barrier::new(case.layout.devices() as usize + 1);
    thread::scope(|scope| {
        let ranks = start_ranks(scope, case, &start, || {});
        ranks.run(|| Command::Step); // warm-up: the first step allocates the moments

        let mut group = criterion.benchmark_group("layouts");
        group.sampling_mode(SamplingMode::Flat);
        group.bench_function(case.name, |b| b.iter(|| ranks.run(|| Command::Step)));
        group.finish();

        // Median over `budget` of steps (one under `cargo test --benches`), for the table.
        let start = Instant::now();
        let mut times = Vec::new();
        loop {
            let t = Instant::now();
            ranks.run(|| Command::Step);
            times.push(t.elapsed().as_secs_f64());
            if budget.is_zero() || (times.len() >= 3 && start.elapsed() >= budget) {
                break;
            }
        }
        times.sort_by(f64::total_cmp);
        let memory: Vec<Memory> = ranks
            .run(|| Command::Memory)
            .into_iter()
            .map(|m| m.expect("a memory reply"))
            .collect();
        Row {
            case,
            step: times[times.len() / 2],
            state: memory.iter().map(|m| m.0).max().unwrap_or(0),
            peak: memory.iter().filter_map(|m| m.1).max(),
        }
    })
}

/// Set in a child process of the bench: measure the peak resident memory of this case alone.
const PEAK_CASE: &str = "RLC_LAYOUTS_PEAK_CASE";

/// `VmRSS` or `VmHWM` of this process, in bytes.
fn proc_status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .map_or(0, |kib: u64| kib * 1024)
}

/// Hands freed heap back to the system, so resident memory is what is in use.
fn trim_heap() {
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// In a child process: the case's ranks start (the resident memory then, threads and libtorch
/// set up but no model, is the baseline) and train; after a warm-up step (which allocates the
/// moments) the freed construction garbage is trimmed, the resident high-water mark reset
/// (`/proc/self/clear_refs`), three steps run, and the peak above the model-less process is
/// printed — every byte the ranks hold at once: state, activations, gathered units, autograd's
/// saved tensors, collective copies.
fn print_peak_rss(name: &str) {
    let case = cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("a case of the bench");
    // Tensors of 64 KiB and more get pages of their own, returned when freed: the resident
    // memory follows the live tensors instead of what glibc's heap keeps after frees.
    // SAFETY: a malloc tuning call, made before the ranks start.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
    let start = Barrier::new(case.layout.devices() as usize + 1);
    let mut baseline = 0;
    thread::scope(|scope| {
        let ranks = start_ranks(scope, case, &start, || {
            trim_heap();
            baseline = proc_status_bytes("VmRSS:");
        });
        ranks.run(|| Command::Step);
        trim_heap();
        std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak RSS");
        for _ in 0..3 {
            ranks.run(|| Command::Step);
        }
        let peak = proc_status_bytes("VmHWM:");
        println!("peak_rss_above_baseline {}", peak.saturating_sub(baseline));
    });
}

/// The peak resident memory per rank of `case`, measured in a child process of its own
/// (`None` when it cannot be: no `/proc`, or not benchmarking).
fn peak_rss_per_rank(case: &Case) -> Option<f64> {
    let out = std::process::Command::new(std::env::current_exe().ok()?)
        .env(PEAK_CASE, case.name)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let bytes: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss_above_baseline "))?
        .trim()
        .parse()
        .ok()?;
    Some(bytes / f64::from(case.layout.devices()))
}

fn mib(b: f64) -> String {
    format!("{:.2} MiB", b / (1024.0 * 1024.0))
}

fn main() {
    tch::set_num_threads(1);
    if let Ok(name) = std::env::var(PEAK_CASE) {
        print_peak_rss(&name);
        return;
    }
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let budget = if common::benchmarking() {
        Duration::from_secs(1)
    } else {
        Duration::ZERO
    };
    let rows: Vec<Row> = cases()
        .into_iter()
        .map(|case| measure(&mut criterion, case, budget))
        .collect();

    let config = config();
    let cores = thread::available_parallelism().map_or(0, usize::from);
    println!(
        "\nOne training step (forward, backward, clip, AdamW) of a {}-layer, {}-wide model \
         ({} heads, {} KV heads, MLP {}, vocabulary {}), batch {ROWS} x {SEQ} tokens; ranks are \
         threads with 1 libtorch thread each on {cores} cores ({}): more ranks than cores cannot \
         be faster, the ratio is the layouts' collectives and sharding overhead.",
        config.layers,
        config.hidden,
        config.heads,
        config.kv_heads,
        config.ffn,
        config.vocab,
        if budget.is_zero() {
            "test mode: one step, not a measurement"
        } else {
            "median step over ~1 s after criterion"
        },
    );
    println!(
        "state = parameters + gradients + AdamW moments of the largest rank (counted tensors); \
         peak RSS = the process's resident high-water mark over three steps above the process \
         without models (a child process per layout), per rank; FSDP counted = FSDP's own count \
         (state + gathered units + kept activations); the checker's estimate compared term for \
         term (state with state, total with the peak)\n"
    );
    println!(
        "| layout | ranks | step ms | x one rank | state/rank | x one rank | checker state | error \
         | peak RSS/rank | x one rank | checker total | error | FSDP counted |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let peaks: Vec<Option<f64>> = rows
        .iter()
        .map(|row| {
            if budget.is_zero() {
                None
            } else {
                peak_rss_per_rank(&row.case)
            }
        })
        .collect();
    let (one_step, one_state) = (rows[0].step, rows[0].state as f64);
    for (row, rss) in rows.iter().zip(&peaks) {
        let mut checked = row.case.layout;
        if row.case.kind == Scheme::Pp {
            // Sequences per micro-batch, as the plan's layout gives it.
            checked.micro = Some((ROWS / MICRO as i64) as u64);
        }
        let estimate = checker_estimate(&config, checked, ROWS, SEQ);
        let state = estimate.weights + estimate.gradients + estimate.optimizer_state;
        let error =
            |est: f64, measured: f64| format!("{:+.1}%", 100.0 * (est - measured) / measured);
        let (rss_text, rss_ratio, total_error) = match (rss, peaks[0]) {
            (Some(rss), Some(one)) => (
                mib(*rss),
                format!("{:.2}", rss / one),
                error(estimate.total(), *rss),
            ),
            _ => ("-".into(), "-".into(), "-".into()),
        };
        let counted = row.peak.map_or_else(|| "-".into(), |p| mib(p as f64));
        println!(
            "| {} | {} | {:.1} | {:.2} | {} | {:.2} | {} | {} | {rss_text} | {rss_ratio} | {} | \
             {total_error} | {counted} |",
            row.case.name,
            row.case.layout.devices(),
            row.step * 1e3,
            row.step / one_step,
            mib(row.state as f64),
            row.state as f64 / one_state,
            mib(state),
            error(state, row.state as f64),
            mib(estimate.total()),
        );
    }
    criterion.final_summary();
}
