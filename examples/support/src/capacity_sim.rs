//! Origins of a fixed capacity behind an in-flight limit, in simulated time: the family of
//! models the learnt in-flight limit is tuned and judged on (its test, its bench, the example
//! and the figure in docs/), and the baselines it is set beside.
//!
//! # One member
//!
//! A [`Member`] is a set of origins of one shape: `servers` servers each, a mean service time,
//! and each request's service time uniform within `±noise` of it. A request admitted when a
//! server is free takes its service time; one admitted when all are busy waits for the first
//! to free up (first come, first served). In flight beyond the servers the latency grows with
//! the concurrency and the throughput stays at the capacity, `servers / service`. Every
//! origin is sent `load` times its capacity, in Poisson arrivals, or in bursts (Poisson at
//! `load / duty` while on, nothing while off). The first `faulty` origins meet a [`Fault`]
//! for a while, then recover: they serve more slowly, or lose servers, or hang behind a
//! timeout the caller records as [`Outcome::Overload`].
//!
//! # The family
//!
//! [`Member::draw`] draws a member's parameters from the family's ranges with a seed (see its
//! docs): the learnt limit's constants are chosen on some seeds and judged on others, so that
//! no constant is fitted to one origin. [`Member::tuned`] is the one model the limit was
//! first tuned on, kept for comparison.
//!
//! Time moves in steps (a millisecond, or a tenth of the service time when that is shorter)
//! on a [`ManualClock`], which the limiter reads: a run is the same every time for the same
//! member.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{AdaptiveInflight, Limiter, LimiterBuilder, Outcome, OwnedPermit};

use crate::splitmix::SplitMix;

/// The builder of the run's limiter.
pub type Builder = LimiterBuilder<usize>;

/// What happens to the faulty origins while they are faulty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    /// Every request takes `factor` times as long.
    Slower(f64),
    /// Only `left` of the servers serve (those that were busy finish what they had).
    ServersLost { left: usize },
    /// Every request takes `factor` times as long, and its caller gives up after `timeout`,
    /// recording an overload; the server goes on with it.
    Hang { factor: f64, timeout: Duration },
}

/// Arrivals in bursts: on for `duty` of each `period`, at `load / duty` of the capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bursts {
    pub period: Duration,
    pub duty: f64,
}

/// One member of the family: the origins, their traffic and their fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// Origins in all, of one shape, and how many of them (the first) meet the fault.
    pub origins: usize,
    pub faulty: usize,
    /// Servers per origin.
    pub servers: usize,
    /// Mean service time of a request, and each one's spread: uniform within ±`noise` of it.
    pub service: Duration,
    pub noise: f64,
    /// Requests sent to each origin, as a share of its capacity while healthy.
    pub load: f64,
    pub bursts: Option<Bursts>,
    pub fault: Fault,
    /// When the fault begins and ends, and how long the run lasts.
    pub fault_from: Duration,
    pub fault_until: Duration,
    pub duration: Duration,
    /// The limiter's `max_inflight`: the ceiling a learnt limit stays under, and the static
    /// limit beside it.
    pub ceiling: u32,
    pub seed: u64,
}

/// The family's ranges (see [`Member::draw`]).
pub mod ranges {
    /// Servers per origin, drawn log-uniform.
    pub const SERVERS: (f64, f64) = (1.0, 200.0);
    /// Mean service time in seconds, drawn log-uniform.
    pub const SERVICE: (f64, f64) = (0.001, 1.0);
    /// Spread of each service time around the mean.
    pub const NOISE: (f64, f64) = (0.0, 0.5);
    /// Share of its capacity each origin is sent while healthy (at most 0.6 at the peak of a
    /// burst: a healthy origin does not queue for long).
    pub const LOAD: (f64, f64) = (0.2, 0.6);
    /// How much slower a slowed origin serves, drawn log-uniform.
    pub const SLOWER: (f64, f64) = (2.0, 20.0);
    /// Share of its servers an origin keeps when it loses some.
    pub const SERVERS_LEFT: (f64, f64) = (0.1, 0.5);
    /// How much slower a hung origin serves, and its callers' timeout in healthy service
    /// times.
    pub const HANG: f64 = 100.0;
    pub const TIMEOUT: (f64, f64) = (5.0, 50.0);
    /// A faulty origin is sent at least this much more than it can serve then: one sent less
    /// needs no limit.
    pub const MIN_OVERLOAD: f64 = 1.3;
    /// The most requests a second a run sends in all: the test's running time, not the law,
    /// sets it (the law sees rates only through its rounds, counted in completions).
    pub const MAX_TOTAL_RATE: f64 = 20_000.0;
}

