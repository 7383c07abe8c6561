//! libFuzzer target: `harness::inflight::run` (see `fuzz/harness/inflight.rs` for what it checks).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

use harness::inflight::InflightInput;

libfuzzer_sys::fuzz_target!(|input: InflightInput| harness::inflight::run(&input));
