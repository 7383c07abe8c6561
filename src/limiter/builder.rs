//! Configuring a limiter, and sizing its sketches from the peak rate.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::clock::{ManualClock, Tick, TimeSource};
use crate::error::ConfigError;
use crate::estimator::{Blocked, KeyHasher};
use crate::sync::{AtomicBool, Mutex};
use crate::Rate;

use super::adaptive::AdaptiveInflight;
use super::defaults::Defaults;
use super::exact::ExactStage;
use super::fleet::FleetSetup;
use super::limits::check_defaults;
use super::limits::Thresholds;
use super::proof::HighestRatePromotion;
use super::quiet::RateMark;
use super::shared::Shared;
use super::sketches::Sketches;
use super::sweep::Sweeper;
use super::tally::Tally;
use super::wait::Waiters;
use super::{Limiter, Limits};

/// Default rows of the limiter's sketches: 2, of 8 counters each in a key's cache line. Each
/// row costs a request a locked add; a key's rows share one line's other keys, so more rows
/// buy less than in a flat sketch, and the exact stage corrects what the sketch over-counts
/// (see `exact`'s module docs). 4 rows cost 1.1–1.5× as much per request in
/// `benches/limiter.rs`'s simulated groups.
pub(crate) const DEFAULT_ROWS: usize = 2;
/// How long [`Limiter::heavy_hitters`] lists a key after it left the exact stage, unless
/// [`LimiterBuilder::heavy_hitters_retention`] says otherwise: longer than the scrape
/// intervals in use (15 to 60 s).
const DEFAULT_RETENTION: Duration = Duration::from_secs(60);

/// The `limiter` label of a limiter's metrics unless [`LimiterBuilder::name`] gives one.
const DEFAULT_NAME: &str = "default";

/// The peak request rate (requests per second, all keys together, one process) that a
/// limiter is sized for unless told otherwise: see [`LimiterBuilder::peak_rate`].
pub(crate) const DEFAULT_PEAK_RATE: u64 = 1_000_000;
/// How long a request is assumed to be in flight on average, to size the in-flight sketch
/// from the peak rate (Little's law: requests in flight = rate × time in flight).
pub(crate) const ASSUMED_TIME_IN_FLIGHT: Duration = Duration::from_millis(100);
/// The fewest and the most columns that sizing from the peak rate picks. A default limiter (a
/// peak of a million requests a second, limits of 100) is at the most: 2 rows × 2^17
/// counters × 4 bytes = 1 MiB per sketch (a key's rows in one 64-byte line), and a rate keeps
/// 5 of them (see [`Rate`](crate::Rate)).
pub(crate) const MIN_SIZED_COLUMNS: usize = 1 << 10;
/// See [`MIN_SIZED_COLUMNS`].
pub(crate) const MAX_SIZED_COLUMNS: usize = 1 << 17;
/// Sizing aims the mean count that a counter carries from other keys (the noise every
/// estimate starts from) at the peak rate at 1/8 of the promotion threshold: the min of 2 rows
/// then reaches the threshold by noise alone with negligible probability.
pub(crate) const NOISE_MARGIN: f64 = 8.0;
/// The fewest and the most keys that sizing the exact stage from the peak rate gives it (see
/// [`LimiterBuilder::exact_capacity`]). The most keeps a default limiter within 32 MiB: a
/// place costs about 220 bytes (a `u64` or short `String` key), 3.4 MiB for 2^14 places.
pub(crate) const MIN_SIZED_EXACT_CAPACITY: usize = 1 << 10;
/// See [`MIN_SIZED_EXACT_CAPACITY`].
pub(crate) const MAX_SIZED_EXACT_CAPACITY: usize = 1 << 14;
/// The largest exact-stage capacity a limiter accepts, in keys.
pub(crate) const MAX_EXACT_CAPACITY: usize = 1 << 20;
/// Default promotion threshold, as a fraction of each limit.
pub(crate) const DEFAULT_PROMOTION: f64 = 0.5;
/// The most requests a limiter lets wait in [`Limiter::acquire`] at once, unless told
/// otherwise ([`LimiterBuilder::max_waiters`]).
pub(crate) const DEFAULT_MAX_WAITERS: usize = 4096;
/// The most waiters a limiter accepts ([`LimiterBuilder::max_waiters`]): 2^24, about 2.5 GB
/// of room allocated up front.
pub(crate) const MAX_WAITERS: usize = 1 << 24;
/// The most requests of one key a limiter lets wait at once, unless told otherwise
/// ([`LimiterBuilder::max_waiters_per_key`]).
pub(crate) const DEFAULT_MAX_WAITERS_PER_KEY: usize = 64;

