use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tch::{Kind, Tensor};

use super::*;

/// A fresh folder under the system temp dir, removed when dropped.
struct TempRoot(PathBuf);

impl TempRoot {
    fn new(label: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let unique = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "rlc-checkpoint-{label}-{}-{unique}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn sample(step: u64) -> Checkpoint {
    let offset = step as f32;
    let weights = vec![
        // Deliberately unsorted names: the order must survive.
        (
            "model.layers.0.self_attn.q_proj.weight".to_string(),
            Tensor::from_slice(&[0.1f32 + offset, -2.5, 3.25, 1e-30, -0.0, 7.0]).reshape([2, 3]),
        ),
        (
            "model.embed_tokens.weight".to_string(),
            // Transposed, so not contiguous: save must cope.
            Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0])
                .reshape([2, 3])
                .tr(),
        ),
        ("lm_head.scale".to_string(), Tensor::from(0.5f32)),
        (
            "empty".to_string(),
            Tensor::zeros([0, 4], (Kind::Float, tch::Device::Cpu)),
        ),
    ];
    let optimizer = vec![
        (
            "exp_avg.model.embed_tokens.weight".to_string(),
            Tensor::from_slice(&[1e-8f32, 2e-8, 3e-8, 4e-8, 5e-8, 6e-8]).reshape([3, 2]),
        ),
        (
            "step".to_string(),
            Tensor::from_slice(&[i64::MIN, -1, 0, i64::MAX]),
        ),
    ];
    let state = json!({
        "optimizer_step": step,
        "rng": { "sampling": u64::MAX, "init": "18446744073709551615" },
        "data_cursor": { "epoch": 2, "index": 12345 },
        "learning_rate": 3e-4,
        "min_i64": i64::MIN,
    });
    Checkpoint {
        step,
        weights,
        optimizer,
        state,
        config: None,
        lagged: Vec::new(),
    }
}

fn assert_same_tensors(found: &[(String, Tensor)], expected: &[(String, Tensor)]) {
    let found_names: Vec<&str> = found.iter().map(|(name, _)| name.as_str()).collect();
    let expected_names: Vec<&str> = expected.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(found_names, expected_names);
    for ((name, found), (_, expected)) in found.iter().zip(expected) {
        assert_eq!(found.kind(), expected.kind(), "{name}");
        assert_eq!(found.size(), expected.size(), "{name}");
        assert!(found.equal(expected), "{name}");
    }
}

fn saved(root: &TempRoot, step: u64) -> PathBuf {
    let dir = step_dir(&root.0, step);
    save(&dir, &sample(step)).unwrap();
    dir
}

fn load_error(dir: &Path) -> String {
    load(dir).unwrap_err().to_string()
}

/// Earlier weight versions (for a generator that runs behind) round-trip in `lagged.safetensors`,
/// which the manifest lists and guards like the other files; without any there is no such file.
#[test]
fn lagged_weights_round_trip_and_are_verified() {
    let root = TempRoot::new("lagged");
    let mut original = sample(7);
    original.lagged = vec![
        ("v5/lm_head.scale".to_string(), Tensor::from(0.25f32)),
        ("v6/lm_head.scale".to_string(), Tensor::from(0.375f32)),
    ];
    let dir = step_dir(&root.0, 7);
    save(&dir, &original).unwrap();
    let loaded = load(&dir).unwrap();
    assert_same_tensors(&loaded.lagged, &original.lagged);
    assert_same_tensors(&loaded.weights, &original.weights);
    let manifest = fs::read_to_string(dir.join(MANIFEST_FILE)).unwrap();
    assert!(manifest.contains(LAGGED_FILE), "{manifest}");
    // A changed byte in it is caught before anything is read.
    let path = dir.join(LAGGED_FILE);
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    fs::write(&path, bytes).unwrap();
    assert!(load_error(&dir).contains(LAGGED_FILE));
    // None given: no file.
    let plain = step_dir(&root.0, 8);
    save(&plain, &sample(8)).unwrap();
    assert!(!plain.join(LAGGED_FILE).exists());
    assert!(load(&plain).unwrap().lagged.is_empty());
}

#[test]
fn save_then_load_round_trips_everything() {
    let root = TempRoot::new("round-trip");
    let original = sample(50);
    let dir = step_dir(&root.0, 50);
    save(&dir, &original).unwrap();
    let loaded = load(&dir).unwrap();
    assert_eq!(loaded.step, 50);
    assert_same_tensors(&loaded.weights, &original.weights);
    assert_same_tensors(&loaded.optimizer, &original.optimizer);
    assert_eq!(loaded.state, original.state);
    for file in [WEIGHTS_FILE, OPTIMIZER_FILE, STATE_FILE, MANIFEST_FILE] {
        assert!(dir.join(file).is_file(), "{file}");
    }
}

