//! Scaffolding shared by floodgate's unit tests, integration tests, benches and examples, as a
//! dev-dependency of the crate, and by the tools beside it (tools/compare_report, tools/soak):
//! one file per concept.
//!
//! - [`bench_ids`]: the ids of the benches' groups and results, which the comparison report
//!   (tools/compare_report) expects.
//! - [`counting_alloc`]: the counting global allocator that measures "fixed memory" and "no
//!   allocation on the request path".
//! - `loom` (under `--cfg floodgate_loom`): `check`, how every loom model is explored.
//! - [`panics`]: the message of a panic, caught or in a hook.
//! - [`redis_server`]: real `redis-server`s (one, or a Cluster) on free loopback ports for the
//!   fleet's tests and bench, and the fleet example's own server.
//! - [`waker`]: a waker that does nothing, for futures polled by hand.
//!
//! It does not depend on floodgate: floodgate's unit tests use it too (the Redis harness, in
//! `src/fleet/store/tests.rs`), and a crate built on floodgate would hand them a second copy
//! of floodgate, whose types are not those under test. A helper that needs floodgate's types
//! lives with the tests (`tests/common/`), in the fuzz harness (`fuzz/harness/`) or, for the
//! examples and the soak server, in `examples/support/`.

pub mod bench_ids;
pub mod counting_alloc;
#[cfg(floodgate_loom)]
pub mod loom;
pub mod panics;
pub mod redis_server;
pub mod waker;
