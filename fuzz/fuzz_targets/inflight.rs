//! libFuzzer target: the fuzz harness's `inflight::run`, whose file
//! (`fuzz/harness/src/inflight.rs`) says what it checks.
#![no_main]

use floodgate_fuzz_harness::inflight::{run, InflightInput};

libfuzzer_sys::fuzz_target!(|input: InflightInput| run(&input));
