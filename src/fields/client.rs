//! The key of a request's client: its address, as the connection's peer or, behind proxies
//! you trust, as they forwarded it; IPv6 grouped by network, so that one client cannot rotate
//! through the addresses of its own network.
//!
//! # Whose address
//!
//! The peer of the connection is the client, unless it is one of your trusted proxies
//! ([`ClientAddr::trust`]). Then the forwarding field (`X-Forwarded-For`, or `Forwarded`'s
//! `for=`, RFC 7239) is read from its right end, where the nearest proxy appended what it
//! saw, towards the left, skipping every trusted proxy: the first address that is not one is
//! the client. What lies left of it was written by the client or a proxy you do not trust,
//! and is never read: a client cannot choose its key by sending the field itself.
//!
//! When every entry is a trusted proxy, the leftmost is the client.
//!
//! # A client that cannot be told
//!
//! Two requests have no client address to key: one that came with no peer address (the
//! server did not put the connection's address in the request), and one whose trusted proxy
//! forwarded an entry that is not an address (`unknown`, an obfuscated `_hidden` name, a
//! malformed one). Giving either a key would put clients who have nothing to do with one
//! another under one limit, so that one of them could lock the others out; so
//! [`ClientAddr::key`] gives no key, but an [`Unidentified`] saying which of the two it is,
//! and the caller decides what to do with the request (the tower layer's `ClientKey`,
//! feature `tower`, refuses it or serves it unlimited, as the operator chose, and says so in
//! the log).
//!
//! # Grouping
//!
//! A client holds a whole IPv6 /64 (often more) and can send from any address in it, so
//! IPv6 addresses are keyed by their /64 network by default ([`ClientAddr::ipv6_prefix`]);
//! IPv4 ones by the address (/32, [`ClientAddr::ipv4_prefix`]). An IPv4-mapped IPv6 address
//! (`::ffff:192.0.2.1`) is the IPv4 address. Keys are the network in CIDR notation:
//! `192.0.2.1/32`, `2001:db8:1:2::/64`.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::ConfigError;

/// Which field carries the addresses your trusted proxies forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    XForwardedFor,
    /// `Forwarded: for=client, for="[2001:db8::1]:4711"` (RFC 7239): the `for=` of each
    /// element.
    Forwarded,
}

impl Forwarding {
    /// The field's name, lower case.
    pub const fn name(self) -> &'static str {
        match self {
            Forwarding::XForwardedFor => "x-forwarded-for",
            Forwarding::Forwarded => "forwarded",
        }
    }
}

/// How a request's client address becomes its key: the proxies you trust, the field they
/// forward in, and the prefix lengths addresses are grouped by.
///
/// The tower layer keys requests by it through
/// `floodgate::layer::ClientKey` (feature `tower`): `ClientKey::new(ClientAddr::new())`.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use floodgate::fields::client::{ClientAddr, Forwarding};
///
/// let clients = ClientAddr::new()
///     .trust("10.0.0.0/8".parse().unwrap())
///     .forwarding(Forwarding::XForwardedFor);
/// let balancer: IpAddr = "10.1.2.3".parse().unwrap();
///
/// // Through the balancer: the address it saw, not what the client claimed before it.
/// let fields: [&[u8]; 1] = [b"6.6.6.6, 192.0.2.7, 10.9.9.9"];
/// assert_eq!(clients.key(Some(balancer), fields).as_deref(), Ok("192.0.2.7/32"));
/// // Straight from a client: its own address; its forwarding field is not read.
/// let client: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
/// assert_eq!(clients.key(Some(client), fields).as_deref(), Ok("2001:db8:1:2::/64"));
/// ```
#[derive(Debug, Clone)]
pub struct ClientAddr {
    trusted: Vec<IpNet>,
    forwarding: Forwarding,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

impl Default for ClientAddr {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a request's client address cannot be told (see the module's docs): such a request has
/// no key, since any key would be shared by clients that have nothing to do with one another.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use floodgate::fields::client::{ClientAddr, Unidentified};
///
/// let clients = ClientAddr::new().trust("10.0.0.0/8".parse().unwrap());
/// let balancer: IpAddr = "10.1.2.3".parse().unwrap();
/// let fields: [&[u8]; 1] = [b"unknown"];
/// assert_eq!(clients.key(Some(balancer), fields), Err(Unidentified::NotAnAddress));
/// assert_eq!(clients.key(None, []), Err(Unidentified::NoPeer));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unidentified {
    /// The request came without the connection's peer address: the server did not put it in
    /// the request (with axum, serve `into_make_service_with_connect_info::<SocketAddr>()`).
    NoPeer,
    /// A trusted proxy forwarded an entry that is not an address (`unknown`, `_hidden`, a
    /// malformed one) where the client's should be.
    NotAnAddress,
}

