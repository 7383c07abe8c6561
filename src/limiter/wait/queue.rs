//! The waiters of one limiter as plain data, used under the lock of
//! [`Waiters`](super::Waiters): a line (FIFO) of waiters per key, and a timing wheel of their
//! deadlines and retry times.
//!
//! Everything is allocated up front for the most waiters the limiter allows: the slots, the
//! free list, the wheel's nodes and the lines' map never grow past their first capacity.
//! Parking, cancelling and firing a timer are O(1); handing the turn to a key's next waiter
//! walks at most that key's line (capped per key).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::task::Waker;

use crate::clock::wheel::{Key as TimerKey, Wheel};
use crate::clock::TICK_NANOS;

/// "No slot": the end of a line.
const NIL: u32 = u32::MAX;

/// What a parked waiter is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Waiting for a permit of its key to come back, its retry time, or its deadline.
    Waiting,
    /// Woken to try again: a permit came back, its retry time came, or the waiter before it
    /// left. Releases skip it (it already has its turn).
    Notified,
    /// Its deadline passed: it makes a last attempt and leaves.
    TimedOut,
}

/// A waiter just parked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Parked {
    pub(crate) id: WaiterId,
    /// It heads its line and has the turn: it tries once more at once.
    pub(crate) has_turn: bool,
    /// The tick its timer is due at.
    pub(crate) due: u64,
}

/// Identifies one parked waiter; stale once it has left (its slot may be reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WaiterId {
    index: u32,
    generation: u64,
}

/// One parked waiter.
struct Slot {
    /// Which waiter holds the slot (0: free).
    generation: u64,
    hash: u64,
    state: State,
    waker: Option<Waker>,
    /// The time (nanoseconds) from which it gives up. Kept to the nanosecond, not rounded up
    /// to a tick: its timer is at the deadline's tick and fires it on the first pass at or
    /// after the deadline, so it is never early and at most one pass late.
    deadline: u64,
    /// The tick at which its last rate rejection said one more request fits.
    retry: Option<u64>,
    /// Its entry in the wheel: at `deadline`'s tick, or at `retry` while it heads its line.
    timer: Option<TimerKey>,
    /// It was given the turn and has not used it yet (whatever happened since: a waiter
    /// woken for a permit can time out before it is polled).
    turn: bool,
    /// Neighbours in its key's line.
    prev: u32,
    next: u32,
}

/// The waiters of one key, oldest first.
#[derive(Clone, Copy)]
struct Line {
    head: u32,
    tail: u32,
    len: u32,
    /// Permits that came back while every waiter of the line had its turn already: the next
    /// one whose attempt fails tries again instead of waiting (no wake-up is lost).
    credits: u32,
}

/// Lines are keyed by the limiter's hash of the key, already well mixed (and randomly
/// seeded): hashing it again would only cost time (`benches/wait.rs` measured SipHash in the
/// profile of parking).
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type Lines = HashMap<u64, Line, BuildHasherDefault<Prehashed>>;

/// The waiters of one limiter.
pub(crate) struct Queue {
    slots: Vec<Slot>,
    free: Vec<u32>,
    lines: Lines,
    wheel: Wheel<u32>,
    max_per_key: u32,
    next_generation: u64,
}

impl Queue {
    /// Room for `max_total` waiters, at most `max_per_key` of one key; the wheel starts at
    /// tick `now`.
    pub(crate) fn new(max_total: usize, max_per_key: usize, now: u64) -> Self {
        let max_total = max_total.min(NIL as usize);
        Queue {
            slots: (0..max_total)
                .map(|_| Slot {
                    generation: 0,
                    hash: 0,
                    state: State::Waiting,
                    waker: None,
                    deadline: 0,
                    retry: None,
                    timer: None,
                    turn: false,
                    prev: NIL,
                    next: NIL,
                })
                .collect(),
            free: (0..max_total as u32).rev().collect(),
            lines: Lines::with_capacity_and_hasher(max_total, Default::default()),
            wheel: Wheel::with_capacity(now, max_total),
            max_per_key: u32::try_from(max_per_key).unwrap_or(u32::MAX),
            next_generation: 0,
        }
    }

    /// Waiters parked now.
    pub(crate) fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Whether waiters of `hash` are parked.
    #[cfg(test)]
    fn has_line(&self, hash: u64) -> bool {
        self.lines.contains_key(&hash)
    }

    fn slot(&self, id: WaiterId) -> Option<&Slot> {
        self.slots
            .get(id.index as usize)
            .filter(|s| s.generation == id.generation)
    }