impl Member {
    /// The model the learnt limit was first tuned on: 21 origins of 10 servers of 10 ms, sent
    /// half their capacity, one of them 10× slower from 10 s to 25 s of a 35 s run, under a
    /// ceiling of 100.
    pub fn tuned() -> Member {
        Member {
            origins: 21,
            faulty: 1,
            servers: 10,
            service: Duration::from_millis(10),
            noise: 0.2,
            load: 0.5,
            bursts: None,
            fault: Fault::Slower(10.0),
            fault_from: Duration::from_secs(10),
            fault_until: Duration::from_secs(25),
            duration: Duration::from_secs(35),
            ceiling: 100,
            seed: 7,
        }
    }

    /// A member drawn from the family with `seed`:
    ///
    /// - servers log-uniform in 1–200, a mean service time log-uniform in 1 ms–1 s, a spread
    ///   of ±0–50%, a load of 0.2–0.6 of the capacity, Poisson arrivals or (one member in
    ///   three) bursts of 10–50% duty every 0.2–2 s, no more than 0.6 of the capacity at their
    ///   peak;
    /// - a fault of one of three kinds: 2–20× slower (log-uniform), 50–90% of the servers
    ///   lost, or a hang (100× slower) behind a timeout of 5–50 service times; drawn again
    ///   until the faulty origins are sent at least 1.3× what they can serve;
    /// - one member in four has many origins, 400 of them (and servers in 1–8), a tenth of
    ///   them faulty at once; the others 5 origins, one faulty;
    /// - a ceiling (`max_inflight`) of 4× the servers, at least 16;
    /// - the fault begins at 5 s and lasts 20 s, the time for 400 of the slowed origin's
    ///   completions, or (a hang) three timeouts and 10 s, whichever is longest; the run goes
    ///   on 10 s after it.
    ///
    /// Members whose total rate would pass [`ranges::MAX_TOTAL_RATE`] are drawn again.
    pub fn draw(seed: u64) -> Member {
        let mut draws = SplitMix(seed ^ 0x005E_ED0F_0A11_F1E5);
        loop {
            let log_uniform = |d: &mut SplitMix, (lo, hi): (f64, f64)| {
                (lo.ln() + d.unit() * (hi.ln() - lo.ln())).exp()
            };
            let uniform = |d: &mut SplitMix, (lo, hi): (f64, f64)| lo + d.unit() * (hi - lo);
            let many = draws.below(4) == 0;
            let (origins, faulty, max_servers) = if many {
                (400, 40, 8.0)
            } else {
                (5, 1, ranges::SERVERS.1)
            };
            let servers = log_uniform(&mut draws, (ranges::SERVERS.0, max_servers + 0.999))
                .floor()
                .max(1.0) as usize;
            let service = log_uniform(&mut draws, ranges::SERVICE);
            let noise = uniform(&mut draws, ranges::NOISE);
            let bursts = (draws.below(3) == 0).then(|| Bursts {
                period: Duration::from_secs_f64(uniform(&mut draws, (0.2, 2.0))),
                duty: uniform(&mut draws, (0.1, 0.5)),
            });
            let peak_share = bursts.map_or(1.0, |b| 1.0 / b.duty);
            let load = uniform(&mut draws, ranges::LOAD).min(ranges::LOAD.1 / peak_share);
            let fault = match draws.below(3) {
                0 => Fault::Slower(log_uniform(&mut draws, ranges::SLOWER)),
                1 => {
                    let share = uniform(&mut draws, ranges::SERVERS_LEFT);
                    Fault::ServersLost {
                        left: ((servers as f64 * share).floor() as usize).max(1),
                    }
                }
                _ => Fault::Hang {
                    factor: ranges::HANG,
                    timeout: Duration::from_secs_f64(
                        service * uniform(&mut draws, ranges::TIMEOUT),
                    ),
                },
            };
            let capacity = servers as f64 / service;
            let member = |fault_for: f64| Member {
                origins,
                faulty,
                servers,
                service: Duration::from_secs_f64(service),
                noise,
                load,
                bursts,
                fault,
                fault_from: Duration::from_secs(5),
                fault_until: Duration::from_secs_f64(5.0 + fault_for),
                duration: Duration::from_secs_f64(15.0 + fault_for),
                ceiling: (4 * servers).max(16) as u32,
                seed,
            };
            let draft = member(20.0);
            let overload = draft.load * capacity / draft.faulty_capacity();
            if !matches!(fault, Fault::Hang { .. }) && overload < ranges::MIN_OVERLOAD {
                continue;
            }
            if capacity * load * origins as f64 > ranges::MAX_TOTAL_RATE || capacity * load < 1.0 {
                continue;
            }
            // Long enough for 400 completions, and for a hang to be judged after three
            // timeouts (see `settled_from`).
            let timeouts = match fault {
                Fault::Hang { timeout, .. } => 3.0 * timeout.as_secs_f64() + 10.0,
                _ => 0.0,
            };
            let fault_for = (400.0 / draft.faulty_capacity()).max(20.0).max(timeouts);
            return member(fault_for);
        }
    }

