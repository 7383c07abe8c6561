//! Helpers shared by the integration tests (and, through `#[path]`, by benches/limiter.rs):
//! one file per concept.
//!
//! - [`alloc`]: the counting global allocator (re-exported here, as the tests and benches
//!   name it `common::CountingAlloc`); a test file installs it with
//!   `#[global_allocator] static GLOBAL: common::CountingAlloc = common::CountingAlloc;`.
//! - `fleet` (feature `redis`): paced traffic through fleet nodes in the background, tallied
//!   by Unix time, for the fleet's fault tests.
//! - [`fork`]: forking with a child that reports back, and waiting for it with a deadline.
//! - `layer` (feature `tower`): requests in origin form, and a strict reader of the
//!   `RateLimit-Policy` and `RateLimit` fields, for tests/layer.rs and tests/axum.rs.
//! - [`ops`]: proptest strategies for the operation types of the fuzz harness's exact models.
//! - [`permits`]: [`permits::AnyPermit`], a permit of either kind.
//! - [`redis`]: real `redis-server`s (one, or a Cluster) on free loopback ports for the fleet's
//!   tests, skipped with a printed reason without the binary (failed under CI); also included by
//!   the fleet store's unit tests (`src/fleet/store/tests.rs`) and the fleet bench.
//! - [`serial`]: serialising the tests of one binary, and quieting their injected panics.
//! - [`ticker`]: polling with a deadline, and checks that the shared ticker is alive and single.
// Each test crate uses the part it needs.
#![allow(dead_code)]

pub mod alloc;
#[cfg(feature = "redis")]
pub mod fleet;
pub mod fork;
#[cfg(feature = "tower")]
pub mod layer;
pub mod ops;
// One source for the harness and the tests: a test that includes fuzz/harness/ loads the
// file there as well.
#[allow(clippy::duplicate_mod)]
#[path = "../../fuzz/harness/permits.rs"]
pub mod permits;
pub mod redis;
pub mod serial;
pub mod ticker;

// Re-exported for benches/limiter.rs, which names them `counting::…` through this file; not
// every test crate uses all three.
#[allow(unused_imports)]
pub use self::alloc::{bytes_allocated_by, bytes_held, CountingAlloc};
