//! Limiter: floodgate's `try_acquire` + permit drop next to governor 0.10 keyed (`check_key`)
//! and an exact per-key DashMap limiter, with limits that keys reach.
//!
//! Every limiter limits each key to **100 requests per second** ([`LIMIT`] per [`INTERVAL`]):
//! floodgate with `max_rate(100, 1 s)`, sized for the rate each group drives
//! ([`LimiterBuilder::peak_rate`](floodgate::LimiterBuilder::peak_rate)), promotion at half the
//! limit; governor keyed with
//! `Quota::per_second(100)` (GCRA: a burst of 100, one more every 10 ms); the DashMap limiter
//! with a fixed one-second window per key.
//!
//! # Simulated request rates: `limiter_sim_<workload>_<rate>`
//!
//! One group per workload × rate (10k, 100k and 1M requests per second), each timing the three
//! limiters (`floodgate`, `governor_keyed`, `dashmap_exact`) on the same pre-generated trace of
//! [`TRACE_SECS`] simulated seconds: a `Vec` of (key, advance the clock first?). The clock moves
//! [`STEP`] (10 ms) every rate/100 requests: floodgate on a `ManualClock` (whose `advance` also
//! runs the window clearing that the ticker thread does in production, so that work is inside
//! floodgate's figure), governor on its `FakeRelativeClock`, the DashMap limiter on a
//! `ManualClock` of its own. Criterion may run any number of iterations: the trace is replayed
//! cyclically from where the previous batch stopped, and each limiter's clock only moves
//! forward, one step every rate/100 requests, so the rate a limiter sees is the workload's
//! however long it is timed. The timing loop reads the trace and calls the limiter; it
//! allocates nothing itself. Workloads:
//!
//! - `uniform`: healthy origins: keys drawn uniformly from rate/10 keys, so each key sends 10
//!   requests per second on average, a tenth of its limit.
//! - `zipf`: Zipf with s = 1.1 over 1,000,000 keys; the first ranks go over their limits
//!   (about 10 keys at 10k/s, 650 at 1M/s).
//! - `single_key`: every request for one key.
//! - `rotating`: a flood of invented keys, each sent twice (consecutively), never seen before.
//! - `mixed`: the trace of issue 9: 100 healthy origins at 10% of their limit (10 requests per
//!   second each, 1,000/s in all), a single-key flood taking 20% of the requests, and a
//!   rotating-key flood taking the rest.
//!
//! Beside the three limiters, each group times `floor`: the atomics floodgate's rate decision
//! must do on the cache lines it must touch (see [`SimFloor`]), on indexes worked out before
//! timing, the same trace.
//!
//! # Decision quality and memory: the untimed pass
//!
//! Before any timing, each limiter is fed each trace once from a fresh state (one thread),
//! and every decision is checked against an exact model of the window its own algorithm
//! implements, fed the same requests:
//!
//! - floodgate: the sliding window `prev·(1−f) + curr` over fixed one-second buckets that its
//!   `Rate` uses (`f`: how far into the current bucket), in floodgate's integer form;
//! - governor: for healthy requests, the exact count in the trailing second `(t − 1 s, t]`;
//!   for admissions, GCRA itself (`t ≥ TAT − τ`, τ = 99 × 10 ms);
//! - DashMap: the count in the current fixed one-second window.
//!
//! A request is **healthy** when its key's *offered* count (every request of the key in the
//! trace so far, whatever was decided), this request included, is at most the limit in that
//! window. A correct limiter must admit it (its admitted count can only be lower; for GCRA, any
//! arrival with at most 100 offered in the trailing second conforms, because GCRA admits at
//! most 100 + d/10 ms in any span d). Refusing it is a **wrong refusal**. An admitted request is
//! an **over-limit admission** when the model, fed the requests this limiter actually
//! admitted, would have refused it: the key's admitted count in the window, this request
//! included, is above the limit (for governor: the exact GCRA state says it does not conform).
//! Requests of a key over its limit by offered count but with room left by admitted count are
//! neither: a limiter may admit or refuse them. "Origins refused" is the share of the `mixed`
//! trace's 100 healthy origins' requests refused. Wrong refusals and origins refused are also
//! given from 2 simulated seconds on, past the first windows' warm-up.
//!
//! Peak heap is the limiter's own (its clock included), measured with the tests' per-thread
//! counting allocator (test-support/src/counting_alloc.rs; the pass brackets each call rather
//! than reading its peak): the bytes held between requests, plus within a request at most what
//! it allocated (exact for a table resize, an upper bound otherwise). The table goes to stdout
//! and to `target/limiter-accuracy.csv` (under `$CARGO_TARGET_DIR` if set).
//! Traces are 40k, 400k and 4M requests (16 bytes each); the pass takes about 40 s.
//!
//! # Real clock: `limiter_uniform`, `limiter_zipf`, `limiter_flood_10m`, `limiter_flood_1key`
//!
//! One and two threads on one shared limiter, as fast as the loop goes: 1,000,000 keys uniform
//! (each under its limit), Zipf s = 1.1 over 1,000,000 keys, a flood that cycles through
//! 10,000,000 distinct keys (each thread its own half), and a single-key flood (90% of the
//! requests for one key, the rest uniform). That is millions to tens of millions of requests
//! per second, more than the simulated rates, so floodgate is sized for it as a user would
//! (`peak_rate(`[`REAL_PEAK`]`)`). One group, `limiter_uniform_past_peak`, sends the uniform
//! traffic through a limiter sized for the default peak (a million a second): past its peak,
//! where the noise per counter reaches the promotion threshold and `stats()` says
//! `saturated`.
//!
//! # Running
//!
//! `cargo bench --bench limiter` (the accuracy table first, then the timed groups);
//! `LIMITER_ACCURACY=only` prints the table and times nothing, `LIMITER_ACCURACY=0` skips it.
//! `LIMITER_SHADOW=1` builds floodgate's limiters in shadow mode, to time it on.
//! `LIMITER_INFLIGHT=static` adds an in-flight limit of 100 to floodgate's limiters, and
//! `LIMITER_INFLIGHT=adaptive` learns it under that ceiling: the two side by side time what
//! learning costs when it is on.
//! `LIMITER_COST=n` makes each of floodgate's simulated requests cost n units
//! (`with_cost(n)`), against a limit and a peak rate n times as large: the same decisions,
//! timed on the path of a request with a cost (a type of its own, so that the default
//! groups' code is not touched by it).
//! The counting allocator adds a thread-local update to each allocation, the same for every
//! limiter (in steady state floodgate allocates nothing, the maps only when they grow).

