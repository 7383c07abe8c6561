//! [`Limiter::acquire`](crate::Limiter::acquire) and its future, [`Acquire`].

use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::limits::Thresholds;
use super::path::Request;
use super::shared::Shared;
use super::ticket::{Receipt, Ticket};
use super::wait::{wake, State, WaiterId};
use super::{Limits, OwnedPermit, Reason, Rejected};
use crate::clock::TICK_NANOS;

/// The future of [`Limiter::acquire`](crate::Limiter::acquire),
/// [`Limiter::acquire_owned_key`](crate::Limiter::acquire_owned_key) and their
/// [`WithLimits`](super::WithLimits) forms: resolves to a permit, or to the last rejection once
/// the wait is over.
///
/// `Send` when the key is, runtime-agnostic, and cancel-safe: dropping it before it is ready
/// leaves nothing parked and holds nothing.
#[must_use = "a waiting request does nothing unless polled; dropping it cancels it"]
pub struct Acquire<K> {
    shared: Arc<Shared<K>>,
    step: Step<K>,
    /// Where the admission was counted, once admitted (for the layer, which takes it back
    /// when an inner layer refuses the request).
    receipt: Receipt,
    /// The request's key, for its attempts while it waits: given by value
    /// ([`Limiter::acquire_owned_key`](crate::Limiter::acquire_owned_key)), or copied from
    /// the borrowed one when the request must wait (the future outlives the borrow). Always
    /// there while it waits.
    key: Option<K>,
}

// No field is ever pinned (the future moves its key and permit around by value).
impl<K> Unpin for Acquire<K> {}

enum Step<K> {
    /// Decided without waiting.
    Ready(Result<OwnedPermit<K>, Rejected>),
    /// Must wait: parks at its first poll (a waker is needed), and is then in its key's line
    /// as the waiter of that id. One variant, so that parking writes the id in place rather
    /// than moving what the request needs for its attempts.
    Wait(Wait, Option<WaiterId>),
    /// Resolved already.
    Done,
}

/// What [`Acquire::begin`] decided: the answer now (and where an admission was counted), or
/// to wait.
enum Begun<K> {
    Ready(Result<OwnedPermit<K>, Rejected>, Receipt),
    Wait(Wait),
}

/// A waiter refused on its turns retries at most 2^4 = 16 ticks apart (`retry_after_turn`).
const MAX_RETRY_DOUBLINGS: u32 = 4;

/// What a waiting request needs for its attempts, but its key (`Acquire::key`).
struct Wait {
    hash: u64,
    /// `None`: the limiter's defaults at each attempt.
    limits: Option<Limits>,
    /// Units each attempt counts.
    cost: u32,
    /// The time (nanoseconds) from which it gives up.
    deadline: u64,
    /// The rejection of the attempt `acquire` made, if it made one: what a request that
    /// finds no place to wait is answered (it is not tried, and counted, again).
    first: Option<Rejected>,
    /// Its turns refused for an in-flight limit so far: how far apart its retries on the
    /// clock are (see `retry_after_turn`).
    refused_turns: u32,
}

