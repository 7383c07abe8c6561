//! The limits a decision is made against: a limiter's defaults, or a key's own.

use std::fmt;

use super::fleet::FleetRate;
use super::overlimit::SHADOW_MIX;
use super::Rejected;
use crate::error::ConfigError;

/// The limits of one key (or the defaults of a [`Limiter`](super::Limiter)): at most so many
/// requests in flight, at most so many requests per the limiter's rate interval.
///
/// A small `Copy` value, cheap to build per request (from a customer's plan, say) and to pass
/// to [`Limiter::with_limits`](super::Limiter::with_limits). Each kind is in one of three
/// states: a limit ([`max_inflight`](Self::max_inflight), [`max_rate`](Self::max_rate)),
/// explicitly none ([`no_inflight`](Self::no_inflight), [`no_rate`](Self::no_rate)), or left
/// out, as [`new`](Self::new) leaves both. A kind left out is never taken as "no limit":
///
/// - a key's own limits ([`with_limits`](super::Limiter::with_limits), a layer's
///   `limits_fn`) take the limiter's default of a kind they leave out, as it is at each
///   decision: a plan that raises a customer's in-flight limit keeps the rate limit every key
///   has;
/// - new defaults ([`Limiter::set_limits`](super::Limiter::set_limits)) must name every kind
///   the limiter counts, a limit or none: a push that leaves one out is refused with
///   [`ConfigError::LimitLeftOut`](crate::ConfigError::LimitLeftOut), which names it.
///
/// Turning a kind off is therefore always said, for the kind it turns off. The kinds a
/// limiter counts (in flight, rate, and the rate's interval) are fixed when it is built:
/// limits of a kind it does not count are refused with a [`Rejected`] whose [`Reason`] says
/// so (`InflightNotCounted`, `RateNotCounted`), and by
/// [`Limiter::set_limits`](super::Limiter::set_limits) with a [`ConfigError`]; a kind left
/// out or turned off that the limiter does not count is nothing to judge.
///
/// A limit of 0 admits nothing: every request is rejected at once, uncounted (a suspended
/// customer, say).
///
/// [`Rejected`]: super::Rejected
/// [`Reason`]: super::Reason
/// [`ConfigError`]: crate::ConfigError
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{Limiter, Limits, Reason};
///
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_inflight(2)
///     .max_rate(100, Duration::from_secs(1))
///     .build()
///     .unwrap();
/// let premium = Limits::new().max_inflight(4).max_rate(1000);
/// assert_eq!(premium.inflight_limit(), Some(4));
///
/// let held: Vec<_> = (0..4)
///     .map(|_| limiter.with_limits(premium).try_acquire("premium.example").unwrap())
///     .collect();
/// assert_eq!(held.len(), 4, "four in flight: the key's own limit, not the default 2");
/// let rejected = limiter.with_limits(premium).try_acquire("premium.example").unwrap_err();
/// assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 4));
/// ```
///
/// A plan that names one kind keeps the limiter's default of the other; one that means no
/// limit of a kind says so:
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Limiter, Limits, Reason};
///
/// let clock = ManualClock::new();
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_inflight(2)
///     .max_rate(3, Duration::from_secs(1))
///     .clock(&clock)
///     .build()
///     .unwrap();
/// let wide = limiter.with_limits(Limits::new().max_inflight(100));
/// for _ in 0..3 {
///     drop(wide.try_acquire("batch.example").unwrap());
/// }
/// let rejected = wide.try_acquire("batch.example").unwrap_err();
/// assert_eq!((rejected.reason, rejected.limit), (Reason::Rate, 3), "the default rate");
///
/// let unmetered = limiter.with_limits(Limits::new().max_inflight(100).no_rate());
/// for _ in 0..10 {
///     drop(unmetered.try_acquire("internal.example").unwrap());
/// }
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Limits {
    inflight: Setting,
    rate: Setting,
    shadow: bool,
}

/// One kind of limit in a [`Limits`]: left out, explicitly none, or a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum Setting {
    #[default]
    LeftOut,
    Off,
    Limit(u32),
}

