//! [`FleetKey`]: how a limiter key is named in Redis.

use std::borrow::Cow;
use std::sync::Arc;

/// A limiter key that a fleet can name in Redis: its bytes, the same on every node.
///
/// Implemented for the usual key types: strings (a host name, a customer id), byte strings
/// and integers (big-endian). A key type of your own implements it by giving bytes that two
/// nodes agree on for equal keys (and that differ for different keys).
///
/// # Examples
///
/// ```
/// use floodgate::fleet::FleetKey;
///
/// assert_eq!(&*"api.example".to_string().fleet_key(), b"api.example");
/// assert_eq!(&*7u64.fleet_key(), &7u64.to_be_bytes());
/// ```
pub trait FleetKey {
    /// The key's bytes in the fleet's Redis names.
    fn fleet_key(&self) -> Cow<'_, [u8]>;
}

impl FleetKey for String {
    fn fleet_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl FleetKey for Box<str> {
    fn fleet_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl FleetKey for Arc<str> {
    fn fleet_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self.as_bytes())
    }
}

impl FleetKey for Vec<u8> {
    fn fleet_key(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(self)
    }
}

macro_rules! integer_fleet_keys {
    ($($t:ty),*) => {$(
        impl FleetKey for $t {
            fn fleet_key(&self) -> Cow<'_, [u8]> {
                Cow::Owned(self.to_be_bytes().to_vec())
            }
        }
    )*};
}

integer_fleet_keys!(u16, u32, u64, u128, i16, i32, i64, i128);
