//! Round trips over generated objects, and the conversions spelled out.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use proptest::collection::btree_map;
use proptest::option;
use proptest::prelude::*;
use serde_json::json;

use super::*;

fn metadata() -> impl Strategy<Value = Value> {
    (
        "[a-z][a-z0-9-]{0,12}",
        option::of(btree_map("[a-z]{1,6}\\.example/[a-z]{1,6}", ".{0,12}", 1..4)),
        option::of(btree_map("[a-z]{1,8}", "[a-z0-9]{0,8}", 1..3)),
    )
        .prop_map(|(name, annotations, labels)| {
            let mut meta = json!({"name": name, "namespace": "shop", "uid": "u-1", "resourceVersion": "7", "generation": 2});
            if let Some(a) = annotations {
                meta["annotations"] = json!(a);
            }
            if let Some(l) = labels {
                meta["labels"] = json!(l);
            }
            meta
        })
}

fn schedule_image_final() -> impl Strategy<Value = (String, Option<String>, Option<bool>)> {
    (
        prop_oneof![
            Just("0 * * * *".to_owned()),
            Just("@daily".to_owned()),
            "[0-9 */]{1,14}"
        ],
        option::of("[a-z./:-]{1,20}"),
        option::of(any::<bool>()),
    )
}

fn credentials() -> impl Strategy<Value = Option<String>> {
    option::of("[a-z][a-z0-9-]{0,10}")
}

fn alpha_backup() -> impl Strategy<Value = Value> {
    (
        "s3://[a-z0-9]{3,8}(/[a-z0-9/]{0,10})?",
        schedule_image_final(),
        option::of(1..=3650i32),
        credentials(),
    )
        .prop_map(|(s3_path, (schedule, image, final_backup), days, secret)| {
            let backup = v1alpha1::BackupSpec {
                s3_path,
                schedule,
                backup_image: image,
                retention_days: days,
                credentials_secret: secret,
                final_backup_on_delete: final_backup,
            };
            serde_json::to_value(backup).unwrap_or_default()
        })
}

fn max_age() -> impl Strategy<Value = String> {
    prop_oneof![
        (1..=400u32).prop_map(|d| format!("{d}d")),
        (1..=9999u32).prop_map(|h| format!("{h}h")),
        // Not valid by the schema, but conversion must still keep it.
        "[a-z0-9]{0,4}",
    ]
}

fn beta_backup() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            "s3://[a-z0-9]{3,8}(/[a-z0-9/]{0,10})?",
            "gs://[a-z0-9]{3,8}/[a-z0-9/]{0,10}",
            "az://[a-z0-9]{3,8}/[a-z0-9/]{0,10}",
            "file:///[a-z0-9/]{1,12}",
        ],
        credentials(),
        schedule_image_final(),
        option::of((option::of(1..=100i32), option::of(max_age()))),
        option::of((
            any::<bool>(),
            option::of("[1-9][0-9]{0,2}s"),
            option::of("[1-9][0-9]{0,2}Mi"),
        )),
        (
            option::of(prop_oneof![
                Just(v1beta1::Compression::Zstd),
                Just(v1beta1::Compression::None)
            ]),
            option::of(("[a-z]{1,8}", option::of("[a-z]{1,8}"))),
            option::of(any::<bool>()),
        ),
    )
        .prop_map(
            |(
                uri,
                secret,
                (schedule, image, final_backup),
                retention,
                continuous,
                (compression, encryption, verify),
            )| {
                let backup = v1beta1::BackupSpec {
                    destination: v1beta1::BackupDestination {
                        uri,
                        credentials_secret: secret,
                    },
                    schedule,
                    backup_image: image,
                    retention: retention.map(|(max_backups, max_age)| v1beta1::BackupRetention {
                        max_backups,
                        max_age,
                    }),
                    final_backup_on_delete: final_backup,
                    continuous: continuous.map(|(enabled, interval, max_bytes)| {
                        v1beta1::ContinuousBackup {
                            // Chain limits ride along whenever an interval
                            // is set, so the round trip covers them.
                            new_chain: interval.as_ref().map(|_| v1beta1::NewChain {
                                every: Some("12h".to_owned()),
                                change_percent: Some(50),
                                max_revisions: Some(20_000),
                            }),
                            enabled,
                            interval,
                            max_segment_bytes: max_bytes.map(Quantity),
                        }
                    }),
                    compression,
                    encryption: encryption.map(|(name, key)| v1beta1::BackupEncryption {
                        key_secret: v1beta1::KeySecretReference { name, key },
                    }),
                    verify,
                };
                serde_json::to_value(backup).unwrap_or_default()
            },
        )
}

