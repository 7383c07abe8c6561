//! One key's learner: its rounds of admissions and the law's steps at each (the module above
//! gives the law; this is its arithmetic, on values, under the exact stage's set lock).

use super::completion::{Completed, Completion, Outcome};
use super::config::AdaptiveInflight;
use crate::limiter::limits::InflightThreshold;

/// Units that must complete before a round ends, at the least: the mean of fewer is too noisy
/// to compare within the default tolerance for the family's noisier origins (service times
/// spread ±50%: the mean of 16 is within ±7% in two rounds of three).
const MIN_ROUND: u32 = 16;
/// The fewest requests a round of a key held under `MIN_ROUND` in flight takes.
const MIN_SMALL_ROUND: u32 = 4;
/// A probe round must be at least this much faster than the round before for the halving to
/// count as having removed queueing (and to halve again). Halving a concurrency above the
/// origin's servers halves its latency (0.5); halving it below them leaves the latency as it
/// was (1.0); 0.75 stands between, clear of a round's noise.
const FALL: f64 = 0.75;
/// The gradient's clamp: a round shrinks the limit by half at most.
const MIN_GRADIENT: f64 = 0.5;
/// The queue the gradient leaves room for, in square roots of the limit. The family's origins
/// serve from 1 to 200 requests at once: the limit settles near `tolerance · servers +
/// HEADROOM·√limit`, and a queue of `HEADROOM·√limit` is what keeps every server busy between
/// a completion and the next arrival (goodput) while the 99th percentile stays within twice
/// the service time's own for every server count from 2 up (for 2 servers, 2·1.1 + ¾·1.9 =
/// 3.6 in flight, a queue of 1.6 requests behind two).
const HEADROOM: f64 = 0.75;
/// Latencies without a completion of a round's request after which a learnt limit that
/// refuses a request is taken as stalled, and the least time that takes. The latency is the
/// longer of the no-load one and the last judged round's, timeouts included: an origin
/// slowed 20× and held at the floor completes a request every ten service times, one hung
/// behind a timeout of 5 to 50 of them a timeout after each admission (the family's slowest
/// cases), and a stall counted in no-load latencies would take either wait for a stall. (The
/// last round's mean gap between completions, its latency over its concurrency, was tried
/// instead: it took the noise of rounds of a few requests for stalls on the family's slowed
/// origins held near the floor, and restarted them at the ceiling.)
const STALL: f64 = 8.0;
const MIN_STALL_NANOS: f64 = 1e9;
/// How long a limit that overloads cut refuses its key with nothing admitted before it lets one
/// request through (a canary, as a circuit breaker's half-open state does). A hang ends at a
/// time no learner knows, and it hears of the end only from a request admitted after it, while
/// the requests admitted during the hang hold the slots the cut left until they time out (the
/// family's timeouts are 5 to 50 service times, up to 50 s). A canary a second bounds how late
/// the recovery is heard to a second and the canary's own latency (the family's origins answer
/// in 1 ms to 1.5 s); the price is a canary in flight for each second of the timeout while the
/// hang lasts, which stays under a tenth of the ceiling for the family's ceilings of a few
/// times the servers unless the timeout is long and the origin small.
const CANARY_NANOS: u64 = 1_000_000_000;
/// What a probe divides the limit by first when a key's first round was already at its limit:
/// its origin fell behind before the learner knew its latency, and the queue may be many
/// times its servers (a halving a round would take as many rounds).
const FIRST_PROBE: f64 = 4.0;
/// Rounds at the lowest gradient in a row after which the learner probes.
const LOW_ROUNDS: u32 = 2;
/// Rounds over the tolerance in a row before the gradient cuts. One round's mean over the
/// tolerance happens to a healthy origin by noise alone (one round in a few for the family's
/// noisiest members); two in a row, judged by the lower of the two, is rare enough that no
/// healthy member was refused for it, and costs a slowing origin one round.
const OVER_ROUNDS: u32 = 2;
/// The slope test: a round whose mean concurrency fell to this share of the round before's or
/// less, and whose latency fell by under a third of that (queueing would have taken the
/// latency down with the concurrency), measured the origin's own latency, not a queue's.
const SLOPE_FALL: f64 = 0.75;
/// A round whose mean concurrency is this many times the round before's, and more than twice
/// its square root above it (the spread of a count of Poisson arrivals: a healthy origin's
/// concurrency moves that much round to round), is taken as an origin falling behind (its
/// queue growing) when its latency is over the tolerance too.
const GROWING: f64 = 1.25;

/// Refusals per admission in a round at which its key is taken as overloaded (sent more than
/// its origin serves), not as cut too far: the family's faulty origins are sent at least 1.3×
/// what they serve, so a limit at their capacity refuses 0.3 per admission or more; a healthy
/// origin cut by a round's noise is refused only at the peaks of its arrivals, far fewer.
const OVERLOADED: f64 = 0.25;

/// Where a learner is in its cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Rounds judged by the gradient; `rounds` since the last probe, `low` in a row at the
    /// lowest gradient, `over` in a row over the tolerance.
    Track { rounds: u32, low: u32, over: u32 },
    /// Halving to find the no-load latency: `before`, the mean of the probe's round before
    /// this one (none for its first: the round before the probe may have been on its way up
    /// or down, and is no measure of one concurrency); `saved`, the limit before the probe;
    /// `steps`, halvings so far.
    Probe {
        before: Option<f64>,
        saved: f64,
        steps: u32,
    },
    /// After a probe that found queueing below where the limit was: doubling each round
    /// while the latency stays within the tolerance (TCP's slow start), then by the gradient.
    Grow,
}

const TRACK: Phase = Phase::Track {
    rounds: 0,
    low: 0,
    over: 0,
};

/// A round's mean latency and mean concurrency, for the next round's slope test.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Round {
    mean: f64,
    concurrency: f64,
}

/// One round's requests: those admitted from `began` until it closed (`ended`), and what they
/// showed. A round's latency is that of its own admissions, so it goes with the concurrency
/// they were admitted at (a request's wait depends on the queue it joined): a cut is judged
/// by the requests admitted after it, not by those that queued before it and complete after.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cohort {
    began: u64,
    /// When it stopped taking admissions (0 while open).
    ended: u64,
    /// Requests admitted in it; of them completed, and the sum of their latencies and of
    /// their squares (nanoseconds).
    admitted: u32,
    completed: u32,
    sum: f64,
    sum_sq: f64,
    /// Units of it that completed, and of them reported as overloads.
    done: u32,
    overloads: u32,
    /// Of its completed requests, those reported as overloads, and the sum of their
    /// latencies and of their squares: a round's latency is its successes', and its
    /// overloads' tells timeouts from quick 5xx.
    overloaded: u32,
    overload_sum: f64,
    overload_sum_sq: f64,
    /// Units in flight (all the key's tracked ones) × nanoseconds while it was open: its mean
    /// concurrency.
    area: f64,
    /// The most units in flight while it was open, and the requests refused for the limit
    /// meanwhile.
    peak: isize,
    refusals: u32,
}

