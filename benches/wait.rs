//! Waiting: parking and cancelling 100,000 waiters of `Limiter::acquire` next to 100,000
//! `tokio::time::timeout`s, side by side in one run (group `wait_park_cancel`).
//!
//! One *element* is one waiter; one criterion iteration is a batch of [`WAITERS`] waiters,
//! hence `Throughput::Elements(100_000)`: criterion's time is per batch, its throughput per
//! waiter. Each batch has two phases and each is its own benchmark id, timing that phase only
//! (`iter_custom`; the other phase runs untimed around it):
//!
//! - `park`: create the future and poll it once with a counting waker, so that it registers:
//!   floodgate's waiter joins its key's line and the limiter's timing wheel, tokio's timeout
//!   its timer entry. The waker is shared, so registering it costs one `Arc` increment.
//! - `cancel`: drop all of them, oldest first (floodgate unlinks the waiter, tokio removes
//!   the timer entry).
//!
//! Ids (`wait_park_cancel/<side>/<phase>[_<keys>]`):
//!
//! - `floodgate`: `Limiter<String>` with `max_inflight(1)` on the shared clock (the production
//!   one), every key holding its one permit so that each `acquire(key, 5 s)` must wait,
//!   `max_waiters(100_000)`. Keys `_1000_keys` (100 waiters a key, interleaved) or
//!   `_100000_keys` (one waiter a key: each heads its line, so parking also makes the second
//!   attempt a head owes after counting itself).
//! - `floodgate_key_by_value`: the same with 1,000 keys, each waiter given its key by value
//!   (`acquire_owned_key`) from keys made untimed between batches, as a proxy has each
//!   request's key already; `acquire` copies a borrowed key once it must wait. Its key is
//!   freed with it, in `cancel`.
//! - `floodgate_manual_clock`: the same with 1,000 keys on a `ManualClock`.
//! - `floodgate/try_refused_<keys>`: for reference, the decision alone: 100,000 `try_acquire`s
//!   of the same keys in the same order, all refused. Parking includes one such attempt (two
//!   for a head of a line), which a design built on a runtime timer makes too.
//! - `tokio_timeout`: `timeout(5 s, pending::<()>())` on a current-thread runtime with time
//!   enabled, polled inside `Runtime::enter` (outside a task, so tokio's coop budget does not
//!   turn the 129th poll into a no-op without registering).
//!
//! Setup is not timed: the limiter, its held permits and the keys are built once per id and
//! reused by every batch, as are the runtime and the futures' `Vec` (capacity reserved). Between
//! batches, untimed, the tokio runtime turns its driver once (a real runtime's wheel moves on).
//! Before timing, each side checks once that its waiters really wait: floodgate's
//! `stats().waiting` is 100,000 after parking and 0 after cancelling, no waker fired, and tokio's
//! timeouts (1,000 of 1 ms, parked the same way) all fire after a sleep, so the single poll did
//! register them.
//!
//! After criterion's groups, a table of the median ns per waiter of every batch timed (warm-up
//! included) per phase, and the ratios floodgate ÷ tokio.
//!
//! # Running
//!
//! `cargo bench --bench wait` (about 40 s on two cores: criterion's warm-up 1 s and measurement
//! 2 s of the shared `config`, ten samples); `-- --warm-up-time 1 --measurement-time 3` changes
//! the times, `-- tokio` runs one side only.

mod common;

use std::future::{self, Future, Pending};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Throughput};
use floodgate::clock::ManualClock;
use floodgate::{Acquire, Limiter, OwnedPermit};
use tokio::runtime::Runtime;
use tokio::time::Timeout;

/// Waiters per batch.
const WAITERS: usize = 100_000;
/// Long enough that no waiter's deadline comes during a batch.
const MAX_WAIT: Duration = Duration::from_secs(5);
const GROUP: &str = "wait_park_cancel";

/// A waker that counts its wakes: none may fire while the waiters park and are cancelled.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

