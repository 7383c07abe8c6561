//! What a request's body costs when a limit counts bytes: the length its `Content-Length`
//! declares ([`declared_length`]), and what becomes of a body whose length is not known before
//! it is read ([`UnknownLength`], [`BodyCharge`]).
//!
//! The tower layer's `BodyBytes` (feature `tower`) charges requests by these rules; a proxy
//! built on something else (pingora) passes the field's lines and gets the same charge.
//!
//! # Examples
//!
//! ```
//! use floodgate::fields::cost::{declared_length, BodyCharge, UnknownLength};
//!
//! let lines: [&[u8]; 1] = [b"1500"];
//! let charge = BodyCharge::of(declared_length(lines), UnknownLength::Refuse);
//! assert_eq!((charge.cost(), charge.most()), (Some(1500), Some(1500)));
//!
//! // A chunked upload: no length before it is read.
//! let chunked = BodyCharge::of(None, UnknownLength::Refuse);
//! assert_eq!(chunked, BodyCharge::LengthRequired);
//! assert_eq!(chunked.cost(), None, "answered 411 before any limit is asked");
//! let charged = BodyCharge::of(None, UnknownLength::Charge(4096));
//! assert_eq!((charged.cost(), charged.most()), (Some(4096), Some(4096)));
//! ```

/// What a body of unknown length costs when a limit counts bytes: the operator's choice, with
/// no default.
///
/// # Examples
///
/// ```
/// use floodgate::fields::cost::UnknownLength;
///
/// // Uploads of up to 1 MiB; a chunked one pays for the whole MiB up front.
/// let uploads = UnknownLength::Charge(1 << 20);
/// // An API whose clients can always send Content-Length.
/// let strict = UnknownLength::Refuse;
/// # let _ = (uploads, strict);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownLength {
    /// Charge it this many bytes (at least 1), the most it may then carry: a byte more ends
    /// the body with an error. Choose the largest body you accept without a length, at most
    /// the smallest limit (a charge over a limit is refused as over it).
    Charge(u32),
    /// Refuse it with `411 Length Required` (RFC 9110 §15.5.12), before any limit is asked:
    /// the client is to send it again with a `Content-Length`.
    Refuse,
}

/// What a request's body is charged and held to, by its declared length and the operator's
/// choice for bodies of unknown length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyCharge {
    /// The length the request declared (`Content-Length`, or 0 for a request without a
    /// body).
    Declared(u64),
    /// The operator's charge for a body of unknown length ([`UnknownLength::Charge`]).
    Charged(u32),
    /// A body of unknown length, refused ([`UnknownLength::Refuse`]): answered
    /// `411 Length Required` with [`LENGTH_REQUIRED`] as its body.
    LengthRequired,
}

impl BodyCharge {
    /// The charge of a body whose declared length is `declared` (`None`: not known before it
    /// is read), bodies of unknown length charged or refused as `unknown` says.
    pub const fn of(declared: Option<u64>, unknown: UnknownLength) -> BodyCharge {
        match (declared, unknown) {
            (Some(length), _) => BodyCharge::Declared(length),
            (None, UnknownLength::Charge(bytes)) => BodyCharge::Charged(bytes),
            (None, UnknownLength::Refuse) => BodyCharge::LengthRequired,
        }
    }

    /// The units the request counts in each limit: its bytes, at least 1 (so that requests
    /// without a body are still counted; a cost of 0 counts nothing), `u32::MAX` past it
    /// (over any limit); `None` for a body that is refused.
    pub const fn cost(self) -> Option<u32> {
        let bytes = match self {
            BodyCharge::Declared(length) if length > u32::MAX as u64 => u32::MAX,
            BodyCharge::Declared(length) => length as u32,
            BodyCharge::Charged(bytes) => bytes,
            BodyCharge::LengthRequired => return None,
        };
        Some(if bytes == 0 { 1 } else { bytes })
    }

    /// The most bytes the body may carry: what it was charged (`None` for a body that is
    /// refused, and not held if it is served anyway).
    pub const fn most(self) -> Option<u64> {
        match self {
            BodyCharge::Declared(length) => Some(length),
            BodyCharge::Charged(bytes) => Some(bytes as u64),
            BodyCharge::LengthRequired => None,
        }
    }
}

/// The body of the `411 Length Required` answer to a body of unknown length that is refused.
pub const LENGTH_REQUIRED: &str =
    "This request's body has no length: send it again with a Content-Length.\n";

/// The length a request's `Content-Length` field declares, from its lines in the order they
/// came: the number when every line is the same number (RFC 9110 §8.6: digits only), else
/// `None` (no field, a value that is not a number, lines that disagree).
///
/// # Examples
///
/// ```
/// use floodgate::fields::cost::declared_length;
///
/// assert_eq!(declared_length([&b"42"[..]]), Some(42));
/// assert_eq!(declared_length([&b"42"[..], &b"42"[..]]), Some(42));
/// assert_eq!(declared_length([&b"42"[..], &b"43"[..]]), None);
/// assert_eq!(declared_length([&b"+42"[..]]), None);
/// assert_eq!(declared_length(std::iter::empty::<&[u8]>()), None);
/// ```
pub fn declared_length<'f>(lines: impl IntoIterator<Item = &'f [u8]>) -> Option<u64> {
    let mut lines = lines.into_iter();
    let length = content_length(lines.next()?)?;
    lines
        .all(|line| content_length(line) == Some(length))
        .then_some(length)
}

/// A `Content-Length` value: one or more digits, nothing else (RFC 9110 §8.6).
fn content_length(value: &[u8]) -> Option<u64> {
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_at_least_one_and_at_most_u32_max() {
        let refuse = UnknownLength::Refuse;
        assert_eq!(BodyCharge::of(Some(0), refuse).cost(), Some(1));
        assert_eq!(BodyCharge::of(Some(0), refuse).most(), Some(0));
        let huge = BodyCharge::of(Some(u64::MAX), refuse);
        assert_eq!((huge.cost(), huge.most()), (Some(u32::MAX), Some(u64::MAX)));
        let zero = BodyCharge::of(None, UnknownLength::Charge(0));
        assert_eq!((zero.cost(), zero.most()), (Some(1), Some(0)));
        assert_eq!(BodyCharge::of(None, refuse).most(), None);
    }

    #[test]
    fn only_digits_declare_a_length() {
        for bad in ["4, 5", "+4", "-4", "4 ", "", "0x4", "٤"] {
            assert_eq!(declared_length([bad.as_bytes()]), None, "{bad:?}");
        }
        let long = "9".repeat(30);
        assert_eq!(declared_length([long.as_bytes()]), None, "past u64");
    }
}
