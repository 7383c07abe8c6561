//! The limiter's first stage: the in-flight and rate sketches, counted in by every request and
//! read again where the decision (the `decision` module) needs their estimates.

use std::hash::Hash;

use crate::estimator::{Blocked, KeyHasher};
use crate::rate::WindowView;
use crate::Rate;

/// An estimate from this up is saturated: the counters read at most 2^31 (`counter::narrow`),
/// over every limit, whatever more a rate window's saturated counters were given. Such an
/// estimate bounds nothing: a request's own units taken from it are not a bound on the
/// others' (issue 38), so the decision keeps it whole ([`less_own`]).
pub(crate) const SATURATED: isize = crate::estimator::CEILING as isize;

/// The in-flight estimate of a request whose units a counter of its key could not hold
/// (`Blocked::try_incr`): nothing of it is counted, and it is refused. Past every promotion
/// threshold (`u32::MAX` for none), so only the path of hot keys meets it.
pub(crate) const UNCOUNTED: isize = isize::MAX;

/// An estimate `count` with `own` units of it (a request's own) taken out: an upper bound on
/// the rest, unless `count` is [`SATURATED`], which stays so.
#[inline]
pub(crate) fn less_own(count: isize, own: isize) -> isize {
    if count >= SATURATED {
        count
    } else {
        count - own
    }
}

/// The sketches of one limiter, and the one hasher all of them are read with. Which sketches
/// exist (the kinds the limiter counts) is fixed by its builder.
pub(crate) struct Sketches {
    pub(crate) hasher: KeyHasher,
    /// Requests in flight per key: a key's rows in one cache line.
    pub(crate) inflight: Option<Blocked>,
    /// Requests per key in a sliding window.
    pub(crate) rate: Option<Rate>,
}

/// The sketches' estimates of a key now, counting nothing: whether a promoted key has cooled
/// down, and the reports.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reread {
    /// The in-flight estimate; `None` when the limiter counts none.
    pub(crate) inflight: Option<isize>,
    /// The rate window with the key's counts; `None` when the limiter counts no rate.
    pub(crate) window: Option<WindowView>,
}

/// A request's key counted again in the request's windows, under the exact stage's lock: the
/// in-flight estimate and the (previous, current) window counts; `None` for a kind the
/// limiter does not count.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Recount {
    pub(crate) inflight: Option<isize>,
    pub(crate) window: Option<(isize, isize)>,
}

/// What the sketches said about one request.
#[derive(Clone, Copy)]
pub(crate) struct Sketched {
    pub(crate) hash: u64,
    /// The request's units, counted in each sketch (1 but for a request with a cost).
    pub(crate) cost: isize,
    /// In-flight estimate, this request included; [`UNCOUNTED`] if its counters could not
    /// hold it.
    pub(crate) inflight: Option<isize>,
    /// Rate window, this request included.
    pub(crate) window: Option<WindowView>,
}