impl Setting {
    const fn limit(self) -> Option<u32> {
        match self {
            Setting::Limit(limit) => Some(limit),
            Setting::LeftOut | Setting::Off => None,
        }
    }

    const fn is_left_out(self) -> bool {
        matches!(self, Setting::LeftOut)
    }

    /// This setting, or `default` if this one is left out.
    const fn or(self, default: Setting) -> Setting {
        match self {
            Setting::LeftOut => default,
            named => named,
        }
    }
}

/// A kind of limit: what [`ConfigError::LimitLeftOut`](crate::ConfigError::LimitLeftOut)
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LimitKind {
    /// Requests in flight ([`Limits::max_inflight`], [`Limits::no_inflight`]).
    Inflight,
    /// Requests per interval ([`Limits::max_rate`], [`Limits::no_rate`]).
    Rate,
}

impl fmt::Display for LimitKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LimitKind::Inflight => "in-flight",
            LimitKind::Rate => "rate",
        })
    }
}

impl Limits {
    /// The largest limit a limiter takes, in flight or per rate interval: 2^30 − 1. Its
    /// sketches count in 32-bit counters (twice the counters a cache line holds, next to
    /// `isize`) that read at most 2^31: a saturated count is over every limit, and a count at
    /// this limit with a request of this cost on top is still counted exactly, so that its
    /// units can be given back or taken out exactly. A larger limit is refused: by the
    /// builder and [`Limiter::set_limits`](super::Limiter::set_limits) with
    /// [`ConfigError::LimitTooLarge`](crate::ConfigError::LimitTooLarge), and per request
    /// with [`Reason::LimitTooLarge`](super::Reason::LimitTooLarge).
    pub const MAX_LIMIT: u32 = (1 << 30) - 1;

    /// Both kinds left out: a key's own limits that are the limiter's defaults, until a kind
    /// is named.
    ///
    /// # Examples
    ///
    /// ```
    /// let none = floodgate::Limits::new();
    /// assert_eq!((none.inflight_limit(), none.rate_limit()), (None, None));
    /// ```
    pub const fn new() -> Self {
        Limits {
            inflight: Setting::LeftOut,
            rate: Setting::LeftOut,
            shadow: false,
        }
    }

    /// At most `limit` requests in flight. As a key's own limit, 0 refuses every request of
    /// the key, uncounted; as a limiter's default it is refused
    /// ([`ConfigError::InvalidLimit`](crate::ConfigError::InvalidLimit)).
    ///
    /// # Examples
    ///
    /// ```
    /// let limits = floodgate::Limits::new().max_inflight(10);
    /// assert_eq!(limits.inflight_limit(), Some(10));
    /// ```
    pub const fn max_inflight(mut self, limit: u32) -> Self {
        self.inflight = Setting::Limit(limit);
        self
    }

    /// At most `limit` requests per the limiter's rate interval. As a key's own limit, 0
    /// refuses every request of the key (a suspended plan, say), uncounted; as a limiter's
    /// default it is refused ([`ConfigError::InvalidLimit`](crate::ConfigError::InvalidLimit)).
    ///
    /// # Examples
    ///
    /// ```
    /// let limits = floodgate::Limits::new().max_rate(100);
    /// assert_eq!(limits.rate_limit(), Some(100));
    /// ```
    ///
    /// A negative limit cannot be written, so none reaches a limiter by accident:
    ///
    /// ```compile_fail
    /// let limits = floodgate::Limits::new().max_rate(-1);
    /// ```
    pub const fn max_rate(mut self, limit: u32) -> Self {
        self.rate = Setting::Limit(limit);
        self
    }

