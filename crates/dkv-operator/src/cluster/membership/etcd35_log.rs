//! The part of a cluster's raft log that etcd 3.5 (or older) may have
//! written, and the snapshot each member needs past it before etcd 3.7.
//!
//! etcd 3.7 cannot replay a log entry that 3.5 wrote (it panics,
//! "unmarshal should never fail"). A member replays its log from its newest
//! snapshot on, so it may move from 3.6 to 3.7 once it has taken a snapshot
//! past every such entry. The storage version 3.6 reports does not tell (it
//! rises before any snapshot), and etcd has no call that takes a snapshot:
//! a member takes one when it has applied more entries than its
//! `--snapshot-count` since its last. So dkv records, in status, how far
//! 3.5 wrote the log ([`next`]), and lets a member restart onto 3.7 only
//! once it has applied more than its snapshot count beyond that
//! ([`Record::needs_snapshot`]).

use dkv_api::distributedkv::v1beta1::Etcd35Log;

use crate::cluster::membership::{ObservedMember, ObservedPod, SnapshotPending};
use crate::etcd_version::EtcdVersion;

/// etcd's default `--snapshot-count` from 3.6 on (3.5's was 100,000).
pub const DEFAULT_SNAPSHOT_COUNT: u64 = 10_000;

/// What status records of the log 3.5 wrote, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    /// etcd's cluster ID the log belongs to.
    pub cluster_id: u64,
    /// Its highest index once every voter ran 3.6 or later; `None` while a
    /// voter still runs 3.5.
    pub through_index: Option<u64>,
}

impl Record {
    /// The record in status (`status.rollout.etcd35Log`), if it parses.
    pub fn from_status(recorded: &Etcd35Log) -> Option<Self> {
        Some(Self {
            cluster_id: u64::from_str_radix(&recorded.cluster_id, 16).ok()?,
            through_index: recorded.through_index,
        })
    }

    pub fn to_status(self) -> Etcd35Log {
        Etcd35Log {
            cluster_id: format!("{:x}", self.cluster_id),
            through_index: self.through_index,
        }
    }

    /// `Some` while member `m` (whose pod is `pod`) may still replay an
    /// entry 3.5 wrote: its log since its newest snapshot may hold one.
    ///
    /// A member takes a snapshot once it has applied more than its snapshot
    /// count `c` beyond its last one. Whatever its last snapshot `s` before
    /// the index `t` 3.5 wrote through, by the time it has applied `t + c +
    /// 1` it has taken one after `s` and at or past `t` (or a later one
    /// after that). `c` is the count of the process running now (its pod's
    /// `--snapshot-count`): each process counts from the newest snapshot on
    /// disk, so the bound holds across restarts.
    pub fn needs_snapshot(
        &self,
        m: &ObservedMember,
        pod: Option<&ObservedPod>,
    ) -> Option<SnapshotPending> {
        if m.cluster_id != 0 && m.cluster_id != self.cluster_id {
            return None;
        }
        let count = pod
            .and_then(|p| p.snapshot_count)
            .unwrap_or(DEFAULT_SNAPSHOT_COUNT);
        let needed = self.through_index.map(|t| t + count + 1);
        let applied = self.through_index.map(|_| m.applied_index);
        match (applied, needed) {
            (Some(applied), Some(needed)) if applied >= needed => None,
            _ => Some(SnapshotPending {
                ordinal: m.ordinal,
                applied,
                needed,
            }),
        }
    }
}

/// The voters of `members` that may still replay an entry 3.5 wrote (see
/// [`Record::needs_snapshot`]); none without a record.
pub fn pending(
    record: Option<Record>,
    members: Option<&[ObservedMember]>,
    pods: &[ObservedPod],
) -> Vec<SnapshotPending> {
    let Some(record) = record else {
        return Vec::new();
    };
    members
        .into_iter()
        .flatten()
        .filter(|m| !m.learner)
        .filter_map(|m| {
            let pod = pods.iter().find(|p| p.ordinal == m.ordinal);
            record.needs_snapshot(m, pod)
        })
        .collect()
}

