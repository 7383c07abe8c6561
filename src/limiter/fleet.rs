//! A limiter in a fleet (feature `redis`): what its builder switch keeps, its thresholds
//! while in a fleet, and the sync thread that pushes its counts to Redis and brings the fleet's back.
//! The design and its bound are in `docs/fleet.md`.

use std::hash::Hash;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::limits::Thresholds;
use super::{Limiter, Shared};
use crate::fleet::{FleetConfig, FleetKey, FleetNode, FleetStatus, Push, Store};

/// What `LimiterBuilder::fleet` was given, and how to start the sync of this key type.
pub(super) struct FleetSetup<K> {
    pub(super) config: FleetConfig,
    pub(super) spawn: fn(Weak<Shared<K>>, Arc<FleetNode>),
}

impl<K> Clone for FleetSetup<K> {
    fn clone(&self) -> Self {
        FleetSetup {
            config: self.config.clone(),
            spawn: self.spawn,
        }
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
    pub fn fleet_status(&self) -> Option<FleetStatus> {
        self.shared.fleet.as_ref().map(|node| node.status())
    }
}

/// The thresholds a decision is made on in a fleet: the promotion threshold of the rate
/// divided by the fleet's size (a key that stays under it on every node sends at most the
/// promotion fraction of the limit in all), the fleet's view judged; and, while Redis has been
/// away too long to trust that view, the limit itself becomes this node's share, `⌈L ÷ N⌉`,
/// on its own counts.
#[inline]
pub(super) fn in_fleet(node: &FleetNode, t: &Thresholds) -> Thresholds {
    let mut t = *t;
    if let Some(rate) = t.rate.as_mut() {
        let degraded = node.degraded();
        rate.in_fleet = !degraded;
        if !degraded {
            rate.recheck = node.sync_nanos;
        }
        let nodes = node.nodes();
        if nodes == 1 {
            // Alone: the share is the limit, and promotion stays where it is.
            return t;
        }
        // ⌈L ÷ N⌉ in integers (no libm call on the request path).
        let n = nodes as isize;
        let share = rate.limit / n + isize::from(rate.limit % n > 0);
        if degraded {
            rate.limit = share;
            rate.tag_mix = super::overlimit::limit_mix(share);
        }
        rate.share = Some(share);
        rate.promote_at = (rate.promote_at * node.inverse())
            .max(1.0)
            .min(rate.limit.max(1) as f64);
    }
    t
}

/// Starts the sync thread of a fleet limiter. It holds the limiter weakly and ends with it.
pub(super) fn spawn_sync<K>(shared: Weak<Shared<K>>, node: Arc<FleetNode>)
where
    K: FleetKey + Hash + Eq + Send + Sync + 'static,
{
    let spawned = thread::Builder::new()
        .name("floodgate-fleet".into())
        .spawn(move || sync_loop(&shared, &node));
    if let Err(error) = spawned {
        log::error!("floodgate fleet: cannot start the sync thread ({error}); deciding locally");
    }
}

/// One key to push: where its entry is, and its counts.
struct Pushed {
    hash: u64,
    generation: u64,
    key: Vec<u8>,
    /// This node's count in the current window, and in the one before.
    count: u64,
    previous: u64,
    /// This node's refusals in the current window, and in the one before.
    refused: (u64, u64),
}

fn sync_loop<K>(shared: &Weak<Shared<K>>, node: &FleetNode)
where
    K: FleetKey + Hash + Eq + Send + Sync,
{
    let mut store = match Store::new(&node.config) {
        Ok(store) => store,
        Err(error) => {
            node.failed(error.to_string());
            return;
        }
    };
    let interval = node.config.get_sync_interval();
    let mut keys: Vec<Pushed> = Vec::new();
    let mut next = Instant::now();
    loop {
        // The first sync at once: until it, the node knows no fleet (it counts itself alone).
        match shared.upgrade() {
            Some(shared) => sync_once(&shared, node, &mut store, &mut keys),
            None => return,
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now; // late: do not try to catch up
        }
    }
}

/// One sync: the tracked keys' counts out, the fleet's totals back into their entries.
fn sync_once<K>(shared: &Shared<K>, node: &FleetNode, store: &mut Store, keys: &mut Vec<Pushed>)
where
    K: FleetKey + Hash + Eq,
{
    let Some(rate) = shared.sketches.rate.as_ref() else {
        return;
    };
    let (bucket, at, into) = rate.now_bucket();
    let window = rate.window_number(bucket);
    keys.clear();
    shared.exact.for_each(|entry| {
        let mut counts = entry.counts.rate;
        counts.roll_to(bucket);
        let own = |b: Option<u64>| {
            b.and_then(|b| counts.bound(b))
                .map_or(0, |n| n.max(0) as u64)
        };
        keys.push(Pushed {
            hash: entry.hash,
            generation: entry.generation,
            key: entry.key.fleet_key().into_owned(),
            count: own(Some(bucket)),
            previous: own(bucket.checked_sub(1)),
            refused: entry.counts.fleet.refused.of(bucket),
        });
    });
    let pushes: Vec<Push<'_>> = keys
        .iter()
        .map(|k| Push {
            key: &k.key,
            window,
            count: k.count,
            // Every push carries the final count of the window before: the last sync of that
            // window missed its last moments, and a Redis that restarted empty lost it.
            previous: k.previous,
            refused: k.refused.0,
            refused_previous: k.refused.1,
        })
        .collect();
    let window_ms = u64::try_from(rate.interval().as_millis()).unwrap_or(u64::MAX);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // The windows took their alignment from the Unix clock when the limiter was built, and
    // follow the monotonic clock since: a Unix clock stepped since then is told once.
    let aligned_ms = window
        .saturating_mul(window_ms)
        .saturating_add(into / 1_000_000);
    node.check_clock(now_ms as i128 - aligned_ms as i128);
    match store.sync(&node.id, now_ms, window_ms, &pushes) {
        Ok(synced) => {
            let len = crate::clock::saturating_nanos(rate.interval());
            for (pushed, totals) in keys.iter().zip(synced.totals) {
                shared.exact.update(pushed.hash, pushed.generation, |e| {
                    e.counts.fleet = e.counts.fleet.synced(
                        (bucket, at, into),
                        totals,
                        (pushed.count, pushed.previous),
                        len,
                    );
                });
            }
            node.succeeded(synced.nodes, pushes.len());
        }
        Err(error) => node.failed(error.to_string()),
    }
}

/// The window length a fleet accepts: whole milliseconds, as Redis names windows.
pub(super) fn check_interval(interval: Duration) -> Result<(), crate::ConfigError> {
    if interval.subsec_nanos() % 1_000_000 != 0 {
        return Err(crate::ConfigError::Fleet(format!(
            "a fleet limiter's rate interval must be a whole number of milliseconds, got \
             {interval:?}"
        )));
    }
    Ok(())
}
