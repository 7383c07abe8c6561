//! The limiter's exact second stage: per-key counts for the few keys whose sketch estimate
//! came near their limit.
//!
//! # Why it can be exact
//!
//! A key is *promoted* when its sketch estimate reaches the promotion threshold. At that moment
//! its true count is at most the sketch's estimate `p` (the sketch never under-counts), and
//! from then on every request for the key is decided here and counted exactly, so its true
//! count is at most `p` plus what was counted here since. The limiter decides with the
//! smaller of that bound and the sketch estimate: never below the true count, and no longer
//! inflated by other keys that share the key's sketch columns.
//!
//! # Structure
//!
//! - A counting filter of promoted keys, read lock-free by every request: a zero means the
//!   key is certainly not promoted and the request is decided by the sketch alone. A non-zero
//!   cell (the key, or another promoted key in the same cell) sends it here. Its cells
//!   share cache lines with the over-limit cache's slots (`key_lines.rs`): a request reads
//!   one line for both.
//! - A fixed table of entries in sets of [`WAYS`], each set behind its own lock, which only
//!   requests for promoted keys (or keys about to be) take. A key can live only in its set,
//!   so every operation looks at one set: O(`WAYS`), never a scan of the stage, and nothing
//!   is allocated once a way has held a key (its key's buffer is reused through
//!   `ToOwned::clone_into`).
//! - Beside each set's lock, outside it, the hash of the key each way holds and one *lane*
//!   per way (`lane.rs`): the units its entry holds in flight with the entry's generation in
//!   one atomic word, and what lets its key's requests pass without the lock. An admission
//!   whose limits the lane admits under is counted there by a compare-and-swap within the
//!   limit ([`ExactStage::admit`]); any other decision takes the lock, and closes the lane
//!   while it decides. A permit gives its units back without the lock
//!   ([`ExactStage::give_back`]), and takes it only when the count reaches 0 with the key's
//!   in-flight estimate, doubled, below what its tenant said ([`ExactStage::look_below`]:
//!   the key may have cooled down and leave; 0, never, while its rate keeps it hot), or
//!   when the place is watched (its key is learning its
//!   in-flight limit, and its learner is told of each completion). In a limiter that counts a
//!   rate (and no fleet), a second word holds a *lease*: room under the key's rate limit that
//!   a decision under the lock counted in the key's window ahead of the requests that take it
//!   without the lock ([`LaneOf::take_lease`]), taken back by the next decision there; in one
//!   that counts requests in flight too, a request is admitted in the first word, then takes
//!   its rate units out of the lease.
//! - Both take their index from [`spread`], a mix of the key's hash that is independent of
//!   the bits the sketches take for their columns.
//! - The stage is storage: what it keeps of a key is its place (key, hash, generation, the
//!   evidence that keeps the place); what the limiter counts for the key is a [`Tenant`] it
//!   knows only through that trait (until when it keeps its place, what it refused), and the
//!   limiter itself a [`Keeper`], which it asks the time of a loss and tells of a key
//!   leaving (its last chance to count what the key's lane admitted). Limits, thresholds,
//!   the fleet and learning are the limiter's, above the stage.
//!
//! # What a set remembers of the keys it lost
//!
//! For the promotion proof (`limiter/proof.rs`), each set records, for the last few keys it
//! lost (a key that left the stage, or that was hot and found no place or a twin hash), the
//! latest time each was, and the latest time of a loss it no longer lists (`Set::lost`); a
//! promotion is told whether its key was lost since a time it names (`Set::kept_since`).
//!
//! # Who gets a place: by evidence, not by arrival
//!
//! When a key's set is full, the key knocks at the set's door, which counts per epoch the
//! requests of keys that wanted in (TinyLFU's admission idea; the door is a small Misra–Gries
//! summary, whose counts never exceed the truth). The key takes the place of the set's entry
//! with the least evidence (requests decided here in this epoch or the last, whichever is
//! more, plus permits in flight) only once it has knocked more often than that entry was used.
//! An entry whose key is over its rate limit keeps its place until its `retry_after` (its
//! requests are rejected by the over-limit cache meanwhile, uncounted). A steady origin
//! therefore keeps its place against any stream of keys seen once or twice, and a key that
//! keeps coming gets in within an epoch unless the set's door is flooded by more than
//! `DOOR + 1` times its traffic. A key that finds no place is decided by the sketch alone,
//! which can reject more, never admit more.
//!
//! # Off the request path
//!
//! Requests demote only their own key (when it has cooled down, by the sketches read under the
//! set's lock) and replace at most one entry of their set. Everything else runs on the clock's thread in [`ExactStage::sweep`], once an
//! epoch: it starts the next epoch and demotes every entry that has cooled down.
//!
//! # Without the lock
//!
//! A release takes no lock unless its key's count in flight reaches 0 with its in-flight
//! estimate below half its promotion threshold, or its place is watched: a key with requests in
//! flight throughout (what makes an in-flight limit matter) gives them back lock-free. An
//! admission takes none when its key's lane admits under its limits (the limiter's tenant
//! says which: in a limiter that learns no limits and holds no fleet, an in-flight limit, a
//! rate limit, or both) and it fits: in flight within the limit, and its rate units in its
//! key's lease. A request over its in-flight limit takes none either when the lock would
//! refuse it on the same bound (see "A refusal without the lock" in `lane.rs`). Everything
//! else takes the lock: a key's entry and departure, a refusal the lock may decide otherwise
//! (it lowers the key's bound first, so that the key is never refused on a stale one), one
//! under a rate limit too, a lease spent or of another window, a plan that turns a kind off,
//! the fleet, learning, and the reports.
//!
//! # The promotion handshake
//!
//! A request increments the sketch and then loads the filter; a promotion increments the
//! filter and then reads the sketch for `p`. All four are `SeqCst` (the sketch counters always
//! are, see the `counter` module), so in their total order one of the two sides comes second:
//! either the request sees the key as promoted and is counted here, or `p` includes it.
//!
//! # Leaving between two reads
//!
//! A key's requests taken out of its lease count nothing in the sketches as they are taken
//! (see "A lease" in `lane.rs`): the stage's keeper counts them there when the lease is taken
//! back, and, as the key leaves, before its cell is unflagged. A request decided by the
//! sketches alone reads its counts between two loads of its cell: one before it counts itself
//! ([`cell_before`]) and the handshake's after ([`CellBefore::flagged_since`]). If the key left before
//! the first, its units are in the counts (the unflag's `Release`, that load's `Acquire`); if
//! it was promoted at the second, the request goes to the lock. Between them a key of the
//! cell may have left, its lease's units counted in the sketches after the request read
//! them: the cell's count of departures, in its high bits, changed, and the request goes to
//! the lock too, where it reads the sketches again (`Place::Free` below a threshold: judged
//! on its counts now). Only sixteen departures from one cell between one request's two loads
//! of it (its thread held up that long) would read as none; the key's own lease would also
//! have to be among them.

