//! The periodic work of a clock's users (each `Rate`'s window clearing), scheduled by when it
//! is next due.
//!
//! A clock (the shared ticker, or a [`ManualClock`](super::ManualClock)) owns one
//! [`Scheduler`]. Each registered user is one entry in a timing wheel ([`Wheel`]), keyed by the
//! tick at which it next wants to run; a tick runs only the entries due by then, so its work
//! follows what is due, never the number of users. A `Rate` with one-hour windows costs its
//! ticker nothing for an hour.
//!
//! Registering and cancelling never wait for a tick pass: they push a [`Change`] onto a
//! short-locked list that the ticking thread takes whole at the start of its next pass. The
//! wheel itself is touched only by the thread that holds its lock to tick, so no lock that
//! registration needs is held across the work of a pass.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
use std::sync::Weak;

use super::resolution::TICK_NANOS;
use super::wheel::{Key, Wheel};
use crate::sync::{lock, Mutex, MutexGuard};

/// Periodic work that a clock runs for a registered user.
pub(crate) trait Tick: Send + Sync {
    /// Runs the work due at time `now` (nanoseconds on the clock the user registered with)
    /// and returns when it wants to run next, on the same clock. Clocks call it one at a
    /// time, at or after the time it asked for; a late or duplicate call must be harmless.
    fn tick(&self, now: u64) -> u64;
}

/// Identifies one registration, for cancelling it.
pub(crate) type Registration = u64;

/// A registration, a cancellation or a prompt, waiting for the next pass.
enum Change {
    Add(Registration, Weak<dyn Tick>),
    Remove(Registration),
    /// Run the user at the next tick, whatever it asked for last (it has new work due sooner).
    Prompt(Registration),
}

/// One registered user in the wheel.
struct Job {
    id: Registration,
    user: Weak<dyn Tick>,
}

/// The wheel and the index from registrations to their place in it; owned by whichever thread
/// holds [`Scheduler::lock`].
pub(crate) struct Schedule {
    wheel: Wheel<Job>,
    keys: HashMap<Registration, Key>,
}

/// Both locks of a [`Scheduler`], held (see [`Scheduler::hold`]).
pub(crate) struct Held<'a> {
    _schedule: MutexGuard<'a, Schedule>,
    _changes: MutexGuard<'a, Vec<Change>>,
}

/// Registrations and the schedule of their work, for one clock.
pub(crate) struct Scheduler {
    /// Registrations and cancellations not yet applied to the wheel. Held only to push one
    /// change or to take the whole list.
    changes: Mutex<Vec<Change>>,
    /// Held by a tick pass for its whole duration (tickers take turns), and by the fork
    /// functions so that no pass is half done across a `fork()`.
    schedule: Mutex<Schedule>,
    /// How many times a user has been run, for the tests; Relaxed, a statistic.
    #[cfg(feature = "fault-injection")]
    runs: StdAtomicU64,
}

impl Scheduler {
    /// A scheduler whose wheel starts at the tick containing `now` (nanoseconds).
    pub(crate) fn new(now: u64) -> Self {
        Scheduler {
            changes: Mutex::new(Vec::new()),
            schedule: Mutex::new(Schedule {
                wheel: Wheel::new(now / TICK_NANOS),
                keys: HashMap::new(),
            }),
            #[cfg(feature = "fault-injection")]
            runs: StdAtomicU64::new(0),
        }
    }