/// A whole object of `api_version` with `backup` (if any) and the fields the
/// versions share drawn at random.
fn object(
    api_version: &'static str,
    backup: impl Strategy<Value = Value>,
) -> impl Strategy<Value = Value> {
    (
        metadata(),
        1..=9i32,
        option::of("3\\.[0-9]\\.[0-9]{1,2}"),
        option::of(("[a-z]{1,8}", 1..100u32, any::<bool>())),
        option::of(backup),
        option::of((
            any::<bool>(),
            10..1000i32,
            option::of((any::<bool>(), 0..=86_400i32)),
        )),
        option::of((
            0..=5i32,
            prop_oneof![Just("Running"), Just("Creating"), Just("Hibernated")],
            option::of(("node-[1-9]", "zone-[abc]", any::<bool>())),
        )),
        any::<bool>(),
    )
        .prop_map(
            move |(metadata, size, version, storage, backup, recovery, status, hibernation)| {
                let mut spec = json!({"size": size, "image": "registry.k8s.io/etcd:3.5.16-0"});
                if let Some(v) = version {
                    spec["version"] = json!(v);
                }
                if let Some((class, gi, delete)) = storage {
                    spec["storage"] = json!({"storageClassName": class, "size": format!("{gi}Gi"), "reclaimPolicy": if delete { "Delete" } else { "Retain" }});
                }
                if let Some(b) = backup {
                    spec["backup"] = b;
                }
                if let Some((manual, after, lost_node)) = recovery {
                    spec["recovery"] = json!({"policy": if manual { "Manual" } else { "ForceNewCluster" }, "afterSeconds": after});
                    if let Some((replace, after)) = lost_node {
                        spec["recovery"]["lostNode"] = json!({"policy": if replace { "Replace" } else { "Wait" }, "afterSeconds": after});
                    }
                }
                // `false` is the default and never stored.
                if hibernation {
                    spec["hibernation"] = json!(true);
                }
                let mut object = json!({"apiVersion": api_version, "kind": "DistributedKV", "metadata": metadata, "spec": spec});
                if let Some((ready, phase, placed)) = status {
                    object["status"] = json!({"readyReplicas": ready, "replicas": 3, "phase": phase});
                    if let Some((node, zone, lost)) = placed {
                        let mut member = json!({"name": "x-0", "learner": false, "healthy": !lost, "node": node, "zone": zone});
                        if lost {
                            member["nodeLostSince"] = json!("2026-11-26T08:00:00Z");
                        }
                        object["status"]["members"] = json!([member]);
                    }
                }
                object
            },
        )
}

fn round_trip(object: &Value, via: &str) -> Result<(Value, Value), ConversionError> {
    let from = object["apiVersion"].as_str().unwrap_or_default().to_owned();
    let there = convert(object, via)?;
    let back = convert(&there, &from)?;
    Ok((there, back))
}

proptest! {
    #[test]
    fn v1alpha1_to_v1beta1_and_back_is_identity(alpha in object(V1ALPHA1, alpha_backup())) {
        let (beta, back) = round_trip(&alpha, V1BETA1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(serde_json::from_value::<v1beta1::DistributedKV>(beta.clone()).is_ok(), "{beta}");
        prop_assert_eq!(back, alpha);
    }

    #[test]
    fn v1beta1_to_v1alpha1_and_back_is_identity(beta in object(V1BETA1, beta_backup())) {
        let (alpha, back) = round_trip(&beta, V1ALPHA1).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(serde_json::from_value::<v1alpha1::DistributedKV>(alpha.clone()).is_ok(), "{alpha}");
        prop_assert_eq!(back, beta);
    }
}

fn spec_backup(object: &Value) -> &Value {
    &object["spec"]["backup"]
}

fn preserved(object: &Value) -> Option<Value> {
    object["metadata"]["annotations"][BACKUP_ANNOTATION]
        .as_str()
        .and_then(|s| serde_json::from_str(s).ok())
}

fn beta_with(backup: Value) -> Value {
    json!({"apiVersion": V1BETA1, "kind": "DistributedKV", "metadata": {"name": "x"}, "spec": {"size": 3, "image": "etcd", "backup": backup}})
}

#[test]
fn retention_days_become_max_age_in_days_and_nothing_is_annotated() {
    let alpha = json!({"apiVersion": V1ALPHA1, "kind": "DistributedKV", "metadata": {"name": "x"},
        "spec": {"size": 3, "image": "etcd", "backup": {"s3Path": "s3://bucket/dkv/", "schedule": "@daily", "retentionDays": 7, "credentialsSecret": "s3"}}});
    let beta = convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec_backup(&beta),
        &json!({"destination": {"uri": "s3://bucket/dkv/", "credentialsSecret": "s3"}, "schedule": "@daily", "retention": {"maxAge": "7d"}})
    );
    let alpha_again = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alpha_again, alpha);
    assert!(alpha_again["metadata"].get("annotations").is_none());
}

