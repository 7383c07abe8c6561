//! The count-min table the limiter counts in: each key's counters for every row in one 64-byte
//! block, so that a request touches one cache line of the table, not one per row.
//!
//! # Layout
//!
//! A table is B blocks of 16 saturating `u32` counters (see `counter::narrow`), each block
//! aligned to a cache line. With H rows (1 to 16), row r owns the `w = ⌊16/H⌋` counters
//! `r·w .. (r+1)·w` of every block (8 each at the limiter's default H = 2; counters past `H·w` are
//! unused), or fewer when fewer columns were asked for (a table of 1 × 1 is one counter). A
//! key's block is the top 32 bits of its hash scaled to B (a multiply and a shift, Lemire's
//! "fastrange"), so B need not be a power of two and a table is sized to the line, not
//! doubled by rounding. Its counter in row r is one of that row's w, from 4 low bits of the
//! hash per row (re-mixed past 8 rows, where the hash's low 32 bits run out). This is the
//! layout of Caffeine's `FrequencySketch` (a block from the hash, one counter per row inside
//! it), with wider counters.
//!
//! # Error
//!
//! Every update still adds to one counter per row, so an estimate is never below the true
//! count, and the mean noise per counter is the total count ÷ (B · w), as for a flat table of
//! B·w columns in the same memory. What blocking changes is the shape of the error: the rows
//! of a key share their block's other keys. Another key shares the block with probability
//! 1/B and then each of its rows with probability 1/w, so the chance that one heavy key
//! inflates all H rows is 1/(B · w^H), where a flat table of the same memory has (B·w)^-H.
//! The count-min bound of `Estimator::with_error` assumes independent rows, so the public
//! [`Estimator`](crate::Estimator) keeps the flat layout; the limiter, whose exact stage
//! corrects an over-estimate for the keys near a limit, uses this one.
//!
//! # Clearing only what was touched
//!
//! A table made `tracked` (a rate window slot) keeps a dirty bit per block: the increment that
//! takes a counter of a block up from zero marks the block (a load of the bitmap's word, and
//! an `fetch_or` only if the bit is clear), and [`Blocked::reset`] zeroes only the marked
//! blocks, so the clock's work per window follows the blocks requests touched, not the size of
//! the table. A block whose mark is missed by a reset (a late writer racing it) keeps stale
//! counts until a later reset: counts only over-estimate.

use crate::counter::narrow;
use crate::error::ConfigError;
use crate::sync::{AtomicU32, AtomicU64, Ordering::Relaxed};

use super::count_min::{check_not_empty, MAX_COUNTERS};
use super::key_hash::remix;

/// Counters in a block: 16 × 4 bytes, one 64-byte cache line.
pub(crate) const BLOCK_COUNTERS: usize = 16;
/// The most rows a blocked table may have: one counter per row in a block.
pub(crate) const MAX_BLOCKED_ROWS: usize = BLOCK_COUNTERS;
/// The largest count a counter holds: counts saturate here (see `counter::narrow`).
pub(crate) const CEILING: u32 = narrow::CEILING;
/// Rows whose counter choice comes from the hash's own low bits (4 bits a row); further rows
/// take theirs from a re-mixed word.
const ROWS_FROM_HASH: usize = 8;

/// One cache line of counters.
#[repr(align(64))]
struct Block([AtomicU32; BLOCK_COUNTERS]);

/// Blocks of 16 counters; see the module docs.
pub(crate) struct Blocked {
    blocks: Box<[Block]>,
    rows: usize,
    /// Counters per row in a block, at most `⌊16 / rows⌋`.
    per_row: usize,
    /// One bit per block, set when a counter of the block leaves zero: the blocks
    /// [`reset`](Self::reset) must zero. `None` for tables never reset (in-flight counts).
    /// `Relaxed`: a mark publishes nothing; a missed one only leaves counts over (module docs).
    dirty: Option<Box<[AtomicU64]>>,
    /// `rows × per_row` when it is a shape [`for_each_counter`](Self::for_each_counter) has
    /// unrolled: decided once here, so a request tests one field, not two.
    shape: Shape,
}

