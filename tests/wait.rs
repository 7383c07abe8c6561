//! Waiting for a permit (`Limiter::acquire`): woken when a permit comes back or the window has
//! room, never before; given up at the deadline; in arrival order; one waiter per permit; a
//! cancelled waiter leaves nothing behind and loses no permit; bounded.
//!
//! Futures are polled by hand with counting wakers, and time is a `ManualClock`, so each test
//! sees exactly which wake-ups happen at which time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::Duration;

use floodgate::clock::ManualClock;
use floodgate::{Acquire, Limiter, Limits, OwnedPermit, Reason, Rejected};
use proptest::prelude::*;

mod common;

use common::ops::{arb, arb_vec};
use floodgate_fuzz_harness as harness;
use harness::limiter::LimiterConfig;
use harness::wait::{WaitInput, WaitOp};

const SECOND: Duration = Duration::from_secs(1);
const TICK: Duration = Duration::from_millis(10);

/// A waker that counts its wakes.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A future under test, with its own counting waker.
struct Polled {
    future: Acquire<String>,
    wakes: Arc<Wakes>,
}

impl Polled {
    fn new(future: Acquire<String>) -> Self {
        Polled {
            future,
            wakes: Arc::default(),
        }
    }

    fn poll(&mut self) -> Poll<Result<OwnedPermit<String>, Rejected>> {
        let waker = Waker::from(Arc::clone(&self.wakes));
        Pin::new(&mut self.future).poll(&mut Context::from_waker(&waker))
    }

    fn woken(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }

    /// Polls, expecting it to wait.
    fn pending(&mut self) {
        assert!(self.poll().is_pending(), "expected the request to wait");
    }

    fn admitted(&mut self) -> OwnedPermit<String> {
        match self.poll() {
            Poll::Ready(Ok(permit)) => permit,
            Poll::Ready(Err(rejected)) => panic!("expected a permit, got {rejected}"),
            Poll::Pending => panic!("expected a permit, still waiting"),
        }
    }

    fn rejected(&mut self) -> Rejected {
        match self.poll() {
            Poll::Ready(Err(rejected)) => rejected,
            Poll::Ready(Ok(_)) => panic!("expected a rejection, got a permit"),
            Poll::Pending => panic!("expected a rejection, still waiting"),
        }
    }
}

fn inflight_limiter<K: std::hash::Hash + Eq + Send + Sync + 'static>(
    limit: u32,
    clock: &ManualClock,
) -> Limiter<K> {
    Limiter::builder()
        .max_inflight(limit)
        .clock(clock)
        .build()
        .unwrap()
}

#[test]
fn a_request_with_room_is_admitted_at_once_without_waiting() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(2, &clock);
    let mut first = Polled::new(limiter.acquire("origin", SECOND));
    let _permit = first.admitted();
    assert_eq!(first.woken(), 0);
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn an_in_flight_waiter_is_admitted_when_a_permit_comes_back_and_not_before() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    let mut waiter = Polled::new(limiter.acquire("origin", 10 * SECOND));
    waiter.pending();
    assert_eq!(limiter.stats().waiting, 1);
    clock.advance(SECOND);
    assert_eq!(waiter.woken(), 0, "nothing came back");
    waiter.pending(); // a spurious poll changes nothing
    drop(held);
    assert_eq!(waiter.woken(), 1, "woken by the release");
    let _permit = waiter.admitted();
    assert_eq!(limiter.stats().waiting, 0);
    assert_eq!(limiter.estimate("origin").inflight, Some(1));
}

/// A key that counts its copies (its `Hash` and `Eq` are its name's).
#[derive(Debug)]
struct CountedKey {
    name: &'static str,
    copies: Arc<AtomicUsize>,
}

impl CountedKey {
    fn new(name: &'static str) -> Self {
        CountedKey {
            name,
            copies: Arc::default(),
        }
    }

    fn copies(&self) -> usize {
        self.copies.load(Ordering::SeqCst)
    }

