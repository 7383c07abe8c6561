//! Forking a test process: the child runs a closure and reports through a socket, the parent
//! waits for it with a deadline (tests/clock.rs, tests/faults.rs). Callers hold
//! [`serial`](super::serial::serial) so that no other test's thread holds a lock the child
//! would need.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::thread;
use std::time::{Duration, Instant};

use floodgate::clock;
use floodgate_test_support::panics::panic_message;

use super::ticker::DEADLINE;

/// A forked child: its pid, and the parent's end of a socket on which it reports.
pub struct Child {
    pid: libc::pid_t,
    report: UnixStream,
}

/// Forks, with the fork functions around it if `fork_functions` (`prepare_fork`, then
/// `after_fork_in_child` in the child and `after_fork_in_parent` in the parent); the child
/// runs `child` and exits through `_exit` (never returning into the test harness) with 0 and
/// `child`'s summary, or 1 and its error (2 if it panicked), written to the report socket.
/// Returns in the parent only.
pub fn fork_child(fork_functions: bool, child: impl FnOnce() -> Result<String, String>) -> Child {
    let (report, mut child_end) = UnixStream::pair().expect("socketpair for the child's report");
    if fork_functions {
        clock::prepare_fork();
    }
    // SAFETY: fork() has no memory-safety preconditions. The other test threads are parked on
    // `serial()`; the child only uses the crate, the allocator (fork-safe in glibc), sleeps,
    // /proc and the report socket, and leaves through `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        if fork_functions {
            clock::after_fork_in_child();
        }
        let (code, message) = match catch_unwind(AssertUnwindSafe(child)) {
            Ok(Ok(summary)) => (0, summary),
            Ok(Err(failure)) => (1, failure),
            Err(panic) => (2, format!("the child panicked: {}", panic_message(&*panic))),
        };
        let _ = child_end.write_all(message.as_bytes());
        // SAFETY: `_exit` ends the child at once; nothing of the harness runs in the child.
        unsafe { libc::_exit(code) }
    }
    if fork_functions {
        clock::after_fork_in_parent();
    }
    assert!(pid > 0, "fork failed: {}", std::io::Error::last_os_error());
    drop(child_end); // so that reading the report ends when the child has exited
    Child { pid, report }
}

impl Child {
    /// Waits for the child, killing it if it has not finished within `limit`, and returns its
    /// summary or failure.
    pub fn wait(mut self, limit: Duration) -> Result<String, String> {
        let mut status = 0;
        let start = Instant::now();
        loop {
            // SAFETY: `pid` is our child and `status` a valid out-pointer.
            let done = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if done < 0 {
                return Err(format!(
                    "waitpid failed: {}",
                    std::io::Error::last_os_error()
                ));
            }
            if done == self.pid {
                break;
            }
            if start.elapsed() > limit {
                // SAFETY: killing and reaping our own child.
                unsafe {
                    libc::kill(self.pid, libc::SIGKILL);
                    libc::waitpid(self.pid, &mut status, 0);
                }
                return Err(format!("the child did not finish within {limit:?}: killed"));
            }
            thread::sleep(Duration::from_millis(10));
        }
        println!("forked child finished after {:?}", start.elapsed());
        let mut message = String::new();
        self.report
            .set_read_timeout(Some(DEADLINE))
            .and_then(|()| self.report.read_to_string(&mut message))
            .map_err(|e| format!("reading the child's report: {e}"))?;
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Ok(message),
            (true, code) => Err(format!("the child failed (exit code {code}): {message}")),
            (false, _) => Err(format!("the child died: wait status {status:#x}")),
        }
    }
}
