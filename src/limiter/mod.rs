//! Per-key limits on requests in flight and on request rate, decided in two stages.
//!
//! # The decision
//!
//! Every request hashes its key once and counts itself in the sketches: the in-flight
//! [`Estimator`](crate::Estimator) (given back when the [`Permit`] drops) and the [`Rate`](crate::Rate) window. Then:
//!
//! 1. **Sketch stage.** If every estimate is below its promotion threshold (a fraction of the
//!    limit, 1/2 by default) and the key is not promoted, the request is admitted: no map, no
//!    lock, no allocation. The estimates never under-count, so a key admitted here is truly
//!    under its limits.
//! 2. **Exact stage.** A key whose estimate reaches the threshold is promoted into a bounded
//!    exact stage (see the `exact` module): from then on its requests are also counted
//!    exactly, and each decision uses the smaller of the sketch's estimate and what the exact
//!    stage can prove, so a key that merely shares sketch columns with a heavy one is not
//!    rejected for it. A promoted key that cools down is demoted, on the request path for its
//!    own key and by a sweep on the clock's thread for the rest. A key whose place in the
//!    exact stage is taken by keys with more evidence is decided by the sketch alone, which
//!    can reject more but never admits more.
//!
//! Before either stage, a key already rejected for its rate is looked up in the over-limit
//! cache (the `overlimit` module) and rejected until its `retry_after` has passed, without a
//! lock and without counting: the flood path is the cheapest path.
//!
//! A request is admitted only if, counting itself, its key's in-flight count stays at or below
//! `max_inflight` and its sliding-window rate (`prev·(1−f) + curr`, see
//! [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`](crate::rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN)) at or
//! below `max_rate` per interval. Rejected requests give their in-flight count back at once;
//! they stay counted in the rate sketch, which measures offered load, while the exact stage
//! counts admitted requests only.
//!
//! # Volume
//!
//! Each sketch counter carries about (requests per window) ÷ (columns) of other keys'
//! requests: the noise every estimate starts from. The sketches are sized from one knob in the
//! user's terms, [`LimiterBuilder::peak_rate`] (requests per second, all keys together), so
//! that at that rate the noise stays well under the promotion threshold: light keys then never
//! reach the exact stage, and a flood of invented keys cannot fill it. Past that point (more
//! traffic than the peak, or a limit too low for the volume) [`Limiter::stats`] reports the
//! noise against the threshold and `saturated`; decisions stay one-sided (never more than the
//! limit), but healthy keys may be refused.
//!
//! # Concurrency
//!
//! Sketch estimates are read after the request's own increment (see
//! [`Estimator`](crate::Estimator)'s `incr`), so of any number of concurrent requests at most `limit` see a
//! count at or below the limit. The exact stage decides under its set's lock. The
//! promotion handshake is described in the `exact` module.

mod adaptive;
mod builder;
mod counts;
mod decision;
mod defaults;
mod exact;
mod fleet;
mod inspect;
mod key_lines;
mod limits;
mod overlimit;
mod path;
mod permit;
mod promoted;
mod report;
mod sketches;
mod tally;
mod wait;
mod with_limits;

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::clock::{Registration, Tick, TimeSource, TICK_NANOS};
use crate::error::ConfigError;
use crate::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering};
use defaults::Defaults;
use exact::ExactStage;
use limits::{HighestRatePromotion, Thresholds};
pub(crate) use permit::Receipt;
use permit::Ticket;
use promoted::Promoted;
use sketches::Sketches;

pub use adaptive::{AdaptiveInflight, Outcome};
pub use builder::LimiterBuilder;
pub use limits::{LimitKind, Limits};
pub use permit::{OwnedPermit, Permit};
pub use report::{Estimate, Figure, HeavyHitter, InflightLimit, LimiterStats, Reason, Rejected};
pub use wait::Acquire;
use wait::Waiters;
pub use with_limits::WithLimits;

/// `stats().saturated` turns on when the noise reaches this fraction of a promotion
/// threshold: from there on, light keys start to look hot.
const SATURATED_AT: f64 = 0.5;