    /// Registers `user`; its first run is at the next tick. Never waits for a tick pass.
    pub(crate) fn register(&self, user: Weak<dyn Tick>) -> Registration {
        // Ids are only compared, never ordered against other memory: Relaxed.
        static NEXT_ID: StdAtomicU64 = StdAtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, StdOrdering::Relaxed);
        lock(&self.changes).push(Change::Add(id, user));
        id
    }

    /// Cancels a registration (its user is being dropped). Never waits for a tick pass.
    pub(crate) fn cancel(&self, id: Registration) {
        lock(&self.changes).push(Change::Remove(id));
    }

    /// Has the user of `id` run at the next tick instead of when it last asked: it has work
    /// due sooner (a limiter's new waiter). Never waits for a tick pass either.
    pub(crate) fn prompt(&self, id: Registration) {
        lock(&self.changes).push(Change::Prompt(id));
    }

    /// Takes the schedule, to run a pass (or to hold it across a fork).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Schedule> {
        lock(&self.schedule)
    }

    /// Holds both of the scheduler's locks until the result drops: across a `fork()`, so that
    /// the child inherits neither in the middle of an update. The order (schedule, then
    /// changes) is the order a pass takes them in.
    pub(crate) fn hold(&self) -> Held<'_> {
        let schedule = lock(&self.schedule);
        let changes = lock(&self.changes);
        Held {
            _schedule: schedule,
            _changes: changes,
        }
    }

    /// Runs the work due at time `now` (nanoseconds): applies the pending registrations and
    /// cancellations, then runs every user due by the tick containing `now`.
    pub(crate) fn run(&self, schedule: &mut Schedule, now: u64) {
        self.apply_changes(schedule);
        let Schedule { wheel, keys } = schedule;
        let mut runs = 0u64;
        wheel.advance(now / TICK_NANOS, |_, job, _| match job.user.upgrade() {
            Some(user) => {
                runs += 1;
                // A user that panics is dropped from the schedule (its windows then only
                // over-count), and the others keep their place; `Tick` users are written not
                // to panic, so this costs nothing on the usual path.
                match catch_unwind(AssertUnwindSafe(|| user.tick(now))) {
                    Ok(next) => Some(next.div_ceil(TICK_NANOS)),
                    Err(_) => {
                        keys.remove(&job.id);
                        None
                    }
                }
            }
            None => {
                // Dropped, and its cancellation is on its way (or applied already).
                keys.remove(&job.id);
                None
            }
        });
        #[cfg(feature = "fault-injection")]
        self.runs.fetch_add(runs, StdOrdering::Relaxed);
        let _ = runs; // counted only for the tests
    }

    /// How many times a user has been run so far.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn runs(&self) -> u64 {
        self.runs.load(StdOrdering::Relaxed)
    }

    /// The time (nanoseconds, a tick boundary) of the next event in the wheel, once the
    /// pending changes are applied.
    pub(crate) fn next_event(&self, schedule: &mut Schedule) -> Option<u64> {
        self.apply_changes(schedule);
        schedule
            .wheel
            .next_event()
            .map(|tick| tick.saturating_mul(TICK_NANOS))
    }

    /// Applies the pending registrations and cancellations, in the order they were made.
    pub(crate) fn apply_changes(&self, schedule: &mut Schedule) {
        let changes = std::mem::take(&mut *lock(&self.changes));
        for change in changes {
            match change {
                Change::Add(id, user) => {
                    let key = schedule.wheel.insert(Job { id, user }, 0);
                    schedule.keys.insert(id, key);
                }
                Change::Remove(id) => {
                    if let Some(key) = schedule.keys.remove(&id) {
                        schedule.wheel.remove(key);
                    }
                }
                Change::Prompt(id) => {
                    let job = schedule
                        .keys
                        .get(&id)
                        .and_then(|&k| schedule.wheel.remove(k));
                    if let Some(job) = job {
                        let key = schedule.wheel.insert(job, 0);
                        schedule.keys.insert(id, key);
                    }
                }
            }
        }
    }
}

impl Schedule {
    /// How many users are scheduled.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn len(&self) -> usize {
        self.wheel.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;

    /// A user that counts its runs and asks to run again every `every` nanoseconds.
    struct Every {
        every: u64,
        runs: AtomicUsize,
    }

    impl Tick for Every {
        fn tick(&self, now: u64) -> u64 {
            self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            now + self.every
        }
    }

    fn user(every: u64) -> Arc<Every> {
        Arc::new(Every {
            every,
            runs: AtomicUsize::new(0),
        })
    }

    fn register(scheduler: &Scheduler, user: &Arc<Every>) -> Registration {
        let weak: Weak<dyn Tick> = Arc::downgrade(user) as Weak<dyn Tick>;
        scheduler.register(weak)
    }

    /// Runs `scheduler` tick by tick from `from` to `to` (nanoseconds), as the shared ticker
    /// does.
    fn tick_through(scheduler: &Scheduler, from: u64, to: u64) {
        let mut schedule = scheduler.lock();
        let mut now = from;
        while now <= to {
            scheduler.run(&mut schedule, now);
            now += TICK_NANOS;
        }
    }

