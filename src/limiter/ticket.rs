//! What an admission hands its permit: where its units are counted, to give them back.

use super::{Outcome, Rejected};

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
    /// In the exact stage, by the entry of this generation in this way of its set (which
    /// counted its rate units too,
    /// if the limiter counts a rate); `outcome`: what its origin answered, as recorded
    /// ([`Permit::record`](super::Permit::record)); `measured`: whether its time says anything of its origin (not
    /// for an admission another key's refusal took back); `admitted_at`: when it was admitted
    /// (the limiter's clock, in nanoseconds) if its key was learning its in-flight limit then,
    /// or 0. For a learnt in-flight limit, which takes each request's latency from them.
    Exact {
        generation: u32,
        way: u8,
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
    /// An admission's `cost` units: in the exact stage by the entry of `generation` in `way`
    /// (admitted at `admitted_at` if its key is learning, or 0), or in the sketch.
    #[inline]
    pub(super) fn of(exact: Option<(u32, u8, u64)>, cost: u32) -> Self {
        match exact {
            Some((generation, way, admitted_at)) => Held::Exact {
                generation,
                way,
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
    pub(super) fn shadow_rejection(&self) -> Option<&Rejected> {
        match &self.held {
            Held::Shadow(rejected) => Some(rejected),
            _ => None,
        }
    }

    /// Whether its slot is counted in the exact stage.
    pub(super) fn exact(&self) -> bool {
        matches!(self.held, Held::Exact { .. })
    }

    /// Records what its origin answered: only an exact-stage slot, whose key may be learning
    /// its in-flight limit, keeps it.
    pub(super) fn record(&mut self, outcome: Outcome) {
        if let Held::Exact { outcome: held, .. } = &mut self.held {
            *held = outcome;
        }
    }

    /// Marks it as saying nothing of its origin: another key refused its request.
    #[cfg(feature = "tower")]
    pub(super) fn unmeasured(&mut self) {
        if let Held::Exact { measured, .. } = &mut self.held {
            *measured = false;
        }
    }
}
