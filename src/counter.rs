//! Saturating operations on one shared atomic counter, at the price of a plain `fetch_add`.
//!
//! A counter's *logical* value is its raw value clamped to `[FLOOR, CEILING]`, where
//! `CEILING = isize::MAX / 2`. The half of the range above the ceiling is headroom: the fast
//! paths add or subtract at most `FAST_STEP` with one `fetch_add`/`fetch_sub` and only then
//! pull the raw value back to the ceiling, so a raw value could only wrap if more than
//! `(isize::MAX - CEILING) / FAST_STEP` (2^20 on 64-bit targets) threads were between their add
//! and their fix-up at once. Larger or negative deltas take a compare-and-swap loop that
//! saturates exactly.
//!
//! The ceiling is sticky: once a counter has saturated, its true count is unknown, so a
//! decrement leaves it at the ceiling rather than reporting a number that could be below the
//! truth. This is what keeps estimates one-sided (never under the true count) even at the
//! limits of the integer type.
//!
//! Orderings: every access is `Relaxed` unless a caller asks otherwise ([`add_ordered`]). A counter publishes no other data; each counter's
//! modification order alone decides its value, and callers combine counters with `min`,
//! which needs no ordering between them.

use crate::sync::{AtomicIsize, Ordering, Ordering::Relaxed};

/// The largest logical value; counters saturate here and stay.
pub(crate) const CEILING: isize = isize::MAX / 2;
/// The smallest logical value (reached only by decrements without matching increments).
pub(crate) const FLOOR: isize = -CEILING;
/// The largest delta that takes the single-instruction path.
const FAST_STEP: isize = CEILING >> 20;

/// The logical value of a raw counter word.
#[inline]
pub(crate) fn logical(raw: isize) -> isize {
    raw.clamp(FLOOR, CEILING)
}

/// Reads the logical value.
#[inline]
pub(crate) fn load(counter: &AtomicIsize) -> isize {
    logical(counter.load(Relaxed))
}

/// Adds `delta` (any value, negative included) and returns the new logical value.
#[inline]
pub(crate) fn add(counter: &AtomicIsize, delta: isize) -> isize {
    add_ordered(counter, delta, Relaxed)
}

/// As [`add`], with `order` on the update (the limiter's promotion handshake needs one
/// `SeqCst` add; everything else is `Relaxed`).
#[inline]
pub(crate) fn add_ordered(counter: &AtomicIsize, delta: isize, order: Ordering) -> isize {
    if (0..=FAST_STEP).contains(&delta) {
        let old = counter.fetch_add(delta, order);
        // Cannot overflow: raw values stay below CEILING + (threads in flight) * FAST_STEP.
        let new = old + delta;
        if new > CEILING {
            // Give the headroom back; the counter is saturated from now on.
            counter.fetch_min(CEILING, Relaxed);
            return CEILING;
        }
        logical(new)
    } else {
        update_slow(counter, delta, order)
    }
}

/// Subtracts `delta`. A saturated counter stays saturated.
#[inline]
pub(crate) fn sub(counter: &AtomicIsize, delta: isize) {
    if (0..=FAST_STEP).contains(&delta) {
        let old = counter.fetch_sub(delta, Relaxed);
        if old >= CEILING {
            // It was saturated: the true count is unknown, so put the delta back.
            counter.fetch_add(delta, Relaxed);
        } else if old - delta < FLOOR {
            counter.fetch_max(FLOOR, Relaxed);
        }
    } else {
        update_slow(counter, delta.checked_neg().unwrap_or(isize::MAX), Relaxed);
    }
}

/// The exact saturating path for deltas the fast path does not take.
#[cold]
fn update_slow(counter: &AtomicIsize, delta: isize, order: Ordering) -> isize {
    let step = |raw: isize| {
        let current = logical(raw);
        if current == CEILING && delta < 0 {
            None // sticky: a saturated counter is never lowered
        } else {
            Some(logical(current.saturating_add(delta)))
        }
    };
    match counter.fetch_update(order, Relaxed, step) {
        Ok(old) => step(old).unwrap_or(CEILING),
        Err(_) => CEILING,
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
        assert_eq!(
            c.load(Relaxed),
            CEILING,
            "raw value pulled back to the ceiling"
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
}
