//! Tests: rolling restarts (upgrades, reissued certificates, template changes), one member at a time and the
//! leader last.

use super::*;

#[test]
fn upgrades_go_followers_first_and_the_leader_last() {
    let mut obs = cluster(3, 3);
    obs.desired_version = V35;
    for m in obs.members.as_mut().unwrap() {
        m.version = Some(V34);
    }
    for p in &mut obs.pods {
        p.version = Some(V34);
    }
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
    for i in [1, 2] {
        obs.members.as_mut().unwrap()[i].version = Some(V35);
        obs.pods[i].version = Some(V35);
    }
    assert_eq!(
        next_step(&obs),
        begin(OperationKind::UpgradeMember, 0),
        "the leader last"
    );

    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 0,
    });
    // Equally caught-up followers: the lowest ordinal takes over.
    assert_eq!(
        next_step(&obs),
        Step::MoveLeader {
            from: 100,
            from_ordinal: 0,
            to: 101
        }
    );
}

#[test]
fn an_upgrade_restarts_one_member_and_waits_for_the_new_version() {
    let mut obs = cluster(3, 3);
    for m in obs.members.as_mut().unwrap() {
        m.version = Some(V34);
    }
    for p in &mut obs.pods {
        p.version = Some(V34);
    }
    let pinned = Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    };
    obs.pinned = Some(pinned);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    obs.members.as_mut().unwrap()[2].healthy = false;
    obs.pods[2].version = Some(V35);
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::UpgradeInProgress { ordinal: 2 })
    );
    obs.members.as_mut().unwrap()[2].healthy = true;
    obs.members.as_mut().unwrap()[2].version = Some(V35);
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

/// Pods whose image tag names no version (`spec.version` says what it
/// holds): whether the member was restarted is read from its template. A
/// member left on an image the spec no longer names — it crash-looped and
/// the spec was set back — is restarted onto the current one, not waited
/// for.
#[test]
fn an_upgrade_of_an_image_without_a_version_tag_follows_the_template() {
    let mut obs = cluster(3, 3);
    obs.update_revision = Some("rev-2".to_owned());
    for p in &mut obs.pods {
        p.version = None;
    }
    let pinned = Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    };
    obs.pinned = Some(pinned);
    obs.members.as_mut().unwrap()[2].healthy = false;
    obs.pods[2].ready = false;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    // A template not yet given a revision decides nothing.
    obs.update_revision = None;
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::TemplatePending));
    obs.update_revision = Some("rev-2".to_owned());
    obs.pods[2].revision = Some("rev-2".to_owned());
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::UpgradeInProgress { ordinal: 2 })
    );
    obs.members.as_mut().unwrap()[2].healthy = true;
    obs.pods[2].ready = true;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
}

#[test]
fn a_reissued_certificate_restarts_members_one_at_a_time_leader_last() {
    let mut obs = cluster(3, 3);
    obs.desired_tls_serial = Some("new".to_owned());
    for p in &mut obs.pods {
        p.tls_serial = Some("old".to_owned());
    }
    // Member 0 leads (see `member`): followers first, highest first.
    assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 2));
    let pinned = Pinned {
        kind: OperationKind::RenewCertificate,
        ordinal: 2,
    };
    obs.pinned = Some(pinned);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    // Restarted onto the new certificate, not serving yet: wait.
    obs.pods[2].tls_serial = Some("new".to_owned());
    obs.members.as_mut().unwrap()[2].healthy = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::RestartInProgress { ordinal: 2 })
    );
    obs.members.as_mut().unwrap()[2].healthy = true;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    obs.pinned = None;
    assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 1));
    obs.pods[1].tls_serial = Some("new".to_owned());
    assert_eq!(next_step(&obs), begin(OperationKind::RenewCertificate, 0));
    // The leader hands leadership over before its restart.
    obs.pinned = Some(Pinned {
        kind: OperationKind::RenewCertificate,
        ordinal: 0,
    });
    assert!(
        matches!(
            next_step(&obs),
            Step::MoveLeader {
                from_ordinal: 0,
                ..
            }
        ),
        "{:?}",
        next_step(&obs)
    );
    obs.pinned = None;
    obs.pods[0].tls_serial = Some("new".to_owned());
    assert_eq!(next_step(&obs), Step::Converged);
}

#[test]
fn a_template_change_restarts_members_one_at_a_time_leader_last_each_back_in_service() {
    let mut obs = cluster(3, 3);
    obs.update_revision = Some("rev-2".to_owned());
    // Member 0 leads: followers first, highest first.
    assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 2));
    let pinned = Pinned {
        kind: OperationKind::RestartMember,
        ordinal: 2,
    };
    obs.pinned = Some(pinned);
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    // Restarted onto the new template: healthy in etcd is not enough;
    // its pod must be Ready and its log caught up with the leader's.
    obs.pods[2].revision = Some("rev-2".to_owned());
    obs.pods[2].ready = false;
    let waiting = Step::Wait(WaitReason::RestartInProgress { ordinal: 2 });
    assert_eq!(next_step(&obs), waiting);
    obs.pods[2].ready = true;
    obs.members.as_mut().unwrap()[0].raft_index = 1000 + CAUGHT_UP_ENTRIES + 1;
    assert_eq!(next_step(&obs), waiting);
    obs.members.as_mut().unwrap()[2].raft_index = 1000 + CAUGHT_UP_ENTRIES;
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    obs.pinned = None;
    assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 1));
    // A member that does not come back stops the rollout where it is.
    obs.pinned = Some(Pinned {
        kind: OperationKind::RestartMember,
        ordinal: 1,
    });
    obs.pods[1].revision = Some("rev-2".to_owned());
    obs.pods[1].ready = false;
    obs.members.as_mut().unwrap()[1].healthy = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::RestartInProgress { ordinal: 1 })
    );
    obs.pods[1].ready = true;
    obs.members.as_mut().unwrap()[1].healthy = true;
    obs.members.as_mut().unwrap()[1].raft_index = 1000 + CAUGHT_UP_ENTRIES;
    obs.pinned = None;
    // The leader hands leadership over before its restart.
    assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 0));
    obs.pinned = Some(Pinned {
        kind: OperationKind::RestartMember,
        ordinal: 0,
    });
    assert!(
        matches!(
            next_step(&obs),
            Step::MoveLeader {
                from_ordinal: 0,
                ..
            }
        ),
        "{:?}",
        next_step(&obs)
    );
    // The template changed again meanwhile: wait for its revision.
    obs.update_revision = None;
    assert_eq!(next_step(&obs), Step::Wait(WaitReason::TemplatePending));
    obs.pinned = None;
    assert_eq!(
        next_step(&obs),
        Step::Converged,
        "nothing restarts while the target revision is unknown"
    );
    obs.update_revision = Some("rev-2".to_owned());
    obs.pods[0].revision = Some("rev-2".to_owned());
    assert_eq!(next_step(&obs), Step::Converged);
}