impl Cohort {
    fn new(now: u64, inflight: isize) -> Self {
        Cohort {
            began: now,
            ended: 0,
            admitted: 0,
            completed: 0,
            sum: 0.0,
            sum_sq: 0.0,
            done: 0,
            overloads: 0,
            overloaded: 0,
            overload_sum: 0.0,
            overload_sum_sq: 0.0,
            area: 0.0,
            peak: inflight,
            refusals: 0,
        }
    }

    /// Whether enough of its requests completed to judge it: `JUDGED` of them (the rest may
    /// never end: streams, hung requests a caller never gives up on).
    fn judgeable(&self) -> bool {
        f64::from(self.completed) >= (JUDGED * f64::from(self.admitted)).ceil()
    }
}

/// The share of a round's requests that must have completed for it to be judged: most, not
/// all (a request that never ends would hold every round up); the slowest tenth left out
/// lowers every round's mean alike, the no-load latency's too.
const JUDGED: f64 = 0.9;

/// One key's learnt in-flight limit, and the rounds it is measuring.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learner {
    limit: f64,
    /// Mean latency when nothing queues (nanoseconds); 0 until a round measured it.
    no_load: f64,
    phase: Phase,
    /// The round taking admissions: none while a probe waits for in flight to drain to its
    /// limit (what was admitted above it queued, and would inflate the probe's latency).
    open: Option<Cohort>,
    /// The round before, closed to admissions and waiting for its requests to complete.
    closing: Option<Cohort>,
    /// When in flight last changed (nanoseconds on the limiter's clock).
    last: u64,
    /// The last judged round's figures, if it measured the origin (not a round of
    /// overloads).
    previous: Option<Round>,
    /// When a request it measures last completed, or it started (nanoseconds).
    completed_at: u64,
    /// The last judged round's mean latency, its timeouts' if timeouts cut it (nanoseconds;
    /// 0 before the first): how long its requests take now, for the stall.
    latency: f64,
    /// The mean latency of the timeouts of the last round that timeouts cut (nanoseconds; 0
    /// if none): a success in under half of it says a key that hung from its first round
    /// answers again.
    timeouts: f64,
    /// Whether it has probed since it started.
    probed: bool,
    /// Whether it judges its key: false at rest, after a quiet round (the key judged by
    /// `max_inflight` again, its no-load latency kept for when it learns again).
    active: bool,
    /// The limit before a run of rounds with overloads cut it, given back by the first round
    /// without one at the latency known, or (after timeouts) by the first request answered at
    /// that latency that was admitted after the last one that timed out.
    before_overloads: Option<f64>,
    /// When the last request reported as an overload was admitted (nanoseconds; 0 for none).
    overloaded_admission: u64,
    /// When it last admitted a request (nanoseconds).
    admitted_last: u64,
    /// A concurrency at which the key's origin was seen queueing (a probe's halving from it
    /// took the latency down, or a round grown past a probe's level was over the tolerance
    /// beyond its noise), while no round since found that much concurrency free of queueing:
    /// growth stops short of it (a slow start's ceiling, TCP's `ssthresh`). Not from a
    /// gradient's cut: a healthy origin's round is over the tolerance by noise now and then,
    /// and a cut by noise must grow back at once.
    queued_at: Option<f64>,
    /// When it last saw a request of its key (nanoseconds): it is forgotten `forget_after`
    /// later.
    seen_at: u64,
}

impl Learner {
    /// A learner for a key whose requests in flight reached its learning threshold at `now`
    /// (`inflight` of them counted exactly), under a ceiling of `ceiling`: judged by the ceiling until its latency says otherwise
    /// (a key that merely got busy is never held for it).
    pub(crate) fn start(ceiling: isize, inflight: isize, now: u64) -> Self {
        Learner {
            limit: ceiling.max(1) as f64,
            no_load: 0.0,
            phase: TRACK,
            open: Some(Cohort::new(now, inflight)),
            closing: None,
            last: now,
            previous: None,
            completed_at: now,
            latency: 0.0,
            timeouts: 0.0,
            probed: false,
            active: true,
            before_overloads: None,
            overloaded_admission: 0,
            admitted_last: now,
            queued_at: None,
            seen_at: now,
        }
    }

    /// Whether it judges its key's requests (it is not at rest).
    pub(crate) fn is_active(&self) -> bool {
        self.active
    }

    /// Puts it at rest: its key is judged by `max_inflight` again, and reads no clock.
    pub(crate) fn rest(&mut self) {
        self.active = false;
    }

    /// Wakes it at rest for a key whose requests in flight reached its learning threshold
    /// again at `now`: rounds start afresh at the ceiling, with the no-load latency it knew
    /// unless that is older than `forget_after` (then it starts as a new learner).
    pub(crate) fn wake(
        &mut self,
        ceiling: isize,
        inflight: isize,
        now: u64,
        config: &AdaptiveInflight,
    ) {
        let no_load = if self.forgotten(config, now) {
            0.0
        } else {
            self.no_load
        };
        *self = Learner {
            no_load,
            ..Learner::start(ceiling, inflight, now)
        };
    }

    /// Whether what it learnt is to be forgotten at `now`: no request of its key for
    /// `forget_after`.
    pub(crate) fn forgotten(&self, config: &AdaptiveInflight, now: u64) -> bool {
        now.saturating_sub(self.seen_at) >= config.forget_after_nanos()
    }