/// The shapes of a block with their own unrolled code: the limiter's default (2 × 8) and 4 × 4.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    TwoByEight,
    FourByFour,
    Other,
}

impl Blocked {
    /// A zeroed table with `rows` rows and at least `columns` counters per row (a whole number
    /// of blocks), or why not. `tracked`: keep the dirty marks that let
    /// [`reset`](Self::reset) zero only the blocks written since the last one.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ZeroRows`], [`ConfigError::ZeroColumns`],
    /// [`ConfigError::TooManyRows`] past [`MAX_BLOCKED_ROWS`], [`ConfigError::TooLarge`] past
    /// [`MAX_COUNTERS`] counters, [`ConfigError::AllocationFailed`].
    pub(crate) fn try_new(rows: usize, columns: usize, tracked: bool) -> Result<Self, ConfigError> {
        let (per_row, blocks) = checked_shape(rows, columns, 1)?;
        let bytes = blocks * std::mem::size_of::<Block>();
        let mut table = Vec::new();
        table
            .try_reserve_exact(blocks)
            .map_err(|_| ConfigError::AllocationFailed { bytes })?;
        table.extend((0..blocks).map(|_| Block(std::array::from_fn(|_| AtomicU32::new(0)))));
        let dirty = tracked.then(|| {
            (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        let shape = match (rows, per_row) {
            (2, 8) => Shape::TwoByEight,
            (4, 4) => Shape::FourByFour,
            _ => Shape::Other,
        };
        Ok(Blocked {
            blocks: table.into_boxed_slice(),
            rows,
            per_row,
            dirty,
            shape,
        })
    }

    /// Counters per row in the whole table: what a flat table of the same noise would call
    /// its columns.
    pub(crate) fn columns(&self) -> usize {
        self.blocks.len() * self.per_row
    }

    /// Heap and inline bytes; fixed at construction.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of_val(&*self.blocks)
            + self
                .dirty
                .as_ref()
                .map_or(0, |d| std::mem::size_of_val(&**d))
    }

    /// Adds `value` to the key's counter in every row and returns its estimate, this
    /// increment included: the least count the adds returned, re-read in its row after all of
    /// them, as `CountMin::incr` does (and for the same reason: of m concurrent increments of
    /// a key, the j-th to read sees at least j).
    #[inline(always)]
    pub(crate) fn incr(&self, hash: u64, value: u32) -> isize {
        self.incr_in(self.block_index(hash), hash, value)
    }

    /// [`incr`](Self::incr) for a key whose block is `index` ([`block_index`](Self::block_index),
    /// the same in every table of this one's number of blocks). An index out of range (a
    /// table of another shape) reads as saturated: an over-estimate, never an under-count.
    #[inline(always)]
    pub(crate) fn incr_in(&self, index: usize, hash: u64, value: u32) -> isize {
        let Some(block) = self.block_at(index) else {
            return CEILING as isize;
        };
        let mut added = u32::MAX;
        let mut lowest = &block.0[0];
        let mut left_zero = false;
        self.for_each_counter(block, hash, |c| {
            let now = narrow::add(c, value);
            // `now ≤ value`: this add took the counter up from zero (or it saturated on a
            // huge value, which marks the block once more than needed).
            left_zero |= now <= value;
            if now < added {
                added = now;
                lowest = c;
            }
        });
        if left_zero {
            self.mark(index);
        }
        crate::sync::seqcst_fence_for_loom();
        narrow::load(lowest).max(added) as isize
    }

    /// [`incr`](Self::incr) on exact counters (`counter::narrow::try_add`), for counts that
    /// are given back ([`give_back`](Self::give_back)): the requests in flight. The key's
    /// estimate, this increment included, or `None` when a counter of the key cannot hold
    /// `value` more (its count would pass the ceiling, 2^31): then nothing is added in any
    /// row, so that a give-back is always the exact inverse of its increment.
    #[inline(always)]
    pub(crate) fn try_incr(&self, hash: u64, value: u32) -> Option<isize> {
        let block = self.block_at(self.block_index(hash))?;
        let mut added = u32::MAX;
        let mut lowest = &block.0[0];
        // Rows added to before one that could not hold it, to take back.
        let mut rows = 0;
        let mut full = false;
        self.for_each_counter(block, hash, |c| {
            if full {
                return;
            }
            match narrow::try_add(c, value) {
                Some(now) => {
                    rows += 1;
                    if now < added {
                        added = now;
                        lowest = c;
                    }
                }
                None => full = true,
            }
        });
        if full {
            self.take_back(block, hash, value, rows);
            return None;
        }
        crate::sync::seqcst_fence_for_loom();
        Some(narrow::load(lowest).max(added) as isize)
    }

    /// Gives back `value` from the first `rows` rows of the key's counters: a
    /// [`try_incr`](Self::try_incr) that a later row could not hold.
    #[cold]
    #[inline(never)]
    fn take_back(&self, block: &Block, hash: u64, value: u32, mut rows: usize) {
        self.for_each_counter(block, hash, |c| {
            if rows > 0 {
                rows -= 1;
                narrow::give_back(c, value);
            }
        });
    }

    /// Gives back `value` that [`try_incr`](Self::try_incr) added to the key's counters: its
    /// exact inverse.
    #[inline]
    pub(crate) fn give_back(&self, hash: u64, value: u32) {
        if let Some(block) = self.block(hash) {
            self.for_each_counter(block, hash, |c| narrow::give_back(c, value));
        }
    }

    /// Subtracts `value` from the key's counter in every row (giving back an increment). A
    /// saturated counter stays saturated: for tables counted with [`incr`](Self::incr).
    #[inline]
    pub(crate) fn decr(&self, hash: u64, value: u32) {
        if let Some(block) = self.block(hash) {
            self.for_each_counter(block, hash, |c| narrow::sub(c, value));
        }
    }

    /// The key's estimate: the least of its counters.
    #[inline(always)]
    pub(crate) fn get(&self, hash: u64) -> isize {
        self.get_in(self.block_index(hash), hash)
    }

    /// [`get`](Self::get) for a key whose block is `index`, as for [`incr_in`](Self::incr_in).
    #[inline(always)]
    pub(crate) fn get_in(&self, index: usize, hash: u64) -> isize {
        let Some(block) = self.block_at(index) else {
            return CEILING as isize;
        };
        let mut estimate = u32::MAX;
        self.for_each_counter(block, hash, |c| estimate = estimate.min(narrow::load(c)));
        estimate as isize
    }

    /// Zeroes the blocks written since the last reset (every block of an untracked table);
    /// not atomic as a whole. `Relaxed` stores: a `Rate` publishes a cleared slot with a
    /// `Release` store of its own.
    pub(crate) fn reset(&self) {
        let Some(dirty) = &self.dirty else {
            self.blocks.iter().for_each(zero);
            return;
        };
        for (i, word) in dirty.iter().enumerate() {
            // A load first: most words of a large table are clean, and a load of a clean word
            // writes nothing.
            if word.load(Relaxed) == 0 {
                continue;
            }
            let mut marked = word.swap(0, Relaxed);
            while marked != 0 {
                let bit = marked.trailing_zeros() as usize;
                marked &= marked - 1;
                if let Some(block) = self.blocks.get(i * 64 + bit) {
                    zero(block);
                }
            }
        }
    }

    /// The mean count of row 0's counters: the total count ÷ counters per row, the noise an
    /// estimate starts from. Reads a row of every block: for reports, not the request path.
    pub(crate) fn mean_count(&self) -> f64 {
        let total: u64 = self
            .blocks
            .iter()
            .flat_map(|b| &b.0[..self.per_row])
            .map(|c| u64::from(narrow::load(c)))
            .sum();
        total as f64 / self.columns() as f64
    }

    /// The key's block: the top 32 bits of its hash, scaled to the number of blocks.
    #[inline]
    fn block(&self, hash: u64) -> Option<&Block> {
        self.block_at(self.block_index(hash))
    }

    #[inline(always)]
    fn block_at(&self, index: usize) -> Option<&Block> {
        debug_assert!(index < self.blocks.len(), "block {index} out of range");
        self.blocks.get(index)
    }

    /// The index of the key's block: `⌊top · blocks / 2^32⌋` for the hash's top 32 bits, below
    /// `blocks`, which is at most 2^24 (`MAX_COUNTERS` / 16), so the product fits in 64 bits.
    #[inline]
    pub(crate) fn block_index(&self, hash: u64) -> usize {
        (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize
    }

    /// Calls `f` on the key's counter in every row of its `block`, row 0 first.
    #[inline(always)]
    fn for_each_counter<'s>(&self, block: &'s Block, hash: u64, mut f: impl FnMut(&'s AtomicU32)) {
        // The limiter's default shape (2 × 8) and 4 × 4, with the bounds known to the compiler:
        // the same counters as below (4 bits scaled to 0..2^k are their top k), unrolled.
        match self.shape {
            Shape::TwoByEight => {
                f(&block.0[((hash >> 1) & 7) as usize]);
                f(&block.0[8 + ((hash >> 5) & 7) as usize]);
                return;
            }
            Shape::FourByFour => {
                for row in 0..4 {
                    f(&block.0[row * 4 + ((hash >> (4 * row + 2)) & 3) as usize]);
                }
                return;
            }
            Shape::Other => {}
        }
        let mut visit = |row: usize, bits: u64| {
            // 4 bits scaled to 0..per_row (exact for the powers of two; 16 and 5 otherwise).
            let choice = ((bits & 0xF) as usize * self.per_row) >> 4;
            // Below 16 already (row < rows, choice < per_row ≤ 16 / rows): the mask only
            // lets the compiler see it, so there is no bounds check.
            f(&block.0[(row * self.per_row + choice) & (BLOCK_COUNTERS - 1)]);
        };
        let from_hash = self.rows.min(ROWS_FROM_HASH);
        for row in 0..from_hash {
            visit(row, hash >> (4 * row));
        }
        if self.rows > ROWS_FROM_HASH {
            let more = remix(hash, ROWS_FROM_HASH as u64);
            for row in ROWS_FROM_HASH..self.rows {
                visit(row, more >> (4 * (row - ROWS_FROM_HASH)));
            }
        }
    }

    /// Marks block `index` as written (tracked tables only).
    #[inline]
    fn mark(&self, index: usize) {
        let Some(dirty) = &self.dirty else { return };
        let bit = 1u64 << (index % 64);
        if let Some(word) = dirty.get(index / 64) {
            if word.load(Relaxed) & bit == 0 {
                word.fetch_or(bit, Relaxed);
            }
        }
    }

    /// The index of the key's counter in each row within the table, row 0 first.
    #[cfg(test)]
    pub(super) fn counter_indexes(&self, hash: u64) -> Vec<usize> {
        let base = self.blocks.as_ptr() as usize;
        let mut indexes = Vec::with_capacity(self.rows);
        if let Some(block) = self.block(hash) {
            self.for_each_counter(block, hash, |c| {
                indexes.push((c as *const AtomicU32 as usize - base) / 4);
            });
        }
        indexes
    }
}

fn zero(block: &Block) {
    for c in &block.0 {
        c.store(0, Relaxed);
    }
}

/// The counters per row in a block and the number of blocks of `copies` tables of `rows` rows
/// and at least `columns` counters per row, or why they are not allowed: checked before
/// anything is allocated.
pub(crate) fn checked_shape(
    rows: usize,
    columns: usize,
    copies: usize,
) -> Result<(usize, usize), ConfigError> {
    check_not_empty(rows, columns)?;
    if rows > MAX_BLOCKED_ROWS {
        return Err(ConfigError::TooManyRows {
            rows,
            max: MAX_BLOCKED_ROWS,
        });
    }
    let too_large = || ConfigError::TooLarge { rows, columns };
    let per_row =
        (BLOCK_COUNTERS / rows).min(columns.checked_next_power_of_two().unwrap_or(usize::MAX));
    let blocks = columns.div_ceil(per_row);
    blocks
        .checked_mul(BLOCK_COUNTERS)
        .filter(|&n| n.saturating_mul(copies) <= MAX_COUNTERS)
        .ok_or_else(too_large)?;
    Ok((per_row, blocks))
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;
    use crate::estimator::KeyHasher;

    fn table(rows: usize, columns: usize, tracked: bool) -> Blocked {
        Blocked::try_new(rows, columns, tracked).expect("a valid size")
    }

    #[test]
    fn a_key_touches_one_cache_line() {
        let hasher = KeyHasher::new();
        for (rows, columns) in [
            (1, 1),
            (4, 8192),
            (3, 1024),
            (9, 1 << 16),
            (16, 64),
            (12, 4),
        ] {
            let t = table(rows, columns, false);
            for key in 0..500u64 {
                let indexes = t.counter_indexes(hasher.hash(&key));
                assert_eq!(indexes.len(), rows, "{rows}x{columns}");
                let line = indexes[0] / BLOCK_COUNTERS;
                for (row, index) in indexes.into_iter().enumerate() {
                    assert_eq!(index / BLOCK_COUNTERS, line, "{rows}x{columns} key {key}");
                    let within = index % BLOCK_COUNTERS;
                    assert_eq!(
                        within / t.per_row,
                        row,
                        "row {row} stays in its own counters"
                    );
                }
            }
        }
    }

    #[test]
    fn blocks_are_cache_lines() {
        assert_eq!(std::mem::size_of::<Block>(), 64);
        assert_eq!(std::mem::align_of::<Block>(), 64);
    }

    #[test]
    fn every_counter_of_a_row_is_chosen() {
        // 4 rows of 4 counters: every one of the 16 is used by some key.
        let t = table(4, 4, false);
        let hasher = KeyHasher::new();
        let mut used = [false; BLOCK_COUNTERS];
        for key in 0..1000u64 {
            for i in t.counter_indexes(hasher.hash(&key)) {
                used[i] = true;
            }
        }
        assert!(used.iter().all(|&u| u), "{used:?}");
    }

    #[test]
    fn sizes_and_errors() {
        assert_eq!(table(4, 1 << 17, false).blocks.len(), 1 << 15);
        assert_eq!(table(4, 1 << 17, false).columns(), 1 << 17);
        assert_eq!(table(3, 1000, false).blocks.len(), 200, "⌈1000/5⌉");
        assert_eq!(
            table(4, 80_000, false).blocks.len(),
            20_000,
            "no power of two"
        );
        assert_eq!(table(1, 1, false).blocks.len(), 1);
        assert_eq!(
            table(1, 1, false).columns(),
            1,
            "a 1 × 1 table is one counter"
        );
        assert_eq!(table(4, 3, false).columns(), 4);
        assert_eq!(table(2, 64, false).per_row, 8);
        assert_eq!(
            Blocked::try_new(0, 8, false).err(),
            Some(ConfigError::ZeroRows)
        );
        assert_eq!(
            Blocked::try_new(4, 0, false).err(),
            Some(ConfigError::ZeroColumns)
        );
        assert_eq!(
            Blocked::try_new(17, 8, false).err(),
            Some(ConfigError::TooManyRows { rows: 17, max: 16 })
        );
        assert!(matches!(
            Blocked::try_new(4, 1 << 27, false),
            Err(ConfigError::TooLarge { .. })
        ));
    }

    #[test]
    fn reset_of_a_tracked_table_zeroes_every_block_written() {
        let t = table(4, 1 << 12, true);
        let hasher = KeyHasher::new();
        for key in 0..3000u64 {
            t.incr(hasher.hash(&key), 1 + key as u32 % 3);
        }
        t.reset();
        assert!(t
            .blocks
            .iter()
            .all(|b| b.0.iter().all(|c| c.load(Relaxed) == 0)));
        assert!(t
            .dirty
            .as_ref()
            .unwrap()
            .iter()
            .all(|w| w.load(Relaxed) == 0));
        // Written again after a reset: marked again.
        t.incr(hasher.hash(&7u64), 1);
        t.reset();
        assert_eq!(t.get(hasher.hash(&7u64)), 0);
    }

    #[test]
    fn reset_of_a_tracked_table_touches_only_marked_blocks() {
        // A counter written behind the marks' back (no mark) survives the reset: proof that the
        // reset reads the marks rather than the whole table.
        let t = table(1, 1 << 10, true);
        t.blocks[5].0[0].store(9, Relaxed);
        t.incr(0, 1); // hash 0: block 0, marked
        t.reset();
        assert_eq!(t.blocks[5].0[0].load(Relaxed), 9);
        assert_eq!(
            t.blocks[0].0.iter().map(|c| c.load(Relaxed)).sum::<u32>(),
            0
        );
    }

    #[test]
    fn the_estimate_saturates_instead_of_wrapping() {
        let t = table(2, 16, false);
        assert_eq!(t.incr(1, u32::MAX), CEILING as isize);
        assert_eq!(t.incr(1, 1), CEILING as isize);
        t.decr(1, 1);
        assert_eq!(t.get(1), CEILING as isize, "saturation is sticky");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Incr(u64, u32),
        /// Give back `pick % (true count + 1)`: never more than was added.
        Decr(u64, u32),
        Reset,
    }

    fn op(keys: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => (0..keys, 0u32..=20).prop_map(|(k, v)| Op::Incr(k, v)),
            4 => (0..keys, any::<u32>()).prop_map(|(k, p)| Op::Decr(k, p)),
            1 => Just(Op::Reset),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Against an exact model: every estimate is at least the true count; it equals it
        /// when one of the key's rows shares its counter with no other live key; a tracked
        /// table's reset forgets everything.
        #[test]
        fn estimates_never_under_count_and_are_exact_without_collision(
            rows in 1usize..=16,
            columns in 1usize..=64,
            tracked in any::<bool>(),
            ops in prop::collection::vec(op(24), 1..80),
        ) {
            let t = Blocked::try_new(rows, columns, tracked).unwrap();
            let hasher = KeyHasher::new();
            let hashes: Vec<u64> = (0..24u64).map(|k| hasher.hash(&k)).collect();
            let indexes: Vec<Vec<usize>> = hashes.iter().map(|&h| t.counter_indexes(h)).collect();
            let mut model: HashMap<u64, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Incr(key, value) => {
                        let truth = model.entry(key).or_insert(0);
                        *truth += value;
                        let estimate = t.incr(hashes[key as usize], value);
                        prop_assert!(estimate >= *truth as isize);
                    }
                    Op::Decr(key, pick) => {
                        let truth = model.entry(key).or_insert(0);
                        let value = pick % (*truth + 1);
                        *truth -= value;
                        t.decr(hashes[key as usize], value);
                    }
                    Op::Reset => {
                        t.reset();
                        model.clear();
                    }
                }
                let count = |k: u64| model.get(&k).copied().unwrap_or(0) as isize;
                for key in 0..24u64 {
                    let own = &indexes[key as usize];
                    let alone = (0..rows).any(|row| {
                        (0..24u64).all(|other| {
                            other == key || count(other) == 0 || indexes[other as usize][row] != own[row]
                        })
                    });
                    let estimate = t.get(hashes[key as usize]);
                    if alone {
                        prop_assert_eq!(estimate, count(key), "key {} rows {:?}", key, own);
                    } else {
                        prop_assert!(estimate >= count(key));
                    }
                }
            }
        }
    }
}
