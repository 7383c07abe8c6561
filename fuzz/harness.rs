//! Fuzz harnesses for floodgate: each turns arbitrary bytes into a sequence of operations,
//! runs it against the crate and against an exact model, and panics when a property of
//! docs/architecture.md ("Properties that must hold everywhere") is violated.
//!
//! Plain Rust on floodgate and std only, so the same functions run under libFuzzer
//! (`fuzz/fuzz_targets/*.rs`, through cargo-fuzz) and as an ordinary stable test over the
//! committed corpus (`tests/fuzz_corpus.rs`).
//!
//! # Input format
//!
//! A tiny hand-written decoder, deterministic and total: every byte string is a valid input.
//! Each harness reads a few header bytes (sizes, limits), then operations until the bytes run
//! out (at most [`MAX_OPS`]); a read past the end yields zero. Every operation starts with one
//! opcode byte, so every input terminates. `fuzz/gen_corpus.py` writes the seed corpus in this
//! format and documents the opcodes of each harness.
//!
//! # Models
//!
//! Counts are modelled exactly in `i128`; the sketches' hashing is keyed with random seeds per
//! instance, so which keys collide differs from run to run. Every check therefore holds for
//! *any* collision pattern: lower bounds (never under-count) from the key's own count, upper
//! bounds (only what was counted, nothing stale) from the total of all keys.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::rate::{MAX_INTERVAL, MAX_SUB_WINDOWS};
use floodgate::{
    BorrowedGuard, ConfigError, Estimator, Guard, Inflight, Limiter, OwnedPermit, Permit, Rate,
    RateComponents, Reason, PROPORTIONAL_RATE_ESTIMATE_CALC_FN,
};

/// The most operations one input runs.
pub const MAX_OPS: usize = 1024;

/// Where counters saturate (`Estimator` docs: "Counters saturate at `isize::MAX / 2`").
const CEILING: isize = isize::MAX / 2;
/// The lowest a counter goes (decrements without matching increments).
const FLOOR: isize = -CEILING;
/// Whether the estimator harness also reads keys by reference (`get(&key)`, which must read
/// what `get(key)` reads). A regression check: on nightly Rust, as libFuzzer builds are,
/// ahash's `hash_one` is specialised by type, and hashing through it made `&u64` and `&&u64`
/// hash differently; `Estimator` now hashes through `Hasher` alone.
const GET_BY_REFERENCE: bool = true;
/// One tick of the coarse clock, in nanoseconds (`floodgate::clock::TICK`).
const TICK_NANOS: u64 = 10_000_000;
/// Ticks of simulated time one input may advance a `ManualClock` by: each 10 ms boundary
/// crossed runs a tick, so this bounds the work of one input.
const TICK_BUDGET: u64 = 20_000;
/// Slack for sliding-window counts computed in floating point.
const EPS: f64 = 1e-9;
/// Construction never allocates more counters than this (64 MiB of `isize`).
const ALLOC_CAP_COUNTERS: usize = 1 << 23;

// ---------------------------------------------------------------------------------------------
// The byte decoder.

/// Reads the fuzzer's bytes front to back; past the end every read yields zero.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Bytes<'a> {
    fn new(data: &'a [u8]) -> Self {
        Bytes { data, pos: 0 }
    }

    fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn u8(&mut self) -> u8 {
        let byte = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        byte
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// A number in `0..n` (`n` at most 256) from one byte.
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// A signed count for `Estimator::incr`/`decr`: mostly small, sometimes extreme.
    fn value(&mut self) -> isize {
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
        let tag = self.u8();
        match tag >> 5 {
            0..=3 => isize::from(tag & 31),
            4 => -isize::from(tag & 31),
            5 => EXTREMES[usize::from(tag & 15)],
            6 => (self.u16() as isize) << (tag & 31),
            _ => self.u64() as isize,
        }
    }

    /// A non-negative amount: mostly 0..=3, sometimes large enough to saturate.
    fn amount(&mut self) -> isize {
        const LARGE: [isize; 8] = [
            CEILING,
            CEILING / 2,
            CEILING / 3 + 1,
            isize::MAX,
            1 << 42,
            (1 << 42) + 1,
            CEILING - 1,
            1000,
        ];
        let tag = self.u8();
        if tag < 240 {
            isize::from(tag % 4)
        } else {
            LARGE[usize::from(tag % 8)]
        }
    }

    /// A size for a constructor: small, 16-bit, a power of two or anything.
    fn size(&mut self) -> usize {
        let tag = self.u8();
        match tag >> 6 {
            0 => usize::from(tag & 63),
            1 => usize::from(self.u16()),
            2 => 1usize.checked_shl(u32::from(tag & 63)).unwrap_or(0),
            _ => self.u64() as usize,
        }
    }

    /// A float for ε, δ or a promotion threshold: the edges of (0, 1), or any bit pattern.
    fn float(&mut self) -> f64 {
        const SPECIAL: [f64; 16] = [
            0.0,
            1.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MIN_POSITIVE,
            5e-324,
            1e-9,
            0.5,
            1.0 - f64::EPSILON,
            1.0 + f64::EPSILON,
            0.01,
            2.0,
            -0.5,
            1e-300,
        ];
        let tag = self.u8();
        match tag >> 6 {
            0 => SPECIAL[usize::from(tag & 15)],
            1 | 2 => (f64::from(self.u16()) + 1.0) / 65537.0,
            _ => f64::from_bits(self.u64()),
        }
    }

    /// An interval for a rate: the edges of the allowed range, or any length.
    fn interval(&mut self) -> Duration {
        const SPECIAL: [Duration; 12] = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_nanos(TICK_NANOS - 1),
            Duration::from_nanos(TICK_NANOS),
            Duration::from_nanos(TICK_NANOS + 1),
            Duration::from_millis(20),
            Duration::from_millis(640),
            Duration::from_secs(1),
            MAX_INTERVAL,
            Duration::from_nanos(1).saturating_add(MAX_INTERVAL),
            Duration::MAX,
            Duration::from_secs(u64::MAX / 2),
        ];
        let tag = self.u8();
        match tag >> 6 {
            0 => SPECIAL[usize::from(tag & 15) % SPECIAL.len()],
            1 => Duration::from_millis(10 * u64::from(self.u8())),
            2 => Duration::from_nanos(u64::from(self.u32())),
            _ => Duration::new(self.u64(), self.u32() % 1_000_000_000),
        }
    }
}

