//! Functions to call around `fork()`, so that a forked child gets a ticker of its own.

use std::sync::atomic::Ordering;

use super::schedule::Held;
use super::ticker::{self, GENERATION, LAST_START};

thread_local! {
    /// The scheduler's locks taken by [`prepare_fork`], released by the after-fork functions.
    static FORK_LOCK: std::cell::RefCell<Option<Held<'static>>> =
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
    let held = ticker::scheduler().hold();
    FORK_LOCK.with(|slot| *slot.borrow_mut() = Some(held));
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
    if GENERATION.load(Ordering::Relaxed) != 0 {
        // Force a start even if the parent started a ticker less than a second ago.
        LAST_START.store(0, Ordering::Relaxed);
        ticker::start_ticker(ticker::precise_nanos());
    }
}
