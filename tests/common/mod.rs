//! Helpers shared by the integration tests that need floodgate's types or are theirs alone:
//! one file per concept. What the benches, examples or unit tests share as well lives in
//! test-support/ (the Redis harness, the counting allocator, panic messages, the loom models'
//! `check`), and the exact models and `AnyPermit`, which the fuzz targets share, in the fuzz
//! harness (fuzz/harness/).
//!
//! - `fleet` (feature `redis`): paced traffic through fleet nodes in the background, tallied
//!   by Unix time, for the fleet's fault tests.
//! - [`fork`]: forking with a child that reports back, and waiting for it with a deadline.
//! - `layer` (feature `tower`): requests in origin form, and a strict reader of the
//!   `RateLimit-Policy` and `RateLimit` fields, for tests/layer.rs and tests/axum.rs.
//! - [`ops`]: proptest strategies for the operation types of the fuzz harness's exact models.
//! - [`serial`]: serialising the tests of one binary, and quieting their injected panics.
//! - [`ticker`]: polling with a deadline, and checks that the shared ticker is alive and single.
// Each test crate uses the part it needs.
#![allow(dead_code)]

#[cfg(feature = "redis")]
pub mod fleet;
pub mod fork;
#[cfg(feature = "tower")]
pub mod layer;
pub mod ops;
pub mod serial;
pub mod ticker;
