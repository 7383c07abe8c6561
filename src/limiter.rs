//! Per-key limits on requests in flight and on request rate, decided in two stages.
//!
//! # The decision
//!
//! Every request hashes its key once and counts itself in the sketches: the in-flight
//! [`Estimator`] (given back when the [`Permit`] drops) and the [`Rate`] window. Then:
//!
//! 1. **Sketch stage.** If every estimate is below its promotion threshold (a fraction of the
//!    limit, 1/2 by default) and the key is not promoted, the request is admitted: no map, no
//!    lock, no allocation. The estimates never under-count, so a key admitted here is truly
//!    under its limits.
//! 2. **Exact stage.** A key whose estimate reaches the threshold is promoted into a bounded
//!    exact stage (see the `exact` module): from then on its requests are also counted
//!    exactly, and each decision uses the smaller of the sketch's estimate and what the exact
//!    stage can prove, so a key that merely shares sketch columns with a heavy one is not
//!    rejected for it. A promoted key that cools down is demoted. When the exact stage is
//!    full, keys that would be promoted are decided by the sketch alone, which can reject more
//!    but never admits more.
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
//! [`Estimator`]'s `incr`), so of any number of concurrent requests at most `limit` see a
//! count at or below the limit. The exact stage decides under its shard's lock. The
//! promotion handshake is described in the `exact` module.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::ManualClock;
use crate::error::ConfigError;
use crate::estimator::keyed_hash;
use crate::exact::{Entry, ExactStage, InflightCount, RateCount};
use crate::rate::WindowView;
use crate::sync::{AtomicU64, Ordering::Relaxed};
use crate::{Estimator, Rate};

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
/// rate keeps 5 of them (see [`Rate`]).
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
/// Default capacity of the exact stage, in keys.
pub const DEFAULT_EXACT_CAPACITY: usize = 1024;
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

struct Shared<K> {
    hasher: ahash::RandomState,
    inflight: Option<InflightLimit>,
    rate: Option<RateLimit>,
    exact: ExactStage<K>,
    /// Decisions made by the sketch alone because the exact stage was full. Written only on
    /// that (rare, by sizing) path; cache-padded so it does not share a line with the
    /// read-mostly fields above.
    exact_full: CachePadded<AtomicU64>,
    promotions: CachePadded<AtomicU64>,
}

struct InflightLimit {
    sketch: Estimator,
    limit: isize,
    promote_at: isize,
}

struct RateLimit {
    rate: Rate,
    limit: isize,
    promote_at: f64,
}

/// Why a request was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The key has `max_inflight` requests in flight already.
    Inflight,
    /// The key's sliding-window rate would exceed `max_rate`.
    Rate,
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
    /// The key's count as judged, this request included (rounded up for rates).
    pub estimate: isize,
    /// The limit.
    pub limit: isize,
    /// For rate rejections, how long until the same request would fit, if nothing else
    /// arrives meanwhile; `None` for in-flight rejections (that depends on other requests
    /// finishing).
    pub retry_after: Option<Duration>,
}

impl std::fmt::Display for Rejected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.reason {
            Reason::Inflight => "requests in flight",
            Reason::Rate => "requests per interval",
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

/// A key the exact stage is counting: one of the origins currently near or over its limit.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HeavyHitter<K> {
    /// The key.
    pub key: K,
    /// An upper bound on its requests in flight (if an in-flight limit is configured).
    pub inflight: Option<isize>,
    /// Its sliding-window count per interval (if a rate limit is configured).
    pub rate: Option<f64>,
    /// Requests rejected since it was promoted.
    pub rejected: u64,
}

/// A key's counts as the limiter judges them; see [`Limiter::estimate`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct Estimate {
    /// An upper bound on its requests in flight (if an in-flight limit is configured).
    pub inflight: Option<isize>,
    /// Its sliding-window count per interval (if a rate limit is configured).
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
    /// Decisions the sketch made alone because the exact stage was full.
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
    /// admits more). Size the limiter for a higher [`peak_rate`](LimiterBuilder::peak_rate).
    pub saturated: bool,
}

