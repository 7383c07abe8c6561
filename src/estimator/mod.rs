//! Lock-free count-min sketches: [`Estimator`], pingora's of `isize` counters (over a
//! `CountMin` table, `count_min.rs`), and the blocked table of `u32` counters the `Limiter`
//! counts in (`blocked.rs`; the tests reach it as `BlockedEstimator`, feature
//! `fault-injection`). The sections below are the `Estimator`'s; `blocked.rs` gives its own
//! layout.
//!
//! # Algorithm
//!
//! H rows of N counters each (Cormode & Muthukrishnan, "An improved data stream summary: the
//! count-min sketch and its applications", 2005). A key maps to one column in every row; an
//! increment adds to those H counters, and the estimate is the minimum of them. With only
//! non-negative updates, each of the H counters holds the key's true count plus whatever
//! other keys that share its column added, so:
//!
//! - the estimate is never below the true count, and
//! - with width N ≥ ⌈e/ε⌉ and depth H ≥ ⌈ln(1/δ)⌉, the estimate exceeds the true count by more
//!   than ε·(total of all counts) with probability at most δ.
//!
//! [`Estimator::with_error`] sizes a sketch from (ε, δ) that way.
//!
//! # Implementation
//!
//! - All H×N counters live in one contiguous allocation, row after row.
//! - N is rounded up to a power of two so a column is taken with a mask, not a division.
//! - A key is hashed once per operation with [`ahash`], keyed with random per-instance seeds
//!   (so an attacker cannot precompute keys that collide with a victim's). The H column
//!   indexes are consecutive log2(N)-bit slices of that one 64-bit hash; when H·log2(N)
//!   exceeds 64 bits the hash is re-mixed (SplitMix64's finaliser) for the next rows. Two keys
//!   therefore share all H columns with probability N^-H (2^-52 for 4 × 8192) as long as
//!   H·log2(N) ≤ 64.
//! - Counters saturate at `isize::MAX / 2` instead of wrapping, and stay saturated; every
//!   counter access is `SeqCst`, which is free on x86-64 and makes `incr`'s estimate count
//!   every increment that finished before it (see the `counter` module).

use std::hash::Hash;

use crate::error::ConfigError;

mod blocked;
mod count_min;
mod key_hash;

pub(crate) use blocked::{checked_shape, Blocked, CEILING};
pub(crate) use count_min::{checked_size, dimensions_for_error, CountMin};
pub(crate) use key_hash::{remix, KeyHasher};

/// The limiter's blocked table with a hasher of its own, for the crate's accuracy figures
/// (`tools/compare_report` draws its over-estimates next to [`Estimator`]'s): not a
/// stable API.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub struct BlockedEstimator {
    counts: Blocked,
    hasher: KeyHasher,
}

#[cfg(feature = "fault-injection")]
impl BlockedEstimator {
    /// A blocked table of `rows` × at least `columns` counters per row.
    ///
    /// # Errors
    ///
    /// As the limiter's sketches: [`ConfigError::TooManyRows`] past 16 rows, and the errors
    /// of [`Estimator::try_new`].
    pub fn try_new(rows: usize, columns: usize) -> Result<Self, ConfigError> {
        Ok(BlockedEstimator {
            counts: Blocked::try_new(rows, columns, false)?,
            hasher: KeyHasher::new(),
        })
    }

    /// Adds `value` to `key`'s count and returns its estimate.
    pub fn incr<T: Hash>(&self, key: T, value: u32) -> isize {
        self.counts.incr(self.hasher.hash(&key), value)
    }

    /// `key`'s estimate.
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.counts.get(self.hasher.hash(&key))
    }

    /// Counters per row, over all blocks.
    pub fn columns(&self) -> usize {
        self.counts.columns()
    }

    /// Bytes it occupies.
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<KeyHasher>() + self.counts.memory_bytes()
    }
}

#[cfg(feature = "fault-injection")]
impl std::fmt::Debug for BlockedEstimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockedEstimator")
            .field("columns", &self.columns())
            .finish_non_exhaustive()
    }
}

/// A table of counts in either layout: flat rows of `isize` (the public sketches, whose
/// count-min bound assumes independent rows) or a key's rows in one cache line (the
/// limiter's). A `Rate`'s window slots are one or the other, as its builder says.
pub(crate) enum Table {
    Flat(CountMin),
    Blocked(Blocked),
}

