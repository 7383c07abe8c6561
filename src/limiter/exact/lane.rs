//! A place's lane: what requests of its key read and write without the set's lock. Its units
//! in flight, with the place's generation, in one atomic word, and its lease of rate units in
//! another; the untracked bound and the limits an admission may pass it under; a count of its
//! requests; and when a release looks at the key.
//!
//! # The word
//!
//! From the high bits: the place's *generation* (29 bits: which promotion of which key the
//! place holds, never 0 while it holds one), a *watched* bit, a *closed* bit, and the units in
//! flight the place counts for that generation (32 bits). A key enters a place under the
//! set's lock, which swaps in a fresh generation with a count of 0 ([`Lane::reset`]). Every
//! change after is a read-modify-write of the whole word:
//!
//! - **An admission without the lock** ([`Lane::admit`]) adds its cost by a compare-and-swap,
//!   only from a word of an open, unwatched place whose `base + count + cost` is within the
//!   limit. Two racing admissions each see the other's units (the second swap fails and reads
//!   again), so the count is never short of what was admitted, and none is undone, so none
//!   causes another's refusal: the refusals are those of the same admissions one after
//!   another. A request that does not fit goes to the lock, where the bound is lowered first
//!   (see "The base"), unless nothing would lower it: then it is refused here (see "A
//!   refusal without the lock").
//! - **An admission under the lock** closes the place first ([`Lane::close`]), so that none
//!   passes without the lock while it lowers the base and decides, and adds its cost as it
//!   opens it again.
//! - **No count taken from the wrong key.** A permit remembers the generation it was counted
//!   in, and gives back only to a word of that generation ([`Lane::give_back`]): a place given
//!   to another key, or to a later promotion of the same key, has a new generation, and the
//!   permit's units left with the entry that counted them (their sketch units are given back as
//!   any un-promoted key's). A generation is reused only after 2^29 promotions in the same set:
//!   a permit held across that many (a billion keys entering one set of 16 places while it is
//!   out), whose place then holds the reused generation, would give its units back to that
//!   entry, an under-count of its cost until that entry leaves.
//! - **No unit lost to a replacement.** An admission or a release that read the old
//!   generation and swaps after the reset fails (the word changed) and finds the new one; a
//!   reset by a plain store could let such a release land in the new generation (the loom
//!   model `a_replacement_keeps_the_old_keys_units_out_of_the_new_generation`).
//! - **A watched place's releases are seen under the lock.** A key learning its in-flight
//!   limit must be told of each completion with the units in flight before it. The bit is set
//!   and cleared under the lock by a read-modify-write of the same word, so each release is
//!   ordered against it: a release that saw the bit clear gave its units back before the bit
//!   was set (the learner, which reads the count after, never counted them), and one that sees
//!   it set gives them back under the lock. A watched place admits nothing without the lock.
//!
//! # The base
//!
//! An admission without the lock bounds the key's untracked units (admitted before its
//! promotion) by `base`, which only a decision under the lock lowers. A request whose own
//! estimate of the others in flight is below `base` and the count (some untracked units came
//! back) goes to the lock, which lowers it: so the base is lowered where every decision under
//! the lock would have lowered it, and a base left high refuses nothing. The lowering
//! ("rebase": the sketch's
//! estimate, then the word's count, read in that order, the difference). The rebase is right
//! only if no unit is in the count and not in the estimate it read: a release gives back its
//! word, then its sketch, so it cannot be; an admission counts itself in the sketch long
//! before it adds to the word, and one that did both between the rebase's two reads would be
//! in the count and not the estimate, and lower the base below the truth. The closed bit keeps
//! them out: the rebase closes the place by a read-modify-write of the word before its reads,
//! so every admission without the lock swapped before the close (its sketch count is in the
//! estimate) or finds the place closed and goes to the lock. A `base` read without the lock
//! that is stale is higher than the entry's: it only over-counts.
//!
//! # A refusal without the lock
//!
//! A request the word cannot take (`base + count + cost` past the limit) is refused there when
//! the lock would refuse it too: the place open and unwatched, of its generation, admitting
//! under its limits, and the request's own estimate of the others in flight at least `base +
//! count`, so that the lock's rebase would not lower the base (see "The base"). Under the lock
//! the bound is `min(estimate, base + count + cost)`, and both are past the limit: the same
//! rejection, with the same bound. The base is read after the word, and the word again
//! after it: both of one opening (a reopening or a reset between them is seen, and the
//! request judged anew; the base is written with `Release` and read with `Acquire`, so that
//! a base written after a later opening's swap is read with that word). A reset writes a
//! base of `u32::MAX` before its generation's word, which may be read with the old word: such
//! a base refuses nothing here. What it may miss is a permit given back between its estimate and
//! its read of the word, of a unit admitted before the key's promotion (which lowers the
//! sketch, not the word): a refusal of the request as if it had come before that release,
//! which overlapped it. A refusal counts nothing in the word: it changes no other request's
//! answer. It is counted as a request decided (the place's evidence) and as the tenant's
//! refusal (`refused`, which the tenant takes under the lock, after the lane is closed as the
//! key leaves), in a word of the generation it was refused in: a refusal racing its key's
//! departure is counted for that key, or (made open, counted after the tenant took the
//! count) not at all, at most one a thread; never for the key that takes the place next
//! (the loom model `a_refusal_racing_a_replacement_is_counted_for_its_key_or_none`).
//!
//! # Leaving
//!
//! A key leaves the stage when it has cooled down (nothing counted in flight, its estimates
//! low), and a request of it that counted itself while it was promoted may then be admitted
//! by the sketch alone. The lock's holder closes the lane before it judges the key cool, and
//! keeps it closed until the key has left (its reset opens it, empty): an admission in the
//! lane between the judgement and the leaving would count neither that request nor be
//! counted by it. And a request that finds its key gone is judged by the sketch on its counts
//! read then, which hold every unit admitted in the lane before, not on the counts it read
//! when it counted itself: an admission of units in flight counted itself in the sketch
//! first, and the units taken out of a lease are counted there by the stage's keeper as the
//! key leaves, before its lane is emptied (see "A lease").
//!
//! # The limits it admits under
//!
//! The tenant says, under the lock, which requests may be admitted without it: a fingerprint
//! of the limits they are judged by (0: none). A request judged by other limits, or by a kind
//! the lane does not count (a rate), goes to the lock, where what the entry keeps is judged
//! whole. The fingerprint is written under the lock before the word reopens the lane, and a
//! request reads it after the word, in the loop whose swap fails if the word changed: the
//! limits it compares with are those of the opening (or grant) it swaps. Read once before
//! the word, a request under one limit could pass them, then take a lease that a decision
//! for a request of another plan granted meanwhile, sized by that plan's limit (the loom
//! model `a_take_never_takes_a_lease_granted_under_other_limits`).
//!
//! # When a release looks at the key
//!
//! The place keeps a number its tenant sets under the lock (`look_below`): a release that
//! leaves the place nothing in flight takes the lock, to see whether the key has cooled down
//! and leaves, only if the key's in-flight estimate, doubled, is below it (the limiter sets
//! the key's promotion threshold for in flight, and a key is cool only below half of it). A stale read of it, or of
//! the estimate, costs a lock taken needlessly, or a key left in the stage until its next
//! request or the clock's sweep finds it cool: nothing is counted differently.
//!
//! # A lease (a limiter whose lanes admit under a rate)
//!
//! In a limiter that counts a rate (and no fleet), a second word of the place is its *lease*:
//! the word's layout, with the number of its grant (12 bits) and the units left in it (20
//! bits) where the word has its units in flight; the reset gives it the place's generation
//! too, before the word's. The lock's holder, having decided a request of the key and found room under its
//! rate limit for more in the window of that decision, counts that room in the key's window
//! as if it were admitted, and grants it ([`Lane::grant_and_open`]), with the window and the
//! time of the decision. Requests of the same window, at that time or later (the room of a
//! sliding window only grows within one), take their cost out of it by a compare-and-swap
//! ([`Lane::take_lease`]): a unit of a lease is counted before it is given, so the key's
//! counts are never short of what it admitted, and a lease can only run out, never be
//! overdrawn. Anything else goes to the lock, which first closes the word, then takes back
//! what is left of the lease ([`Lane::close_and_reclaim`], closing the lease in the same
//! swap), and uncounts it.
//!
//! In a limiter that counts requests in flight too, a request is admitted in flight in the
//! word first ([`Lane::admit`], counted in the in-flight sketch before, as every admission
//! there), then takes its rate units out of the lease; one the lease cannot take gives its
//! units in flight back ([`Lane::give_back`]) and goes to the lock. Its units are counted in
//! flight exactly when it took its lease's (the loom model
//! `a_request_counting_both_racing_a_reclaim_is_in_flight_exactly_when_it_took_its_lease`):
//! the reclaim closes the word before it takes the lease back, so a request admitted in the
//! word after the close is none, and one admitted before it either takes from the lease
//! before the reclaim (its units counted as taken) or finds it taken back and gives its units
//! in flight back. Until then they are counted for the key: a request of the key meanwhile may
//! find the word full with them and go to the lock, and be refused there by them; the
//! refusals requests cause each other are those of the units in flight of the requests
//! between their admission and their take. Both limits are in the one fingerprint the lane
//! admits and leases under (see "The limits it admits under").
//!
//! A take counts nothing in the rate sketch: a promoted key's request takes its lease before
//! it counts itself anywhere, and the request path is this one swap. The lock's holder counts
//! in the sketch what was taken of a lease (its units less those left) when it takes the
//! lease back, before a decision (which reads the sketch after) and as the key leaves the
//! stage (before its lane is emptied and its flag cleared, so that a request judged by the
//! sketch alone after finds them there). Never the whole lease at its grant: what is not
//! taken of it would stay in the sketch, which only grows.
//!
//! The window and the time of a grant are read after the lease's word; a take whose word
//! changed since fails its swap. The grant's number makes that hold across a reclaim and a new grant
//! that leave the same units: a take that read the older grant's window and time, and swaps a
//! word of a newer grant, would give a request of an older time room measured at a later one.
//! The number repeats after 4,096 grants: only a take held up between its load and its swap
//! across that many grants of one key (each a decision under the lock), whose lease then holds
//! the same units, is judged by the older grant's window and time. Its units are counted all
//! the same (taken from a lease counted ahead); what it could miss is that the room it takes
//! was measured after its own time, when the sliding count had fallen further.
//!
//! # The count's range
//!
//! Units counted here are counted in the in-flight sketch too, whose counters read at most
//! 2^31 and refuse a request that would take them past it: a count is at most 2^31 and never
//! carries into the bits above it.
//!
//! # Orderings
//!
//! The word's accesses are `SeqCst`, as the sketch's are, so that the rebase's reads and a
//! release's two give-backs are in one total order (with `AcqRel` on the word, the rebase's
//! load of it could be ordered before a release's store that came first on the sketch). The
//! reset is a swap after the place's key hash is written: an admission that loads a
//! generation, then the hash, finds the hash of that generation or of a later one, and a later
//! one fails its swap. `base` is written under the lock before the word's reopening, which an
//! admission's load of the word acquires; it is written with `Release` and read with
//! `Acquire` for a refusal's sake (see "A refusal without the lock"), which costs nothing
//! where a plain store and load already order so (x86). `look_below`, the limits, a lease's
//! window, time and top, and the requests and refusals counts are `Relaxed`: a lease's window
//! and time are written before the lease's reopening too (a take that read them stale fails
//! its swap: see "A lease"); the others are hints (see their sections) or evidence.

