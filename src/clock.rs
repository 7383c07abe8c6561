//! Coarse time for the request path, and the one shared ticker thread that keeps it.
//!
//! # The shared ticker
//!
//! One background thread per process, named `floodgate-ticker`, started lazily by the first
//! [`Rate`](crate::Rate) (or anything built on it). Every [`TICK`] (10 ms), on absolute
//! deadlines so a late tick does not push the later ones back, it
//!
//! 1. publishes the time (nanoseconds since a process-wide epoch) in one atomic, which the
//!    request path reads with a single relaxed load instead of calling `Instant::now()`;
//! 2. does the periodic work of every live `Rate`: clearing the window slots that will be used
//!    next, well before they are used. Rates register a `Weak` reference, so a dropped `Rate`
//!    is freed and simply stops being ticked.
//!
//! # Self-healing
//!
//! - A ticker that panics marks the coarse time as unknown on its way out; the next request
//!   sees that and starts a replacement.
//! - A ticker that is alive but silent (stalled, or absent in a forked child) is noticed by a
//!   liveness check that each thread makes once every 1,024 reads of the coarse time: when the
//!   coarse time is more than one second behind the OS clock, a replacement is started (at most
//!   one per second). The stalled ticker exits when it wakes up, because it is no longer the
//!   current generation.
//! - Window preparation is idempotent per window (each slot records the window it was cleared
//!   for, and tickers take turns under one lock), so a late, duplicate or restarted ticker never
//!   clears a window twice, and it never clears the current or previous window.
//!
//! # Fork
//!
//! A forked child has no ticker thread. Call [`prepare_fork`] just before `fork()` (it waits
//! for a tick in progress and holds the ticker's lock, so no lock is held mid-update across the
//! fork), then [`after_fork_in_parent`] in the parent and [`after_fork_in_child`] in the child;
//! the child then gets its own ticker at once. Without these calls the child's liveness check
//! still starts a ticker after about a second of use, unless the fork landed while the ticker
//! held its lock.
//!
//! # Testing
//!
//! [`ManualClock`] is a clock that tests advance by hand; its ticks run synchronously inside
//! [`ManualClock::advance`], so window tests are deterministic and never sleep.