mod lane;
mod set;
mod tenant;

use std::borrow::Borrow;

use crossbeam_utils::CachePadded;

use crate::sync::{lock, AtomicU64, AtomicU8, Mutex, MutexGuard, Ordering};

use super::key_lines::{spread, KeyLine, KeyLines};
use lane::Lane;
pub(crate) use lane::{Ask, GivenBack, InLane, LeaseAsk, MAX_LEASE};
use set::Set;
pub(crate) use set::{Departed, Entry, Hits, WAYS};
pub(crate) use tenant::Tenant;

/// A filter cell holds two numbers in its byte: in its low bits, how many promoted keys hash
/// to it ([`CELL_KEYS`]); in its high bits, how many keys left it, wrapping ([`CELL_LEFT`]),
/// so that a request that reads its cell before and after counting itself in the sketches
/// sees whether a key left in between (see "Leaving between two reads" in the module docs).
/// A byte a cell, because every request loads its key's cell: 16 of them fit in a line
/// beside 6 over-limit slots (`key_lines.rs`), where `u32` cells would take the whole line.
const CELL_KEYS: u8 = 0x0F;
/// One more key that left the cell, in its high bits.
const CELL_LEFT: u8 = 0x10;
/// A filter cell's count of keys sticks here: a cell that reached it stays flagged for good
/// (its keys take the lock needlessly; none is missed). 15 promoted keys in one cell, of 8
/// cells per entry, is as likely as 15 of 8·n balls thrown at random landing in one of 8·n
/// bins with n of them thrown: it does not happen with a seeded hash.
const FILTER_CELL_STUCK: u8 = CELL_KEYS;

/// The limiter that keeps the stage, as the stage asks it under a set's lock when a key
/// leaves its place (demoted, or replaced by another key).
pub(crate) trait Keeper<V> {
    /// The time now, on the limiter's clock: when a key leaving is recorded lost (see
    /// `ExactStage::leave`).
    fn now(&self) -> u64;
    /// The key of hash `hash` leaves: the last chance to count what the stage will no longer
    /// hold of it, in `tenant`, in its lane (`units`, still as the key's requests left it)
    /// and on its key's `line`.
    fn leaving(&self, hash: u64, tenant: &mut V, units: Units<'_>, line: KeyLine<'_>);
}

/// A request's key's filter cell, and what it held before the request counted itself in the
/// sketches ([`cell_before`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CellBefore<'a> {
    cell: &'a AtomicU8,
    seen: u8,
}

impl CellBefore<'_> {
    /// Whether a promoted key hashed to the cell then (false: the key was certainly not
    /// promoted).
    #[inline]
    pub(crate) fn flagged(self) -> bool {
        self.seen & CELL_KEYS != 0
    }

    /// Whether the key may be promoted now (false: certainly not), or a key of its cell left
    /// since the cell was read before the request counted itself in the sketches: only a
    /// request that finds neither is decided by the sketches alone. The request's half of the
    /// promotion handshake, after its sketch increments.
    #[inline]
    pub(crate) fn flagged_since(self) -> bool {
        let now = self.cell.load(Ordering::SeqCst);
        now & CELL_KEYS != 0 || now != self.seen
    }
}