use crate::sync::{AtomicU32, AtomicU64, Ordering};

const COUNT_BITS: u32 = 32;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
const CLOSED: u64 = 1 << COUNT_BITS;
const WATCHED: u64 = 1 << (COUNT_BITS + 1);
const GENERATION_SHIFT: u32 = COUNT_BITS + 3;
/// A lease's units are the low 20 bits of the count; its grant's number the 12 above them.
const LEASE_BITS: u32 = 20;
const GRANT_MASK: u32 = (1 << (COUNT_BITS - LEASE_BITS)) - 1;
/// The most units one grant leases: a larger room is leased in several grants.
pub(crate) const MAX_LEASE: u32 = (1 << LEASE_BITS) - 1;

/// Generations are 29 bits: the next after the largest is 1 (0 is an empty place's).
pub(crate) const GENERATION_MASK: u32 = (1 << 29) - 1;

fn generation_of(word: u64) -> u32 {
    (word >> GENERATION_SHIFT) as u32
}

fn count_of(word: u64) -> u32 {
    (word & COUNT_MASK) as u32
}

fn with_count(word: u64, count: u32) -> u64 {
    (word & !COUNT_MASK) | u64::from(count)
}

fn lease_of(word: u64) -> u32 {
    count_of(word) & MAX_LEASE
}

/// The refusals a lane's `refused` word counts for generation `generation` (`None`: it counts
/// another generation's).
fn refusals_in(word: u64, generation: u32) -> Option<u32> {
    ((word >> 32) as u32 == generation).then_some(word as u32)
}

fn grant_of(word: u64) -> u32 {
    count_of(word) >> LEASE_BITS
}

/// A request asking a lane's lease for its units without the lock (see "A lease").
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseAsk {
    /// The fingerprint of the limits it is judged by (see "The limits it admits under").
    pub(crate) limits: u64,
    /// Its units.
    pub(crate) cost: u32,
    /// The window it is in, and its time (nanoseconds on the limiter's clock).
    pub(crate) window: u64,
    pub(crate) at: u64,
}

