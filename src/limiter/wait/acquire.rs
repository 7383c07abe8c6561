//! [`Limiter::acquire`] and its future, [`Acquire`].

use std::borrow::Borrow;
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use super::{State, WaiterId};
use crate::clock::TICK_NANOS;
use crate::limiter::permit::{Receipt, Ticket};
use crate::limiter::{Limiter, Limits, OwnedPermit, Reason, Rejected, Shared};

impl<K> Limiter<K>
where
    K: Hash + Eq + Send + Sync,
{
    /// Admits a request for `key`, waiting up to `max_wait` for room instead of being
    /// refused: governor's `until_key_ready`, nginx's `limit_req … delay`, with a deadline.
    ///
    /// The first attempt is made now, in this call: a request with room gets its permit at
    /// once (the future is then ready at its first poll) and allocates nothing, unless
    /// requests of its key (or, rarely, of another key sharing its counter of waiters) are
    /// waiting: then it joins the end of their line when first polled, and tries when its
    /// turn comes (at once, if it finds no line). Otherwise the future parks the request
    /// until a permit of its key comes back (in flight), its rate window has room (the time
    /// its rejection's `retry_after` gives), or `max_wait` passes (from this call, rounded up
    /// to the next tick of the 10 ms clock: never early, at most about two ticks late); then
    /// it resolves to the last rejection. A rate rejection whose `retry_after` is beyond `max_wait` is returned at
    /// once, as are rejections no waiting can help (a limit of 0, a kind not counted), and
    /// requests beyond the waiters the limiter allows
    /// ([`max_waiters`](crate::LimiterBuilder::max_waiters),
    /// [`max_waiters_per_key`](crate::LimiterBuilder::max_waiters_per_key)).
    ///
    /// No timer per waiter and no runtime: the limiter's clock wakes the waiters that are due,
    /// through their wakers, on any executor. With the shared clock, a waiter wakes within
    /// about two ticks of its room; with a [`ManualClock`](crate::clock::ManualClock), in the
    /// `advance` that reaches it. Waiters of one key are served in arrival order (a new
    /// `acquire` for a key that has waiters queues behind them), and each permit that comes
    /// back wakes one waiter. Dropping the future (a cancelled request, a `select!` that took
    /// another branch) takes the waiter out of the line at once; if it had been woken for a
    /// permit, the turn passes to the next waiter.
    ///
    /// Without an explicit `Limits`, each attempt is judged against the defaults current at
    /// that attempt (see [`set_limits`](Self::set_limits)). Waiters of one key are served in
    /// one line whatever their limits: a waiter under a lower limit of its own than those
    /// behind it holds their turn until it is admitted or gives up.
    ///
    /// # Errors
    ///
    /// The future resolves to the [`Rejected`] of the last attempt when the request could not
    /// be admitted in time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::Limiter;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    /// let first = limiter.try_acquire_owned("origin").unwrap();
    ///
    /// // The second request waits for the first to finish instead of being refused.
    /// let waiting = limiter.acquire("origin", Duration::from_secs(5));
    /// let finish = tokio::spawn(async move { drop(first) });
    /// let second = waiting.await.expect("admitted when the first permit came back");
    /// finish.await.unwrap();
    ///
    /// // With no permit coming back, it gives up after max_wait (rounded up to 10 ms ticks).
    /// let rejected = limiter.acquire("origin", Duration::from_millis(20)).await.unwrap_err();
    /// assert_eq!(rejected.limit, 1);
    /// drop(second);
    /// # }
    /// ```
    pub fn acquire<Q>(&self, key: &Q, max_wait: Duration) -> Acquire<K>
    where
        K: Borrow<Q> + Clone,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        Acquire::start(&self.shared, key, None, 1, max_wait)
    }
}

/// The future of [`Limiter::acquire`] and [`WithLimits::acquire`](super::super::WithLimits::acquire): resolves to a permit,
/// or to the last rejection once the wait is over.
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
}

// No field is ever pinned (the future moves its key and permit around by value).
impl<K> Unpin for Acquire<K> {}