/// How often the exact stage is swept when no rate interval sets the pace: an epoch of its
/// evidence, and the longest a cooled-down key waits to be demoted by the sweep.
const SWEEP_PERIOD: Duration = Duration::from_secs(1);

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
    max_inflight: Option<u32>,
    /// How hot keys learn their in-flight limit (`None`: they do not).
    adaptive: Option<AdaptiveInflight>,
    max_rate: Option<(u32, Duration)>,
    promotion: f64,
    shadow: bool,
    /// The `limiter` label of its metrics.
    name: String,
    /// How long `heavy_hitters` lists a key that left the exact stage.
    retention: Duration,
    /// `None`: sized from the peak rate.
    exact_capacity: Option<usize>,
    rows: usize,
    /// Given by [`LimiterBuilder::sketch`]; otherwise sized from `peak_rate` at build.
    columns: Option<usize>,
    peak_rate: u64,
    max_waiters: usize,
    max_waiters_per_key: usize,
    clock: Option<ManualClock>,
    /// Fixed hash keys (tests only, feature `fault-injection`); random otherwise.
    #[cfg(feature = "fault-injection")]
    hash_seed: Option<u64>,
    /// The fleet to hold the rate limit with (feature `redis`; none without).
    fleet: FleetSetup<Shared<K>>,
    key: std::marker::PhantomData<fn() -> K>,
}

impl<K> Clone for LimiterBuilder<K> {
    fn clone(&self) -> Self {
        LimiterBuilder {
            clock: self.clock.clone(),
            fleet: self.fleet.clone(),
            name: self.name.clone(),
            ..*self
        }
    }
}

impl<K> std::fmt::Debug for LimiterBuilder<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimiterBuilder")
            .field("max_inflight", &self.max_inflight)
            .field("adaptive", &self.adaptive)
            .field("max_rate", &self.max_rate)
            .field("promotion", &self.promotion)
            .field("exact_capacity", &self.exact_capacity)
            .field("sketch", &(self.rows, self.columns))
            .field("peak_rate", &self.peak_rate)
            .field("max_waiters", &(self.max_waiters, self.max_waiters_per_key))
            .finish_non_exhaustive()
    }
}

impl<K> LimiterBuilder<K> {
    pub(super) fn new() -> Self {
        LimiterBuilder {
            max_inflight: None,
            adaptive: None,
            max_rate: None,
            promotion: DEFAULT_PROMOTION,
            shadow: false,
            name: DEFAULT_NAME.to_owned(),
            retention: DEFAULT_RETENTION,
            exact_capacity: None,
            rows: DEFAULT_ROWS,
            columns: None,
            peak_rate: DEFAULT_PEAK_RATE,
            max_waiters: DEFAULT_MAX_WAITERS,
            max_waiters_per_key: DEFAULT_MAX_WAITERS_PER_KEY,
            clock: None,
            #[cfg(feature = "fault-injection")]
            hash_seed: None,
            fleet: FleetSetup::none(),
            key: std::marker::PhantomData,
        }
    }

    /// At most `limit` requests in flight per key.
    ///
    /// A key near its limit (at its promotion threshold) is counted exactly. Its requests are
    /// admitted and given back without a lock while they fit, and under an in-flight limit
    /// alone refused without one past it; what takes a short lock shared by the 16 keys of
    /// its set is a key entering or leaving the exact stage, a refusal under both this and a
    /// rate limit ([`max_rate`](Self::max_rate)), a rate lease spent, and every decision of a
    /// limiter that learns its in-flight limits
    /// ([`adaptive_inflight`](Self::adaptive_inflight)). See docs/architecture.md.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(1).build().unwrap();
    /// let _permit = limiter.try_acquire("origin").unwrap();
    /// assert_eq!(limiter.try_acquire("origin").unwrap_err().limit, 1);
    /// ```
    pub fn max_inflight(mut self, limit: u32) -> Self {
        self.max_inflight = Some(limit);
        self
    }

