//! The admission verdicts, checked from YAML-shaped specs.

use super::*;
use crate::webhook::fixtures::defaults;

fn dkv(size: i32, image: &str, extra: serde_json::Value) -> DistributedKV {
    let mut spec = serde_json::json!({"size": size, "image": image});
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    crate::webhook::fixtures::dkv(spec)
}

const ETCD_35: &str = "registry.k8s.io/etcd:3.5.16-0";

#[test]
fn a_v1alpha1_writer_is_told_the_v1alpha1_field_names() {
    let bad_bucket = dkv(
        3,
        ETCD_35,
        serde_json::json!({"backup": {"destination": {"uri": "s3://Bad_Bucket/dkv/"}, "schedule": "@daily"}}),
    );
    let verdict = review_cluster(
        ClusterWrite::Create(&bad_bucket),
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(
        verdict.message().contains("spec.backup.destination.uri"),
        "{}",
        verdict.message()
    );
    let v1alpha1 = verdict.clone().for_written_version("dkv.io/v1alpha1");
    assert!(
        v1alpha1.message().contains("spec.backup.s3Path")
            && !v1alpha1.message().contains("destination"),
        "{}",
        v1alpha1.message()
    );
    assert_eq!(
        verdict
            .clone()
            .for_written_version("dkv.io/v1beta1")
            .message(),
        verdict.message()
    );
}

#[test]
fn every_destination_scheme_and_retention_limit_is_checked() {
    let verdict_for = |backup: serde_json::Value| {
        let cluster = dkv(3, ETCD_35, serde_json::json!({ "backup": backup }));
        review_cluster(
            ClusterWrite::Create(&cluster),
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    for uri in [
        "s3://bucket/dkv/",
        "gs://bucket/dkv/",
        "az://container/dkv/",
        "file:///var/backups/dkv/",
    ] {
        let verdict = verdict_for(serde_json::json!({
            "destination": {"uri": uri}, "schedule": "@daily",
            "retention": {"maxBackups": 5, "maxAge": "36h"}
        }));
        assert!(verdict.allowed(), "{uri}: {}", verdict.message());
        assert_eq!(
            verdict.warnings.len(),
            usize::from(uri.starts_with("file:")),
            "{uri}: {:?}",
            verdict.warnings
        );
    }
    for (backup, field) in [
        (
            serde_json::json!({"destination": {"uri": "ftp://host/dkv/"}, "schedule": "@daily"}),
            "spec.backup.destination.uri",
        ),
        (
            serde_json::json!({"destination": {"uri": "file://relative/dkv/"}, "schedule": "@daily"}),
            "spec.backup.destination.uri",
        ),
        (
            serde_json::json!({"destination": {"uri": "s3://b/"}, "schedule": "@daily",
                               "retention": {"maxBackups": 0}}),
            "spec.backup.retention.maxBackups",
        ),
        (
            serde_json::json!({"destination": {"uri": "s3://bucket/"}, "schedule": "@daily",
                               "retention": {"maxAge": "30m"}}),
            "spec.backup.retention.maxAge",
        ),
    ] {
        let verdict = verdict_for(backup.clone());
        assert!(
            verdict.denials.iter().any(|d| d.field == field),
            "{backup}: {}",
            verdict.message()
        );
    }
}

const STORAGE: &str = r#"{"storageClassName": "standard", "size": "1Gi"}"#;

fn hibernating(size: i32, image: &str, on: bool, extra: serde_json::Value) -> DistributedKV {
    let mut spec = serde_json::json!({
        "hibernation": on,
        "storage": serde_json::from_str::<serde_json::Value>(STORAGE).unwrap_or_default(),
        "backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily"},
    });
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra) {
        spec.extend(extra);
    }
    dkv(size, image, spec)
}

fn update(old: &DistributedKV, new: &DistributedKV) -> AdmissionVerdict {
    review_cluster(
        ClusterWrite::Update {
            old,
            new,
            expandable: None,
            auth_on: None,
            volume_capacity: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    )
}

#[test]
fn a_hibernated_cluster_refuses_scale_upgrade_backup_and_storage_edits() {
    let old = hibernating(3, ETCD_35, true, serde_json::json!({}));
    for (new, field, then) in [
        (
            hibernating(5, ETCD_35, true, serde_json::json!({})),
            "spec.size",
            "then scale",
        ),
        (
            hibernating(
                3,
                "registry.k8s.io/etcd:3.5.17-0",
                true,
                serde_json::json!({}),
            ),
            "spec.image",
            "then upgrade",
        ),
        (
            hibernating(3, ETCD_35, true, serde_json::json!({"version": "3.5.17"})),
            "spec.version",
            "then upgrade",
        ),
        (
            hibernating(
                3,
                ETCD_35,
                true,
                serde_json::json!({"backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@hourly"}}),
            ),
            "spec.backup",
            "then change the backup",
        ),
        (
            hibernating(
                3,
                ETCD_35,
                true,
                serde_json::json!({"storage": {"storageClassName": "standard", "size": "2Gi"}}),
            ),
            "spec.storage",
            "then change the storage",
        ),
    ] {
        let verdict = update(&old, &new);
        assert!(!verdict.allowed(), "{field}: allowed");
        let message = verdict.message();
        assert!(
            message.contains(&format!(
                "{field}: cluster shop/orders is hibernated; wake it first (spec.hibernation: false), {then}"
            )),
            "{message}"
        );
    }
    let through_scale = review_cluster(
        ClusterWrite::Scale {
            old: 3,
            new: 5,
            hibernated: Some("shop/orders"),
            members: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(
        through_scale
            .message()
            .contains("spec.size: cluster shop/orders is hibernated; wake it first"),
        "{}",
        through_scale.message()
    );
}

#[test]
fn waking_and_metadata_edits_of_a_hibernated_cluster_go_through() {
    let old = hibernating(3, ETCD_35, true, serde_json::json!({}));
    let mut labelled = old.clone();
    labelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "shop".into());
    assert!(update(&old, &labelled).allowed());
    let awake = hibernating(3, ETCD_35, false, serde_json::json!({}));
    let verdict = update(&old, &awake);
    assert!(verdict.allowed(), "{}", verdict.message());
    // Waking and scaling at once: the cluster wakes, then scales.
    let verdict = update(&old, &hibernating(5, ETCD_35, false, serde_json::json!({})));
    assert!(verdict.allowed(), "{}", verdict.message());
    // An unchanged size through the scale subresource is no edit.
    let same = review_cluster(
        ClusterWrite::Scale {
            old: 3,
            new: 3,
            hibernated: Some("shop/orders"),
            members: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(same.allowed());
}

#[test]
fn hibernating_and_scaling_in_one_edit_is_refused() {
    let old = hibernating(3, ETCD_35, false, serde_json::json!({}));
    let verdict = update(&old, &hibernating(5, ETCD_35, true, serde_json::json!({})));
    assert!(
        verdict
            .message()
            .contains("spec.size: cluster shop/orders cannot hibernate and scale in one edit"),
        "{}",
        verdict.message()
    );
    let verdict = update(&old, &hibernating(3, ETCD_35, true, serde_json::json!({})));
    assert!(verdict.allowed(), "{}", verdict.message());
}

#[test]
fn a_hibernated_cluster_takes_no_on_demand_backup() {
    let backup: DistributedKVBackup = serde_json::from_value(serde_json::json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "orders-now", "namespace": "shop"},
        "spec": {"cluster": "orders"},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let verdict = review_backup(
        &backup,
        &BackupTarget::Found {
            has_destination: true,
            hibernated: true,
        },
    );
    assert!(
        verdict.message().contains(
            "spec.cluster: cluster shop/orders is hibernated; wake it first (spec.hibernation: false), then back it up"
        ),
        "{}",
        verdict.message()
    );
    let awake = review_backup(
        &backup,
        &BackupTarget::Found {
            has_destination: true,
            hibernated: false,
        },
    );
    assert!(awake.allowed(), "{}", awake.message());
}

#[test]
fn only_a_cluster_with_persistent_storage_can_hibernate() {
    let old = dkv(3, ETCD_35, serde_json::json!({}));
    let new = dkv(3, ETCD_35, serde_json::json!({"hibernation": true}));
    let verdict = update(&old, &new);
    assert!(
        verdict
            .message()
            .contains("spec.hibernation: the cluster has no spec.storage"),
        "{}",
        verdict.message()
    );
}

#[test]
fn scale_down_keeps_a_quorum_of_the_old_size() {
    let old = dkv(5, ETCD_35, serde_json::json!({}));
    for (new, allowed) in [(4, true), (3, true), (2, false), (1, false), (7, true)] {
        let verdict = review_cluster(
            ClusterWrite::Update {
                old: &old,
                new: &dkv(new, ETCD_35, serde_json::json!({})),
                expandable: None,
                auth_on: None,
                volume_capacity: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        );
        assert_eq!(verdict.allowed(), allowed, "5 -> {new}: {verdict:?}");
        if !allowed {
            assert!(verdict.message().contains("spec.size"), "{verdict:?}");
            assert!(verdict.message().contains("quorum of 3"), "{verdict:?}");
        }
    }
    let scale = review_cluster(
        ClusterWrite::Scale {
            old: 5,
            new: 1,
            hibernated: None,
            members: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(
        scale.message().contains("scale down to 3 first"),
        "{scale:?}"
    );
}

/// A size that never ran (3 -> 9, members that cannot be scheduled) does
/// not lock the cluster at 9: a scale down is measured from the members
/// etcd has, as status records them.
#[test]
fn scale_down_is_measured_from_the_members_the_cluster_has() {
    let mut grown = running_cluster(
        "3.5.16",
        &[Some("3.5.16"), Some("3.5.16"), Some("3.5.16"), None],
        "3.5.16",
        "3.5.16",
    );
    grown.spec.size = 9;
    let back = |new: i32| {
        review_cluster(
            ClusterWrite::Update {
                old: &grown,
                new: &dkv(new, "registry.k8s.io/etcd:3.5.16-0", serde_json::json!({})),
                expandable: None,
                auth_on: None,
                volume_capacity: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(back(3).allowed(), "{:?}", back(3));
    assert_eq!(
        back(2).message(),
        "spec.size: scaling from 4 to 2 members in one step drops below the current quorum of 3; scale down to 3 first and continue once the cluster is Available again"
    );
    let through_scale = |members| {
        review_cluster(
            ClusterWrite::Scale {
                old: 9,
                new: 3,
                hibernated: None,
                members,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(through_scale(Some(members_now(&grown))).allowed());
    assert!(
        !through_scale(None).allowed(),
        "nothing known: the spec's size"
    );
}

/// `spec.storage.size` is compared with what the members' volumes hold
/// (their claims' capacity), not with the previous spec: a growth that was
/// never carried out (a size no volume reached) can be taken back.
#[test]
fn storage_is_compared_with_what_the_volumes_hold() {
    let sized = |size: &str| {
        dkv(
            3,
            ETCD_35,
            serde_json::json!({"storage": {"storageClassName": "standard", "size": size}}),
        )
    };
    let asked = sized("100Ti");
    let review = |to: &str, capacity: Option<&str>| {
        review_cluster(
            ClusterWrite::Update {
                old: &asked,
                new: &sized(to),
                expandable: None,
                auth_on: None,
                volume_capacity: capacity,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(review("1Gi", Some("1Gi")).allowed());
    assert!(review("2Gi", Some("1Gi")).allowed());
    assert_eq!(
        review("512Mi", Some("1Gi")).message(),
        "spec.storage.size: \"512Mi\" is smaller than the members' volumes (1Gi); volumes never shrink: set it to 1Gi or more"
    );
    assert!(lowers_storage(&asked, &sized("1Gi")));
    assert!(!lowers_storage(&sized("1Gi"), &sized("2Gi")));
}

/// Authentication asked for and never turned on can be turned off; once
/// dkv turned it on in etcd, it cannot.
#[test]
fn authentication_is_refused_off_only_once_on_in_etcd() {
    let on = dkv(3, ETCD_35, serde_json::json!({"auth": {"enabled": true}}));
    let off = dkv(3, ETCD_35, serde_json::json!({"auth": {"enabled": false}}));
    assert!(turns_auth_off(&on, &off));
    let review = |auth_on| {
        review_cluster(
            ClusterWrite::Update {
                old: &on,
                new: &off,
                expandable: None,
                auth_on,
                volume_capacity: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(review(Some(false)).allowed());
    assert_eq!(
        review(Some(true)).message(),
        "spec.auth.enabled: etcd authentication is on in this cluster (dkv turned it on) and dkv does not turn it off; set it back to true"
    );
}

#[test]
fn even_sizes_are_warned_about_not_refused() {
    let verdict = review_cluster(
        ClusterWrite::Create(&dkv(4, ETCD_35, serde_json::json!({}))),
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(verdict.allowed(), "{verdict:?}");
    assert_eq!(verdict.warnings.len(), 1);
    assert!(verdict.warnings[0].starts_with("spec.size: 4 members"));
}

#[test]
fn lost_node_replacement_is_bounded_and_warned_about_where_it_cannot_help() {
    let create = |size, lost_node| {
        review_cluster(
            ClusterWrite::Create(&dkv(
                size,
                ETCD_35,
                serde_json::json!({"recovery": {"lostNode": lost_node}}),
            )),
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    let fine = create(
        3,
        serde_json::json!({"policy": "Replace", "afterSeconds": 120}),
    );
    assert!(fine.allowed() && fine.warnings.is_empty(), "{fine:?}");
    let waiting = create(1, serde_json::json!({"policy": "Wait", "afterSeconds": 0}));
    assert!(
        waiting.allowed() && waiting.warnings.is_empty(),
        "{waiting:?}"
    );
    let small = create(1, serde_json::json!({"policy": "Replace"}));
    assert!(small.allowed(), "{small:?}");
    assert_eq!(small.warnings.len(), 1, "{small:?}");
    assert!(small.warnings[0].contains("too few for quorum"));
    let hasty = create(
        3,
        serde_json::json!({"policy": "Replace", "afterSeconds": 10}),
    );
    assert!(hasty.allowed(), "{hasty:?}");
    assert!(hasty.warnings[0].contains("reboot"), "{hasty:?}");
    let negative = create(
        3,
        serde_json::json!({"policy": "Replace", "afterSeconds": -1}),
    );
    assert!(!negative.allowed());
    assert!(
        negative
            .message()
            .contains("spec.recovery.lostNode.afterSeconds"),
        "{}",
        negative.message()
    );
}

#[test]
fn corrupt_member_replacement_needs_three_members() {
    let create = |size, policy: &str| {
        review_cluster(
            ClusterWrite::Create(&dkv(
                size,
                ETCD_35,
                serde_json::json!({"recovery": {"corruptMember": policy}}),
            )),
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    let fine = create(3, "Replace");
    assert!(fine.allowed() && fine.warnings.is_empty(), "{fine:?}");
    let reported = create(1, "Report");
    assert!(reported.allowed(), "{reported:?}");
    for size in [1, 2] {
        let small = create(size, "Replace");
        assert!(!small.allowed(), "{small:?}");
        assert!(
            small
                .message()
                .contains("spec.recovery.corruptMember: Replace needs spec.size 3 or more"),
            "{}",
            small.message()
        );
    }
    // An edit that shrinks a replacing cluster below three is refused too.
    let old = dkv(
        3,
        ETCD_35,
        serde_json::json!({"recovery": {"corruptMember": "Replace"}}),
    );
    let new = dkv(
        1,
        ETCD_35,
        serde_json::json!({"recovery": {"corruptMember": "Replace"}}),
    );
    let edit = review_cluster(
        ClusterWrite::Update {
            old: &old,
            new: &new,
            expandable: None,
            auth_on: None,
            volume_capacity: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(!edit.allowed(), "{edit:?}");
}

#[test]
fn version_moves_one_minor_up_never_down() {
    let old = dkv(3, "registry.k8s.io/etcd:3.4.23-0", serde_json::json!({}));
    let to = |image| {
        review_cluster(
            ClusterWrite::Update {
                old: &old,
                new: &dkv(3, image, serde_json::json!({})),
                expandable: None,
                auth_on: None,
                volume_capacity: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(to(ETCD_35).allowed());
    let skip = to("registry.k8s.io/etcd:3.6.1-0");
    // Status records no version (nothing recorded yet): the previous spec's.
    assert!(
        skip.message().starts_with(
            "spec.image: the previous spec asks for 3.4.23 and status records no version the members run: etcd upgrades move one minor"
        ),
        "{skip:?}"
    );
    let down = to("registry.k8s.io/etcd:3.4.1-0");
    assert!(
        down.message().contains("etcd cannot be downgraded"),
        "{down:?}"
    );
}

/// A downgrade goes one minor down from 3.6 on, checked against the version
/// every member last reported alike (`status.currentVersion`), or the
/// previous spec's when status records none.
#[test]
fn downgrades_go_one_minor_down_from_what_the_members_run() {
    let review = |from: &str, running: Option<&str>, to: &str| {
        let mut old = dkv(
            3,
            &format!("registry.k8s.io/etcd:{from}-0"),
            serde_json::json!({}),
        );
        old.status = running.map(|v| dkv_api::distributedkv::v1beta1::DistributedKVStatus {
            current_version: Some(v.to_owned()),
            ..Default::default()
        });
        review_cluster(
            ClusterWrite::Update {
                old: &old,
                new: &dkv(
                    3,
                    &format!("registry.k8s.io/etcd:{to}-0"),
                    serde_json::json!({}),
                ),
                expandable: None,
                auth_on: None,
                volume_capacity: None,
            },
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    for (from, running, to) in [
        ("3.7.3", Some("3.7.3"), "3.6.16"),
        ("3.6.16", Some("3.6.16"), "3.5.30"),
        ("3.6.16", None, "3.5.26"),
        // An unfinished upgrade undone: the members still run 3.5.
        ("3.6.16", Some("3.5.30"), "3.5.30"),
        ("3.7.3", Some("3.6.16"), "3.6.16"),
    ] {
        let verdict = review(from, running, to);
        assert!(verdict.allowed(), "{from} -> {to}: {verdict:?}");
    }
    for (from, running, to, says) in [
        ("3.6.16", Some("3.6.16"), "3.5.16", "3.5.26 or a later 3.5"),
        ("3.7.3", Some("3.7.3"), "3.5.30", "downgrade to 3.6.x first"),
        ("3.5.30", Some("3.5.30"), "3.4.23", "from 3.6 on"),
        ("3.6.16", Some("3.6.16"), "3.6.1", "older patch release"),
        // The members run 3.7: 3.5 is two minor lines down from them,
        // whatever the previous spec said.
        (
            "3.6.16",
            Some("3.7.3"),
            "3.5.30",
            "downgrade to 3.6.x first",
        ),
        // Back onto 3.5, but below the patch release the members run.
        ("3.6.16", Some("3.5.30"), "3.5.26", "older patch release"),
    ] {
        let verdict = review(from, running, to);
        assert!(!verdict.allowed(), "{from} -> {to}: {verdict:?}");
        assert!(
            verdict.message().starts_with("spec.image: ") && verdict.message().contains(says),
            "{from} -> {to}: {}",
            verdict.message()
        );
    }
}

/// A cluster as status records it: `spec_version` asked for, each member
/// reporting its version (`None`: not running), every member having last
/// run `last_good` alike.
fn running_cluster(
    spec_version: &str,
    members: &[Option<&str>],
    current: &str,
    last_good: &str,
) -> DistributedKV {
    use dkv_api::distributedkv::v1beta1::{
        DistributedKVStatus, MemberStatus, RolloutStatus, RunningSpec,
    };
    let mut cluster = dkv(
        3,
        &format!("registry.k8s.io/etcd:{spec_version}-0"),
        serde_json::json!({}),
    );
    cluster.status = Some(DistributedKVStatus {
        current_version: Some(current.to_owned()),
        members: members
            .iter()
            .enumerate()
            .map(|(i, version)| MemberStatus {
                name: format!("orders-{i}"),
                version: version.map(str::to_owned),
                healthy: version.is_some(),
                ..MemberStatus::default()
            })
            .collect(),
        rollout: Some(RolloutStatus {
            last_good: Some(RunningSpec {
                image: format!("registry.k8s.io/etcd:{last_good}-0"),
                ..RunningSpec::default()
            }),
            ..RolloutStatus::default()
        }),
        conditions: vec![crate::webhook::fixtures::condition(
            "Available",
            "True",
            "QuorumHealthy",
        )],
        ..DistributedKVStatus::default()
    });
    cluster
}

fn edit_version(old: &DistributedKV, to: &str, extra: serde_json::Value) -> AdmissionVerdict {
    review_cluster(
        ClusterWrite::Update {
            old,
            new: &dkv(3, &format!("registry.k8s.io/etcd:{to}-0"), extra),
            expandable: None,
            auth_on: None,
            volume_capacity: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    )
}

/// The trap of the issue: an image tag no registry has, accepted, never
/// ran; setting the image back to what the members run is accepted, and so
/// is any version those members could move to.
#[test]
fn an_image_that_never_ran_can_be_set_back_to_what_runs() {
    // orders-0 was restarted onto 3.5.99 and sits in ImagePullBackOff.
    let stuck = running_cluster(
        "3.5.99",
        &[None, Some("3.5.16"), Some("3.5.16")],
        "3.5.16",
        "3.5.16",
    );
    for to in ["3.5.16", "3.5.17", "3.5.30"] {
        let verdict = edit_version(&stuck, to, serde_json::json!({}));
        assert!(verdict.allowed(), "3.5.99 (never ran) -> {to}: {verdict:?}");
    }
    // With another field edited in the same write: only the image reverted.
    let verdict = edit_version(
        &stuck,
        "3.5.16",
        serde_json::json!({"resources": {"requests": {"cpu": "200m"}}}),
    );
    assert!(verdict.allowed(), "{verdict:?}");
    // Below what the members run is still a patch downgrade, said with the
    // member's version and the way back.
    let verdict = edit_version(&stuck, "3.5.1", serde_json::json!({}));
    assert_eq!(
        verdict.message(),
        "spec.image: member orders-1 runs 3.5.16 (status.members): etcd cannot be downgraded to an older patch release (3.5.16 -> 3.5.1): etcd's downgrade API moves whole minor versions; set the image back to 3.5.16 or newer"
    );
}

/// A patch upgrade half done (one member on the new release): back to the
/// release that last ran everywhere is accepted (what `onFailure:
/// Rollback` does), a release between the two is not.
#[test]
fn a_half_done_patch_upgrade_can_be_taken_back() {
    let half = running_cluster(
        "3.5.30",
        &[Some("3.5.30"), Some("3.5.16"), Some("3.5.16")],
        "3.5.16",
        "3.5.16",
    );
    assert!(edit_version(&half, "3.5.16", serde_json::json!({})).allowed());
    let between = edit_version(&half, "3.5.20", serde_json::json!({}));
    assert!(
        between.message().starts_with(
            "spec.image: member orders-0 runs 3.5.30 (status.members): etcd cannot be downgraded to an older patch release"
        ) && between.message().ends_with(
            "; 3.5.16, the version that last ran on every member (status.rollout.lastGood), is accepted too"
        ),
        "{}",
        between.message()
    );
}

/// An upgrade 3.5 -> 3.6 half done: etcd's cluster version is still 3.5
/// (its lowest member's), so the member on 3.6 may go back; the message of
/// a move etcd refuses names the member and the way back.
#[test]
fn a_half_done_minor_upgrade_goes_back_by_etcd_rules_for_a_mixed_cluster() {
    let half = running_cluster(
        "3.6.16",
        &[Some("3.6.16"), Some("3.5.30"), Some("3.5.30")],
        "3.5.30",
        "3.5.30",
    );
    for to in ["3.5.30", "3.6.16", "3.6.17"] {
        let verdict = edit_version(&half, to, serde_json::json!({}));
        assert!(verdict.allowed(), "-> {to}: {verdict:?}");
    }
    for (to, says, way_back) in [
        // The rule's own fix names 3.5.30 already.
        (
            "3.5.26",
            "member orders-1 runs 3.5.30 (status.members): etcd cannot be downgraded to an older patch release (3.5.30 -> 3.5.26): etcd's downgrade API moves whole minor versions; set the image back to 3.5.30 or newer",
            false,
        ),
        (
            "3.7.3",
            "member orders-1 runs 3.5.30 (status.members): etcd upgrades move one minor version at a time",
            true,
        ),
        (
            "3.4.23",
            "member orders-0 runs 3.6.16 (status.members): etcd downgrades move one minor version at a time",
            true,
        ),
    ] {
        let verdict = edit_version(&half, to, serde_json::json!({}));
        assert!(
            verdict.message().starts_with(&format!("spec.image: {says}"))
                && verdict.message().ends_with(
                    "; 3.5.30, the version that last ran on every member (status.rollout.lastGood), is accepted too"
                ) == way_back,
            "-> {to}: {}",
            verdict.message()
        );
    }
    // Every member on 3.6 (the rollout done, not yet recorded): 3.5 is a
    // downgrade etcd's API carries out, from 3.5.26 on.
    let done = running_cluster(
        "3.6.16",
        &[Some("3.6.16"), Some("3.6.16"), Some("3.6.16")],
        "3.6.16",
        "3.5.30",
    );
    assert!(edit_version(&done, "3.5.30", serde_json::json!({})).allowed());
    assert!(!edit_version(&done, "3.5.16", serde_json::json!({})).allowed());
}

/// A cluster that never formed ran nothing: no version rule binds it. A
/// status that records nothing of a cluster that formed (lost) falls back
/// to the previous spec.
#[test]
fn a_cluster_that_never_formed_takes_any_supported_version() {
    let mut never = dkv(3, "registry.k8s.io/etcd:3.5.99-0", serde_json::json!({}));
    never.status = Some(dkv_api::distributedkv::v1beta1::DistributedKVStatus {
        conditions: vec![crate::webhook::fixtures::condition(
            "Available",
            "False",
            "Bootstrapping",
        )],
        ..Default::default()
    });
    assert!(edit_version(&never, "3.5.16", serde_json::json!({})).allowed());
    let mut lost = never.clone();
    lost.status = None;
    assert!(!edit_version(&lost, "3.5.16", serde_json::json!({})).allowed());
}

#[test]
fn metadata_only_updates_pass_even_when_the_spec_is_invalid() {
    let stored = dkv(
        3,
        ETCD_35,
        serde_json::json!({"backup": {"destination": {"uri": "s3://bucket/"}, "schedule": "never"}}),
    );
    let mut deleting = stored.clone();
    deleting.metadata.finalizers = Some(vec![]);
    let verdict = review_cluster(
        ClusterWrite::Update {
            old: &stored,
            new: &deleting,
            expandable: None,
            auth_on: None,
            volume_capacity: None,
        },
        &RestoreSource::NotAsked,
        &defaults(),
    );
    assert!(verdict.allowed(), "{verdict:?}");
}

#[test]
fn restore_source_must_exist() {
    let new = dkv(
        3,
        ETCD_35,
        serde_json::json!({"bootstrap": {"restore": {"backupName": "nightly"}}}),
    );
    let verdict = review_cluster(
        ClusterWrite::Create(&new),
        &RestoreSource::Missing,
        &defaults(),
    );
    assert!(
        verdict.message().starts_with(
            "spec.bootstrap.restore.backupName: DistributedKVBackup \"nightly\" does not exist"
        ),
        "{verdict:?}"
    );
    assert!(
        review_cluster(
            ClusterWrite::Create(&new),
            &RestoreSource::Found { completed: true },
            &defaults()
        )
        .allowed()
    );
}

#[test]
fn a_rollout_deadline_outside_its_bounds_is_refused_naming_the_field() {
    let verdict_for = |deadline: &str| {
        let cluster = dkv(
            3,
            ETCD_35,
            serde_json::json!({"rollout": {"onFailure": "Rollback", "progressDeadline": deadline}}),
        );
        review_cluster(
            ClusterWrite::Create(&cluster),
            &RestoreSource::NotAsked,
            &defaults(),
        )
    };
    assert!(
        verdict_for("2m").allowed(),
        "{}",
        verdict_for("2m").message()
    );
    for bad in ["10s", "48h"] {
        let verdict = verdict_for(bad);
        assert!(
            !verdict.allowed()
                && verdict.message().contains("spec.rollout.progressDeadline")
                && verdict.message().contains("30s to 24h"),
            "{bad}: {}",
            verdict.message()
        );
    }
}

#[test]
fn a_demotion_needs_continuous_backup_and_a_new_source_a_recorded_promotion() {
    let backup = |continuous: bool| {
        serde_json::json!({"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily",
                           "continuous": {"enabled": continuous}})
    };
    let standby = |enabled: bool, uri: &str| serde_json::json!({"enabled": enabled, "source": {"uri": uri, "cluster": "dr/orders-dr"}});
    let spec = |continuous: bool, standby: Option<serde_json::Value>| {
        let mut extra =
            serde_json::json!({"auth": {"enabled": true}, "backup": backup(continuous)});
        if let Some(standby) = standby {
            extra["standby"] = standby;
        }
        dkv(3, ETCD_35, extra)
    };
    // A running primary demoted: refused without continuous backup, with
    // the fix; allowed with it.
    let verdict = update(
        &spec(false, None),
        &spec(false, Some(standby(true, "s3://dr/"))),
    );
    assert!(
        verdict
            .message()
            .contains("spec.standby.enabled: a demoted cluster makes its last changes durable through its own continuous backup"),
        "{}",
        verdict.message()
    );
    let verdict = update(
        &spec(true, None),
        &spec(true, Some(standby(true, "s3://dr/"))),
    );
    assert!(verdict.allowed(), "{}", verdict.message());
    // Demoted again with a new source: only once the promotion is recorded.
    let mut promoting = spec(true, Some(standby(false, "s3://dr/")));
    promoting.status =
        serde_json::from_value(serde_json::json!({"standby": {"phase": "Promoting"}})).ok();
    let moved = spec(true, Some(standby(true, "s3://elsewhere/")));
    let verdict = update(&promoting, &moved);
    assert!(
        verdict.message().contains(
            "spec.standby.source: the source can change only once the promotion is recorded"
        ),
        "{}",
        verdict.message()
    );
    let mut promoted = promoting.clone();
    promoted.status =
        serde_json::from_value(serde_json::json!({"standby": {"phase": "Promoted"}})).ok();
    assert!(update(&promoted, &moved).allowed());
}