/// The key on `line`'s filter cell, read before the request counts itself in the sketches,
/// for [`CellBefore::flagged_since`] after. `Acquire`: it pairs with a departure's `Release`
/// (`unflag`), so a request that reads the cell as a departure left it reads the sketches
/// after it as the departure left them too.
#[inline]
pub(crate) fn cell_before(line: KeyLine<'_>) -> CellBefore<'_> {
    let cell = line.cell();
    CellBefore {
        cell,
        seen: cell.load(Ordering::Acquire),
    }
}

/// Counters about the stage, for [`Limiter::stats`](super::Limiter::stats). Relaxed: they
/// order nothing. Cache-padded, so that their writes (on promotions, not on every request)
/// do not share a line with the read-mostly fields.
#[derive(Default)]
struct Counters {
    promotions: CachePadded<AtomicU64>,
    replaced: CachePadded<AtomicU64>,
    decided_alone: CachePadded<AtomicU64>,
    /// Set locks taken, for the tests that check a path takes none.
    #[cfg(feature = "fault-injection")]
    locks: CachePadded<AtomicU64>,
}

/// A set behind its own lock, on cache lines of its own, and its ways' lanes outside the
/// lock, on lines of their own, which requests read and write without the lock.
struct LockedSet<K, V> {
    set: CachePadded<Mutex<Set<K, V>>>,
    lanes: CachePadded<Lanes>,
}

/// A set's lanes, and the hash of the key each way holds (0: none), which an admission without
/// the lock finds its way by, and a request under it finds its entry or a free way by: 16
/// hashes on two lines, then one lane (64 bytes: a line each, after the hashes' two).
#[derive(Default)]
struct Lanes {
    hashes: [AtomicU64; WAYS],
    ways: [Lane; WAYS],
}

/// Under the set's lock, a way's hash is its entry's (0 for no entry: written as the entry is
/// put in and as it leaves), so that the ways are looked at on two lines, where their entries
/// take one or more each; each way found is checked by its entry (a key's hash may be 0).
impl Lanes {
    /// The way holding the entry of `hash` in `set` (its set, locked).
    fn find<K, V: Tenant>(&self, set: &Set<K, V>, hash: u64) -> Option<usize> {
        (0..WAYS).find(|&way| {
            self.hashes[way].load(Ordering::Relaxed) == hash
                && set.get(way).is_some_and(|e| e.hash == hash)
        })
    }

    /// A way of `set` (its set, locked) with no entry.
    fn free_way<K, V: Tenant>(&self, set: &Set<K, V>) -> Option<usize> {
        (0..WAYS)
            .find(|&way| self.hashes[way].load(Ordering::Relaxed) == 0 && set.get(way).is_none())
    }
}

/// The filter and the sets, of keys `K` whose tenants are `V`.
pub(crate) struct ExactStage<K, V> {
    /// The filter: per cell, how many promoted keys hash to it, up to [`FILTER_CELL_STUCK`]
    /// (see the module docs for the handshake). Its lines hold the over-limit cache's slots
    /// too, so that a request reads one line for both (`key_lines.rs`).
    lines: KeyLines,
    sets: Box<[LockedSet<K, V>]>,
    /// The epoch the door counts and entries' evidence are kept in; advanced by the sweep.
    /// Relaxed: a request that reads the old epoch just after a sweep counts its evidence
    /// in the epoch before, which the next comparison still reads.
    epoch: AtomicU64,
    counters: Counters,
}

impl<K, V: Tenant> ExactStage<K, V> {
    /// A stage for at most `capacity` promoted keys (rounded up to a multiple of [`WAYS`]),
    /// all allocated now.
    pub(crate) fn new(capacity: usize) -> Self {
        let sets = capacity.div_ceil(WAYS).max(1);
        ExactStage {
            lines: KeyLines::new(sets * WAYS),
            sets: (0..sets)
                .map(|_| LockedSet {
                    set: CachePadded::new(Mutex::new(Set::new())),
                    lanes: CachePadded::new(Lanes::default()),
                })
                .collect(),
            epoch: AtomicU64::new(0),
            counters: Counters::default(),
        }
    }

    /// The most keys the stage holds at once.
    pub(crate) fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// The filter's lines, which hold the over-limit cache's slots too.
    pub(crate) fn lines(&self) -> &KeyLines {
        &self.lines
    }

    fn cell(&self, spread: u64) -> &AtomicU8 {
        self.lines.key_line(spread).cell()
    }

    /// Marks the key promoted. The promotion's half of the handshake: read the sketch after.
    /// A stuck cell is not written: its `SeqCst` load is the handshake's half, and it stays
    /// flagged for good, so every request after sees the key flagged.
    fn flag(&self, hash: u64) {
        let _ = self
            .cell(spread(hash))
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n & CELL_KEYS < FILTER_CELL_STUCK).then(|| n + 1)
            });
        crate::sync::seqcst_fence_for_loom();
    }

    /// Undoes one [`flag`](Self::flag) (the entry left), and counts one more key that left
    /// the cell; a stuck cell has lost count and stays. `Release`, after everything the
    /// departure counted in the sketches: see [`cell_before`].
    fn unflag(&self, hash: u64) {
        let _ = self
            .cell(spread(hash))
            .fetch_update(Ordering::Release, Ordering::Relaxed, |n| {
                let keys = n & CELL_KEYS;
                (keys != 0 && keys < FILTER_CELL_STUCK).then(|| (n - 1).wrapping_add(CELL_LEFT))
            });
    }

    /// Whether a promoted key hashes to the cell of `hash` (false: the key is certainly not
    /// promoted).
    fn flagged(&self, hash: u64) -> bool {
        self.cell(spread(hash)).load(Ordering::SeqCst) & CELL_KEYS != 0
    }

    /// The set of a key of spread hash `spread`: its high half, scaled to the number of sets.
    fn set_index(spread: u64, sets: usize) -> usize {
        (((spread >> 32) * sets as u64) >> 32) as usize
    }

    /// The set of `hash`, and its ways' words.
    fn locked_set(&self, hash: u64) -> &LockedSet<K, V> {
        &self.sets[Self::set_index(spread(hash), self.sets.len())]
    }

    /// Locks the set of `hash`; returns it with its ways' lanes.
    fn set(&self, hash: u64) -> (MutexGuard<'_, Set<K, V>>, &Lanes) {
        #[cfg(feature = "fault-injection")]
        self.counters.locks.fetch_add(1, Ordering::Relaxed);
        let locked = self.locked_set(hash);
        (lock(&locked.set), &locked.lanes)
    }

    /// Admits or refuses, without the lock, a request of the key of `hash` that asks `ask`, if
    /// the key holds a place whose lane admits under its limits (see `lane.rs`); returns the
    /// place's way and generation, for the permit to give its units back, and what the lane
    /// said. `None`: the key holds no place, and the request goes to the lock.
    ///
    /// A key is found by its hash alone: another key with the same 64-bit keyed hash (which
    /// its sketch counters cannot tell apart either) would be counted with it, an over-count
    /// of both.
    #[inline]
    pub(crate) fn admit(&self, hash: u64, ask: &Ask) -> Option<(u8, u32, InLane)> {
        let found = self.lane_of(hash)?;
        let said = found.lane.admit(found.generation, ask);
        Some((found.way, found.generation, said))
    }

    /// The place of the key of `hash` for a request without the lock: its way, its lane and
    /// the generation it holds. Found by the hash alone, as for [`admit`](Self::admit).
    #[inline]
    pub(crate) fn lane_of(&self, hash: u64) -> Option<LaneOf<'_>> {
        let lanes = &self.locked_set(hash).lanes;
        let way = lanes
            .hashes
            .iter()
            .position(|h| h.load(Ordering::Relaxed) == hash)?;
        let lane = &lanes.ways[way];
        // The generation, then the hash again: the reset that gave the place this generation
        // came after its hash was written (see `lane.rs`), and a later one fails the swap.
        let generation = lane.generation();
        if generation == 0 || lanes.hashes[way].load(Ordering::Relaxed) != hash {
            return None;
        }
        Some(LaneOf {
            way: way as u8,
            lane,
            generation,
        })
    }

    /// The in-flight estimate below which the release of the entry in way `way` of the set of
    /// `hash` that leaves it nothing in flight looks at the key (takes the lock, to see whether
    /// it has cooled down): its tenant's word, `u32::MAX` (always) until it said one.
    pub(crate) fn look_below(&self, hash: u64, way: u8) -> u32 {
        let lane = self.locked_set(hash).lanes.ways.get(usize::from(way));
        lane.map_or(u32::MAX, Lane::look_below)
    }

    /// Gives back, without the lock, `cost` units in flight that the entry of `hash` and
    /// `generation`, in way `way`, counted (see [`GivenBack`]).
    pub(crate) fn give_back(&self, hash: u64, way: u8, generation: u32, cost: u32) -> GivenBack {
        match self.locked_set(hash).lanes.ways.get(usize::from(way)) {
            Some(lane) => lane.give_back(generation, cost),
            None => GivenBack::Gone,
        }
    }

    /// The stage's place for `key` (of hash `hash`), its set locked until the place is
    /// dropped. `at`: the request's time on the limiter's clock, recorded as a loss of the key
    /// (see [`Set::lost`]) when a twin holds its place and the sketch admits it alone.
    #[inline]
    pub(crate) fn place<'a, Q>(&'a self, key: &Q, hash: u64, at: u64) -> Place<'a, K, V>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let (mut set, lanes) = self.set(hash);
        let units = &lanes.ways;
        let epoch = self.epoch.load(Ordering::Relaxed);
        match lanes.find(&set, hash) {
            Some(way) if set.get(way).is_some_and(|e| e.key.borrow() == key) => Place::Held(Held {
                stage: self,
                set,
                units,
                way,
                epoch,
            }),
            // Another key with the same 64-bit hash is promoted: only the sketch can judge.
            Some(_) => {
                set.lost(hash, at);
                Place::Twin
            }
            None => Place::Free(Free {
                stage: self,
                set,
                lanes,
                epoch,
            }),
        }
    }

    /// A place in the key's set: a free way, or the way of the entry with the least evidence
    /// once the key has knocked more often than that entry was used (the entry is demoted).
    /// Returns the way and the knocks the key brings in; `None` if the key must wait.
    ///
    /// Every refused request of a hot key that holds no place comes here, under its set's
    /// lock: the ways are looked at through their lanes first (their hashes, two lines, and
    /// what each lane counts), and an entry itself only where its lane leaves it a candidate.
    fn place_for(
        &self,
        set: &mut Set<K, V>,
        lanes: &Lanes,
        hash: u64,
        epoch: u64,
        keeper: &impl Keeper<V>,
    ) -> Option<(usize, u32)> {
        if let Some(way) = lanes.free_way(set) {
            return Some((way, 0));
        }
        let knocks = set.knock(spread(hash), epoch);
        let way = set.weakest_below(knocks, epoch, keeper.now(), &lanes.ways)?;
        self.leave(set, &lanes.ways, way, keeper);
        self.counters.replaced.fetch_add(1, Ordering::Relaxed);
        Some((way, knocks))
    }

    /// Runs `f` under the set's lock of `hash` with the entry of generation `generation` in
    /// way `way`, or `None` if that entry is gone (demoted, maybe promoted again since: a
    /// permit it counted is not the new entry's). The entry leaves the stage if `f` says so
    /// (see [`leave`](Self::leave)).
    pub(crate) fn update_or_leave(
        &self,
        hash: u64,
        way: u8,
        generation: u32,
        f: impl FnOnce(Option<Locked<'_, K, V>>) -> bool,
        keeper: &impl Keeper<V>,
    ) {
        let (mut set, lanes) = self.set(hash);
        let units = &lanes.ways;
        let way = usize::from(way);
        let found = set
            .get(way)
            .is_some_and(|e| e.hash == hash && e.generation == generation);
        let locked = found
            .then(|| set.get_mut(way))
            .flatten()
            .map(|entry| Locked {
                units: Units::of(&units[way], entry),
                entry,
            });
        if f(locked) && found {
            self.leave(&mut set, units, way, keeper);
        }
    }

    /// Takes the entry of `way` out of the stage, its keeper told first (with the entry's lane
    /// as it stands: the last chance to count what it admitted there), then empties its word
    /// (the permits it counted give back nothing to it now), records the loss at the
    /// keeper's time now, and clears its filter cell.
    ///
    /// The time of the loss is read here, under the lock and after the word is emptied, not
    /// taken from the request that made the key leave: that request may have read its time
    /// long before (its thread held up), while the entry admitted requests of later windows.
    /// Every admission the entry made read its time before its lock or its swap on the word,
    /// both before this read (the swap that empties the word reads every swap before it): a
    /// loss recorded no earlier than each of them keeps a later promotion from bounding the
    /// key's windows by its threshold (see `Set::lost`).
    fn leave(
        &self,
        set: &mut Set<K, V>,
        units: &[Lane; WAYS],
        way: usize,
        keeper: &impl Keeper<V>,
    ) {
        let Some(entry) = set.get_mut(way) else {
            return;
        };
        let hash = entry.hash;
        let lane = Units::of(&units[way], entry);
        keeper.leaving(
            hash,
            &mut entry.state,
            lane,
            self.lines.key_line(spread(hash)),
        );
        units[way].reset(0);
        self.locked_set(hash).lanes.hashes[way].store(0, Ordering::Relaxed);
        let at = keeper.now();
        set.vacate(way, at);
        set.lost(hash, at);
        self.unflag(hash);
    }

    /// The clock's periodic work, off the request path: starts the next epoch, and runs
    /// `visit` on every entry with its key's line, which says whether it leaves (see
    /// [`leave`](Self::leave)).
    /// Takes each set's lock in turn, briefly.
    pub(crate) fn sweep(
        &self,
        mut visit: impl FnMut(Locked<'_, K, V>, KeyLine<'_>) -> bool,
        keeper: &impl Keeper<V>,
    ) {
        let epoch = self.epoch.fetch_add(1, Ordering::Relaxed);
        for locked in self.sets.iter() {
            let (mut set, units) = (lock(&locked.set), &locked.lanes.ways);
            for way in 0..WAYS {
                let Some(entry) = set.get_mut(way) else {
                    continue;
                };
                // The requests admitted without the lock in the epoch that ends.
                entry.hits.count_many(epoch, units[way].take_requests());
                let line = self.lines.key_line(spread(entry.hash));
                // Under the lock, after every admission the entry counted.
                let entry = Locked {
                    units: Units::of(&units[way], entry),
                    entry,
                };
                if visit(entry, line) {
                    self.leave(&mut set, units, way, keeper);
                }
            }
        }
    }

    /// Calls `f` with the key's entry and its lane, if it is promoted.
    pub(crate) fn with_entry<Q, R>(
        &self,
        key: &Q,
        hash: u64,
        f: impl FnOnce(Option<(&Entry<K, V>, Units<'_>)>) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if !self.flagged(hash) {
            return f(None);
        }
        let (set, lanes) = self.set(hash);
        let entry = lanes.find(&set, hash).and_then(|way| {
            let entry = set.get(way).filter(|e| e.key.borrow() == key)?;
            Some((entry, Units::of(&lanes.ways[way], entry)))
        });
        f(entry)
    }

    /// Calls `f` on what is left of every key that left the stage and whose place has not
    /// been taken since, one set locked at a time, for reports.
    pub(crate) fn for_each_departed(&self, mut f: impl FnMut(&Departed<K>)) {
        for locked in self.sets.iter() {
            lock(&locked.set).departed().for_each(&mut f);
        }
    }

    /// Calls `f` on every entry with its lane and its key's line, one set locked at a time,
    /// for reports.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&Entry<K, V>, Units<'_>, KeyLine<'_>)) {
        for locked in self.sets.iter() {
            let set = lock(&locked.set);
            for way in 0..WAYS {
                let Some(entry) = set.get(way) else { continue };
                let units = Units::of(&locked.lanes.ways[way], entry);
                f(entry, units, self.lines.key_line(spread(entry.hash)));
            }
        }
    }

    /// Calls `f` under its set's lock on the entry of `hash` if it is still the one of
    /// generation `generation` (not demoted since, nor promoted anew), with its key's line:
    /// the fleet's sync writing back what it learnt of a key it pushed, a refund taking back
    /// an admission.
    pub(crate) fn update(
        &self,
        hash: u64,
        generation: u32,
        f: impl FnOnce(&mut Entry<K, V>, KeyLine<'_>),
    ) {
        let (mut set, lanes) = self.set(hash);
        let Some(way) = lanes.find(&set, hash) else {
            return;
        };
        if let Some(entry) = set.get_mut(way).filter(|e| e.generation == generation) {
            f(entry, self.lines.key_line(spread(hash)));
        }
    }

    /// Keys promoted now.
    pub(crate) fn len(&self) -> usize {
        let mut len = 0;
        self.for_each(|_, _, _| len += 1);
        len
    }

    /// Promotions so far.
    pub(crate) fn promotions(&self) -> u64 {
        self.counters.promotions.load(Ordering::Relaxed)
    }

    /// Promotions that took the place of an entry with less evidence.
    pub(crate) fn replaced(&self) -> u64 {
        self.counters.replaced.load(Ordering::Relaxed)
    }

    /// Decisions the sketch made alone because the key found no place.
    pub(crate) fn decided_alone(&self) -> u64 {
        self.counters.decided_alone.load(Ordering::Relaxed)
    }

    /// Set locks taken so far.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn locks_taken(&self) -> u64 {
        self.counters.locks.load(Ordering::Relaxed)
    }

    /// Bytes allocated up front for the filter (with the over-limit slots in its lines) and
    /// the sets (not counting heap data that the keys themselves own).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.lines.memory_bytes()
            + std::mem::size_of_val(&*self.sets)
            + self.sets.len() * Set::<K, V>::heap_bytes()
    }
}

