//! `Limiter`: operations, the exact model of admitted and offered requests, and the checks at
//! every decision.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use arbitrary::Arbitrary;
use floodgate::clock::ManualClock;
use floodgate::{
    AdaptiveInflight, Limiter, LimiterBuilder, Limits as KeyLimits, Outcome, Reason, Rejected,
};

use super::time::{Advance, Time};
use super::{bounded, key, slack, TICK_NANOS};

/// The over-limit cache's time unit, 2^16 ns (`src/limiter/overlimit.rs`): it reports a
/// `retry_after` rounded up to it, and does not cache a deadline less than one unit ahead.
const CACHE_UNIT: u64 = 1 << 16;
/// The most permits held at once.
const MAX_PERMITS: usize = 256;
/// Window lengths: a tick, not a whole number of ticks, and longer.
const INTERVALS: [u64; 6] = [
    TICK_NANOS,
    TICK_NANOS + 1,
    20_000_000,
    50_000_000,
    100_000_000,
    1_000_000_000,
];

/// Which limits a limiter has, each read by [`limit`] (mostly 1–6 in flight or 1–12 per
/// interval, sometimes anything up to `Limits::MAX_LIMIT`).
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Limits {
    Inflight(u8),
    Rate(u8),
    Both(u8, u8),
}

/// A limiter's configuration; [`LimiterConfig::settings`] bounds it.
#[derive(Arbitrary, Debug, Clone)]
pub struct LimiterConfig {
    pub limits: Limits,
    pub interval: u8,
    pub promotion: u8,
    pub capacity: u8,
    pub rows: u8,
    pub columns: u8,
    pub keys: u8,
    pub offset: u32,
}

/// One operation on the limiter.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum LimiterOp {
    /// `try_acquire`, or `try_acquire_owned` when `owned`; the permit is held.
    Acquire {
        key: u8,
        owned: bool,
    },
    /// `1 + n % 8` acquires of one key, permits held.
    Burst {
        key: u8,
        n: u8,
    },
    /// Drops the held permit `pick % held`, its origin's answer recorded as an overload when
    /// the top bit of `pick` is set (a limiter learning its in-flight limits backs off).
    Drop {
        pick: u16,
    },
    /// Drops every permit, oldest or newest first.
    DropAll {
        newest_first: bool,
    },
    Advance(Advance),
    /// An acquire and, if rejected for rate, another exactly `retry_after` later.
    Retry {
        key: u8,
    },
    /// `2 + n % 31` acquires of one key at one instant, each permit dropped at once.
    Flood {
        key: u8,
        n: u8,
    },
    /// `with_limits(plan).try_acquire` the key's own plan (see [`Settings::plan`]); the permit is held.
    AcquireWith {
        key: u8,
        owned: bool,
    },
    /// `set_limits`: new defaults of the kinds the limiter counts, read by [`limit`].
    SetLimits {
        inflight: u8,
        rate: u8,
    },
    /// `try_acquire_and(first, || try_acquire(second))`: one decision for two keys (the same
    /// one twice, with one key); both permits held when admitted.
    AcquirePair {
        first: u8,
        second: u8,
    },
    /// A request of [`units`] (0 to `u32::MAX`: mostly 0–7, some at and around its limits,
    /// `Limits::MAX_LIMIT` and past it), under the defaults (`with_cost`) or the key's plan
    /// (`with_limits(plan).cost`); the permit is held.
    AcquireCost {
        key: u8,
        cost: u32,
        plan: bool,
    },
}

/// A limiter and the operations to run on it.
#[derive(Arbitrary, Debug, Clone)]
pub struct LimiterInput {
    pub config: LimiterConfig,
    pub ops: Vec<LimiterOp>,
}

/// A configuration in the ranges the harness runs: in-flight limits 1–6, rate limits 1–12 per
/// window of 10 ms to 1 s, promotion in (0, 1], exact stages of 1–48 keys (so they fill up)
/// or 1024, sketches of 1–4 rows × 1–8 columns (so every key collides) or 1024, 1–24 keys.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub max_inflight: Option<u32>,
    pub max_rate: Option<u32>,
    pub interval_nanos: u64,
    pub promotion: f64,
    pub capacity: usize,
    pub rows: usize,
    pub columns: usize,
    pub keys: usize,
    pub offset: u64,
    /// Whether hot keys learn their in-flight limit (`adaptive_inflight`, floor 1), under the
    /// configured one: then an in-flight refusal may come under a lower limit than the model's.
    pub adaptive: bool,
}

/// Limits past the small ones, up to the largest a limiter takes (`Limits::MAX_LIMIT`, whose
/// counts with a request of the largest cost are where counters saturate).
const LARGE_LIMITS: [u32; 8] = [
    KeyLimits::MAX_LIMIT,
    KeyLimits::MAX_LIMIT - 1,
    KeyLimits::MAX_LIMIT / 2,
    KeyLimits::MAX_LIMIT / 2 + 1,
    1 << 20,
    1000,
    65_537,
    KeyLimits::MAX_LIMIT - 7,
];

/// A limit from a raw byte: `1 + raw % small` (1–6 in flight, 1–12 per interval) for most,
/// one of [`LARGE_LIMITS`] for 1 in 16.
pub fn limit(raw: u8, small: u8) -> u32 {
    match raw {
        0..=239 => 1 + u32::from(raw % small),
        _ => LARGE_LIMITS[usize::from(raw % 8)],
    }
}

/// A request's units from a raw word, under limits whose tighter one is `least`: 0–7 for most;
/// else `least` and its neighbours (the last that fits and the first that does not), the
/// largest limit and its neighbours, half of it, or any `u32` at all (mostly past
/// `Limits::MAX_LIMIT`, refused as over every limit).
pub fn units(raw: u32, least: u32) -> u32 {
    let (tag, high) = (raw & 0xFF, raw >> 8);
    let near = |n: u32| match high % 3 {
        0 => n.saturating_sub(1),
        1 => n,
        _ => n.saturating_add(1),
    };
    match tag {
        0..=175 => high % 8,
        176..=207 => near(least),
        208..=231 => near(KeyLimits::MAX_LIMIT),
        232..=239 => KeyLimits::MAX_LIMIT / 2 + high % 3,
        _ => raw,
    }
}