/// Configures a [`Limiter`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// let limiter = floodgate::Limiter::<String>::builder()
///     .max_inflight(100)
///     .max_rate(1000, Duration::from_secs(1))
///     .promotion_threshold(0.25)
///     .exact_capacity(4096)
///     .sketch(4, 8192)
///     .build()
///     .unwrap();
/// assert!(limiter.memory_bytes() < 4 << 20); // fixed, whatever the number of keys
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct LimiterBuilder<K> {
    max_inflight: Option<isize>,
    max_rate: Option<(isize, Duration)>,
    promotion: f64,
    exact_capacity: usize,
    rows: usize,
    /// Given by [`LimiterBuilder::sketch`]; otherwise sized from `peak_rate` at build.
    columns: Option<usize>,
    peak_rate: u64,
    clock: Option<ManualClock>,
    key: std::marker::PhantomData<fn() -> K>,
}

impl<K> Clone for LimiterBuilder<K> {
    fn clone(&self) -> Self {
        LimiterBuilder {
            clock: self.clock.clone(),
            ..*self
        }
    }
}

impl<K> std::fmt::Debug for LimiterBuilder<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("max_inflight", &self.max_inflight)
            .field("max_rate", &self.max_rate)
            .field("promotion", &self.promotion)
            .field("exact_capacity", &self.exact_capacity)
            .field("sketch", &(self.rows, self.columns))
            .field("peak_rate", &self.peak_rate)
            .finish_non_exhaustive()
    }
}

impl<K> LimiterBuilder<K> {
    /// At most `limit` requests in flight per key.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(1).build().unwrap();
    /// let _permit = limiter.try_acquire("origin").unwrap();
    /// assert_eq!(limiter.try_acquire("origin").unwrap_err().limit, 1);
    /// ```
    pub fn max_inflight(mut self, limit: isize) -> Self {
        self.max_inflight = Some(limit);
        self
    }

    /// At most `limit` requests per `interval` per key, as a sliding window.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter, Reason};
    ///
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<String> =
    ///     Limiter::builder().max_rate(2, Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// drop(limiter.try_acquire("origin").unwrap());
    /// drop(limiter.try_acquire("origin").unwrap());
    /// assert_eq!(limiter.try_acquire("origin").unwrap_err().reason, Reason::Rate);
    /// ```
    pub fn max_rate(mut self, limit: isize, interval: Duration) -> Self {
        self.max_rate = Some((limit, interval));
        self
    }

    /// Promote a key to the exact stage once its estimate reaches this fraction of a limit;
    /// in (0, 1], default 1/2.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> = floodgate::Limiter::builder()
    ///     .max_inflight(10)
    ///     .promotion_threshold(0.2)
    ///     .build()
    ///     .unwrap();
    /// let _permits: Vec<_> = (0..2).map(|_| limiter.try_acquire("origin").unwrap()).collect();
    /// assert_eq!(limiter.stats().promoted, 1); // 2 in flight is 20% of the limit
    /// ```
    pub fn promotion_threshold(mut self, fraction: f64) -> Self {
        self.promotion = fraction;
        self
    }

    /// How many keys the exact stage holds at most (rounded up to a multiple of 16), from 1 to
    /// [`MAX_EXACT_CAPACITY`].
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> = floodgate::Limiter::builder()
    ///     .max_inflight(10)
    ///     .exact_capacity(100)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.stats().exact_capacity, 112);
    /// ```
    pub fn exact_capacity(mut self, keys: usize) -> Self {
        self.exact_capacity = keys;
        self
    }

    /// The size of each sketch (in-flight, and each rate window): `rows` × `columns`
    /// (columns rounded up to a power of two), instead of the size that follows from
    /// [`peak_rate`](Self::peak_rate).
    ///
    /// Checked by [`build`](Self::build): zero rows or columns give
    /// [`ConfigError::ZeroRows`] or [`ConfigError::ZeroColumns`], and more than
    /// [`Estimator::MAX_COUNTERS`] counters (for the rate, across its window slots)
    /// [`ConfigError::TooLarge`], each naming the rows and columns asked for.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::Limiter;
    ///
    /// let small: Limiter<String> = Limiter::builder().max_inflight(10).sketch(2, 256).build().unwrap();
    /// let large: Limiter<String> = Limiter::builder().max_inflight(10).sketch(4, 8192).build().unwrap();
    /// assert!(small.memory_bytes() < large.memory_bytes());
    /// ```
    pub fn sketch(mut self, rows: usize, columns: usize) -> Self {
        self.rows = rows;
        self.columns = Some(columns);
        self
    }