    /// The limit to judge a request that would bring the key's in flight to `wanted` by, at
    /// `now`: the learnt one, unless `wanted` is over it and under the ceiling (a limit at the
    /// ceiling holds nothing the ceiling would not) and either
    /// - overloads cut it and nothing was admitted for `CANARY_NANOS`: the request is a
    ///   canary, and the limit is let up to it (the rounds go on, waiting for its answer);
    /// - or no request of its rounds has completed for `STALL` latencies (at least a
    ///   second): the requests in flight do not end, or were admitted before the rounds
    ///   (streams, requests from before it started, which it does not see end), no round can
    ///   move the limit, and it starts afresh at the ceiling: a learnt limit never holds a
    ///   key for good.
    pub(crate) fn unstalled(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        now: u64,
        wanted: isize,
    ) -> isize {
        self.seen_at = self.seen_at.max(now);
        let limit = self.limit(config, ceiling.limit);
        if wanted <= limit || limit >= ceiling.limit {
            return limit;
        }
        if self.before_overloads.is_some() && now.saturating_sub(self.admitted_last) >= CANARY_NANOS
        {
            // A canary: the limit is let up to this request, and the rounds go on (its
            // answer, or its timeout, is what they are waiting to hear).
            self.limit = wanted.min(ceiling.limit) as f64;
            return self.limit(config, ceiling.limit);
        }
        let stall = (STALL * self.no_load.max(self.latency)).max(MIN_STALL_NANOS);
        if (now.saturating_sub(self.completed_at) as f64) < stall {
            return limit;
        }
        // Its rounds cannot end, and the limit they set says nothing: it starts afresh at the
        // ceiling (its no-load latency kept), and the next rounds judge the key again.
        *self = Learner {
            no_load: self.no_load,
            ..Learner::start(ceiling.limit, wanted, now)
        };
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

    /// Adds the area under `inflight` (the key's tracked units until now) up to `now` to the
    /// open round.
    fn advance(&mut self, now: u64, inflight: isize) {
        if let Some(open) = self.open.as_mut() {
            let elapsed = now.saturating_sub(self.last) as f64;
            open.area += inflight.max(0) as f64 * elapsed;
        }
        self.last = self.last.max(now);
    }

    /// `units` admitted at `now`, with `inflight` units tracked before them.
    pub(crate) fn admitted(&mut self, now: u64, inflight: isize, units: u32) {
        self.advance(now, inflight);
        self.seen_at = self.seen_at.max(now);
        self.admitted_last = self.admitted_last.max(now);
        // Nothing of the rounds was waiting to complete (the key was idle between bursts):
        // the stall is counted from this request on, not from the last completion.
        let waiting = |c: &Cohort| c.completed < c.admitted;
        if !self.open.as_ref().is_some_and(waiting) && !self.closing.as_ref().is_some_and(waiting) {
            self.completed_at = self.completed_at.max(now);
        }
        if let Some(open) = self.open.as_mut() {
            open.admitted = open.admitted.saturating_add(1);
            open.peak = open.peak.max(inflight.saturating_add(units as isize));
        }
    }

    /// A request refused for the learnt limit.
    pub(crate) fn refused(&mut self) {
        if let Some(open) = self.open.as_mut() {
            open.refusals = open.refusals.saturating_add(1);
        }
    }

    /// `completion` at `now`, with `inflight` units tracked before its units were given back,
    /// under `ceiling` (the key's in-flight limit and promotion threshold). Judges a round
    /// when enough of it completed, and says how much room the key gained and whether the
    /// learner is done: a whole round in which the key's in flight stayed below half its
    /// promotion threshold (the level at which a key cools) and half its learnt limit, with
    /// no refusal for the learnt limit and no overload: its callers no longer ask for more
    /// than it serves (the key is judged by `max_inflight` again).
    pub(crate) fn completed(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        now: u64,
        inflight: isize,
        completion: Completion,
    ) -> Completed {
        let before = self.limit(config, ceiling.limit);
        let units = completion.cost;
        let after = inflight.saturating_sub(units as isize);
        self.advance(now, inflight);
        self.seen_at = self.seen_at.max(now);
        let unchanged = Completed {
            done: false,
            rise: 0,
        };
        if completion.measured && completion.admitted_at != 0 {
            let at = completion.admitted_at;
            let latency = now.saturating_sub(at) as f64;
            if completion.outcome == Outcome::Overload {
                self.overloaded_admission = self.overloaded_admission.max(at);
                if self.timed_out() {
                    // While timeouts hold the limit, a slot a timeout frees is not taken again
                    // (a canary raised the limit for a request that hung too): what is let in
                    // is a canary a second.
                    let floor = f64::from(config.floor).min(ceiling.limit.max(1) as f64);
                    self.limit = (self.limit - f64::from(units)).max(floor);
                }
            } else if at > self.overloaded_admission && self.answers_after_timeouts(config, latency)
            {
                return self.answered(config, ceiling, now, after, before);
            }
            let cohort = match (self.open.as_mut(), self.closing.as_mut()) {
                (Some(open), _) if at >= open.began => Some(open),
                (_, Some(closing)) if at >= closing.began && at < closing.ended => Some(closing),
                _ => None,
            };
            if let Some(cohort) = cohort {
                cohort.completed = cohort.completed.saturating_add(1);
                cohort.sum += latency;
                cohort.sum_sq += latency * latency;
                cohort.done = cohort.done.saturating_add(units);
                if completion.outcome == Outcome::Overload {
                    cohort.overloads = cohort.overloads.saturating_add(units);
                    cohort.overloaded = cohort.overloaded.saturating_add(1);
                    cohort.overload_sum += latency;
                    cohort.overload_sum_sq += latency * latency;
                }
                // Only a request of a round says the rounds are moving: one admitted before
                // them (a stream, a request from before a probe) may end at any time.
                self.completed_at = self.completed_at.max(now);
            }
        }
        match self.open {
            // A probe waits for in flight to drain to its limit before its round opens.
            None if after <= before => self.open = Some(Cohort::new(now, after)),
            None => {}
            Some(open) => {
                // A round closes to admissions once it took `round_size` requests and spans a
                // latency: one of its own requests completed, and as long as the round before's
                // mean has passed (its mean concurrency over less than a latency is mostly its
                // arrivals').
                let spans = self.previous.map_or(0.0, |p| p.mean);
                let due = open.admitted >= self.round_size()
                    && open.completed > 0
                    && (now.saturating_sub(open.began) as f64) >= spans;
                if due {
                    // The round before is judged by then with what completed of it, if that
                    // is a small round's worth, or dropped: its other requests may never end
                    // (streams, requests whose caller never gives up), and would hold every
                    // round after it.
                    let late = self
                        .closing
                        .take()
                        .filter(|c| c.completed >= MIN_SMALL_ROUND && !c.judgeable());
                    self.closing = Some(Cohort { ended: now, ..open });
                    self.open = Some(Cohort::new(now, after));
                    if let Some(late) = late {
                        return self.conclude(config, ceiling, late, before);
                    }
                }
            }
        }
        let Some(closing) = self.closing.filter(Cohort::judgeable) else {
            return unchanged;
        };
        self.closing = None;
        self.conclude(config, ceiling, closing, before)
    }

    /// Whether timeouts hold its limit: rounds of overloads slower than the tolerance allows
    /// (the only ones that cut once the origin's latency is known: see `judge`) took room the
    /// key has not had back.
    fn timed_out(&self) -> bool {
        self.before_overloads.is_some()
    }

    /// Whether a request that succeeded in `latency` says that the origin answers again after
    /// timeouts cut its limit: it answered at the latency known, or (none known, the key hung
    /// from its first round) in under half the timeouts' latency.
    fn answers_after_timeouts(&self, config: &AdaptiveInflight, latency: f64) -> bool {
        self.timed_out()
            && if self.no_load > 0.0 {
                latency <= config.tolerance * self.no_load
            } else {
                latency < self.timeouts / 2.0
            }
    }

    /// The origin answered a request admitted after the last one that timed out: the hang is
    /// over, and the key gets back the room the overloads took. Rounds start afresh: those
    /// open hold requests admitted during the hang, whose timeouts are no news of the origin
    /// now. `after` units are in flight; the limit was `before`.
    fn answered(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        now: u64,
        after: isize,
        before: isize,
    ) -> Completed {
        if let Some(room) = self.before_overloads.take() {
            self.limit = self.limit.max(room).min(ceiling.limit.max(1) as f64);
        }
        self.phase = TRACK;
        self.open = Some(Cohort::new(now, after));
        self.closing = None;
        self.previous = None;
        self.completed_at = now;
        Completed {
            done: false,
            rise: u32::try_from(self.limit(config, ceiling.limit).saturating_sub(before))
                .unwrap_or(0),
        }
    }

    /// Judges the round `closing`, the key's limit having been `before`: how much room the
    /// key gained, and whether the learner is done (see [`completed`](Self::completed)).
    fn conclude(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        closing: Cohort,
        before: isize,
    ) -> Completed {
        // Quiet: under half its threshold, and under half its learnt limit too (a limit that
        // holds the key low keeps its peak low as well; a waiting caller is no refusal).
        let quiet = closing.peak.saturating_mul(2) < ceiling.promote_at
            && closing.peak.saturating_mul(2) < self.limit as isize
            && closing.overloads == 0
            && closing.refusals == 0;
        self.judge(config, ceiling.limit, &closing);
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

    /// The limit after a round that used `used` at most found no queue and wanted more: twice
    /// as much
    /// (a slow start), or, below the concurrency that last queued, half way to it (at least
    /// one more). A limit that doubles past the origin's servers queues a service time's worth
    /// and takes two rounds over the tolerance to come back: an origin held near its servers
    /// would swing between half and twice them, and every swing up is its 99th percentile.
    /// Halving the distance finds the edge in as many rounds as doubling did, from below it. A
    /// round free of queueing at or above that concurrency says it no longer queues there (the
    /// origin recovered, or got faster): it is forgotten, and the limit doubles again.
    fn roomier(&mut self, used: f64) -> f64 {
        match self.queued_at {
            Some(queued) if used < queued => ((used + queued) / 2.0).max(used + 1.0),
            _ => {
                self.queued_at = None;
                2.0 * used
            }
        }
    }

    /// Requests a round takes: `MIN_ROUND`, or the limit if lower, at least `MIN_SMALL_ROUND`.
    /// A key held to a few requests in flight by a slow origin would otherwise take many
    /// latencies to end a round, and as many to grow back when the origin recovers; its
    /// rounds' noise is what the standard error in the judgement is for.
    fn round_size(&self) -> u32 {
        (self.limit as u32).clamp(MIN_SMALL_ROUND, MIN_ROUND)
    }

    /// Divides the limit by `by` for a probe (not under `floor`), whose last round had mean
    /// `mean` (none for its first step); the next round opens once in flight has drained to
    /// it.
    fn probe(&mut self, floor: f64, mean: Option<f64>, saved: f64, steps: u32, by: f64) {
        self.phase = Phase::Probe {
            before: mean,
            saved,
            steps,
        };
        self.limit = (self.limit / by).max(floor);
        self.open = None;
        self.previous = None;
    }

    /// Judges the round `cohort`.
    fn judge(&mut self, config: &AdaptiveInflight, ceiling: isize, cohort: &Cohort) {
        // The round's latency is its successes' (an overload's latency is a timeout's, or a
        // quick 5xx's: neither is the origin serving).
        let answered = cohort.completed.saturating_sub(cohort.overloaded);
        let count = f64::from(answered.max(1));
        let mean = (cohort.sum - cohort.overload_sum).max(0.0) / count;
        // The standard error of the round's mean: a noisy origin's round is judged over the
        // tolerance only by what its noise cannot explain.
        let sum_sq = (cohort.sum_sq - cohort.overload_sum_sq).max(0.0);
        let error = ((sum_sq / count - mean * mean).max(0.0) / count).sqrt();
        // Overloads that took longer than the tolerance allows over the origin's latency
        // (its no-load one, or this round's successes' before that is known; with neither,
        // any) are timeouts or an origin failing under load: they cut. Quick ones (a broken
        // route, a client's bad input, an attacker's) say nothing of load, and the round is
        // judged by its successes alone.
        let overload_mean = cohort.overload_sum / f64::from(cohort.overloaded.max(1));
        let reference = if self.no_load > 0.0 {
            self.no_load
        } else if answered > 0 {
            mean
        } else {
            0.0
        };
        let slow_overloads = cohort.overloaded > 0
            && (reference == 0.0 || overload_mean > config.tolerance * reference);
        let elapsed = cohort.ended.saturating_sub(cohort.began) as f64;
        let round = Round {
            mean,
            concurrency: if elapsed > 0.0 {
                cohort.area / elapsed
            } else {
                0.0
            },
        };
        let previous = self.previous.take();
        // A key's own `max_inflight` can be under the configured floor: it holds.
        let top = ceiling.max(1) as f64;
        let floor = f64::from(config.floor).min(top);
        let overloads = f64::from(cohort.overloads) / f64::from(cohort.done.max(1));
        let (grew_under_load, refused) = (
            cohort.peak.saturating_mul(2) >= self.limit as isize,
            cohort.refusals > 0,
        );
        // What the round used: a cut starts from it, not from a limit the key never reached.
        let used = (cohort.peak.max(1) as f64).min(self.limit);
        let timed = answered > 0 && mean > 0.0 && mean.is_finite();
        let took = if slow_overloads {
            self.timeouts = overload_mean;
            overload_mean
        } else {
            mean
        };
        if took > 0.0 && took.is_finite() {
            self.latency = took;
        }
        match self.phase {
            _ if slow_overloads => {
                // Half the share of overloads: a timeout now and then costs a hair, a hang
                // (every request timing out) halves the limit a round, from at most twice what
                // the round used.
                self.before_overloads.get_or_insert(self.limit);
                let from = self.limit.min(2.0 * used);
                self.limit = (from * (1.0 - overloads / 2.0)).max(floor);
                if let Phase::Probe { saved, .. } = self.phase {
                    self.limit = self.limit.min(saved);
                }
                // No more halving nor doubling on an origin that says it is overloaded, and
                // no latency of a round of timeouts is the origin's own.
                self.phase = TRACK;
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
                if known && steps <= 1 {
                    // At half the limit the latency is the one known: the origin has not
                    // changed, and nothing queued; back where it was.
                    self.limit = saved;
                    self.phase = TRACK;
                    self.previous = Some(round);
                    return;
                }
                // Halving removed queueing while the latency fell by a quarter or more.
                let falling = before.map_or(true, |before| mean < FALL * before);
                if falling && self.limit > floor {
                    if before.is_some() {
                        // The round before ran at twice this limit, and queued.
                        self.queued_at = Some(2.0 * self.limit);
                    }
                    self.probe(floor, Some(mean), saved, steps + 1, 2.0);
                    return;
                }
                // It stopped falling (or the floor is reached): what is left is the origin's
                // own latency. Grow fast from the level before the last halving while the
                // latency allows.
                self.no_load = mean;
                self.limit = (self.limit * 2.0).min(saved.max(floor));
                self.phase = Phase::Grow;
                self.previous = Some(round);
            }
            Phase::Grow => {
                if mean <= config.tolerance * self.no_load && grew_under_load {
                    self.limit = self.limit.max(2.0 * used).min(top);
                } else {
                    if mean - 2.0 * error > config.tolerance * self.no_load {
                        // Over the tolerance beyond the round's noise, right after a probe
                        // measured the no-load latency: it queued at what it used.
                        self.queued_at = Some(used);
                    }
                    self.phase = TRACK;
                }
                self.previous = Some(round);
            }
            Phase::Track { rounds, low, over } => {
                self.previous = Some(round);
                if let Some(before) = self.before_overloads {
                    if self.no_load == 0.0 {
                        // Overloads from its first round on (a hang): the first round without
                        // one is the origin answering again, at its own latency.
                        self.no_load = mean;
                    }
                    if mean - 2.0 * error <= config.tolerance * self.no_load {
                        // A round without an overload, at the latency known within its noise:
                        // the origin is back (a hang ended), and gets the room the overloads
                        // took. (A round of a few requests can be over the tolerance by noise
                        // alone; the room waits for the next clean round, not for good.)
                        self.before_overloads = None;
                        self.limit = self.limit.max(before).min(top);
                        return;
                    }
                }
                if self.no_load == 0.0 && refused {
                    // The first round, and the key already at its limit (a healthy key is
                    // under its ceiling): its origin fell behind before the learner knew its
                    // latency, and the round's latency is a queue's. Probe from what it used,
                    // by a quarter first (a queue that deep takes several halvings to see
                    // through).
                    self.limit = used;
                    self.probed = true;
                    self.probe(floor, None, used, 1, FIRST_PROBE);
                    return;
                }
                if self.no_load == 0.0 {
                    // The first round: what the key's latency is at the concurrency it reached
                    // its learning threshold with.
                    self.no_load = mean;
                    return;
                }
                if (mean + 2.0 * error) * config.tolerance < self.no_load {
                    // Faster by more than the tolerance and the round's noise: the origin got
                    // faster. (Not the least of the rounds' means, which noise alone keeps
                    // lowering: a round of four requests is often a tenth under its mean.)
                    self.no_load = mean;
                }
                if let Some(p) = previous.filter(|p| p.concurrency > 0.0) {
                    // The slope test: the concurrency fell by a quarter or more, and the
                    // latency by under a third of that: it is not a queue's (which shrinks
                    // with the concurrency) but the origin's own.
                    let fell = 1.0 - round.concurrency / p.concurrency;
                    if round.concurrency <= SLOPE_FALL * p.concurrency
                        && mean >= p.mean * (1.0 - fell / 3.0)
                        && mean > self.no_load
                    {
                        self.no_load = mean;
                    }
                }
                let ratio = mean / self.no_load;
                // Over the tolerance by more than the round's noise explains, and overloaded:
                // its requests were refused, or its concurrency grew by a quarter since the
                // round before. A healthy origin with few servers queues now and then (two
                // servers at half their capacity answer a third slower on average), and its
                // queue does not grow: that is no reason to refuse it.
                let growing = previous.is_some_and(|p| {
                    round.concurrency >= GROWING * p.concurrency
                        && round.concurrency - p.concurrency > 2.0 * p.concurrency.sqrt()
                });
                let over = if mean - 2.0 * error > config.tolerance * self.no_load
                    && (refused || growing)
                {
                    over + 1
                } else {
                    0
                };
                let rounds = rounds + 1;
                let mut gradient = 1.0;
                // Each round moves the limit from what the round itself used: the round was
                // admitted under a limit set a round or two before (its requests complete a
                // latency after), so a step taken from the limit now would compound.
                if ratio <= config.tolerance {
                    if refused && ratio * ratio <= config.tolerance {
                        // Nothing queues (within half the tolerance, in ratio) and requests
                        // are refused: the origin recovered, or a cut went too far; grow as
                        // a slow start does; short of where it last queued while refused
                        // as an overloaded origin is (see `roomier`).
                        let overloaded = f64::from(cohort.refusals)
                            >= OVERLOADED * f64::from(cohort.admitted.max(1));
                        self.limit = self.limit.max(if overloaded {
                            self.roomier(used)
                        } else {
                            2.0 * used
                        });
                    } else if grew_under_load {
                        self.limit = self.limit.max(used + HEADROOM * used.sqrt());
                    }
                } else if over >= OVER_ROUNDS {
                    // Judged by the lower of the rounds over the tolerance, from the round's
                    // mean concurrency: with `c` servers its latency is `no_load · C / c`, and
                    // `tolerance · C / ratio` is `tolerance · c`.
                    let judged = previous.map_or(mean, |p| p.mean.min(mean));
                    gradient = (config.tolerance * self.no_load / judged).clamp(MIN_GRADIENT, 1.0);
                    let from = round.concurrency.clamp(1.0, used);
                    self.limit = from * gradient + HEADROOM * from.sqrt();
                }
                self.limit = self.limit.clamp(floor, top);
                let low = if gradient <= MIN_GRADIENT { low + 1 } else { 0 };
                self.phase = Phase::Track { rounds, low, over };
                // A probe when the latency is over the tolerance while the limit binds: the
                // first time at once (the no-load latency was measured when the key started
                // learning, perhaps with a queue already), then every `probe_every` rounds.
                let due = rounds >= config.probe_every || !self.probed;
                if low >= LOW_ROUNDS || (refused && over > 0 && due) {
                    self.probed = true;
                    let saved = self.limit;
                    self.probe(floor, None, saved, 1, 2.0);
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
    /// When the tests' learners start: requests admitted before it are not theirs.
    const START: u64 = 10_000 * MS;

    /// A ceiling whose promotion threshold is 0: the tests' learners never rest.
    fn ceiling_of(limit: isize) -> InflightThreshold {
        InflightThreshold {
            limit,
            promote_at: 0,
        }
    }

    /// A request admitted at `admitted_at`, completing now.
    fn completion(admitted_at: u64, outcome: Outcome) -> Completion {
        Completion {
            cost: 1,
            outcome,
            measured: true,
            admitted_at,
        }
    }

    /// An origin in a steady state under the learner: `inflight` requests in flight, each
    /// taking `latency`; one completes and one is admitted every `latency / inflight`.
    struct Steady {
        now: u64,
        /// Admission times of the requests in flight, oldest first.
        admitted: std::collections::VecDeque<u64>,
    }

    impl Steady {
        /// Its clock starts at 10 s, where the tests' learners start.
        fn new() -> Self {
            Steady {
                now: START,
                admitted: Default::default(),
            }
        }

        /// Drives `learner` until its limit or phase changes (at most `max` completions), at
        /// `inflight` in flight of `latency` each; `refused`: requests are refused for the
        /// limit meanwhile; `outcome`: what each completion says. Returns the completions.
        #[allow(clippy::too_many_arguments)]
        fn run(
            &mut self,
            learner: &mut Learner,
            config: &AdaptiveInflight,
            ceiling: isize,
            inflight: usize,
            latency: u64,
            refused: bool,
            outcome: Outcome,
            max: usize,
        ) -> usize {
            let before = (learner.phase, learner.limit, learner.no_load);
            let step = latency / inflight as u64;
            // Fill up to `inflight`, admitted over the latency before now.
            while self.admitted.len() < inflight {
                let at = self.now.saturating_sub(step * self.admitted.len() as u64);
                self.admitted.push_front(at);
            }
            while self.admitted.len() > inflight {
                self.admitted.pop_front();
            }
            for n in 1..=max {
                self.now += step;
                let admitted_at = self.admitted.pop_front().expect("in flight");
                let tracked = self.admitted.len() as isize + 1;
                let c = completion(admitted_at.max(self.now.saturating_sub(latency)), outcome);
                learner.completed(config, &ceiling_of(ceiling), self.now, tracked, c);
                if refused {
                    learner.refused();
                }
                learner.admitted(self.now, tracked - 1, 1);
                self.admitted.push_back(self.now);
                if (learner.phase, learner.limit, learner.no_load) != before {
                    return n;
                }
            }
            max
        }
    }

    /// A learner under `ceiling`, `inflight` in flight when it started, that knows a no-load
    /// latency of 10 ms.
    fn knowing_10ms(ceiling: isize, inflight: isize) -> Learner {
        let mut learner = Learner::start(ceiling, inflight, START);
        learner.no_load = (10 * MS) as f64;
        learner
    }

    /// Drives until a change, panicking if none comes.
    fn change(
        origin: &mut Steady,
        learner: &mut Learner,
        config: &AdaptiveInflight,
        ceiling: isize,
        inflight: usize,
        latency: u64,
        refused: bool,
    ) {
        let n = origin.run(
            learner,
            config,
            ceiling,
            inflight,
            latency,
            refused,
            Outcome::Success,
            100_000,
        );
        assert!(n < 100_000, "nothing changed: {learner:?}");
    }

    #[test]
    fn a_new_learner_judges_by_the_ceiling_and_takes_its_first_round_as_the_no_load_latency() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(100, 20, START);
        assert_eq!(learner.limit(&config, 100), 100, "not from any count");
        let mut origin = Steady::new();
        change(&mut origin, &mut learner, &config, 100, 20, 8 * MS, false);
        assert_eq!(learner.no_load(), Some(Duration::from_millis(8)));
        assert_eq!(learner.limit(&config, 100), 100);
    }

    /// Rounds' means spread by noise, none over the tolerance for long: a healthy origin whose
    /// latency wanders ±30% round to round is never cut, refused or not.
    #[test]
    fn latency_noise_at_a_steady_concurrency_does_not_cut_the_limit() {
        let config = AdaptiveInflight::new();
        let mut learner = Learner::start(60, 20, START);
        let mut origin = Steady::new();
        let mut draws = 0x1234_5678u64;
        for _ in 0..400 {
            draws = draws
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let spread = 0.7 + 0.6 * ((draws >> 33) as f64 / (1u64 << 31) as f64);
            let latency = (10.0 * MS as f64 * spread) as u64;
            origin.run(
                &mut learner,
                &config,
                60,
                20,
                latency,
                false,
                Outcome::Success,
                40,
            );
            assert_eq!(learner.limit(&config, 60), 60, "{learner:?}");
        }
    }

    #[test]
    fn a_limit_that_binds_at_the_no_load_latency_grows_as_a_slow_start() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(200, 10);
        learner.limit = 10.0;
        let mut origin = Steady::new();
        let mut limits = vec![];
        for _ in 0..4 {
            let l = learner.limit(&config, 200) as usize;
            change(&mut origin, &mut learner, &config, 200, l, 10 * MS, true);
            limits.push(learner.limit(&config, 200));
        }
        assert_eq!(
            limits,
            [20, 40, 80, 160],
            "doubling from what each round used"
        );
    }

    /// Over the tolerance while requests are refused, two rounds in a row: the gradient cuts
    /// the limit from the round's concurrency, at most by half.
    #[test]
    fn latency_over_the_tolerance_while_refused_shrinks_the_limit_at_most_by_half() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(64, 16);
        learner.probed = true;
        learner.phase = Phase::Track {
            rounds: 0,
            low: 0,
            over: 0,
        };
        let mut origin = Steady::new();
        // The first round over the tolerance moves nothing but its count.
        change(&mut origin, &mut learner, &config, 64, 64, 100 * MS, true);
        assert_eq!(learner.limit, 64.0);
        change(&mut origin, &mut learner, &config, 64, 64, 100 * MS, true);
        let limit = learner.limit;
        assert!(
            (0.5 * 64.0..=0.5 * 64.0 + HEADROOM * 8.0 + 1.0).contains(&limit),
            "halved from its concurrency, plus its headroom: {limit}"
        );
    }

    /// The same latency with nothing refused and a steady concurrency is a healthy origin's
    /// queue (few servers queue now and then): no cut.
    #[test]
    fn latency_over_the_tolerance_with_nothing_refused_and_nothing_growing_is_left_alone() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(64, 16);
        let mut origin = Steady::new();
        for _ in 0..20 {
            origin.run(
                &mut learner,
                &config,
                64,
                16,
                20 * MS,
                false,
                Outcome::Success,
                64,
            );
        }
        assert_eq!(learner.limit, 64.0, "{learner:?}");
    }

    #[test]
    fn overloads_cut_the_limit_by_half_their_share_and_a_clean_round_gives_it_back() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(100, 20);
        let mut origin = Steady::new();
        // Every request times out (a hang): halved a round, from at most twice what it used
        // (the first round used 20 of its 100); once timeouts hold it, each one that comes
        // back takes its slot with it too.
        let mut limits = vec![];
        let mut completions = 0;
        while completions < 6 * 20 && learner.limit(&config, 100) > 5 {
            let l = learner.limit(&config, 100) as usize;
            completions += origin.run(
                &mut learner,
                &config,
                100,
                l.min(20),
                500 * MS,
                true,
                Outcome::Overload,
                100_000,
            );
            limits.push(learner.limit(&config, 100));
        }
        assert_eq!(limits[0], 20, "{limits:?}");
        assert!(limits.windows(2).all(|w| w[1] <= w[0]), "{limits:?}");
        assert!(limits.last() <= Some(&5), "{limits:?} {learner:?}");
        // It ends: the first round without an overload, at the known latency, restores it.
        let l = learner.limit(&config, 100) as usize;
        origin.run(
            &mut learner,
            &config,
            100,
            l,
            10 * MS,
            true,
            Outcome::Success,
            100_000,
        );
        assert_eq!(learner.limit(&config, 100), 100);
    }

    /// One request in a hundred reported as an overload at the latency of the others (a quick
    /// 5xx, no news of load) leaves the limit where it was. (Before quick overloads were told
    /// from timeouts, it cost half a per cent a round; the family's timeouts still do.)
    #[test]
    fn a_rare_quick_overload_leaves_the_limit_alone() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(100, 20);
        let ceiling = ceiling_of(100);
        let mut outcomes = (0..100).map(|i| {
            if i == 0 {
                Outcome::Overload
            } else {
                Outcome::Success
            }
        });
        // Two rounds of 100: the first closes when the second opens, and is judged when 90
        // of its requests completed.
        let mut now = START;
        for _ in 0..3 {
            for n in 0..100 {
                learner.admitted(now + n, n as isize, 1);
            }
            now += 10 * MS;
            for n in (0..100).rev() {
                let outcome = outcomes.next().unwrap_or(Outcome::Success);
                let admitted = now - 10 * MS + (99 - n) as u64;
                learner.completed(&config, &ceiling, now, n + 1, completion(admitted, outcome));
            }
            assert_eq!(learner.limit, 100.0, "{learner:?}");
        }
    }