#[test]
fn no_restart_while_another_member_pod_is_not_ready() {
    let mut obs = cluster(3, 3);
    obs.update_revision = Some("rev-2".to_owned());
    obs.pinned = Some(Pinned {
        kind: OperationKind::RestartMember,
        ordinal: 2,
    });
    // etcd says member 1 is healthy, but its pod is not Ready: clients
    // cannot reach it, so restarting member 2 now would leave one.
    obs.pods[1].ready = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodNotReady { ordinal: 1 })
    );
    obs.pods[1].ready = true;
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
}

#[test]
fn no_template_restart_while_a_member_is_unhealthy() {
    let mut obs = cluster(3, 3);
    obs.update_revision = Some("rev-2".to_owned());
    obs.members.as_mut().unwrap()[1].healthy = false;
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
    );
}

#[test]
fn an_image_tag_naming_another_patch_level_than_the_binary_does_not_loop() {
    // The pod runs the image the spec names (3.5.17), the binary in it
    // reports 3.5.16: restarting it again could never change that.
    let mut obs = cluster(3, 3);
    obs.desired_version = EtcdVersion::new(3, 5, 17);
    for p in &mut obs.pods {
        p.version = Some(EtcdVersion::new(3, 5, 17));
    }
    assert_eq!(next_step(&obs), Step::Converged);
    let pinned = Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 1,
    };
    obs.pinned = Some(pinned);
    assert_eq!(next_step(&obs), Step::Finish(pinned));
    // A pod still on the old image is outdated whatever etcd reports.
    obs.pinned = None;
    obs.pods[2].version = Some(V35);
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 2));
}

#[test]
fn an_upgrade_restart_waits_while_another_member_is_down() {
    let mut obs = cluster(3, 3);
    for m in obs.members.as_mut().unwrap() {
        m.version = Some(V34);
    }
    for p in &mut obs.pods {
        p.version = Some(V34);
    }
    obs.members.as_mut().unwrap()[1].healthy = false;
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    });
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::MemberUnhealthy { ordinal: 1 })
    );
}

#[test]
fn a_single_member_cluster_can_be_upgraded() {
    let mut obs = cluster(1, 1);
    obs.members.as_mut().unwrap()[0].version = Some(V34);
    obs.pods[0].version = Some(V34);
    assert_eq!(next_step(&obs), begin(OperationKind::UpgradeMember, 0));
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 0,
    });
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 0 });
}

#[test]
fn a_member_pod_already_being_deleted_is_waited_for_not_deleted_again() {
    let mut obs = cluster(3, 3);
    for m in obs.members.as_mut().unwrap() {
        m.version = Some(V34);
    }
    for p in &mut obs.pods {
        p.version = Some(V34);
    }
    obs.pinned = Some(Pinned {
        kind: OperationKind::UpgradeMember,
        ordinal: 2,
    });
    assert_eq!(next_step(&obs), Step::RestartPod { ordinal: 2 });
    // Evicted: the pod stops gracefully and, until its kubelet confirms,
    // is listed only as terminating; etcd still sees the member serve.
    obs.pods.retain(|p| p.ordinal != 2);
    obs.terminating = vec![2];
    assert_eq!(
        next_step(&obs),
        Step::Wait(WaitReason::PodTerminating { ordinal: 2 })
    );
    // Gone, and re-created on the new version: the upgrade goes on.
    obs.terminating.clear();
    obs.pods.push(pod(2));
    obs.pods.sort_by_key(|p| p.ordinal);
    obs.pods[2].version = Some(V35);
    assert_ne!(
        next_step(&obs),
        Step::Wait(WaitReason::PodTerminating { ordinal: 2 })
    );
}

#[test]
fn members_that_started_with_the_restore_steps_are_not_restarted_to_drop_them() {
    // A restored cluster has formed: its template dropped the restore steps
    // (a new revision) and is otherwise the one its members started from,
    // the member-side hash of both.
    let mut obs = cluster(3, 3);
    obs.update_revision = Some("rev-2".to_owned());
    obs.settled_template = Some("same".to_owned());
    for pod in &mut obs.pods {
        pod.member_side = Some("same".to_owned());
    }
    assert_eq!(next_step(&obs), Step::Converged);
    // Anything else that changed the template restarts them as usual.
    obs.settled_template = Some("other".to_owned());
    assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 2));
    // A template that restores (a recovery from backup) has no settled
    // hash: its steps must run, so every member restarts onto it.
    obs.settled_template = None;
    assert_eq!(next_step(&obs), begin(OperationKind::RestartMember, 2));
}
