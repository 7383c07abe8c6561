//! The response to a refused request: what it is built from, and the building, which waits
//! until the response future is polled.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use http::{Response, StatusCode};

use super::body::Inner;
use super::headers;
use super::settings::{RefusalBody, RefusalResponse, Refused};
use super::{LimitBody, NoKey, Uncharged};
use crate::fields::ratelimit::{Policies, PolicyNames};
use crate::fields::refusal::{RefusalFields, RefusalKind, NEVER_FITS};
use crate::Rejected;

/// A refused request: what its response is built from when the future is polled (nothing is
/// formatted before then).
#[derive(Debug, Clone)]
pub(super) struct Refusal {
    pub(super) rejected: Rejected,
    /// The key the request was judged under, for the response's extensions.
    pub(super) key: String,
    /// The limits the decision was judged against.
    pub(super) policies: Policies,
    /// The names of their policies.
    pub(super) names: PolicyNames,
    pub(super) jitter_secs: u64,
    /// How the operator answers a request over a limit.
    pub(super) response: RefusalResponse,
}

/// The key of a refused request, in the refusal's extensions next to its [`Rejected`]: so
/// that an outer layer can log or count who was refused, without working the key out again.
///
/// # Examples
///
/// ```
/// use std::convert::Infallible;
/// use floodgate::layer::{LimitService, RejectedKey};
/// use floodgate::{Limiter, Reason, Rejected};
/// use http::{Request, Response};
/// use tower::{service_fn, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
/// let _busy = limiter.try_acquire_owned("api.example").unwrap();
/// let origin = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(String::new())) });
/// let request = Request::builder().uri("http://api.example/").body(()).unwrap();
/// let refused = LimitService::new(origin, limiter).oneshot(request).await.unwrap();
/// let key = refused.extensions().get::<RejectedKey>().unwrap();
/// let rejected = refused.extensions().get::<Rejected>().unwrap();
/// assert_eq!((key.0.as_str(), rejected.reason), ("api.example", Reason::Inflight));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RejectedKey(pub String);

