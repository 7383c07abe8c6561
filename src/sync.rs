//! The atomics the crate's concurrent protocols are written against.
//!
//! Everything that loom should be able to model imports its atomics from here, so that
//! `RUSTFLAGS="--cfg floodgate_loom" cargo test --release --test loom` checks the same code
//! that ships, with loom's atomics swapped in for std's.

#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::atomic::{AtomicIsize, Ordering};

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicIsize, Ordering};
