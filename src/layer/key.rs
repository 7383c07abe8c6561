//! The request keys: [`KeyExtractor`], and [`HostKey`] with the host canonicalisation behind it
//! (one key per host, however it is spelled, and never longer than [`HostKey::MAX_LEN`]); a
//! request an extractor cannot key ([`NoKey`]) and what the layer does with it ([`Unkeyed`]).

use std::borrow::Cow;

use http::header::{HeaderValue, HOST};
use http::uri::Authority;
use http::Request;

use crate::fields;

#[cfg(doc)]
use super::LimitService;

/// Where a [`LimitService`] takes a request's key from.
///
/// Implemented by [`HostKey`] (the default), [`ClientKey`](super::ClientKey) and every closure
/// `Fn(&Request<B>) -> String`. Implement it yourself to key without allocating, for example
/// on an origin id that an earlier layer put in the request's extensions, or to say that a
/// request has no key rather than give it one that others would share ([`NoKey`]).
///
/// # Examples
///
/// ```
/// use floodgate::{layer::HostKey, layer::KeyExtractor};
/// use http::Request;
///
/// let by_tenant = |req: &Request<()>| {
///     let tenant = req.headers().get("x-tenant").and_then(|v| v.to_str().ok());
///     let host = HostKey.key(req).unwrap(); // never fails
///     format!("{}/{}", tenant.unwrap_or("-"), host)
/// };
/// let req = Request::builder()
///     .uri("/")
///     .header("host", "api.example")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap();
/// assert_eq!(by_tenant.key(&req).unwrap(), "acme/api.example");
/// ```
pub trait KeyExtractor<B> {
    /// The limiter key of `req`.
    ///
    /// # Errors
    ///
    /// [`NoKey`] for a request this extractor cannot key: the layer does with it what the
    /// error says, and logs why (once).
    fn key<'r>(&self, req: &'r Request<B>) -> Result<Cow<'r, str>, NoKey>;
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> String,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Result<Cow<'r, str>, NoKey> {
        Ok(Cow::Owned(self(req)))
    }
}

/// A request a [`KeyExtractor`] cannot key (a [`ClientKey`](super::ClientKey)'s request
/// without a peer address, say), rather than give it a key that requests of others would
/// share: why, and what the layer does with it.
///
/// The layer logs `why` at error level through the `log` facade, once per process for each
/// distinct `why`, counts the request with the `metrics` feature
/// (`floodgate_unkeyed_requests_total`, labelled with the limiter's name and `then`:
/// `refused` or `served`), and answers it as `then` says. A refusal carries the `NoKey` in
/// its extensions, for an outer layer that logs or counts (an outer `LimitLayer` takes its
/// own admission back, as for any refusal further in).
///
/// # Examples
///
/// ```
/// use std::borrow::Cow;
/// use floodgate::layer::{KeyExtractor, NoKey, Unkeyed};
/// use http::Request;
///
/// /// Keys by the `x-api-key` field; a request without one is refused.
/// struct ApiKey;
///
/// impl<B> KeyExtractor<B> for ApiKey {
///     fn key<'r>(&self, req: &'r Request<B>) -> Result<Cow<'r, str>, NoKey> {
///         match req.headers().get("x-api-key").and_then(|v| v.to_str().ok()) {
///             Some(key) => Ok(Cow::Borrowed(key)),
///             None => Err(NoKey { why: "no x-api-key field", then: Unkeyed::Refuse }),
///         }
///     }
/// }
///
/// let req = Request::builder().body(()).unwrap();
/// assert_eq!(ApiKey.key(&req).unwrap_err().then, Unkeyed::Refuse);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NoKey {
    /// What is wrong and what to do about it, for the log line.
    pub why: &'static str,
    /// What the layer does with the request.
    pub then: Unkeyed,
}

/// What a layer does with a request that has no key ([`NoKey`]): nothing shares a key with it
/// either way.
///
/// # Examples
///
/// ```
/// use floodgate::layer::Unkeyed;
///
/// assert_eq!(Unkeyed::default(), Unkeyed::Refuse);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Unkeyed {
    /// Refuse it with `500 Internal Server Error` (the inner service is not called), with an
    /// empty body: the server cannot tell who sent it, which is the server's configuration to
    /// fix, not the client's doing. The default.
    #[default]
    Refuse,
    /// Serve it without limiting it: the inner service is called, nothing is counted.
    Serve,
}

