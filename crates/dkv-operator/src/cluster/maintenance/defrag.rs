//! Scheduled defragmentation (`spec.maintenance.defrag`).
//!
//! Compaction frees space inside etcd's database file, but the file keeps
//! its size (and counts against the quota) until the member is
//! defragmented, which rewrites it and blocks that member meanwhile. So a
//! run defragments only members whose file is fragmented past the
//! threshold, one at a time, followers first and the leader last (so that
//! leadership moves at most once, and only at the end), and only while
//! every member is healthy and nothing else is under way; before each
//! member the cluster's health is asked again, and a member that turns
//! unhealthy stops the run. A run that is due while the cluster is busy
//! waits for the next pass that finds it idle.

use dkv_etcd::{EndpointStatus, EtcdAdmin};
use jiff::Timestamp;

use dkv_api::schedule::Schedule;

/// Whether a run of `schedule` is due: a run time has passed since `last`
/// (the last run, else when the cluster was created).
pub fn due(schedule: &Schedule, last: Timestamp, now: Timestamp) -> bool {
    schedule.next_run(last).is_some_and(|next| next <= now)
}

/// Percent of a member's database file that is free space.
pub fn fragmentation_percent(status: &EndpointStatus) -> i64 {
    if status.db_size <= 0 {
        return 0;
    }
    (status.db_size - status.db_size_in_use.min(status.db_size)) * 100 / status.db_size
}

/// What a run did to one member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberResult {
    Defragmented {
        member: String,
        leader: bool,
        before: i64,
        after: i64,
    },
    /// Fragmented less than the threshold.
    Skipped {
        member: String,
        percent: i64,
    },
    Failed {
        member: String,
        message: String,
    },
}

/// One member to consider: its name and client endpoint.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub endpoint: String,
}

/// Why a run stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopped(pub String);

/// Runs one defragmentation pass over `members`: followers first, the
/// leader last, each only if fragmented past `threshold_percent`, each
/// after checking that every member answers and follows a leader.
pub async fn run(
    admin: &dyn EtcdAdmin,
    members: &[Member],
    threshold_percent: i32,
) -> (Vec<MemberResult>, Option<Stopped>) {
    let mut results = Vec::new();
    let statuses = match healthy_statuses(admin, members).await {
        Ok(statuses) => statuses,
        Err(stopped) => return (results, Some(stopped)),
    };
    let leader = statuses.first().map(|(_, s)| s.leader);
    let mut order: Vec<(&Member, bool)> = statuses
        .iter()
        .map(|(m, s)| (*m, Some(s.member_id) == leader))
        .collect();
    // Followers first, then the leader; by name within each.
    order.sort_by_key(|(m, is_leader)| (*is_leader, m.name.clone()));
    for (index, (member, is_leader)) in order.iter().enumerate() {
        // The cluster as it is now, not as it was before the previous
        // member was blocked.
        let statuses = if index == 0 {
            statuses.clone()
        } else {
            match healthy_statuses(admin, members).await {
                Ok(statuses) => statuses,
                Err(stopped) => return (results, Some(stopped)),
            }
        };
        let Some((_, before)) = statuses.iter().find(|(m, _)| m.name == member.name) else {
            continue;
        };
        let percent = fragmentation_percent(before);
        if percent < i64::from(threshold_percent) {
            results.push(MemberResult::Skipped {
                member: member.name.clone(),
                percent,
            });
            continue;
        }
        match admin.defragment(&member.endpoint).await {
            Ok(()) => {
                let after = admin
                    .status(&member.endpoint)
                    .await
                    .map_or(before.db_size, |s| s.db_size);
                results.push(MemberResult::Defragmented {
                    member: member.name.clone(),
                    leader: *is_leader,
                    before: before.db_size,
                    after,
                });
            }
            Err(err) => {
                results.push(MemberResult::Failed {
                    member: member.name.clone(),
                    message: err.to_string(),
                });
                return (
                    results,
                    Some(Stopped(format!("defragmenting {} failed", member.name))),
                );
            }
        }
    }
    (results, None)
}

/// Every member's status, if every member answers and all follow the same
/// leader.
async fn healthy_statuses<'a>(
    admin: &dyn EtcdAdmin,
    members: &'a [Member],
) -> Result<Vec<(&'a Member, EndpointStatus)>, Stopped> {
    let mut statuses = Vec::new();
    for member in members {
        let status = admin
            .status(&member.endpoint)
            .await
            .map_err(|err| Stopped(format!("{} did not answer its status: {err}", member.name)))?;
        if status.leader.0 == 0 {
            return Err(Stopped(format!("{} follows no leader", member.name)));
        }
        statuses.push((member, status));
    }
    let leaders: std::collections::BTreeSet<u64> =
        statuses.iter().map(|(_, s)| s.leader.0).collect();
    if leaders.len() > 1 {
        return Err(Stopped("the members disagree on the leader".to_owned()));
    }
    Ok(statuses)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn a_run_is_due_once_a_scheduled_time_has_passed_since_the_last() {
        let daily = &Schedule::parse("0 3 * * *").unwrap_or_else(|e| panic!("{e}"));
        let last = at("2026-11-25T03:00:10Z");
        assert!(!due(daily, last, at("2026-11-26T02:59:59Z")));
        assert!(due(daily, last, at("2026-11-26T03:00:00Z")));
        assert!(
            due(daily, last, at("2026-11-28T12:00:00Z")),
            "missed runs: one run"
        );
    }

    #[test]
    fn fragmentation_is_the_free_share_of_the_file() {
        let status = |size, in_use| EndpointStatus {
            endpoint: String::new(),
            member_id: dkv_etcd::MemberId(1),
            cluster_id: 1,
            leader: dkv_etcd::MemberId(1),
            version: "3.5.16".to_owned(),
            db_size: size,
            db_size_in_use: in_use,
            raft_index: 0,
            raft_applied_index: 0,
            raft_term: 0,
            revision: 0,
            is_learner: false,
            errors: Vec::new(),
            storage_version: String::new(),
            downgrade_target: None,
        };
        assert_eq!(fragmentation_percent(&status(100, 25)), 75);
        assert_eq!(fragmentation_percent(&status(100, 100)), 0);
        assert_eq!(fragmentation_percent(&status(0, 0)), 0);
        assert_eq!(fragmentation_percent(&status(100, 150)), 0);
    }
}