impl LimiterConfig {
    pub fn settings(&self) -> Settings {
        let inflight = |raw: u8| Some(limit(raw, 6));
        let rate = |raw: u8| Some(limit(raw, 12));
        let (max_inflight, max_rate) = match self.limits {
            Limits::Inflight(i) => (inflight(i), None),
            Limits::Rate(r) => (None, rate(r)),
            Limits::Both(i, r) => (inflight(i), rate(r)),
        };
        Settings {
            max_inflight,
            max_rate,
            interval_nanos: INTERVALS[usize::from(self.interval) % INTERVALS.len()],
            promotion: (f64::from(self.promotion) + 1.0) / 256.0,
            capacity: match self.capacity {
                240.. => 1024,
                c => 1 + usize::from(c % 48),
            },
            rows: 1 + usize::from(self.rows % 4),
            columns: match self.columns % 9 {
                8 => 1024,
                c => 1 + usize::from(c),
            },
            keys: 1 + usize::from(self.keys % 24),
            offset: u64::from(self.offset) % (4 * TICK_NANOS),
            adaptive: self.offset >= 1 << 31,
        }
    }
}

impl Settings {
    /// A limiter of these settings on `clock`: its limits, promotion threshold, exact stage
    /// and sketch; whether it learns its in-flight limits is the caller's to add.
    pub fn builder(&self, clock: &ManualClock) -> LimiterBuilder<u64> {
        let mut builder = Limiter::<u64>::builder()
            .promotion_threshold(self.promotion)
            .exact_capacity(self.capacity)
            .sketch(self.rows, self.columns)
            .clock(clock);
        if let Some(limit) = self.max_inflight {
            builder = builder.max_inflight(limit);
        }
        if let Some(limit) = self.max_rate {
            builder = builder.max_rate(limit, Duration::from_nanos(self.interval_nanos));
        }
        builder
    }

    /// The window of time `t` (windows anchored at `start`) and how far into it `t` is, as
    /// the limiter computes them.
    pub fn window(&self, start: u64, t: u64) -> (u64, f64) {
        let elapsed = t - start;
        let bucket = elapsed / self.interval_nanos;
        let into = elapsed - bucket * self.interval_nanos;
        (bucket, into as f64 / self.interval_nanos as f64)
    }

    /// The builder's limits: the defaults until a `SetLimits`.
    fn defaults(&self) -> KeyLimits {
        self.limits(self.max_inflight, self.max_rate)
    }

    /// Limits of the kinds the limiter counts.
    fn limits(&self, inflight: Option<u32>, rate: Option<u32>) -> KeyLimits {
        let mut limits = KeyLimits::new();
        if let (Some(_), Some(l)) = (self.max_inflight, inflight) {
            limits = limits.max_inflight(l);
        }
        if let (Some(_), Some(l)) = (self.max_rate, rate) {
            limits = limits.max_rate(l);
        }
        limits
    }

    /// Key `key`'s own plan, of the kinds the limiter counts: 1–6 in flight, 1–12 per
    /// interval, different from key to key; every fourth key's the largest limits.
    fn plan(&self, key: usize) -> KeyLimits {
        if key % 4 == 3 {
            let largest = KeyLimits::MAX_LIMIT;
            return self.limits(Some(largest), Some(largest - key as u32));
        }
        let key = key as u32;
        self.limits(Some(1 + key % 6), Some(1 + (key * 5 + 3) % 12))
    }

    /// One key and one kind of limit: the sketch and the exact stage count that key alone,
    /// so the limiter must decide exactly as the model does. (With both limits, a demoted and
    /// re-promoted key may carry rejected requests in a window the exact stage did not see,
    /// since the rate sketch counts offered load; that may reject more, which is allowed.)
    fn lone(&self) -> bool {
        self.keys == 1 && (self.max_inflight.is_none() || self.max_rate.is_none()) && !self.learns()
    }

    /// Whether in-flight limits are learnt (a limit below the configured one is allowed).
    fn learns(&self) -> bool {
        self.adaptive && self.max_inflight.is_some()
    }
}

/// How many units a key alone gets under `limits` with nothing held and empty windows.
fn alone_units(limits: &KeyLimits) -> u32 {
    limits
        .inflight_limit()
        .unwrap_or(u32::MAX)
        .min(limits.rate_limit().unwrap_or(u32::MAX))
}

type AnyPermit<'a> = super::permits::AnyPermit<'a, u64>;

/// Requests per window and key: admitted ones, or offered ones (admitted or not).
type Windows = BTreeMap<u64, Vec<i128>>;

/// The exact model: permits held, and admitted and offered requests per window.
struct Model {
    s: Settings,
    /// The limiter's defaults now.
    defaults: KeyLimits,
    /// Clock time at which the limiter (and its windows) began.
    start: u64,
    in_flight: Vec<isize>,
    admitted: Windows,
    offered: Windows,
    rejected: Vec<u64>,
    /// The limits each key was last decided under, and whether it has been decided under two
    /// different ones: then a deadline the over-limit cache computed under one rate limit does
    /// not see what was admitted under the other since. Its `retry_after` may be early, and it
    /// may answer "rate" for a key now also over its in-flight limit (it never admits more;
    /// see `Rejected::retry_after`).
    last_limits: Vec<Option<KeyLimits>>,
    mixed: Vec<bool>,
    /// Whether a request of the key was admitted and then taken back because another key
    /// refused it (`AcquirePair`): its rate sketch keeps it as offered load, so a promotion
    /// may start the key's exact counts above what it admitted (by at most what the promotion
    /// threshold proves). It may then be refused more, never admitted more.
    refunded: Vec<bool>,
}

