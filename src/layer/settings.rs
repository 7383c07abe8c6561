//! What a service's responses say beyond its decision: the RateLimit fields of admitted
//! responses and the names of their policies, the jitter of `Retry-After`, and the refusal an
//! operator chose ([`RefusalResponse`]: its status, body and fields, and [`Refused`], what its
//! body function is given of each refusal). The layer's switches, copied into each service it
//! makes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::StatusCode;

use super::headers::Admitted;
#[cfg(doc)]
use super::LimitLayer;
use crate::fields::ratelimit::{Policies, PolicyNames};
use crate::{ConfigError, Limiter, Limits, Rejected};

/// The longest `Retry-After` jitter (see
/// [`LimitLayer::MAX_RETRY_AFTER_JITTER`](super::LimitLayer::MAX_RETRY_AFTER_JITTER)).
pub(super) const MAX_RETRY_AFTER_JITTER: Duration = Duration::from_secs(3_600);

/// How a [`LimitLayer`] answers a request over a limit: `503 Service Unavailable` by default,
/// or `429 Too Many Requests` (what the RateLimit draft recommends for a client over its
/// quota), with an empty body or one of the operator's, with or without the `RateLimit-Policy`
/// and `RateLimit` fields.
///
/// Refusals over a limit that a wait can cure ([`Reason::Inflight`](crate::Reason::Inflight),
/// [`Reason::Rate`](crate::Reason::Rate)) answer with its status and body. A request whose
/// cost alone is over a limit ([`Reason::CostOverLimit`](crate::Reason::CostOverLimit)) can
/// never be admitted, and is told so apart: `413 Content Too Large` by default (or the status
/// given to [`cost_over_limit`](Self::cost_over_limit)), no `Retry-After`, no `RateLimit`
/// field (`RateLimit-Policy` still says what the limits are), and a plain-text body saying
/// that retrying will not help (it names no number). Limits the limiter does not count are
/// the server's configuration error and stay a `500` without a body or fields. `Retry-After`
/// is sent whenever the wait is known, whatever the fields: HTTP defines it for both statuses
/// (RFC 9110 §10.2.3, RFC 6585 §4).
///
/// # Examples
///
/// ```
/// use floodgate::layer::{LimitLayer, RefusalResponse};
/// use floodgate::Limiter;
/// use http::header::HeaderValue;
///
/// let limiter: Limiter<String> = Limiter::builder().max_inflight(10).build().unwrap();
/// let layer = LimitLayer::new(limiter).refusal(
///     RefusalResponse::too_many_requests()
///         .body(HeaderValue::from_static("text/plain"), "slow down\n")
///         // The limits are a tenant's business: do not tell every client (draft §8.2).
///         .ratelimit_fields(false),
/// );
/// # let _ = layer;
/// ```
#[derive(Clone)]
pub struct RefusalResponse {
    pub(super) status: StatusCode,
    /// The status of a request whose cost is over a limit.
    pub(super) cost_over_limit: StatusCode,
    pub(super) body: RefusalBody,
    pub(super) ratelimit_fields: bool,
}

/// A refusal over a limit, as the operator's body function sees it
/// ([`RefusalResponse::body_fn`]): what the response says, to say it again in the body, in
/// words of the API's own.
///
/// Borrowed from the refusal while its response is built, when the response future is
/// polled.
///
/// # Examples
///
/// ```
/// use floodgate::layer::Refused;
/// use floodgate::Reason;
///
/// fn explain(refused: &Refused<'_>) -> String {
///     match (refused.rejected.reason, refused.retry_after) {
///         (Reason::Rate, Some(secs)) => format!("over {} requests: retry in {secs} s", refused.rejected.limit),
///         (Reason::CostOverLimit, _) => "too large for any quota: do not retry".to_owned(),
///         _ => format!("refused with {}", refused.status),
///     }
/// }
/// # let _ = explain;
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Refused<'a> {
    /// Why the request was refused, the count it was judged by, the limit, and the exact
    /// wait (`retry_after`, before rounding and jitter).
    pub rejected: &'a Rejected,
    /// The key it was judged under (a tenant's, a client's address: the operator decides
    /// whether the client may read it).
    pub key: &'a str,
    /// The limits it was judged against (its own, or the limiter's defaults then).
    pub limits: Limits,
    /// The limiter's rate interval, which a rate limit counts over.
    pub interval: Option<Duration>,
    /// The name of the policy that refused, as `RateLimit` names it; `None` for a cost over
    /// a limit.
    pub policy: Option<&'a str>,
    /// The response's status.
    pub status: StatusCode,
    /// The seconds the response's `Retry-After` says, jitter included; `None` when it has
    /// none (the wait is unknown, or no wait helps).
    pub retry_after: Option<u64>,
}

