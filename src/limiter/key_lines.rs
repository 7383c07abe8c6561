//! What a request looks up by its key's spread hash outside the sketches, in one cache line:
//! its over-limit slot (the flood path, `overlimit.rs`), its exact stage's filter cell (the
//! promotion handshake, `exact/mod.rs`) and the line's rate mark (whether a request may be
//! judged on its current window alone, `quiet.rs`).
//!
//! Every request reads the slot and the cell before its sketches and the cell again after (a
//! cell counts the promoted keys that hash to it and, in its high bits, the keys that left
//! it: see "Leaving between two reads" in `exact/mod.rs`); a request that may be judged on
//! its current window alone reads the mark too. In tables of their own the slots and cells
//! were two more lines a request, each a random one of tables that outgrow a
//! core's caches at the rates the limiter is sized for (640 KiB at a million requests a
//! second); in one line they are one. Callgrind (a 32 KiB L1) counted 3.2 L1 misses per
//! healthy request of the uniform trace at 100k requests a second with the two tables, and
//! 2.4 with the lines.
//!
//! # Layout
//!
//! A line is [`CELLS_PER_LINE`] filter cells (a byte each), [`SLOTS_PER_LINE`] over-limit
//! slots (a word each) and the rate mark (a word): 64 bytes, aligned to a cache line. A key's
//! line is picked by the spread's low bits (a power of two of lines), its cell within the
//! line by the 4 bits from
//! [`CELL_SHIFT`], and its slot by the 8 bits from [`SLOT_SHIFT`] scaled to the slots. All
//! three come from the spread's low 32 bits, which the exact stage's set index (its top bits,
//! scaled) and the over-limit tags (its top 24) do not use, so keys sharing a line, a cell or
//! a slot are no more likely to share a set or a tag than keys at random.
//!
//! # Sizes
//!
//! [`CELLS_PER_ENTRY`] cells per place of the exact stage, as its filter always had, so the
//! stage's lines give each place `5 / (16 / 8) = 2.5` over-limit slots: over-limit keys are a
//! subset of the keys near their limits, and the spare slots keep two flooding keys from
//! taking turns in one. 32 bytes a place, where the two tables took 40.

use crate::sync::{AtomicU64, AtomicU8, Ordering};

/// Filter cells in a line.
pub(crate) const CELLS_PER_LINE: usize = 16;
/// Over-limit slots in a line: what the 64 bytes hold beside the cells and the rate mark.
pub(crate) const SLOTS_PER_LINE: usize = 5;
/// Filter cells per place of the exact stage: with every place in use, about 1 in 8 requests
/// for an unpromoted key that is already near its threshold takes a set's lock needlessly.
pub(crate) const CELLS_PER_ENTRY: usize = 8;
/// The spread's bit where the cell's 4 bits start: above every bit a line index can take.
const CELL_SHIFT: u32 = 20;
/// The spread's bit where the slot's 8 bits start, above the cell's.
const SLOT_SHIFT: u32 = 24;
/// The most lines: their index takes the bits below [`CELL_SHIFT`].
const MAX_LINES: usize = 1 << CELL_SHIFT;

/// The multiplier of [`spread`]: 2^64 ÷ φ, made odd (Fibonacci hashing), so that the
/// product is a bijection of the hash and each bit of it depends on every bit below it.
const SPREAD_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// The word the lines, the exact stage and the over-limit cache take their indexes and tags
/// from, mixed from the key's hash so that keys sharing sketch columns do not also share a
/// line, a set, a filter cell or an over-limit slot.
///
/// The sketches take a key's block from the hash's top bits and its counters from its low
/// bits. A multiply by an odd constant makes two hashes whose lowest differing bit is `j`
/// differ pseudo-randomly in every product bit above `j`, so the product's top half depends on
/// all of the hash; folding it into the low half gives the low bits (the filter's and the
/// cache's indexes) the same, and the set index and the cache's tag take the top bits. It is
/// a bijection (equal spreads are equal hashes, which the exact stage's door relies on). A
/// multiply, a shift and an xor: a full finaliser (SplitMix64's, three multiplies in a chain)
/// costs a dozen more instructions a request, and its latency comes before the filter's load.
#[inline]
pub(crate) fn spread(hash: u64) -> u64 {
    let product = hash.wrapping_mul(SPREAD_MULTIPLIER);
    product ^ (product >> 32)
}

/// One cache line of cells and slots.
#[repr(C, align(64))]
struct Line {
    cells: [AtomicU8; CELLS_PER_LINE],
    slots: [AtomicU64; SLOTS_PER_LINE],
    /// One more than the latest rate window (bucket) in which a count of a key of the line
    /// reached the limiter's mark; 0 if none has (see `quiet.rs`). Only raised.
    rate_mark: AtomicU64,
}

/// A key's line and its spread hash: where its cell and its slot are.
#[derive(Clone, Copy)]
pub(crate) struct KeyLine<'a> {
    line: &'a Line,
    spread: u64,
}

impl<'a> KeyLine<'a> {
    /// The spread hash the line was found by.
    #[inline(always)]
    pub(crate) fn spread(self) -> u64 {
        self.spread
    }

