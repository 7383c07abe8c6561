//! Public-API tests of [`floodgate::Estimator`]: the one-sided count-min guarantee against an
//! exact model, saturation instead of wrapping, construction errors, fixed memory, concurrent
//! updates, and pingora-limits call-site compatibility.

use floodgate::{ConfigError, Estimator};
use proptest::prelude::*;

mod common;

use common::ops::arb_vec;
use floodgate_fuzz_harness as harness;
use floodgate_test_support::counting_alloc::{bytes_allocated_by, CountingAlloc};
use floodgate_test_support::panics::panic_message_of;
use harness::estimator::{EstimatorInput, EstimatorOp};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// The value counts saturate at, as documented on `Estimator::incr`.
const SATURATED: isize = isize::MAX / 2;

// ---------------------------------------------------------------------------------------------
// Property 1 (docs/architecture.md) against an exact model: the estimator fuzz harness's
// (`fuzz/harness/src/estimator.rs`), on operations proptest builds (`tests/common/ops.rs`).

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every counter of a key holds the key's count plus other keys' counts, so the estimate
    /// is between the true count and the total (for non-negative counts, and given the
    /// others' negative counts otherwise), and saturates instead of wrapping.
    #[test]
    fn estimate_is_never_below_true_count_nor_above_total(
        rows in any::<u8>(),
        columns in any::<u8>(),
        extremes in any::<bool>(),
        ops in arb_vec::<EstimatorOp>(1..80),
    ) {
        harness::estimator::run(&EstimatorInput { rows, columns, extremes, ops });
    }
}

/// The count-min bound (Cormode & Muthukrishnan): the estimate exceeds the true count by more
/// than ε·total for at most a δ fraction of keys. With these sizes the expected fraction is far
/// below δ, so this only fails when hashing degenerates (rows or columns not independent).
#[test]
fn overestimate_beyond_epsilon_total_is_rare() {
    let sketch = Estimator::new(4, 1024);
    let keys = 5_000u64;
    let count = |k: u64| (k % 10) as isize + 1;
    for k in 0..keys {
        sketch.incr(k, count(k));
    }
    let total: isize = (0..keys).map(count).sum();
    let slack = sketch.epsilon() * total as f64;
    let bad = (0..keys)
        .filter(|&k| (sketch.get(k) - count(k)) as f64 > slack)
        .count();
    assert!(
        (bad as f64) <= sketch.delta() * keys as f64,
        "{bad} of {keys} keys over-counted by more than ε·total = {slack:.1} (δ = {:.4})",
        sketch.delta()
    );
}

// ---------------------------------------------------------------------------------------------
// pingora-limits compatibility: the same call sites compile and behave the same.

/// Call sites written for `pingora_limits::estimator::Estimator`, instantiated for any crate
/// with that module path. Three keys in 3 × 1024 share all rows with probability ~2^-30, so
/// the exact values hold for both implementations.
macro_rules! pingora_estimator_call_sites {
    ($krate:ident) => {{
        use $krate::estimator::Estimator;

        let _: fn(usize, usize) -> Estimator = Estimator::new;
        let _: fn(&Estimator, &'static str, isize) -> isize = Estimator::incr::<&str>;
        let _: fn(&Estimator, u64, isize) = Estimator::decr::<u64>;
        let _: fn(&Estimator, String) -> isize = Estimator::get::<String>;
        let _: fn(&Estimator) = Estimator::reset;

        let sketch = Estimator::new(3, 1024);
        let a: isize = sketch.incr("origin-a", 2);
        assert_eq!(a, 2);
        assert_eq!(sketch.incr(7u64, 5), 5);
        assert_eq!(sketch.incr(String::from("origin-b"), 1), 1);
        sketch.decr("origin-a", 1);
        sketch.decr(7u64, 5);
        assert_eq!(sketch.get("origin-a"), 1);
        assert_eq!(sketch.get(7u64), 0);
        assert_eq!(sketch.get(String::from("origin-b")), 1);
        sketch.reset();
        assert_eq!(sketch.get("origin-a"), 0);
        assert_eq!(sketch.get(String::from("origin-b")), 0);
    }};
}

#[test]
fn pingora_estimator_call_sites_compile_and_agree() {
    pingora_estimator_call_sites!(pingora_limits);
    pingora_estimator_call_sites!(floodgate);
}

#[test]
fn str_and_string_keys_address_the_same_count() {
    let sketch = Estimator::new(4, 1024);
    sketch.incr("origin-a", 3);
    sketch.incr(String::from("origin-a"), 4);
    assert_eq!(sketch.get(String::from("origin-a")), 7);
    assert_eq!(sketch.get("origin-a"), 7);
}

#[test]
fn estimator_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Estimator>();
}

