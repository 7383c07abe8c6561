//! What the limiter tells its caller: why a request was rejected, a key's counts, the keys
//! near their limits, and whether the configuration still tells keys apart.

use std::time::Duration;

use crate::rate::WindowView;

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The key has `max_inflight` requests in flight already, or as many as the in-flight
    /// limit it learnt ([`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight));
    /// `limit` says which.
    Inflight,
    /// The key's sliding-window rate would exceed `max_rate`.
    Rate,
    /// The request asked for an in-flight limit
    /// ([`Limiter::with_limits`](super::Limiter::with_limits)) from a limiter that
    /// counts no requests in flight (built without `max_inflight`).
    InflightNotCounted,
    /// The request asked for a rate limit from a limiter that counts no rate (built without
    /// `max_rate`).
    RateNotCounted,
    /// The request asked for a limit above [`Limits::MAX_LIMIT`](super::Limits::MAX_LIMIT), which the
    /// limiter's counters cannot judge (they read at most 2^31, twice the largest limit, so that a
    /// request of the largest cost on top of it is still counted exactly): a misconfigured plan, refused
    /// rather than left unlimited.
    LimitTooLarge,
    /// The request's cost ([`WithLimits::cost`](super::WithLimits::cost)) is more than one of
    /// its limits (or than [`Limits::MAX_LIMIT`](super::Limits::MAX_LIMIT)): no wait can
    /// admit it, so it is refused before anything is counted. `estimate` is the cost, `limit`
    /// the limit it is over.
    CostOverLimit,
}

/// A rejected request: which limit, the estimate it was judged by, and when to retry.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Limiter, Reason};
///
/// let clock = ManualClock::new();
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_rate(2, Duration::from_secs(1))
///     .clock(&clock)
///     .build()
///     .unwrap();
/// let _a = limiter.try_acquire("origin").unwrap();
/// let _b = limiter.try_acquire("origin").unwrap();
/// let rejected = limiter.try_acquire("origin").unwrap_err();
/// assert_eq!(rejected.reason, Reason::Rate);
/// assert_eq!((rejected.estimate, rejected.limit), (3, 2));
/// // 2 requests in this window: one more fits once 1/2 of the next window has passed.
/// assert_eq!(rejected.retry_after, Some(Duration::from_millis(1500)));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Rejected {
    /// The limit that was hit.
    pub reason: Reason,
    /// The key's count as judged, this request included (rounded up for rates). A key still
    /// within the `retry_after` of an earlier rate rejection is rejected without being counted
    /// again, and reports `limit + 1`: over the limit, by at least this request.
    pub estimate: u32,
    /// The limit.
    pub limit: u32,
    /// For rate rejections, how long until the same request (of the same cost) would fit, if
    /// nothing else arrives meanwhile; `None` for in-flight rejections (that depends on other
    /// requests finishing), for a rate limit of 0 or a cost over a limit (nothing ever fits)
    /// and for limits the limiter does not count. A key refused for its rate is then refused
    /// by the over-limit cache, without a look at its counts, until then: for requests of
    /// that cost (other costs are decided the usual way).
    ///
    /// Never early for a key judged under the same limits from one request to the next; exact
    /// for windows up to 4.5 minutes, and less than 2^-39 of two windows late for longer ones
    /// (16 ns for an hour's: the over-limit cache's unit). A key
    /// whose limits change (a new plan, [`set_limits`](super::Limiter::set_limits)), or that
    /// is also requested under other limits (another plan's, or none: `Limits::no_rate`,
    /// whose admissions count in the key's rate all the same), may be answered from a
    /// deadline computed under one limit, before what it was admitted under the other: that
    /// `retry_after` may be early, its estimate low, and the reason `Rate` where the in-flight
    /// limit is now exceeded too. It never admits more.
    pub retry_after: Option<Duration>,
}

/// A limit or a count as judged (in the sketches' `isize`, never negative) as a rejection
/// reports it.
#[inline]
fn reported(n: isize) -> u32 {
    n.clamp(0, u32::MAX as isize) as u32
}

impl Rejected {
    #[inline]
    pub(crate) fn inflight(estimate: isize, limit: isize) -> Self {
        Rejected {
            reason: Reason::Inflight,
            estimate: reported(estimate),
            limit: reported(limit),
            retry_after: None,
        }
    }

    /// A rate rejection of a request of `cost` units judged on `view`; `counted` is what the
    /// current window will count at a retry (see [`WindowView::retry_after`]).
    #[inline]
    pub(crate) fn rate(view: &WindowView, limit: isize, counted: isize, cost: isize) -> Self {
        Rejected {
            reason: Reason::Rate,
            // `as` saturates (a NaN is 0).
            estimate: view.sliding().ceil() as u32,
            limit: reported(limit),
            retry_after: view.retry_after(limit, counted, cost),
        }
    }

    /// A request whose cost is over its limit: it never fits.
    #[cold]
    pub(crate) fn cost_over_limit(cost: u32, limit: u32) -> Self {
        Rejected {
            reason: Reason::CostOverLimit,
            estimate: cost,
            limit,
            retry_after: None,
        }
    }

