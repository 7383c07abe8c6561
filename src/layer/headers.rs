//! What a [`LimitService`] tells clients about its limits, as `http` field values: the values
//! themselves come from [`fields`](crate::fields), which a proxy without tower uses alike.
//!
//! Every value there is built from integers and policy names checked when they were given, so
//! building a header value cannot fail in practice; where `http` could still refuse one, the field is left out rather
//! than panicking.

use http::header::{HeaderMap, HeaderName, HeaderValue};

#[cfg(doc)]
use super::LimitService;
use crate::fields::ratelimit::{Policies, PolicyNames};
use crate::Estimate;

/// The `RateLimit-Policy` field's name.
pub(super) fn ratelimit_policy() -> HeaderName {
    HeaderName::from_static("ratelimit-policy")
}

/// The `RateLimit` field's name.
pub(super) fn ratelimit() -> HeaderName {
    HeaderName::from_static("ratelimit")
}

/// An admitted request, when admitted responses carry the fields: its limits, its key's
/// counts just after admission, and the names of the policies.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Admitted {
    pub(super) policies: Policies,
    pub(super) estimate: Estimate,
    pub(super) names: PolicyNames,
}

impl Admitted {
    /// Adds `RateLimit-Policy` and `RateLimit` to the inner service's response. Appended, not
    /// inserted: a Structured Field list may be split over several field lines, so fields the
    /// inner service set for its own policies stay, and ours join their lists.
    pub(super) fn append_to(&self, fields: &mut HeaderMap) {
        if let Some(policy) = policy_field(&self.policies, &self.names) {
            fields.append(ratelimit_policy(), policy);
        }
        if let Some(limit) = self
            .policies
            .admitted_named(&self.estimate, &self.names)
            .and_then(header_value)
        {
            fields.append(ratelimit(), limit);
        }
    }
}

/// `RateLimit-Policy` for `policies` named `names`, as a field value.
fn policy_field(policies: &Policies, names: &PolicyNames) -> Option<HeaderValue> {
    header_value(policies.policy_named(names)?)
}

/// A field value from our own ASCII; `None` (the field left out) if `http` refuses it.
pub(super) fn header_value(value: String) -> Option<HeaderValue> {
    HeaderValue::try_from(value).ok()
}
