//! Keys known to be over their rate limit until a given time: the flood path.
//!
//! A request rejected for its rate gets a `retry_after`: the time until one more request
//! would fit if nothing else arrives. Until then the same key is rejected again whatever the
//! sketches say, so the limiter remembers the deadline and rejects the key's next requests
//! with one load, before counting them anywhere: no lock, no write to shared memory, so a
//! flood of one key costs each core a read of a line that stays in its cache. (envoy's
//! ratelimit keeps a local cache of over-limit keys for the same reason.)
//!
//! The exact stage knows that deadline one request sooner: the admission that takes a
//! promoted key to its limit, so that another request of its cost would not fit, holds the
//! deadline that request's refusal would (unless the key is at its in-flight limit too,
//! which that refusal would name). A key over its limit then has each admission followed by
//! refusals from here, none decided under the lock. Deadlines enter under the key's set lock,
//! which a refund (an admission taken back) takes too: the refund forgets the deadline it
//! makes late.
//!
//! Requests rejected here are not counted in the sketches, and that is what makes the
//! deadline exact: `retry_after` assumed that nothing else arrives. The deadline is checked
//! against the time the usual path would decide on: the rate's coarse time, except within
//! its lag of a window's end, where the request goes the usual way on the exact time.
//!
//! # Layout
//!
//! One `AtomicU64` per slot, found by the key's spread hash in the line that holds its exact
//! stage filter cell too (`key_lines.rs`): 23 bits of tag (other bits of the spread), a bit
//! that marks the deadline used (see below), and the deadline's low 40 bits, compared with
//! wrapping arithmetic so the clock may run for any length of time. The deadline's unit is the
//! finest power of two of nanoseconds whose range of 2^39 units holds the longest wait, two
//! windows: 1 ns for windows up to 4.5 minutes, where deadlines and the `retry_after` the
//! cache reports are exact; for longer windows the deadline is rounded down (the cache lets a
//! key through up to a unit early, to be decided the usual way, and never rejects it at or
//! past its deadline) and the `retry_after` up (never early, less than a unit late: 16 ns
//! for an hour's window). Never beyond the two windows a rate rejection can wait at most.
//!
//! The limiter's sweep, once a window, clears the deadlines that have passed, so none is left
//! to be read again when the field wraps (2^39 units after it passed, two windows at least). A newer rejection overwrites the slot whatever it held, so the table never fills; a key
//! whose slot was taken over is simply decided by the sketches again. A key that shares
//! another's slot and tag (probability 2^-23 per lookup of a slot held by another key) is
//! rejected at most until the other's deadline.
//!
//! # Refusals counted per key
//!
//! A refusal here is counted in no entry (that is what keeps a flood cheap), yet the reports
//! rank keys by their refusals (`heavy_hitters`). A refusal decided under the lock counts
//! itself and the run of refusals its deadline holds; a deadline an admission held has no such
//! refusal, so the first refusal the cache answers on it marks the word used (one
//! compare-and-swap a run, none after), and the entry, which kept the word it put there,
//! counts the run under its set's lock ([`settle`](OverLimit::settle)): at its next
//! decision, when it leaves the stage, at each sweep, before a newer deadline or a refund
//! replaces it. A flood's count is then what it was when each run began with a refusal under
//! the lock. A run goes uncounted only when another key's deadline takes the slot first, or
//! when the sweep clears a deadline that passed just after the entry's settling looked.
//!
//! # Orderings
//!
//! `Relaxed` throughout: a slot publishes no other data, and a reader that sees an old value
//! (an earlier deadline, or none) decides as the limiter would have without the cache.

use std::time::Duration;

use crate::estimator::remix;
use crate::sync::{AtomicU64, Ordering};

use super::key_lines::{KeyLine, KeyLines};

