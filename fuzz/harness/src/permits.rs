//! A permit of either kind, for the harness and the tests that hold borrowed and owned
//! permits side by side (tests/limiter.rs, tests/faults.rs).

use std::hash::Hash;

use floodgate::{Outcome, OwnedPermit, Permit};

/// A permit of either kind, held to be dropped, with what its origin answered recorded first.
#[derive(Debug)]
pub enum AnyPermit<'a, K: Hash + Eq> {
    Borrowed(Permit<'a, K>),
    Owned(OwnedPermit<K>),
}

impl<K: Hash + Eq> AnyPermit<'_, K> {
    /// Records `outcome` on the permit.
    pub fn record(&mut self, outcome: Outcome) {
        match self {
            AnyPermit::Borrowed(permit) => permit.record(outcome),
            AnyPermit::Owned(permit) => permit.record(outcome),
        }
    }
}
