//! Keeps rkubelet's own machine code out of its resident set unless it runs.
//!
//! Of an idle node's 17 MiB RSS, 12 MiB were pages of the binary's text mapping: the kernel maps file pages around
//! every fault (fault-around, large page-cache folios), so code that ran once, or never, stays counted. At start-up
//! [`map_code_on_demand`] advises the kernel that the text is read at random (`MADV_RANDOM`: no fault-around, no
//! read-ahead) and drops what is mapped so far (`MADV_DONTNEED`: the text is a clean, private file mapping, so its
//! pages are simply unmapped and faulted in again from the page cache when executed). [`drop_startup_code`] drops
//! them once more after start-up, so the code that only ran then (flag and config parsing, bootstrap, registration)
//! leaves the resident set too. Only executable mappings of the binary itself are touched: never data, relocated
//! read-only data or anything writable. Linux only; a failure only costs memory, so it is logged at debug and
//! ignored.
//!
//! The heap likewise: glibc keeps what was freed in its arenas (one per thread up to eight per core), so a burst
//! (a hundred pods starting, their status patches and events in flight) left its peak resident for good — 40% of
//! the anonymous memory at 100 steady pods. [`limit_arenas`] caps the arenas at two before any thread starts, and
//! [`return_free_heap`], called every [`TRIM_EVERY`] by `app`, gives free heap pages back to the kernel
//! (`malloc_trim`), as Go's background scavenger does for the upstream kubelet.

use std::path::PathBuf;

/// Executable mappings of this binary: (start, length).
fn text_mappings() -> Vec<(usize, usize)> {
    let exe: Option<PathBuf> = std::fs::read_link("/proc/self/exe").ok();
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return vec![] };
    let mut out = vec![];
    for line in maps.lines() {
        // 558d66990000-558d67823000 r-xp 0043e000 fe:00 5499315    /path/to/rkubelet
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let path = f.nth(3).map(PathBuf::from);
        if perms != "r-xp" || path.is_none() || path != exe {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else { continue };
        if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            && b > a
        {
            out.push((a, b - a));
        }
    }
    out
}

fn advise(mappings: &[(usize, usize)], advice: libc::c_int) {
    for &(start, len) in mappings {
        // SAFETY: the range is a whole, clean, private, read-only file mapping of this executable (its text):
        // MADV_RANDOM only changes fault-in behaviour, and MADV_DONTNEED on such a mapping unmaps pages that are
        // faulted back unchanged from the file on the next execution. No data mapping is ever passed.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        if r != 0 {
            tracing::debug!(advice, error = %std::io::Error::last_os_error(), "madvise of the text mapping failed");
        }
    }
}

/// At start-up: code pages are mapped one by one as they run.
pub fn map_code_on_demand() {
    let text = text_mappings();
    advise(&text, libc::MADV_RANDOM);
    advise(&text, libc::MADV_DONTNEED);
}

/// After start-up: unmaps the code that ran only then.
pub fn drop_startup_code() {
    advise(&text_mappings(), libc::MADV_DONTNEED);
}

/// How often free heap pages go back to the kernel.
pub const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(30);

/// At start-up, before any other thread: at most two malloc arenas (a 2-core node's kubelet gains nothing from more,
/// and each keeps its own free memory).
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocator settings; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Gives the free pages of the heap back to the kernel (well under a millisecond for rkubelet's heap).
pub fn return_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_text_of_this_executable_and_survives_dropping_it() {
        let maps = text_mappings();
        assert!(!maps.is_empty(), "the test binary has an executable mapping");
        map_code_on_demand();
        drop_startup_code();
        // Still running: the code came back from the page cache.
        assert_eq!(text_mappings(), maps);
    }

    #[test]
    fn freed_heap_goes_back_to_the_kernel() {
        fn anon_kib() -> u64 {
            let s = std::fs::read_to_string("/proc/self/status").unwrap();
            s.lines().find_map(|l| l.strip_prefix("RssAnon:")).unwrap().trim().trim_end_matches(" kB").parse().unwrap()
        }
        // 64 MiB in blocks small enough for the heap (below the mmap threshold), touched, then freed but the last.
        let mut blocks: Vec<Vec<u8>> = (0..2048).map(|i| vec![i as u8; 32 * 1024]).collect();
        let keep = blocks.pop();
        let before = anon_kib();
        drop(blocks);
        return_free_heap();
        let after = anon_kib();
        assert!(after + 32 * 1024 < before, "64 MiB freed: {before} KiB resident before the trim, {after} KiB after");
        drop(keep);
    }
}
