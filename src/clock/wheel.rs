//! A hierarchical timing wheel: what is due at which tick, O(1) to schedule and to cancel.
//!
//! Varghese and Lauck's hierarchical wheel (1987), in the shape tokio's timer uses: six levels
//! of 64 slots, level `l` slot `s` holding the entries due in the `s`-th span of 64^l ticks of
//! the current span of 64^(l+1). An entry is linked into the level where its due tick first
//! differs from the wheel's current tick (6 bits a level), so inserting and unlinking are O(1),
//! and an entry moves down a level at most 5 times before it fires. 64 slots a level, because
//! a level's occupancy is one `u64` bitmap: finding the next non-empty slot is one
//! `trailing_zeros`, and the wheel can jump from one event to the next without visiting the
//! empty ticks between them (what a `ManualClock` advanced by a day needs).
//!
//! Entries live in one slab (a `Vec` with a free list), linked by index: a [`Key`] is stable
//! for the life of the entry, across reschedules, so cancelling needs no search.

/// Bits of a tick that select a slot within one level.
const SLOT_BITS: u32 = 6;
/// Slots per level: 64, so that a level's occupancy fits one `u64`.
const SLOTS: usize = 1 << SLOT_BITS;
/// Levels: 64^6 ticks of 10 ms ≈ 21.8 years, more than the longest `Rate` interval.
const LEVELS: usize = 6;
/// The farthest ahead of the current tick that an entry can be placed exactly; anything later
/// is placed this far ahead and fires early (its owner reschedules it).
pub(crate) const MAX_AHEAD: u64 = (1 << (SLOT_BITS as u64 * LEVELS as u64)) - 1;
/// "No node": the end of a list.
const NIL: u32 = u32::MAX;

/// Where an entry is in the wheel, stable until it is removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key(u32);

struct Node<T> {
    /// The entry, or `None` while the node is on the free list.
    item: Option<T>,
    /// The tick the entry is due at.
    due: u64,
    /// The neighbours in its slot's list (`next` also links the free list).
    prev: u32,
    next: u32,
    /// The list (`level * SLOTS + slot`) the node is linked into.
    list: u16,
}

/// Entries of type `T` keyed by the tick they are due at.
pub(crate) struct Wheel<T> {
    nodes: Vec<Node<T>>,
    /// Head of the free list of nodes.
    free: u32,
    /// The head of each slot's list, level-major.
    heads: Box<[u32]>,
    /// Bit `s` of `occupied[l]`: slot `s` of level `l` holds at least one entry.
    occupied: [u64; LEVELS],
    /// The last tick processed: every entry is due later than this.
    now: u64,
    len: usize,
}

impl<T> Wheel<T> {
    /// An empty wheel whose current tick is `now`.
    pub(crate) fn new(now: u64) -> Self {
        Wheel {
            nodes: Vec::new(),
            free: NIL,
            heads: vec![NIL; LEVELS * SLOTS].into_boxed_slice(),
            occupied: [0; LEVELS],
            now,
            len: 0,
        }
    }

    /// An empty wheel whose current tick is `now`, with room for `entries` before it
    /// allocates.
    pub(crate) fn with_capacity(now: u64, entries: usize) -> Self {
        let mut wheel = Self::new(now);
        wheel.nodes.reserve_exact(entries);
        wheel
    }

    /// The last tick processed.
    #[cfg(test)]
    pub(crate) fn now(&self) -> u64 {
        self.now
    }

    /// How many entries are scheduled.
    #[cfg(any(test, feature = "fault-injection"))]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Schedules `item` at tick `due`. A tick not after the current one means the next tick;
    /// one more than [`MAX_AHEAD`] ticks ahead is placed at that distance.
    pub(crate) fn insert(&mut self, item: T, due: u64) -> Key {
        let node = Node {
            item: Some(item),
            due: 0,
            prev: NIL,
            next: NIL,
            list: 0,
        };
        let index = if self.free == NIL {
            let index = u32::try_from(self.nodes.len()).expect("fewer than 2^32 timers");
            self.nodes.push(node);
            index
        } else {
            let index = self.free;
            let slot = &mut self.nodes[index as usize];
            self.free = slot.next;
            *slot = node;
            index
        };
        self.len += 1;
        self.link(index, due);
        Key(index)
    }