    /// Learns the in-flight limit of each hot origin from its latency, with `max_inflight`
    /// as the ceiling: an origin whose latency rises with its concurrency (it queues) is held
    /// near what it can serve, and gets its room back when its latency does. Keys whose in
    /// flight stays below the learning threshold ([`AdaptiveInflight::learn_from`] of the
    /// ceiling, an eighth by default; the in-flight promotion threshold is lowered to it) are
    /// judged by `max_inflight` as without it and pay nothing for it; the state of the keys that learn lives in the exact stage's
    /// places (fixed memory), and the clock is read at their admissions and completions
    /// only. [`AdaptiveInflight`] says how, and the algorithm.
    ///
    /// Completions come from the permits: the time from admission to drop, and what
    /// [`Permit::record`](super::Permit::record) says of the origin's answer. The learnt
    /// limit of each key is in [`HeavyHitter::inflight_limit`](super::HeavyHitter::inflight_limit)
    /// and [`Limiter::inflight_limit`](super::Limiter::inflight_limit).
    ///
    /// # Errors
    ///
    /// `build` refuses it without `max_inflight`, with a floor of 0 or above `max_inflight`,
    /// a tolerance outside (1, 10], probes fewer than 4 rounds apart, a `learn_from` outside
    /// (0, 1], or a `forget_after` outside 100 ms to an hour
    /// ([`ConfigError::InvalidAdaptive`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{AdaptiveInflight, ConfigError, Limiter};
    ///
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_inflight(100)
    ///     .adaptive_inflight(AdaptiveInflight::new())
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(limiter.inflight_limit("origin"), Some(100));
    ///
    /// let no_ceiling = Limiter::<String>::builder()
    ///     .max_rate(100, std::time::Duration::from_secs(1))
    ///     .adaptive_inflight(AdaptiveInflight::new())
    ///     .build();
    /// assert!(matches!(no_ceiling, Err(ConfigError::InvalidAdaptive(_))));
    /// ```
    pub fn adaptive_inflight(mut self, adaptive: AdaptiveInflight) -> Self {
        self.adaptive = Some(adaptive);
        self
    }

    /// At most `limit` requests per `interval` per key, as a sliding window: a request is
    /// admitted while `prev·(1−f) + curr`, this request included, is at most `limit`, where
    /// `curr` and `prev` are what the key was admitted in this window and the one before, and
    /// `f` how far into this window the time is. So a key sending steadily is held to `limit`
    /// a window, but one that filled the previous window weighs on this one: at a limit of 1,
    /// a steady sender is admitted about once every other window, not once a window (51 a
    /// second at 1 per 10 ms, not 100). For a rate with room for bursts, give a limit of
    /// several per interval over a longer interval (100 per second rather than 1 per 10 ms).
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
    pub fn max_rate(mut self, limit: u32, interval: Duration) -> Self {
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
    /// 2^20, instead of the capacity that follows from
    /// [`peak_rate`](Self::peak_rate).
    ///
    /// Sized from the peak rate, the stage has room for every key that can truly be at its
    /// promotion threshold at once: at most `peak × interval ÷ threshold` keys can each send
    /// a threshold's worth of requests in one rate window, and `peak × 100 ms ÷ threshold`
    /// (100 ms: the time in flight assumed on average) can each hold a threshold's worth in
    /// flight. The stage gets twice their sum (a key's hash picks its set of 16 places, and a
    /// stage half full rarely has a full set), from 1,024 to 16,384 keys: the most, 16,384, at a million requests a second and a
    /// limit of 100 per second, where up to 20,000 keys could be at their threshold at once.
    /// Beyond it, keys that find no place are decided by their estimates alone, never over
    /// their limits ([`LimiterStats::exact_full`](crate::LimiterStats::exact_full) counts
    /// them).
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
        self.exact_capacity = Some(keys);
        self
    }