/// The tolerance for comparing a count near `x` computed two ways in floating point.
fn slack(x: f64) -> f64 {
    EPS * x.abs().max(1.0)
}

fn clamp_count(x: i128) -> isize {
    x.clamp(FLOOR as i128, CEILING as i128) as isize
}

/// `x` capped at `isize::MAX`, as saturating sums of estimates are.
fn cap(x: i128) -> isize {
    x.min(isize::MAX as i128) as isize
}

// ---------------------------------------------------------------------------------------------
// Estimator.

/// The exact counts behind one sketch, and what they imply for every estimate.
///
/// Counter `c` in a key's column holds the sum `S` of the true counts of the keys that share
/// that column, unless it was clamped: raised to `FLOOR`, or saturated at `CEILING` (sticky).
/// So, with `t` the key's count and `neg`/`pos` the sums of the other keys' negative/positive
/// counts, `S ∈ [t + neg, t + pos]`, and
/// - always: `estimate ≥ clamp(t + neg)`, and `estimate = CEILING` once `t + neg` exceeded it;
/// - while no counter can have been clamped since the last reset: `estimate ≤ t + pos`.
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

    fn reset(&mut self) {
        let keys = self.counts.len();
        *self = SketchModel::new(keys);
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
        let low = clamp_count(self.low(key));
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

/// `Estimator`: `incr`/`decr`/`get`/`reset` over 6 keys on a sketch of 1–4 rows × 1–64 columns,
/// with values from 0 to the extremes of `isize`.
///
/// Checks, after every operation and for every key, against [`SketchModel`]: never below the
/// true count (given the other keys' negative counts), saturation at `isize::MAX / 2` that
/// sticks until `reset`, never above what all keys together counted, `incr` returns what `get`
/// reads, and no panic whatever the values.
pub fn estimator(data: &[u8]) {
    const KEYS: usize = 6;
    let mut input = Bytes::new(data);
    let rows = 1 + input.below(4);
    let columns = 1 + input.below(64);
    let sketch = Estimator::try_new(rows, columns).expect("a small sketch is valid");
    assert_eq!(
        (sketch.rows(), sketch.columns()),
        (rows, columns.next_power_of_two())
    );
    let memory = sketch.memory_bytes();
    let mut model = SketchModel::new(KEYS);
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        let key = input.below(KEYS);
        let k = key as u64;
        match op % 8 {
            0 | 1 => {
                let value = input.value();
                let estimate = sketch.incr(k, value);
                model.add(key, value as i128);
                model.check(key, estimate, "incr's return");
                assert_eq!(estimate, sketch.get(k), "incr returns what get reads");
            }
            2 => {
                let value = input.value();
                sketch.decr(k, value);
                model.add(key, -(value as i128));
            }
            3 => {
                // A decrement that keeps the key's count non-negative.
                let t = model.counts[key];
                let pick = i128::from(input.u64());
                let value = if t <= 0 {
                    0
                } else {
                    (pick % (t + 1)).min(isize::MAX as i128)
                };
                sketch.decr(k, value as isize);
                model.add(key, -value);
            }
            4 => {
                let estimate = sketch.get(k);
                model.check(key, estimate, "get");
            }
            5 => {
                sketch.reset();
                model.reset();
            }
            6 => {
                let estimate = sketch.incr(k, 1);
                model.add(key, 1);
                model.check(key, estimate, "incr(1)'s return");
            }
            _ => {
                // The key by reference: `&u64` hashes as `u64` does, so it must read the same
                // counters (see `GET_BY_REFERENCE`).
                #[allow(clippy::needless_borrows_for_generic_args)] // the borrow is the point
                let estimate = if GET_BY_REFERENCE {
                    sketch.get(&k)
                } else {
                    sketch.get(k)
                };
                model.check(key, estimate, "get(&key)");
            }
        }
        for key in 0..KEYS {
            model.check(key, sketch.get(key as u64), "get after the operation");
        }
    }
    assert_eq!(sketch.memory_bytes(), memory, "memory is fixed");
}

// ---------------------------------------------------------------------------------------------
// Inflight.

enum AnyGuard<'a> {
    Borrowed(BorrowedGuard<'a>),
    Owned(Guard),
}

impl AnyGuard<'_> {
    fn incr(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.incr(),
            AnyGuard::Owned(g) => g.incr(),
        }
    }

    fn get(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.get(),
            AnyGuard::Owned(g) => g.get(),
        }
    }
}

struct HeldGuard<'a> {
    key: usize,
    unit: i128,
    /// Everything this guard added: what its drop gives back.
    total: i128,
    guard: AnyGuard<'a>,
}

