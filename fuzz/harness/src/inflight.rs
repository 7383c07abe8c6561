//! `Inflight`: operations on guards of both kinds, the exact model of what each guard holds,
//! and the checks.

use arbitrary::Arbitrary;
use floodgate::{inflight::BorrowedGuard, Guard, Inflight};

use super::{bounded, key, Amount, CEILING};

/// Keys the operations touch.
const KEYS: usize = 8;
/// The most guards live at once.
const MAX_GUARDS: usize = 256;

/// One operation.
#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum InflightOp {
    /// `incr` (a `Guard`, which owns its handle) when `owned`, else `incr_borrowed`.
    Acquire {
        key: u8,
        amount: Amount,
        owned: bool,
    },
    /// Drops the live guard `pick % live`.
    Drop {
        pick: u16,
    },
    /// `Guard::incr` on the live guard `pick % live`.
    Incr {
        pick: u16,
    },
    /// Drops every guard, oldest or newest first.
    DropAll {
        newest_first: bool,
    },
    Get {
        key: u8,
    },
}

/// A sketch of `1 + rows % 4` rows × `1 + columns % 32` columns and the operations on it.
#[derive(Arbitrary, Debug, Clone)]
pub struct InflightInput {
    pub rows: u8,
    pub columns: u8,
    /// Whether amounts may be large enough to saturate (see [`Amount::get`]).
    pub large: bool,
    pub ops: Vec<InflightOp>,
}

/// A guard of either kind (also used by tests/inflight.rs).
pub enum AnyGuard<'a> {
    Borrowed(BorrowedGuard<'a>),
    Owned(Guard),
}

impl AnyGuard<'_> {
    pub fn incr(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.incr(),
            AnyGuard::Owned(g) => g.incr(),
        }
    }

    pub fn get(&self) -> isize {
        match self {
            AnyGuard::Borrowed(g) => g.get(),
            AnyGuard::Owned(g) => g.get(),
        }
    }
}

/// A live guard and, in the model, what it holds.
struct Live<'a> {
    key: usize,
    unit: i128,
    /// Everything this guard added: what its drop gives back.
    total: i128,
    guard: AnyGuard<'a>,
}

fn in_flight(live: &[Live<'_>], key: usize) -> i128 {
    live.iter().filter(|g| g.key == key).map(|g| g.total).sum()
}

/// Runs `input` against an `Inflight` and the guards' exact totals (Properties 1, 2 and 3 of
/// docs/architecture.md).
///
/// Checks after every operation: every key's estimate is at least its true number in flight
/// (and stays at the ceiling once that number passed it); without saturation, at most the
/// number in flight of all keys, so 0 for every key when every guard has dropped; each live
/// guard's `get` equals `Inflight::get` of its key; `incr` and `Guard::incr` return at least
/// the true count and `incr` what `get` reads; memory is fixed.
pub fn run(input: &InflightInput) {
    let rows = 1 + usize::from(input.rows % 4);
    let columns = 1 + usize::from(input.columns % 32);
    let inflight = Inflight::with_size(rows, columns).expect("a small size is valid");
    let memory = inflight.memory_bytes();
    let mut live: Vec<Live<'_>> = Vec::new();
    // Whether the total in flight ever passed the ceiling (some counter may have saturated).
    let mut maybe_saturated = false;
    let mut saturated = [false; KEYS];
    for op in bounded(&input.ops) {
        match *op {
            InflightOp::Acquire {
                key: k,
                amount,
                owned,
            } => {
                let (key, value) = (key(k, KEYS), amount.get(input.large));
                if live.len() < MAX_GUARDS {
                    let (guard, estimate) = if owned {
                        let (g, n) = inflight.incr(key as u64, value);
                        (AnyGuard::Owned(g), n)
                    } else {
                        let (g, n) = inflight.incr_borrowed(key as u64, value);
                        (AnyGuard::Borrowed(g), n)
                    };
                    let unit = value as i128;
                    live.push(Live {
                        key,
                        unit,
                        total: unit,
                        guard,
                    });
                    let true_count = in_flight(&live, key);
                    assert!(
                        estimate as i128 >= true_count.min(CEILING as i128),
                        "incr returned {estimate} < {true_count} in flight for key {key}"
                    );
                    assert_eq!(estimate, inflight.get(key as u64), "incr returns get");
                }
            }
            InflightOp::Drop { pick } => {
                if !live.is_empty() {
                    drop(live.swap_remove(usize::from(pick) % live.len()));
                }
            }
            InflightOp::Incr { pick } => {
                if !live.is_empty() {
                    let i = usize::from(pick) % live.len();
                    let estimate = live[i].guard.incr();
                    live[i].total += live[i].unit;
                    let key = live[i].key;
                    let true_count = in_flight(&live, key);
                    assert!(
                        estimate as i128 >= true_count.min(CEILING as i128),
                        "Guard::incr returned {estimate} < {true_count} in flight for key {key}"
                    );
                }
            }
            InflightOp::DropAll { newest_first } => {
                if newest_first {
                    live.reverse();
                }
                live.clear();
            }
            InflightOp::Get { key: k } => {
                let _ = inflight.get(key(k, KEYS) as u64);
            }
        }
        let total: i128 = live.iter().map(|g| g.total).sum();
        if total > CEILING as i128 {
            maybe_saturated = true;
        }
        for (key, saturated) in saturated.iter_mut().enumerate() {
            let true_count = in_flight(&live, key);
            if true_count > CEILING as i128 {
                *saturated = true;
            }
            let estimate = inflight.get(key as u64);
            assert!(
                (0..=CEILING).contains(&estimate),
                "key {key}: estimate {estimate} out of range"
            );
            assert!(
                estimate as i128 >= true_count.min(CEILING as i128),
                "key {key} under-counted: estimate {estimate} < {true_count} in flight"
            );
            if *saturated {
                assert_eq!(
                    estimate, CEILING,
                    "key {key} saturated: must stay saturated"
                );
            }
            if !maybe_saturated {
                assert!(
                    estimate as i128 <= total,
                    "key {key}: estimate {estimate} > {total} in flight for all keys together \
                     (guards do not balance)"
                );
            }
        }
        for held in &live {
            let estimate = held.guard.get();
            assert_eq!(
                estimate,
                inflight.get(held.key as u64),
                "Guard::get and Inflight::get disagree"
            );
            assert!(
                estimate as i128 >= in_flight(&live, held.key).min(CEILING as i128),
                "Guard::get under the key's count"
            );
        }
    }
    drop(live);
    if !maybe_saturated {
        for key in 0..KEYS {
            assert_eq!(
                inflight.get(key as u64),
                0,
                "key {key}: every guard dropped, count must be back at 0"
            );
        }
    }
    assert_eq!(inflight.memory_bytes(), memory, "memory is fixed");
}
