//! The request keys: [`KeyExtractor`], and [`HostKey`] with the host canonicalisation behind it
//! (one key per host, however it is spelled, and never longer than [`HostKey::MAX_LEN`]).

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv6Addr;
use std::sync::OnceLock;

use http::header::HOST;
use http::Request;

#[cfg(doc)]
use super::LimitService;

/// Where a [`LimitService`] takes a request's key from.
///
/// Implemented by [`HostKey`] (the default) and by every closure
/// `Fn(&Request<B>) -> String`. Implement it yourself to key without allocating, for example
/// on an origin id that an earlier layer put in the request's extensions.
///
/// # Examples
///
/// ```
/// use floodgate::{layer::HostKey, layer::KeyExtractor};
/// use http::Request;
///
/// let by_tenant = |req: &Request<()>| {
///     let tenant = req.headers().get("x-tenant").and_then(|v| v.to_str().ok());
///     format!("{}/{}", tenant.unwrap_or("-"), HostKey.key(req))
/// };
/// let req = Request::builder()
///     .uri("/")
///     .header("host", "api.example")
///     .header("x-tenant", "acme")
///     .body(())
///     .unwrap();
/// assert_eq!(by_tenant.key(&req), "acme/api.example");
/// ```
pub trait KeyExtractor<B> {
    /// The limiter key of `req`.
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str>;
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> String,
{
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        Cow::Owned(self(req))
    }
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
/// assert_eq!(HostKey.key(&req("/", Some("API.Example:8080"))), "api.example");
/// assert_eq!(HostKey.key(&req("/", Some("api.example..:"))), "api.example");
/// assert_eq!(HostKey.key(&req("/", Some("[0:0::1]:8080"))), "[::1]");
/// assert_eq!(HostKey.key(&req("http://a.example/x", Some("b.example"))), "a.example");
/// assert_eq!(HostKey.key(&req("/", None)), HostKey::FALLBACK);
///
/// let long = "a".repeat(10_000);
/// let key = HostKey.key(&req("/", Some(&long))).into_owned();
/// assert_eq!(key.len(), HostKey::MAX_LEN);
/// assert!(key.starts_with(&long[..253]));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HostKey;

impl HostKey {
    /// The key of requests that name no host.
    pub const FALLBACK: &'static str = "";

    /// The longest key [`HostKey`] gives, in bytes: 253 (the longest DNS name), `#` and 32 hex
    /// digits of a hash, for hosts longer than 253 bytes.
    pub const MAX_LEN: usize = MAX_NAME_LEN + 1 + 32;
}

/// The longest DNS name (RFC 1035 §2.3.4, without the trailing dot): hosts up to this long are
/// their own keys.
const MAX_NAME_LEN: usize = 253;

impl<B> KeyExtractor<B> for HostKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        let host = match req.uri().authority() {
            Some(authority) => authority.host(),
            None => match req.headers().get(HOST).and_then(|v| v.to_str().ok()) {
                Some(value) => host_of(value),
                None => return Cow::Borrowed(Self::FALLBACK),
            },
        };
        key_of_host(host)
    }
}

/// The host part of a `Host` header value: without surrounding spaces, user info and port.
/// IPv6 literals keep their brackets, as in [`http::uri::Authority::host`]; an unbracketed one
/// (two colons or more) has no port to strip.
fn host_of(value: &str) -> &str {
    let value = value.trim_matches(is_space);
    let value = value.rsplit('@').next().unwrap_or(value);
    if value.starts_with('[') {
        // `]` is ASCII, so `i + 1` is a char boundary within the string.
        return match value.find(']') {
            Some(i) => value.get(..i + 1).unwrap_or(value),
            None => value,
        };
    }
    match value.split_once(':') {
        // Whatever follows the only colon is a port, valid or not: `h:x` is no other host.
        Some((host, port)) if !port.contains(':') => host,
        _ => value,
    }
}

fn is_space(c: char) -> bool {
    c == ' ' || c == '\t'
}

