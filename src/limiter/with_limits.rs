//! [`WithLimits`]: a limiter's admissions judged against a key's own limits, or for a
//! request with a cost.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::shared::Shared;
use super::ticket::{Receipt, Ticket};
#[cfg(doc)]
use super::Limiter;
use super::{Acquire, Limits, OwnedPermit, Permit, Rejected};

/// A [`Limiter`] judging requests against given [`Limits`] instead of its defaults (a
/// customer's plan, say), from [`Limiter::with_limits`], or counting a [`cost`](Self::cost)
/// of several units per request, from [`Limiter::with_cost`] (or both): the same three
/// admissions, one way to say "these limits" and "this cost" for each.
///
/// The promotion thresholds follow these limits, so with a sketch that tells keys apart each
/// key is admitted exactly up to its own limit. The kinds counted (in flight, rate, and the
/// rate's interval) are the limiter's: a limit of a kind it does not count is rejected with
/// [`Reason::InflightNotCounted`](super::Reason::InflightNotCounted) or
/// [`Reason::RateNotCounted`](super::Reason::RateNotCounted). A kind the limits leave out is
/// judged against the limiter's default of it, as it is at each admission; a kind turned off
/// ([`Limits::no_inflight`], [`Limits::no_rate`]) is not limited (still counted). A limit of 0
/// rejects every request, uncounted.
///
/// The limits are checked at each admission, as the limiter's defaults are at build: a limit
/// above [`Limits::MAX_LIMIT`] is rejected with
/// [`Reason::LimitTooLarge`](super::Reason::LimitTooLarge).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Limiter, Limits, Reason};
///
/// let clock = ManualClock::new();
/// let limiter: Limiter<String> = Limiter::builder()
///     .max_rate(10, Duration::from_secs(1))
///     .clock(&clock)
///     .build()
///     .unwrap();
/// let free = limiter.with_limits(Limits::new().max_rate(2));
/// drop(free.try_acquire("free.example").unwrap());
/// drop(free.try_acquire("free.example").unwrap());
/// let rejected = free.try_acquire("free.example").unwrap_err();
/// assert_eq!((rejected.reason, rejected.limit), (Reason::Rate, 2));
///
/// // This limiter counts no requests in flight: an in-flight limit is refused, clearly.
/// let wrong = limiter.with_limits(Limits::new().max_inflight(5));
/// let rejected = wrong.try_acquire("other.example").unwrap_err();
/// assert_eq!(rejected.reason, Reason::InflightNotCounted);
/// ```
pub struct WithLimits<'a, K> {
    pub(super) shared: &'a Arc<Shared<K>>,
    /// `None`: the limiter's defaults at each admission.
    pub(super) limits: Option<Limits>,
    /// Units each admission counts.
    pub(super) cost: u32,
}

impl<K> Clone for WithLimits<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for WithLimits<'_, K> {}

impl<K> std::fmt::Debug for WithLimits<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WithLimits")
            .field("limiter", &**self.shared)
            .field("limits", &self.limits)
            .field("cost", &self.cost)
            .finish()
    }
}