/// `Inflight`: `incr` and `incr_borrowed` (owned and borrowed guards), `Guard::incr`, dropping guard i, dropping
/// all, `get`, over 5 keys on a sketch of 1–4 rows × 1–32 columns; amounts mostly 0–3,
/// sometimes large enough to saturate.
///
/// Checks after every operation: every key's estimate is at least its true number in flight
/// (and stays at the ceiling once that number passed it); without saturation, at most the
/// number in flight of all keys, so 0 for every key when every guard has dropped; each live
/// guard's `get` equals `Inflight::get` of its key; `incr` returns what `get` reads.
pub fn inflight(data: &[u8]) {
    const KEYS: usize = 5;
    const MAX_GUARDS: usize = 256;
    let mut input = Bytes::new(data);
    let rows = 1 + input.below(4);
    let columns = 1 + input.below(32);
    let inflight = Inflight::with_size(rows, columns).expect("a small size is valid");
    let memory = inflight.memory_bytes();
    let mut guards: Vec<HeldGuard<'_>> = Vec::new();
    // Whether the total in flight ever passed the ceiling (some counter may have saturated).
    let mut maybe_saturated = false;
    let mut saturated = [false; KEYS];
    let in_flight = |guards: &[HeldGuard<'_>], key: usize| -> i128 {
        guards
            .iter()
            .filter(|g| g.key == key)
            .map(|g| g.total)
            .sum()
    };
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        match op % 8 {
            0..=2 => {
                let key = input.below(KEYS);
                let value = input.amount();
                if guards.len() < MAX_GUARDS {
                    let (guard, estimate) = if op & 0x80 != 0 {
                        let (g, n) = inflight.incr(key as u64, value);
                        (AnyGuard::Owned(g), n)
                    } else {
                        let (g, n) = inflight.incr_borrowed(key as u64, value);
                        (AnyGuard::Borrowed(g), n)
                    };
                    guards.push(HeldGuard {
                        key,
                        unit: value as i128,
                        total: value as i128,
                        guard,
                    });
                    let true_count = in_flight(&guards, key);
                    assert!(
                        estimate as i128 >= true_count.min(CEILING as i128),
                        "incr returned {estimate} < {true_count} in flight for key {key}"
                    );
                    assert_eq!(estimate, inflight.get(key as u64), "incr returns get");
                }
            }
            3 | 4 => {
                let i = input.u8();
                if !guards.is_empty() {
                    let held = guards.remove(usize::from(i) % guards.len());
                    drop(held);
                }
            }
            5 => {
                let i = input.u8();
                if !guards.is_empty() {
                    let i = usize::from(i) % guards.len();
                    let estimate = guards[i].guard.incr();
                    guards[i].total += guards[i].unit;
                    let key = guards[i].key;
                    let true_count = in_flight(&guards, key);
                    assert!(
                        estimate as i128 >= true_count.min(CEILING as i128),
                        "Guard::incr returned {estimate} < {true_count} in flight for key {key}"
                    );
                }
            }
            6 => {
                // Drop everything, newest first or oldest first.
                if op & 0x80 != 0 {
                    guards.reverse();
                }
                guards.clear();
            }
            _ => {
                let key = input.below(KEYS);
                let _ = inflight.get(key as u64);
            }
        }
        let total: i128 = guards.iter().map(|g| g.total).sum();
        if total > CEILING as i128 {
            maybe_saturated = true;
        }
        for (key, saturated) in saturated.iter_mut().enumerate() {
            let true_count = in_flight(&guards, key);
            if true_count > CEILING as i128 {
                *saturated = true;
            }
            let estimate = inflight.get(key as u64);
            assert!(
                (0..=CEILING).contains(&estimate),
                "key {key}: estimate {estimate} out of range"
            );
            assert!(
                estimate as i128 >= true_count.min(CEILING as i128),
                "key {key} under-counted: estimate {estimate} < {true_count} in flight"
            );
            if *saturated {
                assert_eq!(
                    estimate, CEILING,
                    "key {key} saturated: must stay saturated"
                );
            }
            if !maybe_saturated {
                assert!(
                    estimate as i128 <= total,
                    "key {key}: estimate {estimate} > {total} in flight for all keys together \
                     (guards do not balance)"
                );
            }
        }
        for held in &guards {
            assert_eq!(
                held.guard.get(),
                inflight.get(held.key as u64),
                "Guard::get and Inflight::get disagree"
            );
        }
    }
    drop(guards);
    if !maybe_saturated {
        for key in 0..KEYS {
            assert_eq!(
                inflight.get(key as u64),
                0,
                "key {key}: every guard dropped, count must be back at 0"
            );
        }
    }
    assert_eq!(inflight.memory_bytes(), memory, "memory is fixed");
}

// ---------------------------------------------------------------------------------------------
// Time, for Rate and Limiter.

/// A `ManualClock` and the model's copy of its time.
struct Time {
    clock: ManualClock,
    /// Nanoseconds since the clock was made.
    now: u64,
    /// Simulated time budget left, in ticks.
    budget: u64,
}

impl Time {
    fn new() -> Self {
        Time {
            clock: ManualClock::new(),
            now: 0,
            budget: TICK_BUDGET,
        }
    }

    /// Advances by `nanos`, unless the input has used up its budget of ticks.
    fn advance(&mut self, nanos: u64) {
        let ticks = nanos / TICK_NANOS + 1;
        if ticks > self.budget {
            return;
        }
        self.budget -= ticks;
        self.clock.advance(Duration::from_nanos(nanos));
        self.now += nanos;
        assert_eq!(
            self.clock.now(),
            Duration::from_nanos(self.now),
            "ManualClock::now"
        );
    }

    /// One of the advances an operation can ask for, relative to windows of `bucket` ns
    /// anchored at `start`: a little, to a boundary (exactly, or a nanosecond either side),
    /// a fraction of a window, or several windows.
    fn advance_by(&mut self, input: &mut Bytes<'_>, start: u64, bucket: u64, max_buckets: u64) {
        let elapsed = self.now - start;
        let to_boundary = bucket - elapsed % bucket;
        let nanos = match input.u8() % 8 {
            0 => u64::from(input.u16()),
            1 => u64::from(input.u16()) * 1000,
            2 => to_boundary,
            3 => to_boundary.saturating_sub(1),
            4 => to_boundary + 1,
            5 => bucket * u64::from(input.u8()) / 256,
            6 => bucket * (1 + u64::from(input.u8()) % max_buckets) + u64::from(input.u16()),
            _ => TICK_NANOS,
        };
        self.advance(nanos);
    }
}

// ---------------------------------------------------------------------------------------------
// Rate.

