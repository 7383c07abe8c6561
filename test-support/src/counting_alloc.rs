//! A global allocator that counts, per thread, the bytes allocated, the bytes still held and
//! their peak, and (once [`count_process_heap`] has been called) the bytes held by the whole
//! process, so that "fixed memory" and "no allocation on the request path" are measured rather
//! than assumed. Per thread, because the test harness's other threads allocate at any time.
//!
//! Installed by the integration tests that measure memory, the benches limiter and memory,
//! the demo example and the soak server (tools/soak), each with
//! `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::Relaxed};

/// `System`'s allocator, counted.
pub struct CountingAlloc;

thread_local! {
    /// Bytes allocated by this thread so far. `const` init and no destructor: touching it
    /// from inside the allocator never allocates.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// Bytes allocated minus bytes freed by this thread.
    static HELD: Cell<isize> = const { Cell::new(0) };
    /// The most `HELD` has been since [`peak_bytes_by`] last reset it.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// Whether `PROCESS_HELD` is kept: one shared counter that every thread's allocations update,
/// wanted only by those that call [`count_process_heap`], so the others do not pay for it.
static COUNT_PROCESS: AtomicBool = AtomicBool::new(false);
/// Bytes allocated minus bytes freed by all threads since [`count_process_heap`].
static PROCESS_HELD: AtomicIsize = AtomicIsize::new(0);

// `#[inline]` here and on the allocator's methods: so that the crate installing the allocator
// can inline the counting into its allocations, as it could when each crate compiled its own
// copy of this file, and the benches that time allocations pay no extra call.
#[inline]
fn count(allocated: usize, held: isize) {
    // `try_with`: allocations during thread teardown find the slots gone; they are not ours.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(allocated)));
    let _ = HELD.try_with(|h| {
        let now = h.get().wrapping_add(held);
        h.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
    if COUNT_PROCESS.load(Relaxed) {
        PROCESS_HELD.fetch_add(held, Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the only
// extra work is counter updates (thread-locals and an atomic), which neither allocate nor
// unwind.
unsafe impl GlobalAlloc for CountingAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), layout.size() as isize);
        // SAFETY: forwarded with the caller's layout, under the caller's obligations.
        unsafe { System.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), layout.size() as isize);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(
            new_size.saturating_sub(layout.size()),
            new_size as isize - layout.size() as isize,
        );
        // SAFETY: `ptr` was allocated by `System` with `layout`; forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(0, -(layout.size() as isize));
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Bytes this thread allocates while running `f`.
pub fn bytes_allocated_by(f: impl FnOnce()) -> usize {
    let before = ALLOCATED.with(Cell::get);
    f();
    ALLOCATED.with(Cell::get) - before
}

/// Bytes this thread holds now (allocated minus freed since it started).
pub fn bytes_held() -> isize {
    HELD.with(Cell::get)
}

/// What `f` returns, and the bytes this thread allocated while running it and still holds
/// (0 if it freed more than it allocated).
pub fn bytes_held_by<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = bytes_held();
    let value = f();
    (value, bytes_held().saturating_sub(before).max(0) as usize)
}

/// What `f` returns, and the peak of the bytes this thread held while running it, above what
/// it held before (so it includes transient allocations, such as a resize's two tables).
pub fn peak_bytes_by<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = bytes_held();
    let outer = PEAK.with(|p| p.replace(before));
    let value = f();
    let peak = PEAK.with(Cell::get);
    // An enclosing `peak_bytes_by` still sees this peak.
    PEAK.with(|p| p.set(outer.max(peak)));
    (value, peak.saturating_sub(before).max(0) as usize)
}

/// From now on, also count the heap bytes held by the whole process
/// ([`process_bytes_held`]).
pub fn count_process_heap() {
    COUNT_PROCESS.store(true, Relaxed);
}

/// Bytes allocated minus bytes freed by all threads since [`count_process_heap`].
pub fn process_bytes_held() -> isize {
    PROCESS_HELD.load(Relaxed)
}