    /// The key's filter cell.
    #[inline(always)]
    pub(crate) fn cell(self) -> &'a AtomicU8 {
        &self.line.cells[(self.spread >> CELL_SHIFT) as usize % CELLS_PER_LINE]
    }

    /// The line's rate mark: one more than the latest window in which a count of one of its
    /// keys reached the limiter's mark, 0 if none has. `SeqCst`, as the counts it stands for
    /// (see `quiet.rs`).
    #[inline(always)]
    pub(crate) fn rate_mark(self) -> u64 {
        self.line.rate_mark.load(Ordering::SeqCst)
    }

    /// Records that a count of a key of the line reached the limiter's mark in window
    /// `bucket`: raises the mark to `bucket + 1`. A load first: the lines of keys near their
    /// limits are marked by every request of theirs, and a load that finds the mark there
    /// writes nothing. `SeqCst` (a plain load on x86-64), so that a mark found there is
    /// placed in the one order of counts and marks before this request goes on, as one
    /// written would be.
    #[inline]
    pub(crate) fn mark_rate(self, bucket: u64) {
        let mark = bucket.saturating_add(1);
        if self.line.rate_mark.load(Ordering::SeqCst) < mark {
            self.line.rate_mark.fetch_max(mark, Ordering::SeqCst);
        }
    }

    /// The key's over-limit slot.
    #[inline(always)]
    pub(crate) fn slot(self) -> &'a AtomicU64 {
        let pick = (((self.spread >> SLOT_SHIFT) & 0xFF) as usize * SLOTS_PER_LINE) >> 8;
        &self.line.slots[pick]
    }
}

/// The lines of one limiter: its exact stage's filter and its over-limit cache together.
pub(crate) struct KeyLines {
    lines: Box<[Line]>,
}

impl KeyLines {
    /// Lines for an exact stage of `entries` places: [`CELLS_PER_ENTRY`] cells each, rounded
    /// up to a power of two of lines, all zero.
    pub(crate) fn new(entries: usize) -> Self {
        KeyLines {
            lines: (0..Self::lines_for(entries))
                .map(|_| Line {
                    cells: std::array::from_fn(|_| AtomicU8::new(0)),
                    slots: std::array::from_fn(|_| AtomicU64::new(0)),
                    rate_mark: AtomicU64::new(0),
                })
                .collect(),
        }
    }

    /// How many lines a stage of `entries` places gets.
    fn lines_for(entries: usize) -> usize {
        (entries.saturating_mul(CELLS_PER_ENTRY) / CELLS_PER_LINE)
            .max(1)
            .next_power_of_two()
            .min(MAX_LINES)
    }

    /// The line of the key of spread hash `spread`: found once by a request, for its slot
    /// and its cell.
    #[inline(always)]
    pub(crate) fn key_line(&self, spread: u64) -> KeyLine<'_> {
        // `lines` is a power of two (`new`).
        let line = &self.lines[spread as usize & (self.lines.len() - 1)];
        KeyLine { line, spread }
    }

    /// Every over-limit slot, for the sweep.
    pub(crate) fn slots(&self) -> impl Iterator<Item = &AtomicU64> {
        self.lines.iter().flat_map(|line| line.slots.iter())
    }

    /// Where the key's cell is among all the cells: for the tests of how keys spread.
    #[cfg(test)]
    pub(crate) fn cell_number(&self, spread: u64) -> usize {
        let line = spread as usize & (self.lines.len() - 1);
        line * CELLS_PER_LINE + (spread >> CELL_SHIFT) as usize % CELLS_PER_LINE
    }

    /// Filter cells in all.
    #[cfg(test)]
    pub(crate) fn cells(&self) -> usize {
        self.lines.len() * CELLS_PER_LINE
    }

    /// Bytes allocated up front; fixed.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.lines)
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
    }

    /// A key's cell and slot are in the line its spread picks, and the slots of a line are
    /// all used: keys differing only in the bits above the line index share the line.
    #[test]
    fn a_keys_cell_and_slot_share_its_line_and_every_slot_is_reachable() {
        let lines = KeyLines::new(1_024);
        let base = lines.lines.as_ptr() as usize;
        let line_of = |p: usize| (p - base) / std::mem::size_of::<Line>();
        let mut slots_seen = [false; SLOTS_PER_LINE];
        let mut cells_seen = [false; CELLS_PER_LINE];
        for high in 0..4_096u64 {
            let spread = 0x0123_4567_0000_0000 | high << CELL_SHIFT | 0x2A;
            let cell = lines.key_line(spread).cell() as *const AtomicU8 as usize;
            let slot = lines.key_line(spread).slot() as *const AtomicU64 as usize;
            assert_eq!(line_of(cell), 0x2A, "{spread:#x}");
            assert_eq!(line_of(slot), 0x2A, "{spread:#x}");
            let in_line = slot - (base + 0x2A * 64) - CELLS_PER_LINE;
            slots_seen[in_line / 8] = true;
            cells_seen[cell - (base + 0x2A * 64)] = true;
        }
        assert_eq!(slots_seen, [true; SLOTS_PER_LINE]);
        assert_eq!(cells_seen, [true; CELLS_PER_LINE]);
    }

    #[test]
    fn lines_follow_the_stage_and_stop_where_the_index_bits_do() {
        // 8 cells a place, 16 a line: a line per two places, a power of two of them.
        assert_eq!(KeyLines::lines_for(16_384), 8_192);
        assert_eq!(KeyLines::lines_for(100), 64);
        assert_eq!(KeyLines::lines_for(0), 1);
        assert_eq!(KeyLines::lines_for(usize::MAX), MAX_LINES);
        assert_eq!(KeyLines::new(16_384).memory_bytes(), 8_192 * 64);
    }
}