/// Events per bucket and key, with `Rate`'s window arithmetic.
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

    fn fraction(&self, now: u64) -> f64 {
        let elapsed = now - self.start;
        let into = elapsed - self.bucket(now) * self.bucket_nanos;
        into as f64 / self.bucket_nanos as f64
    }

    /// The least and the most `key`'s estimate over buckets `first..end` can be: at least its
    /// own events (each bucket capped at the ceiling), at most all keys' events.
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

/// `Rate`: `observe`/`peek`/`rate`/`rate_with`/`sliding_rate` for up to 4 keys and
/// `ManualClock` advances (a little, to a window boundary and a nanosecond either side, several
/// windows at once), plain or with 2–4 or 64 sub-windows, windows of 10 ms to 1 s (some not a
/// whole number of ticks), a sketch of 1–3 rows × 1–16 columns, created at an offset from the
/// clock's ticks.
///
/// Checks after every operation, for every key, against the exact events per window: `observe`
/// and `peek` are at least the key's events in the current window and at most all keys'
/// events in it (nothing left over from a window that ended, however many were skipped);
/// `rate()·interval` likewise for the previous complete window; `rate_with` gets the previous
/// and current counts within the same bounds, the interval, and the fraction of the window
/// elapsed; with one key the bounds meet, so every count is exact.
pub fn rate(data: &[u8]) {
    let mut input = Bytes::new(data);
    let k = input.pick(&[1u64, 1, 1, 2, 3, 4, 64]);
    let bucket_nanos = input.pick(&[
        TICK_NANOS,
        TICK_NANOS,
        TICK_NANOS + 1,
        15_000_000,
        25_000_003,
        100_000_000,
        1_000_000_000,
    ]);
    let rows = 1 + input.below(3);
    let columns = 1 + input.below(16);
    let keys = 1 + input.below(4);
    let offset = u64::from(input.u32()) % (4 * TICK_NANOS);
    let interval = Duration::from_nanos(bucket_nanos * k);

    let mut time = Time::new();
    time.advance(offset);
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
    let max_buckets = 2 * (k + 3) + 2;
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        let key = input.below(keys);
        let b = model.bucket(time.now);
        let current = ((b + 1).saturating_sub(k), b + 1);
        match op % 8 {
            0..=2 => {
                let events = input.amount();
                let observed = rate.observe(&(key as u64), events);
                model.observe(time.now, key, events);
                check_between(
                    "observe",
                    key,
                    observed,
                    model.bounds(key, current.0, current.1),
                );
            }
            3 | 4 => time.advance_by(&mut input, model.start, bucket_nanos, max_buckets),
            5 => {
                // Window boundaries are where the clock's ticks clear slots: cross several.
                time.advance(bucket_nanos - (time.now - model.start) % bucket_nanos);
                let observed = rate.observe(&(key as u64), 1);
                model.observe(time.now, key, 1);
                let b = model.bucket(time.now);
                check_between(
                    "observe at a boundary",
                    key,
                    observed,
                    model.bounds(key, (b + 1).saturating_sub(k), b + 1),
                );
            }
            6 => time.clock.advance(Duration::ZERO),
            _ => {
                let parts: RateComponents = rate.rate_with(&(key as u64), |parts| parts);
                assert_eq!(
                    rate.sliding_rate(&(key as u64)),
                    PROPORTIONAL_RATE_ESTIMATE_CALC_FN(parts),
                    "sliding_rate is rate_with(PROPORTIONAL_RATE_ESTIMATE_CALC_FN)"
                );
            }
        }
        check_rate(&rate, &model, time.now, interval);
    }
    assert_eq!(rate.memory_bytes(), memory, "memory is fixed");
}