    /// No limit on requests in flight, said explicitly: a key's own limits with it are not
    /// limited in flight whatever the defaults say (its requests are still counted), and new
    /// defaults with it turn the in-flight limit off
    /// ([`set_limits`](super::Limiter::set_limits)). Without it, a kind left out is the
    /// defaults' (a key's limits) or refused (new defaults).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let unlimited = limiter.with_limits(Limits::new().no_inflight());
    /// let _first = unlimited.try_acquire("health.example").unwrap();
    /// let _second = unlimited.try_acquire("health.example").unwrap();
    /// assert_eq!(Limits::new().no_inflight().inflight_limit(), None);
    /// ```
    pub const fn no_inflight(mut self) -> Self {
        self.inflight = Setting::Off;
        self
    }

    /// No rate limit, said explicitly: as [`no_inflight`](Self::no_inflight), for the rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_inflight(10)
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .build()
    ///     .unwrap();
    /// // In-flight limits only, from now on: the rate's end is said, not implied.
    /// limiter.set_limits(Limits::new().max_inflight(1000).no_rate()).unwrap();
    /// assert_eq!(limiter.limits(), Limits::new().max_inflight(1000).no_rate());
    /// ```
    pub const fn no_rate(mut self) -> Self {
        self.rate = Setting::Off;
        self
    }

    /// Judges requests against these limits in shadow: every decision is made and counted as
    /// usual, and a request they would refuse is admitted with a permit that says so
    /// ([`Permit::shadow_rejection`](crate::Permit::shadow_rejection)). For a new plan, to
    /// watch what it would refuse before it does. See
    /// [`LimiterBuilder::shadow`](crate::LimiterBuilder::shadow) for what is counted.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Limits, Reason};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let trial = limiter.with_limits(Limits::new().max_inflight(1).shadow(true));
    /// let first = trial.try_acquire("api.example").unwrap();
    /// assert!(first.shadow_rejection().is_none());
    /// let second = trial.try_acquire("api.example").expect("admitted in shadow");
    /// assert_eq!(second.shadow_rejection().unwrap().reason, Reason::Inflight);
    /// ```
    pub const fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// Whether these limits are judged in shadow (see [`shadow`](Self::shadow)).
    pub const fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The in-flight limit, if any: `None` when it is left out or turned off
    /// ([`no_inflight`](Self::no_inflight)).
    pub const fn inflight_limit(&self) -> Option<u32> {
        self.inflight.limit()
    }

    /// The rate limit (requests per the limiter's interval), if any: `None` when it is left
    /// out or turned off ([`no_rate`](Self::no_rate)).
    pub const fn rate_limit(&self) -> Option<u32> {
        self.rate.limit()
    }

    /// The kinds these limits leave out, of those a limiter counts (`inflight`, `rate`): the
    /// first, if any.
    pub(crate) fn left_out(&self, inflight: bool, rate: bool) -> Option<LimitKind> {
        if inflight && self.inflight.is_left_out() {
            return Some(LimitKind::Inflight);
        }
        (rate && self.rate.is_left_out()).then_some(LimitKind::Rate)
    }

    /// These limits with each kind they leave out taken from `defaults`.
    pub(crate) const fn or(self, defaults: Limits) -> Limits {
        Limits {
            inflight: self.inflight.or(defaults.inflight),
            rate: self.rate.or(defaults.rate),
            shadow: self.shadow,
        }
    }

    /// These limits with the kinds counted (`inflight`, `rate`) that have no limit turned off
    /// explicitly: the defaults of a limiter as it reports them.
    pub(crate) fn off_where_counted(mut self, inflight: bool, rate: bool) -> Limits {
        if inflight && self.inflight.limit().is_none() {
            self.inflight = Setting::Off;
        }
        if rate && self.rate.limit().is_none() {
            self.rate = Setting::Off;
        }
        self
    }
}

impl fmt::Debug for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limits")
            .field("max_inflight", &self.inflight)
            .field("max_rate", &self.rate)
            .field("shadow", &self.shadow)
            .finish()
    }
}

/// Limits with their promotion thresholds: what one decision is judged against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Thresholds {
    pub(crate) inflight: Option<InflightThreshold>,
    pub(crate) rate: Option<RateThreshold>,
}

