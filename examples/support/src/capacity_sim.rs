//! Origins of a fixed capacity behind a limiter, in simulated time: the model the adaptive
//! in-flight limit is judged on (its test, its bench and the figure in docs/).
//!
//! Each origin has `servers` servers and a service time: a request admitted when a server is
//! free takes the service time (uniform within ±20% of it); one admitted when all are busy
//! waits for the first to free up (first come, first served). In flight beyond the servers,
//! the latency therefore grows with the concurrency, and the throughput stays at its capacity,
//! `servers / service`. Every origin is sent the same Poisson load; one of them slows down by
//! a factor for a while, then recovers, among healthy ones.
//!
//! Time moves in steps of one millisecond on a [`ManualClock`], which the limiter reads: a run
//! is the same every time for the same seed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{AdaptiveInflight, Limiter, LimiterBuilder, OwnedPermit};

use crate::splitmix::SplitMix;

const STEP_NS: u64 = 1_000_000;
/// The builder of the run's limiter.
pub type Builder = LimiterBuilder<usize>;
/// How long after the slowdown the figures "once settled" begin: the limiter finds the origin
/// slow only once its in flight reaches the promotion threshold, with a queue that deep
/// already, which its first probe then drains.
const SETTLE_NS: u64 = 2_000_000_000;

/// The traffic and the origins.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Healthy origins, besides the one that slows down.
    pub healthy: usize,
    /// Servers per origin.
    pub servers: usize,
    /// Service time of a request at a healthy origin.
    pub service: Duration,
    /// Requests a second sent to every origin.
    pub rate: f64,
    /// How much slower the slow origin serves while slowed.
    pub slowdown: u32,
    /// When it slows down, and when it recovers.
    pub slow_from: Duration,
    pub slow_until: Duration,
    /// How long the run lasts.
    pub duration: Duration,
    pub seed: u64,
}

impl Default for Scenario {
    /// 20 healthy origins and one that slows down 10× from 10 s to 25 s of a 35 s run: 10
    /// servers of 10 ms each (1,000 requests a second), sent 500 a second each.
    fn default() -> Self {
        Scenario {
            healthy: 20,
            servers: 10,
            service: Duration::from_millis(10),
            rate: 500.0,
            slowdown: 10,
            slow_from: Duration::from_secs(10),
            slow_until: Duration::from_secs(25),
            duration: Duration::from_secs(35),
            seed: 7,
        }
    }
}

/// How the limiter holds each origin's requests in flight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// A static `max_inflight`.
    Static(u32),
    /// A learnt limit under a ceiling.
    Adaptive {
        ceiling: u32,
        config: AdaptiveInflight,
    },
}

impl Policy {
    fn limiter(&self, clock: &ManualClock, tune: impl Fn(Builder) -> Builder) -> Limiter<usize> {
        let builder = Limiter::builder().clock(clock).peak_rate(20_000);
        let builder = match *self {
            Policy::Static(limit) => builder.max_inflight(limit),
            Policy::Adaptive { ceiling, config } => {
                builder.max_inflight(ceiling).adaptive_inflight(config)
            }
        };
        tune(builder).build().expect("a valid limiter")
    }
}

/// A sample of the slow origin every 100 ms, for the figure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds into the run.
    pub at: f64,
    /// The in-flight limit it was judged by.
    pub limit: u32,
    /// Its requests in flight.
    pub inflight: usize,
    /// The mean latency of its requests that completed in the 100 ms, in milliseconds.
    pub latency_ms: f64,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The slow origin's requests served while slowed (once settled: from two seconds after
    /// it slowed down), against what it could serve; and over the whole slow phase.
    pub goodput: f64,
    pub goodput_whole: f64,
    /// Its latency while slowed (once settled), median and 99th percentile, against its
    /// service time then.
    pub p50: f64,
    pub p99: f64,
    /// The same 99th percentile over the whole slow phase, its first seconds included.
    pub p99_whole: f64,
    /// Its requests refused while slowed.
    pub refused_slow: u64,
    /// Its requests refused before it slowed down and from a second after it recovered.
    pub refused_healthy_times: u64,
    /// Requests of the healthy origins refused, all run long.
    pub refused_healthy: u64,
    /// How long after its recovery the slow origin's last request was refused (zero if none
    /// was).
    pub recovered_after: Duration,
    pub samples: Vec<Sample>,
}

struct Origin {
    /// When each server is next free (nanoseconds).
    free_at: Vec<u64>,
}

impl Origin {
    /// Serves a request admitted at `now` that takes `service`: when it completes.
    fn serve(&mut self, now: u64, service: u64) -> u64 {
        let (server, free) = self
            .free_at
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(_, free)| free)
            .expect("an origin has servers");
        let done = free.max(now) + service;
        self.free_at[server] = done;
        done
    }
}

/// A request in flight: when it completes, when it arrived, its origin, its permit.
struct InFlight {
    done: u64,
    arrived: u64,
    origin: usize,
    permit: OwnedPermit<usize>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        self.done == other.done
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.done.cmp(&other.done)
    }
}

/// Runs `scenario` under `policy`. The slow origin is origin 0.
pub fn run(scenario: &Scenario, policy: Policy) -> Report {
    run_with(scenario, policy, |builder| builder)
}