/// The record after this pass, from what the voters report and what status
/// recorded before (`None`: nothing recorded).
///
/// While any voter runs 3.5 or older, the record names the cluster without
/// an index (status stays as it is from pass to pass). The first pass that
/// sees every voter on 3.6 or later completes it with the highest index a
/// voter reports: every entry a 3.5 leader wrote and the cluster committed
/// lies at or below it. A completed record stays. Voters of another
/// cluster (a restore started a new one) drop it: their log holds only
/// what their own version wrote. Voters that do not all report a version
/// change nothing.
pub fn next(voters: &[&ObservedMember], before: Option<Record>) -> Option<Record> {
    let versions: Vec<EtcdVersion> = voters.iter().filter_map(|m| m.version).collect();
    let Some(cluster_id) = voters.iter().map(|m| m.cluster_id).find(|id| *id != 0) else {
        return before;
    };
    if versions.iter().any(|v| v.minor_line() < (3, 6)) {
        return Some(match before {
            Some(record) if record.cluster_id == cluster_id && record.through_index.is_none() => {
                record
            }
            _ => Record {
                cluster_id,
                through_index: None,
            },
        });
    }
    if versions.is_empty() || versions.len() != voters.len() {
        return before;
    }
    match before {
        Some(record) if record.cluster_id != cluster_id => None,
        Some(Record {
            through_index: None,
            ..
        }) => Some(Record {
            cluster_id,
            through_index: voters.iter().map(|m| m.raft_index).max(),
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership::fixtures;

    const V35: EtcdVersion = EtcdVersion::new(3, 5, 30);
    const V36: EtcdVersion = EtcdVersion::new(3, 6, 16);
    const V37: EtcdVersion = EtcdVersion::new(3, 7, 3);

    fn voters(versions: [EtcdVersion; 3], raft_index: u64) -> Vec<ObservedMember> {
        (0..3)
            .map(|k| ObservedMember {
                version: Some(versions[k as usize]),
                raft_index: raft_index + k as u64,
                applied_index: raft_index + k as u64,
                ..fixtures::member(k)
            })
            .collect()
    }

    fn after(members: &[ObservedMember], before: Option<Record>) -> Option<Record> {
        next(&members.iter().collect::<Vec<_>>(), before)
    }

    #[test]
    fn the_record_opens_on_3_5_and_completes_once_every_voter_runs_3_6() {
        let open = Record {
            cluster_id: 7,
            through_index: None,
        };
        // Born on 3.5: named, without an index, and unchanged pass to pass.
        assert_eq!(after(&voters([V35; 3], 50), None), Some(open));
        assert_eq!(after(&voters([V35; 3], 90), Some(open)), Some(open));
        // Half way to 3.6: still open.
        assert_eq!(after(&voters([V36, V36, V35], 120), Some(open)), Some(open));
        // Every voter on 3.6: completed with the highest index reported.
        let done = after(&voters([V36; 3], 200), Some(open));
        assert_eq!(
            done,
            Some(Record {
                cluster_id: 7,
                through_index: Some(202)
            })
        );
        // ... and kept as it is afterwards, on 3.6 and on 3.7.
        assert_eq!(after(&voters([V36; 3], 900), done), done);
        assert_eq!(after(&voters([V37, V36, V36], 950), done), done);
        // Back down to 3.5: open again.
        assert_eq!(after(&voters([V36, V36, V35], 990), done), Some(open));
    }

    #[test]
    fn a_cluster_born_on_3_6_restored_or_unseen_records_nothing_new() {
        // Born on 3.6 or 3.7: nothing recorded.
        assert_eq!(after(&voters([V36; 3], 50), None), None);
        assert_eq!(after(&voters([V37; 3], 50), None), None);
        // A voter that does not answer (no version) changes nothing.
        let open = Some(Record {
            cluster_id: 7,
            through_index: None,
        });
        let mut one_silent = voters([V36; 3], 200);
        one_silent[2].version = None;
        assert_eq!(after(&one_silent, open), open);
        // Nobody answers: nothing to go by, the record stands.
        let mut silent = voters([V36; 3], 200);
        for m in &mut silent {
            m.version = None;
            m.cluster_id = 0;
        }
        assert_eq!(after(&silent, open), open);
        // Restored into a new cluster on 3.6: the old record is dropped.
        let mut restored = voters([V36; 3], 20);
        for m in &mut restored {
            m.cluster_id = 9;
        }
        let old = Some(Record {
            cluster_id: 7,
            through_index: Some(5000),
        });
        assert_eq!(after(&restored, old), None);
    }

    #[test]
    fn a_member_needs_more_than_its_snapshot_count_past_the_record() {
        let record = Record {
            cluster_id: 7,
            through_index: Some(1000),
        };
        let member = |applied| ObservedMember {
            version: Some(V36),
            applied_index: applied,
            ..fixtures::member(1)
        };
        // The default count: 10,000 entries past the record, and one more.
        let pending = record.needs_snapshot(&member(11_000), None);
        assert_eq!(
            pending,
            Some(SnapshotPending {
                ordinal: 1,
                applied: Some(11_000),
                needed: Some(11_001)
            })
        );
        assert_eq!(record.needs_snapshot(&member(11_001), None), None);
        // The pod's own count, when it sets one.
        let pod = ObservedPod {
            snapshot_count: Some(1),
            ..fixtures::pod(1)
        };
        assert_eq!(record.needs_snapshot(&member(1002), Some(&pod)), None);
        assert!(record.needs_snapshot(&member(1001), Some(&pod)).is_some());
        // Still open (a voter on 3.5): pending, with nothing to count yet.
        let open = Record {
            through_index: None,
            ..record
        };
        let unknown = open.needs_snapshot(&member(50_000), Some(&pod));
        assert_eq!(unknown.and_then(|p| p.needed), None);
        assert!(unknown.is_some());
        // A member of another cluster (restored): the record is not its.
        let other = ObservedMember {
            cluster_id: 9,
            ..member(0)
        };
        assert_eq!(record.needs_snapshot(&other, None), None);
    }

    #[test]
    fn pending_lists_the_voters_short_of_their_snapshot() {
        let record = Record {
            cluster_id: 7,
            through_index: Some(100),
        };
        let mut members = voters([V36; 3], 10_101);
        members[2].applied_index = 10_100;
        members[1].learner = true;
        members[1].applied_index = 0;
        let pods: Vec<ObservedPod> = (0..3).map(fixtures::pod).collect();
        let pending = pending(Some(record), Some(&members), &pods);
        assert_eq!(pending.iter().map(|p| p.ordinal).collect::<Vec<_>>(), [2]);
        assert!(
            crate::cluster::membership::etcd35_log::pending(None, Some(&members), &pods).is_empty()
        );
    }

    #[test]
    fn the_record_round_trips_through_status() {
        let record = Record {
            cluster_id: 0xabc,
            through_index: Some(12),
        };
        let status = record.to_status();
        assert_eq!(status.cluster_id, "abc");
        assert_eq!(Record::from_status(&status), Some(record));
        let garbled = Etcd35Log {
            cluster_id: "not hex".to_owned(),
            through_index: None,
        };
        assert_eq!(Record::from_status(&garbled), None);
    }
}