    /// The size of each sketch (in-flight, and each rate window): `rows` × `columns`, instead
    /// of the size that follows from [`peak_rate`](Self::peak_rate).
    ///
    /// A key's counters for all its rows live in one 64-byte cache line of 16 counters, so
    /// `rows` is at most 16, and each row has at most `16 / rows` counters in a line (8 at the
    /// default 2 rows): `columns` is rounded up to a multiple of that, a whole number of
    /// lines. Counters are 32 bits (limits up to [`Limits::MAX_LIMIT`]).
    ///
    /// Checked by [`build`](Self::build): zero rows or columns give
    /// [`ConfigError::ZeroRows`] or [`ConfigError::ZeroColumns`], more than 16 rows
    /// [`ConfigError::TooManyRows`], and more than
    /// [`Estimator::MAX_COUNTERS`](crate::Estimator::MAX_COUNTERS) counters (for the rate, across its window slots)
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

    /// Every decision in shadow (off by default): made and counted as usual, and a request
    /// the limits would refuse is admitted with a permit that says so
    /// ([`Permit::shadow_rejection`](crate::Permit::shadow_rejection)), to watch what a limit
    /// would do before it does anything. One plan alone can be tried the same way
    /// ([`Limits::shadow`]).
    ///
    /// What a shadow limiter counts is what it would count enforcing: a request admitted in
    /// shadow counts as the refusal it stands for. It is not in flight for the limiter (its
    /// permit gives nothing back), and it weighs on its key's rate as a refused request does
    /// (the sketches keep refused requests; the exact counts do not). So the next decisions
    /// are the ones an enforcing limiter would make on the same traffic, and a key's count of
    /// shadow refusals over time is the count of refusals enforcing would have answered, but
    /// for the sketches' noise: an enforcing limiter answers a flood's repeated refusals from
    /// its over-limit cache, which the sketches do not count, while in shadow each is decided
    /// anew (at the cost of the whole decision) and counted, so a key that collides with a
    /// flooded one may see a little more in shadow, never less.
    ///
    /// The defaults' [`Limits::shadow`] is this switch at run time: `set_limits` with limits
    /// in shadow or not turns enforcement off or on, and while it is off, every plan is in
    /// shadow too. Off, it costs nothing: it is read only where a refusal is made.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Limiter, Reason};
    ///
    /// let limiter: Limiter<String> =
    ///     Limiter::builder().max_inflight(1).shadow(true).build().unwrap();
    /// let first = limiter.try_acquire("api.example").unwrap();
    /// let second = limiter.try_acquire("api.example").expect("shadow: never refused");
    /// assert_eq!(second.shadow_rejection().unwrap().reason, Reason::Inflight);
    /// drop(second); // gives nothing back: it was never counted in flight
    /// assert_eq!(limiter.estimate("api.example").inflight, Some(1));
    /// # drop(first);
    /// ```
    pub fn shadow(mut self, on: bool) -> Self {
        self.shadow = on;
        self
    }

    /// The limiter's name in its metrics (the `limiter` label; default `"default"`), to tell
    /// several limiters of one process apart. Metrics are published with the `metrics`
    /// feature only; see [`Limiter`]'s "Metrics".
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let per_origin: floodgate::Limiter<String> = floodgate::Limiter::builder()
    ///     .name("per-origin")
    ///     .max_rate(100, Duration::from_secs(1))
    ///     .build()
    ///     .unwrap();
    /// # drop(per_origin);
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How long [`Limiter::heavy_hitters`] keeps listing a key after the exact stage stopped
    /// counting it (default a minute): a flood that ended between two scrapes of a report is
    /// still in the second. A key also leaves the list when another key takes its place in
    /// the stage, so the list stays within the stage's capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let limiter: floodgate::Limiter<String> = floodgate::Limiter::builder()
    ///     .max_inflight(8)
    ///     .heavy_hitters_retention(Duration::from_secs(300))
    ///     .build()
    ///     .unwrap();
    /// # drop(limiter);
    /// ```
    pub fn heavy_hitters_retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The most requests per second this process sends through the limiter, all keys
    /// together (default a million): the one knob the sketches are
    /// sized by, unless [`sketch`](Self::sketch) gives their size.
    ///
    /// A count-min counter carries about (requests per window) ÷ (columns) of other keys' requests:
    /// that noise is what every key's estimate starts from. Each sketch gets the columns (from 2^10
    /// to 2^17) that keep the noise at the peak rate at an eighth of its promotion threshold (half
    /// the limit by default): the rate sketch for `peak × interval` requests per window, the
    /// in-flight sketch for `peak × 100 ms` requests in flight (Little's law, with 100 ms in flight
    /// on average). With a million requests a second and limits of 100 per second, that is the
    /// most, 2^17 columns (2 rows of 4-byte counters: a key's rows in one 64-byte line; the noise
    /// is then 0.15 of the threshold), and a limiter of about 11.2 MB (`max_rate` alone, by
    /// `memory_bytes`). For lower limits at that volume the columns stop at the most, and
    /// [`Limiter::stats`] says when traffic goes past what they can tell apart (`saturated`):
    /// decisions then stay on the safe side of each limit (a key is never admitted over it) but
    /// healthy keys may be refused.
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

