//! [`ClientKey`]: a request's key by its client's address, behind the proxies you trust
//! (the rules are [`fields::client`](crate::fields::client)'s).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions, Request};

use super::KeyExtractor;
use crate::fields::client::ClientAddr;

/// Keys a request by its client's address: the connection's peer, or behind trusted proxies
/// the address they forwarded (`X-Forwarded-For` or `Forwarded`), with IPv6 grouped by /64.
/// [`fields::client`](crate::fields::client) says whose address that is, and why a client cannot choose it.
///
/// The peer's address is not part of an HTTP request: the server puts it in the request's
/// extensions. `ClientKey` reads a [`SocketAddr`] or an [`IpAddr`] there by default; with
/// axum, whose `into_make_service_with_connect_info` puts a `ConnectInfo<SocketAddr>` there,
/// say so with [`peer_from`](Self::peer_from). A request whose peer is not known gets the key
/// [`UNKNOWN`](crate::fields::client::UNKNOWN): all of them share one limit.
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use floodgate::fields::client::ClientAddr;
/// use floodgate::layer::{ClientKey, KeyExtractor};
/// use http::Request;
///
/// let key = ClientKey::new(ClientAddr::new().trust("10.0.0.0/8".parse().unwrap()));
/// let mut req = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 2001:db8:1:2::99")
///     .body(())
///     .unwrap();
/// let balancer: SocketAddr = "10.0.0.1:40000".parse().unwrap();
/// req.extensions_mut().insert(balancer);
/// assert_eq!(key.key(&req), "2001:db8:1:2::/64");
/// ```
#[derive(Debug, Clone)]
pub struct ClientKey {
    addrs: ClientAddr,
    peer: fn(&Extensions) -> Option<IpAddr>,
}

impl ClientKey {
    /// Keys by the client address under `addrs`, the peer read from the request's
    /// extensions as a [`SocketAddr`] or an [`IpAddr`].
    pub fn new(addrs: ClientAddr) -> Self {
        ClientKey {
            addrs,
            peer: peer_in_extensions,
        }
    }

    /// Where the peer's address is in the request's extensions, for servers that put it
    /// there under a type of their own. With axum:
    /// `.peer_from(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))`.
    pub fn peer_from(mut self, peer: fn(&Extensions) -> Option<IpAddr>) -> Self {
        self.peer = peer;
        self
    }
}

/// A [`SocketAddr`] or an [`IpAddr`] in the extensions.
fn peer_in_extensions(extensions: &Extensions) -> Option<IpAddr> {
    let socket = extensions.get::<SocketAddr>().map(SocketAddr::ip);
    socket.or_else(|| extensions.get::<IpAddr>().copied())
}

impl<B> KeyExtractor<B> for ClientKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Cow<'r, str> {
        let peer = (self.peer)(req.extensions());
        let field = self.addrs.forwarding_field().name();
        let lines = req.headers().get_all(field).iter().map(|v| v.as_bytes());
        Cow::Owned(self.addrs.key(peer, lines))
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::fields::client::{Forwarding, UNKNOWN};

    fn request(peer: Option<&str>, fields: &[(&str, &str)]) -> Request<()> {
        let mut req = Request::builder();
        for (name, value) in fields {
            req = req.header(*name, *value);
        }
        let mut req = req.body(()).unwrap();
        if let Some(peer) = peer {
            req.extensions_mut()
                .insert(peer.parse::<SocketAddr>().unwrap());
        }
        req
    }

    #[test]
    fn every_line_of_the_field_is_read_in_order() {
        let key = ClientKey::new(ClientAddr::new().trust("10.0.0.0/8".parse().unwrap()));
        let req = request(
            Some("10.0.0.1:1"),
            &[
                ("x-forwarded-for", "192.0.2.1"),
                ("x-forwarded-for", "10.0.0.7"),
            ],
        );
        assert_eq!(key.key(&req), "192.0.2.1/32");
    }

    #[test]
    fn only_the_configured_field_is_read() {
        let addrs = ClientAddr::new()
            .trust("10.0.0.0/8".parse().unwrap())
            .forwarding(Forwarding::Forwarded);
        let key = ClientKey::new(addrs);
        let req = request(
            Some("10.0.0.1:1"),
            &[
                ("x-forwarded-for", "192.0.2.1"),
                ("forwarded", "for=192.0.2.2"),
            ],
        );
        assert_eq!(key.key(&req), "192.0.2.2/32");
    }

    #[test]
    fn the_peer_can_come_from_elsewhere_or_be_unknown() {
        let key = ClientKey::new(ClientAddr::new());
        assert_eq!(key.key(&request(None, &[])), UNKNOWN);
        let key = key.peer_from(|_| Some("192.0.2.3".parse().unwrap()));
        assert_eq!(key.key(&request(None, &[])), "192.0.2.3/32");
    }
}