impl Table {
    /// Adds `value` (a negative one gives back, in the blocked layout) and returns the key's
    /// estimate, this update included.
    // `always`: the blocked arm is a few instructions, which the request path would otherwise
    // reach through a call because the flat arm is large.
    #[inline(always)]
    pub(crate) fn incr(&self, hash: u64, value: isize) -> isize {
        match self {
            Table::Flat(t) => t.incr(hash, value),
            Table::Blocked(t) if value >= 0 => t.incr(hash, narrow(value)),
            Table::Blocked(t) => {
                t.decr(hash, narrow(value.saturating_neg()));
                t.get(hash)
            }
        }
    }

    #[inline(always)] // as `incr`
    pub(crate) fn get(&self, hash: u64) -> isize {
        match self {
            Table::Flat(t) => t.get(hash),
            Table::Blocked(t) => t.get(hash),
        }
    }

    /// Where the key's counters are, for [`incr_in`](Self::incr_in) and
    /// [`get_in`](Self::get_in) on this table and any other of its shape (a `Rate`'s slots):
    /// the block of a blocked table, worked out once for a request that reads two of them.
    #[inline(always)]
    pub(crate) fn block_of(&self, hash: u64) -> usize {
        match self {
            Table::Flat(_) => 0,
            Table::Blocked(t) => t.block_index(hash),
        }
    }

    /// [`incr`](Self::incr) for a key whose counters are at `block` ([`block_of`](Self::block_of)
    /// on a table of this shape).
    #[inline(always)] // as `incr`
    pub(crate) fn incr_in(&self, block: usize, hash: u64, value: isize) -> isize {
        match self {
            Table::Flat(t) => t.incr(hash, value),
            Table::Blocked(t) if value >= 0 => t.incr_in(block, hash, narrow(value)),
            Table::Blocked(t) => {
                t.decr(hash, narrow(value.saturating_neg()));
                t.get(hash)
            }
        }
    }

    /// [`get`](Self::get) for a key whose counters are at `block`, as for
    /// [`incr_in`](Self::incr_in).
    #[inline(always)] // as `incr`
    pub(crate) fn get_in(&self, block: usize, hash: u64) -> isize {
        match self {
            Table::Flat(t) => t.get(hash),
            Table::Blocked(t) => t.get_in(block, hash),
        }
    }

    /// Zeroes the table (a blocked one: the blocks written since the last reset).
    pub(crate) fn reset(&self) {
        match self {
            Table::Flat(t) => t.reset(),
            Table::Blocked(t) => t.reset(),
        }
    }

    pub(crate) fn mean_count(&self) -> f64 {
        match self {
            Table::Flat(t) => t.mean_count(),
            Table::Blocked(t) => t.mean_count(),
        }
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            Table::Flat(t) => t.memory_bytes(),
            Table::Blocked(t) => t.memory_bytes(),
        }
    }
}

