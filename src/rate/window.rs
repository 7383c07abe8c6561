//! The window as the limiter sees it, and the one home of the sliding-window arithmetic: the
//! estimate `prev·(1−f) + curr`, whether a request fits under a limit, how long until one
//! does, and the exact per-window counts the limiter keeps for a promoted key.

use std::time::Duration;

/// The sliding-window count `prev·(1−f) + curr`, `f` being how far into the current window
/// the time is, in [0, 1]: the one home of the estimate, for the limiter's windows, the
/// reports and the pingora-compatible rate function.
#[inline]
pub(crate) fn sliding_count(prev: f64, curr: f64, fraction: f64) -> f64 {
    prev * (1.0 - fraction) + curr
}

/// A window's count from this up reads saturated: the counters stop at 2^31
/// (`estimator::CEILING`), so such a count bounds the window's true count from below only,
/// and it weighs whole for as long as its window weighs at all (to the last nanosecond of the
/// next). Read as the count, it slides under a limit before the true count does.
const SATURATED: isize = crate::estimator::CEILING as isize;

/// One observation as the limiter sees it: the bucket it landed in and the key's counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WindowView {
    pub(crate) bucket: u64,
    /// The index of `bucket`'s slot in the ring, so that reading the window again takes no
    /// division.
    pub(crate) index: usize,
    /// The key's estimate in the previous window.
    pub(crate) prev: isize,
    /// The key's estimate in the current window, this observation included.
    pub(crate) curr: isize,
    /// Nanoseconds into the current window (less than `len`), and the window's length.
    pub(crate) into: u64,
    pub(crate) len: u64,
    /// When it was taken: nanoseconds on the Rate's clock.
    pub(crate) at: u64,
}

impl WindowView {
    /// Whether `prev·(1−f) + curr ≤ limit`, exactly, in integer nanoseconds. Never while a
    /// saturated count weighs (a current one is over every limit in any case).
    pub(crate) fn fits(&self, limit: isize) -> bool {
        if self.prev_saturated() {
            return false;
        }
        let (i, x) = (i128::from(self.len), i128::from(self.into.min(self.len)));
        (self.prev.max(0) as i128) * (i - x) + (self.curr as i128) * i <= (limit as i128) * i
    }

    /// Whether the previous window's count is saturated and still weighs (see [`SATURATED`]).
    #[inline]
    fn prev_saturated(&self) -> bool {
        self.prev >= SATURATED && self.into < self.len
    }

    /// How many more units fit under `limit` now: the most `u` with `prev·(1−f) + curr + u ≤
    /// limit`, exactly, in integer nanoseconds (0 when none do). Later in the same window it
    /// is at least as many: the count only falls as `f` grows.
    pub(crate) fn room(&self, limit: isize) -> u64 {
        if self.prev_saturated() {
            return 0;
        }
        let (i, x) = (i128::from(self.len), i128::from(self.into.min(self.len)));
        let left = (limit as i128) * i - (self.prev.max(0) as i128) * (i - x);
        if left < 0 || i == 0 {
            return 0;
        }
        let room = left / i - (self.curr as i128);
        u64::try_from(room.max(0)).unwrap_or(u64::MAX)
    }

    /// Whether the sliding-window count reaches `threshold`: `prev·(len − into) + curr·len ≥
    /// threshold·len`, without a division. In `f64`, whose rounding is monotone, so a count
    /// `curr` at or over the threshold always reaches it (the exact stage's proof of what a
    /// key admitted below its threshold rests on that).
    #[inline]
    pub(crate) fn reaches(&self, threshold: f64) -> bool {
        // The count is at most `prev + curr`: below the threshold, it cannot reach it (most
        // requests stop here, with no multiplication).
        if (self.prev.max(0).saturating_add(self.curr) as f64) < threshold {
            return false;
        }
        if self.prev_saturated() {
            return true;
        }
        let (len, into) = (self.len as f64, self.into.min(self.len) as f64);
        self.prev.max(0) as f64 * (len - into) + self.curr as f64 * len >= threshold * len
    }

    /// The same window with the key's (previous, current) counts read again.
    #[inline]
    pub(crate) fn with_counts(mut self, (prev, curr): (isize, isize)) -> Self {
        (self.prev, self.curr) = (prev, curr);
        self
    }

