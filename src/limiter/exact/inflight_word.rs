//! A place's units in flight as one atomic word beside its set's lock, so that a permit gives
//! its units back without that lock.
//!
//! # The word
//!
//! From the high bits: the place's *generation* (31 bits: which promotion of which key the
//! place holds, never 0 while it holds one), one *watched* bit, and the units in flight the
//! place counts for that generation (32 bits). A key enters a place under the set's lock,
//! which swaps in a fresh generation with a count of 0 ([`InflightWord::reset`]); admissions
//! add to the count under that lock too ([`InflightWord::add`]); a release subtracts without
//! it ([`InflightWord::give_back`]), unless the place is watched. Every change is a
//! read-modify-write of the whole word, so:
//!
//! - **No count taken from the wrong key.** A permit remembers the generation it was counted
//!   in, and gives back only to a word of that generation: a place given to another key, or
//!   to a later promotion of the same key, has a new generation, and the permit's units left
//!   with the entry that counted them (their sketch units are given back as any
//!   un-promoted key's). A generation is reused only after 2^31 promotions in the same set.
//! - **No unit lost to a replacement.** A release that read the old generation and swaps
//!   after the reset fails (the word changed) and finds the new generation; a reset by a
//!   plain store could let such a release land in the new generation (the loom model
//!   `a_replacement_keeps_the_old_keys_units_out_of_the_new_generation`).
//! - **A watched place's releases are seen under the lock.** A key learning its in-flight
//!   limit must be told of each completion with the units in flight before it. The bit is set
//!   and cleared under the lock by a read-modify-write of the same word, so each release is
//!   ordered against it: a release that saw the bit clear gave its units back before the bit
//!   was set (the learner, which reads the count after, never counted them), and one that sees
//!   it set gives them back under the lock.
//!
//! # When a release looks at the key
//!
//! Beside the word, the place keeps a number its tenant sets under the lock (`look_below`):
//! a release that leaves the place nothing in flight takes the lock, to see whether the key
//! has cooled down and leaves, only if the key's in-flight estimate is below it (the key's
//! promotion threshold for in flight: above it the key is not cool, whatever else says). A
//! stale read of it, or of the estimate, costs a lock taken needlessly, or a key left in the
//! stage until its next request or the clock's sweep finds it cool: nothing is counted
//! differently.
//!
//! # The count's range
//!
//! Units counted here are counted in the in-flight sketch too, whose counters read at most
//! 2^31 and refuse a request that would take them past it: a count is at most 2^31 and never
//! carries into the bits above it.
//!
//! # Orderings
//!
//! The word orders nothing but itself against the lock's holders, with one exception: the
//! rebase (under the lock) reads the in-flight sketch, then this word, and a release gives
//! back this word, then the sketch, so that the rebase never finds fewer units untracked than
//! there are (the loom model `a_release_racing_a_rebase_never_lowers_the_base_below_the_untracked_units`).
//! The sketch's accesses are `SeqCst`; the word's are `SeqCst` too, so that the four are in
//! one total order (with `AcqRel` on the word, the rebase's load of it could be ordered before
//! a release's store that came first on the sketch).

use crate::sync::{AtomicU32, AtomicU64, Ordering};

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const WATCHED: u64 = 1 << COUNT_BITS;
const GENERATION_SHIFT: u32 = COUNT_BITS + 1;

/// Generations are 31 bits: the next after the largest is 1 (0 is an empty place's).
pub(crate) const GENERATION_MASK: u32 = u32::MAX >> 1;

fn generation_of(word: u64) -> u32 {
    (word >> GENERATION_SHIFT) as u32
}

fn count_of(word: u64) -> u32 {
    (word & COUNT_MASK) as u32
}

fn with_count(word: u64, count: u32) -> u64 {
    (word & !COUNT_MASK) | u64::from(count)
}

/// What became of units a permit gave back without the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GivenBack {
    /// Given back: `left` units are still counted in flight for the generation.
    Done { left: u32 },
    /// Not given back: the place is watched, and its releases are made under the lock.
    Watched,
    /// Nothing to give back to: the place holds another generation (or none).
    Gone,
}

/// One place's units in flight, with its generation (see the module docs), and the in-flight
/// estimate below which a release that leaves it nothing in flight looks at its key.
#[derive(Debug)]
pub(crate) struct InflightWord {
    word: AtomicU64,
    look_below: AtomicU32,
}

impl Default for InflightWord {
    /// An empty place, whose releases would always look.
    fn default() -> Self {
        InflightWord {
            word: AtomicU64::new(0),
            look_below: AtomicU32::new(u32::MAX),
        }
    }
}