/// A non-negative count as a blocked counter's delta: anything past `u32::MAX` saturates the
/// counter all the same.
#[inline]
fn narrow(value: isize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// An atomic H×N count-min sketch: approximate per-key counts in fixed memory, without locks.
///
/// The estimate of a key is never below its true count (for non-negative updates); it may be
/// above it when other keys share its columns. See the [module docs](self) for the bound.
///
/// # Examples
///
/// ```
/// use floodgate::Estimator;
///
/// let sketch = Estimator::new(4, 1024);
/// assert_eq!(sketch.incr("origin-a", 3), 3);
/// assert_eq!(sketch.incr("origin-a", 2), 5);
/// sketch.decr("origin-a", 1);
/// assert_eq!(sketch.get("origin-a"), 4);
/// assert_eq!(sketch.get("never-seen"), 0);
/// ```
pub struct Estimator {
    counts: CountMin,
    hasher: KeyHasher,
}

impl Estimator {
    /// The largest number of counters (rows × columns after rounding) one sketch may have:
    /// 2^28, or 2 GiB of counters on a 64-bit target — already enough for ε below 10^-7.
    pub const MAX_COUNTERS: usize = count_min::MAX_COUNTERS;

    /// Creates a sketch with `hashes` rows and `slots` columns (rounded up to a power of two).
    ///
    /// The same signature and parameter names as `pingora_limits::estimator::Estimator::new`;
    /// [`Estimator::try_new`] is the same constructor without the panic, with floodgate's
    /// names (`rows`, `columns`).
    ///
    /// # Panics
    ///
    /// Panics with the [`ConfigError`] message when [`Estimator::try_new`] would return an error:
    /// zero `hashes` (rows) or `slots` (columns), or more than [`Estimator::MAX_COUNTERS`]
    /// counters. The message names the arguments as given.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(3, 1000);
    /// assert_eq!((sketch.rows(), sketch.columns()), (3, 1024));
    /// ```
    pub fn new(hashes: usize, slots: usize) -> Self {
        match Self::try_new(hashes, slots) {
            Ok(sketch) => sketch,
            Err(e) => panic!(
                "floodgate::Estimator::new(hashes = {hashes}, slots = {slots}): {e} \
                 (hashes are rows, slots are columns; Estimator::try_new returns this error \
                 instead of panicking)"
            ),
        }
    }

    /// Creates a sketch with `rows` rows and `columns` columns (rounded up to a power of two),
    /// or says why it cannot.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRows`], [`ConfigError::ZeroColumns`], [`ConfigError::TooLarge`] when
    /// the sketch would exceed [`Estimator::MAX_COUNTERS`], and
    /// [`ConfigError::AllocationFailed`] when the allocator refuses the memory.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{ConfigError, Estimator};
    ///
    /// assert!(Estimator::try_new(4, 8192).is_ok());
    /// assert_eq!(Estimator::try_new(4, 0).unwrap_err(), ConfigError::ZeroColumns);
    /// assert!(matches!(Estimator::try_new(1 << 20, 1 << 20), Err(ConfigError::TooLarge { .. })));
    /// ```
    pub fn try_new(rows: usize, columns: usize) -> Result<Self, ConfigError> {
        Ok(Estimator {
            counts: CountMin::try_new(rows, columns)?,
            hasher: KeyHasher::new(),
        })
    }

    /// Creates a sketch sized for an error of at most ε·(total count) with probability at
    /// least 1 − δ: width ⌈e/ε⌉ (rounded up to a power of two) and depth ⌈ln(1/δ)⌉.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Epsilon`] or [`ConfigError::Delta`] when either is not strictly between
    /// 0 and 1; [`ConfigError::TooPrecise`], with the rows and columns they need, when that
    /// sketch would exceed [`Estimator::MAX_COUNTERS`]; [`ConfigError::AllocationFailed`] when
    /// the allocator refuses the memory.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::with_error(0.001, 0.01).unwrap();
    /// // ⌈e / 0.001⌉ = 2719 → 4096 columns; ⌈ln 100⌉ = 5 rows.
    /// assert_eq!((sketch.rows(), sketch.columns()), (5, 4096));
    /// assert!(sketch.epsilon() <= 0.001 && sketch.delta() <= 0.01);
    /// assert!(floodgate::Estimator::with_error(0.0, 0.01).is_err());
    ///
    /// // ε = 10^-12 needs ⌈e · 10^12⌉ columns: the error says so, and what is allowed.
    /// let err = floodgate::Estimator::with_error(1e-12, 0.01).unwrap_err();
    /// assert!(err.to_string().contains("2718281828460 columns"));
    /// assert!(err.to_string().contains("limit of 268435456 counters"));
    /// ```
    pub fn with_error(epsilon: f64, delta: f64) -> Result<Self, ConfigError> {
        let (rows, columns) = dimensions_for_error(epsilon, delta)?;
        Self::try_new(rows, columns)
    }

    /// Adds `value` to `key`'s count and returns the key's new estimate.
    ///
    /// Never panics; counts saturate at `isize::MAX / 2` instead of wrapping. Without
    /// concurrent increments of the same counters, the estimate is the min over rows. Under
    /// them it is one row's count read after this increment's own adds, so that of m
    /// concurrent increments of a key, the j-th to read sees at least j (two concurrent
    /// increments never both read 1); successive estimates on one thread may then come from
    /// different rows and need not grow.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// assert_eq!(sketch.incr("k", 2), 2);
    /// assert_eq!(sketch.incr("k", 1), 3);
    /// assert_eq!(sketch.get("k"), 3);
    /// ```
    #[inline]
    pub fn incr<T: Hash>(&self, key: T, value: isize) -> isize {
        self.counts.incr(self.hash(&key), value)
    }

    /// Subtracts `value` from `key`'s count.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// sketch.incr("k", 5);
    /// sketch.decr("k", 2);
    /// assert_eq!(sketch.get("k"), 3);
    /// ```
    #[inline]
    pub fn decr<T: Hash>(&self, key: T, value: isize) {
        self.counts.decr(self.hash(&key), value)
    }

    /// Returns `key`'s estimate: never below its true count (for non-negative updates).
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// assert_eq!(sketch.get("k"), 0);
    /// sketch.incr("k", 3);
    /// assert_eq!(sketch.get("k"), 3);
    /// ```
    #[inline]
    pub fn get<T: Hash>(&self, key: T) -> isize {
        self.counts.get(self.hash(&key))
    }

    /// Sets every counter to zero.
    ///
    /// Not atomic as a whole: an update racing with `reset` may survive it or not.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// sketch.incr("k", 3);
    /// sketch.reset();
    /// assert_eq!(sketch.get("k"), 0);
    /// ```
    pub fn reset(&self) {
        self.counts.reset();
    }

    /// Number of rows (hash functions), H.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// assert_eq!(sketch.rows(), 4);
    /// ```
    pub fn rows(&self) -> usize {
        self.counts.rows()
    }

    /// Number of columns per row, N (a power of two).
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1000);
    /// assert_eq!(sketch.columns(), 1024);
    /// ```
    pub fn columns(&self) -> usize {
        self.counts.columns()
    }

    /// The ε of the count-min bound for this size: e / N. An estimate exceeds the true count
    /// by more than ε·(total count) with probability at most [`delta`](Self::delta).
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// assert_eq!(sketch.epsilon(), std::f64::consts::E / 1024.0);
    /// ```
    pub fn epsilon(&self) -> f64 {
        std::f64::consts::E / self.columns() as f64
    }

    /// The δ of the count-min bound for this size: e^−H.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(4, 1024);
    /// assert_eq!(sketch.delta(), (-4.0f64).exp());
    /// ```
    pub fn delta(&self) -> f64 {
        (-(self.rows() as f64)).exp()
    }

    /// Heap and inline bytes this sketch occupies. Fixed at construction: it does not grow
    /// with the number of distinct keys.
    ///
    /// # Examples
    ///
    /// ```
    /// let sketch = floodgate::Estimator::new(3, 1024);
    /// assert!(sketch.memory_bytes() >= 3 * 1024 * std::mem::size_of::<isize>());
    /// ```
    pub fn memory_bytes(&self) -> usize {
        std::mem::size_of::<KeyHasher>() + self.counts.memory_bytes()
    }

    /// The key's hash, the one every table of this sketch is indexed by.
    #[inline]
    pub(crate) fn hash<T: Hash + ?Sized>(&self, key: &T) -> u64 {
        self.hasher.hash(key)
    }

    /// The counters, for callers that hashed the key once already.
    #[inline]
    pub(crate) fn counts(&self) -> &CountMin {
        &self.counts
    }
}