    /// The same key again, counting with this one, without counting a copy.
    fn again(&self) -> Self {
        CountedKey {
            name: self.name,
            copies: Arc::clone(&self.copies),
        }
    }
}

impl Clone for CountedKey {
    fn clone(&self) -> Self {
        self.copies.fetch_add(1, Ordering::SeqCst);
        CountedKey {
            name: self.name,
            copies: Arc::clone(&self.copies),
        }
    }
}

impl PartialEq for CountedKey {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for CountedKey {}

impl std::hash::Hash for CountedKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

/// The copies of its key a request makes that waits for the permit of another of its key
/// and is admitted when it comes back; `by_value`: given with `acquire_owned_key`.
fn copies_of_a_waiting_request(by_value: bool) -> usize {
    let clock = ManualClock::new();
    let limiter: Limiter<CountedKey> = inflight_limiter(1, &clock);
    let key = CountedKey::new("origin");
    let held = limiter.try_acquire_owned(&key).unwrap();
    let waker = Waker::from(Arc::new(Wakes::default()));
    let mut cx = Context::from_waker(&waker);
    let before = key.copies();
    let mut waiting = match by_value {
        true => limiter.acquire_owned_key(key.again(), SECOND),
        false => limiter.acquire(&key, SECOND),
    };
    assert!(Pin::new(&mut waiting).poll(&mut cx).is_pending());
    drop(held);
    match Pin::new(&mut waiting).poll(&mut cx) {
        Poll::Ready(Ok(_permit)) => {}
        other => panic!("expected a permit once the first came back, got {other:?}"),
    }
    assert_eq!(limiter.stats().waiting, 0);
    key.copies() - before
}

#[test]
fn a_key_given_by_value_is_kept_not_copied_while_its_request_waits() {
    // The same requests, the same decisions (the exact stage keeps a copy of a key it
    // promotes, in both): a borrowed key is copied once more, when its request must wait,
    // since the future outlives the borrow.
    let borrowed = copies_of_a_waiting_request(false);
    let by_value = copies_of_a_waiting_request(true);
    assert_eq!(
        borrowed,
        by_value + 1,
        "copies: borrowed {borrowed}, by value {by_value}"
    );
}

#[test]
fn a_rate_waiter_wakes_at_its_retry_time_rounded_up_to_the_tick() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(2, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    drop(limiter.try_acquire("origin").unwrap());
    drop(limiter.try_acquire("origin").unwrap());
    let retry = limiter
        .try_acquire("origin")
        .unwrap_err()
        .retry_after
        .unwrap();
    let mut waiter = Polled::new(limiter.acquire("origin", 10 * SECOND));
    waiter.pending();
    // Just before the tick that contains the retry time: still waiting.
    let ticks = retry.as_nanos().div_ceil(TICK.as_nanos()) as u32;
    clock.advance(TICK * (ticks - 1));
    assert_eq!(waiter.woken(), 0, "woken before its room");
    // Woken at that tick: the over-limit cache that answered the waiter's own attempt holds
    // the same retry time, to the nanosecond.
    clock.advance(TICK);
    assert_eq!(waiter.woken(), 1);
    let _permit = waiter.admitted();
}

#[test]
fn a_waiter_gives_up_at_its_deadline_with_the_last_rejection() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let _held = limiter.try_acquire_owned("origin").unwrap();
    // A deadline at 25 ms: fired by the clock's first pass at or after it, the one at the
    // tick of 30 ms (a manual clock's passes are at its ticks' boundaries).
    let mut waiter = Polled::new(limiter.acquire("origin", Duration::from_millis(25)));
    waiter.pending();
    clock.advance(Duration::from_millis(29));
    assert_eq!(waiter.woken(), 0, "gave up early");
    clock.advance(Duration::from_millis(1));
    assert_eq!(waiter.woken(), 1);
    let rejected = waiter.rejected();
    assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 1));
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_request_first_polled_after_its_deadline_behind_a_line_leaves_the_permit_to_the_head() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    let mut head = Polled::new(limiter.acquire("origin", 100 * SECOND));
    head.pending();
    // Behind the line: it makes no attempt in the call.
    let mut late = Polled::new(limiter.acquire("origin", 2 * TICK));
    clock.advance(3 * TICK);
    drop(held);
    assert_eq!(head.woken(), 1, "the release woke the head");
    // First polled past its deadline: it joins the line, and takes nothing of the head's.
    late.pending();
    let _permit = head.admitted();
    clock.advance(TICK);
    assert_eq!(late.rejected().reason, Reason::Inflight);
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_request_first_polled_after_its_deadline_with_room_now_is_admitted() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    // Refused in the call, with no line to join: it will head one.
    let mut late = Polled::new(limiter.acquire("origin", 2 * TICK));
    drop(held);
    clock.advance(5 * TICK);
    // Its first rejection is stale: the permit came back before it was polled.
    let _permit = late.admitted();
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_waiter_refused_on_its_turn_in_its_last_tick_waits_out_its_deadline() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    // A deadline 50 ms away, on a tick: tick 5.
    let mut waiter = Polled::new(limiter.acquire("origin", Duration::from_millis(50)));
    waiter.pending();
    // 5 ms before the deadline, the permit comes back and is taken at once by a request
    // that does not queue: the waiter's turn finds no room.
    clock.advance(Duration::from_millis(45));
    drop(held);
    let _taken = limiter.try_acquire_owned("origin").unwrap();
    assert_eq!(waiter.woken(), 1, "its turn");
    waiter.pending(); // refused on its turn, and it waits on: 5 ms are left
    assert_eq!(
        limiter.stats().waiting,
        1,
        "gave up 5 ms before its deadline"
    );
    clock.advance(Duration::from_millis(5));
    assert_eq!(waiter.woken(), 2, "its deadline");
    let rejected = waiter.rejected();
    assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 1));
    assert_eq!(limiter.stats().waiting, 0);
}

