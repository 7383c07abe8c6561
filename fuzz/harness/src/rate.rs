//! `Rate`: operations, the exact model of events per window and key, and the checks.

use std::collections::BTreeMap;
use std::time::Duration;

use arbitrary::Arbitrary;
use floodgate::{rate::RateComponents, rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN, Rate};

use super::time::{Advance, Time};
use super::{bounded, cap, key, Amount, CEILING, TICK_NANOS};

/// Sub-window lengths: a tick, not a whole number of ticks, and longer.
const BUCKETS: [u64; 10] = [
    TICK_NANOS,
    TICK_NANOS,
    TICK_NANOS + 1,
    15_000_000,
    25_000_000,
    25_000_003,
    35_000_000,
    100_000_000,
    200_000_000,
    1_000_000_000,
];
/// Sub-windows per window.
const SUB_WINDOWS: [u64; 8] = [1, 1, 1, 2, 3, 4, 5, 64];

/// A `Rate` of `SUB_WINDOWS[k]` sub-windows of `BUCKETS[bucket]` each, a sketch of
/// `1 + rows % 4` rows × `1 + columns % 16` columns (or 1024), `1 + keys % 5` keys, created
/// `offset % 50 ms` after the clock, and the operations on it.
#[derive(Arbitrary, Debug, Clone)]
pub struct RateInput {
    pub k: u8,
    pub bucket: u8,
    pub rows: u8,
    pub columns: u8,
    pub keys: u8,
    pub offset: u32,
    pub ops: Vec<RateOp>,
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum RateOp {
    Observe {
        key: u8,
        events: Amount,
    },
    Advance(Advance),
    /// Advance to the next window boundary, where the clock's ticks clear slots, and observe 1.
    ObserveAtBoundary {
        key: u8,
    },
    /// `advance(0)`: a tick at the same time must not clear a live window.
    AdvanceZero,
    /// `sliding_rate` is `rate_with(PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`.
    SlidingRate {
        key: u8,
    },
}

/// Events per sub-window and key, with `Rate`'s window arithmetic.
struct RateModel {
    start: u64,
    bucket_nanos: u64,
    k: u64,
    keys: usize,
    counts: BTreeMap<u64, Vec<i128>>,
}

impl RateModel {
    fn bucket(&self, now: u64) -> u64 {
        (now - self.start) / self.bucket_nanos
    }

    /// How far into its sub-window `now` is, computed as `Rate` documents it.
    fn fraction(&self, now: u64) -> f64 {
        let into = now - self.start - self.bucket(now) * self.bucket_nanos;
        into as f64 / self.bucket_nanos as f64
    }

    /// The least and the most `key`'s estimate over buckets `first..end` can be: at least its
    /// own events (each bucket capped at the ceiling), at most all keys' events. With one key
    /// they meet: every count is exact.
    fn bounds(&self, key: usize, first: u64, end: u64) -> (isize, isize) {
        let (mut low, mut high) = (0i128, 0i128);
        for (_, counts) in self.counts.range(first..end) {
            low += counts[key].min(CEILING as i128);
            high += counts.iter().sum::<i128>().min(CEILING as i128);
        }
        (cap(low), cap(high))
    }

    fn observe(&mut self, now: u64, key: usize, events: isize) {
        let bucket = self.bucket(now);
        let keys = self.keys;
        self.counts.entry(bucket).or_insert_with(|| vec![0; keys])[key] += events as i128;
        // Forget buckets no reader looks at any more.
        let keep = bucket.saturating_sub(self.k + 1);
        self.counts = self.counts.split_off(&keep);
    }