/// What the stage holds for a key, its set locked: see [`ExactStage::place`].
pub(crate) enum Place<'a, K, V> {
    /// The key is promoted.
    Held(Held<'a, K, V>),
    /// The key is not promoted.
    Free(Free<'a, K, V>),
    /// Another key with the same 64-bit hash is promoted: only the sketch can judge (the set
    /// has recorded the loss).
    Twin,
}

/// A promoted key's place as a request without the lock finds it
/// ([`ExactStage::lane_of`]): its way, its lane and the generation the lane held.
pub(crate) struct LaneOf<'a> {
    pub(crate) way: u8,
    lane: &'a Lane,
    pub(crate) generation: u32,
}

impl LaneOf<'_> {
    /// Takes the units of a request that asks `ask` out of the place's lease, if it covers
    /// them (see "A lease" in `lane.rs`); returns the key's count with them as its tenant
    /// said (see [`Lane::take_lease`]). `None`: the request goes to the lock.
    #[inline]
    pub(crate) fn take_lease(&self, ask: &LeaseAsk) -> Option<u32> {
        self.lane.take_lease(self.generation, ask)
    }

    /// Whether the place's lease has `cost` units left now: a hint (see [`Lane::may_lease`]).
    #[inline]
    pub(crate) fn may_lease(&self, cost: u32) -> bool {
        self.lane.may_lease(self.generation, cost)
    }

    /// Admits or refuses a request that asks `ask` in the place's units in flight (see
    /// [`ExactStage::admit`]).
    #[inline]
    pub(crate) fn admit(&self, ask: &Ask) -> InLane {
        self.lane.admit(self.generation, ask)
    }

    /// Gives back `cost` units it admitted (see [`ExactStage::give_back`]).
    #[inline]
    pub(crate) fn give_back(&self, cost: u32) -> GivenBack {
        self.lane.give_back(self.generation, cost)
    }
}