    /// The tick the entry at `key` is due at, as placed (`None` if it is no longer scheduled).
    pub(crate) fn due(&self, key: Key) -> Option<u64> {
        let node = self.nodes.get(key.0 as usize)?;
        node.item.as_ref().map(|_| node.due)
    }

    /// Cancels the entry at `key`, returning it (`None` if it is no longer scheduled).
    pub(crate) fn remove(&mut self, key: Key) -> Option<T> {
        let node = self.nodes.get(key.0 as usize)?;
        node.item.as_ref()?;
        self.unlink(key.0);
        self.release(key.0)
    }

    /// Puts unlinked node `index` on the free list and returns its entry.
    fn release(&mut self, index: u32) -> Option<T> {
        let node = &mut self.nodes[index as usize];
        let item = node.item.take();
        node.next = self.free;
        self.free = index;
        self.len -= 1;
        item
    }

    /// The tick of the next event: the earliest tick at which an entry fires or moves down a
    /// level. `None` when the wheel is empty.
    pub(crate) fn next_event(&self) -> Option<u64> {
        // Entries of level l lie in later slots of the current span of 64^(l+1) ticks (or, on
        // the top level, wrap into the next span), so the lowest non-empty level has the
        // earliest event.
        (0..LEVELS).find_map(|level| {
            let bits = self.occupied[level];
            if bits == 0 {
                return None;
            }
            let shift = level as u32 * SLOT_BITS;
            let position = (self.now >> shift) & (SLOTS as u64 - 1);
            let span = 1u64 << (shift + SLOT_BITS);
            let base = self.now & !(span - 1);
            // Slots after the current position, in this span; else the first one, in the next.
            let later = bits & (u64::MAX << position << 1);
            Some(if later != 0 {
                base + (u64::from(later.trailing_zeros()) << shift)
            } else {
                base.saturating_add(span) + (u64::from(bits.trailing_zeros()) << shift)
            })
        })
    }

    /// Processes every event up to and including tick `until`, in order: entries due by then
    /// are handed to `fire` with their due tick; `fire` returns the tick to run them again at
    /// (`Some`, rescheduled under the same key) or `None` to remove them. Then the current tick
    /// becomes `until` (it never goes back).
    pub(crate) fn advance(
        &mut self,
        until: u64,
        mut fire: impl FnMut(Key, &mut T, u64) -> Option<u64>,
    ) {
        while let Some(tick) = self.next_event() {
            if tick > until {
                break;
            }
            self.now = tick;
            let level = (0..LEVELS)
                .find(|&l| self.occupied[l] != 0)
                .expect("next_event found an entry");
            let shift = level as u32 * SLOT_BITS;
            let slot = ((tick >> shift) & (SLOTS as u64 - 1)) as usize;
            // Take the slot's entries one at a time: fire what is due, move the rest down a
            // level. Neither goes back into this slot (a rescheduled entry is due after
            // `tick`, a moved one differs from `tick` below this level), and a `fire` that
            // panics loses only its own entry, the rest stay linked.
            let list = level * SLOTS + slot;
            loop {
                let index = self.heads[list];
                if index == NIL {
                    break;
                }
                self.unlink(index);
                let node = &mut self.nodes[index as usize];
                let due = node.due;
                if due > tick {
                    self.link(index, due);
                    continue;
                }
                let item = node.item.as_mut().expect("a linked node holds its entry");
                match fire(Key(index), item, due) {
                    Some(again) => self.link(index, again),
                    None => {
                        self.release(index);
                    }
                }
            }
        }
        self.now = self.now.max(until);
    }