use std::sync::atomic::{AtomicBool, AtomicU64 as StdAtomicU64, Ordering as StdOrdering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::sync::{lock, AtomicU64, Mutex, Ordering};

/// The period of the shared ticker: the resolution of the coarse clock.
pub const TICK: Duration = Duration::from_millis(10);
pub(crate) const TICK_NANOS: u64 = 10_000_000;

/// A ticker silent for this long is presumed dead or stalled.
const STALE_AFTER_NANOS: u64 = 1_000_000_000;
/// Reads of the coarse time between two liveness checks on one thread.
const CHECK_EVERY: u32 = 1024;

/// Periodic work a ticker does for a registered user (a `Rate`).
pub(crate) trait Tick: Send + Sync {
    /// Runs the periodic work for time `now` (nanoseconds on the registering clock).
    /// Tickers call this one at a time (under their registry lock), with non-decreasing
    /// `now` per ticker; a stale ticker may still call it with an older `now`.
    fn tick(&self, now: u64);
}

type Registry = Vec<Weak<dyn Tick>>;

/// The coarse time in nanoseconds since [`epoch`], or 0 while no ticker is known to run
/// (before the first start, and after a ticker panicked). Written by tickers with
/// `fetch_max` so a late duplicate never moves it backwards; read with `Relaxed` because it
/// publishes no other data (a `Rate` synchronises with the ticker's slot clearing through its
/// own per-slot tags). Cache-padded: it is written every tick and read by every request, so
/// it must not share a line with anything written more often.
static COARSE: CachePadded<StdAtomicU64> = CachePadded::new(StdAtomicU64::new(0));
/// The generation of the ticker that should run; a ticker whose generation is no longer
/// current exits at its next wake-up. 0: never started.
static GENERATION: StdAtomicU64 = StdAtomicU64::new(0);
/// When (precise nanoseconds) a ticker was last started; limits restarts to one per second.
static LAST_START: StdAtomicU64 = StdAtomicU64::new(0);
/// The users the shared ticker ticks. Tickers hold it while ticking, so ticks never overlap.
static REGISTRY: std::sync::Mutex<Registry> = std::sync::Mutex::new(Vec::new());

/// Test hooks: make the running ticker panic, or stall for a while, at its next tick.
static PANIC_NEXT_TICK: AtomicBool = AtomicBool::new(false);
static STALL_NEXT_TICK_MS: StdAtomicU64 = StdAtomicU64::new(0);

std::thread_local! {
    /// Coarse-time reads on this thread since its last liveness check.
    static READS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The process-wide origin of the shared clock's nanoseconds.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`] from the OS clock. Never 0, so 0 can mean "unknown".
fn precise_nanos() -> u64 {
    let nanos = epoch().elapsed().as_nanos();
    u64::try_from(nanos).unwrap_or(u64::MAX).max(1)
}

/// The coarse time: one relaxed load, plus a liveness check once every 1,024 calls per thread.
#[inline]
fn coarse_nanos() -> u64 {
    let coarse = COARSE.load(StdOrdering::Relaxed);
    if coarse == 0 {
        return start_ticker_now();
    }
    let due = READS.with(|reads| {
        let n = reads.get().wrapping_add(1);
        reads.set(n);
        n % CHECK_EVERY == 0
    });
    if due {
        check_liveness(coarse);
    }
    coarse
}

/// Compares the coarse time with the OS clock and replaces a silent ticker.
#[cold]
fn check_liveness(coarse: u64) {
    let now = precise_nanos();
    if now.saturating_sub(coarse) > STALE_AFTER_NANOS {
        start_ticker(now);
    }
}

/// Starts a ticker because none is known to run, and returns the precise time meanwhile.
#[cold]
fn start_ticker_now() -> u64 {
    let now = precise_nanos();
    start_ticker(now);
    now
}

/// Starts a ticker of a new generation unless one was started less than a second ago
/// (a first start always goes ahead). The old generation, if alive, exits when it wakes.
fn start_ticker(now: u64) {
    let last = LAST_START.load(StdOrdering::Relaxed);
    let first = GENERATION.load(StdOrdering::Relaxed) == 0;
    if !first && last != 0 && now.saturating_sub(last) < STALE_AFTER_NANOS {
        return;
    }
    // One thread wins the right to start this generation.
    if LAST_START
        .compare_exchange(last, now, StdOrdering::Relaxed, StdOrdering::Relaxed)
        .is_err()
    {
        return;
    }
    // Publish the time at once so the request path has a fresh value before the first tick
    // (read again: requests that saw no coarse time meanwhile used the precise clock).
    COARSE.fetch_max(now.max(precise_nanos()), StdOrdering::Relaxed);
    let generation = GENERATION.fetch_add(1, StdOrdering::AcqRel) + 1;
    let spawned = std::thread::Builder::new()
        .name("floodgate-ticker".into())
        .spawn(move || run_ticker(generation));
    if spawned.is_err() {
        // No thread could be had (resource limits): let the next liveness check try again.
        LAST_START.store(0, StdOrdering::Relaxed);
    }
}

/// The ticker thread's loop.
fn run_ticker(generation: u64) {
    /// Marks the coarse time unknown if this ticker unwinds, so requests start another.
    struct DeathNotice(u64);
    impl Drop for DeathNotice {
        fn drop(&mut self) {
            if std::thread::panicking() && GENERATION.load(StdOrdering::Acquire) == self.0 {
                COARSE.store(0, StdOrdering::Relaxed);
            }
        }
    }
    let _notice = DeathNotice(generation);
    let mut deadline = Instant::now();
    loop {
        deadline += TICK;
        let now = Instant::now();
        match deadline.checked_duration_since(now) {
            Some(wait) => std::thread::sleep(wait),
            // Far behind (the machine was suspended, or we were starved): skip the missed
            // ticks instead of running them in a burst.
            None if now.duration_since(deadline) > 5 * TICK => deadline = now,
            None => {}
        }
        if PANIC_NEXT_TICK.swap(false, StdOrdering::Relaxed) {
            panic!("floodgate-ticker: panic injected by clock::testing::panic_ticker");
        }
        let stall = STALL_NEXT_TICK_MS.swap(0, StdOrdering::Relaxed);
        if stall > 0 {
            std::thread::sleep(Duration::from_millis(stall));
        }
        if GENERATION.load(StdOrdering::Acquire) != generation {
            return; // replaced while asleep
        }
        tick_shared();
    }
}

/// One tick of the shared clock: publish the time, then tick every registered user.
fn tick_shared() {
    COARSE.fetch_max(precise_nanos(), StdOrdering::Relaxed);
    let mut registry = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    // Read the time again under the lock: waiting for it (behind a fork or another ticker)
    // must not make us prepare windows for a time that has already passed.
    let now = precise_nanos();
    tick_all(&mut registry, now);
}

/// Ticks every live user and forgets the dropped ones.
fn tick_all(registry: &mut Registry, now: u64) {
    registry.retain(|user| match user.upgrade() {
        Some(user) => {
            user.tick(now);
            true
        }
        None => false,
    });
}

thread_local! {
    /// The registry lock taken by [`prepare_fork`], released by the after-fork functions.
    static FORK_LOCK: std::cell::RefCell<Option<std::sync::MutexGuard<'static, Registry>>> =
        const { std::cell::RefCell::new(None) };
}

/// Call just before `fork()`: waits for a tick in progress to finish and holds the ticker's
/// lock until [`after_fork_in_parent`] or [`after_fork_in_child`], so the child never inherits
/// the lock mid-update.
///
/// # Examples
///
/// ```
/// floodgate::clock::prepare_fork();
/// // let pid = unsafe { libc::fork() };
/// floodgate::clock::after_fork_in_parent(); // or after_fork_in_child() in the child
/// ```
pub fn prepare_fork() {
    let guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    FORK_LOCK.with(|slot| *slot.borrow_mut() = Some(guard));
}

/// Call in the parent after `fork()`: releases what [`prepare_fork`] held.
///
/// # Examples
///
/// ```
/// floodgate::clock::prepare_fork();
/// // let pid = unsafe { libc::fork() }; // pid > 0: the parent
/// floodgate::clock::after_fork_in_parent();
/// let t = floodgate::clock::coarse_now();
/// assert!(floodgate::clock::coarse_now() >= t);
/// ```
pub fn after_fork_in_parent() {
    FORK_LOCK.with(|slot| slot.borrow_mut().take());
}

/// Call in the child after `fork()`: releases what [`prepare_fork`] held and starts the
/// child's own ticker (the parent's ticker thread does not exist in the child).
///
/// # Examples
///
/// ```
/// floodgate::clock::prepare_fork();
/// // let pid = unsafe { libc::fork() }; // pid == 0: the child
/// floodgate::clock::after_fork_in_child();
/// let t = floodgate::clock::coarse_now();
/// assert!(floodgate::clock::coarse_now() >= t);
/// ```
pub fn after_fork_in_child() {
    FORK_LOCK.with(|slot| slot.borrow_mut().take());
    if GENERATION.load(StdOrdering::Relaxed) != 0 {
        // Force a start even if the parent started a ticker less than a second ago.
        LAST_START.store(0, StdOrdering::Relaxed);
        start_ticker(precise_nanos());
    }
}

/// The shared coarse clock's current time (since the process-wide epoch), as the request
/// path sees it: at most about one tick behind the OS clock while the ticker runs.
///
/// # Examples
///
/// ```
/// let a = floodgate::clock::coarse_now();
/// let b = floodgate::clock::coarse_now();
/// assert!(b >= a);
/// ```
pub fn coarse_now() -> Duration {
    Duration::from_nanos(coarse_nanos())
}

/// Fault injection for tests of the ticker's self-healing. Not part of the stable API.
#[doc(hidden)]
pub mod testing {
    use super::*;

    /// Makes the running shared ticker panic at its next tick.
    pub fn panic_ticker() {
        PANIC_NEXT_TICK.store(true, StdOrdering::Relaxed);
    }

    /// Makes the running shared ticker sleep for `stall` before its next tick.
    pub fn stall_ticker(stall: Duration) {
        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX).max(1);
        STALL_NEXT_TICK_MS.store(ms, StdOrdering::Relaxed);
    }

    /// Starts one more shared ticker thread that ticks alongside the current one (as a stalled
    /// ticker and its replacement would), for `ticks` ticks, then exits.
    pub fn run_duplicate_ticker(ticks: u32) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for _ in 0..ticks {
                tick_shared();
                std::thread::sleep(TICK / 2);
            }
        })
    }

    /// The generation of the current shared ticker (increases with every restart).
    pub fn ticker_generation() -> u64 {
        GENERATION.load(StdOrdering::Acquire)
    }
}