impl Model {
    /// The window of time `t` and how far into it `t` is, as the limiter computes them.
    fn window(&self, t: u64) -> (u64, f64) {
        self.s.window(self.start, t)
    }

    fn count(map: &Windows, bucket: Option<u64>, key: Option<usize>) -> f64 {
        let Some(counts) = bucket.and_then(|b| map.get(&b)) else {
            return 0.0;
        };
        match key {
            Some(key) => counts[key] as f64,
            None => counts.iter().sum::<i128>() as f64,
        }
    }

    /// The sliding-window count `prev·(1−f) + curr` of `map` at time `t` (now or later, with
    /// nothing recorded in between), for one key or all.
    fn sliding(&self, map: &Windows, t: u64, key: Option<usize>) -> f64 {
        let (bucket, f) = self.window(t);
        Self::count(map, bucket.checked_sub(1), key) * (1.0 - f)
            + Self::count(map, Some(bucket), key)
    }

    fn record(map: &mut Windows, bucket: u64, key: usize, keys: usize, units: isize) {
        map.entry(bucket).or_insert_with(|| vec![0; keys])[key] += units as i128;
        // Windows no sliding count reads any more.
        *map = map.split_off(&bucket.saturating_sub(2));
    }

    /// Whether `key`'s decisions must be exactly the model's: it is alone in its sketch (see
    /// [`Settings::lone`]), always decided under one set of limits, and never taken back.
    fn strict(&self, key: usize) -> bool {
        self.s.lone() && !self.mixed[key] && !self.refunded[key]
    }

    /// Notes that `key` is decided under `limits` now, and whether that mixes two.
    fn decided_under(&mut self, key: usize, limits: KeyLimits) {
        if self.last_limits[key].is_some_and(|last| last != limits) {
            self.mixed[key] = true;
        }
        self.last_limits[key] = Some(limits);
    }

    /// Whether the clock's tick has run since the key's current window began, so that the
    /// limiter reads the window from its coarse time and consults the over-limit cache. Just
    /// after a window begins and before the next tick (always, for windows not a whole
    /// number of ticks), it reads the exact time and decides the usual way.
    fn settled(&self, now: u64) -> bool {
        let (bucket, _) = self.window(now);
        let begins = self.start + bucket * self.s.interval_nanos;
        bucket == 0 || now / TICK_NANOS * TICK_NANOS >= begins
    }
}

/// The limiter, its model, its clock and the permits held.
struct Run<'a> {
    limiter: &'a Limiter<u64>,
    model: Model,
    time: Time,
    /// Each permit held, with its key and its units.
    permits: Vec<(usize, isize, AnyPermit<'a>)>,
}

/// Runs `input` against a limiter and the exact model.
///
/// Checks at every decision, for any collision pattern (Properties 1, 2, 3 and 8 of
/// docs/architecture.md), counting each request's units (its cost; 1 unless `AcquireCost`):
/// - never admits a key whose units in flight would pass `max_inflight` with this request's,
///   nor one whose exact sliding-window count of admitted units would pass `max_rate` with
///   them (`prev·(1−f)+curr+cost`); a cost over a limit is refused as such, and not counted;
/// - always admits when even all keys together are under the limits (sketches only
///   over-count by what other keys did, so a permit that was not given back shows here);
/// - a rejection names a configured limit and an estimate over it, at least the key's exact
///   count with this request; a `retry_after` for rate rejections only, at most two
///   intervals, and never early: by then the key's exact count allows one more;
/// - a lone key (see [`Settings::lone`]) is never over-rejected (so a refused request spent
///   nothing a later one is judged by), its `retry_after` is tight to the cache's unit, and a
///   retry exactly `retry_after` later is admitted;
/// - a key flooding past its rate limit is rejected by the over-limit cache: no lock of the
///   exact stage, nothing counted, and the documented estimate `limit + 1`;
/// - `heavy_hitters` reports bounds at least the exact counts, `stats` stays within capacity;
///   when every permit has dropped, every in-flight bound is back at 0; memory is fixed;
/// - each decision is judged against its own limits: the defaults of the moment (changed by
///   `SetLimits`) or the key's plan (`AcquireWith`);
/// - at the end, with every permit dropped, each key alone gets exactly what the defaults
///   allow, and the next rejection names the tighter limit.
pub fn run(input: &LimiterInput) {
    let s = input.config.settings();
    let mut time = Time::new();
    time.advance(s.offset);
    let mut builder = s.builder(&time.clock);
    if s.learns() {
        builder = builder.adaptive_inflight(AdaptiveInflight::new().floor(1));
    }
    let limiter = builder.build().expect("a valid limiter configuration");
    let memory = limiter.memory_bytes();
    assert!(
        limiter.stats().exact_capacity >= s.capacity,
        "exact capacity rounds up"
    );
    let model = Model {
        s,
        defaults: s.defaults(),
        start: time.now,
        in_flight: vec![0; s.keys],
        admitted: Windows::new(),
        offered: Windows::new(),
        rejected: vec![0; s.keys],
        last_limits: vec![None; s.keys],
        mixed: vec![false; s.keys],
        refunded: vec![false; s.keys],
    };
    let mut run = Run {
        limiter: &limiter,
        model,
        time,
        permits: Vec::new(),
    };
    for op in bounded(&input.ops) {
        run.apply(op);
        run.check_reports();
    }
    run.drop_all(false);
    run.check_reports();
    run.each_key_alone_gets_its_limits();
    assert_eq!(limiter.memory_bytes(), memory, "memory is fixed");
}

