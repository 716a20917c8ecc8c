//! CPU and heap profiles of the running process in pprof's format, for `/debug/pprof` (Go's `net/http/pprof` over
//! `runtime/pprof`, which the kubelet serves with `enableProfilingHandler`). The profiles are gzip-compressed
//! `profile.proto` as Go writes them, so `go tool pprof` and every pprof viewer read them.
//!
//! - [`cpu::profile`]: sampled on `SIGPROF` at 100 Hz for the asked duration; one at a time
//!   ([`ProfileError::CpuInUse`], Go's "cpu profiling already in use").
//! - [`heap::profile`]: what [`heap::SamplingAlloc`], the binary's global allocator, sampled (Go's
//!   `MemProfileRate` of 512 KiB).

pub mod cpu;
pub mod heap;
pub mod proto;

/// Why a profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Another CPU profile is being taken.
    #[error("cpu profiling already in use")]
    CpuInUse,
    /// The sampler could not start or report.
    #[error("cpu profiler: {0}")]
    Cpu(String),
}

#[cfg(test)]
mod tests;