    fn slot_mut(&mut self, id: WaiterId) -> Option<&mut Slot> {
        self.slots
            .get_mut(id.index as usize)
            .filter(|s| s.generation == id.generation)
    }

    /// The state of a parked waiter (`None` once it has left).
    pub(crate) fn state(&self, id: WaiterId) -> Option<State> {
        self.slot(id).map(|s| s.state)
    }

    /// Parks a waiter for `hash` at the end of its key's line, until time `deadline`
    /// (nanoseconds).
    /// `None` when the limiter holds as many waiters as it allows, in all or for this key.
    ///
    /// A waiter that heads its line starts with the turn ([`State::Notified`]): it must try
    /// once more now that it is counted (see the module `wait` on lost wake-ups). Returns the
    /// tick its timer is due at.
    pub(crate) fn park(&mut self, hash: u64, deadline: u64, waker: &Waker) -> Option<Parked> {
        let max_per_key = self.max_per_key;
        let Queue {
            slots,
            free,
            lines,
            next_generation,
            ..
        } = self;
        // One look-up of the key's line, to join or to start it.
        let line = lines.entry(hash);
        let tail = match &line {
            Entry::Occupied(l) if l.get().len >= max_per_key => return None,
            Entry::Occupied(l) => Some(l.get().tail),
            Entry::Vacant(_) if max_per_key == 0 => return None,
            Entry::Vacant(_) => None,
        };
        let index = free.pop()?;
        *next_generation += 1;
        let generation = *next_generation;
        let heads = tail.is_none();
        {
            let slot = &mut slots[index as usize];
            slot.generation = generation;
            slot.hash = hash;
            slot.state = if heads {
                State::Notified
            } else {
                State::Waiting
            };
            slot.waker = Some(waker.clone());
            slot.deadline = deadline;
            slot.retry = None;
            slot.timer = None;
            slot.turn = heads;
            slot.prev = tail.unwrap_or(NIL);
            slot.next = NIL;
        }
        match line {
            Entry::Occupied(mut l) => {
                let l = l.get_mut();
                slots[l.tail as usize].next = index;
                l.tail = index;
                l.len += 1;
            }
            Entry::Vacant(v) => {
                v.insert(Line {
                    head: index,
                    tail: index,
                    len: 1,
                    credits: 0,
                });
            }
        }
        let due = self.schedule(index, heads);
        Some(Parked {
            id: WaiterId { index, generation },
            has_turn: heads,
            due,
        })
    }

    /// (Re)places the timer of slot `index`: its retry time while it heads its line, else
    /// its deadline's tick. Returns the tick it is due at.
    fn schedule(&mut self, index: u32, heads: bool) -> u64 {
        let slot = &self.slots[index as usize];
        let deadline = slot.deadline / TICK_NANOS;
        let due = match slot.retry {
            Some(retry) if heads => retry.min(deadline),
            _ => deadline,
        };
        let slot = &mut self.slots[index as usize];
        // A head refused again in flight waits for the same deadline: its timer stays.
        if slot
            .timer
            .is_some_and(|timer| self.wheel.due(timer) == Some(due))
        {
            return due;
        }
        if let Some(old) = slot.timer.take() {
            self.wheel.remove(old);
        }
        slot.timer = Some(self.wheel.insert(index, due));
        due
    }

    /// The tick of the earliest timer, if any.
    pub(crate) fn next_due(&self) -> Option<u64> {
        self.wheel.next_event()
    }

    /// A waiter polled again while still waiting: keeps the waker it was polled with.
    pub(crate) fn set_waker(&mut self, id: WaiterId, waker: &Waker) {
        if let Some(slot) = self.slot_mut(id) {
            if !slot.waker.as_ref().is_some_and(|w| w.will_wake(waker)) {
                slot.waker = Some(waker.clone());
            }
        }
    }

    /// The attempt of a waiter with the turn failed: it waits again, to retry at tick `retry`
    /// (a rate rejection's) if it heads its line, and the tick its timer is due at is
    /// returned. `None` instead, leaving it the turn, when a permit of its key came back while
    /// it was trying (a credit): it must try again.
    pub(crate) fn wait_again(
        &mut self,
        id: WaiterId,
        retry: Option<u64>,
        waker: &Waker,
    ) -> Option<u64> {
        let hash = self.slot(id)?.hash;
        let mut heads = false;
        if let Some(line) = self.lines.get_mut(&hash) {
            if line.credits > 0 {
                line.credits -= 1;
                return None;
            }
            heads = line.head == id.index;
        }
        let index = id.index;
        let slot = &mut self.slots[index as usize];
        slot.state = State::Waiting;
        slot.turn = false;
        slot.retry = retry;
        slot.waker = Some(waker.clone());
        Some(self.schedule(index, heads))
    }

