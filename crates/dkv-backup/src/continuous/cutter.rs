//! Cutting the watched events of a cluster into the segments of a chain
//! (pure: the agent feeds it events and the time, and stores what it seals).
//!
//! A segment is sealed when the interval since the current one opened has
//! passed or its events reach the size limit, whichever comes first. Sealing
//! an interval with no events still yields a segment (it moves the
//! recoverable time forward). The chain's position — next sequence, the
//! revision reached, the digest of the last segment — advances only when
//! the caller reports the sealed segment stored ([`Cutter::stored`]): a
//! segment that failed to upload is sealed again, unchanged, on the next
//! attempt.

use std::time::Duration;

use jiff::Timestamp;

use super::chain::StoredSegment;
use super::rotation::ChainLimits;
use super::segment::{self, EncodedSegment, Event, FORMAT, SegmentError, SegmentHeader};
use crate::encryption::Key;

/// When segments and chains are cut (`spec.backup.continuous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutSettings {
    /// A segment is sealed at most this long after it opened.
    pub interval: Duration,
    /// ... or once its events (keys and values) reach this many bytes.
    pub max_segment_bytes: usize,
    /// When the chain ends and a new one starts.
    pub new_chain: ChainLimits,
}

impl Default for CutSettings {
    fn default() -> Self {
        CutSettings {
            interval: Duration::from_secs(10),
            max_segment_bytes: 16 << 20,
            new_chain: ChainLimits::default(),
        }
    }
}

/// A segment ready to be stored.
#[derive(Debug, Clone)]
pub struct Sealed {
    pub header: SegmentHeader,
    pub encoded: EncodedSegment,
}

/// The open segment of a chain and the chain's position.
#[derive(Debug)]
pub struct Cutter {
    settings: CutSettings,
    chain: String,
    next_sequence: u64,
    /// The revision the stored chain reaches.
    reached: i64,
    previous_sha256: String,
    pending: Vec<Event>,
    pending_bytes: usize,
    opened_at: Timestamp,
    /// A sealed segment not yet reported stored.
    unstored: Option<Sealed>,
    /// Segments are encrypted with it, when there is one.
    key: Option<Key>,
}

/// An event the chain cannot take.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("an event of revision {revision} cannot follow revision {reached} in chain {chain}")]
pub struct OutOfOrder {
    pub chain: String,
    pub revision: i64,
    pub reached: i64,
}

impl Cutter {
    /// A new chain continuing the full snapshot at `base_revision`.
    pub fn start(chain: &str, base_revision: i64, settings: CutSettings, now: Timestamp) -> Self {
        Cutter {
            settings,
            chain: chain.to_owned(),
            next_sequence: 1,
            reached: base_revision,
            previous_sha256: String::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            opened_at: now,
            unstored: None,
            key: None,
        }
    }

    /// Continues a chain after its last stored segment (an agent that
    /// restarted): the watch resumes at [`Cutter::resume_revision`].
    pub fn resume(last: &StoredSegment, settings: CutSettings, now: Timestamp) -> Self {
        Cutter {
            settings,
            chain: last.header.chain.clone(),
            next_sequence: last.header.sequence + 1,
            reached: last.header.last_revision,
            previous_sha256: last.sha256.clone(),
            pending: Vec::new(),
            pending_bytes: 0,
            opened_at: now,
            unstored: None,
            key: None,
        }
    }

    /// Segments sealed from now on are encrypted with `key` (none: not
    /// encrypted).
    pub fn encrypting(mut self, key: Option<Key>) -> Self {
        self.key = key;
        self
    }

    /// When segments and the chain are cut.
    pub fn settings(&self) -> &CutSettings {
        &self.settings
    }

    /// The revision a watch must start at so that nothing is missed.
    pub fn resume_revision(&self) -> i64 {
        self.pending
            .last()
            .map_or(self.reached, |e| e.revision)
            .max(self.unstored.as_ref().map_or(0, |s| s.header.last_revision))
            + 1
    }

    pub fn chain(&self) -> &str {
        &self.chain
    }

    /// Takes the next watched event.
    pub fn push(&mut self, event: Event) -> Result<(), OutOfOrder> {
        let last = self
            .pending
            .last()
            .map_or(self.reached, |e| e.revision)
            .max(self.unstored.as_ref().map_or(0, |s| s.header.last_revision));
        // Events of one revision (a transaction) arrive together; a revision
        // already passed means the watch went backwards.
        if event.revision < last || (self.pending.is_empty() && event.revision <= last) {
            return Err(OutOfOrder {
                chain: self.chain.clone(),
                revision: event.revision,
                reached: last,
            });
        }
        self.pending_bytes += event.key.len() + event.value.len();
        self.pending.push(event);
        Ok(())
    }

    /// Whether the open segment should be sealed now.
    pub fn due(&self, now: Timestamp) -> bool {
        self.unstored.is_some()
            || self.pending_bytes >= self.settings.max_segment_bytes
            || elapsed(self.opened_at, now) >= self.settings.interval
    }

