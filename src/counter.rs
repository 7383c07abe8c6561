//! Saturating operations on one shared atomic counter, at the price of a plain `fetch_add`.
//!
//! A counter's *logical* value is its raw value clamped to `[FLOOR, CEILING]`, where
//! `CEILING = isize::MAX / 2`. The range above the ceiling is headroom:
//!
//! - The fast paths add or subtract at most `FAST_STEP` with one `fetch_add`/`fetch_sub`. An
//!   add that crosses the ceiling then *parks* the counter at `PARK`, far above it, and every
//!   raw value from `SATURATED` up counts as saturated. Operations in flight on a parked
//!   counter move it by at most `FAST_STEP` each before undoing that, so it could only leave
//!   the saturated range if more than `(PARK - SATURATED) / FAST_STEP` (2^19 on 64-bit
//!   targets) threads were between an operation and its undo at once; the same margin keeps a
//!   raw value from wrapping past `isize::MAX`.
//! - Larger or negative deltas take a compare-and-swap loop that saturates exactly.
//!
//! The ceiling is sticky: once a counter has saturated, its true count is unknown, so a
//! decrement leaves it saturated rather than reporting a number that could be below the
//! truth. This keeps estimates one-sided (never under the true count) even at the limits of
//! the integer type.
//!
//! # Ordering
//!
//! Every access is `SeqCst`. On x86-64 that costs nothing over `Relaxed` (a locked
//! read-modify-write is a full barrier anyway, and a `SeqCst` load is a plain load); on
//! weakly ordered CPUs it costs a little. What it buys is one total order over all counter
//! updates and reads: a read that follows a thread's own updates of a key's H counters sees,
//! in every row, every update that came before it in that order. `Estimator::incr` relies on
//! that for its re-read (two concurrent increments of one key cannot both miss each other),
//! and the limiter's promotion handshake relies on it (see `limiter/exact/mod.rs`). Counters
//! publish no other data.

use crate::sync::{AtomicIsize, Ordering};

/// The ordering of every counter access (see the module docs).
const ORDER: Ordering = Ordering::SeqCst;

/// The largest logical value; counters saturate here and stay.
pub(crate) const CEILING: isize = isize::MAX / 2;
/// The smallest logical value (reached only by decrements without matching increments).
pub(crate) const FLOOR: isize = -CEILING;
/// The largest delta that takes the single-instruction path.
const FAST_STEP: isize = CEILING >> 20;
/// Where a saturated counter's raw value is parked.
const PARK: isize = CEILING + (isize::MAX - CEILING) / 2;
/// Raw values from here up are saturated counters.
const SATURATED: isize = CEILING + (isize::MAX - CEILING) / 4;

/// The logical value of a raw counter word.
#[inline]
pub(crate) fn logical(raw: isize) -> isize {
    raw.clamp(FLOOR, CEILING)
}

/// Reads the logical value.
#[inline]
pub(crate) fn load(counter: &AtomicIsize) -> isize {
    logical(counter.load(ORDER))
}

/// Adds `delta` (any value, negative included) and returns the new logical value.
#[inline]
pub(crate) fn add(counter: &AtomicIsize, delta: isize) -> isize {
    if (0..=FAST_STEP).contains(&delta) {
        let old = counter.fetch_add(delta, ORDER);
        // One comparison on the common path: from at most `CEILING - delta`, the add neither
        // met a parked counter nor crossed the ceiling. (A raw value below FLOOR is a
        // decrement's, in flight: read as FLOOR.)
        if old <= CEILING - delta {
            return (old + delta).max(FLOOR);
        }
        added_past_ceiling(counter, old, delta)
    } else {
        update_slow(counter, delta)
    }
}

/// [`add`]'s fast path for an add of `delta` that found `old` and ended above the ceiling:
/// the counter is saturated from now on.
#[cold]
fn added_past_ceiling(counter: &AtomicIsize, old: isize, delta: isize) -> isize {
    if old >= SATURATED {
        // Already parked: undo, so parked values stay near PARK.
        counter.fetch_sub(delta, ORDER);
    } else {
        // Cannot overflow: `old` is below SATURATED plus what threads in flight added.
        counter.fetch_max(PARK, ORDER);
    }
    CEILING
}

