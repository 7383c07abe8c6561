//! What an admitted request holds until it is done.

use std::sync::Arc;

use super::shared::Shared;
#[cfg(feature = "tower")]
use super::ticket::Receipt;
use super::ticket::Ticket;
use super::{Outcome, Rejected};

/// An admitted request: holds its key's in-flight slot (its cost's units, for a request with
/// a cost) until dropped.
///
/// Dropping it on any thread, during a panic unwind, or with a cancelled future gives the
/// slot back, all its units together.
#[must_use = "dropping the permit gives the in-flight slot back at once"]
pub struct Permit<'a, K> {
    pub(super) shared: &'a Shared<K>,
    pub(super) ticket: Ticket,
}

impl<K> Permit<'_, K> {
    /// Records what the origin answered this request, for an adaptive in-flight limit
    /// ([`LimiterBuilder::adaptive_inflight`](super::LimiterBuilder::adaptive_inflight)): an
    /// [`Outcome::Overload`] (a 5xx, a timeout) backs the key's learnt limit off when the
    /// permit drops. A permit dropped without one is a success, its time from admission to
    /// drop the request's latency. Without adaptive limits, or for a key whose limit is not
    /// learnt, it changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::{AdaptiveInflight, Limiter, Outcome};
    ///
    /// let limiter: Limiter<String> = Limiter::builder()
    ///     .max_inflight(100)
    ///     .adaptive_inflight(AdaptiveInflight::new())
    ///     .build()
    ///     .unwrap();
    /// let mut permit = limiter.try_acquire("origin").unwrap();
    /// // ... the origin answered 503:
    /// permit.record(Outcome::Overload);
    /// drop(permit);
    /// ```
    pub fn record(&mut self, outcome: Outcome) {
        self.ticket.record(outcome);
    }

    /// For a request admitted in shadow ([`Limits::shadow`](super::Limits::shadow),
    /// [`LimiterBuilder::shadow`](super::LimiterBuilder::shadow)), the rejection it would have
    /// had; `None` for a request its limits admit.
    pub fn shadow_rejection(&self) -> Option<&Rejected> {
        self.ticket.shadow_rejection()
    }
}

impl<K> Drop for Permit<'_, K> {
    fn drop(&mut self) {
        self.shared.release(&self.ticket);
    }
}

impl<K> std::fmt::Debug for Permit<'_, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("exact", &self.ticket.exact())
            .field("shadow_rejection", &self.ticket.shadow_rejection())
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

impl<K> OwnedPermit<K> {
    /// Takes this admission back, counted in `receipt`'s window, because another key refused
    /// the request (see [`Shared::refund`]): its exact rate units, then its in-flight units.
    #[cfg(feature = "tower")]
    pub(crate) fn take_back(mut self, receipt: Receipt) {
        self.ticket.unmeasured();
        self.shared.refund(&self.ticket, receipt);
    }

    /// As [`Permit::shadow_rejection`].
    pub fn shadow_rejection(&self) -> Option<&Rejected> {
        self.ticket.shadow_rejection()
    }

    /// As [`Permit::record`].
    pub fn record(&mut self, outcome: Outcome) {
        self.ticket.record(outcome);
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
            .field("exact", &self.ticket.exact())
            .field("shadow_rejection", &self.ticket.shadow_rejection())
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    /// The cost rides in the room the tag leaves; the admission time of a learning key's
    /// request takes a word (its latency, exact where the mean in flight over a round was
    /// too noisy to tell a healthy origin's rounds apart within the tolerance).
    #[test]
    fn a_ticket_with_its_cost_and_admission_time_is_four_words() {
        assert_eq!(std::mem::size_of::<super::Ticket>(), 32);
    }
}
