//! libFuzzer target: `harness::limiter::run` (see `fuzz/harness/limiter.rs` for what it checks).
#![no_main]

#[path = "../harness/mod.rs"]
mod harness;

use harness::limiter::LimiterInput;

libfuzzer_sys::fuzz_target!(|input: LimiterInput| harness::limiter::run(&input));
