//! Limiter: floodgate's `try_acquire` + permit drop vs governor 0.10 keyed (`check_key`) and an
//! exact per-key DashMap limiter, side by side in one run.
//!
//! All three limit each key to `LIMIT` requests per second (floodgate: rate limit only, default
//! sketch 4 × 4096, exact stage of 1,024 keys). Workloads: 1,000,000 keys uniform, Zipf s=1.0,
//! and a flood that cycles through 10,000,000 distinct keys (each thread its own half). One and
//! two threads on one shared limiter. Peak memory is in `benches/memory.rs`.

mod common;

use std::cell::Cell;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::{bench, config, Keys, Workload};
use criterion::Criterion;
use dashmap::DashMap;
use governor::{Quota, RateLimiter};

/// Requests per second per key. High, because a bench loop sends tens of millions of requests
/// a second: with 4 × 4096 counters a window's noise per counter is that total / 4096, and a
/// sketch must be sized so that noise stays well below the promotion threshold (as a proxy's
/// would be for its own traffic). Zipf's first ranks still go over it.
const LIMIT: u32 = 1_000_000;
const FLOOD_KEYS: u64 = 10_000_000;

/// The exact baseline a proxy might write by hand: a fixed one-second window per key in a
/// DashMap, the window start and count in one atomic (upper 32 bits: window, lower: count).
struct DashMapLimiter {
    map: DashMap<u64, AtomicU64>,
    start: Instant,
}

impl DashMapLimiter {
    fn new() -> Self {
        DashMapLimiter {
            map: DashMap::new(),
            start: Instant::now(),
        }
    }

    fn check(&self, key: u64) -> bool {
        let window = self.start.elapsed().as_secs();
        let entry = self.map.entry(key).or_insert_with(|| AtomicU64::new(0));
        let mut admitted = false;
        let _ = entry.fetch_update(Relaxed, Relaxed, |packed| {
            let (w, n) = (packed >> 32, packed & 0xFFFF_FFFF);
            let n = if w == window { n } else { 0 };
            admitted = n < u64::from(LIMIT);
            Some((window << 32) | (n + u64::from(admitted)))
        });
        admitted
    }
}

fn floodgate_limiter() -> floodgate::Limiter<u64> {
    floodgate::Limiter::builder()
        .max_rate(LIMIT as isize, Duration::from_secs(1))
        .build()
        .expect("valid limiter")
}

fn governor_limiter() -> governor::DefaultKeyedRateLimiter<u64> {
    RateLimiter::keyed(Quota::per_second(NonZeroU32::new(LIMIT).expect("non-zero")))
}

thread_local! {
    /// The flood's next key on this thread.
    static NEXT: Cell<u64> = const { Cell::new(0) };
}

/// A key of the flood: the array key picks a thread-distinct start, then each call takes the
/// next of `FLOOD_KEYS` distinct keys, scattered by an odd multiplier.
fn flood_key(seed: u64) -> u64 {
    NEXT.with(|next| {
        let n = next.get();
        let n = if n == 0 { seed % FLOOD_KEYS + 1 } else { n };
        next.set(if n + 1 > FLOOD_KEYS { 1 } else { n + 1 });
        n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    })
}

fn run_workload(c: &mut Criterion, name: &str, keys: &Keys, key_of: fn(u64) -> u64) {
    let mut g = c.benchmark_group(format!("limiter_{name}"));
    g.throughput(criterion::Throughput::Elements(1));
    for threads in [1, 2] {
        let ours = floodgate_limiter();
        bench(&mut g, "floodgate", threads, keys, |k| {
            ours.try_acquire(&key_of(k)).is_ok()
        });
        let governor = governor_limiter();
        bench(&mut g, "governor_keyed", threads, keys, |k| {
            governor.check_key(&key_of(k)).is_ok()
        });
        let exact = DashMapLimiter::new();
        bench(&mut g, "dashmap_exact", threads, keys, |k| {
            exact.check(key_of(k))
        });
    }
    g.finish();
}

fn limiters(c: &mut Criterion) {
    for workload in [Workload::Uniform, Workload::Zipf] {
        let keys = workload.keys();
        run_workload(c, workload.name(), &keys, |k| k);
    }
    let keys = Workload::Uniform.keys();
    run_workload(c, "flood_10m", &keys, flood_key);
}

fn main() {
    let mut c = config().configure_from_args();
    limiters(&mut c);
    c.final_summary();
}
