//! The operator's side of the contract with the member side
//! ([`dkv_member::contract`]), against the golden fixtures of every
//! released format in `crates/dkv-member/tests/contract/`:
//!
//! - what members of every build report (member-init's termination
//!   messages) is read as they meant it;
//! - what the operator of every build wrote and this one reads back (the
//!   pods' member-init arguments, the StatefulSet's annotations) is read;
//! - what this build writes (the record, member-init's arguments, the
//!   annotations) is the newest released format: a change fails here until
//!   its fixture is added (and the contract version raised when members of
//!   the build before would misread it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::cluster::build::statefulset;
use crate::cluster::membership::ObservedPod;
use crate::cluster::membership::observe::member_pods;
use crate::cluster::plan::plan;
use crate::cluster::upgrade::member_side::{GENERATION_ANNOTATION, RunningTemplate};
use crate::cluster::validate::{ValidatedCluster, validated_for_tests};

/// Every fixture of one kind, oldest first (dated or versioned names).
fn fixtures(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dkv-member/tests/contract")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json_of(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A member pod whose member-init's current run ended with `exit_code`
/// and `message` (a refusal is a crash loop: its last run holds it).
fn member_pod(name: &str, exit_code: i32, message: &str, args: &[String]) -> Arc<Pod> {
    let ended = json!({"terminated": {"exitCode": exit_code, "message": message}});
    let status = if exit_code == 0 {
        json!({"name": "member-init", "ready": true, "restartCount": 0, "image": "dkv",
               "imageID": "", "state": ended})
    } else {
        json!({"name": "member-init", "ready": false, "restartCount": 3, "image": "dkv",
               "imageID": "", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
               "lastState": ended})
    };
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {
                "initContainers": [{"name": "member-init", "image": "dkv", "args": args}],
                "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.30-0"}],
            },
            "status": {"podIP": "10.0.0.7", "initContainerStatuses": [status]},
        }))
        .unwrap_or_else(|e| panic!("test pod: {e}")),
    )
}

/// What the operator sees of one pod, with recovery epoch `e2` and
/// replacement `r7` pinned (the fixtures' values).
fn observed(pod: Arc<Pod>) -> ObservedPod {
    let mut pods = member_pods("orders", &[pod], Some("e2"), Some("r7"), "https");
    assert_eq!(pods.len(), 1);
    pods.remove(0).view
}

#[test]
fn what_members_of_every_build_report_is_read_as_they_meant_it() {
    for fixture in fixtures("messages") {
        let text = read(&fixture);
        let at = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{}: no {prefix} line", fixture.display()))
        };
        let lost = observed(member_pod("orders-2", 1, at("dkv:data-lost"), &[]));
        assert!(lost.data_lost && lost.init_refused, "{}", fixture.display());
        let forced = observed(member_pod("orders-0", 0, at("dkv:force-new-cluster"), &[]));
        assert!(
            forced.forced_new_cluster && forced.init_done && !forced.data_lost,
            "{}",
            fixture.display()
        );
        let replaced = observed(member_pod("orders-1", 0, at("dkv:replacement"), &[]));
        assert!(
            replaced.replaced && !replaced.restored,
            "{}",
            fixture.display()
        );
        let restored = observed(member_pod("orders-0", 0, at("dkv:epoch"), &[]));
        assert!(
            restored.restored && !restored.replaced && !restored.forced_new_cluster,
            "{}",
            fixture.display()
        );
    }
    // A message of another epoch or replacement is not this one's.
    let stale = member_pod(
        "orders-0",
        0,
        "dkv:epoch e1 orders-0 starts from data of this epoch",
        &[],
    );
    assert!(!observed(stale).restored);
}

#[test]
fn the_member_init_arguments_of_every_operator_build_are_read_back() {
    for fixture in fixtures("args") {
        let args: Vec<String> = read(&fixture).lines().map(str::to_owned).collect();
        let pods = member_pods(
            "orders",
            &[member_pod("orders-1", 0, "", &args)],
            None,
            None,
            "https",
        );
        assert_eq!(pods[0].bootstrap_size, Some(3), "{}", fixture.display());
    }
}

/// The cluster of the fixtures: `orders` in `shop`, three members of etcd
/// 3.5.30 with TLS and the etcd settings the newest arguments fixture has.
fn fixture_cluster() -> ValidatedCluster {
    let mut cluster = validated_for_tests(json!({
        "size": 3,
        "image": "registry.k8s.io/etcd:3.5.30-0",
        "tls": {"enabled": true},
        "etcd": {
            "heartbeatInterval": "200ms",
            "electionTimeout": "2s",
            "logLevel": "warn",
            "extraArgs": {"experimental-peer-skip-client-san-verification": "true"},
        },
    }));
    cluster.generation = Some(4);
    cluster.restarted_at = Some("2026-12-01T10:00:00Z".to_owned());
    cluster
}