#[test]
fn float_bit_patterns_survive() {
    let root = TempRoot::new("bits");
    let bits32 = [
        0x8000_0000u32,
        0x7FC0_1234,
        0x0000_0001,
        0x7F80_0000,
        0x3DCC_CCCD,
    ];
    let bits64 = [
        0x8000_0000_0000_0000u64,
        0x7FF8_0000_DEAD_BEEF,
        1,
        0x3FB9_9999_9999_999A,
    ];
    let f32s: Vec<f32> = bits32.iter().map(|&b| f32::from_bits(b)).collect();
    let f64s: Vec<f64> = bits64.iter().map(|&b| f64::from_bits(b)).collect();
    // About one in ten such floats re-parses one ulp off in serde_json; they must not drift.
    let mut rng = crate::rng::Rng::new(3);
    let floats: Vec<f64> = (0..1000).map(|_| rng.uniform() * 1e-3).collect();
    let checkpoint = Checkpoint {
        step: 1,
        weights: vec![
            ("a".to_string(), Tensor::from_slice(&f32s)),
            ("b".to_string(), Tensor::from_slice(&f64s)),
        ],
        optimizer: Vec::new(),
        state: json!({ "lr": -0.0, "tiny": 5e-324, "third": 1.0 / 3.0, "a/b~c": floats }),
        config: None,
        lagged: Vec::new(),
    };
    let dir = step_dir(&root.0, 1);
    save(&dir, &checkpoint).unwrap();
    let loaded = load(&dir).unwrap();
    // NaN != NaN, so compare bits rather than with `equal`.
    let a = Vec::<f32>::try_from(&loaded.weights[0].1).unwrap();
    let b = Vec::<f64>::try_from(&loaded.weights[1].1).unwrap();
    assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), bits32);
    assert_eq!(b.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), bits64);
    assert!(loaded.optimizer.is_empty());
    let state_json = fs::read_to_string(dir.join(STATE_FILE)).unwrap();
    assert!(
        state_json.contains("\"float_bits\""),
        "the drift patch is exercised"
    );
    let back: Vec<u64> = loaded.state["a/b~c"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap().to_bits())
        .collect();
    assert_eq!(back, floats.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    let lr = loaded.state["lr"].as_f64().unwrap();
    assert_eq!(lr.to_bits(), (-0.0f64).to_bits());
    assert_eq!(loaded.state["tiny"].as_f64(), Some(5e-324));
    assert_eq!(
        loaded.state["third"].as_f64().map(f64::to_bits),
        Some((1.0f64 / 3.0).to_bits())
    );
}

#[test]
fn u64_rng_state_round_trips_exactly() {
    let root = TempRoot::new("u64");
    let mut checkpoint = sample(7);
    checkpoint.state =
        json!({ "rng": 0xFFFF_FFFF_FFFF_FFFFu64, "as_string": u64::MAX.to_string() });
    let dir = step_dir(&root.0, 7);
    save(&dir, &checkpoint).unwrap();
    let state = load(&dir).unwrap().state;
    assert_eq!(state["rng"].as_u64(), Some(u64::MAX));
    assert_eq!(
        state["as_string"].as_str().unwrap().parse::<u64>().unwrap(),
        u64::MAX
    );
}

#[test]
fn a_flipped_byte_is_reported_as_corrupt() {
    let root = TempRoot::new("flip");
    let dir = saved(&root, 50);
    let path = dir.join(WEIGHTS_FILE);
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    fs::write(&path, bytes).unwrap();
    let error = load(&dir).unwrap_err();
    assert!(
        matches!(&error, CheckpointError::Corrupt { file, problem: Corruption::Sha256 { .. }, .. } if file == WEIGHTS_FILE),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.starts_with(&format!(
            "checkpoint {} is corrupt: model.safetensors has SHA-256 ",
            dir.display()
        )),
        "{message}"
    );
    assert!(message.contains("but the manifest says"), "{message}");
}