// ---------------------------------------------------------------------------------------------
// Saturation: overflow never wraps, and a saturated count stays saturated.

#[test]
fn incr_by_isize_max_saturates_instead_of_wrapping() {
    let sketch = Estimator::new(4, 1024);
    assert_eq!(sketch.incr("k", isize::MAX), SATURATED);
    assert_eq!(
        sketch.incr("k", isize::MAX),
        SATURATED,
        "no wrap past the ceiling"
    );
    assert_eq!(sketch.incr("k", 1), SATURATED);
    assert_eq!(sketch.get("k"), SATURATED);
}

#[test]
fn repeated_huge_increments_never_go_negative_and_never_decrease() {
    let sketch = Estimator::new(3, 64);
    let mut last = 0;
    for i in 0..16 {
        let estimate = sketch.incr("k", isize::MAX / 3);
        assert!(
            estimate >= last && estimate > 0,
            "incr #{i} went from {last} to {estimate}"
        );
        last = estimate;
    }
    assert_eq!(last, SATURATED);
}

#[test]
fn small_increments_across_the_ceiling_stop_at_the_ceiling() {
    // The single-instruction path (small deltas) must saturate like the exact path.
    let sketch = Estimator::new(2, 16);
    assert_eq!(sketch.incr("k", SATURATED - 2), SATURATED - 2);
    assert_eq!(sketch.incr("k", 1), SATURATED - 1);
    assert_eq!(sketch.incr("k", 1), SATURATED);
    assert_eq!(sketch.incr("k", 1), SATURATED);
    assert_eq!(sketch.incr("k", 1000), SATURATED);
    assert_eq!(sketch.get("k"), SATURATED);
}

#[test]
fn decr_of_a_saturated_key_does_not_lower_it() {
    let sketch = Estimator::new(4, 1024);
    sketch.incr("k", isize::MAX);
    // The true count is isize::MAX: anything below SATURATED after a small decrement would be
    // an under-count.
    sketch.decr("k", 1);
    assert_eq!(sketch.get("k"), SATURATED);
    sketch.decr("k", 1_000_000);
    assert_eq!(sketch.get("k"), SATURATED);
    sketch.decr("k", isize::MAX);
    assert_eq!(sketch.get("k"), SATURATED);
    assert_eq!(sketch.incr("k", -1), SATURATED, "a negative incr is a decr");
}

#[test]
fn extreme_values_on_the_request_path_never_panic_or_wrap() {
    let sketch = Estimator::new(2, 8);
    for (i, value) in [isize::MIN, isize::MIN + 1, -1, isize::MAX, 0]
        .into_iter()
        .enumerate()
    {
        let key = i as u64;
        let estimate = sketch.incr(key, value);
        assert!(
            (-SATURATED..=SATURATED).contains(&estimate),
            "incr({value}) -> {estimate}"
        );
        sketch.decr(key, value);
        sketch.decr(key, isize::MIN);
        sketch.decr(key, isize::MAX);
        assert!((-SATURATED..=SATURATED).contains(&sketch.get(key)));
    }
    // A decrement by isize::MIN is an increment by |isize::MIN|: it saturates upwards.
    let fresh = Estimator::new(2, 8);
    fresh.decr("k", isize::MIN);
    assert_eq!(fresh.get("k"), SATURATED);
}

// ---------------------------------------------------------------------------------------------
// Bad input: a clear error at construction.

#[test]
fn zero_rows_is_rejected_with_a_helpful_message() {
    let err = Estimator::try_new(0, 1024).unwrap_err();
    assert_eq!(err, ConfigError::ZeroRows);
    assert!(err.to_string().contains("at least one row"), "{err}");
}

#[test]
fn zero_columns_is_rejected_with_a_helpful_message() {
    let err = Estimator::try_new(4, 0).unwrap_err();
    assert_eq!(err, ConfigError::ZeroColumns);
    assert!(err.to_string().contains("at least one column"), "{err}");
    assert_eq!(Estimator::try_new(0, 0).unwrap_err(), ConfigError::ZeroRows);
}