    /// The most requests per second this process sends through the limiter, all keys
    /// together (default [`DEFAULT_PEAK_RATE`], a million): the one knob the sketches are
    /// sized by, unless [`sketch`](Self::sketch) gives their size.
    ///
    /// A count-min counter carries about (requests per window) ÷ (columns) of other keys'
    /// requests: that noise is what every key's estimate starts from. Each sketch gets the
    /// columns (a power of two, from [`MIN_SIZED_COLUMNS`] to [`MAX_SIZED_COLUMNS`]) that keep
    /// the noise at the peak rate at most a quarter of its promotion threshold (half the
    /// limit by default): the rate sketch for `peak × interval` requests per window, the
    /// in-flight sketch for `peak ×` [`ASSUMED_TIME_IN_FLIGHT`] requests in flight. With a
    /// million requests a second and limits of 100 per second, that is 2^17 columns, and a
    /// limiter of about 21 MiB. For lower limits at that volume the columns stop at the most,
    /// and [`Limiter::stats`] says when traffic goes past what they can tell apart
    /// (`saturated`): decisions then stay on the safe side of each limit (a key is never
    /// admitted over it) but healthy keys may be refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// let edge: Limiter<String> =
    ///     Limiter::builder().max_rate(100, Duration::from_secs(1)).build().unwrap();
    /// let small: Limiter<String> = Limiter::builder()
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .peak_rate(10_000)
    ///     .build()
    ///     .unwrap();
    /// assert!(small.memory_bytes() < edge.memory_bytes());
    /// assert!(edge.memory_bytes() <= 32 << 20);
    /// ```
    pub fn peak_rate(mut self, requests_per_second: u64) -> Self {
        self.peak_rate = requests_per_second;
        self
    }

