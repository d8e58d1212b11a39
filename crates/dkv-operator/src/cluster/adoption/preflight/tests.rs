use std::sync::Arc;

use dkv_etcd::{Alarm, AlarmKind, DowngradeAction, EtcdAdmin, FakeEtcd};

use super::*;

const V3_5_30: EtcdVersion = EtcdVersion::new(3, 5, 30);

fn endpoints() -> Vec<String> {
    vec!["http://a:2379".to_owned()]
}

async fn verdict(fake: &Arc<FakeEtcd>, image: EtcdVersion) -> Result<JoinTarget, JoinRefusal> {
    let reach = |_: &str| -> Arc<dyn EtcdAdmin> { fake.clone() };
    let cluster = observe(&reach, &endpoints()).await?;
    check(&cluster, image)
}

fn member(id: u64, name: &str) -> Member {
    Member {
        id: MemberId(id),
        name: name.to_owned(),
        peer_urls: vec![format!("https://{name}:2380")],
        client_urls: vec![format!("https://{name}:2379")],
        is_learner: false,
    }
}

/// Member `id`'s status as real etcd gives it.
fn status(id: u64, leader: u64) -> EndpointStatus {
    EndpointStatus {
        endpoint: format!("https://m{id}:2379"),
        member_id: MemberId(id),
        cluster_id: 0xa,
        leader: MemberId(leader),
        version: "3.5.30".to_owned(),
        db_size: 0,
        db_size_in_use: 0,
        raft_index: 10,
        raft_applied_index: 10,
        raft_term: 2,
        revision: 5,
        is_learner: false,
        errors: Vec::new(),
        storage_version: String::new(),
        downgrade_target: None,
    }
}

/// Three members a, b, c (IDs 1 to 3) with the statuses given.
fn three(statuses: [EndpointStatus; 3], alarms: Vec<Alarm>) -> ExternalCluster {
    ExternalCluster {
        members: vec![member(1, "a"), member(2, "b"), member(3, "c")],
        statuses: statuses.into_iter().map(Ok).collect(),
        alarms: Ok(alarms),
    }
}

#[tokio::test]
async fn a_healthy_cluster_on_the_images_line_is_joined_and_nothing_is_written() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    let target = verdict(&fake, V3_5_30).await.expect("joinable");
    assert_eq!(target.version, EtcdVersion::new(3, 5, 16));
    assert_eq!(target.cluster_id, 0xc1);
    assert_eq!(target.members.len(), 3);
    assert_eq!(Some(target.leader), fake.leader());
    // Only reads: the member list, each member's status, the alarms.
    let calls = fake.calls();
    assert_eq!(calls.first().map(String::as_str), Some("member list"));
    assert_eq!(calls.last().map(String::as_str), Some("alarm list"));
    assert_eq!(calls.iter().filter(|c| c.starts_with("status ")).count(), 3);
    assert_eq!(calls.len(), 5, "{calls:?}");
}

#[tokio::test]
async fn a_member_down_is_refused_by_name_with_the_fix() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    fake.set_healthy("c", false);
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert!(
        matches!(&refusal, JoinRefusal::MemberUnreachable { member, .. } if member == "c"),
        "{refusal:?}"
    );
    let message = refusal.to_string();
    assert!(message.contains("member c"), "{message}");
    assert!(message.contains("etcdctl member remove"), "{message}");
}

#[tokio::test]
async fn a_cluster_whose_member_list_fails_is_unreachable() {
    // The fake refuses the member list without a quorum; real etcd answers
    // it from the member's own view (see the next test for that case).
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    fake.set_healthy("b", false);
    fake.set_healthy("c", false);
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert!(
        matches!(&refusal, JoinRefusal::Unreachable { endpoints, .. } if endpoints == "http://a:2379"),
        "{refusal:?}"
    );
}

#[test]
fn without_a_quorum_the_members_down_are_named_and_then_the_lost_quorum() {
    // Real etcd: the member list answers, the down members' statuses do
    // not, the alarms (which need a quorum) do not.
    let mut cluster = three([status(1, 0), status(2, 0), status(3, 0)], Vec::new());
    cluster.statuses[1] = Err("https://b:2379: deadline exceeded".to_owned());
    cluster.alarms = Err("etcdserver: request timed out".to_owned());
    assert!(matches!(
        check(&cluster, V3_5_30),
        Err(JoinRefusal::MemberUnreachable { member, .. }) if member == "b"
    ));
    cluster.statuses[1] = Ok(status(2, 0));
    let refusal = check(&cluster, V3_5_30).unwrap_err();
    assert!(
        matches!(refusal, JoinRefusal::NoQuorum { .. }),
        "{refusal:?}"
    );
    assert!(refusal.to_string().contains("no quorum"), "{refusal}");
}

