//! One set of the exact stage: [`WAYS`] places for promoted keys, and the door where keys that
//! found the set full show how often they come.

use std::borrow::Borrow;

use super::lane::{Lane, GENERATION_MASK};
use super::tenant::Tenant;
use crate::limiter::key_lines::spread;
use crate::rate::Rolling;

/// Places per set: the most entries a request ever looks at, and the unit the stage's
/// capacity is rounded up to.
pub(crate) const WAYS: usize = 16;
/// Keys a set's door counts at once. The door is a Misra–Gries summary: a key that knocks
/// more than 1/(DOOR + 1) of all knocks at the set in an epoch is sure to be counted, and a
/// count is never above the key's true knocks, so a stream of one-shot keys can never look
/// like a key that keeps coming.
const DOOR: usize = 4;

/// One promoted key in its place: what the stage keeps of it (its key, hash, generation and
/// evidence), and `state`, what the limiter keeps for it.
#[derive(Debug)]
pub(crate) struct Entry<K, V> {
    pub(crate) key: K,
    pub(crate) hash: u64,
    /// Distinguishes this promotion from earlier ones of the same key, so a permit counted by
    /// an earlier, demoted entry is not subtracted from this one (see `lane.rs`).
    pub(crate) generation: u32,
    /// Requests decided here, per epoch: the entry's evidence for keeping its place.
    pub(crate) hits: Hits,
    pub(crate) state: V,
}

impl<K, V> Entry<K, V> {
    /// What the entry has shown in the current epoch or the last: its requests, whichever
    /// epoch had more (with those its lane admitted without the lock since the clock's sweep
    /// took them), and the units it holds in flight.
    fn evidence(&self, epoch: u64, lane: &Lane) -> u64 {
        let in_flight = lane.units(self.generation);
        let requests = self.hits.most(epoch, lane.requests());
        u64::from(requests).saturating_add(u64::from(in_flight))
    }
}

/// Requests in the current epoch and the one before.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hits(Rolling<u32>);

impl Hits {
    /// The evidence a key brings in at its promotion: the `knocks` it showed at the door in
    /// `epoch`.
    pub(crate) fn at_promotion(epoch: u64, knocks: u32) -> Self {
        Hits(Rolling::starting(epoch, knocks))
    }

    /// Counts one request in `epoch`.
    pub(crate) fn count(&mut self, epoch: u64) {
        self.count_many(epoch, 1);
    }

    /// Counts `n` requests in `epoch`: in the epoch before the latest counted if it is that
    /// one (the clock's sweep, taking the requests its lane admitted without the lock, may
    /// come after a request of the next epoch).
    pub(crate) fn count_many(&mut self, epoch: u64, n: u32) {
        self.0.roll_to(epoch);
        let counts = &mut self.0;
        if counts.at == epoch {
            counts.current = counts.current.saturating_add(n);
        } else if counts.at.checked_sub(1) == Some(epoch) {
            counts.previous = counts.previous.saturating_add(n);
        }
    }

    /// The more of the requests in `epoch` (with `uncounted` more of it, which its lane
    /// admitted without the lock and the clock's sweep has not taken yet) and in the one
    /// before.
    fn most(mut self, epoch: u64, uncounted: u32) -> u32 {
        self.0.roll_to(epoch);
        let current = self.0.current.saturating_add(uncounted);
        current.max(self.0.previous)
    }
}

/// A key at the door: its spread hash and how often it knocked in `epoch`.
#[derive(Debug, Clone, Copy, Default)]
struct Knock {
    spread: u64,
    epoch: u64,
    count: u32,
}

impl Knock {
    fn in_epoch(&self, epoch: u64) -> u32 {
        if self.epoch == epoch {
            self.count
        } else {
            0
        }
    }
}

/// How far a time on the limiter's clock read by one thread may trail one read by another
/// for the same instant: two ticks of the coarse clock. [`Set::lost`] adds it, so that an event
/// is never recorded as earlier than a window an admission it undoes was counted in.
const LOST_MARGIN: u64 = 2 * crate::clock::TICK_NANOS;

/// Lost keys a set remembers one by one (see [`Set::lost`]). A set loses a key when one leaves
/// the stage, or one that is hot finds no place or a twin: at most a few in two windows but
/// under churn. 4 records cost a set 64 bytes (64 KiB for 1,024 sets).
const LOST_KEYS: usize = 4;

/// A key a set lost: its hash and the latest time it was lost, margin added (0: no key).
#[derive(Debug, Clone, Copy, Default)]
struct Lost {
    hash: u64,
    at: u64,
}

/// A place: its entry, and what is left of the last entry it held (for the reports, until
/// the next entry reuses its key's buffer).
#[derive(Debug)]
struct Way<K, V> {
    entry: Option<Entry<K, V>>,
    departed: Option<Departed<K>>,
}