    /// The sliding-window count: `prev·(1−f) + curr`, with `f = into / len`.
    pub(crate) fn sliding(&self) -> f64 {
        let fraction = self.into.min(self.len) as f64 / self.len as f64;
        sliding_count(self.prev as f64, self.curr as f64, fraction)
    }

    /// How long until a request of `cost` units fits under `limit`, if nothing else arrives:
    /// the sliding count `prev·(1−f) + curr` falls as `f` grows, and `curr` becomes the next
    /// window's `prev`. `counted` is what the current window will count when the request is
    /// retried, not counting the retry (the sketch keeps a rejected request, the exact stage
    /// does not). In whole nanoseconds, rounded up, so a retry after exactly this long fits.
    /// `None` for a cost over the limit, which never fits (a fleet's share, smaller than the
    /// limit the cost was checked against, can be under it).
    pub(crate) fn retry_after(
        &self,
        limit: isize,
        counted: isize,
        cost: isize,
    ) -> Option<Duration> {
        let (p, c, r) = (
            self.prev.max(0) as i128,
            counted.max(0) as i128,
            (limit as i128) - (cost as i128),
        );
        if r < 0 {
            return None;
        }
        let (i, x) = (i128::from(self.len), i128::from(self.into.min(self.len)));
        let wait = if c >= SATURATED as i128 {
            // Saturated, it weighs whole to the end of the next window.
            (i - x) + i
        } else if self.prev_saturated() && c <= r {
            // Saturated, it weighs whole to the end of this window, and no longer after.
            i - x
        } else if c <= r {
            if p == 0 {
                return Some(Duration::ZERO);
            }
            // p·(i − x') + c·i ≤ r·i  ⇔  x' ≥ i − ⌊(r − c)·i / p⌋
            (i - (r - c) * i / p - x).max(0)
        } else {
            // In the next window: c·(i − y) ≤ r·i  ⇔  y ≥ i − ⌊r·i / c⌋ (c > r ≥ 0: no division
            // by zero)
            (i - x) + (i - r * i / c)
        };
        Some(Duration::from_nanos(
            u64::try_from(wait).unwrap_or(u64::MAX),
        ))
    }

    /// Lowers the counts to what `exact` proves for the windows it covers; `own` is this
    /// request's share of the current window (its cost when deciding a request, 0 when
    /// reporting).
    pub(crate) fn lower_to(&mut self, exact: &ExactWindows, own: isize) {
        if let Some(prev) = self.bucket.checked_sub(1).and_then(|b| exact.bound(b)) {
            self.prev = self.prev.min(prev);
        }
        if let Some(curr) = exact.bound(self.bucket) {
            self.curr = self.curr.min(curr.saturating_add(own));
        }
    }
}

/// A count in the latest of a run of numbered periods (a rate's buckets, a fleet's windows,
/// the exact stage's epochs) and in the one before: the crate's one two-period roll.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rolling<T> {
    /// The latest period counted.
    pub(crate) at: u64,
    /// The count of period `at`, and of the one before it.
    pub(crate) current: T,
    pub(crate) previous: T,
}

impl<T: Copy + Default> Rolling<T> {
    /// A count of `current` in period `at`, nothing before it.
    pub(crate) fn starting(at: u64, current: T) -> Self {
        Rolling {
            at,
            current,
            previous: T::default(),
        }
    }

    /// Moves forward to period `at`: the current count becomes the previous one when `at` is
    /// the next period, and both are dropped when it is later still. An earlier `at` changes
    /// nothing (what is counted then counts in the latest period).
    pub(crate) fn roll_to(&mut self, at: u64) {
        if at > self.at {
            self.previous = if at == self.at + 1 {
                self.current
            } else {
                T::default()
            };
            self.current = T::default();
            self.at = at;
        }
    }

    /// The count of period `at`: the current or previous count, nothing (the default) for a
    /// later period, `None` for one before these two.
    pub(crate) fn of(&self, at: u64) -> Option<T> {
        if at == self.at {
            Some(self.current)
        } else if at.checked_add(1) == Some(self.at) {
            Some(self.previous)
        } else if at > self.at {
            Some(T::default())
        } else {
            None
        }
    }
}