/// An operator's function from a refusal to its body and `Content-Type`.
type MakeBody = dyn Fn(&Refused<'_>) -> Option<(HeaderValue, Bytes)> + Send + Sync;

/// The body a refusal over a limit is answered with.
#[derive(Clone)]
pub(super) enum RefusalBody {
    /// Nothing (a cost over a limit still gets its own text).
    Empty,
    /// The same bytes for every refusal a wait can cure.
    Fixed(HeaderValue, Bytes),
    /// Made from each refusal by the operator's function.
    Made(Arc<MakeBody>),
}

impl std::fmt::Debug for RefusalResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body = match &self.body {
            RefusalBody::Empty => "empty",
            RefusalBody::Fixed(..) => "fixed",
            RefusalBody::Made(_) => "made by a function",
        };
        f.debug_struct("RefusalResponse")
            .field("status", &self.status)
            .field("cost_over_limit", &self.cost_over_limit)
            .field("body", &body)
            .field("ratelimit_fields", &self.ratelimit_fields)
            .finish()
    }
}

impl Default for RefusalResponse {
    fn default() -> Self {
        RefusalResponse::service_unavailable()
    }
}

impl RefusalResponse {
    /// `503 Service Unavailable`, an empty body, the RateLimit fields: the default. The
    /// status of a server protecting an origin that cannot take more.
    pub fn service_unavailable() -> Self {
        RefusalResponse {
            status: StatusCode::SERVICE_UNAVAILABLE,
            cost_over_limit: StatusCode::PAYLOAD_TOO_LARGE,
            body: RefusalBody::Empty,
            ratelimit_fields: true,
        }
    }

    /// `429 Too Many Requests`, an empty body, the RateLimit fields: the status of a client
    /// over its quota.
    pub fn too_many_requests() -> Self {
        RefusalResponse {
            status: StatusCode::TOO_MANY_REQUESTS,
            ..RefusalResponse::service_unavailable()
        }
    }

    /// The body of a refusal a wait can cure (over the rate or the in-flight limit), with its
    /// `Content-Type`. The same bytes for every refusal, never copied. Static bytes
    /// (`&'static str`, `HeaderValue::from_static`) cost a refusal nothing more; owned ones
    /// are shared, one reference count taken per refusal. The response body's data type must
    /// be made from `Bytes`, as hyper's and axum's are. A request whose cost is over a limit
    /// keeps its own body, which says retrying will not help. Replaces a
    /// [`body_fn`](Self::body_fn).
    pub fn body(self, content_type: HeaderValue, body: impl Into<Bytes>) -> Self {
        RefusalResponse {
            body: RefusalBody::Fixed(content_type, body.into()),
            ..self
        }
    }