    /// A request under a rate limit of 0: it never fits.
    #[inline]
    pub(crate) fn never(limit: isize) -> Self {
        Rejected {
            reason: Reason::Rate,
            estimate: 1,
            limit: reported(limit),
            retry_after: None,
        }
    }

    /// A limit of a kind the limiter does not count.
    pub(crate) fn not_counted(reason: Reason, limit: u32) -> Self {
        Rejected {
            reason,
            estimate: 0,
            limit,
            retry_after: None,
        }
    }

    /// A key still within the `retry_after` of an earlier rate rejection.
    /// Inlined: the refusal of a flooded key is most of a flood's cost, and a call here
    /// measurably adds to it.
    #[inline]
    pub(crate) fn still_over(limit: isize, remaining: Duration) -> Self {
        Rejected {
            reason: Reason::Rate,
            estimate: reported(limit).saturating_add(1),
            limit: reported(limit),
            retry_after: Some(remaining),
        }
    }
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.reason {
            Reason::Inflight => "requests in flight",
            Reason::Rate => "requests per interval",
            Reason::InflightNotCounted => {
                return write!(
                    f,
                    "an in-flight limit of {} was asked of a limiter that counts no requests in \
                     flight (build it with max_inflight)",
                    self.limit
                )
            }
            Reason::RateNotCounted => {
                return write!(
                    f,
                    "a rate limit of {} was asked of a limiter that counts no rate (build it \
                     with max_rate)",
                    self.limit
                )
            }
            Reason::CostOverLimit => {
                return write!(
                    f,
                    "a request of cost {} can never fit under a limit of {}",
                    self.estimate, self.limit
                )
            }
            Reason::LimitTooLarge => {
                return write!(
                    f,
                    "a limit of {} was asked of a limiter whose counters read at most 2^31: the \
                     largest limit is {}",
                    self.limit,
                    super::Limits::MAX_LIMIT
                )
            }
        };
        write!(
            f,
            "{} {what} would exceed the limit of {}",
            self.estimate, self.limit
        )?;
        if let Some(retry) = self.retry_after {
            write!(f, "; retry after {retry:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejected {}

/// A key the exact stage is counting, or stopped counting within the retention: the keys
/// whose sketch estimates reached a promotion threshold.
///
/// Being listed is not proof that a key is busy. The sketch over-estimates a key whose
/// counters are shared with heavier keys, so a key that sent two requests can be promoted and
/// listed next to a flood. Each figure says how it is known: [`Figure::Counted`] when the exact
/// stage counted every request it covers, [`Figure::Estimated`] when some of it comes from
/// the sketch, and is then only an upper bound.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Figure, Limiter};
///
/// let clock = ManualClock::new();
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_rate(4, Duration::from_secs(1))
///     .clock(&clock)
///     .build()?;
/// for _ in 0..3 {
///     let _ = limiter.try_acquire("busy");
/// }
/// // Promoted in this window: the requests before its promotion are bounded by the sketch.
/// let busy = &limiter.heavy_hitters()[0];
/// assert_eq!(busy.rate, Some(Figure::Estimated { at_most: 3.0 }));
///
/// // Two windows later, the exact stage has counted every request in both windows.
/// clock.advance(Duration::from_secs(1));
/// let _ = limiter.try_acquire("busy");
/// clock.advance(Duration::from_secs(1));
/// let _ = limiter.try_acquire("busy");
/// let busy = &limiter.heavy_hitters()[0];
/// assert_eq!(busy.rate, Some(Figure::Counted(2.0)));
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HeavyHitter<K> {
    /// The key.
    pub key: K,
    /// Its requests in flight (if an in-flight limit is configured): counted when the exact
    /// stage admitted all of them, estimated while some that the sketch counted before the
    /// promotion may still be in flight.
    pub inflight: Option<Figure<isize>>,
    /// Its sliding-window count per interval (if a rate limit is configured): counted when
    /// the exact stage counted the key through the current and the previous window, estimated
    /// before that (in its first two windows in the stage, and after it left).
    pub rate: Option<Figure<f64>>,
    /// The key's refusals while the exact stage held it, counting each run of refusals the
    /// over-limit cache answered as one. A key over its rate limit is refused by the cache
    /// until one more request fits, without a look at its counts (that is what keeps a flood
    /// cheap): such a run begins at the admission that fills the key, or at a refusal the
    /// stage decided, and counts once. The metrics' `floodgate_requests_total` counts every
    /// refusal.
    pub rejected: u64,
    /// The in-flight limit it was last judged by, and whether it is configured or learnt
    /// from its latency
    /// ([`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight));
    /// `None` without an in-flight limit, and for a key that left the stage.
    pub inflight_limit: Option<InflightLimit>,
    /// `None` while the exact stage holds the key; how long ago it left, for a key it
    /// stopped counting within the retention
    /// ([`LimiterBuilder::heavy_hitters_retention`](super::LimiterBuilder::heavy_hitters_retention)).
    pub left_ago: Option<Duration>,
}

/// A figure the limiter reports of a key, and how it knows it.
///
/// The sketch never counts a key below its true count, but other keys that share its
/// counters add to it. So an estimate is an upper bound, and may be far above the truth.
///
/// # Examples
///
/// ```
/// use floodgate::Figure;
///
/// let counted = Figure::Counted(12);
/// let estimated = Figure::Estimated { at_most: 499 };
/// assert_eq!((counted.counted(), estimated.counted()), (Some(12), None));
/// assert_eq!((counted.at_most(), estimated.at_most()), (12, 499));
/// assert_eq!(format!("{counted} / {estimated}"), "12 / at most 499");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Figure<T> {
    /// Counted exactly: the exact stage counted every request this figure covers.
    Counted(T),
    /// Estimated, wholly or in part, by the count-min sketch: the true figure is at most
    /// `at_most`, and may be much lower.
    Estimated {
        /// The upper bound.
        at_most: T,
    },
}

impl<T: Copy> Figure<T> {
    /// The count, if the figure is counted; `None` for an estimate.
    pub fn counted(&self) -> Option<T> {
        match *self {
            Figure::Counted(n) => Some(n),
            Figure::Estimated { .. } => None,
        }
    }

    /// An upper bound on the true figure: the count itself, or the estimate.
    pub fn at_most(&self) -> T {
        match *self {
            Figure::Counted(n) | Figure::Estimated { at_most: n } => n,
        }
    }

    /// Whether the figure is counted, not estimated.
    pub fn is_counted(&self) -> bool {
        matches!(self, Figure::Counted(_))
    }
}

/// A count as itself, an estimate as `at most` and its bound. Width and precision apply to
/// the number.
impl<T: std::fmt::Display> std::fmt::Display for Figure<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Figure::Counted(n) => n.fmt(f),
            Figure::Estimated { at_most } => {
                f.write_str("at most ")?;
                at_most.fmt(f)
            }
        }
    }
}