mod common;

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use common::ids::{limiter as ids, limiter_sim as sim_ids, THREADS};
use common::{bench, config, Keys, Workload, HOT_KEY, KEY_ARRAY, KEY_SPACE};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use dashmap::DashMap;
use floodgate::clock::ManualClock;
use floodgate_test_support::counting_alloc::{bytes_allocated_by, bytes_held, CountingAlloc};
use governor::clock::FakeRelativeClock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Zipf};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Requests per [`INTERVAL`] per key, for every limiter and every group.
const LIMIT: u32 = 100;
const INTERVAL: Duration = Duration::from_secs(1);
const INTERVAL_NANOS: u64 = 1_000_000_000;

/// The simulated clock's step, and steps per interval.
const STEP: Duration = Duration::from_millis(10);
const STEP_NANOS: u64 = 10_000_000;
const STEPS_PER_INTERVAL: u64 = INTERVAL_NANOS / STEP_NANOS;
/// Simulated seconds in one trace (its length is rate × this).
const TRACE_SECS: u64 = 4;
/// The accuracy table also counts the requests from this simulated time on: the steady
/// state, past the first windows' warm-up.
const STEADY_NANOS: u64 = 2 * INTERVAL_NANOS;

/// Zipf exponent of the `zipf` workloads (simulated and real clock).
const ZIPF_S: f64 = 1.1;
/// A healthy origin's requests per second (10% of its limit).
const HEALTHY_RATE: u64 = 10;
/// Healthy origins in the `mixed` workload, and their keys (`ORIGIN_BASE..+ORIGINS`).
const ORIGINS: u64 = 100;
const ORIGIN_BASE: u64 = 1 << 40;
/// The single-key flood's key (outside the uniform, Zipf and origin keys).
const FLOOD_KEY: u64 = (1 << 40) - 1;
/// The single-key flood's share of the `mixed` workload.
const MIXED_FLOOD_SHARE: f64 = 0.2;
/// Distinct keys of the real-clock `flood_10m` group.
const FLOOD_KEYS: u64 = 10_000_000;

/// The `n`th invented key of a rotating flood: distinct for every `n < 2^63`, top bit set so
/// it is none of the other workloads' keys.
fn rotating_key(n: u64) -> u64 {
    n.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1 << 63
}

fn is_origin(key: u64) -> bool {
    (ORIGIN_BASE..ORIGIN_BASE + ORIGINS).contains(&key)
}

// ---------------------------------------------------------------------------------------------
// The limiters.

/// The exact baseline a proxy might write by hand: a fixed one-second window per key in a
/// DashMap, the window number and count in one atomic (upper 32 bits: window, lower: count).
struct DashMapLimiter {
    map: DashMap<u64, AtomicU64>,
}

impl DashMapLimiter {
    fn new() -> Self {
        DashMapLimiter {
            map: DashMap::new(),
        }
    }