    /// The most requests that may wait in [`Limiter::acquire`] at once, all keys together
    /// (default 4,096, at most 2^24: more is
    /// [`ConfigError::Waiters`]); a request beyond them is refused at once. Their room (about
    /// 170 bytes each) is allocated when the limiter is built, so memory stays fixed whatever
    /// the traffic. 0 turns waiting off: `acquire` then decides like `try_acquire`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> =
    ///     Limiter::builder().max_inflight(1).max_waiters(0).build().unwrap();
    /// let _held = limiter.try_acquire("origin").unwrap();
    /// // No room to wait: refused at once, however long the caller would wait.
    /// assert!(limiter.acquire("origin", Duration::from_secs(3600)).await.is_err());
    /// # }
    /// ```
    pub fn max_waiters(mut self, waiters: usize) -> Self {
        self.max_waiters = waiters;
        self
    }

    /// The most requests of one key that may wait at once (default 64): a flooded key cannot take every place of
    /// [`max_waiters`](Self::max_waiters) from the others.
    ///
    /// # Examples
    ///
    /// ```
    /// let builder = floodgate::Limiter::<String>::builder()
    ///     .max_inflight(10)
    ///     .max_waiters(10_000)
    ///     .max_waiters_per_key(100);
    /// assert!(builder.build().is_ok());
    /// ```
    pub fn max_waiters_per_key(mut self, waiters: usize) -> Self {
        self.max_waiters_per_key = waiters;
        self
    }

    /// Hashes keys under fixed keys from `seed` instead of random ones, so that two limiters
    /// built alike count the same keys in the same counters: for tests that compare two
    /// limiters on the same traffic. Never for production (the random keys are what keeps an
    /// attacker from choosing colliding keys); not part of the stable API.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn hash_seed(mut self, seed: u64) -> Self {
        self.hash_seed = Some(seed);
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

    /// The in-flight promotion threshold's share of each in-flight limit: the promotion
    /// threshold, or where keys start learning their in-flight limit if that is lower.
    fn inflight_promotion(&self) -> f64 {
        self.adaptive
            .map_or(self.promotion, |a| a.inflight_promotion(self.promotion))
    }