#[test]
fn what_v1alpha1_cannot_say_goes_to_the_annotation() {
    let beta = beta_with(
        json!({"destination": {"uri": "gs://bucket/dkv/"}, "schedule": "@daily", "retention": {"maxBackups": 10, "maxAge": "36h"}}),
    );
    let alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    // 36h rounds up: a v1alpha1 reader never prunes what v1beta1 keeps.
    assert_eq!(
        spec_backup(&alpha),
        &json!({"s3Path": "gs://bucket/dkv/", "schedule": "@daily", "retentionDays": 2})
    );
    assert_eq!(
        preserved(&alpha),
        Some(
            json!({"destination": {"uri": "gs://bucket/dkv/"}, "retention": {"maxBackups": 10, "maxAge": "36h"}})
        )
    );
    assert_eq!(
        convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}")),
        beta
    );
}

#[test]
fn hours_that_are_whole_days_keep_their_spelling() {
    let beta = beta_with(
        json!({"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily", "retention": {"maxAge": "168h"}}),
    );
    let alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(spec_backup(&alpha)["retentionDays"], json!(7));
    assert!(preserved(&alpha).is_some(), "168h would come back as 7d");
    assert_eq!(
        convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}")),
        beta
    );
}

#[test]
fn an_edit_through_v1alpha1_wins_over_the_annotation() {
    let beta = beta_with(
        json!({"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily", "retention": {"maxBackups": 5, "maxAge": "36h"}}),
    );
    let mut alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    alpha["spec"]["backup"]["retentionDays"] = json!(30);
    let edited = convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec_backup(&edited),
        &json!({"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "@daily", "retention": {"maxAge": "30d"}})
    );
    assert!(edited["metadata"].get("annotations").is_none());

    // Only the schedule changed: the annotation still describes the backup.
    let mut alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    alpha["spec"]["backup"]["schedule"] = json!("@hourly");
    let edited = convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec_backup(&edited)["retention"],
        json!({"maxBackups": 5, "maxAge": "36h"})
    );
    assert_eq!(spec_backup(&edited)["schedule"], json!("@hourly"));
}

#[test]
fn continuous_backup_compression_and_encryption_survive_an_edit_through_v1alpha1() {
    let beta = beta_with(json!({
        "destination": {"uri": "s3://bucket/dkv/"},
        "schedule": "@daily",
        "continuous": {"enabled": true, "interval": "30s", "maxSegmentBytes": "8Mi"},
        "compression": "None",
        "encryption": {"keySecret": {"name": "backup-key"}},
    }));
    let mut alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    assert!(alpha["spec"]["backup"].get("continuous").is_none());
    alpha["spec"]["backup"]["s3Path"] = json!("s3://other/dkv/");
    let edited = convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        spec_backup(&edited),
        &json!({
            "destination": {"uri": "s3://other/dkv/"},
            "schedule": "@daily",
            "continuous": {"enabled": true, "interval": "30s", "maxSegmentBytes": "8Mi"},
            "compression": "None",
            "encryption": {"keySecret": {"name": "backup-key"}},
        })
    );
}

#[test]
fn other_annotations_are_kept_and_unknown_versions_refused() {
    let mut beta = beta_with(json!({"destination": {"uri": "az://c/dkv/"}, "schedule": "@daily"}));
    beta["metadata"]["annotations"] = json!({"team": "orders"});
    let alpha = convert(&beta, V1ALPHA1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alpha["metadata"]["annotations"]["team"], json!("orders"));
    assert_eq!(
        convert(&alpha, V1BETA1).unwrap_or_else(|e| panic!("{e}")),
        beta
    );

    let err = convert(&beta, "dkv.io/v2").map(|_| ()).unwrap_err();
    assert!(
        err.to_string()
            .contains("cannot convert DistributedKV from dkv.io/v1beta1 to dkv.io/v2"),
        "{err}"
    );
    let broken = beta_with(json!({"schedule": "@daily"}));
    let err = convert(&broken, V1ALPHA1).map(|_| ()).unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.backup is not a v1beta1 backup spec"),
        "{err}"
    );
}