/// The response to a refused request, with the [`Rejected`] and its [`RejectedKey`] in its
/// extensions:
///
/// - over a limit a wait can cure: the operator's status (503 unless told otherwise) and
///   body, with `Retry-After` where the wait is known, and `RateLimit-Policy` and `RateLimit`
///   unless switched off;
/// - a cost over a limit, which no wait cures: the operator's status for it (413 unless told
///   otherwise), no `Retry-After` nor `RateLimit`, `RateLimit-Policy` unless switched off, and
///   a body that says retrying will not help;
/// - limits of a kind the limiter does not count: 500 and nothing else; the client did
///   nothing wrong, the server's configuration did, which is logged (once per process).
///
/// `None` (a future polled again after it answered) gives a bare 503.
pub(super) fn refuse<B>(refusal: Option<Refusal>) -> Response<LimitBody<B>> {
    let mut response = Response::new(LimitBody {
        inner: Inner::Rejected { body: None },
        permit: None,
    });
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let Some(Refusal {
        rejected,
        key,
        policies,
        names,
        jitter_secs,
        response: answer,
    }) = refusal
    else {
        return response;
    };
    let kind = RefusalKind::of(&rejected);
    if kind == RefusalKind::Misconfigured {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        misconfigured(&rejected);
    } else {
        let never = kind == RefusalKind::CostOverLimit;
        let status = if never {
            answer.cost_over_limit
        } else {
            answer.status
        };
        *response.status_mut() = status;
        let said = RefusalFields::of(
            &rejected,
            &policies,
            &names,
            jitter_secs,
            answer.ratelimit_fields,
        );
        let retry_after = said.retry_after;
        let fields = response.headers_mut();
        if let Some(secs) = retry_after {
            fields.insert(RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(policy) = said.policy.and_then(headers::header_value) {
            fields.insert(headers::ratelimit_policy(), policy);
        }
        if let Some(limit) = said.ratelimit.and_then(headers::header_value) {
            fields.insert(headers::ratelimit(), limit);
        }
        let made = match &answer.body {
            RefusalBody::Made(make) => made_body(
                make.as_ref(),
                &Refused {
                    rejected: &rejected,
                    key: &key,
                    limits: policies.limits(),
                    interval: policies.interval(),
                    policy: names.of(rejected.reason),
                    status,
                    retry_after,
                },
            ),
            RefusalBody::Empty | RefusalBody::Fixed(..) => None,
        };
        let body = made.or_else(|| match answer.body {
            _ if never => Some((
                HeaderValue::from_static("text/plain; charset=utf-8"),
                Bytes::from_static(NEVER_FITS.as_bytes()),
            )),
            RefusalBody::Fixed(content_type, body) => Some((content_type, body)),
            RefusalBody::Empty | RefusalBody::Made(_) => None,
        });
        if let Some((content_type, body)) = body {
            fields.insert(CONTENT_TYPE, content_type);
            response.body_mut().inner = Inner::Rejected { body: Some(body) };
        }
    }
    let extensions = response.extensions_mut();
    extensions.insert(rejected);
    extensions.insert(RejectedKey(key));
    response
}

/// The response to a request its key extractor could not key and said to refuse: `500
/// Internal Server Error`, empty, with the [`NoKey`] in its extensions (the server cannot
/// tell who sent it: its configuration's fault, not the client's).
pub(super) fn refuse_unkeyed<B>(no_key: NoKey) -> Response<LimitBody<B>> {
    let mut response = Response::new(LimitBody {
        inner: Inner::Rejected { body: None },
        permit: None,
    });
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.extensions_mut().insert(no_key);
    response
}

/// The response to a request its cost extractor would not charge ([`Uncharged`]): its status,
/// its `why` as a plain-text body, and the `Uncharged` in its extensions. The client's doing
/// (a body without a length, say), so not logged.
pub(super) fn refuse_uncharged<B>(uncharged: Uncharged) -> Response<LimitBody<B>> {
    let body = Bytes::from_static(uncharged.why.as_bytes());
    let mut response = Response::new(LimitBody {
        inner: Inner::Rejected { body: Some(body) },
        permit: None,
    });
    *response.status_mut() = uncharged.status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response.extensions_mut().insert(uncharged);
    response
}

/// Says at error level why requests have no key and what is done with them: once per process
/// for each distinct `why` (up to 16 of them; an extractor's causes are a handful of
/// constants), so that a request without a key is never silent and a stream of them is one
/// line. Lock-free: a slot holds the address of a `why` told.
pub(super) fn tell_unkeyed(no_key: &NoKey) {
    static TOLD: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];
    let id = no_key.why.as_ptr() as usize;
    for slot in &TOLD {
        // Relaxed: the slots order nothing else; a race at worst tells one cause twice.
        match slot.compare_exchange(0, id, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break,
            Err(told) if told == id => return,
            Err(_) => continue,
        }
    }
    let then = match no_key.then {
        super::Unkeyed::Refuse => "refusing them with 500",
        super::Unkeyed::Serve => "serving them unlimited",
    };
    log::error!("{}; {then} (told once)", no_key.why);
}

/// The operator's body for `refused`, or `None` (the default body) if the function gave
/// none or panicked: a panic is caught rather than taking the connection down, and said once
/// per process, at error level.
fn made_body(
    make: &(dyn Fn(&Refused<'_>) -> Option<(HeaderValue, Bytes)> + Send + Sync),
    refused: &Refused<'_>,
) -> Option<(HeaderValue, Bytes)> {
    // Unwind safety: the function sees the refusal by shared reference, and nothing of it is
    // used after a panic.
    match catch_unwind(AssertUnwindSafe(|| make(refused))) {
        Ok(body) => body,
        Err(_) => {
            static TOLD: AtomicBool = AtomicBool::new(false);
            // Relaxed: the flag only keeps a flood of lines out.
            if !TOLD.swap(true, Ordering::Relaxed) {
                log::error!(
                    "floodgate layer: the refusal body function panicked; answering such \
                     refusals without its body (told once)"
                );
            }
            None
        }
    }
}

/// Says once per process, at error level, that requests are answered 500 because the limits
/// they are judged against are not the limiter's to count: a misconfigured plan must not stay
/// a silent stream of 500s.
fn misconfigured(rejected: &Rejected) {
    static TOLD: AtomicBool = AtomicBool::new(false);
    // Relaxed: a second line from a race is harmless; the flag only keeps a flood of them out.
    if !TOLD.swap(true, Ordering::Relaxed) {
        log::error!(
            "floodgate layer: answering 500 to requests whose limits the limiter cannot \
             judge ({rejected}); fix the limits the layer is given (told once)"
        );
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Limits, Reason};

    fn refusal(reason: Reason, retry_after: Option<Duration>) -> Refusal {
        Refusal {
            rejected: Rejected {
                reason,
                estimate: 3,
                limit: 2,
                retry_after,
            },
            key: "api.example".to_owned(),
            policies: Policies::new(
                Limits::new().max_inflight(2).max_rate(2),
                Some(Duration::from_secs(1)),
            ),
            names: PolicyNames::default(),
            jitter_secs: 0,
            response: RefusalResponse::default(),
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

    #[test]
    fn a_cost_over_a_limit_is_a_413_without_retry_after_or_ratelimit_whatever_the_status() {
        for answer in [
            RefusalResponse::default(),
            RefusalResponse::too_many_requests()
                .body(HeaderValue::from_static("application/json"), "{}")
                .ratelimit_fields(false),
        ] {
            let mut refusal = refusal(Reason::CostOverLimit, None);
            refusal.response = answer.clone();
            let response = refuse::<()>(Some(refusal));
            assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
            let fields = response.headers();
            assert!(fields.get(RETRY_AFTER).is_none());
            assert!(fields.get("ratelimit").is_none());
            assert_eq!(
                fields.contains_key("ratelimit-policy"),
                answer.ratelimit_fields
            );
            assert_eq!(fields[CONTENT_TYPE], "text/plain; charset=utf-8");
            let LimitBody {
                inner: Inner::Rejected { body: Some(body) },
                ..
            } = response.body()
            else {
                panic!("a body");
            };
            assert!(std::str::from_utf8(body)
                .unwrap()
                .contains("retrying it will not help"));
        }
        let mut refusal = refusal(Reason::CostOverLimit, None);
        refusal.response = RefusalResponse::default()
            .cost_over_limit(StatusCode::BAD_REQUEST)
            .unwrap();
        assert_eq!(
            refuse::<()>(Some(refusal)).status(),
            StatusCode::BAD_REQUEST
        );
    }
}
