//! Workloads, the floor sketch and the one/two-thread timing loop shared by the benches.
//!
//! Included with `mod common;` from each bench; each bench uses a different part of it.
//! Group and bench names come from [`ids`], which the comparison report shares.
#![allow(dead_code)]

// The ids live in test-support, which tools/compare_report depends on too.
pub use floodgate_test_support::bench_ids as ids;

use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

/// Keys are drawn from `0..KEY_SPACE` (Zipf ranks from `1..=KEY_SPACE`).
pub const KEY_SPACE: u64 = 1_000_000;
/// Length of the pre-generated key array the timing loop walks (a power of two, so the
/// index wraps with a mask and the compiler can drop the bounds check).
pub const KEY_ARRAY: usize = 1 << 20;
const MASK: usize = KEY_ARRAY - 1;
/// The hot key of [`Workload::HotKey`]: outside the uniform range so it is one key only.
pub const HOT_KEY: u64 = KEY_SPACE;

/// The pre-generated keys one workload is timed over.
pub type Keys = Box<[u64; KEY_ARRAY]>;

/// The key distributions every structure is timed on.
#[derive(Clone, Copy, Debug)]
pub enum Workload {
    /// 1,000,000 keys, uniform (the setup of pingora-limits' own benchmark).
    Uniform,
    /// Zipf with s = 1.0 over 1,000,000 keys.
    Zipf,
    /// One key takes half the traffic, the other half is uniform over 1,000,000 keys.
    HotKey,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::Uniform, Workload::Zipf, Workload::HotKey];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Uniform => ids::UNIFORM,
            Workload::Zipf => ids::ZIPF,
            Workload::HotKey => ids::HOT_KEY,
        }
    }

    /// An endless stream of this workload's keys. It allocates nothing, so the memory bench
    /// can draw from it without the keys showing up in the heap figures.
    pub fn stream(self, seed: u64) -> KeyStream {
        KeyStream {
            workload: self,
            rng: StdRng::seed_from_u64(seed),
            zipf: Zipf::new(KEY_SPACE, 1.0).expect("valid Zipf parameters"),
        }
    }

    /// The key array for the timed loops; a fixed seed so every structure, and every run,
    /// sees the same keys.
    pub fn keys(self) -> Keys {
        let keys: Vec<u64> = self.stream(0x5EED ^ self as u64).take(KEY_ARRAY).collect();
        keys.into_boxed_slice()
            .try_into()
            .expect("KEY_ARRAY keys were taken")
    }
}

/// Keys of one [`Workload`]; see [`Workload::stream`].
pub struct KeyStream {
    workload: Workload,
    rng: StdRng,
    zipf: Zipf<f64>,
}

impl Iterator for KeyStream {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        Some(match self.workload {
            Workload::Uniform => self.rng.gen_range(0..KEY_SPACE),
            // Samples are whole numbers in 1..=KEY_SPACE (rank 1 the most frequent).
            Workload::Zipf => self.zipf.sample(&mut self.rng) as u64,
            Workload::HotKey if self.rng.gen_bool(0.5) => HOT_KEY,
            Workload::HotKey => self.rng.gen_range(0..KEY_SPACE),
        })
    }
}

/// Short settings so the whole suite runs in minutes on a 2-core machine.
pub fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(25)
}

/// A group for one workload; every benchmark in it is one operation per iteration.
pub fn group<'a>(
    c: &'a mut Criterion,
    part: &str,
    workload: Workload,
) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(ids::group(part, workload.name()));
    group.throughput(Throughput::Elements(1));
    group
}