    /// A hang under a learner at its ceiling: nothing completes before the callers' timeout
    /// (longer than the stall's second), and requests are refused at the ceiling meanwhile.
    /// The round's requests then time out as overloads, and the limit comes down. (Taken as a
    /// stall at the ceiling, the round was dropped every second and the timeouts matched no
    /// round: the limit stayed at the ceiling for the whole hang.)
    #[test]
    fn a_hung_origin_at_the_ceiling_is_cut_when_its_timeouts_come_back() {
        let config = AdaptiveInflight::new();
        let ceiling = ceiling_of(64);
        let mut learner = knowing_10ms(64, 20);
        let timeout = 3_000 * MS;
        // 64 requests admitted over the first 100 ms, then every arrival refused at the
        // ceiling for the rest of the timeout.
        let admitted: Vec<u64> = (0..64).map(|i| START + i * 1_500_000).collect();
        for (i, &at) in admitted.iter().enumerate() {
            learner.admitted(at, i as isize, 1);
        }
        let mut now = START + 100 * MS;
        while now < START + timeout {
            let limit = learner.unstalled(&config, &ceiling, now, 65);
            assert_eq!(limit, 64);
            learner.refused();
            now += 50 * MS;
        }
        // The timeouts come back, in the order the requests were admitted.
        for (i, &at) in admitted.iter().enumerate() {
            let c = completion(at, Outcome::Overload);
            learner.completed(&config, &ceiling, at + timeout, 64 - i as isize, c);
        }
        assert!(
            learner.limit(&config, 64) <= 32,
            "cut by the round of timeouts: {learner:?}"
        );
    }

