//! libFuzzer target: `harness::construction` (see `fuzz/harness.rs` for what it checks).
#![no_main]

// Each target uses one of the harness's functions.
#[allow(dead_code)]
#[path = "../harness.rs"]
mod harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| harness::construction(data));
