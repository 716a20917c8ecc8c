//! The heap profile (Go's `MemProfileRate` sampling): [`SamplingAlloc`] wraps the system allocator and records
//! one allocation per 512 KiB allocated on average (an exponential draw per thread, as Go's `nextSample`), with its
//! stack; [`profile`] writes what was sampled as Go's heap profile: `alloc_objects`, `alloc_space`,
//! `inuse_objects`, `inuse_space`, each scaled up by Go's `scaleHeapSample`.
//!
//! Contract: the binary installs [`SamplingAlloc`] as its `#[global_allocator]`; without it [`profile`] answers an
//! empty profile. The allocation path costs a thread-local subtraction; a sampled allocation (rare) takes a stack
//! walk and a short lock. A sampled block is aligned to [`MARK`], so a free looks a pointer up only when it is so
//! aligned. Nothing here allocates while holding the lock, and allocations made while sampling are not sampled.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::proto::Builder;

/// Go's default `MemProfileRate`: one sample per this many bytes on average.
pub const RATE: u64 = 512 * 1024;
/// Alignment given to sampled blocks.
const MARK: usize = 256;
const DEPTH: usize = 24;
const STACKS: usize = 1024;
const LIVE: usize = 4096;

/// The system allocator with heap sampling.
#[derive(Debug, Default)]
pub struct SamplingAlloc;

#[derive(Clone, Copy)]
struct Stack {
    ips: [usize; DEPTH],
    depth: u8,
    allocs: u64,
    alloc_bytes: u64,
    frees: u64,
    free_bytes: u64,
}

impl Stack {
    const EMPTY: Stack = Stack { ips: [0; DEPTH], depth: 0, allocs: 0, alloc_bytes: 0, frees: 0, free_bytes: 0 };
}

#[derive(Clone, Copy)]
struct Block {
    ptr: usize,
    size: usize,
    stack: u16,
}

struct Tables {
    stacks: [Stack; STACKS],
    used: usize,
    live: [Block; LIVE],
}

static TABLES: Mutex<Tables> =
    Mutex::new(Tables { stacks: [Stack::EMPTY; STACKS], used: 0, live: [Block { ptr: 0, size: 0, stack: 0 }; LIVE] });
/// Sampled blocks not freed yet.
static LIVE_BLOCKS: AtomicUsize = AtomicUsize::new(0);
/// Samples dropped because a table was full.
static DROPPED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Bytes left before this thread's next sample; below zero, a sample is due.
    static LEFT: Cell<i64> = const { Cell::new(0) };
    /// Inside the sampler (or the report): no sampling.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    static RNG: Cell<u64> = const { Cell::new(0) };
}

