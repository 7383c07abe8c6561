//! A lock-free count-min sketch of `isize` counters.
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

use crate::counter;
use crate::error::ConfigError;
use crate::sync::{AtomicIsize, Ordering::Relaxed};

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
    /// `rows × columns` counters, row-major. Each counter is an independent saturating
    /// counter; see the `counter` module for its orderings.
    counters: Box<[AtomicIsize]>,
    rows: usize,
    /// log2(columns).
    column_bits: u32,
    hasher: ahash::RandomState,
}

impl Estimator {
    /// The largest number of counters (rows × columns after rounding) one sketch may have:
    /// 2^28, or 2 GiB of counters on a 64-bit target — already enough for ε below 10^-7.
    pub const MAX_COUNTERS: usize = 1 << 28;

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
        let (width, total) = checked_size(rows, columns, 1)?;
        let mut counters = Vec::new();
        counters
            .try_reserve_exact(total)
            .map_err(|_| ConfigError::AllocationFailed {
                bytes: total * std::mem::size_of::<AtomicIsize>(),
            })?;
        counters.extend((0..total).map(|_| AtomicIsize::new(0)));
        Ok(Estimator {
            counters: counters.into_boxed_slice(),
            rows,
            column_bits: width.trailing_zeros(),
            hasher: new_hasher(),
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
        self.incr_hashed(self.hash(&key), value)
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
        self.decr_hashed(self.hash(&key), value)
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
        self.get_hashed(self.hash(&key))
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
        // Relaxed: a `Rate` publishes a cleared slot with a Release store of its own.
        for c in self.counters.iter() {
            c.store(0, Relaxed);
        }
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
        self.rows
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
        1 << self.column_bits
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
        (-(self.rows as f64)).exp()
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
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.counters)
    }

    /// The one keyed hash of a key that every operation starts from.
    #[inline]
    /// The mean count of the first row's counters: every update adds to exactly one counter
    /// of each row, so this is the total count ÷ columns, the noise a key's estimate starts
    /// from. Reads every counter of one row: for reports, not the request path.
    pub(crate) fn mean_count(&self) -> f64 {
        let total: i128 = self.counters[..self.columns()]
            .iter()
            .map(|c| i128::from(c.load(Relaxed).max(0) as i64))
            .sum();
        total as f64 / self.columns() as f64
    }

    pub(crate) fn hash<T: Hash + ?Sized>(&self, key: &T) -> u64 {
        keyed_hash(&self.hasher, key)
    }

    /// `incr` for a key already hashed with [`Estimator::hash`].
    #[inline]
    pub(crate) fn incr_hashed(&self, hash: u64, value: isize) -> isize {
        let mut added = isize::MAX;
        let mut lowest = None;
        self.for_each_row(hash, |_, c| {
            let now = counter::add(c, value);
            if now < added {
                added = now;
                lowest = Some(c);
            }
        });
        // Not just the min of the values the adds returned: rows are updated one at a time, so
        // two concurrent increments of one key can each come first in a different row, and
        // each would see a count of 1 that way although both are counted. So read the row
        // that gave the min once more, after all our adds. Every counter access is `SeqCst`
        // (see `counter`): of m concurrent increments, the one whose read comes last in that
        // total order sees all m adds in whichever row it reads, and in general the j-th
        // reader sees at least j — the property a limiter's admission rests on. One row is
        // enough for that, and the row with the lowest count keeps the estimate tight (it is
        // the plain min when nothing runs concurrently). The max with what the adds returned
        // keeps the increment's own value if the counters were cleared in between (a `Rate`
        // slot reused under a reader that fell far behind).
        crate::sync::seqcst_fence_for_loom();
        lowest.map_or(added, |c| counter::load(c).max(added))
    }

    /// `decr` for a key already hashed with [`Estimator::hash`].
    #[inline]
    pub(crate) fn decr_hashed(&self, hash: u64, value: isize) {
        self.for_each_counter(hash, |c| counter::sub(c, value));
    }

    /// `get` for a key already hashed with [`Estimator::hash`].
    #[inline]
    pub(crate) fn get_hashed(&self, hash: u64) -> isize {
        let mut estimate = isize::MAX;
        self.for_each_counter(hash, |c| estimate = estimate.min(counter::load(c)));
        estimate
    }

