//! Lock-free count-min-sketch limiting for proxies: per-key in-flight counts and request
//! rates in fixed memory, in tens of nanoseconds, with a one-sided error — an estimate may be
//! above the true count, never below it.
//!
//! - [`Estimator`]: the atomic H×N count-min sketch, pingora's, which [`Inflight`] counts
//!   in (the [`Limiter`] counts in blocked tables of its own, which the tests reach as
//!   `BlockedEstimator`, feature `fault-injection`).
//! - [`Inflight`]: in-flight counts per key; its [`Guard`] gives the count back on drop (a
//!   [`BorrowedGuard`](inflight::BorrowedGuard) from [`Inflight::incr_borrowed`] does the
//!   same without an `Arc`).
//! - [`Rate`]: per-key event counts per window and the rates they give;
//!   [`RateComponents`](rate::RateComponents) and
//!   [`PROPORTIONAL_RATE_ESTIMATE_CALC_FN`](rate::PROPORTIONAL_RATE_ESTIMATE_CALC_FN) for
//!   sliding-window estimates.
//! - [`Limiter`]: per-key limits on in-flight requests and request rate, decided by the
//!   sketches with an exact second stage for the keys near their limits, built by
//!   [`LimiterBuilder`], with per-key [`Limits`] ([`WithLimits`]) that can change live
//!   ([`LimitKind`] names a kind of limit);
//!   [`Permit`] and [`OwnedPermit`] (borrowing and owning the limiter, as tokio's semaphore
//!   permits), [`Acquire`] to wait for one, and [`Rejected`], [`Reason`], [`Estimate`],
//!   [`HeavyHitter`] and [`LimiterStats`] for what it decided and why (a heavy hitter's
//!   figures are each a [`Figure`]: counted, or the sketch's upper bound);
//!   [`AdaptiveInflight`] for in-flight limits that each hot origin learns from its latency
//!   ([`InflightLimit`] says whether a key's limit is configured or learnt),
//!   and [`Outcome`] for what a permit's origin answered.
//! - [`fields`]: what an HTTP front end says about a decision, with no feature and no HTTP
//!   crate: the key of a request's host, `Retry-After`, and the `RateLimit-Policy` and
//!   `RateLimit` values, the same as the tower layer's (for pingora or any other proxy).
#![cfg_attr(
    feature = "tower",
    doc = "- [`layer`] (feature `tower`, on by default): a tower layer for hyper and axum, \
           [`LimitLayer`](layer::LimitLayer), that answers 503 + `Retry-After` and the IETF \
           `RateLimit-Policy` and `RateLimit` fields, per origin host or any key, under the \
           limiter's limits or each request's own."
)]
#![cfg_attr(
    not(feature = "tower"),
    doc = "- `layer` (feature `tower`): a tower layer answering 503 + `Retry-After`."
)]
#![cfg_attr(
    feature = "redis",
    doc = "- [`fleet`] (feature `redis`): one limit held across a fleet of proxies through Redis \
           or Redis Cluster: [`FleetConfig`](fleet::FleetConfig) and \
           [`FleetStatus`](fleet::FleetStatus)."
)]
//! - [`clock`]: the shared 10 ms ticker behind `Rate`, its fork functions, and
//!   [`ManualClock`](clock::ManualClock) for tests.
//! - [`ConfigError`]: what was wrong with a configuration, returned by every fallible
//!   constructor (`try_new`, `with_size`, `with_error`, the builders); the constructors with
//!   pingora-limits' signatures (`Estimator::new`, `Rate::new`,
//!   `Rate::new_with_estimator_config`) panic with its message instead.
//!
//! # Where the types are
//!
//! The types a first program needs, by the path it imports them from:
//!
//! | Type | Path |
//! |---|---|
//! | the limiter, its builder, per-key limits | `floodgate::{Limiter, LimiterBuilder, Limits}` |
//! | a refusal and its reason | `floodgate::{Rejected, Reason}` |
//! | a heavy hitter, its figures and in-flight limit | `floodgate::{HeavyHitter, Figure, InflightLimit}` |
//! | the tower layer (feature `tower`) | `floodgate::layer::LimitLayer` |
//! | keys by host, by client address, or your own | `floodgate::layer::{HostKey, ClientKey, KeyExtractor}` |
//! | which client address a request is keyed by, and the proxies trusted | `floodgate::fields::client::ClientAddr` |
//! | what to do with a request without a key | `floodgate::layer::Unkeyed` |
//! | a 429 or a body of yours instead of the 503 | `floodgate::layer::RefusalResponse` |
//! | one limit across a fleet (feature `redis`) | `floodgate::fleet::FleetConfig` |
//! | a clock for tests | `floodgate::clock::ManualClock` |
//!
//! `ClientKey` is in `layer` because it reads the request's extensions; `ClientAddr` is in
//! `fields::client` because it needs no HTTP crate, so a proxy without tower uses it too.
//!
//! The modules [`estimator`], [`inflight`] and [`rate`] mirror pingora-limits' paths, so code written
//! for `pingora_limits::inflight::Inflight` compiles against `floodgate::inflight::Inflight`,
//! a `struct Ctx { guard: Option<Guard> }` included. What behaves differently is listed in the
//! migration guide (`docs/migrating-from-pingora-limits.md`).
//!
//! # Examples
//!
//! ```
//! use floodgate::Inflight;
//!
//! let inflight = Inflight::new();
//! let limit = 2;
//! let (first, n) = inflight.incr("origin-a", 1);
//! assert!(n <= limit);
//! let (_second, n) = inflight.incr("origin-a", 1);
//! assert!(n <= limit);
//! let (_third, n) = inflight.incr("origin-a", 1);
//! assert!(n > limit, "the third concurrent request would get a 503");
//! drop(first);
//! assert_eq!(inflight.get("origin-a"), 2);
//! ```
#![forbid(unsafe_code)]
// docs.rs builds with `--cfg docsrs` on nightly: each item behind a feature says which.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod clock;
mod counter;
mod error;
pub mod estimator;
pub mod fields;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod fleet;
pub mod inflight;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod layer;
mod limiter;
pub mod rate;
mod sync;

pub use error::ConfigError;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub use estimator::BlockedEstimator;
pub use estimator::Estimator;
pub use inflight::{Guard, Inflight};
pub use limiter::{
    Acquire, AdaptiveInflight, Estimate, Figure, HeavyHitter, InflightLimit, LimitKind, Limiter,
    LimiterBuilder, LimiterStats, Limits, Outcome, OwnedPermit, Permit, Reason, Rejected,
    WithLimits,
};
pub use rate::Rate;

/// The README's examples, run as doctests so the quick start stays true (its axum examples
/// use the `LimitLayer`, hence the feature). `tests/readme.rs` checks what its first screen
/// shows and that its links lead somewhere.
#[cfg(all(doctest, feature = "tower"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (docs/guide.md), run as doctests; some use the `LimitLayer`.
#[cfg(all(doctest, feature = "tower"))]
#[doc = include_str!("../docs/guide.md")]
pub struct UsingDoctests;

/// The migration guides' and the operating guide's examples, run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../docs/migrating-from-governor.md")]
#[doc = include_str!("../docs/migrating-from-pingora-limits.md")]
#[doc = include_str!("../docs/operating.md")]
pub struct GuideDoctests;