/// Requests admitted per window for one key, counted exactly from the window in which the
/// limiter started counting it (its promotion).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExactWindows {
    /// The window in which counting began; later windows are counted exactly.
    pub(crate) since: u64,
    /// An upper bound on the requests admitted in `since` before counting began.
    pub(crate) base: isize,
    /// The counts of the latest window counted and the one before.
    pub(crate) windows: Rolling<isize>,
    /// An upper bound on the requests admitted in the window before `since`, if one is known
    /// other than the sketch's (what the promotion threshold proves: see `limiter/proof.rs`).
    pub(crate) before: Option<isize>,
}

impl ExactWindows {
    pub(crate) fn new(since: u64, base: isize) -> Self {
        ExactWindows {
            since,
            base: base.max(0),
            windows: Rolling::starting(since, 0),
            before: None,
        }
    }

    /// Moves the counts forward to `bucket` (a request from an older bucket counts in the
    /// latest, which only over-counts it).
    pub(crate) fn roll_to(&mut self, bucket: u64) {
        self.windows.roll_to(bucket);
    }

    /// Counts an admitted request of `cost` units in the latest window.
    pub(crate) fn count(&mut self, cost: isize) -> u64 {
        self.windows.current = self.windows.current.saturating_add(cost);
        self.windows.at
    }

    /// Takes back `cost` units counted in window `bucket` (by [`count`](Self::count) after
    /// `roll_to(bucket)`), if the counts still reach it; a count the window no longer has is
    /// left as it is.
    pub(crate) fn uncount(&mut self, bucket: u64, cost: isize) {
        let w = &mut self.windows;
        let counted = if w.at == bucket {
            &mut w.current
        } else if w.at.checked_sub(1) == Some(bucket) {
            &mut w.previous
        } else {
            return;
        };
        *counted = counted.saturating_sub(cost).max(0);
    }

    /// An upper bound on the requests admitted in window `bucket` (after `roll_to(bucket)`
    /// or `roll_to(bucket + 1)`), or `None` if the window began before counting began (only
    /// the sketch can bound it).
    pub(crate) fn bound(&self, bucket: u64) -> Option<isize> {
        let counted = self.windows.of(bucket)?;
        if bucket > self.since {
            Some(counted)
        } else if bucket == self.since {
            Some(self.base.saturating_add(counted))
        } else if bucket + 1 == self.since {
            self.before
        } else {
            None
        }
    }