/// Per-key limits on requests in flight and request rate, for a proxy's origins.
///
/// Cloning is cheap and clones share one set of counts.
///
/// # Metrics
///
/// With the `metrics` feature, a limiter publishes through the
/// [`metrics`](https://docs.rs/metrics) facade to whatever recorder the application installed
/// (a Prometheus exporter, say; `examples/metrics.rs` serves one), each with the label
/// `limiter` = its [`name`](LimiterBuilder::name):
///
/// | metric | kind | what |
/// |---|---|---|
/// | `floodgate_requests_total` | counter | requests decided; labels `decision` = `admitted`, `refused` or `shadow_refused` (admitted in shadow), and `reason` = `none` (admitted), `inflight`, `rate`, `inflight_not_counted`, `rate_not_counted`, `limit_too_large` or `cost_over_limit` |
/// | `floodgate_near_limit_total` | counter | admitted requests of promoted keys whose count reached 80% of a limit (with the default promotion at half the limit, every key that gets there is promoted) |
/// | `floodgate_unkeyed_requests_total` | counter | requests the tower layer could not key (a `layer::ClientKey`'s request whose client cannot be told), by `then`: `refused` or `served` (unlimited); published once seen |
/// | `floodgate_exact_keys`, `floodgate_exact_capacity` | gauges | keys the exact stage holds, and can hold |
/// | `floodgate_waiting` | gauge | requests waiting for a permit |
/// | `floodgate_learning_keys`, `floodgate_learning_keys_held` | gauges | with [`LimiterBuilder::adaptive_inflight`]: keys whose in-flight limit is learnt from their latency, and of them those held below their `max_inflight` (slow origins); each key's learnt limit is in [`Limiter::heavy_hitters`], not in a series per key, whose label values would grow without bound |
/// | `floodgate_saturation` | gauge | label `kind` = `rate` or `inflight`: a sketch's noise against its promotion threshold; at 0.5 ([`LimiterStats::saturated`]) keys far under their limits start to look hot: size for a higher peak rate |
/// | `floodgate_fleet_connected`, `floodgate_fleet_nodes`, `floodgate_fleet_last_sync_age_seconds` | gauges | in a fleet: whether Redis answers, the nodes it counts, the time since the last sync |
///
/// The request path counts each decision in counters of its thread's own (a load and a store
/// on a line no other thread writes, no locked instruction; threads past 128 at once share
/// one, with a locked add). The limiter's clock sums them once a sweep (a rate window, at
/// most a second) and adds what was counted since its last publication to the recorder's
/// counters, so limiters that share a name add up. Install the recorder before the traffic:
/// what is published before it is installed goes to no recorder. Without the feature nothing
/// is counted.
///
/// # Examples
///
/// ```
/// use floodgate::{Limiter, Reason};
///
/// let limiter: Limiter<String> = Limiter::builder().max_inflight(2).build().unwrap();
/// let first = limiter.try_acquire("origin-a").unwrap();
/// let _second = limiter.try_acquire("origin-a").unwrap();
/// let rejected = limiter.try_acquire("origin-a").unwrap_err();
/// assert_eq!(rejected.reason, Reason::Inflight);
/// assert_eq!(rejected.limit, 2);
/// drop(first); // gives the slot back
/// assert!(limiter.try_acquire("origin-a").is_ok());
/// assert!(limiter.try_acquire("origin-b").is_ok(), "other origins are not affected");
/// ```
pub struct Limiter<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for Limiter<K> {
    fn clone(&self) -> Self {
        Limiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// What clones of a limiter and their permits share.
struct Shared<K> {
    sketches: Sketches,
    /// The default limits with their promotion thresholds, replaced whole by
    /// [`Limiter::set_limits`]: read whole, or a word of them (see `defaults.rs`).
    defaults: Defaults,
    /// The fraction of each limit at which a key is promoted.
    promotion: f64,
    /// The in-flight limits' promotion threshold, as a fraction of each: `promotion`, or where
    /// keys start learning their in-flight limit when that is lower.
    inflight_promotion: f64,
    /// Every decision in shadow, whatever a plan says: the defaults' [`Limits::shadow`],
    /// from [`LimiterBuilder::shadow`] or the last `set_limits`. Apart from `defaults`, so
    /// that the thresholds every request copies stay as small as they were; read only when a
    /// request is refused.
    shadow: AtomicBool,
    /// Serialises `set_limits`: its two stores (the flag and the thresholds) must not
    /// interleave with another's, or the last thresholds could be left with the other's flag.
    setting: Mutex<()>,
    /// How each hot key's in-flight limit is learnt from its latency
    /// ([`LimiterBuilder::adaptive_inflight`]; `None`: the configured limit, always).
    adaptive: Option<AdaptiveInflight>,
    /// The highest rate promotion threshold any decision was judged against so far.
    highest_rate_promotion: HighestRatePromotion,
    /// The decisions counted for the operator's metrics (feature `metrics`; nothing without).
    tally: tally::Tally,
    /// How long `heavy_hitters` lists a key after it left the exact stage (nanoseconds).
    retention: u64,
    exact: ExactStage<K, Promoted>,
    /// Requests waiting for a permit ([`Limiter::acquire`]).
    waiters: Waiters,
    /// The fleet this limiter holds its rate limit with (feature `redis`; none without).
    fleet: fleet::Fleet,
    /// The clock the rate windows, the over-limit deadlines and the sweep follow.
    time: TimeSource,
    /// The unit the over-limit cache keeps deadlines in, for the rate windows' longest wait.
    deadline_unit: overlimit::Unit,
    /// The sweep's registration with `time`, cancelled on drop.
    registration: Registration,
    /// Keeps the sweep alive for as long as the limiter: the clock holds only a weak
    /// reference to it.
    _sweeper: Arc<Sweeper<K>>,
}

/// The limiter's periodic work on its clock's thread: the exact stage's sweep, clearing the
/// over-limit deadlines that have passed, and waking the waiters that are due.
struct Sweeper<K> {
    shared: Weak<Shared<K>>,
    /// Nanoseconds between sweeps: an epoch of the exact stage.
    period: u64,
    /// When the next sweep is due (nanoseconds on the limiter's clock). Only the clock's
    /// thread reads and writes it (ticks are serialised): `Relaxed`.
    next_sweep: AtomicU64,
}

impl<K: Send + Sync> Tick for Sweeper<K> {
    fn tick(&self, now: u64) -> u64 {
        // Not yet built (registered from inside `Arc::new_cyclic`), or being dropped.
        let Some(shared) = self.shared.upgrade() else {
            return now.saturating_add(self.period);
        };
        let mut next_sweep = self.next_sweep.load(Ordering::Relaxed);
        if now >= next_sweep {
            shared.sweep_exact();
            shared.over_limit().forget_expired(now);
            if tally::Tally::ON {
                shared.tally.publish(&shared.gauges());
            }
            next_sweep = now.saturating_add(self.period);
            self.next_sweep.store(next_sweep, Ordering::Relaxed);
        }
        let next_waiter = shared.waiters.fire(now).saturating_mul(TICK_NANOS);
        next_sweep.min(next_waiter)
    }
}

impl<K> Drop for Shared<K> {
    fn drop(&mut self) {
        self.time.cancel(self.registration);
    }
}

impl<K> Limiter<K>
where
    K: Hash + Eq + Send + Sync,
{
    /// A builder with no limits set yet; set `max_inflight`, `max_rate` or both.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<u64> =
    ///     floodgate::Limiter::builder().max_inflight(3).build().unwrap();
    /// assert_eq!(limiter.estimate(&7u64).inflight, Some(0));
    /// ```
    pub fn builder() -> LimiterBuilder<K> {
        LimiterBuilder::new()
    }

    /// Admits a request for `key` and returns a permit that holds its in-flight slot until
    /// dropped, or says which limit it would exceed.
    ///
    /// Never panics. Below the promotion threshold: one hash, the sketch updates, one filter
    /// load; no lock, no allocation.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the request would take the key over a limit.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(1).build().unwrap();
    /// let permit = limiter.try_acquire("origin").unwrap();
    /// assert!(limiter.try_acquire("origin").is_err());
    /// drop(permit);
    /// assert!(limiter.try_acquire("origin").is_ok());
    /// ```
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<Permit<'_, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = &*self.shared;
        shared.acquire_one(key, |ticket, _| Permit { shared, ticket })
    }

    /// As [`try_acquire`](Self::try_acquire), but the permit owns a reference to the limiter,
    /// for requests that outlive any borrow (a spawned task, a response body).
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the request would take the key over a limit.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(1).build().unwrap();
    /// let permit = limiter.try_acquire_owned("origin").unwrap();
    /// assert!(limiter.try_acquire("origin").is_err());
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert!(limiter.try_acquire("origin").is_ok());
    /// ```
    pub fn try_acquire_owned<Q>(&self, key: &Q) -> Result<OwnedPermit<K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = &self.shared;
        shared.acquire_one(key, |ticket, _| OwnedPermit::new(shared, ticket))
    }