impl<K> Acquire<K>
where
    K: Hash + Eq + Send + Sync,
{
    /// The future of what [`begin`](Self::begin) decided, with its key. Always inlined, as
    /// `begin`: the future is then built where its caller returns it, where a future built
    /// and then given its key was copied whole (callgrind: a `memcpy`, 29 instructions a
    /// waiter).
    #[inline(always)]
    fn assemble(
        shared: &Arc<Shared<K>>,
        begun: Begun<K>,
        key: impl FnOnce(bool) -> Option<K>,
    ) -> Self {
        let waits = matches!(begun, Begun::Wait(_));
        let (step, receipt) = match begun {
            Begun::Ready(answer, receipt) => (Step::Ready(answer), receipt),
            Begun::Wait(wait) => (Step::Wait(wait, None), Receipt::default()),
        };
        let key = key(waits);
        Acquire {
            shared: Arc::clone(shared),
            step,
            receipt,
            key,
        }
    }

    /// The first attempt, made by `acquire` itself: a request with room never allocates; one
    /// that must wait copies its key.
    pub(in crate::limiter) fn start<Q>(
        shared: &Arc<Shared<K>>,
        key: &Q,
        limits: Option<Limits>,
        cost: u32,
        max_wait: Duration,
    ) -> Self
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let begun = Self::begin(shared, key, limits, cost, max_wait);
        Self::assemble(shared, begun, |waits| waits.then(|| key.to_owned()))
    }

    /// [`start`](Self::start) for a key given by value: kept, not copied to wait, whatever
    /// the answer (the layer takes it back with `take_key`). The exact stage keeps a copy of
    /// a key it promotes, as for any request.
    pub(in crate::limiter) fn start_owned(
        shared: &Arc<Shared<K>>,
        key: K,
        limits: Option<Limits>,
        cost: u32,
        max_wait: Duration,
    ) -> Self
    where
        K: Clone,
    {
        let begun = Self::begin(shared, &key, limits, cost, max_wait);
        Self::assemble(shared, begun, |_| Some(key))
    }

    /// The first attempt, and the request's wait if it must.
    #[inline(always)]
    fn begin<Q>(
        shared: &Arc<Shared<K>>,
        key: &Q,
        limits: Option<Limits>,
        cost: u32,
        max_wait: Duration,
    ) -> Begun<K>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // What no waiting can help is answered at once, uncounted, queued or not: limits of
        // a kind the limiter does not count, limits of 0, a cost over a limit.
        // In shadow, such a refusal is an admission that says so, as any other.
        let limits = limits.map(|l| shared.plan(l));
        let plan_shadow = limits.is_some_and(|l| l.is_shadow());
        let permit = |ticket, _| OwnedPermit::new(shared, ticket);
        let uncounted = |rejected| {
            let answer = shared.refused_uncounted(plan_shadow, false, rejected, permit);
            Begun::Ready(answer, Receipt::default())
        };
        let thresholds = match limits {
            Some(limits) => shared.thresholds(&limits),
            None => Ok(shared.defaults.load()),
        };
        let thresholds = match thresholds {
            Ok(t) => match t.refuses(cost) {
                Some(rejected) => return uncounted(rejected),
                None => t,
            },
            Err(rejected) => return uncounted(rejected),
        };
        if cost == 0 && shared.admits_for_nothing(&thresholds, false) {
            let answer = Ok(permit(Ticket::nothing(), Receipt::default()));
            return Begun::Ready(answer, Receipt::default());
        }
        let hash = shared.sketches.hash(key);
        let max_wait = crate::clock::saturating_nanos(max_wait);
        // Waiters of this key may be parked: they go first, so join their line without
        // trying (no lock here). If the bucket was counted by another key's waiters, the
        // request heads a new line at its first poll, and a head tries at once.
        let queued = max_wait > 0 && shared.waiters.any_parked(hash);
        let mut first = None;
        if !queued {
            let mut receipt = Receipt::default();
            let permit = |ticket, counted| {
                receipt = counted;
                permit(ticket, counted)
            };
            let request = Request {
                key,
                hash,
                cost,
                plan_shadow,
                counted: false,
            };
            match shared.acquire_hashed(request, &thresholds, permit) {
                Err(rejected) => first = Some(rejected),
                answer => {
                    return Begun::Ready(answer, receipt);
                }
            }
        }
        // Its deadline is `max_wait` from now, to the nanosecond (see `now`).
        let now = now(shared);
        let deadline = now.saturating_add(max_wait);
        if let Some(rejected) = first.take_if(|r| max_wait == 0 || !worth_waiting(r, now, deadline))
        {
            return Begun::Ready(Err(rejected), Receipt::default());
        }
        Begun::Wait(Wait {
            hash,
            limits,
            cost,
            deadline,
            first,
            refused_turns: 0,
        })
    }
}

/// Whether waiting until `deadline` (nanoseconds) can turn `rejected` into a permit: an in-flight
/// rejection (a permit may come back), or a rate rejection with room before the deadline.
fn worth_waiting(rejected: &Rejected, now: u64, deadline: u64) -> bool {
    match rejected.reason {
        Reason::Inflight => rejected.limit > 0 && now < deadline,
        Reason::Rate => rejected.retry_after.is_some_and(|retry| {
            let retry = crate::clock::saturating_nanos(retry);
            now.saturating_add(retry) <= deadline
        }),
        _ => false,
    }
}

