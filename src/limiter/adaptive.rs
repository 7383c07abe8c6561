//! In-flight limits that learn each hot origin's capacity from its latency: the control law,
//! as arithmetic on values. The exact stage keeps one [`Learner`] per promoted key whose
//! in-flight count reached its promotion threshold, feeds it the key's admissions and
//! completions under the set's lock, and judges the key's requests against
//! [`Learner::limit`] instead of the configured `max_inflight` (which stays the ceiling).
//!
//! # The law
//!
//! An origin with `c` servers and service time `s` serves `c / s` requests a second. In flight
//! below `c`, a request takes `s`; above it, the excess waits, and the latency grows with the
//! concurrency (`s · L / c`) while the throughput stays `c / s`. The limit to learn is where
//! latency starts to grow with concurrency: the queue it allows is the proxy's, not the
//! origin's, and the origin keeps serving at full speed.
//!
//! The learner works in *rounds*: a round ends when `max(limit / 2, MIN_ROUND)` units have
//! completed, about one latency's worth of traffic. It measures the round's mean latency by
//! Little's law: the area under the key's in-flight count over the round's time, divided by the
//! units that completed in it. That needs no timestamp in the permit, only the time of each
//! admission and completion, read under the lock the exact stage takes anyway.
//!
//! At the end of a round of mean latency `m`, with `no_load` the latency the origin gives when
//! nothing queues:
//!
//! - **Gradient** (envoy's adaptive concurrency; Netflix's Gradient): `g = tolerance ·
//!   no_load / m`, clamped to `[1/2, 1]`, and `limit ← limit · g + ¾√limit`. Latency within
//!   the tolerance keeps the limit growing by ¾ of its square root (the queue it may keep);
//!   latency above it shrinks the limit in proportion, at most by half a round. With `c`
//!   servers, the limit settles where `limit = tolerance · c + ¾√limit`: about `1.4 c` for
//!   `c = 10` at the default tolerance, a mean latency of `1.4 s`.
//! - **Growth only under load**: a round whose in-flight count never reached half the limit
//!   does not raise it (Netflix's rule): an idle origin's limit does not drift to the ceiling
//!   and then let a burst through.
//! - **Overload** (AIMD's signal): a round in which a completion was reported as an overload
//!   (a 5xx, a timeout: `Outcome::Overload`) multiplies the limit by `BACKOFF` instead.
//! - **No-load latency, by probing.** A round faster than `no_load` by more than the tolerance
//!   lowers it at once (not any faster round: the least of many noisy means drifts low). To see
//!   it rise (the origin slowed down for good) or to measure it at all (every key starts
//!   unknown), the learner *probes*: it divides the limit (by 4 the first time, by 2 after),
//!   waits for the in-flight count to drain to it, and measures a round. If that round is a
//!   quarter faster than the one before or more (the cut removed queueing), it halves again;
//!   when it stops falling, or comes within the tolerance of the no-load latency known, its
//!   mean is the new `no_load`. A probe that changed nothing puts the limit back where it was
//!   (a round at half the limit is its whole cost); one that found queueing sets it to the
//!   level before its last halving and doubles it each round while the latency stays within
//!   the tolerance (TCP's slow start), then hands over to the gradient. A learner probes when
//!   it starts, every `probe_every` rounds while the limit binds (requests were refused for
//!   it: an origin always saturated never shows its no-load latency otherwise), and after two
//!   rounds at the lowest gradient (latency far above what was known and not falling with the
//!   limit: the origin slowed down).
//! - **Where it starts, and how long it lasts.** A key starts learning when its in flight
//!   reaches its promotion threshold, at that concurrency: it is not let further before its
//!   latency is known. It keeps what it learnt while it is in the exact stage, and leaves the
//!   stage (and forgets) only after a whole epoch without a request: a key held to a few
//!   requests in flight often has none for a moment, and would otherwise start again from its
//!   threshold, queue and all. It stops learning, and is judged by `max_inflight` again, after
//!   a round in which its in flight stayed under half its threshold with no refusal and no
//!   overload: its callers ask for less than it serves.
//!
//! Between the floor and the ceiling, always: the ceiling is the key's `max_inflight` of the
//! request being judged, so a per-key limit lowered later caps the learnt one at once.
//!
//! # Compared with the algorithms it borrows from
//!
//! - Netflix concurrency-limits' **Vegas** estimates the queue as `limit · (1 − rtt_noload /
//!   rtt)` against an all-time minimum RTT, reset by occasional probes; **Gradient2** compares
//!   a short-term RTT with a long-term average, which drifts upward under sustained overload;
//!   **AIMD** reacts to drops only. Their state is one per service.
//! - envoy's **adaptive concurrency** filter uses the gradient above against a minimum RTT it
//!   measures by pinning the concurrency to a small value at fixed intervals, refusing the
//!   excess meanwhile.
//!
//! This learner takes envoy's gradient and its measured no-load latency, but probes by halving
//! (a round at half the limit, not at a fixed minimum) and only when the limit binds or the
//! latency jumped, so that an origin below its limit is never refused for a probe after its
//! first; and it keeps one learner per hot key, in the exact stage's fixed table.

