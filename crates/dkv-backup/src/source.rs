//! Which member a snapshot is taken from: a healthy voter, preferably a
//! follower, so the leader (which carries the write load) is spared the
//! extra disk and network traffic of streaming the whole database.

use dkv_etcd::{EndpointStatus, EtcdAdmin, MemberId};

use crate::error::{Error, Result};

/// The member chosen to stream the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSource {
    /// The client URL the snapshot is requested from.
    pub endpoint: String,
    pub member: MemberId,
    pub is_leader: bool,
    /// The member's revision when chosen.
    pub revision: i64,
    pub etcd_version: String,
}

/// Asks the cluster (through `seed_endpoints`, e.g. the client Service) for
/// its members, asks each started voter for its status through its own
/// client URL, and picks one (see [`pick_source`]). The seed endpoints are
/// asked too, in case the members' advertised URLs are not reachable from
/// here.
pub async fn choose_snapshot_source(
    admin: &dyn EtcdAdmin,
    seed_endpoints: &[String],
) -> Result<SnapshotSource> {
    let members = admin.member_list().await.map_err(|cause| Error::Etcd {
        operation: "member list",
        cause,
    })?;
    let voters: Vec<MemberId> = members
        .iter()
        .filter(|m| m.has_started() && !m.is_learner)
        .map(|m| m.id)
        .collect();
    let mut endpoints: Vec<String> = members
        .iter()
        .filter(|m| voters.contains(&m.id))
        .filter_map(|m| m.client_urls.first().cloned())
        .collect();
    for seed in seed_endpoints {
        if !endpoints.contains(seed) {
            endpoints.push(seed.clone());
        }
    }
    let answers: Vec<(String, Result<EndpointStatus, String>)> =
        futures::future::join_all(endpoints.iter().map(|endpoint| async move {
            let status = admin.status(endpoint).await.map_err(|e| e.to_string());
            (endpoint.clone(), status)
        }))
        .await;
    pick_source(&answers, &voters).map_err(|reasons| Error::NoHealthyMember { reasons })
}

/// The choice itself, from each endpoint's answer. A member qualifies when
/// it is a started voter, reports no errors (alarms), and follows a leader
/// that answered and says it leads — right after a leader dies its
/// followers still name it for an election timeout. Followers come before
/// the leader; among them the one furthest ahead, then the first listed.
/// On failure, one reason per endpoint.
pub fn pick_source(
    answers: &[(String, Result<EndpointStatus, String>)],
    voters: &[MemberId],
) -> Result<SnapshotSource, Vec<String>> {
    let live_leaders: Vec<MemberId> = answers
        .iter()
        .filter_map(|(_, status)| status.as_ref().ok())
        .filter(|s| s.is_leader())
        .map(|s| s.member_id)
        .collect();
    let mut reasons = Vec::new();
    let mut healthy: Vec<&EndpointStatus> = Vec::new();
    for (endpoint, answer) in answers {
        let status = match answer {
            Ok(status) => status,
            Err(error) => {
                reasons.push(format!("{endpoint}: {error}"));
                continue;
            }
        };
        let member = status.member_id;
        let why_not = if !voters.contains(&member) || status.is_learner {
            Some("is not a started voting member".to_owned())
        } else if !status.errors.is_empty() {
            Some(format!("reports {}", status.errors.join(", ")))
        } else if !live_leaders.contains(&status.leader) {
            Some(format!("follows no live leader (names {})", status.leader))
        } else {
            None
        };
        match why_not {
            Some(why) => reasons.push(format!("{endpoint} (member {member}) {why}")),
            // The same member reached twice (its own URL and the Service):
            // keep the first.
            None if healthy.iter().any(|h| h.member_id == member) => {}
            None => healthy.push(status),
        }
    }
    let best = healthy
        .iter()
        .enumerate()
        .max_by_key(|(index, s)| {
            (
                !s.is_leader(),
                s.raft_applied_index,
                std::cmp::Reverse(*index),
            )
        })
        .map(|(_, s)| *s);
    match best {
        Some(status) => Ok(SnapshotSource {
            endpoint: status.endpoint.clone(),
            member: status.member_id,
            is_leader: status.is_leader(),
            revision: status.revision,
            etcd_version: status.version.clone(),
        }),
        None if reasons.is_empty() => Err(vec![
            "the cluster lists no started voting member".to_owned(),
        ]),
        None => Err(reasons),
    }
}

#[cfg(test)]
mod tests {
    use dkv_etcd::FakeEtcd;

    use super::*;

