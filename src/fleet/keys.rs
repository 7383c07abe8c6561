//! The names of the fleet's Redis keys, and the Cluster slot each one lands in.
//!
//! A key's counts of a window are a hash named `<prefix>:{<key>}:<window>` (a field per node),
//! and its refusals `<prefix>:{<key>}:<window>:refused`: the user key, escaped, is the names'
//! hash tag, so the hashes of one key (both kinds, this window's and the previous one's, which
//! one script touches) share a Cluster slot while different keys spread over the slots. The escape keeps the tag free of braces and readable for the usual
//! keys (host names): the bytes `%`, `{` and `}`, and every byte outside printable ASCII (`!`
//! to `~`), are written `%XX` (two upper-case hex digits); all other bytes stand for
//! themselves. That is one-to-one, so two different keys never share a hash. The empty key,
//! whose tag would be empty (and an empty tag is no tag: Redis would hash the whole name), is
//! written `%` alone, which no escaped key can be.

use std::io::Write;

/// The slots of a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// Appends the name of `key`'s hash of counts for `window` to `out`:
/// `<prefix>:{<escaped key>}:<window>`.
pub(crate) fn window_key(out: &mut Vec<u8>, prefix: &str, key: &[u8], window: u64) {
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(b":{");
    if key.is_empty() {
        out.push(b'%');
    }
    for &byte in key {
        if matches!(byte, b'!'..=b'~') && !matches!(byte, b'%' | b'{' | b'}') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 15)],
            ]);
        }
    }
    out.extend_from_slice(b"}:");
    push_number(out, window);
}

/// Appends `n` in decimal (formatted in place: no allocation beyond `out`'s growth).
pub(crate) fn push_number(out: &mut Vec<u8>, n: u64) {
    write!(out, "{n}").expect("writing to a Vec cannot fail");
}

/// The name of the sorted set of nodes seen recently: `<prefix>:nodes`.
pub(crate) fn nodes_key(prefix: &str) -> String {
    format!("{prefix}:nodes")
}

const HEX: [u8; 16] = *b"0123456789ABCDEF";

/// The Cluster slot of a key name, as Redis computes it: CRC16 (XMODEM) of the hash tag (the
/// bytes between the first `{` and the first `}` after it, when there are any) or else of the
/// whole name, modulo 16384.
pub(crate) fn slot(name: &[u8]) -> u16 {
    let tagged = name.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &name[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    // 16384 is a power of two, so the modulo is a mask.
    crc16(tagged.unwrap_or(name)) & (SLOTS as u16 - 1)
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0, no reflection), bit by bit: a key name
/// is short and a sync hashes at most a few thousand of them, so no table is needed.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(prefix: &str, key: &[u8], window: u64) -> String {
        let mut out = Vec::new();
        window_key(&mut out, prefix, key, window);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn plain_keys_stand_for_themselves() {
        assert_eq!(
            name("fg", b"api.example.com", 42),
            "fg:{api.example.com}:42"
        );
        assert_eq!(name("fg", b"a:b", 0), "fg:{a:b}:0");
    }

    #[test]
    fn braces_percent_and_unprintable_bytes_are_escaped() {
        assert_eq!(name("fg", b"{x}", 1), "fg:{%7Bx%7D}:1");
        assert_eq!(name("fg", b"100%", 1), "fg:{100%25}:1");
        assert_eq!(name("fg", b"a b\n\xff", 1), "fg:{a%20b%0A%FF}:1");
        assert_eq!(name("fg", b"", 7), "fg:{%}:7");
    }

    #[test]
    fn escaping_is_one_to_one_on_a_sample() {
        // Every key of up to two bytes drawn from a mix of plain and escaped bytes.
        let alphabet: &[u8] = b"a%{}:\x00 7F";
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for &a in alphabet {
            keys.push(vec![a]);
            for &b in alphabet {
                keys.push(vec![a, b]);
            }
        }
        let mut names: Vec<String> = keys.iter().map(|k| name("p", k, 1)).collect();
        names.sort();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "two keys share a name");
    }

    #[test]
    fn both_windows_of_a_key_share_a_slot_and_keys_spread() {
        let slot_of = |key: &[u8], window| slot(name("floodgate", key, window).as_bytes());
        for key in [&b"a"[..], b"b", b"", b"{}", b"origin-17.example"] {
            assert_eq!(slot_of(key, 10), slot_of(key, 9));
        }
        let mut slots: Vec<u16> = (0..64)
            .map(|i| slot_of(format!("key-{i}").as_bytes(), 1))
            .collect();
        slots.sort_unstable();
        slots.dedup();
        assert!(slots.len() > 32, "64 keys in only {} slots", slots.len());
    }

    #[test]
    fn slots_match_the_cluster_specification() {
        // The check value of CRC-16/XMODEM, and the Cluster specification's tag examples.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(
            slot(b"foo{}{bar}"),
            crc16(b"foo{}{bar}") & 16383,
            "an empty tag is no tag"
        );
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
        // Known slots (from CLUSTER KEYSLOT): "foo" is 12182, "bar" 5061.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
    }
}
