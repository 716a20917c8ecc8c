//! CPU and heap profiles of the running process in pprof's format, for `/debug/pprof` (Go's `net/http/pprof` over
//! `runtime/pprof`, which the kubelet serves with `enableProfilingHandler`). The profiles are gzip-compressed
//! `profile.proto` as Go writes them, so `go tool pprof` and every pprof viewer read them.
//!
//! - [`cpu::profile`]: sampled on `SIGPROF` at 100 Hz for the asked duration; one at a time
//!   ([`ProfileError::CpuInUse`], Go's "cpu profiling already in use").
//!
//! Both are symbolized in the process from the binary's symbol table (the release build keeps it), and the symbol
//! cache that fills is cleared afterwards, so a profile costs no memory once it is answered.
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

/// Drops the symbol cache a profile filled and gives the freed memory back to the system (glibc keeps freed
/// memory in its arenas otherwise), so that an answered profile leaves the process as small as before.
pub(crate) fn release_symbols() {
    backtrace::clear_symbol_cache();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of glibc's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Symbols of the addresses of one profile, and whether one is the signal trampoline.
#[derive(Default)]
pub(crate) struct Symbols {
    frames: std::collections::HashMap<usize, Vec<proto::Frame>>,
}

impl Symbols {
    fn frames(&mut self, ip: usize) -> &Vec<proto::Frame> {
        self.frames.entry(ip).or_insert_with(|| cpu::resolve(ip))
    }

    /// The CPU sampler's signal handler: a sample's own frames end one frame (the kernel's trampoline) later.
    pub(crate) fn is_handler(&mut self, ip: usize) -> bool {
        self.frames(ip).iter().any(|f| f.name.ends_with("on_sigprof"))
    }

    /// The profile's location for `ip`.
    pub(crate) fn location(&mut self, b: &mut proto::Builder, ip: usize) -> u64 {
        let frames = self.frames(ip).clone();
        b.location(ip as u64, &frames)
    }
}

#[cfg(test)]
mod tests;