enum Step<K> {
    /// Decided without waiting.
    Ready(Result<OwnedPermit<K>, Rejected>),
    /// Must wait: parks at its first poll (a waker is needed).
    Park(Wait<K>),
    /// In its key's line.
    Parked(Wait<K>, WaiterId),
    /// Resolved already.
    Done,
}

/// What a waiting request needs for its attempts.
struct Wait<K> {
    key: K,
    hash: u64,
    /// `None`: the limiter's defaults at each attempt.
    limits: Option<Limits>,
    /// Units each attempt counts.
    cost: u32,
    /// The tick after which it gives up.
    deadline: u64,
    /// The rejection of the attempt `acquire` made, if it made one: what a request that
    /// finds no place to wait is answered (it is not tried, and counted, again).
    first: Option<Rejected>,
}

impl<K> Acquire<K>
where
    K: Hash + Eq + Send + Sync,
{
    fn ready(shared: &Arc<Shared<K>>, result: Result<OwnedPermit<K>, Rejected>) -> Self {
        Acquire {
            shared: Arc::clone(shared),
            step: Step::Ready(result),
            receipt: Receipt::default(),
        }
    }

    /// The first attempt, made by `acquire` itself: a request with room never allocates.
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
        // What no waiting can help is answered at once, uncounted, queued or not: limits of
        // a kind the limiter does not count, limits of 0, a cost over a limit.
        // In shadow, such a refusal is an admission that says so, as any other.
        let limits = limits.map(|l| shared.plan(l));
        let plan_shadow = limits.is_some_and(|l| l.is_shadow());
        let permit = |ticket, _| OwnedPermit::new(shared, ticket);
        let uncounted = |rejected| {
            let answer = shared.refused_uncounted(plan_shadow, false, rejected, permit);
            Self::ready(shared, answer)
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
            return Self::ready(shared, Ok(permit(Ticket::nothing(), Receipt::default())));
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
            match shared.acquire_hashed(key, hash, cost, &thresholds, plan_shadow, false, permit) {
                Err(rejected) => first = Some(rejected),
                answer => {
                    let mut ready = Self::ready(shared, answer);
                    ready.receipt = receipt;
                    return ready;
                }
            }
        }
        // Its deadline is `max_wait` from now, rounded up to the tick, never early: from the
        // coarse time (one load, no OS clock) plus the most it can trail the exact time.
        let now = latest_now(shared);
        let deadline = now.saturating_add(max_wait).div_ceil(TICK_NANOS);
        if let Some(rejected) = first.take_if(|r| !worth_waiting(r, now, deadline)) {
            return Self::ready(shared, Err(rejected));
        }
        Acquire {
            shared: Arc::clone(shared),
            step: Step::Park(Wait {
                key: key.to_owned(),
                hash,
                limits,
                cost,
                deadline,
                first,
            }),
            receipt: Receipt::default(),
        }
    }
}

/// Whether waiting until tick `deadline` can turn `rejected` into a permit: an in-flight
/// rejection (a permit may come back), or a rate rejection with room before the deadline.
fn worth_waiting(rejected: &Rejected, now: u64, deadline: u64) -> bool {
    match rejected.reason {
        Reason::Inflight => rejected.limit > 0 && deadline > now.div_ceil(TICK_NANOS),
        Reason::Rate => rejected.retry_after.is_some_and(|retry| {
            let retry = crate::clock::saturating_nanos(retry);
            now.saturating_add(retry) <= deadline.saturating_mul(TICK_NANOS)
        }),
        _ => false,
    }
}

