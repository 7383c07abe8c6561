//! Each thread's own slot in every limiter's counters, so that counting is a plain load and
//! store on a line no other thread writes.
//!
//! A thread takes a free slot number at its first count and gives it back when it
//! exits; the next thread to take that number goes on adding to the same counters (the pool's
//! lock orders the exiting thread's last store before the new owner's first load, so nothing
//! is lost). Past [`SLOTS`] threads at once, the rest share [`SHARED`], counted with a locked
//! add.

use std::cell::Cell;
use std::sync::Mutex;

/// Slots owned by one thread each: enough for a proxy's worker threads on a large machine.
pub(super) const SLOTS: usize = 128;
/// The slot the threads past [`SLOTS`] share (counted with a locked add).
pub(super) const SHARED: usize = SLOTS;

/// Slot numbers given back by threads that exited, and the next never taken.
struct Pool {
    free: Vec<usize>,
    next: usize,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    free: Vec::new(),
    next: 0,
});

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // The pool stays consistent whatever a panicking holder did (a push or a pop).
    POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// This thread's slot number; [`UNTAKEN`] until its first count. No destructor, so reading it
/// is one thread-local load, with no check of whether the thread is being torn down.
const UNTAKEN: usize = usize::MAX;

thread_local! {
    static SLOT: Cell<usize> = const { Cell::new(UNTAKEN) };
    /// Gives the thread's slot back when the thread exits: registered at its first count.
    static GIVE_BACK: GiveBack = const { GiveBack };
}

/// Gives the thread's slot back to the pool when the thread exits, and moves the thread's
/// counts from then on (other thread-locals' destructors may still count) to [`SHARED`].
struct GiveBack;

impl Drop for GiveBack {
    fn drop(&mut self) {
        let slot = SLOT.try_with(|s| s.replace(SHARED)).unwrap_or(SHARED);
        if slot < SLOTS {
            pool().free.push(slot);
        }
    }
}

/// This thread's slot: its own, or [`SHARED`].
#[inline]
pub(super) fn current() -> usize {
    // `try_with`: where thread-locals are not native, one may be gone in a late destructor.
    match SLOT.try_with(Cell::get) {
        Ok(UNTAKEN) => take(),
        Ok(slot) => slot,
        Err(_) => SHARED,
    }
}

/// The first count of a thread: takes a free slot, or [`SHARED`] when all are taken.
#[cold]
fn take() -> usize {
    let slot = {
        let mut pool = pool();
        match pool.free.pop() {
            Some(slot) => slot,
            None if pool.next < SLOTS => {
                pool.next += 1;
                pool.next - 1
            }
            None => SHARED,
        }
    };
    if SLOT.try_with(|s| s.set(slot)).is_err() {
        return SHARED; // being torn down: the slot stays taken, never shared
    }
    // Registers the give-back; if the thread is already being torn down, the slot stays taken
    // (one slot lost to the pool, never shared by two threads).
    let _ = GIVE_BACK.try_with(|_| ());
    slot
}
