//! [`ClientKey`]: a request's key by its client's address, behind the proxies you trust
//! (the rules are [`fields::client`](crate::fields::client)'s).

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

use http::{Extensions, Request};

use super::{KeyExtractor, NoKey, Unkeyed};
use crate::fields::client::{ClientAddr, Unidentified};

/// Keys a request by its client's address: the connection's peer, or behind trusted proxies
/// the address they forwarded (`X-Forwarded-For` or `Forwarded`), with IPv6 grouped by /64.
/// [`fields::client`](crate::fields::client) says whose address that is, and why a client cannot choose it.
///
/// It is built from a [`ClientAddr`], which lives in `floodgate::fields::client` (it needs no
/// tower, so proxies without the layer use it too):
/// `use floodgate::fields::client::ClientAddr;` beside `use floodgate::layer::ClientKey;`.
///
/// The peer's address is not part of an HTTP request: the server puts it in the request's
/// extensions. `ClientKey` reads a [`SocketAddr`] or an [`IpAddr`] there by default; with
/// axum, whose `into_make_service_with_connect_info::<SocketAddr>()` puts a
/// `ConnectInfo<SocketAddr>` there, say so with [`peer_from`](Self::peer_from).
///
/// # A request whose client cannot be told
///
/// A request without a peer address (a server that does not put it in the request: axum's
/// `axum::serve(listener, app)` without `into_make_service_with_connect_info`, say), or whose
/// trusted proxy forwarded something else than an address ([`Unidentified`]), has no key:
/// any key would be shared by every such client, and one of them could lock the others out.
/// The layer refuses it with `500 Internal Server Error` by default, or serves it unlimited
/// with [`unidentified(Unkeyed::Serve)`](Self::unidentified), and either way logs why at error
/// level, once per process and cause ([`NoKey`] has the details).
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use floodgate::fields::client::ClientAddr;
/// use floodgate::layer::{ClientKey, KeyExtractor, Unkeyed};
/// use http::Request;
///
/// let key = ClientKey::new(ClientAddr::new().trust("10.0.0.0/8".parse().unwrap()));
/// let mut req = Request::builder()
///     .header("x-forwarded-for", "6.6.6.6, 2001:db8:1:2::99")
///     .body(())
///     .unwrap();
/// // No peer address: no key, and the layer refuses the request.
/// assert_eq!(key.key(&req).unwrap_err().then, Unkeyed::Refuse);
/// let balancer: SocketAddr = "10.0.0.1:40000".parse().unwrap();
/// req.extensions_mut().insert(balancer);
/// assert_eq!(key.key(&req).unwrap(), "2001:db8:1:2::/64");
/// ```
#[derive(Debug, Clone)]
pub struct ClientKey {
    addrs: ClientAddr,
    peer: fn(&Extensions) -> Option<IpAddr>,
    unidentified: Unkeyed,
}

impl ClientKey {
    /// Keys by the client address under `addrs`, the peer read from the request's
    /// extensions as a [`SocketAddr`] or an [`IpAddr`]; a request whose client cannot be
    /// told is refused (see [`unidentified`](Self::unidentified)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::net::IpAddr;
    /// use floodgate::fields::client::ClientAddr;
    /// use floodgate::layer::{ClientKey, KeyExtractor};
    /// use http::Request;
    ///
    /// let key = ClientKey::new(ClientAddr::new());
    /// let mut req = Request::builder().body(()).unwrap();
    /// req.extensions_mut().insert("192.0.2.9".parse::<IpAddr>().unwrap());
    /// assert_eq!(key.key(&req).unwrap(), "192.0.2.9/32");
    /// ```
    pub fn new(addrs: ClientAddr) -> Self {
        ClientKey {
            addrs,
            peer: peer_in_extensions,
            unidentified: Unkeyed::Refuse,
        }
    }

    /// Where the peer's address is in the request's extensions, for servers that put it
    /// there under a type of their own.
    ///
    /// # Examples
    ///
    /// With axum, served with `into_make_service_with_connect_info::<SocketAddr>()`:
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use floodgate::fields::client::ClientAddr;
    /// use floodgate::layer::{ClientKey, KeyExtractor};
    /// use http::Request;
    ///
    /// let key = ClientKey::new(ClientAddr::new())
    ///     .peer_from(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()));
    /// let mut req = Request::builder().body(()).unwrap();
    /// req.extensions_mut().insert(ConnectInfo("192.0.2.9:4711".parse::<SocketAddr>().unwrap()));
    /// assert_eq!(key.key(&req).unwrap(), "192.0.2.9/32");
    /// ```
    pub fn peer_from(mut self, peer: fn(&Extensions) -> Option<IpAddr>) -> Self {
        self.peer = peer;
        self
    }