    /// The requests admitted in window `bucket` (after `roll_to(bucket)` or
    /// `roll_to(bucket + 1)`), if the exact stage counted all of them: a window after the one
    /// in which counting began, or that one if nothing was admitted in it before. `None` where
    /// only a bound is known.
    pub(crate) fn counted(&self, bucket: u64) -> Option<isize> {
        if bucket.checked_add(1) == Some(self.since) && self.before == Some(0) {
            return Some(0);
        }
        let counted = self.windows.of(bucket)?;
        match bucket.cmp(&self.since) {
            std::cmp::Ordering::Greater => Some(counted),
            std::cmp::Ordering::Equal => (self.base == 0).then_some(counted),
            std::cmp::Ordering::Less => None,
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn view(prev: isize, curr: isize, fraction: f64) -> WindowView {
        WindowView {
            bucket: 5,
            index: 0,
            prev,
            curr,
            into: (fraction * 1e9) as u64,
            len: 1_000_000_000,
            at: 0,
        }
    }

    /// A saturated count is a bound from below: while it weighs, nothing fits, there is no
    /// room, the threshold is reached, and a retry waits for its window to slide out whole.
    #[test]
    fn a_saturated_count_weighs_whole_while_its_window_weighs() {
        let last = WindowView {
            into: 999_999_999,
            ..view(SATURATED, 0, 0.0)
        };
        assert!(!last.fits(1 << 30), "a nanosecond before the window ends");
        assert_eq!(last.room(1 << 30), 0);
        assert!(last.reaches(1.0));
        assert_eq!(last.retry_after(271, 0, 1), Some(Duration::from_nanos(1)));
        let full = view(0, SATURATED, 0.25);
        assert_eq!(
            full.retry_after(271, SATURATED, 1),
            Some(Duration::from_millis(1750)),
            "to the end of the next window"
        );
    }

    #[test]
    fn retry_after_waits_for_the_previous_window_to_slide_out() {
        // limit 10, prev 10, curr 5 (+1 rejected) at f = 0.5: 10·0.5 + 5 = 10 already.
        // One more fits when 10·(1−f) + 5 ≤ 9, i.e. f ≥ 0.6: 0.1 of the interval from now.
        let wait = view(10, 6, 0.5).retry_after(10, 5, 1).unwrap();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn retry_after_waits_into_the_next_window_when_the_current_one_is_full() {
        // limit 4, curr 4 (+1 rejected) at f = 0.25: 0.75 to the boundary, then 4·(1−g) ≤ 3
        // needs g ≥ 0.25.
        let wait = view(0, 5, 0.25).retry_after(4, 4, 1).unwrap();
        assert!((wait.as_secs_f64() - 1.0).abs() < 1e-9, "{wait:?}");
    }

    /// A cost over the limit (a fleet's share can be smaller than the limit the cost was
    /// checked against) never fits: no wait, and no division by an empty window's count.
    #[test]
    fn a_cost_over_the_limit_has_no_retry_after_even_in_an_empty_window() {
        assert_eq!(view(0, 4, 0.5).retry_after(3, 0, 4), None);
        assert_eq!(view(2, 4, 0.5).retry_after(3, 2, 4), None);
        assert!(
            view(0, 4, 0.5).retry_after(4, 0, 4).is_some(),
            "at the limit"
        );
    }

    /// A retry of `cost` units exactly `retry_after` later fits, and one a nanosecond sooner
    /// does not: the wait is tight.
    #[test]
    fn a_retry_after_exactly_retry_after_fits_and_not_sooner() {
        let cases = [
            (10, 5, 0.5, 10),
            (0, 4, 0.25, 4),
            (7, 3, 0.9, 8),
            (9, 6, 0.3, 12),
        ];
        for (prev, counted, fraction, limit) in cases {
            for cost in 1..=limit.min(4) {
                let v = view(prev, counted + cost, fraction);
                let later = |wait: u64| {
                    let (into, rolled) = if v.into + wait < v.len {
                        (v.into + wait, false)
                    } else {
                        (v.into + wait - v.len, true)
                    };
                    WindowView {
                        prev: if rolled { counted } else { prev },
                        curr: if rolled { cost } else { counted + cost },
                        into,
                        ..v
                    }
                };
                let wait = v.retry_after(limit, counted, cost).unwrap().as_nanos() as u64;
                let case = format!("{prev} {counted} {fraction} {limit} cost {cost}");
                assert!(later(wait).fits(limit), "{case}");
                if wait > 0 {
                    assert!(!later(wait - 1).fits(limit), "{case}: not tight");
                }
            }
        }
    }

    /// The room is the most units that still fit: that many more fit, one more does not,
    /// over counts, fractions and limits up to their largest.
    #[test]
    fn the_room_is_the_most_units_that_still_fit() {
        let limits = [0, 1, 2, 7, 10, 1_000, 1 << 30, isize::MAX >> 1];
        let counts = [0, 1, 3, 10, 999, 1 << 29, 1 << 31];
        for limit in limits {
            for prev in counts {
                for curr in counts {
                    for fraction in [0.0, 0.001, 0.25, 0.5, 0.999_999, 1.0] {
                        let v = view(prev, curr, fraction);
                        let room = v.room(limit);
                        let with = |u: u64| WindowView {
                            curr: curr.saturating_add(u as isize),
                            ..v
                        };
                        let case = format!("{prev} {curr} {fraction} under {limit}: {room}");
                        if room > 0 {
                            assert!(with(room).fits(limit), "{case}");
                        }
                        assert!(!with(room + 1).fits(limit), "{case}: one more fits");
                    }
                }
            }
        }
    }

    #[test]
    fn exact_bound_is_exact_after_the_first_window_and_base_plus_count_in_it() {
        let mut r = ExactWindows::new(5, 7);
        assert_eq!(
            r.bound(4),
            None,
            "windows before counting began are not bounded"
        );
        r.windows.current += 2;
        assert_eq!(r.bound(5), Some(9));
        r.roll_to(6);
        r.count(1);
        assert_eq!(r.bound(5), Some(9));
        assert_eq!(r.bound(6), Some(1));
        r.roll_to(8);
        assert_eq!(
            r.bound(7),
            Some(0),
            "a window with no request counted is exactly 0"
        );
        assert_eq!(r.bound(8), Some(0));
        let mut promoted = ExactWindows::new(5, 3);
        assert_eq!(promoted.bound(4), None);
        promoted.before = Some(9);
        assert_eq!(
            promoted.bound(4),
            Some(9),
            "the window before promotion, if known"
        );
        assert_eq!(promoted.bound(3), None);
    }
}
