//! A counting global allocator, so a fuzz case's allocation can be measured and bounded.
//!
//! Install it in the binary that runs the targets (the test binary, the benchmark):
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: kubelet_fuzz::CountingAlloc = kubelet_fuzz::CountingAlloc;
//! ```
//!
//! Counting is per thread and only while a case runs on a fuzz worker ([`Tracking`]): the bytes the thread holds
//! above what it held when the case started, and their peak. A case that would take a worker over the hard cap
//! never gets the memory: the worker raises its flag and sleeps for good, and the runner reports the input (the
//! process neither aborts nor swaps). Without the allocator installed nothing is counted and
//! [`CountingAlloc::installed`] is false.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// The allocator. It forwards to [`System`] and counts the bytes of tracked threads.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

thread_local! {
    /// Whether this thread's allocations are counted.
    static ON: Cell<bool> = const { Cell::new(false) };
    /// Bytes held above the start of the case (may go below zero: freeing older memory).
    static CUR: Cell<isize> = const { Cell::new(0) };
    /// The peak of `CUR`.
    static PEAK: Cell<isize> = const { Cell::new(0) };
    /// The hard cap of this thread, in bytes.
    static CAP: Cell<isize> = const { Cell::new(isize::MAX) };
    /// Set when the cap was hit (owned by the worker's [`Tracking`] owner, which outlives the thread's use).
    static OVER: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

/// Set by the allocator the first time it counts anything.
static SEEN: AtomicBool = AtomicBool::new(false);

impl CountingAlloc {
    /// Whether this allocator is the global one (probed with a counted allocation).
    pub fn installed() -> bool {
        if SEEN.load(Ordering::Relaxed) {
            return true;
        }
        let t = Tracking::start(usize::MAX, None);
        drop(std::hint::black_box(vec![0u8; 64]));
        t.finish();
        SEEN.load(Ordering::Relaxed)
    }
}

fn grow(size: usize) -> bool {
    let Ok(on) = ON.try_with(Cell::get) else { return true };
    if !on {
        return true;
    }
    SEEN.store(true, Ordering::Relaxed);
    let cur = CUR.get().saturating_add(isize::try_from(size).unwrap_or(isize::MAX));
    if cur > CAP.get() {
        let flag = OVER.get();
        if !flag.is_null() {
            // SAFETY: the flag is owned by an `Arc` the worker holds for as long as it lives.
            unsafe { &*flag }.store(true, Ordering::SeqCst);
            // The runner reports the case; this thread gives up without the memory and without aborting.
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        return false;
    }
    CUR.set(cur);
    if cur > PEAK.get() {
        PEAK.set(cur);
    }
    true
}

fn shrink(size: usize) {
    if ON.try_with(Cell::get).unwrap_or(false) {
        CUR.set(CUR.get().saturating_sub(isize::try_from(size).unwrap_or(isize::MAX)));
    }
}

// SAFETY: every call forwards to `System` with the same arguments; the counting only reads and writes
// thread-local cells that need no initialisation or destruction (so it never allocates itself).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !grow(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as the caller promised for `layout`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !grow(layout.size()) {
            return std::ptr::null_mut();
        }
        // SAFETY: as the caller promised for `layout`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        // SAFETY: as the caller promised for `ptr` and `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            if !grow(new_size - layout.size()) {
                return std::ptr::null_mut();
            }
        } else {
            shrink(layout.size() - new_size);
        }
        // SAFETY: as the caller promised for `ptr`, `layout` and `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Counting on the current thread, from [`Tracking::start`] to [`Tracking::finish`].
#[derive(Debug)]
pub struct Tracking {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Tracking {
    /// Starts counting this thread's allocations from zero. Past `cap` bytes the thread sets `over` and sleeps
    /// for good (without `over`, the allocation fails instead). `over` must outlive the thread's tracking.
    pub fn start(cap: usize, over: Option<&AtomicBool>) -> Self {
        CUR.set(0);
        PEAK.set(0);
        CAP.set(isize::try_from(cap).unwrap_or(isize::MAX));
        OVER.set(over.map_or(std::ptr::null(), |o| o as *const AtomicBool));
        ON.set(true);
        Tracking { _not_send: std::marker::PhantomData }
    }

    /// Stops counting; the peak of bytes held above the start.
    pub fn finish(self) -> usize {
        ON.set(false);
        OVER.set(std::ptr::null());
        usize::try_from(PEAK.get()).unwrap_or(0)
    }
}
