//! Over-rejection of sketch-only decisions against floodgate's two-stage decisions, for a
//! per-origin rate limit under Zipf traffic.
//!
//! Run with `cargo run --release --example accuracy`.
//!
//! Traffic: 2,000,000 requests over 1,000,000 origins, origin ranks drawn from a Zipf
//! distribution with s = 1.0 (seeded, so every run sees the same traffic), arriving at
//! 100,000 requests per simulated second on a [`ManualClock`] (10 µs apart). The limit is
//! 100 requests per origin per 1 s sliding window (`prev·(1−f) + curr`, windows anchored at
//! time 0). About 70 origins send more than that.
//!
//! For each sketch size, every request is decided twice:
//!
//! - **sketch-only**: by the count-min estimate alone, as the limiter decides when its exact
//!   stage cannot help — a [`Rate`] of the same size counts every request (rejected ones too,
//!   as the limiter's rate sketch does), and a request is rejected when its sliding-window
//!   estimate, this request included, exceeds the limit;
//! - **two-stage**: by a default [`Limiter`] (promotion at 1/2 of the limit, exact stage
//!   sized from the default peak rate) with that sketch size.
//!
//! Each is compared with its own exact model: a map of the requests it admitted per origin in
//! the current and the previous window. An *over-rejection* is a rejected request that the
//! exact model would have admitted (sliding count of admitted requests, this one included,
//! at or under the limit); a *violation* is an admitted request the exact model says is over
//! the limit (there must be none).
//!
//! Most sketch-only over-rejections are not collisions: a sketch that counts offered load
//! keeps an origin that offers far more than its limit over the limit in every window, so it
//! admits none of its requests after the first window, while the exact model (admitted
//! requests) gives it its 100 per window. The column "of which collisions" counts only the
//! sketch-only over-rejections whose exact *offered* count was at or under the limit — the
//! error that ε·total bounds. The hash keys are random per instance (by design), so the
//! counts vary a little from run to run; the traffic and the clock do not. The exact models
//! are in examples/support (`accuracy`).
//!
//! The count-min bound for a sketch of H rows × N columns: ε = e/N, δ = e^−H, and an estimate
//! exceeds the true count by more than ε·total with probability at most δ, where total is the
//! count of everything in the sketch — here one window slot, 100,000 requests.

use std::time::{Duration, Instant};

use floodgate::clock::ManualClock;
use floodgate::{Limiter, Rate};
use floodgate_example_support::accuracy::{Judge, Offered};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};

const ORIGINS: u64 = 1_000_000;
const REQUESTS: usize = 2_000_000;
const PER_SECOND: u64 = 100_000;
const INTERVAL: Duration = Duration::from_secs(1);
const LIMIT: u32 = 100;
const SIZES: [(usize, usize); 4] = [(2, 1024), (4, 1024), (4, 4096), (4, 16384)];

struct Row {
    rows: usize,
    columns: usize,
    sketch: Judge,
    /// Sketch-only rejections of requests whose exact offered count was under the limit.
    collisions: u64,
    two_stage: Judge,
    promotions: u64,
    exact_full: u64,
}

fn run(traffic: &[u64], rows: usize, columns: usize) -> Row {
    let clock = ManualClock::new();
    let sketch = Rate::builder(INTERVAL)
        .estimator(rows, columns)
        .clock(&clock)
        .build()
        .expect("valid sketch");
    let limiter: Limiter<u64> = Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .sketch(rows, columns)
        .clock(&clock)
        .build()
        .expect("valid limiter");
    let (mut sketch_judge, mut two_stage_judge) = (Judge::new(LIMIT), Judge::new(LIMIT));
    let mut offered = Offered::new(LIMIT);
    let mut collisions = 0;
    let step = Duration::from_nanos(1_000_000_000 / PER_SECOND);
    let interval_nanos = INTERVAL.as_nanos() as u64;
    let mut last_bucket = 0;
    for (i, &key) in traffic.iter().enumerate() {
        let now = i as u64 * step.as_nanos() as u64; // the clock's time, from 0
        let bucket = now / interval_nanos;
        let fraction = (now - bucket * interval_nanos) as f64 / interval_nanos as f64;
        if bucket != last_bucket {
            sketch_judge.new_window(bucket);
            two_stage_judge.new_window(bucket);
            offered.new_window(bucket);
            last_bucket = bucket;
        }

        // Sketch-only: count the request, judge by the estimate.
        sketch.observe(&key, 1);
        let estimate = sketch.rate_with(&key, |p| {
            p.prev_samples as f64 * (1.0 - p.current_interval_fraction) + p.curr_samples as f64
        });
        let admitted = estimate <= LIMIT as f64;
        sketch_judge.judge(key, bucket, fraction, admitted);
        if offered.offer(key, bucket, fraction) && !admitted {
            collisions += 1;
        }

        // Two-stage: the limiter.
        let admitted = limiter.try_acquire(&key).is_ok();
        two_stage_judge.judge(key, bucket, fraction, admitted);

        clock.advance(step);
    }
    let stats = limiter.stats();
    Row {
        rows,
        columns,
        sketch: sketch_judge,
        collisions,
        two_stage: two_stage_judge,
        promotions: stats.promotions,
        exact_full: stats.exact_full,
    }
}

fn percent(n: u64) -> f64 {
    100.0 * n as f64 / REQUESTS as f64
}

fn main() {
    let started = Instant::now();
    let zipf = Zipf::new(ORIGINS, 1.0).expect("valid Zipf parameters");
    let mut rng = StdRng::seed_from_u64(0x0f10_0d6a_7e00);
    let traffic: Vec<u64> = (0..REQUESTS)
        .map(|_| zipf.sample(&mut rng) as u64)
        .collect();
    let total_per_window = PER_SECOND as f64 * INTERVAL.as_secs_f64();

    println!(
        "Zipf s=1.0 over {ORIGINS} origins, {REQUESTS} requests at {PER_SECOND}/s simulated, \
         limit {LIMIT} per {INTERVAL:?} (sliding window) per origin; two-stage = default \
         Limiter (promotion 0.5, exact capacity 1024).\n"
    );
    println!(
        "| sketch | ε = e/N | δ = e^−H | ε·total | requests | rejected sketch-only \
         | over-rejections sketch-only | of which collisions | rejected two-stage \
         | over-rejections two-stage | promotions / exact_full | under-limit violations |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut violations = 0;
    for (rows, columns) in SIZES {
        let row = run(&traffic, rows, columns);
        let epsilon = std::f64::consts::E / row.columns as f64;
        let delta = (-(row.rows as f64)).exp();
        violations += row.sketch.violations + row.two_stage.violations;
        println!(
            "| {}×{} | {:.5} | {:.4} | {:.1} | {} | {} | {} ({:.3}%) | {} ({:.3}%) | {} | {} ({:.3}%) | {} / {} | {} |",
            row.rows,
            row.columns,
            epsilon,
            delta,
            epsilon * total_per_window,
            REQUESTS,
            row.sketch.rejected,
            row.sketch.over_rejected,
            percent(row.sketch.over_rejected),
            row.collisions,
            percent(row.collisions),
            row.two_stage.rejected,
            row.two_stage.over_rejected,
            percent(row.two_stage.over_rejected),
            row.promotions,
            row.exact_full,
            row.sketch.violations + row.two_stage.violations,
        );
    }
    println!(
        "\nε·total is per window slot (total = {total_per_window} requests per window). \
         Percentages are of all requests. Ran in {:.1?}.",
        started.elapsed()
    );
    assert_eq!(violations, 0, "a request over its limit was admitted");
}