    /// What an origin that hangs from `START` until `recovery` does under a learner that knew
    /// it at 10 ms: a request arrives every 5 ms; one admitted before `recovery` times out
    /// `timeout` after (an overload), one admitted after answers in 10 ms. Returns, for each
    /// arrival, when it came, how many were in flight once it was judged, and whether it was
    /// refused.
    fn hang(ceiling: isize, timeout: u64, recovery: u64, until: u64) -> Vec<(u64, usize, bool)> {
        let config = AdaptiveInflight::new();
        let ceiling = ceiling_of(ceiling);
        let mut learner = knowing_10ms(ceiling.limit, 0);
        // (completes at, admitted at, outcome), in no order.
        let mut inflight: Vec<(u64, u64, Outcome)> = Vec::new();
        let mut arrivals = Vec::new();
        let mut now = START;
        while now < until {
            inflight.sort_by_key(|&(at, ..)| std::cmp::Reverse(at));
            while inflight.last().is_some_and(|&(at, ..)| at <= now) {
                let (at, admitted_at, outcome) = inflight.pop().expect("due");
                let c = completion(admitted_at, outcome);
                let tracked = inflight.len() as isize + 1;
                learner.completed(&config, &ceiling, at, tracked, c);
            }
            let wanted = inflight.len() as isize + 1;
            let refused = wanted > learner.unstalled(&config, &ceiling, now, wanted);
            if refused {
                learner.refused();
            } else {
                learner.admitted(now, wanted - 1, 1);
                inflight.push(if now < recovery {
                    (now + timeout, now, Outcome::Overload)
                } else {
                    (now + 10 * MS, now, Outcome::Success)
                });
            }
            arrivals.push((now, inflight.len(), refused));
            now += 5 * MS;
        }
        arrivals
    }