    /// Links node `index` into the list for tick `due` (clamped to the next tick at the
    /// earliest and to [`MAX_AHEAD`] at the latest).
    fn link(&mut self, index: u32, due: u64) {
        let due = due.clamp(self.now + 1, self.now.saturating_add(MAX_AHEAD));
        // The level is the 6-bit group in which `due` first differs from `now`; a difference
        // above the top level (possible only near the far end of the range) goes to the top.
        let differ = (self.now ^ due) | (SLOTS as u64 - 1);
        let level = (((63 - differ.leading_zeros()) / SLOT_BITS) as usize).min(LEVELS - 1);
        let slot = ((due >> (level as u32 * SLOT_BITS)) & (SLOTS as u64 - 1)) as usize;
        let list = level * SLOTS + slot;
        let head = self.heads[list];
        let node = &mut self.nodes[index as usize];
        node.due = due;
        node.list = list as u16;
        node.prev = NIL;
        node.next = head;
        if head != NIL {
            self.nodes[head as usize].prev = index;
        }
        self.heads[list] = index;
        self.occupied[level] |= 1 << slot;
    }

    /// Unlinks node `index` from its slot's list.
    fn unlink(&mut self, index: u32) {
        let (prev, next, list) = {
            let node = &self.nodes[index as usize];
            (node.prev, node.next, node.list as usize)
        };
        if prev == NIL {
            self.heads[list] = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        }
        if self.heads[list] == NIL {
            self.occupied[list / SLOTS] &= !(1 << (list % SLOTS));
        }
        let node = &mut self.nodes[index as usize];
        node.prev = NIL;
        node.next = NIL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// Fires everything up to `until`, recording (tick fired at, item) and rescheduling items
    /// by `again`.
    fn run(
        wheel: &mut Wheel<u32>,
        until: u64,
        mut again: impl FnMut(u32, u64) -> Option<u64>,
    ) -> Vec<(u64, u32)> {
        let mut fired = Vec::new();
        wheel.advance(until, |_, item, due| {
            fired.push((due, *item));
            again(*item, due)
        });
        fired
    }

    #[test]
    fn entries_fire_at_their_tick_in_order_of_ticks() {
        let mut wheel = Wheel::new(0);
        let dues = [1, 63, 64, 65, 4095, 4096, 4097, 300_000, 1 << 30, 1 << 35];
        for (i, &due) in dues.iter().enumerate() {
            wheel.insert(i as u32, due);
        }
        let mut fired = Vec::new();
        while let Some(t) = wheel.next_event() {
            let now = wheel.now();
            assert!(t > now, "next event {t} not after now {now}");
            fired.extend(run(&mut wheel, t, |_, _| None));
        }
        let expected: Vec<_> = dues
            .iter()
            .enumerate()
            .map(|(i, &d)| (d, i as u32))
            .collect();
        assert_eq!(fired, expected);
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn a_removed_entry_never_fires_and_its_node_is_reused() {
        let mut wheel = Wheel::new(10);
        let a = wheel.insert(1, 20);
        let b = wheel.insert(2, 20);
        assert_eq!(wheel.remove(a), Some(1));
        assert_eq!(wheel.remove(a), None);
        let c = wheel.insert(3, 5_000);
        assert_eq!(c, a, "the freed node is reused");
        assert_eq!(
            run(&mut wheel, 10_000, |_, _| None),
            vec![(20, 2), (5_000, 3)]
        );
        assert_eq!(wheel.remove(b), None);
    }

    #[test]
    fn a_due_tick_in_the_past_means_the_next_tick() {
        let mut wheel = Wheel::new(1_000);
        wheel.insert(7, 3);
        assert_eq!(wheel.next_event(), Some(1_001));
        assert_eq!(run(&mut wheel, 1_001, |_, _| None), vec![(1_001, 7)]);
    }

    #[test]
    fn an_entry_beyond_the_range_fires_at_the_end_of_the_range() {
        let mut wheel = Wheel::new(5);
        wheel.insert(1, u64::MAX);
        assert_eq!(
            run(&mut wheel, 5 + MAX_AHEAD, |_, _| None),
            vec![(5 + MAX_AHEAD, 1)]
        );
    }

    #[test]
    fn rescheduled_entries_keep_their_key_and_fire_again() {
        let mut wheel = Wheel::new(0);
        let key = wheel.insert(9, 100);
        let mut keys = Vec::new();
        wheel.advance(1_000, |k, _, due| {
            keys.push(k);
            (due < 500).then_some(due + 100)
        });
        assert_eq!(keys, vec![key; 5]);
        assert_eq!(wheel.len(), 0);
    }

    #[test]
    fn the_top_level_wraps_into_the_next_span() {
        // Near the end of a top-level span, an entry due in the next span lands in a slot
        // before the current position and must still fire on time.
        let span = 1u64 << 36;
        let mut wheel = Wheel::new(span - 3);
        wheel.insert(1, span + (5 << 30) + 7);
        wheel.insert(2, span + 2);
        assert_eq!(
            run(&mut wheel, 2 * span, |_, _| None),
            vec![(span + 2, 2), (span + (5 << 30) + 7, 1)]
        );
    }

    #[test]
    fn a_fire_that_panics_loses_only_its_own_entry() {
        let mut wheel = Wheel::new(0);
        for item in 0..5 {
            wheel.insert(item, 10);
        }
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            wheel.advance(10, |_, item, _| {
                assert_ne!(*item, 2, "injected");
                None
            })
        }));
        assert!(panicked.is_err());
        let mut fired = run(&mut wheel, 10, |_, _| None);
        fired.extend(run(&mut wheel, 100, |_, _| None));
        // Items fire head first (4, 3, then 2 panics): 1 and 0 are still linked and fire (at
        // the latest when the wheel comes round to their slot again).
        assert_eq!(fired, vec![(10, 1), (10, 0)]);
    }

    proptest! {
        /// Against a model (a map from due tick to items): inserts, removes and advances in
        /// any order fire exactly the model's entries, each at its due tick, in tick order (the
        /// items of one tick in any order).
        #[test]
        fn the_wheel_fires_what_a_sorted_map_would(
            start in 0u64..(1 << 40),
            ops in proptest::collection::vec((0u8..3, 0u64..(1 << 20), any::<u16>()), 1..200),
        ) {
            let mut wheel = Wheel::new(start);
            let mut model: BTreeMap<(u64, u32), ()> = BTreeMap::new();
            let mut keys: Vec<(Key, u64, u32)> = Vec::new();
            let mut next_item = 0u32;
            for (op, amount, pick) in ops {
                match op {
                    0 => {
                        // Spread due ticks over every level: amount scaled by a power of 64.
                        let scale = 1u64 << (6 * u64::from(pick % 6));
                        let due = wheel.now() + 1 + (amount % 4096) * scale;
                        let key = wheel.insert(next_item, due);
                        model.insert((due, next_item), ());
                        keys.push((key, due, next_item));
                        next_item += 1;
                    }
                    1 if !keys.is_empty() => {
                        let (key, due, item) = keys.swap_remove(pick as usize % keys.len());
                        let removed = wheel.remove(key);
                        let expected = model.remove(&(due, item)).map(|_| item);
                        prop_assert_eq!(removed, expected);
                    }
                    _ => {
                        let until = wheel.now() + amount * (1 + u64::from(pick % 64));
                        let mut fired = run(&mut wheel, until, |_, _| None);
                        // Ticks in order; items due at one tick in any order.
                        prop_assert!(fired.windows(2).all(|w| w[0].0 <= w[1].0), "{:?}", fired);
                        fired.sort_unstable();
                        let expected: Vec<(u64, u32)> = model
                            .range(..=(until, u32::MAX))
                            .map(|(&(due, item), _)| (due, item))
                            .collect();
                        for entry in &expected {
                            model.remove(entry);
                        }
                        prop_assert_eq!(&fired, &expected);
                        keys.retain(|&(_, due, _)| due > until);
                        prop_assert_eq!(wheel.now(), until);
                    }
                }
                prop_assert_eq!(wheel.len(), model.len());
            }
        }
    }
}
