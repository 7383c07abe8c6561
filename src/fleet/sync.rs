//! The sync thread of a fleet's node: every sync interval, the counts of the keys the limiter
//! counts exactly go out to Redis, and the fleet's totals of them come back into the limiter.
//!
//! It sees the limiter only through [`Member`], which the limiter implements at its seam with
//! the fleet, so that this module knows nothing of the limiter's storage.

use std::borrow::Cow;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{FleetNode, FleetView, Push, Store};
use crate::clock::saturating_nanos;
use crate::rate::Rate;
use crate::ConfigError;

/// What the sync thread reads and writes of a limiter.
pub(crate) trait Member: Send + Sync + 'static {
    /// The limiter's rate windows (a fleet limiter always has them).
    fn rate(&self) -> Option<&Rate>;

    /// Calls `f` with each key the limiter counts exactly, its counts as of `bucket`.
    fn for_each_tracked(&self, bucket: u64, f: &mut dyn FnMut(Tracked<'_>));

    /// Calls `f` on the fleet's view of the key pushed as `hash` and `generation`, if the
    /// limiter still counts that key there.
    fn learnt(&self, hash: u64, generation: u32, f: &mut dyn FnMut(&mut FleetView));
}

/// One key the limiter counts exactly, as the sync reads it.
#[derive(Debug)]
pub(crate) struct Tracked<'a> {
    /// Where the key's entry is, to find it again when the fleet answers.
    pub(crate) hash: u64,
    pub(crate) generation: u32,
    /// The key's name in the fleet.
    pub(crate) key: Cow<'a, [u8]>,
    /// This node's count of the key in the current window, and in the one before.
    pub(crate) count: u64,
    pub(crate) previous: u64,
    /// What the fleet last said of the key, and this node's refusals of it.
    pub(crate) view: FleetView,
}

/// The window length a fleet accepts: whole milliseconds, as Redis names windows.
pub(crate) fn check_interval(interval: Duration) -> Result<(), ConfigError> {
    if interval.subsec_nanos() % 1_000_000 != 0 {
        return Err(ConfigError::Fleet(format!(
            "a fleet limiter's rate interval must be a whole number of milliseconds, got \
             {interval:?}"
        )));
    }
    Ok(())
}

/// Starts the sync thread of `limiter`'s node. It holds the limiter weakly and ends with it.
pub(crate) fn spawn<L: Member + ?Sized>(limiter: Weak<L>, node: Arc<FleetNode>) {
    let spawned = thread::Builder::new()
        .name("floodgate-fleet".into())
        .spawn(move || sync_loop(&limiter, &node));
    if let Err(error) = spawned {
        log::error!("floodgate fleet: cannot start the sync thread ({error}); deciding locally");
    }
}

/// One key to push, owned across the round trip to Redis.
struct Pushed {
    hash: u64,
    generation: u32,
    key: Vec<u8>,
    count: u64,
    previous: u64,
    /// This node's refusals in the current window, and in the one before.
    refused: (u64, u64),
}

/// The fleet's size as this node goes by it, kept by the sync thread from sync to sync.
///
/// Redis counts the nodes that synced within their time to live. After an outage that count
/// is short of the nodes that have not synced since Redis came back: a Redis that restarted
/// lost the whole set, and one that was away from every node for a time to live dropped them
/// all. The first node back found itself alone, took the whole limit, and judged its view,
/// which held its own counts alone (Redis had lost the others', or had none of the outage):
/// 1.4–1.7 × the limit in the window Redis came back in. So after a failed sync the node keeps
/// the size it had until Redis counts as many again (every node it knew has synced since, its
/// pushes with it) or for a nodes' time to live at most (a node that died meanwhile), and
/// meanwhile takes every view as the fleet's first word on its key (held to its share too).
#[derive(Debug, Default)]
struct Membership {
    /// The size this node last went by; `None` before its first sync.
    seen: Option<usize>,
    /// A sync failed since the last one that succeeded.
    failed: bool,
    /// While the fleet gathers again after an outage: the size it had, and until when that
    /// stands at the most.
    regathering: Option<(usize, Instant)>,
}

impl Membership {
    /// A sync failed.
    fn failed(&mut self) {
        self.failed = true;
    }

    /// A sync succeeded at `now`, Redis counting `reported` nodes alive; `ttl`: the nodes' time
    /// to live. Returns the size to go by, and whether the fleet is still gathering again, its
    /// counts in Redis maybe lacking nodes that have not synced since the outage.
    fn synced(&mut self, reported: usize, now: Instant, ttl: Duration) -> (usize, bool) {
        if let (Some(seen), true) = (self.seen, self.failed) {
            let held = self.regathering.map_or(seen, |(held, _)| held.max(seen));
            self.regathering = Some((held, now.checked_add(ttl).unwrap_or(now)));
        }
        self.failed = false;
        if let Some((held, until)) = self.regathering {
            if reported >= held || now >= until {
                self.regathering = None;
            }
        }
        let size = self
            .regathering
            .map_or(reported, |(held, _)| held.max(reported));
        self.seen = Some(size);
        (size, self.regathering.is_some())
    }
}

