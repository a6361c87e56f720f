//! Compact encoding of an epoch's message ids inside a ConfigMap value.
//!
//! Why: a reader records every message id of an acked epoch in its lease ConfigMap, and a ConfigMap
//! holds at most 1 MiB. SQS message ids are UUIDs (36 characters); stored as 22 characters of
//! unpadded base64url (the 16 bytes of the UUID) plus a separator they cost 23 bytes, so one lease
//! holds about 40,000 pending ids ([`LEASE_ID_BUDGET`] leaves room for the other keys). An id that
//! is not a UUID is kept verbatim behind a `=` marker so that the encoding never loses an id.

use std::collections::BTreeSet;

/// The ids of one epoch, sorted so that an encoded value is deterministic.
pub type IdSet = BTreeSet<String>;

/// How many pending ids (acked or committed-but-undeleted, across all epochs) one lease may hold.
/// 40,000 ids of 23 bytes are about 920 KB, under the 1 MiB ConfigMap limit with room for the
/// other keys. A reader stops receiving while it holds this many.
pub const LEASE_ID_BUDGET: usize = 40_000;

const SEPARATOR: char = ',';
const VERBATIM: char = '=';
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Why an encoded id list could not be read back, or an id could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdError {
    Separator(String),
    Token(String),
}

impl std::fmt::Display for IdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdError::Separator(id) => write!(f, "message id {id:?} contains ',' and cannot be recorded"),
            IdError::Token(token) => {
                write!(f, "token {token:?} is neither a 22-character UUID nor a '='-prefixed id")
            }
        }
    }
}

impl std::error::Error for IdError {}

/// Encodes `ids` as one ConfigMap value.
pub fn encode(ids: &IdSet) -> Result<String, IdError> {
    let mut out = String::with_capacity(ids.len() * 23);
    for id in ids {
        if !out.is_empty() {
            out.push(SEPARATOR);
        }
        match parse_uuid(id) {
            Some(bytes) => encode_b64(&bytes, &mut out),
            None if id.contains(SEPARATOR) => return Err(IdError::Separator(id.clone())),
            None => {
                out.push(VERBATIM);
                out.push_str(id);
            }
        }
    }
    Ok(out)
}

/// Decodes a value written by [`encode`].
pub fn decode(value: &str) -> Result<IdSet, IdError> {
    let mut ids = IdSet::new();
    if value.is_empty() {
        return Ok(ids);
    }
    for token in value.split(SEPARATOR) {
        if let Some(verbatim) = token.strip_prefix(VERBATIM) {
            ids.insert(verbatim.to_owned());
        } else {
            let bytes = decode_b64(token).ok_or_else(|| IdError::Token(token.to_owned()))?;
            ids.insert(format_uuid(&bytes));
        }
    }
    Ok(ids)
}

/// Lower-case hyphenated UUID to bytes; anything else (upper case included) is not a UUID here,
/// so that decoding gives back exactly the string that was encoded.
fn parse_uuid(id: &str) -> Option<[u8; 16]> {
    let b = id.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut bytes = [0u8; 16];
    let mut hex = b.iter().filter(|&&c| c != b'-');
    for byte in &mut bytes {
        let hi = lower_hex(*hex.next()?)?;
        let lo = lower_hex(*hex.next()?)?;
        *byte = (hi << 4) | lo;
    }
    Some(bytes)
}

fn lower_hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

fn format_uuid(bytes: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push_str(&format!("{byte:02x}"));
    }
    s
}

/// 16 bytes to 22 base64url characters (no padding).
fn encode_b64(bytes: &[u8; 16], out: &mut String) {
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
}

fn decode_b64(token: &str) -> Option<[u8; 16]> {
    if token.len() != 22 {
        return None;
    }
    let mut bits: u32 = 0;
    let mut nbits = 0;
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    for c in token.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        bits = (bits << 6) | v;
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            *bytes.get_mut(filled)? = (bits >> nbits) as u8;
            filled += 1;
            bits &= (1 << nbits) - 1;
        }
    }
    // 22 characters carry 132 bits: 128 of data and 4 that must be zero.
    (filled == 16 && bits == 0).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[&str]) -> IdSet {
        ids.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn uuids_take_22_characters_and_round_trip() {
        let ids = set(&[
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "ffffffff-ffff-ffff-ffff-ffffffffffff",
            "00000000-0000-0000-0000-000000000000",
        ]);
        let encoded = encode(&ids).unwrap();
        assert_eq!(encoded.len(), 4 * 22 + 3);
        assert_eq!(decode(&encoded).unwrap(), ids);
    }

    #[test]
    fn other_ids_are_kept_verbatim() {
        let ids = set(&["m1", "0F8FAD5B-D9CB-469F-A165-70867728950E", "a=b"]);
        let encoded = encode(&ids).unwrap();
        assert!(encoded.contains("=m1"));
        assert_eq!(decode(&encoded).unwrap(), ids);
    }

    #[test]
    fn empty_set_is_an_empty_value() {
        assert_eq!(encode(&IdSet::new()).unwrap(), "");
        assert!(decode("").unwrap().is_empty());
    }

    #[test]
    fn an_id_with_the_separator_is_refused() {
        assert_eq!(encode(&set(&["a,b"])), Err(IdError::Separator("a,b".into())));
    }

    #[test]
    fn a_malformed_token_is_named() {
        assert_eq!(decode("abc"), Err(IdError::Token("abc".into())));
        // 22 characters whose last 4 bits are not zero do not come from encode().
        assert!(decode("AAAAAAAAAAAAAAAAAAAAAB").is_err());
    }

    #[test]
    fn budget_fits_the_configmap_limit() {
        let ids: IdSet =
            (0..LEASE_ID_BUDGET).map(|i| format!("{:08x}-0000-4000-8000-{:012x}", i, i)).collect();
        let encoded = encode(&ids).unwrap();
        assert!(encoded.len() < 1_000_000, "{} bytes", encoded.len());
        assert_eq!(decode(&encoded).unwrap().len(), LEASE_ID_BUDGET);
    }
}
