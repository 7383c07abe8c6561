//! `Limiter::acquire` and `acquire_owned_key`: requests that wait for a permit, polled by hand
//! on a `ManualClock` among requests that take permits and give them back, and the checks at
//! every step.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use arbitrary::Arbitrary;
use floodgate::{Acquire, Limiter, OwnedPermit, Reason, Rejected};

use super::limiter::{units, LimiterConfig, Settings};
use super::time::{Advance, Time};
use super::{bounded, key, slack, TICK_NANOS};

/// The most requests waiting or holding a permit at once (each waiter is polled at each step).
const MAX_LIVE: usize = 64;

/// How long a request may wait, from raw fields: none, a nanosecond, a tick and its
/// neighbours, up to a few hundred ticks, and the longest there are (`Duration::MAX`, and
/// `u64::MAX` nanoseconds, whose deadlines never come).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct MaxWait {
    tag: u8,
    raw: u32,
}

impl MaxWait {
    pub fn get(self) -> Duration {
        match self.tag % 16 {
            0 => Duration::ZERO,
            1 => Duration::from_nanos(1),
            2 => Duration::from_nanos(TICK_NANOS - 1),
            3 => Duration::from_nanos(TICK_NANOS),
            4 => Duration::from_nanos(TICK_NANOS + 1),
            5 => Duration::MAX,
            6 => Duration::from_nanos(u64::MAX),
            7 => Duration::from_secs(u64::from(self.raw)),
            8..=11 => Duration::from_nanos(u64::from(self.raw) % (300 * TICK_NANOS)),
            _ => Duration::from_millis(u64::from(self.raw % 2_000)),
        }
    }
}

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum WaitOp {
    /// `acquire(&key)` (or `acquire_owned_key(key)` when `by_value`) of `units(cost)` units,
    /// polled once at once when `poll`; a permit it gets is held.
    Wait {
        key: u8,
        cost: u32,
        max_wait: MaxWait,
        by_value: bool,
        poll: bool,
    },
    /// `1 + n % 6` requests of one unit of one key that wait up to `max_wait`, alternately
    /// borrowed and by value, each polled once.
    Crowd {
        key: u8,
        n: u8,
        max_wait: MaxWait,
    },
    /// `1 + n % 4` requests of one unit (`try_acquire_owned`); the permits are held.
    Take {
        key: u8,
        n: u8,
    },
    /// Polls one waiter.
    Poll {
        pick: u8,
    },
    /// Polls every waiter, oldest first.
    PollAll,
    /// Drops one waiter, at whatever point it is.
    Cancel {
        pick: u8,
    },
    /// Drops one held permit.
    Release {
        pick: u8,
    },
    Advance(Advance),
}

