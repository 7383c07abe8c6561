//! Rate: floodgate vs pingora-limits 0.9, side by side in one run.
//!
//! - `rate_observe_<workload>`: `observe(&key, 1)`, one and two threads on one shared `Rate`,
//!   both crates with 4 × 1024 sketches and a one-second interval.
//! - `rate_with_<workload>`: `rate_with(&key, PROPORTIONAL_RATE_ESTIMATE_CALC_FN)`.
//! - After the criterion groups, a latency run across many window changes: one thread calls
//!   `observe` back to back for 200 windows of 50 ms and records every call's time in
//!   a histogram; it prints p50, p99, p99.99 and max per crate. pingora-limits clears a window
//!   on the request that finds it expired; floodgate's ticker clears ahead of time on its own
//!   thread.

mod common;

use std::time::{Duration, Instant};

use common::ids::{rate as ids, THREADS};
use common::{bench, config, group, Workload};
use criterion::Criterion;

const ROWS: usize = 4;
const COLUMNS: usize = 1024;

fn observe(c: &mut Criterion) {
    for workload in [Workload::Uniform, Workload::Zipf] {
        let keys = workload.keys();
        let mut g = group(c, ids::OBSERVE, workload);
        for threads in THREADS {
            let ours =
                floodgate::Rate::new_with_estimator_config(Duration::from_secs(1), ROWS, COLUMNS);
            bench(&mut g, ids::FLOODGATE.id, threads, &keys, |k| {
                ours.observe(&k, 1)
            });
            let pingora = pingora_limits::rate::Rate::new_with_estimator_config(
                Duration::from_secs(1),
                ROWS,
                COLUMNS,
            );
            bench(&mut g, ids::PINGORA.id, threads, &keys, |k| {
                pingora.observe(&k, 1)
            });
        }
        g.finish();
    }
}

fn rate_with(c: &mut Criterion) {
    for workload in [Workload::Uniform, Workload::Zipf] {
        let keys = workload.keys();
        let mut g = group(c, ids::WITH, workload);
        for threads in THREADS {
            let ours =
                floodgate::Rate::new_with_estimator_config(Duration::from_secs(1), ROWS, COLUMNS);
            bench(&mut g, ids::FLOODGATE.id, threads, &keys, |k| {
                ours.rate_with(&k, floodgate::rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN)
            });
            let pingora = pingora_limits::rate::Rate::new_with_estimator_config(
                Duration::from_secs(1),
                ROWS,
                COLUMNS,
            );
            bench(&mut g, ids::PINGORA.id, threads, &keys, |k| {
                pingora.rate_with(&k, pingora_limits::rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN)
            });
        }
        g.finish();
    }
}

/// Per-call latencies in 1 ns bins up to 100 µs, the exact maximum, and the maximum within
/// each window (their median shows a per-window cost that single preemptions cannot fake).
struct Histogram {
    bins: Vec<u64>,
    max: u64,
    calls: u64,
    window_max: Vec<u64>,
}

impl Histogram {
    const BINS: usize = 100_000;

    fn new() -> Self {
        Histogram {
            bins: vec![0; Self::BINS],
            max: 0,
            calls: 0,
            window_max: Vec::new(),
        }
    }

    fn record(&mut self, window: usize, nanos: u64) {
        self.bins[(nanos as usize).min(Self::BINS - 1)] += 1;
        self.max = self.max.max(nanos);
        self.calls += 1;
        if self.window_max.len() <= window {
            self.window_max.resize(window + 1, 0);
        }
        self.window_max[window] = self.window_max[window].max(nanos);
    }

    fn median_window_max(&self) -> u64 {
        let mut maxima = self.window_max.clone();
        maxima.sort_unstable();
        maxima.get(maxima.len() / 2).copied().unwrap_or(0)
    }

    fn quantile(&self, q: f64) -> u64 {
        let wanted = (self.calls as f64 * q).ceil() as u64;
        let mut seen = 0;
        for (nanos, &n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= wanted {
                return nanos as u64;
            }
        }
        self.max
    }
}

/// Calls `op` back to back for `run`, timing each call; `interval` groups calls by window
/// (counted from the start of the run, close to the `Rate`'s creation).
fn latency(
    keys: &common::Keys,
    run: Duration,
    interval: Duration,
    op: impl Fn(u64) -> isize,
) -> Histogram {
    let mut histogram = Histogram::new();
    let start = Instant::now();
    let mut i = 0usize;
    while start.elapsed() < run {
        for _ in 0..1024 {
            let key = keys[i & (common::KEY_ARRAY - 1)];
            i = i.wrapping_add(1);
            let t = Instant::now();
            std::hint::black_box(op(key));
            let nanos = t.elapsed().as_nanos() as u64;
            let window = (t.duration_since(start).as_nanos() / interval.as_nanos()) as usize;
            histogram.record(window, nanos);
        }
    }
    histogram
}

fn latency_across_windows() {
    // Short enough for 200 window changes in 10 s; long enough (5 ticks) that most calls take
    // the coarse-clock fast path, which reads the precise clock only within two ticks of a
    // boundary.
    const INTERVAL: Duration = Duration::from_millis(50);
    const WINDOWS: u32 = 200;
    let keys = Workload::Uniform.keys();
    let run = INTERVAL * WINDOWS;
    println!();
    println!(
        "{} {WINDOWS} windows of {INTERVAL:?}, {ROWS}x{COLUMNS}, uniform keys, one thread \
         (each call timed with a pair of Instant::now())",
        ids::LATENCY_HEADING
    );
    println!(
        "| crate | calls | p50 ns | p99 ns | p99.99 ns | median of per-window max ns | max ns |"
    );
    println!("|---|---|---|---|---|---|---|");
    let empty = latency(&keys, INTERVAL * 20, INTERVAL, |k| k as isize);
    let ours = floodgate::Rate::new_with_estimator_config(INTERVAL, ROWS, COLUMNS);
    let floodgate = latency(&keys, run, INTERVAL, |k| ours.observe(&k, 1));
    let pingora_rate =
        pingora_limits::rate::Rate::new_with_estimator_config(INTERVAL, ROWS, COLUMNS);
    let pingora = latency(&keys, run, INTERVAL, |k| pingora_rate.observe(&k, 1));
    for (name, h) in [
        ("timer only", &empty),
        ("floodgate", &floodgate),
        ("pingora-limits", &pingora),
    ] {
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} |",
            h.calls,
            h.quantile(0.5),
            h.quantile(0.99),
            h.quantile(0.9999),
            h.median_window_max(),
            h.max
        );
    }
}

fn main() {
    let mut c = config().configure_from_args();
    observe(&mut c);
    rate_with(&mut c);
    c.final_summary();
    // Criterion's `--list` and test-mode runs pass a filter or `--test`; skip the long run
    // then, and when a filter names only the criterion groups.
    let args: Vec<String> = std::env::args().collect();
    let skip = args.iter().any(|a| a == "--test" || a == "--list")
        || args
            .iter()
            .skip(1)
            .any(|a| !a.starts_with('-') && !"latency".contains(a.as_str()));
    if !skip {
        latency_across_windows();
    }
}