use super::exact::Counts;
use super::limits::InflightThreshold;
use crate::error::ConfigError;

/// Units that must complete before a round ends, at the least: fewer make the mean latency
/// too noisy to compare within the default tolerance.
pub(crate) const MIN_ROUND: u32 = 16;
/// A probe round must be at least this much faster than the round before for the halving to
/// count as having removed queueing (and to halve again). Halving a concurrency above the
/// origin's servers halves its latency (0.5); halving it below them leaves the latency as it
/// was (1.0); 0.75 stands between, clear of a round's noise (a few per cent).
const FALL: f64 = 0.75;
/// The limit's factor after a round with an overload reported (Netflix's AIMD backoff ratio).
const BACKOFF: f64 = 0.9;
/// The gradient's clamp: a round shrinks the limit by half at most, and never grows it by
/// more than its headroom.
const MIN_GRADIENT: f64 = 0.5;
/// The queue the gradient leaves room for, in square roots of the limit: three quarters of
/// envoy's √limit. On the model of `capacity_sim` (the adaptive test's), √limit let the 99th
/// percentile reach 2.0× the service time, ½√limit cost the goodput (0.84 of the capacity);
/// ¾ gave 1.86× and 0.92.
const HEADROOM: f64 = 0.75;
/// No-load latencies without a completion after which a learnt limit that refuses a request is
/// taken as stalled, and the least time that takes.
const STALL: f64 = 8.0;
const MIN_STALL_NANOS: f64 = 1e9;
/// What the first probe divides the limit by.
const FIRST_PROBE: f64 = 4.0;
/// Rounds at the lowest gradient in a row after which the learner probes.
const LOW_ROUNDS: u32 = 2;

/// How a limiter learns the in-flight limit of each hot key (see
/// [`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight)).
///
/// The configured `max_inflight` stays the ceiling; the learnt limit moves between
/// [`floor`](Self::floor) and it.
///
/// # Examples
///
/// ```
/// use floodgate::{AdaptiveInflight, Limiter};
///
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_inflight(200)
///     .adaptive_inflight(AdaptiveInflight::new().floor(4).tolerance(1.2))
///     .build()
///     .unwrap();
/// assert_eq!(limiter.inflight_limit("quiet.example"), Some(200), "judged as usual until hot");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveInflight {
    pub(crate) floor: u32,
    pub(crate) tolerance: f64,
    pub(crate) probe_every: u32,
}

impl Default for AdaptiveInflight {
    fn default() -> Self {
        Self::new()
    }
}

impl AdaptiveInflight {
    /// The default floor.
    pub const DEFAULT_FLOOR: u32 = 2;
    /// The default tolerance.
    pub const DEFAULT_TOLERANCE: f64 = 1.1;
    /// The default rounds between probes while the limit binds.
    pub const DEFAULT_PROBE_EVERY: u32 = 16;

    /// The defaults: a floor of 2, a tolerance of 1.1, a probe every 16 rounds while the
    /// limit binds.
    pub fn new() -> Self {
        AdaptiveInflight {
            floor: Self::DEFAULT_FLOOR,
            tolerance: Self::DEFAULT_TOLERANCE,
            probe_every: Self::DEFAULT_PROBE_EVERY,
        }
    }

    /// The lowest limit learnt: at least 1, and at most the builder's `max_inflight` (checked
    /// at build). A key whose own `max_inflight` is lower is held to that.
    pub fn floor(mut self, floor: u32) -> Self {
        self.floor = floor;
        self
    }

