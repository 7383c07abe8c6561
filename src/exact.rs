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
//! - A counting filter of promoted hashes, read lock-free by every request: a zero means the
//!   key is certainly not promoted and the request is decided by the sketch alone. A non-zero
//!   cell (the key, or another promoted key in the same cell) sends it here.
//! - Entries in a fixed number of shards, each a `HashMap` keyed by the key's 64-bit hash,
//!   locked only by requests for promoted keys (or keys about to be). Each shard holds at most
//!   its share of the configured capacity, allocated up front; when a shard is full and no
//!   entry in it has cooled down, the key is decided by the sketch alone, which can only
//!   reject more, never admit more.
//!
//! # The promotion handshake
//!
//! A request increments the sketch and then loads the filter; a promotion increments the
//! filter and then reads the sketch for `p`. All four are `SeqCst` (the sketch counters always
//! are, see the `counter` module), so in their total order one of the two sides comes second:
//! either the request sees the key as promoted and is counted here, or `p` includes it.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::sync::{lock, AtomicU32, Mutex, MutexGuard, Ordering};

/// Shards of the exact stage: enough that two cores rarely wait for each other.
const SHARDS: usize = 16;
/// Filter cells per unit of capacity: with every entry in use, about 1 in 8 requests for an
/// unpromoted key that is already near its threshold takes the lock needlessly.
const FILTER_CELLS_PER_ENTRY: usize = 8;

/// The exact counts of one promoted key.
#[derive(Debug)]
pub(crate) struct Entry<K> {
    pub(crate) key: K,
    /// Distinguishes this promotion from earlier ones of the same key, so a permit counted by
    /// an earlier, demoted entry is not subtracted from this one.
    pub(crate) generation: u64,
    pub(crate) inflight: InflightCount,
    pub(crate) rate: RateCount,
    /// Requests rejected while promoted.
    pub(crate) rejected: u64,
}

/// In-flight requests of a promoted key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InflightCount {
    /// An upper bound on the key's requests in flight that are not counted in `tracked`
    /// (those admitted before the promotion).
    pub(crate) base: isize,
    /// Requests admitted here and not yet released.
    pub(crate) tracked: isize,
}

impl InflightCount {
    /// An upper bound on the key's requests in flight.
    pub(crate) fn bound(&self) -> isize {
        self.base.saturating_add(self.tracked)
    }

    /// Lowers `base` with a fresh sketch estimate `estimate` of all in flight (≥ the true
    /// number): the untracked ones are at most `estimate − tracked`.
    pub(crate) fn rebase(&mut self, estimate: isize) {
        self.base = self.base.min(estimate.saturating_sub(self.tracked)).max(0);
    }
}

/// Admitted requests per window of a promoted key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateCount {
    /// The window in which the key was promoted; later windows are counted exactly.
    pub(crate) since: u64,
    /// An upper bound on the requests admitted in `since` before the promotion.
    pub(crate) base: isize,
    /// The latest window counted, and its count.
    pub(crate) bucket: u64,
    pub(crate) current: isize,
    /// The count of the window before `bucket`.
    pub(crate) previous: isize,
}

impl RateCount {
    pub(crate) fn new(since: u64, base: isize) -> Self {
        RateCount {
            since,
            base: base.max(0),
            bucket: since,
            current: 0,
            previous: 0,
        }
    }

    /// Moves the counts forward to `bucket` (a request from an older bucket counts in the
    /// latest, which only over-counts it).
    pub(crate) fn roll_to(&mut self, bucket: u64) {
        if bucket > self.bucket {
            self.previous = if bucket == self.bucket + 1 {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.bucket = bucket;
        }
    }

    /// An upper bound on the requests admitted in window `bucket` (after `roll_to(bucket)`
    /// or `roll_to(bucket + 1)`), or `None` if the window began before the promotion was
    /// known (only the sketch can bound it).
    pub(crate) fn bound(&self, bucket: u64) -> Option<isize> {
        let counted = if bucket == self.bucket {
            self.current
        } else if bucket + 1 == self.bucket {
            self.previous
        } else if bucket > self.bucket {
            0
        } else {
            return None;
        };
        if bucket > self.since {
            Some(counted)
        } else if bucket == self.since {
            Some(self.base.saturating_add(counted))
        } else {
            None
        }
    }
}

/// One shard: its entries, keyed by the key's hash.
pub(crate) struct Shard<K> {
    pub(crate) entries: HashMap<u64, Entry<K>, BuildHasherDefault<PreHashed>>,
    capacity: usize,
    next_generation: u64,
}

impl<K> Shard<K> {
    pub(crate) fn is_full(&self) -> bool {
        self.entries.len() >= self.capacity
    }

    /// Inserts an entry for `hash` (the caller checked it is absent and the shard not full).
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        key: K,
        inflight: InflightCount,
        rate: RateCount,
    ) -> &mut Entry<K> {
        self.next_generation += 1;
        let entry = Entry {
            key,
            generation: self.next_generation,
            inflight,
            rate,
            rejected: 0,
        };
        self.entries.entry(hash).or_insert(entry)
    }
}

/// The filter and the shards.
pub(crate) struct ExactStage<K> {
    /// Per cell, how many promoted keys hash to it. See the module docs for the handshake.
    filter: Box<[AtomicU32]>,
    shards: Box<[Mutex<Shard<K>>]>,
}

