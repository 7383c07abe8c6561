//! A pingora HTTP proxy that limits each Host with a floodgate [`Limiter`].
//!
//! [`LimitedProxy`] implements pingora's [`ProxyHttp`]. Its `request_filter` keys every
//! request by its host ([`request_key`]) and asks the limiter for a permit:
//!
//! - admitted: the [`OwnedPermit`] goes into the request's context ([`RequestCtx`]) and the
//!   request is proxied to the one configured upstream. pingora drops the context when it is
//!   done with the request, and the permit with it, which gives the in-flight slot back,
//!   whether the request succeeded, failed or the client went away;
//! - rejected: the proxy answers `503 Service Unavailable` itself ([`refusal_header`]) and the
//!   upstream never sees the request.
//!
//! The key and the refusal's fields come from [`floodgate::fields`], which the crate's tower
//! layer uses too: this proxy and a `LimitLayer` key the same requests alike and refuse them
//! with the same `Retry-After`, `RateLimit-Policy` and `RateLimit` (`tests/parity.rs`).

use std::net::SocketAddr;

use async_trait::async_trait;
use bytes::Bytes;
use floodgate::fields::{host::request_host_key, ratelimit::Policies, retry::retry_after_secs};
use floodgate::{Limiter, Outcome, OwnedPermit, Rejected};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Result};
use pingora::proxy::{ProxyHttp, Session};

/// The proxy: one limiter shared by every request, and where admitted requests go.
pub struct LimitedProxy {
    limiter: Limiter<String>,
    upstream: SocketAddr,
}

impl LimitedProxy {
    /// A proxy that admits requests through `limiter` and forwards them to `upstream` over
    /// plain HTTP.
    pub fn new(limiter: Limiter<String>, upstream: SocketAddr) -> Self {
        LimitedProxy { limiter, upstream }
    }
}

/// What the proxy keeps for one request while pingora handles it.
#[derive(Debug, Default)]
pub struct RequestCtx {
    /// The admitted request's place in the limiter; `None` before `request_filter` and for a
    /// rejected request. Dropped with the context, which ends the request's in-flight count.
    pub permit: Option<OwnedPermit<String>>,
}

#[async_trait]
impl ProxyHttp for LimitedProxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let key = request_key(session.req_header());
        match self.limiter.try_acquire_owned(key.as_str()) {
            Ok(permit) => {
                ctx.permit = Some(permit);
                Ok(false) // go on and proxy it
            }
            Err(rejected) => {
                let policies = Policies::of(&self.limiter, None);
                respond_unavailable(session, &rejected, &policies).await?;
                Ok(true) // answered here
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }

    /// The request is over: what the origin answered goes on the permit before the context
    /// drops it, for a host whose in-flight limit is learnt from its latency
    /// (`LimiterBuilder::adaptive_inflight`), as the tower layer does.
    async fn logging(
        &self,
        session: &mut Session,
        e: Option<&pingora::Error>,
        ctx: &mut RequestCtx,
    ) {
        if let Some(permit) = ctx.permit.as_mut() {
            let status = session.response_written().map(|r| r.status.as_u16());
            let upstream = e.is_some_and(|e| e.esource == pingora::ErrorSource::Upstream);
            permit.record(origin_outcome(upstream, status));
        }
    }
}

/// What a proxied request says of its origin: an error of the upstream (`error`: a timeout, a
/// refused connection; not the client's going away) or a 5xx is its overload; anything else,
/// a success whose latency counts.
///
/// ```
/// use floodgate::Outcome;
/// use floodgate_pingora_proxy::origin_outcome;
///
/// assert_eq!(origin_outcome(false, Some(200)), Outcome::Success);
/// assert_eq!(origin_outcome(false, Some(503)), Outcome::Overload);
/// assert_eq!(origin_outcome(true, None), Outcome::Overload);
/// ```
pub fn origin_outcome(error: bool, status: Option<u16>) -> Outcome {
    if error || status.is_some_and(|s| (500..600).contains(&s)) {
        Outcome::Overload
    } else {
        Outcome::Success
    }
}

