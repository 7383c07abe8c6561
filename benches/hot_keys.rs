//! Promoted keys admitted: the requests of the keys that reach their promotion threshold (a
//! proxy's biggest origins) are decided by the exact stage, on the real clock, beside the
//! structures a user would otherwise put there.
//!
//! - `inflight_1key`: one key under `max_inflight(3)` holding one request for the whole run
//!   (at its promotion threshold: promoted), a permit taken and given back, beside
//!   pingora-limits' `Inflight` (the sketch alone: `incr`, then the guard dropped). (Without
//!   the request held, a key whose requests come one at a time is promoted by each and
//!   demoted by its release: that is a promotion a request.)
//! - `rate_1key` and `rate_64keys`: one key, and 64 keys in turn, at a rate limit in 10 ms
//!   windows of 1.5× what the threads drive through keys below promotion (never refused), and
//!   promoted from a tenth of it (`promotion_threshold(0.1)`: promoted keys are slower, and at
//!   the default half a slower drive could fall under it and demote them), beside governor's
//!   keyed limiter (`check_key`, a CAS on the key's cell of its `DashMap`) at a quota it never
//!   reaches either.
//! - `rate_1key_1s`: the first at a limit a second, in windows of a second: the windows a
//!   proxy's per-second limit has, where a request reads the coarse time, not the precise time
//!   (in 10 ms windows every request is within the coarse time's lag of a window's end, and
//!   reads the precise time: the CPU's counter, as governor's clock reads it, about 14 ns on
//!   this machine type, where the OS clock's `Instant::now` takes about 31).
//!
//! - `both_1key_1s`: one key under both `max_inflight(3)` and a rate limit a second of 1.5×
//!   the drive, in windows of a second, holding one request for the whole run (promoted at
//!   its in-flight threshold), a permit taken and given back; beside governor's keyed limiter
//!   and pingora-limits' `Inflight` together (what a user without floodgate would put there:
//!   the sketch's `incr`, `check_key`, the guard dropped).
//!
//! One and two threads (`common::bench`: the two-thread figure is the wall time over both
//! threads' requests, a throughput). The drive is measured before each group (a second of
//! the side's own requests with a limit it never nears), so the limit is 1.5× what this
//! machine drives, whatever the machine.
//!
//! `cargo bench --bench hot_keys -- --warm-up-time 1 --measurement-time 3`

mod common;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use common::{Keys, KEY_ARRAY};

/// The windows of the rate cases but one: short, so that a run of a few seconds spans
/// hundreds of window changes, as a hot key's traffic does.
const WINDOW: Duration = Duration::from_millis(10);

/// The key array of `keys` keys taken in turn.
fn round_robin(keys: u64) -> Keys {
    let mut array: Keys = vec![0u64; KEY_ARRAY]
        .into_boxed_slice()
        .try_into()
        .expect("KEY_ARRAY long");
    for (i, key) in array.iter_mut().enumerate() {
        *key = i as u64 % keys;
    }
    array
}

/// Requests a second `threads` threads drive through `op` over `keys`, timed for a second.
fn drive(threads: usize, keys: &Keys, op: impl Fn(u64) -> bool + Sync) -> f64 {
    let run = |from: usize| {
        let start = Instant::now();
        let mut done = 0u64;
        while start.elapsed() < Duration::from_millis(500) {
            for i in 0..10_000 {
                black_box(op(keys[(from + i) % KEY_ARRAY]));
            }
            done += 10_000;
        }
        done as f64 / start.elapsed().as_secs_f64()
    };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let run = &run;
                s.spawn(move || run(t * KEY_ARRAY / 2))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("drive")).sum()
    })
}

/// A floodgate limiter of `per_window` requests a `window` per key.
fn floodgate_rate(per_window: u32, window: Duration) -> floodgate::Limiter<u64> {
    floodgate::Limiter::builder()
        .max_rate(per_window, window)
        .promotion_threshold(0.1)
        .build()
        .expect("valid limiter")
}

/// A floodgate limiter of 3 requests in flight and `per_window` requests a `window` per key.
fn floodgate_both(per_window: u32, window: Duration) -> floodgate::Limiter<u64> {
    floodgate::Limiter::builder()
        .max_inflight(3)
        .max_rate(per_window, window)
        .promotion_threshold(0.1)
        .build()
        .expect("valid limiter")
}

/// governor's keyed limiter at `per_second` requests a second per key (its burst the same).
fn governor_rate(per_second: u64) -> DefaultKeyedRateLimiter<u64> {
    let n = NonZeroU32::new(per_second.clamp(1, u64::from(u32::MAX)) as u32).expect("non-zero");
    RateLimiter::keyed(Quota::per_second(n))
}