fn counting_waker() -> (Arc<Wakes>, Waker) {
    let wakes = Arc::new(Wakes::default());
    (Arc::clone(&wakes), Waker::from(wakes))
}

/// One side of the comparison: parks a batch of waiters, then cancels them.
trait Batch {
    /// Creates and polls once each of [`WAITERS`] futures; returns how many are pending.
    fn park(&mut self, cx: &mut Context<'_>) -> usize;
    /// Drops them all.
    fn cancel(&mut self);
    /// Untimed work between batches.
    fn between(&mut self) {}
}

/// Floodgate's waiters: a limiter whose every key is at its in-flight limit.
struct Floodgate {
    limiter: Limiter<String>,
    _held: Vec<OwnedPermit<String>>,
    keys: Vec<String>,
    futures: Vec<Acquire<String>>,
    /// Gives each waiter its key by value (`acquire_owned_key`), from `owned`, where
    /// `acquire` copies a borrowed one.
    by_value: bool,
    /// The next batch's keys, by value: made untimed between batches, as a proxy has each
    /// request's key before it asks the limiter (freed with the waiter, in `cancel`).
    owned: Vec<String>,
}

impl Floodgate {
    fn new(keys: usize, clock: Option<&ManualClock>, by_value: bool) -> Self {
        let builder = Limiter::builder()
            .max_inflight(1)
            .max_waiters(WAITERS)
            .max_waiters_per_key(WAITERS);
        let builder = match clock {
            Some(clock) => builder.clock(clock),
            None => builder,
        };
        let limiter = builder.build().expect("valid limiter");
        let keys: Vec<String> = (0..keys).map(|i| format!("origin-{i}.example")).collect();
        // A key the sketch already over-counts may be refused here: its `acquire` waits all
        // the same, which the check below confirms.
        let held = keys
            .iter()
            .filter_map(|k| limiter.try_acquire_owned(k.as_str()).ok())
            .collect();
        Floodgate {
            limiter,
            _held: held,
            keys,
            futures: Vec::with_capacity(WAITERS),
            by_value,
            owned: Vec::with_capacity(WAITERS),
        }
    }

    /// Parks and cancels one batch, checking that every waiter waited.
    fn check(&mut self) {
        let (wakes, waker) = counting_waker();
        self.between();
        let pending = self.park(&mut Context::from_waker(&waker));
        assert_eq!(pending, WAITERS, "every acquire must wait");
        assert_eq!(self.limiter.stats().waiting, WAITERS);
        self.cancel();
        assert_eq!(self.limiter.stats().waiting, 0);
        assert_eq!(wakes.0.load(Ordering::Relaxed), 0, "nothing may wake them");
    }
}

impl Batch for Floodgate {
    fn park(&mut self, cx: &mut Context<'_>) -> usize {
        let mut pending = 0;
        for i in 0..WAITERS {
            // Keys interleaved, as requests of many origins arrive.
            // One `push` a way, each future built in place (a `match` choosing the future
            // before one `push` copied it: 29 instructions a waiter, callgrind).
            match self.owned.pop() {
                Some(key) => self
                    .futures
                    .push(self.limiter.acquire_owned_key(key, MAX_WAIT)),
                None => {
                    let key = self.keys[i % self.keys.len()].as_str();
                    self.futures.push(self.limiter.acquire(key, MAX_WAIT));
                }
            }
            let future = self.futures.last_mut().expect("just pushed");
            pending += usize::from(Pin::new(future).poll(cx).is_pending());
        }
        pending
    }

    fn cancel(&mut self) {
        self.futures.clear();
    }

    fn between(&mut self) {
        if self.by_value {
            // Taken from the end: the same order of keys as borrowed.
            let keys = &self.keys;
            let batch = (0..WAITERS).rev().map(|i| keys[i % keys.len()].clone());
            self.owned.extend(batch);
        }
    }
}

/// Tokio's timers, one `timeout` per waiter.
struct Tokio {
    runtime: Runtime,
    futures: Vec<Timeout<Pending<()>>>,
}

impl Tokio {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("tokio runtime");
        Tokio {
            runtime,
            futures: Vec::with_capacity(WAITERS),
        }
    }