/// Subtracts `delta`. A saturated counter stays saturated.
#[inline]
pub(crate) fn sub(counter: &AtomicIsize, delta: isize) {
    if (0..=FAST_STEP).contains(&delta) {
        let old = counter.fetch_sub(delta, ORDER);
        if old >= SATURATED {
            // It was saturated: the true count is unknown, so put the delta back.
            counter.fetch_add(delta, ORDER);
        } else if old - delta < FLOOR {
            counter.fetch_max(FLOOR, ORDER);
        }
    } else {
        update_slow(counter, delta.checked_neg().unwrap_or(isize::MAX));
    }
}

/// The exact saturating path for deltas the fast path does not take.
#[cold]
fn update_slow(counter: &AtomicIsize, delta: isize) -> isize {
    // The logical value the last (the successful) step wrote; CEILING if none wrote.
    let mut written = CEILING;
    let _ = counter.fetch_update(ORDER, ORDER, |raw| {
        if raw >= SATURATED {
            written = CEILING;
            None // sticky: a saturated counter is never lowered
        } else {
            let new = raw.saturating_add(delta);
            let raw_new = if new > CEILING { PARK } else { new.max(FLOOR) };
            written = logical(raw_new);
            Some(raw_new)
        }
    });
    written
}

/// Operations on a 32-bit counter that only ever holds a non-negative count: the limiter's
/// blocked sketches (`estimator/blocked.rs`). Half the width of an `isize` doubles the
/// counters a cache line holds. Every counter is read as `min(raw, CEILING)`, `CEILING` being
/// 2^31: twice the largest limit (`Limits::MAX_LIMIT`, 2^30 − 1), so that a key's count at
/// the largest limit with a request of the largest cost on top is still read exactly, and a
/// request's own units can be taken out of it again. Two kinds of counter, each
/// with its own add:
///
/// - *Saturating* ([`add`], [`sub`]): the rate windows, which are only added to and are
///   cleared by the clock. As above, an add that crosses the ceiling parks the counter at
///   `PARK`, every raw value from `SATURATED` up counts as saturated, and a saturated counter
///   stays so until it is cleared. Operations in flight on a parked counter move it by at
///   most `FAST_STEP` each before undoing that, so it could only leave the saturated range (or
///   wrap past `u32::MAX`) with more than 2^19 threads between an operation and its undo at
///   once; the same margin keeps an unparked counter's adds in flight below `SATURATED`.
/// - *Exact* ([`narrow::try_add`], [`narrow::give_back`]): the requests in flight, where
///   every add is given back by its own request. An add is made whole or not at all: it is
///   refused, nothing added, when it would take the count past the ceiling, so the raw value
///   is always the exact sum of the adds not yet given back (plus adds in flight about to be
///   undone), and a give-back is the exact inverse of its add. A parked count would stay
///   saturated for good, and with it every key whose counters it is. An add refused on the
///   fast path was made and is undone, by at most `FAST_STEP`: more than 2^21 threads would
///   have to be between the two at once to wrap.
///
/// A decrement below zero (a give-back without its increment, which the limiter never makes)
/// is undone: the count stays over, never under. Orderings: `SeqCst`, as above.
pub(crate) mod narrow {
    use crate::sync::AtomicU32;

    use super::ORDER;

    /// The largest logical value: 2^31. Saturating counts stop here and stay; exact counts
    /// refuse an add past it. A limit must be below it to be reachable, and is below half of
    /// it (`Limits::MAX_LIMIT`).
    pub(crate) const CEILING: u32 = 1 << 31;
    /// The largest delta that takes the single-instruction path.
    const FAST_STEP: u32 = 1 << 10;
    /// Raw values from here up are saturated counters (parked ones, and their operations in
    /// flight).
    const SATURATED: u32 = CEILING + (1 << 29);
    /// Where a saturated counter's raw value is parked.
    const PARK: u32 = 3 << 30;

    /// The logical value of a raw counter word.
    #[inline]
    pub(crate) fn logical(raw: u32) -> u32 {
        raw.min(CEILING)
    }

    /// Reads the logical value.
    #[inline]
    pub(crate) fn load(counter: &AtomicU32) -> u32 {
        logical(counter.load(ORDER))
    }