fn inflight(c: &mut Criterion) {
    let keys = round_robin(1);
    let mut g = c.benchmark_group("hot_keys/inflight_1key");
    g.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        let limiter: floodgate::Limiter<u64> = floodgate::Limiter::builder()
            .max_inflight(3)
            .build()
            .expect("valid limiter");
        // One request held for the whole run keeps the key at its promotion threshold (half
        // of 3, rounded up): the requests timed are a promoted key's.
        let _held = limiter.try_acquire(&0).expect("the first request");
        floodgate_side(&mut g, "inflight_1key", threads, &keys, &limiter);
        let sketch = pingora_limits::inflight::Inflight::new();
        common::bench(&mut g, "pingora_limits", threads, &keys, |key| {
            let (guard, count) = sketch.incr(key, 1);
            drop(guard);
            count
        });
    }
    g.finish();
}

fn rate(c: &mut Criterion, name: &str, keys: u64, window: Duration) {
    let array = round_robin(keys);
    let mut g = c.benchmark_group(format!("hot_keys/{name}"));
    g.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        // The drive, with limits none of its keys nears.
        let unlimited = floodgate_rate(1 << 29, window);
        let per_second = drive(threads, &array, |k| unlimited.try_acquire(&k).is_ok());
        let per_key_window = (1.5 * per_second * window.as_secs_f64() / keys as f64).ceil();
        let limiter = floodgate_rate(per_key_window as u32, window);
        floodgate_side(&mut g, name, threads, &array, &limiter);
        let unlimited = governor_rate(u64::from(u32::MAX));
        let per_second = drive(threads, &array, |k| unlimited.check_key(&k).is_ok());
        let governor = governor_rate((1.5 * per_second / keys as f64).ceil() as u64);
        common::bench(&mut g, "governor_keyed", threads, &array, |key| {
            governor.check_key(&key).is_ok()
        });
    }
    g.finish();
}

fn both(c: &mut Criterion) {
    let name = "both_1key_1s";
    let window = Duration::from_secs(1);
    let keys = round_robin(1);
    let mut g = c.benchmark_group(format!("hot_keys/{name}"));
    g.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        // One request held for the whole run keeps the key promoted (its in-flight threshold
        // is a tenth of 3, rounded up): the requests timed are a promoted key's.
        let unlimited = floodgate_both(1 << 29, window);
        let _held = unlimited.try_acquire(&0).expect("the first request");
        let per_second = drive(threads, &keys, |k| unlimited.try_acquire(&k).is_ok());
        let limiter = floodgate_both((1.5 * per_second).ceil() as u32, window);
        let _held = limiter.try_acquire(&0).expect("the first request");
        floodgate_side(&mut g, name, threads, &keys, &limiter);
        let sketch = pingora_limits::inflight::Inflight::new();
        let both = |governor: &DefaultKeyedRateLimiter<u64>, key: u64| {
            let (guard, count) = sketch.incr(key, 1);
            let admitted = count <= 3 && governor.check_key(&key).is_ok();
            drop(guard);
            admitted
        };
        let unlimited = governor_rate(u64::from(u32::MAX));
        let per_second = drive(threads, &keys, |k| both(&unlimited, k));
        let governor = governor_rate((1.5 * per_second).ceil() as u64);
        common::bench(&mut g, "governor_and_pingora", threads, &keys, |key| {
            both(&governor, key)
        });
    }
    g.finish();
}

/// Times `limiter` deciding the requests of `keys`, then says how many keys it promoted and
/// how many requests it refused: the figures are of promoted keys admitted only if every key
/// was promoted and none refused.
fn floodgate_side(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    case: &str,
    threads: usize,
    keys: &Keys,
    limiter: &floodgate::Limiter<u64>,
) {
    let refused = AtomicU64::new(0);
    common::bench(g, "floodgate", threads, keys, |key| {
        let admitted = limiter.try_acquire(&key).is_ok();
        if !admitted {
            refused.fetch_add(1, Relaxed);
        }
        admitted
    });
    let stats = limiter.stats();
    eprintln!(
        "{case} {threads}t: {} keys promoted ({} promotions), {} requests refused",
        stats.promoted,
        stats.promotions,
        refused.load(Relaxed)
    );
}

fn main() {
    let mut c = common::config().configure_from_args();
    inflight(&mut c);
    rate(&mut c, "rate_1key", 1, WINDOW);
    rate(&mut c, "rate_64keys", 64, WINDOW);
    rate(&mut c, "rate_1key_1s", 1, Duration::from_secs(1));
    both(&mut c);
    c.final_summary();
}