/// An entry under its set's lock, with its units in flight.
pub(crate) struct Locked<'a, K, V> {
    pub(crate) entry: &'a mut Entry<K, V>,
    pub(crate) units: Units<'a>,
}

/// An entry's lane (its units in flight, and what lets requests pass it without the lock),
/// while its set is locked.
#[derive(Clone, Copy)]
pub(crate) struct Units<'a> {
    word: &'a Lane,
    generation: u32,
}

impl<'a> Units<'a> {
    fn of<K, V>(word: &'a Lane, entry: &Entry<K, V>) -> Self {
        Units {
            word,
            generation: entry.generation,
        }
    }

    /// The units in flight now (a release may lower them meanwhile, without the lock): 0 in a
    /// limiter that counts none.
    pub(crate) fn in_flight(self) -> u32 {
        self.word.units(self.generation)
    }

    /// Closes the lane and takes back what is left of its lease (see "A lease" in `lane.rs`):
    /// the guard, and the lease's window and units left, which the caller uncounts.
    pub(crate) fn reclaim(self) -> (Closed<'a>, Option<(u64, u32)>) {
        let left = self.word.close_and_reclaim();
        (Closed(self.word), left)
    }

    /// Grants a lease of `units` (at most [`MAX_LEASE`], counted already) in window `window`,
    /// from time `from`, which all taken takes the key's count to `top`, and opens the lane.
    pub(crate) fn grant(self, window: u64, from: u64, units: u32, top: u32) {
        self.word.grant_and_open(window, from, units, top);
    }