    /// The faulty origins' mean service time while faulty.
    pub fn faulty_service(&self) -> f64 {
        let service = self.service.as_secs_f64();
        match self.fault {
            Fault::Slower(factor) | Fault::Hang { factor, .. } => service * factor,
            Fault::ServersLost { .. } => service,
        }
    }

    /// What a faulty origin can serve a second while faulty.
    pub fn faulty_capacity(&self) -> f64 {
        let servers = match self.fault {
            Fault::ServersLost { left } => left,
            _ => self.servers,
        };
        servers as f64 / self.faulty_service()
    }

    /// When the figures "once settled" begin: 2 s after the fault began, or the time for
    /// 48 completions of a faulty origin (three rounds of a learnt limit's at the least)
    /// when that is longer; for a hang, three timeouts after it began if that is later still.
    /// The goal for a hang is that requests stop piling up within a few timeouts: no caller,
    /// and no limit that learns from what callers see, hears of a hang before its first
    /// timeout, and what was admitted until then is in flight until it times out too.
    pub fn settled_from(&self) -> Duration {
        let rounds = 48.0 / self.faulty_capacity();
        let timeouts = match self.fault {
            Fault::Hang { timeout, .. } => 3.0 * timeout.as_secs_f64(),
            _ => 0.0,
        };
        self.fault_from + Duration::from_secs_f64(rounds.max(2.0).max(timeouts))
    }

    /// A short description, for tables.
    pub fn describe(&self) -> String {
        let fault = match self.fault {
            Fault::Slower(f) => format!("{f:.1}x slower"),
            Fault::ServersLost { left } => format!("{left} of {} servers left", self.servers),
            Fault::Hang { timeout, .. } => format!("hang, timeout {:.0} ms", ms(timeout)),
        };
        let bursts = self.bursts.map_or(String::new(), |b| {
            format!(", bursts {:.0}%", b.duty * 100.0)
        });
        format!(
            "{}x{} srv {:.1} ms ±{:.0}%, load {:.2}{bursts}, {} faulty: {fault}",
            self.origins,
            self.servers,
            ms(self.service),
            self.noise * 100.0,
            self.load,
            self.faulty
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// How each origin's requests in flight are held.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Policy {
    /// A static `max_inflight` (the member's ceiling).
    Static,
    /// floodgate's learnt limit under the member's ceiling.
    Adaptive(AdaptiveInflight),
    /// Netflix concurrency-limits' Vegas, one per origin (see [`baseline`]).
    Vegas,
    /// Netflix concurrency-limits' Gradient2, one per origin (see [`baseline`]).
    Gradient2,
    /// Hindsight: the faulty origins held to this many in flight exactly while they are
    /// faulty, and to the ceiling otherwise; a policy no limiter can be (it knows when the
    /// fault begins and ends, and the limit to hold), to say what any in-flight limit can
    /// reach on a member ([`best_in_hindsight`]).
    Hindsight(u32),
}

impl Policy {
    /// The policy's name, for tables.
    pub fn name(&self) -> &'static str {
        match self {
            Policy::Static => "static ceiling",
            Policy::Adaptive(_) => "floodgate",
            Policy::Vegas => "Vegas",
            Policy::Gradient2 => "Gradient2",
            Policy::Hindsight(_) => "best limit in hindsight",
        }
    }
}

/// A sample of the first faulty origin every 100 ms, for the figure.
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
    /// The in-flight limit the last origin (a healthy one) was judged by, and its requests
    /// in flight.
    pub healthy_limit: u32,
    pub healthy_inflight: usize,
}

