//! Members whose data differs from their peers', as etcd's corruption
//! checks report them (the checks are on in every member:
//! [`dkv_member::init::corruption_checks`]): the CORRUPT alarm the leader
//! raises on a member whose hash disagrees (periodic and compact-hash
//! checks), or a member whose own initial check refused to start it. Status
//! names them (`Degraded/MemberCorrupt`); with
//! `spec.recovery.corruptMember: Replace` the planner replaces them.
//!
//! etcd 3.4 and 3.5 raise the periodic check's alarm on member 0, not on
//! the member that differs (the peer hash answer they read the ID from
//! carries none). While such an alarm is active, dkv compares the members'
//! own hashes (`HashKV`; writes are refused meanwhile, so the members stand
//! at one revision): those that differ from a majority holding the same
//! revision are the corrupt ones. The same comparison says when such an
//! alarm may be disarmed: once every member agrees.

use dkv_etcd::{AlarmKind, KvHash};

use crate::cluster::membership::observe::MemberPod;
use crate::metrics::MemberAlarm;
use crate::parts::naming;

/// A member found corrupt, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CorruptMember {
    pub ordinal: i32,
    pub found_by: FoundBy,
}

/// Which of etcd's checks found the member's data differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoundBy {
    /// The leader raised the CORRUPT alarm on it: until the alarm is
    /// disarmed, etcd refuses reads and writes on every member.
    Alarm,
    /// Its initial check refused to start it: it stays down, the others
    /// serve.
    InitialCheck,
}

impl FoundBy {
    /// The `found_by` label of `dkv_cluster_member_corrupt`.
    pub fn label(self) -> &'static str {
        match self {
            FoundBy::Alarm => "alarm",
            FoundBy::InitialCheck => "initial-check",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            FoundBy::Alarm => {
                "etcd raised the CORRUPT alarm on it, and refuses reads and writes on every member until the alarm is disarmed"
            }
            FoundBy::InitialCheck => "etcd's initial corruption check refuses to start it",
        }
    }
}

/// One member's hash of its key-value history, as it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberHash {
    pub ordinal: i32,
    pub hash: KvHash,
}

/// What the members' hashes say, compared.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Agreement {
    /// Not compared (no alarm that names no member), or too few answered at
    /// one revision to tell.
    #[default]
    Unknown,
    /// All `members` answered with the same hash at the same revision.
    All,
    /// A majority of the members agree at one revision; these differ.
    Minority(Vec<i32>),
}

/// Compares the hashes of the `members` members of a cluster (see the
/// module documentation).
pub fn compare(hashes: &[MemberHash], members: usize) -> Agreement {
    let key = |h: &MemberHash| (h.hash.revision, h.hash.compact_revision, h.hash.hash);
    let majority = hashes.iter().map(key).max_by_key(|k| {
        (
            hashes.iter().filter(|h| key(h) == *k).count(),
            std::cmp::Reverse(*k),
        )
    });
    let Some(majority) = majority else {
        return Agreement::Unknown;
    };
    let agreeing = hashes.iter().filter(|h| key(h) == majority).count();
    if agreeing * 2 <= members {
        return Agreement::Unknown;
    }
    if agreeing == members {
        return Agreement::All;
    }
    // Only a member at the majority's revision and compaction can be
    // judged: one behind may just not have caught up.
    let differing: Vec<i32> = hashes
        .iter()
        .filter(|h| {
            (h.hash.revision, h.hash.compact_revision) == (majority.0, majority.1)
                && h.hash.hash != majority.2
        })
        .map(|h| h.ordinal)
        .collect();
    if differing.is_empty() {
        Agreement::Unknown
    } else {
        Agreement::Minority(differing)
    }
}

/// Whether an active CORRUPT alarm names no member of `cluster` (etcd
/// 3.4/3.5's periodic check, or a member since removed): the members'
/// hashes must say who differs.
pub fn unattributed_alarm(cluster: &str, alarms: &[MemberAlarm]) -> bool {
    alarms
        .iter()
        .any(|a| a.kind == AlarmKind::Corrupt && naming::ordinal_of(cluster, &a.member).is_none())
}