/// [`run`] with the limiter's builder passed through `tune` last: a test fixes its hash keys
/// there (`hash_seed`, a test hook), so that which keys share counters is the same at every
/// run, as the traffic is.
pub fn run_with(scenario: &Scenario, policy: Policy, tune: impl Fn(Builder) -> Builder) -> Report {
    let clock = ManualClock::new();
    let limiter = policy.limiter(&clock, tune);
    let mut servers: Vec<Origin> = (0..=scenario.healthy)
        .map(|_| Origin {
            free_at: vec![0; scenario.servers],
        })
        .collect();
    let mut draws = SplitMix(scenario.seed);
    let mut inflight: BinaryHeap<Reverse<InFlight>> = BinaryHeap::new();
    let nanos = |d: Duration| d.as_nanos() as u64;
    let (slow_from, slow_until) = (nanos(scenario.slow_from), nanos(scenario.slow_until));
    let settled = slow_from + SETTLE_NS;
    let service = nanos(scenario.service);
    let per_step = scenario.rate * STEP_NS as f64 / 1e9;
    let (mut served_settled, mut served_whole) = (0u64, 0u64);
    let (mut latencies, mut latencies_whole) = (Vec::new(), Vec::new());
    let mut report = Report {
        goodput: 0.0,
        goodput_whole: 0.0,
        p50: 0.0,
        p99: 0.0,
        p99_whole: 0.0,
        refused_slow: 0,
        refused_healthy_times: 0,
        refused_healthy: 0,
        recovered_after: Duration::ZERO,
        samples: Vec::new(),
    };
    let (mut window_latency, mut window_count, mut slow_inflight) = (0u64, 0u64, 0usize);
    let mut last_refused_after_recovery = None;
    let steps = nanos(scenario.duration) / STEP_NS;
    for step in 1..=steps {
        clock.advance(Duration::from_nanos(STEP_NS));
        let now = step * STEP_NS;
        while inflight.peek().is_some_and(|r| r.0.done <= now) {
            let Reverse(done) = inflight.pop().expect("peeked");
            if done.origin == 0 {
                slow_inflight -= 1;
                let latency = done.done - done.arrived;
                window_latency += latency;
                window_count += 1;
                if (slow_from..slow_until).contains(&done.arrived) {
                    latencies_whole.push(latency);
                    served_whole += 1;
                    if done.arrived >= settled {
                        latencies.push(latency);
                        served_settled += 1;
                    }
                }
            }
            drop(done.permit);
        }
        for (origin, servers) in servers.iter_mut().enumerate() {
            // Poisson arrivals, one draw per request a step could hold (a Bernoulli draw of the
            // step's probability, or several for rates over a request a millisecond).
            let mut arrivals = 0;
            let mut p = per_step;
            while p > 0.0 {
                if draws.unit() < p.min(1.0) {
                    arrivals += 1;
                }
                p -= 1.0;
            }
            for _ in 0..arrivals {
                let slow = origin == 0 && (slow_from..slow_until).contains(&now);
                let mean = if slow {
                    service * u64::from(scenario.slowdown)
                } else {
                    service
                };
                match limiter.try_acquire_owned(&origin) {
                    Ok(permit) => {
                        let jitter = 0.8 + 0.4 * draws.unit();
                        let done = servers.serve(now, (mean as f64 * jitter) as u64);
                        if origin == 0 {
                            slow_inflight += 1;
                        }
                        inflight.push(Reverse(InFlight {
                            done,
                            arrived: now,
                            origin,
                            permit,
                        }));
                    }
                    Err(_) if origin != 0 => report.refused_healthy += 1,
                    Err(_) if slow => report.refused_slow += 1,
                    Err(_) => {
                        if now >= slow_until {
                            last_refused_after_recovery = Some(now - slow_until);
                        }
                        if now < slow_from || now >= slow_until + 1_000_000_000 {
                            report.refused_healthy_times += 1;
                        }
                    }
                }
            }
        }
        if step % 100 == 0 {
            report.samples.push(Sample {
                at: now as f64 / 1e9,
                limit: limiter.inflight_limit(&0).unwrap_or(0),
                inflight: slow_inflight,
                latency_ms: if window_count == 0 {
                    0.0
                } else {
                    window_latency as f64 / window_count as f64 / 1e6
                },
            });
            (window_latency, window_count) = (0, 0);
        }
    }
    let slow_service = (service * u64::from(scenario.slowdown)) as f64;
    let capacity = scenario.servers as f64 / (slow_service / 1e9);
    report.goodput = served_settled as f64 / ((slow_until - settled) as f64 / 1e9) / capacity;
    report.goodput_whole = served_whole as f64 / ((slow_until - slow_from) as f64 / 1e9) / capacity;
    let percentile = |v: &mut Vec<u64>, q: f64| {
        v.sort_unstable();
        v.get(((v.len() as f64 * q) as usize).min(v.len().saturating_sub(1)))
            .map_or(0.0, |&l| l as f64 / slow_service)
    };
    report.p50 = percentile(&mut latencies, 0.5);
    report.p99 = percentile(&mut latencies, 0.99);
    report.p99_whole = percentile(&mut latencies_whole, 0.99);
    report.recovered_after = Duration::from_nanos(last_refused_after_recovery.unwrap_or(0));
    report
}
