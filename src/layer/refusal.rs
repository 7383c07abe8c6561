//! The response to a refused request: what it is built from, and the building, which waits
//! until the response future is polled.

use http::header::RETRY_AFTER;
use http::{Response, StatusCode};

use super::body::Inner;
use super::headers::{self, Policies};
use super::LimitBody;
use crate::{Reason, Rejected};

/// A refused request: what its response is built from when the future is polled (nothing is
/// formatted or allocated before then).
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    pub(super) rejected: Rejected,
    /// The limits the decision was judged against.
    pub(super) policies: Policies,
    pub(super) jitter_secs: u64,
}

/// The response to a refused request, with an empty body and the [`Rejected`] in its
/// extensions:
///
/// - over a limit: 503, with `Retry-After` where the wait is known, `RateLimit-Policy` and
///   `RateLimit`;
/// - limits of a kind the limiter does not count: 500 and nothing else; the client did
///   nothing wrong, the server's configuration did.
///
/// `None` (a future polled again after it answered) gives a bare 503.
pub(super) fn refuse<B>(refusal: Option<Refusal>) -> Response<LimitBody<B>> {
    let mut response = Response::new(LimitBody {
        inner: Inner::Rejected,
        permit: None,
    });
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let Some(Refusal {
        rejected,
        policies,
        jitter_secs,
    }) = refusal
    else {
        return response;
    };
    if matches!(
        rejected.reason,
        Reason::InflightNotCounted | Reason::RateNotCounted | Reason::LimitTooLarge
    ) {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    } else {
        let fields = response.headers_mut();
        if let Some(wait) = rejected.retry_after {
            fields.insert(RETRY_AFTER, headers::retry_after(wait, jitter_secs));
        }
        if let Some(policy) = policies.policy_field() {
            fields.insert(headers::ratelimit_policy(), policy);
        }
        if let Some(limit) = policies.rejected_field(&rejected) {
            fields.insert(headers::ratelimit(), limit);
        }
    }
    response.extensions_mut().insert(rejected);
    response
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Limits;

    fn refusal(reason: Reason, retry_after: Option<Duration>) -> Refusal {
        Refusal {
            rejected: Rejected {
                reason,
                estimate: 3,
                limit: 2,
                retry_after,
            },
            policies: Policies {
                limits: Limits::new().max_inflight(2).max_rate(2),
                interval: Some(Duration::from_secs(1)),
            },
            jitter_secs: 0,
        }
    }

    #[test]
    fn limits_the_limiter_does_not_count_are_a_500_without_fields() {
        for reason in [Reason::InflightNotCounted, Reason::RateNotCounted] {
            let response = refuse::<()>(Some(refusal(reason, None)));
            assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
            assert!(response.headers().is_empty(), "{:?}", response.headers());
            assert_eq!(
                response.extensions().get::<Rejected>().unwrap().reason,
                reason
            );
        }
    }

    #[test]
    fn a_rate_refusal_is_a_503_with_all_three_fields() {
        let response = refuse::<()>(Some(refusal(
            Reason::Rate,
            Some(Duration::from_millis(1500)),
        )));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let fields = response.headers();
        assert_eq!(fields[RETRY_AFTER], "2");
        assert_eq!(
            fields["ratelimit-policy"],
            "\"rate\";q=2;w=1, \"inflight\";q=2;qu=\"concurrent-requests\""
        );
        assert_eq!(fields["ratelimit"], "\"rate\";r=0;t=2");
        let response = refuse::<()>(Some(refusal(Reason::Inflight, None)));
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get(RETRY_AFTER).is_none());
        assert_eq!(response.headers()["ratelimit"], "\"inflight\";r=0");
    }
}
