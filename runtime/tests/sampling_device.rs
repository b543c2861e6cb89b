//! Sampling on a CUDA device draws what the CPU draws (issue #28 item 1): the Philox table computed
//! there by tensor operations equals the CPU's scalar one bit for bit, and a sampled generation
//! (whose stop flag is read only every few tokens there) gives the CPU's tokens, in one turn or
//! in multi-turn episodes against an environment. Without a CUDA
//! device these tests pass saying they were skipped, unless `RLC_REQUIRE_GPU` is set
//! (scripts/gpu-check.sh sets it): then a missing GPU is a failure.

use rlc_runtime::generate::{
    Environment, GenerateConfig, GenerateError, Reply, SamplingConfig, TurnsConfig, generate,
    generate_turns, left_pad, philox,
};
use rlc_runtime::model::{Heads, ModelConfig, Transformer};
use rlc_runtime::tch::{Device, Kind, Tensor, nn};

/// The CUDA device, or `None` (skip) where there is none and none is required.
fn cuda() -> Option<Device> {
    match rlc_runtime::device::cuda_devices() {
        Ok(_) => Some(Device::Cuda(0)),
        Err(why) if std::env::var_os("RLC_REQUIRE_GPU").is_some() => {
            panic!("RLC_REQUIRE_GPU is set but CUDA is not usable: {why}")
        }
        Err(why) => {
            eprintln!("skipped: no CUDA device ({why})");
            None
        }
    }
}

#[test]
fn the_philox_table_on_cuda_equals_the_cpus_bit_for_bit() {
    let Some(device) = cuda() else { return };
    // 4 096 rows across the 2³² boundary of the counter's first word, 64 positions.
    let rows = (1i64 << 32) - 2048..(1i64 << 32) + 2048;
    for seed in [0u64, 7, 0xdead_beef_0bad_cafe] {
        let cpu = philox::uniforms(seed, rows.clone(), 0..64, Device::Cpu);
        let gpu = philox::uniforms(seed, rows.clone(), 0..64, device);
        assert_eq!(gpu.device(), device);
        let bits = |t: &Tensor| t.to_device(Device::Cpu).view_dtype(Kind::Int64);
        let differing = bits(&cpu).ne_tensor(&bits(&gpu)).sum(Kind::Int64);
        assert_eq!(differing.int64_value(&[]), 0, "seed {seed:x}");
    }
    eprintln!("the CUDA Philox table equals the CPU's for 3 × 4096 × 64 numbers");
}

/// The tiny policy, the same weights on any device.
fn model(device: Device) -> (nn::VarStore, Transformer) {
    let vs = nn::VarStore::new(device);
    let m = Transformer::new(&vs.root(), &ModelConfig::tiny(), Heads::POLICY, 3).unwrap();
    (vs, m)
}

fn rows(t: &Tensor) -> Vec<Vec<i64>> {
    Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64).to_device(Device::Cpu)).unwrap()
}

#[test]
fn a_sampled_generation_on_cuda_gives_the_cpus_tokens() {
    let Some(device) = cuda() else { return };
    let ((_cpu_vs, on_cpu), (_gpu_vs, on_gpu)) = (model(Device::Cpu), model(device));
    let prompts: Vec<Vec<i64>> = (0..16)
        .map(|i| vec![1 + i % 7, 2 + i % 5, 3 + i % 11])
        .collect();
    let (ids, mask) = left_pad(&prompts, 0);
    let config = GenerateConfig {
        max_new: 24,
        samples_per_prompt: 4,
        eos_token_id: Some(5),
        pad_token_id: 0,
        sampling: SamplingConfig {
            temperature: 1.0,
            top_k: Some(20),
            top_p: Some(0.95),
        },
        seed: 11,
        rows_of: Some((64, 256)),
        ..GenerateConfig::default()
    };
    let cpu = generate(&on_cpu, &ids, &mask, &config).unwrap();
    let gpu = generate(
        &on_gpu,
        &ids.to_device(device),
        &mask.to_device(device),
        &config,
    )
    .unwrap();
    let (a, b) = (rows(&cpu.response_ids), rows(&gpu.response_ids));
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    eprintln!(
        "CPU and CUDA ({}) responses: {} × {} and {} × {}, {differing} of {} rows differ",
        decoding(),
        a.len(),
        a[0].len(),
        b.len(),
        b[0].len(),
        a.len()
    );
    assert_eq!(a, b, "CUDA sampled other tokens than the CPU");
    assert_eq!(rows(&cpu.response_mask), rows(&gpu.response_mask));
}