/// A limiter of one in flight whose exact stage (one set of 16) is held by 16 keys, each
/// holding its permit and with more evidence than any newcomer's knocks: a newcomer at its
/// limit is decided by the sketches alone.
fn stage_full_of_others(clock: &ManualClock) -> (Limiter<String>, Vec<OwnedPermit<String>>) {
    stage_full_of_others_in(clock, 1, 1 << 16)
}

/// [`stage_full_of_others`] for a limit of `limit` in flight (each resident holds all of
/// it) and sketch rows of `columns` counters.
fn stage_full_of_others_in(
    clock: &ManualClock,
    limit: u32,
    columns: usize,
) -> (Limiter<String>, Vec<OwnedPermit<String>>) {
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(limit)
        .exact_capacity(16)
        .sketch(2, columns)
        .clock(clock)
        .build()
        .unwrap();
    let mut held = Vec::new();
    let mut residents = 0;
    for key in (0..).map(|i| format!("resident-{i}")) {
        if residents == 16 {
            break;
        }
        // Not a key sharing both its counters with an earlier resident, whose permits its
        // count would include.
        if limiter.estimate(&key).inflight != Some(0) {
            continue;
        }
        for _ in 0..limit {
            held.push(limiter.try_acquire_owned(&key).unwrap());
        }
        for _ in 0..8 {
            assert!(limiter.try_acquire(&key).is_err(), "its evidence");
        }
        residents += 1;
    }
    assert_eq!(limiter.stats().promoted, 16);
    (limiter, held)
}

/// A key no resident shares both counters with, in a filter cell no resident flagged (the
/// filter sends such a cell's requests to the stage): its requests at its limit are decided
/// by the sketches alone.
fn newcomer(limiter: &Limiter<String>) -> String {
    (0..)
        .map(|i| format!("newcomer-{i}"))
        .find(|k| limiter.estimate(k).inflight == Some(0) && !limiter.exact_filter_flagged(k))
        .expect("a key")
}

