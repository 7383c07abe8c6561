//! Keys known to be over their rate limit until a given time: the flood path.
//!
//! A request rejected for its rate gets a `retry_after`: the time until one more request
//! would fit if nothing else arrives. Until then the same key is rejected again whatever the
//! sketches say, so the limiter remembers the deadline and rejects the key's next requests
//! with one load, before counting them anywhere: no lock, no write to shared memory, so a
//! flood of one key costs each core a read of a line that stays in its cache. (envoy's
//! ratelimit keeps a local cache of over-limit keys for the same reason.)
//!
//! A deadline enters under the key's set lock in the exact stage, which a refund (an
//! admission `try_acquire_and` takes back) takes too: the refund forgets the deadline that the
//! units it gives back make late, or the key would be refused the room they leave.
//!
//! Requests rejected here are not counted in the sketches, and that is what makes the
//! deadline exact: `retry_after` assumed that nothing else arrives. The deadline is checked
//! against the time the usual path would decide on: the rate's coarse time, except within
//! its lag of a window's end, where the request goes the usual way on the exact time.
//!
//! # Layout
//!
//! One `AtomicU64` per slot, found by the key's spread hash in the line that holds its exact
//! stage filter cell too (`key_lines.rs`): 24 bits of tag (other bits of the spread) and the deadline's low 40 bits, in units of 2^16 ns (65.5 µs), compared with
//! wrapping arithmetic so the clock may run for any length of time; deadlines more than 2^39
//! units (2^55 ns, about 417 days) ahead are not cached. The deadline is rounded down: the cache lets a key
//! through up to a unit early, to be decided the usual way, and never rejects it at or past
//! its deadline. The `retry_after` it reports is rounded up to the next unit (never early,
//! at most 65.5 µs late) and never beyond the two windows a rate rejection can wait at most.
//!
//! The limiter's sweep clears the deadlines that have passed, so none is left to be read
//! again when the field wraps. A newer rejection overwrites the slot whatever it held, so the table never fills; a key
//! whose slot was taken over is simply decided by the sketches again. A key that shares
//! another's slot and tag (probability 2^-24 per lookup of a slot held by another key) is
//! rejected at most until the other's deadline.
//!
//! # Orderings
//!
//! `Relaxed` throughout: a slot publishes no other data, and a reader that sees an old value
//! (an earlier deadline, or none) decides as the limiter would have without the cache.

use std::time::Duration;

use crate::estimator::remix;
use crate::sync::{AtomicU64, Ordering};

use super::key_lines::{KeyLine, KeyLines};

/// Bits of a slot's deadline; the rest is the tag.
const DEADLINE_BITS: u32 = 40;
const DEADLINE_MASK: u64 = (1 << DEADLINE_BITS) - 1;
/// The deadline's unit: 2^16 nanoseconds.
const UNIT_SHIFT: u32 = 16;
const UNIT: u64 = 1 << UNIT_SHIFT;
/// Deadlines at most this many units ahead are cached: half the wrapping range, so that a
/// deadline that has passed is never read as one far ahead.
const MAX_AHEAD: u64 = 1 << (DEADLINE_BITS - 1);

/// The seed of the remix that mixes a rate limit into a key's tag: two limits give tags
/// that differ in every bit with probability 1/2, so a changed limit misses (but for a 2^-24
/// chance, as for two keys).
const LIMIT_SEED: u64 = 0x6c69_6d69_7473_7467;

/// What a rate limit mixes into its keys' tags: computed once with the limit's thresholds
/// (not per request), so the flood path stays one load.
pub(crate) fn limit_mix(limit: isize) -> u64 {
    remix(limit as u64, LIMIT_SEED)
}

