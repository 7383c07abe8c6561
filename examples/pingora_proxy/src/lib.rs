//! A pingora HTTP proxy that limits requests with a floodgate [`Limiter`], and answers them as
//! the crate's tower layer does for the same settings.
//!
//! [`LimitedProxy`] implements pingora's [`ProxyHttp`]. Its `request_filter` asks
//! [`LimitedProxy::decide`] what to do with each request:
//!
//! - key it ([`KeyBy`]): by its host ([`request_key`]), or by its client's address
//!   ([`client_key`], behind the proxies trusted); a request whose client cannot be told is
//!   refused with a bare 500 or served unlimited ([`Unidentified`]), as the layer's
//!   `ClientKey` does;
//! - charge it ([`CostBy`]): 1, or its body's bytes by the layer's `BodyBytes` rules
//!   ([`floodgate::fields::cost`]): `411 Length Required` for a body of unknown length unless
//!   one is charged a set number of bytes, and then held to it in `request_body_filter`;
//! - admitted: the [`OwnedPermit`] goes into the request's context ([`RequestCtx`]) and the
//!   request is proxied to the one configured upstream. pingora drops the context when it is
//!   done with the request, and the permit with it, which gives the in-flight slot back,
//!   whether the request succeeded, failed or the client went away. With
//!   [`Settings::ratelimit_on_admitted`], `response_filter` adds `RateLimit-Policy` and
//!   `RateLimit` to the origin's response;
//! - refused: the proxy answers itself ([`refusal_answer`]): 503 or 429 and the operator's body
//!   for a refusal a wait can cure, 413 for a cost over its limit, with `Retry-After` and the
//!   RateLimit fields of [`floodgate::fields::refusal`]. The upstream never sees the request.
//!
//! Everything the answers say comes from [`floodgate::fields`], which the crate's tower layer
//! uses too; `tests/parity.rs` sends the same requests through both and compares the answers.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use floodgate::fields::client::{ClientAddr, Unidentified as NoClient};
use floodgate::fields::cost::{declared_length, BodyCharge, UnknownLength, LENGTH_REQUIRED};
use floodgate::fields::host::request_host_key;
use floodgate::fields::ratelimit::{Policies, PolicyNames};
use floodgate::fields::refusal::{RefusalFields, RefusalKind, NEVER_FITS};
use floodgate::{Limiter, Outcome, OwnedPermit, Reason, Rejected};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::{HttpPeer, Result};
use pingora::proxy::{ProxyHttp, Session};
use pingora::{Error, ErrorType};

pub mod admin;

/// The `Content-Type` of the proxy's plain-text bodies.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// What a request is keyed by.
#[derive(Debug, Clone)]
pub enum KeyBy {
    /// Its host ([`request_key`]): one limit per origin host.
    Host,
    /// Its client's address ([`client_key`]), and what becomes of a request whose client
    /// cannot be told.
    Client(ClientAddr, Unidentified),
}

/// What becomes of a request whose client cannot be told (no peer address, or a trusted proxy
/// that forwarded something else than an address): as the layer's `Unkeyed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unidentified {
    /// `500 Internal Server Error`, empty: the server cannot tell who sent it (the default).
    Refuse,
    /// Served without being limited.
    Serve,
}

/// What a request counts in its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostBy {
    /// Every request counts 1.
    Unit,
    /// Its body's bytes (at least 1), a body of unknown length (chunked) charged or refused
    /// as said: the layer's `BodyBytes`.
    BodyBytes(UnknownLength),
}

/// The body of a refusal over a limit a wait can cure (over the rate, in flight).
#[derive(Debug, Clone)]
pub enum RefusalBody {
    /// Nothing: the layer's default.
    Empty,
    /// The same text for every refusal, as `text/plain`.
    Text(Bytes),
    /// Made from the refusal by a function ([`words`], [`problem_json`]), as the layer's
    /// `RefusalResponse::body_fn`: called for a cost over its limit too, whose text
    /// ([`NEVER_FITS`]) stays when the function gives none.
    Made(MakeBody),
}

/// A refusal as a body function sees it: what the answer says, to say it again in the body
/// (the layer's `Refused`, without its HTTP types).
#[derive(Debug, Clone, Copy)]
pub struct Refused<'a> {
    /// Why the request was refused, the count it was judged by and the limit.
    pub rejected: &'a Rejected,
    /// The key it was judged under.
    pub key: &'a str,
    /// The name of the policy that refused; `None` for a cost over its limit.
    pub policy: Option<&'a str>,
    /// The answer's status.
    pub status: u16,
    /// The seconds the answer's `Retry-After` says, if it has one.
    pub retry_after: Option<u64>,
}