    /// What the layer does with a request whose client cannot be told ([`Unidentified`]):
    /// [`Unkeyed::Refuse`] (the default) answers `500 Internal Server Error`,
    /// [`Unkeyed::Serve`] serves it without limiting it. Either way the layer logs why, once
    /// per process and cause.
    ///
    /// # Examples
    ///
    /// ```
    /// use floodgate::fields::client::ClientAddr;
    /// use floodgate::layer::{ClientKey, KeyExtractor, Unkeyed};
    /// use http::Request;
    ///
    /// let key = ClientKey::new(ClientAddr::new()).unidentified(Unkeyed::Serve);
    /// let no_peer = Request::builder().body(()).unwrap();
    /// assert_eq!(key.key(&no_peer).unwrap_err().then, Unkeyed::Serve);
    /// ```
    pub fn unidentified(mut self, then: Unkeyed) -> Self {
        self.unidentified = then;
        self
    }
}

/// A [`SocketAddr`] or an [`IpAddr`] in the extensions.
fn peer_in_extensions(extensions: &Extensions) -> Option<IpAddr> {
    let socket = extensions.get::<SocketAddr>().map(SocketAddr::ip);
    socket.or_else(|| extensions.get::<IpAddr>().copied())
}

impl<B> KeyExtractor<B> for ClientKey {
    fn key<'r>(&self, req: &'r Request<B>) -> Result<Cow<'r, str>, NoKey> {
        let peer = (self.peer)(req.extensions());
        let field = self.addrs.forwarding_field().name();
        let lines = req.headers().get_all(field).iter().map(|v| v.as_bytes());
        match self.addrs.key(peer, lines) {
            Ok(key) => Ok(Cow::Owned(key)),
            Err(unidentified) => Err(self.no_key(unidentified)),
        }
    }
}

impl ClientKey {
    /// What the layer is told of a request whose client cannot be told.
    fn no_key(&self, unidentified: Unidentified) -> NoKey {
        NoKey {
            why: match unidentified {
                Unidentified::NoPeer => {
                    "floodgate ClientKey: a request carries no peer address, so its client \
                     cannot be told: the server must put the connection's address in the \
                     request's extensions (a SocketAddr or an IpAddr, or where \
                     ClientKey::peer_from reads it; with axum, serve \
                     into_make_service_with_connect_info::<SocketAddr>() and read it with \
                     .peer_from(|ext| ext.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip())): \
                     axum puts a ConnectInfo there, not a SocketAddr)"
                }
                Unidentified::NotAnAddress => {
                    "floodgate ClientKey: a trusted proxy forwarded an entry that is not an \
                     address where a request's client should be, so its client cannot be \
                     told: check what the proxies given to ClientAddr::trust forward"
                }
            },
            then: self.unidentified,
        }
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;
    use crate::fields::client::Forwarding;

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
        assert_eq!(key.key(&req).unwrap(), "192.0.2.1/32");
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
        assert_eq!(key.key(&req).unwrap(), "192.0.2.2/32");
    }

    #[test]
    fn the_peer_can_come_from_elsewhere_or_be_missing_and_no_key() {
        let key = ClientKey::new(ClientAddr::new());
        let no_key = key.key(&request(None, &[])).unwrap_err();
        assert_eq!(no_key.then, Unkeyed::Refuse);
        assert!(no_key.why.contains("no peer address"), "{}", no_key.why);
        let key = key.peer_from(|_| Some("192.0.2.3".parse().unwrap()));
        assert_eq!(key.key(&request(None, &[])).unwrap(), "192.0.2.3/32");
    }

    #[test]
    fn a_malformed_forwarded_entry_is_no_key_not_the_proxys() {
        let trusting = ClientAddr::new().trust("10.0.0.0/8".parse().unwrap());
        let key = ClientKey::new(trusting).unidentified(Unkeyed::Serve);
        let req = request(Some("10.0.0.1:1"), &[("x-forwarded-for", "not-an-address")]);
        let no_key = key.key(&req).unwrap_err();
        assert_eq!(no_key.then, Unkeyed::Serve);
        assert!(no_key.why.contains("not an address"), "{}", no_key.why);
    }
}
