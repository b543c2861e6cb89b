//! CUDA C for NVRTC (to come).