#[test]
fn a_head_of_a_key_without_a_place_reads_whether_a_permit_came_back_without_the_lock() {
    let clock = ManualClock::new();
    let (limiter, _residents) = stage_full_of_others(&clock);
    let key = newcomer(&limiter);
    let held = limiter.try_acquire_owned(&key).unwrap();
    assert_eq!(limiter.stats().promoted, 16, "the newcomer has no place");
    let mut waiter = Polled::new(limiter.acquire(&key, 10 * SECOND));
    // Its first attempt was refused by the sketches alone; heading its line, it reads the
    // key's count after counting itself, and takes no lock for it.
    let locks = limiter.exact_locks_taken();
    waiter.pending();
    assert_eq!(
        limiter.exact_locks_taken(),
        locks,
        "the head's check took the lock"
    );
    assert_eq!(limiter.stats().waiting, 1);
    assert_eq!(limiter.stats().promoted, 16, "one request, one knock");
    drop(held);
    assert_eq!(waiter.woken(), 1, "woken by the release");
    let _permit = waiter.admitted();
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_head_of_a_key_without_a_place_is_judged_by_the_limits_in_force_when_it_parks() {
    // Raised between the call (refused under 1) and the first poll: admitted at that poll.
    let clock = ManualClock::new();
    let (limiter, _residents) = stage_full_of_others(&clock);
    let key = newcomer(&limiter);
    let _held = limiter.try_acquire_owned(&key).unwrap();
    let mut waiter = Polled::new(limiter.acquire(&key, 10 * SECOND));
    limiter.set_limits(Limits::new().max_inflight(2)).unwrap();
    let permit = waiter.admitted();
    assert!(permit.shadow_rejection().is_none());
    assert_eq!(limiter.stats().waiting, 0);
    drop(permit);

    // Shadow turned on meanwhile: the refusal it stands for is an admission that says so.
    let clock = ManualClock::new();
    let (limiter, _residents) = stage_full_of_others(&clock);
    let key = newcomer(&limiter);
    let _held = limiter.try_acquire_owned(&key).unwrap();
    let mut waiter = Polled::new(limiter.acquire(&key, 10 * SECOND));
    limiter
        .set_limits(Limits::new().max_inflight(1).shadow(true))
        .unwrap();
    let permit = waiter.admitted();
    let rejected = permit.shadow_rejection().expect("a shadow admission");
    assert_eq!((rejected.reason, rejected.limit), (Reason::Inflight, 1));
    assert_eq!(limiter.stats().waiting, 0);
}

/// Two keys that share both their counters in the sketch and none of a resident's, in
/// filter cells no resident flagged, and a permit of the first, held. In rows of 256
/// counters, about one candidate in 2,048 shares the first's counters (the same block of
/// 32, the same of 8 counters in each of 2 rows): among 60,000, none does about once in
/// e^29.
fn two_keys_sharing_counters(limiter: &Limiter<String>) -> (String, OwnedPermit<String>, String) {
    // Read before the first key counts anything.
    let candidates: Vec<String> = (0..60_000)
        .map(|i| format!("origin-{i}"))
        .filter(|k| limiter.estimate(k).inflight == Some(0) && !limiter.exact_filter_flagged(k))
        .collect();
    let a = candidates[0].clone();
    let held = limiter.try_acquire_owned(&a).unwrap();
    let b = candidates[1..]
        .iter()
        .find(|k| limiter.estimate(*k).inflight == Some(1))
        .expect("a key sharing a's counters")
        .clone();
    (a, held, b)
}

#[test]
fn a_waiter_whose_room_a_key_sharing_its_counters_took_tries_again_on_the_clock() {
    let clock = ManualClock::new();
    // Small rows, so that two keys sharing both their counters are found among a few
    // thousand; a limit of 2.
    let (limiter, _residents) = stage_full_of_others_in(&clock, 2, 256);
    let (a, a_first, b) = two_keys_sharing_counters(&limiter);
    let (a, b) = (&a, &b);
    assert_eq!(limiter.stats().promoted, 16, "neither has a place");
    // b's permit and a's fill the counters they share; b's waiter parks.
    let b_held = limiter.try_acquire_owned(b).unwrap();
    let mut waiter = Polled::new(limiter.acquire(b, 10 * SECOND));
    waiter.pending();
    // b's permit comes back and wakes the waiter; a request of a takes the room first.
    drop(b_held);
    assert_eq!(waiter.woken(), 1);
    let a_second = limiter.try_acquire_owned(a).unwrap();
    waiter.pending(); // refused on its turn
                      // a's permits come back: no release of b wakes the waiter, which tries again on the
                      // clock: at the next tick.
    drop((a_first, a_second));
    assert_eq!(limiter.estimate(b).inflight, Some(0));
    clock.advance(TICK);
    assert_eq!(waiter.woken(), 2, "stuck until its deadline");
    let _permit = waiter.admitted();
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_waiter_refused_on_its_turns_retries_at_most_every_sixteen_ticks() {
    let clock = ManualClock::new();
    let (limiter, _residents) = stage_full_of_others_in(&clock, 2, 256);
    let (a, a_first, b) = two_keys_sharing_counters(&limiter);
    let (a, b) = (&a, &b);
    let b_held = limiter.try_acquire_owned(b).unwrap();
    let mut waiter = Polled::new(limiter.acquire(b, 10 * SECOND));
    waiter.pending();
    drop(b_held);
    let _a_second = limiter.try_acquire_owned(a).unwrap();
    waiter.pending(); // refused on its turn; a holds the room from now on
                      // Its tries: 1, 2, 4, 8, 16, 16, 16 ticks apart, each refused.
    let mut at = 0;
    for gap in [1, 2, 4, 8, 16, 16, 16] {
        let tries = waiter.woken();
        clock.advance(TICK * (gap - 1));
        assert_eq!(waiter.woken(), tries, "tried before {gap} ticks");
        clock.advance(TICK);
        assert_eq!(waiter.woken(), tries + 1, "no try after {gap} ticks");
        waiter.pending();
        at += gap;
    }
    assert_eq!(at, 63);
    drop(a_first);
    assert_eq!(limiter.stats().waiting, 1);
}

#[test]
fn a_permit_back_before_a_head_of_a_key_without_a_place_counted_itself_is_taken() {
    let clock = ManualClock::new();
    let (limiter, _residents) = stage_full_of_others(&clock);
    let key = newcomer(&limiter);
    let held = limiter.try_acquire_owned(&key).unwrap();
    // Refused in the call; the permit comes back before the request is first polled (and
    // counts itself as a waiter), so the release finds no waiter to wake.
    let mut waiter = Polled::new(limiter.acquire(&key, 10 * SECOND));
    drop(held);
    let _permit = waiter.admitted();
    assert_eq!(waiter.woken(), 0);
    assert_eq!(limiter.stats().waiting, 0);
}

#[test]
fn a_rate_rejection_with_no_room_before_the_deadline_is_returned_at_once() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(1, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    drop(limiter.try_acquire("origin").unwrap());
    let mut waiter = Polled::new(limiter.acquire("origin", Duration::from_millis(100)));
    let rejected = waiter.rejected();
    assert!(rejected.retry_after.unwrap() > Duration::from_millis(100));
    assert_eq!(limiter.stats().waiting, 0);
    // And no waiting helps a limit of 0 either.
    let mut none = Polled::new(
        limiter
            .with_limits(Limits::new().max_rate(0))
            .acquire("origin", SECOND),
    );
    assert_eq!(none.rejected().limit, 0);
}

#[test]
fn waiters_of_a_key_are_admitted_in_arrival_order_one_per_permit() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let mut held = Some(limiter.try_acquire_owned("origin").unwrap());
    let mut waiters: Vec<_> = (0..5)
        .map(|_| Polled::new(limiter.acquire("origin", 100 * SECOND)))
        .collect();
    for w in &mut waiters {
        w.pending();
    }
    for i in 0..5 {
        drop(held.take());
        // One permit came back: exactly one waiter woken, the oldest.
        let woken: Vec<usize> = waiters.iter().map(Polled::woken).collect();
        assert_eq!(
            woken.iter().sum::<usize>(),
            i + 1,
            "woken so far: {woken:?}"
        );
        assert_eq!(woken[i], 1, "not the oldest: {woken:?}");
        held = Some(waiters[i].admitted());
        for later in &mut waiters[i + 1..] {
            later.pending();
        }
    }
}

#[test]
fn a_new_request_queues_behind_the_waiters_of_its_key() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    let mut first = Polled::new(limiter.acquire("origin", 100 * SECOND));
    first.pending();
    drop(held); // the first waiter has the turn, not yet polled
                // The permit is free, but the first waiter has its turn: the newcomer queues.
    let mut late = Polled::new(limiter.acquire("origin", 100 * SECOND));
    late.pending();
    let permit = first.admitted();
    assert_eq!(late.woken(), 0, "one permit came back, one waiter woken");
    drop(permit);
    assert_eq!(late.woken(), 1);
    let _permit = late.admitted();
}