fn sync_loop<L: Member + ?Sized>(limiter: &Weak<L>, node: &FleetNode) {
    let mut store = match Store::new(&node.config) {
        Ok(store) => store,
        Err(error) => {
            node.failed(error.to_string());
            return;
        }
    };
    let interval = node.config.get_sync_interval();
    let mut keys: Vec<Pushed> = Vec::new();
    let mut membership = Membership::default();
    let mut next = Instant::now();
    loop {
        // The first sync at once: until it, the node knows no fleet (it counts itself alone).
        match limiter.upgrade() {
            Some(limiter) => sync_once(&*limiter, node, &mut store, &mut keys, &mut membership),
            None => return,
        }
        // Checked: `validate` bounds the interval, but the sync thread may not panic on it.
        next = next.checked_add(interval).unwrap_or(next);
        let now = Instant::now();
        if next > now {
            thread::sleep(next - now);
        } else {
            next = now; // late: do not try to catch up
        }
    }
}

/// One sync: the tracked keys' counts out, the fleet's totals back into their views.
fn sync_once<L: Member + ?Sized>(
    limiter: &L,
    node: &FleetNode,
    store: &mut Store,
    keys: &mut Vec<Pushed>,
    membership: &mut Membership,
) {
    let Some(rate) = limiter.rate() else {
        return;
    };
    let (bucket, at, into) = rate.now_bucket();
    let window = rate.window_number(bucket);
    keys.clear();
    limiter.for_each_tracked(bucket, &mut |tracked| {
        keys.push(Pushed {
            hash: tracked.hash,
            generation: tracked.generation,
            key: tracked.key.into_owned(),
            count: tracked.count,
            previous: tracked.previous,
            refused: tracked.view.refused.of(bucket),
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
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    // The windows took their alignment from the Unix clock when the limiter was built, and
    // follow the monotonic clock since: a Unix clock stepped since then is told once.
    let aligned_ms = window
        .saturating_mul(window_ms)
        .saturating_add(into / 1_000_000);
    node.check_clock(now_ms as i128 - aligned_ms as i128);
    match store.sync(&node.id, now_ms, window_ms, &pushes) {
        Ok(synced) => {
            let len = saturating_nanos(rate.interval());
            let sync = saturating_nanos(node.config.get_sync_interval());
            let (nodes, regathering) =
                membership.synced(synced.nodes, Instant::now(), node.config.node_ttl());
            for (pushed, totals) in keys.iter().zip(synced.totals) {
                limiter.learnt(pushed.hash, pushed.generation, &mut |view| {
                    *view = view.synced(
                        (bucket, at, into),
                        totals,
                        (pushed.count, pushed.previous),
                        (len, sync),
                        regathering,
                    );
                });
            }
            node.succeeded(nodes, pushes.len());
        }
        Err(error) => {
            membership.failed();
            node.failed(error.to_string());
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(1);

    #[test]
    fn the_fleets_size_is_what_redis_counts_while_syncs_succeed() {
        let (mut m, t0) = (Membership::default(), Instant::now());
        // The first sync, even after failures: the fleet this node finds.
        m.failed();
        assert_eq!(m.synced(1, t0, TTL), (1, false));
        assert_eq!(m.synced(3, t0, TTL), (3, false));
        // A node gone (its time to live passed in Redis) counts at once.
        assert_eq!(m.synced(2, t0, TTL), (2, false));
    }

    /// A Redis restarted empty counts only the nodes that synced since: the first back found
    /// itself alone and took the whole limit.
    #[test]
    fn after_an_outage_the_size_stands_until_redis_counts_as_many_again() {
        let (mut m, t0) = (Membership::default(), Instant::now());
        assert_eq!(m.synced(3, t0, TTL), (3, false));
        m.failed();
        m.failed();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(m.synced(1, at(100), TTL), (3, true));
        assert_eq!(m.synced(2, at(200), TTL), (3, true));
        assert_eq!(m.synced(3, at(300), TTL), (3, false), "gathered");
        assert_eq!(m.synced(2, at(400), TTL), (2, false), "a node gone since");
        // A failure while Redis counted as many: nothing held.
        m.failed();
        assert_eq!(m.synced(2, at(500), TTL), (2, false));
        // More nodes than before: the larger size at once.
        m.failed();
        assert_eq!(m.synced(4, at(600), TTL), (4, false));
    }

    #[test]
    fn a_node_that_died_in_the_outage_is_let_go_after_a_time_to_live() {
        let (mut m, t0) = (Membership::default(), Instant::now());
        assert_eq!(m.synced(3, t0, TTL), (3, false));
        m.failed();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(m.synced(2, at(100), TTL), (3, true));
        // Failing again while gathering: the size held stays, its time runs from the return.
        m.failed();
        assert_eq!(m.synced(2, at(600), TTL), (3, true));
        assert_eq!(m.synced(2, at(1_500), TTL), (3, true));
        assert_eq!(m.synced(2, at(1_600), TTL), (2, false));
    }
}