    #[test]
    fn a_tick_runs_only_the_users_that_are_due() {
        let scheduler = Scheduler::new(0);
        let hourly: Vec<_> = (0..10_000).map(|_| user(3_600 * 1_000_000_000)).collect();
        let _hourly: Vec<_> = hourly.iter().map(|u| register(&scheduler, u)).collect();
        let busy = user(TICK_NANOS);
        register(&scheduler, &busy);
        // Ten seconds of ticks: each hourly user runs once (its first run, at the tick after
        // it registered), the busy one at every tick.
        tick_through(&scheduler, 0, 10_000_000_000);
        for u in &hourly {
            assert_eq!(u.runs.load(std::sync::atomic::Ordering::Relaxed), 1);
        }
        assert_eq!(busy.runs.load(std::sync::atomic::Ordering::Relaxed), 1_000);
    }

    #[test]
    fn cancelled_and_dropped_users_leave_the_schedule() {
        let scheduler = Scheduler::new(0);
        let users: Vec<_> = (0..1_000).map(|_| user(1_000_000_000)).collect();
        let ids: Vec<_> = users.iter().map(|u| register(&scheduler, u)).collect();
        tick_through(&scheduler, 0, 0);
        assert_eq!(scheduler.lock().len(), 1_000);
        // Half are cancelled (as a dropped Rate does)...
        for &id in &ids[..500] {
            scheduler.cancel(id);
        }
        tick_through(&scheduler, TICK_NANOS, TICK_NANOS);
        assert_eq!(scheduler.lock().len(), 500);
        assert_eq!(scheduler.lock().keys.len(), 500);
        // ... and the rest are dropped without a cancellation: forgotten when next due.
        let runs_before: usize = users[..500]
            .iter()
            .map(|u| u.runs.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        let kept_runs = Arc::clone(&users[0]);
        drop(users);
        tick_through(&scheduler, 2 * TICK_NANOS, 3_000_000_000);
        assert_eq!(scheduler.lock().len(), 0);
        assert_eq!(scheduler.lock().keys.len(), 0);
        // A cancelled user never ran again.
        assert_eq!(
            kept_runs.runs.load(std::sync::atomic::Ordering::Relaxed),
            runs_before / 500
        );
    }

    /// A user that panics at every run.
    struct Panics;

    impl Tick for Panics {
        fn tick(&self, _now: u64) -> u64 {
            panic!("injected by a schedule test");
        }
    }

    #[test]
    fn a_user_that_panics_is_dropped_and_the_others_keep_running() {
        let scheduler = Scheduler::new(0);
        let before = user(TICK_NANOS);
        register(&scheduler, &before);
        let panics: Arc<dyn Tick> = Arc::new(Panics);
        let id = scheduler.register(Arc::downgrade(&panics));
        let after = user(TICK_NANOS);
        register(&scheduler, &after);
        tick_through(&scheduler, 0, 100 * TICK_NANOS);
        assert_eq!(scheduler.lock().len(), 2);
        assert!(!scheduler.lock().keys.contains_key(&id));
        for u in [&before, &after] {
            assert_eq!(u.runs.load(std::sync::atomic::Ordering::Relaxed), 100);
        }
        // Its cancellation, when it comes, touches nothing else.
        scheduler.cancel(id);
        tick_through(&scheduler, 101 * TICK_NANOS, 101 * TICK_NANOS);
        assert_eq!(scheduler.lock().len(), 2);
    }

    #[test]
    fn registering_does_not_wait_for_a_pass_in_progress() {
        let scheduler = Scheduler::new(0);
        let pass = scheduler.lock(); // a pass in progress
        let u = user(TICK_NANOS);
        let id = register(&scheduler, &u); // would deadlock if it needed the schedule's lock
        scheduler.cancel(id);
        drop(pass);
        let mut schedule = scheduler.lock();
        scheduler.apply_changes(&mut schedule);
        assert_eq!(schedule.len(), 0);
    }

    #[test]
    fn a_prompted_user_runs_at_the_next_tick_and_then_as_it_asks() {
        let scheduler = Scheduler::new(0);
        let hourly = user(3_600 * 1_000_000_000);
        let id = register(&scheduler, &hourly);
        tick_through(&scheduler, 0, 10 * TICK_NANOS);
        assert_eq!(hourly.runs.load(std::sync::atomic::Ordering::Relaxed), 1);
        scheduler.prompt(id);
        tick_through(&scheduler, 11 * TICK_NANOS, 20 * TICK_NANOS);
        assert_eq!(hourly.runs.load(std::sync::atomic::Ordering::Relaxed), 2);
        // A prompt for a cancelled registration does nothing.
        scheduler.cancel(id);
        scheduler.prompt(id);
        tick_through(&scheduler, 21 * TICK_NANOS, 30 * TICK_NANOS);
        assert_eq!(scheduler.lock().len(), 0);
    }
}
