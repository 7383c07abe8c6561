//! The seam with the `redis` feature: a limiter's node of a fleet, what its rate thresholds
//! carry in one, and how a builder joins one and starts its sync.

use std::sync::{Arc, Weak};

use super::state::FleetState;
use crate::fleet::{check_interval, FleetConfig, FleetNode, FleetStatus};
use crate::rate::Rate;
use crate::ConfigError;

pub(crate) use crate::fleet::FleetView;

/// The fleet a limiter holds its rate limit with, if any.
#[derive(Clone, Default)]
pub(crate) struct Fleet(Option<Arc<FleetNode>>);

impl Fleet {
    /// How this node's syncing goes, if it is in a fleet.
    pub(crate) fn status(&self) -> Option<FleetStatus> {
        self.0.as_ref().map(|node| node.status())
    }

    /// What a decision reads of the fleet now; `None` without a fleet.
    #[inline]
    pub(crate) fn state(&self) -> Option<FleetState> {
        self.0.as_ref().map(|node| FleetState {
            nodes: node.nodes(),
            inverse: node.inverse(),
            degraded: node.degraded(),
            sync_nanos: node.sync_nanos,
        })
    }

    /// Whether the limiter is in a fleet.
    #[inline]
    pub(crate) fn is_joined(&self) -> bool {
        self.0.is_some()
    }

    /// The fleet's gauges for the metrics; `None` without a fleet.
    pub(crate) fn gauges(&self) -> Option<crate::limiter::tally::FleetGauges> {
        let status = self.0.as_ref()?.status();
        Some(crate::limiter::tally::FleetGauges {
            connected: status.connected,
            nodes: status.nodes,
            last_sync_age: status.last_sync_age.map(|age| age.as_secs_f64()),
        })
    }
}

/// What `LimiterBuilder::fleet` was given, and how to start the sync of the limiter's state `S`.
pub(crate) struct FleetSetup<S>(Option<Setup<S>>);

struct Setup<S> {
    config: FleetConfig,
    /// The sync thread's start for the limiter's state, chosen where its key type is known
    /// to be a `FleetKey`.
    spawn: fn(Weak<S>, Arc<FleetNode>),
}

impl<S> Clone for FleetSetup<S> {
    fn clone(&self) -> Self {
        FleetSetup(self.0.as_ref().map(|setup| Setup {
            config: setup.config.clone(),
            spawn: setup.spawn,
        }))
    }
}

impl<S> FleetSetup<S> {
    /// No fleet.
    pub(crate) fn none() -> Self {
        FleetSetup(None)
    }

    /// A fleet through `config`, whose sync `spawn` starts.
    pub(crate) fn new(config: FleetConfig, spawn: fn(Weak<S>, Arc<FleetNode>)) -> Self {
        FleetSetup(Some(Setup { config, spawn }))
    }

    /// Whether the windows must be aligned to the Unix epoch: a fleet's nodes must agree on them.
    pub(crate) fn aligns_windows(&self) -> bool {
        self.0.is_some()
    }

    /// The limiter's node of the fleet, its configuration checked against the rate windows
    /// `rate` it holds together.
    pub(crate) fn join(&self, rate: Option<&Rate>) -> Result<Fleet, ConfigError> {
        let Some(setup) = &self.0 else {
            return Ok(Fleet(None));
        };
        let Some(rate) = rate else {
            return Err(ConfigError::Fleet(
                "a fleet holds a rate limit together: set max_rate".into(),
            ));
        };
        setup.config.validate()?;
        check_interval(rate.interval())?;
        let (sync, window) = (setup.config.get_sync_interval(), rate.interval());
        if sync > window {
            return Err(ConfigError::Fleet(format!(
                "a fleet sync interval of {sync:?} is longer than the rate window of \
                 {window:?}: it must be at most the window (a tenth of it or less keeps the \
                 fleet near its limit)"
            )));
        }
        Ok(Fleet(Some(Arc::new(FleetNode::new(
            setup.config.clone(),
            rate.interval(),
        )))))
    }

