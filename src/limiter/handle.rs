//! [`Limiter`]: the handle a proxy holds, and the admissions it asks for.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::limits::check_defaults;
use super::shared::Shared;
#[cfg(feature = "tower")]
use super::ticket::Receipt;
use super::{Acquire, Limits, OwnedPermit, Permit, Reason, Rejected, WithLimits};
#[cfg(doc)]
use super::{LimiterBuilder, LimiterStats};
use crate::error::ConfigError;
use crate::sync::lock;
use crate::sync::Ordering;

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
    pub(super) shared: Arc<Shared<K>>,
}

impl<K> Clone for Limiter<K> {
    fn clone(&self) -> Self {
        Limiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> Limiter<K>
where
    K: Hash + Eq + Send + Sync,
{
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

    /// Admits a request for `key`, waiting up to `max_wait` for room instead of being
    /// refused: governor's `until_key_ready`, nginx's `limit_req … delay`, with a deadline.
    ///
    /// The first attempt is made now, in this call: a request with room gets its permit at
    /// once (the future is then ready at its first poll) and allocates nothing, unless
    /// requests of its key (or, rarely, of another key sharing its counter of waiters) are
    /// waiting: then it joins the end of their line when first polled, and tries when its
    /// turn comes (at once, if it finds no line). Otherwise the future parks the request
    /// until a permit of its key comes back (in flight), its rate window has room (the time
    /// its rejection's `retry_after` gives), or `max_wait` passes (from this call: never
    /// early, and given up by the clock's first pass after it, a tick of 10 ms later at most
    /// while the clock's thread gets a CPU in time); then
    /// it resolves to the last rejection. A rate rejection whose `retry_after` is beyond `max_wait` is returned at
    /// once, as are rejections no waiting can help (a limit of 0, a kind not counted), and
    /// requests beyond the waiters the limiter allows
    /// ([`max_waiters`](crate::LimiterBuilder::max_waiters),
    /// [`max_waiters_per_key`](crate::LimiterBuilder::max_waiters_per_key)). A request that
    /// waits copies its key, which the future owns while it waits:
    /// [`acquire_owned_key`](Self::acquire_owned_key) takes an owned key instead.
    ///
    /// No timer per waiter and no runtime: the limiter's clock wakes the waiters that are due,
    /// through their wakers, on any executor. With the shared clock, a waiter wakes within
    /// about two ticks of its room; with a [`ManualClock`](crate::clock::ManualClock), in the
    /// `advance` that reaches it. Waiters of one key are served in arrival order (a new
    /// `acquire` for a key that has waiters queues behind them), and each permit that comes
    /// back wakes one waiter. A key the exact stage holds no place for is judged by the
    /// sketch, whose counters it shares with other keys (the sketch may refuse more, never
    /// admit more): a request of another key sharing them can take the room a release of
    /// this key left: the waiter then tries again on the clock, 1, 2, 4, 8 and then every 16
    /// ticks after, until it is admitted, its key's next permit comes back, or its deadline.
    /// A waiter refused only because other keys' permits fill its counters, with none of its
    /// key's own in flight, is woken by no release: it waits for its deadline.
    /// Dropping the future (a cancelled request, a `select!` that took
    /// another branch) takes the waiter out of the line at once; if it had been woken for a
    /// permit, the turn passes to the next waiter.
    ///
    /// Without an explicit `Limits`, each attempt is judged against the defaults current at
    /// that attempt (see [`set_limits`](Self::set_limits)). Waiters of one key are served in
    /// one line whatever their limits: a waiter under a lower limit of its own than those
    /// behind it holds their turn until it is admitted or gives up.
    ///
    /// # Errors
    ///
    /// The future resolves to the [`Rejected`] of the last attempt when the request could not
    /// be admitted in time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let first = limiter.try_acquire_owned("origin").unwrap();
    ///
    /// // The second request waits for the first to finish instead of being refused.
    /// let waiting = limiter.acquire("origin", Duration::from_secs(5));
    /// let finish = tokio::spawn(async move { drop(first) });
    /// let second = waiting.await.expect("admitted when the first permit came back");
    /// finish.await.unwrap();
    ///
    /// // With no permit coming back, it gives up after max_wait (never before it, and on the
    /// // clock's first 10 ms tick after it).
    /// let rejected = limiter.acquire("origin", Duration::from_millis(20)).await.unwrap_err();
    /// assert_eq!(rejected.limit, 1);
    /// drop(second);
    /// # }
    /// ```
    pub fn acquire<Q>(&self, key: &Q, max_wait: Duration) -> Acquire<K>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Acquire::start(&self.shared, key, None, 1, max_wait)
    }

    /// [`acquire`](Self::acquire) with the key given by value: the future keeps it for its
    /// attempts while it waits, where `acquire` copies a borrowed key once it must wait (a
    /// `String` key: an allocation when the request parks, a free when it leaves). For a
    /// caller that owns the request's key already, as a proxy that builds it from each
    /// request does. The same decisions, in the same line, as `acquire`. The key is dropped
    /// with the future: a caller that needs it afterwards (for its log line) keeps a copy, or
    /// calls `acquire`. (The exact stage keeps a copy of a key it promotes, as for any
    /// request.)
    ///
    /// # Errors
    ///
    /// The future resolves to the [`Rejected`] of the last attempt when the request could not
    /// be admitted in time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let first = limiter.try_acquire_owned("origin").unwrap();
    ///
    /// let key = String::from("origin"); // built from the request
    /// let waiting = limiter.acquire_owned_key(key, Duration::from_secs(5));
    /// let finish = tokio::spawn(async move { drop(first) });
    /// let _second = waiting.await.expect("admitted when the first permit came back");
    /// finish.await.unwrap();
    /// # }
    /// ```
    pub fn acquire_owned_key(&self, key: K, max_wait: Duration) -> Acquire<K>
    where
        K: Clone,
    {
        Acquire::start_owned(&self.shared, key, None, 1, max_wait)
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
            shared: &self.shared,
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
            shared: &self.shared,
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
        check_defaults(limits.inflight_limit(), limits.rate_limit())?;
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
        std::fmt::Debug::fmt(&*self.shared, f)
    }
}