#[test]
fn sizes_that_overflow_are_rejected_as_too_large() {
    let max = Estimator::MAX_COUNTERS;
    for (rows, columns) in [
        (usize::MAX, 2),
        (2, usize::MAX),         // no power of two ≥ columns fits in usize
        (1, usize::MAX / 2 + 2), // likewise, just past the largest power of two
        (1 << 40, 1 << 40),      // rows × columns overflows usize
        (1, max + 1),            // rounds up to 2 × MAX_COUNTERS
        (2, max),
        (max + 1, 1),
    ] {
        let err = Estimator::try_new(rows, columns).unwrap_err();
        assert_eq!(
            err,
            ConfigError::TooLarge { rows, columns },
            "{rows} x {columns}"
        );
        let message = err.to_string();
        assert!(
            message.contains(&rows.to_string())
                && message.contains(&columns.to_string())
                && message.contains(&max.to_string()),
            "message should name the size asked for and the limit: {message}"
        );
    }
}

#[test]
#[should_panic(expected = "at least one row")]
fn new_panics_on_zero_hashes() {
    let _ = Estimator::new(0, 1024);
}

#[test]
#[should_panic(expected = "at least one column")]
fn new_panics_on_zero_slots() {
    let _ = Estimator::new(4, 0);
}

#[test]
#[should_panic(expected = "exceeds the limit")]
fn new_panics_on_a_size_that_overflows() {
    let _ = Estimator::new(usize::MAX, usize::MAX);
}

#[test]
fn with_error_sizes_width_from_epsilon_and_depth_from_delta() {
    let e = std::f64::consts::E;
    for (epsilon, delta, rows, columns) in [
        (0.01, 0.05, 3, 512),      // ⌈e/0.01⌉ = 272 → 512; ⌈ln 20⌉ = 3
        (0.001, 0.01, 5, 4096),    // 2719 → 4096; ⌈ln 100⌉ = 5
        (0.5, 0.5, 1, 8),          // 6 → 8; ⌈ln 2⌉ = 1
        (0.9, 0.9, 1, 4),          // ⌈3.02⌉ = 4; ln(1/0.9) < 1 still needs one row
        (1e-4, 1e-6, 14, 1 << 15), // 27183 → 32768; ⌈ln 10^6⌉ = 14
    ] {
        let sketch = Estimator::with_error(epsilon, delta).unwrap();
        assert_eq!(
            (sketch.rows(), sketch.columns()),
            (rows, columns),
            "ε = {epsilon}, δ = {delta}"
        );
        // The achieved bound is at least as tight as asked, and not needlessly large.
        assert!(sketch.epsilon() <= epsilon && sketch.delta() <= delta);
        assert!((sketch.columns() as f64) < 2.0 * (e / epsilon).ceil());
        assert!((sketch.rows() as f64) < (1.0 / delta).ln() + 1.0);
    }
}

#[test]
fn with_error_rejects_epsilon_outside_zero_one() {
    for bad in [
        0.0,
        -0.0,
        1.0,
        -0.1,
        1.5,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ] {
        let err = Estimator::with_error(bad, 0.01).unwrap_err();
        assert!(
            matches!(err, ConfigError::Epsilon(got) if got.to_bits() == bad.to_bits()),
            "ε = {bad}: {err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("epsilon must be strictly between 0 and 1"),
            "{message}"
        );
        assert!(
            message.contains(&bad.to_string()),
            "names the value: {message}"
        );
    }
}

#[test]
fn with_error_rejects_delta_outside_zero_one() {
    for bad in [0.0, 1.0, -0.5, 2.0, f64::NAN, f64::INFINITY] {
        let err = Estimator::with_error(0.01, bad).unwrap_err();
        assert!(
            matches!(err, ConfigError::Delta(got) if got.to_bits() == bad.to_bits()),
            "δ = {bad}: {err:?}"
        );
        assert!(
            err.to_string()
                .contains("delta must be strictly between 0 and 1"),
            "{err}"
        );
    }
}

#[test]
fn with_error_rejects_an_epsilon_too_small_to_allocate() {
    let err = Estimator::with_error(1e-12, 0.1).unwrap_err();
    assert!(matches!(err, ConfigError::TooPrecise { .. }), "{err:?}");
}

/// Regression: `with_error(1e-12, 1e-12)` reported the capped size (268,435,456 columns), not
/// the ⌈e · 10^12⌉ columns that ε asked for.
#[test]
fn too_precise_reports_the_size_asked_for_and_the_limit() {
    let err = Estimator::with_error(1e-12, 1e-12).unwrap_err();
    // ⌈e / 10^-12⌉ columns and ⌈ln 10^12⌉ = ⌈27.6⌉ rows.
    let columns = (std::f64::consts::E / 1e-12).ceil();
    assert_eq!(columns, 2_718_281_828_460.0);
    assert_eq!(
        err,
        ConfigError::TooPrecise {
            epsilon: 1e-12,
            delta: 1e-12,
            rows: 28,
            columns,
            max_counters: Estimator::MAX_COUNTERS,
        }
    );
    let message = err.to_string();
    for words in [
        "epsilon = 1e-12",
        "delta = 1e-12",
        "28 rows",
        "2718281828460 columns",
        "76111891196880 counters",
        "limit of 268435456 counters",
        "epsilon must be at least e/8388608",
    ] {
        assert!(message.contains(words), "{words:?} missing from: {message}");
    }
    assert!(
        !message.contains("268435456 columns"),
        "the capped width, not what was asked: {message}"
    );
}