impl<'a, K> WithLimits<'a, K>
where
    K: Hash + Eq,
{
    /// Each request counts `cost` units (its bytes, its tokens, its weight) in every limit it
    /// meets instead of 1: in flight and per interval.
    ///
    /// - A request is admitted only if all its units fit: a request of 6 units where 4 are
    ///   left is refused whole, and takes none of the 4.
    /// - A refusal gives its in-flight units back at once, and leaves nothing in the exact
    ///   counts a key near its limit is judged by: a retry is judged as if it were the first
    ///   attempt. Like every refused request, it stays counted (all its units) in the rate
    ///   sketch, which measures offered load; a key that sketch alone decides (when the exact
    ///   stage has no room for it) can be refused more for it, never admitted more.
    /// - The permit gives its in-flight units back together when dropped.
    /// - A cost over one of the limits (or over [`Limits::MAX_LIMIT`]) can never fit: it is
    ///   refused at once with [`Reason::CostOverLimit`](super::Reason::CostOverLimit),
    ///   counted nowhere, and no [`acquire`](Self::acquire) waits for it.
    /// - A cost of 0 counts nothing and holds nothing: it is admitted at once (but under a
    ///   limit of 0, which refuses every request).
    /// - A key's in-flight counts are exact up to 2^31 units, twice the largest limit, so a
    ///   permit gives back exactly what it took, whatever its cost. A request they cannot hold
    ///   on top of what they hold (only with the in-flight limit turned off, at more than
    ///   [`Limits::MAX_LIMIT`] units in flight) is refused with
    ///   [`Reason::Inflight`](super::Reason::Inflight) over its limit, or over `MAX_LIMIT`
    ///   without one, and counted nowhere in flight.
    /// - A rate rejection's `retry_after` is the time until this cost fits. Until then the
    ///   over-limit cache refuses the key's requests of this cost without counting them (a
    ///   flood of them costs what a flood of single requests does); requests of other costs
    ///   are decided the usual way (a smaller one may fit sooner).
    ///
    /// The promotion threshold compares the key's units with a fraction of its limits, as it
    /// compares requests: keys whose requests cost more reach the exact stage sooner.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, Limits, Reason};
    ///
    /// // 1,000 bytes a second per client.
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_rate(1_000, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// drop(limiter.with_cost(700).try_acquire("client").unwrap());
    /// let rejected = limiter.with_cost(400).try_acquire("client").unwrap_err();
    /// assert_eq!(rejected.reason, Reason::Rate);
    /// // The refused 400 took nothing: 300 bytes are still there.
    /// drop(limiter.with_cost(300).try_acquire("client").unwrap());
    ///
    /// // More than the limit can never fit, and is not counted.
    /// let plan = Limits::new().max_rate(100);
    /// let rejected = limiter.with_limits(plan).cost(101).try_acquire("other").unwrap_err();
    /// assert_eq!((rejected.reason, rejected.retry_after), (Reason::CostOverLimit, None));
    /// ```
    #[must_use]
    pub fn cost(self, cost: u32) -> Self {
        WithLimits { cost, ..self }
    }

    /// As [`Limiter::try_acquire`], against these limits and for this cost.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the request would take the key over one of these limits, when they
    /// have a kind the limiter does not count, or when the cost is over one of them.
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<Permit<'a, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared: &Shared<K> = self.shared;
        self.decide(shared, key, |ticket, _| Permit { shared, ticket })
    }

    /// As [`Limiter::try_acquire_owned`], against these limits.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub fn try_acquire_owned<Q>(&self, key: &Q) -> Result<OwnedPermit<K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = self.shared;
        self.decide(shared, key, |ticket, _| OwnedPermit::new(shared, ticket))
    }

    /// [`try_acquire_owned`](Self::try_acquire_owned), and where it was counted, for the layer
    /// to take it back if an inner layer refuses the request.
    #[cfg(feature = "tower")]
    pub(crate) fn try_acquire_owned_receipted<Q>(
        &self,
        key: &Q,
    ) -> Result<(OwnedPermit<K>, Receipt), Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = self.shared;
        self.decide(shared, key, |ticket, receipt| {
            (OwnedPermit::new(shared, ticket), receipt)
        })
    }

    /// One decision for a request judged against several keys: admits `key` here, then asks
    /// `rest` (the other keys' admissions, of this limiter or others), and returns both
    /// answers if every key admits the request.
    ///
    /// If `key` refuses, `rest` is not asked: the other keys are charged nothing. If `rest`
    /// refuses, its rejection is returned and this key's admission is taken back at once:
    /// - its in-flight units come back (the permit is dropped);
    /// - its rate units leave the exact counts that decide a key near its limit.
    ///
    /// What a request `rest` refused can still cost this key:
    /// - between this key's admission and `rest`'s refusal (the time `rest` takes to decide, a
    ///   few hundred nanoseconds), a request of the same key decided on another thread sees
    ///   this one counted and may be refused for it; a rate refusal on exact counts then
    ///   holds the key's requests of its cost in the over-limit cache until its
    ///   `retry_after`, as any refusal does, though the refund has made room since;
    /// - like every refused request, it stays counted in the rate sketch, which measures
    ///   offered load. Below the key's promotion threshold that refuses nothing (the sketch
    ///   admits there anyway) but brings the promotion sooner, and a promoted key's exact
    ///   counts start from at most what the threshold proves: up to the threshold less one
    ///   unit (half the limit by default) of requests refused further in can count against the
    ///   key in its first two windows in the exact stage. Where that proof does not hold (in a
    ///   fleet, and for a hot key the sketch decides alone because its set of the exact stage
    ///   is full of keys with more evidence, counted by
    ///   [`LimiterStats::exact_full`](crate::LimiterStats::exact_full)) they count in full,
    ///   as the key's own refused requests do.
    ///
    /// Several keys nest: `a.try_acquire_and(ka, || b.try_acquire_and(kb, || c.try_acquire(kc)))`.
    /// Put first the key most likely to refuse: the keys after it are then not asked. With
    /// the `metrics` feature, each limiter counts the decision it made: an admission taken
    /// back is still counted as admitted by its limiter, and refused by the one that
    /// refused it.
    ///
    /// # Errors
    ///
    /// This key's [`Rejected`], or `rest`'s.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter};
    ///
    /// fn per_second<K>(limit: u32, clock: &ManualClock) -> Limiter<K>
    /// where
    ///     K: std::hash::Hash + Eq + Send + Sync + 'static,
    /// {
    ///     let builder = Limiter::builder().max_rate(limit, Duration::from_secs(1));
    ///     builder.clock(clock).build().unwrap()
    /// }
    ///
    /// // 5 requests a second per host, 3 per client address.
    /// let clock = ManualClock::new();
    /// let hosts: Limiter<String> = per_second(5, &clock);
    /// let clients: Limiter<IpAddr> = per_second(3, &clock);
    /// let request = |client: &str| {
    ///     let client: IpAddr = client.parse().unwrap();
    ///     let judged = hosts.try_acquire_and("api.example", || clients.try_acquire(&client));
    ///     judged.is_ok()
    /// };
    /// // One client sends 10: its own limit admits 3, and the host is charged for those 3.
    /// assert_eq!((0..10).filter(|_| request("192.0.2.7")).count(), 3);
    /// // So the host has room for 2 more, from another client.
    /// assert_eq!((0..3).filter(|_| request("198.51.100.1")).count(), 2);
    /// assert_eq!(hosts.estimate("api.example").rate, Some(5.0));
    /// ```
    pub fn try_acquire_and<Q, R>(
        &self,
        key: &Q,
        rest: impl FnOnce() -> Result<R, Rejected>,
    ) -> Result<(Permit<'a, K>, R), Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared: &Shared<K> = self.shared;
        let permit = |ticket| Permit { shared, ticket };
        self.together(shared, key, permit, |p| &p.ticket, rest)
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
    /// use floodgate::{Limiter, Limits};
    ///
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(100).build().unwrap();
    /// let plan = Limits::new().max_inflight(3);
    /// let keys = limiter.with_limits(plan).cost(2);
    /// let (customer, origin) = keys
    ///     .try_acquire_owned_and("customer", || keys.try_acquire_owned("origin"))
    ///     .unwrap();
    /// let refused = keys.try_acquire_owned_and("customer", || keys.try_acquire_owned("origin"));
    /// assert!(refused.is_err(), "4 units of the customer's 3");
    /// drop((customer, origin));
    /// assert_eq!(limiter.estimate("origin").inflight, Some(0));
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
        let shared = self.shared;
        let permit = |ticket| OwnedPermit::new(shared, ticket);
        self.together(shared, key, permit, |p| &p.ticket, rest)
    }

    /// [`try_acquire_and`](Self::try_acquire_and) for either permit: `permit` makes it,
    /// `ticket` reads its ticket back for the refund.
    fn together<Q, P, R>(
        &self,
        shared: &Shared<K>,
        key: &Q,
        permit: impl FnOnce(Ticket) -> P,
        ticket: impl FnOnce(&P) -> &Ticket,
        rest: impl FnOnce() -> Result<R, Rejected>,
    ) -> Result<(P, R), Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut receipt = Receipt::default();
        let admitted = self.decide(shared, key, |t, counted| {
            receipt = counted;
            permit(t)
        })?;
        match rest() {
            Ok(rest) => Ok((admitted, rest)),
            Err(rejected) => {
                // Before the permit drops (its in-flight units), while the entry that counted
                // the rate is most likely still there.
                shared.refund(ticket(&admitted), receipt);
                Err(rejected)
            }
        }
    }

    /// The decision for one request against these limits and for this cost, an admission's
    /// ticket (and where it was counted) made into the caller's `permit`.
    fn decide<Q, P>(
        &self,
        shared: &Shared<K>,
        key: &Q,
        permit: impl FnOnce(Ticket, Receipt) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (t, shadow) = match self.limits {
            None => (shared.defaults.load(), false),
            Some(limits) => {
                let limits = shared.plan(limits);
                let shadow = limits.is_shadow();
                match shared.thresholds(&limits) {
                    Ok(t) => (t, shadow),
                    Err(rejected) => {
                        return shared.refused_uncounted(shadow, true, rejected, permit)
                    }
                }
            }
        };
        shared.acquire(key, self.cost, &t, shadow, permit)
    }
}