    /// Admits `key` in fixed window number `window` if it has admitted fewer than `LIMIT` there.
    fn check(&self, key: u64, window: u64) -> bool {
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

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(LIMIT).expect("non-zero"))
}

/// floodgate's limiter, in shadow mode with `LIMITER_SHADOW=1` (to time what shadow mode
/// costs when on: every decision made, refusals admitted), with an in-flight limit of 100 as
/// well with `LIMITER_INFLIGHT=static`, learnt under that ceiling with
/// `LIMITER_INFLIGHT=adaptive` (to time what learning costs when on, against `static`).
fn floodgate_builder() -> floodgate::LimiterBuilder<u64> {
    let shadow = std::env::var("LIMITER_SHADOW").is_ok_and(|v| v == "1");
    let builder = floodgate::Limiter::builder()
        .max_rate(LIMIT, INTERVAL)
        .shadow(shadow);
    match std::env::var("LIMITER_INFLIGHT").as_deref() {
        Ok("static") => builder.max_inflight(100),
        Ok("adaptive") => builder
            .max_inflight(100)
            .adaptive_inflight(floodgate::AdaptiveInflight::new()),
        _ => builder,
    }
}

/// A limiter on simulated time: the trace's two operations.
trait Simulated {
    /// Moves this limiter's clock forward by [`STEP`].
    fn advance(&self);
    /// Decides one request; true if admitted.
    fn check(&self, key: u64) -> bool;
}

struct SimFloodgate {
    clock: ManualClock,
    limiter: floodgate::Limiter<u64>,
}

impl SimFloodgate {
    /// Sized for `rate` requests per second, the rate its trace simulates (as a user would).
    fn new(rate: u64) -> Self {
        let clock = ManualClock::new();
        let limiter = floodgate_builder()
            .peak_rate(rate)
            .clock(&clock)
            .build()
            .expect("valid limiter");
        SimFloodgate { clock, limiter }
    }
}

impl Simulated for SimFloodgate {
    #[inline]
    fn advance(&self) {
        self.clock.advance(STEP);
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        // In shadow, refusals are admitted too: the timing is of the decisions, the same.
        self.limiter.try_acquire(&key).is_ok()
    }
}

/// [`SimFloodgate`] whose requests cost `cost` units each, against a limit and a peak rate
/// `cost` times as large: the same decisions, on the path of a request with a cost.
struct SimFloodgateCost {
    sim: SimFloodgate,
    cost: u32,
}

impl SimFloodgateCost {
    fn new(rate: u64, cost: u32) -> Self {
        let clock = ManualClock::new();
        let limiter = floodgate_builder()
            .max_rate(LIMIT * cost, INTERVAL)
            .peak_rate(rate * u64::from(cost))
            .clock(&clock)
            .build()
            .expect("valid limiter");
        SimFloodgateCost {
            sim: SimFloodgate { clock, limiter },
            cost,
        }
    }

    /// `LIMITER_COST`, if it asks for a cost over 1.
    fn from_env() -> Option<u32> {
        let cost = std::env::var("LIMITER_COST").ok()?.parse().ok()?;
        (cost > 1).then_some(cost)
    }
}

impl Simulated for SimFloodgateCost {
    #[inline]
    fn advance(&self) {
        self.sim.advance();
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        let limiter = &self.sim.limiter;
        limiter.with_cost(self.cost).try_acquire(&key).is_ok()
    }
}

type FakeKeyed =
    RateLimiter<u64, DefaultKeyedStateStore<u64>, FakeRelativeClock, NoOpMiddleware<Nanos>>;

struct SimGovernor {
    clock: FakeRelativeClock,
    limiter: FakeKeyed,
}

impl SimGovernor {
    fn new() -> Self {
        let clock = FakeRelativeClock::default();
        // `RateLimiter::keyed`'s state store, on the fake clock.
        let limiter = RateLimiter::new(quota(), DefaultKeyedStateStore::default(), clock.clone());
        SimGovernor { clock, limiter }
    }
}

impl Simulated for SimGovernor {
    #[inline]
    fn advance(&self) {
        self.clock.advance(STEP);
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.limiter.check_key(&key).is_ok()
    }
}

struct SimDashMap {
    clock: ManualClock,
    limiter: DashMapLimiter,
}

impl SimDashMap {
    fn new() -> Self {
        SimDashMap {
            clock: ManualClock::new(),
            limiter: DashMapLimiter::new(),
        }
    }
}

impl Simulated for SimDashMap {
    #[inline]
    fn advance(&self) {
        self.clock.advance(STEP);
    }

    #[inline]
    fn check(&self, key: u64) -> bool {
        self.limiter.check(key, self.clock.now().as_secs())
    }
}