    /// The same admissions against the key's own `limits` instead of the limiter's defaults:
    /// a customer's plan, say. See [`WithLimits`].
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let free = Limits::new().max_inflight(1);
    /// let permit = limiter.with_limits(free).try_acquire("free.example").unwrap();
    /// assert!(limiter.with_limits(free).try_acquire("free.example").is_err());
    /// assert!(limiter.try_acquire("free.example").is_ok(), "the defaults allow more");
    /// # drop(permit);
    /// ```
    pub fn with_limits(&self, limits: Limits) -> WithLimits<'_, K> {
        WithLimits {
            limiter: self,
            limits: Some(limits),
            cost: 1,
        }
    }

    /// One decision for a request judged against several keys: admits `key` against the
    /// default limits, then asks `rest`, and takes this admission back if `rest` refuses. See
    /// [`WithLimits::try_acquire_and`], which says what is taken back and what a refused
    /// request can cost.
    ///
    /// # Errors
    ///
    /// This key's [`Rejected`], or `rest`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Reason};
    ///
    /// // Per origin and per customer, in one limiter: keys of two kinds.
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(2).build().unwrap();
    /// let _busy = limiter.try_acquire("customer:7").unwrap();
    /// let _busier = limiter.try_acquire("customer:7").unwrap();
    /// let refused = limiter.try_acquire_and("origin:a", || limiter.try_acquire("customer:7"));
    /// assert_eq!(refused.unwrap_err().reason, Reason::Inflight);
    /// assert_eq!(limiter.estimate("origin:a").inflight, Some(0), "the origin gave it back");
    /// ```
    pub fn try_acquire_and<Q, R>(
        &self,
        key: &Q,
        rest: impl FnOnce() -> Result<R, Rejected>,
    ) -> Result<(Permit<'_, K>, R), Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.with_cost(1).try_acquire_and(key, rest)
    }

    /// As [`try_acquire_and`](Self::try_acquire_and), with a permit that owns a reference to
    /// the limiter.
    ///
    /// # Errors
    ///
    /// This key's [`Rejected`], or `rest`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::Limiter;
    ///
    /// let hosts: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let clients: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let (host, client) = hosts
    ///     .try_acquire_owned_and("api.example", || clients.try_acquire_owned("client"))
    ///     .unwrap();
    /// let refused = hosts.try_acquire_owned_and("api.example", || clients.try_acquire_owned("client"));
    /// assert!(refused.is_err(), "the client's one slot is held");
    /// assert_eq!(hosts.estimate("api.example").inflight, Some(1), "taken back");
    /// drop((host, client));
    /// ```
    pub fn try_acquire_owned_and<Q, R>(
        &self,
        key: &Q,
        rest: impl FnOnce() -> Result<R, Rejected>,
    ) -> Result<(OwnedPermit<K>, R), Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.with_cost(1).try_acquire_owned_and(key, rest)
    }

    /// The same admissions for a request that counts `cost` units (its bytes, its tokens)
    /// against the limiter's defaults, as they are at each admission. See
    /// [`WithLimits::cost`], which says what a cost counts and what a refusal leaves.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Reason};
    ///
    /// // Up to 10 units in flight per key: 4 + 6 fit, 1 more does not.
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let four = limiter.with_cost(4).try_acquire("origin").unwrap();
    /// let six = limiter.with_cost(6).try_acquire("origin").unwrap();
    /// assert_eq!(limiter.try_acquire("origin").unwrap_err().reason, Reason::Inflight);
    /// drop(six); // its 6 units come back together
    /// assert_eq!(limiter.estimate("origin").inflight, Some(4));
    /// # drop(four);
    /// ```
    pub fn with_cost(&self, cost: u32) -> WithLimits<'_, K> {
        WithLimits {
            limiter: self,
            limits: None,
            cost,
        }
    }

    /// [`try_acquire_owned`](Self::try_acquire_owned) of `cost` units, where it was counted
    /// (for the layer to take it back if an inner layer refuses the request), and the default
    /// limits it was judged against (read once: a `set_limits` meanwhile cannot make them
    /// disagree), for the layer's fields.
    #[cfg(feature = "tower")]
    pub(crate) fn try_acquire_owned_judged<Q>(
        &self,
        key: &Q,
        cost: u32,
    ) -> (Result<(OwnedPermit<K>, Receipt), Rejected>, Limits)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let thresholds = self.shared.defaults.load();
        let result = self
            .shared
            .acquire(key, cost, &thresholds, false, |ticket, receipt| {
                (OwnedPermit::new(&self.shared, ticket), receipt)
            });
        (result, thresholds.limits())
    }

    /// Replaces the default limits (those of [`try_acquire`](Self::try_acquire)) of a running
    /// limiter. The next decision on every thread sees them, whole: a decision never mixes
    /// an old in-flight limit with a new rate limit. Permits already given are not taken
    /// back; a key now over its lower limit is rejected until it is under it again.
    ///
    /// A push names every kind the limiter counts: a limit, or that there is none
    /// ([`Limits::no_inflight`], [`Limits::no_rate`]). One that leaves a kind out is refused
    /// rather than taken as "no limit" of it: a push of new in-flight limits alone would
    /// otherwise turn the rate limit off, unsaid. What is pushed of the kinds the limiter
    /// counts is what [`limits`](Self::limits) then reads, nothing kept from before (a kind it
    /// does not count reads as left out, whatever the push said of it).
    ///
    /// # Errors
    ///
    /// The defaults are checked as [`LimiterBuilder::build`] checks them, and are left
    /// unchanged on an error: [`ConfigError::InvalidLimit`] when `limits` has no limit at all
    /// (it would limit nothing, every kind left out or turned off), a limit below 1 (it would
    /// refuse every key), or a kind the limiter does not count (its builder set no
    /// `max_inflight`, or no `max_rate`); [`ConfigError::LimitLeftOut`] naming a kind the
    /// limiter counts that `limits` leaves out;
    /// [`ConfigError::LimitTooLarge`] above [`Limits::MAX_LIMIT`]; with
    /// [`LimiterBuilder::adaptive_inflight`], [`ConfigError::InvalidAdaptive`] without a
    /// `max_inflight` or with one under the floor. A key's own limit of 0, through
    /// [`with_limits`](Self::with_limits), still refuses that key (and a key's own
    /// `max_inflight` under the floor caps its learnt limit).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let _first = limiter.try_acquire("origin").unwrap();
    /// assert!(limiter.try_acquire("origin").is_err());
    ///
    /// limiter.set_limits(Limits::new().max_inflight(2)).unwrap();
    /// assert_eq!(limiter.limits(), Limits::new().max_inflight(2));
    /// let _second = limiter.try_acquire("origin").unwrap();
    ///
    /// assert!(limiter.set_limits(Limits::new().max_rate(10)).is_err(), "no rate is counted");
    /// assert_eq!(limiter.limits(), Limits::new().max_inflight(2));
    /// ```
    ///
    /// A limiter that counts both kinds is told about both:
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{ConfigError, LimitKind, Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_inflight(10)
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .build()
    ///     .unwrap();
    /// let partial = limiter.set_limits(Limits::new().max_inflight(1000));
    /// assert_eq!(partial, Err(ConfigError::LimitLeftOut { kind: LimitKind::Rate }));
    /// assert_eq!(limiter.limits().rate_limit(), Some(100), "still limited");
    ///
    /// limiter.set_limits(Limits::new().max_inflight(1000).max_rate(100)).unwrap();
    /// limiter.set_limits(Limits::new().max_inflight(1000).no_rate()).unwrap();
    /// assert_eq!(limiter.limits().rate_limit(), None, "turned off, as said");
    /// ```
    pub fn set_limits(&self, limits: Limits) -> Result<(), ConfigError> {
        let sketches = &self.shared.sketches;
        let counted = (sketches.inflight.is_some(), sketches.rate.is_some());
        // A push of no limit that turns one kind off and leaves a counted kind out is told of
        // the kind it left out first: that is what its sender missed. (A push that says
        // nothing at all is told it limits nothing, as the builder says.)
        let said_nothing =
            limits.left_out(true, false).is_some() && limits.left_out(false, true).is_some();
        if limits.inflight_limit().is_none() && limits.rate_limit().is_none() && !said_nothing {
            if let Some(kind) = limits.left_out(counted.0, counted.1) {
                return Err(ConfigError::LimitLeftOut { kind });
            }
        }
        builder::check_defaults(limits.inflight_limit(), limits.rate_limit())?;
        // The builder's check of a learnt in-flight limit against its ceiling, too.
        if let Some(adaptive) = &self.shared.adaptive {
            adaptive.check(limits.inflight_limit())?;
        }
        // Checked above: the only refusal left is a kind the limiter does not count.
        let thresholds = self.shared.thresholds(&limits).map_err(|rejected| {
            ConfigError::InvalidLimit(match rejected.reason {
                Reason::RateNotCounted => {
                    "this limiter counts no rate: build it with max_rate to set rate limits"
                }
                _ => {
                    "this limiter counts no requests in flight: build it with max_inflight \
                      to set in-flight limits"
                }
            })
        })?;
        // Every kind counted named: a limit, or none said (`Limits::no_rate`).
        if let Some(kind) = limits.left_out(counted.0, counted.1) {
            return Err(ConfigError::LimitLeftOut { kind });
        }
        // The two stores are ordered so that no decision enforces a limit in shadow before
        // or after: into shadow, the flag first, so that a decision reading the new
        // thresholds (whose seqlock read acquires what was written before them) reads it
        // too; out of shadow, the flag last, so that the new limits are in shadow at first.
        let shadow = limits.is_shadow();
        let _setting = lock(&self.shared.setting);
        if shadow {
            self.shared.shadow.store(true, Ordering::Release);
        }
        self.shared.defaults.store(thresholds);
        if !shadow {
            self.shared.shadow.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// The default limits: the builder's, or the last [`set_limits`](Self::set_limits).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(8).build().unwrap();
    /// assert_eq!(limiter.limits(), Limits::new().max_inflight(8));
    /// ```
    pub fn limits(&self) -> Limits {
        let limits = self.shared.defaults_now();
        limits.shadow(self.shared.shadow.load(Ordering::Relaxed))
    }

    /// A key's own `limits` as they are judged now: the kinds they leave out, the defaults'.
    #[cfg(feature = "tower")]
    pub(crate) fn plan_of(&self, limits: Limits) -> Limits {
        self.shared.plan(limits)
    }

    /// The interval that rate limits count requests per, if the limiter counts a rate.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// let limiter: Limiter<String> =
    ///     Limiter::builder().max_rate(100, Duration::from_secs(60)).build().unwrap();
    /// assert_eq!(limiter.rate_interval(), Some(Duration::from_secs(60)));
    /// ```
    pub fn rate_interval(&self) -> Option<Duration> {
        self.shared
            .sketches
            .rate
            .as_ref()
            .map(crate::Rate::interval)
    }
}

impl<K> Limiter<K> {
    /// Counts in the metrics a request the tower layer could not key, refused or `served`
    /// unlimited (feature `metrics`; nothing without).
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    pub(crate) fn count_unkeyed(&self, served: bool) {
        self.shared.tally.unkeyed(served);
    }
}

impl<K> std::fmt::Debug for Limiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limits = self.shared.defaults.load().limits();
        f.debug_struct("Limiter")
            .field("max_inflight", &limits.inflight_limit())
            .field("max_rate", &limits.rate_limit())
            .field(
                "interval",
                &self
                    .shared
                    .sketches
                    .rate
                    .as_ref()
                    .map(crate::Rate::interval),
            )
            .finish_non_exhaustive()
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// The thresholds of a key's own `limits`, or the rejection of a limit of a kind this
    /// limiter does not count.
    fn thresholds(&self, limits: &Limits) -> Result<Thresholds, Rejected> {
        let thresholds = self.thresholds_unnoted(limits)?;
        if self.sketches.rate.is_some() {
            self.highest_rate_promotion.note(&thresholds);
        }
        Ok(thresholds)
    }

    /// What the promotion threshold proves of a key that the exact stage promotes (see
    /// [`HighestRatePromotion::proven`]); `None` in a fleet, whose shares and views the proof
    /// does not cover.
    fn proven_by_threshold(&self) -> Option<isize> {
        if self.fleet.is_joined() {
            return None;
        }
        self.highest_rate_promotion.proven()
    }

    /// [`thresholds`](Self::thresholds) without raising the highest promotion threshold.
    fn thresholds_unnoted(&self, limits: &Limits) -> Result<Thresholds, Rejected> {
        if let (Some(limit), None) = (limits.inflight_limit(), &self.sketches.inflight) {
            return Err(Rejected::not_counted(Reason::InflightNotCounted, limit));
        }
        if let (Some(limit), None) = (limits.rate_limit(), &self.sketches.rate) {
            return Err(Rejected::not_counted(Reason::RateNotCounted, limit));
        }
        for limit in [limits.inflight_limit(), limits.rate_limit()] {
            if let Some(limit) = limit.filter(|&l| l > Limits::MAX_LIMIT) {
                return Err(Rejected::not_counted(Reason::LimitTooLarge, limit));
            }
        }
        Ok(Thresholds::promoting(
            limits,
            self.promotion,
            self.inflight_promotion,
        ))
    }

    /// A plan's `limits` as they are judged: each kind they leave out (of those counted) the
    /// defaults' of the moment, and in shadow if they say so or the whole limiter is (so that
    /// their thresholds have the shadow's tags in the over-limit cache). The defaults are read
    /// only for a plan that leaves a kind out.
    pub(super) fn plan(&self, limits: Limits) -> Limits {
        let counted = (
            self.sketches.inflight.is_some(),
            self.sketches.rate.is_some(),
        );
        let limits = match limits.left_out(counted.0, counted.1) {
            Some(_) => limits.or(self.defaults_now()),
            None => limits,
        };
        limits.shadow(limits.is_shadow() || self.shadow.load(Ordering::Relaxed))
    }

    /// The default limits now, each kind counted named: a limit, or none said.
    fn defaults_now(&self) -> Limits {
        let limits = self.defaults.load().limits();
        limits.off_where_counted(
            self.sketches.inflight.is_some(),
            self.sketches.rate.is_some(),
        )
    }

    /// Counts a waiting request's answer in the metrics (its attempts were not counted).
    pub(super) fn count_answer(&self, answer: &Result<OwnedPermit<K>, Rejected>) {
        match answer {
            Ok(permit) => match permit.shadow_rejection() {
                Some(rejected) => self.tally.refused(rejected, true),
                None => self.tally.admitted(),
            },
            Err(rejected) => self.tally.refused(rejected, false),
        }
    }

    /// Whether a decision is in shadow: its plan's limits are (`plan_shadow`), or the whole
    /// limiter is. Read only when a request is refused.
    #[inline]
    pub(super) fn in_shadow(&self, plan_shadow: bool) -> bool {
        // Relaxed: see `Limiter::set_limits` for the order of the stores this reads.
        plan_shadow || self.shadow.load(Ordering::Relaxed)
    }

    /// Whether a request of cost 0 under limits `t` is admitted at once, counting nothing: it
    /// is, unless a limit is 0 (then it is decided, and refused, as any other). Counted in the
    /// metrics when `counted`.
    pub(super) fn admits_for_nothing(&self, t: &Thresholds, counted: bool) -> bool {
        let free = t.refuses(0).is_none();
        if free && counted {
            self.tally.admitted();
        }
        free
    }

    /// A request refused before anything was counted (limits the limiter cannot judge, or
    /// of 0): in shadow, an admission that says so.
    #[cold]
    pub(super) fn refused_uncounted<P>(
        &self,
        plan_shadow: bool,
        counted: bool,
        rejected: Rejected,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected> {
        let shadow = self.in_shadow(plan_shadow);
        if counted {
            self.tally.refused(&rejected, shadow);
        }
        if shadow {
            permit::shadow_admission(rejected, permit)
        } else {
            Err(rejected)
        }
    }
}