    /// How much slower than its no-load latency an origin may answer before its limit shrinks:
    /// from 1.0 (exclusive) to 10. The limit settles where the latency is about this ratio
    /// above no-load plus the queue of `¾√limit` it keeps.
    pub fn tolerance(mut self, tolerance: f64) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Rounds between two probes of the no-load latency while the limit binds: at least 4.
    /// Each probe costs about a round at half the limit.
    pub fn probe_every(mut self, rounds: u32) -> Self {
        self.probe_every = rounds;
        self
    }

    /// Refuses what cannot work under a limiter whose `max_inflight` is `ceiling`.
    pub(crate) fn check(&self, ceiling: Option<u32>) -> Result<(), ConfigError> {
        let Some(ceiling) = ceiling else {
            return Err(ConfigError::InvalidAdaptive(
                "an adaptive in-flight limit needs max_inflight, the ceiling it learns under",
            ));
        };
        if self.floor == 0 || self.floor > ceiling {
            return Err(ConfigError::InvalidAdaptive(
                "the floor of an adaptive in-flight limit must be from 1 to max_inflight",
            ));
        }
        if !(self.tolerance > 1.0 && self.tolerance <= 10.0) {
            return Err(ConfigError::InvalidAdaptive(
                "the tolerance of an adaptive in-flight limit must be in (1, 10]",
            ));
        }
        if self.probe_every < 4 {
            return Err(ConfigError::InvalidAdaptive(
                "an adaptive in-flight limit probes at most every 4 rounds",
            ));
        }
        Ok(())
    }
}

/// What a completed request says of its origin, for an adaptive in-flight limit
/// ([`Permit::record`](super::Permit::record)). A permit dropped without one is a
/// [`Success`](Outcome::Success).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Outcome {
    /// The origin answered: its latency counts.
    #[default]
    Success,
    /// The origin failed under load or timed out (a 5xx, a timeout): the limit backs off.
    Overload,
}

/// Whether the request being judged (`cost` units) for a promoted key of `counts` goes to a
/// learner: the key has one already (`learning`), or its in-flight bound with this request
/// reaches its promotion threshold (`ceiling.promote_at`) and it starts one. A key promoted
/// for its rate whose in flight stays low is judged as usual, and reads no clock.
#[inline]
pub(crate) fn starts(
    learning: bool,
    counts: &Counts,
    cost: isize,
    ceiling: &InflightThreshold,
) -> bool {
    learning || counts.inflight.bound().saturating_add(cost) >= ceiling.promote_at
}

/// What a completion changed: how many more requests the key may now have in flight (for
/// its waiters), and whether its learner is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completed {
    pub(crate) done: bool,
    pub(crate) rise: u32,
}

/// Where a learner is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Rounds judged by the gradient; `rounds` since the last probe, `low` in a row at the
    /// lowest gradient.
    Track { rounds: u32, low: u32 },
    /// Halving to find the no-load latency: `before`, the mean of the round before the last
    /// halving; `saved`, the limit before the probe; `steps`, halvings so far.
    Probe { before: f64, saved: f64, steps: u32 },
    /// After a probe that found queueing below where the limit was: doubling each round
    /// while the latency stays within the tolerance (TCP's slow start), then by the gradient.
    Grow,
}

/// One key's learnt in-flight limit, and the round it is measuring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learner {
    limit: f64,
    /// Mean latency when nothing queues (nanoseconds); 0 until the first probe measured it.
    no_load: f64,
    phase: Phase,
    /// Whether the round counts: false while a probe waits for in flight to drain to its
    /// limit.
    measuring: bool,
    /// Units in flight × nanoseconds since the round began.
    area: f64,
    /// When in flight last changed (nanoseconds on the limiter's clock).
    last: u64,
    /// Units completed in the round, and of them reported as overloads.
    done: u32,
    overloads: u32,
    /// The most units in flight in the round, and whether a request was refused for the
    /// limit.
    peak: isize,
    refused: bool,
    /// When a request it measures last completed, or it started (nanoseconds).
    completed_at: u64,
}

