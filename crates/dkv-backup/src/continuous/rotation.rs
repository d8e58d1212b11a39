//! When a chain ends and the next one starts from a fresh full snapshot
//! (pure). A point-in-time restore replays the changes of one chain at
//! most, so these limits bound restore time; retention can then delete
//! whole chains as they age.

use std::time::Duration;

use jiff::Timestamp;

/// `spec.backup.continuous.newChain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainLimits {
    /// A chain older than this (from its base snapshot) is ended.
    pub every: Duration,
    /// ... or one whose stored changes reach this percentage of its base
    /// snapshot's stored size.
    pub change_percent: u32,
    /// ... or one that recorded this many revisions: a restore replays
    /// them one at a time (a few hundred a second), so this bounds the
    /// replay of a cluster of small, frequent writes, which the bytes
    /// bound poorly.
    pub max_revisions: u64,
}

impl Default for ChainLimits {
    fn default() -> Self {
        ChainLimits {
            every: Duration::from_secs(24 * 3600),
            change_percent: 25,
            max_revisions: 100_000,
        }
    }
}

/// Below this many bytes of stored changes a chain is never ended for its
/// size: replaying them takes well under a second, and a cluster whose
/// snapshot is a few kilobytes would otherwise start a chain every segment.
pub const MIN_CHANGE_BYTES: u64 = 1 << 20;

/// How large and old a chain is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainExtent {
    /// When its base snapshot was taken.
    pub started_at: Timestamp,
    /// The base snapshot's stored size.
    pub base_bytes: u64,
    /// The stored size of its segments.
    pub change_bytes: u64,
    /// The revision of its base snapshot.
    pub base_revision: i64,
    /// The revision its stored segments reach.
    pub reached: i64,
}

/// Why a chain ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd {
    /// It is older than `every`.
    Age,
    /// Its changes reached `change_percent` of its base.
    Size,
    /// It recorded `max_revisions` revisions.
    Revisions,
}

impl std::fmt::Display for ChainEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChainEnd::Age => "the chain reached newChain.every",
            ChainEnd::Size => "the chain's changes reached newChain.changePercent of its base",
            ChainEnd::Revisions => "the chain recorded newChain.maxRevisions revisions",
        })
    }
}

impl ChainExtent {
    /// Whether the chain should end at `now`, and why.
    pub fn end(&self, limits: &ChainLimits, now: Timestamp) -> Option<ChainEnd> {
        let age = now.duration_since(self.started_at);
        if age.is_positive() && age.unsigned_abs() >= limits.every {
            return Some(ChainEnd::Age);
        }
        let revisions = u64::try_from(self.reached.saturating_sub(self.base_revision)).unwrap_or(0);
        if revisions >= limits.max_revisions {
            return Some(ChainEnd::Revisions);
        }
        let budget = self
            .base_bytes
            .saturating_mul(u64::from(limits.change_percent))
            / 100;
        (self.change_bytes >= budget.max(MIN_CHANGE_BYTES)).then_some(ChainEnd::Size)
    }

    /// The chain after one more stored segment of `bytes`, reaching
    /// revision `reached`.
    pub fn grown(self, bytes: u64, reached: i64) -> Self {
        ChainExtent {
            change_bytes: self.change_bytes.saturating_add(bytes),
            reached: reached.max(self.reached),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(base_mib: u64, changes_mib: u64) -> ChainExtent {
        ChainExtent {
            started_at: Timestamp::UNIX_EPOCH,
            base_bytes: base_mib << 20,
            change_bytes: changes_mib << 20,
            base_revision: 1000,
            reached: 1000,
        }
    }

    fn at_hours(h: i64) -> Timestamp {
        Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_hours(h)
    }

    #[test]
    fn a_chain_ends_by_age_or_by_its_changes_against_its_base() {
        let limits = ChainLimits::default();
        assert_eq!(extent(100, 0).end(&limits, at_hours(23)), None);
        assert_eq!(
            extent(100, 0).end(&limits, at_hours(24)),
            Some(ChainEnd::Age)
        );
        assert_eq!(extent(100, 24).end(&limits, at_hours(1)), None);
        assert_eq!(
            extent(100, 25).end(&limits, at_hours(1)),
            Some(ChainEnd::Size)
        );
        assert_eq!(
            extent(100, 24)
                .grown(1 << 20, 1010)
                .end(&limits, at_hours(1)),
            Some(ChainEnd::Size)
        );
    }

    #[test]
    fn a_small_cluster_does_not_start_a_chain_every_segment() {
        let limits = ChainLimits::default();
        let tiny = ChainExtent {
            base_bytes: 20 << 10,
            change_bytes: 512 << 10,
            ..extent(0, 0)
        };
        assert_eq!(tiny.end(&limits, at_hours(1)), None);
        assert_eq!(
            tiny.grown(512 << 10, 1010).end(&limits, at_hours(1)),
            Some(ChainEnd::Size)
        );
    }

    #[test]
    fn a_chain_of_many_small_writes_ends_by_its_revisions() {
        let limits = ChainLimits::default();
        let busy = extent(1000, 1);
        assert_eq!(busy.grown(1, 100_999).end(&limits, at_hours(1)), None);
        assert_eq!(
            busy.grown(1, 101_000).end(&limits, at_hours(1)),
            Some(ChainEnd::Revisions)
        );
    }

    #[test]
    fn a_clock_that_went_back_does_not_end_a_chain() {
        let limits = ChainLimits::default();
        let later = ChainExtent {
            started_at: at_hours(48),
            ..extent(100, 0)
        };
        assert_eq!(later.end(&limits, at_hours(1)), None);
    }
}