/// A key that left the stage: what `heavy_hitters` still reports of it for a while.
#[derive(Debug)]
pub(crate) struct Departed<K> {
    pub(crate) key: K,
    pub(crate) hash: u64,
    /// Requests refused while the stage held the key ([`Tenant::refused`]).
    pub(crate) rejected: u64,
    /// When it left (nanoseconds on the limiter's clock).
    pub(crate) at: u64,
}

/// One set of the exact stage.
pub(crate) struct Set<K, V> {
    ways: Box<[Way<K, V>]>,
    door: [Knock; DOOR],
    /// The last generation given to an entry, from 1 to `GENERATION_MASK` and round again.
    next_generation: u32,
    /// The keys of this set lost most recently, each with the latest time (nanoseconds on the
    /// limiter's clock, plus the coarse time's lag) at which it left the stage or was
    /// admitted by the sketch alone while hot: before that, the key, promoted now, may have
    /// been admitted past its promotion threshold (see [`Set::lost`]).
    lost: [Lost; LOST_KEYS],
    /// The latest time of a loss `lost` no longer lists (0: none): any key not listed may
    /// have been lost then.
    forgotten_at: u64,
}

impl<K, V: Tenant> Set<K, V> {
    pub(crate) fn new() -> Self {
        Set {
            ways: (0..WAYS)
                .map(|_| Way {
                    entry: None,
                    departed: None,
                })
                .collect(),
            door: [Knock::default(); DOOR],
            next_generation: 0,
            lost: [Lost::default(); LOST_KEYS],
            forgotten_at: 0,
        }
    }

    /// Records that at time `at` the key of hash `hash` was admitted other than by the sketch
    /// below its threshold or by this stage: it left the stage (with what the stage admitted
    /// of it) or was admitted by the sketch alone while hot. Per key, because what the
    /// threshold proves of a key depends on that key's admissions alone: a set that recorded
    /// only that some key was lost denied the bound to every key promoted in it for two
    /// windows, and a fresh key sharing a heavy key's counters was refused on the heavy key's
    /// counts. A key already listed keeps its place; otherwise the oldest record makes room,
    /// its time kept in `forgotten_at`.
    pub(crate) fn lost(&mut self, hash: u64, at: u64) {
        let at = at.saturating_add(LOST_MARGIN);
        let place = self
            .lost
            .iter()
            .position(|l| l.at != 0 && l.hash == hash)
            .unwrap_or_else(|| (0..LOST_KEYS).min_by_key(|&i| self.lost[i].at).unwrap_or(0));
        let Some(record) = self.lost.get_mut(place) else {
            return;
        };
        if record.at != 0 && record.hash != hash {
            self.forgotten_at = self.forgotten_at.max(record.at);
            record.at = 0;
        }
        *record = Lost {
            hash,
            at: record.at.max(at),
        };
    }

    /// Whether the key of hash `hash` was not lost since `since`: admitted since then, if at
    /// all, only by the sketch below its promotion threshold (it is not in the stage now).
    pub(crate) fn kept_since(&self, hash: u64, since: u64) -> bool {
        // 0: never (`lost` adds a margin, so a recorded time is never 0).
        let forgotten = self.forgotten_at != 0 && self.forgotten_at >= since;
        let listed = self
            .lost
            .iter()
            .any(|l| l.at != 0 && l.hash == hash && l.at >= since);
        !forgotten && !listed
    }

    /// Bytes a set allocates for its ways.
    pub(crate) fn heap_bytes() -> usize {
        WAYS * std::mem::size_of::<Way<K, V>>()
    }

    pub(crate) fn get(&self, way: usize) -> Option<&Entry<K, V>> {
        self.ways.get(way)?.entry.as_ref()
    }

    pub(crate) fn get_mut(&mut self, way: usize) -> Option<&mut Entry<K, V>> {
        self.ways.get_mut(way)?.entry.as_mut()
    }

    /// The way of the entry with the least evidence in `epoch` (its ways' lanes in `lanes`)
    /// below `knocks`, among those whose state does not keep their place at `now`
    /// ([`Tenant::kept_until`]): the entry a key that knocked `knocks` times replaces, if any.
    ///
    /// What a lane counts (its units in flight, and the requests it decided since the sweep
    /// took them) is part of its entry's evidence: a way whose lane shows `knocks` or more is
    /// passed over without its entry being read (a line or more each, where a lane is one).
    /// Under the set's lock, a lane's units are its entry's.
    pub(crate) fn weakest_below(
        &self,
        knocks: u32,
        epoch: u64,
        now: u64,
        lanes: &[Lane; WAYS],
    ) -> Option<usize> {
        let knocks = u64::from(knocks);
        (0..WAYS)
            .filter(|&way| {
                let lane = &lanes[way];
                u64::from(lane.units_now()) + u64::from(lane.requests()) < knocks
            })
            .filter_map(|way| {
                let entry = self.get(way)?;
                let evidence = entry.evidence(epoch, &lanes[way]);
                let candidate = evidence < knocks && entry.state.kept_until() <= now;
                candidate.then_some((way, evidence))
            })
            .min_by_key(|&(_, evidence)| evidence)
            .map(|(way, _)| way)
    }