/// What a run measured of the faulty origins (all of them together) and the healthy ones.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Requests the faulty origins served (without a timeout) while faulty and settled,
    /// against what they could serve then.
    pub goodput: f64,
    /// Latency of their requests admitted while faulty and settled: the median and the 99th
    /// percentile, in faulty mean service times; and the 99th percentile against the service
    /// time's own (the mean × (1 + noise)), which no limit can go below.
    pub p50: f64,
    pub p99: f64,
    pub p99_of_service: f64,
    /// Their requests in flight, on average while faulty and settled, against the ceiling.
    pub inflight_share: f64,
    /// Their requests refused while faulty.
    pub refused_faulty: u64,
    /// Refusals of a healthy origin: every request of the others, and the faulty ones'
    /// before their fault.
    pub refused_healthy: u64,
    /// Refusals of the faulty origins from 2 s after their recovery on.
    pub refused_after_recovery: u64,
    /// How long after the recovery the last refusal of a faulty origin came (zero if none).
    pub recovered_after: Duration,
    pub samples: Vec<Sample>,
}

impl Report {
    /// Its figures in one line, without the samples.
    pub fn summary(&self) -> String {
        format!(
            "goodput {:.2}, p99 {:.2} ({:.2} of the service's own), in flight {:.2} of the \
             ceiling, refused: faulty {}, healthy {}, after recovery {} (the last {:.2} s after)",
            self.goodput,
            self.p99,
            self.p99_of_service,
            self.inflight_share,
            self.refused_faulty,
            self.refused_healthy,
            self.refused_after_recovery,
            self.recovered_after.as_secs_f64()
        )
    }

    /// Whether the run meets the goals the learnt limit is judged by: goodput ≥ 0.9 (not for
    /// a hang, where nothing is served), a 99th percentile within 2× the service time's own
    /// (for a hang: in flight held to a tenth of the ceiling or less, or 4 where that is more:
    /// twice the default floor), no healthy refusal, no
    /// refusal from 2 s after the recovery on.
    pub fn meets_goals(&self, member: &Member) -> bool {
        let held = if matches!(member.fault, Fault::Hang { .. }) {
            self.inflight_share <= (4.0 / f64::from(member.ceiling)).max(0.1)
        } else {
            self.goodput >= 0.9 && self.p99_of_service <= 2.0
        };
        held && self.refused_healthy == 0 && self.refused_after_recovery == 0
    }
}

/// The per-origin limit a policy keeps itself (the baselines).
trait OwnLimit {
    fn limit(&self) -> u32;
    /// A request of `rtt` completed with `inflight` in flight before it did.
    fn completed(&mut self, rtt: f64, inflight: u32, dropped: bool);
}

/// Who decides each origin's admissions.
enum Limits {
    Floodgate(Limiter<usize>),
    Own(HashMap<usize, Box<dyn OwnLimit>>),
    /// The faulty origins' limit while faulty ([`Policy::Hindsight`]).
    Hindsight(u32),
}