#[test]
fn a_truncated_file_is_reported_by_size() {
    let root = TempRoot::new("truncate");
    let dir = saved(&root, 50);
    let path = dir.join(OPTIMIZER_FILE);
    let length = fs::metadata(&path).unwrap().len();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(length - 10)
        .unwrap();
    let message = load_error(&dir);
    assert!(
        message.contains(&format!(
            "is corrupt: optimizer.safetensors is {} bytes but the manifest says {length}",
            length - 10
        )),
        "{message}"
    );
}

#[test]
fn a_deleted_file_is_reported_as_missing() {
    let root = TempRoot::new("delete");
    let dir = saved(&root, 50);
    fs::remove_file(dir.join(OPTIMIZER_FILE)).unwrap();
    let message = load_error(&dir);
    assert_eq!(
        message,
        format!(
            "checkpoint {} is incomplete: optimizer.safetensors is missing",
            dir.display()
        )
    );
}

#[test]
fn a_folder_without_manifest_is_refused() {
    let root = TempRoot::new("no-manifest");
    let dir = saved(&root, 50);
    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    let message = load_error(&dir);
    assert_eq!(
        message,
        format!(
            "checkpoint {} has no manifest.json (an interrupted write?)",
            dir.display()
        )
    );
    let missing = root.0.join("step-000999");
    assert_eq!(
        load_error(&missing),
        format!("checkpoint {} does not exist", missing.display())
    );
}

#[test]
fn bad_manifests_are_refused() {
    let root = TempRoot::new("bad-manifest");
    let dir = saved(&root, 50);
    let path = dir.join(MANIFEST_FILE);
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();

    fs::write(&path, "{ not json").unwrap();
    assert!(load_error(&dir).contains("is corrupt: manifest.json is not valid JSON"));

    let mut future = manifest.clone();
    future["format_version"] = json!(2);
    fs::write(&path, future.to_string()).unwrap();
    assert!(load_error(&dir).contains("has format version 2; this build reads version 1"));

    let mut escaping = manifest.clone();
    let outside = json!({ "name": "../elsewhere", "bytes": 0, "sha256": "" });
    escaping["files"].as_array_mut().unwrap().push(outside);
    fs::write(&path, escaping.to_string()).unwrap();
    assert!(load_error(&dir).contains("manifest.json lists `../elsewhere`, not a file name"));

    let mut partial = manifest;
    partial["files"].as_array_mut().unwrap().remove(1);
    fs::write(&path, partial.to_string()).unwrap();
    assert!(
        load_error(&dir).contains("is corrupt: manifest.json does not list optimizer.safetensors")
    );
}

#[test]
fn latest_picks_the_highest_complete_step() {
    let root = TempRoot::new("latest");
    assert_eq!(latest(&root.0).unwrap(), None);
    assert_eq!(latest(&root.0.join("absent")).unwrap(), None);
    saved(&root, 50);
    let newest = saved(&root, 100);
    // An interrupted write: a temporary folder, even with a manifest, and a folder without one.
    let temporary = root.0.join(".step-000150.tmp-1");
    fs::create_dir(&temporary).unwrap();
    fs::write(temporary.join(MANIFEST_FILE), "{}").unwrap();
    fs::create_dir(step_dir(&root.0, 200)).unwrap();
    fs::write(step_dir(&root.0, 200).join(WEIGHTS_FILE), "partial").unwrap();
    fs::create_dir(root.0.join("step-x")).unwrap();
    assert_eq!(latest(&root.0).unwrap(), Some(newest));
}

#[test]
fn saving_the_same_step_twice_replaces_it() {
    let root = TempRoot::new("replace");
    let dir = step_dir(&root.0, 50);
    save(&dir, &sample(50)).unwrap();
    let mut second = sample(51);
    second.step = 50;
    second.weights.truncate(1);
    save(&dir, &second).unwrap();
    let loaded = load(&dir).unwrap();
    assert_same_tensors(&loaded.weights, &second.weights);
    assert_eq!(loaded.state, second.state);
    // No temporary or moved-aside folder is left beside it.
    let names: Vec<String> = fs::read_dir(&root.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["step-000050"]);
}

#[test]
fn unsavable_checkpoints_leave_nothing_behind() {
    let root = TempRoot::new("unsavable");
    let mut checkpoint = sample(3);
    checkpoint
        .optimizer
        .push(("step".to_string(), Tensor::from(1i64)));
    let dir = step_dir(&root.0, 3);
    let message = save(&dir, &checkpoint).unwrap_err().to_string();
    assert!(
        message.contains("optimizer.safetensors: tensor name `step` appears twice"),
        "{message}"
    );
    assert_eq!(fs::read_dir(&root.0).unwrap().count(), 0);
}