    fn status(endpoint: &str, id: u64, leader: u64, applied: u64) -> EndpointStatus {
        EndpointStatus {
            endpoint: endpoint.to_owned(),
            member_id: MemberId(id),
            cluster_id: 1,
            leader: MemberId(leader),
            version: "3.5.16".to_owned(),
            db_size: 0,
            db_size_in_use: 0,
            raft_index: applied,
            raft_applied_index: applied,
            raft_term: 2,
            revision: applied as i64,
            is_learner: false,
            errors: Vec::new(),
            storage_version: String::new(),
            downgrade_target: None,
        }
    }

    fn ok(s: EndpointStatus) -> (String, Result<EndpointStatus, String>) {
        (s.endpoint.clone(), Ok(s))
    }

    const VOTERS: [MemberId; 3] = [MemberId(1), MemberId(2), MemberId(3)];

    #[test]
    fn prefers_the_follower_furthest_ahead() {
        let answers = [
            ok(status("a", 1, 1, 100)),
            ok(status("b", 2, 1, 98)),
            ok(status("c", 3, 1, 99)),
        ];
        let source = pick_source(&answers, &VOTERS).unwrap();
        assert_eq!(source.endpoint, "c");
        assert!(!source.is_leader);
        assert_eq!(source.revision, 99);
        assert_eq!(source.etcd_version, "3.5.16");
    }

    #[test]
    fn ties_go_to_the_first_listed_follower() {
        let answers = [
            ok(status("a", 1, 1, 100)),
            ok(status("b", 2, 1, 100)),
            ok(status("c", 3, 1, 100)),
        ];
        assert_eq!(pick_source(&answers, &VOTERS).unwrap().endpoint, "b");
    }

    #[test]
    fn the_leader_serves_when_no_follower_can() {
        let mut alarmed = status("b", 2, 1, 100);
        alarmed.errors = vec!["NOSPACE".to_owned()];
        let answers = [
            ok(status("a", 1, 1, 100)),
            ok(alarmed),
            ("c".to_owned(), Err("connection refused".to_owned())),
        ];
        let source = pick_source(&answers, &VOTERS).unwrap();
        assert_eq!(source.endpoint, "a");
        assert!(source.is_leader);

        // A single-member cluster.
        let answers = [ok(status("a", 1, 1, 5))];
        assert_eq!(pick_source(&answers, &[MemberId(1)]).unwrap().endpoint, "a");
    }

    #[test]
    fn followers_of_a_dead_leader_do_not_qualify() {
        let answers = [
            ("a".to_owned(), Err("deadline exceeded".to_owned())),
            ok(status("b", 2, 1, 100)),
            ok(status("c", 3, 1, 100)),
        ];
        let reasons = pick_source(&answers, &VOTERS).unwrap_err();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].contains("deadline exceeded"));
        assert!(reasons[1].contains("follows no live leader"), "{reasons:?}");
    }

    #[test]
    fn learners_and_unknown_members_do_not_qualify() {
        let mut learner = status("d", 4, 1, 100);
        learner.is_learner = true;
        let answers = [
            ok(status("a", 1, 1, 100)),
            ok(learner),
            ok(status("e", 5, 1, 100)),
        ];
        let source = pick_source(&answers, &VOTERS).unwrap();
        assert_eq!(source.endpoint, "a");
        let reasons = pick_source(&answers[1..], &VOTERS).unwrap_err();
        assert!(
            reasons
                .iter()
                .all(|r| r.contains("not a started voting member")),
            "{reasons:?}"
        );
    }

    #[test]
    fn a_member_reached_twice_counts_once() {
        let answers = [
            ok(status("http://m1", 1, 1, 100)),
            ok(status("http://m2", 2, 1, 100)),
            ok(status("http://service", 2, 1, 100)),
        ];
        assert_eq!(
            pick_source(&answers, &VOTERS[..2]).unwrap().endpoint,
            "http://m2"
        );
        assert_eq!(
            pick_source(&[], &VOTERS).unwrap_err(),
            vec!["the cluster lists no started voting member".to_owned()]
        );
    }

    #[tokio::test]
    async fn asks_the_members_themselves_through_the_admin_interface() {
        let fake = FakeEtcd::with_members(&["m0", "m1", "m2"], "3.5.16");
        let source = choose_snapshot_source(&fake, &[]).await.unwrap();
        // m0 leads; the first follower is chosen.
        assert_eq!(source.endpoint, "http://m1:2379");
        assert!(!source.is_leader);
        // m1 down: m2 is the only follower left.
        fake.set_healthy("m1", false);
        let source = choose_snapshot_source(&fake, &[]).await.unwrap();
        assert_eq!(source.endpoint, "http://m2:2379");
        // No quorum: the cluster cannot even list its members.
        fake.set_healthy("m2", false);
        let err = choose_snapshot_source(&fake, &[]).await.unwrap_err();
        assert!(err.to_string().contains("no leader"), "{err}");
        assert_eq!(err.category(), crate::Category::Transient);
    }
}
