//! A pingora HTTP proxy that limits each Host with a floodgate [`Limiter`].
//!
//! [`LimitedProxy`] implements pingora's [`ProxyHttp`]. Its `request_filter` keys every
//! request by its host ([`host_key`]) and asks the limiter for a permit:
//!
//! - admitted: the [`OwnedPermit`] goes into the request's context ([`RequestCtx`]) and the
//!   request is proxied to the one configured upstream. pingora drops the context when it is
//!   done with the request, and the permit with it, which gives the in-flight slot back,
//!   whether the request succeeded, failed or the client went away;
//! - rejected: the proxy answers `503 Service Unavailable` itself, with `Retry-After` in whole
//!   seconds ([`retry_after_secs`]), and the upstream never sees the request.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use floodgate::{Limiter, OwnedPermit, Rejected};
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
                respond_unavailable(session, &rejected).await?;
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
}

/// Writes the 503 for a rejected request: `Retry-After`, and the rejection in words.
async fn respond_unavailable(session: &mut Session, rejected: &Rejected) -> Result<()> {
    let body = Bytes::from(format!("{rejected}\n"));
    let mut response = ResponseHeader::build(503, Some(4))?;
    response.insert_header("retry-after", retry_after_secs(rejected).to_string())?;
    response.insert_header("content-type", "text/plain; charset=utf-8")?;
    response.insert_header("content-length", body.len().to_string())?;
    session
        .write_response_header(Box::new(response), false)
        .await?;
    session.write_response_body(Some(body), true).await
}

/// The limiter's key for a request: the host of its `Host` header, or of its URI's authority
/// (HTTP/2, absolute-form requests) when it has no `Host`; see [`host_key`]. Requests with
/// neither share the key `""`.
pub fn request_key(request: &RequestHeader) -> String {
    match request.headers.get("host") {
        Some(value) => host_key(&String::from_utf8_lossy(value.as_bytes())),
        None => host_key(request.uri.authority().map_or("", |a| a.as_str())),
    }
}

/// One key per host however the client spells it: without the port (and any user info),
/// lower-cased and trimmed. An IPv6 literal keeps its brackets (`[::1]:8080` is `[::1]`).
///
/// ```
/// use floodgate_pingora_proxy::host_key;
///
/// assert_eq!(host_key("Example.COM:8080"), "example.com");
/// assert_eq!(host_key("[::1]:8080"), "[::1]");
/// ```
pub fn host_key(authority: &str) -> String {
    let authority = authority.trim();
    let host = authority.rsplit('@').next().unwrap_or(authority);
    let host = if host.starts_with('[') {
        // `[v6]` or `[v6]:port`: up to the closing bracket.
        host.find(']').map_or(host, |end| &host[..=end])
    } else if host.matches(':').count() == 1 {
        host.split_once(':').map_or(host, |(name, _port)| name)
    } else {
        // A name without a port, or an unbracketed IPv6 literal (which has no port).
        host
    };
    host.to_ascii_lowercase()
}

/// `Retry-After` in whole seconds: the limiter's `retry_after` rounded up, so that a client
/// that waits that long is never early, and at least 1. In-flight rejections have no
/// `retry_after` (a slot frees when some other request finishes): they get 1.
pub fn retry_after_secs(rejected: &Rejected) -> u64 {
    rejected.retry_after.map_or(1, whole_seconds_up).max(1)
}

fn whole_seconds_up(wait: Duration) -> u64 {
    let secs = wait.as_secs();
    if wait.subsec_nanos() > 0 {
        secs.saturating_add(1)
    } else {
        secs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use floodgate::Reason;

    #[test]
    fn host_keys_drop_the_port_and_the_case() {
        assert_eq!(host_key("example.com"), "example.com");
        assert_eq!(host_key(" Example.COM:8080 "), "example.com");
        assert_eq!(host_key("user@Example.com:1"), "example.com");
        assert_eq!(host_key("127.0.0.1:6188"), "127.0.0.1");
        assert_eq!(host_key("[::1]:8080"), "[::1]");
        assert_eq!(host_key("[FE80::1]"), "[fe80::1]");
        assert_eq!(host_key("::1"), "::1");
        assert_eq!(host_key(""), "");
    }

    #[test]
    fn the_key_comes_from_host_then_from_the_uri() {
        let mut with_host = RequestHeader::build("GET", b"/", None).unwrap();
        with_host.insert_header("host", "Origin.Test:80").unwrap();
        assert_eq!(request_key(&with_host), "origin.test");

        // As an HTTP/2 request arrives: the authority in the URI, no Host header.
        let mut h2 = RequestHeader::build("GET", b"/", None).unwrap();
        h2.set_uri("http://Other.Test:81/x".parse().unwrap());
        assert_eq!(request_key(&h2), "other.test");

        let neither = RequestHeader::build("GET", b"/", None).unwrap();
        assert_eq!(request_key(&neither), "");
    }

    /// A rate rejection from a real limiter: 1 request per second, the second one rejected.
    fn rate_rejection() -> Rejected {
        let limiter: Limiter<String> = Limiter::builder()
            .max_rate(1, Duration::from_secs(1))
            .build()
            .unwrap();
        let _first = limiter.try_acquire("k").unwrap();
        limiter.try_acquire("k").unwrap_err()
    }

    #[test]
    fn retry_after_rounds_up_and_is_at_least_one_second() {
        let rejected = rate_rejection();
        assert_eq!(rejected.reason, Reason::Rate);
        let wait = rejected
            .retry_after
            .expect("a rate rejection says when to retry");
        let secs = retry_after_secs(&rejected);
        assert!(
            Duration::from_secs(secs) >= wait,
            "{secs} s is before {wait:?}"
        );
        assert!(Duration::from_secs(secs) < wait + Duration::from_secs(1));

        assert_eq!(whole_seconds_up(Duration::from_millis(1)), 1);
        assert_eq!(whole_seconds_up(Duration::from_millis(1000)), 1);
        assert_eq!(whole_seconds_up(Duration::from_millis(1001)), 2);
        assert_eq!(whole_seconds_up(Duration::ZERO), 0);
        assert_eq!(whole_seconds_up(Duration::MAX), u64::MAX);
    }

    #[test]
    fn inflight_rejections_say_one_second() {
        let limiter: Limiter<String> = Limiter::builder().max_inflight(1).build().unwrap();
        let _held = limiter.try_acquire("k").unwrap();
        let rejected = limiter.try_acquire("k").unwrap_err();
        assert_eq!(
            (rejected.reason, rejected.retry_after),
            (Reason::Inflight, None)
        );
        assert_eq!(retry_after_secs(&rejected), 1);
    }
}