impl<'a> Run<'a> {
    fn apply(&mut self, op: &LimiterOp) {
        let keys = self.model.s.keys;
        match *op {
            LimiterOp::Acquire { key: k, owned } => {
                self.acquire_and_hold(key(k, keys), owned, None, 1);
            }
            LimiterOp::AcquireWith { key: k, owned } => {
                let key = key(k, keys);
                self.acquire_and_hold(key, owned, Some(self.model.s.plan(key)), 1);
            }
            LimiterOp::AcquirePair { first, second } => {
                self.acquire_pair(key(first, keys), key(second, keys));
            }
            LimiterOp::AcquireCost { key: k, cost, plan } => {
                let key = key(k, keys);
                let plan = plan.then(|| self.model.s.plan(key));
                let units = units(cost, alone_units(&plan.unwrap_or(self.model.defaults)));
                self.acquire_and_hold(key, false, plan, units);
            }
            LimiterOp::SetLimits { inflight, rate } => {
                let s = &self.model.s;
                let limits = s.limits(Some(limit(inflight, 6)), Some(limit(rate, 12)));
                self.limiter
                    .set_limits(limits)
                    .expect("limits of the kinds the limiter counts");
                assert_eq!(self.limiter.limits(), limits);
                self.model.defaults = limits;
            }
            LimiterOp::Burst { key: k, n } => {
                for _ in 0..1 + n % 8 {
                    self.acquire_and_hold(key(k, keys), false, None, 1);
                }
            }
            LimiterOp::Drop { pick } => {
                if !self.permits.is_empty() {
                    let i = usize::from(pick) % self.permits.len();
                    let (key, units, mut permit) = self.permits.swap_remove(i);
                    if pick >= 1 << 15 {
                        permit.record(Outcome::Overload);
                    }
                    self.model.in_flight[key] -= units;
                    drop(permit);
                }
            }
            LimiterOp::DropAll { newest_first } => self.drop_all(newest_first),
            LimiterOp::Advance(by) => {
                let (start, interval) = (self.model.start, self.model.s.interval_nanos);
                self.time.advance_by(by, start, interval, 4);
            }
            LimiterOp::Retry { key: k } => self.retry(key(k, keys)),
            LimiterOp::Flood { key: k, n } => self.flood(key(k, keys), 2 + usize::from(n % 31)),
        }
    }

    fn drop_all(&mut self, newest_first: bool) {
        if newest_first {
            self.permits.reverse();
        }
        for (key, units, permit) in self.permits.drain(..) {
            self.model.in_flight[key] -= units;
            drop(permit);
        }
    }

    /// One request of `cost` units under the defaults (`plan` `None`) or the given limits,
    /// its permit held.
    fn acquire_and_hold(
        &mut self,
        key: usize,
        owned: bool,
        plan: Option<KeyLimits>,
        cost: u32,
    ) -> Option<Rejected> {
        if self.permits.len() >= MAX_PERMITS {
            return None;
        }
        match self.acquire(key, owned, plan, cost) {
            Ok(permit) => {
                self.permits.push((key, cost as isize, permit));
                None
            }
            Err(rejected) => Some(rejected),
        }
    }

    /// One request of `cost` units under the defaults (`plan` `None`) or the given limits,
    /// checked against the model; an admitted one is counted as held.
    fn acquire(
        &mut self,
        key: usize,
        owned: bool,
        plan: Option<KeyLimits>,
        cost: u32,
    ) -> Result<AnyPermit<'a>, Rejected> {
        let model = &mut self.model;
        let s = model.s;
        let limits = plan.unwrap_or(model.defaults);
        let (max_inflight, max_rate) = (limits.inflight_limit(), limits.rate_limit());
        model.decided_under(key, limits);
        let now = self.time.now;
        let (bucket, _) = model.window(now);
        // The exact counts before this request.
        let own_inflight = model.in_flight[key];
        let all_inflight: isize = model.in_flight.iter().sum();
        let own_sliding = model.sliding(&model.admitted, now, Some(key));
        let all_offered = model.sliding(&model.offered, now, None);
        let units = cost as isize;
        // A cost over a limit never fits: refused as such, before anything is counted.
        let over = |limit: Option<u32>| limit.is_some_and(|l| cost > l);
        let never_fits = over(max_inflight) || over(max_rate);
        // Under the limits even if every other key's requests were this key's.
        let inflight_fits = max_inflight.map_or(true, |l| all_inflight + units <= l as isize);
        let rate_fits = max_rate.map_or(true, |l| {
            all_offered + units as f64 <= l as f64 - slack(l as f64)
        });
        // A cost of 0 counts nothing, and is admitted at once (the harness's limits are ≥ 1).
        let must_admit = (inflight_fits && rate_fits && !never_fits) || units == 0;
        // The key's own exact counts leave room for this request.
        let clearly_fits = max_inflight.map_or(true, |l| own_inflight + units <= l as isize)
            && max_rate.map_or(true, |l| {
                own_sliding + units as f64 <= l as f64 - slack(l as f64)
            });