/// The floor of floodgate's rate decision: the atomics it must do on the lines it must touch,
/// on indexes worked out before timing. A request adds 1 to its key's counter in each of the
/// 2 rows (floodgate's default) of one 64-byte block of the current window's table (2 locked
/// adds on one line) and reads its 2 counters in one block of the previous window's (2 loads
/// on one line): 2 lines.
/// The tables have as many blocks as floodgate's at the same peak rate; the floor clears
/// nothing (whatever a window change costs is above the floor) and hashes nothing: its trace's
/// keys are the blocks and counters, pre-computed ([`SimFloor::trace`]).
struct SimFloor {
    /// One table per window parity, as many 16-counter blocks as floodgate's.
    tables: [Box<[Block]>; 2],
    steps: Cell<u64>,
}

/// A cache line of 16 counters.
#[repr(align(64))]
struct Block([AtomicU32; 16]);

impl SimFloor {
    fn new(rate: u64) -> Self {
        // floodgate's sizing (LimiterBuilder::peak_rate): 8·events/promote_at columns, from
        // 2^10 to 2^17, 8 a row in a block.
        let columns = (8 * rate * INTERVAL_NANOS / 1_000_000_000 / u64::from(LIMIT / 2))
            .clamp(1 << 10, 1 << 17);
        let blocks = columns.div_ceil(8) as usize;
        let table = || {
            (0..blocks)
                .map(|_| Block(std::array::from_fn(|_| AtomicU32::new(0))))
                .collect()
        };
        SimFloor {
            tables: [table(), table()],
            steps: Cell::new(0),
        }
    }

    /// `trace` with each key replaced by its block (top 32 bits) and a counter of each row
    /// (three bits a row, low bits), taken from a hash of it.
    fn trace(&self, trace: &[Op]) -> Vec<Op> {
        let hasher = ahash::RandomState::new();
        let blocks = self.tables[0].len() as u64;
        trace
            .iter()
            .map(|&(key, tick)| {
                let hash = hasher.hash_one(key);
                let block = ((hash >> 32) * blocks) >> 32;
                ((block << 32) | (hash & 0xFF), tick)
            })
            .collect()
    }
}

impl Simulated for SimFloor {
    #[inline]
    fn advance(&self) {
        self.steps.set(self.steps.get() + 1);
    }

    #[inline]
    fn check(&self, packed: u64) -> bool {
        let window = (self.steps.get() / STEPS_PER_INTERVAL) as usize;
        let block = (packed >> 32) as usize;
        let current = &self.tables[window & 1][block].0;
        let previous = &self.tables[(window + 1) & 1][block].0;
        let (mut curr, mut prev) = (u32::MAX, u32::MAX);
        for row in 0..2 {
            let i = row * 8 + (packed >> (3 * row)) as usize % 8;
            curr = curr.min(current[i].fetch_add(1, Relaxed) + 1);
            prev = prev.min(previous[i].load(Relaxed));
        }
        u64::from(prev) + u64::from(curr) <= u64::from(LIMIT)
    }
}

// ---------------------------------------------------------------------------------------------
// Simulated traces.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mix {
    Uniform,
    Zipf,
    SingleKey,
    Rotating,
    Mixed,
}

impl Mix {
    const ALL: [Mix; 5] = [
        Mix::Uniform,
        Mix::Zipf,
        Mix::SingleKey,
        Mix::Rotating,
        Mix::Mixed,
    ];

    fn name(self) -> &'static str {
        match self {
            Mix::Uniform => sim_ids::UNIFORM,
            Mix::Zipf => sim_ids::ZIPF,
            Mix::SingleKey => sim_ids::SINGLE_KEY,
            Mix::Rotating => sim_ids::ROTATING,
            Mix::Mixed => sim_ids::MIXED,
        }
    }
}

/// One request of a trace: the key, and whether the clock moves one [`STEP`] before it.
type Op = (u64, bool);