#[test]
fn alarms_and_a_lost_leader_among_a_members_errors_are_refused_for_what_they_are() {
    // etcd lists every active alarm in every member's errors.
    let mut statuses = [status(1, 1), status(2, 1), status(3, 1)];
    for s in &mut statuses {
        s.errors = vec!["alarm:NOSPACE".to_owned()];
    }
    let alarm = Alarm {
        member: MemberId(2),
        kind: AlarmKind::NoSpace,
    };
    let refusal = check(&three(statuses, vec![alarm]), V3_5_30).unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::Alarm {
            member: "b".to_owned(),
            kind: AlarmKind::NoSpace
        }
    );
    assert!(refusal.to_string().contains("etcdctl alarm disarm"));
    // A member that lost its leader says so among its errors.
    let mut statuses = [status(1, 0), status(2, 0), status(3, 0)];
    for s in &mut statuses {
        s.errors = vec!["etcdserver: no leader".to_owned()];
    }
    assert_eq!(
        check(&three(statuses, Vec::new()), V3_5_30),
        Err(JoinRefusal::NoLeader)
    );
    // Any other error is the member's own.
    let mut statuses = [status(1, 1), status(2, 1), status(3, 1)];
    statuses[2].errors = vec!["etcdserver: too many requests".to_owned()];
    assert_eq!(
        check(&three(statuses, Vec::new()), V3_5_30),
        Err(JoinRefusal::MemberUnhealthy {
            member: "c".to_owned(),
            errors: "etcdserver: too many requests".to_owned()
        })
    );
}

#[test]
fn a_corrupt_member_is_to_be_replaced_not_disarmed() {
    let alarm = Alarm {
        member: MemberId(3),
        kind: AlarmKind::Corrupt,
    };
    let refusal = check(
        &three([status(1, 1), status(2, 1), status(3, 1)], vec![alarm]),
        V3_5_30,
    )
    .unwrap_err();
    let message = refusal.to_string();
    assert!(message.contains("CORRUPT raised by member c"), "{message}");
    assert!(message.contains("replace the member"), "{message}");
}

#[tokio::test]
async fn a_pending_learner_is_refused() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    fake.add_learner(&["http://d:2380".to_owned()])
        .await
        .unwrap();
    fake.start_and_catch_up("http://d:2380", "d");
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::LearnerPending {
            member: "d".to_owned()
        }
    );
    assert!(refusal.to_string().contains("etcdctl member promote"));
}

#[tokio::test]
async fn a_member_added_but_never_started_is_refused_by_its_id() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    let added = fake
        .add_learner(&["http://d:2380".to_owned()])
        .await
        .unwrap();
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::MemberNotStarted {
            member: added.id.to_string()
        }
    );
}

#[tokio::test]
async fn a_raised_alarm_is_refused_with_its_member() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    let b = fake.members()[1].id;
    fake.raise_alarm(Alarm {
        member: b,
        kind: AlarmKind::NoSpace,
    });
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::Alarm {
            member: "b".to_owned(),
            kind: AlarmKind::NoSpace
        }
    );
}

#[test]
fn a_client_url_answered_by_another_member_is_refused() {
    // Members advertising one shared address: b's status comes from a.
    let mut statuses = [status(1, 1), status(2, 1), status(3, 1)];
    statuses[1].member_id = MemberId(1);
    let refusal = check(&three(statuses, Vec::new()), V3_5_30).unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::AnsweredByAnother {
            member: "b".to_owned(),
            url: "https://m2:2379".to_owned(),
            answered_by: MemberId(1)
        }
    );
    assert!(refusal.to_string().contains("--advertise-client-urls"));
}

#[test]
fn members_that_disagree_on_cluster_or_leader_are_refused_by_name() {
    // The odd one out is named even when it is listed first.
    let mut statuses = [status(1, 2), status(2, 2), status(3, 2)];
    statuses[0].cluster_id = 0xb;
    assert_eq!(
        check(&three(statuses, Vec::new()), V3_5_30),
        Err(JoinRefusal::ClusterIdsDiffer {
            member: "a".to_owned(),
            ids: "b against a".to_owned()
        })
    );
    let statuses = [status(1, 1), status(2, 2), status(3, 2)];
    assert_eq!(
        check(&three(statuses, Vec::new()), V3_5_30),
        Err(JoinRefusal::OtherLeader {
            member: "a".to_owned()
        })
    );
    // A leader that is not in the member list is no leader.
    let statuses = [status(1, 9), status(2, 9), status(3, 9)];
    assert_eq!(
        check(&three(statuses, Vec::new()), V3_5_30),
        Err(JoinRefusal::NoLeader)
    );
}

