//! What an HTTP front end says about a decision, as plain values: the key of a request's
//! host or of its client's address, what a body costs in bytes, `Retry-After`, the
//! `RateLimit-Policy` and `RateLimit` fields, and which of them a refusal carries.
//!
//! The tower layer (`floodgate::layer`, feature `tower`) builds its keys and responses
//! from these. They need no feature and no HTTP crate: a proxy built on something else
//! (pingora, say) passes a `&str` or a field's bytes and gets the same keys and the same
//! values as the layer.
//!
//! # Examples
//!
//! A refusal, answered as the layer answers it:
//!
//! ```
//! use std::time::Duration;
//! use floodgate::fields::{host::request_host_key, ratelimit::Policies, retry::retry_after_secs};
//! use floodgate::Limiter;
//!
//! let limiter: Limiter<String> = Limiter::builder()
//!     .max_rate(1, Duration::from_secs(1))
//!     .build()
//!     .unwrap();
//! let key = request_host_key(None, Some(b"API.Example:443"));
//! assert_eq!(key, "api.example");
//! let _first = limiter.try_acquire(&*key).unwrap();
//! let refused = limiter.try_acquire(&*key).unwrap_err();
//!
//! let policies = Policies::of(&limiter, None);
//! let retry_after = retry_after_secs(&refused, 0).unwrap();
//! assert!(retry_after >= 1);
//! assert_eq!(policies.policy().unwrap(), "\"rate\";q=1;w=1");
//! assert_eq!(policies.refused(&refused).unwrap(), format!("\"rate\";r=0;t={retry_after}"));
//! ```

pub mod client;
pub mod cost;
pub mod host;
pub mod ratelimit;
pub mod refusal;
pub mod retry;
