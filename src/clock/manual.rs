//! A clock that tests advance by hand.

use std::sync::Arc;
use std::time::Duration;

use super::resolution::saturating_nanos;
use super::schedule::Scheduler;
use crate::sync::{AtomicU64, Ordering};

/// A clock that tests advance by hand.
///
/// Rates built on a `ManualClock` see exactly the time it was advanced to, and the work the
/// shared ticker would do on the way (each `Rate` clearing its next window slots as a window
/// begins) runs synchronously inside [`advance`](ManualClock::advance), so no test needs to
/// sleep for a window to end. Clones share one time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Rate};
///
/// let clock = ManualClock::new();
/// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
/// rate.observe(&"origin", 5);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(rate.rate(&"origin"), 5.0);
/// assert_eq!(clock.now(), Duration::from_secs(1));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    pub(super) inner: Arc<ManualInner>,
}

pub(crate) struct ManualInner {
    /// The time in nanoseconds since the clock was made. Stored with `Release` before the
    /// work due at that time runs, so that a reader that loads it with `Acquire` also sees the
    /// work done for every earlier time (the slot clearing for the bucket it is now in). A
    /// test clock, so the `Acquire` costs nothing that matters.
    pub(super) nanos: AtomicU64,
    /// The work of the `Rate`s on this clock; its lock is held across a whole `advance`, so
    /// advances are serialised.
    pub(super) scheduler: Scheduler,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A manual clock at time zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.now(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                nanos: AtomicU64::new(0),
                scheduler: Scheduler::new(0),
            }),
        }
    }

    /// The clock's current time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(250));
    /// assert_eq!(clock.now(), Duration::from_millis(250));
    /// ```
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.inner.nanos.load(Ordering::Acquire))
    }

    /// Moves the clock forward by `by`, running on the way the work a real ticker would run
    /// (at the tick where it falls due). The cost follows that work, not the distance: each
    /// `Rate` on the clock runs once per window it crosses (once per sub-window with
    /// sub-windows), and a limiter's sweep once an epoch, so a day on a clock with a limiter
    /// of 10 ms windows is millions of runs (seconds), and `Duration::MAX` does not end.
    /// Advance by what the test needs; a clock with nothing on it costs next to nothing.
    ///
    /// Requests on other threads may run while it advances: they read the time at each
    /// boundary where work falls due, on the way to the end, as they would a real clock's
    /// (one advance is not one jump). Two threads advancing one clock take turns.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let shared = clock.clone();
    /// clock.advance(Duration::from_secs(2));
    /// shared.advance(Duration::from_millis(5));
    /// assert_eq!(clock.now(), Duration::from_millis(2005));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        let inner = &*self.inner;
        let mut schedule = inner.scheduler.lock();
        let target = inner.nanos.load(Ordering::Relaxed).saturating_add(by);
        // From one event to the next: each at its tick boundary, the time set first.
        while let Some(at) = inner.scheduler.next_event(&mut schedule) {
            if at > target {
                break;
            }
            inner.nanos.store(at, Ordering::Release);
            inner.scheduler.run(&mut schedule, at);
        }
        inner.nanos.store(target, Ordering::Release);
        inner.scheduler.run(&mut schedule, target);
    }
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish_non_exhaustive()
    }
}