    /// Starts the sync thread of `shared`'s node of `fleet`.
    pub(crate) fn start(&self, shared: &Arc<S>, fleet: &Fleet) {
        if let (Some(setup), Some(node)) = (&self.0, &fleet.0) {
            (setup.spawn)(Arc::downgrade(shared), Arc::clone(node));
        }
    }
}

/// What a rate threshold carries in a fleet of more than one node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct FleetRate {
    /// This node's share of the limit, what it admits of a key in a window before the fleet
    /// has told it anything of that key.
    share: Option<isize>,
    /// Whether the fleet's view of a key is judged too: in a fleet whose view is fresh (not
    /// while the node decides on its share alone, Redis being away).
    judges_view: bool,
    /// The sync interval (nanoseconds). A refusal is judged on counts the next sync renews,
    /// so the over-limit cache holds it at most that long (0: no bound).
    recheck: u64,
}

impl FleetRate {
    /// Out of a fleet (or before one is consulted).
    pub(crate) const NONE: FleetRate = FleetRate {
        share: None,
        judges_view: false,
        recheck: 0,
    };

    pub(crate) fn new(share: Option<isize>, judges_view: bool, recheck: u64) -> Self {
        FleetRate {
            share,
            judges_view,
            recheck,
        }
    }

    #[inline]
    pub(crate) fn judges_view(&self) -> bool {
        self.judges_view
    }

    #[inline]
    pub(crate) fn share(&self) -> Option<isize> {
        self.share
    }

    /// The sync interval in nanoseconds while the fleet's view is judged (0 otherwise).
    #[inline]
    pub(crate) fn sync_nanos(&self) -> u64 {
        self.recheck
    }

    /// How long the over-limit cache may hold a refusal whose `retry_after` is `retry`.
    #[inline]
    pub(crate) fn held_for(&self, retry: u64) -> u64 {
        if self.recheck > 0 {
            retry.min(self.recheck)
        } else {
            retry
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::decision::in_fleet;
    use super::*;
    use crate::limiter::limits::Thresholds;
    use crate::Limits;

    fn state(nodes: usize, degraded: bool) -> FleetState {
        FleetState {
            nodes,
            inverse: 1.0 / nodes as f64,
            degraded,
            sync_nanos: 100,
        }
    }

    #[test]
    fn a_fleet_divides_the_promotion_threshold_and_judges_its_view_while_fresh() {
        let t = Thresholds::new(&Limits::new().max_inflight(8).max_rate(100), 0.5);
        let rate = in_fleet(&t, &state(4, false)).rate.unwrap();
        assert_eq!(
            rate.limit, 100,
            "the fleet's limit, judged on the fleet's view"
        );
        assert_eq!(
            rate.promote_at, 12.5,
            "the promotion threshold divided by the nodes"
        );
        assert_eq!(rate.fleet, FleetRate::new(Some(25), true, 100));
        assert_eq!(
            rate.held_for(1_000),
            100,
            "a refusal held until the next sync"
        );
        let t2 = in_fleet(&t, &state(4, false));
        assert_eq!(t2.inflight, t.inflight, "in-flight limits stay the node's");
    }

    #[test]
    fn a_fleet_whose_view_is_stale_decides_on_this_nodes_share_alone() {
        let t = Thresholds::new(&Limits::new().max_rate(10), 0.5);
        let rate = in_fleet(&t, &state(3, true)).rate.unwrap();
        assert_eq!(
            rate.limit, 4,
            "the share is the limit rounded up over the nodes"
        );
        assert_ne!(
            rate.tag_mix,
            t.rate.unwrap().tag_mix,
            "a limit of its own in the cache"
        );
        assert_eq!(rate.fleet, FleetRate::new(Some(4), false, 0));
        assert_eq!(rate.held_for(1_000), 1_000, "no sync to wait for");
    }

    #[test]
    fn a_fleet_of_one_keeps_the_promotion_threshold() {
        let t = Thresholds::new(&Limits::new().max_rate(10), 0.5);
        let rate = in_fleet(&t, &state(1, false)).rate.unwrap();
        assert_eq!((rate.limit, rate.promote_at), (10, 5.0));
        assert_eq!(rate.fleet, FleetRate::new(None, true, 100));
    }
}