    /// An origin that hangs behind a timeout of 3 s (300 latencies): once its first timeouts
    /// came back, the requests it holds stay few (the floor, and a canary a second for each
    /// second of the timeout), however long the hang lasts. (With the stall counted in no-load
    /// latencies, the hang looked stalled after a second without a completion, and each stall
    /// let the limit up to the request and dropped the rounds that were cutting it: 60 of 64
    /// in flight.)
    #[test]
    fn a_hung_origin_holds_few_requests_after_its_first_timeouts() {
        let timeout = 3_000 * MS;
        let arrivals = hang(64, timeout, START + 60_000 * MS, START + 60_000 * MS);
        let most = arrivals
            .iter()
            .filter(|&&(at, ..)| at >= START + 4 * timeout)
            .map(|&(_, inflight, _)| inflight)
            .max();
        let floor = AdaptiveInflight::DEFAULT_FLOOR as usize;
        // A canary each second of the timeout, the floor, and one whose timeout is due.
        let bound = floor + (timeout / CANARY_NANOS) as usize + 1;
        assert!(most <= Some(bound), "{most:?} in flight, over {bound}");
    }

    /// The hang ends: the requests admitted during it still hold the floor's slots until
    /// they time out (3 s), but a canary goes through within a second, answers at the latency
    /// known, and the room comes back: no refusal from a second and a few latencies after the
    /// recovery on. (Without the canary and the answer, the room came back only with a whole
    /// clean round, after the hung requests timed out: refused until 2.97 s after.)
    #[test]
    fn a_hung_origin_that_answers_again_gets_its_room_back_within_a_second() {
        // Not a whole number of timeouts after the hang began: the slots it left were taken
        // again just before.
        let recovery = START + 30_300 * MS;
        let arrivals = hang(64, 3_000 * MS, recovery, recovery + 10_000 * MS);
        let refused_before = arrivals
            .iter()
            .filter(|&&(at, _, r)| r && at < recovery)
            .count();
        assert!(refused_before > 0, "the hang was held");
        let heard = recovery + CANARY_NANOS + 50 * MS;
        let late: Vec<_> = arrivals
            .iter()
            .filter(|&&(at, _, r)| r && at >= heard)
            .collect();
        assert!(
            late.is_empty(),
            "refused after the recovery was heard: {late:?}"
        );
    }

