//! Writing Redis commands in RESP, the protocol's wire format, straight into a pipeline's
//! buffer: a command is an array of bulk strings. Numbers are formatted on the stack, since a
//! sync writes many of them and should not allocate for each.

/// Appends the header of an array of `len` elements.
pub(crate) fn array(out: &mut Vec<u8>, len: usize) {
    out.push(b'*');
    out.extend_from_slice(Digits::new(len as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string holding `bytes`.
pub(crate) fn bulk(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(Digits::new(bytes.len() as u64).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends a bulk string holding `n` in decimal, as Redis takes integer arguments.
pub(crate) fn number(out: &mut Vec<u8>, n: u64) {
    bulk(out, Digits::new(n).as_bytes());
}

/// The decimal digits of a `u64`, on the stack.
pub(crate) struct Digits {
    buf: [u8; 20],
    start: usize,
}

impl Digits {
    pub(crate) fn new(mut n: u64) -> Digits {
        let mut buf = [0u8; 20];
        let mut start = buf.len();
        loop {
            start -= 1;
            buf[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Digits { buf, start }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits() {
        for n in [0, 7, 10, 12345, u64::MAX] {
            assert_eq!(Digits::new(n).as_bytes(), n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = Vec::new();
        array(&mut out, 3);
        bulk(&mut out, b"SET");
        bulk(&mut out, b"");
        number(&mut out, 42);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$0\r\n\r\n$2\r\n42\r\n");
    }
}
