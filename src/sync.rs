//! The atomics and locks the crate's concurrent protocols are written against.
//!
//! Everything that loom should be able to model imports from here, so that
//! `RUSTFLAGS="--cfg floodgate_loom" cargo test --release --test 'loom_*'` checks the same
//! code that ships, with loom's types swapped in for std's. (The process-wide ticker in
//! `clock` lives in `static`s and always uses std; loom models drive a `ManualClock`.)

#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicIsize, AtomicU32, AtomicU64, AtomicU8, Ordering,
};
#[cfg(floodgate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: the data behind the crate's locks (lists of weak
/// references) stays consistent even if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `SeqCst` fence under loom, nothing otherwise.
///
/// Loom models `SeqCst` loads and stores as acquire/release only (a documented limitation
/// that makes it report interleavings no real execution has), but it models `SeqCst` fences
/// exactly. Where a protocol relies on the total order of `SeqCst` accesses, this fence lets
/// loom check it; in real builds the `SeqCst` accesses themselves give that order.
#[inline(always)]
pub(crate) fn seqcst_fence_for_loom() {
    #[cfg(floodgate_loom)]
    loom::sync::atomic::fence(Ordering::SeqCst);
}
