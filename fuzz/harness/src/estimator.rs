//! `Estimator`: operations, the exact model of the counts behind one sketch, and the checks.

use arbitrary::Arbitrary;
use floodgate::Estimator;

use super::{bounded, key, CEILING, FLOOR};

/// Keys the operations touch.
const KEYS: usize = 12;

/// A signed count for `incr`/`decr`; [`Value::get`] bounds it.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Value {
    tag: u8,
    raw: u64,
}

impl Value {
    /// With `extremes`: mostly small, sometimes negative, extreme (the edges of the counter
    /// range and of `isize`), shifted or any `isize`. Without: 0..=50, as counts are when
    /// they only grow, so that the upper bound is checked on every read.
    fn get(self, extremes: bool) -> isize {
        const EXTREMES: [isize; 16] = [
            isize::MAX,
            isize::MIN,
            0,
            -1,
            1,
            CEILING,
            CEILING + 1,
            CEILING - 1,
            FLOOR,
            FLOOR - 1,
            isize::MAX / 4,
            isize::MIN / 4,
            1 << 42,
            (1 << 42) + 1,
            -(1 << 42) - 1,
            isize::MAX - 1,
        ];
        let tag = self.tag;
        if !extremes {
            return isize::from(tag % 51);
        }
        match tag >> 5 {
            0..=3 => isize::from(tag & 31),
            4 => -isize::from(tag & 31),
            5 => EXTREMES[usize::from(tag & 15)],
            6 => ((self.raw as u16) as isize) << (tag & 31),
            _ => self.raw as isize,
        }
    }
}

/// One operation on the sketch, for key `key % 12`.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum EstimatorOp {
    Get {
        key: u8,
    },
    Incr {
        key: u8,
        value: Value,
    },
    IncrOne {
        key: u8,
    },
    /// A decrement of any value (with extremes; else within the key's count).
    Decr {
        key: u8,
        value: Value,
    },
    /// A decrement of `pick % (count + 1)`: the key's count stays non-negative.
    DecrWithin {
        key: u8,
        pick: u64,
    },
    /// `get(&key)`: `&u64` hashes as `u64` does, so it must read the same counters. A
    /// regression check: ahash's `hash_one`, specialised by type on nightly Rust (as
    /// libFuzzer builds are), hashed `&u64` and `u64` differently.
    GetByReference {
        key: u8,
    },
    Reset,
}

/// A sketch of `1 + rows % 4` rows × `1 + columns % 64` columns and the operations on it.
#[derive(Arbitrary, Debug, Clone)]
pub struct EstimatorInput {
    pub rows: u8,
    pub columns: u8,
    /// Whether values reach the extremes (see [`Value::get`]).
    pub extremes: bool,
    pub ops: Vec<EstimatorOp>,
}

/// The exact counts behind one sketch, and what they imply for every estimate.
///
/// Counter `c` in a key's column holds the sum `S` of the true counts of the keys that share
/// that column, unless it was clamped: raised to `FLOOR`, or saturated at `CEILING` (sticky).
/// So, with `t` the key's count and `neg`/`pos` the sums of the other keys' negative/positive
/// counts, `S ∈ [t + neg, t + pos]`, and
/// - always: `estimate ≥ clamp(t + neg)`, and `estimate = CEILING` once `t + neg` exceeded it;
/// - while no counter can have been clamped since the last reset: `estimate ≤ t + pos`, which
///   for non-negative counts is the total of all keys.
struct SketchModel {
    counts: Vec<i128>,
    /// Keys whose every counter has certainly saturated since the last reset.
    saturated: Vec<bool>,
    /// Whether some counter may have been floored or saturated since the last reset.
    maybe_clamped: bool,
}

impl SketchModel {
    fn new(keys: usize) -> Self {
        SketchModel {
            counts: vec![0; keys],
            saturated: vec![false; keys],
            maybe_clamped: false,
        }
    }

    fn add(&mut self, key: usize, delta: i128) {
        self.counts[key] += delta;
        let neg: i128 = self.counts.iter().map(|&t| t.min(0)).sum();
        let pos: i128 = self.counts.iter().map(|&t| t.max(0)).sum();
        if neg < FLOOR as i128 || pos > CEILING as i128 {
            self.maybe_clamped = true;
        }
        for k in 0..self.counts.len() {
            if self.low(k) > CEILING as i128 {
                self.saturated[k] = true;
            }
        }
    }