#[test]
fn step_dirs_are_zero_padded() {
    assert_eq!(
        step_dir(Path::new("runs/x"), 50),
        Path::new("runs/x/step-000050")
    );
    assert_eq!(
        step_dir(Path::new("r"), 1_234_567),
        Path::new("r/step-1234567")
    );
    assert_eq!(parse_step("step-000050"), Some(50));
    assert_eq!(parse_step("step-+5"), None);
    assert_eq!(parse_step(".step-000150.tmp-1"), None);
}

#[test]
fn a_checkpoint_with_a_config_is_a_hugging_face_folder() {
    use crate::model::{Heads, ModelConfig, Transformer};
    let root = TempRoot::new("hf");
    let config = ModelConfig::tiny();
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 11).unwrap();
    let mut weights: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    weights.sort_by(|a, b| a.0.cmp(&b.0));
    let checkpoint = Checkpoint {
        config: Some(crate::hf::config_json(model.config(), None)),
        lagged: Vec::new(),
        weights,
        ..sample(4)
    };
    let dir = step_dir(&root.0, 4);
    save(&dir, &checkpoint).unwrap();

    let loaded = load(&dir).unwrap();
    assert_eq!(loaded.config, checkpoint.config);
    assert_same_tensors(&loaded.weights, &checkpoint.weights);
    // The same folder loads as a Hugging Face model, with the same weights.
    let (hf_vs, _) = crate::hf::load_model(&dir, Heads::POLICY, tch::Device::Cpu).unwrap();
    for (name, tensor) in &checkpoint.weights {
        assert!(hf_vs.variables()[name].equal(tensor), "{name}");
    }
    // The weights carry the metadata transformers checks.
    let bytes = fs::read(dir.join(WEIGHTS_FILE)).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    assert_eq!(header["__metadata__"]["format"], "pt");

    // config.json is covered by the manifest like every other file.
    let path = dir.join(CONFIG_FILE);
    let mut text = fs::read(&path).unwrap();
    let at = text.len() / 2;
    text[at] ^= 0x01;
    fs::write(&path, &text).unwrap();
    let message = load_error(&dir);
    assert!(
        message.contains("is corrupt: config.json has SHA-256"),
        "{message}"
    );
    // Without a config the folder has no config.json, as before.
    let plain = saved(&root, 5);
    assert!(!plain.join(CONFIG_FILE).exists());
    assert!(load(&plain).unwrap().config.is_none());
}

/// `root/<role>/step-N`, saved.
fn saved_role(root: &TempRoot, role: &str, step: u64) -> PathBuf {
    let dir = step_dir(&root.0.join(role), step);
    save(&dir, &sample(step)).unwrap();
    dir
}

fn roles(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| name.to_string()).collect()
}

#[test]
fn a_step_commits_once_every_role_is_in_place() {
    let root = TempRoot::new("commit");
    let both = roles(&["policy", "critic"]);
    saved_role(&root, "policy", 2);
    // The first writer sees the other role missing and leaves the step uncommitted.
    assert!(!commit(&root.0, 2, &both).unwrap());
    assert!(!marker_path(&root.0, 2).exists());
    saved_role(&root, "critic", 2);
    assert!(commit(&root.0, 2, &both).unwrap());
    let marker: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(marker_path(&root.0, 2)).unwrap()).unwrap();
    assert_eq!(marker, json!({"step": 2, "roles": ["critic", "policy"]}));
    // Committing again (a second writer that also saw both) leaves the same marker, no debris.
    assert!(commit(&root.0, 2, &both).unwrap());
    let names: Vec<String> = fs::read_dir(&root.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut names = names;
    names.sort();
    assert_eq!(names, ["critic", "policy", "step-000002.complete"]);
}