/// A limiter, how many may wait in it, and the operations to run.
#[derive(Arbitrary, Debug, Clone)]
pub struct WaitInput {
    pub config: LimiterConfig,
    /// `max_waiters_per_key` is `1 + per_key % 6`, `max_waiters` `1 + total % 16`: lines fill.
    pub per_key: u8,
    pub total: u8,
    pub ops: Vec<WaitOp>,
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A request that waits, as the harness sees it.
struct Waiter {
    key: usize,
    units: u32,
    /// When it gives up: its call's time plus its `max_wait`, in clock nanoseconds (never, at
    /// `u64::MAX`).
    deadline: u64,
    /// Polled and pending at least once: it is in its key's line.
    parked: bool,
    /// The clock's time at its first pending poll, and its place among those polls: lines
    /// are in that order.
    parked_at: u64,
    place: u64,
    /// In its line when the clock last began to move (`WaitOp::Advance`).
    parked_before_advance: bool,
    future: Acquire<u64>,
    waker: Waker,
}

/// The limiter, its clock, the waiters and the permits held, and the exact counts of what
/// was admitted.
struct Run {
    limiter: Limiter<u64>,
    s: Settings,
    per_key: usize,
    total: usize,
    time: Time,
    /// The time the limiter's windows began.
    start: u64,
    waiters: Vec<Waiter>,
    permits: Vec<(usize, isize, OwnedPermit<u64>)>,
    /// Units each key holds in flight.
    in_flight: Vec<isize>,
    /// Units admitted per (window, key), the windows a sliding count reads.
    admitted: std::collections::BTreeMap<u64, Vec<i128>>,
    /// Waiters that joined a line so far.
    places: u64,
}

/// Runs `input`: checks at every step, for any collision pattern (Properties 1, 2 and 9 of
/// docs/architecture.md):
/// - an admission, at once or after waiting, never takes a key past its in-flight limit nor
///   its exact sliding-window count of admitted units past its rate limit;
/// - a request is refused before its deadline only when no waiting can help it (a cost over
///   a limit; a rate rejection whose `retry_after` passes the deadline) or it found no place
///   in its key's line (`max_waiters_per_key`, `max_waiters`);
/// - a waiter in its line is answered by its first poll after the clock's first pass at or
///   after its deadline and after it joined the line (the `ManualClock` passes at each 10 ms
///   boundary it crosses);
/// - `stats().waiting` is the number of waiters in a line, whatever was cancelled, woken,
///   admitted or timed out;
/// - at the end, every waiter dropped and every permit given back: no waiter left, and every
///   key's in-flight bound back at 0.
pub fn run(input: &WaitInput) {
    let mut s = input.config.settings();
    // 1–3 keys, so that they meet their limits and wait; the sketches may still be small
    // enough that they share every counter.
    s.keys = 1 + (s.keys - 1) % 3;
    let per_key = 1 + usize::from(input.per_key % 6);
    let total = 1 + usize::from(input.total % 16);
    let mut time = Time::new();
    time.advance(s.offset);
    // Its in-flight limits are not learnt: a refusal is judged by the configured limit.
    let limiter = (s.builder(&time.clock))
        .max_waiters(total)
        .max_waiters_per_key(per_key)
        .build()
        .expect("a valid limiter configuration");
    let start = time.now;
    let mut run = Run {
        limiter,
        s,
        per_key,
        total,
        time,
        start,
        waiters: Vec::new(),
        permits: Vec::new(),
        in_flight: vec![0; s.keys],
        admitted: std::collections::BTreeMap::new(),
        places: 0,
    };
    for op in bounded(&input.ops) {
        run.apply(op);
        run.check_waiting();
    }
    run.finish();
}

impl Run {
    fn apply(&mut self, op: &WaitOp) {
        let live = self.waiters.len() + self.permits.len();
        match *op {
            WaitOp::Wait {
                key: raw,
                cost,
                max_wait,
                by_value,
                poll,
            } if live < MAX_LIVE => {
                let key = key(raw, self.s.keys);
                // Mostly one or two units; else any, from none to past every limit.
                let units = match cost % 4 {
                    0 => {
                        let least = self.s.max_inflight.into_iter().chain(self.s.max_rate);
                        units(cost >> 2, least.min().unwrap_or(1))
                    }
                    c => 1 + c % 2,
                };
                self.wait(key, units, max_wait.get(), by_value, poll);
            }
            WaitOp::Crowd {
                key: raw,
                n,
                max_wait,
            } => {
                let key = key(raw, self.s.keys);
                for i in 0..1 + n % 6 {
                    if self.waiters.len() + self.permits.len() < MAX_LIVE {
                        self.wait(key, 1, max_wait.get(), i % 2 == 0, true);
                    }
                }
            }
            WaitOp::Wait { .. } => {}
            WaitOp::Take { key: raw, n } if live < MAX_LIVE => {
                let key = key(raw, self.s.keys);
                for _ in 0..1 + n % 4 {
                    if let Ok(permit) = self.limiter.try_acquire_owned(&(key as u64)) {
                        self.admitted_now(key, 1, "try_acquire_owned");
                        self.permits.push((key, 1, permit));
                    }
                }
            }
            WaitOp::Take { .. } => {}
            WaitOp::Poll { pick } => {
                if !self.waiters.is_empty() {
                    self.poll(usize::from(pick) % self.waiters.len());
                }
            }
            WaitOp::PollAll => self.poll_all(),
            WaitOp::Cancel { pick } => {
                if !self.waiters.is_empty() {
                    let waiter = self.waiters.remove(usize::from(pick) % self.waiters.len());
                    drop(waiter.future);
                }
            }
            WaitOp::Release { pick } => {
                if !self.permits.is_empty() {
                    let (key, units, permit) =
                        self.permits.remove(usize::from(pick) % self.permits.len());
                    drop(permit);
                    self.in_flight[key] -= units;
                    self.head_takes_what_came_back(key);
                }
            }
            WaitOp::Advance(by) => {
                // Waiters in a line before the clock moves: each must be answered by its
                // first poll once a pass has run at or after its deadline, after it parked
                // (one that parks past its deadline waits for the next pass).
                for w in &mut self.waiters {
                    w.parked_before_advance = w.parked;
                }
                let (start, bucket) = (self.start, self.s.interval_nanos);
                self.time.advance_by(by, start, bucket, 3);
                let now = self.time.now;
                let mut i = 0;
                while i < self.waiters.len() {
                    let w = &self.waiters[i];
                    let pass_after_parking = (w.parked_at / TICK_NANOS + 1) * TICK_NANOS;
                    let passed = (w.deadline.checked_next_multiple_of(TICK_NANOS))
                        .is_some_and(|pass| pass.max(pass_after_parking) <= now);
                    if w.parked_before_advance && passed {
                        let deadline = w.deadline;
                        // Answered, it is out of the list: `i` is the next one.
                        assert!(
                            self.poll(i),
                            "a waiter in line past its deadline ({deadline} ns) and the \
                             clock's pass after it is still waiting at {now} ns"
                        );
                    } else {
                        i += 1;
                    }
                }
            }
        }
    }