    /// The least the sum in any of `key`'s counters can be.
    fn low(&self, key: usize) -> i128 {
        let t = self.counts[key];
        let neg: i128 = self.counts.iter().map(|&t| t.min(0)).sum();
        t + (neg - t.min(0))
    }

    /// The most the sum in any of `key`'s counters can be.
    fn high(&self, key: usize) -> i128 {
        let t = self.counts[key];
        let pos: i128 = self.counts.iter().map(|&t| t.max(0)).sum();
        t + (pos - t.max(0))
    }

    fn check(&self, key: usize, estimate: isize, what: &str) {
        let t = self.counts[key];
        assert!(
            (FLOOR..=CEILING).contains(&estimate),
            "{what}: key {key} estimate {estimate} outside the counter range"
        );
        if self.saturated[key] {
            assert_eq!(
                estimate, CEILING,
                "{what}: key {key} (count {t}) saturated, so its estimate must stay at the ceiling"
            );
        }
        let low = self.low(key).clamp(FLOOR as i128, CEILING as i128) as isize;
        assert!(
            estimate >= low,
            "{what}: key {key} under-counted: estimate {estimate} < {low} (count {t}, counts {:?})",
            self.counts
        );
        if !self.maybe_clamped {
            let high = self.high(key);
            assert!(
                estimate as i128 <= high,
                "{what}: key {key} over what all keys counted: {estimate} > {high} (counts {:?})",
                self.counts
            );
        }
    }
}

/// Runs `input` against a sketch and [`SketchModel`] (Properties 1, 3 and 8 of
/// docs/architecture.md).
///
/// Checks after every operation, for every key: never below the true count (given the other
/// keys' negative counts), saturation at `isize::MAX / 2` that sticks until `reset`, never
/// above what all keys together counted, `incr` returns what `get` reads, `get(&key)` reads
/// what `get(key)` does, no panic whatever the values, and fixed memory.
pub fn run(input: &EstimatorInput) {
    let rows = 1 + usize::from(input.rows % 4);
    let columns = 1 + usize::from(input.columns % 64);
    let sketch = Estimator::try_new(rows, columns).expect("a small sketch is valid");
    assert_eq!(
        (sketch.rows(), sketch.columns()),
        (rows, columns.next_power_of_two())
    );
    let memory = sketch.memory_bytes();
    let mut model = SketchModel::new(KEYS);
    for op in bounded(&input.ops) {
        match *op {
            EstimatorOp::Get { key: k } => {
                let key = key(k, KEYS);
                model.check(key, sketch.get(key as u64), "get");
            }
            EstimatorOp::Incr { key: k, value } => {
                let (key, value) = (key(k, KEYS), value.get(input.extremes));
                let estimate = sketch.incr(key as u64, value);
                model.add(key, value as i128);
                model.check(key, estimate, "incr's return");
                assert_eq!(
                    estimate,
                    sketch.get(key as u64),
                    "incr returns what get reads"
                );
            }
            EstimatorOp::IncrOne { key: k } => {
                let key = key(k, KEYS);
                let estimate = sketch.incr(key as u64, 1);
                model.add(key, 1);
                model.check(key, estimate, "incr(1)'s return");
            }
            EstimatorOp::Decr { key: k, value } if input.extremes => {
                let (key, value) = (key(k, KEYS), value.get(true));
                sketch.decr(key as u64, value);
                model.add(key, -(value as i128));
            }
            EstimatorOp::Decr { key: k, value } => {
                decr_within(&sketch, &mut model, key(k, KEYS), value.raw)
            }
            EstimatorOp::DecrWithin { key: k, pick } => {
                decr_within(&sketch, &mut model, key(k, KEYS), pick)
            }
            EstimatorOp::GetByReference { key: k } => {
                let key = key(k, KEYS) as u64;
                #[allow(clippy::needless_borrows_for_generic_args)] // the borrow is the point
                let estimate = sketch.get(&key);
                model.check(key as usize, estimate, "get(&key)");
                assert_eq!(
                    estimate,
                    sketch.get(key),
                    "get(&key) reads what get(key) does"
                );
            }
            EstimatorOp::Reset => {
                sketch.reset();
                model = SketchModel::new(KEYS);
            }
        }
        for key in 0..KEYS {
            model.check(key, sketch.get(key as u64), "get after the operation");
        }
    }
    assert_eq!(sketch.memory_bytes(), memory, "memory is fixed");
}