/// Bits of a slot's deadline; the next is the used mark, the rest the tag.
const DEADLINE_BITS: u32 = 40;
/// Set by the first refusal the cache answers on a deadline an admission held.
const USED: u64 = 1 << DEADLINE_BITS;
/// Where a slot's tag starts.
const TAG_SHIFT: u32 = DEADLINE_BITS + 1;
const DEADLINE_MASK: u64 = (1 << DEADLINE_BITS) - 1;
/// Deadlines less than this many units ahead are cached: half the wrapping range, so that a
/// deadline that has passed is never read as one far ahead.
const MAX_AHEAD: u64 = 1 << (DEADLINE_BITS - 1);

/// The seed of the remix that mixes a rate limit into a key's tag: two limits give tags
/// that differ in every bit with probability 1/2, so a changed limit misses (but for a 2^-23
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
/// (see `Defaults`). A tag is the top `64 − TAG_SHIFT` bits of `spread ^ mix`, so only
/// those bits of the mix are kept (and the used mark's, which tags ignore), and the limit (at most `Limits::MAX_LIMIT`, under
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

/// The unit a limiter's deadlines are kept in, and the longest a rate rejection waits: worked
/// out once, at build, from its windows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Unit {
    /// The longest a rate rejection waits, in nanoseconds (`Rate::longest_wait_nanos`; 0
    /// without a rate limit): what a `retry_after` is capped at.
    longest_wait: u64,
    /// The unit is 2^`shift` ns: the finest whose `MAX_AHEAD` units hold `longest_wait`.
    shift: u32,
    /// The unit less one nanosecond, kept rather than worked out on the flood path.
    less_one: u64,
}

impl Unit {
    /// For a limiter whose rate rejections wait at most `longest_wait` ns.
    pub(crate) fn for_longest_wait(longest_wait: u64) -> Unit {
        // longest_wait < 2^bits ≤ 2^(DEADLINE_BITS − 1 + shift) = MAX_AHEAD units.
        let bits = u64::BITS - longest_wait.leading_zeros();
        let shift = bits.saturating_sub(DEADLINE_BITS - 1);
        Unit {
            longest_wait,
            shift,
            less_one: (1 << shift) - 1,
        }
    }
}

/// The deadlines of keys known to be over their rate limit, in the slots of the exact
/// stage's filter lines (`key_lines.rs`) in `unit`: a request reads its slot and, after its
/// sketches, its filter cell from one line.
#[derive(Clone, Copy)]
pub(crate) struct OverLimit<'a> {
    pub(crate) lines: &'a KeyLines,
    pub(crate) unit: Unit,
}

