//! Where a `Rate` takes its time from, and where it registers its periodic work.

use std::sync::{Arc, Weak};

use super::manual::{ManualClock, ManualInner};
use super::resolution::TICK_NANOS;
use super::schedule::{Registration, Scheduler, Tick};
use super::ticker;
use crate::sync::Ordering;

/// The shared coarse clock and its ticker thread, or a [`ManualClock`].
#[derive(Clone)]
pub(crate) enum TimeSource {
    /// The shared coarse clock and its ticker thread.
    Shared,
    /// A [`ManualClock`].
    Manual(Arc<ManualInner>),
}

impl TimeSource {
    pub(crate) fn manual(clock: &ManualClock) -> Self {
        TimeSource::Manual(Arc::clone(&clock.inner))
    }

    /// The coarse time: what the request path reads.
    #[inline]
    pub(crate) fn coarse(&self) -> u64 {
        match self {
            TimeSource::Shared => ticker::coarse_nanos(),
            TimeSource::Manual(m) => m.nanos.load(Ordering::Acquire),
        }
    }

    /// How far the coarse time may trail the exact time: two ticks on the shared clock (a
    /// tick, and a late one), none on a manual clock. A `Rate` reads the exact time within this
    /// margin of a window's end.
    pub(crate) fn lag(&self) -> u64 {
        match self {
            TimeSource::Shared => 2 * TICK_NANOS,
            TimeSource::Manual(_) => 0,
        }
    }

    /// The exact time, for the rare reads near a window boundary.
    pub(crate) fn precise(&self) -> u64 {
        match self {
            TimeSource::Shared => ticker::precise_nanos(),
            TimeSource::Manual(m) => m.nanos.load(Ordering::Acquire),
        }
    }

    /// Registers `user`'s periodic work, starting the shared ticker if needed. The user runs
    /// first at the next tick, then whenever it asks. Never waits for a tick in progress.
    pub(crate) fn register(&self, user: Weak<dyn Tick>) -> Registration {
        match self {
            TimeSource::Shared => {
                ticker::ensure_started();
                ticker::scheduler().register(user)
            }
            TimeSource::Manual(m) => m.scheduler.register(user),
        }
    }

    /// Cancels a registration; called as its user is dropped. Never waits either.
    pub(crate) fn cancel(&self, registration: Registration) {
        self.scheduler().cancel(registration);
    }

    /// Has the registered user run at the next tick: it has work due sooner than it asked.
    pub(crate) fn prompt(&self, registration: Registration) {
        self.scheduler().prompt(registration);
    }

    fn scheduler(&self) -> &Scheduler {
        match self {
            TimeSource::Shared => ticker::scheduler(),
            TimeSource::Manual(m) => &m.scheduler,
        }
    }
}