/// A request asking a lane to admit it without the lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    /// The fingerprint of the limits it is judged by (see "The limits it admits under").
    pub(crate) limits: u64,
    /// Its units.
    pub(crate) cost: u32,
    /// The in-flight limit of `limits`.
    pub(crate) limit: u32,
    /// The key's in-flight estimate less this request (`u32::MAX` for none), which says
    /// whether the base would be lowered (see "The base").
    pub(crate) others: u32,
    /// Admitted only while the place counts units in flight: for a request that would have
    /// the key judged for cooling down under the lock if it had none (one below its
    /// promotion threshold).
    pub(crate) while_tracked: bool,
    /// Counted as a request admitted without the lock (the place's evidence): not for one
    /// that takes its rate units out of the lease after (see "A lease"), counted there.
    pub(crate) last: bool,
    /// Refused here when it does not fit by a bound the lock would not lower (see "A refusal
    /// without the lock"); else it goes to the lock. Not for one that would take rate units
    /// after, whose refusal the lock counts in its rate sketch too.
    pub(crate) refuses: bool,
}

#[cfg(test)]
impl Lane {
    /// A lane of generation `generation` (on an empty place), admitting under `limits` with
    /// `base` untracked: for the tests and the models.
    fn opened(generation: u32, base: u32, limits: u64) -> Lane {
        let lane = Lane::default();
        lane.reset(generation);
        lane.set_base(base);
        lane.admit_under(limits);
        lane
    }
}

#[cfg(test)]
impl Ask {
    /// What a request of `cost` units asks, under `limits` of in-flight limit `limit`, seeing
    /// `others` in flight.
    fn of(limits: u64, cost: u32, limit: u32, others: u32) -> Ask {
        Ask {
            limits,
            cost,
            limit,
            others,
            while_tracked: false,
            last: true,
            refuses: true,
        }
    }
}

/// What a lane says of a request it was asked to admit without the lock ([`Lane::admit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InLane {
    /// Admitted, its units counted: the bound with it (`base + count + cost`), at most the
    /// limit.
    Admitted(u32),
    /// Refused: the bound with it, past the limit, is one the lock would not lower (see "A
    /// refusal without the lock").
    Full(u32),
    /// Neither: decided under the lock.
    Lock,
}

impl InLane {
    /// The bound with it, if it was admitted.
    pub(crate) fn admitted(self) -> Option<u32> {
        match self {
            InLane::Admitted(bound) => Some(bound),
            InLane::Full(_) | InLane::Lock => None,
        }
    }
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

/// One place's lane (see the module docs).
#[derive(Debug)]
pub(crate) struct Lane {
    word: AtomicU64,
    /// The lease (see "A lease"): the place's generation, a closed bit, and the lease's
    /// grant and units left where `word` has its units in flight.
    lease: AtomicU64,
    /// The untracked bound an admission without the lock counts (see "The base").
    base: AtomicU32,
    /// See "When a release looks at the key".
    look_below: AtomicU32,
    /// The fingerprint of the limits an admission may pass without the lock under (0: none).
    admits_under: AtomicU64,
    /// The window of the lease the word holds, and the time of its grant (see "A lease").
    lease_window: AtomicU64,
    lease_from: AtomicU64,
    /// What the tenant said its count is once the whole lease is taken (a hint, for its
    /// reports: see [`Lane::take_lease`]).
    lease_top: AtomicU32,
    /// Requests decided without the lock since the clock's sweep last took them into the
    /// entry's evidence. A load and a store, not an atomic add: a count lost to a race is
    /// evidence missed, never a unit.
    requests: AtomicU32,
    /// Requests refused without the lock since its tenant last took them (see "A refusal
    /// without the lock"), in the low 32 bits, with the generation they were refused in
    /// above: a refusal is counted by a compare-and-swap of a word of its own generation, so
    /// that one racing its key's replacement is never counted for the next key.
    refused: AtomicU64,
}

impl Default for Lane {
    /// An empty place, whose releases would always look.
    fn default() -> Self {
        Lane {
            word: AtomicU64::new(0),
            lease: AtomicU64::new(0),
            base: AtomicU32::new(u32::MAX),
            look_below: AtomicU32::new(u32::MAX),
            admits_under: AtomicU64::new(0),
            lease_window: AtomicU64::new(u64::MAX),
            lease_from: AtomicU64::new(u64::MAX),
            lease_top: AtomicU32::new(0),
            requests: AtomicU32::new(0),
            refused: AtomicU64::new(0),
        }
    }
}

impl Lane {
    /// Gives the place to generation `generation` (not 0, at most [`GENERATION_MASK`]) with
    /// nothing in flight, no watch, no admission without the lock until its tenant says, or
    /// (with 0) empties it: under the set's lock, after the place's key hash is written.
    pub(crate) fn reset(&self, generation: u32) {
        debug_assert!(generation <= GENERATION_MASK);
        self.admits_under.store(0, Ordering::Relaxed);
        self.base.store(u32::MAX, Ordering::Relaxed);
        self.look_below.store(u32::MAX, Ordering::Relaxed);
        self.requests.store(0, Ordering::Relaxed);
        self.refused
            .store(u64::from(generation) << 32, Ordering::Relaxed);
        self.lease_window.store(u64::MAX, Ordering::Relaxed);
        self.lease_from.store(u64::MAX, Ordering::Relaxed);
        // A swap, not a store: see "No unit lost to a replacement".
        let word = u64::from(generation & GENERATION_MASK) << GENERATION_SHIFT;
        self.lease.swap(word, Ordering::SeqCst);
        self.word.swap(word, Ordering::SeqCst);
    }

    /// The generation the place holds (0: none).
    pub(crate) fn generation(&self) -> u32 {
        generation_of(self.word.load(Ordering::SeqCst))
    }