/// The members of `cluster` found corrupt, by ordinal (an alarm counts
/// first when both report one).
pub fn corrupt_members(
    cluster: &str,
    alarms: &[MemberAlarm],
    agreement: &Agreement,
    pods: &[MemberPod],
) -> Vec<CorruptMember> {
    let mut found: Vec<CorruptMember> = alarms
        .iter()
        .filter(|a| a.kind == AlarmKind::Corrupt)
        .filter_map(|a| naming::ordinal_of(cluster, &a.member))
        .chain(match agreement {
            Agreement::Minority(ordinals) if unattributed_alarm(cluster, alarms) => {
                ordinals.clone()
            }
            _ => Vec::new(),
        })
        .map(|ordinal| CorruptMember {
            ordinal,
            found_by: FoundBy::Alarm,
        })
        .collect();
    found.extend(
        pods.iter()
            .filter(|p| p.refused_as_corrupt)
            .map(|p| CorruptMember {
                ordinal: p.view.ordinal,
                found_by: FoundBy::InitialCheck,
            }),
    );
    found.sort_by_key(|c| c.ordinal);
    found.dedup_by_key(|c| c.ordinal);
    found
}

/// The IDs of CORRUPT alarms that name no member of the cluster (the
/// connected stage names a member it knows, and gives the ID of one it does
/// not in hex), once every member's hash agrees (`agreement`): the member
/// whose data disagreed is gone, and the alarm only keeps the others from
/// serving.
pub fn stale_alarms(cluster: &str, alarms: &[MemberAlarm], agreement: &Agreement) -> Vec<u64> {
    if *agreement != Agreement::All {
        return Vec::new();
    }
    alarms
        .iter()
        .filter(|a| a.kind == AlarmKind::Corrupt)
        .filter(|a| naming::ordinal_of(cluster, &a.member).is_none())
        .filter_map(|a| u64::from_str_radix(&a.member, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership::fixtures::pod;

    fn alarm(member: &str, kind: AlarmKind) -> MemberAlarm {
        MemberAlarm {
            member: member.to_owned(),
            kind,
        }
    }

    fn member_pod(ordinal: i32, refused: bool) -> MemberPod {
        MemberPod {
            view: pod(ordinal),
            endpoint: None,
            restore_failure: None,
            problem: None,
            bootstrap_size: None,
            refused_as_corrupt: refused,
            created: None,
        }
    }

    #[test]
    fn alarms_and_refusals_name_the_members_once() {
        let alarms = [
            alarm("orders-2", AlarmKind::Corrupt),
            alarm("orders-0", AlarmKind::NoSpace),
            alarm("1f", AlarmKind::Corrupt),
        ];
        let pods = [
            member_pod(0, false),
            member_pod(1, true),
            member_pod(2, true),
        ];
        assert_eq!(
            corrupt_members("orders", &alarms, &Agreement::Unknown, &pods),
            [
                CorruptMember {
                    ordinal: 1,
                    found_by: FoundBy::InitialCheck
                },
                CorruptMember {
                    ordinal: 2,
                    found_by: FoundBy::Alarm
                },
            ]
        );
        assert_eq!(stale_alarms("orders", &alarms, &Agreement::All), [0x1f]);
        assert!(stale_alarms("orders", &alarms, &Agreement::Unknown).is_empty());
    }

    fn hash(ordinal: i32, revision: i64, hash: u32) -> MemberHash {
        MemberHash {
            ordinal,
            hash: KvHash {
                revision,
                compact_revision: -1,
                hash,
            },
        }
    }

    #[test]
    fn an_alarm_on_member_zero_is_attributed_by_comparing_hashes() {
        // etcd 3.5's periodic check: the alarm names member 0.
        let alarms = [alarm("0", AlarmKind::Corrupt)];
        let pods = [
            member_pod(0, false),
            member_pod(1, false),
            member_pod(2, false),
        ];
        let agreement = compare(&[hash(0, 90, 7), hash(1, 90, 8), hash(2, 90, 7)], 3);
        assert_eq!(agreement, Agreement::Minority(vec![1]));
        assert_eq!(
            corrupt_members("orders", &alarms, &agreement, &pods),
            [CorruptMember {
                ordinal: 1,
                found_by: FoundBy::Alarm
            }]
        );
        // Not disarmed while a member differs.
        assert!(stale_alarms("orders", &alarms, &agreement).is_empty());
        // A member behind is not judged; no majority, no verdict.
        assert_eq!(
            compare(&[hash(0, 90, 7), hash(1, 80, 8), hash(2, 90, 7)], 3),
            Agreement::Unknown
        );
        assert_eq!(
            compare(&[hash(0, 90, 7), hash(1, 90, 8)], 3),
            Agreement::Unknown
        );
        // The member replaced, all agree: the alarm goes.
        let agreed = compare(&[hash(0, 95, 9), hash(1, 95, 9), hash(2, 95, 9)], 3);
        assert_eq!(agreed, Agreement::All);
        assert_eq!(stale_alarms("orders", &alarms, &agreed), [0]);
    }
}
