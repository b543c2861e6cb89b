//! Peak memory of one rank materialising its initial weights, one process per measurement.
//!
//! Model: 8 layers, hidden 512, 8 query / 4 key-value heads, MLP 1536, vocabulary 8192, untied
//! (33.6 M parameters, 134 MB in float32: 9× the layouts bench's 3.7 M). Each configuration runs
//! in a child process of this binary that builds rank 0's model and reports its peak resident set
//! above its baseline: libtorch started, the layout's communicators made and the weight source
//! opened, freed memory trimmed, then the high-water mark reset (`/proc/self/clear_refs`) and
//! `VmHWM` read once the model is built. The baseline itself is the fixed overhead, printed
//! once. As in the layouts bench, tensors of 64 KiB and more get pages of their own
//! (`M_MMAP_THRESHOLD`), so freed ones leave the resident set. Configurations, for seeded
//! random init and for a Hugging Face folder (the same weights saved as one safetensors file):
//!
//! - `one rank`: the whole model (`Transformer::new`, `hf::load_model`), as `dp` builds it;
//! - `tp(4)`, `fsdp(4)`, `pp(4)`: rank 0 built from the shards it materialises alone
//!   (`parallel::materialise::rank_shards`), as `exec` builds a sharded role;
//! - `tp(4), full then cut`: the path before materialisation, for comparison.
//!
//! `cargo bench -p rlc-runtime --bench materialise`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rlc_plan::model::Layout;
use rlc_runtime::model::init::parameters;
use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use rlc_runtime::optim::AdamWConfig;
use rlc_runtime::parallel::fsdp::Fsdp;
use rlc_runtime::parallel::materialise::{Seeded, WeightSource, coord_of, rank_shards};
use rlc_runtime::parallel::pp::PipelineModel;
use rlc_runtime::parallel::process_groups;
use rlc_runtime::parallel::tp::TpTransformer;
use tch::{Device, Tensor, nn};

const CHILD: &str = "RLC_MATERIALISE_CHILD";
const SEED: u64 = 3;

fn config() -> ModelConfig {
    ModelConfig {
        layers: 8,
        hidden: 512,
        heads: 8,
        kv_heads: 4,
        ffn: 1536,
        vocab: 8192,
        max_len: 256,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tie_embeddings: false,
        qkv_bias: false,
        positions: Default::default(),
    }
}

/// `VmHWM` (the peak resident set since the last reset) or `VmRSS` of this process, in bytes.
fn status_bytes(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with(key))
        .expect("the key in /proc/self/status");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM in kB");
    kb * 1024
}

/// Builds rank 0's model of `what` (`{source}/{layout}`), keeps it alive, and prints the peak.
fn child(what: &str, hf_dir: &Path) {
    let config = config();
    let heads = Heads::POLICY;
    let (source_name, layout_name) = what.split_once('/').expect("source/layout");
    // SAFETY: a malloc tuning call, made before any thread starts: tensors of 64 KiB and more
    // get pages of their own, so what is freed leaves the resident set (as in the layouts bench).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024);
    }
    // libtorch started, nothing else.
    let _warm = Tensor::zeros([1], tch::kind::FLOAT_CPU);
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    let hf = || rlc_runtime::hf::open_slices(hf_dir, heads).expect("the saved folder opens");
    let source: Box<dyn WeightSource> = match source_name {
        "seeded" => Box::new(Seeded { seed: SEED }),
        _ => Box::new(hf().2),
    };
    let params = parameters(&config, heads);
    let layout = match layout_name {
        "tp4" | "tp4-cut" => Layout::new(1, 1, 4, 1),
        "fsdp4" => Layout::new(1, 4, 1, 1),
        "fsdp1" => Layout::new(1, 1, 1, 1),
        "pp4" => Layout::new(1, 1, 1, 4),
        _ => Layout::new(1, 1, 1, 1),
    };
    let groups = process_groups(layout);
    let rank = &groups[0];
    // The baseline: libtorch, the communicators and the source open, no weights.
    // SAFETY: malloc_trim only releases free memory of glibc's arenas.
    unsafe {
        libc::malloc_trim(0);
    }
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting the peak RSS");
    let baseline = status_bytes("VmRSS:");
    let report = || println!("{baseline} {}", status_bytes("VmHWM:"));
    let shards = || {
        rank_shards(
            source.as_ref(),
            &params,
            &config,
            &layout,
            coord_of(rank),
            Device::Cpu,
        )
        .expect("shards")
    };
    match layout_name {
        "overhead" => {}
        "one" => {
            let vs = nn::VarStore::new(Device::Cpu);
            if source_name == "seeded" {
                let model = Transformer::new(&vs.root(), &config, heads, SEED).unwrap();
                keep.push(Box::new((vs, model)));
            } else {
                let loaded = rlc_runtime::hf::load_model(hf_dir, heads, Device::Cpu).unwrap();
                keep.push(Box::new(loaded));
            }
        }
        "tp4" => {
            let vs = nn::VarStore::new(Device::Cpu);
            let local = shards();
            let model =
                TpTransformer::from_owned_shards(&vs.root(), local, &config, heads, &rank.tp)
                    .unwrap();
            keep.push(Box::new(model.params().len()));
            keep.push(Box::new(vs));
        }
        "tp4-cut" => {
            let whole = nn::VarStore::new(Device::Cpu);
            Transformer::new(&whole.root(), &config, heads, SEED).unwrap();
            let weights: BTreeMap<String, Tensor> = whole.variables().into_iter().collect();
            let vs = nn::VarStore::new(Device::Cpu);
            let model = TpTransformer::new(&vs.root(), &weights, &config, heads, &rank.tp);
            keep.push(Box::new(model.unwrap().params().len()));
            drop(weights);
            drop(whole);
            keep.push(Box::new(vs));
        }
        "fsdp4" | "fsdp1" => {
            let local = shards();
            let model = Fsdp::from_shards(local, &config, rank, AdamWConfig::default()).unwrap();
            keep.push(Box::new(model.local_shards().len()));
            // The model borrows `groups`; measure before either goes.
            report();
            return;
        }
        "pp4" => {
            let model = PipelineModel::from_owned(shards(), &config, &rank.pp).unwrap();
            report();
            drop(model);
            return;
        }
        other => panic!("unknown layout {other}"),
    }
    report();
    drop(keep);
}

