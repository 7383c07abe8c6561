//! Proptest strategies for the operation types of `fuzz/harness/`, so that the proptests run
//! the fuzz harness's exact models and checks.
//!
//! Each value is decoded by `arbitrary` from its own proptest bytes, so a list of operations
//! shrinks well: proptest drops whole operations, and shrinks each one's bytes towards zero
//! (towards the first variant and the smallest fields) without reinterpreting the others,
//! which decoding one byte string for the whole input would do.

use arbitrary::{Arbitrary, Unstructured};
use proptest::collection::vec;
use proptest::prelude::*;

/// Bytes per value: more than the largest operation reads (a missing byte reads as zero).
const BYTES: usize = 32;

/// Any `T`, decoded from `BYTES` proptest bytes.
pub fn arb<T>() -> impl Strategy<Value = T>
where
    T: for<'a> Arbitrary<'a> + std::fmt::Debug,
{
    vec(any::<u8>(), BYTES).prop_map(|bytes| {
        T::arbitrary(&mut Unstructured::new(&bytes)).expect("arbitrary decodes any bytes")
    })
}

/// Lists of `len` values of `T`.
pub fn arb_vec<T>(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<T>>
where
    T: for<'a> Arbitrary<'a> + std::fmt::Debug,
{
    vec(arb::<T>(), len)
}