    /// A permit of `hash` came back with `units` in-flight units (its cost, at least 1): gives
    /// the turn to the first waiter of its line that is waiting, and returns its waker; the
    /// units it does not wake a waiter for are credits of the line, each passed on when a
    /// waiter leaves (a permit of 4 units can admit 4 waiters of 1) or spent by a failed
    /// attempt trying again.
    pub(crate) fn released(&mut self, hash: u64, units: u32) -> Option<Waker> {
        let line = *self.lines.get(&hash)?;
        let woken = self.notify_first_waiting(line.head);
        let credits = units.max(1) - u32::from(woken.is_some());
        if let Some(line) = self.lines.get_mut(&hash) {
            line.credits = line.credits.saturating_add(credits).min(line.len);
        }
        woken
    }

    /// Gives the turn to the first waiting waiter from slot `index` on, and returns its waker.
    fn notify_first_waiting(&mut self, mut index: u32) -> Option<Waker> {
        while index != NIL {
            let slot = &mut self.slots[index as usize];
            if slot.state == State::Waiting {
                slot.state = State::Notified;
                slot.turn = true;
                return slot.waker.take();
            }
            index = slot.next;
        }
        None
    }

    /// Removes a waiter: admitted, given up, or cancelled. The turn passes to the first
    /// waiting waiter of its line, whose waker is returned, when the one leaving
    /// - had the turn and did not use it (`admitted` false): a cancelled waiter never
    ///   swallows a permit that came back, even one that timed out before it was polled;
    /// - headed the line, was admitted, and `pass_on` is set: there may be room for more (a
    ///   rate window);
    /// - leaves credits behind: permits that came back while every waiter had its turn.
    ///
    /// A head that leaves without a permit and without the turn wakes no one, so cancelling
    /// a whole line wakes no one (see the module `wait` on why the waiters behind it lose no
    /// permit); but the new head inherits the rate retry time (`retry`, else the one the old
    /// head was waiting for), so that a rate-limited line never waits for its deadline.
    pub(crate) fn remove(
        &mut self,
        id: WaiterId,
        admitted: bool,
        pass_on: bool,
        retry: Option<u64>,
    ) -> Option<Waker> {
        let slot = self.slot_mut(id)?;
        let (hash, prev, next, had_turn) = (slot.hash, slot.prev, slot.next, slot.turn);
        let retry = retry.or(slot.retry);
        slot.generation = 0;
        slot.waker = None;
        slot.turn = false;
        let timer = slot.timer.take();
        if let Some(timer) = timer {
            self.wheel.remove(timer);
        }
        self.free.push(id.index);
        let Queue { slots, lines, .. } = self;
        // One look-up of the key's line, to leave it, or to end it with its last waiter.
        let Entry::Occupied(mut entry) = lines.entry(hash) else {
            return None;
        };
        let line = entry.get_mut();
        let was_head = line.head == id.index;
        if prev != NIL {
            slots[prev as usize].next = next;
        } else {
            line.head = next;
        }
        if next != NIL {
            slots[next as usize].prev = prev;
        } else {
            line.tail = prev;
        }
        line.len -= 1;
        if line.len == 0 {
            entry.remove();
            return None;
        }
        let pass = (had_turn && !admitted) || (was_head && admitted && pass_on);
        let credited = !pass && line.credits > 0;
        if credited {
            line.credits -= 1;
        }
        line.credits = line.credits.min(line.len);
        let head = line.head;
        if pass || credited {
            return self.notify_first_waiting(head);
        }
        if was_head && !admitted {
            let slot = &mut self.slots[head as usize];
            if slot.state == State::Waiting && retry.is_some() {
                slot.retry = slot.retry.or(retry);
                self.schedule(head, true);
            }
        }
        None
    }

    /// Fires the timers due by time `now` (nanoseconds): a waiter past its deadline is marked
    /// timed out, one at its retry time is given the turn; their wakers are pushed onto
    /// `woken`. A deadline later in the tick of `now` is left for the next tick.
    pub(crate) fn fire(&mut self, now: u64, woken: &mut Vec<Waker>) {
        let Queue { wheel, slots, .. } = self;
        let tick = now / TICK_NANOS;
        wheel.advance(tick, |_, &mut index, _| {
            let slot = &mut slots[index as usize];
            if slot.deadline <= now {
                slot.state = State::TimedOut;
                slot.timer = None;
                woken.extend(slot.waker.take());
                return None;
            }
            // A waiter behind the head keeps its retry time for when it heads the line.
            let heads = slot.prev == NIL;
            if heads && slot.retry.is_some_and(|retry| retry <= tick) {
                // Its retry time: from now on only its deadline.
                if slot.state == State::Waiting {
                    slot.state = State::Notified;
                    slot.turn = true;
                    woken.extend(slot.waker.take());
                }
                slot.retry = None;
            }
            // Its deadline's tick, or the next one if the deadline is later in this tick.
            Some((slot.deadline / TICK_NANOS).max(tick + 1))
        });
    }