/// An exponentially distributed distance with mean [`RATE`] (xorshift; seeded per thread).
fn next_distance() -> i64 {
    let x = RNG
        .try_with(|r| {
            let mut x = r.get();
            if x == 0 {
                x = (r as *const _ as u64) ^ 0x9e37_79b9_7f4a_7c15;
            }
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            r.set(x);
            x
        })
        .unwrap_or(1);
    let u = ((x >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    (-u.ln() * RATE as f64) as i64 + 1
}

/// Whether an allocation of `size` bytes is sampled (this thread's countdown runs out).
fn due(size: usize) -> bool {
    LEFT.try_with(|l| {
        let left = l.get() - size as i64;
        if left >= 0 {
            l.set(left);
            return false;
        }
        l.set(next_distance());
        // A fresh thread's countdown starts at zero: its first allocation only draws the distance.
        left > -(size as i64) || size as u64 >= RATE
    })
    .unwrap_or(false)
        && BUSY.try_with(|b| !b.get()).unwrap_or(false)
}

fn hash(ips: &[usize]) -> usize {
    ips.iter().fold(0xcbf2_9ce4_8422_2325usize, |h, ip| (h ^ ip).wrapping_mul(0x100_0000_01b3))
}

/// Records a sampled block.
fn record(ptr: *mut u8, size: usize) {
    BUSY.with(|b| b.set(true));
    let mut ips = [0usize; DEPTH];
    let mut n = 0;
    // SAFETY: no lock of ours is held; the unwinder's own allocations come back here as BUSY and are not sampled.
    unsafe {
        backtrace::trace_unsynchronized(|f| {
            ips[n] = f.ip() as usize;
            n += 1;
            n < DEPTH
        });
    }
    // Skip this function and the allocator's frames: the caller's stack starts after them.
    let skip = n.min(3);
    let stack_ips = &ips[skip..n];
    if let Ok(mut t) = TABLES.lock() {
        let slot = find_stack(&mut t, stack_ips);
        let live_slot = free_live(&t, ptr as usize);
        match (slot, live_slot) {
            (Some(s), Some(l)) => {
                let st = &mut t.stacks[s];
                st.allocs += 1;
                st.alloc_bytes += size as u64;
                t.live[l] = Block { ptr: ptr as usize, size, stack: s as u16 };
                LIVE_BLOCKS.fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    BUSY.with(|b| b.set(false));
}

fn find_stack(t: &mut Tables, ips: &[usize]) -> Option<usize> {
    let h = hash(ips);
    for i in 0..STACKS {
        let s = (h + i) % STACKS;
        let st = &t.stacks[s];
        if st.depth == 0 && st.allocs == 0 {
            let st = &mut t.stacks[s];
            st.ips[..ips.len()].copy_from_slice(ips);
            st.depth = ips.len() as u8;
            t.used += 1;
            return Some(s);
        }
        if st.depth as usize == ips.len() && st.ips[..ips.len()] == *ips {
            return Some(s);
        }
    }
    None
}

fn live_home(ptr: usize) -> usize {
    (ptr / MARK).wrapping_mul(0x9e37_79b9) % LIVE
}

/// A free slot of the live table for `ptr`.
fn free_live(t: &Tables, ptr: usize) -> Option<usize> {
    let h = live_home(ptr);
    (0..LIVE).map(|i| (h + i) % LIVE).find(|s| t.live[*s].ptr == 0 || t.live[*s].ptr == ptr)
}

/// Forgets `ptr` if it was sampled; whether it was.
fn forget(ptr: usize) -> bool {
    if !ptr.is_multiple_of(MARK) || LIVE_BLOCKS.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let Ok(mut t) = TABLES.lock() else { return false };
    let h = live_home(ptr);
    for i in 0..LIVE {
        let s = (h + i) % LIVE;
        let b = t.live[s];
        if b.ptr == 0 {
            return false;
        }
        if b.ptr == ptr {
            let st = &mut t.stacks[b.stack as usize];
            st.frees += 1;
            st.free_bytes += b.size as u64;
            remove_live(&mut t, s);
            LIVE_BLOCKS.fetch_sub(1, Ordering::Relaxed);
            return true;
        }
    }
    false
}

/// Removes slot `s` of the linear-probing table, moving later entries of the run back.
fn remove_live(t: &mut Tables, mut s: usize) {
    t.live[s].ptr = 0;
    let mut j = s;
    loop {
        j = (j + 1) % LIVE;
        let b = t.live[j];
        if b.ptr == 0 {
            return;
        }
        let home = live_home(b.ptr);
        // Move b back to s unless its home lies cyclically in (s, j].
        let between = if s <= j { s < home && home <= j } else { s < home || home <= j };
        if !between {
            t.live[s] = b;
            t.live[j].ptr = 0;
            s = j;
        }
    }
}

fn sampled_layout(layout: Layout) -> Option<Layout> {
    Layout::from_size_align(layout.size(), layout.align().max(MARK)).ok()
}

/// An allocation of `layout` by `system`: when sampled, with the marking alignment, and recorded.
fn allocate(layout: Layout, system: impl Fn(Layout) -> *mut u8) -> *mut u8 {
    if due(layout.size())
        && let Some(l) = sampled_layout(layout)
    {
        let p = system(l);
        if !p.is_null() {
            record(p, layout.size());
        }
        return p;
    }
    system(layout)
}

// SAFETY: every block comes from `System`; a sampled block is only aligned more strictly than asked, and `System`
// frees any block with `free`, whatever the layout.
unsafe impl GlobalAlloc for SamplingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: `System.alloc` with the caller's layout, or the same more aligned.
        allocate(layout, |l| unsafe { System.alloc(l) })
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as `alloc`.
        allocate(layout, |l| unsafe { System.alloc_zeroed(l) })
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        forget(ptr as usize);
        // SAFETY: `ptr` came from `System` (see above).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if forget(ptr as usize) {
            // A sampled block moves to a fresh block (which may be sampled again).
            // SAFETY: the new layout is valid as the caller promises; the old block is ours to free.
            unsafe {
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                let p = self.alloc(new_layout);
                if !p.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                    System.dealloc(ptr, layout);
                }
                return p;
            }
        }
        // SAFETY: `ptr` is an unsampled block from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Go's `scaleHeapSample`: the expected real count and bytes behind `count` samples of `bytes` in all.
fn scale(count: u64, bytes: u64) -> (i64, i64) {
    if count == 0 || bytes == 0 {
        return (0, 0);
    }
    let avg = bytes as f64 / count as f64;
    let s = 1.0 / (1.0 - (-avg / RATE as f64).exp());
    ((count as f64 * s) as i64, (bytes as f64 * s) as i64)
}

/// The heap profile now; `allocs` shows `alloc_space` first (Go's `/debug/pprof/allocs`), else `inuse_space`.
pub fn profile(allocs: bool) -> Vec<u8> {
    // Copied out under the lock into room reserved before it; symbolized after.
    let mut rows: Vec<Stack> = Vec::with_capacity(STACKS);
    BUSY.with(|b| b.set(true));
    if let Ok(t) = TABLES.lock() {
        rows.extend(t.stacks.iter().filter(|s| s.allocs > 0).copied());
    }
    BUSY.with(|b| b.set(false));
    let mut b = Builder::new(
        &[("alloc_objects", "count"), ("alloc_space", "bytes"), ("inuse_objects", "count"), ("inuse_space", "bytes")],
        ("space", "bytes"),
        RATE as i64,
    );
    if allocs {
        b.default_sample_type("alloc_space");
    }
    let mut symbols = crate::Symbols::default();
    for st in rows {
        let stack: Vec<u64> = st.ips[..st.depth as usize].iter().map(|ip| symbols.location(&mut b, *ip)).collect();
        let (ao, ab) = scale(st.allocs, st.alloc_bytes);
        let (io, ib) = scale(st.allocs - st.frees, st.alloc_bytes - st.free_bytes);
        b.sample(stack, vec![ao, ab, io, ib]);
    }
    drop(symbols);
    crate::release_symbols();
    let dropped = DROPPED.load(Ordering::Relaxed);
    if dropped > 0 {
        tracing::info!(droppedSamples = dropped, "heap samples dropped for want of room in the sampler's tables");
    }
    b.finish(crate::cpu::now_nanos(), 0)
}