    /// Creates and polls once `n` timeouts of `after`; returns how many are pending.
    fn park_n(&mut self, n: usize, after: Duration, cx: &mut Context<'_>) -> usize {
        // The pinning below relies on the Vec never reallocating while it holds futures.
        assert!(self.futures.is_empty() && self.futures.capacity() >= n);
        let _context = self.runtime.enter();
        let mut pending = 0;
        for _ in 0..n {
            self.futures
                .push(tokio::time::timeout(after, future::pending()));
            let future = self.futures.last_mut().expect("just pushed");
            // SAFETY: the element is never moved once polled: the Vec has room for all `n`
            // (checked above), so it does not reallocate, and `clear` drops it in place.
            let future = unsafe { Pin::new_unchecked(future) };
            pending += usize::from(future.poll(cx).is_pending());
        }
        pending
    }

    /// Checks that one poll registers a timer: short timeouts parked the same way all fire.
    fn check(&mut self) {
        const N: usize = 1_000;
        let (wakes, waker) = counting_waker();
        let pending = self.park_n(
            N,
            Duration::from_millis(1),
            &mut Context::from_waker(&waker),
        );
        assert_eq!(pending, N);
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            0,
            "woken at the first poll"
        );
        self.runtime
            .block_on(async { tokio::time::sleep(Duration::from_millis(30)).await });
        assert_eq!(
            wakes.0.load(Ordering::Relaxed),
            N,
            "a timer was not registered"
        );
        self.futures.clear();
    }
}

impl Batch for Tokio {
    fn park(&mut self, cx: &mut Context<'_>) -> usize {
        self.park_n(WAITERS, MAX_WAIT, cx)
    }

    fn cancel(&mut self) {
        self.futures.clear();
    }

    fn between(&mut self) {
        // Lets the driver process its wheel, as it would between tasks.
        self.runtime.block_on(tokio::task::yield_now());
    }
}

/// Every batch's phase times of one side, for the table at the end.
#[derive(Default)]
struct Times {
    park: Vec<Duration>,
    cancel: Vec<Duration>,
    refused: Vec<Duration>,
}

/// Registers `floodgate/try_refused<suffix>`: the refusals alone, no waiting.
fn bench_refusals(
    g: &mut BenchmarkGroup<'_, WallTime>,
    suffix: &str,
    floodgate: &Floodgate,
    times: &mut Times,
) {
    let id = BenchmarkId::new("floodgate", format!("try_refused{suffix}"));
    g.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let mut refused = 0;
                for i in 0..WAITERS {
                    let key = floodgate.keys[i % floodgate.keys.len()].as_str();
                    refused += usize::from(floodgate.limiter.try_acquire(key).is_err());
                }
                let elapsed = start.elapsed();
                assert_eq!(refused, WAITERS, "a key had room");
                times.refused.push(elapsed);
                timed += elapsed;
            }
            timed
        })
    });
}

#[derive(Clone, Copy)]
enum Phase {
    Park,
    Cancel,
}

/// Registers `<side>/<phase><suffix>` for both phases of `batch`.
fn bench_side(
    g: &mut BenchmarkGroup<'_, WallTime>,
    side: &str,
    suffix: &str,
    batch: &mut impl Batch,
    times: &mut Times,
) {
    let (wakes, waker) = counting_waker();
    for phase in [Phase::Park, Phase::Cancel] {
        let name = match phase {
            Phase::Park => "park",
            Phase::Cancel => "cancel",
        };
        let id = BenchmarkId::new(side, format!("{name}{suffix}"));
        g.bench_function(id, |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    batch.between();
                    let start = Instant::now();
                    let pending = batch.park(&mut Context::from_waker(&waker));
                    let parked = start.elapsed();
                    let start = Instant::now();
                    batch.cancel();
                    let cancelled = start.elapsed();
                    assert_eq!(pending, WAITERS, "a waiter did not wait");
                    times.park.push(parked);
                    times.cancel.push(cancelled);
                    timed += match phase {
                        Phase::Park => parked,
                        Phase::Cancel => cancelled,
                    };
                }
                timed
            })
        });
    }
    assert_eq!(wakes.0.load(Ordering::Relaxed), 0, "a waiter was woken");
}