    /// Counts a knock of the key with spread hash `spread` in `epoch`, and returns its
    /// knocks in that epoch as the door counts them (at most its true knocks). A key the door
    /// does not count takes a free slot, or else every count drops by one (Misra–Gries) and
    /// the key counts 0.
    pub(crate) fn knock(&mut self, spread: u64, epoch: u64) -> u32 {
        let slot = match self
            .door
            .iter()
            .position(|k| k.count > 0 && k.epoch == epoch && k.spread == spread)
        {
            Some(known) => known,
            None => match self.door.iter().position(|k| k.in_epoch(epoch) == 0) {
                Some(free) => {
                    self.door[free] = Knock {
                        spread,
                        epoch,
                        count: 0,
                    };
                    free
                }
                None => {
                    self.door.iter_mut().for_each(|k| k.count -= 1);
                    return 0;
                }
            },
        };
        let knock = &mut self.door[slot];
        knock.count = knock.count.saturating_add(1);
        knock.count
    }

    /// Puts a new entry for `key` in the free way `way`, with the evidence `hits` it showed at
    /// the door (so the entry it replaced cannot take the place straight back), reusing the
    /// way's key buffer. Returns the entry's generation.
    pub(crate) fn occupy<Q>(&mut self, way: usize, hash: u64, key: &Q, state: V, hits: Hits) -> u32
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        self.next_generation = self.next_generation % GENERATION_MASK + 1;
        let generation = self.next_generation;
        let spread = spread(hash);
        // In now: its knocks are spent.
        self.door
            .iter_mut()
            .filter(|k| k.spread == spread)
            .for_each(|k| k.count = 0);
        let Some(place) = self.ways.get_mut(way) else {
            return generation;
        };
        let key = match place.departed.take() {
            Some(Departed {
                key: mut buffer, ..
            }) => {
                key.clone_into(&mut buffer);
                buffer
            }
            None => key.to_owned(),
        };
        place.entry = Some(Entry {
            key,
            hash,
            generation,
            hits,
            state,
        });
        generation
    }

    /// Removes the entry of `way` at time `at`, keeping its key (the buffer the next entry
    /// reuses) and its refusals for the reports; returns its hash.
    pub(crate) fn vacate(&mut self, way: usize, at: u64) -> Option<u64> {
        let place = self.ways.get_mut(way)?;
        let entry = place.entry.take()?;
        place.departed = Some(Departed {
            rejected: entry.state.refused(),
            key: entry.key,
            hash: entry.hash,
            at,
        });
        Some(entry.hash)
    }

    /// What is left of the keys that left this set's ways and whose buffers are not reused.
    pub(crate) fn departed(&self) -> impl Iterator<Item = &Departed<K>> {
        self.ways.iter().filter_map(|w| w.departed.as_ref())
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    /// A loss is the lost key's: another key of the set keeps what its threshold proves, the
    /// lost one does not until its loss is before the span asked about.
    #[test]
    fn a_loss_counts_against_the_lost_key_only() {
        let mut set = Set::<u64, ()>::new();
        set.lost(7, 1_000);
        assert!(set.kept_since(8, 0), "another key");
        assert!(!set.kept_since(7, 1_000), "the lost key");
        assert!(
            set.kept_since(7, 1_000 + LOST_MARGIN + 1),
            "a span after its loss"
        );
    }

    /// Past `LOST_KEYS` lost keys the set forgets the oldest record, and then cannot say which
    /// key it was: every key not listed counts as lost at that time, never as kept.
    #[test]
    fn a_forgotten_loss_counts_against_every_key_not_listed() {
        let mut set = Set::<u64, ()>::new();
        for (hash, at) in (0..LOST_KEYS as u64).map(|i| (100 + i, 1_000 + i)) {
            set.lost(hash, at);
        }
        assert!(set.kept_since(1, 0), "nothing forgotten yet");
        // The same key again keeps its record (the later time).
        set.lost(100, 5_000);
        assert!(set.kept_since(1, 0));
        assert!(!set.kept_since(100, 5_000));
        // A new key forgets the oldest: 101, lost at 1,001.
        set.lost(200, 6_000);
        assert!(!set.kept_since(101, 1_001), "forgotten, so not kept");
        assert!(
            !set.kept_since(1, 1_001),
            "any key may be the forgotten one"
        );
        assert!(
            set.kept_since(1, 1_001 + LOST_MARGIN + 1),
            "after the forgotten loss"
        );
        assert!(!set.kept_since(200, 6_000));
    }
}
