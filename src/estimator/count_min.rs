//! The count-min table without a hasher: H rows of 2^b counters, addressed by a key's 64-bit
//! hash. [`Estimator`](super::Estimator) pairs one with a [`KeyHasher`](super::KeyHasher),
//! and a `Rate` built with flat tables keeps one per window slot, each hashing every key once
//! with the one hasher it owns. (The `Limiter` counts in blocked tables, `blocked.rs`.)

use crate::counter;
use crate::error::ConfigError;
use crate::sync::{AtomicIsize, Ordering::Relaxed};

use super::key_hash::remix;

/// The most counters (rows × columns after rounding) one table, or a `Rate`'s tables
/// together, may have: 2^28, or 2 GiB of counters on a 64-bit target.
pub(crate) const MAX_COUNTERS: usize = 1 << 28;

/// `rows × 2^column_bits` saturating counters, row-major, in one allocation.
pub(crate) struct CountMin {
    /// Each counter is an independent saturating counter; see the `counter` module for its
    /// orderings.
    counters: Box<[AtomicIsize]>,
    rows: usize,
    /// log2(columns).
    column_bits: u32,
}

impl CountMin {
    /// A zeroed table of `rows` × `columns` (rounded up to a power of two), or why not.
    pub(crate) fn try_new(rows: usize, columns: usize) -> Result<Self, ConfigError> {
        let (width, total) = checked_size(rows, columns, 1)?;
        let mut counters = Vec::new();
        counters
            .try_reserve_exact(total)
            .map_err(|_| ConfigError::AllocationFailed {
                bytes: total * std::mem::size_of::<AtomicIsize>(),
            })?;
        counters.extend((0..total).map(|_| AtomicIsize::new(0)));
        Ok(CountMin {
            counters: counters.into_boxed_slice(),
            rows,
            column_bits: width.trailing_zeros(),
        })
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn columns(&self) -> usize {
        1 << self.column_bits
    }

    /// Heap and inline bytes; fixed at construction.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + std::mem::size_of_val(&*self.counters)
    }

    /// Adds `value` to the key's counter in every row and returns its estimate, this
    /// increment included (see `Estimator::incr` for what it guarantees under concurrency).
    #[inline]
    pub(crate) fn incr(&self, hash: u64, value: isize) -> isize {
        let mut added = isize::MAX;
        let mut lowest = None;
        self.for_each_counter(hash, |c| {
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

    /// Subtracts `value` from the key's counter in every row.
    #[inline]
    pub(crate) fn decr(&self, hash: u64, value: isize) {
        self.for_each_counter(hash, |c| counter::sub(c, value));
    }

    /// The key's estimate: the least of its counters.
    #[inline]
    pub(crate) fn get(&self, hash: u64) -> isize {
        let mut estimate = isize::MAX;
        self.for_each_counter(hash, |c| estimate = estimate.min(counter::load(c)));
        estimate
    }

    /// Sets every counter to zero; not atomic as a whole.
    pub(crate) fn reset(&self) {
        // Relaxed: a `Rate` publishes a cleared slot with a Release store of its own.
        for c in self.counters.iter() {
            c.store(0, Relaxed);
        }
    }

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

    /// Calls `f` on the key's counter in every row, row 0 first. The columns are consecutive
    /// `column_bits`-bit slices of the hash, re-mixed for the rows past its 64 bits.
    #[inline]
    fn for_each_counter<'s>(&'s self, hash: u64, mut f: impl FnMut(&'s AtomicIsize)) {
        let bits = self.column_bits;
        let mask = (1usize << bits) - 1;
        let mut word = hash;
        let mut left = u64::BITS;
        for row in 0..self.rows {
            if left < bits {
                word = remix(hash, row as u64);
                left = u64::BITS;
            }
            let column = word as usize & mask;
            // `bits` < 64 because the table has at most 2^28 counters.
            word >>= bits;
            left -= bits;
            let index = (row << bits) | column;
            debug_assert!(
                index < self.counters.len(),
                "row {row} column {column} out of range"
            );
            if let Some(c) = self.counters.get(index) {
                f(c);
            }
        }
    }

    /// The index into the table of the key's counter in each row, row 0 first.
    #[cfg(test)]
    pub(super) fn counter_indexes(&self, hash: u64) -> Vec<usize> {
        let base = self.counters.as_ptr() as usize;
        let mut indexes = Vec::with_capacity(self.rows);
        self.for_each_counter(hash, |c| {
            indexes.push((c as *const AtomicIsize as usize - base) / std::mem::size_of_val(c));
        });
        indexes
    }
}

/// Why a table of `rows` × `columns` is empty, if it is: the first check of every layout.
pub(crate) fn check_not_empty(rows: usize, columns: usize) -> Result<(), ConfigError> {
    if rows == 0 {
        return Err(ConfigError::ZeroRows);
    }
    if columns == 0 {
        return Err(ConfigError::ZeroColumns);
    }
    Ok(())
}

/// The column count (rounded up to a power of two) and the total number of counters of
/// `copies` tables of `rows` × `columns`, or why they are not allowed: the total may not
/// exceed [`MAX_COUNTERS`]. Checked before anything is allocated.
pub(crate) fn checked_size(
    rows: usize,
    columns: usize,
    copies: usize,
) -> Result<(usize, usize), ConfigError> {
    check_not_empty(rows, columns)?;
    let too_large = || ConfigError::TooLarge { rows, columns };
    let width = columns.checked_next_power_of_two().ok_or_else(too_large)?;
    let total = rows
        .checked_mul(width)
        .filter(|&n| n.saturating_mul(copies) <= MAX_COUNTERS)
        .ok_or_else(too_large)?;
    Ok((width, total))
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
        max_counters: MAX_COUNTERS,
    };
    if columns > MAX_COUNTERS as f64 {
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

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::estimator::KeyHasher;

    fn table(rows: usize, columns: usize) -> CountMin {
        CountMin::try_new(rows, columns).expect("a valid size")
    }

    #[test]
    fn columns_are_rounded_up_to_a_power_of_two() {
        assert_eq!(table(1, 1).columns(), 1);
        assert_eq!(table(1, 3).columns(), 4);
        assert_eq!(table(1, 1024).columns(), 1024);
        assert_eq!(table(1, 1025).columns(), 2048);
    }

    #[test]
    fn every_row_is_touched_once_and_within_its_own_row() {
        let hasher = KeyHasher::new();
        for (rows, columns) in [(1, 1), (4, 8192), (3, 1024), (9, 1 << 20), (20, 4)] {
            let t = table(rows, columns);
            for key in 0..200u64 {
                let indexes = t.counter_indexes(hasher.hash(&key));
                assert_eq!(indexes.len(), rows);
                for (row, index) in indexes.into_iter().enumerate() {
                    assert_eq!(index / t.columns(), row, "{rows}x{columns} key {key}");
                }
            }
        }
    }

    #[test]
    fn rows_beyond_the_first_hash_word_use_different_columns() {
        // 9 rows x 2^20 columns needs 180 bits: rows past the third use re-mixed words, which
        // must not repeat the columns of the first rows.
        let t = table(9, 1 << 20);
        let mut columns: Vec<usize> = t
            .counter_indexes(KeyHasher::new().hash(&"key"))
            .into_iter()
            .enumerate()
            .map(|(row, index)| index - row * t.columns())
            .collect();
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
