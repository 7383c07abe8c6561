//! [`WithLimits`]: a limiter's admissions judged against a key's own limits.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::permit::Ticket;
use super::{Acquire, Limiter, Limits, OwnedPermit, Permit, Rejected, Shared};

/// A [`Limiter`] judging requests against given [`Limits`] instead of its defaults (a
/// customer's plan, say), from [`Limiter::with_limits`]: the same three admissions, one way
/// to say "these limits" for each.
///
/// The promotion thresholds follow these limits, so with a sketch that tells keys apart each
/// key is admitted exactly up to its own limit. The kinds counted (in flight, rate, and the
/// rate's interval) are the limiter's: a limit of a kind it does not count is rejected with
/// [`Reason::InflightNotCounted`](super::Reason::InflightNotCounted) or
/// [`Reason::RateNotCounted`](super::Reason::RateNotCounted), and a kind left unset in the
/// limits is not limited (still counted). A limit of 0 rejects every request, uncounted.
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
#[derive(Debug)]
pub struct WithLimits<'a, K> {
    pub(super) limiter: &'a Limiter<K>,
    pub(super) limits: Limits,
}

impl<K> Clone for WithLimits<'_, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for WithLimits<'_, K> {}

impl<'a, K> WithLimits<'a, K>
where
    K: Hash + Eq,
{
    /// As [`Limiter::try_acquire`], against these limits.
    ///
    /// # Errors
    ///
    /// [`Rejected`] when the request would take the key over one of these limits, or when
    /// they have a kind the limiter does not count.
    pub fn try_acquire<Q>(&self, key: &Q) -> Result<Permit<'a, K>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = &*self.limiter.shared;
        self.decide(shared, key, |ticket| Permit { shared, ticket })
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
        let shared = &self.limiter.shared;
        self.decide(shared, key, |ticket| OwnedPermit::new(shared, ticket))
    }

    /// The decision for one request against these limits, an admission's ticket made into
    /// the caller's `permit`.
    fn decide<Q, P>(
        &self,
        shared: &Shared<K>,
        key: &Q,
        permit: impl FnOnce(Ticket) -> P,
    ) -> Result<P, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let limits = shared.plan(self.limits);
        let shadow = limits.is_shadow();
        match shared.thresholds(&limits) {
            Ok(t) => shared.acquire(key, &t, shadow, permit),
            Err(rejected) => shared.refused_uncounted(shadow, true, rejected, permit),
        }
    }
}

impl<K> WithLimits<'_, K>
where
    K: Hash + Eq + Send + Sync,
{
    /// As [`Limiter::acquire`], against these limits at every attempt.
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
        Acquire::start(&self.limiter.shared, key, Some(self.limits), max_wait)
    }
}