/// Counts a waiting request's answer in the metrics (its attempts were not counted).
fn count_answer<K>(shared: &Shared<K>, answer: &Result<OwnedPermit<K>, Rejected>) {
    match answer {
        Ok(permit) => match permit.shadow_rejection() {
            Some(rejected) => shared.tally.refused(rejected, true),
            None => shared.tally.admitted(),
        },
        Err(rejected) => shared.tally.refused(rejected, false),
    }
}

/// The time now for a waiting request's deadline and retry times: the precise time (the
/// CPU's counter on the shared clock, about 15 ns: once a wait and once an attempt after it,
/// never on `try_acquire`'s path), and never behind the coarse time. The clock's pass that
/// fires a deadline reads the precise time too, and fires it from the first pass at or after
/// it: never early, at most a pass (a tick, when the clock thread gets a CPU in time) late.
/// Counted from the coarse time plus the most that may trail (two ticks) and rounded up to
/// a tick, deadlines fired up to four ticks late.
fn now<K>(shared: &Shared<K>) -> u64 {
    shared.time.precise().max(shared.time.coarse())
}

/// The tick at which a rate rejection at `now` says one more request fits.
fn retry_tick(rejected: &Rejected, now: u64) -> Option<u64> {
    let retry = rejected.retry_after?;
    let retry = crate::clock::saturating_nanos(retry);
    Some(now.saturating_add(retry).div_ceil(TICK_NANOS))
}