impl<K> ExactStage<K> {
    /// A stage for at most about `capacity` promoted keys (rounded up to a multiple of the
    /// shard count), all allocated now.
    pub(crate) fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        let cells = (per_shard * SHARDS * FILTER_CELLS_PER_ENTRY).next_power_of_two();
        ExactStage {
            filter: (0..cells).map(|_| AtomicU32::new(0)).collect(),
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        entries: HashMap::with_capacity_and_hasher(per_shard, Default::default()),
                        capacity: per_shard,
                        next_generation: 0,
                    })
                })
                .collect(),
        }
    }

    /// The most keys the stage holds at once.
    pub(crate) fn capacity(&self) -> usize {
        self.shards.len() * lock(&self.shards[0]).capacity
    }

    fn cell(&self, hash: u64) -> &AtomicU32 {
        // High bits: the sketches use the low ones for columns.
        let index = (hash >> 40) as usize & (self.filter.len() - 1);
        &self.filter[index]
    }

    /// Whether the key may be promoted (false: certainly not). The request's half of the
    /// handshake, after its sketch increment.
    #[inline]
    pub(crate) fn flagged(&self, hash: u64) -> bool {
        self.cell(hash).load(Ordering::SeqCst) != 0
    }

    /// Marks the key promoted. The promotion's half of the handshake: read the sketch after.
    pub(crate) fn flag(&self, hash: u64) {
        self.cell(hash).fetch_add(1, Ordering::SeqCst);
        crate::sync::seqcst_fence_for_loom();
    }

    /// Undoes one [`flag`](Self::flag) (the entry was removed). `Relaxed`: a reader that
    /// still sees the old count only takes the lock needlessly.
    pub(crate) fn unflag(&self, hash: u64) {
        let _ = self
            .cell(hash)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    /// Locks the shard of `hash`.
    pub(crate) fn shard(&self, hash: u64) -> MutexGuard<'_, Shard<K>> {
        lock(&self.shards[(hash >> 60) as usize % self.shards.len()])
    }

    /// Locks every shard in turn, for reports.
    pub(crate) fn for_each_shard(&self, mut f: impl FnMut(&mut Shard<K>)) {
        for shard in self.shards.iter() {
            f(&mut lock(shard));
        }
    }

    /// Bytes allocated up front for the filter and the entries (not counting heap data that
    /// the keys themselves own).
    pub(crate) fn memory_bytes(&self) -> usize {
        let mut tables = 0;
        self.for_each_shard(|shard| tables += table_bytes::<K>(shard.entries.capacity()));
        std::mem::size_of_val(&*self.filter)
            + self.shards.len() * std::mem::size_of::<Mutex<Shard<K>>>()
            + tables
    }
}

/// The bytes of a std `HashMap<u64, Entry<K>>` table that holds `capacity` entries: a power
/// of two of buckets at most 7/8 full, each an entry and a control byte, plus one group of
/// control bytes (16) at the end.
fn table_bytes<K>(capacity: usize) -> usize {
    if capacity == 0 {
        return 0;
    }
    let buckets = if capacity < 8 {
        (capacity + 1).next_power_of_two()
    } else {
        (capacity * 8 / 7).next_power_of_two()
    };
    buckets * (std::mem::size_of::<(u64, Entry<K>)>() + 1) + 16
}

/// A `Hasher` for keys that are already uniformly distributed 64-bit hashes.
#[derive(Default)]
pub(crate) struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (the map's key is a `u64`); fold anything else.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn rate_bound_is_exact_after_the_promotion_window_and_base_plus_count_in_it() {
        let mut r = RateCount::new(5, 7);
        assert_eq!(
            r.bound(4),
            None,
            "windows before the promotion are not bounded"
        );
        r.current += 2;
        assert_eq!(r.bound(5), Some(9));
        r.roll_to(6);
        r.current += 1;
        assert_eq!(r.bound(5), Some(9));
        assert_eq!(r.bound(6), Some(1));
        r.roll_to(8);
        assert_eq!(
            r.bound(7),
            Some(0),
            "a window with no request counted is exactly 0"
        );
        assert_eq!(r.bound(8), Some(0));
    }

    #[test]
    fn rebase_never_raises_the_bound_and_never_goes_below_what_is_tracked() {
        let mut c = InflightCount {
            base: 10,
            tracked: 3,
        };
        c.rebase(20);
        assert_eq!(c.bound(), 13);
        c.rebase(5);
        assert_eq!((c.base, c.bound()), (2, 5));
        c.rebase(0);
        assert_eq!((c.base, c.bound()), (0, 3));
    }

    #[test]
    fn capacity_is_fixed_and_allocated_up_front() {
        let stage = ExactStage::<String>::new(100);
        assert_eq!(stage.capacity(), 112);
        let before = stage.memory_bytes();
        let mut shard = stage.shard(0);
        for i in 0..shard.capacity as u64 {
            shard.insert(
                i,
                i.to_string(),
                InflightCount {
                    base: 0,
                    tracked: 0,
                },
                RateCount::new(0, 0),
            );
        }
        assert!(shard.is_full());
        drop(shard);
        assert_eq!(stage.memory_bytes(), before);
    }
}
