//! One key per host, however a client spells it: the canonicalisation behind
//! the tower layer's `HostKey`, usable on a `&str` or a field's bytes without the
//! `tower` feature.

use std::borrow::Cow;
use std::collections::hash_map::RandomState;
use std::fmt::{self, Write as _};
use std::hash::{BuildHasher, Hasher};
use std::net::Ipv6Addr;
use std::sync::OnceLock;

/// The key of requests that name no host.
pub const FALLBACK: &str = "";

/// The longest key [`host_key`] gives, in bytes: 253 (the longest DNS name), `#` and 32 hex
/// digits of a hash, for hosts longer than 253 bytes.
pub const MAX_LEN: usize = MAX_NAME_LEN + 1 + 32;

/// The longest DNS name (RFC 1035 §2.3.4, without the trailing dot): hosts up to this long are
/// their own keys.
const MAX_NAME_LEN: usize = 253;

/// The key of a request's host, from its target's authority (`authority`, as the URI spells
/// it: HTTP/2's `:authority`, an absolute-form request) or else its `Host` field's bytes
/// (`host_field`): [`FALLBACK`] with neither, or with a field that is not text.
///
/// What the tower layer's `HostKey` keys a tower request by; a proxy that is not
/// built on `http::Request` (pingora) gets the same keys from the same parts.
///
/// # Examples
///
/// ```
/// use floodgate::fields::host::{request_host_key, FALLBACK};
///
/// assert_eq!(request_host_key(None, Some(b"API.Example:8080")), "api.example");
/// assert_eq!(request_host_key(Some("a.example:443"), Some(b"b.example")), "a.example");
/// assert_eq!(request_host_key(None, Some(b"\xffbad")), FALLBACK);
/// assert_eq!(request_host_key(None, None), FALLBACK);
/// ```
pub fn request_host_key<'a>(
    authority: Option<&'a str>,
    host_field: Option<&'a [u8]>,
) -> Cow<'a, str> {
    match (authority, host_field) {
        (Some(authority), _) => host_key(authority),
        (None, Some(field)) => host_key_of_field(field),
        (None, None) => Cow::Borrowed(FALLBACK),
    }
}

/// The key of a `Host` field value or an authority: without surrounding spaces, user info and
/// port, lower case, trailing dots (plain or `%2e`) removed, unreserved percent-escapes
/// decoded, IPv6 literals in their bracketed RFC 5952 form; a host longer than 253 bytes is
/// keyed by its first 253 and a hash of all of it ([`MAX_LEN`] in all). Borrowed when the
/// host is already canonical.
///
/// # Examples
///
/// ```
/// use floodgate::fields::host::host_key;
///
/// assert_eq!(host_key("API.Example:8080"), "api.example");
/// assert_eq!(host_key("user@api.example.."), "api.example");
/// assert_eq!(host_key("[0:0::1]:8080"), "[::1]");
/// ```
pub fn host_key(value: &str) -> Cow<'_, str> {
    key_of_host(host_of(value))
}

/// [`host_key`] of a field value's bytes: [`FALLBACK`] unless they are text as a field value
/// is (visible ASCII, spaces and tabs; what `http::HeaderValue::to_str` accepts).
pub fn host_key_of_field(value: &[u8]) -> Cow<'_, str> {
    let text = value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    match std::str::from_utf8(value) {
        Ok(value) if text => host_key(value),
        _ => Cow::Borrowed(FALLBACK),
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

/// The key of a host (user info and port already gone): see [`host_key`].
fn key_of_host(host: &str) -> Cow<'_, str> {
    // The code below relies on ASCII to push bytes as chars, so anything else shares the
    // fallback (a field value's text and a parsed authority are ASCII already).
    if !host.is_ascii() {
        return Cow::Borrowed(FALLBACK);
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
    let mut key = String::with_capacity(host.len().min(MAX_LEN));
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
    use super::*;

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
        assert_eq!(MAX_LEN, 286, "the docs say 286");
        let host = "a".repeat(10_000);
        let key = key_of_host(&host);
        assert_eq!(key.len(), MAX_LEN);
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
        assert_eq!(key_of_host(&host[..MAX_NAME_LEN + 1]).len(), MAX_LEN);
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
            assert!(key.len() <= MAX_LEN, "{host:?}");
            let key = key_of_host(host_of(host));
            assert!(key.len() <= MAX_LEN, "{host:?}");
        }
        assert_eq!(key_of_host("é.example"), FALLBACK);
        assert_eq!(key_of_host("...%2e"), FALLBACK);
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
    fn a_field_that_is_not_text_is_the_fallback() {
        assert_eq!(host_key_of_field(b"\xffbad"), FALLBACK);
        assert_eq!(host_key_of_field(b"a.example\x7f"), FALLBACK);
        assert_eq!(host_key_of_field(b"a.exa\nmple"), FALLBACK);
        assert_eq!(host_key_of_field(b"\tA.example "), "a.example");
        assert_eq!(host_key_of_field(b""), FALLBACK);
    }
}