/// Writes the 503 for a rejected request, with the rejection in words as its body.
async fn respond_unavailable(
    session: &mut Session,
    rejected: &Rejected,
    policies: &Policies,
) -> Result<()> {
    let body = Bytes::from(format!("{rejected}\n"));
    let mut response = refusal_header(rejected, policies)?;
    response.insert_header("content-type", "text/plain; charset=utf-8")?;
    response.insert_header("content-length", body.len().to_string())?;
    session
        .write_response_header(Box::new(response), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// The head of the answer to a refused request, as the tower layer answers it by default:
/// `503`, `Retry-After` where the wait is known (a rate refusal; none for an in-flight one,
/// which waits for other requests to finish), and the `RateLimit-Policy` and `RateLimit`
/// fields of the limits that refused it.
pub fn refusal_header(rejected: &Rejected, policies: &Policies) -> Result<ResponseHeader> {
    let mut response = ResponseHeader::build(503, Some(4))?;
    if let Some(secs) = retry_after_secs(rejected, 0) {
        response.insert_header("retry-after", secs.to_string())?;
    }
    if let Some(policy) = policies.policy() {
        response.insert_header("ratelimit-policy", policy)?;
    }
    if let Some(limit) = policies.refused(rejected) {
        response.insert_header("ratelimit", limit)?;
    }
    Ok(response)
}

/// The limiter's key for a request: the host of its target's authority (HTTP/2, absolute-form
/// requests), else of its `Host` field, canonical ([`request_host_key`]): one key per host
/// however a client spells it. Requests with neither share the key `""`.
///
/// ```
/// use floodgate_pingora_proxy::request_key;
/// use pingora::http::RequestHeader;
///
/// let mut request = RequestHeader::build("GET", b"/", None).unwrap();
/// request.insert_header("host", "Example.COM.:8080").unwrap();
/// assert_eq!(request_key(&request), "example.com");
/// ```
pub fn request_key(request: &RequestHeader) -> String {
    let authority = request.uri.authority().map(|a| a.as_str());
    let host = request.headers.get("host").map(|v| v.as_bytes());
    request_host_key(authority, host).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key_of(host: &str) -> String {
        let mut request = RequestHeader::build("GET", b"/", None).unwrap();
        request.insert_header("host", host).unwrap();
        request_key(&request)
    }

    #[test]
    fn host_keys_drop_the_port_the_case_and_trailing_dots() {
        assert_eq!(key_of("example.com"), "example.com");
        assert_eq!(key_of(" Example.COM:8080 "), "example.com");
        assert_eq!(key_of("user@Example.com.:1"), "example.com");
        assert_eq!(key_of("127.0.0.1:6188"), "127.0.0.1");
        assert_eq!(key_of("[0:0::1]:8080"), "[::1]");
        assert_eq!(key_of("[FE80::1]"), "[fe80::1]");
        assert_eq!(key_of(&"a".repeat(1000)).len(), 286);
    }

    #[test]
    fn the_key_comes_from_the_uri_then_from_host() {
        let mut with_host = RequestHeader::build("GET", b"/", None).unwrap();
        with_host.insert_header("host", "Origin.Test:80").unwrap();
        assert_eq!(request_key(&with_host), "origin.test");

        // As an HTTP/2 request arrives: the authority in the URI.
        let mut h2 = RequestHeader::build("GET", b"/", None).unwrap();
        h2.set_uri("http://Other.Test:81/x".parse().unwrap());
        h2.insert_header("host", "origin.test").unwrap();
        assert_eq!(request_key(&h2), "other.test");

        let neither = RequestHeader::build("GET", b"/", None).unwrap();
        assert_eq!(request_key(&neither), "");
    }
}