#[test]
fn a_cancelled_waiter_leaves_nothing_behind_and_passes_its_turn_on() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    let before = limiter.memory_bytes();
    let mut first = Polled::new(limiter.acquire("origin", 100 * SECOND));
    let mut second = Polled::new(limiter.acquire("origin", 100 * SECOND));
    first.pending();
    second.pending();
    drop(held); // the first gets the turn...
    assert_eq!((first.woken(), second.woken()), (1, 0));
    drop(first); // ...and is cancelled before it is polled: the turn passes on
    assert_eq!(second.woken(), 1);
    let permit = second.admitted();
    assert_eq!(limiter.stats().waiting, 0);
    // Cancelling a waiter that never got the turn holds nothing either.
    let mut third = Polled::new(limiter.acquire("origin", 100 * SECOND));
    third.pending();
    drop(third);
    assert_eq!(limiter.stats().waiting, 0);
    drop(permit);
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
    assert_eq!(limiter.memory_bytes(), before);
}

#[test]
fn waiters_beyond_the_caps_are_refused_at_once() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_inflight(1)
        .max_waiters(3)
        .max_waiters_per_key(2)
        .clock(&clock)
        .build()
        .unwrap();
    let _a = limiter.try_acquire_owned("a").unwrap();
    let _b = limiter.try_acquire_owned("b").unwrap();
    let mut queued: Vec<_> = ["a", "a", "b"]
        .iter()
        .map(|k| Polled::new(limiter.acquire(*k, 100 * SECOND)))
        .collect();
    queued.iter_mut().for_each(Polled::pending);
    let mut per_key = Polled::new(limiter.acquire("a", 100 * SECOND));
    assert_eq!(
        per_key.rejected().reason,
        Reason::Inflight,
        "a third of key a"
    );
    let mut in_all = Polled::new(limiter.acquire("b", 100 * SECOND));
    assert_eq!(
        in_all.rejected().reason,
        Reason::Inflight,
        "a fourth in all"
    );
    assert_eq!(limiter.stats().waiting, 3);
}