    /// Bytes allocated up front.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.free.capacity() * std::mem::size_of::<u32>()
            + self.lines.capacity() * (std::mem::size_of::<(u64, Line)>() + 1)
            + self.slots.capacity() * 48 // the wheel's nodes
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A deadline on tick 100.
    const DEADLINE: u64 = 100 * TICK_NANOS;

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&count), Waker::from(count))
    }

    #[test]
    fn a_release_gives_the_turn_to_the_oldest_waiting_waiter_only() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let ids: Vec<_> = (0..4)
            .map(|_| q.park(7, DEADLINE, &w).unwrap().id)
            .collect();
        // The head has the turn from the start (it tries once more after parking).
        assert_eq!(q.state(ids[0]), Some(State::Notified));
        assert!(q.released(7, 1).is_some());
        assert_eq!(q.state(ids[1]), Some(State::Notified));
        assert_eq!(q.state(ids[2]), Some(State::Waiting));
        // The next release skips the ones that have their turn already.
        assert!(q.released(7, 1).is_some());
        assert_eq!(q.state(ids[2]), Some(State::Notified));
        assert_eq!(q.state(ids[3]), Some(State::Waiting));
        assert!(q.released(8, 1).is_none(), "another key has no line");
    }

    #[test]
    fn a_cancelled_waiter_with_the_turn_passes_it_on() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let first = q.park(7, DEADLINE, &w).unwrap();
        let second = q.park(7, DEADLINE, &w).unwrap().id;
        assert!(first.has_turn);
        let first = first.id;
        assert!(
            q.remove(first, false, false, None).is_some(),
            "the turn goes to the next"
        );
        assert_eq!(q.state(second), Some(State::Notified));
        assert_eq!(q.state(first), None);
        assert!(q.remove(second, false, false, None).is_none());
        assert_eq!(q.len(), 0);
        assert!(!q.has_line(7));
    }

    #[test]
    fn an_admitted_head_passes_the_turn_on_only_when_asked() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let head = q.park(7, DEADLINE, &w).unwrap().id;
        let second = q.park(7, DEADLINE, &w).unwrap().id;
        let third = q.park(7, DEADLINE, &w).unwrap().id;
        assert!(
            q.remove(head, true, false, None).is_none(),
            "in flight: one permit, one waiter"
        );
        assert_eq!(q.state(second), Some(State::Waiting));
        assert!(
            q.remove(second, true, true, None).is_some(),
            "a rate window may have more room"
        );
        assert_eq!(q.state(third), Some(State::Notified));
    }

    #[test]
    fn cancelling_a_line_of_waiters_without_the_turn_wakes_no_one() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let ids: Vec<_> = (0..5)
            .map(|_| q.park(7, DEADLINE, &w).unwrap().id)
            .collect();
        assert_eq!(q.wait_again(ids[0], None, &w), Some(100)); // the head waits too now
        for &id in &ids {
            assert!(q.remove(id, false, false, None).is_none());
        }
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn credits_left_when_an_admitted_waiter_leaves_wake_the_next() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let head = q.park(7, DEADLINE, &w).unwrap().id; // has the turn, trying
        assert!(q.released(7, 1).is_none()); // a second permit back meanwhile: a credit
        let second = q.park(7, DEADLINE, &w).unwrap().id;
        assert!(
            q.remove(head, true, false, None).is_some(),
            "the credit is not left dormant"
        );
        assert_eq!(q.state(second), Some(State::Notified));
    }

    #[test]
    fn a_release_while_every_waiter_has_its_turn_is_credited_not_lost() {
        let mut q = Queue::new(16, 16, 0);
        let (_, w) = waker();
        let id = q.park(7, DEADLINE, &w).unwrap().id; // has the turn
        assert!(q.released(7, 1).is_none()); // nobody waiting: a credit
        assert_eq!(q.wait_again(id, None, &w), None, "tries again");
        assert_eq!(q.wait_again(id, None, &w), Some(100), "the credit is spent");
        assert_eq!(q.state(id), Some(State::Waiting));
    }

    #[test]
    fn caps_per_key_and_in_all_refuse_at_once() {
        let mut q = Queue::new(4, 2, 0);
        let (_, w) = waker();
        assert!(q.park(1, DEADLINE, &w).is_some());
        assert!(q.park(1, DEADLINE, &w).is_some());
        assert!(q.park(1, DEADLINE, &w).is_none(), "per key");
        assert!(q.park(2, DEADLINE, &w).is_some());
        assert!(q.park(3, DEADLINE, &w).is_some());
        assert!(q.park(4, DEADLINE, &w).is_none(), "in all");
        assert!(Queue::new(4, 0, 0).park(1, DEADLINE, &w).is_none());
    }

    #[test]
    fn only_the_head_is_woken_at_its_retry_time_and_everyone_at_the_deadline() {
        let mut q = Queue::new(16, 16, 0);
        let (count, w) = waker();
        let head = q.park(7, 50 * TICK_NANOS, &w).unwrap().id;
        let second = q.park(7, 50 * TICK_NANOS, &w).unwrap().id;
        // A stray release gives the second a turn too; both fail a rate limit that has room
        // again at tick 10.
        assert!(q.released(7, 1).is_some());
        assert_eq!(q.wait_again(head, Some(10), &w), Some(10));
        assert_eq!(
            q.wait_again(second, Some(10), &w),
            Some(50),
            "not the head: its deadline"
        );
        let mut woken = Vec::new();
        q.fire(10 * TICK_NANOS - 1, &mut woken);
        assert!(woken.is_empty());
        q.fire(10 * TICK_NANOS, &mut woken);
        assert_eq!(woken.len(), 1, "the head only: no storm");
        assert_eq!(q.state(head), Some(State::Notified));
        assert_eq!(q.state(second), Some(State::Waiting));
        woken.drain(..).for_each(Waker::wake);
        q.fire(50 * TICK_NANOS - 1, &mut woken);
        assert!(woken.is_empty());
        q.fire(50 * TICK_NANOS, &mut woken);
        assert_eq!(q.state(head), Some(State::TimedOut));
        assert_eq!(q.state(second), Some(State::TimedOut));
        assert_eq!(woken.len(), 1, "the head's waker was taken at its retry");
        woken.drain(..).for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_deadline_within_a_tick_fires_on_the_first_pass_at_or_after_it() {
        let mut q = Queue::new(16, 16, 0);
        let (count, w) = waker();
        let deadline = 25 * TICK_NANOS + TICK_NANOS / 2;
        let head = q.park(7, deadline, &w).unwrap().id;
        let second = q.park(7, deadline, &w).unwrap().id;
        // The second (given a turn by a stray release) keeps a retry time of tick 20 for when
        // it heads the line: its deadline's tick must not take it for its retry.
        assert!(q.released(7, 1).is_some());
        assert_eq!(q.wait_again(head, Some(20), &w), Some(20));
        assert_eq!(q.wait_again(second, Some(20), &w), Some(25));
        let mut woken = Vec::new();
        q.fire(20 * TICK_NANOS, &mut woken);
        assert_eq!(woken.len(), 1, "the head at its retry time");
        assert_eq!(q.wait_again(head, None, &w), Some(25));
        woken.clear();
        // The pass in the deadline's tick but before the deadline: nobody gives up, and the
        // waiter behind the head is not given a turn.
        q.fire(deadline - 1, &mut woken);
        assert!(woken.is_empty(), "early");
        assert_eq!(q.state(head), Some(State::Waiting));
        assert_eq!(q.state(second), Some(State::Waiting));
        assert_eq!(q.next_due(), Some(26), "the next tick's pass");
        q.fire(26 * TICK_NANOS, &mut woken);
        assert_eq!(woken.len(), 2);
        assert_eq!(q.state(head), Some(State::TimedOut));
        assert_eq!(q.state(second), Some(State::TimedOut));
        woken.drain(..).for_each(Waker::wake);
        assert_eq!(count.0.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn slots_are_reused_and_stale_ids_are_ignored() {
        let mut q = Queue::new(1, 1, 0);
        let (_, w) = waker();
        let old = q.park(7, DEADLINE, &w).unwrap().id;
        q.remove(old, false, false, None);
        let new = q.park(9, DEADLINE, &w).unwrap().id;
        assert_eq!(q.state(old), None);
        assert!(q.remove(old, false, false, None).is_none());
        assert_eq!(q.state(new), Some(State::Notified));
        assert_eq!(q.len(), 1);
    }
}