/// A request in flight: when it completes, when it was admitted, its origin, whether its
/// caller gave up (a timeout), and its permit.
struct InFlight {
    done: u64,
    arrived: u64,
    origin: usize,
    timed_out: bool,
    permit: Option<OwnedPermit<usize>>,
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

/// Runs `member` under `policy`.
pub fn run(member: &Member, policy: Policy) -> Report {
    run_with(member, policy, |builder| builder)
}

/// [`run`] with floodgate's builder passed through `tune` last: a test fixes its hash keys
/// there (`hash_seed`, a test hook), so that which keys share counters is the same at every
/// run, as the traffic is.
pub fn run_with(member: &Member, policy: Policy, tune: impl Fn(Builder) -> Builder) -> Report {
    let nanos = |d: Duration| d.as_nanos() as u64;
    let service = nanos(member.service);
    let step = (service / 10).clamp(10_000, 1_000_000);
    let clock = ManualClock::new();
    let capacity = member.servers as f64 / member.service.as_secs_f64();
    let total = capacity * member.load * member.origins as f64;
    let mut limits = match policy {
        Policy::Static | Policy::Adaptive(_) => {
            let builder = Limiter::builder()
                .clock(&clock)
                .peak_rate(((total * 4.0) as u64).max(1_000))
                .max_inflight(member.ceiling);
            let builder = match policy {
                Policy::Adaptive(config) => builder.adaptive_inflight(config),
                _ => builder,
            };
            Limits::Floodgate(tune(builder).build().expect("a valid limiter"))
        }
        Policy::Vegas | Policy::Gradient2 => Limits::Own(HashMap::new()),
        Policy::Hindsight(limit) => Limits::Hindsight(limit),
    };
    let new_own = |ceiling: u32| -> Box<dyn OwnLimit> {
        match policy {
            Policy::Gradient2 => Box::new(baseline::Gradient2::new(ceiling)),
            _ => Box::new(baseline::Vegas::new(ceiling)),
        }
    };
    let mut free_at: Vec<Vec<u64>> = vec![vec![0; member.servers]; member.origins];
    let mut inflight_of = vec![0u32; member.origins];
    // One stream of draws per origin, and each arrival's service time drawn with it whether
    // it is admitted or not: every policy meets the same traffic, request for request (a
    // single stream, drawn only for admissions, would reshuffle every origin's traffic after
    // the first decision two policies differ on).
    let mut draws: Vec<SplitMix> = (0..member.origins)
        .map(|origin| SplitMix(member.seed ^ (origin as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    let mut next_arrival: Vec<u64> = vec![0; member.origins];
    let peak_rate = capacity * member.load / member.bursts.map_or(1.0, |b| b.duty);
    let exp = |d: &mut SplitMix| -(1.0 - d.unit()).ln() / peak_rate * 1e9;
    for (next, draws) in next_arrival.iter_mut().zip(draws.iter_mut()) {
        *next = exp(draws) as u64;
    }
    let (fault_from, fault_until) = (nanos(member.fault_from), nanos(member.fault_until));
    let settled = nanos(member.settled_from());
    let recovered = fault_until + 2_000_000_000;
    let faulty_service = member.faulty_service() * 1e9;
    let mut heap: BinaryHeap<Reverse<InFlight>> = BinaryHeap::new();
    let (mut served, mut latencies) = (0u64, Vec::new());
    let (mut inflight_area, mut inflight_steps) = (0u64, 0u64);
    let mut report = Report {
        goodput: 0.0,
        p50: 0.0,
        p99: 0.0,
        p99_of_service: 0.0,
        inflight_share: 0.0,
        refused_faulty: 0,
        refused_healthy: 0,
        refused_after_recovery: 0,
        recovered_after: Duration::ZERO,
        samples: Vec::new(),
    };
    let (mut window_latency, mut window_count) = (0u64, 0u64);
    let steps = nanos(member.duration) / step;
    let sample_every = (100_000_000 / step).max(1);
    for i in 1..=steps {
        clock.advance(Duration::from_nanos(step));
        let now = i * step;
        while heap.peek().is_some_and(|r| r.0.done <= now) {
            let Reverse(done) = heap.pop().expect("peeked");
            let latency = done.done - done.arrived;
            inflight_of[done.origin] -= 1;
            if done.origin < member.faulty {
                window_latency += latency;
                window_count += 1;
                if (settled..fault_until).contains(&done.arrived) {
                    latencies.push(latency);
                    served += u64::from(!done.timed_out);
                }
            }
            match (&mut limits, done.permit) {
                (_, Some(mut permit)) if done.timed_out => permit.record(Outcome::Overload),
                (_, Some(_)) => {}
                (Limits::Own(own), None) => {
                    let inflight = inflight_of[done.origin] + 1;
                    if let Some(limit) = own.get_mut(&done.origin) {
                        limit.completed(latency as f64, inflight, done.timed_out);
                    }
                }
                _ => {}
            }
        }
        let faulty_now = (fault_from..fault_until).contains(&now);
        if matches!(member.fault, Fault::Hang { .. })
            && now - step < fault_until
            && now >= fault_until
        {
            // A hung origin recovers by a restart: what it was stuck on is dropped.
            for servers in &mut free_at[..member.faulty] {
                servers.iter_mut().for_each(|free| *free = (*free).min(now));
            }
        }
        for origin in 0..member.origins {
            let faulty = origin < member.faulty;
            while next_arrival[origin] <= now {
                let at = next_arrival[origin];
                next_arrival[origin] = at + exp(&mut draws[origin]).max(1.0) as u64;
                let jitter = 1.0 + member.noise * (2.0 * draws[origin].unit() - 1.0);
                if let Some(b) = member.bursts {
                    let period = nanos(b.period);
                    if (at % period) as f64 >= b.duty * period as f64 {
                        continue;
                    }
                }
                let admitted = match &mut limits {
                    Limits::Floodgate(limiter) => {
                        limiter.try_acquire_owned(&origin).map(Some).map_err(|_| ())
                    }
                    Limits::Own(own) => {
                        let limit = own
                            .entry(origin)
                            .or_insert_with(|| new_own(member.ceiling))
                            .limit();
                        if inflight_of[origin] < limit {
                            Ok(None)
                        } else {
                            Err(())
                        }
                    }
                    Limits::Hindsight(held) => {
                        let limit = if faulty && faulty_now {
                            *held
                        } else {
                            member.ceiling
                        };
                        if inflight_of[origin] < limit {
                            Ok(None)
                        } else {
                            Err(())
                        }
                    }
                };
                let permit = match admitted {
                    Ok(permit) => permit,
                    Err(()) => {
                        if faulty && faulty_now {
                            report.refused_faulty += 1;
                        } else if faulty && now >= fault_until {
                            report.recovered_after = Duration::from_nanos(now - fault_until);
                            report.refused_after_recovery += u64::from(now >= recovered);
                        } else {
                            report.refused_healthy += 1;
                        }
                        continue;
                    }
                };
                // The request's service time, and the servers it may use.
                let (mut took, mut servers, mut timeout) =
                    (service as f64 * jitter, member.servers, u64::MAX);
                if faulty && faulty_now {
                    match member.fault {
                        Fault::Slower(factor) => took *= factor,
                        Fault::ServersLost { left } => servers = left,
                        Fault::Hang { factor, timeout: t } => {
                            took *= factor;
                            timeout = nanos(t);
                        }
                    }
                }
                let origin_free = &mut free_at[origin][..servers];
                let (server, free) = origin_free
                    .iter()
                    .copied()
                    .enumerate()
                    .min_by_key(|&(_, free)| free)
                    .expect("an origin has servers");
                let finished = free.max(now) + (took as u64).max(1);
                origin_free[server] = finished;
                let timed_out = finished - now > timeout;
                inflight_of[origin] += 1;
                heap.push(Reverse(InFlight {
                    done: if timed_out { now + timeout } else { finished },
                    arrived: now,
                    origin,
                    timed_out,
                    permit,
                }));
            }
        }
        if (settled..fault_until).contains(&now) {
            inflight_area += inflight_of[..member.faulty]
                .iter()
                .map(|&n| u64::from(n))
                .sum::<u64>();
            inflight_steps += 1;
        }
        if i % sample_every == 0 {
            let limit_of = |origin: usize| match &limits {
                Limits::Floodgate(limiter) => limiter.inflight_limit(&origin).unwrap_or(0),
                Limits::Own(own) => own.get(&origin).map_or(member.ceiling, |l| l.limit()),
                Limits::Hindsight(held)
                    if origin < member.faulty && (fault_from..fault_until).contains(&now) =>
                {
                    *held
                }
                Limits::Hindsight(_) => member.ceiling,
            };
            let healthy = member.origins - 1;
            report.samples.push(Sample {
                at: now as f64 / 1e9,
                limit: limit_of(0),
                inflight: inflight_of[0] as usize,
                healthy_limit: limit_of(healthy),
                healthy_inflight: inflight_of[healthy] as usize,
                latency_ms: if window_count == 0 {
                    0.0
                } else {
                    window_latency as f64 / window_count as f64 / 1e6
                },
            });
            (window_latency, window_count) = (0, 0);
        }
    }
    let settled_secs = (fault_until - settled) as f64 / 1e9;
    let faulty_capacity = member.faulty_capacity() * member.faulty as f64;
    report.goodput = served as f64 / settled_secs / faulty_capacity;
    latencies.sort_unstable();
    let percentile = |q: f64| {
        latencies
            .get(((latencies.len() as f64 * q) as usize).min(latencies.len().saturating_sub(1)))
            .map_or(0.0, |&l| l as f64 / faulty_service)
    };
    report.p50 = percentile(0.5);
    report.p99 = percentile(0.99);
    report.p99_of_service = report.p99 / (1.0 + member.noise);
    report.inflight_share = inflight_area as f64
        / inflight_steps.max(1) as f64
        / member.faulty as f64
        / f64::from(member.ceiling);
    report
}

/// What the best in-flight limit in hindsight reaches on `member` ([`Policy::Hindsight`]):
/// the limit, and its run. For a slower origin or one that lost servers, the fewest requests
/// in flight at which the faulty origins' goodput reaches 0.9 (or the ceiling, if none does),
/// or a neighbour of it (±2) that also meets the 99th percentile's goal if one does: both
/// goodput and the 99th percentile grow with the limit, so where this run misses a goal, no
/// limit held for the whole fault meets both (an origin of few servers needs a queue to stay
/// busy under Poisson arrivals, and the queue is the latency). For a hang, the goal's own
/// bound (a tenth of the ceiling, or 4).
pub fn best_in_hindsight(member: &Member) -> (u32, Report) {
    let at = |limit: u32| (limit, run(member, Policy::Hindsight(limit)));
    if matches!(member.fault, Fault::Hang { .. }) {
        return at((member.ceiling / 10).max(4).min(member.ceiling));
    }
    let (mut lo, mut hi) = (1, member.ceiling);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if at(mid).1.goodput >= 0.9 {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let around = lo.saturating_sub(2).max(1)..=(lo + 2).min(member.ceiling);
    let runs: Vec<(u32, Report)> = around.map(at).collect();
    let best = runs
        .iter()
        .position(|(_, r)| r.meets_goals(member))
        .or_else(|| runs.iter().position(|&(limit, _)| limit == lo))
        .unwrap_or(0);
    runs.into_iter().nth(best).expect("a limit was run")
}

/// Netflix concurrency-limits' Vegas and Gradient2, written from their documented algorithms
/// (the library's README and its limit classes' docs), one per origin: the anchors the learnt
/// limit is set beside. Each sees every completion of its origin, its latency and whether it
/// was dropped (a timeout), as the library's limiters do.
pub mod baseline {
    use super::OwnLimit;

    /// Vegas: the queue is `limit × (1 − rtt_noload / rtt)` against the least latency seen;
    /// the limit grows by `β` while the queue is under `log10(limit)`, by `log10(limit)`
    /// while it is under `α`, and shrinks by `log10(limit)` over `β` (α = 3·log10, β =
    /// 6·log10 of the limit); a drop shrinks it by `log10(limit)`. The least latency is
    /// forgotten every so often (a probe), so that an origin that slowed for good is seen.
    /// Updates are skipped while under half the limit is in flight.
    pub struct Vegas {
        limit: f64,
        ceiling: f64,
        rtt_noload: f64,
        samples: u64,
        probe_at: u64,
    }

    impl Vegas {
        /// The library's defaults: starting at 20, probing after 30 × the limit samples.
        pub fn new(ceiling: u32) -> Self {
            Vegas {
                limit: 20f64.min(f64::from(ceiling)),
                ceiling: f64::from(ceiling),
                rtt_noload: 0.0,
                samples: 0,
                probe_at: 0,
            }
        }
    }

    impl OwnLimit for Vegas {
        fn limit(&self) -> u32 {
            self.limit as u32
        }

        fn completed(&mut self, rtt: f64, inflight: u32, dropped: bool) {
            self.samples += 1;
            if self.probe_at == 0 {
                self.probe_at = self.samples + (30.0 * self.limit) as u64;
            }
            if self.samples >= self.probe_at {
                self.rtt_noload = 0.0;
                self.probe_at = self.samples + (30.0 * self.limit) as u64;
            }
            if self.rtt_noload == 0.0 || rtt < self.rtt_noload {
                self.rtt_noload = rtt;
                return;
            }
            let log = self.limit.log10().max(1.0);
            if dropped {
                self.limit = (self.limit - log).max(1.0);
                return;
            }
            if f64::from(inflight) * 2.0 < self.limit {
                return;
            }
            let queue = (self.limit * (1.0 - self.rtt_noload / rtt)).ceil();
            let (alpha, beta) = (3.0 * log, 6.0 * log);
            self.limit = if queue <= log {
                self.limit + beta
            } else if queue < alpha {
                self.limit + log
            } else if queue > beta {
                self.limit - log
            } else {
                self.limit
            }
            .clamp(1.0, self.ceiling);
        }
    }

    /// Gradient2: a short-term latency (the mean of each window of samples) against a
    /// long-term one (an exponential average over 600 windows, pulled down when it runs
    /// more than twice the short one); `limit ← limit × gradient + queue` with the gradient
    /// `clamp(tolerance × long / short, 0.5, 1)`, smoothed by 0.2, and a queue of 4. A drop
    /// counts as a gradient of ½. Skipped while under half the limit is in flight.
    pub struct Gradient2 {
        limit: f64,
        ceiling: f64,
        long: f64,
        windows: u64,
        short_sum: f64,
        short_n: u32,
        dropped: bool,
    }

    /// Samples a window of Gradient2 takes (the library's windowed limiter uses at least 10
    /// samples a window).
    const WINDOW: u32 = 10;

    impl Gradient2 {
        /// The library's defaults: starting at 20, a tolerance of 1.5, smoothing 0.2.
        pub fn new(ceiling: u32) -> Self {
            Gradient2 {
                limit: 20f64.min(f64::from(ceiling)),
                ceiling: f64::from(ceiling),
                long: 0.0,
                windows: 0,
                short_sum: 0.0,
                short_n: 0,
                dropped: false,
            }
        }
    }

    impl OwnLimit for Gradient2 {
        fn limit(&self) -> u32 {
            self.limit as u32
        }

        fn completed(&mut self, rtt: f64, inflight: u32, dropped: bool) {
            self.short_sum += rtt;
            self.short_n += 1;
            self.dropped |= dropped;
            if self.short_n < WINDOW {
                return;
            }
            let short = self.short_sum / f64::from(self.short_n);
            let dropped = std::mem::take(&mut self.dropped);
            (self.short_sum, self.short_n) = (0.0, 0);
            self.windows += 1;
            let warm = (self.windows as f64).min(600.0);
            self.long = if self.long == 0.0 {
                short
            } else {
                self.long + (short - self.long) / warm
            };
            if self.long / short > 2.0 {
                self.long *= 0.95;
            }
            if f64::from(inflight) * 2.0 < self.limit && !dropped {
                return;
            }
            let gradient = if dropped {
                0.5
            } else {
                (1.5 * self.long / short).clamp(0.5, 1.0)
            };
            let next = self.limit * gradient + 4.0;
            self.limit = (self.limit * 0.8 + next * 0.2).clamp(1.0, self.ceiling);
        }
    }
}