#[test]
fn resume_takes_the_newest_step_every_role_completed() {
    let root = TempRoot::new("newest");
    let both = roles(&["critic", "policy"]);
    for step in [1, 2, 3, 4] {
        saved_role(&root, "policy", step);
        saved_role(&root, "critic", step);
        commit(&root.0, step, &both).unwrap();
    }
    // Step 5: killed between the two roles' writes (policy in place, no marker).
    saved_role(&root, "policy", 5);
    // Step 4: committed, but a bit of critic's weights flipped since.
    let weights = step_dir(&root.0.join("critic"), 4).join(WEIGHTS_FILE);
    let mut bytes = fs::read(&weights).unwrap();
    bytes[100] ^= 0x04;
    fs::write(&weights, bytes).unwrap();
    // Step 3: committed, then critic's manifest lost.
    fs::remove_file(step_dir(&root.0.join("critic"), 3).join(MANIFEST_FILE)).unwrap();

    let (committed, passed) = newest_committed(&root.0, &both).unwrap();
    let committed = committed.unwrap();
    assert_eq!(committed.step, 2);
    assert_eq!(
        committed.dirs,
        [
            ("critic".to_string(), step_dir(&root.0.join("critic"), 2)),
            ("policy".to_string(), step_dir(&root.0.join("policy"), 2)),
        ]
    );
    assert_eq!(committed.state, sample(2).state);
    let said: Vec<String> = passed.iter().map(ToString::to_string).collect();
    assert_eq!(said.len(), 3, "{said:#?}");
    assert!(
        said[0].starts_with("step 5 is incomplete: it has no ")
            && said[0].contains("step-000005.complete")
            && said[0].contains("`policy` written, `critic` not"),
        "{}",
        said[0]
    );
    assert!(
        said[1].starts_with("step 4 is damaged: checkpoint ")
            && said[1].contains("is corrupt: model.safetensors has SHA-256"),
        "{}",
        said[1]
    );
    assert!(
        said[2].starts_with("step 3 is incomplete: ") && said[2].ends_with("has no manifest.json"),
        "{}",
        said[2]
    );
    // A garbled marker is no commit.
    fs::write(marker_path(&root.0, 2), "garbage").unwrap();
    let (committed, passed) = newest_committed(&root.0, &both).unwrap();
    assert_eq!(committed.unwrap().step, 1);
    assert!(
        passed[3]
            .to_string()
            .starts_with("step 2 has a damaged marker")
    );
    // Nothing at all: nothing to resume, nothing passed over.
    let empty = TempRoot::new("newest-empty");
    let (committed, passed) = newest_committed(&empty.0, &both).unwrap();
    assert!(committed.is_none() && passed.is_empty());
}

#[test]
fn leftovers_of_killed_writes_are_cleaned() {
    let root = TempRoot::new("leftovers");
    let both = roles(&["critic", "policy"]);
    saved_role(&root, "policy", 1);
    saved_role(&root, "critic", 1);
    commit(&root.0, 1, &both).unwrap();
    // A write killed half-way, a commit killed before its rename, and a replacement of step 2
    // killed between moving the old folder aside and renaming the new one in.
    let temporary = root.0.join("critic/.step-000002.tmp-4242");
    fs::create_dir_all(&temporary).unwrap();
    fs::write(temporary.join(WEIGHTS_FILE), "partial").unwrap();
    let marker_tmp = root.0.join(".step-000002.complete.tmp-4242-0");
    fs::write(&marker_tmp, "{").unwrap();
    let policy_2 = saved_role(&root, "policy", 2);
    let aside = root.0.join("policy/.step-000002.old-4242");
    fs::rename(&policy_2, &aside).unwrap();
    // The moved-aside copy of a replacement that did complete is stale.
    let policy_1_old = root.0.join("policy/.step-000001.old-4242");
    fs::create_dir(&policy_1_old).unwrap();
    // Not ours: left alone.
    fs::write(root.0.join("policy/.notes"), "mine").unwrap();

    let done = clean_leftovers(&root.0, &both).unwrap();
    assert_eq!(done.len(), 4, "{done:#?}");
    assert!(!temporary.exists() && !marker_tmp.exists() && !aside.exists());
    assert!(!policy_1_old.exists());
    assert!(root.0.join("policy/.notes").exists());
    assert_eq!(
        load(&policy_2).unwrap().step,
        2,
        "the moved-aside folder is back"
    );
    assert!(done.iter().any(|line| line.starts_with("restored ")));
    assert!(clean_leftovers(&root.0, &both).unwrap().is_empty());
}

#[test]
fn verify_checks_every_file_without_loading() {
    let root = TempRoot::new("verify");
    let dir = saved(&root, 7);
    assert_eq!(verify(&dir).unwrap(), (7, sample(7).state));
    let path = dir.join(OPTIMIZER_FILE);
    let mut bytes = fs::read(&path).unwrap();
    bytes[0] ^= 0x80;
    fs::write(&path, bytes).unwrap();
    assert!(
        verify(&dir)
            .unwrap_err()
            .to_string()
            .contains("optimizer.safetensors")
    );
    assert!(matches!(
        require_manifest(&root.0.join("absent")),
        Err(CheckpointError::NotFound { .. })
    ));
}