    /// The units in flight the place counts now, for whichever generation it holds: under the
    /// set's lock, its entry's.
    pub(crate) fn units_now(&self) -> u32 {
        count_of(self.word.load(Ordering::SeqCst))
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

    /// Admits `ask` for generation `generation` without the lock, if the place admits under its
    /// limits and it fits (see "The word"), or refuses it, if it does not fit by a bound the
    /// lock would not lower (see "A refusal without the lock").
    ///
    /// Always inlined (its two callers are a promoted key's admissions): with the refusal's
    /// branch in it, the compiler stopped inlining it, and a promoted key's admission and
    /// release under both limits took 684 instructions instead of 609 (callgrind).
    #[inline(always)]
    pub(crate) fn admit(&self, generation: u32, ask: &Ask) -> InLane {
        let Ask {
            limits,
            cost,
            limit,
            others,
            while_tracked,
            last,
            refuses,
        } = *ask;
        let mut word = self.word.load(Ordering::SeqCst);
        loop {
            if generation_of(word) != generation || word & (CLOSED | WATCHED) != 0 {
                return InLane::Lock;
            }
            // Read after the word, and the swap fails if it changed since: a base lowered, and
            // the limits set, under the lock before its reopening are seen.
            if !self.passes_under(limits) {
                return InLane::Lock;
            }
            // Acquire: a base of a later opening than the word's is seen with that opening's
            // word, when the word is read again (see "A refusal without the lock").
            let base = self.base.load(Ordering::Acquire);
            let count = count_of(word);
            if while_tracked && count == 0 {
                return InLane::Lock;
            }
            let tracked_and_base = u64::from(base) + u64::from(count);
            // Fewer others than the bound counts: some untracked units came back, and the
            // lock lowers the base (a decision under it would have), so that a base left high
            // refuses no later request.
            if u64::from(others) < tracked_and_base {
                return InLane::Lock;
            }
            let with_it = tracked_and_base + u64::from(cost);
            if with_it > u64::from(limit) {
                if !refuses {
                    return InLane::Lock;
                }
                match self.refusal(word, base, with_it) {
                    Some(said) => return said,
                    None => {
                        word = self.word.load(Ordering::SeqCst);
                        continue;
                    }
                }
            }
            // Within a limit under 2^30: no carry.
            let next = with_count(word, count + cost);
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    if last {
                        self.count_request();
                    }
                    // At most the limit.
                    return InLane::Admitted(with_it as u32);
                }
                Err(now) => word = now,
            }
        }
    }

    /// What [`admit`](Self::admit) says of a request it may refuse that does not fit
    /// (`with_it`: the bound with it, past its limit), on the `word` and the `base` it read:
    /// refused, if the base bounds something; `None` if the word changed since (judged anew).
    /// See "A refusal without the lock".
    ///
    /// Out of line, away from the admissions' path.
    #[cold]
    #[inline(never)]
    fn refusal(&self, word: u64, base: u32, with_it: u64) -> Option<InLane> {
        // A base of `u32::MAX` bounds nothing: a key's reset writes it before its new
        // generation, and it may be read with the old key's word.
        if base == u32::MAX {
            return Some(InLane::Lock);
        }
        // The base, read after the word, is of the opening that word is or a later one: the
        // word again, to refuse on a base and a count of one opening.
        if self.word.load(Ordering::SeqCst) != word {
            return None;
        }
        self.count_request();
        self.count_refusal(generation_of(word));
        Some(InLane::Full(u32::try_from(with_it).unwrap_or(u32::MAX)))
    }