impl<K> Acquire<K>
where
    K: Hash + Eq + Clone + Send + Sync,
{
    /// Tells the clock to run sooner when a waiter is due before it would.
    fn prompt_if_sooner(&self, sooner: bool) {
        if sooner {
            self.shared.time.prompt(self.shared.registration);
        }
    }

    /// Joins the key's line: `Ok(true)` when it heads the line with the turn (it must try at
    /// once), `Err` with the answer when there is no place to wait.
    fn park(&mut self, cx: &mut Context<'_>) -> Result<bool, Result<OwnedPermit<K>, Rejected>> {
        let (Step::Wait(wait, parked_as @ None), Some(key)) = (&mut self.step, &self.key) else {
            return Ok(false);
        };
        let waiters = &self.shared.waiters;
        // Counted before it is in the line, and so before any attempt it makes: its half of
        // the wake-up handshake.
        waiters.count_parked(wait.hash);
        let mut queue = waiters.lock();
        let Some(parked) = queue.park(wait.hash, wait.deadline, cx.waker()) else {
            // As many waiters as the limiter allows: the first rejection, or one attempt.
            drop(queue);
            waiters.count_left(wait.hash);
            let answer = match wait.first.take() {
                Some(rejected) => Err(rejected),
                None => {
                    let (answer, receipt) = attempt(&self.shared, wait, key);
                    self.receipt = receipt;
                    answer
                }
            };
            self.step = Step::Done;
            return Err(answer);
        };
        let sooner = waiters.sooner(&queue, parked.due);
        drop(queue);
        *parked_as = Some(parked.id);
        self.prompt_if_sooner(sooner);
        Ok(parked.has_turn)
    }

    /// An attempt of a waiter with the turn: admitted, given up, or back in the line. The
    /// step stays a parked `Wait` while user code (the key's `Hash` and `Eq`) runs, so a panic
    /// there leaves the waiter for `Drop` to take out.
    ///
    /// `parked`: the turn a head of a line starts with, right after it counted itself. Its
    /// attempt is there for a permit that came back between the request's first attempt and
    /// that count (whose release could not see the waiter). After a first refusal for an
    /// in-flight limit, of a key not promoted now (the sketches alone decide its attempts,
    /// unless the exact stage finds it a place), whether one came back is read, not tried:
    /// the key's counters against the limits in force now, where an attempt takes the exact
    /// stage's lock again (`Shared::refused_again_in_flight`).
    fn take_turn(
        &mut self,
        cx: &mut Context<'_>,
        parked: bool,
    ) -> Poll<Result<OwnedPermit<K>, Rejected>> {
        let (Step::Wait(wait, Some(id)), Some(key)) = (&self.step, &self.key) else {
            return Poll::Pending;
        };
        let (id, deadline) = (*id, wait.deadline);
        let first_in_flight = wait.first.as_ref().filter(|first| {
            parked && first.reason == Reason::Inflight && {
                let (thresholds, plan_shadow) = limits_now(&self.shared, wait);
                thresholds.is_ok_and(|t| {
                    let shared = &self.shared;
                    shared.refused_again_in_flight(wait.hash, wait.cost, &t, plan_shadow)
                })
            }
        });
        let result = match first_in_flight {
            Some(first) => Err(first.clone()),
            None => {
                let (result, receipt) = attempt(&self.shared, wait, key);
                self.receipt = receipt;
                result
            }
        };
        let now = now(&self.shared);
        match result {
            Err(rejected) if worth_waiting(&rejected, now, deadline) => {
                let retry = match retry_tick(&rejected, now) {
                    None if !parked && rejected.reason == Reason::Inflight => {
                        self.retry_after_turn(now)
                    }
                    retry => retry,
                };
                let waiters = &self.shared.waiters;
                let mut queue = waiters.lock();
                let again = queue.wait_again(id, retry, cx.waker());
                let sooner = again.is_some_and(|due| waiters.sooner(&queue, due));
                drop(queue);
                self.prompt_if_sooner(sooner);
                if again.is_none() {
                    // A permit came back while it was trying: try again, after yielding.
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
            result => Poll::Ready(self.finish(result)),
        }
    }

    /// The tick a waiter refused on its turn for an in-flight limit tries again at, heading its
    /// line, if its key is not promoted: 1, 2, 4, 8 and then every 16 ticks after its
    /// refused turns. Its turn came from a permit of its key that came back (or from the
    /// waiter before it, leaving); what took the room may be a request of another key that
    /// shares the key's counters in the sketch, whose release wakes no waiter of this key.
    /// Without a retry such a waiter waits for its key's next permit, or its deadline
    /// although its own count is 0. At most 16 ticks (160 ms) apart: the room such a release
    /// leaves is seen within that, for about six attempts a second of a waiter refused so,
    /// and only after a refused turn (a promoted key's counts are its own, and its releases
    /// wake its waiters).
    fn retry_after_turn(&mut self, now: u64) -> Option<u64> {
        let Step::Wait(wait, _) = &mut self.step else {
            return None;
        };
        if self.shared.promoted_now(wait.hash) {
            return None;
        }
        let ticks = 1u64 << wait.refused_turns.min(MAX_RETRY_DOUBLINGS);
        wait.refused_turns = wait.refused_turns.saturating_add(1);
        Some((now / TICK_NANOS).saturating_add(ticks))
    }

    /// Leaves the line with `result`: admitted, or given up with its last rejection (whose
    /// retry time the next waiter inherits, if it is to head the line).
    fn finish(
        &mut self,
        result: Result<OwnedPermit<K>, Rejected>,
    ) -> Result<OwnedPermit<K>, Rejected> {
        if let Step::Wait(wait, Some(id)) = std::mem::replace(&mut self.step, Step::Done) {
            let retry = result
                .as_ref()
                .err()
                .and_then(|r| retry_tick(r, now(&self.shared)));
            leave(&self.shared, wait.hash, id, result.is_ok(), retry);
        }
        result
    }
}

/// The limits a waiting request is judged by now: its plan's, or the limiter's defaults as
/// they are now (`set_limits` may have run since the request began); and whether its plan
/// is in shadow.
fn limits_now<K: Hash + Eq>(
    shared: &Shared<K>,
    wait: &Wait,
) -> (Result<Thresholds, Rejected>, bool) {
    let limits = wait.limits.map(|l| shared.plan(l));
    let plan_shadow = limits.is_some_and(|l| l.is_shadow());
    let thresholds = match &limits {
        Some(limits) => shared.thresholds(limits),
        None => Ok(shared.defaults.load()),
    };
    (thresholds, plan_shadow)
}

/// One attempt for a waiting request of `key`, and where an admission was counted.
fn attempt<K>(
    shared: &Arc<Shared<K>>,
    wait: &Wait,
    key: &K,
) -> (Result<OwnedPermit<K>, Rejected>, Receipt)
where
    K: Hash + Eq + Clone,
{
    let (thresholds, plan_shadow) = limits_now(shared, wait);
    let mut receipt = Receipt::default();
    let permit = |ticket, counted| {
        receipt = counted;
        OwnedPermit::new(shared, ticket)
    };
    let answer = match thresholds {
        Ok(t) => {
            let request = Request {
                key,
                hash: wait.hash,
                cost: wait.cost,
                plan_shadow,
                counted: false,
            };
            shared.acquire_hashed(request, &t, permit)
        }
        Err(rejected) => shared.refused_uncounted(plan_shadow, false, rejected, permit),
    };
    (answer, receipt)
}

impl<K> Future for Acquire<K>
where
    K: Hash + Eq + Clone + Send + Sync,
{
    type Output = Result<OwnedPermit<K>, Rejected>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let answer = this.answer(cx);
        // The metrics count the request once, by its answer (its attempts are not counted).
        if let Poll::Ready(result) = &answer {
            count_answer(&this.shared, result);
        }
        answer
    }
}

impl<K> Acquire<K>
where
    K: Hash + Eq + Clone + Send + Sync,
{
    /// The answer, once there is one (see [`Future::poll`]).
    fn answer(&mut self, cx: &mut Context<'_>) -> Poll<Result<OwnedPermit<K>, Rejected>> {
        let this = self;
        match &this.step {
            Step::Ready(_) => match std::mem::replace(&mut this.step, Step::Done) {
                Step::Ready(result) => Poll::Ready(result),
                _ => Poll::Pending,
            },
            // Polled after it resolved: stays pending rather than panicking.
            Step::Done => Poll::Pending,
            Step::Wait(_, None) => match this.park(cx) {
                Err(answer) => Poll::Ready(answer),
                Ok(true) => this.take_turn(cx, true),
                Ok(false) => Poll::Pending,
            },
            Step::Wait(_, Some(id)) => {
                let id = *id;
                let mut queue = this.shared.waiters.lock();
                match queue.state(id) {
                    Some(State::Waiting) => {
                        queue.set_waker(id, cx.waker());
                        Poll::Pending
                    }
                    Some(State::Notified) => {
                        drop(queue);
                        this.take_turn(cx, false)
                    }
                    // Its deadline passed (or, never, it was taken out): a last attempt.
                    Some(State::TimedOut) | None => {
                        drop(queue);
                        let (Step::Wait(wait, _), Some(key)) = (&this.step, &this.key) else {
                            return Poll::Pending;
                        };
                        let (result, receipt) = attempt(&this.shared, wait, key);
                        this.receipt = receipt;
                        Poll::Ready(this.finish(result))
                    }
                }
            }
        }
    }
}

impl<K> Acquire<K> {
    /// Where its admission was counted, once it is admitted.
    #[cfg(feature = "tower")]
    pub(crate) fn receipt(&self) -> Receipt {
        self.receipt
    }

    /// The key it was given by value ([`start_owned`](Self::start_owned)), for the layer's
    /// response once it is answered; `None` after the first call.
    #[cfg(feature = "tower")]
    pub(crate) fn take_key(&mut self) -> Option<K> {
        self.key.take()
    }
}

impl<K> Drop for Acquire<K> {
    fn drop(&mut self) {
        if let Step::Wait(wait, Some(id)) = &self.step {
            leave(&self.shared, wait.hash, *id, false, None);
        }
    }
}

/// Takes a waiter of `hash` out of its line (admitted, given up or cancelled), passing on a
/// turn it did not use. An admitted head also wakes the next waiter when the limiter counts a
/// rate: the window may have room for more than one (an in-flight permit is one). A head that
/// leaves without a permit hands its retry time (`retry`, else its last one) to the next.
fn leave<K>(shared: &Shared<K>, hash: u64, id: WaiterId, admitted: bool, retry: Option<u64>) {
    let waiters = &shared.waiters;
    let pass_on = shared.sketches.rate.is_some();
    let next = waiters.lock().remove(id, admitted, pass_on, retry);
    waiters.count_left(hash);
    if let Some(waker) = next {
        wake(waker);
    }
}

impl<K: Hash + Eq> std::fmt::Debug for Acquire<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match &self.step {
            Step::Ready(Ok(_)) => "admitted",
            Step::Ready(Err(_)) => "rejected",
            Step::Wait(_, None) => "about to wait",
            Step::Wait(_, Some(_)) => "waiting",
            Step::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("step", &step)
            .finish_non_exhaustive()
    }
}