    /// A request of `units` for `key` that waits up to `max_wait`, polled at once if `poll`
    /// (or decided in the call: then answered now, at the time of its decision).
    fn wait(&mut self, key: usize, units: u32, max_wait: Duration, by_value: bool, poll: bool) {
        let limits = self.limiter.with_cost(units);
        let id = key as u64;
        let future = match by_value {
            true => limits.acquire_owned_key(id, max_wait),
            false => limits.acquire(&id, max_wait),
        };
        let decided = !format!("{future:?}").contains("wait");
        let nanos = u64::try_from(max_wait.as_nanos()).unwrap_or(u64::MAX);
        self.waiters.push(Waiter {
            key,
            units,
            deadline: self.time.now.saturating_add(nanos),
            parked: false,
            parked_at: 0,
            place: 0,
            parked_before_advance: false,
            future,
            waker: Waker::from(Arc::new(Wakes::default())),
        });
        if poll || decided {
            self.poll(self.waiters.len() - 1);
        }
    }

    /// After a permit of `key` came back: when the key is alone and limited in flight alone
    /// (its counts are its own), the first waiter of its line takes the room if it fits.
    fn head_takes_what_came_back(&mut self, key: usize) {
        let (Some(limit), None, 1) = (self.s.max_inflight, self.s.max_rate, self.s.keys) else {
            return;
        };
        let head = (self.waiters.iter().enumerate())
            .filter(|(_, w)| w.parked && w.key == key)
            .min_by_key(|(_, w)| w.place)
            .map(|(i, w)| (i, w.units));
        let Some((i, units)) = head else { return };
        if self.in_flight[key] + units as isize <= limit as isize {
            let admitted = self.permits.len();
            assert!(
                self.poll(i),
                "the first waiter of a line left waiting by a release"
            );
            assert_eq!(
                self.permits.len(),
                admitted + 1,
                "the first waiter of a line refused with room for it"
            );
        }
    }

    /// Polls every waiter once, oldest first.
    fn poll_all(&mut self) {
        let mut i = 0;
        while i < self.waiters.len() {
            if !self.poll(i) {
                i += 1;
            }
        }
    }

    /// Polls waiter `i` and checks its answer; returns whether it was answered (and is gone).
    fn poll(&mut self, i: usize) -> bool {
        // The lines as this poll finds them: a waiter's first poll joins its key's.
        let in_line = self.waiters.iter().filter(|w| w.parked).count();
        let key = self.waiters[i].key;
        let key_in_line = (self.waiters.iter())
            .filter(|w| w.parked && w.key == key)
            .count();
        let w = &mut self.waiters[i];
        let mut cx = Context::from_waker(&w.waker);
        let answer = std::pin::Pin::new(&mut w.future).poll(&mut cx);
        match answer {
            Poll::Pending => {
                if !w.parked {
                    (w.parked, w.parked_at, w.place) = (true, self.time.now, self.places);
                    self.places += 1;
                }
                false
            }
            Poll::Ready(answer) => {
                let line_full = !w.parked && (in_line >= self.total || key_in_line >= self.per_key);
                let w = self.waiters.remove(i);
                match answer {
                    Ok(permit) => {
                        self.admitted_now(w.key, w.units, "a waiter");
                        self.permits.push((w.key, w.units as isize, permit));
                    }
                    Err(rejected) => self.check_refusal(&w, &rejected, line_full),
                }
                true
            }
        }
    }

    /// Checks an admission of `units` for `key` now, and counts it.
    fn admitted_now(&mut self, key: usize, units: u32, what: &str) {
        if units == 0 {
            return; // takes nothing, admitted whatever the key holds
        }
        let units = units as isize;
        if let Some(limit) = self.s.max_inflight {
            let held = self.in_flight[key];
            assert!(
                held + units <= limit as isize,
                "{what} admitted key {key} with {held} units in flight and {units} more, \
                 limit {limit}"
            );
        }
        let (bucket, f) = self.window(self.time.now);
        if let Some(limit) = self.s.max_rate {
            let count = |b: Option<u64>| {
                b.and_then(|b| self.admitted.get(&b))
                    .map_or(0.0, |counts| counts[key] as f64)
            };
            let sliding = count(bucket.checked_sub(1)) * (1.0 - f) + count(Some(bucket));
            let with = sliding + units as f64;
            assert!(
                with <= limit as f64 + slack(limit as f64),
                "{what} admitted key {key} at a sliding count of {with} with its {units} \
                 units, limit {limit}"
            );
        }
        self.in_flight[key] += units;
        let keys = self.s.keys;
        self.admitted.entry(bucket).or_insert_with(|| vec![0; keys])[key] += units as i128;
        self.admitted = self.admitted.split_off(&bucket.saturating_sub(2));
    }