/// A function from a refusal to its body's `Content-Type` and bytes; `None`: no body of its
/// own (empty, or [`NEVER_FITS`] for a cost over its limit).
pub type MakeBody = fn(&Refused<'_>) -> Option<(&'static str, Bytes)>;

/// The refusal in words (`Rejected`'s `Display`), as plain text; none of its own for a cost
/// over its limit, which keeps [`NEVER_FITS`].
pub fn words(refused: &Refused<'_>) -> Option<(&'static str, Bytes)> {
    if refused.rejected.reason == Reason::CostOverLimit {
        return None;
    }
    Some((TEXT_PLAIN, Bytes::from(format!("{}\n", refused.rejected))))
}

/// The refusal as a small JSON problem: the policy that refused, its quota and the seconds to
/// wait (`null` when unknown); none of its own for a cost over its limit.
pub fn problem_json(refused: &Refused<'_>) -> Option<(&'static str, Bytes)> {
    let policy = refused.policy?;
    // Policy names are printable ASCII without `"` or `\` once escaped: escape them for JSON.
    let policy = policy.replace('\\', "\\\\").replace('"', "\\\"");
    let retry = refused
        .retry_after
        .map_or_else(|| "null".to_owned(), |secs| secs.to_string());
    let json = format!(
        r#"{{"status":{},"policy":"{policy}","quota":{},"retry_after":{retry}}}"#,
        refused.status, refused.rejected.limit
    );
    Some(("application/problem+json", Bytes::from(json)))
}

/// How the proxy answers: the layer's switches, as plain values.
#[derive(Debug, Clone)]
pub struct Settings {
    /// What a request is keyed by.
    pub key: KeyBy,
    /// What a request costs.
    pub cost: CostBy,
    /// The status of a refusal a wait can cure: 503 (the default) or 429.
    pub status: u16,
    /// The status of a cost over its limit: 413 unless told otherwise.
    pub cost_over_limit: u16,
    /// The body of a refusal a wait can cure.
    pub body: RefusalBody,
    /// Whether refusals carry `RateLimit-Policy` and `RateLimit` (on by default).
    pub ratelimit_fields: bool,
    /// Whether admitted responses carry them too (off by default).
    pub ratelimit_on_admitted: bool,
    /// The names of the policies in those fields.
    pub names: PolicyNames,
    /// The most jitter added to `Retry-After`, in whole seconds.
    pub jitter_secs: u64,
}

impl Default for Settings {
    /// The layer's defaults: by host, every request 1, a bare 503 with the RateLimit fields,
    /// 413 for a cost over its limit, nothing on admitted responses, no jitter.
    fn default() -> Self {
        Settings {
            key: KeyBy::Host,
            cost: CostBy::Unit,
            status: 503,
            cost_over_limit: 413,
            body: RefusalBody::Empty,
            ratelimit_fields: true,
            ratelimit_on_admitted: false,
            names: PolicyNames::DEFAULT,
            jitter_secs: 0,
        }
    }
}

/// What the proxy tells of its requests: counts by what became of them, for the admin
/// listener's `/metrics` ([`admin`]).
#[derive(Debug, Default)]
pub struct Counters {
    /// Admitted and proxied.
    pub admitted: AtomicU64,
    /// Refused over the rate limit.
    pub rate: AtomicU64,
    /// Refused over the in-flight limit.
    pub inflight: AtomicU64,
    /// Refused because their cost alone is over a limit.
    pub cost_over_limit: AtomicU64,
    /// Refused for limits the limiter does not count (a 500).
    pub misconfigured: AtomicU64,
    /// Whose client could not be told, refused.
    pub unkeyed_refused: AtomicU64,
    /// Whose client could not be told, served unlimited.
    pub unkeyed_served: AtomicU64,
    /// Bodies of unknown length refused with 411.
    pub length_required: AtomicU64,
    /// Bodies cut for carrying more than they were charged.
    pub charge_exceeded: AtomicU64,
}

