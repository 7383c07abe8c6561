//! Each thread's own slot in every limiter's counters, so that counting is a plain load and
//! store on a line no other thread writes.
//!
//! A thread takes the lowest free slot number at its first count and gives it back when it
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

/// A thread's slot number, given back when the thread exits.
struct Owned(Cell<Option<usize>>);

impl Owned {
    fn get(&self) -> usize {
        if let Some(slot) = self.0.get() {
            return slot;
        }
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
        self.0.set(Some(slot));
        slot
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(slot) = self.0.get().filter(|&s| s < SLOTS) {
            pool().free.push(slot);
        }
    }
}

thread_local! {
    static OWNED: Owned = const { Owned(Cell::new(None)) };
}

/// This thread's slot: its own, or [`SHARED`] (also while the thread is exiting).
#[inline]
pub(super) fn current() -> usize {
    OWNED.try_with(Owned::get).unwrap_or(SHARED)
}