    /// A refusal of waiter `w` now: before its deadline only when no waiting could help or
    /// there was no place to wait (`line_full`).
    fn check_refusal(&self, w: &Waiter, rejected: &Rejected, line_full: bool) {
        let now = self.time.now;
        if rejected.reason == Reason::CostOverLimit {
            let over = |limit: Option<u32>| limit.is_some_and(|l| w.units > l);
            assert!(
                over(self.s.max_inflight) || over(self.s.max_rate),
                "{rejected}: a cost of {} is over no limit",
                w.units
            );
            return;
        }
        if now >= w.deadline || line_full {
            return;
        }
        let past_deadline = |retry: Duration| {
            let retry = u64::try_from(retry.as_nanos()).unwrap_or(u64::MAX);
            now.saturating_add(retry) > w.deadline
        };
        let hopeless = match rejected.reason {
            Reason::Rate => rejected.retry_after.map_or(true, past_deadline),
            _ => false,
        };
        assert!(
            hopeless,
            "refused key {} ({rejected}) at {now} ns, before its deadline {} ns, with a place \
             in its line",
            w.key, w.deadline
        );
    }

    /// The window of time `t` and how far into it `t` is.
    fn window(&self, t: u64) -> (u64, f64) {
        self.s.window(self.start, t)
    }

    /// The limiter counts as waiting exactly the waiters in a line.
    fn check_waiting(&self) {
        let in_line = self.waiters.iter().filter(|w| w.parked).count();
        assert_eq!(
            self.limiter.stats().waiting,
            in_line,
            "waiters counted by the limiter against those in a line"
        );
    }

    /// Drops every waiter and every permit: nothing is left waiting or in flight.
    fn finish(mut self) {
        self.waiters.clear();
        self.permits.clear();
        assert_eq!(self.limiter.stats().waiting, 0, "waiters left behind");
        if self.s.max_inflight.is_some() {
            for key in 0..self.s.keys {
                let left = self.limiter.estimate(&(key as u64)).inflight;
                assert_eq!(
                    left,
                    Some(0),
                    "key {key}'s in-flight bound with nothing held"
                );
            }
        }
    }
}

/// Inputs worth keeping by name: a waiter whose deadline never comes, a line that fills, a
/// release that wakes the next waiter, a deadline one nanosecond past a tick.
pub fn seeds() -> Vec<(&'static str, WaitInput)> {
    let config = |limits| LimiterConfig {
        limits,
        interval: 0,
        promotion: 127,
        capacity: 239,
        rows: 1,
        columns: 8,
        keys: 1,
        offset: 0,
    };
    let wait = |tag: u8, raw: u32, cost: u32| WaitOp::Wait {
        key: 0,
        cost,
        max_wait: MaxWait { tag, raw },
        by_value: raw % 2 == 0,
        poll: true,
    };
    let inflight = super::limiter::Limits::Inflight(0);
    vec![
        (
            "forever_then_release",
            WaitInput {
                config: config(inflight),
                per_key: 5,
                total: 15,
                ops: vec![
                    WaitOp::Take { key: 0, n: 0 },
                    wait(5, 0, 1),
                    wait(6, 1, 1),
                    WaitOp::Advance(Advance::Ticks(24)),
                    WaitOp::Release { pick: 0 },
                    WaitOp::PollAll,
                    WaitOp::Release { pick: 0 },
                    WaitOp::PollAll,
                ],
            },
        ),
        (
            "a_full_line",
            WaitInput {
                config: config(inflight),
                per_key: 1,
                total: 15,
                ops: vec![
                    WaitOp::Take { key: 0, n: 0 },
                    wait(9, 5 * TICK_NANOS as u32, 1),
                    wait(9, 5 * TICK_NANOS as u32, 1),
                    WaitOp::Advance(Advance::Ticks(6)),
                    WaitOp::PollAll,
                ],
            },
        ),
        (
            "deadline_a_nanosecond_past_a_tick",
            WaitInput {
                config: config(super::limiter::Limits::Both(0, 0)),
                per_key: 5,
                total: 15,
                ops: vec![
                    WaitOp::Take { key: 0, n: 0 },
                    wait(4, 0, 1),
                    WaitOp::Advance(Advance::Tick),
                    WaitOp::Poll { pick: 0 },
                    WaitOp::Advance(Advance::Tick),
                    WaitOp::Poll { pick: 0 },
                ],
            },
        ),
    ]
}
