//! One segment of a continuous backup: the events of a run of revisions,
//! stored as zstd-compressed JSON Lines, encrypted when the cluster's
//! backups are ([`crate::encoding`]).
//!
//! The first line is the [`SegmentHeader`]; each following line one
//! [`Event`]. Keys and values are base64 (etcd keys and values are bytes).
//! JSON Lines keeps a segment readable with `zstdcat | jq` when someone has
//! to look at a backup by hand; zstd takes most of the encoding's overhead
//! (base64, repeated field names) back, faster than gzip at a better ratio.
//!
//! A segment covers the revisions `(after_revision, last_revision]`: every
//! event of those revisions, in order. A segment with no events (`after ==
//! last`) still moves the recoverable point in time forward: it says that
//! nothing was written up to its `last_time`.

use std::io::BufRead as _;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::encoding::{CodecError, Encoding, decode_all};
use crate::encryption::{Key, Keyring};

/// The ending of every segment object's name ...
pub const SEGMENT_SUFFIX: &str = ".jsonl.zst";
/// ... followed by this one when the segment is encrypted.
pub const ENCRYPTED_SUFFIX: &str = ".enc";

/// The format this code writes, first in every header.
pub const FORMAT: &str = "dkv.io/continuous-backup-segment/v1";

/// What changed a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Put,
    Delete,
}

/// One key change, as the watch reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The revision of the transaction that made the change (several events
    /// share one when a transaction changed several keys).
    pub revision: i64,
    pub kind: EventKind,
    #[serde(with = "base64_bytes")]
    pub key: Vec<u8>,
    /// The new value of a put; empty for a delete.
    #[serde(default, with = "base64_bytes", skip_serializing_if = "Vec::is_empty")]
    pub value: Vec<u8>,
    /// The lease a put attached the key to (0: none). Replay grants a lease
    /// of this ID so that keys that belonged together expire together.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lease: i64,
    /// When the agent received the event (Unix milliseconds): what a restore
    /// to a point in time compares against.
    pub received_ms: i64,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// What a segment is: where it sits in its chain and what it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SegmentHeader {
    pub format: String,
    /// The chain: named after the full snapshot it continues.
    pub chain: String,
    /// Position in the chain, from 1.
    pub sequence: u64,
    /// The segment holds the revisions after this one...
    pub after_revision: i64,
    /// ... up to and including this one.
    pub last_revision: i64,
    /// sha256 (lower-case hex) of the stored bytes of the segment before it
    /// in the chain; empty for the first.
    pub previous_sha256: String,
    /// The agent's clock when the segment began and when it was closed: the
    /// segment says nothing was written in that time beyond its events.
    pub first_time: Timestamp,
    pub last_time: Timestamp,
    pub events: u64,
}

/// A segment that could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error("reading the segment: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("the segment has no header line")]
    Empty,
    #[error("line {line} of the segment: {source}")]
    Json {
        line: usize,
        source: serde_json::Error,
    },
    #[error("the segment is in format {0:?}, not {FORMAT}")]
    Format(String),
    #[error("the segment's events do not match its header: {0}")]
    Inconsistent(String),
}

/// A segment as stored: the encoded bytes and their sha256.
#[derive(Debug, Clone)]
pub struct EncodedSegment {
    pub bytes: Vec<u8>,
    pub sha256: String,
    pub encrypted: bool,
}

/// Encodes `events` under `header` (its `events` count is set here),
/// encrypted with `key` when there is one.
pub fn encode(
    header: &SegmentHeader,
    events: &[Event],
    key: Option<&Key>,
) -> Result<EncodedSegment, SegmentError> {
    let mut header = header.clone();
    header.events = events.len() as u64;
    let mut text = json_line(&header, 1)?;
    for (index, event) in events.iter().enumerate() {
        text.extend(json_line(event, index + 2)?);
    }
    // zstd's frame carries a checksum of the content: a damaged segment
    // fails to decode even when it is the newest of its chain (the ones
    // before it are also checked by the next one's `previous_sha256`).
    let encoding = Encoding {
        compress: true,
        key: key.cloned(),
    };
    let bytes = encoding.encode_all(&text)?;
    let sha256 = hex_sha256(&bytes);
    Ok(EncodedSegment {
        bytes,
        sha256,
        encrypted: key.is_some(),
    })
}

