//! How a limiter learns hot keys' in-flight limits: the operator's settings and their checks.

use crate::error::ConfigError;

/// How a limiter learns the in-flight limit of each hot key (see
/// [`LimiterBuilder::adaptive_inflight`](crate::LimiterBuilder::adaptive_inflight)).
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