impl Sketches {
    /// The key's hash, the one every sketch and the exact stage are indexed by.
    #[inline]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash(key)
    }

    /// Counts a request of `cost` units in every sketch and returns what they say, this
    /// request included. The in-flight sketch counts it whole or not at all
    /// ([`UNCOUNTED`]), so that its release is the exact inverse; the rate windows saturate.
    ///
    /// Always inlined, and `Rate::observe_hashed` within it: with the request's cost among
    /// their arguments the compiler stopped inlining them into `try_acquire`, and healthy
    /// requests took 36 instructions more (369 to 405 on the uniform trace, callgrind).
    #[inline(always)]
    pub(crate) fn observe(&self, hash: u64, cost: u32) -> Sketched {
        self.observe_reading_previous_through(hash, cost, u64::MAX)
    }

    /// [`observe`](Self::observe), reading the key's previous rate window only in a window of
    /// bucket up to `read_previous_through` (later, its count is left 0, unread: `quiet.rs`).
    /// A request that goes on past the sketches alone reads it with
    /// [`with_previous`](Self::with_previous) first.
    #[inline(always)]
    pub(crate) fn observe_reading_previous_through(
        &self,
        hash: u64,
        cost: u32,
        read_previous_through: u64,
    ) -> Sketched {
        Sketched {
            hash,
            cost: cost as isize,
            inflight: self
                .inflight
                .as_ref()
                .map(|sketch| sketch.try_incr(hash, cost).unwrap_or(UNCOUNTED)),
            window: self
                .rate
                .as_ref()
                .map(|rate| rate.observe_hashed(hash, cost, read_previous_through)),
        }
    }

    /// `s`, observed by [`observe_reading_previous_through`](Self::observe_reading_previous_through)
    /// with `read_previous_through`, with its key's previous rate window read now if it was
    /// left unread then: for a request the sketches do not admit alone.
    pub(crate) fn with_previous(&self, s: Sketched, read_previous_through: u64) -> Sketched {
        match (&self.rate, s.window) {
            (Some(rate), Some(w)) if w.bucket > read_previous_through => Sketched {
                window: Some(rate.with_previous(s.hash, w)),
                ..s
            },
            _ => s,
        }
    }

    /// Gives back the in-flight units of a request that was rejected or has finished (for one
    /// the exact stage counted, after its entry's units: see `InflightCount::rebase`): the exact
    /// inverse of what [`observe`](Self::observe) counted. Never for an [`UNCOUNTED`] one.
    #[inline]
    pub(crate) fn release(&self, hash: u64, cost: u32) {
        if let Some(sketch) = &self.inflight {
            sketch.give_back(hash, cost);
        }
    }

    /// The key's estimates now, counting nothing: for the exact stage's coolness and reports.
    pub(crate) fn reread(&self, hash: u64) -> Reread {
        Reread {
            inflight: self.inflight_now(hash),
            window: self.rate.as_ref().map(|rate| rate.view(hash)),
        }
    }

    /// The request's key's estimates read again, in the request's windows.
    #[inline]
    pub(crate) fn recount(&self, s: &Sketched) -> Recount {
        Recount {
            inflight: self.inflight_now(s.hash),
            window: (self.rate.as_ref().zip(s.window.as_ref()))
                .map(|(rate, view)| rate.counts_in(s.hash, view)),
        }
    }

    /// The key's rate window now, with its counts, if the clock has passed the window of the
    /// request `s`: what a promotion by a request that read the time before a window's end,
    /// and reached the lock after it, counts from (see `decision::promoted`). Read after the
    /// key is flagged, it is no earlier than the window of any request that counted itself
    /// before the flag (each read the time before it counted).
    pub(crate) fn window_past(&self, s: &Sketched) -> Option<WindowView> {
        let (rate, own) = self.rate.as_ref().zip(s.window)?;
        let now = rate.view(s.hash);
        (now.bucket > own.bucket).then_some(now)
    }

    /// The request `s` again, in the rate window of the time now, if the key's exact counts
    /// have reached a window later than the request's own (`reached`): its rate units counted
    /// again in the window now (those in its own window stay, an over-count), its in-flight
    /// units as they were. `None` otherwise.
    ///
    /// Decided in its own window, such a request would pass a judgement the requests of the
    /// later window, decided before it, made without it: their sliding counts weigh its
    /// window, and it would take the key past its limit at their time. Decided now, it is
    /// judged with them; counted in the sketch's window now too, it is in both counts a
    /// later request takes the smaller of in that window (its units in the exact count
    /// alone were lost to the sketch's smaller count, and the key admitted past its limit
    /// by them). The time now is no earlier than `reached`: a request of that window read
    /// its time before it took the lock this request holds.
    pub(crate) fn again_after(&self, s: &Sketched, reached: u64) -> Option<Sketched> {
        let (rate, own) = self.rate.as_ref().zip(s.window)?;
        if own.bucket >= reached {
            return None;
        }
        let cost = u32::try_from(s.cost).unwrap_or(u32::MAX);
        Some(Sketched {
            window: Some(rate.observe_hashed(s.hash, cost, u64::MAX)),
            ..*s
        })
    }

    /// The request's key's estimates now, in the request's windows, as views: what a
    /// coolness judged under the exact stage's lock reads. Not the request's own counts:
    /// its thread may have been held up between counting and the lock while the key's other
    /// requests made it hot.
    pub(crate) fn reread_in(&self, s: &Sketched) -> Reread {
        let now = self.recount(s);
        Reread {
            inflight: now.inflight,
            window: s
                .window
                .zip(now.window)
                .map(|(view, counts)| view.with_counts(counts)),
        }
    }

    /// The key's in-flight estimate now (`None` when the limiter counts none).
    #[inline]
    pub(crate) fn inflight_now(&self, hash: u64) -> Option<isize> {
        self.inflight.as_ref().map(|sketch| sketch.get(hash))
    }

    /// Bytes of the sketches.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.inflight.as_ref().map_or(0, Blocked::memory_bytes)
            + self.rate.as_ref().map_or(0, Rate::memory_bytes)
    }
}