    /// Builds the limiter.
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidLimit`] when no limit is set, a limit is below 1, the promotion
    /// threshold is outside (0, 1] or the peak rate is 0; [`ConfigError::ExactCapacity`] when
    /// the exact capacity is 0 or above 2^20; the errors of
    /// [`Estimator::try_new`](crate::Estimator::try_new) and
    /// [`RateBuilder::build`](crate::rate::RateBuilder::build) for the sketch size and the interval.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{ConfigError, Limiter};
    ///
    /// let no_limit = Limiter::<String>::builder().build();
    /// assert!(matches!(no_limit, Err(ConfigError::InvalidLimit(_))));
    /// assert!(Limiter::<String>::builder().max_inflight(5).build().is_ok());
    ///
    /// let huge = Limiter::<String>::builder().max_inflight(5).exact_capacity(1 << 30).build();
    /// let err = huge.unwrap_err();
    /// assert!(matches!(err, ConfigError::ExactCapacity { .. }));
    /// assert!(err.to_string().contains("between 1 and 1048576 keys"));
    /// ```
    pub fn build(self) -> Result<Limiter<K>, ConfigError>
    where
        K: Send + Sync + 'static,
    {
        check_defaults(self.max_inflight, self.max_rate.map(|(limit, _)| limit))?;
        if !(self.promotion > 0.0 && self.promotion <= 1.0) {
            return Err(ConfigError::InvalidLimit(
                "the promotion threshold must be in (0, 1]",
            ));
        }
        if let Some(asked) = self
            .exact_capacity
            .filter(|&keys| keys == 0 || keys > MAX_EXACT_CAPACITY)
        {
            return Err(ConfigError::ExactCapacity {
                asked,
                max: MAX_EXACT_CAPACITY,
            });
        }
        if self.max_waiters > MAX_WAITERS {
            return Err(ConfigError::Waiters {
                asked: self.max_waiters,
                max: MAX_WAITERS,
            });
        }
        if self.peak_rate == 0 {
            return Err(ConfigError::InvalidLimit(
                "the peak rate must be at least 1 request per second",
            ));
        }
        if let Some(adaptive) = &self.adaptive {
            adaptive.check(self.max_inflight)?;
        }
        let peak = self.peak_rate as f64;
        let limits = Limits::new().shadow(self.shadow);
        let limits = match self.max_inflight {
            Some(limit) => limits.max_inflight(limit),
            None => limits,
        };
        let limits = match self.max_rate {
            Some((limit, _)) => limits.max_rate(limit),
            None => limits,
        };
        // The sketches are sized for the default limits' thresholds.
        let inflight_promotion = self.inflight_promotion();
        let defaults = Thresholds::promoting(&limits, self.promotion, inflight_promotion);
        // One hasher for every table of the limiter, its Rate's included.
        #[cfg(feature = "fault-injection")]
        let hasher = self
            .hash_seed
            .map_or_else(KeyHasher::new, KeyHasher::with_seed);
        #[cfg(not(feature = "fault-injection"))]
        let hasher = KeyHasher::new();
        let inflight = match defaults.inflight {
            Some(t) => {
                let in_flight = peak * ASSUMED_TIME_IN_FLIGHT.as_secs_f64();
                let columns = self
                    .columns
                    .unwrap_or_else(|| sized_columns(in_flight, t.promote_at as f64));
                Some(Blocked::try_new(self.rows, columns, false)?)
            }
            None => None,
        };
        let rate = match (self.max_rate, defaults.rate) {
            (Some((_, interval)), Some(t)) => {
                let per_window = peak * interval.as_secs_f64();
                let columns = self
                    .columns
                    .unwrap_or_else(|| sized_columns(per_window, t.promote_at));
                let mut builder = Rate::builder(interval)
                    .estimator(self.rows, columns)
                    .blocked();
                if let Some(clock) = &self.clock {
                    builder = builder.clock(clock);
                }
                if self.fleet.aligns_windows() {
                    builder = builder.aligned_to_unix_epoch();
                }
                Some(builder.build_with_hasher(hasher.clone())?)
            }
            _ => None,
        };
        let time = match &self.clock {
            Some(clock) => TimeSource::manual(clock),
            None => TimeSource::Shared,
        };
        // An epoch of the exact stage: a rate window (the evidence then follows the windows
        // the limit is judged on), at most a second.
        let period = rate
            .as_ref()
            .map_or(SWEEP_PERIOD, |r| r.interval().min(SWEEP_PERIOD));
        let capacity = self.exact_capacity.unwrap_or_else(|| {
            let hot_inflight = defaults.inflight.map_or(0.0, |t| {
                peak * ASSUMED_TIME_IN_FLIGHT.as_secs_f64() / t.promote_at as f64
            });
            let hot_rate = rate.as_ref().zip(defaults.rate).map_or(0.0, |(r, t)| {
                peak * r.interval().as_secs_f64() / t.promote_at
            });
            // Twice the keys: places come in sets of 16 that a key's hash picks, so a stage
            // half full rarely has a full set (Poisson(8) exceeds 16 in 0.4% of sets).
            // `as` saturates (a NaN is 0).
            ((2.0 * (hot_inflight + hot_rate)).ceil() as usize)
                .clamp(MIN_SIZED_EXACT_CAPACITY, MAX_SIZED_EXACT_CAPACITY)
        });
        let fleet = self.fleet.join(rate.as_ref())?;
        let sketches = Sketches {
            hasher,
            inflight,
            rate,
        };
        let shared = Arc::new_cyclic(|weak: &Weak<Shared<K>>| {
            let sweeper = Arc::new(Sweeper {
                shared: weak.clone(),
                period: crate::clock::saturating_nanos(period),
                next_sweep: crate::sync::AtomicU64::new(0),
            });
            // Registered before the limiter exists: a sweep that comes first finds nothing to
            // upgrade and waits for the next period.
            let user: Weak<dyn Tick> = Arc::downgrade(&sweeper) as Weak<dyn Tick>;
            let registration = time.register(user);
            let longest_wait = sketches.rate.as_ref().map_or(0, |r| r.longest_wait_nanos());
            Shared {
                deadline_unit: super::overlimit::Unit::for_longest_wait(longest_wait),
                sketches,
                defaults: Defaults::new(defaults, RateMark::new(&defaults)),
                promotion: self.promotion,
                inflight_promotion,
                adaptive: self.adaptive,
                shadow: AtomicBool::new(self.shadow),
                setting: Mutex::new(()),
                highest_rate_promotion: HighestRatePromotion::new(&defaults),
                tally: Tally::new(&self.name),
                retention: crate::clock::saturating_nanos(self.retention),
                exact: ExactStage::new(capacity),
                waiters: Waiters::new(self.max_waiters, self.max_waiters_per_key, time.coarse()),
                fleet: fleet.clone(),
                time,
                registration,
                _sweeper: sweeper,
            }
        });
        self.fleet.start(&shared, &fleet);
        Ok(Limiter { shared })
    }
}

