//! The atomics and locks the crate's concurrent protocols are written against.
//!
//! Everything that loom should be able to model imports from here, so that
//! `RUSTFLAGS="--cfg floodgate_loom" cargo test --release --test 'loom_*'` checks the same
//! code that ships, with loom's types swapped in for std's. (The process-wide ticker in
//! `clock` lives in `static`s and always uses std; loom models drive a `ManualClock`.)

#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::atomic::{AtomicIsize, AtomicU32, AtomicU64, Ordering};
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicIsize, AtomicU32, AtomicU64, Ordering};
#[cfg(floodgate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

/// Locks `mutex`, ignoring poisoning: the data behind the crate's locks (lists of weak
/// references) stays consistent even if a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