/// The in-flight limit a key is judged by, and where it comes from.
///
/// # Examples
///
/// ```
/// use floodgate::InflightLimit;
///
/// let learnt = InflightLimit::Learnt { limit: 12, ceiling: 100 };
/// assert_eq!(learnt.limit(), 12);
/// assert_eq!(InflightLimit::Configured(100).limit(), 100);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InflightLimit {
    /// The configured `max_inflight`: the limiter's default, or the request's own
    /// ([`Limiter::with_limits`](super::Limiter::with_limits)).
    Configured(u32),
    /// Learnt from the key's latency
    /// ([`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight)).
    Learnt {
        /// The limit it learnt, at most `ceiling`.
        limit: u32,
        /// The configured `max_inflight` the learnt limit stays under.
        ceiling: u32,
    },
}

impl InflightLimit {
    /// The limit, configured or learnt.
    pub fn limit(&self) -> u32 {
        match *self {
            InflightLimit::Configured(limit) | InflightLimit::Learnt { limit, .. } => limit,
        }
    }
}

/// A key's counts as the limiter judges them; see [`Limiter::estimate`](super::Limiter::estimate).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Estimate {
    /// An upper bound on its requests in flight (if an in-flight limit is configured).
    pub inflight: Option<isize>,
    /// An upper bound on its sliding-window count per interval (if a rate limit is
    /// configured). [`Limiter::heavy_hitters`](super::Limiter::heavy_hitters) says which
    /// figures of a hot key are counted.
    pub rate: Option<f64>,
}

/// Counters about the limiter's decisions, and whether its sketches can still tell keys apart.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct LimiterStats {
    /// Keys in the exact stage now.
    pub promoted: usize,
    /// The exact stage's capacity.
    pub exact_capacity: usize,
    /// Promotions so far.
    pub promotions: u64,
    /// Promotions that took the place of a promoted key with less evidence (fewer requests in
    /// the exact stage's current or last epoch than the newcomer showed at its set's door).
    pub replaced: u64,
    /// Decisions the sketch made alone because the key found no place in the exact stage: its
    /// set was full of keys with more evidence.
    pub exact_full: u64,
    /// The rate sketch's noise now: the mean sliding-window count a counter carries, which
    /// every key's rate estimate starts from (`None` without a rate limit).
    pub rate_noise: Option<f64>,
    /// The rate estimate at which a key is promoted to the exact stage.
    pub rate_promote_at: Option<f64>,
    /// The in-flight sketch's noise now: the mean count a counter carries.
    pub inflight_noise: Option<f64>,
    /// The in-flight estimate at which a key is promoted to the exact stage.
    pub inflight_promote_at: Option<f64>,
    /// Traffic exceeds what the configuration can tell apart: a sketch's noise has reached
    /// half its promotion threshold, so keys far under their limits start to look hot, fill
    /// the exact stage, and are then decided by the sketch alone, which refuses more (never
    /// admits more). Size the limiter for a higher [`peak_rate`](super::LimiterBuilder::peak_rate).
    pub saturated: bool,
    /// Requests waiting for a permit now ([`Limiter::acquire`](super::Limiter::acquire)).
    pub waiting: usize,
}
