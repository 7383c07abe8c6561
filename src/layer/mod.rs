//! The tower layer (feature `tower`): [`LimitLayer`], [`LimitService`], its response futures
//! in [`future`], [`LimitBody`], the request keys [`HostKey`], [`ClientKey`] and [`KeyExtractor`]
//! (and what becomes of a request without one: [`NoKey`], [`Unkeyed`]), and the per-request limits
//! [`LimitsExtractor`] and [`LimiterDefaults`], the per-request costs [`CostExtractor`],
//! [`UnitCost`] and [`BodyBytes`] (with the request body held to its charge, [`ChargedBody`]).
//! The behaviour, and every header the layer
//! sends, is documented on [`LimitLayer`], which is where users look.
//!
//! The default key, [`HostKey`], is the request's host in one canonical spelling (so a flooder
//! cannot respell its way to fresh limits) and never longer than [`HostKey::MAX_LEN`] bytes
//! (so a client cannot make the limiter keep big keys): hosts longer than a DNS name's 253
//! bytes are keyed by a prefix and a keyed hash of the whole host.
//!
//! The files follow tower's own layers: [`LimitLayer`] in `layer.rs`, [`LimitService`] and
//! its refusals in `service.rs`, [`ResponseFuture`](future::ResponseFuture) in `response.rs`, [`LimitBody`] in
//! `body.rs`, the keys in `key.rs`, the per-request limits in `limits.rs` and costs in `cost.rs`
//! (the request body held to its charge in `charged.rs`), the
//! `RateLimit-Policy` and `RateLimit` field values in `headers.rs`, what responses say beyond
//! the decision ([`RefusalResponse`], and what an operator's body function sees of a refusal,
//! [`Refused`]) in `settings.rs`, the refusal's building (its `Retry-After` included) in
//! `refusal.rs`, and the waiting mode's [`WaitFuture`](future::WaitFuture) in `wait.rs`.

mod body;
mod charged;
mod client_key;
mod cost;
mod headers;
mod key;
// `layer::layer` on purpose: tower's folder shape, with `LimitLayer` in `layer.rs`.
#[allow(clippy::module_inception)]
mod layer;
mod limits;
mod mode;
mod refusal;
mod response;
mod service;
mod settings;
mod wait;

pub use body::LimitBody;
pub use charged::{ChargeExceeded, ChargedBody};
pub use client_key::ClientKey;
pub use cost::{BodyBytes, CostExtractor, Uncharged, UnitCost, UnknownLength};
pub use key::{HostKey, KeyExtractor, NoKey, Unkeyed};
pub use layer::LimitLayer;
pub use limits::{LimiterDefaults, LimitsExtractor};
pub use mode::{RefuseAtOnce, WaitUpTo};
pub use refusal::RejectedKey;
pub use response::ShadowRejected;
pub use service::LimitService;
pub use settings::{RefusalResponse, Refused};

pub mod future {
    //! The response futures of a [`LimitService`](super::LimitService), as tower names them:
    //! [`ResponseFuture`] when a request over a limit is refused at once, [`WaitFuture`] when
    //! it waits for room ([`LimitLayer::wait`](super::LimitLayer::wait)).
    pub use super::response::ResponseFuture;
    pub use super::wait::WaitFuture;
}