impl InflightWord {
    /// Gives the place to generation `generation` (not 0, at most [`GENERATION_MASK`]) with
    /// nothing in flight and no watch, or (with 0) empties it: under the set's lock.
    pub(crate) fn reset(&self, generation: u32) {
        debug_assert!(generation <= GENERATION_MASK);
        // A swap, not a store: see "No unit lost to a replacement".
        let word = u64::from(generation & GENERATION_MASK) << GENERATION_SHIFT;
        self.look_below.store(u32::MAX, Ordering::Relaxed);
        self.word.swap(word, Ordering::SeqCst);
    }

    /// The in-flight estimate below which a release that leaves the place nothing in flight
    /// looks at its key (see "When a release looks at the key"). `Relaxed`: a hint.
    pub(crate) fn look_below(&self) -> u32 {
        self.look_below.load(Ordering::Relaxed)
    }

    /// Sets [`look_below`](Self::look_below): under the lock, written only when it changes.
    pub(crate) fn set_look_below(&self, estimate: u32) {
        if self.look_below.load(Ordering::Relaxed) != estimate {
            self.look_below.store(estimate, Ordering::Relaxed);
        }
    }

    /// The units in flight counted for generation `generation`, 0 if the place holds another.
    pub(crate) fn units(&self, generation: u32) -> u32 {
        let word = self.word.load(Ordering::SeqCst);
        if generation_of(word) == generation {
            count_of(word)
        } else {
            0
        }
    }

    /// Counts `cost` more units in flight for the place's generation: under the set's lock,
    /// which only its holders reset, for an admission it decided. Returns the units counted
    /// before them.
    pub(crate) fn add(&self, cost: u32) -> u32 {
        let before = self.update(|word| {
            // At most 2^31 + 2^31 (see "The count's range"): saturating, never a carry.
            Some(with_count(word, count_of(word).saturating_add(cost)))
        });
        count_of(before.unwrap_or(0))
    }

    /// Gives back `cost` units counted for generation `generation`, without the lock, unless
    /// the place is watched (see [`GivenBack`]).
    pub(crate) fn give_back(&self, generation: u32, cost: u32) -> GivenBack {
        let mut watched = false;
        let before = self.update(|word| {
            if generation_of(word) != generation {
                return None;
            }
            watched = word & WATCHED != 0;
            (!watched).then(|| with_count(word, count_of(word).saturating_sub(cost)))
        });
        match before {
            Some(word) => GivenBack::Done {
                left: count_of(word).saturating_sub(cost),
            },
            None if watched => GivenBack::Watched,
            None => GivenBack::Gone,
        }
    }

    /// Gives back `cost` units counted for generation `generation` whether or not the place is
    /// watched: under the lock. Returns the units counted before them, `None` (nothing given
    /// back) if the place holds another generation.
    pub(crate) fn give_back_locked(&self, generation: u32, cost: u32) -> Option<u32> {
        let before = self.update(|word| {
            (generation_of(word) == generation)
                .then(|| with_count(word, count_of(word).saturating_sub(cost)))
        })?;
        Some(count_of(before))
    }

    /// Sets or clears the watch of the place's generation: under the set's lock.
    pub(crate) fn watch(&self, watched: bool) {
        self.update(|word| {
            let next = if watched {
                word | WATCHED
            } else {
                word & !WATCHED
            };
            (next != word).then_some(next)
        });
    }

    /// Whether the place is watched.
    #[cfg(test)]
    pub(crate) fn is_watched(&self) -> bool {
        self.word.load(Ordering::SeqCst) & WATCHED != 0
    }

    /// Replaces the word by `f` of it until the swap holds, or until `f` says `None`; returns
    /// the word replaced (`None` if none was).
    fn update(&self, mut f: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        self.word
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, &mut f)
            .ok()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn units_added_are_given_back_by_their_generation_only() {
        let word = InflightWord::default();
        word.reset(7);
        assert_eq!(word.add(2), 0);
        assert_eq!(word.add(1), 2);
        assert_eq!(word.give_back(6, 1), GivenBack::Gone, "another generation");
        assert_eq!(word.give_back(7, 1), GivenBack::Done { left: 2 });
        assert_eq!(word.units(7), 2);
        word.reset(8);
        assert_eq!(word.units(7), 0);
        assert_eq!(word.give_back(7, 2), GivenBack::Gone, "replaced");
        assert_eq!(word.units(8), 0);
        word.reset(0);
        assert_eq!(word.give_back(8, 1), GivenBack::Gone, "emptied");
    }

    #[test]
    fn a_new_generation_looks_at_every_release_until_told_otherwise() {
        let word = InflightWord::default();
        assert_eq!(word.look_below(), u32::MAX);
        word.reset(1);
        word.set_look_below(4);
        assert_eq!(word.look_below(), 4);
        word.reset(2);
        assert_eq!(
            word.look_below(),
            u32::MAX,
            "the last key's threshold went with it"
        );
    }

