//! Tests: how the record and the volume decide restart, bootstrap, join or refusal.

use super::*;

#[test]
fn the_record_decides_bootstrap_and_join() {
    let new = record(
        ClusterState::New,
        (0..3).map(|i| recorded(i, false)).collect(),
    );
    assert_eq!(
        decide(&args("orders-2"), false, Some(&new)),
        Ok(Start::Bootstrap {
            initial_cluster: THREE.into()
        })
    );
    let mut members: Vec<_> = (0..3).map(|i| recorded(i, true)).collect();
    members.push(recorded(3, false));
    let existing = record(ClusterState::Existing, members);
    let Ok(start) = decide(&args("orders-3"), false, Some(&existing)) else {
        panic!("a listed learner joins");
    };
    let config = render_config(&args("orders-3"), &start).unwrap_or_default();
    assert_eq!(config["initial-cluster-state"], "existing");
    assert!(
        config["initial-cluster"]
            .as_str()
            .unwrap_or_default()
            .ends_with("orders-3=http://orders-3.orders-peer.shop.svc:2380")
    );
}

#[test]
fn a_member_that_ran_before_but_has_no_data_refuses_to_start() {
    let existing = record(
        ClusterState::Existing,
        (0..3).map(|i| recorded(i, true)).collect(),
    );
    let refusal = decide(&args("orders-1"), false, Some(&existing));
    assert_eq!(refusal, Err(Refusal::DataLost("orders-1".into())));
    // What the operator reads from the termination message.
    assert_eq!(
        refusal
            .err()
            .and_then(|r| InitMessage::parse(&r.to_string())),
        Some(InitMessage::DataLost {
            member: "orders-1".into()
        })
    );
    // With its data it restarts.
    assert!(matches!(
        decide(&args("orders-1"), true, Some(&existing)),
        Ok(Start::Restart { .. })
    ));
}

#[test]
fn a_member_not_yet_added_waits() {
    let existing = record(
        ClusterState::Existing,
        (0..3).map(|i| recorded(i, true)).collect(),
    );
    assert_eq!(
        decide(&args("orders-4"), false, Some(&existing)),
        Err(Refusal::NotListed("orders-4".into()))
    );
}

#[test]
fn without_a_record_members_outside_the_bootstrap_set_never_bootstrap() {
    assert!(matches!(
        decide(&args("orders-3"), false, None),
        Err(Refusal::OutsideBootstrapSet { .. })
    ));
    assert!(matches!(
        decide(&args("orders-3"), true, None),
        Ok(Start::Restart { .. })
    ));
}

#[test]
fn a_peer_url_mismatch_is_refused() {
    let mut member = recorded(0, false);
    member.peer_url = "http://elsewhere:2380".into();
    let bad = record(ClusterState::New, vec![member]);
    assert!(matches!(
        decide(&args("orders-0"), false, Some(&bad)),
        Err(Refusal::PeerUrlMismatch { .. })
    ));
}
