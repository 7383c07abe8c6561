//! The limiter's periodic work on its clock's thread.

use std::sync::Weak;

use super::exact::Locked;
use super::promoted::Promoted;
use super::shared::Shared;
use super::tally::Tally;
use crate::clock::{Tick, TICK_NANOS};
use crate::sync::{AtomicU64, Ordering};

/// The limiter's periodic work on its clock's thread: the exact stage's sweep, clearing the
/// over-limit deadlines that have passed, and waking the waiters that are due.
pub(super) struct Sweeper<K> {
    pub(super) shared: Weak<Shared<K>>,
    /// Nanoseconds between sweeps: an epoch of the exact stage.
    pub(super) period: u64,
    /// When the next sweep is due (nanoseconds on the limiter's clock). Only the clock's
    /// thread reads and writes it (ticks are serialised): `Relaxed`.
    pub(super) next_sweep: AtomicU64,
}

impl<K: Send + Sync> Tick for Sweeper<K> {
    fn tick(&self, now: u64) -> u64 {
        // Not yet built (registered from inside `Arc::new_cyclic`), or being dropped.
        let Some(shared) = self.shared.upgrade() else {
            return now.saturating_add(self.period);
        };
        let mut next_sweep = self.next_sweep.load(Ordering::Relaxed);
        if now >= next_sweep {
            shared.sweep_exact();
            shared.over_limit().forget_expired(now);
            if Tally::ON {
                shared.tally.publish(&shared.gauges());
            }
            next_sweep = now.saturating_add(self.period);
            self.next_sweep.store(next_sweep, Ordering::Relaxed);
        }
        let next_waiter = shared.waiters.fire(now).saturating_mul(TICK_NANOS);
        next_sweep.min(next_waiter)
    }
}

impl<K> Shared<K> {
    /// The exact stage's sweep (the clock's periodic work).
    pub(super) fn sweep_exact(&self) {
        // The runs of refusals the over-limit cache answered for each entry are counted
        // before the cache's own sweep clears the deadlines that passed.
        self.exact.sweep(
            |Locked { entry, units }: Locked<'_, K, Promoted>, line| {
                entry.state.settle(line);
                entry.state.take_lane_refusals(units);
                let hash = entry.hash;
                self.closed_while_cool(hash, &mut entry.state, units, |state| {
                    self.is_cool(hash, state, units.in_flight())
                })
            },
            self,
        );
    }
}
