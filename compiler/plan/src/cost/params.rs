//! The cost model's parameters. Defaults are typical figures for large-model training on
//! NVIDIA GPUs; `rlc plan --calibrate` fits them to a measured run.

use serde::{Deserialize, Serialize};

/// Numbers the cost model cannot read off the hardware description.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostParams {
    /// Fraction of the peak FLOP/s that large dense matrix products reach.
    pub compute_efficiency: f64,
    /// The hidden size at which matrix products reach half of `compute_efficiency`: small
    /// matrices keep a device's units less busy (efficiency × h / (h + this)).
    pub matmul_half_width: f64,
    /// Fraction of the memory bandwidth that memory-bound kernels (decode, optimizer) reach.
    pub bandwidth_efficiency: f64,
    /// Fraction of a link's bandwidth that collectives reach.
    pub link_efficiency: f64,
    /// α of the α–β model: seconds per message inside a node and between nodes.
    pub intra_latency: f64,
    pub inter_latency: f64,
    /// Bytes/s between a device and its host (PCIe), for offload and onload.
    pub host_bandwidth: f64,
    /// Bytes/s per device to checkpoint storage.
    pub checkpoint_bandwidth: f64,
    /// Fixed seconds per transformer layer per forward call (kernel launches, dispatch): what
    /// dominates small models and single-token decode steps.
    pub layer_overhead: f64,
    /// Fixed seconds per operation of the step (scheduling, a kernel's launch, sampling prompts).
    pub op_overhead: f64,
}

impl Default for CostParams {
    fn default() -> Self {
        CostParams {
            compute_efficiency: 0.5,
            matmul_half_width: 256.0,
            bandwidth_efficiency: 0.7,
            link_efficiency: 0.8,
            intra_latency: 5e-6,
            inter_latency: 15e-6,
            host_bandwidth: 25e9,
            checkpoint_bandwidth: 2e9,
            layer_overhead: 40e-6,
            op_overhead: 200e-6,
        }
    }
}

impl CostParams {
    /// Defaults for CPU clusters (`rlc run`'s thread ranks on libtorch): the same efficiencies,
    /// but the fixed costs of an interpreter that dispatches every tensor operation from the
    /// host — about a millisecond per layer call (a two-layer decode step costs ~1 ms of fixed
    /// overhead in the runtime's benchmark) and ~10 ms per op of the step (kernels through the
    /// reference evaluator, batch gathers between ranks).
    pub fn cpu() -> CostParams {
        CostParams {
            layer_overhead: 1e-3,
            op_overhead: 10e-3,
            ..CostParams::default()
        }
    }

    /// [`CostParams::cpu`] when every cluster is a CPU one, else the GPU defaults.
    pub fn defaults(all_cpu: bool) -> CostParams {
        if all_cpu {
            CostParams::cpu()
        } else {
            CostParams::default()
        }
    }

    /// The same model on a device `factor` times slower: efficiencies divided, fixed overheads
    /// multiplied (links and host transfers are left as they are).
    pub fn slowed(&self, factor: f64) -> CostParams {
        CostParams {
            compute_efficiency: self.compute_efficiency / factor,
            bandwidth_efficiency: self.bandwidth_efficiency / factor,
            layer_overhead: self.layer_overhead * factor,
            op_overhead: self.op_overhead * factor,
            ..self.clone()
        }
    }

    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("parameters serialise");
        s.push('\n');
        s
    }

    pub fn from_json(text: &str) -> Result<CostParams, String> {
        let p: CostParams = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let positive = [
            ("compute_efficiency", p.compute_efficiency),
            ("bandwidth_efficiency", p.bandwidth_efficiency),
            ("link_efficiency", p.link_efficiency),
            ("host_bandwidth", p.host_bandwidth),
            ("checkpoint_bandwidth", p.checkpoint_bandwidth),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("`{name}` must be a positive number, not {v}"));
            }
        }
        for (name, v) in [
            ("matmul_half_width", p.matmul_half_width),
            ("intra_latency", p.intra_latency),
            ("inter_latency", p.inter_latency),
            ("layer_overhead", p.layer_overhead),
            ("op_overhead", p.op_overhead),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("`{name}` must be a number ≥ 0, not {v}"));
            }
        }
        Ok(p)
    }
}