#[test]
fn a_flood_of_waiters_of_one_rate_limited_key_wakes_one_at_a_time() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(10, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    for _ in 0..10 {
        drop(limiter.try_acquire("origin").unwrap());
    }
    let mut waiters: Vec<_> = (0..50)
        .map(|_| Polled::new(limiter.acquire("origin", 10 * SECOND)))
        .collect();
    waiters.iter_mut().for_each(Polled::pending);
    let mut admitted = Vec::new();
    let mut polls = 0;
    // Three seconds of ticks; after each, poll every woken waiter until none is woken anew.
    for _ in 0..300 {
        clock.advance(TICK);
        loop {
            let mut progressed = false;
            for w in waiters.iter_mut() {
                if w.woken() > 0 {
                    w.wakes.0.store(0, Ordering::SeqCst);
                    polls += 1;
                    progressed = true;
                    if let Poll::Ready(result) = w.poll() {
                        admitted.push(result.expect("no deadline reached"));
                    }
                }
            }
            if !progressed {
                break;
            }
        }
    }
    // 10 a second by the sliding window: the first second is full already, so about 20 in
    // the next two. Never a storm of attempts: each admitted waiter wakes at most its
    // successor, and each retry time one waiter.
    assert!((18..=21).contains(&admitted.len()), "{}", admitted.len());
    assert!(polls <= 2 * admitted.len() + 300, "{polls} attempts");
}

