//! Each layout's rank shards, made alone, against the full model cut (the old path), bit for bit.

use std::collections::BTreeMap;
use std::thread;

use rlc_plan::model::Layout;
use tch::{Device, Tensor, nn};

use super::*;
use crate::hf::tests::fixture;
use crate::model::init::parameters;
use crate::model::{Heads, ModelConfig, Positions, Transformer};
use crate::optim::AdamWConfig;
use crate::parallel::fsdp::Fsdp;
use crate::parallel::pp::PipelineModel;
use crate::parallel::process_groups;
use crate::parallel::tp::TpTransformer;

/// tp(2), tp(4), fsdp(2), fsdp(4), pp(2), pp(3) and two combinations, as (dp, fsdp, tp, pp).
const LAYOUTS: [(u32, u32, u32, u32); 8] = [
    (1, 1, 2, 1),
    (1, 1, 4, 1),
    (1, 2, 1, 1),
    (1, 4, 1, 1),
    (1, 1, 1, 2),
    (1, 1, 1, 3),
    (1, 2, 2, 1),
    (2, 1, 2, 2),
];

/// Every coordinate of `layout` (the data-parallel one is 0: replicas hold the same).
fn coords(layout: &Layout) -> Vec<Coord> {
    let mut out = Vec::new();
    for pp in 0..i64::from(layout.pp) {
        for fsdp in 0..i64::from(layout.fsdp) {
            for tp in 0..i64::from(layout.tp) {
                out.push(Coord {
                    pp,
                    dp: 0,
                    fsdp,
                    tp,
                });
            }
        }
    }
    out
}

/// Four key/value heads, so that tp(4) splits them; three layers, so that pp(2) is uneven.
fn config() -> ModelConfig {
    let mut config = ModelConfig::tiny();
    config.kv_heads = 4;
    config.layers = 3;
    config
}

fn assert_same_bits(a: &BTreeMap<String, Tensor>, b: &BTreeMap<String, Tensor>, what: &str) {
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "{what}: names"
    );
    for (name, t) in a {
        assert_eq!(t.size(), b[name].size(), "{what}: `{name}`'s shape");
        assert!(t.equal(&b[name]), "{what}: `{name}` differs");
    }
}

/// Every rank of every layout against `full` (the whole model's tensors) cut.
fn assert_every_rank_matches(
    source: &dyn WeightSource,
    full: &BTreeMap<String, Tensor>,
    config: &ModelConfig,
    heads: Heads,
    what: &str,
) {
    let params = parameters(config, heads);
    for (dp, fsdp, tp, pp) in LAYOUTS {
        let layout = Layout::new(dp, fsdp, tp, pp);
        for coord in coords(&layout) {
            let made = rank_shards(source, &params, config, &layout, coord, Device::Cpu).unwrap();
            let cut =
                rank_shards(&Cut(full), &params, config, &layout, coord, Device::Cpu).unwrap();
            assert!(!made.is_empty());
            assert_same_bits(&made, &cut, &format!("{what}, {layout:?} at {coord:?}"));
        }
    }
}

fn whole_model(config: &ModelConfig, heads: Heads, seed: u64) -> BTreeMap<String, Tensor> {
    let vs = nn::VarStore::new(Device::Cpu);
    Transformer::new(&vs.root(), config, heads, seed).unwrap();
    vs.variables().into_iter().collect()
}

#[test]
fn seeded_shards_are_the_whole_models_shards() {
    let mut every = config();
    every.tie_embeddings = true;
    every.qkv_bias = true;
    every.positions = Positions::Learned;
    for (config, heads) in [
        (config(), Heads::POLICY),
        (every.clone(), Heads::POLICY),
        (every, Heads::CRITIC),
    ] {
        let full = whole_model(&config, heads, 42);
        assert_every_rank_matches(&Seeded { seed: 42 }, &full, &config, heads, "seeded");
    }
}

#[test]
fn hugging_face_shards_are_the_loaded_models_shards() {
    // A sharded checkpoint with a tied head, a single file with q/k/v biases; a critic's value
    // head is not in the checkpoint and keeps its seeded init.
    for (name, heads) in [
        ("llama-tiny", Heads::POLICY),
        ("qwen2-tiny", Heads::POLICY),
        ("qwen2-tiny", Heads::CRITIC),
    ] {
        let dir = fixture(name);
        let (vs, model) = crate::hf::load_model(&dir, heads, Device::Cpu).unwrap();
        let full: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
        let (config, params, slices) = crate::hf::open_slices(&dir, heads).unwrap();
        assert_eq!(&config, model.config());
        assert_eq!(params, parameters(&config, heads));
        assert_every_rank_matches(&slices, &full, &config, heads, name);
    }
}