/// The promotion thresholds of a set of limits, in one word: all that a request the sketches
/// admit alone needs of its limits (see `Defaults`, which keeps the defaults' in an atomic
/// word). The rate's threshold is an `f32` rounded down, so a key is hot no later than at its
/// exact threshold: fewer admissions by the sketch alone, never more (the exact stage's proofs
/// rest on a key admitted alone being below its threshold).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Promotion {
    /// The in-flight estimate that makes a key hot; `u32::MAX` (past every count) for none.
    inflight: u32,
    /// The sliding-window count that makes a key hot; infinite for none.
    rate: f32,
    /// Whether a key whose line shows no rate mark may be judged on its current window alone
    /// (see `quiet.rs`): set for the default limits that allow it, false otherwise.
    current_alone: bool,
}

/// The bit of [`Promotion::to_bits`] that holds `current_alone`: the rate threshold's sign
/// bit, free, since a threshold is never negative.
const CURRENT_ALONE_BIT: u64 = 1 << 63;

impl Promotion {
    /// As one word: the rate's bits above the in-flight threshold's, `current_alone` in the
    /// rate's sign bit.
    pub(crate) fn to_bits(self) -> u64 {
        let word = (u64::from(self.rate.to_bits()) << 32) | u64::from(self.inflight);
        debug_assert_eq!(word & CURRENT_ALONE_BIT, 0, "a negative rate threshold");
        if self.current_alone {
            word | CURRENT_ALONE_BIT
        } else {
            word
        }
    }

    /// From [`to_bits`](Self::to_bits).
    pub(crate) fn from_bits(word: u64) -> Self {
        Promotion {
            inflight: word as u32,
            rate: f32::from_bits(((word & !CURRENT_ALONE_BIT) >> 32) as u32),
            current_alone: word & CURRENT_ALONE_BIT != 0,
        }
    }

    /// These thresholds, saying whether a quiet line's key may be judged on its current
    /// window alone.
    pub(crate) fn with_current_alone(self, current_alone: bool) -> Self {
        Promotion {
            current_alone,
            ..self
        }
    }

    /// Whether a key whose line shows no rate mark may be judged on its current window alone.
    #[inline]
    pub(crate) fn current_alone(&self) -> bool {
        self.current_alone
    }

    /// Whether an in-flight estimate of `n` reaches its threshold.
    #[inline]
    pub(crate) fn inflight_reached(&self, n: isize) -> bool {
        n >= self.inflight as isize
    }

    /// The sliding-window count that makes a key hot.
    #[inline]
    pub(crate) fn rate(&self) -> f64 {
        f64::from(self.rate)
    }
}

/// The largest `f32` at most `x` (for `x` ≥ 0, finite or not).
fn f32_at_most(x: f64) -> f32 {
    let nearest = x as f32;
    if f64::from(nearest) > x {
        // Positive and finite (a nearest above a non-negative `x`): the next one down.
        f32::from_bits(nearest.to_bits() - 1)
    } else {
        nearest
    }
}

/// An in-flight limit and the estimate at which a key is promoted for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct InflightThreshold {
    pub(crate) limit: isize,
    pub(crate) promote_at: isize,
}

/// An in-flight limit alone and its promotion threshold, as one word: the limit above the
/// threshold, never 0 (see [`Thresholds::inflight_alone`]). The word is also the fingerprint a
/// promoted key's lane keeps of the limits it admits under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InflightAlone(u64);

impl InflightAlone {
    /// From [`bits`](Self::bits); `None` for 0 (no such limit).
    pub(crate) fn from_bits(bits: u64) -> Option<Self> {
        (bits >> 32 != 0).then_some(InflightAlone(bits))
    }