#[test]
fn acquire_with_limits_waits_against_the_keys_own_limits() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let plan = Limits::new().max_inflight(2);
    let _a = limiter.with_limits(plan).try_acquire("origin").unwrap();
    let b = limiter
        .with_limits(plan)
        .try_acquire_owned("origin")
        .unwrap();
    let mut waiter = Polled::new(limiter.with_limits(plan).acquire("origin", 100 * SECOND));
    waiter.pending();
    drop(b);
    let _c = waiter.admitted();
    assert_eq!(limiter.estimate("origin").inflight, Some(2));
}

#[test]
fn many_threads_waiting_on_one_key_never_exceed_the_limit_and_all_finish() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 300;
    let clock = ManualClock::new();
    let limiter = inflight_limiter(2, &clock);
    let inside = Arc::new(AtomicUsize::new(0));
    let (done, finished) = mpsc::channel();
    for _ in 0..THREADS {
        let (limiter, inside, done) = (limiter.clone(), Arc::clone(&inside), done.clone());
        thread::spawn(move || {
            for _ in 0..ROUNDS {
                // Never times out: the clock does not move. A lost wake-up hangs here.
                let permit = block_on(limiter.acquire("origin", 3600 * SECOND)).unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                assert!(now <= 2, "{now} inside a limit of 2");
                thread::yield_now();
                inside.fetch_sub(1, Ordering::SeqCst);
                drop(permit);
            }
            done.send(()).unwrap();
        });
    }
    for _ in 0..THREADS {
        // A liveness bound, not a timing claim: a lost wake-up never finishes.
        finished
            .recv_timeout(Duration::from_secs(120))
            .expect("a waiter was never woken");
    }
    assert_eq!(limiter.stats().waiting, 0);
    assert_eq!(limiter.estimate("origin").inflight, Some(0));
}

/// Runs a future to completion on this thread, parking between polls.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        thread::park();
    }
}

#[test]
fn with_the_shared_clock_waiters_are_admitted_as_permits_come_back() {
    let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admitted = runtime.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let permit = limiter.acquire("origin", 60 * SECOND).await?;
                    tokio::task::yield_now().await;
                    drop(permit);
                    Ok::<_, Rejected>(())
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            task.await.unwrap().expect("admitted within a minute");
            admitted += 1;
        }
        admitted
    });
    assert_eq!(admitted, 8);
    // A rate waiter on the real clock: admitted once its window has room.
    let rated: Limiter<String> = Limiter::builder()
        .max_rate(1, Duration::from_millis(100))
        .build()
        .unwrap();
    drop(rated.try_acquire("origin").unwrap());
    let permit = runtime.block_on(rated.acquire("origin", 10 * SECOND));
    assert!(permit.is_ok(), "{permit:?}");
}

#[test]
fn when_a_rate_limited_head_is_cancelled_the_next_waiter_wakes_at_its_retry_time() {
    let clock = ManualClock::new();
    let limiter: Limiter<String> = Limiter::builder()
        .max_rate(1, SECOND)
        .clock(&clock)
        .build()
        .unwrap();
    drop(limiter.try_acquire("origin").unwrap());
    let mut head = Polled::new(limiter.acquire("origin", 30 * SECOND));
    // It tried, and waits for its retry time: with 1 admitted in the first window, one more
    // fits once that window has slid out entirely, 2 s on.
    head.pending();
    let mut next = Polled::new(limiter.acquire("origin", 30 * SECOND));
    next.pending(); // behind it, never tried: only its deadline in 30 s
    clock.advance(SECOND / 2);
    drop(head); // cancelled: wakes no one, but the new head inherits the retry time
    assert_eq!(next.woken(), 0);
    clock.advance(SECOND * 14 / 10);
    assert_eq!(next.woken(), 0, "woken before the window has room");
    clock.advance(SECOND / 10 + 2 * TICK);
    assert_eq!(next.woken(), 1, "the line waited for its deadline");
    let _permit = next.admitted();
}