/// A clock that tests advance by hand.
///
/// Rates built on a `ManualClock` see exactly the time it was advanced to, and every tick
/// (each 10 ms boundary crossed, and the final time) runs synchronously inside
/// [`advance`](ManualClock::advance), so no test needs to sleep for a window to end.
/// Clones share one time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use floodgate::{clock::ManualClock, Rate};
///
/// let clock = ManualClock::new();
/// let rate = Rate::builder(Duration::from_secs(1)).clock(&clock).build().unwrap();
/// rate.observe(&"origin", 5);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(rate.rate(&"origin"), 5.0);
/// assert_eq!(clock.now(), Duration::from_secs(1));
/// ```
#[derive(Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

pub(crate) struct ManualInner {
    /// The time in nanoseconds since the clock was made. Stored with `Release` before the
    /// ticks for that time run, so that a reader that loads it with `Acquire` also sees the
    /// work of every earlier tick (the slot clearing for the bucket it is now in). A test
    /// clock, so the `Acquire` costs nothing that matters.
    nanos: AtomicU64,
    /// The users this clock ticks; held across a whole `advance`, so advances are serialised.
    users: Mutex<Registry>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ManualClock {
    /// A manual clock at time zero.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// assert_eq!(clock.now(), std::time::Duration::ZERO);
    /// ```
    pub fn new() -> Self {
        ManualClock {
            inner: Arc::new(ManualInner {
                nanos: AtomicU64::new(0),
                users: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The clock's current time.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_millis(250));
    /// assert_eq!(clock.now(), Duration::from_millis(250));
    /// ```
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.inner.nanos.load(Ordering::Acquire))
    }

    /// Moves the clock forward by `by`, running the ticks that a real ticker would run on the
    /// way (one at every 10 ms boundary crossed, and one at the final time). The work grows
    /// with the distance: about a tenth of a second per simulated day and `Rate`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use floodgate::clock::ManualClock;
    ///
    /// let clock = ManualClock::new();
    /// let shared = clock.clone();
    /// clock.advance(Duration::from_secs(2));
    /// shared.advance(Duration::from_millis(5));
    /// assert_eq!(clock.now(), Duration::from_millis(2005));
    /// ```
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let mut users = lock(&self.inner.users);
        let start = self.inner.nanos.load(Ordering::Relaxed);
        let target = start.saturating_add(by);
        let mut tick = (start / TICK_NANOS)
            .saturating_add(1)
            .saturating_mul(TICK_NANOS);
        while tick < target {
            self.inner.nanos.store(tick, Ordering::Release);
            tick_all(&mut users, tick);
            tick = tick.saturating_add(TICK_NANOS);
        }
        self.inner.nanos.store(target, Ordering::Release);
        tick_all(&mut users, target);
    }
}

impl std::fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish_non_exhaustive()
    }
}