    /// Adds `delta` and returns the new logical value.
    #[inline]
    pub(crate) fn add(counter: &AtomicU32, delta: u32) -> u32 {
        if delta <= FAST_STEP {
            let old = counter.fetch_add(delta, ORDER);
            // One comparison on the common path, as above.
            if old <= CEILING - delta {
                return old + delta;
            }
            added_past_ceiling(counter, old, delta)
        } else {
            // As `update_slow` above: the value of the last step, the one that wrote (a
            // saturated counter reads the ceiling, written or not).
            let mut written = CEILING;
            let _ = counter.fetch_update(ORDER, ORDER, |raw| {
                let new = raw.saturating_add(delta);
                written = logical(new);
                (raw < SATURATED).then_some(if new > CEILING { PARK } else { new })
            });
            written
        }
    }

    /// Adds `delta` to an exact counter if the count stays at most the ceiling, and returns
    /// the new count; `None`, with nothing added, if it would not. Other adds in flight (to be
    /// undone) may refuse an add near the ceiling that would have fitted once they were: a
    /// refusal, never a lost count.
    #[inline]
    pub(crate) fn try_add(counter: &AtomicU32, delta: u32) -> Option<u32> {
        if delta <= FAST_STEP {
            let old = counter.fetch_add(delta, ORDER);
            // One comparison on the common path, as in `add`.
            if old <= CEILING - delta {
                return Some(old + delta);
            }
            undo_past_ceiling(counter, delta)
        } else {
            let old = counter.fetch_update(ORDER, ORDER, |raw| {
                raw.checked_add(delta).filter(|&new| new <= CEILING)
            });
            old.ok().map(|old| old + delta)
        }
    }

    /// [`try_add`]'s fast path for an add that took the count past the ceiling: undone.
    #[cold]
    fn undo_past_ceiling(counter: &AtomicU32, delta: u32) -> Option<u32> {
        counter.fetch_sub(delta, ORDER);
        None
    }

    /// Gives back `delta` that [`try_add`] added to an exact counter: its exact inverse.
    #[inline]
    pub(crate) fn give_back(counter: &AtomicU32, delta: u32) {
        let old = counter.fetch_sub(delta, ORDER);
        if old < delta {
            // A give-back of more than was counted (never made): put it back, keeping the
            // count over rather than under.
            counter.fetch_add(delta, ORDER);
        }
    }

    /// [`add`]'s fast path for an add past the ceiling, as above.
    #[cold]
    fn added_past_ceiling(counter: &AtomicU32, old: u32, delta: u32) -> u32 {
        if old >= SATURATED {
            // Already parked: undo, so parked values stay near PARK.
            counter.fetch_sub(delta, ORDER);
        } else {
            // Cannot overflow: `old` is below SATURATED plus what threads in flight added.
            counter.fetch_max(PARK, ORDER);
        }
        CEILING
    }