#[test]
fn too_precise_reports_widths_beyond_usize_and_beyond_f64() {
    // ⌈e · 10^20⌉ columns: more than usize::MAX on a 64-bit target.
    let err = Estimator::with_error(1e-20, 0.5).unwrap_err();
    match err {
        ConfigError::TooPrecise { rows, columns, .. } => {
            assert_eq!(rows, 1);
            assert!(columns > usize::MAX as f64, "{columns}");
            assert_eq!(columns, (std::f64::consts::E / 1e-20).ceil());
        }
        ref other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("about 2.718e20 columns"), "{message}");
    assert!(
        message.contains("epsilon must be at least e/268435456"),
        "{message}"
    );

    // The smallest subnormal ε: e/ε overflows f64.
    let tiny = f64::from_bits(1);
    let err = Estimator::with_error(tiny, tiny).unwrap_err();
    match err {
        ConfigError::TooPrecise { rows, columns, .. } => {
            assert_eq!(rows, 745, "⌈−ln(2^-1074)⌉ = ⌈744.4⌉");
            assert!(columns.is_infinite());
        }
        ref other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(message.contains("745 rows"), "{message}");
    assert!(message.contains("more than 1.8e308 columns"), "{message}");
}

#[test]
fn too_precise_when_the_columns_fit_but_not_at_that_many_rows() {
    // ⌈e · 10^7⌉ = 27,182,819 columns (→ 2^25) fit one row, but not 28 rows of them.
    let err = Estimator::with_error(1e-7, 1e-12).unwrap_err();
    assert!(
        matches!(err, ConfigError::TooPrecise { rows: 28, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    for words in [
        "28 rows",
        "27182819 columns",
        "limit of 268435456 counters",
        "e/8388608",
    ] {
        assert!(message.contains(words), "{words:?} missing from: {message}");
    }
    // And the advice holds: ε = e/8388608 fits at 28 rows, and so does the value suggested.
    let fits = Estimator::with_error(std::f64::consts::E / 8_388_608.0, 1e-12).unwrap();
    assert_eq!((fits.rows(), fits.columns()), (28, 8_388_608));
    assert!(message.contains("(3.244e-7 will do)"), "{message}");
    let fits = Estimator::with_error(3.244e-7, 1e-12).unwrap();
    assert_eq!((fits.rows(), fits.columns()), (28, 8_388_608));
}

#[test]
fn zero_size_messages_say_rows_and_columns() {
    let rows = Estimator::try_new(0, 1024).unwrap_err().to_string();
    assert!(
        rows.contains("at least one row") && rows.contains("got 0 rows"),
        "{rows}"
    );
    let columns = Estimator::try_new(4, 0).unwrap_err().to_string();
    assert!(
        columns.contains("at least one column") && columns.contains("got 0 columns"),
        "{columns}"
    );
    for message in [&rows, &columns] {
        // The API that takes rows and columns does not speak of pingora-limits' names.
        assert!(
            !message.contains("hashes") && !message.contains("slots"),
            "{message}"
        );
    }
    assert_eq!(
        floodgate::Inflight::with_size(0, 8)
            .unwrap_err()
            .to_string(),
        rows
    );
}

#[test]
fn new_panics_name_pingoras_parameters_as_given() {
    let message = panic_message_of(|| drop(Estimator::new(0, 1024)));
    for words in [
        "floodgate::Estimator::new(hashes = 0, slots = 1024)",
        "at least one row",
        "hashes are rows",
        "Estimator::try_new",
    ] {
        assert!(message.contains(words), "{words:?} missing from: {message}");
    }
    let message = panic_message_of(|| drop(Estimator::new(4, 0)));
    for words in [
        "hashes = 4, slots = 0",
        "at least one column",
        "slots are columns",
    ] {
        assert!(message.contains(words), "{words:?} missing from: {message}");
    }
}

// ---------------------------------------------------------------------------------------------
// Property 3 (fixed memory) and property 5 (no allocation on the request path).

#[test]
fn memory_is_fixed_after_100k_distinct_keys() {
    let sketch = Estimator::new(4, 1024);
    let before = sketch.memory_bytes();
    assert!(before >= 4 * 1024 * std::mem::size_of::<isize>());
    let names: Vec<String> = (0..50_000).map(|i| format!("origin-{i}")).collect();

    let allocated = bytes_allocated_by(|| {
        for i in 0..50_000u64 {
            sketch.incr(i, 1);
        }
        for name in &names {
            sketch.incr(name.as_str(), 1);
            sketch.decr(name.as_str(), 1);
            sketch.get(name.as_str());
        }
        for i in 0..50_000u64 {
            sketch.get(i);
        }
    });
    assert_eq!(allocated, 0, "incr/decr/get allocated on the request path");
    assert_eq!(sketch.memory_bytes(), before);
}

// ---------------------------------------------------------------------------------------------
// Concurrency (std threads): property 1 from several threads.

#[test]
fn concurrent_increments_of_one_key_sum_exactly() {
    const THREADS: usize = 4;
    const PER_THREAD: isize = 10_000;
    let sketch = Estimator::new(4, 1024);
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for own in 1..=PER_THREAD {
                    let estimate = sketch.incr("hot", 1);
                    // Each result is at least what this thread alone has added, and at most
                    // what all threads together add. (Successive results need not grow: under
                    // concurrent increments `incr` re-reads one row, the one its own adds found
                    // lowest, and rows can be at different points of the other threads' adds.)
                    assert!(
                        estimate >= own && estimate <= THREADS as isize * PER_THREAD,
                        "estimate {estimate} after {own} own increments"
                    );
                }
            });
        }
    });
    // One key, nothing to collide with: the sketch is exact.
    assert_eq!(sketch.get("hot"), THREADS as isize * PER_THREAD);
}