    /// After a hang, the first round without an overload gives back the room the overloads
    /// took when its latency is the known one within its noise: a round of a few requests is
    /// over the tolerance by noise alone now and then, and the room must not wait for a round
    /// exactly under it (the recovered origin would be held at the floor meanwhile).
    #[test]
    fn the_room_overloads_took_comes_back_on_a_clean_round_within_its_noise() {
        let config = AdaptiveInflight::new();
        let ceiling = ceiling_of(100);
        let mut learner = knowing_10ms(100, 2);
        learner.limit = 2.0;
        learner.before_overloads = Some(100.0);
        // Rounds of four requests (the learner is held under `MIN_ROUND`), of 7 and 16 ms in
        // turn: a mean of 11.5 ms, over the tolerance (11 ms), within twice its standard error.
        let mut now = START;
        for n in 0..12u64 {
            let latency = if n % 2 == 0 { 7 * MS } else { 16 * MS };
            let at = now;
            learner.admitted(at, 1, 1);
            learner.refused();
            now += latency;
            learner.completed(&config, &ceiling, now, 2, completion(at, Outcome::Success));
        }
        assert_eq!(learner.limit(&config, 100), 100, "{learner:?}");
    }

    /// Refused as an overloaded origin is, at its no-load latency, below a concurrency at which
    /// it was seen queueing: the limit grows half way there, not twice what it used; once a
    /// round at that concurrency is free of queueing, it doubles again.
    #[test]
    fn growth_stops_short_of_where_the_origin_was_seen_queueing() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(400, 20);
        learner.limit = 20.0;
        learner.probed = true;
        learner.queued_at = Some(36.0);
        let mut origin = Steady::new();
        let mut limits = vec![];
        for _ in 0..6 {
            let l = learner.limit(&config, 400) as usize;
            change(&mut origin, &mut learner, &config, 400, l, 10 * MS, true);
            limits.push(learner.limit(&config, 400));
        }
        assert_eq!(
            limits,
            [28, 32, 34, 35, 36, 72],
            "half way to 36 (one more at least), then doubling from it"
        );
    }

    /// 10 servers of 10 ms slow down to 100 ms: the limit falls to where the latency says,
    /// a probe finds the new no-load latency, and the limit settles near the servers.
    #[test]
    fn an_origin_that_slows_down_is_probed_and_its_new_no_load_learnt() {
        let config = AdaptiveInflight::new();
        let mut learner = knowing_10ms(100, 20);
        let latency = |l: usize| 100 * MS * (l.max(10) as u64) / 10;
        let mut origin = Steady::new();
        let mut limits = Vec::new();
        for _ in 0..60 {
            let l = learner.limit(&config, 100) as usize;
            origin.run(
                &mut learner,
                &config,
                100,
                l,
                latency(l),
                true,
                Outcome::Success,
                1_000,
            );
            limits.push(learner.limit(&config, 100));
        }
        let no_load = learner.no_load().unwrap().as_secs_f64();
        assert!((no_load - 0.1).abs() < 0.02, "{no_load} {limits:?}");
        // Settled near the 10 servers, but for a probe at half every `probe_every` rounds.
        let mut last = limits[limits.len() - 16..].to_vec();
        last.sort_unstable();
        assert!((10..=20).contains(&last[8]), "{limits:?}");
        assert!(last.iter().filter(|&&l| l < 10).count() <= 1, "{limits:?}");
    }

    /// One server of 10 ms: every request past the first queues, and the floor of 3 holds the
    /// limit; never under it, never over the ceiling.
    #[test]
    fn the_limit_stays_between_the_floor_and_the_ceiling() {
        let config = AdaptiveInflight::new().floor(3);
        let latency = |l: usize| 10 * MS * l as u64;
        let mut learner = knowing_10ms(40, 10);
        let mut origin = Steady::new();
        for _ in 0..60 {
            let l = learner.limit(&config, 40) as usize;
            origin.run(
                &mut learner,
                &config,
                40,
                l,
                latency(l),
                true,
                Outcome::Success,
                1_000,
            );
            assert!((3..=40).contains(&learner.limit(&config, 40)));
        }
        assert!((3..=6).contains(&learner.limit(&config, 40)), "{learner:?}");
        assert_eq!(
            learner.limit(&config, 2),
            2,
            "a lower max_inflight holds the key to it"
        );
    }

    #[test]
    fn a_learner_at_rest_keeps_its_no_load_latency_until_it_is_forgotten() {
        let config = AdaptiveInflight::new().forget_after(Duration::from_secs(5));
        let mut learner = knowing_10ms(100, 20);
        learner.limit = 7.0;
        learner.rest();
        assert!(!learner.is_active());
        learner.wake(100, 20, START + 4_000 * MS, &config);
        assert!(learner.is_active());
        assert_eq!(learner.no_load(), Some(Duration::from_millis(10)), "kept");
        assert_eq!(learner.limit(&config, 100), 100, "woken at the ceiling");
        learner.rest();
        learner.wake(100, 20, START + 10_000 * MS, &config);
        assert_eq!(
            learner.no_load(),
            None,
            "forgotten after 5 s without a request"
        );
    }
}
