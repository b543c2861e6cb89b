//! The cost model's parameters. Defaults are typical figures for large-model training on
//! NVIDIA GPUs; `rlc plan --calibrate` fits them to a measured run (`super::calibrate`).

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
    /// Defaults for CPU clusters (`rlc run`'s thread ranks on libtorch), fitted by hand to
    /// calibrated runs of the CPU examples (`docs/planner.md`): an interpreter that dispatches
    /// every tensor operation from the host pays ~0.7 ms per layer call and ~0.1 ms per op of
    /// the step (fused kernels, sampling, logging); in-process collectives between thread ranks
    /// cost ~0.25 ms a message (a rendezvous of threads, not a wire); and a CPU's matrix
    /// products reach their efficiency at far smaller sizes than a GPU's (the `cpu()` device's
    /// 50 GFLOP/s is what one core sustains on large ones).
    pub fn cpu() -> CostParams {
        CostParams {
            compute_efficiency: 1.0,
            matmul_half_width: 64.0,
            intra_latency: 250e-6,
            inter_latency: 750e-6,
            layer_overhead: 700e-6,
            op_overhead: 100e-6,
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

#[cfg(test)]
mod tests {
    use super::*;

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