impl std::fmt::Debug for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimator")
            .field("rows", &self.rows())
            .field("columns", &self.columns())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod proptests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    const KEYS: u64 = 10;

    #[derive(Debug, Clone)]
    enum Op {
        Incr(u64, isize),
        /// Decrement by `pick % (true count + 1)`: never below what was incremented.
        Decr(u64, u32),
        Reset,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..KEYS, 0isize..=20).prop_map(|(k, v)| Op::Incr(k, v)),
            4 => (0..KEYS, any::<u32>()).prop_map(|(k, p)| Op::Decr(k, p)),
            1 => Just(Op::Reset),
        ]
    }

    fn counter_indexes(sketch: &Estimator, key: u64) -> Vec<usize> {
        sketch.counts.counter_indexes(sketch.hash(&key))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// A counter that no other live key (non-zero count) maps to holds exactly the key's
        /// count, and every other counter of the key holds at least that much (counts are
        /// non-negative), so the minimum is exact. Keys without such a row read at least
        /// their count.
        #[test]
        fn estimate_equals_true_count_when_a_row_has_no_collision(
            rows in 1usize..=4,
            columns in 1usize..=32,
            ops in prop::collection::vec(op(), 1..60),
        ) {
            let sketch = Estimator::new(rows, columns);
            let indexes: Vec<Vec<usize>> =
                (0..KEYS).map(|k| counter_indexes(&sketch, k)).collect();
            let mut model: HashMap<u64, isize> = HashMap::new();
            for op in ops {
                match op {
                    Op::Incr(key, value) => {
                        *model.entry(key).or_insert(0) += value;
                        sketch.incr(key, value);
                    }
                    Op::Decr(key, pick) => {
                        let truth = model.entry(key).or_insert(0);
                        let value = pick as isize % (*truth + 1);
                        *truth -= value;
                        sketch.decr(key, value);
                    }
                    Op::Reset => {
                        sketch.reset();
                        model.clear();
                    }
                }
                let count = |k: u64| model.get(&k).copied().unwrap_or(0);
                for key in 0..KEYS {
                    let own = &indexes[key as usize];
                    let collision_free_row = (0..rows).any(|row| {
                        (0..KEYS).all(|other| {
                            other == key
                                || count(other) == 0
                                || indexes[other as usize][row] != own[row]
                        })
                    });
                    let estimate = sketch.get(key);
                    if collision_free_row {
                        prop_assert_eq!(
                            estimate,
                            count(key),
                            "{}x{}: key {} has a collision-free row {:?}",
                            rows,
                            columns,
                            key,
                            own
                        );
                    } else {
                        prop_assert!(estimate >= count(key));
                    }
                }
            }
        }
    }
}