/// The trace of `mix` at `rate` requests per second: `rate × TRACE_SECS` requests, the clock
/// advancing before every `rate / 100`th (the first included, so the spacing holds across the
/// wrap when it is replayed). Seeded: the same trace on every call and every run.
fn trace(mix: Mix, rate: u64) -> Vec<Op> {
    let per_step = rate / STEPS_PER_INTERVAL;
    let len = rate * TRACE_SECS;
    let mut rng = StdRng::seed_from_u64(0x7ACE ^ ((mix as u64) << 32) ^ rate);
    let zipf = Zipf::new(KEY_SPACE, ZIPF_S).expect("valid Zipf parameters");
    let origin_share = (ORIGINS * HEALTHY_RATE) as f64 / rate as f64;
    // Requests of the rotating flood so far: key n/2 for its nth request.
    let mut rotating = 0u64;
    let mut next_rotating = || {
        rotating += 1;
        rotating_key((rotating - 1) / 2)
    };
    (0..len)
        .map(|i| {
            let key = match mix {
                Mix::Uniform => rng.gen_range(0..rate / HEALTHY_RATE),
                Mix::Zipf => zipf.sample(&mut rng) as u64,
                Mix::SingleKey => FLOOD_KEY,
                Mix::Rotating => next_rotating(),
                Mix::Mixed => {
                    let x: f64 = rng.gen();
                    if x < origin_share {
                        ORIGIN_BASE + rng.gen_range(0..ORIGINS)
                    } else if x < origin_share + MIXED_FLOOD_SHARE {
                        FLOOD_KEY
                    } else {
                        next_rotating()
                    }
                }
            };
            (key, i % per_step == 0)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Exact models of each limiter's window, for the untimed pass.

/// What a model says of one request.
struct Judged {
    /// The key's offered count, this request included, is within the limit.
    healthy: bool,
    /// The request was admitted though the limiter's admitted count says it should not be.
    over: bool,
}

trait Model {
    /// Judges a request for `key` at `now` (ns of simulated time) that the limiter `admitted`.
    fn judge(&mut self, key: u64, now: u64, admitted: bool) -> Judged;
    /// Forgets keys whose state is the same as a fresh key's at `now` (bounds the model's
    /// memory; it changes no judgement).
    fn prune(&mut self, now: u64);
}

type ModelMap<S> = HashMap<u64, S, ahash::RandomState>;

/// `prev·(1−f) + curr ≤ LIMIT`, `f = into / INTERVAL`, in integers as floodgate's `fits`.
fn sliding_fits(prev: u64, curr: u64, into: u64) -> bool {
    prev * (INTERVAL_NANOS - into) + curr * INTERVAL_NANOS <= u64::from(LIMIT) * INTERVAL_NANOS
}

/// floodgate: the sliding window over fixed one-second buckets from the clock's zero.
#[derive(Default)]
struct SlidingModel {
    keys: ModelMap<SlidingCounts>,
}

#[derive(Default)]
struct SlidingCounts {
    bucket: u64,
    /// Offered and admitted, in the previous and the current bucket.
    offered: [u64; 2],
    admitted: [u64; 2],
}

impl Model for SlidingModel {
    fn judge(&mut self, key: u64, now: u64, admitted: bool) -> Judged {
        let bucket = now / INTERVAL_NANOS;
        let into = now % INTERVAL_NANOS;
        let c = self.keys.entry(key).or_insert(SlidingCounts {
            bucket,
            ..SlidingCounts::default()
        });
        if c.bucket != bucket {
            let keep = c.bucket + 1 == bucket;
            c.offered = [if keep { c.offered[1] } else { 0 }, 0];
            c.admitted = [if keep { c.admitted[1] } else { 0 }, 0];
            c.bucket = bucket;
        }
        c.offered[1] += 1;
        let healthy = sliding_fits(c.offered[0], c.offered[1], into);
        let mut over = false;
        if admitted {
            c.admitted[1] += 1;
            over = !sliding_fits(c.admitted[0], c.admitted[1], into);
        }
        Judged { healthy, over }
    }

    fn prune(&mut self, now: u64) {
        let bucket = now / INTERVAL_NANOS;
        self.keys.retain(|_, c| c.bucket + 1 >= bucket);
    }
}

/// DashMap: a fixed one-second window.
#[derive(Default)]
struct FixedModel {
    keys: ModelMap<FixedCounts>,
}

#[derive(Default)]
struct FixedCounts {
    window: u64,
    offered: u64,
    admitted: u64,
}

impl Model for FixedModel {
    fn judge(&mut self, key: u64, now: u64, admitted: bool) -> Judged {
        let window = now / INTERVAL_NANOS;
        let c = self.keys.entry(key).or_insert(FixedCounts {
            window,
            ..FixedCounts::default()
        });
        if c.window != window {
            *c = FixedCounts {
                window,
                ..FixedCounts::default()
            };
        }
        c.offered += 1;
        c.admitted += u64::from(admitted);
        Judged {
            healthy: c.offered <= u64::from(LIMIT),
            over: admitted && c.admitted > u64::from(LIMIT),
        }
    }

    fn prune(&mut self, now: u64) {
        let window = now / INTERVAL_NANOS;
        self.keys.retain(|_, c| c.window == window);
    }
}

/// governor: GCRA on the admitted requests; offered counts in the trailing second.
#[derive(Default)]
struct GcraModel {
    keys: ModelMap<GcraState>,
}

#[derive(Default)]
struct GcraState {
    /// Theoretical arrival time after the admitted requests, if any.
    tat: Option<u64>,
    /// The times of the key's last (at most `LIMIT`) offered requests in the trailing second.
    offered: VecDeque<u64>,
}

/// GCRA's emission interval and tolerance for `LIMIT` per `INTERVAL`, as governor computes
/// them: T = interval / limit, τ = T × (burst − 1).
const GCRA_T: u64 = INTERVAL_NANOS / LIMIT as u64;
const GCRA_TAU: u64 = GCRA_T * (LIMIT as u64 - 1);

impl Model for GcraModel {
    fn judge(&mut self, key: u64, now: u64, admitted: bool) -> Judged {
        let s = self.keys.entry(key).or_default();
        while s
            .offered
            .front()
            .is_some_and(|&t| t + INTERVAL_NANOS <= now)
        {
            s.offered.pop_front();
        }
        let healthy = s.offered.len() < LIMIT as usize;
        s.offered.push_back(now);
        if s.offered.len() > LIMIT as usize {
            s.offered.pop_front();
        }
        let mut over = false;
        if admitted {
            let tat = s.tat.unwrap_or(now);
            over = now < tat.saturating_sub(GCRA_TAU);
            s.tat = Some(tat.max(now) + GCRA_T);
        }
        Judged { healthy, over }
    }

    fn prune(&mut self, now: u64) {
        self.keys.retain(|_, s| {
            s.tat.is_some_and(|tat| tat > now)
                || s.offered.back().is_some_and(|&t| t + INTERVAL_NANOS > now)
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The untimed pass.

/// The limiter's heap: bytes held between its calls, and the peak (see the module docs).
#[derive(Default)]
struct Heap {
    live: isize,
    peak: isize,
}

impl Heap {
    /// Runs `f`, a call into the limiter (or its clock), and accounts for its heap.
    fn track<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let held = bytes_held();
        let mut out = None;
        let allocated = bytes_allocated_by(|| out = Some(f()));
        self.peak = self.peak.max(self.live + allocated as isize);
        self.live += bytes_held() - held;
        self.peak = self.peak.max(self.live);
        out.expect("f ran")
    }
}

/// One row of the accuracy table.
struct Quality {
    mix: Mix,
    rate: &'static str,
    limiter: &'static str,
    model: &'static str,
    requests: u64,
    admitted: u64,
    healthy: u64,
    wrong_refusals: u64,
    /// Wrong refusals from [`STEADY_NANOS`] on.
    steady_wrong_refusals: u64,
    over_admissions: u64,
    origin_requests: u64,
    origin_refused: u64,
    /// The origins' requests from [`STEADY_NANOS`] on, and how many were refused.
    steady_origin_requests: u64,
    steady_origin_refused: u64,
    peak_heap: isize,
    live_heap: isize,
    /// floodgate's `stats()` at the end, for floodgate.
    notes: String,
}

/// Feeds `trace` once to a fresh limiter from `build`, judging each decision with `model`.
fn judge<L: Simulated, M: Model>(
    trace: &[Op],
    build: impl FnOnce() -> L,
    mut model: M,
    notes: impl FnOnce(&L) -> String,
) -> (Quality, L) {
    let mut heap = Heap::default();
    let limiter = heap.track(build);
    let mut q = Quality {
        mix: Mix::Uniform,
        rate: "",
        limiter: "",
        model: "",
        requests: 0,
        admitted: 0,
        healthy: 0,
        wrong_refusals: 0,
        steady_wrong_refusals: 0,
        over_admissions: 0,
        origin_requests: 0,
        origin_refused: 0,
        steady_origin_requests: 0,
        steady_origin_refused: 0,
        peak_heap: 0,
        live_heap: 0,
        notes: String::new(),
    };
    let mut now = 0u64;
    for &(key, tick) in trace {
        if tick {
            heap.track(|| limiter.advance());
            now += STEP_NANOS;
            if now % INTERVAL_NANOS == 0 {
                model.prune(now);
            }
        }
        let admitted = heap.track(|| limiter.check(key));
        let judged = model.judge(key, now, admitted);
        q.requests += 1;
        q.admitted += u64::from(admitted);
        q.healthy += u64::from(judged.healthy);
        let steady = now >= STEADY_NANOS;
        let wrong = judged.healthy && !admitted;
        q.wrong_refusals += u64::from(wrong);
        q.steady_wrong_refusals += u64::from(wrong && steady);
        q.over_admissions += u64::from(judged.over);
        if is_origin(key) {
            q.origin_requests += 1;
            q.origin_refused += u64::from(!admitted);
            q.steady_origin_requests += u64::from(steady);
            q.steady_origin_refused += u64::from(steady && !admitted);
        }
    }
    q.peak_heap = heap.peak;
    q.live_heap = heap.live;
    q.notes = notes(&limiter);
    (q, limiter)
}

/// The three limiters' rows for one trace.
fn judge_trace(mix: Mix, rate: u64, rate_name: &'static str) -> Vec<Quality> {
    let trace = trace(mix, rate);
    let ours_at_rate = || SimFloodgate::new(rate);
    let (mut ours, limiter) = judge(&trace, ours_at_rate, SlidingModel::default(), |l| {
        let s = l.limiter.stats();
        format!(
            "exact stage {}/{}, {} promotions, {} decided by the sketch alone (stage full)",
            s.promoted, s.exact_capacity, s.promotions, s.exact_full
        )
    });
    // The model's clock and floodgate's agree.
    let steps = trace.iter().filter(|&&(_, tick)| tick).count() as u64;
    assert_eq!(limiter.clock.now(), STEP * steps as u32);
    drop(limiter);
    ours.model = "sliding prev·(1−f)+curr";
    let (mut governor, _) = judge(&trace, SimGovernor::new, GcraModel::default(), |_| {
        String::new()
    });
    governor.model = "GCRA; healthy: trailing 1 s";
    let (mut exact, _) = judge(&trace, SimDashMap::new, FixedModel::default(), |_| {
        String::new()
    });
    exact.model = "fixed 1 s window";
    let mut rows = vec![ours, governor, exact];
    for (row, name) in rows.iter_mut().zip(sim_ids::STRUCTURES.map(|s| s.id)) {
        row.mix = mix;
        row.rate = rate_name;
        row.limiter = name;
    }
    rows
}

fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "—".to_string()
    } else {
        format!("{:.2}%", 100.0 * part as f64 / whole as f64)
    }
}

fn human(bytes: isize) -> String {
    let b = bytes as f64;
    if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{bytes} B")
    }
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"))
}

/// The untimed pass over every simulated trace: prints the table, writes the CSV.
fn accuracy() {
    // One-off process-wide allocations (ahash's seed source) outside any limiter's figure.
    drop(SimFloodgate::new(sim_ids::RATES[0].0));
    drop(SimGovernor::new());
    let started = Instant::now();
    let mut rows = Vec::new();
    for mix in Mix::ALL {
        for (rate, rate_name) in sim_ids::RATES {
            rows.extend(judge_trace(mix, rate, rate_name));
        }
    }
    println!(
        "Decision quality, limit {LIMIT} requests/s per key, {TRACE_SECS} simulated seconds \
         per trace, one pass from a fresh limiter ({:.1?}).\n",
        started.elapsed()
    );
    println!(
        "| workload | rate/s | limiter | model | requests | healthy | wrong refusals \
         (% of healthy) | of which after 2 s | over-limit admissions (% of admitted) | origins \
         refused (after 2 s) | peak heap | notes |"
    );
    println!("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    // The columns in `sim_ids::ACCURACY_COLUMNS`' order, which the report reads by name.
    let mut csv = sim_ids::ACCURACY_COLUMNS.join(",") + "\n";
    for q in &rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} ({}) | {} ({}) | {} | {} |",
            q.mix.name(),
            q.rate,
            q.limiter,
            q.model,
            q.requests,
            q.healthy,
            q.wrong_refusals,
            percent(q.wrong_refusals, q.healthy),
            q.steady_wrong_refusals,
            q.over_admissions,
            percent(q.over_admissions, q.admitted),
            percent(q.origin_refused, q.origin_requests),
            percent(q.steady_origin_refused, q.steady_origin_requests),
            human(q.peak_heap),
            q.notes,
        );
        let _ = writeln!(
            csv,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            q.mix.name(),
            q.rate,
            q.limiter,
            q.requests,
            q.admitted,
            q.healthy,
            q.wrong_refusals,
            q.steady_wrong_refusals,
            q.over_admissions,
            q.origin_requests,
            q.origin_refused,
            q.steady_origin_requests,
            q.steady_origin_refused,
            q.peak_heap,
            q.live_heap,
            q.notes,
        );
    }
    println!();
    let path = target_dir().join(sim_ids::ACCURACY_FILE);
    match std::fs::write(&path, csv) {
        Ok(()) => println!("(also written to {})\n", path.display()),
        Err(e) => eprintln!("limiter bench: could not write {}: {e}", path.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// Timed: simulated rates.

/// Times `limiter` replaying `trace` cyclically: each batch of iterations goes on from where
/// the last one stopped, the clock only moving forward.
fn replay<L: Simulated>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    trace: &[Op],
    limiter: L,
) {
    let mut at = 0usize;
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                let (key, tick) = trace[at];
                if tick {
                    limiter.advance();
                }
                black_box(limiter.check(key));
                at += 1;
                if at == trace.len() {
                    at = 0;
                }
            }
            start.elapsed()
        })
    });
}

