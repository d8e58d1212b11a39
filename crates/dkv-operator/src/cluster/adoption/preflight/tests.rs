use dkv_etcd::{Alarm, AlarmKind, EtcdAdmin, FakeEtcd};

use super::*;

const V3_5_30: EtcdVersion = EtcdVersion::new(3, 5, 30);

fn endpoints() -> Vec<String> {
    vec!["http://a:2379".to_owned()]
}

async fn verdict(fake: &FakeEtcd, image: EtcdVersion) -> Result<JoinTarget, JoinRefusal> {
    let cluster = observe(fake, &endpoints()).await?;
    check(&cluster, image)
}

#[tokio::test]
async fn a_healthy_cluster_on_the_images_line_is_joined_and_nothing_is_written() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
    let target = verdict(&fake, V3_5_30).await.expect("joinable");
    assert_eq!(target.version, EtcdVersion::new(3, 5, 16));
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
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
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
async fn a_cluster_without_quorum_is_unreachable() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
    fake.set_healthy("b", false);
    fake.set_healthy("c", false);
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert!(
        matches!(refusal, JoinRefusal::Unreachable { .. }),
        "{refusal:?}"
    );
    assert!(
        refusal
            .to_string()
            .contains("spec.bootstrap.join.endpoints")
    );
}

#[tokio::test]
async fn a_pending_learner_is_refused() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
    let learner = fake
        .add_learner(&["http://d:2380".to_owned()])
        .await
        .unwrap();
    fake.start_and_catch_up("http://d:2380", "d");
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert_eq!(
        refusal,
        JoinRefusal::LearnerPending {
            member: "d".to_owned()
        },
        "learner {}",
        learner.id
    );
    assert!(refusal.to_string().contains("etcdctl member promote"));
}

#[tokio::test]
async fn a_member_added_but_never_started_is_refused_by_its_id() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
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
async fn an_alarm_is_refused_with_its_member() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
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
            alarm: "NOSPACE".to_owned()
        }
    );
    assert!(refusal.to_string().contains("etcdctl alarm disarm"));
}

#[tokio::test]
async fn another_minor_line_in_the_spec_is_refused_with_the_line_to_use() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
    let refusal = verdict(&fake, EtcdVersion::new(3, 6, 16))
        .await
        .unwrap_err();
    assert_eq!(
        refusal.to_string(),
        "the cluster to join runs etcd 3.5.16 and spec.version is 3.6.16: a member joins on \
         its cluster's minor line only; set spec.version to a 3.5 release"
    );
}

#[tokio::test]
async fn an_upgrade_in_flight_is_refused() {
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "3.5.30");
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
async fn versions_dkv_does_not_run_are_refused() {
    for (running, image) in [("3.3.27", "3.3.27"), ("3.8.0", "3.8.0")] {
        let fake = FakeEtcd::with_members(&["a", "b", "c"], running);
        let image = EtcdVersion::parse(image).unwrap();
        let refusal = verdict(&fake, image).await.unwrap_err();
        assert!(
            matches!(refusal, JoinRefusal::UnsupportedVersion { .. }),
            "{running}: {refusal:?}"
        );
    }
    let fake = FakeEtcd::with_members(&["a", "b", "c"], "not-a-version");
    let refusal = verdict(&fake, V3_5_30).await.unwrap_err();
    assert!(
        matches!(refusal, JoinRefusal::UnknownVersion { .. }),
        "{refusal:?}"
    );
}

#[test]
fn members_that_disagree_on_cluster_or_leader_are_refused() {
    let member = |id: u64, name: &str| Member {
        id: MemberId(id),
        name: name.to_owned(),
        peer_urls: vec![format!("https://{name}:2380")],
        client_urls: vec![format!("https://{name}:2379")],
        is_learner: false,
    };
    let status = |id: u64, cluster_id: u64, leader: u64| EndpointStatus {
        endpoint: String::new(),
        member_id: MemberId(id),
        cluster_id,
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
    };
    let members = vec![member(1, "a"), member(2, "b")];
    let two_clusters = ExternalCluster {
        members: members.clone(),
        statuses: vec![Ok(status(1, 0xa, 1)), Ok(status(2, 0xb, 1))],
        alarms: Vec::new(),
    };
    assert!(matches!(
        check(&two_clusters, V3_5_30),
        Err(JoinRefusal::ClusterIdsDiffer { member, .. }) if member == "b"
    ));
    let two_leaders = ExternalCluster {
        members: members.clone(),
        statuses: vec![Ok(status(1, 0xa, 1)), Ok(status(2, 0xa, 2))],
        alarms: Vec::new(),
    };
    assert!(matches!(
        check(&two_leaders, V3_5_30),
        Err(JoinRefusal::NoLeader { member }) if member == "b"
    ));
    let no_leader = ExternalCluster {
        members,
        statuses: vec![Ok(status(1, 0xa, 0)), Ok(status(2, 0xa, 0))],
        alarms: Vec::new(),
    };
    assert!(matches!(
        check(&no_leader, V3_5_30),
        Err(JoinRefusal::NoLeader { .. })
    ));
}

#[test]
fn a_change_goes_ahead_only_with_one_failure_to_spare_after_it() {
    // Three external voters, all healthy: promoting dkv's first member
    // (4 voters, quorum 3) leaves one to spare.
    assert!(keeps_one_failure_to_spare(4, 4));
    // One external voter down: 4 voters with 3 healthy have none to spare.
    assert!(!keeps_one_failure_to_spare(4, 3));
    // Six voters (3 + 3), removing an external one: 5 voters, quorum 3.
    assert!(keeps_one_failure_to_spare(5, 5));
    assert!(keeps_one_failure_to_spare(5, 4));
    assert!(!keeps_one_failure_to_spare(5, 3));
    // A single voter never has one to spare.
    assert!(!keeps_one_failure_to_spare(1, 1));
}