/// Decodes a stored segment (decrypting it with `keys` when it is
/// encrypted) and checks that its events fit its header: the count, every
/// revision within `(after, last]`, in order.
pub fn decode(bytes: &[u8], keys: &Keyring) -> Result<(SegmentHeader, Vec<Event>), SegmentError> {
    let text = decode_all(keys, bytes)?;
    let mut lines = text.lines();
    let first = lines.next().ok_or(SegmentError::Empty)??;
    let header: SegmentHeader =
        serde_json::from_str(&first).map_err(|source| SegmentError::Json { line: 1, source })?;
    if header.format != FORMAT {
        return Err(SegmentError::Format(header.format));
    }
    let mut events = Vec::new();
    for (index, line) in lines.enumerate() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        let event: Event = serde_json::from_str(&line).map_err(|source| SegmentError::Json {
            line: index + 2,
            source,
        })?;
        events.push(event);
    }
    check(&header, &events)?;
    Ok((header, events))
}

fn check(header: &SegmentHeader, events: &[Event]) -> Result<(), SegmentError> {
    let bad = |what: String| Err(SegmentError::Inconsistent(what));
    if events.len() as u64 != header.events {
        return bad(format!(
            "{} events, the header says {}",
            events.len(),
            header.events
        ));
    }
    if header.last_revision < header.after_revision {
        return bad(format!(
            "it ends at revision {} before it starts after {}",
            header.last_revision, header.after_revision
        ));
    }
    let mut previous = header.after_revision;
    for event in events {
        if event.revision <= header.after_revision || event.revision > header.last_revision {
            return bad(format!(
                "revision {} is outside ({}, {}]",
                event.revision, header.after_revision, header.last_revision
            ));
        }
        if event.revision < previous {
            return bad(format!(
                "revision {} comes after revision {previous}",
                event.revision
            ));
        }
        previous = event.revision;
    }
    Ok(())
}

