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
//! [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`](crate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN)) at or
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

mod builder;
mod exact;
mod overlimit;
mod permit;
mod report;
mod sketches;

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::clock::{Registration, Tick, TimeSource};
use exact::{spread, ExactStage, Refusal};
use overlimit::OverLimit;
use sketches::Sketches;

pub use builder::LimiterBuilder;
use permit::Ticket;
pub use permit::{OwnedPermit, Permit};
pub use report::{Estimate, HeavyHitter, LimiterStats, Reason, Rejected};

/// Default rows of the limiter's sketches.
pub const DEFAULT_ROWS: usize = 4;
/// Columns of a sketch given explicitly as [`LimiterBuilder::sketch`]`(rows, DEFAULT_COLUMNS)`;
/// without [`sketch`](LimiterBuilder::sketch), the columns follow from the peak rate.
pub const DEFAULT_COLUMNS: usize = 4096;
/// The peak request rate (requests per second, all keys together, one process) that a
/// limiter is sized for unless told otherwise: see [`LimiterBuilder::peak_rate`].
pub const DEFAULT_PEAK_RATE: u64 = 1_000_000;
/// How long a request is assumed to be in flight on average, to size the in-flight sketch
/// from the peak rate (Little's law: requests in flight = rate × time in flight).
pub const ASSUMED_TIME_IN_FLIGHT: Duration = Duration::from_millis(100);
/// The fewest and the most columns that sizing from the peak rate picks. The most keeps a
/// default limiter within 32 MiB: 4 rows × 2^17 counters × 8 bytes = 4 MiB per sketch, and a
/// rate keeps 5 of them (see [`Rate`](crate::Rate)).
pub const MIN_SIZED_COLUMNS: usize = 1 << 10;
/// See [`MIN_SIZED_COLUMNS`].
pub const MAX_SIZED_COLUMNS: usize = 1 << 17;
/// Sizing keeps the mean count that a counter carries from other keys (the noise every
/// estimate starts from) at the peak rate at most 1/4 of the promotion threshold: the min of
/// 4 rows then reaches the threshold by noise alone with negligible probability.
const NOISE_MARGIN: f64 = 4.0;
/// `stats().saturated` turns on when the noise reaches this fraction of a promotion
/// threshold: from there on, light keys start to look hot.
const SATURATED_AT: f64 = 0.5;
/// The fewest and the most keys that sizing the exact stage from the peak rate gives it (see
/// [`LimiterBuilder::exact_capacity`]). The most keeps a default limiter within 32 MiB: a
/// place costs about 210 bytes (a `u64` or short `String` key), 3.3 MiB for 2^14 places.
pub const MIN_SIZED_EXACT_CAPACITY: usize = 1 << 10;
/// See [`MIN_SIZED_EXACT_CAPACITY`].
pub const MAX_SIZED_EXACT_CAPACITY: usize = 1 << 14;
/// The largest exact-stage capacity a limiter accepts, in keys.
pub const MAX_EXACT_CAPACITY: usize = 1 << 20;
/// Default promotion threshold, as a fraction of each limit.
pub const DEFAULT_PROMOTION: f64 = 0.5;

/// Per-key limits on requests in flight and request rate, for a proxy's origins.
///
/// Cloning is cheap and clones share one set of counts.
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
    exact: ExactStage<K>,
    over_limit: OverLimit,
    /// The clock the rate windows, the over-limit deadlines and the sweep follow.
    time: TimeSource,
    /// The sweep's registration with `time`, cancelled on drop.
    registration: Registration,
    /// Keeps the sweep alive for as long as the limiter: the clock holds only a weak
    /// reference to it.
    _sweeper: Arc<Sweeper<K>>,
}

/// The limiter's periodic work on its clock's thread: the exact stage's sweep, and clearing
/// the over-limit deadlines that have passed.
struct Sweeper<K> {
    shared: Weak<Shared<K>>,
    /// Nanoseconds between sweeps: an epoch of the exact stage.
    period: u64,
}

impl<K: Send + Sync> Tick for Sweeper<K> {
    fn tick(&self, now: u64) -> u64 {
        // Not yet built (registered from inside `Arc::new_cyclic`), or being dropped.
        if let Some(shared) = self.shared.upgrade() {
            shared.exact.sweep(&shared.sketches);
            shared.over_limit.forget_expired(now);
        }
        now.saturating_add(self.period)
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
        let ticket = self.shared.acquire(key)?;
        Ok(Permit {
            shared: &self.shared,
            ticket,
        })
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
        let ticket = self.shared.acquire(key)?;
        Ok(OwnedPermit {
            shared: Arc::clone(&self.shared),
            ticket,
        })
    }

