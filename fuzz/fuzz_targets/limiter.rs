//! libFuzzer target: the fuzz harness's `limiter::run`, whose file
//! (`fuzz/harness/src/limiter.rs`) says what it checks.
#![no_main]

use floodgate_fuzz_harness::limiter::{run, LimiterInput};

libfuzzer_sys::fuzz_target!(|input: LimiterInput| run(&input));