    /// Calls `f` on the key's counter in every row, row 0 first.
    #[inline]
    fn for_each_counter(&self, hash: u64, mut f: impl FnMut(&AtomicIsize)) {
        self.for_each_row(hash, |_, c| f(c));
    }

    /// Calls `f(row, counter)` on the key's counter in every row, row 0 first.
    #[inline]
    fn for_each_row<'s>(&'s self, hash: u64, mut f: impl FnMut(usize, &'s AtomicIsize)) {
        let bits = self.column_bits;
        let mask = (1usize << bits) - 1;
        let mut word = hash;
        let mut left = u64::BITS;
        for (row, start) in (0..self.rows).map(|r| (r, r << bits)) {
            if left < bits {
                word = remix(hash, row as u64);
                left = u64::BITS;
            }
            let column = word as usize & mask;
            // `bits` < 64 because the sketch has at most 2^28 counters.
            word >>= bits;
            left -= bits;
            let index = start | column;
            debug_assert!(
                index < self.counters.len(),
                "row {row} column {column} out of range"
            );
            if let Some(c) = self.counters.get(index) {
                f(row, c);
            }
        }
    }
}

impl std::fmt::Debug for Estimator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Estimator")
            .field("rows", &self.rows)
            .field("columns", &self.columns())
            .finish_non_exhaustive()
    }
}

/// The column count (rounded up to a power of two) and the total number of counters of
/// `copies` sketches of `rows` × `columns`, or why they are not allowed: the total may not
/// exceed [`Estimator::MAX_COUNTERS`]. Checked before anything is allocated.
pub(crate) fn checked_size(
    rows: usize,
    columns: usize,
    copies: usize,
) -> Result<(usize, usize), ConfigError> {
    if rows == 0 {
        return Err(ConfigError::ZeroRows);
    }
    if columns == 0 {
        return Err(ConfigError::ZeroColumns);
    }
    let too_large = || ConfigError::TooLarge { rows, columns };
    let width = columns.checked_next_power_of_two().ok_or_else(too_large)?;
    let total = rows
        .checked_mul(width)
        .filter(|&n| n.saturating_mul(copies) <= Estimator::MAX_COUNTERS)
        .ok_or_else(too_large)?;
    Ok((width, total))
}

/// A hasher with random keys of its own (property 4 of docs/architecture.md), except under
/// loom: its models need every iteration to touch the same atomics, so they get fixed keys.
pub(crate) fn new_hasher() -> ahash::RandomState {
    #[cfg(floodgate_loom)]
    return ahash::RandomState::with_seeds(1, 2, 3, 4);
    #[cfg(not(floodgate_loom))]
    ahash::RandomState::new()
}

/// The keyed 64-bit hash of `key`, through `Hash::hash` on a fresh hasher.
///
/// Not `RandomState::hash_one`: on a nightly compiler ahash specialises `hash_one` by type, so
/// `hash_one(&5u64)` and `hash_one(&&5u64)` would differ, and `get(&key)` would read other
/// counters than `incr(key)` counted in. `Hash` for a reference hashes what it points to, so
/// this path gives one hash per key value however many references it is passed through.
#[inline]
#[allow(clippy::manual_hash_one)] // deliberately not `hash_one`: see above
pub(crate) fn keyed_hash<T: Hash + ?Sized>(hasher: &ahash::RandomState, key: &T) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut state = hasher.build_hasher();
    key.hash(&mut state);
    state.finish()
}

/// Rows and columns for a count-min sketch with error ε and failure probability δ.
pub(crate) fn dimensions_for_error(
    epsilon: f64,
    delta: f64,
) -> Result<(usize, usize), ConfigError> {
    // `!(x > 0 && x < 1)` also rejects NaN.
    if !(epsilon > 0.0 && epsilon < 1.0) {
        return Err(ConfigError::Epsilon(epsilon));
    }
    if !(delta > 0.0 && delta < 1.0) {
        return Err(ConfigError::Delta(delta));
    }
    let columns = (std::f64::consts::E / epsilon).ceil();
    // ln(1/δ) as −ln δ: 1/δ overflows for a subnormal δ, while −ln δ < 745 for every δ > 0,
    // so the cast is exact.
    let rows = (-delta.ln()).ceil().max(1.0) as usize;
    let too_precise = || ConfigError::TooPrecise {
        epsilon,
        delta,
        rows,
        columns,
        max_counters: Estimator::MAX_COUNTERS,
    };
    if columns > Estimator::MAX_COUNTERS as f64 {
        return Err(too_precise());
    }
    // Both now fit in usize; the rows × columns check is `try_new`'s, reported in ε and δ.
    let columns_usize = columns as usize;
    match checked_size(rows, columns_usize, 1) {
        Err(ConfigError::TooLarge { .. }) => Err(too_precise()),
        Err(other) => Err(other),
        Ok(_) => Ok((rows, columns_usize)),
    }
}