        let id = key as u64;
        let result = match (plan, owned, cost) {
            (None, true, 1) => self.limiter.try_acquire_owned(&id).map(AnyPermit::Owned),
            (None, false, 1) => self.limiter.try_acquire(&id).map(AnyPermit::Borrowed),
            (None, true, _) => self
                .limiter
                .with_cost(cost)
                .try_acquire_owned(&id)
                .map(AnyPermit::Owned),
            (None, false, _) => self
                .limiter
                .with_cost(cost)
                .try_acquire(&id)
                .map(AnyPermit::Borrowed),
            (Some(l), true, _) => self
                .limiter
                .with_limits(l)
                .cost(cost)
                .try_acquire_owned(&id)
                .map(AnyPermit::Owned),
            (Some(l), false, _) => self
                .limiter
                .with_limits(l)
                .cost(cost)
                .try_acquire(&id)
                .map(AnyPermit::Borrowed),
        };
        if never_fits {
            let r = result.as_ref().expect_err("admitted a cost over its limit");
            assert_eq!(r.reason, Reason::CostOverLimit, "{r}");
            assert_eq!((r.estimate, r.retry_after), (cost, None), "{r}");
            assert!(
                over(Some(r.limit)) && (over(max_inflight) || over(max_rate)),
                "{r}: not the limit the cost is over"
            );
            return result;
        }
        Model::record(&mut model.offered, bucket, key, s.keys, units);
        match &result {
            // A cost of 0 takes nothing: admitted whatever the key holds.
            Ok(_) if units == 0 => {}
            Ok(_) => {
                if let Some(limit) = max_inflight {
                    assert!(
                        own_inflight + units <= limit as isize,
                        "admitted key {key} with {own_inflight} units live and {units} more, \
                         limit {limit}"
                    );
                }
                if let Some(limit) = max_rate {
                    let sliding = own_sliding + units as f64;
                    assert!(
                        sliding <= limit as f64 + slack(limit as f64),
                        "admitted key {key} at a sliding count of {sliding} (this one's \
                         {units} units included), limit {limit}"
                    );
                }
                model.in_flight[key] += units;
                Model::record(&mut model.admitted, bucket, key, s.keys, units);
            }
            Err(rejected) => {
                // A learnt in-flight limit may be under the configured one.
                let learnt = s.learns() && rejected.reason == Reason::Inflight;
                assert!(
                    !must_admit || learnt,
                    "rejected key {key} ({rejected}) although all keys together are under \
                     the limits: {all_inflight} in flight, sliding {all_offered} offered"
                );
                assert!(
                    !(model.strict(key) && clearly_fits),
                    "over-rejected the lone key ({rejected}): {own_inflight} in flight, \
                     sliding {own_sliding} admitted"
                );
                model.rejected[key] += 1;
                let own = (own_inflight, own_sliding);
                self.check_rejection(rejected, &limits, key, own, units);
            }
        }
        result
    }

    /// One decision for keys `a` then `b` under the defaults (`try_acquire_and`), checked
    /// against the model: admitted only if each key fits with both requests (two units of one
    /// key when `a == b`); refused, `a` is charged nothing the exact counts see; the rejection
    /// names a limit the key it comes from is over.
    fn acquire_pair(&mut self, a: usize, b: usize) {
        if self.permits.len() + 2 > MAX_PERMITS {
            return;
        }
        let limiter = self.limiter;
        let model = &mut self.model;
        let s = model.s;
        let limits = model.defaults;
        model.decided_under(a, limits);
        model.decided_under(b, limits);
        let now = self.time.now;
        let (bucket, _) = model.window(now);
        let units = |key: usize| 1 + isize::from(a == b && key == a);
        let fits = |model: &Model, key: usize| {
            let inflight = limits
                .inflight_limit()
                .map_or(true, |l| model.in_flight[key] + units(key) <= l as isize);
            let own = model.sliding(&model.admitted, now, Some(key)) + units(key) as f64;
            let rate = limits
                .rate_limit()
                .map_or(true, |l| own <= l as f64 + slack(l as f64));
            (inflight, rate, own)
        };
        let asked = std::cell::Cell::new(false);
        let (ka, kb) = (a as u64, b as u64);
        let result = limiter.try_acquire_and(&ka, || {
            asked.set(true);
            limiter.try_acquire(&kb)
        });
        Model::record(&mut model.offered, bucket, a, s.keys, 1);
        if asked.get() {
            Model::record(&mut model.offered, bucket, b, s.keys, 1);
        }
        match result {
            Ok((first, second)) => {
                for key in [a, b] {
                    let (inflight, rate, own) = fits(model, key);
                    assert!(
                        inflight,
                        "admitted the pair ({a}, {b}) over key {key}'s in-flight limit"
                    );
                    assert!(
                        rate,
                        "admitted the pair ({a}, {b}) at key {key}'s sliding count {own}"
                    );
                }
                for key in [a, b] {
                    model.in_flight[key] += 1;
                    Model::record(&mut model.admitted, bucket, key, s.keys, 1);
                }
                self.permits.push((a, 1, AnyPermit::Borrowed(first)));
                self.permits.push((b, 1, AnyPermit::Borrowed(second)));
            }
            Err(r) => {
                let by = if asked.get() { b } else { a };
                model.rejected[by] += 1;
                if asked.get() {
                    model.refunded[a] = true;
                }
                let limit = match r.reason {
                    Reason::Inflight => limits.inflight_limit(),
                    Reason::Rate => limits.rate_limit(),
                    other => panic!("the pair ({a}, {b}) refused for {other:?}"),
                };
                if s.learns() && r.reason == Reason::Inflight {
                    assert!(limit.is_some_and(|l| (1..=l).contains(&r.limit)), "{r}");
                } else {
                    assert_eq!(Some(r.limit), limit, "{r}");
                }
                assert!(r.estimate > r.limit, "{r}: estimate within the limit");
            }
        }
    }

    /// A rejection of a request of `units` under `limits` against the model, whose key had
    /// `own_inflight` units in flight and a sliding count of `own_sliding` before it.
    fn check_rejection(
        &self,
        r: &Rejected,
        limits: &KeyLimits,
        key: usize,
        (own_inflight, own_sliding): (isize, f64),
        units: isize,
    ) {
        let (model, now) = (&self.model, self.time.now);
        let s = model.s;
        assert!(r.estimate > r.limit, "{r}: estimate within the limit");
        match r.reason {
            Reason::Inflight => {
                let limit = limits
                    .inflight_limit()
                    .expect("an in-flight rejection without an in-flight limit");
                if s.learns() {
                    assert!((1..=limit).contains(&r.limit), "{r}: learnt over {limit}");
                } else {
                    assert_eq!(r.limit, limit, "{r}");
                }
                assert!(
                    r.estimate as isize >= own_inflight + units,
                    "{r}: estimate under the {own_inflight} units live + this one's {units}"
                );
                assert_eq!(
                    r.retry_after, None,
                    "{r}: in-flight rejections have no retry"
                );
            }
            Reason::Rate => {
                let limit = limits
                    .rate_limit()
                    .expect("a rate rejection without a rate limit");
                assert_eq!(r.limit, limit, "{r}");
                let inflight_ok = limits
                    .inflight_limit()
                    .map_or(true, |l| own_inflight < l as isize);
                assert!(
                    inflight_ok || model.mixed[key],
                    "{r}: over the in-flight limit but rejected for rate"
                );
                // The over-limit cache answers `limit + 1` (over the limit by at least this
                // request): below the key's count when it was admitted under a higher limit
                // than the one it is judged by now.
                let with_it = own_sliding + units as f64;
                let cached = r.estimate == limit + 1 && with_it > (limit + 1) as f64;
                assert!(
                    cached || r.estimate as f64 >= with_it - slack(own_sliding),
                    "{r}: estimate under the exact sliding count {own_sliding} + {units}"
                );
                let retry = r.retry_after.expect("a rate rejection has a retry time");
                let retry_nanos = retry.as_nanos() as u64;
                assert!(
                    retry_nanos <= 2 * s.interval_nanos,
                    "{r}: retry after over 2 intervals"
                );
                // Never early: the limiter's counts are at least the exact ones, so by then
                // the key's own exact count (with nothing admitted meanwhile) has room for the
                // request's units (the over-limit cache holds a deadline for one cost).
                let later = model.sliding(&model.admitted, now + retry_nanos, Some(key));
                let l = limit as f64;
                assert!(
                    model.mixed[key] || later + units as f64 <= l + slack(l),
                    "{r}: early: {later} + {units} admitted {retry:?} later"
                );
                // Tight for a lone key, whose counts are exact: up to one cache unit late
                // (the cache rounds up), so two units earlier the request does not fit yet.
                // Exact up to the limiter's clock, which counts whole nanoseconds: its share
                // of the previous window is rounded up by up to one nanosecond's worth of it,
                // `l ÷ interval` units at most for a key that admitted no more than `l` there
                // (a hundred units of a limit near 2^30 in a 10 ms window).
                if model.strict(key) && retry_nanos >= 2 * CACHE_UNIT && units > 0 {
                    let t = now + retry_nanos - 2 * CACHE_UNIT;
                    let sooner = model.sliding(&model.admitted, t, Some(key));
                    let one_nanosecond = l / s.interval_nanos as f64;
                    assert!(
                        sooner + units as f64 + one_nanosecond > l + slack(l),
                        "{r}: late: the lone key's {units} fit 2 cache units before (sliding \
                         {sooner})"
                    );
                }
            }
            other => panic!("unknown rejection reason {other:?}"),
        }
    }

    /// A request and, if rejected for rate, the same one exactly `retry_after` later.
    fn retry(&mut self, key: usize) {
        let Some(rejected) = self.acquire_and_hold(key, false, None, 1) else {
            return;
        };
        let Some(retry) = rejected.retry_after else {
            return;
        };
        if !self.time.advance(retry.as_nanos() as u64) {
            return;
        }
        let again = self.acquire_and_hold(key, false, None, 1);
        // With nothing else admitted meanwhile, a key alone in its sketch is admitted then.
        if self.model.strict(key) {
            assert!(
                again.is_none(),
                "rejected again exactly retry_after ({retry:?}) later: {}",
                again.unwrap()
            );
        }
    }

    /// Requests of one key at one instant. Once one is rejected for rate on exact counts
    /// (or by the cache), the rest hit the over-limit cache: rejected for rate with the
    /// estimate `limit + 1` (src/limiter/report.rs), no lock, nothing counted (Property 5).
    fn flood(&mut self, key: usize, n: usize) {
        let mut cached = false;
        for _ in 0..n {
            // Read before counting locks: `stats` may take some.
            let before = self.limiter.stats();
            let locks = self.limiter.exact_locks_taken();
            let result = self.acquire(key, false, None, 1);
            let took_lock = self.limiter.exact_locks_taken() != locks;
            let after = self.limiter.stats();
            if cached {
                let r = result.as_ref().expect_err("admitted during its flood");
                assert_eq!(r.reason, Reason::Rate, "{r}");
                assert_eq!(
                    r.estimate,
                    r.limit + 1,
                    "{r}: not from the over-limit cache"
                );
                assert!(!took_lock, "{r}: the flood took the exact stage's lock");
                assert_eq!(after.rate_noise, before.rate_noise, "the flood was counted");
            }
            match result {
                Ok(permit) => {
                    self.model.in_flight[key] -= 1;
                    drop(permit);
                }
                Err(r) => {
                    // Decided on exact counts: by the cache (no lock), or by the exact stage
                    // (a lock, and not by the sketch alone). Cached only if a unit ahead.
                    let exact = !took_lock || after.exact_full == before.exact_full;
                    let ahead = r
                        .retry_after
                        .is_some_and(|t| t.as_nanos() >= u128::from(CACHE_UNIT));
                    if r.reason == Reason::Rate && exact && ahead {
                        cached = self.model.settled(self.time.now);
                    }
                }
            }
        }
    }

    /// `heavy_hitters` and `stats` against the model.
    fn check_reports(&self) {
        let (limiter, model, now) = (self.limiter, &self.model, self.time.now);
        let all_dropped = self.permits.is_empty();
        let stats = limiter.stats();
        assert!(stats.promoted <= stats.exact_capacity, "{stats:?}");
        assert!(stats.promotions >= stats.promoted as u64, "{stats:?}");
        let hitters = limiter.heavy_hitters();
        let held = hitters.iter().filter(|h| h.left_ago.is_none()).count();
        assert_eq!(
            held, stats.promoted,
            "heavy_hitters lists every promoted key"
        );
        assert!(
            hitters.len() <= 2 * stats.exact_capacity,
            "the keys that left are at most one per place"
        );
        let mut seen = HashSet::new();
        let all_inflight: isize = model.in_flight.iter().sum();
        let all_offered = model.sliding(&model.offered, now, None);
        for hitter in &hitters {
            let key = hitter.key as usize;
            assert!(key < model.s.keys, "unknown key {key}");
            assert!(seen.insert(key), "key {key} listed twice");
            assert!(
                hitter.rejected <= model.rejected[key],
                "{hitter:?}: too many rejections"
            );
            match (model.s.max_inflight, hitter.inflight) {
                (Some(_), Some(figure)) => {
                    let n = figure.at_most();
                    assert!(
                        n >= model.in_flight[key],
                        "{hitter:?}: under the exact count"
                    );
                    assert!(n <= all_inflight, "{hitter:?}: over all keys' permits");
                    if all_dropped {
                        assert_eq!(n, 0, "{hitter:?}: every permit dropped");
                    }
                    if let Some(counted) = figure.counted() {
                        assert_eq!(
                            counted, model.in_flight[key],
                            "{hitter:?}: a count is the exact count"
                        );
                    }
                }
                (None, None) => {}
                _ => panic!("{hitter:?}: in-flight count present iff an in-flight limit is set"),
            }
            match (model.s.max_rate, hitter.rate) {
                (Some(_), Some(figure)) => {
                    let r = figure.at_most();
                    let exact = model.sliding(&model.admitted, now, Some(key));
                    if let Some(counted) = figure.counted() {
                        assert!(
                            (counted - exact).abs() <= slack(exact),
                            "{hitter:?}: a count is the exact {exact}"
                        );
                    }
                    assert!(
                        r >= exact - slack(exact),
                        "{hitter:?}: under the exact {exact}"
                    );
                    assert!(
                        r <= all_offered + slack(all_offered),
                        "{hitter:?}: over all keys' {all_offered}"
                    );
                }
                (None, None) => {}
                _ => panic!("{hitter:?}: rate present iff a rate limit is set"),
            }
        }
    }

    /// Every permit dropped: each key alone, with empty windows, gets exactly what the
    /// current defaults allow, and the next request is rejected for the tighter limit. Under
    /// a large limit, most of it in one request of many units (single requests up to it would
    /// take too long), the rest one unit at a time.
    fn each_key_alone_gets_its_limits(&mut self) {
        let s = self.model.s;
        let limits = self.model.defaults;
        let least = alone_units(&limits);
        for key in 0..s.keys {
            self.time
                .clock
                .advance(Duration::from_nanos(3 * s.interval_nanos));
            self.time.now += 3 * s.interval_nanos;
            let id = key as u64;
            if s.learns() {
                // A learnt limit lasts until its key has been idle for an epoch.
                let first = self.limiter.try_acquire(&id);
                assert!(first.is_ok(), "key {key}: nothing admitted: {first:?}");
                continue;
            }
            let mut permits = Vec::new();
            let mut units = 0;
            if least > 64 {
                let many = least - 32;
                let first = self.limiter.with_cost(many).try_acquire(&id);
                permits.push(
                    first.unwrap_or_else(|r| {
                        panic!("key {key}: {many} units of {least} refused: {r}")
                    }),
                );
                units = many;
            }
            let rejected = loop {
                match self.limiter.try_acquire(&id) {
                    Ok(p) => permits.push(p),
                    Err(r) => break r,
                }
                units += 1;
                assert!(units <= least, "key {key} over its limit");
            };
            assert_eq!(
                units, least,
                "key {key} after every permit dropped: {rejected}"
            );
            let expected = match limits.inflight_limit() {
                Some(l) if l == least => Reason::Inflight,
                _ => Reason::Rate,
            };
            assert_eq!(rejected.reason, expected, "key {key}: {rejected}");
        }
    }
}

