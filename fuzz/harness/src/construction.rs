//! Construction: every constructor and builder with parameters at and past the edges of what
//! is allowed, against the rules of what is valid.

use std::time::Duration;

use arbitrary::Arbitrary;
use floodgate::clock::ManualClock;
use floodgate::rate::{MAX_INTERVAL, MAX_SUB_WINDOWS};
use floodgate::{ConfigError, Estimator, Inflight, Limiter, Rate};

use super::TICK_NANOS;

/// Construction never allocates more counters than this (64 MiB of `isize`).
const ALLOC_CAP_COUNTERS: usize = 1 << 23;
/// The most constructions one input runs.
const MAX_CONSTRUCTIONS: usize = 64;

/// A size for a constructor: small, 16-bit, a power of two or anything.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Size {
    Small(u8),
    U16(u16),
    PowerOfTwo(u8),
    Any(u64),
}

impl Size {
    fn get(self) -> usize {
        match self {
            Size::Small(x) => usize::from(x & 63),
            Size::U16(x) => usize::from(x),
            Size::PowerOfTwo(x) => 1usize.checked_shl(u32::from(x & 63)).unwrap_or(0),
            Size::Any(x) => x as usize,
        }
    }
}

/// A float for ε, δ or a promotion threshold: the edges of (0, 1), or any bit pattern.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Float {
    Special(u8),
    Unit(u16),
    Bits(u64),
}

impl Float {
    fn get(self) -> f64 {
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
        match self {
            Float::Special(x) => SPECIAL[usize::from(x & 15)],
            Float::Unit(x) => (f64::from(x) + 1.0) / 65537.0,
            Float::Bits(x) => f64::from_bits(x),
        }
    }
}

/// An interval for a rate: the edges of the allowed range, or any length.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Interval {
    Special(u8),
    Ticks(u8),
    Nanos(u32),
    Any(u64, u32),
}

impl Interval {
    fn get(self) -> Duration {
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
        match self {
            Interval::Special(x) => SPECIAL[usize::from(x) % SPECIAL.len()],
            Interval::Ticks(x) => Duration::from_millis(10 * u64::from(x)),
            Interval::Nanos(x) => Duration::from_nanos(u64::from(x)),
            Interval::Any(secs, nanos) => Duration::new(secs, nanos % 1_000_000_000),
        }
    }
}

/// A limit for the limiter's builder: none, an edge, or a small value.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Limit {
    None,
    Edge(u8),
    Small(u8),
}

impl Limit {
    fn get(self) -> Option<u32> {
        const MAX: u32 = floodgate::Limits::MAX_LIMIT;
        const EDGES: [u32; 8] = [0, 1, MAX, 2, u32::MAX, MAX + 1, 100, 7];
        match self {
            Limit::None => None,
            Limit::Edge(x) => Some(EDGES[usize::from(x % 8)]),
            Limit::Small(x) => Some(u32::from(x)),
        }
    }
}

/// One construction.
#[derive(Arbitrary, Debug, Clone)]
pub enum Construct {
    Estimator {
        rows: Size,
        columns: Size,
    },
    WithError {
        epsilon: Float,
        delta: Float,
    },
    Inflight {
        rows: Size,
        columns: Size,
    },
    /// `k` is one of 0, 1, 2, 3, 7, 64, 65 and `usize::MAX` sub-windows.
    Rate {
        interval: Interval,
        k: u8,
        rows: Size,
        columns: Size,
    },
    /// The exact stage's capacity is kept under 4097 (its `Size` modulo 4097).
    Limiter {
        max_inflight: Limit,
        max_rate: Limit,
        interval: Interval,
        promotion: Float,
        capacity: Size,
        rows: Size,
        columns: Size,
    },
}

/// Constructions to try, at most 64.
#[derive(Arbitrary, Debug, Clone)]
pub struct ConstructionInput {
    pub constructs: Vec<Construct>,
}

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

