//! The exact models of floodgate's components, shared by the fuzz targets and the proptests:
//! a crate of its own (floodgate-fuzz-harness), which fuzz/ and the tests depend on.
//!
//! Each component has one file: its operations (types deriving [`arbitrary::Arbitrary`]), its
//! exact model, and `run`, which applies the operations to the crate and to the model and
//! panics when a property of docs/architecture.md ("Properties that must hold everywhere")
//! is violated. Three drivers run the same `run`:
//!
//! - libFuzzer (`fuzz/fuzz_targets/*.rs`), decoding the input from its bytes;
//! - `tests/fuzz_corpus.rs` on stable, replaying the committed corpus `fuzz/corpus/<target>/`
//!   with the same decoding ([`decode`]) and the named seeds of each file;
//! - the proptests in `tests/{estimator,inflight,rate,limiter,wait}.rs`, which build the same
//!   operation types from proptest bytes, one op at a time (`tests/common/ops.rs`).
//!
//! Parameters are raw integers in the types and bounded in one place, the accessor that reads
//! them (`Amount::get`, `LimiterConfig::settings`, ...), so every input is valid.
//!
//! Counts are modelled exactly in `i128`; the sketches' hashing is keyed with random seeds per
//! instance, so which keys collide differs from run to run. Every check therefore holds for
//! *any* collision pattern: lower bounds (never under-count) from the key's own count, upper
//! bounds (only what was counted, nothing stale) from the total of all keys.

pub mod construction;
pub mod estimator;
pub mod inflight;
pub mod limiter;
pub mod permits;
pub mod rate;
mod time;
pub mod wait;

use arbitrary::{Arbitrary, Unstructured};

/// The most operations one input runs.
pub const MAX_OPS: usize = 1024;

/// Where counters saturate (`Estimator` docs: "Counters saturate at `isize::MAX / 2`").
const CEILING: isize = isize::MAX / 2;
/// The lowest a counter goes (decrements without matching increments).
const FLOOR: isize = -CEILING;
/// One tick of the coarse clock, in nanoseconds (`floodgate::clock::TICK`).
const TICK_NANOS: u64 = 10_000_000;
/// Slack for sliding-window counts computed in floating point.
const EPS: f64 = 1e-9;

/// Decodes an input from fuzzer bytes exactly as `libfuzzer_sys::fuzz_target!` does for a
/// typed closure, so the committed corpus replays on stable as it ran under libFuzzer.
/// `None` for bytes libFuzzer would skip.
pub fn decode<'a, T: Arbitrary<'a>>(data: &'a [u8]) -> Option<T> {
    T::arbitrary_take_rest(Unstructured::new(data)).ok()
}

/// The tolerance for comparing a count near `x` computed two ways in floating point.
fn slack(x: f64) -> f64 {
    EPS * x.abs().max(1.0)
}

/// `x` capped at `isize::MAX`, as saturating sums of estimates are.
fn cap(x: i128) -> isize {
    x.min(isize::MAX as i128) as isize
}

/// A key index from a raw byte, for `keys` keys.
fn key(raw: u8, keys: usize) -> usize {
    usize::from(raw) % keys
}

/// The operations one input runs, at most [`MAX_OPS`].
fn bounded<T>(ops: &[T]) -> &[T] {
    &ops[..ops.len().min(MAX_OPS)]
}

/// A non-negative count for `Inflight::incr` and `Rate::observe`: mostly 0–3, sometimes up
/// to 1000, rarely large enough to saturate (only when `large`).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub struct Amount {
    tag: u8,
    raw: u16,
}

impl Amount {
    fn get(self, large: bool) -> isize {
        const LARGE: [isize; 8] = [
            CEILING,
            CEILING / 2,
            CEILING / 3 + 1,
            isize::MAX,
            1 << 42,
            (1 << 42) + 1,
            CEILING - 1,
            1000,
        ];
        match self.tag {
            0..=199 => isize::from(self.tag % 4),
            200..=239 => (self.raw % 1001) as isize,
            _ if large => LARGE[usize::from(self.tag % 8)],
            _ => isize::from(self.tag % 6),
        }
    }
}