/// Measured step times of a run: `seconds` of every `metrics.jsonl` line.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRun {
    pub step_seconds: Vec<f64>,
}

impl MeasuredRun {
    /// Reads `metrics.jsonl` text: one JSON object per line with a `seconds` field.
    pub fn parse(text: &str) -> Result<MeasuredRun, String> {
        let mut step_seconds = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: not JSON ({e})", i + 1))?;
            let seconds = value
                .get("seconds")
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| format!("line {}: no number `seconds`", i + 1))?;
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(format!("line {}: `seconds` is {seconds}", i + 1));
            }
            step_seconds.push(seconds);
        }
        if step_seconds.is_empty() {
            return Err("no steps".into());
        }
        Ok(MeasuredRun { step_seconds })
    }

    /// The typical step: the median, leaving out the first step (warm-up: allocation, lazy
    /// initialisation) when there are others.
    pub fn typical_step(&self) -> f64 {
        let mut s: Vec<f64> = if self.step_seconds.len() > 1 {
            self.step_seconds[1..].to_vec()
        } else {
            self.step_seconds.clone()
        };
        s.sort_by(f64::total_cmp);
        let n = s.len();
        if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        }
    }
}

/// Fits the device speed so that `predict` matches the measured step. One run gives one
/// equation (its step time), so one number is fitted: how much slower (or faster) the device
/// runs than the model assumes. `predict` is the predicted step time under given parameters;
/// it grows with the slow-down, so a bisection on the factor finds it.
pub fn calibrate(
    base: &CostParams,
    measured: f64,
    predict: impl Fn(&CostParams) -> f64,
) -> Result<(CostParams, f64), String> {
    let at = |k: f64| predict(&base.slowed(k));
    let (mut lo, mut hi) = (1e-4f64, 1e4f64);
    if !(at(lo) <= measured && measured <= at(hi)) {
        return Err(format!(
            "a measured step of {measured:.3} s is outside what the model can fit ({:.3e} s to {:.3e} s)",
            at(lo),
            at(hi)
        ));
    }
    // Bisection in log space: the prediction is monotone in the slow-down factor.
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if at(mid) < measured {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let k = (lo * hi).sqrt();
    Ok((base.slowed(k), k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typical_step_skips_warm_up() {
        let run = MeasuredRun::parse(
            "{\"step\":0,\"seconds\":5.0}\n{\"step\":1,\"seconds\":1.0}\n{\"step\":2,\"seconds\":3.0}\n",
        )
        .unwrap();
        assert_eq!(run.typical_step(), 2.0);
        assert!(MeasuredRun::parse("{\"step\":0}").is_err());
        assert!(MeasuredRun::parse("").is_err());
    }

    #[test]
    fn calibration_recovers_a_slow_down() {
        let base = CostParams::default();
        let predict = |p: &CostParams| 2.0 / p.compute_efficiency + 1000.0 * p.op_overhead;
        let truth = predict(&base.slowed(3.0));
        let (fitted, k) = calibrate(&base, truth, predict).unwrap();
        assert!((k - 3.0).abs() < 1e-6, "{k}");
        assert!((predict(&fitted) - truth).abs() < 1e-9);
    }

    #[test]
    fn parameters_round_trip_and_are_checked() {
        let p = CostParams::default();
        assert_eq!(CostParams::from_json(&p.to_json()).unwrap(), p);
        let bad = p
            .to_json()
            .replace("\"compute_efficiency\": 0.5", "\"compute_efficiency\": 0.0");
        assert!(CostParams::from_json(&bad).is_err());
    }
}