#[test]
fn a_waiter_woken_for_a_permit_that_times_out_unpolled_and_is_dropped_passes_it_on() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let held = limiter.try_acquire_owned("origin").unwrap();
    let mut first = Polled::new(limiter.acquire("origin", Duration::from_millis(100)));
    let mut second = Polled::new(limiter.acquire("origin", 30 * SECOND));
    first.pending();
    second.pending();
    clock.advance(Duration::from_millis(95));
    drop(held); // the first gets the turn...
    assert_eq!((first.woken(), second.woken()), (1, 0));
    clock.advance(Duration::from_millis(10)); // ...times out before it is polled...
    drop(first); // ...and is dropped unpolled: the permit's turn goes on
    assert_eq!(second.woken(), 1);
    let _permit = second.admitted();
}

#[test]
fn a_request_no_waiting_can_help_is_refused_at_once_even_behind_a_line() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let _held = limiter.try_acquire_owned("origin").unwrap();
    let mut waiter = Polled::new(limiter.acquire("origin", 30 * SECOND));
    waiter.pending();
    let suspended = Limits::new().max_inflight(0);
    let mut refused = Polled::new(
        limiter
            .with_limits(suspended)
            .acquire("origin", 30 * SECOND),
    );
    assert_eq!(refused.rejected().limit, 0);
    let wrong = Limits::new().max_rate(5);
    let mut refused = Polled::new(limiter.with_limits(wrong).acquire("origin", 30 * SECOND));
    assert_eq!(refused.rejected().reason, Reason::RateNotCounted);
    assert_eq!(
        limiter.stats().waiting,
        1,
        "neither took a place in the line"
    );
}

/// A waker whose executor panics when woken.
struct Panics;

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        panic!("an executor's waker panicked (injected by the test)");
    }
}

#[test]
fn a_waker_that_panics_does_not_stop_the_clock_for_the_other_waiters() {
    let clock = ManualClock::new();
    let limiter = inflight_limiter(1, &clock);
    let _held = limiter.try_acquire_owned("a").unwrap();
    let _held_b = limiter.try_acquire_owned("b").unwrap();
    let mut bad = limiter.acquire("a", Duration::from_millis(50));
    let panics = Waker::from(Arc::new(Panics));
    assert!(Pin::new(&mut bad)
        .poll(&mut Context::from_waker(&panics))
        .is_pending());
    let mut good = Polled::new(limiter.acquire("b", Duration::from_millis(200)));
    good.pending();
    clock.advance(Duration::from_millis(100)); // the bad waker panics here, caught
    clock.advance(Duration::from_millis(100));
    assert_eq!(good.woken(), 1, "the later deadline still fired");
    assert_eq!(good.rejected().reason, Reason::Inflight);
}

#[test]
fn more_waiters_than_a_limiter_can_hold_is_a_clear_error() {
    let err = Limiter::<String>::builder()
        .max_inflight(1)
        .max_waiters(usize::MAX)
        .build()
        .unwrap_err();
    assert!(
        matches!(err, floodgate::ConfigError::Waiters { .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("at most 16777216 waiters"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// Properties 1, 2 and 9 (docs/architecture.md) for requests that wait, on inputs drawn over
// their whole range (costs up to `u32::MAX`, limits up to `Limits::MAX_LIMIT`, `max_wait` from
// 0 to `Duration::MAX`, lines that fill, waiters cancelled at any point): the wait fuzz
// harness's (`fuzz/harness/src/wait.rs`), on operations proptest builds (`tests/common/ops.rs`).

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn waiters_never_pass_a_limit_are_never_refused_early_or_answered_late_and_leave_nothing(
        config in arb::<LimiterConfig>(),
        per_key in any::<u8>(),
        total in any::<u8>(),
        ops in arb_vec::<WaitOp>(1..120),
    ) {
        harness::wait::run(&WaitInput { config, per_key, total, ops });
    }
}