    /// Takes time from a [`ManualClock`] (for tests) instead of the shared ticker.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{clock::ManualClock, Limiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter: Limiter<String> =
    ///     Limiter::builder().max_rate(1, Duration::from_secs(1)).clock(&clock).build().unwrap();
    /// drop(limiter.try_acquire("origin").unwrap());
    /// assert!(limiter.try_acquire("origin").is_err());
    /// clock.advance(Duration::from_secs(2));
    /// assert!(limiter.try_acquire("origin").is_ok());
    /// ```
    pub fn clock(mut self, clock: &ManualClock) -> Self {
        self.clock = Some(clock.clone());
        self
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidLimit`] when no limit is set, a limit is below 1, the promotion
    /// threshold is outside (0, 1] or the exact capacity is 0 or above
    /// [`MAX_EXACT_CAPACITY`]; the errors of
    /// [`Estimator::try_new`] and [`RateBuilder::build`](crate::RateBuilder::build) for the
    /// sketch size and the interval.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{ConfigError, Limiter};
    ///
    /// let no_limit = Limiter::<String>::builder().build();
    /// assert!(matches!(no_limit, Err(ConfigError::InvalidLimit(_))));
    /// assert!(Limiter::<String>::builder().max_inflight(5).build().is_ok());
    /// ```
    pub fn build(self) -> Result<Limiter<K>, ConfigError> {
        if self.max_inflight.is_none() && self.max_rate.is_none() {
            return Err(ConfigError::InvalidLimit(
                "a limiter needs max_inflight, max_rate or both",
            ));
        }
        if self.max_inflight.is_some_and(|l| l < 1) {
            return Err(ConfigError::InvalidLimit("max_inflight must be at least 1"));
        }
        if self.max_rate.is_some_and(|(l, _)| l < 1) {
            return Err(ConfigError::InvalidLimit("max_rate must be at least 1"));
        }
        if !(self.promotion > 0.0 && self.promotion <= 1.0) {
            return Err(ConfigError::InvalidLimit(
                "the promotion threshold must be in (0, 1]",
            ));
        }
        if self.exact_capacity == 0 {
            return Err(ConfigError::InvalidLimit(
                "the exact stage needs a capacity of at least 1 key",
            ));
        }
        if self.exact_capacity > MAX_EXACT_CAPACITY {
            return Err(ConfigError::InvalidLimit(
                "the exact stage's capacity may be at most 1,048,576 keys (MAX_EXACT_CAPACITY)",
            ));
        }
        if self.peak_rate == 0 {
            return Err(ConfigError::InvalidLimit(
                "the peak rate must be at least 1 request per second",
            ));
        }
        let peak = self.peak_rate as f64;
        let inflight = match self.max_inflight {
            Some(limit) => {
                let promote_at = ((limit as f64 * self.promotion).ceil() as isize).clamp(1, limit);
                let in_flight = peak * ASSUMED_TIME_IN_FLIGHT.as_secs_f64();
                let columns = self
                    .columns
                    .unwrap_or_else(|| sized_columns(in_flight, promote_at as f64));
                Some(InflightLimit {
                    sketch: Estimator::try_new(self.rows, columns)?,
                    limit,
                    promote_at,
                })
            }
            None => None,
        };
        let rate = match self.max_rate {
            Some((limit, interval)) => {
                let promote_at = (limit as f64 * self.promotion).max(1.0).min(limit as f64);
                let per_window = peak * interval.as_secs_f64();
                let columns = self
                    .columns
                    .unwrap_or_else(|| sized_columns(per_window, promote_at));
                let mut builder = Rate::builder(interval).estimator(self.rows, columns);
                if let Some(clock) = &self.clock {
                    builder = builder.clock(clock);
                }
                Some(RateLimit {
                    rate: builder.build()?,
                    limit,
                    promote_at,
                })
            }
            None => None,
        };
        Ok(Limiter {
            shared: Arc::new(Shared {
                hasher: ahash::RandomState::new(),
                inflight,
                rate,
                exact: ExactStage::new(self.exact_capacity),
                exact_full: CachePadded::new(AtomicU64::new(0)),
                promotions: CachePadded::new(AtomicU64::new(0)),
            }),
        })
    }
}

/// The columns that keep the noise of `events` spread over a sketch at most 1/NOISE_MARGIN
/// of `promote_at`, as a power of two within the sized bounds.
fn sized_columns(events: f64, promote_at: f64) -> usize {
    let wanted = (NOISE_MARGIN * events / promote_at.max(1.0)).ceil();
    // `as` saturates (a NaN is 0); the bounds are powers of two.
    (wanted as usize)
        .clamp(MIN_SIZED_COLUMNS, MAX_SIZED_COLUMNS)
        .next_power_of_two()
}

/// What the sketches said about one request.
#[derive(Clone, Copy)]
struct Sketched {
    hash: u64,
    /// In-flight estimate, this request included.
    inflight: Option<isize>,
    /// Rate window, this request included.
    window: Option<WindowView>,
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
        LimiterBuilder {
            max_inflight: None,
            max_rate: None,
            promotion: DEFAULT_PROMOTION,
            exact_capacity: DEFAULT_EXACT_CAPACITY,
            rows: DEFAULT_ROWS,
            columns: None,
            peak_rate: DEFAULT_PEAK_RATE,
            clock: None,
            key: std::marker::PhantomData,
        }
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
        let shared = &*self.shared;
        let hash = keyed_hash(&shared.hasher, key);
        if !shared.exact.flagged(hash) {
            return shared.estimate_hashed(hash, None);
        }
        let shard = shared.exact.shard(hash);
        let entry = shard
            .entries
            .get(&hash)
            .filter(|entry| entry.key.borrow() == key);
        shared.estimate_hashed(hash, entry)
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
        let shared = &*self.shared;
        let mut hitters = Vec::new();
        shared.exact.for_each_shard(|shard| {
            for (&hash, entry) in shard.entries.iter() {
                let estimate = shared.estimate_hashed(hash, Some(entry));
                hitters.push(HeavyHitter {
                    key: entry.key.clone(),
                    inflight: estimate.inflight,
                    rate: estimate.rate,
                    rejected: entry.rejected,
                });
            }
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
        let mut promoted = 0;
        self.shared
            .exact
            .for_each_shard(|shard| promoted += shard.entries.len());
        let s = &*self.shared;
        let rate_noise = s.rate.as_ref().map(|l| l.rate.noise());
        let rate_promote_at = s.rate.as_ref().map(|l| l.promote_at);
        let inflight_noise = s.inflight.as_ref().map(|l| l.sketch.mean_count());
        let inflight_promote_at = s.inflight.as_ref().map(|l| l.promote_at as f64);
        let over = |noise: Option<f64>, at: Option<f64>| match (noise, at) {
            (Some(noise), Some(at)) => noise >= SATURATED_AT * at,
            _ => false,
        };
        LimiterStats {
            promoted,
            exact_capacity: s.exact.capacity(),
            promotions: s.promotions.load(Relaxed),
            exact_full: s.exact_full.load(Relaxed),
            rate_noise,
            rate_promote_at,
            inflight_noise,
            inflight_promote_at,
            saturated: over(rate_noise, rate_promote_at)
                || over(inflight_noise, inflight_promote_at),
        }
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
            + s.inflight.as_ref().map_or(0, |l| l.sketch.memory_bytes())
            + s.rate.as_ref().map_or(0, |l| l.rate.memory_bytes())
            + s.exact.memory_bytes()
    }
}

impl<K> std::fmt::Debug for Limiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &*self.shared;
        f.debug_struct("Limiter")
            .field("max_inflight", &s.inflight.as_ref().map(|l| l.limit))
            .field(
                "max_rate",
                &s.rate.as_ref().map(|l| (l.limit, l.rate.interval())),
            )
            .finish_non_exhaustive()
    }
}