fn built_statefulset() -> StatefulSet {
    let cluster = fixture_cluster();
    let mut plan = plan(&cluster, None, None, &Default::default());
    plan.tls_serial = Some("4f2a".to_owned());
    statefulset::build(&cluster, &plan)
}

#[test]
fn this_build_hands_member_init_the_newest_argument_format() {
    let newest = fixtures("args").pop().unwrap_or_default();
    let text = read(&newest);
    let released: Vec<String> = text.lines().map(str::to_owned).collect();
    let sts = built_statefulset();
    let built = sts
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .and_then(|c| c.iter().find(|c| c.name == "member-init"))
        .and_then(|c| c.args.clone())
        .unwrap_or_default();
    assert_eq!(
        built,
        released,
        "member-init's arguments for the fixtures' cluster changed: add a fixture of the new format (dated) to {}",
        newest
            .parent()
            .map(Path::display)
            .map(|d| d.to_string())
            .unwrap_or_default()
    );
}

/// The keys of a JSON object, and of the objects of its arrays, as
/// `path.key`.
fn keys(value: &Value, path: &str, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{path}.{key}");
                keys(inner, &here, out);
                out.insert(here);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|i| keys(i, &format!("{path}[]"), out)),
        _ => {}
    }
}

#[test]
fn this_build_writes_the_newest_record_format() {
    let newest = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../dkv-member/tests/contract/record/v{}.json",
        dkv_member::contract::VERSION
    ));
    let mut released = BTreeSet::new();
    keys(&json_of(&newest), "", &mut released);
    // A record with every optional field this build writes.
    let cluster = fixture_cluster();
    let mut record = plan(&cluster, None, None, &Default::default()).record;
    record.epoch = Some("e1".to_owned());
    record.recover_from = Some("orders-0".to_owned());
    record.members[1].replacement = Some("r7".to_owned());
    let built = built_record(&cluster, record);
    let mut written = BTreeSet::new();
    keys(&built, "", &mut written);
    assert_eq!(written, released, "{}", newest.display());
    assert_eq!(built["contract"], json!(dkv_member::contract::VERSION));
}

/// The record as the members' ConfigMap carries it.
fn built_record(cluster: &ValidatedCluster, record: dkv_member::record::MembershipRecord) -> Value {
    let mut plan = plan(cluster, None, None, &Default::default());
    plan.record = record;
    let configmap = crate::cluster::build::members::build(cluster, &plan);
    let text = configmap
        .data
        .as_ref()
        .and_then(|d| d.get(dkv_member::record::RECORD_KEY))
        .cloned()
        .unwrap_or_default();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the built record: {e}"))
}

#[test]
fn the_statefulsets_of_every_operator_build_are_read_back() {
    for fixture in fixtures("statefulset") {
        let sts: StatefulSet = serde_json::from_value(json_of(&fixture))
            .unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
        let running = RunningTemplate::of(&sts);
        assert_eq!(
            running,
            RunningTemplate {
                member_side: Some("5c1f0e9d2a7b3c44".to_owned()),
                image: Some("ghcr.io/dkv-io/dkv:0.1.0".to_owned()),
                generation: Some(4),
                restarted_at: Some("2026-12-01T10:00:00Z".to_owned()),
                tls_serial: Some("4f2a".to_owned()),
                replicas: Some(3),
            },
            "{}",
            fixture.display()
        );
    }
}

#[test]
fn this_build_annotates_its_statefulsets_as_the_newest_fixture() {
    let newest = fixtures("statefulset").pop().unwrap_or_default();
    let released: StatefulSet = serde_json::from_value(json_of(&newest))
        .unwrap_or_else(|e| panic!("{}: {e}", newest.display()));
    let built = built_statefulset();
    let annotation_keys = |sts: &StatefulSet| {
        let template = sts
            .spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.clone())
            .unwrap_or_default();
        let own = sts.metadata.annotations.clone().unwrap_or_default();
        (
            template.into_keys().collect::<BTreeSet<_>>(),
            own.into_keys().collect::<BTreeSet<_>>(),
        )
    };
    let (built_template, built_own) = annotation_keys(&built);
    let (released_template, released_own) = annotation_keys(&released);
    assert_eq!(built_template, released_template, "{}", newest.display());
    assert_eq!(built_own, released_own, "{}", newest.display());
    assert!(built_own.contains(GENERATION_ANNOTATION));
}
