//! What a limiter tells of its keys and of itself, off the request path: a key's counts and
//! in-flight limit now, the keys near their limits, its counters and gauges, its memory.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::promoted::Promoted;
use super::shared::Shared;
use super::{decision, tally, Estimate, HeavyHitter, InflightLimit, Limiter, LimiterStats};

/// `stats().saturated` turns on when the noise reaches this fraction of a promotion
/// threshold: from there on, light keys start to look hot.
const SATURATED_AT: f64 = 0.5;

/// A limit as reported (in the sketches' `isize`, never negative).
fn reported(limit: isize) -> u32 {
    limit.clamp(0, u32::MAX as isize) as u32
}

impl<K> Shared<K> {
    /// The in-flight limit a promoted key learnt, under the ceiling it was last judged by.
    pub(super) fn learnt_limit(&self, entry: &Promoted) -> Option<u32> {
        let config = self.adaptive.as_ref()?;
        let ceiling = entry.thresholds.inflight?.limit;
        entry.learning.limit(config, ceiling).map(reported)
    }

    /// See [`Limiter::stats`].
    pub(super) fn stats(&self) -> LimiterStats {
        let s = self;
        let defaults = s.defaults.load();
        let rate_noise = s.sketches.rate.as_ref().map(crate::Rate::noise);
        let rate_promote_at = defaults.rate.map(|t| t.promote_at);
        let inflight_noise = s.sketches.inflight.as_ref().map(|c| c.mean_count());
        let inflight_promote_at = defaults.inflight.map(|t| t.promote_at as f64);
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
            waiting: s.waiters.len(),
        }
    }

    /// What the metrics' gauges show now (feature `metrics`).
    pub(super) fn gauges(&self) -> tally::Gauges {
        let stats = self.stats();
        let saturation = |noise: Option<f64>, at: Option<f64>| Some(noise? / at?);
        let (mut learning, mut learning_held) = (0, 0);
        self.exact.for_each(|entry, _, _| {
            let entry = &entry.state;
            if let Some((limit, ceiling)) = self.learnt_limit(entry).zip(entry.thresholds.inflight)
            {
                learning += 1;
                learning_held += usize::from((limit as isize) < ceiling.limit);
            }
        });
        tally::Gauges {
            exact_keys: stats.promoted,
            exact_capacity: stats.exact_capacity,
            waiting: stats.waiting,
            learning,
            learning_held,
            rate_saturation: saturation(stats.rate_noise, stats.rate_promote_at),
            inflight_saturation: saturation(stats.inflight_noise, stats.inflight_promote_at),
            fleet: self.fleet.gauges(),
        }
    }
}