    /// The key's counts as the limiter judges them now, without counting a request: the
    /// sketch estimates, lowered to the exact stage's bounds if the key is promoted.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(10).build().unwrap();
    /// let _permit = limiter.try_acquire("origin").unwrap();
    /// assert_eq!(limiter.estimate("origin").inflight, Some(1));
    /// assert_eq!(limiter.estimate("origin").rate, None, "no rate limit configured");
    /// ```
    pub fn estimate<Q>(&self, key: &Q) -> Estimate
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let s = &*self.shared;
        let hash = s.sketches.hash(key);
        s.exact
            .with_counts(key, hash, |counts| s.sketches.estimate(hash, counts))
    }

    /// The keys the exact stage is counting now — the origins near or over their limits —
    /// with their counts, most rejected first.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(4).build().unwrap();
    /// let permits: Vec<_> = (0..6).filter_map(|_| limiter.try_acquire("busy").ok()).collect();
    /// assert_eq!(permits.len(), 4);
    /// let hitters = limiter.heavy_hitters();
    /// assert_eq!(hitters.len(), 1);
    /// assert_eq!(hitters[0].key, "busy");
    /// assert_eq!(hitters[0].inflight, Some(4));
    /// assert_eq!(hitters[0].rejected, 2);
    /// ```
    pub fn heavy_hitters(&self) -> Vec<HeavyHitter<K>>
    where
        K: Clone,
    {
        let s = &*self.shared;
        let mut hitters = Vec::new();
        s.exact.for_each(|entry| {
            let estimate = s.sketches.estimate(entry.hash, Some(&entry.counts));
            hitters.push(HeavyHitter {
                key: entry.key.clone(),
                inflight: estimate.inflight,
                rate: estimate.rate,
                rejected: entry.rejected,
            });
        });
        hitters.sort_by_key(|h| std::cmp::Reverse(h.rejected));
        hitters
    }

    /// Counters about the decisions so far.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(4).build().unwrap();
    /// let _permits: Vec<_> = (0..4).map(|_| limiter.try_acquire("busy").unwrap()).collect();
    /// let stats = limiter.stats();
    /// assert_eq!((stats.promoted, stats.promotions, stats.exact_full), (1, 1, 0));
    /// ```
    pub fn stats(&self) -> LimiterStats {
        let s = &*self.shared;
        let rate = s.sketches.rate.as_ref();
        let inflight = s.sketches.inflight.as_ref();
        let rate_noise = rate.map(|l| l.rate.noise());
        let rate_promote_at = rate.map(|l| l.promote_at);
        let inflight_noise = inflight.map(|l| l.sketch.mean_count());
        let inflight_promote_at = inflight.map(|l| l.promote_at as f64);
        let over = |noise: Option<f64>, at: Option<f64>| match (noise, at) {
            (Some(noise), Some(at)) => noise >= SATURATED_AT * at,
            _ => false,
        };
        LimiterStats {
            promoted: s.exact.len(),
            exact_capacity: s.exact.capacity(),
            promotions: s.exact.promotions(),
            replaced: s.exact.replaced(),
            exact_full: s.exact.decided_alone(),
            rate_noise,
            rate_promote_at,
            inflight_noise,
            inflight_promote_at,
            saturated: over(rate_noise, rate_promote_at)
                || over(inflight_noise, inflight_promote_at),
        }
    }

    /// Locks of the exact stage taken so far: lets the tests check that a path takes none.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn exact_locks_taken(&self) -> u64 {
        self.shared.exact.locks_taken()
    }

    /// Bytes this limiter occupies, allocated at construction: the sketches and the exact
    /// stage at full capacity (not counting heap data the keys themselves own). It does not
    /// grow with the number of distinct keys.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<u64> =
    ///     floodgate::Limiter::builder().max_inflight(4).build().unwrap();
    /// let before = limiter.memory_bytes();
    /// let _permits: Vec<_> = (0..1000u64).map(|k| limiter.try_acquire(&k).unwrap()).collect();
    /// assert_eq!(limiter.memory_bytes(), before);
    /// ```
    pub fn memory_bytes(&self) -> usize {
        let s = &*self.shared;
        std::mem::size_of::<Shared<K>>()
            + s.sketches.memory_bytes()
            + s.exact.memory_bytes()
            + s.over_limit.memory_bytes()
    }
}

impl<K> std::fmt::Debug for Limiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.shared.sketches;
        f.debug_struct("Limiter")
            .field("max_inflight", &s.inflight.as_ref().map(|l| l.limit))
            .field(
                "max_rate",
                &s.rate.as_ref().map(|l| (l.limit, l.rate.interval())),
            )
            .finish_non_exhaustive()
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// The whole decision for one request: the over-limit cache, then the sketches, then (for
    /// hot or promoted keys) the exact stage.
    fn acquire<Q>(&self, key: &Q) -> Result<Ticket, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.sketches.hash(key);
        // One remix for the over-limit cache and the filter.
        let spread = spread(hash);
        if let Some(rejected) = self.over_limit_now(spread) {
            return Err(rejected);
        }
        let sketched = self.sketches.observe(hash);
        let hot = self.sketches.is_hot(&sketched);
        // The request's half of the promotion handshake: after the sketch increments.
        let decision = if !hot && !self.exact.flagged(spread) {
            Ok(None)
        } else {
            self.exact.decide(key, &sketched, hot, &self.sketches)
        };
        match decision {
            Ok(tracked) => Ok(Ticket { hash, tracked }),
            Err(Refusal {
                rejected,
                over_until,
            }) => {
                self.sketches.release(hash);
                if let (Some(deadline), Some(window)) = (over_until, sketched.window) {
                    self.over_limit.insert(spread, window.at, deadline);
                }
                Err(rejected)
            }
        }
    }

    /// The rejection of a key still over its rate limit from an earlier rejection.
    #[inline]
    fn over_limit_now(&self, spread: u64) -> Option<Rejected> {
        let rate = self.sketches.rate.as_ref()?;
        // The time the usual path would decide on; near a window's end that is the exact time,
        // and the request goes the usual way.
        let now = rate.rate.settled_now()?;
        // No rate rejection waits more than two windows.
        let cap = rate.rate.interval().saturating_mul(2);
        let remaining = self.over_limit.remaining(spread, now, cap)?;
        Some(Rejected::still_over(rate.limit, remaining))
    }

    /// Gives back what an admitted request took.
    fn release(&self, ticket: &Ticket) {
        if self.sketches.inflight.is_none() {
            return;
        }
        match ticket.tracked {
            Some(generation) => self.exact.release(ticket.hash, generation, &self.sketches),
            None => self.sketches.release(ticket.hash),
        }
    }
}