/// Lowers `view`'s counts to what the exact stage proves for windows it covers; `own` is this
/// request's share of the current window (1 when deciding a request, 0 when reporting).
fn bound_window(view: &mut WindowView, count: &RateCount, own: isize) {
    if let Some(prev) = view.bucket.checked_sub(1).and_then(|b| count.bound(b)) {
        view.prev = view.prev.min(prev);
    }
    if let Some(curr) = count.bound(view.bucket) {
        view.curr = view.curr.min(curr.saturating_add(own));
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// The sketch estimates of a hashed key, lowered to `entry`'s exact bounds if given.
    fn estimate_hashed(&self, hash: u64, entry: Option<&Entry<K>>) -> Estimate {
        Estimate {
            inflight: self.inflight.as_ref().map(|l| {
                let estimate = l.sketch.get_hashed(hash);
                entry.map_or(estimate, |e| estimate.min(e.inflight.bound()))
            }),
            rate: self.rate.as_ref().map(|l| {
                let mut view = l.rate.view(hash);
                if let Some(e) = entry {
                    let mut count = e.rate;
                    count.roll_to(view.bucket);
                    bound_window(&mut view, &count, 0);
                }
                view.sliding()
            }),
        }
    }

    fn acquire<Q>(&self, key: &Q) -> Result<Ticket, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = keyed_hash(&self.hasher, key);
        let sketched = Sketched {
            hash,
            inflight: self
                .inflight
                .as_ref()
                .map(|l| l.sketch.incr_hashed(hash, 1)),
            window: self.rate.as_ref().map(|l| l.rate.observe_hashed(hash)),
        };
        let hot = self.is_hot(&sketched);
        // The request's half of the promotion handshake: after the sketch increments.
        let decision = if !hot && !self.exact.flagged(hash) {
            Ok(None)
        } else {
            self.decide_exact(key, &sketched, hot)
        };
        match decision {
            Ok(tracked) => Ok(Ticket { hash, tracked }),
            Err(rejected) => {
                if let Some(l) = &self.inflight {
                    l.sketch.decr_hashed(hash, 1);
                }
                Err(rejected)
            }
        }
    }

    /// Whether an estimate reached its promotion threshold.
    fn is_hot(&self, s: &Sketched) -> bool {
        let inflight =
            matches!((&self.inflight, s.inflight), (Some(l), Some(n)) if n >= l.promote_at);
        let rate =
            matches!((&self.rate, s.window), (Some(l), Some(w)) if w.sliding() >= l.promote_at);
        inflight || rate
    }

    /// The exact stage's decision; `Ok(Some(generation))` when the permit is counted there.
    #[cold]
    fn decide_exact<Q>(&self, key: &Q, s: &Sketched, hot: bool) -> Result<Option<u64>, Rejected>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut shard = self.exact.shard(s.hash);
        let known = shard.entries.get(&s.hash).map(|e| e.key.borrow() == key);
        match known {
            Some(true) => {
                // A request the sketch admits alone, for a key that has cooled down apart from
                // this request: demote the key.
                let cool = shard
                    .entries
                    .get(&s.hash)
                    .is_some_and(|e| self.is_cool_but_for(s, e));
                if !hot && cool {
                    shard.entries.remove(&s.hash);
                    self.exact.unflag(s.hash);
                    return Ok(None);
                }
            }
            // Another key with the same 64-bit hash is promoted: only the sketch can judge.
            Some(false) => return self.decide_by_sketch(s),
            // Flagged by another key in the same filter cell, and not hot: the sketch admits.
            None if !hot => return Ok(None),
            None => {
                if shard.is_full() {
                    self.evict_cool(&mut shard);
                }
                if shard.is_full() {
                    self.exact_full.fetch_add(1, Relaxed);
                    return self.decide_by_sketch(s);
                }
                // The promotion's half of the handshake: flag, then read the sketches.
                self.exact.flag(s.hash);
                self.promotions.fetch_add(1, Relaxed);
                let inflight = InflightCount {
                    base: self
                        .inflight
                        .as_ref()
                        .map_or(0, |l| (l.sketch.get_hashed(s.hash) - 1).max(0)),
                    tracked: 0,
                };
                let (since, rate_base) = match (&self.rate, s.window) {
                    (Some(l), Some(w)) => (w.bucket, l.rate.count_hashed(s.hash, w.bucket) - 1),
                    _ => (0, 0),
                };
                shard.insert(
                    s.hash,
                    key.to_owned(),
                    inflight,
                    RateCount::new(since, rate_base),
                );
            }
        }
        let entry = match shard.entries.get_mut(&s.hash) {
            Some(entry) => entry,
            None => return self.decide_by_sketch(s), // unreachable: found or inserted above
        };
        let decision = self.decide_entry(entry, s);
        if decision.is_err() {
            entry.rejected += 1;
        }
        decision
    }

    /// Decides with the smaller of the sketch estimates and the entry's exact bounds, and
    /// counts an admitted request in the entry.
    fn decide_entry(&self, entry: &mut Entry<K>, s: &Sketched) -> Result<Option<u64>, Rejected> {
        let mut tracked = None;
        if let (Some(l), Some(_)) = (&self.inflight, s.inflight) {
            // Read the estimate again under the shard lock, so that it includes every request
            // this entry admitted before us (each counted itself in the sketch before taking
            // the lock we now hold): the estimate read before the lock may miss a request
            // admitted in between, and the bound would then be one short.
            let estimate = l.sketch.get_hashed(s.hash);
            entry.inflight.rebase(estimate - 1);
            let bound = estimate.min(entry.inflight.bound() + 1);
            if bound > l.limit {
                return Err(Rejected {
                    reason: Reason::Inflight,
                    estimate: bound,
                    limit: l.limit,
                    retry_after: None,
                });
            }
            tracked = Some(entry.generation);
        }
        if let (Some(l), Some(mut view)) = (&self.rate, s.window) {
            // The same for the window counts.
            view.curr = l.rate.count_hashed(s.hash, view.bucket);
            if let Some(prev) = view.bucket.checked_sub(1) {
                view.prev = l.rate.count_hashed(s.hash, prev);
            }
            entry.rate.roll_to(view.bucket);
            bound_window(&mut view, &entry.rate, 1);
            let sliding = view.sliding();
            if !view.fits(l.limit) {
                return Err(Rejected {
                    reason: Reason::Rate,
                    estimate: sliding.ceil() as isize,
                    limit: l.limit,
                    retry_after: retry_after(&view, l.limit, view.curr - 1),
                });
            }
            entry.rate.current += 1;
        }
        if tracked.is_some() {
            entry.inflight.tracked += 1;
        }
        Ok(tracked)
    }

    /// The decision when the exact stage cannot help: the sketch estimates against the limits.
    fn decide_by_sketch(&self, s: &Sketched) -> Result<Option<u64>, Rejected> {
        if let (Some(l), Some(estimate)) = (&self.inflight, s.inflight) {
            if estimate > l.limit {
                return Err(Rejected {
                    reason: Reason::Inflight,
                    estimate,
                    limit: l.limit,
                    retry_after: None,
                });
            }
        }
        if let (Some(l), Some(view)) = (&self.rate, s.window) {
            let sliding = view.sliding();
            if !view.fits(l.limit) {
                return Err(Rejected {
                    reason: Reason::Rate,
                    estimate: sliding.ceil() as isize,
                    limit: l.limit,
                    retry_after: retry_after(&view, l.limit, view.curr),
                });
            }
        }
        Ok(None)
    }

    /// Whether a promoted key has cooled down: nothing of it tracked in flight and its
    /// estimates below half their promotion thresholds.
    fn is_cool(&self, hash: u64, entry: &Entry<K>) -> bool {
        let inflight_cool = self.inflight.as_ref().map_or(true, |l| {
            entry.inflight.tracked == 0 && l.sketch.get_hashed(hash) * 2 < l.promote_at
        });
        let rate_cool = self
            .rate
            .as_ref()
            .map_or(true, |l| l.rate.view(hash).sliding() * 2.0 < l.promote_at);
        inflight_cool && rate_cool
    }

    /// Whether a promoted key is cool, not counting the request `s`: nothing
    /// tracked in flight, estimates below half their thresholds, and (for rates) no rejected
    /// requests in the windows the sketch would still be read for, so that a re-promotion
    /// inherits no window inflated by rejected requests.
    fn is_cool_but_for(&self, s: &Sketched, entry: &Entry<K>) -> bool {
        let inflight_cool = self.inflight.as_ref().map_or(true, |l| {
            entry.inflight.tracked == 0 && (l.sketch.get_hashed(s.hash) - 1) * 2 < l.promote_at
        });
        let rate_cool = match (&self.rate, s.window) {
            (Some(l), Some(w)) => {
                let mut count = entry.rate;
                count.roll_to(w.bucket);
                let clean_prev = w
                    .bucket
                    .checked_sub(1)
                    .map_or(true, |b| count.bound(b).map_or(true, |n| w.prev <= n));
                let clean_curr = count.bound(w.bucket).map_or(true, |n| w.curr - 1 <= n);
                clean_prev && clean_curr && (w.sliding() - 1.0) * 2.0 < l.promote_at
            }
            _ => true,
        };
        inflight_cool && rate_cool
    }

    /// Demotes the cool entries of a full shard.
    fn evict_cool(&self, shard: &mut crate::exact::Shard<K>) {
        let exact = &self.exact;
        shard.entries.retain(|&hash, entry| {
            let cool = self.is_cool(hash, entry);
            if cool {
                exact.unflag(hash);
            }
            !cool
        });
    }

    /// Gives back what an admitted request took.
    fn release(&self, ticket: &Ticket) {
        let Some(l) = &self.inflight else { return };
        let Some(generation) = ticket.tracked else {
            l.sketch.decr_hashed(ticket.hash, 1);
            return;
        };
        let mut shard = self.exact.shard(ticket.hash);
        // Under the lock, together with `tracked` below, so that a rebase under the lock never
        // sees the sketch without this permit while `tracked` still counts it (which would
        // lower `base` below the truth for good).
        l.sketch.decr_hashed(ticket.hash, 1);
        let cool = match shard.entries.get_mut(&ticket.hash) {
            Some(entry) if entry.generation == generation => {
                entry.inflight.tracked -= 1;
                self.is_cool(ticket.hash, entry)
            }
            // Demoted (and maybe promoted again) since: that entry never counted this permit.
            _ => false,
        };
        if cool {
            shard.entries.remove(&ticket.hash);
            self.exact.unflag(ticket.hash);
        }
    }
}