/// The default key: the host the request is for, in one canonical spelling, and at most
/// [`HostKey::MAX_LEN`] bytes long.
///
/// The host comes from the request target's authority when it has one (HTTP/2's
/// `:authority`, or an HTTP/1.1 request in absolute form, where RFC 9112 §3.2.2 says the
/// `Host` header must be ignored), and from the `Host` header otherwise. A request with
/// neither (or with a `Host` header that is not visible ASCII, or that names no host) gets the
/// key [`HostKey::FALLBACK`], `""`: all such requests share one limit.
///
/// # One host, one key
///
/// A client can spell one host many ways, and each spelling with a key of its own would be a
/// fresh limit for a flooder. So the key drops what does not change the host:
///
/// - surrounding spaces and tabs, user info (`user@`), and the port (`:443`, `:0080`, an
///   empty `:`): one host on two ports shares one limit (key with a closure if your origins
///   are host *and* port);
/// - all trailing dots (`api.example..`), including percent-encoded ones;
/// - case (`API.Example`), and the percent-encoding of unreserved characters (`%61pi.example`,
///   RFC 3986 §6.2.2.2); other escapes stay, with lower-case hex digits;
/// - for an IPv6 literal, bracketed or not (`[0:0::1]:8080`, `::1`): its spelling, which
///   becomes the RFC 5952 form in brackets (`[::1]`). An unbracketed literal has no port: its
///   last group is part of the address.
///
/// Merging spellings never helps an attacker, who can name any host anyway.
///
/// # Bounded size
///
/// The client chooses the host, so it must not choose the key's size (the limiter keeps up to
/// a fixed number of keys in its exact stage). A DNS name is at most 253 bytes: a host up to
/// that long is its own key. A longer host (no real name, so a probe or a flood) has the key
/// *its first 253 bytes*, `#`, and 32 hex digits of a 128-bit keyed hash of the whole host
/// (std's `RandomState`, with keys random per process). So every key is at most
/// [`MAX_LEN`](HostKey::MAX_LEN) (286) bytes, two long hosts that are not spellings of one
/// another get different keys even when they differ only in their last byte (but for a
/// 2⁻¹²⁸ chance no attacker can steer), and a long host's key, longer than 253 bytes, is
/// never a short host's.
///
/// Spaces, user info, port and trailing dots are cut off, not copied: the key allocates only
/// for a host with upper-case letters or a percent sign, an IPv6 literal not already in its
/// bracketed RFC 5952 form, or a host longer than 253 bytes.
///
/// # Examples
///
/// ```
/// use floodgate::{layer::HostKey, layer::KeyExtractor};
/// use http::Request;
///
/// let req = |uri: &str, host: Option<&str>| {
///     let mut req = Request::builder().uri(uri);
///     if let Some(host) = host {
///         req = req.header("host", host);
///     }
///     req.body(()).unwrap()
/// };
/// let key = |uri: &str, host: Option<&str>| HostKey.key(&req(uri, host)).unwrap().into_owned();
/// assert_eq!(key("/", Some("API.Example:8080")), "api.example");
/// assert_eq!(key("/", Some("api.example..:")), "api.example");
/// assert_eq!(key("/", Some("[0:0::1]:8080")), "[::1]");
/// assert_eq!(key("http://a.example/x", Some("b.example")), "a.example");
/// assert_eq!(key("/", None), HostKey::FALLBACK);
///
/// let long = "a".repeat(10_000);
/// let key = key("/", Some(&long));
/// assert_eq!(key.len(), HostKey::MAX_LEN);
/// assert!(key.starts_with(&long[..253]));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKey;

impl HostKey {
    /// The key of requests that name no host.
    pub const FALLBACK: &'static str = fields::host::FALLBACK;

    /// The longest key [`HostKey`] gives, in bytes: 253 (the longest DNS name), `#` and 32 hex
    /// digits of a hash, for hosts longer than 253 bytes.
    pub const MAX_LEN: usize = fields::host::MAX_LEN;
}

/// Never fails: every request has a host key, [`HostKey::FALLBACK`] at worst.
impl<B> KeyExtractor<B> for HostKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Result<Cow<'r, str>, NoKey> {
        Ok(fields::host::request_host_key(
            req.uri().authority().map(Authority::as_str),
            req.headers().get(HOST).map(HeaderValue::as_bytes),
        ))
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    fn key(uri: &str, host: Option<&[u8]>) -> String {
        let mut req = Request::builder().uri(uri);
        if let Some(host) = host {
            req = req.header(HOST, HeaderValue::from_bytes(host).unwrap());
        }
        HostKey.key(&req.body(()).unwrap()).unwrap().into_owned()
    }

    #[test]
    fn host_key_normalises_spellings_of_one_host() {
        for host in [
            &b"api.example"[..],
            b"API.Example",
            b"api.example.",
            b"api.example:80",
            b"api.example:0080",
            b"user@api.example:443",
        ] {
            assert_eq!(key("/", Some(host)), "api.example", "{host:?}");
        }
        assert_eq!(key("/", Some(b"[::1]:8080")), "[::1]");
        assert_eq!(key("/", Some(b"[::1")), "[::1");
        for host in [
            &b"api.example.."[..],
            b"api.example:",
            b" api.example\t",
            b"%61pi.example",
            b"api.example%2E",
            b"u:p@API.example.:8080",
        ] {
            assert_eq!(key("/", Some(host)), "api.example", "{host:?}");
        }
        assert_eq!(key("/", Some(b"::1")), "[::1]");
        assert_eq!(key("http://[0:0::1]:8080/", None), "[::1]");
    }

    #[test]
    fn host_key_prefers_the_request_target_authority_to_the_host_header() {
        assert_eq!(
            key("http://A.example:8080/x", Some(b"b.example")),
            "a.example"
        );
        assert_eq!(key("http://a.example/x", None), "a.example");
    }

    #[test]
    fn host_key_falls_back_without_a_usable_host() {
        assert_eq!(key("/", None), HostKey::FALLBACK);
        assert_eq!(key("/", Some(b"\xffbad")), HostKey::FALLBACK);
        assert_eq!(key("/", Some(b"")), HostKey::FALLBACK);
    }
}