fn simulated(c: &mut Criterion) {
    for mix in Mix::ALL {
        for (rate, rate_name) in sim_ids::RATES {
            let trace = trace(mix, rate);
            let mut g = c.benchmark_group(sim_ids::group(mix.name(), rate_name));
            g.throughput(Throughput::Elements(1));
            match SimFloodgateCost::from_env() {
                Some(cost) => replay(
                    &mut g,
                    sim_ids::FLOODGATE.id,
                    &trace,
                    SimFloodgateCost::new(rate, cost),
                ),
                None => replay(
                    &mut g,
                    sim_ids::FLOODGATE.id,
                    &trace,
                    SimFloodgate::new(rate),
                ),
            }
            replay(
                &mut g,
                sim_ids::GOVERNOR_KEYED.id,
                &trace,
                SimGovernor::new(),
            );
            replay(&mut g, sim_ids::DASHMAP_EXACT.id, &trace, SimDashMap::new());
            let floor = SimFloor::new(rate);
            replay(&mut g, sim_ids::FLOOR.id, &floor.trace(&trace), floor);
            g.finish();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Timed: real clock, one and two threads.

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

/// A key array for the real-clock groups, `draw` called with one seeded generator.
fn keys(seed: u64, mut draw: impl FnMut(&mut StdRng) -> u64) -> Keys {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys: Vec<u64> = (0..KEY_ARRAY).map(|_| draw(&mut rng)).collect();
    keys.into_boxed_slice()
        .try_into()
        .expect("KEY_ARRAY keys were drawn")
}

/// The peak rate the real-clock limiters are sized for: what the groups drive, one thread
/// and two together (see the module docs).
const REAL_PEAK: u64 = 10_000_000;

/// Times the three limiters on `keys` (through `key_of`), one and two threads; floodgate sized
/// for a peak of `peak` requests per second.
fn run_workload(c: &mut Criterion, name: &str, keys: &Keys, key_of: fn(u64) -> u64, peak: u64) {
    let mut g = c.benchmark_group(common::ids::group(ids::PART, name));
    g.throughput(Throughput::Elements(1));
    for threads in THREADS {
        let ours = floodgate_builder()
            .peak_rate(peak)
            .build()
            .expect("valid limiter");
        bench(&mut g, ids::FLOODGATE.id, threads, keys, |k| {
            ours.try_acquire(&key_of(k)).is_ok()
        });
        let governor = governor::DefaultKeyedRateLimiter::<u64>::keyed(quota());
        bench(&mut g, ids::GOVERNOR_KEYED.id, threads, keys, |k| {
            governor.check_key(&key_of(k)).is_ok()
        });
        let exact = DashMapLimiter::new();
        let start = Instant::now();
        bench(&mut g, ids::DASHMAP_EXACT.id, threads, keys, |k| {
            exact.check(key_of(k), start.elapsed().as_secs())
        });
    }
    g.finish();
}

fn real_clock(c: &mut Criterion) {
    let uniform = Workload::Uniform.keys();
    run_workload(c, ids::UNIFORM, &uniform, |k| k, REAL_PEAK);
    // The same traffic through a limiter sized for the default peak, a tenth of it.
    run_workload(
        c,
        ids::UNIFORM_PAST_PEAK,
        &uniform,
        |k| k,
        1_000_000, // the builder's default peak rate
    );
    let zipf = Zipf::new(KEY_SPACE, ZIPF_S).expect("valid Zipf parameters");
    let zipf_keys = keys(0x21FF, |rng| zipf.sample(rng) as u64);
    run_workload(c, ids::ZIPF, &zipf_keys, |k| k, REAL_PEAK);
    drop(zipf_keys);
    run_workload(c, ids::FLOOD_10M, &uniform, flood_key, REAL_PEAK);
    let flood_1key = keys(0xF1, |rng| {
        if rng.gen_bool(0.9) {
            HOT_KEY
        } else {
            rng.gen_range(0..KEY_SPACE)
        }
    });
    run_workload(c, ids::FLOOD_1KEY, &flood_1key, |k| k, REAL_PEAK);
}

fn main() {
    // The report looks for these workloads' groups and accuracy rows by their ids.
    assert_eq!(
        Mix::ALL.map(Mix::name),
        sim_ids::WORKLOADS,
        "Mix::ALL and ids disagree"
    );
    let setting = std::env::var("LIMITER_ACCURACY").unwrap_or_default();
    let listing = std::env::args().any(|a| a == "--list");
    if setting != "0" && !listing {
        accuracy();
    }
    if setting == "only" {
        return;
    }
    let mut c = config().configure_from_args();
    simulated(&mut c);
    real_clock(&mut c);
    c.final_summary();
}