impl<K> WithLimits<'_, K>
where
    K: Hash + Eq + Send + Sync,
{
    /// As [`Limiter::acquire`], against these limits at every attempt (the defaults of the
    /// moment, from [`Limiter::with_cost`]) and for this cost.
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
    /// use floodgate::{clock::ManualClock, Limiter, Limits};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// let free_plan = limiter.with_limits(Limits::new().max_rate(1));
    /// let _first = free_plan.try_acquire("free.example").unwrap();
    ///
    /// // One request a second: the next fits in a second, more than this caller waits.
    /// let wait = Duration::from_millis(300);
    /// let rejected = free_plan.acquire("free.example", wait).await.unwrap_err();
    /// assert!(rejected.retry_after.unwrap() > wait, "refused at once, not after waiting");
    /// # }
    /// ```
    pub fn acquire<Q>(&self, key: &Q, max_wait: Duration) -> Acquire<K>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Acquire::start(self.shared, key, self.limits, self.cost, max_wait)
    }

    /// As [`Limiter::acquire_owned_key`] (the key given by value, not copied to wait),
    /// against these limits and for this cost.
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
    /// use floodgate::{Limiter, Limits, Reason};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
    /// let heavy = limiter.with_limits(Limits::new().max_inflight(4)).cost(3);
    /// let first = heavy.try_acquire_owned("origin").unwrap();
    ///
    /// // 3 of the 4 units in flight: a second request of 3 waits for them to come back.
    /// let key = String::from("origin");
    /// let waiting = heavy.acquire_owned_key(key, Duration::from_secs(5));
    /// let finish = tokio::spawn(async move { drop(first) });
    /// let _second = waiting.await.expect("admitted when the first request's units came back");
    /// finish.await.unwrap();
    ///
    /// // With nothing coming back, it gives up after its `max_wait`.
    /// let key = String::from("origin");
    /// let rejected = heavy
    ///     .acquire_owned_key(key, Duration::from_millis(20))
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 4));
    /// # }
    /// ```
    pub fn acquire_owned_key(&self, key: K, max_wait: Duration) -> Acquire<K>
    where
        K: Clone,
    {
        Acquire::start_owned(self.shared, key, self.limits, self.cost, max_wait)
    }
}
