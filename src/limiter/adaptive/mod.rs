//! In-flight limits that learn each hot origin's capacity from its latency. A promoted key
//! whose requests in flight reached its learning threshold gets a learner (`learner.rs`: the
//! control law, as arithmetic on values), kept in what the limiter keeps for the key
//! (`Promoted::learning`); the request path and the release tell it the key's admissions and
//! completions, under the key's set lock, and judge the key's requests against its limit
//! instead of the configured `max_inflight` (which stays the ceiling), all through
//! `learning.rs`. `config.rs` holds the operator's settings, `completion.rs` what a permit
//! tells of its request.
//!
//! # The law
//!
//! An origin with `c` servers and service time `s` serves `c / s` requests a second. In flight
//! below `c`, a request takes `s`; above it, the excess waits, and the latency grows with the
//! concurrency (`s · L / c`) while the throughput stays `c / s`. The limit to learn is where
//! latency starts to grow with concurrency: the queue it allows is the proxy's, not the
//! origin's, and the origin keeps serving at full speed.
//!
//! The learner works in *rounds*. A round is the requests admitted while it is open: it
//! closes to admissions once it took `MIN_ROUND` of them (fewer for a key held under that)
//! and spans a latency, and it is judged once nine in ten of them completed. Each permit
//! carries its admission time, so a round's mean latency and its standard error are those of
//! its own requests, and go with the concurrency they were admitted at (its mean in flight
//! while open): a request's wait depends on the queue it joined, so a cut is judged by the
//! requests admitted after it, not by those that queued before it and complete after.
//!
//! At the judgement of a round of mean latency `m`, with `no_load` the latency the origin gives
//! when nothing queues:
//!
//! - **No harm to a healthy origin.** The limit starts at the ceiling, never at a count (a
//!   sketch estimate shares counters with other keys; the learning threshold is judged on
//!   the key's exact count). A round is *over* the tolerance only if `m` is above `tolerance ·
//!   no_load` by more than twice its standard error, and the origin is falling behind: its
//!   requests were refused, or its concurrency grew by a quarter and by more than its noise
//!   since the round before. A healthy origin with few servers queues now and then, and its
//!   queue does not grow.
//! - **Gradient** (envoy's adaptive concurrency; Netflix's Gradient): after two rounds over in
//!   a row, `g = tolerance · no_load / m` (of the lower of the two), clamped to `[1/2, 1]`, and
//!   `limit ← C · g + ¾√C` from the round's concurrency `C`: with `c` servers, `C · g` is
//!   `tolerance · c`, and the limit settles near `tolerance · c + ¾√limit`. Each step is taken
//!   from what the round used, not from the limit now, which was set a round or two after it
//!   was admitted: steps from the limit would compound.
//! - **Growth.** A round within the tolerance that used half the limit or more raises it to
//!   `C + ¾√C`; one with requests refused and nothing queued (within the square root of the
//!   tolerance) doubles it from what it used (TCP's slow start): the origin recovered.
//! - **Overload** (AIMD's signal): a round whose completions were reported as overloads (a
//!   5xx, a timeout: `Outcome::Overload`) that took longer than the tolerance allows over the
//!   origin's latency multiplies the limit (from at most twice what it used) by
//!   `1 − share / 2`: a hang, every request timing out, halves it a round, a timeout now and
//!   then costs a hair. Quick overloads (a 5xx answered at the origin's own latency or faster:
//!   a broken route, a client's bad input, an attacker's) say nothing of load: they do not
//!   cut, and a round's latency is its successes'. The first round after with no overload and
//!   the latency known gives the room back.
//! - **Hangs.** When the overloads that cut the limit were slower than the tolerance allows
//!   (timeouts, not quick 5xx), a slot a timeout frees is not taken again, and a request
//!   refused with nothing admitted for a second goes through as a *canary* (the limit is let up
//!   to it, as a circuit breaker's half-open state lets one through). The first request
//!   admitted after the last one that timed out and answered at the latency known says the
//!   hang is over: the room comes back at once, without waiting for the requests admitted
//!   during the hang to time out. A hang thus holds the floor and a canary for each second
//!   of its timeout, and its end is heard within a second and a request's latency.
//! - **No-load latency.** The first round measures it (the key reached its learning
//!   threshold, at a concurrency under its servers when the ceiling is a few times them). A
//!   round faster than it by more than the tolerance lowers it (the origin got faster). Two
//!   tests raise it (the origin slowed down): the *slope test*, a round whose concurrency fell
//!   by a quarter and whose latency fell by under a third of that (a queue would have shrunk
//!   with it); and a *probe*, while requests are refused and the latency is over: the limit
//!   is halved, the next round opens once in flight drained to it, and it halves again while
//!   each round is a quarter faster than the one before; when the latency stops falling, its
//!   mean is the no-load latency, and the limit grows back by doubling from the level before
//!   the last halving while the latency allows. A probe comes at the first such round, then
//!   every `probe_every` rounds, and after two rounds at the lowest gradient. A key whose
//!   first round is already at its limit (its origin fell behind before the learner knew it)
//!   probes at once, by a quarter first.
//! - **Where it starts, and how long it lasts.** A key starts learning when its requests in
//!   flight counted exactly reach `learn_from` of its ceiling (the in-flight promotion
//!   threshold is lowered to it, so the key is in the exact stage by then), at the ceiling.
//!   A learner whose rounds cannot end (no request of theirs completed for 8 of the last
//!   round's latencies, at least a second, while requests are refused: streams, requests
//!   admitted before it started) starts afresh at the ceiling. After a round in which its in flight stayed under half its threshold with no refusal and
//!   no overload, its learner rests: the key is judged by `max_inflight` again and reads no
//!   clock, and the learner keeps its no-load latency for when the key learns again. A key
//!   keeps what it learnt (and its place in the exact stage) until it has had no request for
//!   `forget_after`.
//!
//! Between the floor and the ceiling, always: the ceiling is the key's `max_inflight` of the
//! request being judged, so a per-key limit lowered later caps the learnt one at once.
//!
//! The constants are chosen on a family of origin models with drawn parameters (servers,
//! service times and their noise, loads, bursts, faults: `capacity_sim` in the examples'
//! support crate, whose docs give the ranges) and judged on members not chosen on; each
//! constant's comment gives its reason in terms of the family.
//!
//! # Compared with the algorithms it borrows from
//!
//! - Netflix concurrency-limits' **Vegas** estimates the queue as `limit · (1 − rtt_noload /
//!   rtt)` against an all-time minimum RTT, reset by occasional probes; **Gradient2** compares
//!   a short-term RTT with a long-term average, which drifts upward under sustained overload;
//!   **AIMD** reacts to drops only. Their state is one per service. Both are written from
//!   their documented algorithms beside this one (`capacity_sim::baseline`), and the example
//!   `adaptive` sets the three side by side on the family.
//! - envoy's **adaptive concurrency** filter uses the gradient above against a minimum RTT it
//!   measures by pinning the concurrency to a small value at fixed intervals, refusing the
//!   excess meanwhile.
//!
//! This learner takes envoy's gradient and its measured no-load latency, but probes by halving
//! (a round at half the limit, not at a fixed minimum) and only when the limit binds and the
//! latency is over, so that an origin below its limit is never refused for a probe; and it
//! keeps one learner per hot key, in the exact stage's fixed table.

mod completion;
mod config;
mod learner;
mod learning;

pub(crate) use completion::Completion;
pub use completion::Outcome;
pub use config::AdaptiveInflight;
pub(crate) use learning::Learning;