    /// The lease the lane holds now: its window and units left (a take without the lock may
    /// lower them meanwhile).
    pub(crate) fn lease(self) -> Option<(u64, u32)> {
        self.word.lease(self.generation)
    }

    /// The window of the lease the lane was last granted.
    pub(crate) fn lease_window(self) -> u64 {
        self.word.lease_window()
    }

    /// Closes the lane to admissions without the lock until the guard is dropped or
    /// [`add`](Self::add) opens it: for a decision that lowers the entry's base (see "The
    /// base" in `lane.rs`).
    pub(crate) fn close(self) -> Closed<'a> {
        self.word.close();
        Closed(self.word)
    }

    /// Counts `cost` units more in flight, for an admission decided under the lock, and opens
    /// the lane if it was closed.
    pub(crate) fn add(self, cost: u32) {
        self.word.add_and_open(cost);
    }

    /// Sets the untracked bound admissions without the lock count: the entry's, while the
    /// lane is closed.
    pub(crate) fn set_base(self, base: isize) {
        self.word
            .set_base(u32::try_from(base.max(0)).unwrap_or(u32::MAX));
    }

    /// Sets the fingerprint of the limits admissions without the lock may pass under (0:
    /// none; see [`ExactStage::admit`]).
    pub(crate) fn admit_under(self, limits: u64) {
        self.word.admit_under(limits);
    }

    /// Takes the requests its lane refused without the lock since the last call.
    pub(crate) fn take_refused(self) -> u32 {
        self.word.take_refused(self.generation)
    }

    /// The requests its lane refused without the lock since they were last taken.
    pub(crate) fn refused(self) -> u32 {
        self.word.refused(self.generation)
    }

    /// Gives back `cost` units, watched or not; returns those counted before them.
    pub(crate) fn give_back(self, cost: u32) -> u32 {
        self.word
            .give_back_locked(self.generation, cost)
            .unwrap_or(0)
    }

    /// Sets or clears the watch: while it is set, every release of these units takes the
    /// lock.
    pub(crate) fn watch(self, watched: bool) {
        self.word.watch(watched);
    }

    /// Sets the in-flight estimate below which a release that leaves nothing in flight looks
    /// at the key (see [`ExactStage::look_below`]).
    pub(crate) fn look_below(self, estimate: u32) {
        self.word.set_look_below(estimate);
    }
}

/// A lane closed to admissions without the lock (see [`Units::close`]); opened again when
/// dropped.
pub(crate) struct Closed<'a>(&'a Lane);

impl Closed<'_> {
    /// Keeps the lane closed for an entry that leaves the stage under this lock: its lane is
    /// emptied as it leaves, and no admission passes it in between.
    pub(crate) fn until_it_leaves(self) {
        std::mem::forget(self);
    }
}

impl Drop for Closed<'_> {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// A promoted key's entry, its set locked.
pub(crate) struct Held<'a, K, V> {
    stage: &'a ExactStage<K, V>,
    set: MutexGuard<'a, Set<K, V>>,
    units: &'a [Lane; WAYS],
    way: usize,
    epoch: u64,
}

