//! A permit of either kind, for the harness and the tests that hold borrowed and owned
//! permits side by side (tests/limiter.rs, tests/faults.rs).

use std::hash::Hash;

use floodgate::{OwnedPermit, Permit};

/// A permit of either kind, held only to be dropped.
#[derive(Debug)]
pub enum AnyPermit<'a, K: Hash + Eq> {
    Borrowed(#[allow(dead_code)] Permit<'a, K>),
    Owned(#[allow(dead_code)] OwnedPermit<K>),
}