fn json_line<T: Serialize>(value: &T, line: usize) -> Result<Vec<u8>, SegmentError> {
    let mut bytes =
        serde_json::to_vec(value).map_err(|source| SegmentError::Json { line, source })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Lower-case hex sha256 of `bytes`.
pub fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The name of a segment's object inside its chain's directory: its
/// sequence and the revisions it covers, zero-padded so that names sort in
/// chain order (segments without events share their revisions, never their
/// sequence).
pub fn object_name(header: &SegmentHeader, encrypted: bool) -> String {
    format!(
        "{:010}-{:020}-{:020}{SEGMENT_SUFFIX}{}",
        header.sequence,
        header.after_revision,
        header.last_revision,
        if encrypted { ENCRYPTED_SUFFIX } else { "" }
    )
}

mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&BASE64.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        BASE64.decode(text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(revision: i64, key: &str, value: &str) -> Event {
        Event {
            revision,
            kind: EventKind::Put,
            key: key.as_bytes().to_vec(),
            value: value.as_bytes().to_vec(),
            lease: 0,
            received_ms: 1_700_000_000_000 + revision,
        }
    }

    fn header(after: i64, last: i64) -> SegmentHeader {
        SegmentHeader {
            format: FORMAT.to_owned(),
            chain: "00000000000000000100-20261125T120000Z".to_owned(),
            sequence: 1,
            after_revision: after,
            last_revision: last,
            previous_sha256: String::new(),
            first_time: Timestamp::from_second(1_700_000_000).unwrap_or_default(),
            last_time: Timestamp::from_second(1_700_000_010).unwrap_or_default(),
            events: 0,
        }
    }

    #[test]
    fn a_segment_reads_back_as_written_with_binary_keys_leases_and_deletes() {
        let mut events = vec![put(101, "a", "1"), put(101, "b", "2")];
        events.push(Event {
            revision: 102,
            kind: EventKind::Delete,
            key: vec![0, 159, 255],
            value: Vec::new(),
            lease: 0,
            received_ms: 5,
        });
        let mut leased = put(103, "session", "x");
        leased.lease = 7_587_869_066_234_567;
        events.push(leased);
        let encoded = encode(&header(100, 103), &events, None).unwrap();
        assert_eq!(encoded.sha256, hex_sha256(&encoded.bytes));
        let (read, back) = decode(&encoded.bytes, &Keyring::default()).unwrap();
        assert_eq!(read.events, 4);
        assert_eq!(back, events);
    }

    #[test]
    fn an_empty_segment_moves_time_forward_without_events() {
        let encoded = encode(&header(100, 100), &[], None).unwrap();
        let (read, back) = decode(&encoded.bytes, &Keyring::default()).unwrap();
        assert_eq!((read.after_revision, read.last_revision), (100, 100));
        assert!(back.is_empty());
    }

    #[test]
    fn events_outside_the_header_range_or_out_of_order_are_refused() {
        let outside = encode(&header(100, 101), &[put(102, "a", "1")], None).unwrap();
        assert!(matches!(
            decode(&outside.bytes, &Keyring::default()),
            Err(SegmentError::Inconsistent(m)) if m.contains("outside (100, 101]")
        ));
        let unordered = encode(
            &header(100, 103),
            &[put(103, "a", "1"), put(102, "b", "2")],
            None,
        )
        .unwrap();
        assert!(matches!(
            decode(&unordered.bytes, &Keyring::default()),
            Err(SegmentError::Inconsistent(m)) if m.contains("comes after")
        ));
    }

    #[test]
    fn a_truncated_or_foreign_object_is_an_error_not_a_short_segment() {
        let encoded = encode(
            &header(100, 102),
            &[put(101, "a", "1"), put(102, "b", "2")],
            None,
        )
        .unwrap();
        let truncated = &encoded.bytes[..encoded.bytes.len() - 12];
        assert!(decode(truncated, &Keyring::default()).is_err());
        assert!(matches!(
            decode(b"not zstd", &Keyring::default()),
            Err(SegmentError::Json { .. })
        ));
        // Any one byte damaged anywhere: the frame's checksum (or its
        // structure) gives it away; it never decodes as another segment
        // (a frame header field that does not change the content, such as
        // the window size, may still decode to the same events).
        let original = decode(&encoded.bytes, &Keyring::default()).unwrap();
        for at in 0..encoded.bytes.len() {
            let mut damaged = encoded.bytes.clone();
            damaged[at] ^= 0x55;
            if let Ok(decoded) = decode(&damaged, &Keyring::default()) {
                assert_eq!(decoded, original, "byte {at} damaged changed the segment");
            }
        }
    }

    #[test]
    fn an_encrypted_segment_reads_back_only_with_its_key() {
        let key = Key::parse(&[3; 32]).unwrap();
        let events = vec![put(101, "a", "1")];
        let encoded = encode(&header(100, 101), &events, Some(&key)).unwrap();
        assert!(encoded.encrypted);
        assert!(crate::encryption::is_encrypted(&encoded.bytes));
        let (_, back) = decode(&encoded.bytes, &Keyring::from(key.clone())).unwrap();
        assert_eq!(back, events);
        let other = Key::parse(&[4; 32]).unwrap();
        let err = decode(&encoded.bytes, &Keyring::from(other)).unwrap_err();
        assert!(err.to_string().contains(key.id()), "{err}");
        assert!(object_name(&header(100, 101), true).ends_with(".jsonl.zst.enc"));
    }

    #[test]
    fn object_names_sort_in_chain_order_and_never_collide() {
        let numbered = |sequence, after, last| {
            let mut h = header(after, last);
            h.sequence = sequence;
            object_name(&h, false)
        };
        let mut names = [
            numbered(3, 999, 999),
            numbered(2, 999, 999),
            numbered(10, 999, 1500),
            numbered(1, 100, 999),
        ];
        names.sort();
        assert!(names[0].starts_with("0000000001-00000000000000000100-"));
        assert!(names[1].starts_with("0000000002-"));
        assert!(names[3].starts_with("0000000010-"));
        assert_ne!(names[1], names[2]);
    }
}