    /// A refusal's body and `Content-Type`, made from the refusal by `body`: what the
    /// [`Refused`] says (the reason, the limit, the key, the `Retry-After` sent, the status),
    /// for a body that tells the client why and for how long, in the API's own format.
    /// Replaces a fixed [`body`](Self::body).
    ///
    /// It is called for every refusal over a limit, a cost over a limit included (its
    /// status says which), when the response is polled, never before: a refusal dropped
    /// unanswered costs nothing. `None` leaves the refusal as it would be without a body of
    /// the operator's (empty; for a cost over a limit, the text that says retrying will not
    /// help). Keep it cheap: a flood is mostly refusals. It should not panic; if it does, the
    /// panic is caught, the refusal is answered as for `None`, and the layer says so once, at
    /// error level, through the `log` facade. Catching it does not silence the process's panic
    /// hook, which still prints each panic (every refusal, under a flood), and a build with
    /// `panic = "abort"` aborts instead: make the function total.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use std::time::Duration;
    /// use floodgate::layer::{LimitLayer, RefusalResponse, Refused};
    /// use floodgate::{clock::ManualClock, Limiter, Reason};
    /// use http::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
    /// use http::{Request, Response, StatusCode};
    /// use http_body_util::BodyExt;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// /// A JSON problem, as the API's other errors are.
    /// fn problem(refused: &Refused<'_>) -> Option<(HeaderValue, bytes::Bytes)> {
    ///     let reason = match refused.rejected.reason {
    ///         Reason::Rate => "rate",
    ///         Reason::Inflight => "in-flight",
    ///         Reason::CostOverLimit => "too-large",
    ///         _ => return None,
    ///     };
    ///     let retry = refused.retry_after.map_or("null".to_owned(), |secs| secs.to_string());
    ///     let json = format!(
    ///         r#"{{"limit":"{reason}","quota":{},"retry_after":{retry}}}"#,
    ///         refused.rejected.limit
    ///     );
    ///     Some((HeaderValue::from_static("application/problem+json"), json.into()))
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let clock = ManualClock::new(); // a real proxy leaves this out
    /// let limiter = Limiter::builder()
    ///     .max_rate(1, Duration::from_secs(1))
    ///     .clock(&clock)
    ///     .build()
    ///     .unwrap();
    /// let layer = LimitLayer::new(limiter)
    ///     .refusal(RefusalResponse::too_many_requests().body_fn(problem));
    /// let origin = service_fn(|_: Request<String>| async { Ok::<_, Infallible>(Response::new(String::new())) });
    /// let service = layer.layer(origin);
    /// let request = || Request::builder().uri("http://api.example/").body(String::new()).unwrap();
    /// service.clone().oneshot(request()).await.unwrap();
    /// let refused = service.oneshot(request()).await.unwrap();
    /// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(refused.headers()[CONTENT_TYPE], "application/problem+json");
    /// assert_eq!(refused.headers()[RETRY_AFTER], "2");
    /// let body = refused.into_body().collect().await.unwrap().to_bytes();
    /// assert_eq!(&body[..], br#"{"limit":"rate","quota":1,"retry_after":2}"#);
    /// # }
    /// ```
    pub fn body_fn<G>(self, body: G) -> Self
    where
        G: Fn(&Refused<'_>) -> Option<(HeaderValue, Bytes)> + Send + Sync + 'static,
    {
        RefusalResponse {
            body: RefusalBody::Made(Arc::new(body)),
            ..self
        }
    }

    /// Whether a refusal carries `RateLimit-Policy` and `RateLimit` (on by default). Off, a
    /// refusal tells the client nothing of the limits beyond `Retry-After` (the draft's §8.2:
    /// the fields disclose what the limits are, which an operator may not want to).
    pub fn ratelimit_fields(self, on: bool) -> Self {
        RefusalResponse {
            ratelimit_fields: on,
            ..self
        }
    }

    /// The status a request whose cost alone is over a limit
    /// ([`Reason::CostOverLimit`](crate::Reason::CostOverLimit)) answers with: `413 Content
    /// Too Large` unless told otherwise (`400 Bad Request` or `422 Unprocessable Content`
    /// suit an API whose costs are not bytes). Whatever the status, the answer has no
    /// `Retry-After`: no wait admits the request.
    ///
    /// # Errors
    ///
    /// [`ConfigError::RefusalStatus`] for a status that is not a client or a server error
    /// (400 to 599): a refusal must not read as a success or a redirection.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::layer::RefusalResponse;
    /// use http::StatusCode;
    ///
    /// let refusal = RefusalResponse::too_many_requests()
    ///     .cost_over_limit(StatusCode::UNPROCESSABLE_ENTITY)
    ///     .unwrap();
    /// assert_eq!(refusal.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert!(RefusalResponse::default().cost_over_limit(StatusCode::OK).is_err());
    /// ```
    pub fn cost_over_limit(self, status: StatusCode) -> Result<Self, ConfigError> {
        if !(status.is_client_error() || status.is_server_error()) {
            return Err(ConfigError::RefusalStatus {
                status: status.as_u16(),
            });
        }
        Ok(RefusalResponse {
            cost_over_limit: status,
            ..self
        })
    }

    /// The status a refusal over a limit a wait can cure answers with.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

/// What a service says beyond its decision; the layer's switches, copied into each service.
#[derive(Debug, Clone, Default)]
pub(super) struct ResponseSettings {
    /// Send `RateLimit-Policy` and `RateLimit` on admitted responses too.
    pub(super) on_admitted: bool,
    /// The most jitter added to `Retry-After`, in whole seconds.
    pub(super) jitter_secs: u64,
    /// How a request over a limit is answered.
    pub(super) refusal: RefusalResponse,
    /// The names of the policies in the RateLimit fields.
    pub(super) names: PolicyNames,
}

impl ResponseSettings {
    /// A jitter of up to `max`, refused past the layer's
    /// [`MAX_RETRY_AFTER_JITTER`](super::LimitLayer::MAX_RETRY_AFTER_JITTER).
    pub(super) fn jitter(self, max: Duration) -> Result<Self, ConfigError> {
        if max > MAX_RETRY_AFTER_JITTER {
            return Err(ConfigError::RetryAfterJitter {
                asked: max,
                max: MAX_RETRY_AFTER_JITTER,
            });
        }
        Ok(ResponseSettings {
            // Retry-After counts whole seconds: a jitter is whole seconds too, never more
            // than asked for.
            jitter_secs: max.as_secs(),
            ..self
        })
    }

    pub(super) fn on_admitted(self, on: bool) -> Self {
        ResponseSettings {
            on_admitted: on,
            ..self
        }
    }

    pub(super) fn refusal(self, refusal: RefusalResponse) -> Self {
        ResponseSettings { refusal, ..self }
    }

    pub(super) fn names(self, names: PolicyNames) -> Self {
        ResponseSettings { names, ..self }
    }

    /// What the RateLimit fields of an admitted response say, if admitted responses carry
    /// them: the key's counts with this request in them. A second lookup of the key, so only
    /// when switched on.
    pub(super) fn admitted(
        &self,
        limiter: &Limiter<String>,
        key: &str,
        policies: Policies,
    ) -> Option<Admitted> {
        self.on_admitted.then(|| Admitted {
            policies,
            estimate: limiter.estimate(key),
            names: self.names.clone(),
        })
    }
}
