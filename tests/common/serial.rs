//! Serialising the tests of one test binary that share process-wide state (the shared ticker,
//! or a fork that must not happen while another test's thread holds a lock the child would
//! need), and keeping the panics they inject on purpose quiet.
//!
//! Each test binary has its own statics, so [`serial`] serialises the tests within one binary
//! only: that is what they need, since each binary is its own process with its own ticker.

use std::sync::{Mutex, MutexGuard, Once};

use floodgate_test_support::panics::panic_message;

/// Serialises the tests of this binary that take it (cargo runs tests in parallel). Also
/// installs [`quiet_injected_panics`].
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    quiet_injected_panics();
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keeps the panics the tests inject (those whose message contains "injected by", such as the
/// ticker's own injected panic) from printing their messages and backtraces; every other
/// panic is reported as usual.
pub fn quiet_injected_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !panic_message(info.payload()).contains("injected by") {
                report(info);
            }
        }));
    });
}