    #[test]
    fn a_watched_place_gives_back_only_under_the_lock() {
        let word = InflightWord::default();
        word.reset(3);
        word.add(4);
        word.watch(true);
        assert!(word.is_watched());
        assert_eq!(word.give_back(3, 1), GivenBack::Watched);
        assert_eq!(word.units(3), 4, "nothing given back");
        assert_eq!(word.give_back_locked(3, 1), Some(4));
        assert_eq!(word.give_back_locked(2, 1), None);
        word.watch(false);
        assert_eq!(word.give_back(3, 1), GivenBack::Done { left: 2 });
        word.watch(true);
        word.reset(4);
        assert!(!word.is_watched(), "a new generation starts unwatched");
    }

    /// The largest count (2^31, the in-flight sketch's ceiling) and the largest cost neither
    /// carry into the watch nor the generation, nor go under 0.
    #[test]
    fn the_largest_counts_carry_into_nothing() {
        let word = InflightWord::default();
        word.reset(GENERATION_MASK);
        word.add(1 << 31);
        word.add(u32::MAX);
        assert_eq!(word.units(GENERATION_MASK), u32::MAX, "saturated");
        assert!(!word.is_watched());
        assert_eq!(
            word.give_back(GENERATION_MASK, u32::MAX),
            GivenBack::Done { left: 0 }
        );
        assert_eq!(
            word.give_back(GENERATION_MASK, u32::MAX),
            GivenBack::Done { left: 0 },
            "never under 0"
        );
        assert_eq!(word.units(GENERATION_MASK), 0);
    }
}

#[cfg(all(test, floodgate_loom))]
mod loom_models {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::sync::AtomicU32;

    /// A release without the lock races a rebase (under the lock, with the admissions): the
    /// release gives the word back first, then the sketch; the rebase reads the sketch, then
    /// the word. Whatever the interleaving, the base the rebase finds (the sketch's count less
    /// the tracked units) is never under the units the word does not track. Given back in the
    /// other order (the sketch first), loom finds a base one under the truth.
    #[test]
    fn a_release_racing_a_rebase_never_lowers_the_base_below_the_untracked_units() {
        loom::model(|| {
            const UNTRACKED: u32 = 2;
            // One tracked unit in flight, counted in the word and in the sketch with the
            // untracked ones.
            let word = Arc::new(InflightWord::default());
            word.reset(1);
            word.add(1);
            let sketch = Arc::new(AtomicU32::new(UNTRACKED + 1));
            let (w, s) = (Arc::clone(&word), Arc::clone(&sketch));
            let releasing = thread::spawn(move || {
                assert_eq!(w.give_back(1, 1), GivenBack::Done { left: 0 });
                s.fetch_sub(1, Ordering::SeqCst);
            });
            let estimate = sketch.load(Ordering::SeqCst);
            let tracked = word.units(1);
            let base = estimate.saturating_sub(tracked);
            assert!(base >= UNTRACKED, "base {base} under {UNTRACKED}");
            releasing.join().unwrap();
        });
    }

    /// A key is replaced in the place while two of its releases race the replacement: none
    /// lands in the new generation, whose count stays 0.
    #[test]
    fn a_replacement_keeps_the_old_keys_units_out_of_the_new_generation() {
        loom::model(|| {
            let word = Arc::new(InflightWord::default());
            word.reset(1);
            word.add(2);
            let (a, b) = (Arc::clone(&word), Arc::clone(&word));
            let first = thread::spawn(move || a.give_back(1, 1));
            let second = thread::spawn(move || b.give_back(1, 1));
            word.reset(2);
            word.add(1);
            first.join().unwrap();
            second.join().unwrap();
            assert_eq!(word.units(2), 1, "the new generation's own unit");
        });
    }

    /// A release races the watch being set (a key starting to learn, under the lock, which
    /// then reads the count for its learner): either the release gave its unit back before the
    /// watch and the count read after shows it gone, or it finds the watch and gives nothing
    /// back (the lock's holder will be told of it). Never both, never neither.
    #[test]
    fn a_release_racing_a_watch_is_seen_by_exactly_one_side() {
        loom::model(|| {
            let word = Arc::new(InflightWord::default());
            word.reset(1);
            word.add(1);
            let w = Arc::clone(&word);
            let releasing = thread::spawn(move || w.give_back(1, 1));
            word.watch(true);
            let counted_at_watch = word.units(1);
            let given = releasing.join().unwrap();
            match given {
                GivenBack::Done { left } => {
                    assert_eq!((left, counted_at_watch), (0, 0));
                }
                GivenBack::Watched => {
                    assert_eq!(counted_at_watch, 1);
                    assert_eq!(word.give_back_locked(1, 1), Some(1));
                }
                GivenBack::Gone => panic!("the generation did not change"),
            }
            assert_eq!(word.units(1), 0);
        });
    }
}