/// What a request's cost mixes into its key's tag besides its limit's: a deadline holds for
/// requests of the cost it was worked out for (a smaller request may fit sooner, a larger one
/// later: both miss, and are decided the usual way), and a request of one unit mixes nothing,
/// so the tags of requests without a cost are what they were. One multiplication, beside the
/// slot's load rather than before it: Fibonacci hashing, whose top bits (the tag's) differ
/// from cost to cost.
#[inline]
pub(crate) fn cost_mix(cost: u32) -> u64 {
    u64::from(cost.wrapping_sub(1)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What a decision in shadow mixes into its tags besides its limit's: a shadow decision puts
/// no deadline in the cache, and must not meet one an enforcing decision under the same limit
/// put there (it would be refused for real).
pub(crate) const SHADOW_MIX: u64 = 0x7368_6164_6f77_2121;

/// A rate limit and the bits of its mix that tags are made of, in one word: what a request
/// under the limiter's default limits reads on the flood path in place of their thresholds
/// (see `Defaults`). A tag is the top `64 − DEADLINE_BITS` bits of `spread ^ mix`, so only
/// those bits of the mix are kept, and the limit (at most `Limits::MAX_LIMIT`, under
/// 2^`DEADLINE_BITS`) takes the others.
///
/// `Release` store and `Acquire` load, for the order `Defaults` keeps its words in; the word
/// itself is all the flood path needs, and is never torn.
pub(crate) struct LimitTag(AtomicU64);

impl LimitTag {
    /// The word for a rate limit `limit` whose tags mix in `mix`, or for none (0: every rate
    /// limit is at least 1).
    fn word(rate: Option<(u64, isize)>) -> u64 {
        rate.map_or(0, |(mix, limit)| {
            debug_assert!((1..=DEADLINE_MASK as isize).contains(&limit), "{limit}");
            (mix & !DEADLINE_MASK) | (limit as u64 & DEADLINE_MASK)
        })
    }

    /// For the rate limit `limit` with tag mix `mix` (see [`limit_mix`]); `None` for none.
    pub(crate) fn new(rate: Option<(u64, isize)>) -> Self {
        LimitTag(AtomicU64::new(Self::word(rate)))
    }

    /// Replaces the limit.
    pub(crate) fn set(&self, rate: Option<(u64, isize)>) {
        self.0.store(Self::word(rate), Ordering::Release);
    }

    /// The tag mix to look the cache up with and the limit, if there is a rate limit.
    #[inline]
    pub(crate) fn get(&self) -> Option<(u64, isize)> {
        let word = self.0.load(Ordering::Acquire);
        (word != 0).then_some((word & !DEADLINE_MASK, (word & DEADLINE_MASK) as isize))
    }
}

/// The deadlines of keys known to be over their rate limit, in the slots of the exact
/// stage's filter lines (`key_lines.rs`): a request reads its slot and, after its sketches,
/// its filter cell from one line.
#[derive(Clone, Copy)]
pub(crate) struct OverLimit<'a>(pub(crate) &'a KeyLines);

impl OverLimit<'_> {
    fn slot(&self, spread: u64) -> &AtomicU64 {
        self.0.key_line(spread).slot()
    }

    /// The tag of a key under a rate limit whose [`limit_mix`] is `mix`: a deadline holds
    /// only for the limit it was computed under, so a key whose limit changed (its plan, or
    /// the defaults) misses and is decided the usual way.
    fn tag(spread: u64, mix: u64) -> u64 {
        (spread ^ mix) >> DEADLINE_BITS
    }

    /// The slot's word if it holds a deadline of the key on `line` under the limit whose
    /// [`limit_mix`] is `mix` (passed or not): `None` for most keys, with one load and no
    /// clock. [`remaining_of`](Self::remaining_of) reads the deadline.
    #[inline]
    pub(crate) fn held(line: KeyLine<'_>, limit_mix: u64) -> Option<u64> {
        let word = line.slot().load(Ordering::Relaxed);
        (word != 0 && word >> DEADLINE_BITS == Self::tag(line.spread(), limit_mix)).then_some(word)
    }

    /// How long the key with spread hash `spread` is still over its limit at time `now`
    /// (rounded up to a unit, at most `cap`), if it is known to be.
    #[inline]
    #[cfg(test)]
    fn remaining(&self, spread: u64, limit_mix: u64, now: u64, cap: Duration) -> Option<Duration> {
        let cap = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        Self::remaining_of(Self::held(self.0.key_line(spread), limit_mix)?, now, cap)
    }

    /// [`remaining`](Self::remaining) for the `word` that [`held`](Self::held) returned,
    /// `cap` in nanoseconds (see `Rate::longest_wait_nanos`).
    #[inline]
    pub(crate) fn remaining_of(word: u64, now: u64, cap: u64) -> Option<Duration> {
        // Units from now's unit to the deadline's, modulo the deadline's range.
        let ahead = (word.wrapping_sub(now >> UNIT_SHIFT)) & DEADLINE_MASK;
        if ahead >= MAX_AHEAD {
            return None; // passed
        }
        // The deadline (rounded down) minus now, exactly.
        let until_deadline = (ahead << UNIT_SHIFT).checked_sub(now & (UNIT - 1))?;
        if until_deadline == 0 {
            return None;
        }
        Some(Duration::from_nanos((until_deadline + UNIT).min(cap)))
    }

    /// Remembers that the key is over its rate limit `limit` until `deadline` (nanoseconds on
    /// the limiter's clock, `now` being the time of the rejection).
    pub(crate) fn insert(&self, spread: u64, limit_mix: u64, now: u64, deadline: u64) {
        let units = deadline >> UNIT_SHIFT;
        if units.saturating_sub(now >> UNIT_SHIFT) >= MAX_AHEAD {
            return;
        }
        let word = (Self::tag(spread, limit_mix) << DEADLINE_BITS) | (units & DEADLINE_MASK);
        self.slot(spread).store(word, Ordering::Relaxed);
    }

    /// Clears the slot of the key with spread hash `spread`, whatever deadline it holds (the
    /// key's under any of its limits and costs, or another key's that shares the slot, which
    /// is then decided the usual way: the cache only ever refuses sooner).
    pub(crate) fn forget(&self, spread: u64) {
        self.slot(spread).store(0, Ordering::Relaxed);
    }

    /// Clears the slots whose deadline has passed at `now`, so that no deadline outlives the
    /// range it is read in (the clock's deadline field wraps every 2^56 ns, 2.3 years). Run by
    /// the limiter's sweep, off the request path; a slot rewritten meanwhile is left alone.
    pub(crate) fn forget_expired(&self, now: u64) {
        for slot in self.0.slots() {
            let word = slot.load(Ordering::Relaxed);
            let ahead = (word.wrapping_sub(now >> UNIT_SHIFT)) & DEADLINE_MASK;
            if word != 0 && (ahead == 0 || ahead >= MAX_AHEAD) {
                let _ = slot.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(3600);
    /// The rate limit the tests' deadlines are computed under.
    const L: isize = 10;

    #[test]
    fn a_key_is_rejected_until_its_deadline_and_not_at_it() {
        let lines = KeyLines::new(1);
        let cache = OverLimit(&lines);
        let key = 0xABCD_EF01_2345_6789;
        assert_eq!(cache.remaining(key, limit_mix(L), 0, CAP), None);
        cache.insert(key, limit_mix(L), 0, 5_000_000);
        let left = cache.remaining(key, limit_mix(L), 0, CAP).unwrap();
        assert!(left >= Duration::from_millis(5), "reported early: {left:?}");
        assert!(left <= Duration::from_nanos(5_000_000 + UNIT), "{left:?}");
        let short = Duration::from_millis(1);
        assert_eq!(cache.remaining(key, limit_mix(L), 0, short), Some(short));
        assert!(cache.remaining(key, limit_mix(L), 4_000_000, CAP).is_some());
        assert_eq!(
            cache.remaining(key, limit_mix(L), 5_000_000, CAP),
            None,
            "rejects at the deadline"
        );
        // Forgotten by the sweep once passed, so the wrapped deadline field never reads as
        // ahead again (at 2^60 ns it would, being a multiple of 2^56).
        cache.forget_expired(5_000_000);
        assert_eq!(
            cache.remaining(key, limit_mix(L), 1 << 60, CAP),
            None,
            "rejects long after it"
        );
    }

    #[test]
    fn deadlines_wrap_with_the_clock() {
        let lines = KeyLines::new(1);
        let cache = OverLimit(&lines);
        let key = 7;
        // Past the deadline field's range: 2^56 ns is about 2.3 years.
        let now = (1 << 56) + 123_456_789;
        cache.insert(key, limit_mix(L), now, now + 2_000_000_000);
        let left = cache.remaining(key, limit_mix(L), now, CAP).unwrap();
        assert!(left >= Duration::from_secs(2), "{left:?}");
        assert!(
            left <= Duration::from_nanos(2_000_000_000 + UNIT),
            "{left:?}"
        );
        assert_eq!(
            cache.remaining(key, limit_mix(L), now + 2_000_000_000, CAP),
            None
        );
    }

    #[test]
    fn another_key_in_the_same_slot_is_not_rejected() {
        let lines = KeyLines::new(1);
        let cache = OverLimit(&lines);
        let key = 0x1111_0000_0000_0003;
        let same_slot = 0x2222_0000_0000_0003;
        cache.insert(key, limit_mix(L), 0, 1_000_000_000);
        assert!(cache.remaining(key, limit_mix(L), 0, CAP).is_some());
        assert_eq!(cache.remaining(same_slot, limit_mix(L), 0, CAP), None);
        cache.insert(same_slot, limit_mix(L), 0, 1_000_000_000);
        assert_eq!(
            cache.remaining(key, limit_mix(L), 0, CAP),
            None,
            "the newer rejection took the slot"
        );
    }

    /// A deadline inserted under a limit's whole mix is found with the one word a
    /// `LimitTag` keeps of it, which gives the limit back.
    #[test]
    fn a_limit_tag_finds_the_deadlines_of_its_limit_and_keeps_the_limit() {
        let lines = KeyLines::new(1);
        let cache = OverLimit(&lines);
        for limit in [1, 2, 10, 100, 1_000_000, crate::Limits::MAX_LIMIT as isize] {
            let key = 0xABCD_EF01_2345_6789 ^ limit as u64;
            let tag = LimitTag::new(Some((limit_mix(limit), limit)));
            let (mix, kept) = tag.get().unwrap();
            assert_eq!(kept, limit);
            cache.insert(key, limit_mix(limit), 0, 1_000_000_000);
            assert!(
                OverLimit::held(lines.key_line(key), mix).is_some(),
                "limit {limit}"
            );
            assert!(
                OverLimit::held(lines.key_line(key), limit_mix(limit + 1) & !DEADLINE_MASK)
                    .is_none(),
                "another limit's tag misses: {limit}"
            );
        }
        assert_eq!(LimitTag::new(None).get(), None);
        let tag = LimitTag::new(None);
        tag.set(Some((limit_mix(5), 5)));
        assert_eq!(tag.get().map(|(_, limit)| limit), Some(5));
    }

    #[test]
    fn a_deadline_holds_only_for_the_limit_it_was_computed_under() {
        let lines = KeyLines::new(1);
        let cache = OverLimit(&lines);
        let key = 0xABCD_EF01_2345_6789;
        cache.insert(key, limit_mix(L), 0, 1_000_000_000);
        assert!(cache.remaining(key, limit_mix(L), 0, CAP).is_some());
        assert_eq!(
            cache.remaining(key, limit_mix(L + 1), 0, CAP),
            None,
            "a raised limit misses"
        );
        assert_eq!(
            cache.remaining(key, limit_mix(L - 1), 0, CAP),
            None,
            "a lowered one too"
        );
    }
}
