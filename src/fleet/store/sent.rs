//! The commands of a sync, and what each reply answers.

/// A command of a sync, by what it is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Job {
    /// The window script for push `i`.
    Window(usize),
    /// The nodes script.
    Nodes,
}

/// A command still to send, and the master an `ASK` redirection named for it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub(super) job: Job,
    pub(super) ask: Option<usize>,
}

/// What a reply answers, in the order the commands went out to one master.
#[derive(Debug, Clone, Copy)]
pub(super) enum Sent {
    /// `SCRIPT LOAD`, before the first script on a connection (or after a `NOSCRIPT`).
    Load,
    /// `ASKING`, before a command redirected by `ASK`.
    Asking,
    /// A script.
    Job(Pending),
}
