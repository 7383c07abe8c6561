//! A waker that does nothing, for futures the tests poll by hand and whose wake-ups they do not
//! count. Ours because `std::task::Waker::noop` needs Rust 1.85 and the crate's rust-version is
//! 1.80.

use std::sync::Arc;
use std::task::{Wake, Waker};

struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// A waker whose wake-ups are dropped.
pub fn noop() -> Waker {
    Waker::from(Arc::new(Noop))
}
