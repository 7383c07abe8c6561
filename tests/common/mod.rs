//! Shared by the integration tests that measure memory: a global allocator that counts, per
//! thread, the bytes allocated and the bytes still held, so that "fixed memory" and "no
//! allocation on the request path" are measured rather than assumed. Per thread, because the
//! test harness's other threads allocate at any time.
//!
//! A test file installs it with
//! `#[global_allocator] static GLOBAL: common::CountingAlloc = common::CountingAlloc;`.
// Each test crate uses the part it needs.
#![allow(dead_code)]

pub mod ticker;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

pub struct CountingAlloc;

thread_local! {
    /// Bytes allocated by this thread so far. `const` init and no destructor: touching it
    /// from inside the allocator never allocates.
    static ALLOCATED: Cell<usize> = const { Cell::new(0) };
    /// Bytes allocated minus bytes freed by this thread.
    static HELD: Cell<isize> = const { Cell::new(0) };
}

fn count(allocated: usize, held: isize) {
    // `try_with`: allocations during thread teardown find the slots gone; they are not ours.
    let _ = ALLOCATED.try_with(|a| a.set(a.get().saturating_add(allocated)));
    let _ = HELD.try_with(|h| h.set(h.get() + held));
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the only
// extra work is a thread-local counter update, which neither allocates nor unwinds.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), layout.size() as isize);
        // SAFETY: forwarded with the caller's layout, under the caller's obligations.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size(), layout.size() as isize);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(
            new_size.saturating_sub(layout.size()),
            new_size as isize - layout.size() as isize,
        );
        // SAFETY: `ptr` was allocated by `System` with `layout`; forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

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