/// The columns that keep the noise of `events` spread over a sketch at most 1/NOISE_MARGIN
/// of `promote_at`, within the sized bounds. Not rounded to a power of two: the blocked
/// tables take any whole number of cache lines.
fn sized_columns(events: f64, promote_at: f64) -> usize {
    let wanted = (NOISE_MARGIN * events / promote_at.max(1.0)).ceil();
    // `as` saturates (a NaN is 0).
    (wanted as usize).clamp(MIN_SIZED_COLUMNS, MAX_SIZED_COLUMNS)
}

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl<K> LimiterBuilder<K>
where
    K: crate::fleet::FleetKey + std::hash::Hash + Eq + Send + Sync + 'static,
{
    /// Holds the rate limit (`max_rate`) together with every other limiter of the same
    /// [`FleetConfig`](crate::fleet::FleetConfig), through Redis (feature `redis`): see [`crate::fleet`].
    ///
    /// Decisions stay local; a thread of the limiter's own syncs the keys near their limits
    /// every [`sync_interval`](crate::fleet::FleetConfig::sync_interval). The windows are aligned to the
    /// Unix epoch, and the interval must be a whole number of milliseconds. In-flight limits
    /// stay per node. [`build`](Self::build) checks the configuration
    /// ([`ConfigError::Fleet`](crate::ConfigError::Fleet)); it does not need Redis to be up.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::{fleet::FleetConfig, ConfigError, Limiter};
    ///
    /// let fleet = FleetConfig::new("redis://127.0.0.1:6379/").prefix("edge");
    /// let without_rate = Limiter::<String>::builder().max_inflight(5).fleet(fleet.clone()).build();
    /// assert!(matches!(without_rate, Err(ConfigError::Fleet(_))));
    /// let limiter = Limiter::<String>::builder()
    ///     .max_rate(1000, Duration::from_secs(1))
    ///     .fleet(fleet)
    ///     .build()
    ///     .unwrap();
    /// assert!(limiter.fleet_status().is_some());
    /// ```
    pub fn fleet(mut self, config: crate::fleet::FleetConfig) -> Self {
        self.fleet = FleetSetup::new(config, super::fleet::spawn_sync::<K>);
        self
    }
}

impl<K> Limiter<K>
where
    K: std::hash::Hash + Eq + Send + Sync,
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
}