impl Counters {
    fn add(counter: &AtomicU64) {
        // Relaxed: independent counts, read for display only.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn refused(&self, reason: Reason) {
        Counters::add(match reason {
            Reason::Rate => &self.rate,
            Reason::Inflight => &self.inflight,
            Reason::CostOverLimit => &self.cost_over_limit,
            _ => &self.misconfigured,
        });
    }
}

/// The proxy: one limiter shared by every request, how it answers, and where admitted
/// requests go.
pub struct LimitedProxy {
    limiter: Limiter<String>,
    upstream: SocketAddr,
    settings: Settings,
    counters: Arc<Counters>,
}

impl LimitedProxy {
    /// A proxy that admits requests through `limiter` as the layer's defaults do and forwards
    /// them to `upstream` over plain HTTP.
    pub fn new(limiter: Limiter<String>, upstream: SocketAddr) -> Self {
        LimitedProxy::with_settings(limiter, upstream, Settings::default())
    }

    /// A proxy that answers as `settings` say.
    pub fn with_settings(
        limiter: Limiter<String>,
        upstream: SocketAddr,
        settings: Settings,
    ) -> Self {
        LimitedProxy {
            limiter,
            upstream,
            settings,
            counters: Arc::new(Counters::default()),
        }
    }

    /// Its counters, shared (for the admin listener).
    pub fn counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// What to do with `request` from `peer` (the connection's address; `None` when pingora
    /// has none, a Unix socket's peer): the whole decision, without writing anything.
    pub fn decide(&self, request: &RequestHeader, peer: Option<IpAddr>) -> Decision {
        let s = &self.settings;
        let key = match &s.key {
            KeyBy::Host => request_key(request),
            KeyBy::Client(addrs, unidentified) => match client_key(addrs, peer, request) {
                Ok(key) => key,
                Err(_) if *unidentified == Unidentified::Serve => {
                    Counters::add(&self.counters.unkeyed_served);
                    return Decision::Unlimited;
                }
                Err(_) => {
                    Counters::add(&self.counters.unkeyed_refused);
                    return Decision::Answer(Answer::bare(500));
                }
            },
        };
        let (cost, most) = match s.cost {
            CostBy::Unit => (1, None),
            CostBy::BodyBytes(unknown) => {
                let charge = BodyCharge::of(body_length(request), unknown);
                match charge.cost() {
                    Some(cost) => (cost, charge.most()),
                    None => {
                        Counters::add(&self.counters.length_required);
                        return Decision::Answer(Answer::text(411, LENGTH_REQUIRED));
                    }
                }
            }
        };
        // The limits as they are now: a `set_limits` between this read and the decision can
        // make the fields describe the limits just before (the layer reads them once, inside
        // the decision, which the limiter does not offer outside the crate).
        let policies = Policies::of(&self.limiter, None);
        match self.limiter.with_cost(cost).try_acquire_owned(key.as_str()) {
            Ok(permit) => {
                Counters::add(&self.counters.admitted);
                let fields = s.ratelimit_on_admitted.then(|| {
                    let estimate = self.limiter.estimate(key.as_str());
                    AdmittedFields {
                        policy: policies.policy_named(&s.names),
                        ratelimit: policies.admitted_named(&estimate, &s.names),
                    }
                });
                Decision::Admit(Admitted {
                    permit,
                    fields,
                    body_most: most,
                })
            }
            Err(rejected) => {
                self.counters.refused(rejected.reason);
                Decision::Answer(refusal_answer(&rejected, &key, &policies, s))
            }
        }
    }
}

/// What [`LimitedProxy::decide`] says of a request.
#[derive(Debug)]
pub enum Decision {
    /// Admitted under a key: proxied with this permit.
    Admit(Admitted),
    /// Its client could not be told, and such requests are served: proxied, unlimited.
    Unlimited,
    /// Answered by the proxy itself.
    Answer(Answer),
}

/// An admitted request.
#[derive(Debug)]
pub struct Admitted {
    /// Its place in the limiter.
    pub permit: OwnedPermit<String>,
    /// The RateLimit fields its response is to carry, if admitted responses carry them.
    pub fields: Option<AdmittedFields>,
    /// The most bytes its body may carry, when it is charged by its bytes.
    pub body_most: Option<u64>,
}

/// `RateLimit-Policy` and `RateLimit` for an admitted response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmittedFields {
    /// `RateLimit-Policy`.
    pub policy: Option<String>,
    /// `RateLimit`: the policy closest to its limit, with what it still lets through.
    pub ratelimit: Option<String>,
}