/// As [`sketch_verdict`], for a limiter's sketches, which keep a key's rows in one cache line
/// of 16 counters: at most 16 rows, each with at most `16 / rows` counters of a line, in a
/// power of two of lines. `Ok` holds the counters (16 a line).
fn blocked_sketch_verdict(rows: usize, columns: usize) -> Result<usize, Vec<ConfigError>> {
    let mut errors = Vec::new();
    if rows == 0 {
        errors.push(ConfigError::ZeroRows);
    }
    if columns == 0 {
        errors.push(ConfigError::ZeroColumns);
    }
    if rows > 16 {
        errors.push(ConfigError::TooManyRows { rows, max: 16 });
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let per_row = (16 / rows).min(columns.checked_next_power_of_two().unwrap_or(usize::MAX));
    let total = columns
        .div_ceil(per_row)
        .checked_next_power_of_two()
        .and_then(|blocks| blocks.checked_mul(16));
    match total {
        Some(n) if n <= Estimator::MAX_COUNTERS => Ok(n),
        _ => Err(vec![ConfigError::TooLarge { rows, columns }]),
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

/// Runs each construction (Property 8 of docs/architecture.md): `Estimator::try_new`,
/// `Estimator::with_error`, `Inflight::with_size`, `Rate::builder(..).build()`,
/// `Limiter::builder()..build()`.
///
/// Checks: each returns `Ok` exactly when the parameters are valid (sizes within
/// `Estimator::MAX_COUNTERS`, ε and δ in (0, 1), intervals of a tick to `MAX_INTERVAL` per
/// sub-window, 1–64 sub-windows dividing the interval, limits from 1 to `MAX_LIMIT`, a limiter's
/// sketch of 1–16 rows, promotion in (0, 1],
/// capacity ≥ 1), and otherwise an `Err` naming one of the violated constraints with a
/// message, never a panic; what it builds has the asked size and works (a fresh limiter
/// admits its first request). Valid sizes are only tried up to 64 MiB; invalid ones of any
/// size are tried, since they must be refused before allocating.
pub fn run(input: &ConstructionInput) {
    for construct in input.constructs.iter().take(MAX_CONSTRUCTIONS) {
        match *construct {
            Construct::Estimator { rows, columns } => {
                construct_estimator(rows.get(), columns.get())
            }
            Construct::WithError { epsilon, delta } => {
                construct_with_error(epsilon.get(), delta.get())
            }
            Construct::Inflight { rows, columns } => construct_inflight(rows.get(), columns.get()),
            Construct::Rate {
                interval,
                k,
                rows,
                columns,
            } => {
                const KS: [usize; 9] = [0, 1, 1, 2, 3, 7, 64, 65, usize::MAX];
                let k = KS[usize::from(k) % KS.len()];
                construct_rate(interval.get(), k, rows.get(), columns.get())
            }
            Construct::Limiter {
                max_inflight,
                max_rate,
                interval,
                promotion,
                capacity,
                rows,
                columns,
            } => construct_limiter(
                max_inflight.get(),
                max_rate.get().map(|l| (l, interval.get())),
                promotion.get(),
                // Kept small: a capacity over `MAX_EXACT_CAPACITY` is refused, and one just
                // under it would allocate a large table.
                capacity.get() % 4097,
                (rows.get(), columns.get()),
            ),
        }
    }
}

fn construct_estimator(rows: usize, columns: usize) {
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

fn construct_with_error(epsilon: f64, delta: f64) {
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

fn construct_inflight(rows: usize, columns: usize) {
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

fn construct_rate(interval: Duration, k: usize, rows: usize, columns: usize) {
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

fn construct_limiter(
    max_inflight: Option<u32>,
    max_rate: Option<(u32, Duration)>,
    promotion: f64,
    capacity: usize,
    (rows, columns): (usize, usize),
) {
    let verdict = blocked_sketch_verdict(rows, columns);
    if !affordable(&verdict, 5) {
        return;
    }
    let mut errors = Vec::new();
    for limit in [max_inflight, max_rate.map(|(l, _)| l)]
        .into_iter()
        .flatten()
    {
        if limit > floodgate::Limits::MAX_LIMIT {
            errors.push(ConfigError::LimitTooLarge {
                limit,
                max: floodgate::Limits::MAX_LIMIT,
            });
        }
    }
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
            // The largest capacity `LimiterBuilder::exact_capacity` documents.
            max: 1 << 20,
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

/// The edges worth keeping by name (replayed by `tests/fuzz_corpus.rs`).
pub fn seeds() -> Vec<(&'static str, ConstructionInput)> {
    use Construct as C;
    let any = |x: u64| Size::Any(x);
    let est = |rows, columns| C::Estimator {
        rows: any(rows),
        columns: any(columns),
    };
    let inf = |rows, columns| C::Inflight {
        rows: any(rows),
        columns: any(columns),
    };
    // `Float::Special` and `Interval::Special` indexes.
    let err = |e: u8, d: u8| C::WithError {
        epsilon: Float::Special(e),
        delta: Float::Special(d),
    };
    let rate = |i: u8, k: u8| C::Rate {
        interval: Interval::Special(i),
        k,
        rows: any(2),
        columns: any(16),
    };
    let lim = |max_inflight, max_rate, promotion: u8, capacity: u64, rows: u64, columns: u64| {
        C::Limiter {
            max_inflight,
            max_rate,
            interval: Interval::Special(7),
            promotion: Float::Special(promotion),
            capacity: any(capacity),
            rows: any(rows),
            columns: any(columns),
        }
    };
    let input = |constructs| ConstructionInput { constructs };
    vec![
        (
            "estimator-and-inflight-edges",
            input(vec![
                est(0, 0),
                est(0, 8),
                est(4, 0),
                est(1, 1),
                est(3, 1000),
                est(1 << 28, 1),
                est(1, (1 << 28) + 1),
                est(1 << 20, 1 << 20),
                est(1 << 63, (1 << 63) + 1),
                est(3, u64::MAX),
                est(1, 1 << 23),
                inf(0, 1),
                inf(1, 0),
                inf(1 << 40, 1 << 40),
                inf(1, u64::MAX),
            ]),
        ),
        (
            "with-error-edges",
            input(
                [
                    (0, 9),
                    (1, 9),
                    (3, 9),
                    (9, 3),
                    (12, 12),
                    (10, 10),
                    (6, 9),
                    (7, 7),
                    (8, 9),
                ]
                .into_iter()
                .chain([(9, 15), (14, 13), (4, 5)])
                .map(|(e, d)| err(e, d))
                .collect(),
            ),
        ),
        (
            "rate-edges",
            // Every special interval with 1 sub-window, then k = 2, 3, 64, 65, 0, usize::MAX.
            input(
                (0..12)
                    .map(|i| rate(i, 1))
                    .chain([
                        rate(5, 3),
                        rate(5, 4),
                        rate(6, 6),
                        rate(6, 7),
                        rate(7, 0),
                        rate(7, 8),
                    ])
                    .collect(),
            ),
        ),
        (
            "limiter-edges",
            input(vec![
                lim(Limit::None, Limit::None, 9, 16, 2, 16),
                lim(Limit::Edge(1), Limit::None, 9, 16, 2, 16),
                lim(Limit::Edge(0), Limit::None, 9, 16, 2, 16),
                lim(Limit::Edge(2), Limit::None, 9, 16, 2, 16),
                lim(Limit::None, Limit::Edge(5), 9, 16, 2, 16),
                lim(Limit::Edge(4), Limit::Edge(4), 9, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 0, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 1, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 11, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 3, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 6, 16, 2, 16),
                lim(Limit::Edge(3), Limit::None, 9, 0, 2, 16),
                lim(Limit::Edge(3), Limit::None, 9, 4096, 2, 16),
                lim(Limit::Edge(3), Limit::Edge(6), 9, 16, 0, 16),
                lim(Limit::Edge(7), Limit::None, 9, 16, 1 << 40, 1 << 40),
                lim(Limit::None, Limit::Edge(7), 9, 16, 3, 0),
            ]),
        ),
    ]
}