    /// Takes `ask`'s units out of the lease of generation `generation` without the lock, if
    /// the place admits under its limits and the lease is of the request's window, granted at
    /// its time or before, with the units (see "A lease"); returns the tenant's count with
    /// them: the count it said the whole lease takes it to, less the units left. `None`: go
    /// to the lock.
    #[inline]
    pub(crate) fn take_lease(&self, generation: u32, ask: &LeaseAsk) -> Option<u32> {
        let LeaseAsk {
            limits,
            cost,
            window,
            at,
        } = *ask;
        let mut word = self.lease.load(Ordering::SeqCst);
        loop {
            if generation_of(word) != generation || word & CLOSED != 0 {
                return None;
            }
            let left = lease_of(word);
            if left < cost {
                return None;
            }
            // Read after the word, which the grant opened after writing them (see "A lease"),
            // and the swap fails if it changed since: the limits, the window and the time are
            // those of the grant it takes from.
            if !self.passes_under(limits)
                || self.lease_window.load(Ordering::Relaxed) != window
                || self.lease_from.load(Ordering::Relaxed) > at
            {
                return None;
            }
            // Within the lease's bits: no borrow from the grant's number.
            let next = word - u64::from(cost);
            match self
                .lease
                .compare_exchange_weak(word, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    self.count_request();
                    let top = self.lease_top.load(Ordering::Relaxed);
                    return Some(top.saturating_sub(left - cost));
                }
                Err(now) => word = now,
            }
        }
    }

    /// Whether the lease of generation `generation` has `cost` units left now, open: a hint
    /// for a request that would count itself elsewhere before it takes them (the take
    /// checks again).
    #[inline]
    pub(crate) fn may_lease(&self, generation: u32, cost: u32) -> bool {
        let word = self.lease.load(Ordering::Relaxed);
        generation_of(word) == generation && word & CLOSED == 0 && lease_of(word) >= cost
    }

    /// Whether the place admits requests judged by the limits of fingerprint `limits`
    /// without the lock (0 never is: see "The limits it admits under").
    #[inline]
    fn passes_under(&self, limits: u64) -> bool {
        limits != 0 && self.admits_under.load(Ordering::Relaxed) == limits
    }

    /// Counts one request decided without the lock, as evidence: a load and a store, not an
    /// atomic add (see the field).
    #[inline]
    fn count_request(&self) {
        let requests = self.requests.load(Ordering::Relaxed);
        self.requests
            .store(requests.saturating_add(1), Ordering::Relaxed);
    }

    /// Counts one request refused without the lock in generation `generation`, for its tenant
    /// (stuck at `u32::MAX` if nothing takes them for that long); not if the place holds
    /// another generation now (its key left, and what it refused went with it).
    #[inline]
    fn count_refusal(&self, generation: u32) {
        let _ = self
            .refused
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                let counted = refusals_in(word, generation)?;
                (counted < u32::MAX).then_some(word + 1)
            });
    }

    /// Closes the place (its units in flight and its lease) and takes back what is left of
    /// its lease, in one swap of the lease: under the lock, before a decision there (see "A
    /// lease"). Returns the lease's window and the units left in it, `None` if none are.
    pub(crate) fn close_and_reclaim(&self) -> Option<(u64, u32)> {
        self.close();
        let before = Self::update_in(&self.lease, |word| {
            Some(with_count(word, grant_of(word) << LEASE_BITS) | CLOSED)
        })?;
        let left = lease_of(before);
        (left > 0).then(|| (self.lease_window.load(Ordering::Relaxed), left))
    }

    /// Grants a lease of `units` (at most [`MAX_LEASE`]) for window `window` from time
    /// `from`, counted already in the key's window, which the whole lease takes to `top`,
    /// and opens the place: under the lock, after
    /// [`close_and_reclaim`](Self::close_and_reclaim).
    pub(crate) fn grant_and_open(&self, window: u64, from: u64, units: u32, top: u32) {
        debug_assert!(units <= MAX_LEASE);
        self.lease_window.store(window, Ordering::Relaxed);
        self.lease_from.store(from, Ordering::Relaxed);
        self.lease_top.store(top, Ordering::Relaxed);
        Self::update_in(&self.lease, |word| {
            let grant = (grant_of(word) + 1) & GRANT_MASK;
            let lease = (grant << LEASE_BITS) | units.min(MAX_LEASE);
            Some(with_count(word, lease) & !CLOSED)
        });
    }

    /// The lease the word holds: its window and the units left (see "A lease").
    pub(crate) fn lease(&self, generation: u32) -> Option<(u64, u32)> {
        let word = self.lease.load(Ordering::SeqCst);
        let left = lease_of(word);
        (generation_of(word) == generation && left > 0)
            .then(|| (self.lease_window.load(Ordering::Relaxed), left))
    }

    /// The window of the lease the place was last granted (under the lock, which grants it).
    pub(crate) fn lease_window(&self) -> u64 {
        self.lease_window.load(Ordering::Relaxed)
    }

    /// Closes the place to admissions without the lock, under the lock, before a rebase and a
    /// decision there; [`open`](Self::open) or [`add_and_open`](Self::add_and_open) after.
    pub(crate) fn close(&self) {
        self.update(|word| Some(word | CLOSED));
    }

    /// Opens the place again (its units in flight and its lease), with nothing added.
    pub(crate) fn open(&self) {
        Self::update_in(&self.lease, |word| {
            (word & CLOSED != 0).then_some(word & !CLOSED)
        });
        self.update(|word| (word & CLOSED != 0).then_some(word & !CLOSED));
    }

    /// Counts `cost` more units in flight for the place's generation and opens the place:
    /// under the set's lock, which only its holders reset, for an admission it decided.
    pub(crate) fn add_and_open(&self, cost: u32) {
        self.update(|word| {
            // At most 2^31 + 2^31 (see "The count's range"): saturating, never a carry.
            let count = count_of(word).saturating_add(cost);
            Some(with_count(word, count) & !CLOSED)
        });
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

    /// Sets the untracked bound an admission without the lock counts: under the lock, while
    /// the place is closed (see "The base").
    pub(crate) fn set_base(&self, base: u32) {
        if self.base.load(Ordering::Relaxed) != base {
            self.base.store(base, Ordering::Release);
        }
    }

    /// Sets the fingerprint of the limits an admission may pass without the lock under (0:
    /// none): under the lock.
    pub(crate) fn admit_under(&self, limits: u64) {
        if self.admits_under.load(Ordering::Relaxed) != limits {
            self.admits_under.store(limits, Ordering::Relaxed);
        }
    }

    /// Takes the requests admitted without the lock since the last call: the clock's sweep,
    /// under the lock, for the entry's evidence.
    pub(crate) fn take_requests(&self) -> u32 {
        self.requests.swap(0, Ordering::Relaxed)
    }

    /// Requests decided without the lock since the sweep last took them.
    pub(crate) fn requests(&self) -> u32 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Takes the requests refused without the lock in generation `generation` since the last
    /// call: under the lock, for its tenant's count of refusals.
    pub(crate) fn take_refused(&self, generation: u32) -> u32 {
        let taken = self
            .refused
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
                refusals_in(word, generation).map(|_| u64::from(generation) << 32)
            });
        taken.map_or(0, |word| word as u32)
    }

    /// Requests refused without the lock in generation `generation` since its tenant last
    /// took them.
    pub(crate) fn refused(&self, generation: u32) -> u32 {
        refusals_in(self.refused.load(Ordering::Relaxed), generation).unwrap_or(0)
    }

    /// The in-flight estimate below which a release that leaves the place nothing in flight
    /// looks at its key (see "When a release looks at the key").
    pub(crate) fn look_below(&self) -> u32 {
        self.look_below.load(Ordering::Relaxed)
    }

    /// Sets [`look_below`](Self::look_below): under the lock, written only when it changes.
    pub(crate) fn set_look_below(&self, estimate: u32) {
        if self.look_below.load(Ordering::Relaxed) != estimate {
            self.look_below.store(estimate, Ordering::Relaxed);
        }
    }

    /// Replaces the word by `f` of it until the swap holds, or until `f` says `None`; returns
    /// the word replaced (`None` if none was).
    fn update(&self, f: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        Self::update_in(&self.word, f)
    }

    /// [`update`](Self::update) of `word`, the place's or its lease.
    fn update_in(word: &AtomicU64, mut f: impl FnMut(u64) -> Option<u64>) -> Option<u64> {
        word.fetch_update(Ordering::SeqCst, Ordering::SeqCst, &mut f)
            .ok()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    /// The fingerprint of the limits the tests admit under, and their in-flight limit.
    const LIMITS: u64 = 0xA11;
    const LIMIT: u32 = 4;

    /// A lane of generation `generation`, admitting under `LIMITS` with nothing untracked.
    fn open_lane(generation: u32) -> Lane {
        Lane::opened(generation, 0, LIMITS)
    }

    #[test]
    fn units_added_are_given_back_by_their_generation_only() {
        let word = Lane::default();
        word.reset(7);
        word.add_and_open(2);
        word.add_and_open(1);
        assert_eq!(word.units(7), 3);
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

    /// Without the lock, an admission is counted only within its limit, with the base, under
    /// the limits the place admits under, of its generation, while the place is open and
    /// unwatched; anything else goes to the lock.
    #[test]
    fn an_admission_without_the_lock_is_counted_only_where_it_fits() {
        let lane = open_lane(3);
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 2, LIMIT, u32::MAX)),
            InLane::Admitted(2)
        );
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 2, LIMIT, u32::MAX)),
            InLane::Admitted(4)
        );
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Full(5),
            "5 over 4"
        );
        lane.give_back(3, 2);
        lane.set_base(1);
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 2, LIMIT, u32::MAX)),
            InLane::Full(5),
            "1 + 2 + 2 over 4"
        );
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Admitted(4)
        );
        assert_eq!(lane.units(3), 3);
        lane.give_back(3, 3);
        assert_eq!(
            lane.admit(2, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "another generation"
        );
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS + 1, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "other limits"
        );
        assert_eq!(
            lane.admit(3, &Ask::of(0, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "no limits"
        );
        lane.close();
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "closed"
        );
        lane.open();
        lane.watch(true);
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "watched"
        );
        lane.watch(false);
        assert_eq!(
            lane.admit(3, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Admitted(2),
            "the base of 1 and itself"
        );
        lane.reset(4);
        assert_eq!(
            lane.admit(4, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Lock,
            "a new key says its limits first"
        );
    }

    /// A request that sees fewer others in flight than the base and the count say (untracked
    /// units came back) goes to the lock, which lowers the base; one that sees as many or more
    /// passes.
    #[test]
    fn a_request_that_would_lower_the_base_goes_to_the_lock() {
        let lane = open_lane(5);
        lane.set_base(2);
        lane.add_and_open(1);
        assert_eq!(
            lane.admit(5, &Ask::of(LIMITS, 1, LIMIT, 2)),
            InLane::Lock,
            "2 others, 3 counted"
        );
        assert_eq!(
            lane.admit(5, &Ask::of(LIMITS, 1, LIMIT, 3)),
            InLane::Admitted(4)
        );
        assert_eq!(
            lane.admit(5, &Ask::of(LIMITS, 0, LIMIT, 9)),
            InLane::Admitted(4),
            "more others: other keys'"
        );
        let below_threshold = Ask {
            while_tracked: true,
            ..Ask::of(LIMITS, 1, LIMIT, 9)
        };
        lane.give_back(5, 2);
        assert_eq!(
            lane.admit(5, &below_threshold),
            InLane::Lock,
            "none tracked: judged for cooling"
        );
        lane.add_and_open(1);
        assert_eq!(
            lane.admit(5, &below_threshold),
            InLane::Admitted(4),
            "one tracked"
        );
    }

    /// A request past the limit is refused without the lock only where the lock would refuse
    /// it with the same bound: open, unwatched, its generation, its limits, a base the lock
    /// would not lower (its estimate of the others at least the base and the count), tracked
    /// units if it asks for them, and a caller that takes the refusal. Each refusal is counted
    /// as a request and as a refusal, and changes no count.
    #[test]
    fn a_request_is_refused_without_the_lock_only_where_the_lock_would_refuse_it() {
        let lane = open_lane(6);
        lane.set_base(1);
        lane.add_and_open(3);
        let over = Ask::of(LIMITS, 1, LIMIT, 4);
        assert_eq!(lane.admit(6, &over), InLane::Full(5), "1 + 3 + 1 over 4");
        assert_eq!(
            lane.admit(6, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Full(5)
        );
        assert_eq!((lane.requests(), lane.refused(6)), (2, 2));
        assert_eq!(lane.units(6), 3, "nothing counted");
        assert_eq!(
            lane.admit(6, &Ask::of(LIMITS, 1, LIMIT, 3)),
            InLane::Lock,
            "3 others, 4 counted: the lock lowers the base and may admit"
        );
        let left_to_the_lock = Ask {
            refuses: false,
            ..over
        };
        assert_eq!(lane.admit(6, &left_to_the_lock), InLane::Lock);
        assert_eq!(
            lane.admit(
                6,
                &Ask {
                    limits: LIMITS + 1,
                    ..over
                }
            ),
            InLane::Lock
        );
        assert_eq!(lane.admit(5, &over), InLane::Lock, "another generation");
        lane.watch(true);
        assert_eq!(lane.admit(6, &over), InLane::Lock, "watched");
        lane.watch(false);
        lane.close();
        assert_eq!(lane.admit(6, &over), InLane::Lock, "closed");
        lane.open();
        assert_eq!((lane.requests(), lane.refused(6)), (2, 2), "none counted");
        lane.give_back(6, 3);
        lane.set_base(4);
        let below_threshold = Ask {
            while_tracked: true,
            ..over
        };
        assert_eq!(
            lane.admit(6, &below_threshold),
            InLane::Lock,
            "none tracked: judged for cooling"
        );
        assert_eq!(lane.take_refused(5), 0, "another generation's");
        lane.set_base(1);
        lane.add_and_open(3);
        assert_eq!(lane.admit(6, &over), InLane::Full(5));
        assert_eq!(lane.take_refused(6), 3, "the two before and this one");
        assert_eq!(lane.refused(6), 0, "taken");
        lane.admit(6, &over);
        lane.reset(7);
        assert_eq!(lane.refused(7), 0, "a new generation starts with none");
        assert_eq!(lane.refused(6), 0, "the old one's went with it");
    }

    #[test]
    fn an_admission_under_the_lock_opens_the_place_it_closed() {
        let lane = open_lane(1);
        lane.close();
        lane.add_and_open(3);
        assert_eq!(lane.units(1), 3);
        assert_eq!(
            lane.admit(1, &Ask::of(LIMITS, 1, LIMIT, u32::MAX)),
            InLane::Admitted(4),
            "open again"
        );
    }

    #[test]
    fn a_new_generation_looks_at_every_release_until_told_otherwise() {
        let word = Lane::default();
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
        let word = Lane::default();
        word.reset(3);
        word.add_and_open(4);
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
    /// carry into the bits above the count nor go under 0; the largest generation is kept.
    #[test]
    fn the_largest_counts_carry_into_nothing() {
        let word = Lane::default();
        word.reset(GENERATION_MASK);
        word.add_and_open(1 << 31);
        word.add_and_open(u32::MAX);
        assert_eq!(word.units(GENERATION_MASK), u32::MAX, "saturated");
        assert!(!word.is_watched());
        assert_eq!(word.generation(), GENERATION_MASK);
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
        // Without the lock, the largest limit and cost.
        let lane = open_lane(GENERATION_MASK);
        let largest = (1 << 30) - 1;
        assert_eq!(
            lane.admit(
                GENERATION_MASK,
                &Ask::of(LIMITS, largest, largest, u32::MAX)
            ),
            InLane::Admitted(largest)
        );
        assert_eq!(
            lane.admit(
                GENERATION_MASK,
                &Ask::of(LIMITS, u32::MAX, largest, u32::MAX)
            ),
            InLane::Full(u32::MAX)
        );
        assert_eq!(lane.units(GENERATION_MASK), largest);
        assert_eq!(lane.generation(), GENERATION_MASK);
    }

    /// The lease's fingerprint in the tests.
    const RATE: u64 = 1 << 63 | 10;

    fn lease_ask(cost: u32, window: u64, at: u64) -> LeaseAsk {
        LeaseAsk {
            limits: RATE,
            cost,
            window,
            at,
        }
    }

    /// A lease is taken only for its window, from its time on, under its limits, while its
    /// units last; what is left goes back in one swap that closes the place, and a new grant
    /// opens it.
    #[test]
    fn a_lease_is_taken_only_in_its_window_from_its_time_while_it_lasts() {
        let lane = Lane::opened(2, 0, RATE);
        assert_eq!(
            lane.take_lease(2, &lease_ask(1, 7, 100)),
            None,
            "no grant yet"
        );
        lane.close_and_reclaim();
        // 5 units, which take the key's count to 9.
        lane.grant_and_open(7, 100, 5, 9);
        assert_eq!(lane.units(2), 0, "a lease is no units in flight");
        assert_eq!(
            lane.take_lease(2, &lease_ask(2, 7, 100)),
            Some(6),
            "9 less 3 left"
        );
        assert_eq!(
            lane.take_lease(2, &lease_ask(1, 7, 99)),
            None,
            "before its time"
        );
        assert_eq!(
            lane.take_lease(2, &lease_ask(1, 8, 200)),
            None,
            "another window"
        );
        assert_eq!(
            lane.take_lease(1, &lease_ask(1, 7, 100)),
            None,
            "another generation"
        );
        let other_limits = LeaseAsk {
            limits: RATE + 1,
            ..lease_ask(1, 7, 100)
        };
        assert_eq!(lane.take_lease(2, &other_limits), None, "other limits");
        assert_eq!(lane.take_lease(2, &lease_ask(4, 7, 150)), None, "4 over 3");
        assert_eq!(lane.take_lease(2, &lease_ask(3, 7, 150)), Some(9));
        assert_eq!(lane.take_lease(2, &lease_ask(1, 7, 150)), None, "spent");
        lane.grant_and_open(7, 160, 4, 10);
        assert_eq!(lane.lease(2), Some((7, 4)));
        assert_eq!(lane.close_and_reclaim(), Some((7, 4)));
        assert_eq!(
            lane.take_lease(2, &lease_ask(1, 7, 170)),
            None,
            "closed, nothing left"
        );
        assert_eq!(lane.lease(2), None);
        assert_eq!(lane.close_and_reclaim(), None, "taken back once");
        lane.grant_and_open(8, 0, MAX_LEASE, u32::MAX);
        assert_eq!(
            lane.take_lease(2, &lease_ask(MAX_LEASE, 8, 1)),
            Some(u32::MAX),
            "the largest"
        );
        lane.reset(3);
        assert_eq!(lane.lease(3), None, "a new generation holds none");
        assert_eq!(lane.units(3), 0);
    }

    /// The grant's number changes with every grant and wraps within its bits: a word of a
    /// later grant with the same units left differs from the earlier one's, and no grant
    /// carries into the bits above the count.
    #[test]
    fn every_grant_changes_the_word_even_with_the_same_units() {
        let lane = Lane::opened(GENERATION_MASK, 0, RATE);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..=GRANT_MASK {
            lane.close_and_reclaim();
            lane.grant_and_open(1, 0, 3, 10);
            assert!(
                seen.insert(lane.lease.load(Ordering::SeqCst)),
                "a word repeated"
            );
        }
        lane.close_and_reclaim();
        lane.grant_and_open(1, 0, 3, 10);
        assert!(
            !seen.insert(lane.lease.load(Ordering::SeqCst)),
            "wraps after 4,096"
        );
        assert_eq!(lane.generation(), GENERATION_MASK);
        assert_eq!(lane.lease(GENERATION_MASK), Some((1, 3)));
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
            let word = Arc::new(Lane::default());
            word.reset(1);
            word.add_and_open(1);
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
            let word = Arc::new(Lane::default());
            word.reset(1);
            word.add_and_open(2);
            let (a, b) = (Arc::clone(&word), Arc::clone(&word));
            let first = thread::spawn(move || a.give_back(1, 1));
            let second = thread::spawn(move || b.give_back(1, 1));
            word.reset(2);
            word.add_and_open(1);
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
            let word = Arc::new(Lane::default());
            word.reset(1);
            word.add_and_open(1);
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

    /// An admission without the lock (its sketch unit counted first, as every request's is)
    /// races a rebase under the lock: the rebase closes the place, then reads the sketch, then
    /// the count. The base it finds is never under the untracked units: the admission either
    /// swapped before the close (its sketch unit is in the estimate) or found the place closed
    /// and was not counted. Without the close, loom finds the admission counted between the
    /// two reads, and a base one under the truth.
    #[test]
    fn an_admission_racing_a_rebase_never_lowers_the_base_below_the_untracked_units() {
        loom::model(|| {
            const UNTRACKED: u32 = 2;
            let lane = Arc::new(Lane::opened(1, UNTRACKED, 1));
            let sketch = Arc::new(AtomicU32::new(UNTRACKED));
            let (l, s) = (Arc::clone(&lane), Arc::clone(&sketch));
            let admitting = thread::spawn(move || {
                s.fetch_add(1, Ordering::SeqCst);
                l.admit(1, &Ask::of(1, 1, 8, u32::MAX))
            });
            lane.close();
            let estimate = sketch.load(Ordering::SeqCst);
            let tracked = lane.units(1);
            let base = estimate.saturating_sub(tracked);
            assert!(base >= UNTRACKED, "base {base} under {UNTRACKED}");
            lane.open();
            admitting.join().unwrap();
        });
    }

    /// Two admissions without the lock race for the last unit: exactly one is counted.
    #[test]
    fn two_admissions_for_the_last_unit_count_one() {
        loom::model(|| {
            let lane = Arc::new(Lane::opened(1, 0, 1));
            let other = Arc::clone(&lane);
            let racing = thread::spawn(move || {
                other
                    .admit(1, &Ask::of(1, 1, 1, u32::MAX))
                    .admitted()
                    .is_some()
            });
            let mine = lane
                .admit(1, &Ask::of(1, 1, 1, u32::MAX))
                .admitted()
                .is_some();
            let theirs = racing.join().unwrap();
            assert!(mine ^ theirs, "one of two: {mine} {theirs}");
            assert_eq!(lane.units(1), 1);
        });
    }

    /// An admission without the lock for the old key races its replacement: it is counted in
    /// the old generation (which the reset then drops) or not at all, never in the new one.
    #[test]
    fn an_admission_racing_a_replacement_never_lands_in_the_new_generation() {
        loom::model(|| {
            let lane = Arc::new(Lane::opened(1, 0, 1));
            let other = Arc::clone(&lane);
            let admitting = thread::spawn(move || other.admit(1, &Ask::of(1, 1, 4, u32::MAX)));
            lane.reset(2);
            admitting.join().unwrap();
            assert_eq!(lane.units(2), 0);
        });
    }

    /// A refusal without the lock races the key's replacement (whose reset writes the base
    /// of no key, then the new generation): it is refused on the old key's base and count, or
    /// goes to the lock, never judged by a base of one and a count of the other.
    #[test]
    fn a_refusal_racing_a_replacement_is_judged_by_one_keys_base_and_count() {
        loom::model(|| {
            // The old key: 1 untracked, none tracked; a request of 2 under a limit of 2.
            let lane = Arc::new(Lane::opened(1, 1, 1));
            let other = Arc::clone(&lane);
            let refusing = thread::spawn(move || other.admit(1, &Ask::of(1, 2, 2, u32::MAX)));
            lane.reset(2);
            let said = refusing.join().unwrap();
            assert!(
                matches!(said, InLane::Full(3) | InLane::Lock),
                "{said:?}: the old key's 1 + 0 + 2, or the lock"
            );
        });
    }

    /// A refusal without the lock races its key's departure (the lane closed, its refusals
    /// taken, the place given to another key): it is counted for its key (taken with the
    /// rest) or not at all, never for the key that takes the place.
    #[test]
    fn a_refusal_racing_a_replacement_is_counted_for_its_key_or_none() {
        loom::model(|| {
            let lane = Arc::new(Lane::opened(1, 1, 1));
            let other = Arc::clone(&lane);
            let refusing = thread::spawn(move || other.admit(1, &Ask::of(1, 2, 2, u32::MAX)));
            lane.close();
            let taken = lane.take_refused(1);
            lane.reset(2);
            let said = refusing.join().unwrap();
            assert_eq!(lane.refused(2), 0, "{said:?}: counted for the next key");
            assert!(
                taken <= u32::from(said == InLane::Full(3)),
                "{taken} taken of {said:?}"
            );
        });
    }

    /// The fingerprint of the limits the lease models take under.
    const RATE: u64 = 1 << 63;

    /// A lane of generation 1 leasing `units` of window 5 from time `from`.
    fn leased(from: u64, units: u32) -> Lane {
        let lane = Lane::opened(1, 0, RATE);
        lane.close_and_reclaim();
        lane.grant_and_open(5, from, units, 10);
        // The closed guard's drop, after the decision that granted it.
        lane.open();
        lane
    }

    /// A request of one unit of window 5 at time `at`.
    fn take_at(at: u64) -> LeaseAsk {
        LeaseAsk {
            limits: RATE,
            cost: 1,
            window: 5,
            at,
        }
    }

    /// Two requests race for a lease's last unit: exactly one takes it.
    #[test]
    fn two_takes_for_a_leases_last_unit_take_one() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 1));
            let ask = take_at(0);
            let other = Arc::clone(&lane);
            let racing = thread::spawn(move || other.take_lease(1, &ask).is_some());
            let mine = lane.take_lease(1, &ask).is_some();
            let theirs = racing.join().unwrap();
            assert!(mine ^ theirs, "one of two: {mine} {theirs}");
            assert_eq!(lane.lease(1), None);
        });
    }

    /// A take races the lock taking the lease back: every unit granted is either taken or
    /// given back, never both, never neither.
    #[test]
    fn a_take_racing_a_reclaim_loses_no_unit_and_counts_none_twice() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 2));
            let other = Arc::clone(&lane);
            let taking = thread::spawn(move || {
                let ask = take_at(0);
                other.take_lease(1, &ask).is_some()
            });
            let back = lane.close_and_reclaim().map_or(0, |(_, left)| left);
            let taken = u32::from(taking.join().unwrap());
            assert_eq!(taken + back, 2, "taken {taken}, given back {back}");
        });
    }

    /// A take that read a lease of an earlier time races the lock taking it back and granting
    /// one of the same units from a later time: the take is judged by the grant whose word it
    /// swaps. A request of a time before the new grant never takes it (without the grant's
    /// number in the word, loom finds it taken).
    #[test]
    fn a_take_never_takes_a_later_grant_judged_by_an_earlier_ones_time() {
        loom::model(|| {
            let lane = Arc::new(leased(10, 1));
            let other = Arc::clone(&lane);
            let taking = thread::spawn(move || {
                let ask = take_at(10);
                other.take_lease(1, &ask).is_some()
            });
            let back = lane.close_and_reclaim().map_or(0, |(_, left)| left);
            lane.grant_and_open(5, 20, 1, 10);
            let taken = taking.join().unwrap();
            // The later grant's unit is left whole: the request at 10 is before its time.
            assert_eq!(lane.lease(1), Some((5, 1)));
            assert_eq!(u32::from(taken) + back, 1);
        });
    }

    /// A take judged under one rate limit races the lock taking the lease back and granting
    /// one under another limit (a request of another plan decided there): the take is judged
    /// by the limits of the grant whose word it swaps, and never takes a lease granted under
    /// limits it was not judged by. Read once before the word, the limits let it take the
    /// new grant's room (a review found a request under a limit of 50 admitted as the
    /// 59,092nd unit of its window).
    #[test]
    fn a_take_never_takes_a_lease_granted_under_other_limits() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 1));
            let other = Arc::clone(&lane);
            let taking = thread::spawn(move || {
                let ask = take_at(0);
                other.take_lease(1, &ask).is_some()
            });
            let back = lane.close_and_reclaim().map_or(0, |(_, left)| left);
            lane.admit_under(RATE | 7);
            lane.grant_and_open(5, 0, 1, 10);
            let taken = taking.join().unwrap();
            assert_eq!(
                lane.lease(1),
                Some((5, 1)),
                "the other limit's unit is whole"
            );
            assert_eq!(u32::from(taken) + back, 1);
        });
    }

    /// A request of one unit in a limiter that counts both, as its path makes it: admitted in
    /// flight in the lane, then its rate unit taken out of the lease, or its unit in flight
    /// given back. Whether it was admitted.
    fn admit_both(lane: &Lane, generation: u32) -> bool {
        let ask = Ask {
            last: false,
            ..Ask::of(RATE, 1, 4, u32::MAX)
        };
        if lane.admit(generation, &ask).admitted().is_none() {
            return false;
        }
        if lane.take_lease(generation, &take_at(0)).is_some() {
            return true;
        }
        lane.give_back(generation, 1);
        false
    }

    /// Such a request races the lock taking the lease back: its unit is counted in flight
    /// exactly when it took its lease's unit, and every unit of the lease is taken or given
    /// back, never both, never neither.
    #[test]
    fn a_request_counting_both_racing_a_reclaim_is_in_flight_exactly_when_it_took_its_lease() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 1));
            let other = Arc::clone(&lane);
            let admitting = thread::spawn(move || admit_both(&other, 1));
            let back = lane.close_and_reclaim().map_or(0, |(_, left)| left);
            let admitted = admitting.join().unwrap();
            assert_eq!(
                u32::from(admitted) + back,
                1,
                "admitted {admitted}, {back} back"
            );
            assert_eq!(lane.units(1), u32::from(admitted));
        });
    }

    /// The same request races its key leaving and another key taking the place (the lock
    /// takes the lease back, empties the place for the new generation, and grants the
    /// newcomer a lease): nothing of it lands in the new generation's units or lease.
    #[test]
    fn a_request_counting_both_racing_a_replacement_leaves_the_new_generation_alone() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 1));
            let other = Arc::clone(&lane);
            let admitting = thread::spawn(move || admit_both(&other, 1));
            lane.close_and_reclaim();
            lane.reset(2);
            lane.admit_under(RATE);
            lane.grant_and_open(5, 0, 1, 10);
            admitting.join().unwrap();
            assert_eq!(lane.lease(2), Some((5, 1)));
            assert_eq!(lane.units(2), 0);
        });
    }

    /// A take races its key's replacement: its unit comes out of the old generation's lease
    /// or of none, never out of the new key's place.
    #[test]
    fn a_take_racing_a_replacement_takes_nothing_of_the_new_generation() {
        loom::model(|| {
            let lane = Arc::new(leased(0, 1));
            let other = Arc::clone(&lane);
            let taking = thread::spawn(move || {
                let ask = take_at(0);
                other.take_lease(1, &ask)
            });
            lane.reset(2);
            lane.admit_under(RATE);
            lane.grant_and_open(5, 0, 1, 10);
            taking.join().unwrap();
            assert_eq!(lane.lease(2), Some((5, 1)));
        });
    }
}