/// Half-precision weights are read as stored and widened as the whole load widens them.
#[test]
fn half_precision_slices_widen_as_the_whole_load_does() {
    let from = fixture("qwen2-tiny");
    let dir = std::env::temp_dir().join(format!("rlc-materialise-bf16-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(from.join("config.json"), dir.join("config.json")).unwrap();
    let tensors: Vec<(String, Tensor)> = Tensor::read_safetensors(from.join("model.safetensors"))
        .unwrap()
        .into_iter()
        .map(|(n, t)| (n, t.to_kind(tch::Kind::BFloat16)))
        .collect();
    Tensor::write_safetensors(&tensors, dir.join("model.safetensors")).unwrap();
    let (vs, _) = crate::hf::load_model(&dir, Heads::POLICY, Device::Cpu).unwrap();
    let full: BTreeMap<String, Tensor> = vs.variables().into_iter().collect();
    let (config, _, slices) = crate::hf::open_slices(&dir, Heads::POLICY).unwrap();
    assert_every_rank_matches(&slices, &full, &config, Heads::POLICY, "bf16");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_header_that_points_outside_its_file_is_refused() {
    let from = fixture("qwen2-tiny");
    let dir = std::env::temp_dir().join(format!("rlc-materialise-cut-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(from.join("config.json"), dir.join("config.json")).unwrap();
    let bytes = std::fs::read(from.join("model.safetensors")).unwrap();
    // Cut off the last kilobyte: the header still lists it.
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() - 1024]).unwrap();
    let Err(error) = crate::hf::open_slices(&dir, Heads::POLICY) else {
        panic!("a truncated file was opened");
    };
    let message = error.to_string();
    assert!(
        message.contains("model.safetensors") && message.contains("inside the file"),
        "{message}"
    );
    // A header length past the end of the file.
    let mut lying = bytes[..16].to_vec();
    lying[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(dir.join("model.safetensors"), &lying).unwrap();
    let Err(error) = crate::hf::open_slices(&dir, Heads::POLICY) else {
        panic!("a lying header was opened");
    };
    assert!(error.to_string().contains("header of"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The models a rank builds from its shards alone hold what the old constructors, given the
/// whole model, hold.
#[test]
fn rank_models_from_shards_are_the_models_cut_from_the_whole() {
    // Tensors are not shared between threads: each rank builds its own copies.
    let config = config();
    let params = parameters(&config, Heads::POLICY);
    let made = |layout: &Layout, coord| {
        rank_shards(
            &Seeded { seed: 5 },
            &params,
            &config,
            layout,
            coord,
            Device::Cpu,
        )
        .unwrap()
    };
    // tp(4)
    let layout = Layout::new(1, 1, 4, 1);
    thread::scope(|scope| {
        for groups in process_groups(layout) {
            let (config, made) = (&config, &made);
            scope.spawn(move || {
                let full = &whole_model(config, Heads::POLICY, 5);
                let (a, b) = (
                    nn::VarStore::new(Device::Cpu),
                    nn::VarStore::new(Device::Cpu),
                );
                let local = made(&layout, coord_of(&groups));
                let mine = TpTransformer::from_owned_shards(
                    &a.root(),
                    local,
                    config,
                    Heads::POLICY,
                    &groups.tp,
                )
                .unwrap();
                let old =
                    TpTransformer::new(&b.root(), full, config, Heads::POLICY, &groups.tp).unwrap();
                let by_name = |m: &TpTransformer| -> BTreeMap<String, Tensor> {
                    m.params()
                        .iter()
                        .map(|p| (p.name.clone(), p.tensor.detach()))
                        .collect()
                };
                assert_same_bits(&by_name(&mine), &by_name(&old), "tp(4) model");
            });
        }
    });
    // fsdp(4)
    let layout = Layout::new(1, 4, 1, 1);
    thread::scope(|scope| {
        for groups in process_groups(layout) {
            let (config, made) = (&config, &made);
            scope.spawn(move || {
                let full = &whole_model(config, Heads::POLICY, 5);
                let local = made(&layout, coord_of(&groups));
                let adamw = AdamWConfig::default();
                let mine = Fsdp::from_shards(local, config, &groups, adamw.clone()).unwrap();
                let old = Fsdp::for_rank(full, config, &groups, adamw).unwrap();
                assert_same_bits(&mine.local_shards(), &old.local_shards(), "fsdp(4) model");
                // The padded flat shards the optimizer steps, padding included.
                let (a, b) = (mine.optimizer().params(), old.optimizer().params());
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(&b) {
                    assert!(x.equal(y), "fsdp(4): a padded shard differs");
                }
            });
        }
    });
    // pp(2): a stage holds its parameters whole.
    let layout = Layout::new(1, 1, 1, 2);
    thread::scope(|scope| {
        for groups in process_groups(layout) {
            let (config, made) = (&config, &made);
            scope.spawn(move || {
                let full = &whole_model(config, Heads::POLICY, 5);
                let held = made(&layout, coord_of(&groups));
                let count = held.len();
                let mine = PipelineModel::from_owned(held, config, &groups.pp).unwrap();
                let old = PipelineModel::new(full, config, &groups.pp).unwrap();
                let vars = |m: &PipelineModel| -> BTreeMap<String, Tensor> {
                    m.var_store().variables().into_iter().collect()
                };
                assert_same_bits(&vars(&mine), &vars(&old), "pp(2) stage");
                assert_eq!(vars(&mine).len(), count);
            });
        }
    });
}