fn check_rate(rate: &Rate, model: &RateModel, now: u64, interval: Duration) {
    let k = model.k;
    let b = model.bucket(now);
    let first_current = (b + 1).saturating_sub(k);
    let secs = interval.as_secs_f64();
    for key in 0..model.keys {
        let id = key as u64;
        let current = model.bounds(key, first_current, b + 1);
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
        let prev = match (b + 1).checked_sub(k + 1) {
            Some(p) => model.bounds(key, p, p + 1),
            None => (0, 0),
        };
        check_between("rate_with's prev_samples", key, parts.prev_samples, prev);
        let f = parts.current_interval_fraction;
        let expected = model.fraction(now);
        assert!(
            (0.0..1.0).contains(&f) && (f - expected).abs() <= 1e-12,
            "rate_with's fraction {f}, expected {expected}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Limiter.

/// A permit of either kind, held only to be dropped.
enum AnyPermit<'a> {
    Borrowed(#[allow(dead_code)] Permit<'a, u64>),
    Owned(#[allow(dead_code)] OwnedPermit<u64>),
}

/// Exact admitted and offered requests per key.
struct LimiterModel {
    max_inflight: Option<isize>,
    max_rate: Option<(isize, Duration)>,
    start: u64,
    interval_nanos: u64,
    in_flight: Vec<isize>,
    /// Per window: requests admitted, and requests offered (admitted or not), per key.
    admitted: BTreeMap<u64, Vec<i128>>,
    offered: BTreeMap<u64, Vec<i128>>,
    rejected: Vec<u64>,
}

impl LimiterModel {
    /// The current window and how far into it `now` is, as the limiter computes them.
    fn window(&self, now: u64) -> (u64, f64) {
        let elapsed = now - self.start;
        let bucket = elapsed / self.interval_nanos;
        let into = elapsed - bucket * self.interval_nanos;
        (bucket, into as f64 / self.interval_nanos as f64)
    }

    fn count(map: &BTreeMap<u64, Vec<i128>>, bucket: Option<u64>, key: Option<usize>) -> f64 {
        let Some(counts) = bucket.and_then(|b| map.get(&b)) else {
            return 0.0;
        };
        match key {
            Some(key) => counts[key] as f64,
            None => counts.iter().sum::<i128>() as f64,
        }
    }

    /// The sliding-window count `prev·(1−f) + curr` of `map` now, for one key or all.
    fn sliding(&self, map: &BTreeMap<u64, Vec<i128>>, now: u64, key: Option<usize>) -> f64 {
        let (bucket, f) = self.window(now);
        Self::count(map, bucket.checked_sub(1), key) * (1.0 - f)
            + Self::count(map, Some(bucket), key)
    }

    fn record(map: &mut BTreeMap<u64, Vec<i128>>, bucket: u64, key: usize, keys: usize) {
        map.entry(bucket).or_insert_with(|| vec![0; keys])[key] += 1;
        let keep = bucket.saturating_sub(2);
        *map = map.split_off(&keep);
    }
}

/// `Limiter`: `try_acquire`/`try_acquire_owned`, bursts, dropping permit i or all, clock
/// advances, `heavy_hitters` and `stats`, for up to 24 keys, an in-flight limit of 1–6, a rate
/// limit of 1–12 per window of 10 ms to 1 s, or both, promotion thresholds in (0, 1], exact
/// stages of 16–48 keys (so they fill up) and sketches of 1–3 rows × 1–8 columns (so every key
/// collides).
///
/// Checks at every decision, against exact counts of admitted and offered requests:
/// - never admits a key with `max_inflight` permits live, nor one whose exact sliding-window
///   count of admitted requests `prev·(1−f) + curr + 1` would exceed `max_rate`;
/// - always admits when even all keys together are under the limits (sketches only
///   over-count by what other keys did, so a permit that was not given back shows here);
/// - a rejection names a configured limit, an estimate over it and at least the key's exact
///   count, and a retry time for rates only (at most two intervals);
/// - `heavy_hitters` reports bounds at least the exact counts, `stats` stays within capacity;
///   when every permit has dropped, every in-flight bound is back at 0.
pub fn limiter(data: &[u8]) {
    const MAX_PERMITS: usize = 256;
    let mut input = Bytes::new(data);
    let mode = input.below(3);
    let max_inflight = 1 + input.below(6) as isize;
    let interval_nanos = input.pick(&[
        TICK_NANOS,
        TICK_NANOS + 1,
        20_000_000,
        50_000_000,
        100_000_000,
        1_000_000_000,
    ]);
    let interval = Duration::from_nanos(interval_nanos);
    let max_rate = 1 + input.below(12) as isize;
    // Mode 0: in-flight only, 1: rate only, 2: both.
    let max_inflight = (mode != 1).then_some(max_inflight);
    let max_rate = (mode != 0).then_some((max_rate, interval));
    let promotion = (f64::from(input.u8()) + 1.0) / 256.0;
    let capacity = 1 + input.below(48);
    let rows = 1 + input.below(3);
    let columns = 1 + input.below(8);
    let keys = 1 + input.below(24);
    let offset = u64::from(input.u32()) % (4 * TICK_NANOS);

    let mut time = Time::new();
    time.advance(offset);
    let mut builder = Limiter::<u64>::builder()
        .promotion_threshold(promotion)
        .exact_capacity(capacity)
        .sketch(rows, columns)
        .clock(&time.clock);
    if let Some(limit) = max_inflight {
        builder = builder.max_inflight(limit);
    }
    if let Some((limit, interval)) = max_rate {
        builder = builder.max_rate(limit, interval);
    }
    let limiter = builder.build().expect("a valid limiter configuration");
    let memory = limiter.memory_bytes();
    let stats = limiter.stats();
    assert!(stats.exact_capacity >= capacity, "exact capacity rounds up");
    let mut model = LimiterModel {
        max_inflight,
        max_rate,
        start: time.now,
        interval_nanos,
        in_flight: vec![0; keys],
        admitted: BTreeMap::new(),
        offered: BTreeMap::new(),
        rejected: vec![0; keys],
    };
    let mut permits: Vec<(usize, AnyPermit<'_>)> = Vec::new();
    for _ in 0..MAX_OPS {
        if input.is_empty() {
            break;
        }
        let op = input.u8();
        match op % 8 {
            0..=2 => {
                let key = input.below(keys);
                if permits.len() < MAX_PERMITS {
                    acquire(
                        &limiter,
                        &mut model,
                        &mut permits,
                        time.now,
                        key,
                        op & 0x80 != 0,
                    );
                }
            }
            3 => {
                let key = input.below(keys);
                let n = 1 + input.below(8);
                for _ in 0..n {
                    if permits.len() < MAX_PERMITS {
                        acquire(&limiter, &mut model, &mut permits, time.now, key, false);
                    }
                }
            }
            4 => {
                let i = input.u8();
                if !permits.is_empty() {
                    let (key, permit) = permits.swap_remove(usize::from(i) % permits.len());
                    model.in_flight[key] -= 1;
                    drop(permit);
                }
            }
            5 => time.advance_by(&mut input, model.start, interval_nanos, 4),
            6 => {
                if op & 0x80 != 0 {
                    permits.reverse();
                }
                for (key, permit) in permits.drain(..) {
                    model.in_flight[key] -= 1;
                    drop(permit);
                }
            }
            _ => {}
        }
        check_limiter(&limiter, &model, time.now, permits.is_empty());
    }
    for (key, permit) in permits.drain(..) {
        model.in_flight[key] -= 1;
        drop(permit);
    }
    check_limiter(&limiter, &model, time.now, true);
    assert_eq!(limiter.memory_bytes(), memory, "memory is fixed");
}

fn acquire<'a>(
    limiter: &'a Limiter<u64>,
    model: &mut LimiterModel,
    permits: &mut Vec<(usize, AnyPermit<'a>)>,
    now: u64,
    key: usize,
    owned: bool,
) {
    let keys = model.in_flight.len();
    let (bucket, _) = model.window(now);
    // The exact counts before this request.
    let own_inflight = model.in_flight[key];
    let all_inflight: isize = model.in_flight.iter().sum();
    let own_sliding = model.sliding(&model.admitted, now, Some(key));
    let all_offered = model.sliding(&model.offered, now, None);
    // Under the limits even if every other key's requests were this key's.
    let inflight_fits = match model.max_inflight {
        Some(limit) => all_inflight < limit,
        None => true,
    };
    let rate_fits = match model.max_rate {
        Some((limit, _)) => all_offered + 1.0 <= limit as f64 - slack(limit as f64),
        None => true,
    };
    let must_admit = inflight_fits && rate_fits;

    let id = key as u64;
    let result = if owned {
        limiter.try_acquire_owned(&id).map(AnyPermit::Owned)
    } else {
        limiter.try_acquire(&id).map(AnyPermit::Borrowed)
    };
    LimiterModel::record(&mut model.offered, bucket, key, keys);
    match result {
        Ok(permit) => {
            if let Some(limit) = model.max_inflight {
                assert!(
                    own_inflight < limit,
                    "admitted key {key} with {own_inflight} permits live, limit {limit}"
                );
            }
            if let Some((limit, _)) = model.max_rate {
                let sliding = own_sliding + 1.0;
                assert!(
                    sliding <= limit as f64 + slack(limit as f64),
                    "admitted key {key} at a sliding count of {sliding} (this one included), \
                     limit {limit}"
                );
            }
            model.in_flight[key] += 1;
            LimiterModel::record(&mut model.admitted, bucket, key, keys);
            permits.push((key, permit));
        }
        Err(rejected) => {
            assert!(
                !must_admit,
                "rejected key {key} ({rejected}) although all keys together are under the \
                 limits: {all_inflight} in flight, sliding {all_offered} offered"
            );
            model.rejected[key] += 1;
            match rejected.reason {
                Reason::Inflight => {
                    let limit = model
                        .max_inflight
                        .expect("an in-flight rejection without an in-flight limit");
                    assert_eq!(rejected.limit, limit);
                    assert!(
                        rejected.estimate > limit,
                        "{rejected}: estimate within limit"
                    );
                    assert!(
                        rejected.estimate > own_inflight,
                        "{rejected}: estimate under the {own_inflight} permits live + this one"
                    );
                    assert_eq!(rejected.retry_after, None);
                }
                Reason::Rate => {
                    let (limit, interval) = model
                        .max_rate
                        .expect("a rate rejection without a rate limit");
                    assert_eq!(rejected.limit, limit);
                    assert!(
                        rejected.estimate > limit,
                        "{rejected}: estimate within limit"
                    );
                    assert!(
                        rejected.estimate as f64 >= own_sliding + 1.0 - slack(own_sliding),
                        "{rejected}: estimate under the exact sliding count {own_sliding} + 1"
                    );
                    let retry = rejected
                        .retry_after
                        .expect("a rate rejection has a retry time");
                    assert!(
                        retry <= 2 * interval,
                        "{rejected}: retry after over 2 intervals"
                    );
                }
                other => panic!("unknown rejection reason {other:?}"),
            }
        }
    }
}

fn check_limiter(limiter: &Limiter<u64>, model: &LimiterModel, now: u64, all_dropped: bool) {
    let stats = limiter.stats();
    assert!(stats.promoted <= stats.exact_capacity, "{stats:?}");
    assert!(stats.promotions >= stats.promoted as u64, "{stats:?}");
    let hitters = limiter.heavy_hitters();
    assert_eq!(
        hitters.len(),
        stats.promoted,
        "heavy_hitters lists every promoted key"
    );
    let mut seen = HashMap::new();
    let all_inflight: isize = model.in_flight.iter().sum();
    let all_offered = model.sliding(&model.offered, now, None);
    for hitter in &hitters {
        let key = hitter.key as usize;
        assert!(key < model.in_flight.len(), "unknown key {key}");
        assert!(seen.insert(key, ()).is_none(), "key {key} listed twice");
        assert!(
            hitter.rejected <= model.rejected[key],
            "{hitter:?}: too many rejections"
        );
        match (model.max_inflight, hitter.inflight) {
            (Some(_), Some(n)) => {
                assert!(
                    n >= model.in_flight[key],
                    "{hitter:?}: under the exact count"
                );
                assert!(n <= all_inflight, "{hitter:?}: over all keys' permits");
                if all_dropped {
                    assert_eq!(n, 0, "{hitter:?}: every permit dropped");
                }
            }
            (None, None) => {}
            _ => panic!("{hitter:?}: in-flight count present iff an in-flight limit is set"),
        }
        match (model.max_rate, hitter.rate) {
            (Some(_), Some(r)) => {
                let exact = model.sliding(&model.admitted, now, Some(key));
                assert!(
                    r >= exact - slack(exact),
                    "{hitter:?}: under the exact {exact}"
                );
                assert!(
                    r <= all_offered + slack(all_offered),
                    "{hitter:?}: over all keys' {all_offered}"
                );
            }
            (None, None) => {}
            _ => panic!("{hitter:?}: rate present iff a rate limit is set"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Construction.

/// The number of counters of a `rows × columns` sketch if it is valid, or the errors it may
/// be refused with.
fn sketch_verdict(rows: usize, columns: usize) -> Result<usize, Vec<ConfigError>> {
    let mut errors = Vec::new();
    if rows == 0 {
        errors.push(ConfigError::ZeroRows);
    }
    if columns == 0 {
        errors.push(ConfigError::ZeroColumns);
    }
    let total = columns
        .checked_next_power_of_two()
        .and_then(|w| rows.checked_mul(w));
    match total {
        Some(n) if n <= Estimator::MAX_COUNTERS => {}
        _ => errors.push(ConfigError::TooLarge { rows, columns }),
    }
    match total {
        Some(n) if errors.is_empty() => Ok(n),
        _ => Err(errors),
    }
}

fn errors_of(verdict: &Result<usize, Vec<ConfigError>>) -> &[ConfigError] {
    match verdict {
        Ok(_) => &[],
        Err(errors) => errors,
    }
}

/// Whether `err` is one of `allowed` (ε/δ compared by variant, as they may be NaN).
fn is_one_of(err: &ConfigError, allowed: &[ConfigError]) -> bool {
    allowed.iter().any(|a| match (a, err) {
        (ConfigError::Epsilon(_), ConfigError::Epsilon(_))
        | (ConfigError::Delta(_), ConfigError::Delta(_))
        | (ConfigError::InvalidLimit(_), ConfigError::InvalidLimit(_))
        | (ConfigError::IntervalTooShort { .. }, ConfigError::IntervalTooShort { .. })
        | (ConfigError::IntervalTooLong { .. }, ConfigError::IntervalTooLong { .. })
        | (ConfigError::SubWindows { .. }, ConfigError::SubWindows { .. })
        | (ConfigError::SubWindowsDoNotDivide { .. }, ConfigError::SubWindowsDoNotDivide { .. })
        | (ConfigError::TooLarge { .. }, ConfigError::TooLarge { .. }) => true,
        (a, e) => a == e,
    })
}

fn expect_verdict<T: std::fmt::Debug>(
    what: &str,
    result: &Result<T, ConfigError>,
    errors: &[ConfigError],
) {
    match result {
        Ok(value) => assert!(
            errors.is_empty(),
            "{what}: accepted ({value:?}) although it should fail with one of {errors:?}"
        ),
        Err(err) => {
            assert!(
                !errors.is_empty(),
                "{what}: refused with {err:?} although it is valid"
            );
            assert!(
                is_one_of(err, errors),
                "{what}: refused with {err:?}, expected one of {errors:?}"
            );
            assert!(!err.to_string().is_empty(), "{what}: an error message");
        }
    }
}

/// Errors of a rate configuration of `interval` and `k` sub-windows (sketch aside).
fn rate_errors(interval: Duration, k: usize) -> Vec<ConfigError> {
    let mut errors = Vec::new();
    let k_ok = (1..=MAX_SUB_WINDOWS).contains(&k);
    if !k_ok {
        errors.push(ConfigError::SubWindows {
            asked: k,
            max: MAX_SUB_WINDOWS,
        });
    }
    if interval > MAX_INTERVAL {
        errors.push(ConfigError::IntervalTooLong {
            interval,
            max: MAX_INTERVAL,
        });
    } else if k_ok {
        let nanos = interval.as_nanos();
        if nanos / (k as u128) < u128::from(TICK_NANOS) {
            errors.push(ConfigError::IntervalTooShort {
                interval,
                min: Duration::ZERO,
            });
        }
        let remainder = nanos % k as u128;
        if remainder != 0 {
            errors.push(ConfigError::SubWindowsDoNotDivide {
                interval,
                sub_windows: k,
            });
        }
    }
    errors
}

/// Whether to build a sketch of this verdict: a valid one only if small, an invalid one
/// always (it must be refused before anything is allocated).
fn affordable(verdict: &Result<usize, Vec<ConfigError>>, copies: usize) -> bool {
    match verdict {
        Ok(total) => total.saturating_mul(copies) <= ALLOC_CAP_COUNTERS,
        Err(_) => true,
    }
}

/// Constructors with parameters from the bytes: `Estimator::try_new`, `Estimator::with_error`,
/// `Inflight::with_size`, `Rate::builder(..).build()`, `Limiter::builder()..build()`.
///
/// Checks: each returns `Ok` exactly when the parameters are valid (sizes within
/// `Estimator::MAX_COUNTERS`, ε and δ in (0, 1), intervals of a tick to `MAX_INTERVAL` per
/// sub-window, 1–64 sub-windows dividing the interval, limits ≥ 1, promotion in (0, 1],
/// capacity ≥ 1), and otherwise an `Err` naming one of the violated constraints, never a
/// panic; what it builds has the asked size and works (a fresh limiter admits its first
/// request). Valid sizes are only tried up to 64 MiB; invalid ones of any size are tried,
/// since they must be refused before allocating.
pub fn construction(data: &[u8]) {
    let mut input = Bytes::new(data);
    for _ in 0..64 {
        if input.is_empty() {
            break;
        }
        match input.u8() % 5 {
            0 => construct_estimator(&mut input),
            1 => construct_with_error(&mut input),
            2 => construct_inflight(&mut input),
            3 => construct_rate(&mut input),
            _ => construct_limiter(&mut input),
        }
    }
}

fn construct_estimator(input: &mut Bytes<'_>) {
    let (rows, columns) = (input.size(), input.size());
    let verdict = sketch_verdict(rows, columns);
    if !affordable(&verdict, 1) {
        return;
    }
    let result = Estimator::try_new(rows, columns);
    let what = format!("Estimator::try_new({rows}, {columns})");
    expect_verdict(&what, &result, errors_of(&verdict));
    if let Ok(sketch) = result {
        assert_eq!(sketch.rows(), rows, "{what}");
        assert_eq!(sketch.columns(), columns.next_power_of_two(), "{what}");
        assert!(
            sketch.memory_bytes() >= rows * sketch.columns() * 8,
            "{what}"
        );
        assert_eq!(sketch.incr("k", 2), 2, "{what}");
    }
}

fn construct_with_error(input: &mut Bytes<'_>) {
    let (epsilon, delta) = (input.float(), input.float());
    let mut errors = Vec::new();
    if !(epsilon > 0.0 && epsilon < 1.0) {
        errors.push(ConfigError::Epsilon(epsilon));
    }
    if !(delta > 0.0 && delta < 1.0) {
        errors.push(ConfigError::Delta(delta));
    }
    let mut dims = None;
    if errors.is_empty() {
        // The count-min sizing: width ⌈e/ε⌉, depth ⌈ln(1/δ)⌉ = ⌈−ln δ⌉ (at least 1).
        let columns = (std::f64::consts::E / epsilon).ceil();
        let rows = (-delta.ln()).ceil().max(1.0);
        let max = Estimator::MAX_COUNTERS as f64;
        // What the error must report: what ε and δ need, before any capping.
        let too_precise = ConfigError::TooPrecise {
            epsilon,
            delta,
            rows: rows as usize,
            columns,
            max_counters: Estimator::MAX_COUNTERS,
        };
        if columns > max || rows > max {
            errors.push(too_precise);
        } else {
            let (rows, columns) = (rows as usize, columns as usize);
            let verdict = sketch_verdict(rows, columns);
            if !affordable(&verdict, 1) {
                return;
            }
            match verdict {
                Ok(_) => dims = Some((rows, columns.next_power_of_two())),
                // Too many counters: reported in ε and δ, not in rows and columns.
                Err(_) => errors.push(too_precise),
            }
        }
    }
    let what = format!("Estimator::with_error({epsilon:e}, {delta:e})");
    let result = Estimator::with_error(epsilon, delta);
    expect_verdict(&what, &result, &errors);
    if let (Ok(sketch), Some(dims)) = (result, dims) {
        assert_eq!((sketch.rows(), sketch.columns()), dims, "{what}");
        assert!(sketch.epsilon() <= epsilon * (1.0 + 1e-12), "{what}");
        assert!(sketch.delta() <= delta * (1.0 + 1e-12), "{what}");
    }
}

fn construct_inflight(input: &mut Bytes<'_>) {
    let (rows, columns) = (input.size(), input.size());
    let verdict = sketch_verdict(rows, columns);
    if !affordable(&verdict, 1) {
        return;
    }
    let result = Inflight::with_size(rows, columns);
    let what = format!("Inflight::with_size({rows}, {columns})");
    expect_verdict(&what, &result, errors_of(&verdict));
    if let Ok(inflight) = result {
        let (guard, n) = inflight.incr("k", 1);
        assert_eq!(n, 1, "{what}");
        drop(guard);
        assert_eq!(inflight.get("k"), 0, "{what}");
    }
}

fn construct_rate(input: &mut Bytes<'_>) {
    let interval = input.interval();
    let k = input.pick(&[0, 1, 1, 2, 3, 7, 64, 65, usize::MAX]);
    let (rows, columns) = (input.size(), input.size());
    let verdict = sketch_verdict(rows, columns);
    // A ring of at most k + 4 sketches.
    if !affordable(&verdict, MAX_SUB_WINDOWS + 4) {
        return;
    }
    let mut errors = rate_errors(interval, k);
    errors.extend(verdict.err().unwrap_or_default());
    let clock = ManualClock::new();
    let result = Rate::builder(interval)
        .estimator(rows, columns)
        .sub_windows(k)
        .clock(&clock)
        .build();
    let what = format!("Rate::builder({interval:?}) {rows}x{columns}, k = {k}");
    expect_verdict(&what, &result, &errors);
    if let Ok(rate) = result {
        assert_eq!(rate.interval(), interval, "{what}");
        assert_eq!(rate.observe(&"k", 3), 3, "{what}");
        assert_eq!(rate.peek(&"k"), 3, "{what}");
    }
}

fn construct_limiter(input: &mut Bytes<'_>) {
    let limit = |input: &mut Bytes<'_>| -> Option<isize> {
        let tag = input.u8();
        match tag % 4 {
            0 => None,
            1 => Some(input.pick(&[0, 1, -1, 2, isize::MAX, isize::MIN, 100, 7])),
            _ => Some(isize::from(input.u8() as i8)),
        }
    };
    let max_inflight = limit(input);
    let max_rate = limit(input).map(|l| (l, input.interval()));
    let promotion = input.float();
    // Kept small: the exact stage's capacity has no upper limit to test against (see
    // the fuzz report: a huge capacity is not refused with an error).
    let capacity = input.size() % 4097;
    let (rows, columns) = (input.size(), input.size());
    let verdict = sketch_verdict(rows, columns);
    if !affordable(&verdict, 5) {
        return;
    }
    let mut errors = Vec::new();
    let invalid = ConfigError::InvalidLimit("");
    if max_inflight.is_none() && max_rate.is_none() {
        errors.push(invalid.clone());
    }
    if max_inflight.is_some_and(|l| l < 1) || max_rate.is_some_and(|(l, _)| l < 1) {
        errors.push(invalid.clone());
    }
    if !(promotion > 0.0 && promotion <= 1.0) {
        errors.push(invalid);
    }
    if capacity == 0 {
        errors.push(ConfigError::ExactCapacity {
            asked: 0,
            max: floodgate::limiter::MAX_EXACT_CAPACITY,
        });
    }
    if let Some((_, interval)) = max_rate {
        errors.extend(rate_errors(interval, 1));
    }
    if max_inflight.is_some() || max_rate.is_some() {
        errors.extend(verdict.err().unwrap_or_default());
    }
    let clock = ManualClock::new();
    let mut builder = Limiter::<u64>::builder()
        .promotion_threshold(promotion)
        .exact_capacity(capacity)
        .sketch(rows, columns)
        .clock(&clock);
    if let Some(l) = max_inflight {
        builder = builder.max_inflight(l);
    }
    if let Some((l, interval)) = max_rate {
        builder = builder.max_rate(l, interval);
    }
    let what = format!("{builder:?}");
    let result = builder.build();
    expect_verdict(&what, &result, &errors);
    if let Ok(limiter) = result {
        assert!(limiter.stats().exact_capacity >= capacity, "{what}");
        let permit = limiter.try_acquire(&7);
        assert!(
            permit.is_ok(),
            "{what}: a fresh limiter refused its first request"
        );
        drop(permit);
        assert!(limiter.heavy_hitters().len() <= 1, "{what}");
    }
}