/// How long until one more request fits under `limit`, if nothing else arrives: the sliding
/// count `prev·(1−f) + curr` falls as `f` grows, and `curr` becomes the next window's `prev`.
/// `counted` is what the current window will count when the request is retried, not counting
/// the retry: the sketch keeps a rejected request, the exact stage does not. Computed in whole
/// nanoseconds and rounded up, so a retry after exactly `retry_after` fits.
fn retry_after(view: &WindowView, limit: isize, counted: isize) -> Option<Duration> {
    let (p, c, r) = (
        view.prev.max(0) as i128,
        counted.max(0) as i128,
        (limit - 1) as i128,
    );
    let (i, x) = (i128::from(view.len), i128::from(view.into.min(view.len)));
    let wait = if c <= r {
        if p == 0 {
            return Some(Duration::ZERO);
        }
        // p·(i − x') + c·i ≤ r·i  ⇔  x' ≥ i − ⌊(r − c)·i / p⌋
        (i - (r - c) * i / p - x).max(0)
    } else {
        // In the next window: c·(i − y) ≤ r·i  ⇔  y ≥ i − ⌊r·i / c⌋
        (i - x) + (i - r * i / c)
    };
    Some(Duration::from_nanos(
        u64::try_from(wait).unwrap_or(u64::MAX),
    ))
}