/// A decrement that keeps the key's count non-negative: `pick % (count + 1)`.
fn decr_within(sketch: &Estimator, model: &mut SketchModel, key: usize, pick: u64) {
    let t = model.counts[key];
    let value = if t <= 0 {
        0
    } else {
        (i128::from(pick) % (t + 1)).min(isize::MAX as i128)
    };
    sketch.decr(key as u64, value as isize);
    model.add(key, -value);
}

/// The scenarios worth keeping by name (replayed by `tests/fuzz_corpus.rs`).
pub fn seeds() -> Vec<(&'static str, EstimatorInput)> {
    use EstimatorOp::*;
    let input = |rows: u8, columns: u8, ops| EstimatorInput {
        rows: rows - 1,
        columns: columns - 1,
        extremes: true,
        ops,
    };
    // `EXTREMES[i]` of `Value::get`, a small value and a negative one.
    let extreme = |i: u8| Value {
        tag: 160 + i,
        raw: 0,
    };
    let small = |v: u8| Value { tag: v, raw: 0 };
    let neg = |v: u8| Value {
        tag: 128 + v,
        raw: 0,
    };
    vec![
        (
            "saturate-and-stick",
            input(
                2,
                8,
                vec![
                    Incr {
                        key: 0,
                        value: extreme(0),
                    },
                    Get { key: 0 },
                    Decr {
                        key: 0,
                        value: small(1),
                    },
                    Decr {
                        key: 0,
                        value: extreme(0),
                    },
                    Decr {
                        key: 0,
                        value: extreme(1),
                    },
                    IncrOne { key: 1 },
                    Reset,
                    IncrOne { key: 0 },
                ],
            ),
        ),
        (
            "cross-the-ceiling",
            input(
                1,
                4,
                vec![
                    Incr {
                        key: 0,
                        value: extreme(7),
                    },
                    IncrOne { key: 0 },
                    IncrOne { key: 0 },
                    Decr {
                        key: 0,
                        value: small(5),
                    },
                    Incr {
                        key: 2,
                        value: extreme(5),
                    },
                ],
            ),
        ),
        (
            "fast-step-edges",
            input(
                2,
                2,
                vec![
                    Incr {
                        key: 0,
                        value: extreme(12),
                    },
                    Incr {
                        key: 0,
                        value: extreme(13),
                    },
                    Incr {
                        key: 0,
                        value: extreme(14),
                    },
                    Decr {
                        key: 0,
                        value: extreme(14),
                    },
                    DecrWithin {
                        key: 0,
                        pick: 12345,
                    },
                ],
            ),
        ),
        (
            "floor-and-min",
            input(
                1,
                1,
                vec![
                    Decr {
                        key: 0,
                        value: extreme(0),
                    },
                    Incr {
                        key: 0,
                        value: small(3),
                    },
                    Decr {
                        key: 1,
                        value: extreme(9),
                    },
                    Incr {
                        key: 0,
                        value: extreme(1),
                    },
                    Reset,
                    Incr {
                        key: 3,
                        value: extreme(1),
                    },
                    Decr {
                        key: 4,
                        value: extreme(1),
                    },
                    Decr {
                        key: 4,
                        value: extreme(1),
                    },
                ],
            ),
        ),
        (
            "negative-then-back",
            input(
                1,
                1,
                vec![
                    Incr {
                        key: 0,
                        value: neg(5),
                    },
                    Incr {
                        key: 1,
                        value: small(9),
                    },
                    Incr {
                        key: 0,
                        value: small(5),
                    },
                    GetByReference { key: 1 },
                ],
            ),
        ),
        (
            "one-column-collisions",
            input(
                1,
                1,
                (0..36)
                    .map(|i| IncrOne { key: i % 12 })
                    .chain((0..12).map(|k| DecrWithin {
                        key: k,
                        pick: 7 * u64::from(k) + 1,
                    }))
                    .collect(),
            ),
        ),
        (
            "shifted-and-raw-values",
            input(
                4,
                3,
                vec![
                    Incr {
                        key: 0,
                        value: Value {
                            tag: 192 + 31,
                            raw: 0xFFFF,
                        },
                    },
                    Incr {
                        key: 1,
                        value: Value {
                            tag: 192 + 30,
                            raw: 0xFFFF,
                        },
                    },
                    Incr {
                        key: 2,
                        value: Value {
                            tag: 224,
                            raw: 1 << 62,
                        },
                    },
                    Incr {
                        key: 2,
                        value: Value {
                            tag: 224,
                            raw: 1 << 62,
                        },
                    },
                    Decr {
                        key: 5,
                        value: Value {
                            tag: 224,
                            raw: 1 << 63,
                        },
                    },
                ],
            ),
        ),
    ]
}