/// Where a `Rate` takes its time from.
#[derive(Clone)]
pub(crate) enum TimeSource {
    /// The shared coarse clock and its ticker thread.
    Shared,
    /// A [`ManualClock`].
    Manual(Arc<ManualInner>),
}

impl TimeSource {
    pub(crate) fn manual(clock: &ManualClock) -> Self {
        TimeSource::Manual(Arc::clone(&clock.inner))
    }

    /// The coarse time: what the request path reads.
    #[inline]
    pub(crate) fn coarse(&self) -> u64 {
        match self {
            TimeSource::Shared => coarse_nanos(),
            TimeSource::Manual(m) => m.nanos.load(Ordering::Acquire),
        }
    }

    /// The exact time, for the rare reads near a window boundary.
    pub(crate) fn precise(&self) -> u64 {
        match self {
            TimeSource::Shared => precise_nanos(),
            TimeSource::Manual(m) => m.nanos.load(Ordering::Acquire),
        }
    }

    /// Registers `user` to be ticked from now on, starting the shared ticker if needed.
    pub(crate) fn register(&self, user: Weak<dyn Tick>) {
        match self {
            TimeSource::Shared => {
                if COARSE.load(StdOrdering::Relaxed) == 0 {
                    start_ticker_now();
                }
                REGISTRY
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(user);
            }
            TimeSource::Manual(m) => lock(&m.users).push(user),
        }
    }
}