/// The key of a host (user info and port already gone): see [`HostKey`].
fn key_of_host(host: &str) -> Cow<'_, str> {
    // Both sources are ASCII (`HeaderValue::to_str` and `Authority` ensure it); the code
    // below relies on it to push bytes as chars, so anything else shares the fallback.
    if !host.is_ascii() {
        return Cow::Borrowed(HostKey::FALLBACK);
    }
    let host = trim_host(host);
    if let Some(key) = ipv6_key(host) {
        return key;
    }
    let plain = !host.bytes().any(|b| b.is_ascii_uppercase() || b == b'%');
    if plain && host.len() <= MAX_NAME_LEN {
        return Cow::Borrowed(host);
    }
    let mut canonical = Canonical::new(host);
    let mut key = String::with_capacity(host.len().min(HostKey::MAX_LEN));
    key.extend(canonical.by_ref().take(MAX_NAME_LEN).map(char::from));
    if canonical.next().is_some() {
        let [a, b] = long_name_hash(host);
        // Writing to a String cannot fail.
        let _ = write!(key, "#{a:016x}{b:016x}");
    }
    Cow::Owned(key)
}

/// `host` without surrounding spaces and trailing dots, plain or percent-encoded (`%2e`): a
/// fully qualified name and its relative spelling are one host.
fn trim_host(host: &str) -> &str {
    let mut host = host.trim_matches(is_space);
    loop {
        host = host.trim_end_matches(|c| c == '.' || is_space(c));
        let Some(cut) = host.len().checked_sub(3) else {
            return host;
        };
        match (host.get(..cut), host.get(cut..)) {
            (Some(rest), Some(tail)) if tail.eq_ignore_ascii_case("%2e") => host = rest,
            _ => return host,
        }
    }
}

/// The key of an IPv6 literal, bracketed or (with two colons or more) not: the address in
/// RFC 5952 form, bracketed, as `Authority::host` spells it. `None` if `host` is no IPv6
/// literal.
fn ipv6_key(host: &str) -> Option<Cow<'_, str>> {
    let literal = match host.strip_prefix('[') {
        Some(inner) => inner.strip_suffix(']')?,
        None if host.bytes().filter(|&b| b == b':').nth(1).is_some() => host,
        None => return None,
    };
    let addr: Ipv6Addr = literal.parse().ok()?;
    if spelled_as(host, &addr) {
        Some(Cow::Borrowed(host))
    } else {
        Some(Cow::Owned(format!("[{addr}]")))
    }
}

/// Whether `host` is exactly `[addr]` in canonical form: a formatter that compares instead of
/// writing, so a canonical literal costs no allocation.
fn spelled_as(host: &str, addr: &Ipv6Addr) -> bool {
    struct Compare<'a>(&'a str);
    impl fmt::Write for Compare<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = self.0.strip_prefix(s).ok_or(fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Compare(host);
    write!(rest, "[{addr}]").is_ok() && rest.0.is_empty()
}

/// The bytes of a host name as its key spells them: lower case, with percent-encoded
/// unreserved characters decoded (`%41` is `a`); other escapes stay, their hex digits in
/// lower case.
#[derive(Clone)]
struct Canonical<'a> {
    rest: &'a [u8],
}

impl<'a> Canonical<'a> {
    fn new(host: &'a str) -> Self {
        Canonical {
            rest: host.as_bytes(),
        }
    }
}

