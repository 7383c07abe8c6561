//! What an admitted request holds until it is done.

use std::sync::Arc;

use super::{Outcome, Rejected, Shared};

/// What a permit gives back: the key's hash, and where its in-flight slot is counted.
pub(super) struct Ticket {
    pub(super) hash: u64,
    pub(super) held: Held,
}

/// The rate window an admission was counted in (its bucket; `None` without a rate). Handed to
/// the permit's constructor beside the ticket, not kept in the permit: only a decision made
/// with other keys ([`WithLimits::try_acquire_and`](super::WithLimits::try_acquire_and))
/// needs it, to take the count back at once when another key refuses.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Receipt {
    pub(super) window: Option<u64>,
}

/// Where an admitted request's in-flight units are counted, and how many (its cost: in the
/// variants, where it takes the room the tag leaves, so that a ticket stays 24 bytes).
pub(super) enum Held {
    /// In the sketch.
    Sketch { cost: u32 },
    /// In the exact stage, by the entry of this generation (which counted its rate units too,
    /// if the limiter counts a rate); `outcome`: what its origin answered, as recorded
    /// ([`Permit::record`]); `measured`: whether its time says anything of its origin (not
    /// for an admission another key's refusal took back); `admitted_at`: when it was admitted
    /// (the limiter's clock, in nanoseconds) if its key was learning its in-flight limit then,
    /// or 0. For a learnt in-flight limit, which takes each request's latency from them.
    Exact {
        generation: u64,
        cost: u32,
        outcome: Outcome,
        measured: bool,
        admitted_at: u64,
    },
    /// Nowhere: a request its limits refuse, admitted in shadow, counted as the refusal it
    /// stands for. Boxed, so that a ticket stays as small as an admission's.
    Shadow(Box<Rejected>),
    /// Nowhere: a request of cost 0, which counts nothing.
    Nothing,
}

/// The permit `permit` makes for a request its limits refuse, admitted in shadow: a ticket
/// that holds nothing and says what the refusal was.
///
/// Out of line, and the decision hands each of its answers straight to its caller's permit:
/// when the decision returned a ticket or a refusal that the caller then turned into a
/// permit, the compiler built every admission's result on the stack and copied it in loads
/// wider than the stores before them (a failed store-to-load forwarding), and healthy traffic
/// ran 15-20% slower.
#[cold]
#[inline(never)]
pub(super) fn shadow_admission<P>(
    rejected: Rejected,
    permit: impl FnOnce(Ticket, Receipt) -> P,
) -> Result<P, Rejected> {
    Ok(permit(Ticket::shadowed(rejected), Receipt::default()))
}

impl Held {
    /// An admission's `cost` units: in the exact stage by entry `generation` (admitted at
    /// `admitted_at` if its key is learning, or 0), or in the sketch.
    #[inline]
    pub(super) fn of(exact: Option<(u64, u64)>, cost: u32) -> Self {
        match exact {
            Some((generation, admitted_at)) => Held::Exact {
                generation,
                cost,
                outcome: Outcome::Success,
                measured: true,
                admitted_at,
            },
            None => Held::Sketch { cost },
        }
    }
}

impl Ticket {
    /// A request refused and admitted in shadow (its hash is never read: it gives nothing
    /// back).
    #[cold]
    pub(super) fn shadowed(rejected: Rejected) -> Self {
        Ticket {
            hash: 0,
            held: Held::Shadow(Box::new(rejected)),
        }
    }

    /// A request of cost 0: it holds nothing, and gives nothing back.
    #[cold]
    pub(super) fn nothing() -> Self {
        Ticket {
            hash: 0,
            held: Held::Nothing,
        }
    }

    /// The refusal a shadow admission stands for.
    fn shadow_rejection(&self) -> Option<&Rejected> {
        match &self.held {
            Held::Shadow(rejected) => Some(rejected),
            _ => None,
        }
    }

    /// Whether its slot is counted in the exact stage.
    fn exact(&self) -> bool {
        matches!(self.held, Held::Exact { .. })
    }

    /// Records what its origin answered: only an exact-stage slot, whose key may be learning
    /// its in-flight limit, keeps it.
    fn record(&mut self, outcome: Outcome) {
        if let Held::Exact { outcome: held, .. } = &mut self.held {
            *held = outcome;
        }
    }

    /// Marks it as saying nothing of its origin: another key refused its request.
    #[cfg(feature = "tower")]
    fn unmeasured(&mut self) {
        if let Held::Exact { measured, .. } = &mut self.held {
            *measured = false;
        }
    }
}

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
