//! In-flight limits that learn each hot origin's capacity from its latency: the control law,
//! as arithmetic on values. The exact stage keeps one [`Learner`] per promoted key whose
//! requests in flight reached its learning threshold, feeds it the key's admissions and
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
//! The learner works in *rounds*. A round is the requests admitted while it is open: it
//! closes to admissions once it took `MIN_ROUND` of them (fewer for a key held under that)
//! and spans a latency, and it is judged once nine in ten of them completed. Each permit
//! carries its admission time, so a round's mean latency and its standard error are those of
//! its own requests, and go with the concurrency they were admitted at (its mean in flight
//! while open): a request's wait depends on the queue it joined, so a cut is judged by the
//! requests admitted after it, not by those that queued before it and complete after.
//!
//! At the judgement of a round of mean latency `m`, with `no_load` the latency the origin gives
//! when nothing queues:
//!
//! - **No harm to a healthy origin.** The limit starts at the ceiling, never at a count (a
//!   sketch estimate shares counters with other keys; the learning threshold is judged on
//!   the key's exact count). A round is *over* the tolerance only if `m` is above `tolerance ·
//!   no_load` by more than twice its standard error, and the origin is falling behind: its
//!   requests were refused, or its concurrency grew by a quarter and by more than its noise
//!   since the round before. A healthy origin with few servers queues now and then, and its
//!   queue does not grow.
//! - **Gradient** (envoy's adaptive concurrency; Netflix's Gradient): after two rounds over in
//!   a row, `g = tolerance · no_load / m` (of the lower of the two), clamped to `[1/2, 1]`, and
//!   `limit ← C · g + ¾√C` from the round's concurrency `C`: with `c` servers, `C · g` is
//!   `tolerance · c`, and the limit settles near `tolerance · c + ¾√limit`. Each step is taken
//!   from what the round used, not from the limit now, which was set a round or two after it
//!   was admitted: steps from the limit would compound.
//! - **Growth.** A round within the tolerance that used half the limit or more raises it to
//!   `C + ¾√C`; one with requests refused and nothing queued (within the square root of the
//!   tolerance) doubles it from what it used (TCP's slow start): the origin recovered.
//! - **Overload** (AIMD's signal): a round whose completions were reported as overloads (a
//!   5xx, a timeout: `Outcome::Overload`) that took longer than the tolerance allows over the
//!   origin's latency multiplies the limit (from at most twice what it used) by
//!   `1 − share / 2`: a hang, every request timing out, halves it a round, a timeout now and
//!   then costs a hair. Quick overloads (a 5xx answered at the origin's own latency or faster:
//!   a broken route, a client's bad input, an attacker's) say nothing of load: they do not
//!   cut, and a round's latency is its successes'. The first round after with no overload and
//!   the latency known gives the room back.
//! - **Hangs.** When the overloads that cut the limit were slower than the tolerance allows
//!   (timeouts, not quick 5xx), a slot a timeout frees is not taken again, and a request
//!   refused with nothing admitted for a second goes through as a *canary* (the limit is let up
//!   to it, as a circuit breaker's half-open state lets one through). The first request
//!   admitted after the last one that timed out and answered at the latency known says the
//!   hang is over: the room comes back at once, without waiting for the requests admitted
//!   during the hang to time out. A hang thus holds the floor and a canary for each second
//!   of its timeout, and its end is heard within a second and a request's latency.
//! - **No-load latency.** The first round measures it (the key reached its learning
//!   threshold, at a concurrency under its servers when the ceiling is a few times them). A
//!   round faster than it by more than the tolerance lowers it (the origin got faster). Two
//!   tests raise it (the origin slowed down): the *slope test*, a round whose concurrency fell
//!   by a quarter and whose latency fell by under a third of that (a queue would have shrunk
//!   with it); and a *probe*, while requests are refused and the latency is over: the limit
//!   is halved, the next round opens once in flight drained to it, and it halves again while
//!   each round is a quarter faster than the one before; when the latency stops falling, its
//!   mean is the no-load latency, and the limit grows back by doubling from the level before
//!   the last halving while the latency allows. A probe comes at the first such round, then
//!   every `probe_every` rounds, and after two rounds at the lowest gradient. A key whose
//!   first round is already at its limit (its origin fell behind before the learner knew it)
//!   probes at once, by a quarter first.
//! - **Where it starts, and how long it lasts.** A key starts learning when its requests in
//!   flight counted exactly reach `learn_from` of its ceiling (the in-flight promotion
//!   threshold is lowered to it, so the key is in the exact stage by then), at the ceiling.
//!   A learner whose rounds cannot end (no request of theirs completed for 8 of the last
//!   round's latencies, at least a second, while requests are refused: streams, requests
//!   admitted before it started) starts afresh at the ceiling. After a round in which its in flight stayed under half its threshold with no refusal and
//!   no overload, its learner rests: the key is judged by `max_inflight` again and reads no
//!   clock, and the learner keeps its no-load latency for when the key learns again. A key
//!   keeps what it learnt (and its place in the exact stage) until it has had no request for
//!   `forget_after`.
//!
//! Between the floor and the ceiling, always: the ceiling is the key's `max_inflight` of the
//! request being judged, so a per-key limit lowered later caps the learnt one at once.
//!
//! The constants are chosen on a family of origin models with drawn parameters (servers,
//! service times and their noise, loads, bursts, faults: `capacity_sim` in the examples'
//! support crate, whose docs give the ranges) and judged on members not chosen on; each
//! constant's comment gives its reason in terms of the family.
//!
//! # Compared with the algorithms it borrows from
//!
//! - Netflix concurrency-limits' **Vegas** estimates the queue as `limit · (1 − rtt_noload /
//!   rtt)` against an all-time minimum RTT, reset by occasional probes; **Gradient2** compares
//!   a short-term RTT with a long-term average, which drifts upward under sustained overload;
//!   **AIMD** reacts to drops only. Their state is one per service. Both are written from
//!   their documented algorithms beside this one (`capacity_sim::baseline`), and the example
//!   `adaptive` sets the three side by side on the family.
//! - envoy's **adaptive concurrency** filter uses the gradient above against a minimum RTT it
//!   measures by pinning the concurrency to a small value at fixed intervals, refusing the
//!   excess meanwhile.
//!
//! This learner takes envoy's gradient and its measured no-load latency, but probes by halving
//! (a round at half the limit, not at a fixed minimum) and only when the limit binds and the
//! latency is over, so that an origin below its limit is never refused for a probe; and it
//! keeps one learner per hot key, in the exact stage's fixed table.