impl OverLimit<'_> {
    fn slot(&self, spread: u64) -> &AtomicU64 {
        self.lines.key_line(spread).slot()
    }

    /// The tag of a key under a rate limit whose [`limit_mix`] is `mix`: a deadline holds
    /// only for the limit it was computed under, so a key whose limit changed (its plan, or
    /// the defaults) misses and is decided the usual way.
    fn tag(spread: u64, mix: u64) -> u64 {
        (spread ^ mix) >> TAG_SHIFT
    }

    /// The slot's word if it holds a deadline of the key on `line` under the limit whose
    /// [`limit_mix`] is `mix` (passed or not): `None` for most keys, with one load and no
    /// clock. [`remaining_of`](Self::remaining_of) reads the deadline.
    #[inline]
    pub(crate) fn held(line: KeyLine<'_>, limit_mix: u64) -> Option<u64> {
        let word = line.slot().load(Ordering::Relaxed);
        (word != 0 && word >> TAG_SHIFT == Self::tag(line.spread(), limit_mix)).then_some(word)
    }

    /// Marks the `word` that [`held`](Self::held) returned on `line` used, if an admission
    /// held it and no refusal has marked it yet: one compare-and-swap a run of refusals,
    /// which fails (and is not retried) if the slot changed meanwhile.
    #[inline]
    pub(crate) fn mark_used(line: KeyLine<'_>, word: u64) {
        if word & USED == 0 {
            let _ = line.slot().compare_exchange(
                word,
                word | USED,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// Counts in `rejected` the run of refusals the cache answered on the deadline an
    /// admission of the key on `line` held (`held`: the word [`insert`](Self::insert)
    /// returned then, 0 once counted or for none), under the key's set lock. `held` is kept
    /// while the slot holds the word unused (the run may come yet), and cleared once it is
    /// counted or the slot holds another word.
    pub(crate) fn settle(line: KeyLine<'_>, held: &mut u64, rejected: &mut u64) {
        if *held == 0 {
            return;
        }
        let word = line.slot().load(Ordering::Relaxed);
        if word == *held {
            return;
        }
        if word == *held | USED {
            *rejected = rejected.saturating_add(1);
        }
        *held = 0;
    }

    /// The run [`settle`](Self::settle) would count now: 1 if the cache refused the key on
    /// the deadline `held`, else 0 (for reports, which change nothing).
    pub(crate) fn unsettled(line: KeyLine<'_>, held: u64) -> u64 {
        u64::from(held != 0 && line.slot().load(Ordering::Relaxed) == held | USED)
    }

    /// How long the key with spread hash `spread` is still over its limit at time `now`
    /// (rounded up to a unit, at most the longest wait), if it is known to be.
    #[cfg(test)]
    fn remaining(&self, spread: u64, limit_mix: u64, now: u64) -> Option<Duration> {
        self.remaining_of(Self::held(self.lines.key_line(spread), limit_mix)?, now)
    }

    /// How long the key is still over its limit at time `now`, from the `word` that
    /// [`held`](Self::held) returned for it (rounded up to a unit, at most the longest wait).
    #[inline]
    pub(crate) fn remaining_of(&self, word: u64, now: u64) -> Option<Duration> {
        // Units from now's unit to the deadline's, modulo the deadline's range.
        let ahead = (word.wrapping_sub(now >> self.unit.shift)) & DEADLINE_MASK;
        if ahead >= MAX_AHEAD {
            return None; // passed
        }
        // The deadline (rounded down) minus now, exactly.
        let less_one = self.unit.less_one;
        let until_deadline = (ahead << self.unit.shift).checked_sub(now & less_one)?;
        if until_deadline == 0 {
            return None;
        }
        // The deadline itself is less than a unit later.
        Some(Duration::from_nanos(
            (until_deadline + less_one).min(self.unit.longest_wait),
        ))
    }

    /// Remembers that the key is over its rate limit `limit` until `deadline` (nanoseconds on
    /// the limiter's clock, `now` being the time of the rejection); returns the word the slot
    /// holds now, or 0 for a deadline too far ahead to cache.
    pub(crate) fn insert(&self, spread: u64, limit_mix: u64, now: u64, deadline: u64) -> u64 {
        let units = deadline >> self.unit.shift;
        if units.saturating_sub(now >> self.unit.shift) >= MAX_AHEAD {
            return 0;
        }
        let word = (Self::tag(spread, limit_mix) << TAG_SHIFT) | (units & DEADLINE_MASK);
        self.slot(spread).store(word, Ordering::Relaxed);
        word
    }

    /// Clears the slot of the key with spread hash `spread`, whatever deadline it holds (the
    /// key's under any of its limits and costs, or another key's that shares the slot, which
    /// is then decided the usual way: the cache only ever refuses sooner).
    pub(crate) fn forget(&self, spread: u64) {
        self.slot(spread).store(0, Ordering::Relaxed);
    }

    /// Clears the slots whose deadline has passed at `now`, so that no deadline outlives the
    /// range it is read in (the deadline field wraps every 2^40 units, four times the longest
    /// wait at least). Run by the limiter's sweep, off the request path; a slot rewritten
    /// meanwhile is left alone.
    pub(crate) fn forget_expired(&self, now: u64) {
        for slot in self.lines.slots() {
            let word = slot.load(Ordering::Relaxed);
            let ahead = (word.wrapping_sub(now >> self.unit.shift)) & DEADLINE_MASK;
            if word != 0 && (ahead == 0 || ahead >= MAX_AHEAD) {
                let _ = slot.compare_exchange(word, 0, Ordering::Relaxed, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    /// The longest wait of 1 s windows, two seconds: deadlines to the nanosecond.
    const WAIT: u64 = 2_000_000_000;
    /// The rate limit the tests' deadlines are computed under.
    const L: isize = 10;

    /// The cache in `lines` of a limiter whose rate rejections wait at most `longest_wait`.
    fn cache_of(lines: &KeyLines, longest_wait: u64) -> OverLimit<'_> {
        OverLimit {
            lines,
            unit: Unit::for_longest_wait(longest_wait),
        }
    }

    #[test]
    fn a_key_is_rejected_until_its_deadline_and_not_at_it() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
        let key = 0xABCD_EF01_2345_6789;
        assert_eq!(cache.remaining(key, limit_mix(L), 0), None);
        cache.insert(key, limit_mix(L), 0, 5_000_001);
        let exactly = |ns| Some(Duration::from_nanos(ns));
        assert_eq!(cache.remaining(key, limit_mix(L), 0), exactly(5_000_001));
        assert_eq!(cache.remaining(key, limit_mix(L), 5_000_000), exactly(1));
        assert_eq!(
            cache.remaining(key, limit_mix(L), 5_000_001),
            None,
            "rejects at the deadline"
        );
        let capped = cache_of(&lines, 1_000_000);
        assert_eq!(capped.remaining(key, limit_mix(L), 0), exactly(1_000_000));
        // Forgotten by the sweep once passed, so the wrapped deadline field never reads as
        // ahead again (at 2^60 ns it would, being a multiple of 2^40).
        cache.forget_expired(5_000_001);
        assert_eq!(
            cache.remaining(key, limit_mix(L), 1 << 60),
            None,
            "rejects long after it"
        );
    }

    /// The unit is the finest whose range holds the longest wait: 1 ns up to 2^39 ns (two
    /// windows of 4.5 minutes), 16 ns for hours' windows, 2^17 ns for a year's.
    #[test]
    fn deadlines_are_kept_in_the_finest_unit_that_holds_the_longest_wait() {
        let shift = |wait| Unit::for_longest_wait(wait).shift;
        assert_eq!(shift(WAIT), 0);
        assert_eq!(shift((1 << 39) - 1), 0);
        assert_eq!(shift(1 << 39), 1);
        assert_eq!(shift(2 * 3_600_000_000_000), 4);
        assert_eq!(shift(2 * 365 * 86_400_000_000_000), 17);
        for wait in [0, 1, WAIT, 1 << 39, 1 << 50, u64::MAX / 2, u64::MAX] {
            let shift = shift(wait);
            assert!(u128::from(wait) < u128::from(MAX_AHEAD) << shift, "{wait}");
            if shift > 0 {
                assert!(wait >= MAX_AHEAD << (shift - 1), "not the finest: {wait}");
            }
        }
    }

    /// With a unit of 16 ns (an hour's windows) a deadline is rounded down, the key let
    /// through up to a unit early to be decided the usual way, and its `retry_after` rounded
    /// up: never early, less than a unit late.
    #[test]
    fn a_coarser_unit_rounds_the_deadline_down_and_the_wait_up() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, 2 * 3_600_000_000_000);
        let key = 0xABCD_EF01_2345_6789;
        cache.insert(key, limit_mix(L), 0, 5_000_005);
        let left = cache.remaining(key, limit_mix(L), 0).unwrap();
        assert!(left >= Duration::from_nanos(5_000_005), "early: {left:?}");
        assert!(left < Duration::from_nanos(5_000_005 + 16), "{left:?}");
        assert_eq!(cache.remaining(key, limit_mix(L), 5_000_000), None);
    }

    #[test]
    fn deadlines_wrap_with_the_clock() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
        let key = 7;
        // Past the deadline field's range many times: 2^40 ns is about 18 minutes.
        let now = (1 << 56) + 123_456_789;
        cache.insert(key, limit_mix(L), now, now + 1_999_999_999);
        assert_eq!(
            cache.remaining(key, limit_mix(L), now),
            Some(Duration::from_nanos(1_999_999_999))
        );
        assert_eq!(
            cache.remaining(key, limit_mix(L), now + 1_999_999_999),
            None
        );
    }

    #[test]
    fn another_key_in_the_same_slot_is_not_rejected() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
        let key = 0x1111_0000_0000_0003;
        let same_slot = 0x2222_0000_0000_0003;
        cache.insert(key, limit_mix(L), 0, 1_000_000_000);
        assert!(cache.remaining(key, limit_mix(L), 0).is_some());
        assert_eq!(cache.remaining(same_slot, limit_mix(L), 0), None);
        cache.insert(same_slot, limit_mix(L), 0, 1_000_000_000);
        assert_eq!(
            cache.remaining(key, limit_mix(L), 0),
            None,
            "the newer rejection took the slot"
        );
    }

    /// A deadline inserted under a limit's whole mix is found with the one word a
    /// `LimitTag` keeps of it, which gives the limit back.
    #[test]
    fn a_limit_tag_finds_the_deadlines_of_its_limit_and_keeps_the_limit() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
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

    /// A run of refusals on a deadline an admission held counts once, however many refusals
    /// marked it; a deadline no refusal used is kept for a run to come, and one whose slot
    /// another key's deadline took counts nothing.
    #[test]
    fn a_run_of_refusals_counts_once_when_settled() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
        let (key, same_slot) = (0x1111_0000_0000_0003, 0x2222_0000_0000_0003);
        let mut held = cache.insert(key, limit_mix(L), 0, 5_000_000);
        let mut rejected = 0;
        OverLimit::settle(lines.key_line(key), &mut held, &mut rejected);
        assert!(held != 0 && rejected == 0, "unused: kept");
        for _ in 0..3 {
            let word = OverLimit::held(lines.key_line(key), limit_mix(L)).expect("still held");
            OverLimit::mark_used(lines.key_line(key), word);
        }
        assert_eq!(OverLimit::unsettled(lines.key_line(key), held), 1);
        OverLimit::settle(lines.key_line(key), &mut held, &mut rejected);
        assert_eq!((held, rejected), (0, 1));
        OverLimit::settle(lines.key_line(key), &mut held, &mut rejected);
        assert_eq!(rejected, 1, "once");

        let mut held = cache.insert(key, limit_mix(L), 0, 5_000_000);
        let theirs = cache.insert(same_slot, limit_mix(L), 0, 5_000_000);
        OverLimit::mark_used(lines.key_line(same_slot), theirs);
        assert_eq!(OverLimit::unsettled(lines.key_line(key), held), 0);
        OverLimit::settle(lines.key_line(key), &mut held, &mut rejected);
        assert_eq!((held, rejected), (0, 1), "another key's run");
    }

    #[test]
    fn a_deadline_holds_only_for_the_limit_it_was_computed_under() {
        let lines = KeyLines::new(1);
        let cache = cache_of(&lines, WAIT);
        let key = 0xABCD_EF01_2345_6789;
        cache.insert(key, limit_mix(L), 0, 1_000_000_000);
        assert!(cache.remaining(key, limit_mix(L), 0).is_some());
        assert_eq!(
            cache.remaining(key, limit_mix(L + 1), 0),
            None,
            "a raised limit misses"
        );
        assert_eq!(
            cache.remaining(key, limit_mix(L - 1), 0),
            None,
            "a lowered one too"
        );
    }
}