/// How decode steps ran on CUDA.
fn decoding() -> &'static str {
    if rlc_runtime::cuda_graph::available().expect("the CUDA graph library loads") {
        "decode steps as captured graphs"
    } else {
        "eager decode"
    }
}

/// An environment whose answers depend on what each row sampled: it records every call, ends
/// an episode whose turn sampled token 3, and otherwise observes up to two tokens derived from
/// the response.
#[derive(Default)]
struct Echo {
    calls: Vec<(i64, Vec<i64>, Vec<Vec<i64>>)>,
}

impl Environment for Echo {
    fn step(
        &mut self,
        turn: i64,
        rows: &[i64],
        responses: &[Vec<i64>],
    ) -> Result<Vec<Reply>, GenerateError> {
        self.calls.push((turn, rows.to_vec(), responses.to_vec()));
        Ok(rows
            .iter()
            .zip(responses)
            .map(|(&row, response)| {
                if response.contains(&3) {
                    return Reply::Done;
                }
                let sum: i64 = response.iter().sum();
                let tokens = [10 + sum % 30, 40 + row % 8];
                Reply::Observe(tokens[..((row + turn) % 3) as usize].to_vec())
            })
            .collect())
    }
}

#[test]
fn multi_turn_episodes_on_cuda_are_the_cpus() {
    let Some(device) = cuda() else { return };
    let ((_cpu_vs, on_cpu), (_gpu_vs, on_gpu)) = (model(Device::Cpu), model(device));
    let prompts: Vec<Vec<i64>> = (0..8).map(|i| vec![1 + i % 7, 2 + i % 5]).collect();
    let (ids, mask) = left_pad(&prompts, 0);
    let turns = TurnsConfig {
        max_turns: 3,
        max_obs: 2,
    };
    let config = GenerateConfig {
        max_new: 12,
        samples_per_prompt: 4,
        eos_token_id: Some(5),
        pad_token_id: 0,
        sampling: SamplingConfig::at_temperature(1.0),
        seed: 17,
        ..GenerateConfig::default()
    };
    let (mut cpu_env, mut gpu_env) = (Echo::default(), Echo::default());
    let cpu = generate_turns(&on_cpu, &ids, &mask, &config, turns, &mut cpu_env).unwrap();
    let gpu = generate_turns(
        &on_gpu,
        &ids.to_device(device),
        &mask.to_device(device),
        &config,
        turns,
        &mut gpu_env,
    )
    .unwrap();
    let (a, b) = (rows(&cpu.response_ids), rows(&gpu.response_ids));
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count();
    eprintln!(
        "CPU and CUDA ({}) episodes: {} rows of {} positions, {} environment calls, {differing} rows differ",
        decoding(),
        a.len(),
        a[0].len(),
        cpu_env.calls.len(),
    );
    assert_eq!(cpu_env.calls, gpu_env.calls, "what the environment saw");
    assert_eq!(a, b, "CUDA sampled other episodes than the CPU");
    for (name, x, y) in [
        ("attention", &cpu.attention, &gpu.attention),
        ("policy", &cpu.policy, &gpu.policy),
        ("turn", &cpu.turn, &gpu.turn),
        ("turns", &cpu.turns, &gpu.turns),
    ] {
        assert_eq!(rows(&x.view([1, -1])), rows(&y.view([1, -1])), "{name}");
    }
}
