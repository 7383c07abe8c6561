//! For the tower layer's tests (tests/layer.rs over loopback, tests/axum.rs in process):
//! requests in origin form, and a strict reader of the `RateLimit-Policy` and `RateLimit`
//! fields, which draft-ietf-httpapi-ratelimit-headers-11 defines as Structured Field lists
//! (RFC 9651) of items with parameters.
//!
//! The reader follows RFC 9651's parsing rules for a List of Items (§4.2.1, §4.2.3) and fails
//! the test on anything a conforming parser would refuse, so a malformed field cannot pass
//! for a right one. It reads what the draft's two fields use: String, Token and Integer bare
//! items (and a parameter without a value, a Boolean true); it refuses Inner Lists and
//! the other bare item types, which neither field has a use for.

use http::header::{HeaderMap, HOST};
use http::Request;

/// A request for `host` in origin form (`GET /` + `Host`) with an empty body of any type:
/// for a connection of the test's own, or a service called in process. (An absolute-form
/// target would name the authority, and `HostKey` follows the target.)
pub fn origin_form<B: Default>(host: &str) -> Request<B> {
    Request::get("/")
        .header(HOST, host)
        .body(B::default())
        .unwrap()
}

/// A bare item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bare {
    Integer(i64),
    String(String),
    Token(String),
    Boolean(bool),
}

/// A list member: its bare item and its parameters, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub value: Bare,
    pub params: Vec<(String, Bare)>,
}

impl Item {
    /// The item's value, which both fields require to be a String (the policy's name).
    pub fn name(&self) -> &str {
        match &self.value {
            Bare::String(name) => name,
            other => panic!("a policy is named by a String, not {other:?}"),
        }
    }

    /// The parameter keys, in order.
    pub fn keys(&self) -> Vec<&str> {
        self.params.iter().map(|(k, _)| k.as_str()).collect()
    }

    fn param(&self, key: &str) -> Option<&Bare> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// An Integer parameter; fails the test if it is there but not an Integer.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.param(key).map(|v| match v {
            Bare::Integer(n) => *n,
            other => panic!("parameter {key} should be an Integer, not {other:?}"),
        })
    }

    /// A String parameter; fails the test if it is there but not a String.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.param(key).map(|v| match v {
            Bare::String(s) => s.as_str(),
            other => panic!("parameter {key} should be a String, not {other:?}"),
        })
    }
}

/// The list a field carries in `headers`: its field lines combined as RFC 9651 §4.2 says
/// (joined with commas), then parsed. Empty when the field is absent.
pub fn list(headers: &HeaderMap, name: &str) -> Vec<Item> {
    let lines: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().expect("visible ASCII"))
        .collect();
    if lines.is_empty() {
        return Vec::new();
    }
    parse_list(&lines.join(", "))
}

/// The one item of a field that must hold exactly one.
pub fn single(headers: &HeaderMap, name: &str) -> Item {
    let mut items = list(headers, name);
    assert_eq!(items.len(), 1, "{name}: {items:?}");
    items.remove(0)
}

/// Parses a Structured Field List of Items, failing the test on any syntax error.
pub fn parse_list(input: &str) -> Vec<Item> {
    let mut p = Parser {
        rest: input.as_bytes(),
        input,
    };
    p.skip_sp();
    let mut items = Vec::new();
    while !p.rest.is_empty() {
        items.push(p.item());
        p.skip_ows();
        if p.rest.is_empty() {
            break;
        }
        p.expect(b',');
        p.skip_ows();
        assert!(!p.rest.is_empty(), "a trailing comma in {input:?}");
    }
    assert!(!items.is_empty(), "an empty list: {input:?}");
    items
}

struct Parser<'a> {
    rest: &'a [u8],
    input: &'a str,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn bump(&mut self) -> u8 {
        let (&c, rest) = self.rest.split_first().unwrap_or_else(|| self.fail("more"));
        self.rest = rest;
        c
    }

    fn fail(&self, what: &str) -> ! {
        let at = self.input.len() - self.rest.len();
        panic!("expected {what} at byte {at} of {:?}", self.input)
    }

    fn expect(&mut self, c: u8) {
        if self.peek() != Some(c) {
            self.fail(&format!("{:?}", c as char));
        }
        self.bump();
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.bump();
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.bump();
        }
    }

    fn item(&mut self) -> Item {
        if self.peek() == Some(b'(') {
            self.fail("an Item (neither field has Inner Lists)");
        }
        let value = self.bare();
        let mut params: Vec<(String, Bare)> = Vec::new();
        while self.peek() == Some(b';') {
            self.bump();
            self.skip_sp();
            let key = self.key();
            let value = if self.peek() == Some(b'=') {
                self.bump();
                self.bare()
            } else {
                Bare::Boolean(true)
            };
            // RFC 9651 lets a later duplicate win; a serializer has no reason to send one.
            assert!(
                params.iter().all(|(k, _)| *k != key),
                "parameter {key} twice in {:?}",
                self.input
            );
            params.push((key, value));
        }
        Item { value, params }
    }

    fn key(&mut self) -> String {
        let mut key = String::new();
        match self.peek() {
            Some(c) if c.is_ascii_lowercase() || c == b'*' => {}
            _ => self.fail("a key (lower-case letter or '*')"),
        }
        while let Some(c) = self.peek() {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c) {
                key.push(self.bump() as char);
            } else {
                break;
            }
        }
        key
    }

    fn bare(&mut self) -> Bare {
        match self.peek() {
            Some(b'"') => Bare::String(self.string()),
            Some(c) if c == b'-' || c.is_ascii_digit() => Bare::Integer(self.integer()),
            Some(c) if c.is_ascii_alphabetic() || c == b'*' => Bare::Token(self.token()),
            Some(b'?') => {
                self.bump();
                match self.bump() {
                    b'0' => Bare::Boolean(false),
                    b'1' => Bare::Boolean(true),
                    _ => self.fail("?0 or ?1"),
                }
            }
            _ => self.fail("a String, Token, Integer or Boolean"),
        }
    }

    fn string(&mut self) -> String {
        self.expect(b'"');
        let mut s = String::new();
        loop {
            match self.bump() {
                b'"' => return s,
                b'\\' => match self.bump() {
                    c @ (b'"' | b'\\') => s.push(c as char),
                    _ => self.fail("an escaped '\"' or '\\\\'"),
                },
                c @ 0x20..=0x7e => s.push(c as char),
                _ => self.fail("a visible ASCII character in a String"),
            }
        }
    }

    fn integer(&mut self) -> i64 {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.bump();
        }
        let mut digits = String::new();
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            digits.push(c as char);
            self.bump();
        }
        if self.peek() == Some(b'.') {
            self.fail("an Integer (neither field has Decimals)");
        }
        if digits.is_empty() || digits.len() > 15 {
            self.fail("an Integer of 1 to 15 digits");
        }
        let n: i64 = digits.parse().unwrap();
        if negative {
            -n
        } else {
            n
        }
    }

    fn token(&mut self) -> String {
        let mut token = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&c) {
                token.push(self.bump() as char);
            } else {
                break;
            }
        }
        token
    }
}