/// What a permit gives back: the key's hash, and the exact-stage entry that counted it.
struct Ticket {
    hash: u64,
    tracked: Option<u64>,
}

/// An admitted request: holds its key's in-flight slot until dropped.
///
/// Dropping it on any thread, during a panic unwind, or with a cancelled future gives the
/// slot back.
#[must_use = "dropping the permit gives the in-flight slot back at once"]
pub struct Permit<'a, K>
where
    K: Hash + Eq,
{
    shared: &'a Shared<K>,
    ticket: Ticket,
}

impl<K: Hash + Eq> Drop for Permit<'_, K> {
    fn drop(&mut self) {
        self.shared.release(&self.ticket);
    }
}

impl<K: Hash + Eq> std::fmt::Debug for Permit<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("exact", &self.ticket.tracked.is_some())
            .finish_non_exhaustive()
    }
}

/// An admitted request that owns a reference to its [`Limiter`]; see
/// [`Limiter::try_acquire_owned`].
#[must_use = "dropping the permit gives the in-flight slot back at once"]
pub struct OwnedPermit<K>
where
    K: Hash + Eq,
{
    shared: Arc<Shared<K>>,
    ticket: Ticket,
}

impl<K: Hash + Eq> Drop for OwnedPermit<K> {
    fn drop(&mut self) {
        self.shared.release(&self.ticket);
    }
}