impl<'a, K, V: Tenant> Held<'a, K, V> {
    /// The entry (always there: `None` is for the type alone).
    pub(crate) fn entry(&self) -> Option<&Entry<K, V>> {
        self.set.get(self.way)
    }

    /// The entry's lane, while its set is locked.
    pub(crate) fn units(&self) -> Option<Units<'a>> {
        let entry = self.entry()?;
        Some(Units::of(&self.units[self.way], entry))
    }

    /// The entry, to change it without counting a request decided on it.
    pub(crate) fn entry_mut(&mut self) -> Option<&mut Entry<K, V>> {
        self.set.get_mut(self.way)
    }

    /// The entry's units in flight now: see [`Units::in_flight`].
    pub(crate) fn in_flight(&self) -> u32 {
        self.units().map_or(0, Units::in_flight)
    }

    /// Its way in the set, which a permit it counts keeps, to give its units back.
    pub(crate) fn way(&self) -> u8 {
        self.way as u8
    }

    /// The entry, for a request decided on it (counted as evidence for its place), with its
    /// units in flight.
    #[inline]
    pub(crate) fn decided(&mut self) -> Option<Locked<'_, K, V>> {
        let epoch = self.epoch;
        let entry = self.set.get_mut(self.way)?;
        entry.hits.count(epoch);
        Some(Locked {
            units: Units::of(&self.units[self.way], entry),
            entry,
        })
    }

    /// Takes the key out of the stage (it has cooled down): see `ExactStage::leave`.
    pub(crate) fn demote(mut self, keeper: &impl Keeper<V>) {
        self.stage
            .leave(&mut self.set, self.units, self.way, keeper);
    }
}

/// No entry for a key, its set locked.
pub(crate) struct Free<'a, K, V> {
    stage: &'a ExactStage<K, V>,
    set: MutexGuard<'a, Set<K, V>>,
    lanes: &'a Lanes,
    epoch: u64,
}

impl<'a, K, V: Tenant> Free<'a, K, V> {
    /// Promotes `key` if its set has a place for it (see "Who gets a place" in the module
    /// docs): flags it, then asks `tenant` for what the limiter keeps of it, which reads the
    /// sketches (the promotion's half of the handshake) and is told whether the key was not
    /// lost since `kept_since` (nanoseconds on the limiter's clock). `None`, with the loss
    /// recorded, when the key must wait: the sketch decides alone. `keeper`: the limiter, for
    /// the time of a loss (this key's, or one it replaces) and told of a key it replaces (see
    /// `ExactStage::leave`).
    pub(crate) fn promote<Q>(
        mut self,
        key: &Q,
        hash: u64,
        kept_since: u64,
        keeper: &impl Keeper<V>,
        tenant: impl FnOnce(bool) -> V,
    ) -> Option<Held<'a, K, V>>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let stage = self.stage;
        let placed = stage.place_for(&mut self.set, self.lanes, hash, self.epoch, keeper);
        let Some((way, knocks)) = placed else {
            stage.counters.decided_alone.fetch_add(1, Ordering::Relaxed);
            self.set.lost(hash, keeper.now());
            return None;
        };
        stage.flag(hash);
        stage.counters.promotions.fetch_add(1, Ordering::Relaxed);
        let state = tenant(self.set.kept_since(hash, kept_since));
        let hits = Hits::at_promotion(self.epoch, knocks);
        let generation = self.set.occupy(way, hash, key, state, hits);
        // After the entry and its hash are written; admissions and releases of the way's
        // earlier generations find it changed and count nothing in it.
        self.lanes.hashes[way].store(hash, Ordering::Relaxed);
        self.lanes.ways[way].reset(generation);
        Some(Held {
            stage,
            set: self.set,
            units: &self.lanes.ways,
            way,
            epoch: self.epoch,
        })
    }
}

