//! The one keyed hash a key is turned into before any table is touched.

use std::hash::{BuildHasher, Hash, Hasher};

/// Hashes keys with [`ahash`] under random keys of its own (property 4 of
/// docs/architecture.md: an attacker cannot precompute keys that collide with a victim's),
/// except under loom, whose models need every iteration to touch the same atomics.
///
/// Each structure that counts keys owns exactly one: an `Estimator`, a `Rate` (for all its
/// window slots), a `Limiter` (for its in-flight table, its `Rate`, its exact stage and its
/// over-limit cache, which all take the same hash).
#[derive(Clone)]
pub(crate) struct KeyHasher(ahash::RandomState);

impl KeyHasher {
    pub(crate) fn new() -> Self {
        #[cfg(floodgate_loom)]
        return KeyHasher(ahash::RandomState::with_seeds(1, 2, 3, 4));
        #[cfg(not(floodgate_loom))]
        KeyHasher(ahash::RandomState::new())
    }

    /// A hasher under fixed keys from `seed`: for tests that run two limiters on the same
    /// traffic and need the same collisions in both.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn with_seed(seed: u64) -> Self {
        KeyHasher(ahash::RandomState::with_seeds(
            seed,
            !seed,
            seed ^ 1,
            seed ^ 2,
        ))
    }

    /// The keyed 64-bit hash of `key`, through `Hash::hash` on a fresh hasher.
    ///
    /// Not `RandomState::hash_one`: on a nightly compiler ahash specialises `hash_one` by
    /// type, so `hash_one(&5u64)` and `hash_one(&&5u64)` would differ, and `get(&key)` would
    /// read other counters than `incr(key)` counted in. `Hash` for a reference hashes what it
    /// points to, so this path gives one hash per key value however many references it is
    /// passed through.
    #[inline]
    #[allow(clippy::manual_hash_one)] // deliberately not `hash_one`: see above
    pub(crate) fn hash<T: Hash + ?Sized>(&self, key: &T) -> u64 {
        let mut state = self.0.build_hasher();
        key.hash(&mut state);
        state.finish()
    }
}

/// A fresh 64-bit word derived from `hash` and a `row` (or any other seed), independent of
/// the bits a table's rows take from `hash` itself: for rows beyond what the first hash's bits
/// cover, and for the word a rate limit mixes into the over-limit cache's tags (SplitMix64
/// finaliser).
#[inline]
pub(crate) fn remix(hash: u64, row: u64) -> u64 {
    let mut z = hash ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
