//! A promoted key's learning of its in-flight limit, as the request path and the release see
//! it: when a key starts learning, the limit it is judged by, its admissions, refusals and
//! completions, and whether it may leave the exact stage. The law itself is the learner's
//! (`learner.rs`).

use super::completion::Completion;
use super::config::AdaptiveInflight;
use super::learner::Learner;
use crate::clock::TimeSource;
use crate::limiter::counts::Counts;
use crate::limiter::limits::InflightThreshold;

/// A promoted key's learner, if it has had one. Boxed: a word in every place of the exact
/// stage, where the learner's 360 bytes in all 16,384 places of a default limiter would take
/// 5.9 MB whether it learns or not; one allocation when a key starts learning.
#[derive(Debug, Default)]
pub(crate) struct Learning(Option<Box<Learner>>);

impl Learning {
    /// The in-flight limit a request of `cost` units of a key with `counts` (`tracked` units
    /// in flight in its place) is judged by under `ceiling` (its configured limit), if the key
    /// learns it: it starts learning once its requests in flight counted here reach their
    /// promotion threshold (see [`starts`]), and
    /// a learner at rest wakes then, keeping the no-load latency it measured. The clock is
    /// read here only when a learner starts or wakes (precise), and for a stall (coarse: a
    /// stall is seconds).
    pub(crate) fn judge(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: &InflightThreshold,
        counts: &Counts,
        tracked: isize,
        cost: isize,
        time: &TimeSource,
    ) -> Option<isize> {
        let learning = self.is_active();
        if !starts(learning, tracked, cost, ceiling) {
            return None;
        }
        let inflight = counts.inflight.bound(tracked).saturating_add(cost);
        match self.0.as_deref_mut() {
            Some(_) if learning => {}
            Some(learner) => learner.wake(ceiling.limit, tracked, time.precise(), config),
            None => {
                let at = time.precise();
                self.0 = Some(Box::new(Learner::start(ceiling.limit, tracked, at)));
            }
        }
        let learner = self.0.as_deref_mut()?;
        // A limit no completion has moved for long is let up to this request.
        Some(learner.unstalled(config, ceiling, time.coarse(), inflight))
    }

    /// An admission of `cost` units judged by a learnt limit (`learnt`), `tracked` in flight
    /// before it: returns its admission time for its latency (the precise clock, read for
    /// those requests alone), or 0 for a key not learning.
    pub(crate) fn admitted(
        &mut self,
        learnt: bool,
        tracked: isize,
        cost: u32,
        time: &TimeSource,
    ) -> u64 {
        match self.0.as_deref_mut() {
            Some(learner) if learnt => {
                let at = time.precise().max(1);
                learner.admitted(at, tracked, cost);
                at
            }
            _ => 0,
        }
    }

    /// A request refused for its in-flight limit.
    pub(crate) fn refused(&mut self) {
        if let Some(learner) = self.0.as_deref_mut() {
            learner.refused();
        }
    }

    /// A `completion` of a request of the key, `tracked` in flight before its units were given
    /// back, under `ceiling` (the in-flight limit of the last request it was judged under).
    /// Returns the room its learnt limit gained, which its waiters are told of with the permit's
    /// own units (a waiter is woken per unit that came back). A learner done with its round
    /// well below its threshold rests: the key is judged as any other again, its no-load
    /// latency kept until it is forgotten.
    pub(crate) fn completed(
        &mut self,
        config: &AdaptiveInflight,
        ceiling: Option<InflightThreshold>,
        tracked: isize,
        completion: Completion,
        time: &TimeSource,
    ) -> u32 {
        let (Some(learner), Some(ceiling)) =
            (self.0.as_deref_mut().filter(|l| l.is_active()), ceiling)
        else {
            return 0;
        };
        let completed = learner.completed(config, &ceiling, time.precise(), tracked, completion);
        if completed.done {
            learner.rest();
        }
        completed.rise
    }

    /// Whether the key, cooled down, may leave the exact stage: at once, unless it has learnt
    /// something, which would go with it. Such a key leaves once it has had no request for
    /// `forget_after` (`AdaptiveInflight::forget_after`): a key held to a few requests in
    /// flight often has none for a moment, and its callers' bursts come seconds apart; each
    /// would otherwise meet the origin with the ceiling again, queue and all.
    pub(crate) fn may_leave(&self, config: Option<&AdaptiveInflight>, time: &TimeSource) -> bool {
        match (config, self.0.as_deref()) {
            (Some(config), Some(learner)) => learner.forgotten(config, time.coarse()),
            _ => true,
        }
    }

    /// The in-flight limit the key learnt under `ceiling`, if it is learning (for reports).
    pub(crate) fn limit(&self, config: &AdaptiveInflight, ceiling: isize) -> Option<isize> {
        let learner = self.0.as_deref().filter(|l| l.is_active())?;
        Some(learner.limit(config, ceiling))
    }

    /// Whether a request of `cost` units, `tracked` units in flight before it, goes to a
    /// learner under `ceiling`: see [`starts`].
    pub(crate) fn takes(&self, tracked: isize, cost: isize, ceiling: &InflightThreshold) -> bool {
        starts(self.is_active(), tracked, cost, ceiling)
    }

    /// Whether the key is learning now (not at rest, nor never started): then each of its
    /// completions is to be told to [`completed`](Self::completed).
    pub(crate) fn is_active(&self) -> bool {
        self.0.as_deref().is_some_and(Learner::is_active)
    }
}

/// Whether the request being judged (`cost` units) for a promoted key with `tracked` units in
/// flight goes to a learner: the key has one already (`learning`), or its requests in flight counted here
/// (exactly: not the bound, which holds a sketch estimate that other keys' counts can
/// inflate), with this one, reach its promotion threshold (`ceiling.promote_at`) and it
/// starts one. A key promoted for its rate whose in flight stays low is judged as usual, and
/// reads no clock.
#[inline]
fn starts(learning: bool, tracked: isize, cost: isize, ceiling: &InflightThreshold) -> bool {
    learning || tracked.saturating_add(cost) >= ceiling.promote_at
}