/// A tenant that holds nothing, for the stage's own tests and models.
#[cfg(test)]
impl Tenant for () {
    fn kept_until(&self) -> u64 {
        0
    }
    fn refused(&self) -> u64 {
        0
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    /// A cell's count never wraps to "not promoted": at its ceiling it sticks, flagged for
    /// good, whatever is removed after; below it, flags and removals balance. Each removal
    /// changes the cell, so a request that read it before sees that a key left.
    #[test]
    fn a_filter_cell_sticks_at_its_ceiling_and_never_wraps_to_unflagged() {
        let stage = ExactStage::<u64, ()>::new(16);
        let (crowded, quiet) = (0x1234_5678_9ABC_DEF0, 0x0FED_CBA9_8765_4321);
        assert_ne!(
            stage.cell(spread(crowded)) as *const _,
            stage.cell(spread(quiet)) as *const _
        );
        for _ in 0..=u8::MAX {
            stage.flag(crowded);
        }
        assert!(stage.flagged(crowded), "256 flags wrapped the cell");
        for _ in 0..=u8::MAX {
            stage.unflag(crowded);
        }
        assert!(stage.flagged(crowded), "a stuck cell was unflagged");
        let line = stage.lines.key_line(spread(quiet));
        for round in 0..40 {
            let before = cell_before(line);
            stage.flag(quiet);
            assert!(before.flagged_since(), "round {round}: flagged");
            let flagged = cell_before(line);
            stage.unflag(quiet);
            assert!(
                !stage.flagged(quiet),
                "round {round}: a removal balances a flag"
            );
            assert!(
                before.flagged_since() && flagged.flagged_since(),
                "round {round}: a key left since either read"
            );
            assert!(!cell_before(line).flagged_since());
        }
    }

    /// Keys whose hashes share a sketch block (top bits) and their counters in it (low bits)
    /// must not share a filter cell (nor a line, which holds their over-limit slots) or a set
    /// any more than keys at random: otherwise a heavy key's neighbours in the sketch would
    /// also be its neighbours here. A multiply alone fails this: its low bits depend only on
    /// the hash's low bits.
    #[test]
    fn keys_sharing_sketch_counters_spread_over_filter_cells_and_sets() {
        let stage = ExactStage::<u64, ()>::new(16_384);
        let (cells, sets) = (stage.lines.cells(), stage.sets.len());
        assert!(cells >= 1 << 17 && sets >= 1_024);
        let hashes: Vec<u64> = (0..1_024u64)
            .map(|i| 0xA5A5_5A5A_0000_0000 | i << 8 | 0x6B)
            .collect();
        let mut cell_of: Vec<usize> = hashes
            .iter()
            .map(|&h| stage.lines.cell_number(spread(h)))
            .collect();
        cell_of.sort_unstable();
        cell_of.dedup();
        // 1,024 keys over 2^17 cells share about 4 at random.
        assert!(cell_of.len() >= 1_000, "{} distinct cells", cell_of.len());
        let mut per_set = vec![0u32; sets];
        for &h in &hashes {
            per_set[ExactStage::<u64, ()>::set_index(spread(h), sets)] += 1;
        }
        // About one key a set: at random the fullest holds 5 or 6.
        let fullest = per_set.iter().max().copied().unwrap_or(0);
        assert!(fullest <= 8, "a set holds {fullest} of the keys");
    }

    #[test]
    fn capacity_is_rounded_up_to_whole_sets_and_allocated_up_front() {
        let stage = ExactStage::<String, ()>::new(100);
        assert_eq!(stage.capacity(), 112);
        assert_eq!(stage.sets.len(), 7);
        let before = stage.memory_bytes();
        let (mut set, lanes) = stage.set(0);
        for way in 0..WAYS {
            let key = way.to_string();
            set.occupy(way, way as u64, key.as_str(), (), Hits::at_promotion(0, 0));
            lanes.hashes[way].store(way as u64, Ordering::Relaxed);
        }
        assert!(lanes.free_way(&set).is_none());
        drop(set);
        assert_eq!(stage.memory_bytes(), before);
    }
}

#[cfg(all(test, floodgate_loom))]
mod loom_models {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;
    use crate::sync::AtomicU32;

    /// A key is promoted, a request of it takes a unit out of its lease (counting nothing in
    /// the sketch), and the key leaves, its keeper counting that unit in the sketch before the
    /// cell is unflagged; meanwhile another request of the key reads its cell, its count in
    /// the sketch, and its cell again. Whatever the interleaving, a request that the second
    /// load lets the sketch decide alone read a count that holds every unit taken before it
    /// read it. With the cell's count of promoted keys alone (no count of departures), loom
    /// finds a request decided on a count of 0 after the unit was taken.
    #[test]
    fn a_request_decided_by_the_sketch_alone_read_every_unit_its_key_took_out_of_a_lease() {
        loom::model(|| {
            const KEY: u64 = 0x1234_5678_9ABC_DEF0;
            let stage = Arc::new(ExactStage::<u64, ()>::new(16));
            // The key's count in the sketch, and the units its lease gave.
            let sketch = Arc::new(AtomicU32::new(0));
            let taken = Arc::new(AtomicU32::new(0));
            let (st, sk, tk) = (Arc::clone(&stage), Arc::clone(&sketch), Arc::clone(&taken));
            let key = thread::spawn(move || {
                st.flag(KEY);
                tk.fetch_add(1, Ordering::SeqCst);
                sk.fetch_add(tk.load(Ordering::SeqCst), Ordering::SeqCst);
                st.unflag(KEY);
            });
            let line = stage.lines.key_line(spread(KEY));
            let before = cell_before(line);
            let count = sketch.load(Ordering::SeqCst);
            let taken_by_then = taken.load(Ordering::SeqCst);
            if !before.flagged_since() {
                assert!(
                    taken_by_then == 0 || count == 1,
                    "decided alone on a count of {count}, after {taken_by_then} taken"
                );
            }
            key.join().unwrap();
        });
    }

    /// The same departure with the rate mark (`quiet.rs`): the units the key took out of its
    /// lease in the window before take its count there to the limiter's mark, and its keeper
    /// marks the key's line as it counts them, before the cell is unflagged; a request of the
    /// next window reads its cell, the line's mark, and its cell again. Whatever the
    /// interleaving, a request decided alone on its current window alone (its line showing no
    /// mark of the window before) was decided before any unit was taken. With the mark raised
    /// after the unflag, loom finds one decided so after the unit was taken.
    #[test]
    fn a_request_judged_on_its_current_window_alone_read_the_mark_of_units_taken_before() {
        loom::model(|| {
            const KEY: u64 = 0x1234_5678_9ABC_DEF0;
            // The window the lease was of; the request is of the next.
            const BEFORE: u64 = 7;
            let stage = Arc::new(ExactStage::<u64, ()>::new(16));
            let taken = Arc::new(AtomicU32::new(0));
            let (st, tk) = (Arc::clone(&stage), Arc::clone(&taken));
            let key = thread::spawn(move || {
                st.flag(KEY);
                tk.fetch_add(1, Ordering::SeqCst);
                // Counted in the window before, where the count reached the mark.
                st.lines.key_line(spread(KEY)).mark_rate(BEFORE);
                st.unflag(KEY);
            });
            let line = stage.lines.key_line(spread(KEY));
            // Either side may come first.
            thread::yield_now();
            let before = cell_before(line);
            let quiet = line.rate_mark() < BEFORE + 1;
            let taken_by_then = taken.load(Ordering::SeqCst);
            if !before.flagged() && !before.flagged_since() && quiet {
                assert_eq!(
                    taken_by_then, 0,
                    "judged on its current window alone after a unit of the window before"
                );
            }
            key.join().unwrap();
        });
    }
}