    /// The buckets of the current window at `now`.
    fn current(&self, now: u64) -> (u64, u64) {
        let b = self.bucket(now);
        ((b + 1).saturating_sub(self.k), b + 1)
    }
}

fn check_between(what: &str, key: usize, value: isize, (low, high): (isize, isize)) {
    assert!(
        value >= low,
        "{what} of key {key}: {value} under-counts (at least {low} were observed)"
    );
    assert!(
        value <= high,
        "{what} of key {key}: {value} over-counts (all keys together observed only {high})"
    );
}

/// Runs `input` against a `Rate` on a `ManualClock` and the exact events per window
/// (Properties 1, 3 and 6 of docs/architecture.md).
///
/// Checks after every operation, for every key: `observe` and `peek` are at least the key's
/// events in the current window and at most all keys' events in it (nothing left over from a
/// window that ended, however many were skipped); `rate()·interval` likewise for the previous
/// complete window; `rate_with` gets the previous and current counts within the same bounds,
/// the interval, and exactly the fraction of the sub-window elapsed; with one key the bounds
/// meet, so every count is exact; memory is fixed.
pub fn run(input: &RateInput) {
    let k = SUB_WINDOWS[usize::from(input.k) % SUB_WINDOWS.len()];
    let bucket_nanos = BUCKETS[usize::from(input.bucket) % BUCKETS.len()];
    let rows = 1 + usize::from(input.rows % 4);
    let columns = match input.columns % 17 {
        16 => 1024,
        c => 1 + usize::from(c),
    };
    let keys = 1 + usize::from(input.keys % 5);
    let interval = Duration::from_nanos(bucket_nanos * k);

    let mut time = Time::new();
    time.advance(u64::from(input.offset) % 50_000_000);
    let rate = Rate::builder(interval)
        .estimator(rows, columns)
        .sub_windows(k as usize)
        .clock(&time.clock)
        .build()
        .expect("a valid rate configuration");
    assert_eq!(rate.interval(), interval);
    let memory = rate.memory_bytes();
    let mut model = RateModel {
        start: time.now,
        bucket_nanos,
        k,
        keys,
        counts: BTreeMap::new(),
    };
    let max_windows = 2 * (k + 3) + 2;
    for op in bounded(&input.ops) {
        match *op {
            RateOp::Observe { key: id, events } => {
                let (key, events) = (key(id, keys), events.get(true));
                let current = model.current(time.now);
                let observed = rate.observe(&(key as u64), events);
                model.observe(time.now, key, events);
                let (first, end) = current;
                check_between("observe", key, observed, model.bounds(key, first, end));
            }
            RateOp::Advance(by) => time.advance_by(by, model.start, bucket_nanos, max_windows),
            RateOp::ObserveAtBoundary { key: id } => {
                let key = key(id, keys);
                time.advance(bucket_nanos - (time.now - model.start) % bucket_nanos);
                let observed = rate.observe(&(key as u64), 1);
                model.observe(time.now, key, 1);
                let (first, end) = model.current(time.now);
                let bounds = model.bounds(key, first, end);
                check_between("observe at a boundary", key, observed, bounds);
            }
            RateOp::AdvanceZero => time.clock.advance(Duration::ZERO),
            RateOp::SlidingRate { key: id } => {
                let id = key(id, keys) as u64;
                let parts: RateComponents = rate.rate_with(&id, |parts| parts);
                assert_eq!(
                    rate.sliding_rate(&id),
                    PROPORTIONAL_RATE_ESTIMATE_CALC_FN(parts),
                    "sliding_rate is rate_with(PROPORTIONAL_RATE_ESTIMATE_CALC_FN)"
                );
            }
        }
        check(&rate, &model, time.now, interval);
    }
    assert_eq!(rate.memory_bytes(), memory, "memory is fixed");
}

fn check(rate: &Rate, model: &RateModel, now: u64, interval: Duration) {
    let k = model.k;
    let b = model.bucket(now);
    let (first, end) = model.current(now);
    let secs = interval.as_secs_f64();
    for key in 0..model.keys {
        let id = key as u64;
        let current = model.bounds(key, first, end);
        check_between("peek", key, rate.peek(&id), current);

        // rate(): the last complete window, buckets b−k ..= b−1 (none before the Rate began).
        let (low, high) = model.bounds(key, b.saturating_sub(k), b);
        let r = rate.rate(&id);
        assert!(
            r >= low as f64 / secs,
            "rate of key {key}: {r}/s · {secs} s under-counts {low} events of the last window"
        );
        assert!(
            r <= high as f64 / secs,
            "rate of key {key}: {r}/s · {secs} s over-counts: all keys had {high} events"
        );

        let parts: RateComponents = rate.rate_with(&id, |parts| parts);
        assert_eq!(parts.interval, interval, "rate_with's interval");
        check_between("rate_with's curr_samples", key, parts.curr_samples, current);
        // The sub-window just before the current window.
        let prev = match (b + 1).checked_sub(k + 1) {
            Some(p) => model.bounds(key, p, p + 1),
            None => (0, 0),
        };
        check_between("rate_with's prev_samples", key, parts.prev_samples, prev);
        assert_eq!(
            parts.current_interval_fraction,
            model.fraction(now),
            "rate_with's fraction"
        );
        assert_eq!(
            rate.sliding_rate(&id),
            PROPORTIONAL_RATE_ESTIMATE_CALC_FN(parts),
            "sliding_rate is rate_with(PROPORTIONAL_RATE_ESTIMATE_CALC_FN)"
        );
    }
}

/// The scenarios worth keeping by name (replayed by `tests/fuzz_corpus.rs`).
pub fn seeds() -> Vec<(&'static str, RateInput)> {
    use super::time::Advance as By;
    use RateOp::*;
    // `k` and `bucket` index `SUB_WINDOWS` and `BUCKETS`; sizes and keys as they are.
    let input = |k, bucket, (rows, columns): (u8, u8), keys: u8, offset, ops| RateInput {
        k,
        bucket,
        rows: rows - 1,
        columns: columns - 1,
        keys: keys - 1,
        offset,
        ops,
    };
    let observe = |key, n: u8| Observe {
        key,
        events: Amount { tag: n, raw: 0 },
    };
    let saturate = Observe {
        key: 0,
        events: Amount { tag: 240, raw: 0 },
    };
    vec![
        (
            "plain-boundaries",
            input(
                0,
                0,
                (2, 16),
                2,
                0,
                vec![
                    observe(0, 3),
                    RateOp::Advance(By::BeforeBoundary),
                    observe(0, 1),
                    RateOp::Advance(By::ToBoundary),
                    observe(0, 1),
                    SlidingRate { key: 0 },
                    RateOp::Advance(By::AfterBoundary),
                    observe(1, 1),
                ],
            ),
        ),
        (
            "window-gap",
            input(
                0,
                7,
                (2, 16),
                1,
                0,
                vec![
                    observe(0, 3),
                    observe(0, 3),
                    RateOp::Advance(By::Windows(7, 0)),
                    observe(0, 1),
                    RateOp::Advance(By::Windows(9, 999)),
                    observe(0, 1),
                ],
            ),
        ),
        (
            "every-slot-reused",
            input(
                0,
                0,
                (2, 16),
                1,
                0,
                (0..12).map(|_| ObserveAtBoundary { key: 0 }).collect(),
            ),
        ),
        (
            "sub-windows-3-off-tick",
            input(
                4,
                5,
                (1, 4),
                3,
                123_456,
                vec![
                    observe(0, 2),
                    ObserveAtBoundary { key: 1 },
                    ObserveAtBoundary { key: 2 },
                    ObserveAtBoundary { key: 0 },
                    RateOp::Advance(By::Fraction(128)),
                    RateOp::Advance(By::Windows(5, 0)),
                ],
            ),
        ),
        (
            "sub-windows-64",
            input(
                7,
                0,
                (1, 2),
                2,
                0,
                (0..70)
                    .map(|i| ObserveAtBoundary { key: i % 2 })
                    .chain([RateOp::Advance(By::Many(127))])
                    .collect(),
            ),
        ),
        (
            "saturate-a-window",
            input(
                3,
                3,
                (1, 1),
                2,
                0,
                vec![
                    saturate,
                    saturate,
                    Observe {
                        key: 1,
                        events: Amount { tag: 243, raw: 0 },
                    },
                    ObserveAtBoundary { key: 0 },
                    ObserveAtBoundary { key: 0 },
                    RateOp::Advance(By::Windows(5, 0)),
                ],
            ),
        ),
        (
            "one-second",
            input(
                0,
                9,
                (3, 16),
                1,
                39_999_999,
                vec![
                    observe(0, 2),
                    RateOp::Advance(By::Micros(65535)),
                    observe(0, 1),
                    RateOp::Advance(By::Fraction(255)),
                    RateOp::Advance(By::BeforeBoundary),
                    observe(0, 1),
                    RateOp::Advance(By::Nanos(1)),
                    observe(0, 1),
                ],
            ),
        ),
        (
            "ticks-not-aligned",
            input(
                3,
                2,
                (2, 3),
                4,
                7,
                vec![
                    observe(3, 1),
                    RateOp::Advance(By::Tick),
                    observe(2, 1),
                    RateOp::Advance(By::Tick),
                    observe(1, 1),
                    RateOp::Advance(By::Tick),
                    observe(0, 1),
                    AdvanceZero,
                ],
            ),
        ),
        (
            "eighths-and-nudges",
            input(
                6,
                8,
                (4, 16),
                1,
                0,
                vec![
                    Observe {
                        key: 0,
                        events: Amount {
                            tag: 200,
                            raw: 1000,
                        },
                    },
                    RateOp::Advance(By::Eighths {
                        whole: 1,
                        eighths: 7,
                        nudge: -2,
                    }),
                    observe(0, 3),
                    RateOp::Advance(By::Eighths {
                        whole: 0,
                        eighths: 1,
                        nudge: 2,
                    }),
                    observe(0, 3),
                    RateOp::Advance(By::Many(0)),
                ],
            ),
        ),
    ]
}