/// The scenarios worth keeping by name (replayed by `tests/fuzz_corpus.rs`).
pub fn seeds() -> Vec<(&'static str, LimiterInput)> {
    use super::time::Advance as By;
    use LimiterOp::*;
    // A configuration in the harness's terms: `interval` indexes `INTERVALS`, `promotion`
    // is in 256ths minus one, `capacity` and `columns` are taken as they are.
    let config =
        |limits, interval, promotion, capacity: u8, (rows, columns): (u8, u16), keys: u8| {
            LimiterConfig {
                limits,
                interval,
                promotion,
                capacity: capacity - 1,
                rows: rows - 1,
                columns: if columns == 1024 {
                    8
                } else {
                    columns as u8 - 1
                },
                keys: keys - 1,
                offset: 0,
            }
        };
    let burst = |key, n: u8| Burst { key, n: n - 1 };
    let acquire = |key| Acquire { key, owned: false };
    let drop_all = DropAll {
        newest_first: false,
    };
    let every_key = |n: u8| (0..24).map(move |k| burst(k, n));
    vec![
        (
            "inflight-one-key",
            LimiterInput {
                config: config(Limits::Inflight(2), 4, 127, 16, (2, 8), 1),
                ops: vec![
                    burst(0, 5),
                    Drop { pick: 0 },
                    acquire(0),
                    acquire(0),
                    drop_all,
                    burst(0, 4),
                ],
            },
        ),
        (
            "inflight-promote-early",
            LimiterInput {
                config: config(Limits::Inflight(3), 4, 0, 16, (1, 1), 3),
                ops: vec![burst(0, 5), burst(1, 5), drop_all, burst(2, 5)],
            },
        ),
        (
            "exact-stage-full",
            LimiterInput {
                config: config(Limits::Inflight(1), 4, 0, 1, (1, 1), 24),
                ops: every_key(3).chain([drop_all]).chain(every_key(2)).collect(),
            },
        ),
        (
            "exact-stage-full-rate",
            LimiterInput {
                config: config(Limits::Rate(1), 4, 0, 1, (1, 1), 24),
                ops: every_key(3)
                    .chain([LimiterOp::Advance(By::ToBoundary)])
                    .chain((0..24).map(acquire))
                    .collect(),
            },
        ),
        (
            "rate-windows",
            LimiterInput {
                config: config(Limits::Rate(2), 4, 127, 16, (2, 8), 1),
                ops: vec![
                    burst(0, 5),
                    LimiterOp::Advance(By::Fraction(64)),
                    burst(0, 3),
                    LimiterOp::Advance(By::BeforeBoundary),
                    acquire(0),
                    LimiterOp::Advance(By::ToBoundary),
                    burst(0, 4),
                    LimiterOp::Advance(By::Fraction(200)),
                    burst(0, 2),
                    LimiterOp::Advance(By::Windows(2, 0)),
                    burst(0, 4),
                ],
            },
        ),
        (
            "rate-limit-1-on-a-window-not-a-whole-number-of-ticks",
            LimiterInput {
                config: config(Limits::Rate(0), 1, 127, 16, (2, 8), 2),
                ops: vec![
                    acquire(0),
                    acquire(0),
                    LimiterOp::Advance(By::ToBoundary),
                    acquire(0),
                    LimiterOp::Advance(By::Fraction(250)),
                    acquire(0),
                    Retry { key: 0 },
                    acquire(1),
                ],
            },
        ),
        (
            "both-limits",
            LimiterInput {
                config: config(Limits::Both(1, 4), 2, 127, 16, (2, 8), 3),
                ops: vec![
                    burst(0, 3),
                    Drop { pick: 0 },
                    burst(0, 3),
                    LimiterOp::Advance(By::Tick),
                    drop_all,
                    burst(1, 8),
                    LimiterOp::Advance(By::Windows(0, 0)),
                    burst(0, 3),
                ],
            },
        ),
        (
            "owned-permits",
            LimiterInput {
                config: config(Limits::Both(2, 5), 3, 127, 16, (2, 8), 2),
                ops: (0..4)
                    .map(|_| Acquire {
                        key: 0,
                        owned: true,
                    })
                    .chain([Drop { pick: 1 }, DropAll { newest_first: true }])
                    .collect(),
            },
        ),
        (
            "demote-and-repromote",
            LimiterInput {
                config: config(Limits::Inflight(3), 4, 63, 16, (2, 8), 2),
                ops: vec![
                    burst(0, 4),
                    drop_all,
                    burst(1, 1),
                    drop_all,
                    burst(0, 5),
                    Drop { pick: 0 },
                    drop_all,
                    burst(0, 4),
                ],
            },
        ),
        (
            "a-flood-hits-the-over-limit-cache-and-a-retry-fits",
            LimiterInput {
                config: config(Limits::Rate(9), 5, 127, 16, (4, 1024), 1),
                ops: vec![
                    Flood { key: 0, n: 28 },
                    LimiterOp::Advance(By::Fraction(100)),
                    Flood { key: 0, n: 10 },
                    Retry { key: 0 },
                    Retry { key: 0 },
                ],
            },
        ),
        (
            "per-key-plans-and-live-defaults",
            LimiterInput {
                config: config(Limits::Both(2, 6), 4, 127, 16, (2, 8), 6),
                ops: vec![
                    AcquireWith {
                        key: 5,
                        owned: false,
                    },
                    burst(5, 8),
                    AcquireWith {
                        key: 5,
                        owned: true,
                    },
                    SetLimits {
                        inflight: 4,
                        rate: 9,
                    },
                    burst(1, 8),
                    drop_all,
                    Flood { key: 2, n: 20 },
                    SetLimits {
                        inflight: 0,
                        rate: 1,
                    },
                    Flood { key: 2, n: 5 },
                    AcquireWith {
                        key: 2,
                        owned: false,
                    },
                ],
            },
        ),
        (
            // Issue 38: 3 held under a plan of the largest in-flight limit (key 3's), then a
            // request of one unit less than it, refused; the refusal took a unit of the 3
            // from the key's counts, for good.
            "a-refused-cost-near-the-largest-limit-takes-nothing",
            LimiterInput {
                config: config(Limits::Inflight(3), 4, 127, 16, (2, 8), 4),
                ops: vec![
                    AcquireWith {
                        key: 3,
                        owned: false,
                    },
                    AcquireWith {
                        key: 3,
                        owned: false,
                    },
                    AcquireWith {
                        key: 3,
                        owned: false,
                    },
                    AcquireCost {
                        key: 3,
                        cost: 208, // the largest limit less one
                        plan: true,
                    },
                    drop_all,
                    burst(3, 4),
                ],
            },
        ),
        (
            // The largest limits of both kinds as the defaults, and requests of the largest
            // cost and past it on colliding keys.
            "costs-and-limits-at-their-largest",
            LimiterInput {
                config: config(Limits::Both(240, 240), 4, 127, 16, (1, 2), 3),
                ops: vec![
                    burst(0, 5),
                    AcquireCost {
                        key: 1,
                        cost: 1 << 8 | 208, // the largest limit
                        plan: false,
                    },
                    AcquireCost {
                        key: 2,
                        cost: 1 << 8 | 176, // the tighter limit
                        plan: false,
                    },
                    AcquireCost {
                        key: 0,
                        cost: u32::MAX,
                        plan: false,
                    },
                    Drop { pick: 5 },
                    burst(0, 3),
                    drop_all,
                    AcquireCost {
                        key: 2,
                        cost: 2 << 8 | 208, // one over the largest limit
                        plan: false,
                    },
                ],
            },
        ),
        (
            "floods-of-colliding-keys",
            LimiterInput {
                config: config(Limits::Both(5, 7), 4, 31, 16, (1, 2), 4),
                ops: vec![
                    Flood { key: 0, n: 30 },
                    Flood { key: 1, n: 30 },
                    Retry { key: 0 },
                    LimiterOp::Advance(By::Millis(149)),
                    Flood { key: 2, n: 30 },
                    Retry { key: 3 },
                ],
            },
        ),
    ]
}