/// The baseline and the peak resident set of a child that builds `what`, in bytes.
fn measure(what: &str, hf_dir: &Path) -> (u64, u64) {
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD, what)
        .env("RLC_MATERIALISE_HF", hf_dir)
        .output()
        .expect("the child runs");
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let figures: Vec<u64> = stdout
        .lines()
        .last()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    match figures.as_slice() {
        &[baseline, peak] => (baseline, peak),
        _ => panic!("{what}: no figures in {stdout:?}"),
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let hf_dir = std::env::var_os("RLC_MATERIALISE_HF").map(PathBuf::from);
    if let (Ok(what), Some(dir)) = (std::env::var(CHILD), &hf_dir) {
        child(&what, dir);
        return;
    }
    // `cargo bench` passes `--bench`; anything that looks like a test filter runs nothing.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let config = config();
    let params = parameters(&config, Heads::POLICY);
    let numel: i64 = params.iter().map(|p| p.numel()).sum();
    let dir = std::env::temp_dir().join(format!("rlc-materialise-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    {
        let vs = nn::VarStore::new(Device::Cpu);
        let model = Transformer::new(&vs.root(), &config, Heads::POLICY, SEED).unwrap();
        let options = rlc_runtime::hf::SaveOptions {
            max_shard_bytes: u64::MAX,
            base_config: None,
        };
        rlc_runtime::hf::save_model(&dir, &model, &vs, &options).unwrap();
    }
    println!(
        "model: {numel} parameters, {:.1} MiB in float32",
        mib(numel as u64 * 4)
    );
    let (overhead, _) = measure("seeded/overhead", &dir);
    println!(
        "fixed overhead (libtorch started, 4 in-process communicators; not in the figures): \
         {:.1} MiB",
        mib(overhead)
    );
    println!(
        "{:<7} {:<34} {:>9} {:>8} {:>8} {:>9}",
        "init", "rank 0 of", "peak MiB", "vs", "ratio", "MiB − ¼"
    );
    for source in ["seeded", "hf"] {
        let peak_of = |what: &str| {
            let (baseline, peak) = measure(&format!("{source}/{what}"), &dir);
            peak.saturating_sub(baseline)
        };
        let one = peak_of("one");
        let fsdp1 = peak_of("fsdp1");
        let rows: &[(&str, &str, u64, &str)] = &[
            ("one", "one rank (whole model)", one, "-"),
            ("tp4", "tp(4)", one, "one"),
            ("pp4", "pp(4) (embedding + 2 layers)", one, "one"),
            ("tp4-cut", "tp(4), full then cut (before)", one, "one"),
            ("fsdp1", "fsdp(1): + gradients and moments", fsdp1, "-"),
            ("fsdp4", "fsdp(4)", fsdp1, "fsdp(1)"),
        ];
        for &(layout, label, reference, against) in rows {
            if source == "hf" && layout == "tp4-cut" {
                continue;
            }
            let peak = match layout {
                "one" => one,
                "fsdp1" => fsdp1,
                _ => peak_of(layout),
            };
            println!(
                "{source:<7} {label:<34} {:>9.1} {against:>8} {:>8.3} {:>9.1}",
                mib(peak),
                peak as f64 / reference as f64,
                mib(peak) - mib(reference) / 4.0
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