    /// The word (never 0).
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The in-flight limit.
    pub(crate) fn limit(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// Whether an in-flight estimate of `n` reaches the promotion threshold.
    pub(crate) fn promotes(self, n: isize) -> bool {
        n >= (self.0 as u32) as isize
    }
}

/// An in-flight limit and a rate limit, as one word: the in-flight limit above the rate
/// limit, never 0 (see [`Thresholds::both_limits`]). The word is also the fingerprint a
/// promoted key's lane keeps of the limits it admits and leases under. The promotion
/// thresholds are not in it, as they are in [`InflightAlone`]: nothing such a lane admits a
/// request by depends on them (whether its key has cooled down is judged under the lock, as
/// a lease's). A request of a plan that turns either kind off is decided under the lock,
/// where both are still counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BothLimits(u64);

impl BothLimits {
    /// From [`bits`](Self::bits); `None` for an in-flight limit of 0 (no such limits).
    pub(crate) fn from_bits(bits: u64) -> Option<Self> {
        (bits >> 32 != 0).then_some(BothLimits(bits))
    }

    /// The word (never 0).
    pub(crate) fn bits(self) -> u64 {
        self.0
    }

    /// The in-flight limit.
    pub(crate) fn inflight(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// The rate limit.
    pub(crate) fn rate(self) -> u32 {
        self.0 as u32
    }
}

/// A rate limit (per interval) and the sliding count at which a key is promoted for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RateThreshold {
    pub(crate) limit: isize,
    pub(crate) promote_at: f64,
    /// What the limit mixes into the over-limit cache's tags (see the `overlimit` module),
    /// and for limits judged in shadow, `SHADOW_MIX` too.
    pub(crate) tag_mix: u64,
    /// What the limit carries in a fleet (its share, whether the fleet's view is judged, how
    /// long a refusal is held); nothing without one.
    pub(crate) fleet: FleetRate,
}

impl Thresholds {
    /// `t` with its in-flight limit replaced by `limit` (a learnt one, at most `t`'s), its
    /// promotion threshold kept.
    pub(crate) fn with_inflight_limit(t: &Thresholds, limit: isize) -> Thresholds {
        let mut judged = *t;
        if let Some(inflight) = judged.inflight.as_mut() {
            inflight.limit = limit.min(inflight.limit);
        }
        judged
    }
}

impl RateThreshold {
    /// How long the over-limit cache may hold a refusal whose `retry_after` is `retry`.
    #[inline]
    pub(crate) fn held_for(&self, retry: u64) -> u64 {
        self.fleet.held_for(retry)
    }
}

impl Thresholds {
    /// The thresholds of `limits`, promoting at `promotion` (in (0, 1]) of each limit, at
    /// least 1 and at most the limit. Limits of 0 keep a threshold of 0: such keys are
    /// rejected before anything is counted. Limits in shadow have tags of their own in the
    /// over-limit cache.
    #[cfg(test)]
    pub(crate) fn new(limits: &Limits, promotion: f64) -> Self {
        Self::promoting(limits, promotion, promotion)
    }

    /// The thresholds of `limits`, as `new` (the tests' shorthand) gives them, with the
    /// in-flight limit promoting at `inflight_promotion` of it
    /// (where keys learning their in-flight limit start: `AdaptiveInflight::learn_from`).
    pub(crate) fn promoting(limits: &Limits, promotion: f64, inflight_promotion: f64) -> Self {
        // Judged in `isize`, as the sketches count (lossless: a limit past `Limits::MAX_LIMIT` is
        // refused before it is judged, and `u32` fits a 64-bit `isize` anyway).
        let judged = |limit: u32| isize::try_from(limit).unwrap_or(isize::MAX);
        Thresholds {
            inflight: limits
                .inflight_limit()
                .map(judged)
                .map(|limit| InflightThreshold {
                    limit,
                    promote_at: ((limit as f64 * inflight_promotion).ceil() as isize)
                        .clamp(1, limit.max(1)),
                }),
            rate: limits.rate_limit().map(judged).map(|limit| RateThreshold {
                tag_mix: super::overlimit::limit_mix(limit)
                    ^ if limits.shadow { SHADOW_MIX } else { 0 },
                fleet: FleetRate::NONE,
                limit,
                promote_at: (limit as f64 * promotion).max(1.0).min(limit.max(1) as f64),
            }),
        }
    }

