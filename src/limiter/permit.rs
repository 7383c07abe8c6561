//! What an admitted request holds until it is done.

use std::sync::Arc;

use super::Shared;

/// What a permit gives back: the key's hash, and the generation of the exact-stage entry that
/// counted it.
pub(super) struct Ticket {
    pub(super) hash: u64,
    pub(super) tracked: Option<u64>,
}

/// An admitted request: holds its key's in-flight slot until dropped.
///
/// Dropping it on any thread, during a panic unwind, or with a cancelled future gives the
/// slot back.
#[must_use = "dropping the permit gives the in-flight slot back at once"]
pub struct Permit<'a, K> {
    pub(super) shared: &'a Shared<K>,
    pub(super) ticket: Ticket,
}

impl<K> Drop for Permit<'_, K> {
    fn drop(&mut self) {
        self.shared.release(&self.ticket);
    }
}

impl<K> std::fmt::Debug for Permit<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("exact", &self.ticket.tracked.is_some())
            .finish_non_exhaustive()
    }
}

/// An admitted request that owns a reference to its [`Limiter`](super::Limiter); see
/// [`Limiter::try_acquire_owned`](super::Limiter::try_acquire_owned).
///
/// Neither permit puts a bound on the key type, so a request's context generic over its key
/// can hold one:
///
/// ```
/// struct Ctx<K> {
///     permit: Option<floodgate::OwnedPermit<K>>,
/// }
/// let ctx: Ctx<String> = Ctx { permit: None };
/// assert!(ctx.permit.is_none());
/// ```
#[must_use = "dropping the permit gives the in-flight slot back at once"]
pub struct OwnedPermit<K> {
    pub(super) shared: Arc<Shared<K>>,
    pub(super) ticket: Ticket,
}

impl<K> OwnedPermit<K> {
    pub(super) fn new(shared: &Arc<Shared<K>>, ticket: Ticket) -> Self {
        OwnedPermit {
            shared: Arc::clone(shared),
            ticket,
        }
    }
}

impl<K> Drop for OwnedPermit<K> {
    fn drop(&mut self) {
        self.shared.release(&self.ticket);
    }
}

impl<K> std::fmt::Debug for OwnedPermit<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedPermit")
            .field("exact", &self.ticket.tracked.is_some())
            .finish_non_exhaustive()
    }
}