impl Learner {
    /// A learner for a key whose in flight reached its promotion threshold at `now`, `inflight`
    /// then: judged at that until its first round ends, which starts a probe (a key that
    /// reached its threshold is not let further before its latency is known).
    pub(crate) fn start(inflight: isize, now: u64) -> Self {
        Learner {
            limit: inflight.max(1) as f64,
            no_load: 0.0,
            phase: Phase::Track { rounds: 0, low: 0 },
            measuring: true,
            area: 0.0,
            last: now,
            done: 0,
            overloads: 0,
            peak: 0,
            refused: false,
            completed_at: now,
        }
    }

    /// The limit to judge a request that would bring the key's in flight to `wanted` by, at
    /// `now`: the learnt one, unless no request it measures has completed for `STALL` no-load
    /// latencies (at least a second) and `wanted` is over it. Then the requests in flight do
    /// not end (streams, requests admitted before it started, which it does not see end), no
    /// round can move the limit, and it is raised to `wanted` (any probe given up): a learnt
    /// limit never holds a key for good.
    pub(crate) fn unstalled(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        now: u64,
        wanted: isize,
    ) -> isize {
        let limit = self.limit(config, ceiling.limit);
        let stall = (STALL * self.no_load).max(MIN_STALL_NANOS);
        if wanted <= limit || (now.saturating_sub(self.completed_at) as f64) < stall {
            return limit;
        }
        self.limit = wanted.min(ceiling.limit) as f64;
        self.completed_at = now;
        if !matches!(self.phase, Phase::Track { .. }) {
            self.phase = Phase::Track { rounds: 0, low: 0 };
            self.begin_round(now, wanted);
        }
        self.limit(config, ceiling.limit)
    }

    /// The limit to judge a request by: the learnt one, between the floor and `ceiling` (the
    /// request's `max_inflight`), rounded down.
    pub(crate) fn limit(&self, config: &AdaptiveInflight, ceiling: isize) -> isize {
        let floor = (config.floor as isize).min(ceiling);
        (self.limit as isize).clamp(floor, ceiling.max(floor))
    }

    /// The no-load latency it measured, if it has.
    #[cfg(test)]
    pub(crate) fn no_load(&self) -> Option<std::time::Duration> {
        (self.no_load > 0.0).then(|| std::time::Duration::from_nanos(self.no_load as u64))
    }

    /// Adds the area under `inflight` (the key's tracked units until now) up to `now`.
    fn advance(&mut self, now: u64, inflight: isize) {
        if self.measuring {
            let elapsed = now.saturating_sub(self.last) as f64;
            self.area += inflight.max(0) as f64 * elapsed;
        }
        self.last = self.last.max(now);
    }

    /// `units` admitted at `now`, with `inflight` units tracked before them.
    pub(crate) fn admitted(&mut self, now: u64, inflight: isize, units: u32) {
        self.advance(now, inflight);
        self.peak = self.peak.max(inflight.saturating_add(units as isize));
    }

    /// A request refused for the learnt limit.
    pub(crate) fn refused(&mut self) {
        self.refused = true;
    }

    /// `units` completed at `now` with `outcome`, with `inflight` units tracked before they
    /// were given back, under `ceiling` (the key's in-flight limit and promotion threshold);
    /// `measured`: false for a request whose time says nothing of the origin (an inner layer
    /// refused it), which counts in no round. Ends the round when it is due, and says how
    /// much room the key gained and whether the learner is done: a whole round in which the
    /// key's in flight stayed below half its promotion threshold (the level at which a key
    /// cools) and half its learnt limit, with no refusal for the learnt limit and no overload:
    /// its callers no longer ask for more than it serves (the key is judged by
    /// `max_inflight` again).
    #[allow(clippy::too_many_arguments)] // one completion's parts
    pub(crate) fn completed(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        now: u64,
        inflight: isize,
        units: u32,
        outcome: Outcome,
        measured: bool,
    ) -> Completed {
        let before = self.limit(config, ceiling.limit);
        let after = inflight.saturating_sub(units as isize);
        self.advance(now, inflight);
        self.completed_at = self.completed_at.max(now);
        let unchanged = Completed {
            done: false,
            rise: 0,
        };
        if !self.measuring {
            // A probe waits for the requests it measures to drain to its limit: what was
            // admitted above it queued, and would inflate the probe's latency.
            if after <= before {
                self.begin_round(now, after);
            }
            return unchanged;
        }
        if measured {
            self.done = self.done.saturating_add(units);
            if outcome == Outcome::Overload {
                self.overloads = self.overloads.saturating_add(1);
            }
        }
        if self.done < ((self.limit / 2.0) as u32).max(MIN_ROUND) {
            return unchanged;
        }
        // Quiet: under half its threshold, and under half its learnt limit too (a limit that
        // holds the key low keeps its peak low as well; a waiting caller is no refusal).
        let quiet = self.peak.saturating_mul(2) < ceiling.promote_at
            && self.peak.saturating_mul(2) < self.limit as isize
            && self.overloads == 0
            && !self.refused;
        self.end_round(config, ceiling.limit, now, after);
        let now_allowed = if quiet {
            ceiling.limit
        } else {
            self.limit(config, ceiling.limit)
        };
        Completed {
            done: quiet,
            rise: u32::try_from(now_allowed.saturating_sub(before)).unwrap_or(0),
        }
    }