    /// The rejection of a request of `cost` units that no count can admit, judged before
    /// anything is counted: every request under a limit of 0, and a cost over a limit (or
    /// over [`Limits::MAX_LIMIT`], which the counters cannot hold). For a request of one
    /// unit this is one comparison per limit.
    #[inline]
    pub(crate) fn refuses(&self, cost: u32) -> Option<Rejected> {
        let units = cost as isize; // lossless: `u32` fits a 64-bit `isize`
        let over = |limit: isize| limit < units.max(1);
        let inflight = self.inflight.is_some_and(|t| over(t.limit));
        let rate = self.rate.is_some_and(|t| over(t.limit));
        if inflight || rate || cost > Limits::MAX_LIMIT {
            return Some(self.refusal(cost));
        }
        None
    }

    /// [`refuses`](Self::refuses)'s rejection, out of the way of the requests it admits.
    #[cold]
    #[inline(never)]
    fn refusal(&self, cost: u32) -> Rejected {
        if let Some(t) = self.inflight.filter(|t| t.limit <= 0) {
            return Rejected::inflight(1, t.limit);
        }
        if let Some(t) = self.rate.filter(|t| t.limit <= 0) {
            return Rejected::never(t.limit);
        }
        // The tighter limit the cost is over; `MAX_LIMIT` for one over no limit.
        let limits = [self.inflight.map(|t| t.limit), self.rate.map(|t| t.limit)];
        let limit = limits.into_iter().flatten().min();
        let limit = limit.map_or(Limits::MAX_LIMIT, |l| l.clamp(0, u32::MAX as isize) as u32);
        Rejected::cost_over_limit(cost, limit.min(Limits::MAX_LIMIT))
    }

    /// The promotion thresholds, in one word (see [`Promotion`]).
    #[inline]
    pub(crate) fn promotion(&self) -> Promotion {
        Promotion {
            // A threshold is at most its limit, at most `Limits::MAX_LIMIT`: it fits.
            inflight: self.inflight.map_or(u32::MAX, |t| {
                t.promote_at.clamp(0, u32::MAX as isize) as u32
            }),
            rate: self
                .rate
                .map_or(f32::INFINITY, |t| f32_at_most(t.promote_at)),
            current_alone: false,
        }
    }

    /// The in-flight limit and its promotion threshold as one word, for thresholds that count
    /// units in flight alone (no rate limit): what a promoted key's lane admits under without
    /// the lock. `None` with a rate limit, without an in-flight one, or past `u32`.
    pub(crate) fn inflight_alone(&self) -> Option<InflightAlone> {
        if self.rate.is_some() {
            return None;
        }
        let inflight = self.inflight?;
        let limit = u32::try_from(inflight.limit).ok()?;
        let promote_at = u32::try_from(inflight.promote_at).ok()?;
        // The limit at least 1 (a limit of 0 is refused when thresholds are made): never 0.
        InflightAlone::from_bits((u64::from(limit) << 32) | u64::from(promote_at))
    }

    /// The in-flight limit and the rate limit as one word, for thresholds that count both: what
    /// a promoted key's lane admits in flight and leases rate units under without the lock.
    /// `None` without either, or past `u32`.
    pub(crate) fn both_limits(&self) -> Option<BothLimits> {
        let (inflight, rate) = self.inflight.zip(self.rate)?;
        let inflight = u32::try_from(inflight.limit).ok()?;
        let rate = u32::try_from(rate.limit).ok()?;
        BothLimits::from_bits((u64::from(inflight) << 32) | u64::from(rate))
    }

    /// The rate limit's over-limit tag mix and the limit, for a [`LimitTag`], if there is one.
    ///
    /// [`LimitTag`]: super::overlimit::LimitTag
    pub(crate) fn rate_tag(&self) -> Option<(u64, isize)> {
        self.rate.map(|rate| (rate.tag_mix, rate.limit))
    }