impl<K> Limiter<K>
where
    K: Hash + Eq + Send + Sync,
{
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
        s.exact.with_entry(key, hash, |entry| match entry {
            Some((e, units)) => {
                let (now, counts, tracked) = s.reported(hash, &e.state, units);
                decision::estimate(&now, Some((&counts, tracked)))
            }
            None => decision::estimate(&s.sketches.reread(hash), None),
        })
    }

    /// The in-flight limit `key` is judged by now: the one it learnt from its latency, for a
    /// hot key under
    /// [`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight), else
    /// the default `max_inflight` (`None` without one). A per-request limit ([`with_limits`](Self::with_limits)) is the
    /// ceiling of a learnt one, and is not known here.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(8).build().unwrap();
    /// assert_eq!(limiter.inflight_limit("origin"), Some(8));
    /// ```
    pub fn inflight_limit<Q>(&self, key: &Q) -> Option<u32>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let s = &*self.shared;
        let configured = s
            .defaults
            .load()
            .inflight
            .map(|t| t.limit.clamp(0, u32::MAX as isize) as u32);
        let hash = s.sketches.hash(key);
        let learnt = s.exact.with_entry(key, hash, |entry| {
            entry.and_then(|(e, _)| s.learnt_limit(&e.state))
        });
        learnt.or(configured)
    }

    /// The keys the exact stage is counting now — the origins near or over their limits —
    /// and those it stopped counting within the retention
    /// ([`LimiterBuilder::heavy_hitters_retention`](super::LimiterBuilder::heavy_hitters_retention),
    /// a minute by default, so that a scrape every 15 or 30 s still sees a flood that ended),
    /// with their counts now, most rejected first.
    ///
    /// A key that left the stage is listed until the retention has passed or its place in
    /// the stage is taken by another key, with `left_ago` set. Its `rejected` counts the
    /// refusals of the key's counts while the stage held the key (this promotion of it: a key
    /// promoted again starts from 0), a run of them answered from the over-limit cache as
    /// one; not a request refused before anything is counted (a cost over its limit). The
    /// metrics count each (`floodgate_requests_total`, feature `metrics`).
    ///
    /// A key is listed because its sketch estimate reached a promotion threshold, which other
    /// keys sharing its counters can do for it: read each figure with its [`Figure`](super::Figure)
    /// marking. A count is exact; an estimate is an upper bound on a figure that may be far
    /// smaller.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{Figure, InflightLimit};
    ///
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(4).build().unwrap();
    /// let permits: Vec<_> = (0..6).filter_map(|_| limiter.try_acquire("busy").ok()).collect();
    /// assert_eq!(permits.len(), 4);
    /// let hitters = limiter.heavy_hitters();
    /// assert_eq!(hitters.len(), 1);
    /// assert_eq!(hitters[0].key, "busy");
    /// // The request admitted before the promotion was counted by the sketch only.
    /// assert_eq!(hitters[0].inflight, Some(Figure::Estimated { at_most: 4 }));
    /// assert_eq!(hitters[0].inflight_limit, Some(InflightLimit::Configured(4)));
    /// assert_eq!(hitters[0].rejected, 2);
    /// ```
    pub fn heavy_hitters(&self) -> Vec<HeavyHitter<K>>
    where
        K: Clone,
    {
        let s = &*self.shared;
        let mut hitters = Vec::new();
        let mut held = std::collections::HashSet::new();
        s.exact.for_each(|entry, units, line| {
            let state = &entry.state;
            let (now, counts, tracked) = s.reported(entry.hash, state, units);
            let (inflight, rate) = decision::figures(&now, Some((&counts, tracked)));
            held.insert(entry.hash);
            let ceiling = state.thresholds.inflight.map(|t| reported(t.limit));
            let inflight_limit = match (s.learnt_limit(state), ceiling) {
                (Some(limit), Some(ceiling)) => Some(InflightLimit::Learnt { limit, ceiling }),
                (_, configured) => configured.map(InflightLimit::Configured),
            };
            hitters.push(HeavyHitter {
                key: entry.key.clone(),
                inflight,
                rate,
                rejected: state.rejected_by_now(line, units),
                inflight_limit,
                left_ago: None,
            });
        });
        // A key that left twice (from two places of its set) is listed once, as it last
        // left; one promoted again since, once, as held.
        let now = s.now();
        let mut left = std::collections::HashMap::new();
        s.exact.for_each_departed(|departed| {
            let ago = now.saturating_sub(departed.at);
            if ago > s.retention || held.contains(&departed.hash) {
                return;
            }
            let latest = left
                .entry(departed.hash)
                .or_insert((ago, departed.rejected, None));
            if latest.2.is_none() || ago < latest.0 {
                *latest = (ago, departed.rejected, Some(departed.key.clone()));
            }
        });
        for (hash, (ago, rejected, key)) in left {
            let Some(key) = key else { continue };
            let (inflight, rate) = decision::figures(&s.sketches.reread(hash), None);
            hitters.push(HeavyHitter {
                key,
                inflight,
                rate,
                rejected,
                inflight_limit: None,
                left_ago: Some(Duration::from_nanos(ago)),
            });
        }
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
        self.shared.stats()
    }

    /// Locks of the exact stage taken so far: lets the tests check that a path takes none.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn exact_locks_taken(&self) -> u64 {
        self.shared.exact.locks_taken()
    }

    /// Whether `key`'s cell of the exact stage's filter is flagged (by its own promotion, or
    /// by another key's that shares the cell): lets the tests pick a key whose requests the
    /// filter does not send to the stage.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn exact_filter_flagged<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shared.promoted_now(self.shared.sketches.hash(key))
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
            + s.waiters.memory_bytes()
    }
}

impl<K> Limiter<K> {
    /// How this node's syncing with its fleet goes; `None` for a limiter without a fleet.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: floodgate::Limiter<String> =
    ///     floodgate::Limiter::builder().max_inflight(5).build().unwrap();
    /// assert!(limiter.fleet_status().is_none());
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn fleet_status(&self) -> Option<crate::fleet::FleetStatus> {
        self.shared.fleet.status()
    }
}