/// What is wrong, in a few words (the tower layer's `ClientKey` logs more, with what to do
/// about it).
///
/// ```
/// use floodgate::fields::client::Unidentified;
///
/// assert_eq!(Unidentified::NoPeer.to_string(), "the request carries no peer address");
/// ```
impl std::fmt::Display for Unidentified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unidentified::NoPeer => "the request carries no peer address",
            Unidentified::NotAnAddress => {
                "a trusted proxy forwarded an entry that is not an address where the client's \
                 should be"
            }
        })
    }
}

impl std::error::Error for Unidentified {}

impl ClientAddr {
    /// The peer's address, no trusted proxy, `X-Forwarded-For`, IPv4 by /32 and IPv6 by /64.
    pub fn new() -> Self {
        ClientAddr {
            trusted: Vec::new(),
            forwarding: Forwarding::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }

    /// Trusts the proxies in `network` (an address is a /32 or /128 network) to say who they
    /// forward for.
    pub fn trust(mut self, network: IpNet) -> Self {
        // Addresses are compared as IPv4 when they map one; so are IPv4-mapped networks.
        let network = match network {
            IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
                Some(v4) => {
                    ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).map_or(network, IpNet::V4)
                }
                None => network,
            },
            other => other,
        };
        self.trusted.push(network.trunc());
        self
    }

    /// The field trusted proxies forward addresses in (default `X-Forwarded-For`).
    pub fn forwarding(mut self, forwarding: Forwarding) -> Self {
        self.forwarding = forwarding;
        self
    }

    /// Groups IPv4 clients by networks of this prefix length (default 32: each address).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidClientPrefix`] above 32.
    pub fn ipv4_prefix(mut self, bits: u8) -> Result<Self, ConfigError> {
        if bits > 32 {
            return Err(ConfigError::InvalidClientPrefix(
                "an IPv4 prefix is at most 32 bits",
            ));
        }
        self.ipv4_prefix = bits;
        Ok(self)
    }

    /// Groups IPv6 clients by networks of this prefix length (default 64, a subscriber's
    /// smallest usual allocation; 56 or 48 for providers that hand out more).
    ///
    /// # Errors
    ///
    /// [`ConfigError::InvalidClientPrefix`] above 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, ConfigError> {
        if bits > 128 {
            return Err(ConfigError::InvalidClientPrefix(
                "an IPv6 prefix is at most 128 bits",
            ));
        }
        self.ipv6_prefix = bits;
        Ok(self)
    }

    /// The forwarding field these settings read.
    pub fn forwarding_field(&self) -> Forwarding {
        self.forwarding
    }

    /// The key of a request from `peer` (the connection's address) that carries `fields`, the
    /// forwarding field's lines in the order they came.
    ///
    /// # Errors
    ///
    /// A request whose client cannot be told has no key: [`Unidentified::NoPeer`] without a
    /// `peer`, [`Unidentified::NotAnAddress`] when a trusted proxy forwarded something else
    /// than an address where the client's should be.
    pub fn key<'f>(
        &self,
        peer: Option<IpAddr>,
        fields: impl IntoIterator<Item = &'f [u8]>,
    ) -> Result<String, Unidentified> {
        let peer = peer.ok_or(Unidentified::NoPeer)?;
        Ok(self.group(self.client(peer, fields)?))
    }

    /// The client's address (see the module's docs).
    fn client<'f>(
        &self,
        peer: IpAddr,
        fields: impl IntoIterator<Item = &'f [u8]>,
    ) -> Result<IpAddr, Unidentified> {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return Ok(peer);
        }
        let entries: Vec<&[u8]> = fields
            .into_iter()
            .flat_map(|line| line.split(|&b| b == b','))
            .collect();
        let mut client = peer;
        for entry in entries.iter().rev() {
            // Not an address: keying the last trusted hop instead would put every client it
            // forwarded so under one key.
            let addr = self.parse_entry(entry).ok_or(Unidentified::NotAnAddress)?;
            client = canonical(addr);
            if !self.trusts(client) {
                return Ok(client);
            }
        }
        Ok(client)
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|net| net.contains(&addr))
    }

    /// One entry of the forwarding field, if it is an address.
    fn parse_entry(&self, entry: &[u8]) -> Option<IpAddr> {
        let entry = std::str::from_utf8(entry).ok()?.trim();
        match self.forwarding {
            Forwarding::XForwardedFor => parse_addr(entry),
            Forwarding::Forwarded => {
                // `for=...` among `;`-separated pairs, the name case-insensitive.
                let value = entry.split(';').find_map(|pair| {
                    let (name, value) = pair.split_once('=')?;
                    name.trim()
                        .eq_ignore_ascii_case("for")
                        .then_some(value.trim())
                })?;
                parse_addr(value.trim_matches('"'))
            }
        }
    }

    /// `addr`'s network under the prefix for its family, in CIDR notation.
    fn group(&self, addr: IpAddr) -> String {
        let bits = match addr {
            IpAddr::V4(_) => self.ipv4_prefix,
            IpAddr::V6(_) => self.ipv6_prefix,
        };
        // The prefix lengths are checked when set.
        IpNet::new(addr, bits).map_or_else(|_| addr.to_string(), |net| net.trunc().to_string())
    }
}

