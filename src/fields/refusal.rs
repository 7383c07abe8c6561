//! What the answer to a refused request says, whatever HTTP stack sends it: which kind of
//! answer a refusal gets ([`RefusalKind`]), its `Retry-After` and RateLimit fields
//! ([`RefusalFields`]), and the body of a request no wait can admit ([`NEVER_FITS`]).
//!
//! The tower layer (feature `tower`) answers refusals by these rules; a proxy built on
//! something else (pingora) gets the same fields for the same settings.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use floodgate::fields::ratelimit::{Policies, PolicyNames};
//! use floodgate::fields::refusal::{RefusalFields, RefusalKind};
//! use floodgate::Limiter;
//!
//! let limiter: Limiter<String> = Limiter::builder()
//!     .max_rate(1, Duration::from_secs(1))
//!     .build()
//!     .unwrap();
//! let _first = limiter.try_acquire("api.example").unwrap();
//! let refused = limiter.try_acquire("api.example").unwrap_err();
//! assert_eq!(RefusalKind::of(&refused), RefusalKind::OverLimit);
//!
//! let policies = Policies::of(&limiter, None);
//! let fields = RefusalFields::of(&refused, &policies, &PolicyNames::DEFAULT, 0, true);
//! assert!(matches!(fields.retry_after, Some(1..=2)));
//! assert_eq!(fields.policy.as_deref(), Some("\"rate\";q=1;w=1"));
//! assert!(fields.ratelimit.unwrap().starts_with("\"rate\";r=0;t="));
//! ```

use super::ratelimit::{Policies, PolicyNames};
use super::retry::retry_after_secs;
use crate::{Reason, Rejected};

/// The body of the answer to a request whose cost alone is over a limit: no wait admits it.
/// It names no number, so it says nothing the RateLimit fields (which the operator may keep
/// back) would not.
pub const NEVER_FITS: &str =
    "This request costs more than its limit allows: it can never be admitted, and retrying it \
     will not help.\n";

/// The kind of answer a refusal gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    /// Over a limit a wait can cure (the rate, the in-flight limit): the operator's status
    /// for refusals (503 or 429) and body, `Retry-After` where the wait is known, and the
    /// RateLimit fields unless the operator keeps them back.
    OverLimit,
    /// A cost alone over a limit: no wait admits it. Its own status (413 unless told
    /// otherwise), no `Retry-After` nor `RateLimit` (`RateLimit-Policy` still says what the
    /// limits are), and a body that says retrying will not help ([`NEVER_FITS`]) unless the
    /// operator makes one.
    CostOverLimit,
    /// Limits of a kind the limiter does not count: the server's configuration error, not the
    /// client's doing. `500 Internal Server Error` and nothing else.
    Misconfigured,
}

impl RefusalKind {
    /// The kind of answer `rejected` gets.
    pub fn of(rejected: &Rejected) -> RefusalKind {
        match rejected.reason {
            Reason::InflightNotCounted | Reason::RateNotCounted | Reason::LimitTooLarge => {
                RefusalKind::Misconfigured
            }
            Reason::CostOverLimit => RefusalKind::CostOverLimit,
            _ => RefusalKind::OverLimit,
        }
    }
}

/// The fields of the answer to a refusal, as values: `Retry-After` in seconds, and the
/// `RateLimit-Policy` and `RateLimit` values. `None` where the answer has no such field.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefusalFields {
    /// `Retry-After`: where the wait is known (a rate refusal), jitter included.
    pub retry_after: Option<u64>,
    /// `RateLimit-Policy`: the limits the request was judged against.
    pub policy: Option<String>,
    /// `RateLimit`: the policy that refused, with nothing left.
    pub ratelimit: Option<String>,
}

impl RefusalFields {
    /// The fields of the answer to `rejected`, judged against `policies` named `names`, with
    /// up to `jitter_secs` seconds of jitter on `Retry-After` ([`retry_after_secs`]), the
    /// RateLimit fields only when `ratelimit_fields` is on; see [`RefusalKind`] for which
    /// kind gets which. `Retry-After` is sent whenever the wait is known, whatever the
    /// RateLimit fields: HTTP defines it for 503 and 429 alike.
    pub fn of(
        rejected: &Rejected,
        policies: &Policies,
        names: &PolicyNames,
        jitter_secs: u64,
        ratelimit_fields: bool,
    ) -> RefusalFields {
        if RefusalKind::of(rejected) == RefusalKind::Misconfigured {
            return RefusalFields::default();
        }
        RefusalFields {
            retry_after: retry_after_secs(rejected, jitter_secs),
            policy: ratelimit_fields
                .then(|| policies.policy_named(names))
                .flatten(),
            ratelimit: ratelimit_fields
                .then(|| policies.refused_named(rejected, names))
                .flatten(),
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Limits;

    fn rejected(reason: Reason) -> Rejected {
        Rejected {
            reason,
            estimate: 3,
            limit: 2,
            retry_after: (reason == Reason::Rate).then_some(Duration::from_millis(1500)),
        }
    }

    #[test]
    fn each_reason_gets_its_kind_of_answer_and_fields() {
        let policies = Policies::new(
            Limits::new().max_inflight(2).max_rate(2),
            Some(Duration::from_secs(1)),
        );
        let names = PolicyNames::DEFAULT;
        let rate = RefusalFields::of(&rejected(Reason::Rate), &policies, &names, 0, true);
        assert_eq!(rate.retry_after, Some(2));
        assert_eq!(rate.ratelimit.as_deref(), Some("\"rate\";r=0;t=2"));
        let never = rejected(Reason::CostOverLimit);
        assert_eq!(RefusalKind::of(&never), RefusalKind::CostOverLimit);
        let never = RefusalFields::of(&never, &policies, &names, 0, true);
        assert_eq!((never.retry_after, never.ratelimit), (None, None));
        assert!(never.policy.is_some());
        let hidden = RefusalFields::of(&rejected(Reason::Rate), &policies, &names, 0, false);
        assert_eq!((hidden.retry_after, hidden.policy), (Some(2), None));
        for reason in [Reason::InflightNotCounted, Reason::RateNotCounted] {
            let wrong = rejected(reason);
            assert_eq!(RefusalKind::of(&wrong), RefusalKind::Misconfigured);
            let fields = RefusalFields::of(&wrong, &policies, &names, 0, true);
            assert_eq!(fields, RefusalFields::default());
        }
    }
}
