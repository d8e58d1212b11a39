//! Members whose data differs from their peers', as etcd's corruption
//! checks report them (the checks are on in every member:
//! [`crate::member_init::corruption_checks`]): the CORRUPT alarm the leader
//! raises on a member whose hash disagrees (periodic and compact-hash
//! checks), or a member whose own initial check refused to start it. Status
//! names them (`Degraded/MemberCorrupt`); with
//! `spec.recovery.corruptMember: Replace` the planner replaces them.

use dkv_etcd::AlarmKind;

use super::naming;
use super::observe_members::MemberPod;
use crate::metrics::MemberAlarm;

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
    pub fn describe(self) -> &'static str {
        match self {
            FoundBy::Alarm => {
                "etcd raised the CORRUPT alarm on it, and refuses reads and writes on every member until the alarm is disarmed"
            }
            FoundBy::InitialCheck => "etcd's initial corruption check refuses to start it",
        }
    }
}

/// The members of `cluster` found corrupt, by ordinal (an alarm counts
/// first when both report one).
pub fn corrupt_members(
    cluster: &str,
    alarms: &[MemberAlarm],
    pods: &[MemberPod],
) -> Vec<CorruptMember> {
    let mut found: Vec<CorruptMember> = alarms
        .iter()
        .filter(|a| a.kind == AlarmKind::Corrupt)
        .filter_map(|a| naming::ordinal_of(cluster, &a.member))
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

/// The IDs of CORRUPT alarms raised on members that are no longer in the
/// cluster (the connected stage names a member it knows, and gives the ID
/// of one it does not in hex): once the member whose data disagreed is
/// gone, its alarm only keeps the others from serving.
pub fn stale_alarms(cluster: &str, alarms: &[MemberAlarm]) -> Vec<u64> {
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
            corrupt_members("orders", &alarms, &pods),
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
        assert_eq!(stale_alarms("orders", &alarms), [0x1f]);
    }
}