/// An address as a forwarding entry may spell it: bare, bracketed IPv6 with or without a
/// port, IPv4 with a port.
fn parse_addr(text: &str) -> Option<IpAddr> {
    if let Ok(addr) = text.parse() {
        return Some(addr);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, _port) = rest.split_once(']')?;
        return inside.parse().ok();
    }
    let (host, port) = text.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IPv4-mapped IPv6 address as the IPv4 address it maps.
fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn behind_balancer() -> ClientAddr {
        ClientAddr::new()
            .trust("10.0.0.0/8".parse().unwrap())
            .trust("2001:db8:ffff::/48".parse().unwrap())
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let keys = behind_balancer();
        let forged: [&[u8]; 1] = [b"10.1.1.1, 192.0.2.9"];
        assert_eq!(
            keys.key(Some(ip("198.51.100.4")), forged).unwrap(),
            "198.51.100.4/32"
        );
    }

    #[test]
    fn behind_trusted_proxies_the_rightmost_untrusted_entry_is_the_client() {
        let keys = behind_balancer();
        // The client claimed 6.6.6.6; the first proxy saw 192.0.2.7; two trusted hops.
        let lines: [&[u8]; 2] = [b"6.6.6.6, 192.0.2.7", b"10.0.0.5"];
        assert_eq!(
            keys.key(Some(ip("10.0.0.1")), lines).unwrap(),
            "192.0.2.7/32"
        );
        // Every hop trusted: the leftmost.
        let lines: [&[u8]; 1] = [b"10.0.0.9, 10.0.0.5"];
        assert_eq!(
            keys.key(Some(ip("10.0.0.1")), lines).unwrap(),
            "10.0.0.9/32"
        );
        // No field at all: the proxy itself.
        assert_eq!(keys.key(Some(ip("10.0.0.1")), []).unwrap(), "10.0.0.1/32");
    }

    #[test]
    fn an_entry_that_is_not_an_address_keys_nobody_not_even_the_proxy() {
        let keys = behind_balancer();
        let lines: [&[u8]; 1] = [b"192.0.2.7, unknown, 10.0.0.5"];
        let unidentified = Err(Unidentified::NotAnAddress);
        assert_eq!(keys.key(Some(ip("10.0.0.1")), lines), unidentified);
        let lines: [&[u8]; 1] = [b"garbage"];
        assert_eq!(keys.key(Some(ip("10.0.0.1")), lines), unidentified);
        // Left of the client's entry, nothing is read: garbage there is no one's business.
        let lines: [&[u8]; 1] = [b"garbage, 192.0.2.7"];
        assert_eq!(
            keys.key(Some(ip("10.0.0.1")), lines).unwrap(),
            "192.0.2.7/32"
        );
    }

    #[test]
    fn ipv6_clients_are_grouped_by_their_network() {
        let keys = ClientAddr::new();
        let a = keys.key(Some(ip("2001:db8:1:2:aaaa::1")), []).unwrap();
        let b = keys
            .key(Some(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")), [])
            .unwrap();
        assert_eq!(a, "2001:db8:1:2::/64");
        assert_eq!(a, b, "one /64, one key");
        let other = keys.key(Some(ip("2001:db8:1:3::1")), []).unwrap();
        assert_ne!(a, other);
        let wider = ClientAddr::new().ipv6_prefix(48).unwrap();
        assert_eq!(
            wider.key(Some(ip("2001:db8:1:3::1")), []).unwrap(),
            "2001:db8:1::/48"
        );
        let v4 = ClientAddr::new().ipv4_prefix(24).unwrap();
        assert_eq!(v4.key(Some(ip("192.0.2.200")), []).unwrap(), "192.0.2.0/24");
    }

    #[test]
    fn mapped_ipv4_is_ipv4() {
        let keys = ClientAddr::new();
        assert_eq!(
            keys.key(Some(ip("::ffff:192.0.2.1")), []).unwrap(),
            "192.0.2.1/32"
        );
        // A trusted network written mapped trusts the IPv4 peers it maps.
        let keys = ClientAddr::new().trust("::ffff:10.0.0.0/104".parse().unwrap());
        let lines: [&[u8]; 1] = [b"192.0.2.5"];
        assert_eq!(
            keys.key(Some(ip("10.1.2.3")), lines).unwrap(),
            "192.0.2.5/32"
        );
    }

    #[test]
    fn forwarded_for_parameters_are_read_in_their_rfc_7239_spellings() {
        let keys = behind_balancer().forwarding(Forwarding::Forwarded);
        let lines: [&[u8]; 1] =
            [br#"for=6.6.6.6, For="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2"#];
        assert_eq!(
            keys.key(Some(ip("10.0.0.1")), lines).unwrap(),
            "2001:db8:cafe::/64"
        );
        let lines: [&[u8]; 1] = [br#"for="192.0.2.43:47011";by=10.0.0.1"#];
        assert_eq!(
            keys.key(Some(ip("10.0.0.1")), lines).unwrap(),
            "192.0.2.43/32"
        );
        let lines: [&[u8]; 1] = [b"for=_hidden, for=10.0.0.2"];
        let hidden = keys.key(Some(ip("10.0.0.1")), lines);
        assert_eq!(
            hidden,
            Err(Unidentified::NotAnAddress),
            "an obfuscated client"
        );
    }

    #[test]
    fn prefixes_past_the_address_are_refused() {
        assert!(ClientAddr::new().ipv4_prefix(33).is_err());
        assert!(ClientAddr::new().ipv6_prefix(129).is_err());
    }

    #[test]
    fn no_peer_is_no_key() {
        assert_eq!(ClientAddr::new().key(None, []), Err(Unidentified::NoPeer));
    }
}