/// An answer the proxy gives itself: its status, fields and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: u16,
    /// `Retry-After`, `RateLimit-Policy`, `RateLimit`.
    pub fields: RefusalFields,
    /// The body and its `Content-Type`; `None`: empty.
    pub body: Option<(&'static str, Bytes)>,
}

impl Answer {
    /// `status`, nothing else.
    fn bare(status: u16) -> Answer {
        Answer {
            status,
            fields: RefusalFields::default(),
            body: None,
        }
    }

    /// `status` with `text` as a plain-text body.
    fn text(status: u16, text: &'static str) -> Answer {
        Answer {
            body: Some((TEXT_PLAIN, Bytes::from_static(text.as_bytes()))),
            ..Answer::bare(status)
        }
    }

    /// Its response head: the status, the fields, and `Content-Type` and `Content-Length`
    /// for its body.
    pub fn header(&self) -> Result<ResponseHeader> {
        let mut response = ResponseHeader::build(self.status, Some(6))?;
        if let Some(secs) = self.fields.retry_after {
            response.insert_header("retry-after", secs.to_string())?;
        }
        if let Some(policy) = &self.fields.policy {
            response.insert_header("ratelimit-policy", policy.as_str())?;
        }
        if let Some(limit) = &self.fields.ratelimit {
            response.insert_header("ratelimit", limit.as_str())?;
        }
        if let Some((content_type, _)) = &self.body {
            response.insert_header("content-type", *content_type)?;
        }
        let length = self.body.as_ref().map_or(0, |(_, body)| body.len());
        response.insert_header("content-length", length.to_string())?;
        Ok(response)
    }
}

/// The answer to a refused request, as the tower layer gives it for the same settings:
///
/// - over a limit a wait can cure: `settings.status` and its body, `Retry-After` where the
///   wait is known, `RateLimit-Policy` and `RateLimit` unless switched off;
/// - a cost alone over a limit: `settings.cost_over_limit`, no `Retry-After` nor `RateLimit`,
///   and [`NEVER_FITS`] unless a body function makes one;
/// - limits the limiter does not count: a bare 500.
pub fn refusal_answer(
    rejected: &Rejected,
    key: &str,
    policies: &Policies,
    settings: &Settings,
) -> Answer {
    let kind = RefusalKind::of(rejected);
    let status = match kind {
        RefusalKind::Misconfigured => return Answer::bare(500),
        RefusalKind::CostOverLimit => settings.cost_over_limit,
        RefusalKind::OverLimit => settings.status,
    };
    let fields = RefusalFields::of(
        rejected,
        policies,
        &settings.names,
        settings.jitter_secs,
        settings.ratelimit_fields,
    );
    let made = match &settings.body {
        RefusalBody::Made(make) => make(&Refused {
            rejected,
            key,
            policy: settings.names.of(rejected.reason),
            status,
            retry_after: fields.retry_after,
        }),
        RefusalBody::Empty | RefusalBody::Text(_) => None,
    };
    let body = made.or_else(|| match &settings.body {
        _ if kind == RefusalKind::CostOverLimit => {
            Some((TEXT_PLAIN, Bytes::from_static(NEVER_FITS.as_bytes())))
        }
        RefusalBody::Text(text) => Some((TEXT_PLAIN, text.clone())),
        RefusalBody::Empty | RefusalBody::Made(_) => None,
    });
    Answer {
        status,
        fields,
        body,
    }
}

/// What the proxy keeps for one request while pingora handles it.
#[derive(Debug, Default)]
pub struct RequestCtx {
    /// The admitted request's place in the limiter; `None` before `request_filter`, for a
    /// refused request and for one served unlimited. Dropped with the context, which ends the
    /// request's in-flight count.
    pub permit: Option<OwnedPermit<String>>,
    /// The RateLimit fields its response is to carry.
    pub fields: Option<AdmittedFields>,
    /// The bytes its body may still carry, when it is charged by its bytes.
    pub body_left: Option<u64>,
}

