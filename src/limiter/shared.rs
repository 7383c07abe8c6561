//! What clones of a limiter and their permits share: the storage, the limits, the clock.

use std::hash::Hash;
use std::sync::Arc;

use super::adaptive::AdaptiveInflight;
use super::defaults::Defaults;
use super::exact::ExactStage;
use super::fleet::Fleet;
use super::limits::Thresholds;
use super::overlimit;
use super::promoted::Promoted;
use super::proof::HighestRatePromotion;
use super::sketches::Sketches;
use super::tally::Tally;
use super::wait::Waiters;
#[cfg(doc)]
use super::{Limiter, LimiterBuilder};
use super::{Limits, Reason, Rejected};
use crate::clock::{Registration, Tick, TimeSource};
use crate::sync::{AtomicBool, Mutex, Ordering};

/// What clones of a limiter and their permits share.
pub(super) struct Shared<K> {
    pub(super) sketches: Sketches,
    /// The default limits with their promotion thresholds, replaced whole by
    /// [`Limiter::set_limits`]: read whole, or a word of them (see `defaults.rs`).
    pub(super) defaults: Defaults,
    /// The fraction of each limit at which a key is promoted.
    pub(super) promotion: f64,
    /// The in-flight limits' promotion threshold, as a fraction of each: `promotion`, or where
    /// keys start learning their in-flight limit when that is lower.
    pub(super) inflight_promotion: f64,
    /// Every decision in shadow, whatever a plan says: the defaults' [`Limits::shadow`],
    /// from [`LimiterBuilder::shadow`] or the last `set_limits`. Apart from `defaults`, so
    /// that the thresholds every request copies stay as small as they were; read only when a
    /// request is refused.
    pub(super) shadow: AtomicBool,
    /// Serialises `set_limits`: its two stores (the flag and the thresholds) must not
    /// interleave with another's, or the last thresholds could be left with the other's flag.
    pub(super) setting: Mutex<()>,
    /// How each hot key's in-flight limit is learnt from its latency
    /// ([`LimiterBuilder::adaptive_inflight`]; `None`: the configured limit, always).
    pub(super) adaptive: Option<AdaptiveInflight>,
    /// The highest rate promotion threshold any decision was judged against so far.
    pub(super) highest_rate_promotion: HighestRatePromotion,
    /// The decisions counted for the operator's metrics (feature `metrics`; nothing without).
    pub(super) tally: Tally,
    /// How long `heavy_hitters` lists a key after it left the exact stage (nanoseconds).
    pub(super) retention: u64,
    pub(super) exact: ExactStage<K, Promoted>,
    /// Requests waiting for a permit ([`Limiter::acquire`]).
    pub(super) waiters: Waiters,
    /// The fleet this limiter holds its rate limit with (feature `redis`; none without).
    pub(super) fleet: Fleet,
    /// The clock the rate windows, the over-limit deadlines and the sweep follow.
    pub(super) time: TimeSource,
    /// The unit the over-limit cache keeps deadlines in, for the rate windows' longest wait.
    pub(super) deadline_unit: overlimit::Unit,
    /// The sweep's registration with `time`, cancelled on drop.
    pub(super) registration: Registration,
    /// Keeps the sweep alive for as long as the limiter: the clock holds only a weak
    /// reference to it.
    /// Typed as the clock sees it: the limiter's state does not name its sweep.
    pub(super) _sweeper: Arc<dyn Tick>,
}

impl<K> Drop for Shared<K> {
    fn drop(&mut self) {
        self.time.cancel(self.registration);
    }
}

impl<K> Shared<K>
where
    K: Hash + Eq,
{
    /// The thresholds of a key's own `limits`, or the rejection of a limit of a kind this
    /// limiter does not count.
    pub(super) fn thresholds(&self, limits: &Limits) -> Result<Thresholds, Rejected> {
        let thresholds = self.thresholds_unnoted(limits)?;
        if self.sketches.rate.is_some() {
            self.highest_rate_promotion.note(&thresholds);
        }
        Ok(thresholds)
    }

    /// [`thresholds`](Self::thresholds) without raising the highest promotion threshold.
    fn thresholds_unnoted(&self, limits: &Limits) -> Result<Thresholds, Rejected> {
        if let (Some(limit), None) = (limits.inflight_limit(), &self.sketches.inflight) {
            return Err(Rejected::not_counted(Reason::InflightNotCounted, limit));
        }
        if let (Some(limit), None) = (limits.rate_limit(), &self.sketches.rate) {
            return Err(Rejected::not_counted(Reason::RateNotCounted, limit));
        }
        for limit in [limits.inflight_limit(), limits.rate_limit()] {
            if let Some(limit) = limit.filter(|&l| l > Limits::MAX_LIMIT) {
                return Err(Rejected::not_counted(Reason::LimitTooLarge, limit));
            }
        }
        Ok(Thresholds::promoting(
            limits,
            self.promotion,
            self.inflight_promotion,
        ))
    }

    /// A plan's `limits` as they are judged: each kind they leave out (of those counted) the
    /// defaults' of the moment, and in shadow if they say so or the whole limiter is (so that
    /// their thresholds have the shadow's tags in the over-limit cache). The defaults are read
    /// only for a plan that leaves a kind out.
    pub(super) fn plan(&self, limits: Limits) -> Limits {
        let counted = (
            self.sketches.inflight.is_some(),
            self.sketches.rate.is_some(),
        );
        let limits = match limits.left_out(counted.0, counted.1) {
            Some(_) => limits.or(self.defaults_now()),
            None => limits,
        };
        limits.shadow(limits.is_shadow() || self.shadow.load(Ordering::Relaxed))
    }

    /// The default limits now, each kind counted named: a limit, or none said.
    pub(super) fn defaults_now(&self) -> Limits {
        let limits = self.defaults.load().limits();
        limits.off_where_counted(
            self.sketches.inflight.is_some(),
            self.sketches.rate.is_some(),
        )
    }
}

/// What needs no look at the key itself.
impl<K> Shared<K> {
    /// Whether a decision is in shadow: its plan's limits are (`plan_shadow`), or the whole
    /// limiter is. Read only when a request is refused.
    #[inline]
    pub(super) fn in_shadow(&self, plan_shadow: bool) -> bool {
        // Relaxed: see `Limiter::set_limits` for the order of the stores this reads.
        plan_shadow || self.shadow.load(Ordering::Relaxed)
    }

    /// Whether a request of cost 0 under limits `t` is admitted at once, counting nothing: it
    /// is, unless a limit is 0 (then it is decided, and refused, as any other). Counted in the
    /// metrics when `counted`.
    pub(super) fn admits_for_nothing(&self, t: &Thresholds, counted: bool) -> bool {
        let free = t.refuses(0).is_none();
        if free && counted {
            self.tally.admitted();
        }
        free
    }
}

/// A limiter as its handles show it: its default limits and its rate interval.
impl<K> std::fmt::Debug for Shared<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limits = self.defaults.load().limits();
        f.debug_struct("Limiter")
            .field("max_inflight", &limits.inflight_limit())
            .field("max_rate", &limits.rate_limit())
            .field(
                "interval",
                &self.sketches.rate.as_ref().map(crate::Rate::interval),
            )
            .finish_non_exhaustive()
    }
}