impl<K: Hash + Eq> std::fmt::Debug for OwnedPermit<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("exact", &self.ticket.tracked.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn view(prev: isize, curr: isize, fraction: f64) -> WindowView {
        WindowView {
            bucket: 5,
            prev,
            curr,
            into: (fraction * 1e9) as u64,
            len: 1_000_000_000,
        }
    }

    #[test]
    fn retry_after_waits_for_the_previous_window_to_slide_out() {
        // limit 10, prev 10, curr 5 (+1 rejected) at f = 0.5: 10·0.5 + 5 = 10 already.
        // One more fits when 10·(1−f) + 5 ≤ 9, i.e. f ≥ 0.6: 0.1 of the interval from now.
        let wait = retry_after(&view(10, 6, 0.5), 10, 5).unwrap();
        assert!((wait.as_secs_f64() - 0.1).abs() < 1e-9, "{wait:?}");
    }

    #[test]
    fn retry_after_waits_into_the_next_window_when_the_current_one_is_full() {
        // limit 4, curr 4 (+1 rejected) at f = 0.25: 0.75 to the boundary, then 4·(1−g) ≤ 3
        // needs g ≥ 0.25.
        let wait = retry_after(&view(0, 5, 0.25), 4, 4).unwrap();
        assert!((wait.as_secs_f64() - 1.0).abs() < 1e-9, "{wait:?}");
    }
}