#[async_trait]
impl ProxyHttp for LimitedProxy {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        let peer = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip());
        match self.decide(session.req_header(), peer) {
            Decision::Admit(admitted) => {
                ctx.permit = Some(admitted.permit);
                ctx.fields = admitted.fields;
                ctx.body_left = admitted.body_most;
                Ok(false) // go on and proxy it
            }
            Decision::Unlimited => Ok(false),
            Decision::Answer(answer) => {
                let body = answer.body.as_ref().map(|(_, body)| body.clone());
                let header = answer.header()?;
                let empty = body.is_none();
                session
                    .write_response_header(Box::new(header), empty)
                    .await?;
                if let Some(body) = body {
                    session.write_response_body(Some(body), true).await?;
                }
                Ok(true) // answered here
            }
        }
    }

    /// Holds a charged body to its charge, as the layer's `ChargedBody`: the chunk that would
    /// go past it is not passed on, and the request ends with 413 (if the origin has not
    /// answered yet). HTTP/1 framing already stops a body at its `Content-Length`; this
    /// matters for chunked bodies charged a set number of bytes.
    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let (Some(left), Some(chunk)) = (ctx.body_left.as_mut(), body.as_ref()) else {
            return Ok(());
        };
        let len = chunk.len() as u64;
        if len > *left {
            *body = None;
            Counters::add(&self.counters.charge_exceeded);
            return Err(Error::explain(
                ErrorType::HTTPStatus(413),
                "the request body carries more bytes than it was charged",
            ));
        }
        *left -= len;
        Ok(())
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        _ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }

    /// Adds `RateLimit-Policy` and `RateLimit` to an admitted response when switched on:
    /// appended, as the layer does, so that the origin's own fields stay and ours join their
    /// lists.
    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        if let Some(fields) = ctx.fields.take() {
            if let Some(policy) = fields.policy {
                response.append_header("ratelimit-policy", policy)?;
            }
            if let Some(limit) = fields.ratelimit {
                response.append_header("ratelimit", limit)?;
            }
        }
        Ok(())
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

/// The limiter's key for a request by host: the host of its target's authority (HTTP/2,
/// absolute-form requests), else of its `Host` field, canonical ([`request_host_key`]): one
/// key per host however a client spells it. Requests with neither share the key `""`.
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

/// The limiter's key for a request by client: the address [`ClientAddr`] reads from `peer` and,
/// behind trusted proxies, from the forwarding field's lines in the order they came.
///
/// # Errors
///
/// Why its client cannot be told: no `peer`, or a trusted proxy that forwarded something
/// else than an address.
///
/// ```
/// use floodgate::fields::client::ClientAddr;
/// use floodgate_pingora_proxy::client_key;
/// use pingora::http::RequestHeader;
///
/// let addrs = ClientAddr::new().trust("127.0.0.0/8".parse().unwrap());
/// let mut request = RequestHeader::build("GET", b"/", None).unwrap();
/// request.append_header("x-forwarded-for", "6.6.6.6, 192.0.2.7").unwrap();
/// let key = client_key(&addrs, Some("127.0.0.1".parse().unwrap()), &request);
/// assert_eq!(key.unwrap(), "192.0.2.7/32");
/// assert!(client_key(&addrs, None, &request).is_err());
/// ```
pub fn client_key(
    addrs: &ClientAddr,
    peer: Option<IpAddr>,
    request: &RequestHeader,
) -> Result<String, NoClient> {
    let field = addrs.forwarding_field().name();
    let lines = request.headers.get_all(field).iter().map(|v| v.as_bytes());
    addrs.key(peer, lines)
}

/// The length a request's body declares: its `Content-Length` when every line of it is the
/// same number ([`declared_length`]); else, for a request that says no `Transfer-Encoding`
/// (HTTP/1 without a body), 0; else (chunked) unknown.
pub fn body_length(request: &RequestHeader) -> Option<u64> {
    let lengths = request.headers.get_all("content-length");
    if let Some(length) = declared_length(lengths.iter().map(|v| v.as_bytes())) {
        return Some(length);
    }
    let framed = request.headers.contains_key("transfer-encoding")
        || request.headers.contains_key("content-length");
    (!framed).then_some(0)
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

    #[test]
    fn a_body_is_as_long_as_it_says_empty_without_framing_and_unknown_when_chunked() {
        let request = |fields: &[(&str, &str)]| {
            let mut request = RequestHeader::build("POST", b"/", None).unwrap();
            for (name, value) in fields {
                request.append_header(name.to_string(), *value).unwrap();
            }
            body_length(&request)
        };
        assert_eq!(request(&[("content-length", "12")]), Some(12));
        assert_eq!(request(&[]), Some(0));
        assert_eq!(request(&[("transfer-encoding", "chunked")]), None);
        assert_eq!(request(&[("content-length", "1, 2")]), None);
    }
}