    /// Subtracts `delta` (given back by whoever added it). A saturated counter stays
    /// saturated.
    #[inline]
    pub(crate) fn sub(counter: &AtomicU32, delta: u32) {
        if delta <= FAST_STEP {
            let old = counter.fetch_sub(delta, ORDER);
            if old >= SATURATED || old < delta {
                // Saturated (the true count is unknown), or a give-back of more than was
                // counted: put it back, keeping the count over rather than under.
                counter.fetch_add(delta, ORDER);
            }
        } else {
            let _ = counter.fetch_update(ORDER, ORDER, |raw| {
                (raw < SATURATED && raw >= delta).then(|| raw - delta)
            });
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn add_saturates_at_the_ceiling_instead_of_wrapping() {
        let c = AtomicIsize::new(CEILING - 1);
        assert_eq!(add(&c, 5), CEILING);
        assert_eq!(load(&c), CEILING);
        assert_eq!(add(&c, isize::MAX), CEILING);
        assert!(
            c.load(ORDER) >= SATURATED,
            "raw value parked in the saturated range"
        );
    }

    #[test]
    fn saturated_counter_is_not_lowered_by_sub() {
        let c = AtomicIsize::new(0);
        add(&c, isize::MAX);
        sub(&c, 1);
        sub(&c, isize::MAX);
        sub(&c, isize::MIN);
        assert_eq!(load(&c), CEILING);
    }

    #[test]
    fn sub_floors_instead_of_wrapping() {
        let c = AtomicIsize::new(FLOOR + 1);
        sub(&c, 10);
        assert_eq!(load(&c), FLOOR);
        sub(&c, isize::MAX);
        assert_eq!(load(&c), FLOOR);
        add(&c, isize::MIN);
        assert_eq!(load(&c), FLOOR);
    }

    #[test]
    fn large_and_negative_deltas_are_exact_below_the_ceiling() {
        let c = AtomicIsize::new(0);
        assert_eq!(add(&c, FAST_STEP + 1), FAST_STEP + 1);
        assert_eq!(add(&c, -(FAST_STEP + 1)), 0);
        sub(&c, -7);
        assert_eq!(load(&c), 7);
    }

    mod narrow {
        use super::super::narrow::*;
        use crate::sync::AtomicU32;

        #[test]
        fn narrow_add_saturates_at_the_ceiling_instead_of_wrapping() {
            let c = AtomicU32::new(CEILING - 1);
            assert_eq!(add(&c, 5), CEILING);
            assert_eq!(load(&c), CEILING);
            assert_eq!(add(&c, u32::MAX), CEILING, "the slow path saturates too");
            for _ in 0..1000 {
                add(&c, 1_000);
            }
            assert_eq!(load(&c), CEILING);
        }

        #[test]
        fn narrow_saturated_counter_is_not_lowered_by_sub() {
            let c = AtomicU32::new(0);
            add(&c, u32::MAX);
            sub(&c, 1);
            sub(&c, u32::MAX);
            assert_eq!(load(&c), CEILING);
        }

        #[test]
        fn narrow_sub_of_more_than_was_counted_keeps_the_count() {
            let c = AtomicU32::new(3);
            sub(&c, 5);
            assert_eq!(load(&c), 3, "over, never under");
            sub(&c, 5_000);
            assert_eq!(load(&c), 3);
            sub(&c, 3);
            assert_eq!(load(&c), 0);
        }

        /// Issue 38: a request of the largest cost on a key with 5 in flight took its
        /// counter past the ceiling (then 2^30), where it parked; its give-back was then
        /// skipped, and the count stayed saturated for good. An exact counter holds two such
        /// requests on top of one, up to its ceiling, and gives them back exactly.
        #[test]
        fn an_exact_give_back_undoes_an_add_up_to_the_ceiling() {
            let c = AtomicU32::new(0);
            assert_eq!(try_add(&c, 1), Some(1));
            let largest = crate::Limits::MAX_LIMIT;
            assert_eq!(try_add(&c, largest), Some(largest + 1), "read exactly");
            assert_eq!(try_add(&c, largest), Some(CEILING - 1));
            assert_eq!(try_add(&c, 1), Some(CEILING), "on the fast path");
            assert_eq!(try_add(&c, 1), None, "full");
            give_back(&c, largest);
            give_back(&c, 1);
            give_back(&c, largest);
            assert_eq!(load(&c), 1, "every unit back, exactly");
        }

        /// Past what an exact counter holds, an add is refused and adds nothing, on either
        /// path: the count is never parked nor wrapped.
        #[test]
        fn an_exact_add_past_what_the_counter_holds_adds_nothing() {
            let c = AtomicU32::new(CEILING - 3);
            assert_eq!(try_add(&c, 4), None, "the fast path");
            assert_eq!(c.load(crate::sync::Ordering::SeqCst), CEILING - 3);
            assert_eq!(try_add(&c, 5_000), None, "the slow path");
            assert_eq!(try_add(&c, u32::MAX), None);
            assert_eq!(c.load(crate::sync::Ordering::SeqCst), CEILING - 3);
            assert_eq!(try_add(&c, 3), Some(CEILING), "what fits is added");
            give_back(&c, CEILING);
            assert_eq!(load(&c), 0);
        }

        #[test]
        fn narrow_large_deltas_are_exact_below_the_ceiling() {
            let c = AtomicU32::new(0);
            assert_eq!(add(&c, 5_000), 5_000);
            sub(&c, 4_999);
            assert_eq!(load(&c), 1);
        }
    }
}