    fn begin_round(&mut self, now: u64, inflight: isize) {
        self.measuring = true;
        self.area = 0.0;
        self.last = now;
        self.done = 0;
        self.overloads = 0;
        self.peak = inflight;
        self.refused = false;
    }

    /// Starts a probe from a round of mean `mean`: the limit is divided by `by` (not under
    /// `floor`), and the next round begins once in flight has drained to it.
    fn probe(&mut self, floor: f64, mean: f64, saved: f64, steps: u32, by: f64) {
        self.phase = Phase::Probe {
            before: mean,
            saved,
            steps,
        };
        self.limit = (self.limit / by).max(floor);
        self.measuring = false;
    }

    fn end_round(&mut self, config: &AdaptiveInflight, ceiling: isize, now: u64, bound: isize) {
        let mean = self.area / f64::from(self.done.max(1));
        // A key's own `max_inflight` can be under the configured floor: it holds.
        let top = ceiling.max(1) as f64;
        let floor = f64::from(config.floor).min(top);
        let (overloaded, grew_under_load, refused) = (
            self.overloads > 0,
            self.peak.saturating_mul(2) >= self.limit as isize,
            self.refused,
        );
        self.begin_round(now, bound);
        let timed = mean > 0.0 && mean.is_finite();
        match self.phase {
            _ if overloaded => {
                self.limit = (self.limit * BACKOFF).max(floor);
                if let Phase::Probe { saved, .. } = self.phase {
                    self.limit = self.limit.min(saved);
                }
                if !matches!(self.phase, Phase::Track { .. }) {
                    // No more halving nor doubling on an origin that says it is overloaded.
                    self.phase = Phase::Track { rounds: 0, low: 0 };
                }
            }
            // No time passed in the round (a clock that did not move): it says nothing of the
            // latency, and a zero would poison the no-load latency for good.
            _ if !timed => {}
            Phase::Probe {
                before,
                saved,
                steps,
            } => {
                let known = self.no_load > 0.0 && mean <= config.tolerance * self.no_load;
                let falling = mean < FALL * before;
                if falling && !known && self.limit > floor {
                    self.probe(floor, mean, saved, steps + 1, 2.0);
                    return;
                }
                self.no_load = mean;
                if known || steps <= 1 && !falling {
                    // The latency known (the origin has not changed), or nothing queued at the
                    // level before: back where it was.
                    self.limit = saved;
                    self.phase = Phase::Track { rounds: 0, low: 0 };
                } else {
                    // The last halving still removed queueing: grow fast from the level before
                    // it while the latency allows.
                    self.limit = (self.limit * 2.0).min(saved);
                    self.phase = Phase::Grow;
                }
            }
            Phase::Grow => {
                if mean <= config.tolerance * self.no_load && grew_under_load {
                    self.limit = (self.limit * 2.0).min(top);
                } else {
                    self.phase = Phase::Track { rounds: 0, low: 0 };
                }
            }
            Phase::Track { rounds, low } => {
                if self.no_load == 0.0 {
                    // The first round: measure the no-load latency before judging by it, from a
                    // quarter of the limit (a key that reached its threshold is often far
                    // into its queue: halving alone would take several rounds to see it).
                    let saved = self.limit;
                    self.probe(floor, mean, saved, 1, FIRST_PROBE);
                    return;
                }
                if mean * config.tolerance < self.no_load {
                    // Faster by more than the tolerance: the origin got faster. (Not the least
                    // of the rounds' means, which noise alone keeps lowering.)
                    self.no_load = mean;
                }
                let gradient = (config.tolerance * self.no_load / mean).clamp(MIN_GRADIENT, 1.0);
                let mut next = self.limit * gradient + HEADROOM * self.limit.sqrt();
                if !grew_under_load {
                    next = next.min(self.limit);
                }
                self.limit = next.clamp(floor, top);
                let low = if gradient <= MIN_GRADIENT { low + 1 } else { 0 };
                let rounds = rounds + 1;
                self.phase = Phase::Track { rounds, low };
                if low >= LOW_ROUNDS || (refused && rounds >= config.probe_every) {
                    let saved = self.limit;
                    self.probe(floor, mean, saved, 1, 2.0);
                }
            }
        }
        self.limit = self.limit.clamp(floor, top);
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1_000_000;

    /// A ceiling whose promotion threshold is 0: the tests' learners never end.
    fn ceiling_of(limit: isize) -> InflightThreshold {
        InflightThreshold {
            limit,
            promote_at: 0,
        }
    }

    /// Drives `learner` until a round ends, in a steady state of `inflight` units in flight
    /// that each take `latency`: one completes and one is admitted every `latency / inflight`
    /// (the round's mean is then `latency` by Little's law, wherever its bounds fall).
    /// `refused`: requests are refused for the limit meanwhile.
    fn round(
        learner: &mut Learner,
        config: &AdaptiveInflight,
        ceiling: isize,
        now: &mut u64,
        inflight: isize,
        latency: u64,
        refused: bool,
    ) {
        let before = (learner.phase, learner.limit);
        let step = latency / inflight as u64;
        for _ in 0..100_000 {
            *now += step;
            let ceiling = ceiling_of(ceiling);
            learner.completed(config, &ceiling, *now, inflight, 1, Outcome::Success, true);
            if refused {
                learner.refused();
            }
            learner.admitted(*now, inflight - 1, 1);
            if (learner.phase, learner.limit) != before {
                return;
            }
        }
        panic!("no round ended");
    }

    #[test]
    fn the_mean_latency_of_a_round_is_little_s_law_over_its_completions() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 0);
        let mut now = 0;
        round(&mut learner, &config, 100, &mut now, 20, 8 * MS, false);
        assert_eq!(
            learner.phase,
            Phase::Probe {
                before: (8 * MS) as f64,
                saved: 100.0,
                steps: 1
            }
        );
        assert_eq!(
            learner.limit(&config, 100),
            25,
            "the first round starts a probe at a quarter"
        );
    }

    #[test]
    fn a_probe_that_finds_no_queueing_puts_the_limit_back_and_measures_no_load() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 0);
        let mut now = 0;
        round(&mut learner, &config, 100, &mut now, 20, 8 * MS, false);
        round(&mut learner, &config, 100, &mut now, 20, 8 * MS, false);
        assert_eq!(learner.no_load(), Some(Duration::from_millis(8)));
        assert_eq!(learner.limit(&config, 100), 100);
    }

    #[test]
    fn a_probe_halves_while_latency_falls_with_the_limit_and_grows_back_fast() {
        // 10 servers of 10 ms: latency 10 ms · L / 10 above 10 in flight.
        let config = AdaptiveInflight::new();
        let latency = |l: isize| 10 * MS * (l.max(10) as u64) / 10;
        let mut learner = Learner::start(80, 0);
        let mut now = 0;
        let mut limits = Vec::new();
        for _ in 0..5 {
            let l = learner.limit(&config, 80);
            round(&mut learner, &config, 80, &mut now, l, latency(l), true);
            limits.push(learner.limit(&config, 80));
        }
        assert_eq!(
            limits[..3],
            [20, 10, 5],
            "a quarter, then halving while latency falls"
        );
        assert_eq!(learner.no_load(), Some(Duration::from_millis(10)));
        assert_eq!(
            limits[3..],
            [10, 20],
            "from the level before the last halving, doubling while the latency allows"
        );
    }

    #[test]
    fn the_limit_settles_near_the_servers_and_its_latency_within_twice_the_service_time() {
        let config = AdaptiveInflight::new();
        let latency = |l: isize| 10 * MS * (l.max(10) as u64) / 10;
        let mut learner = Learner::start(200, 0);
        let mut now = 0;
        for _ in 0..200 {
            let l = learner.limit(&config, 200);
            round(&mut learner, &config, 200, &mut now, l, latency(l), true);
        }
        let settled: Vec<isize> = (0..40)
            .map(|_| {
                let l = learner.limit(&config, 200);
                round(&mut learner, &config, 200, &mut now, l, latency(l), true);
                l
            })
            .collect();
        let mean = settled.iter().sum::<isize>() as f64 / settled.len() as f64;
        assert!((10.0..=20.0).contains(&mean), "{settled:?}");
    }

    #[test]
    fn latency_over_the_tolerance_shrinks_the_limit_at_most_by_half_a_round() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(64, 0);
        learner.no_load = (10 * MS) as f64;
        let mut now = 0;
        round(&mut learner, &config, 64, &mut now, 64, 100 * MS, true);
        assert_eq!(
            learner.limit,
            64.0 * 0.5 + HEADROOM * 8.0,
            "halved, plus its headroom"
        );
        let mut learner = Learner::start(64, now);
        learner.no_load = (10 * MS) as f64;
        round(&mut learner, &config, 64, &mut now, 64, 10 * MS, true);
        assert_eq!(
            learner.limit(&config, 64),
            64,
            "within the tolerance: at the ceiling"
        );
    }

    #[test]
    fn a_limit_grows_only_in_rounds_that_used_half_of_it() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 0);
        learner.no_load = (10 * MS) as f64;
        learner.limit = 40.0;
        let mut now = 0;
        round(&mut learner, &config, 100, &mut now, 19, 10 * MS, false);
        assert_eq!(learner.limit, 40.0, "19 in flight of 40: not grown");
        round(&mut learner, &config, 100, &mut now, 20, 10 * MS, false);
        assert!(learner.limit > 40.0, "20 of 40: grown");
    }

    #[test]
    fn an_overload_backs_the_limit_off() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 0);
        learner.no_load = (10 * MS) as f64;
        let mut now = 0;
        for n in 0..100 {
            learner.admitted(now, n, 1);
        }
        now += 10 * MS;
        let ceiling = ceiling_of(100);
        learner.completed(&config, &ceiling, now, 100, 1, Outcome::Overload, true);
        for n in (0..99).rev() {
            learner.completed(&config, &ceiling, now, n + 1, 1, Outcome::Success, true);
        }
        assert_eq!(learner.limit, 90.0);
    }

    #[test]
    fn an_origin_that_slows_down_is_probed_and_its_new_no_load_learnt() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 0);
        learner.no_load = (10 * MS) as f64;
        learner.limit = 15.0;
        let mut now = 0;
        // 10 servers, now of 100 ms.
        let latency = |l: isize| 100 * MS * (l.max(10) as u64) / 10;
        let mut limits = Vec::new();
        for _ in 0..40 {
            let l = learner.limit(&config, 100);
            round(&mut learner, &config, 100, &mut now, l, latency(l), true);
            limits.push(l);
        }
        let no_load = learner.no_load().unwrap().as_secs_f64();
        assert!((no_load - 0.1).abs() < 1e-3, "{no_load}");
        let last = &limits[limits.len() - 16..];
        assert!((10..=20).contains(last.iter().max().unwrap()), "{limits:?}");
    }

    /// One server of 10 ms: every request past the first queues, and the floor of 3 hides the
    /// no-load latency (3 in flight take 30 ms): the limit stays near the floor, never under.
    #[test]
    fn the_limit_stays_between_the_floor_and_the_ceiling() {
        let config = AdaptiveInflight::new().floor(3);
        let latency = |l: isize| 10 * MS * l as u64;
        let mut learner = Learner::start(40, 0);
        let mut now = 0;
        for _ in 0..40 {
            let l = learner.limit(&config, 40);
            round(&mut learner, &config, 40, &mut now, l, latency(l), true);
            assert!((3..=40).contains(&learner.limit(&config, 40)));
        }
        assert!((3..=6).contains(&learner.limit(&config, 40)), "{learner:?}");
        assert_eq!(
            learner.limit(&config, 2),
            2,
            "a lower max_inflight holds the key to it"
        );
    }
}