/// Registers `op` (one operation on one key) as `name/1t` or `name/2t`.
///
/// With two threads both run `iters` operations on the same shared structure (`op` captures
/// it), starting half the key array apart, and the time reported is the wall time over
/// `2 × iters`: the cost per operation of the aggregate throughput, so the figures of two
/// structures compare as a throughput ratio. Per-thread latency is twice that figure.
pub fn bench<F, R>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    threads: usize,
    keys: &Keys,
    op: F,
) where
    F: Fn(u64) -> R + Sync,
{
    assert!(threads == 1 || threads == 2, "one or two threads");
    group.bench_function(BenchmarkId::new(name, ids::threads(threads)), |b| {
        b.iter_custom(|iters| match threads {
            1 => {
                let start = Instant::now();
                run(keys, 0, iters, &op);
                start.elapsed()
            }
            _ => two_threads(keys, iters, &op),
        })
    });
}

fn two_threads<F, R>(keys: &Keys, iters: u64, op: &F) -> Duration
where
    F: Fn(u64) -> R + Sync,
{
    // Spawning happens before the barrier, so it is not timed.
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let helper = s.spawn(|| {
            barrier.wait();
            run(keys, KEY_ARRAY / 2, iters, op);
        });
        barrier.wait();
        let start = Instant::now();
        run(keys, 0, iters, op);
        // The aggregate run ends when both threads have done their share.
        helper.join().expect("bench thread panicked");
        start.elapsed() / 2
    })
}

/// `iters` operations over the key array from position `from`, wrapping around.
#[inline(always)]
fn run<F, R>(keys: &Keys, from: usize, iters: u64, op: &F)
where
    F: Fn(u64) -> R,
{
    let mut i = from;
    for _ in 0..iters {
        black_box(op(keys[i & MASK]));
        i = i.wrapping_add(1);
    }
}

/// The floor: an H×N array of counters updated at columns computed before timing, so an
/// operation is H relaxed `fetch_add`s and a `min`, with no hashing, no bounds checks and no
/// saturation logic — what no H-row count-min sketch can go under.
///
/// Its "keys" (see [`Floor::keys`]) pack the H pre-computed columns of a real key into one
/// `u64`, 16 bits a row, so the timing loop reads the same 8 bytes per operation as it does
/// for the real sketches.
pub struct Floor<const H: usize, const N: usize> {
    rows: Box<[[AtomicIsize; N]; H]>,
}

impl<const H: usize, const N: usize> Default for Floor<H, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const H: usize, const N: usize> Floor<H, N> {
    pub fn new() -> Self {
        assert!(H <= 4 && N.is_power_of_two() && N <= 1 << 16);
        Floor {
            rows: Box::new(std::array::from_fn(|_| {
                std::array::from_fn(|_| AtomicIsize::new(0))
            })),
        }
    }

    /// Each key's H columns, derived from one hash of the key so that equal keys (the hot
    /// key) hit equal counters, as in a real sketch.
    pub fn keys(keys: &Keys) -> Keys {
        use std::hash::BuildHasher;
        let hasher = std::collections::hash_map::RandomState::new();
        let bits = N.trailing_zeros();
        let packed: Vec<u64> = keys
            .iter()
            .map(|key| {
                let hash = hasher.hash_one(key);
                (0..H).fold(0, |acc, row| {
                    let column = (hash >> (row as u32 * bits)) & (N as u64 - 1);
                    acc | (column << (16 * row))
                })
            })
            .collect();
        packed
            .into_boxed_slice()
            .try_into()
            .expect("one packed entry per key")
    }

    /// H relaxed `fetch_add`s; returns the minimum, like a sketch's `incr`.
    #[inline(always)]
    pub fn incr(&self, packed: u64, value: isize) -> isize {
        let mut estimate = isize::MAX;
        for (row, counters) in self.rows.iter().enumerate() {
            let column = (packed >> (16 * row)) as usize & (N - 1);
            let new = counters[column]
                .fetch_add(value, Relaxed)
                .wrapping_add(value);
            estimate = estimate.min(new);
        }
        estimate
    }

    /// H relaxed `fetch_sub`s.
    #[inline(always)]
    pub fn decr(&self, packed: u64, value: isize) {
        for (row, counters) in self.rows.iter().enumerate() {
            let column = (packed >> (16 * row)) as usize & (N - 1);
            counters[column].fetch_sub(value, Relaxed);
        }
    }
}