#[test]
fn concurrent_updates_on_overlapping_keys_never_read_below_true_count() {
    const KEYS: u64 = 8;
    const WRITERS: u64 = 3;
    const ROUNDS: u64 = 5_000;
    // Small enough that keys collide: only the one-sided bound can be asserted.
    let sketch = Estimator::new(2, 4);
    let base = |k: u64| k as isize + 1;
    for k in 0..KEYS {
        sketch.incr(k, base(k));
    }
    let total_base: isize = (0..KEYS).map(base).sum();
    let writers_done = std::sync::atomic::AtomicBool::new(false);

    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let sketch = &sketch;
                s.spawn(move || {
                    for round in 0..ROUNDS {
                        let key = (round * (w + 1)) % KEYS;
                        let value = (round % 5) as isize + 1;
                        let estimate = sketch.incr(key, value);
                        assert!(
                            estimate >= base(key) + value,
                            "incr returned {estimate} below {}",
                            base(key) + value
                        );
                        assert!(sketch.get(key) >= base(key) + value);
                        sketch.decr(key, value);
                    }
                })
            })
            .collect();
        s.spawn(|| {
            // The base counts are added before and never removed: every read must see them.
            let mut reads = 0u32;
            while !writers_done.load(std::sync::atomic::Ordering::Acquire) || reads < 1_000 {
                for k in 0..KEYS {
                    let estimate = sketch.get(k);
                    assert!(estimate >= base(k), "key {k} read {estimate} < {}", base(k));
                }
                reads += 1;
            }
        });
        let results: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        // Set before propagating a writer's panic, or the reader would spin forever.
        writers_done.store(true, std::sync::atomic::Ordering::Release);
        for result in results {
            result.unwrap();
        }
    });

    for k in 0..KEYS {
        let estimate = sketch.get(k);
        assert!(
            estimate >= base(k),
            "key {k} ends at {estimate} < {}",
            base(k)
        );
        // Every writer's increment was matched by a decrement: nothing lost either way.
        assert!(
            estimate <= total_base,
            "key {k} ends at {estimate} > {total_base}"
        );
    }
}

/// Regression: hashing through ahash's `hash_one` gave `&u64` and `&&u64` different hashes on
/// nightly compilers (where ahash specialises it), so `get(&key)` read other counters than
/// `incr(key)` had counted in, and under-counted.
#[test]
#[allow(clippy::needless_borrows_for_generic_args)] // the references are the point
fn get_by_reference_reads_what_incr_by_value_counted() {
    let sketch = Estimator::new(2, 32);
    sketch.incr(0u64, 31);
    assert_eq!(sketch.get(0u64), 31);
    assert_eq!(sketch.get(&0u64), 31);
    assert_eq!(sketch.get(&&0u64), 31);
    let inflight = floodgate::Inflight::new();
    let (_guard, _) = inflight.incr(&5u64, 1);
    assert_eq!(inflight.get(5u64), 1);
}