    /// The limits these thresholds were made from.
    pub(crate) fn limits(&self) -> Limits {
        let given = |limit: isize| Setting::Limit(u32::try_from(limit.max(0)).unwrap_or(u32::MAX));
        Limits {
            inflight: self.inflight.map_or(Setting::LeftOut, |t| given(t.limit)),
            rate: self.rate.map_or(Setting::LeftOut, |t| given(t.limit)),
            shadow: false,
        }
    }
}

/// A limit the counters can reach, or [`ConfigError::LimitTooLarge`].
fn check_limit(limit: Option<u32>) -> Result<(), ConfigError> {
    match limit {
        Some(limit) if limit > Limits::MAX_LIMIT => Err(ConfigError::LimitTooLarge {
            limit,
            max: Limits::MAX_LIMIT,
        }),
        _ => Ok(()),
    }
}

/// The checks of a limiter's default limits, at build and by `set_limits` alike: at least one
/// limit (none would limit nothing), each at least 1 (below, every key would be refused) and
/// at most [`Limits::MAX_LIMIT`].
pub(super) fn check_defaults(inflight: Option<u32>, rate: Option<u32>) -> Result<(), ConfigError> {
    if inflight.is_none() && rate.is_none() {
        return Err(ConfigError::InvalidLimit(
            "a limiter needs max_inflight, max_rate or both",
        ));
    }
    if inflight.is_some_and(|l| l < 1) {
        return Err(ConfigError::InvalidLimit("max_inflight must be at least 1"));
    }
    if rate.is_some_and(|l| l < 1) {
        return Err(ConfigError::InvalidLimit("max_rate must be at least 1"));
    }
    check_limit(inflight)?;
    check_limit(rate)
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn thresholds_follow_each_limit_and_stay_within_one_and_the_limit() {
        let t = Thresholds::new(&Limits::new().max_inflight(10).max_rate(7), 0.5);
        assert_eq!(t.inflight.map(|i| i.promote_at), Some(5));
        assert_eq!(t.rate.map(|r| r.promote_at), Some(3.5));
        let t = Thresholds::new(&Limits::new().max_inflight(1).max_rate(1), 0.1);
        assert_eq!(t.inflight.map(|i| i.promote_at), Some(1));
        assert_eq!(t.rate.map(|r| r.promote_at), Some(1.0));
        let t = Thresholds::new(&Limits::new().max_inflight(0).max_rate(0), 0.5);
        assert_eq!(t.limits(), Limits::new().max_inflight(0).max_rate(0));
        assert_eq!(Thresholds::new(&Limits::new(), 0.5).limits(), Limits::new());
    }

    /// The one word of promotion thresholds is hot no later than the thresholds themselves:
    /// its rate threshold is at most theirs (and equal where an `f32` holds it), its in-flight
    /// one equal; limits left unset are never reached.
    #[test]
    fn a_promotion_word_is_hot_no_later_than_its_thresholds() {
        for limit in [1, 3, 7, 10, 100, 333, 1_000_003, Limits::MAX_LIMIT] {
            for promotion in [0.1, 0.3, 0.5, 0.77, 1.0] {
                let t = Thresholds::new(
                    &Limits::new().max_inflight(limit).max_rate(limit),
                    promotion,
                );
                let word = Promotion::from_bits(t.promotion().to_bits());
                let rate = t.rate.unwrap().promote_at;
                assert!(
                    word.rate() <= rate,
                    "{limit} × {promotion}: {} > {rate}",
                    word.rate()
                );
                assert!(
                    rate - word.rate() <= rate * f64::from(f32::EPSILON),
                    "{limit} × {promotion}"
                );
                if rate == f64::from(rate as f32) {
                    assert_eq!(word.rate(), rate);
                }
                let inflight = t.inflight.unwrap().promote_at;
                assert!(word.inflight_reached(inflight) && !word.inflight_reached(inflight - 1));
            }
        }
        let none = Promotion::from_bits(Thresholds::new(&Limits::new(), 0.5).promotion().to_bits());
        assert!(!none.inflight_reached(Limits::MAX_LIMIT as isize * 2));
        assert!(none.rate().is_infinite());
    }
}
