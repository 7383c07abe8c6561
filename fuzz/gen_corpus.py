#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses: fuzz/corpus/<target>/seed-<name>.

Each seed is encoded in the byte format that fuzz/harness.rs decodes (documented here per
target, next to its encoder), so that the corpus starts from inputs that reach the
interesting paths: saturation, window boundaries and gaps, promotion, a full exact stage,
and every constructor's edge cases. Deterministic: running it again rewrites the same files.
Inputs that fuzz runs add (named by their hash) are left alone.

Usage: python3 fuzz/gen_corpus.py
"""

import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

ISIZE_MAX = 2**63 - 1
CEILING = ISIZE_MAX // 2


def u8(x):
    return bytes([x & 0xFF])


def u16(x):
    return struct.pack("<H", x & 0xFFFF)


def u32(x):
    return struct.pack("<I", x & 0xFFFFFFFF)


def u64(x):
    return struct.pack("<Q", x & 0xFFFFFFFFFFFFFFFF)


# --- value(): a signed count ---------------------------------------------------------------
# tag 0..=127: tag & 31; 128..=159: -(tag & 31); 160..=191: EXTREMES[tag & 15];
# 192..=223: u16 << (tag & 31); 224..=255: any u64 as isize.
EXTREMES = {
    "MAX": 0, "MIN": 1, "0": 2, "-1": 3, "1": 4, "CEIL": 5, "CEIL+1": 6, "CEIL-1": 7,
    "FLOOR": 8, "FLOOR-1": 9, "MAX/4": 10, "MIN/4": 11, "2^42": 12, "2^42+1": 13,
    "-2^42-1": 14, "MAX-1": 15,
}


def small(v):
    assert 0 <= v < 32
    return u8(v)


def neg(v):
    assert 0 <= v < 32
    return u8(128 + v)


def extreme(name):
    return u8(160 + EXTREMES[name])


def shifted(x, shift):
    return u8(192 + shift) + u16(x)


def raw(x):
    return u8(224) + u64(x)


# --- amount(): a non-negative count: tag < 240: tag % 4; else LARGE[tag % 8] -------------------
LARGE = {"CEIL": 0, "CEIL/2": 1, "CEIL/3+1": 2, "MAX": 3, "2^42": 4, "2^42+1": 5, "CEIL-1": 6,
         "1000": 7}


def amount(v):
    if isinstance(v, str):
        i = LARGE[v]
        return u8(240 + i)  # 240 + i: 240 % 8 == 0
    assert 0 <= v < 4
    return u8(v)


# --- estimator -------------------------------------------------------------------------------
# header: rows (1 + b % 4), columns (1 + b % 64); ops: opcode, key (b % 6), then
# 0/1: incr value(); 2: decr value(); 3: decr (u64 % (count + 1)); 4: get; 5: reset;
# 6: incr 1; 7: get(&key).
class Est:
    def __init__(self, rows, columns):
        self.b = u8(rows - 1) + u8(columns - 1)

    def incr(self, key, value):
        self.b += u8(0) + u8(key) + value
        return self

    def decr(self, key, value):
        self.b += u8(2) + u8(key) + value
        return self

    def decr_bounded(self, key, pick):
        self.b += u8(3) + u8(key) + u64(pick)
        return self

    def get(self, key):
        self.b += u8(4) + u8(key)
        return self

    def reset(self):
        self.b += u8(5) + u8(0)
        return self

    def incr1(self, key):
        self.b += u8(6) + u8(key)
        return self


def estimator_seeds(rng):
    s = {}
    s["saturate-and-stick"] = (Est(2, 8).incr(0, extreme("MAX")).get(0).decr(0, small(1))
                               .decr(0, extreme("MAX")).decr(0, extreme("MIN")).get(0)
                               .incr1(1).reset().incr1(0).get(0).b)
    s["cross-ceiling-fast-path"] = (Est(1, 4).incr(0, extreme("CEIL-1")).incr1(0).incr1(0)
                                    .decr(0, small(5)).get(0).b)
    s["ceiling-exact"] = Est(3, 16).incr(2, extreme("CEIL")).get(2).incr1(2).get(2).b
    s["fast-step-edges"] = (Est(2, 2).incr(0, extreme("2^42")).incr(0, extreme("2^42+1"))
                            .incr(0, extreme("-2^42-1")).decr(0, extreme("-2^42-1"))
                            .decr_bounded(0, 12345).get(0).b)
    s["floor"] = (Est(1, 1).decr(0, extreme("MAX")).get(0).incr(0, small(3)).get(0)
                  .decr(1, extreme("FLOOR-1")).incr(0, extreme("MIN")).get(1).reset()
                  .incr(0, small(7)).get(0).b)
    s["min-both-ways"] = (Est(4, 64).incr(3, extreme("MIN")).decr(4, extreme("MIN"))
                          .get(3).get(4).decr(4, extreme("MIN")).b)
    s["negative-then-back"] = (Est(1, 1).incr(0, neg(5)).incr(1, small(9)).get(1)
                               .incr(0, small(5)).get(1).get(0).b)
    s["one-column-collisions"] = b"".join(
        [Est(1, 1).b] + [u8(6) + u8(k) for k in range(6) for _ in range(3)]
        + [u8(3) + u8(k) + u64(7 * k + 1) for k in range(6)])
    s["shifted-values"] = (Est(2, 32).incr(0, shifted(0xFFFF, 31)).incr(1, shifted(0xFFFF, 30))
                           .decr(0, shifted(0xFFFF, 31)).get(0).get(1).b)
    s["raw-values"] = (Est(4, 3).incr(0, raw(2**62)).incr(0, raw(2**62)).decr(5, raw(2**63))
                       .get(5).incr(5, raw(1)).b)
    s["reset-between"] = (Est(2, 4).incr(0, small(31)).incr(1, small(30)).reset()
                          .get(0).incr1(0).get(1).b)
    for i in range(14):
        rows, cols = rng.randint(1, 4), rng.choice([1, 1, 2, 3, 8, 64])
        e = Est(rows, cols)
        for _ in range(rng.randint(4, 60)):
            op = rng.randint(0, 7)
            key = rng.randint(0, 5)
            if op in (0, 1):
                e.incr(key, rng.choice([small(rng.randint(0, 31)), small(1), neg(rng.randint(0, 31)),
                                        extreme(rng.choice(list(EXTREMES)))]))
            elif op == 2:
                e.decr(key, rng.choice([small(rng.randint(0, 31)), small(1)]))
            elif op == 3:
                e.decr_bounded(key, rng.getrandbits(64))
            elif op == 4:
                e.get(key)
            elif op == 5 and rng.random() < 0.3:
                e.reset()
            else:
                e.incr1(key)
        s["random-%02d" % i] = e.b
    return s


# --- inflight --------------------------------------------------------------------------------
# header: rows (1 + b % 4), columns (1 + b % 32); ops:
# 0..=2: incr: opcode (| 0x80: owned guard), key (b % 5), amount(); 3/4: drop guard (u8 % live);
# 5: Guard::incr on guard (u8 % live); 6: drop all (| 0x80: newest first); 7: get key.
class Inf:
    def __init__(self, rows, columns):
        self.b = u8(rows - 1) + u8(columns - 1)

    def acquire(self, key, value=1, owned=False):
        self.b += u8(0x80 if owned else 0) + u8(key) + amount(value)
        return self

    def drop(self, i):
        self.b += u8(3) + u8(i)
        return self

    def guard_incr(self, i):
        self.b += u8(5) + u8(i)
        return self

    def drop_all(self, newest_first=False):
        self.b += u8(0x86 if newest_first else 6)
        return self

    def get(self, key):
        self.b += u8(7) + u8(key)
        return self


def inflight_seeds(rng):
    s = {}
    s["balance"] = (Inf(4, 32).acquire(0).acquire(0).acquire(1, 2).guard_incr(0).drop(1)
                    .drop(0).get(0).drop(0).get(1).b)
    s["owned-guards"] = (Inf(2, 4).acquire(0, 1, True).acquire(0, 3, True).acquire(2, 1)
                         .guard_incr(1).drop_all(True).get(0).b)
    s["saturate"] = (Inf(1, 2).acquire(0, "CEIL").acquire(0, "CEIL").drop(0).get(0)
                     .acquire(1, 1).drop_all().get(0).b)
    s["guard-incr-to-saturation"] = (Inf(2, 8).acquire(3, "CEIL/3+1").guard_incr(0)
                                     .guard_incr(0).guard_incr(0).get(3).drop(0).b)
    s["max-unit"] = Inf(1, 1).acquire(4, "MAX").guard_incr(0).drop(0).get(4).b
    s["zero-unit"] = Inf(3, 3).acquire(2, 0).guard_incr(0).acquire(2, 1).drop(0).get(2).b
    s["one-counter-five-keys"] = b"".join(
        [Inf(1, 1).b] + [u8(0) + u8(k) + amount(1) for k in range(5) for _ in range(2)]
        + [u8(3) + u8(0) for _ in range(9)] + [u8(7) + u8(4)])
    s["fast-step"] = Inf(2, 2).acquire(0, "2^42").acquire(0, "2^42+1").drop(1).drop(0).b
    for i in range(14):
        f = Inf(rng.randint(1, 4), rng.choice([1, 2, 4, 32]))
        for _ in range(rng.randint(4, 80)):
            op = rng.randint(0, 7)
            if op <= 2:
                f.acquire(rng.randint(0, 4), rng.choice([1, 1, 1, 2, 3, 0]), rng.random() < 0.3)
            elif op in (3, 4):
                f.drop(rng.randint(0, 255))
            elif op == 5:
                f.guard_incr(rng.randint(0, 255))
            elif op == 6 and rng.random() < 0.2:
                f.drop_all(rng.random() < 0.5)
            else:
                f.get(rng.randint(0, 4))
        s["random-%02d" % i] = f.b
    return s


# --- advances (rate and limiter) ---------------------------------------------------------------
# sub-op: 0: u16 ns; 1: u16 µs; 2: to the window boundary; 3: boundary − 1 ns; 4: boundary + 1 ns;
# 5: u8/256 of a window; 6: 1 + u8 % max windows, + u16 ns; 7: one tick (10 ms).
def adv_ns(n):
    return u8(0) + u16(n)


def adv_us(n):
    return u8(1) + u16(n)


def adv_boundary(delta=0):
    return u8({0: 2, -1: 3, 1: 4}[delta])


def adv_fraction(x256):
    return u8(5) + u8(x256)


def adv_windows(n, plus_ns=0):
    return u8(6) + u8(n - 1) + u16(plus_ns)


def adv_tick():
    return u8(7)


# --- rate ------------------------------------------------------------------------------------
# header: k ([1, 1, 1, 2, 3, 4, 64][b % 7]), window ([10 ms, 10 ms, 10 ms + 1 ns, 15 ms,
# 25 ms + 3 ns, 100 ms, 1 s][b % 7]), rows (1 + b % 3), columns (1 + b % 16), keys (1 + b % 4),
# offset (u32 % 40 ms); ops: opcode, key, then 0..=2: observe amount(); 3/4: advance;
# 5: advance to the next boundary and observe 1; 6: advance(0); 7: rate_with.
K = {1: 0, 2: 3, 3: 4, 4: 5, 64: 6}
WINDOW = {"10ms": 0, "10ms+1": 2, "15ms": 3, "25ms+3": 4, "100ms": 5, "1s": 6}


class Rt:
    def __init__(self, k=1, window="10ms", rows=2, columns=8, keys=2, offset=0):
        self.b = (u8(K[k]) + u8(WINDOW[window]) + u8(rows - 1) + u8(columns - 1)
                  + u8(keys - 1) + u32(offset))

    def observe(self, key, value=1):
        self.b += u8(0) + u8(key) + amount(value)
        return self

    def advance(self, adv):
        self.b += u8(3) + u8(0) + adv
        return self

    def boundary_observe(self, key):
        self.b += u8(5) + u8(key)
        return self

    def zero(self):
        self.b += u8(6) + u8(0)
        return self

    def rate_with(self, key):
        self.b += u8(7) + u8(key)
        return self


def rate_seeds(rng):
    s = {}
    s["plain-boundaries"] = (Rt().observe(0, 3).advance(adv_boundary(-1)).observe(0)
                             .advance(adv_boundary(0)).observe(0).rate_with(0)
                             .advance(adv_boundary(1)).observe(1).rate_with(1).b)
    s["window-gap"] = (Rt(keys=1).observe(0, 3).observe(0, 3).advance(adv_windows(7))
                       .observe(0).rate_with(0).advance(adv_windows(9, 999)).rate_with(0)
                       .observe(0).b)
    s["every-slot-reused"] = b"".join(
        [Rt(keys=1).b] + [u8(5) + u8(0) for _ in range(12)] + [u8(7) + u8(0)])
    s["sub-windows-3"] = (Rt(3, "25ms+3", 1, 4, 3, 123456).observe(0, 2).boundary_observe(1)
                          .boundary_observe(2).boundary_observe(0).advance(adv_fraction(128))
                          .rate_with(0).advance(adv_windows(5)).rate_with(1).b)
    s["sub-windows-64"] = b"".join(
        [Rt(64, "10ms", 1, 2, 2).b] + [u8(5) + u8(i % 2) for i in range(70)]
        + [u8(3) + u8(0) + adv_windows(130)] + [u8(7) + u8(0)])
    s["saturate-a-window"] = (Rt(2, "15ms", 1, 1, 2).observe(0, "CEIL").observe(0, "CEIL")
                              .observe(1, "MAX").rate_with(0).boundary_observe(0)
                              .boundary_observe(0).advance(adv_windows(6)).rate_with(1).b)
    s["one-second"] = (Rt(1, "1s", 3, 16, 1, 39_999_999).observe(0, 2)
                       .advance(adv_us(65535)).observe(0).advance(adv_fraction(255))
                       .rate_with(0).advance(adv_boundary(-1)).observe(0)
                       .advance(adv_ns(1)).observe(0).rate_with(0).b)
    s["ticks-not-aligned"] = (Rt(2, "10ms+1", 2, 3, 4, 7).observe(3).advance(adv_tick())
                              .observe(2).advance(adv_tick()).observe(1).advance(adv_tick())
                              .observe(0).zero().rate_with(3).b)
    s["hundred-ms-k4"] = (Rt(4, "100ms", 1, 1, 4).observe(0, 3).observe(1, 3)
                          .advance(adv_windows(2, 5)).observe(2).advance(adv_windows(3))
                          .rate_with(0).advance(adv_windows(8)).rate_with(2).b)
    for i in range(16):
        r = Rt(rng.choice(list(K)), rng.choice(list(WINDOW)), rng.randint(1, 3),
               rng.choice([1, 2, 16]), rng.randint(1, 4), rng.getrandbits(32))
        for _ in range(rng.randint(4, 60)):
            op = rng.randint(0, 7)
            key = rng.randint(0, 3)
            if op <= 2:
                r.observe(key, rng.choice([1, 1, 2, 3, 0]))
            elif op <= 4:
                r.advance(rng.choice([adv_ns(rng.getrandbits(16)), adv_us(rng.getrandbits(16)),
                                      adv_boundary(rng.choice([-1, 0, 1])),
                                      adv_fraction(rng.getrandbits(8)),
                                      adv_windows(rng.randint(1, 10), rng.getrandbits(16)),
                                      adv_tick()]))
            elif op == 5:
                r.boundary_observe(key)
            elif op == 6:
                r.zero()
            else:
                r.rate_with(key)
        s["random-%02d" % i] = r.b
    return s


# --- limiter ---------------------------------------------------------------------------------
# header: mode (b % 3: 0 in flight, 1 rate, 2 both), max_inflight (1 + b % 6), interval
# ([10 ms, 10 ms + 1 ns, 20 ms, 50 ms, 100 ms, 1 s][b % 6]), max_rate (1 + b % 12), promotion
# ((b + 1) / 256), exact capacity (1 + b % 48), rows (1 + b % 3), columns (1 + b % 8),
# keys (1 + b % 24), offset (u32 % 40 ms); ops: 0..=2: acquire (opcode | 0x80: owned), key;
# 3: burst: key, 1 + b % 8 acquires; 4: drop permit (u8 % live); 5: advance (max 4 windows);
# 6: drop all (| 0x80: newest first); 7: checks only.
MODE = {"inflight": 0, "rate": 1, "both": 2}
INTERVAL = {"10ms": 0, "10ms+1": 1, "20ms": 2, "50ms": 3, "100ms": 4, "1s": 5}


class Lim:
    def __init__(self, mode, inflight=2, rate=4, interval="10ms", promotion=127, capacity=16,
                 rows=2, columns=4, keys=4, offset=0):
        self.b = (u8(MODE[mode]) + u8(inflight - 1) + u8(INTERVAL[interval]) + u8(rate - 1)
                  + u8(promotion) + u8(capacity - 1) + u8(rows - 1) + u8(columns - 1)
                  + u8(keys - 1) + u32(offset))

    def acquire(self, key, owned=False):
        self.b += u8(0x80 if owned else 0) + u8(key)
        return self

    def burst(self, key, n):
        self.b += u8(3) + u8(key) + u8(n - 1)
        return self

    def drop(self, i):
        self.b += u8(4) + u8(i)
        return self

    def advance(self, adv):
        self.b += u8(5) + adv
        return self

    def drop_all(self, newest_first=False):
        self.b += u8(0x86 if newest_first else 6)
        return self

    def check(self):
        self.b += u8(7)
        return self


def limiter_seeds(rng):
    s = {}
    s["inflight-one-key"] = (Lim("inflight", 3, keys=1).burst(0, 5).drop(0).acquire(0)
                             .acquire(0).drop_all().burst(0, 4).check().b)
    s["inflight-promotion-1.0"] = (Lim("inflight", 6, promotion=255, keys=2).burst(0, 7)
                                   .burst(1, 3).drop(2).burst(0, 2).drop_all(True).burst(0, 7).b)
    s["inflight-promote-early"] = (Lim("inflight", 4, promotion=0, keys=3, rows=1, columns=1)
                                   .burst(0, 5).burst(1, 5).drop_all().burst(2, 5).b)
    s["exact-stage-full"] = b"".join(
        [Lim("inflight", 2, promotion=0, capacity=1, rows=1, columns=1, keys=24).b]
        + [u8(3) + u8(k) + u8(2) for k in range(24)] + [u8(6)]
        + [u8(3) + u8(k) + u8(1) for k in range(24)])
    s["exact-stage-full-rate"] = b"".join(
        [Lim("rate", rate=2, promotion=0, capacity=1, rows=1, columns=1, keys=24).b]
        + [u8(3) + u8(k) + u8(2) for k in range(24)] + [u8(5) + adv_boundary(0)]
        + [u8(0) + u8(k) for k in range(24)])
    s["rate-windows"] = (Lim("rate", rate=3, keys=1).burst(0, 5).advance(adv_fraction(64))
                         .burst(0, 3).advance(adv_boundary(-1)).acquire(0)
                         .advance(adv_boundary(0)).burst(0, 4).advance(adv_fraction(200))
                         .burst(0, 2).advance(adv_windows(3)).burst(0, 4).b)
    s["rate-one-second"] = (Lim("rate", rate=12, interval="1s", keys=2, promotion=31)
                            .burst(0, 8).burst(0, 8).advance(adv_fraction(128)).burst(1, 8)
                            .advance(adv_boundary(1)).burst(0, 8).advance(adv_fraction(250))
                            .burst(0, 8).b)
    s["rate-limit-1"] = (Lim("rate", rate=1, interval="10ms+1", keys=2).acquire(0).acquire(0)
                         .advance(adv_boundary(0)).acquire(0).advance(adv_fraction(250))
                         .acquire(0).advance(adv_windows(2)).acquire(1).b)
    s["both-limits"] = (Lim("both", 2, 5, "20ms", keys=3).burst(0, 3).drop(0).burst(0, 3)
                        .advance(adv_tick()).drop_all().burst(1, 8).advance(adv_windows(1))
                        .burst(0, 3).check().b)
    s["owned-permits"] = (Lim("both", 3, 6, "50ms", keys=2).acquire(0, True).acquire(0, True)
                          .acquire(0, True).acquire(0, True).drop(1).acquire(0, True)
                          .drop_all(True).b)
    s["demote-and-repromote"] = (Lim("inflight", 4, promotion=63, keys=2).burst(0, 4)
                                 .drop_all().burst(1, 1).drop_all().burst(0, 5).drop(0)
                                 .drop_all().burst(0, 4).b)
    for i in range(18):
        lim = Lim(rng.choice(list(MODE)), rng.randint(1, 6), rng.randint(1, 12),
                  rng.choice(list(INTERVAL)), rng.getrandbits(8), rng.randint(1, 48),
                  rng.randint(1, 3), rng.randint(1, 8), rng.randint(1, 24), rng.getrandbits(32))
        for _ in range(rng.randint(5, 80)):
            op = rng.randint(0, 7)
            key = rng.randint(0, 23)
            if op <= 2:
                lim.acquire(key, rng.random() < 0.3)
            elif op == 3:
                lim.burst(key, rng.randint(1, 8))
            elif op == 4:
                lim.drop(rng.getrandbits(8))
            elif op == 5:
                lim.advance(rng.choice([adv_us(rng.getrandbits(16)),
                                        adv_boundary(rng.choice([-1, 0, 1])),
                                        adv_fraction(rng.getrandbits(8)),
                                        adv_windows(rng.randint(1, 4), rng.getrandbits(16)),
                                        adv_tick()]))
            elif op == 6 and rng.random() < 0.3:
                lim.drop_all(rng.random() < 0.5)
            else:
                lim.check()
        s["random-%02d" % i] = lim.b
    return s


# --- construction ----------------------------------------------------------------------------
# A sequence of constructions, each: selector (b % 5), then
# 0: Estimator::try_new(size, size); 1: Estimator::with_error(float, float);
# 2: Inflight::with_size(size, size); 3: Rate builder: interval, k ([0, 1, 1, 2, 3, 7, 64, 65,
# usize::MAX][b % 9]), size, size; 4: Limiter builder: limit, limit [+ interval if set], float
# (promotion), size (capacity, % 4097), size, size.
# size: tag 0..=63: tag; 64..=127: u16; 128..=191: 1 << (tag & 63); 192..=255: u64.
# float: tag 0..=63: SPECIAL[tag & 15]; 64..=191: (u16 + 1) / 65537; 192..=255: f64 bits.
# interval: tag 0..=63: SPECIAL[(tag & 15) % 12]; 64..=127: 10 ms · u8; 128..=191: u32 ns;
# 192..=255: u64 s + (u32 % 10^9) ns.
# limit: tag % 4 == 0: none; 1: [0, 1, -1, 2, MAX, MIN, 100, 7][b % 8]; 2/3: i8.
def size(n):
    if n < 64:
        return u8(n)
    if n < 65536:
        return u8(64) + u16(n)
    if n & (n - 1) == 0:
        return u8(128 + n.bit_length() - 1)
    return u8(192) + u64(n)


FLOAT = {"0": 0, "1": 1, "-0": 2, "nan": 3, "inf": 4, "-inf": 5, "min_pos": 6, "denorm": 7,
         "1e-9": 8, "0.5": 9, "1-eps": 10, "1+eps": 11, "0.01": 12, "2": 13, "-0.5": 14,
         "1e-300": 15}


def flt(x):
    if isinstance(x, str):
        return u8(FLOAT[x])
    return u8(192) + struct.pack("<d", x)


IVAL = {"0": 0, "1ns": 1, "tick-1": 2, "tick": 3, "tick+1": 4, "20ms": 5, "640ms": 6, "1s": 7,
        "max": 8, "max+1": 9, "DURATION_MAX": 10, "huge": 11}


def ival(x):
    if isinstance(x, str):
        return u8(IVAL[x])
    return u8(128) + u32(x)  # nanoseconds


KS = {0: 0, 1: 1, 2: 3, 3: 4, 7: 5, 64: 6, 65: 7, "MAX": 8}
LIMIT = {0: 0, 1: 1, -1: 2, 2: 3, "MAX": 4, "MIN": 5, 100: 6, 7: 7}


def limit(x):
    if x is None:
        return u8(0)
    return u8(1) + u8(LIMIT[x])


def c_est(rows, cols):
    return u8(0) + size(rows) + size(cols)


def c_err(eps, delta):
    return u8(1) + flt(eps) + flt(delta)


def c_inf(rows, cols):
    return u8(2) + size(rows) + size(cols)


def c_rate(interval, k, rows=2, cols=16):
    return u8(3) + ival(interval) + u8(KS[k]) + size(rows) + size(cols)


def c_lim(inflight, rate, interval="1s", promotion="0.5", capacity=16, rows=2, cols=16):
    b = u8(4) + limit(inflight) + limit(rate)
    if rate is not None:
        b += ival(interval)
    return b + flt(promotion) + size(capacity) + size(rows) + size(cols)


def construction_seeds(rng):
    s = {}
    s["estimator-edges"] = (c_est(0, 0) + c_est(0, 8) + c_est(4, 0) + c_est(1, 1)
                            + c_est(3, 1000) + c_est(1 << 28, 1) + c_est(1, (1 << 28) + 1)
                            + c_est(1 << 20, 1 << 20) + c_est(2**63, 2**63 + 1)
                            + c_est(3, 2**64 - 1) + c_est(1, 1 << 23) + c_est(2, (1 << 27) + 1))
    s["with-error-edges"] = (c_err("0", "0.5") + c_err("1", "0.5") + c_err("nan", "0.5")
                             + c_err("0.5", "nan") + c_err("0.01", "0.01") + c_err("1-eps", "1-eps")
                             + c_err("min_pos", "0.5") + c_err("denorm", "denorm")
                             + c_err("1e-9", "0.5") + c_err("0.5", "1e-300") + c_err(-0.25, 2.0)
                             + c_err("inf", "-inf") + c_err(1e-7, 1e-5) + c_err(2e-8, 0.5)
                             + c_err(0.01, 0.1) + c_err(0.001, 0.3) + c_err(0.2, 0.05))
    s["inflight-edges"] = (c_inf(0, 1) + c_inf(1, 0) + c_inf(4, 8192) + c_inf(1 << 40, 1 << 40)
                           + c_inf(1, 2**64 - 1) + c_inf(7, 5))
    s["rate-edges"] = (c_rate("0", 1) + c_rate("1ns", 1) + c_rate("tick-1", 1) + c_rate("tick", 1)
                       + c_rate("tick+1", 1) + c_rate("20ms", 2) + c_rate("20ms", 3)
                       + c_rate("640ms", 64) + c_rate("640ms", 65) + c_rate("1s", 0)
                       + c_rate("1s", "MAX") + c_rate("max", 1) + c_rate("max+1", 1)
                       + c_rate("DURATION_MAX", 7) + c_rate("huge", 1) + c_rate("1s", 1, 0, 4)
                       + c_rate("1s", 1, 1 << 30, 1 << 30) + c_rate(30_000_000, 3))
    s["limiter-edges"] = (c_lim(None, None) + c_lim(1, None) + c_lim(0, None) + c_lim(-1, None)
                          + c_lim(None, 1, "tick") + c_lim(None, 1, "tick-1")
                          + c_lim(None, "MIN", "1s") + c_lim("MAX", "MAX", "max")
                          + c_lim(2, 2, "max+1") + c_lim(2, None, promotion="0")
                          + c_lim(2, None, promotion="1") + c_lim(2, None, promotion="1+eps")
                          + c_lim(2, None, promotion="nan") + c_lim(2, None, promotion="min_pos")
                          + c_lim(2, None, capacity=0) + c_lim(2, None, capacity=4096)
                          + c_lim(2, 100, rows=0) + c_lim(7, None, rows=1 << 40, cols=1 << 40)
                          + c_lim(None, 7, "20ms", rows=3, cols=0))
    for i in range(12):
        b = b""
        for _ in range(rng.randint(1, 10)):
            which = rng.randint(0, 4)
            if which == 0:
                b += c_est(rng.choice([0, 1, 3, 1 << 28, 2**64 - 1, rng.getrandbits(16)]),
                           rng.choice([0, 1, 17, 1 << 30, rng.getrandbits(12)]))
            elif which == 1:
                b += c_err(rng.choice(list(FLOAT) + [rng.random()]),
                           rng.choice(list(FLOAT) + [rng.random()]))
            elif which == 2:
                b += c_inf(rng.randint(0, 8), rng.choice([0, 1, 1000, 2**40]))
            elif which == 3:
                b += c_rate(rng.choice(list(IVAL) + [rng.getrandbits(32)]), rng.choice(list(KS)),
                            rng.randint(0, 4), rng.choice([0, 1, 64, 1 << 20]))
            else:
                b += c_lim(rng.choice(list(LIMIT) + [None]), rng.choice(list(LIMIT) + [None]),
                           rng.choice(list(IVAL)), rng.choice(list(FLOAT)),
                           rng.choice([0, 1, 17, 4096]), rng.randint(0, 4),
                           rng.choice([0, 1, 64, 1 << 36]))
        s["random-%02d" % i] = b
    return s


def main():
    rng = random.Random(0xF100D)
    targets = {
        "estimator": estimator_seeds,
        "inflight": inflight_seeds,
        "rate": rate_seeds,
        "limiter": limiter_seeds,
        "construction": construction_seeds,
    }
    for target, seeds in targets.items():
        d = os.path.join(CORPUS, target)
        os.makedirs(d, exist_ok=True)
        made = seeds(rng)
        for name, data in made.items():
            with open(os.path.join(d, "seed-" + name), "wb") as f:
                f.write(data)
        print("%-12s %3d seeds" % (target, len(made)))


if __name__ == "__main__":
    main()