/// The latest the time can be now: the coarse time plus the most it trails the exact time
/// (two ticks on the shared clock, none on a manual one). Deadlines and retry times counted
/// from it are never early, and at most that much late.
fn latest_now<K>(shared: &Shared<K>) -> u64 {
    shared.time.coarse().saturating_add(shared.time.lag())
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
        let Step::Park(wait) = &mut self.step else {
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
                    let (answer, receipt) = attempt(&self.shared, wait);
                    self.receipt = receipt;
                    answer
                }
            };
            self.step = Step::Done;
            return Err(answer);
        };
        let sooner = waiters.sooner(&queue, parked.due);
        drop(queue);
        self.prompt_if_sooner(sooner);
        if let Step::Park(wait) = std::mem::replace(&mut self.step, Step::Done) {
            self.step = Step::Parked(wait, parked.id);
        }
        Ok(parked.has_turn)
    }

    /// An attempt of a waiter with the turn: admitted, given up, or back in the line. The
    /// step stays `Parked` while user code (the key's `Hash` and `Eq`) runs, so a panic there
    /// leaves the waiter for `Drop` to take out.
    fn take_turn(&mut self, cx: &mut Context<'_>) -> Poll<Result<OwnedPermit<K>, Rejected>> {
        let Step::Parked(wait, id) = &self.step else {
            return Poll::Pending;
        };
        let (id, deadline) = (*id, wait.deadline);
        let (result, receipt) = attempt(&self.shared, wait);
        self.receipt = receipt;
        let now = latest_now(&self.shared);
        match result {
            Err(rejected) if worth_waiting(&rejected, now, deadline) => {
                let waiters = &self.shared.waiters;
                let mut queue = waiters.lock();
                let again = queue.wait_again(id, retry_tick(&rejected, now), cx.waker());
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

    /// Leaves the line with `result`: admitted, or given up with its last rejection (whose
    /// retry time the next waiter inherits, if it is to head the line).
    fn finish(
        &mut self,
        result: Result<OwnedPermit<K>, Rejected>,
    ) -> Result<OwnedPermit<K>, Rejected> {
        if let Step::Parked(wait, id) = std::mem::replace(&mut self.step, Step::Done) {
            let retry = result
                .as_ref()
                .err()
                .and_then(|r| retry_tick(r, latest_now(&self.shared)));
            leave(&self.shared, wait.hash, id, result.is_ok(), retry);
        }
        result
    }
}

/// One attempt for a waiting request, and where an admission was counted.
fn attempt<K>(
    shared: &Arc<Shared<K>>,
    wait: &Wait<K>,
) -> (Result<OwnedPermit<K>, Rejected>, Receipt)
where
    K: Hash + Eq + Clone,
{
    let limits = wait.limits.map(|l| shared.plan(l));
    let plan_shadow = limits.is_some_and(|l| l.is_shadow());
    let thresholds = match &limits {
        Some(limits) => shared.thresholds(limits),
        None => Ok(shared.defaults.load()),
    };
    let mut receipt = Receipt::default();
    let permit = |ticket, counted| {
        receipt = counted;
        OwnedPermit::new(shared, ticket)
    };
    let answer = match thresholds {
        Ok(t) => {
            let (key, hash, cost) = (&wait.key, wait.hash, wait.cost);
            shared.acquire_hashed(key, hash, cost, &t, plan_shadow, false, permit)
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
            this.shared.count_answer(result);
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
            Step::Park(_) => match this.park(cx) {
                Err(answer) => Poll::Ready(answer),
                Ok(true) => this.take_turn(cx),
                Ok(false) => Poll::Pending,
            },
            Step::Parked(_, id) => {
                let id = *id;
                let mut queue = this.shared.waiters.lock();
                match queue.state(id) {
                    Some(State::Waiting) => {
                        queue.set_waker(id, cx.waker());
                        Poll::Pending
                    }
                    Some(State::Notified) => {
                        drop(queue);
                        this.take_turn(cx)
                    }
                    // Its deadline passed (or, never, it was taken out): a last attempt.
                    Some(State::TimedOut) | None => {
                        drop(queue);
                        let Step::Parked(wait, _) = &this.step else {
                            return Poll::Pending;
                        };
                        let (result, receipt) = attempt(&this.shared, wait);
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
}

impl<K> Drop for Acquire<K> {
    fn drop(&mut self) {
        if let Step::Parked(wait, id) = std::mem::replace(&mut self.step, Step::Done) {
            leave(&self.shared, wait.hash, id, false, None);
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
        super::wake(waker);
    }
}

impl<K: Hash + Eq> std::fmt::Debug for Acquire<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match &self.step {
            Step::Ready(Ok(_)) => "admitted",
            Step::Ready(Err(_)) => "rejected",
            Step::Park(_) => "about to wait",
            Step::Parked(..) => "waiting",
            Step::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("step", &step)
            .finish_non_exhaustive()
    }
}
