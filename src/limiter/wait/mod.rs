//! Waiting for a permit instead of being refused: [`Limiter::acquire`](super::Limiter::acquire)
//! parks a request until a permit of its key comes back, its rate window has room, or its
//! `max_wait` passes.
//!
//! # No timer per waiter
//!
//! Every time is quantized to the shared ticker's 10 ms ticks. A limiter's waiters are one
//! timing wheel (the same hierarchical wheel the clock schedules its users on): a waiter is one
//! entry, at its deadline, or at its retry time while it heads its key's line, so parking and
//! cancelling are O(1) and cost no timer of a runtime. The limiter's one registration with its
//! clock (the sweep's) runs the wheel: when a waiter is due sooner than the clock was told, it
//! is prompted to run at the next tick.
//!
//! # Who is woken, and when
//!
//! Waiters of a key queue in a line, oldest first (`queue`). A waiter is woken to try again
//! (its *turn*) when
//! - a permit of its key comes back (in flight): the oldest waiting, and for a permit of n
//!   units, n − 1 turns credited to the line, passed on as its waiters leave;
//! - its rate retry time comes: only the head of a line is scheduled for it, so a thousand
//!   waiters of one flooded key do not all wake at the same tick;
//! - the head of its line leaves admitted and the limiter counts a rate (the window may have
//!   room for more than one), or the waiter before it leaves with the turn unused
//!   (cancelled, or timed out before it was polled): no permit is lost with it;
//! - it becomes the head of a rate-limited line whose old head left without a permit: it
//!   inherits the old head's retry time, so the line does not wait for its deadline;
//! - it heads its line after a turn refused for an in-flight limit, its key not promoted:
//!   1, 2, 4, 8 and then every 16 ticks after its refused turns. The sketch's counters it
//!   is judged by are shared with other keys, and a request of another key may have taken
//!   the room its key's release left; that key's release wakes no waiter of this one.
//!
//! Each wake is one attempt, so a wake-up storm cannot happen: per permit that came back at
//! most one waiter is woken, per retry time one per key. A new request for a key that has a
//! line joins its end instead of trying first, so waiters are served roughly in arrival order
//! (a [`try_acquire`](super::Limiter::try_acquire) does not queue and may come first).
//!
//! # No lost wake-up
//!
//! A waiter counts itself in its key's bucket of `parked` (`SeqCst`) before it joins the line;
//! a release gives its in-flight count back in the sketch (`SeqCst`) and then loads the bucket
//! (`SeqCst`). In the total order of those, either every attempt the waiter makes after
//! joining sees the permit back, or the release sees the waiter and takes the lock to give
//! the turn to the oldest waiting waiter of the line. A promoted key's release gives its units
//! back to its lane's word (`SeqCst`) before the sketch, and an attempt reads that word after
//! counting itself in the sketch, whether it is admitted or refused there: the same order.
//! Releases under the exact stage's lock (a key that is watched, or cools down and leaves)
//! are ordered by that lock, which attempts decided there take too: an attempt either comes
//! after the release's critical section (and sees the permit back) or before it, and then
//! the waiter's count happens before the release's load.
//!
//! What makes that enough is that some waiter of a line always makes an attempt after any
//! permit comes back:
//! - a waiter that joins a line with no head starts with the turn and tries at once, after
//!   counting itself, so it sees every permit given back before a release could miss it. A
//!   request its first attempt had refused for an in-flight limit, of a key not promoted now
//!   (whose attempts the sketches alone decide unless the exact stage finds it a place),
//!   reads its key's counters instead (`SeqCst` loads, after its count) against the limits
//!   in force, and tries only if the key is promoted now, the limits are in shadow or a
//!   permit came back: the counts such an attempt is decided by, without the set's lock and
//!   a second knock at its door;
//! - a release that finds the bucket counted takes the lock and gives the turn to the oldest
//!   waiting waiter; finding every waiter with the turn already, it credits the line, and
//!   the next attempt that fails tries again instead of waiting (or, if its waiter leaves
//!   admitted, the credit passes the turn on);
//! - a waiter that leaves with the turn unused (cancelled, given up) passes it on.
//!
//! A waiter that joins behind a head relies on it: a release either finds the head counted
//! (and the turn goes to a waiting waiter of the line, or to its credit), or comes after the
//! head has left and before the joiner counted itself, and then the joiner, finding no head,
//! tries itself. Cancelling a whole line therefore wakes no one.
//!
//! The loom models in `tests/loom_wait.rs` check the handshake and the passing on.
//!
//! # Bounded
//!
//! A limiter holds at most [`LimiterBuilder::max_waiters`](super::LimiterBuilder::max_waiters)
//! waiters, at most
//! [`LimiterBuilder::max_waiters_per_key`](super::LimiterBuilder::max_waiters_per_key) of one
//! key, all allocated when it is built; a request beyond them is refused at once.

