//! `std.hardware`: accelerators, as `Device` values for a `cluster`'s `device` field, and
//! the usual link bandwidths for its `intra_bandwidth` / `inter_bandwidth` fields.
//!
//! `memory` is the HBM capacity (NVIDIA's "80GB" is 80 GiB of which the driver reserves a
//! little: about 79.6 GiB is usable); `flops` the dense (no sparsity) BF16 tensor-core peak;
//! `bandwidth` the HBM bandwidth. All are the SXM parts' published figures; real kernels
//! reach a fraction of the peak, which the planner accounts for, not these numbers.

/// NVIDIA H100 SXM5 80 GB: 80 GiB HBM3, 989 TFLOP/s dense BF16, 3.35 TB/s.
pub let h100_80g = device(memory: 80GiB, flops: 989TFLOPS, bandwidth: 3.35TBps)

/// NVIDIA H200 SXM 141 GB: 141 GiB HBM3e, 989 TFLOP/s dense BF16 (the H100's compute),
/// 4.8 TB/s.
pub let h200 = device(memory: 141GiB, flops: 989TFLOPS, bandwidth: 4.8TBps)

/// NVIDIA A100 SXM4 80 GB: 80 GiB HBM2e, 312 TFLOP/s dense BF16, 2.039 TB/s.
pub let a100_80g = device(memory: 80GiB, flops: 312TFLOPS, bandwidth: 2.039TBps)

/// NVIDIA A100 SXM4 40 GB: 40 GiB HBM2, 312 TFLOP/s dense BF16, 1.555 TB/s.
pub let a100_40g = device(memory: 40GiB, flops: 312TFLOPS, bandwidth: 1.555TBps)

/// NVLink 3 (A100), per GPU and direction: 300 GB/s (600 GB/s both ways).
pub let nvlink3 = 300GBps

/// NVLink 4 (H100, H200), per GPU and direction: 450 GB/s (900 GB/s both ways).
pub let nvlink4 = 450GBps

/// One InfiniBand HDR port: 200 Gb/s (25 GB/s).
pub let ib_hdr = 200Gbps

/// One InfiniBand NDR port: 400 Gb/s (50 GB/s).
pub let ib_ndr = 400Gbps
