//! Where a rank's models and tensors live: the CPU, or a CUDA device.
//!
//! `tch` links `libtorch_cpu.so` alone (the linker drops `libtorch_cuda.so`, which no symbol
//! of ours needs), and libtorch's CUDA back end registers itself only when its library is
//! loaded. So CUDA is opened on request: `libtorch_cuda.so` from the folder the running
//! `libtorch_cpu.so` came from, loaded once, globally, for the life of the process. Without
//! it, or without a device, the caller gets the reason and runs on the CPU.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use tch::Device;

/// The device a run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceRequest {
    /// The cluster's kind: CUDA for GPU clusters, the CPU for CPU clusters.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl std::str::FromStr for DeviceRequest {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            "cuda" | "gpu" => Ok(DeviceRequest::Cuda),
            other => Err(format!(
                "unknown device `{other}` (expected auto, cpu or cuda)"
            )),
        }
    }
}

/// The CUDA devices libtorch sees, loading its CUDA library first; the reason when none.
/// The answer is computed once per process.
pub fn cuda_devices() -> Result<usize, String> {
    static ANSWER: OnceLock<Result<usize, String>> = OnceLock::new();
    ANSWER.get_or_init(open_cuda).clone()
}

/// The device of rank `rank` under `request` (`gpu_cluster`: the plan's cluster has GPUs):
/// ranks share the visible CUDA devices round-robin. `Err`: why CUDA, asked for, is not there
/// (the caller runs on the CPU).
pub fn rank_device(request: DeviceRequest, gpu_cluster: bool, rank: u32) -> Result<Device, String> {
    if !wants_cuda(request, gpu_cluster) {
        return Ok(Device::Cpu);
    }
    cuda_devices().map(|n| Device::Cuda(rank as usize % n))
}

/// Whether ranks under `request` ask for CUDA devices (`gpu_cluster`: the plan's cluster has
/// GPUs), whether or not they get them.
pub fn wants_cuda(request: DeviceRequest, gpu_cluster: bool) -> bool {
    match request {
        DeviceRequest::Auto => gpu_cluster,
        DeviceRequest::Cpu => false,
        DeviceRequest::Cuda => true,
    }
}

fn open_cuda() -> Result<usize, String> {
    let dir = libtorch_dir().ok_or_else(|| {
        "cannot tell which folder libtorch_cpu.so was loaded from (/proc/self/maps)".to_string()
    })?;
    // libtorch's own list of libraries to load globally first (as `import torch` does); its
    // absence is not an error, the CUDA library below says what is missing.
    let _ = load_global(&dir.join("libtorch_global_deps.so"));
    load_global(&dir.join("libtorch_cuda.so"))?;
    let count = tch::Cuda::device_count();
    if count < 1 {
        return Err("libtorch's CUDA library loaded, but it sees no CUDA device".into());
    }
    Ok(count as usize)
}

/// Loads a library for the rest of the process, its symbols visible to later libraries.
fn load_global(path: &Path) -> Result<(), String> {
    crate::dylib::open(path, crate::dylib::Scope::Global)
        .map(|_| ())
        .map_err(|why| format!("cannot load {}: {why}", path.display()))
}

/// The folder of the `libtorch_cpu.so` this process runs with.
fn libtorch_dir() -> Option<PathBuf> {
    // No CUDA query before the CUDA library is loaded: libtorch caches the answer of its
    // first one (its CUDA hooks), so an early "no" would stick. libtorch_cpu.so is mapped
    // already: the binary needs it to start.
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .map(Path::new)
        .find(|p| p.file_name().is_some_and(|n| n == "libtorch_cpu.so"))
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!("cpu".parse(), Ok(DeviceRequest::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceRequest::Cuda));
        assert_eq!("auto".parse(), Ok(DeviceRequest::Auto));
        assert!("tpu".parse::<DeviceRequest>().unwrap_err().contains("tpu"));
    }

    #[test]
    fn cpu_clusters_stay_on_the_cpu() {
        assert_eq!(rank_device(DeviceRequest::Auto, false, 3), Ok(Device::Cpu));
        assert_eq!(rank_device(DeviceRequest::Cpu, true, 0), Ok(Device::Cpu));
    }

    #[test]
    fn libtorch_is_found_in_the_process() {
        let dir = libtorch_dir().expect("libtorch_cpu.so is mapped");
        assert!(dir.join("libtorch_cpu.so").exists(), "{}", dir.display());
    }

    /// CUDA asked for gives a device, or the CPU with a reason — never a panic.
    #[test]
    fn cuda_requests_fall_back_with_a_reason() {
        match (cuda_devices(), rank_device(DeviceRequest::Cuda, false, 5)) {
            (Ok(n), Ok(Device::Cuda(i))) => assert_eq!(i, 5 % n),
            (Err(why), Err(reason)) => {
                assert_eq!(why, reason);
                assert!(!why.is_empty());
            }
            other => panic!("inconsistent answers: {other:?}"),
        }
    }
}