mod queue;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::task::Waker;

pub(crate) use queue::{Queue, State, WaiterId};

use crate::clock::TICK_NANOS;
use crate::sync::{lock, AtomicU32, AtomicU64, Mutex, MutexGuard, Ordering};

/// Buckets of the parked counts per waiter the limiter allows: a release for a key with no
/// waiter then rarely finds a bucket counted by another key's waiters.
const BUCKETS_PER_WAITER: usize = 4;
/// The most buckets (256 KiB): every release loads one, so the array should stay in cache.
const MAX_BUCKETS: usize = 1 << 16;

/// Wakes a waiter's task. A waker is the executor's code: one that panics must not take the
/// clock's pass (and with it every later deadline of the limiter) or a permit's release down
/// with it, so the panic stops here; that task is not woken, and its deadline still fires.
pub(crate) fn wake(waker: Waker) {
    let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
}

/// The waiters of one limiter.
pub(crate) struct Waiters {
    /// Parked waiters per bucket of key hashes: the release path's one load.
    parked: Box<[AtomicU32]>,
    queue: Mutex<Queue>,
    /// The tick the limiter's clock user is next due at, as it last told its clock. Written
    /// under `queue`'s lock; a waiter due sooner prompts the clock.
    next_run: AtomicU64,
}

impl Waiters {
    /// Room for `max_total` waiters, at most `max_per_key` of one key, on a clock now at
    /// `now` (nanoseconds).
    pub(crate) fn new(max_total: usize, max_per_key: usize, now: u64) -> Self {
        let buckets = max_total
            .saturating_mul(BUCKETS_PER_WAITER)
            .clamp(1, MAX_BUCKETS)
            .next_power_of_two();
        Waiters {
            parked: (0..buckets).map(|_| AtomicU32::new(0)).collect(),
            queue: Mutex::new(Queue::new(max_total, max_per_key, now / TICK_NANOS)),
            next_run: AtomicU64::new(u64::MAX),
        }
    }

    fn bucket(&self, hash: u64) -> &AtomicU32 {
        // High bits: the sketches' columns take theirs from the low ones.
        &self.parked[(hash >> 40) as usize & (self.parked.len() - 1)]
    }

    /// Whether a waiter of `hash` may be parked (false: certainly none). One load.
    #[inline]
    pub(crate) fn any_parked(&self, hash: u64) -> bool {
        self.bucket(hash).load(Ordering::SeqCst) != 0
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }

    /// Counts a waiter of `hash` that has just parked: its half of the wake-up handshake,
    /// before its next attempt.
    pub(crate) fn count_parked(&self, hash: u64) {
        self.bucket(hash).fetch_add(1, Ordering::SeqCst);
        crate::sync::seqcst_fence_for_loom();
    }

    /// Uncounts a waiter of `hash` that has left (one [`count_parked`](Self::count_parked)
    /// counted).
    pub(crate) fn count_left(&self, hash: u64) {
        let before = self.bucket(hash).fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "a waiter left that was not counted");
    }

    /// A permit of `hash` came back with `units` in-flight units (after its count was given
    /// back): wakes the oldest waiting waiter of its key, if any, and credits its line with
    /// the rest of the units. One load when no waiter shares its bucket.
    #[inline]
    pub(crate) fn released(&self, hash: u64, units: u32) {
        crate::sync::seqcst_fence_for_loom();
        if !self.any_parked(hash) {
            return;
        }
        let waker = self.lock().released(hash, units);
        if let Some(waker) = waker {
            wake(waker);
        }
    }

    /// Whether a waiter due at tick `due` is sooner than the clock user's next run; if so,
    /// records that it will run at the next tick. Called under `queue`'s lock (hence the
    /// argument), the caller then prompts the clock.
    pub(crate) fn sooner(&self, _queue: &MutexGuard<'_, Queue>, due: u64) -> bool {
        if due < self.next_run.load(Ordering::Relaxed) {
            self.next_run.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// The clock's work at `now` (nanoseconds): wakes the waiters due, and returns the tick
    /// of the next one (`u64::MAX` with none).
    pub(crate) fn fire(&self, now: u64) -> u64 {
        let mut woken: Vec<Waker> = Vec::new();
        let next = {
            let mut queue = self.lock();
            queue.fire(now, &mut woken);
            let next = queue.next_due().unwrap_or(u64::MAX);
            self.next_run.store(next, Ordering::Relaxed);
            next
        };
        // Outside the lock: a waker may run the task at once.
        woken.into_iter().for_each(wake);
        next
    }

    /// Waiters parked now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Bytes allocated up front.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.parked) + self.lock().memory_bytes()
    }
}