#[test]
fn statuses_that_do_not_match_the_member_list_are_refused() {
    let mut cluster = three([status(1, 1), status(2, 1), status(3, 1)], Vec::new());
    cluster.statuses.pop();
    assert_eq!(check(&cluster, V3_5_30), Err(JoinRefusal::NoMembers));
    cluster.members.clear();
    cluster.statuses.clear();
    assert_eq!(check(&cluster, V3_5_30), Err(JoinRefusal::NoMembers));
}

#[tokio::test]
async fn a_single_member_cluster_is_refused_with_the_fix() {
    let fake = Arc::new(FakeEtcd::with_members(&["a"], "3.5.16"));
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(refusal, JoinRefusal::TooFewVoters { voters: 1 });
    assert!(refusal.to_string().contains("add a member to it first"));
}

#[tokio::test]
async fn another_minor_line_in_the_spec_is_refused_with_the_line_to_use() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.16"));
    let refusal = verdict(&fake, EtcdVersion::new(3, 6, 16))
        .await
        .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "the cluster to join runs etcd 3.5.16 and the spec's image runs 3.6.16: dkv adds \
         members on the cluster's own minor line only; set spec.image (and spec.version, if \
         set) to a 3.5 release"
    );
}

#[tokio::test]
async fn an_upgrade_in_flight_is_refused() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.5.30"));
    fake.set_version("c", "3.6.16");
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::MixedVersions {
            low: "3.5.30".to_owned(),
            high: "3.6.16".to_owned()
        }
    );
}

#[tokio::test]
async fn an_enabled_downgrade_is_refused_before_any_member_moved() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.6.16"));
    fake.downgrade(DowngradeAction::Enable("3.5".to_owned()))
        .await
        .unwrap();
    let refusal = verdict(&fake, EtcdVersion::new(3, 6, 16))
        .await
        .unwrap_err();
    assert!(
        matches!(&refusal, JoinRefusal::DowngradeInProgress { member, .. } if member == "a"),
        "{refusal:?}"
    );
    assert!(refusal.to_string().contains("etcdctl downgrade cancel"));
}

#[tokio::test]
async fn versions_dkv_does_not_run_are_refused_with_what_to_do() {
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.3.27"));
    let refusal = verdict(&fake, EtcdVersion::new(3, 3, 27))
        .await
        .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "member a of the cluster to join runs etcd 3.3.27; dkv runs 3.4.0 and later: upgrade \
         the cluster first"
    );
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "3.8.0"));
    let refusal = verdict(&fake, EtcdVersion::new(3, 8, 0)).await.unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "member a of the cluster to join runs etcd 3.8.0; this dkv runs etcd up to 3.7 and \
         cannot take it over"
    );
    let fake = Arc::new(FakeEtcd::with_members(&["a", "b", "c"], "not-a-version"));
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert!(
        matches!(refusal, JoinRefusal::UnknownVersion { .. }),
        "{refusal:?}"
    );
}

#[test]
fn a_change_goes_ahead_only_with_one_failure_to_spare_after_it() {
    // Three voters already there, all healthy: promoting dkv's first member
    // (4 voters, quorum 3) leaves one to spare.
    assert!(keeps_one_failure_to_spare(4, 4));
    // One of them down: 4 voters with 3 healthy have none to spare.
    assert!(!keeps_one_failure_to_spare(4, 3));
    // Six voters (3 + 3), removing one of the old: 5 voters, quorum 3.
    assert!(keeps_one_failure_to_spare(5, 5));
    assert!(keeps_one_failure_to_spare(5, 4));
    assert!(!keeps_one_failure_to_spare(5, 3));
    // Two voters and one more: 3 voters, quorum 2.
    assert!(keeps_one_failure_to_spare(3, 3));
    // One voter and one more never have one to spare: why MIN_VOTERS is 2.
    assert!(!keeps_one_failure_to_spare(2, 2));
    assert!(!keeps_one_failure_to_spare(1, 1));
}