mod learner;

pub(crate) use learner::Learner;

use super::counts::Counts;
use super::limits::InflightThreshold;
use crate::error::ConfigError;

/// How a limiter learns the in-flight limit of each hot key (see
/// [`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight)).
///
/// The configured `max_inflight` stays the ceiling; the learnt limit moves between
/// [`floor`](Self::floor) and it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use floodgate::{AdaptiveInflight, Limiter};
///
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_inflight(200)
///     .adaptive_inflight(
///         AdaptiveInflight::new()
///             .floor(4)
///             .tolerance(1.2)
///             .learn_from(0.1)
///             .forget_after(Duration::from_secs(60)),
///     )
///     .build()
///     .unwrap();
/// assert_eq!(limiter.inflight_limit("quiet.example"), Some(200), "judged as usual until hot");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveInflight {
    pub(crate) floor: u32,
    pub(crate) tolerance: f64,
    pub(crate) probe_every: u32,
    pub(crate) learn_from: f64,
    pub(crate) forget_after: std::time::Duration,
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
    /// The default share of its ceiling at which a key starts learning: an eighth. The
    /// family's ceilings are a few times an origin's servers (a user sets `max_inflight` where
    /// a healthy origin never reaches it); an eighth of that is under the servers, so a key
    /// is watched before any queue forms at a slowed origin, and its first rounds measure the
    /// latency it gives with nothing queued.
    pub const DEFAULT_LEARN_FROM: f64 = 0.125;
    /// How long a key's learnt limit is kept without a request by default: 30 s. Bursts of a
    /// client come seconds apart, and an origin's trouble (a slow dependency, a deploy, a
    /// collection) lasts tens of seconds; past that the origin has changed as often as not,
    /// and a key that starts again costs one queue of its learning threshold.
    pub const DEFAULT_FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(30);
    /// The longest a learnt limit can be kept without a request.
    pub const MAX_FORGET_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

    /// The defaults: a floor of 2, a tolerance of 1.1, a probe every 16 rounds while the
    /// limit binds, learning from an eighth of the ceiling, forgotten after 30 s without a
    /// request.
    pub fn new() -> Self {
        AdaptiveInflight {
            floor: Self::DEFAULT_FLOOR,
            tolerance: Self::DEFAULT_TOLERANCE,
            probe_every: Self::DEFAULT_PROBE_EVERY,
            learn_from: Self::DEFAULT_LEARN_FROM,
            forget_after: Self::DEFAULT_FORGET_AFTER,
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

    /// The share of its `max_inflight` at which a key starts learning, in (0, 1]: its
    /// requests in flight, counted exactly (never a sketch estimate), reach it. A key is
    /// promoted to the exact stage for its in-flight count at this share too when it is
    /// below the limiter's promotion threshold, so the keys that reach it take the exact
    /// stage's lock on their requests: lower learns sooner, before a slowed origin builds a
    /// queue, at that price for more keys.
    pub fn learn_from(mut self, share: f64) -> Self {
        self.learn_from = share;
        self
    }

    /// How long a key keeps what it learnt without a request: from 100 ms to an hour. Its
    /// place in the exact stage is kept as long (an entry with no evidence, the first taken
    /// when its set is full).
    pub fn forget_after(mut self, idle: std::time::Duration) -> Self {
        self.forget_after = idle;
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
        if !(self.learn_from > 0.0 && self.learn_from <= 1.0) {
            return Err(ConfigError::InvalidAdaptive(
                "the share of max_inflight an adaptive in-flight limit learns from must be in (0, 1]",
            ));
        }
        if !(std::time::Duration::from_millis(100)..=Self::MAX_FORGET_AFTER)
            .contains(&self.forget_after)
        {
            return Err(ConfigError::InvalidAdaptive(
                "an adaptive in-flight limit is forgotten after 100 ms to an hour without a request",
            ));
        }
        Ok(())
    }

    /// The in-flight promotion threshold's share under `promotion`, the limiter's: a key that
    /// is to learn must be in the exact stage by then.
    pub(crate) fn inflight_promotion(&self, promotion: f64) -> f64 {
        promotion.min(self.learn_from)
    }

    /// `forget_after` in nanoseconds.
    pub(crate) fn forget_after_nanos(&self) -> u64 {
        crate::clock::saturating_nanos(self.forget_after)
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
    /// The origin failed under load or timed out (a 5xx, a timeout). Overloads slower than the
    /// tolerance allows over the origin's latency (timeouts, an origin failing under load)
    /// back the limit off, by half the share of a round's completions that were overloads;
    /// quick ones (a 5xx at the origin's own latency or faster, which a client's bad input can
    /// provoke) say nothing of load, and leave it alone.
    Overload,
}

/// Whether the request being judged (`cost` units) for a promoted key of `counts` goes to a
/// learner: the key has one already (`learning`), or its requests in flight counted here
/// (exactly: not the bound, which holds a sketch estimate that other keys' counts can
/// inflate), with this one, reach its promotion threshold (`ceiling.promote_at`) and it
/// starts one. A key promoted for its rate whose in flight stays low is judged as usual, and
/// reads no clock.
#[inline]
pub(crate) fn starts(
    learning: bool,
    counts: &Counts,
    cost: isize,
    ceiling: &InflightThreshold,
) -> bool {
    learning || counts.inflight.tracked.saturating_add(cost) >= ceiling.promote_at
}

/// A request that completed, as its permit tells the learner of its key: its units, what
/// its origin answered, whether its time says anything of the origin (not for an admission
/// another key's refusal took back), and when it was admitted if its key was learning then
/// (0 if not: its latency is not known, and it counts in no round).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) cost: u32,
    pub(crate) outcome: Outcome,
    pub(crate) measured: bool,
    pub(crate) admitted_at: u64,
}

/// What a completion changed: how many more requests the key may now have in flight (for
/// its waiters), and whether its learner is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Completed {
    pub(crate) done: bool,
    pub(crate) rise: u32,
}