/// A fresh 64-bit word derived from `hash` and a `row` (or any other seed), independent of
/// the bits the sketch rows take from `hash` itself: for rows beyond what the first hash's bits
/// cover, and for the limiter's exact stage (SplitMix64 finaliser).
#[inline]
pub(crate) fn remix(hash: u64, row: u64) -> u64 {
    let mut z = hash ^ row.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn columns_are_rounded_up_to_a_power_of_two() {
        assert_eq!(Estimator::new(1, 1).columns(), 1);
        assert_eq!(Estimator::new(1, 3).columns(), 4);
        assert_eq!(Estimator::new(1, 1024).columns(), 1024);
        assert_eq!(Estimator::new(1, 1025).columns(), 2048);
    }

    #[test]
    fn every_row_is_touched_once_and_within_its_own_row() {
        for (rows, columns) in [(1, 1), (4, 8192), (3, 1024), (9, 1 << 20), (20, 4)] {
            let e = Estimator::new(rows, columns);
            for key in 0..200u64 {
                let mut seen = Vec::new();
                e.for_each_counter(e.hash(&key), |c| {
                    let base = e.counters.as_ptr() as usize;
                    let index = (c as *const AtomicIsize as usize - base)
                        / std::mem::size_of::<AtomicIsize>();
                    seen.push(index);
                });
                assert_eq!(seen.len(), rows);
                for (row, index) in seen.into_iter().enumerate() {
                    assert_eq!(index / e.columns(), row, "{rows}x{columns} key {key}");
                }
            }
        }
    }

    #[test]
    fn rows_beyond_the_first_hash_word_use_different_columns() {
        // 9 rows x 2^20 columns needs 180 bits: rows past the third use re-mixed words, which
        // must not repeat the columns of the first rows.
        let e = Estimator::new(9, 1 << 20);
        let mut columns = Vec::new();
        let mut row = 0;
        e.for_each_counter(e.hash(&"key"), |c| {
            let base = e.counters.as_ptr() as usize;
            let index = (c as *const AtomicIsize as usize - base) / 8;
            columns.push(index - row * e.columns());
            row += 1;
        });
        columns.sort_unstable();
        columns.dedup();
        assert!(
            columns.len() >= 8,
            "columns repeat across rows: {columns:?}"
        );
    }

    #[test]
    fn error_sizing_follows_the_count_min_formulas() {
        assert_eq!(dimensions_for_error(0.01, 0.05), Ok((3, 272)));
        assert_eq!(dimensions_for_error(0.5, 0.5), Ok((1, 6)));
        for bad in [0.0, 1.0, -0.1, 2.0, f64::NAN] {
            assert!(dimensions_for_error(bad, 0.1).is_err(), "epsilon {bad}");
            assert!(dimensions_for_error(0.1, bad).is_err(), "delta {bad}");
        }
        assert!(matches!(
            dimensions_for_error(1e-12, 0.1),
            Err(ConfigError::TooPrecise { .. })
        ));
        // Columns within the limit, but not at this many rows: still reported in ε and δ.
        assert!(matches!(
            dimensions_for_error(1e-7, 1e-12),
            Err(ConfigError::TooPrecise { rows: 28, .. })
        ));
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

    /// The index into `counters` of the key's counter in each row, row 0 first.
    fn counter_indexes(sketch: &Estimator, key: u64) -> Vec<usize> {
        let base = sketch.counters.as_ptr() as usize;
        let mut indexes = Vec::with_capacity(sketch.rows);
        sketch.for_each_counter(sketch.hash(&key), |c| {
            indexes.push((c as *const AtomicIsize as usize - base) / std::mem::size_of_val(c));
        });
        indexes
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