/// Median ns per waiter.
fn median_per_waiter(times: &[Duration]) -> Option<f64> {
    let mut nanos: Vec<u128> = times.iter().map(Duration::as_nanos).collect();
    nanos.sort_unstable();
    let median = *nanos.get(nanos.len() / 2)?;
    Some(median as f64 / WAITERS as f64)
}

fn print_table(rows: &[(&str, Times)]) {
    let tokio = rows.iter().find(|(name, _)| *name == "tokio_timeout");
    println!();
    println!("Median ns per waiter over every batch of {WAITERS} timed (warm-up included):");
    println!(
        "| side | park ns | cancel ns | park ÷ tokio | cancel ÷ tokio | try_acquire refused ns |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, times) in rows {
        let park = median_per_waiter(&times.park);
        let cancel = median_per_waiter(&times.cancel);
        let (Some(park), Some(cancel)) = (park, cancel) else {
            continue; // filtered out
        };
        let ratio = |ours: f64, theirs: Option<f64>| {
            theirs.map_or("-".to_string(), |theirs| format!("{:.2}", ours / theirs))
        };
        let tokio_park = tokio.and_then(|(_, t)| median_per_waiter(&t.park));
        let tokio_cancel = tokio.and_then(|(_, t)| median_per_waiter(&t.cancel));
        let refused =
            median_per_waiter(&times.refused).map_or("-".to_string(), |r| format!("{r:.1}"));
        println!(
            "| {name} | {park:.1} | {cancel:.1} | {} | {} | {refused} |",
            ratio(park, tokio_park),
            ratio(cancel, tokio_cancel)
        );
    }
}

fn main() {
    let mut c = common::config().configure_from_args();
    let mut rows: Vec<(&str, Times)> = Vec::new();
    {
        let mut g = c.benchmark_group(GROUP);
        g.throughput(Throughput::Elements(WAITERS as u64));
        // A batch takes milliseconds: ten samples keep the run short.
        g.sample_size(10);
        for keys in [1_000, WAITERS] {
            let mut floodgate = Floodgate::new(keys, None, false);
            floodgate.check();
            let mut times = Times::default();
            let suffix = format!("_{keys}_keys");
            bench_side(&mut g, "floodgate", &suffix, &mut floodgate, &mut times);
            bench_refusals(&mut g, &suffix, &floodgate, &mut times);
            rows.push((
                if keys == 1_000 {
                    "floodgate 1k keys"
                } else {
                    "floodgate 100k keys"
                },
                times,
            ));
        }
        let mut by_value = Floodgate::new(1_000, None, true);
        by_value.check();
        let mut times = Times::default();
        bench_side(
            &mut g,
            "floodgate_key_by_value",
            "_1000_keys",
            &mut by_value,
            &mut times,
        );
        rows.push(("floodgate key by value 1k keys", times));
        drop(by_value);
        let clock = ManualClock::new();
        let mut manual = Floodgate::new(1_000, Some(&clock), false);
        manual.check();
        let mut times = Times::default();
        bench_side(
            &mut g,
            "floodgate_manual_clock",
            "_1000_keys",
            &mut manual,
            &mut times,
        );
        rows.push(("floodgate manual clock 1k keys", times));
        drop(manual);
        let mut tokio = Tokio::new();
        tokio.check();
        let mut times = Times::default();
        bench_side(&mut g, "tokio_timeout", "", &mut tokio, &mut times);
        rows.push(("tokio_timeout", times));
        g.finish();
    }
    c.final_summary();
    print_table(&rows);
}