impl Iterator for Canonical<'_> {
    type Item = u8;

    fn next(&mut self) -> Option<u8> {
        if let [b'%', hi, lo, rest @ ..] = self.rest {
            if let (Some(hi), Some(lo)) = (hex_digit(*hi), hex_digit(*lo)) {
                let byte = (hi << 4) | lo;
                if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                    self.rest = rest;
                    return Some(byte.to_ascii_lowercase());
                }
            }
        }
        let (&first, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(first.to_ascii_lowercase())
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    // `to_digit(16)` is below 16, so it fits a u8.
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// A 128-bit keyed hash of a host's canonical bytes: two 64-bit SipHash (std `RandomState`)
/// passes under one random per-process key, told apart by a leading tag.
fn long_name_hash(host: &str) -> [u64; 2] {
    static STATE: OnceLock<RandomState> = OnceLock::new();
    let state = STATE.get_or_init(RandomState::new);
    let mut hashers = [state.build_hasher(), state.build_hasher()];
    for (hasher, tag) in hashers.iter_mut().zip([0u8, 1]) {
        hasher.write_u8(tag);
    }
    // Hash in chunks, without copying the host: the hash stays cheap for huge hosts.
    let mut chunk = [0u8; 64];
    let mut len = 0;
    for byte in Canonical::new(host) {
        chunk[len] = byte;
        len += 1;
        if len == chunk.len() {
            hashers.iter_mut().for_each(|h| h.write(&chunk));
            len = 0;
        }
    }
    hashers.iter_mut().for_each(|h| h.write(&chunk[..len]));
    hashers.map(|h| h.finish())
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use http::header::HeaderValue;

    use super::*;

    fn key(uri: &str, host: Option<&[u8]>) -> String {
        let mut req = Request::builder().uri(uri);
        if let Some(host) = host {
            req = req.header(HOST, HeaderValue::from_bytes(host).unwrap());
        }
        HostKey.key(&req.body(()).unwrap()).into_owned()
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
    fn host_of_strips_spaces_user_info_and_any_port_but_no_ipv6_group() {
        assert_eq!(host_of(" \tuser:pw@A.example:8080 \t"), "A.example");
        assert_eq!(host_of("a@b@c.example"), "c.example");
        assert_eq!(host_of("a.example:"), "a.example");
        assert_eq!(host_of("a.example:http"), "a.example");
        assert_eq!(host_of("[::1]:8080"), "[::1]");
        assert_eq!(host_of("[::1]"), "[::1]");
        assert_eq!(host_of("[::1"), "[::1");
        // Two colons or more: an unbracketed IPv6 literal, whose last group is no port.
        assert_eq!(host_of("::1"), "::1");
        assert_eq!(host_of("1:2:3:4:5:6:7:8"), "1:2:3:4:5:6:7:8");
        assert_eq!(host_of(""), "");
        assert_eq!(host_of(":"), "");
        assert_eq!(host_of("@"), "");
    }

    #[test]
    fn trim_host_removes_every_trailing_dot_plain_or_encoded() {
        assert_eq!(trim_host("a.example"), "a.example");
        assert_eq!(trim_host("a.example."), "a.example");
        assert_eq!(trim_host("a.example..."), "a.example");
        assert_eq!(trim_host(" a.example%2E.%2e \t"), "a.example");
        assert_eq!(trim_host("a.example%2"), "a.example%2");
        assert_eq!(trim_host("...%2e"), "");
        assert_eq!(trim_host("%2"), "%2");
        assert_eq!(trim_host(""), "");
    }

    #[test]
    fn canonical_bytes_decode_unreserved_escapes_only_and_lower_case() {
        let canonical = |host| String::from_utf8(Canonical::new(host).collect()).unwrap();
        assert_eq!(canonical("%41Pi.Ex%61mple"), "api.example");
        assert_eq!(canonical("a%2D%2e%5F%7eb"), "a-._~b");
        // Reserved and non-ASCII escapes stay escaped, in one case.
        assert_eq!(canonical("a%2Fb%3A%40%C3%A9"), "a%2fb%3a%40%c3%a9");
        // Not escapes: kept as they are.
        assert_eq!(canonical("%"), "%");
        assert_eq!(canonical("%4"), "%4");
        assert_eq!(canonical("%zz%%41"), "%zz%a");
    }

    #[test]
    fn ipv6_literals_get_their_rfc_5952_form_in_brackets() {
        for host in [
            "[::1]",
            "[0:0::1]",
            "[0:0:0:0:0:0:0:1]",
            "::1",
            "0::0:1",
            "[::0001]",
        ] {
            assert_eq!(key_of_host(host), "[::1]", "{host}");
        }
        assert_eq!(key_of_host("[2001:DB8::A]"), "[2001:db8::a]");
        assert_eq!(key_of_host("2001:db8:0:0:0:0:0:a"), "[2001:db8::a]");
        // Already canonical: borrowed, no allocation.
        assert!(matches!(key_of_host("[2001:db8::a]"), Cow::Borrowed(_)));
        // Not IPv6: a name like any other.
        assert_eq!(key_of_host("[V1.Future]"), "[v1.future]");
        assert_eq!(key_of_host("[::1"), "[::1");
        assert_eq!(key_of_host("A:B:C"), "a:b:c");
        assert_eq!(ipv6_key("a.example"), None);
    }

    #[test]
    fn canonical_hosts_are_borrowed() {
        for host in [
            "api.example",
            "127.0.0.1",
            "[::1]",
            &"a".repeat(MAX_NAME_LEN),
        ] {
            assert!(
                matches!(key_of_host(host), Cow::Borrowed(k) if k == host),
                "{host}"
            );
        }
        assert!(matches!(key_of_host("API.example"), Cow::Owned(_)));
    }

    #[test]
    fn a_long_host_is_keyed_by_its_prefix_and_a_hash_of_all_of_it() {
        assert_eq!(HostKey::MAX_LEN, 286, "the docs say 286");
        let host = "a".repeat(10_000);
        let key = key_of_host(&host);
        assert_eq!(key.len(), HostKey::MAX_LEN);
        let (prefix, hash) = key.split_at(MAX_NAME_LEN);
        assert_eq!(prefix, &host[..MAX_NAME_LEN]);
        let hex = hash.strip_prefix('#').unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        // The same host, respelled, has the same key; a host one byte longer does not.
        assert_eq!(key_of_host(&format!("{}..", host.to_uppercase())), key);
        assert_eq!(key_of_host(&format!("%61{}", &host[1..])), key);
        assert_ne!(key_of_host(&format!("{host}a")), key);
        // Exactly at the bound: its own key; one byte over: hashed.
        assert_eq!(key_of_host(&host[..MAX_NAME_LEN]), &host[..MAX_NAME_LEN]);
        assert_eq!(
            key_of_host(&host[..MAX_NAME_LEN + 1]).len(),
            HostKey::MAX_LEN
        );
        // Long only before decoding: short once decoded, so its own key.
        let encoded = "%61".repeat(MAX_NAME_LEN);
        assert_eq!(key_of_host(&encoded), host[..MAX_NAME_LEN]);
    }

    #[test]
    fn the_long_host_hash_covers_every_byte() {
        let base = "b".repeat(1_000);
        let key = key_of_host(&base);
        for i in [0, MAX_NAME_LEN, 500, 999] {
            let mut other = base.clone().into_bytes();
            other[i] = b'c';
            let other = String::from_utf8(other).unwrap();
            assert_ne!(key_of_host(&other), key, "changed byte {i}");
        }
        // Chunking does not matter: hosts around the 64-byte chunk size hash apart.
        let keys: std::collections::HashSet<_> = (MAX_NAME_LEN + 1..MAX_NAME_LEN + 200)
            .map(|len| key_of_host(&base[..len]).into_owned())
            .collect();
        assert_eq!(keys.len(), 199);
    }

    #[test]
    fn odd_hosts_neither_panic_nor_exceed_the_bound() {
        let long_colons = ":".repeat(5_000);
        let long_brackets = format!("[{}]", "1:".repeat(5_000));
        let long_escapes = "%".repeat(5_000);
        for host in [
            "",
            ".",
            "..",
            "%",
            "%2",
            "%2e",
            "%2E%2e",
            "[",
            "]",
            "[]",
            "[.]",
            ":",
            "::",
            "@",
            "[::1]:",
            "[::1]]",
            "[[::1]]",
            ":::",
            "\t",
            " ",
            "é.example",
            "a\u{0}b",
            &long_colons,
            &long_brackets,
            &long_escapes,
        ] {
            let key = key_of_host(host);
            assert!(key.len() <= HostKey::MAX_LEN, "{host:?}");
            let key = key_of_host(host_of(host));
            assert!(key.len() <= HostKey::MAX_LEN, "{host:?}");
        }
        assert_eq!(key_of_host("é.example"), HostKey::FALLBACK);
        assert_eq!(key_of_host("...%2e"), HostKey::FALLBACK);
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