    /// Seals the open segment (or returns the sealed one still waiting to
    /// be stored). A new segment opens at `now`.
    pub fn seal(&mut self, now: Timestamp) -> Result<Sealed, SegmentError> {
        if let Some(sealed) = &self.unstored {
            return Ok(sealed.clone());
        }
        let events = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        let header = SegmentHeader {
            format: FORMAT.to_owned(),
            chain: self.chain.clone(),
            sequence: self.next_sequence,
            after_revision: self.reached,
            last_revision: events.last().map_or(self.reached, |e| e.revision),
            previous_sha256: self.previous_sha256.clone(),
            first_time: self.opened_at,
            last_time: now,
            events: events.len() as u64,
        };
        let encoded = segment::encode(&header, &events, self.key.as_ref())?;
        let sealed = Sealed { header, encoded };
        self.opened_at = now;
        self.unstored = Some(sealed.clone());
        Ok(sealed)
    }

    /// The sealed segment is durable: the chain moves past it.
    pub fn stored(&mut self) -> Option<StoredSegment> {
        let sealed = self.unstored.take()?;
        self.next_sequence += 1;
        self.reached = sealed.header.last_revision;
        self.previous_sha256 = sealed.encoded.sha256.clone();
        Some(StoredSegment {
            uri: String::new(),
            sha256: sealed.encoded.sha256,
            header: sealed.header,
        })
    }
}

fn elapsed(from: Timestamp, to: Timestamp) -> Duration {
    to.duration_since(from).try_into().unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::super::chain::{Base, Target, chains, plan};
    use super::super::segment::EventKind;
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_800_000_000_000 + ms).unwrap_or_default()
    }

    fn put(revision: i64, bytes: usize) -> Event {
        Event {
            revision,
            kind: EventKind::Put,
            key: format!("k{revision}").into_bytes(),
            value: vec![b'v'; bytes],
            lease: 0,
            received_ms: at(revision).as_millisecond(),
        }
    }

    fn settings() -> CutSettings {
        CutSettings {
            interval: Duration::from_secs(10),
            max_segment_bytes: 1000,
            ..CutSettings::default()
        }
    }

    #[test]
    fn segments_are_cut_by_interval_or_size_and_link_into_a_chain() {
        let mut cutter = Cutter::start("c1", 100, settings(), at(0));
        assert!(!cutter.due(at(9_999)));
        assert!(cutter.due(at(10_000)), "the interval passed");
        cutter.push(put(101, 10)).unwrap();
        cutter.push(put(101, 10)).unwrap();
        let first = cutter.seal(at(10_000)).unwrap();
        assert_eq!(
            (
                first.header.after_revision,
                first.header.last_revision,
                first.header.events
            ),
            (100, 101, 2)
        );
        let first = cutter.stored().unwrap();

        cutter.push(put(102, 600)).unwrap();
        assert!(!cutter.due(at(10_001)));
        cutter.push(put(103, 600)).unwrap();
        assert!(cutter.due(at(10_002)), "the size limit was reached");
        cutter.seal(at(10_002)).unwrap();
        let second = cutter.stored().unwrap();
        assert_eq!(second.header.previous_sha256, first.sha256);
        assert_eq!(
            (second.header.sequence, second.header.after_revision),
            (2, 101)
        );

        // An interval without writes still seals (time moves on).
        let empty = cutter.seal(at(20_002)).unwrap();
        assert_eq!(
            (empty.header.after_revision, empty.header.last_revision),
            (103, 103)
        );
        let third = cutter.stored().unwrap();

        let base = Base {
            chain: "c1".into(),
            revision: 100,
            taken_at: at(0),
            uri: "s3://b/base.db".into(),
        };
        let listed = chains(&[base], &[first, second, third]);
        assert_eq!(listed[0].broken, None);
        assert_eq!(listed[0].last_revision(), 103);
        assert_eq!(plan(&listed, Target::Latest).unwrap().segments.len(), 3);
    }

    #[test]
    fn a_segment_that_was_not_stored_is_sealed_again_unchanged() {
        let mut cutter = Cutter::start("c1", 100, settings(), at(0));
        cutter.push(put(101, 10)).unwrap();
        let first = cutter.seal(at(10_000)).unwrap();
        // The upload failed; more events arrive meanwhile.
        cutter.push(put(102, 10)).unwrap();
        assert!(cutter.due(at(10_001)));
        let again = cutter.seal(at(11_000)).unwrap();
        assert_eq!(again.encoded.sha256, first.encoded.sha256);
        cutter.stored();
        let next = cutter.seal(at(20_000)).unwrap();
        assert_eq!(
            (next.header.after_revision, next.header.last_revision),
            (101, 102)
        );
        assert_eq!(cutter.resume_revision(), 103);
    }

    #[test]
    fn a_restarted_agent_resumes_after_the_last_stored_segment() {
        let mut cutter = Cutter::start("c1", 100, settings(), at(0));
        cutter.push(put(101, 10)).unwrap();
        cutter.seal(at(10_000)).unwrap();
        let last = cutter.stored().unwrap();
        let resumed = Cutter::resume(&last, settings(), at(50_000));
        assert_eq!(resumed.resume_revision(), 102);
        assert_eq!(resumed.chain(), "c1");
    }

    #[test]
    fn an_event_from_before_the_chain_is_refused() {
        let mut cutter = Cutter::start("c1", 100, settings(), at(0));
        assert_eq!(
            cutter.push(put(100, 1)),
            Err(OutOfOrder {
                chain: "c1".into(),
                revision: 100,
                reached: 100
            })
        );
        cutter.push(put(105, 1)).unwrap();
        assert!(cutter.push(put(104, 1)).is_err());
        cutter.push(put(105, 1)).unwrap();
    }
}
