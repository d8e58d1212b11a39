//! The pure middle of the reconcile pipeline (validate → plan → build), driven
//! from YAML fixtures with no API server and no etcd.

use std::collections::BTreeMap;

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::KeySecretReference;
use dkv_operator::cluster::build::{self, DesiredChildren};
use dkv_operator::cluster::plan::{self, Plan};
use dkv_operator::cluster::validate::{self, Defaults, Facts, ValidatedCluster};
use dkv_operator::etcd_version::EtcdVersion;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use pretty_assertions::assert_eq;

const OPERATOR_IMAGE: &str = "ghcr.io/dkv-io/dkv:test";

fn fixture(name: &str) -> DistributedKV {
    let path = format!("{}/tests/fixtures/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    serde_saphyr::from_str(&text).unwrap()
}

fn defaults() -> Defaults {
    Defaults {
        operator_image: OPERATOR_IMAGE.to_owned(),
    }
}

fn facts() -> Facts {
    Facts {
        storage_classes: Some(vec!["fast-ssd".into(), "standard".into()]),
        running: Default::default(),
        deployed_storage_size: None,
        volume_capacity: None,
    }
}

fn validated(dkv: &DistributedKV) -> ValidatedCluster {
    validate::validate(dkv, &facts(), &defaults()).unwrap()
}

fn prepare(dkv: &DistributedKV) -> (ValidatedCluster, Plan, DesiredChildren) {
    let cluster = validated(dkv);
    let plan = plan::plan(&cluster, None, None, &Default::default());
    let prepared = build::build(&cluster, &plan);
    (cluster, plan, prepared)
}

fn container<'a>(sts: &'a StatefulSet, name: &str) -> &'a Container {
    let pod = sts.spec.template.spec.as_ref().unwrap();
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .unwrap()
}

fn probe_path(probe: &Probe) -> Option<String> {
    probe.http_get.as_ref().and_then(|h| h.path.clone())
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn every_child_is_owned_by_the_cluster_and_labelled() {
    let dkv = fixture("full");
    let (_, _, prepared) = prepare(&dkv);
    let metas = [
        &prepared.statefulset.metadata,
        &prepared.peer_service.metadata,
        &prepared.client_service.as_ref().unwrap().metadata,
        &prepared.pdb.metadata,
        &prepared.backup_cronjob.as_ref().unwrap().metadata,
    ];
    for meta in metas {
        let name = meta.name.clone().unwrap();
        assert_eq!(meta.namespace.as_deref(), Some("shop"), "{name}");
        let owners = meta.owner_references.as_ref().unwrap();
        assert_eq!(owners.len(), 1, "{name}");
        let owner = &owners[0];
        assert_eq!(owner.api_version, "dkv.io/v1beta1");
        assert_eq!(owner.kind, "DistributedKV");
        assert_eq!(owner.name, "orders");
        assert_eq!(owner.uid, "7d3c4f1e-0000-4000-8000-000000000002");
        assert_eq!(owner.controller, Some(true), "{name}");
        assert_eq!(owner.block_owner_deletion, Some(true), "{name}");
        let l = meta.labels.as_ref().unwrap();
        assert_eq!(l["app.kubernetes.io/name"], "distributedkv", "{name}");
        assert_eq!(l["app.kubernetes.io/instance"], "orders", "{name}");
        assert_eq!(l["app.kubernetes.io/managed-by"], "dkv-operator", "{name}");
        assert_eq!(l["dkv.io/cluster"], "orders", "{name}");
    }
}

#[test]
fn statefulset_runs_members_in_parallel_with_operator_controlled_updates() {
    let (_, _, prepared) = prepare(&fixture("full"));
    let sts = &prepared.statefulset;
    assert_eq!(sts.metadata.name.as_deref(), Some("orders"));
    let annotations = sts.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations["dkv.io/bootstrap-size"], "5");
    assert_eq!(annotations["dkv.io/etcd-version"], "3.5.16");
    let spec = &sts.spec;
    assert_eq!(spec.replicas, Some(5));
    assert_eq!(spec.service_name.as_deref(), Some("orders-peer"));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    assert_eq!(
        spec.update_strategy.as_ref().unwrap().type_.as_deref(),
        Some("OnDelete")
    );
    let retention = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .unwrap();
    assert_eq!(retention.when_deleted.as_deref(), Some("Retain"));
    assert_eq!(retention.when_scaled.as_deref(), Some("Retain"));
    assert_eq!(
        spec.selector.match_labels.clone().unwrap(),
        labels(&[
            ("app.kubernetes.io/instance", "orders"),
            ("app.kubernetes.io/name", "distributedkv")
        ])
    );

    let template_meta = spec.template.metadata.as_ref().unwrap();
    let template_labels = template_meta.labels.as_ref().unwrap();
    assert_eq!(
        template_labels["team"], "payments",
        "user pod labels are kept"
    );
    assert_eq!(template_labels["app.kubernetes.io/instance"], "orders");
    assert_eq!(
        template_meta.annotations.as_ref().unwrap()["prometheus.io/scrape"],
        "true"
    );
    let pod = spec.template.spec.as_ref().unwrap();
    assert_eq!(pod.enable_service_links, Some(false));
    assert_eq!(
        pod.node_selector.clone().unwrap(),
        labels(&[("disktype", "ssd")])
    );
    assert_eq!(
        pod.tolerations.as_ref().unwrap()[0].key.as_deref(),
        Some("dedicated")
    );
    assert_eq!(pod.priority_class_name.as_deref(), Some("critical-storage"));
    let anti = pod
        .affinity
        .as_ref()
        .unwrap()
        .pod_anti_affinity
        .as_ref()
        .unwrap();
    let preferred = anti
        .preferred_during_scheduling_ignored_during_execution
        .as_ref()
        .unwrap();
    assert_eq!(
        preferred[0].pod_affinity_term.topology_key,
        "kubernetes.io/hostname"
    );
}

#[test]
fn pvc_template_comes_from_spec_storage() {
    let (_, _, prepared) = prepare(&fixture("full"));
    let claims = prepared
        .statefulset
        .spec
        .volume_claim_templates
        .as_ref()
        .unwrap();
    assert_eq!(claims.len(), 1);
    let claim = &claims[0];
    assert_eq!(claim.metadata.name.as_deref(), Some("data"));
    assert_eq!(
        claim.metadata.labels.as_ref().unwrap()["dkv.io/cluster"],
        "orders"
    );
    let spec = claim.spec.as_ref().unwrap();
    assert_eq!(spec.storage_class_name.as_deref(), Some("fast-ssd"));
    assert_eq!(
        spec.access_modes.clone().unwrap(),
        vec!["ReadWriteOnce".to_owned()]
    );
    assert_eq!(
        spec.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0,
        "20Gi"
    );
    let volumes = prepared
        .statefulset
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .clone()
        .unwrap();
    assert!(
        volumes.iter().all(|v| v.name != "data"),
        "the claim provides the data volume"
    );
}

#[test]
fn without_storage_members_use_an_empty_dir() {
    let (_, _, prepared) = prepare(&fixture("minimal"));
    assert!(prepared.statefulset.spec.volume_claim_templates.is_none());
    let volumes = prepared
        .statefulset
        .spec
        .template
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .clone()
        .unwrap();
    let data = volumes.iter().find(|v| v.name == "data").unwrap();
    assert!(data.empty_dir.is_some());
}

#[test]
fn etcd_container_reads_its_config_and_is_probed_on_the_health_endpoint() {
    let (_, _, prepared) = prepare(&fixture("full"));
    let etcd = container(&prepared.statefulset, "etcd");
    assert_eq!(etcd.image.as_deref(), Some("quay.io/coreos/etcd:v3.5.16"));
    assert_eq!(etcd.command.clone().unwrap(), vec!["etcd".to_owned()]);
    assert_eq!(
        etcd.args.clone().unwrap(),
        vec!["--config-file=/var/run/dkv/etcd.conf.yml".to_owned()]
    );
    let ports: Vec<(String, i32)> = etcd
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.container_port))
        .collect();
    assert_eq!(
        ports,
        vec![
            ("client".into(), 2379),
            ("peer".into(), 2380),
            ("metrics".into(), 2381)
        ]
    );
    let readiness = etcd.readiness_probe.as_ref().unwrap();
    assert_eq!(probe_path(readiness).as_deref(), Some("/health"));
    assert_eq!(
        readiness.http_get.as_ref().unwrap().port,
        IntOrString::Int(2381)
    );
    let liveness = etcd.liveness_probe.as_ref().unwrap();
    assert_eq!(
        probe_path(liveness).as_deref(),
        Some("/health?exclude=NOSPACE&serializable=true"),
        "liveness must not depend on quorum"
    );
    let startup = etcd.startup_probe.as_ref().unwrap();
    assert_eq!(
        startup.period_seconds,
        Some(1),
        "readiness waits for the startup probe: it must pass soon after etcd answers"
    );
    assert!(
        startup.period_seconds.unwrap() * startup.failure_threshold.unwrap() >= 300,
        "a member catching up from a large snapshot has minutes to start"
    );
    let resources = etcd.resources.as_ref().unwrap();
    assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "500m");
    assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "2Gi");
    let mounts: Vec<(&str, &str)> = etcd
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert_eq!(
        mounts,
        vec![("data", "/var/lib/etcd"), ("etcd-config", "/var/run/dkv")]
    );
}

#[test]
fn etcd_3_4_liveness_does_not_use_the_quorum_health_check() {
    let mut dkv = fixture("minimal");
    dkv.spec.image = "quay.io/coreos/etcd:v3.4.23".into();
    let (_, _, prepared) = prepare(&dkv);
    let etcd = container(&prepared.statefulset, "etcd");
    let liveness = etcd.liveness_probe.as_ref().unwrap();
    assert!(liveness.http_get.is_none());
    assert_eq!(
        liveness.tcp_socket.as_ref().unwrap().port,
        IntOrString::Int(2379)
    );
}

#[test]
fn member_init_gets_the_bootstrap_parameters() {
    let (cluster, _, prepared) = prepare(&fixture("full"));
    let init = container(&prepared.statefulset, "member-init");
    assert_eq!(init.image.as_deref(), Some(OPERATOR_IMAGE));
    let args = init.args.clone().unwrap();
    let expected = [
        "member-init".to_owned(),
        "--cluster=orders".to_owned(),
        "--peer-service=orders-peer".to_owned(),
        "--bootstrap-size=5".to_owned(),
        format!("--initial-cluster-token=shop-orders-{}", cluster.uid),
        "--data-dir=/var/lib/etcd/data".to_owned(),
        "--config-file=/var/run/dkv/etcd.conf.yml".to_owned(),
        "--quota-backend-bytes=4294967296".to_owned(),
        "--auto-compaction-mode=revision".to_owned(),
        "--auto-compaction-retention=5000".to_owned(),
        "--etcd-version=3.5.16".to_owned(),
        "--corrupt-check-interval=5m".to_owned(),
        "--members-file=/etc/dkv/members/members.json".to_owned(),
    ];
    assert_eq!(args, expected);
    let mounts: Vec<(&str, &str)> = init
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str()))
        .collect();
    assert!(
        mounts.contains(&("members", "/etc/dkv/members")),
        "{mounts:?}"
    );
    let env: Vec<(String, String)> = init
        .env
        .iter()
        .flatten()
        .map(|e| {
            (
                e.name.clone(),
                e.value_from
                    .as_ref()
                    .unwrap()
                    .field_ref
                    .as_ref()
                    .unwrap()
                    .field_path
                    .clone(),
            )
        })
        .collect();
    assert_eq!(
        env,
        vec![
            ("POD_NAME".into(), "metadata.name".into()),
            ("POD_NAMESPACE".into(), "metadata.namespace".into()),
            ("POD_IP".into(), "status.podIP".into()),
        ]
    );
}

#[test]
fn services_give_peers_stable_names_and_clients_ready_members() {
    let (_, _, prepared) = prepare(&fixture("minimal"));
    let peer = prepared.peer_service.spec.as_ref().unwrap();
    assert_eq!(
        prepared.peer_service.metadata.name.as_deref(),
        Some("orders-peer")
    );
    assert_eq!(peer.cluster_ip.as_deref(), Some("None"));
    assert_eq!(peer.publish_not_ready_addresses, Some(true));
    let peer_ports: Vec<(String, i32)> = peer
        .ports
        .iter()
        .flatten()
        .map(|p| (p.name.clone().unwrap(), p.port))
        .collect();
    assert_eq!(
        peer_ports,
        vec![("peer".into(), 2380), ("client".into(), 2379)]
    );

    let client_service = prepared.client_service.as_ref().unwrap();
    let client = client_service.spec.as_ref().unwrap();
    assert_eq!(
        client_service.metadata.name.as_deref(),
        Some("orders-client")
    );
    assert_eq!(client.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        client.publish_not_ready_addresses, None,
        "clients only reach ready members"
    );
    assert_eq!(client.ports.as_ref().unwrap()[0].port, 2379);
    assert_eq!(client.selector, peer.selector);
    assert_eq!(
        client.selector.clone().unwrap(),
        prepared
            .statefulset
            .spec
            .selector
            .match_labels
            .clone()
            .unwrap()
    );
}

#[test]
fn pdb_keeps_quorum_for_every_size() {
    let expected_quorum = [1, 2, 2, 3, 3, 4, 4, 5, 5];
    for size in 1..=9 {
        let mut dkv = fixture("minimal");
        dkv.spec.size = size;
        let (_, plan, prepared) = prepare(&dkv);
        assert_eq!(plan.replicas, size);
        assert_eq!(prepared.statefulset.spec.replicas, Some(size));
        let pdb = prepared.pdb.spec.as_ref().unwrap();
        assert_eq!(
            pdb.min_available,
            Some(IntOrString::Int(expected_quorum[(size - 1) as usize])),
            "size {size}"
        );
        assert_eq!(pdb.max_unavailable, None);
        assert_eq!(
            pdb.selector.as_ref().unwrap().match_labels,
            prepared.statefulset.spec.selector.match_labels
        );
        let init = container(&prepared.statefulset, "member-init");
        assert!(
            init.args
                .as_ref()
                .unwrap()
                .contains(&format!("--bootstrap-size={size}")),
            "size {size}"
        );
    }
}

#[test]
fn backup_cronjob_exists_only_when_backups_are_configured() {
    let (_, _, minimal) = prepare(&fixture("minimal"));
    assert!(minimal.backup_cronjob.is_none());

    let (_, _, full) = prepare(&fixture("full"));
    let cronjob = full.backup_cronjob.unwrap();
    assert_eq!(cronjob.metadata.name.as_deref(), Some("orders-backup"));
    let spec = &cronjob.spec;
    assert_eq!(spec.schedule, "0 */6 * * *");
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(spec.time_zone.as_deref(), Some("Etc/UTC"));
    assert_eq!(spec.successful_jobs_history_limit, Some(3));
    assert_eq!(spec.failed_jobs_history_limit, Some(3));
    let pod = spec
        .job_template
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let agent = &pod.containers[0];
    assert_eq!(
        agent.image.as_deref(),
        Some(OPERATOR_IMAGE),
        "backupImage defaults to the operator image"
    );
    assert_eq!(
        agent.args.clone().unwrap(),
        vec![
            "backup".to_owned(),
            "--cluster=orders".to_owned(),
            "--destination=s3://dkv-backups/orders/".to_owned(),
        ],
        "retention is the operator's job, not the agent's"
    );
    let env_from = agent.env_from.as_ref().unwrap();
    assert_eq!(env_from[0].secret_ref.as_ref().unwrap().name, "s3-creds");
    // The agent's pods are not members: the members' selector (Services,
    // PDB, StatefulSet, anti-affinity) must not match them.
    let pod_labels = spec
        .job_template
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    let selector = dkv_api::labels::selector_labels("orders");
    assert!(
        !selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
        "{pod_labels:?}"
    );
    assert_eq!(pod_labels["app.kubernetes.io/component"], "backup");
    assert_eq!(pod_labels["dkv.io/cluster"], "orders");
}

#[test]
fn an_explicit_backup_image_is_used() {
    let mut dkv = fixture("full");
    dkv.spec.backup.as_mut().unwrap().backup_image = Some("example.com/dkv:custom".into());
    let (_, _, prepared) = prepare(&dkv);
    let cronjob = prepared.backup_cronjob.unwrap();
    let pod = cronjob
        .spec
        .job_template
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("example.com/dkv:custom")
    );
}

#[test]
fn etcd_defaults_apply_when_spec_etcd_is_absent() {
    let cluster = validated(&fixture("minimal"));
    assert_eq!(cluster.etcd.quota_backend_bytes, 2 * 1024 * 1024 * 1024);
    assert_eq!(cluster.etcd.auto_compaction_mode, "periodic");
    assert_eq!(cluster.etcd.auto_compaction_retention, "1h");
    assert_eq!(cluster.version, EtcdVersion::new(3, 5, 16));
}

#[test]
fn invalid_spec_names_every_field_and_the_fix() {
    let err = validate::validate(&fixture("invalid"), &facts(), &defaults()).unwrap_err();
    let fields: Vec<&str> = err.0.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "metadata.name",
            "spec.size",
            "spec.version",
            "spec.storage.storageClassName",
            "spec.storage.size",
            "spec.backup.destination.uri",
            "spec.backup.schedule",
            "spec.etcd.quotaBackendBytes",
            "spec.etcd.autoCompactionRetention",
        ]
    );
    let text = err.to_string();
    assert!(text.contains("StorageClass \"missing-class\" does not exist; create it or use one of: fast-ssd, standard"), "{text}");
    assert!(text.contains("must be between 1 and 9 (got 12)"), "{text}");
    assert!(text.contains("set spec.version"), "{text}");
}

#[test]
fn a_defrag_schedule_and_threshold_are_checked_and_carried() {
    let mut dkv = fixture("minimal");
    dkv.spec.maintenance = serde_json::from_value(serde_json::json!(
        {"defrag": {"schedule": "0 3 * * *"}}
    ))
    .unwrap();
    let cluster = validated(&dkv);
    let defrag = cluster.defrag.unwrap();
    assert_eq!(defrag.schedule.as_str(), "0 3 * * *");
    assert_eq!(defrag.threshold_percent, 25, "the default");

    dkv.spec.maintenance = serde_json::from_value(serde_json::json!(
        {"defrag": {"schedule": "every night", "thresholdPercent": 0}}
    ))
    .unwrap();
    let err = validate::validate(&dkv, &facts(), &defaults()).unwrap_err();
    let fields: Vec<&str> = err.0.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "spec.maintenance.defrag.schedule",
            "spec.maintenance.defrag.thresholdPercent"
        ]
    );
    assert!(err.to_string().contains("a schedule has five"), "{err}");
}

#[test]
fn a_version_change_may_not_skip_a_minor_or_go_down() {
    let mut dkv = fixture("minimal");
    let deployed = |v| Facts {
        running: validate::RunningVersions {
            current: Some(v),
            ..Default::default()
        },
        ..facts()
    };

    dkv.spec.image = "registry.k8s.io/etcd:3.6.0-0".into();
    let err =
        validate::validate(&dkv, &deployed(EtcdVersion::new(3, 4, 23)), &defaults()).unwrap_err();
    assert_eq!(err.0[0].field, "spec.image");
    assert!(err.0[0].message.contains("upgrade to 3.5.x first"), "{err}");

    dkv.spec.image = "registry.k8s.io/etcd:3.5.1-0".into();
    let err =
        validate::validate(&dkv, &deployed(EtcdVersion::new(3, 5, 16)), &defaults()).unwrap_err();
    assert!(err.0[0].message.contains("cannot be downgraded"), "{err}");

    dkv.spec.image = "registry.k8s.io/etcd:3.5.16-0".into();
    assert!(validate::validate(&dkv, &deployed(EtcdVersion::new(3, 4, 23)), &defaults()).is_ok());

    // Into 3.6 only from 3.5.26 or later (etcd's 3.5 -> 3.6 upgrade guide).
    dkv.spec.image = "registry.k8s.io/etcd:3.6.5-0".into();
    let err =
        validate::validate(&dkv, &deployed(EtcdVersion::new(3, 5, 16)), &defaults()).unwrap_err();
    assert_eq!(err.0[0].field, "spec.image");
    assert!(
        err.0[0]
            .message
            .contains("can only be reached from 3.5.26 or a later 3.5 release"),
        "{err}"
    );
    assert!(validate::validate(&dkv, &deployed(EtcdVersion::new(3, 5, 30)), &defaults()).is_ok());
}

#[test]
fn an_unknown_image_tag_needs_spec_version() {
    let mut dkv = fixture("minimal");
    dkv.spec.image = "registry.example/etcd@sha256:0123".into();
    assert!(validate::validate(&dkv, &facts(), &defaults()).is_err());
    dkv.spec.version = Some("3.5.16".into());
    let cluster = validate::validate(&dkv, &facts(), &defaults()).unwrap();
    assert_eq!(cluster.version, EtcdVersion::new(3, 5, 16));
}

#[test]
fn unknown_storage_classes_are_not_rejected_before_they_are_known() {
    let dkv = fixture("full");
    let unknown = Facts {
        storage_classes: None,
        running: Default::default(),
        deployed_storage_size: None,
        volume_capacity: None,
    };
    assert!(validate::validate(&dkv, &unknown, &defaults()).is_ok());
}

#[test]
fn the_pause_annotation_is_read() {
    let mut dkv = fixture("minimal");
    assert!(!validated(&dkv).paused);
    dkv.metadata.annotations = Some(labels(&[("dkv.io/reconcile-paused", "true")]));
    assert!(validated(&dkv).paused);
}

#[test]
fn a_running_cluster_changes_size_only_through_membership() {
    let (cluster, _, prepared) = prepare(&fixture("minimal"));
    let mut running = prepared.statefulset.clone();
    running.status = Some(k8s_openapi::api::apps::v1::StatefulSetStatus {
        replicas: 3,
        ready_replicas: Some(3),
        ..Default::default()
    });
    let record = prepared.members.data.as_ref().unwrap()["members.json"].clone();
    let record: dkv_member::record::MembershipRecord = serde_json::from_str(&record).unwrap();

    // etcd cannot be seen (no pods here): a bigger spec changes nothing yet.
    let mut bigger = cluster.clone();
    bigger.size = 5;
    let held = plan::plan(&bigger, Some(&running), Some(&record), &Default::default());
    assert_eq!(
        held.replicas, 3,
        "the StatefulSet must not grow behind etcd's back"
    );
    assert_eq!(held.bootstrap_size, 3);
    let rebuilt = build::build(&bigger, &held);
    assert_eq!(rebuilt.statefulset.spec.replicas, Some(3));
    assert_eq!(
        rebuilt.pdb.spec.unwrap().min_available,
        Some(IntOrString::Int(2)),
        "the PDB protects the members that run"
    );

    // A hand-edited StatefulSet does not change the member count either.
    running.spec.replicas = Some(1);
    let same = plan::plan(&cluster, Some(&running), Some(&record), &Default::default());
    assert_eq!(same.replicas, 3);
}

#[test]
fn a_new_cluster_records_its_initial_members_for_the_pods() {
    let (_, _, prepared) = prepare(&fixture("minimal"));
    let cm = &prepared.members;
    assert_eq!(cm.metadata.name.as_deref(), Some("orders-members"));
    assert_eq!(
        cm.metadata.owner_references.as_ref().unwrap()[0].name,
        "orders"
    );
    let record: serde_json::Value =
        serde_json::from_str(&cm.data.as_ref().unwrap()["members.json"]).unwrap();
    assert_eq!(
        record,
        serde_json::json!({
            "contract": dkv_member::contract::VERSION,
            "state": "new",
            "members": [
                {"name": "orders-0", "peerURL": "http://orders-0.orders-peer.shop.svc:2380", "started": false},
                {"name": "orders-1", "peerURL": "http://orders-1.orders-peer.shop.svc:2380", "started": false},
                {"name": "orders-2", "peerURL": "http://orders-2.orders-peer.shop.svc:2380", "started": false},
            ]
        })
    );
    let pod = prepared.statefulset.spec.template.spec.as_ref().unwrap();
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "members")
        .unwrap();
    assert_eq!(volume.config_map.as_ref().unwrap().name, "orders-members");
}

#[test]
fn a_member_being_replaced_in_the_middle_keeps_the_highest_pod() {
    use dkv_operator::cluster::membership::ObservedMember;
    use dkv_operator::cluster::plan::MembershipView;

    let (cluster, _, prepared) = prepare(&fixture("minimal"));
    let running = prepared.statefulset.clone();
    let member = |ordinal: i32| ObservedMember {
        id: 100 + ordinal as u64,
        ordinal,
        learner: false,
        started: true,
        healthy: true,
        reachable: true,
        leader: ordinal == 0,
        raft_index: 10,
        applied_index: 10,
        version: None,
        cluster_id: 7,
        storage_version: None,
        downgrade_target: None,
    };
    // orders-1 lost its volume and was removed; it is not re-added yet.
    let view = MembershipView {
        members: Some(vec![member(0), member(2)]),
        ..Default::default()
    };
    let plan = plan::plan(&cluster, Some(&running), None, &view);
    assert_eq!(
        plan.replicas, 3,
        "shrinking to 2 pods would stop orders-2, a healthy voter"
    );
    let names: Vec<&str> = plan
        .record
        .members
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, vec!["orders-0", "orders-2"]);
}

#[test]
fn a_cluster_restored_from_a_backup_fetches_verifies_and_restores_before_member_init() {
    use dkv_operator::cluster::backups::restore::{self, ResolvedRestore};
    for (image, tool, api_env) in [
        ("registry.k8s.io/etcd:3.5.16-0", "etcdutl", None),
        ("registry.k8s.io/etcd:3.4.23-0", "etcdctl", Some("3")),
    ] {
        let mut dkv = fixture("minimal");
        dkv.spec.image = image.to_owned();
        dkv.spec.bootstrap = Some(
            serde_json::from_value(serde_json::json!({
                "restore": {"backupName": "orders-manual", "credentialsSecret": "s3-creds"}
            }))
            .unwrap(),
        );
        let cluster = validated(&dkv);
        let mut plan = plan::plan(&cluster, None, None, &Default::default());
        let source = ResolvedRestore {
            backup: Some("orders-manual".to_owned()),
            uri: "s3://b/prod/shop/orders/orders-20261122-060012.db".to_owned(),
            sha256: Some("ab".repeat(32)),
            credentials_secret: Some("s3-creds".to_owned()),
            epoch: None,
            replay: None,
            decryption_keys: Some(KeySecretReference {
                name: "backup-key".to_owned(),
                key: None,
            }),
            revision_bump: Some(restore::MIN_REVISION_BUMP),
        };
        plan.restore = Some(source.clone());
        let sts = build::build(&cluster, &plan).statefulset;

        let pod = sts.spec.template.spec.as_ref().unwrap();
        let order: Vec<&str> = pod
            .init_containers
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(order, ["restore-fetch", "restore", "member-init"]);

        let fetch = container(&sts, "restore-fetch");
        assert_eq!(fetch.image.as_deref(), Some(OPERATOR_IMAGE));
        let args = fetch.args.clone().unwrap();
        assert!(args.contains(&format!("--uri={}", source.uri)), "{args:?}");
        assert!(
            args.contains(&format!("--sha256={}", "ab".repeat(32))),
            "{args:?}"
        );
        assert!(args.contains(&"--output=/var/lib/etcd/dkv-restore/snapshot.db".to_owned()));
        assert!(args.contains(&"--clear=/var/lib/etcd/dkv-restore/data".to_owned()));
        // The scheduler counts what the download uses.
        let requests = fetch.resources.as_ref().and_then(|r| r.requests.as_ref());
        assert_eq!(
            requests.and_then(|r| r.get("memory")).map(|q| q.0.as_str()),
            Some("64Mi")
        );
        assert!(
            args.contains(&"--decryption-keys-dir=/var/run/dkv/restore-keys".to_owned()),
            "{args:?}"
        );
        let keys = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == "restore-keys")
            .and_then(|v| v.secret.as_ref())
            .unwrap();
        assert_eq!(keys.secret_name.as_deref(), Some("backup-key"));
        assert!(
            fetch
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "restore-keys" && m.read_only == Some(true))
        );
        let secret = fetch.env_from.as_ref().unwrap()[0]
            .secret_ref
            .as_ref()
            .unwrap();
        assert_eq!(secret.name, "s3-creds");

        let restore_step = container(&sts, "restore");
        assert_eq!(restore_step.image.as_deref(), Some(image));
        assert_eq!(restore_step.command, Some(vec![tool.to_owned()]));
        let args = restore_step.args.clone().unwrap();
        let name = dkv.metadata.name.clone().unwrap();
        let ns = dkv.metadata.namespace.clone().unwrap();
        assert_eq!(
            &args[..3],
            [
                "snapshot",
                "restore",
                "/var/lib/etcd/dkv-restore/snapshot.db"
            ]
        );
        assert!(args.contains(&"--name=$(POD_NAME)".to_owned()), "{args:?}");
        assert!(
            args.contains(&format!(
                "--initial-advertise-peer-urls=http://$(POD_NAME).{name}-peer.{ns}.svc:2380"
            )),
            "{args:?}"
        );
        assert!(args.contains(&"--data-dir=/var/lib/etcd/dkv-restore/data".to_owned()));
        // The new cluster's token (its own uid): a new cluster ID.
        let uid = dkv.metadata.uid.clone().unwrap();
        assert!(
            args.contains(&format!("--initial-cluster-token={ns}-{name}-{uid}")),
            "{args:?}"
        );
        // Revisions move up past the source's, and what lies below reads
        // as compacted (etcdutl only: 3.4's etcdctl cannot).
        let bumped = [
            "--bump-revision=1000000000".to_owned(),
            "--mark-compacted".to_owned(),
        ];
        assert_eq!(
            args.ends_with(&bumped),
            tool == "etcdutl",
            "{tool}: {args:?}"
        );
        // restore-fetch checked the snapshot's own hash already.
        assert!(args.contains(&"--skip-hash-check".to_owned()), "{args:?}");
        let env: Vec<(String, Option<String>)> = restore_step
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone()))
            .collect();
        assert_eq!(
            env.iter()
                .find(|(n, _)| n == "ETCDCTL_API")
                .and_then(|(_, v)| v.as_deref()),
            api_env
        );
        // The source is recorded for the passes that follow.
        assert_eq!(restore::from_statefulset(&sts), Some(source));

        // Once the cluster has formed, the template no longer restores.
        plan.restore = None;
        let sts = build::build(&cluster, &plan).statefulset;
        let names: Vec<String> = sts
            .spec
            .template
            .spec
            .unwrap()
            .init_containers
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["member-init"]);
    }
}

#[test]
fn every_pod_runs_hardened_and_tls_certificates_are_mounted_read_only() {
    let mut dkv = fixture("full");
    dkv.spec.tls = Some(dkv_api::distributedkv::v1beta1::TlsSpec::default());
    let (_, _, prepared) = prepare(&dkv);
    let pod = prepared.statefulset.spec.template.spec.clone().unwrap();
    let agent_pod = prepared
        .backup_cronjob
        .unwrap()
        .spec
        .job_template
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    for spec in [&pod, &agent_pod] {
        let context = spec.security_context.as_ref().unwrap();
        assert_eq!(context.run_as_non_root, Some(true));
        assert_eq!(context.run_as_user, Some(65532));
        assert_eq!(context.fs_group, Some(65532));
        assert_eq!(
            context.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            let sc = c.security_context.as_ref().unwrap();
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{}", c.name);
            assert_eq!(sc.read_only_root_filesystem, Some(true), "{}", c.name);
            assert_eq!(
                sc.capabilities.as_ref().and_then(|c| c.drop.clone()),
                Some(vec!["ALL".to_owned()]),
                "{}",
                c.name
            );
        }
        // Every Secret is mounted read-only.
        let secret_volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.secret.is_some())
            .map(|v| v.name.as_str())
            .collect();
        assert!(!secret_volumes.is_empty());
        for c in spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
        {
            for m in c.volume_mounts.iter().flatten() {
                if secret_volumes.contains(&m.name.as_str()) {
                    assert_eq!(m.read_only, Some(true), "{} mounts {}", c.name, m.name);
                }
            }
        }
    }
    let member_tls = pod
        .volumes
        .iter()
        .flatten()
        .find_map(|v| v.secret.as_ref())
        .unwrap();
    assert_eq!(member_tls.secret_name.as_deref(), Some("orders-tls-member"));
    let etcd = &pod.containers[0];
    assert!(
        etcd.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.mount_path == "/etc/dkv/tls/member")
    );
    let init = pod.init_containers.as_ref().unwrap().last().unwrap();
    let init_args = init.args.clone().unwrap();
    assert!(
        init_args.contains(&"--peer-tls".to_owned()),
        "{init_args:?}"
    );
    assert!(
        init_args.contains(&"--client-tls".to_owned()),
        "{init_args:?}"
    );
    let agent = &agent_pod.containers[0];
    assert!(
        agent
            .args
            .clone()
            .unwrap()
            .contains(&"--client-tls-dir=/etc/dkv/tls/client".to_owned())
    );
    assert_eq!(
        agent_pod.volumes.as_ref().unwrap()[0]
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref()),
        Some("orders-tls-client")
    );
}

mod status_of_a_pass {
    //! The one status writer's computation: the status a pass leaves,
    //! whichever step it stopped at.

    use super::{DistributedKV, fixture, prepare};
    use dkv_api::conditions::{reasons, types};
    use dkv_api::distributedkv::v1beta1::{DistributedKVStatus, Phase};
    use dkv_operator::cluster::backups::catalogue::BackupSummary;
    use dkv_operator::cluster::lifecycle::hibernation::State;
    use dkv_operator::cluster::maintenance::volumes::{PendingClaim, Volumes};
    use dkv_operator::cluster::outcome::Fault;
    use dkv_operator::cluster::pass::Pass;
    use dkv_operator::cluster::stage::planned::{Gate, Planned};
    use dkv_operator::cluster::stage::validated::Validated;
    use dkv_operator::cluster::status::derive;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use pretty_assertions::assert_eq;

    fn now() -> Time {
        Time("2026-11-25T10:00:00Z".parse().unwrap())
    }

    /// What a pass over a new cluster saw, up to its plan.
    fn planned(dkv: &DistributedKV, volumes: Volumes) -> Pass {
        let (cluster, plan, _) = prepare(dkv);
        Pass {
            observed: Some(Default::default()),
            validated: Some(Validated {
                cluster,
                pods: Vec::new(),
                volumes,
                placements: Vec::new(),
                lost: Vec::new(),
                stranded: Vec::new(),
            }),
            planned: Some(Planned {
                plan,
                hibernation: State::Awake,
                operation: None,
                gate: Gate::Proceed,
                stalled: None,
            }),
            ..Pass::default()
        }
    }

    /// `pass` with its plan's hibernation state `state`.
    fn hibernation(pass: &mut Pass, state: State) -> &mut Planned {
        let planned = pass.planned.as_mut().expect("planned");
        planned.hibernation = state;
        planned
    }

    fn condition<'a>(status: &'a DistributedKVStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {:?}", status.conditions))
    }

    fn pending_since(seconds_ago: i64) -> Volumes {
        Volumes {
            total: 3,
            below: 3,
            size: Some("1Gi".into()),
            pending: vec![PendingClaim {
                name: "data-orders-0".into(),
                class: Some("standard".into()),
                since: Some(now().0 - jiff::SignedDuration::from_secs(seconds_ago)),
            }],
            ..Volumes::default()
        }
    }

    /// `dkv` as it was last seen formed: Available, QuorumHealthy, with
    /// its members recorded.
    fn formed(mut dkv: DistributedKV) -> DistributedKV {
        dkv.status = Some(DistributedKVStatus {
            phase: Some(Phase::Running),
            members: ["orders-0", "orders-1", "orders-2"]
                .iter()
                .enumerate()
                .map(|(i, name)| dkv_api::distributedkv::v1beta1::MemberStatus {
                    name: (*name).into(),
                    id: Some(format!("{:x}", 100 + i)),
                    healthy: true,
                    ..Default::default()
                })
                .collect(),
            cluster_id: Some("7".into()),
            conditions: vec![Condition {
                type_: types::AVAILABLE.into(),
                status: "True".into(),
                reason: reasons::QUORUM_HEALTHY.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: now(),
            }],
            ..Default::default()
        });
        dkv
    }

    #[test]
    fn a_hibernated_pass_is_neither_available_nor_degraded_and_keeps_the_membership() {
        let dkv = formed(fixture("minimal"));
        let mut pass = planned(&dkv, Volumes::default());
        let planned = hibernation(&mut pass, State::Hibernated);
        planned.plan =
            dkv_operator::cluster::lifecycle::hibernation::stopped_plan(planned.plan.clone());
        let status = derive(&dkv, &pass, None, &BackupSummary::default(), &now()).unwrap();
        for type_ in [types::AVAILABLE, types::PROGRESSING, types::DEGRADED] {
            let c = condition(&status, type_);
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("False", reasons::HIBERNATED),
                "{type_}: {}",
                c.message
            );
        }
        assert_eq!(status.phase, Some(Phase::Hibernated));
        assert_eq!(status.ready_replicas, 0);
        assert_eq!(status.members.len(), 3, "the membership is kept");
        assert_eq!(status.cluster_id.as_deref(), Some("7"));
        assert_eq!(status.leader, None);
    }

    #[test]
    fn waking_members_are_not_a_lost_quorum() {
        let mut dkv = formed(fixture("minimal"));
        if let Some(status) = dkv.status.as_mut() {
            status.phase = Some(Phase::Hibernated);
        }
        let mut pass = planned(&dkv, Volumes::default());
        hibernation(&mut pass, State::Waking);
        let status = derive(&dkv, &pass, None, &BackupSummary::default(), &now()).unwrap();
        let available = condition(&status, types::AVAILABLE);
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("False", reasons::WAKING)
        );
        let progressing = condition(&status, types::PROGRESSING);
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", reasons::WAKING)
        );
        let degraded = condition(&status, types::DEGRADED);
        assert_eq!(degraded.status, "False", "{}", degraded.message);
        assert_eq!(status.phase, Some(Phase::Running));
        // The same pass without hibernation would be a lost quorum.
        hibernation(&mut pass, State::Awake);
        let lost = derive(&dkv, &pass, None, &BackupSummary::default(), &now()).unwrap();
        assert_eq!(
            condition(&lost, types::DEGRADED).reason,
            reasons::QUORUM_LOST
        );
    }

    #[test]
    fn a_claim_left_without_a_volume_for_a_minute_degrades_the_cluster_naming_it() {
        let dkv = fixture("minimal");
        let backups = BackupSummary::default();
        let waiting = derive(
            &dkv,
            &planned(&dkv, pending_since(10)),
            None,
            &backups,
            &now(),
        )
        .unwrap();
        assert_eq!(condition(&waiting, types::DEGRADED).status, "False");

        let stuck = derive(
            &dkv,
            &planned(&dkv, pending_since(90)),
            None,
            &backups,
            &now(),
        )
        .unwrap();
        let degraded = condition(&stuck, types::DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", reasons::VOLUME_PENDING)
        );
        assert!(
            degraded
                .message
                .contains("data-orders-0 (StorageClass standard"),
            "{}",
            degraded.message
        );
        assert_eq!(stuck.phase, Some(Phase::Degraded));
    }

    #[test]
    fn an_error_after_the_plan_shows_on_top_of_what_the_pass_observed() {
        let dkv = fixture("minimal");
        let fault = Fault::Degraded {
            reason: reasons::RECONCILE_ERROR,
            message: "failed to apply StatefulSet orders: 422".into(),
        };
        let status = derive(
            &dkv,
            &planned(&dkv, Volumes::default()),
            Some(&fault),
            &BackupSummary::default(),
            &now(),
        )
        .unwrap();
        let degraded = condition(&status, types::DEGRADED);
        assert_eq!(degraded.reason, reasons::RECONCILE_ERROR);
        assert_eq!(degraded.message, "failed to apply StatefulSet orders: 422");
        // What was observed stands beside it: nothing runs yet.
        assert_eq!(
            condition(&status, types::AVAILABLE).reason,
            reasons::CREATING
        );
        assert_eq!(
            condition(&status, types::PROGRESSING).reason,
            reasons::CREATING_CLUSTER
        );
        assert_eq!(status.phase, Some(Phase::Degraded));
    }

    #[test]
    fn an_error_before_the_plan_keeps_what_is_known_and_fills_the_status_column() {
        let dkv = fixture("minimal");
        let fault = Fault::Degraded {
            reason: reasons::INVALID_SPEC,
            message: "invalid spec: spec.size must be odd".into(),
        };
        let status = derive(
            &dkv,
            &Pass::default(),
            Some(&fault),
            &BackupSummary::default(),
            &now(),
        )
        .unwrap();
        assert_eq!(
            condition(&status, types::DEGRADED).reason,
            reasons::INVALID_SPEC
        );
        let available = condition(&status, types::AVAILABLE);
        assert_eq!(
            (available.status.as_str(), available.reason.as_str()),
            ("False", reasons::INVALID_SPEC)
        );
        assert_eq!(status.observed_generation, Some(1));

        let waiting = Fault::Waiting {
            reason: reasons::WAITING_FOR_CERTIFICATES,
            message: "waiting for cert-manager".into(),
        };
        let status = derive(
            &dkv,
            &Pass::default(),
            Some(&waiting),
            &BackupSummary::default(),
            &now(),
        )
        .unwrap();
        let progressing = condition(&status, types::PROGRESSING);
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", reasons::WAITING_FOR_CERTIFICATES)
        );
    }

    #[test]
    fn members_no_one_could_ask_this_pass_are_not_said_to_be_healthy() {
        use dkv_api::distributedkv::v1beta1::MemberStatus;
        let mut dkv = fixture("minimal");
        let member = |name: &str| MemberStatus {
            name: name.into(),
            id: Some("1".into()),
            learner: false,
            healthy: true,
            version: Some("3.5.16".into()),
            ..MemberStatus::default()
        };
        dkv.status = Some(DistributedKVStatus {
            members: vec![member("orders-0"), member("orders-1")],
            ..DistributedKVStatus::default()
        });
        // The pass reached no member (`members: None`).
        let status = derive(
            &dkv,
            &planned(&dkv, Volumes::default()),
            None,
            &BackupSummary::default(),
            &now(),
        )
        .unwrap();
        let listed: Vec<(&str, bool)> = status
            .members
            .iter()
            .map(|m| (m.name.as_str(), m.healthy))
            .collect();
        assert_eq!(listed, [("orders-0", false), ("orders-1", false)]);
    }

    #[test]
    fn a_pass_that_saw_nothing_and_has_nothing_to_show_writes_nothing() {
        let dkv = fixture("minimal");
        assert_eq!(
            derive(
                &dkv,
                &Pass::default(),
                None,
                &BackupSummary::default(),
                &now()
            ),
            None
        );
    }
}

#[test]
fn a_formed_cluster_whose_statefulset_is_gone_gets_it_back_unchanged_not_bootstrapped() {
    use dkv_member::record::{ClusterState, MembershipRecord};
    use dkv_operator::cluster::membership::ObservedPod;
    use dkv_operator::cluster::membership::observe::MemberPod;
    use dkv_operator::cluster::plan::MembershipView;

    // Created with 3 members, since scaled to 5.
    let (_, _, created) = prepare(&fixture("minimal"));
    let running = created.statefulset;
    let mut dkv = fixture("minimal");
    dkv.spec.size = 5;
    let cluster = validated(&dkv);
    let record = MembershipRecord {
        contract: dkv_member::contract::VERSION,
        state: ClusterState::Existing,
        members: (0..5)
            .map(|i| plan::recorded_member(&cluster, i, true))
            .collect(),
        epoch: None,
        recover_from: None,
    };
    // The orphaned pods still run with what their StatefulSet said.
    let pod = |ordinal: i32| MemberPod {
        view: ObservedPod {
            ordinal,
            ready: true,
            data_lost: false,
            version: None,
            init_done: true,
            forced_new_cluster: false,
            init_refused: false,
            restored: false,
            tls_serial: None,
            revision: None,
            member_side: None,
            replaced: false,
            snapshot_count: None,
        },
        endpoint: None,
        restore_failure: None,
        problem: None,
        bootstrap_size: Some(3),
        refused_as_corrupt: false,
        created: None,
    };
    let view = MembershipView {
        pods: (0..5).map(pod).collect(),
        ..Default::default()
    };
    let with_set = plan::plan(&cluster, Some(&running), Some(&record), &view);
    let without = plan::plan(&cluster, None, Some(&record), &view);
    assert!(
        !without.creating,
        "a formed cluster is never bootstrapped again"
    );
    assert_eq!(without.record, record, "the record stands");
    assert_eq!((without.replicas, without.bootstrap_size), (5, 3));
    assert_eq!(
        build::build(&cluster, &without).statefulset.spec.template,
        build::build(&cluster, &with_set).statefulset.spec.template,
        "the same pod template: the adopted pods do not restart"
    );
}

#[test]
fn a_hibernated_plan_runs_no_member_suspends_backups_and_keeps_the_budget() {
    use dkv_operator::cluster::lifecycle::hibernation;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    let (cluster, plan, awake) = prepare(&fixture("full"));
    assert_eq!(awake.backup_cronjob.as_ref().unwrap().spec.suspend, None);
    let stopped = hibernation::stopped_plan(plan.clone());
    let prepared = build::build(&cluster, &stopped);
    assert_eq!(prepared.statefulset.spec.replicas, Some(0));
    assert_eq!(
        prepared.backup_cronjob.as_ref().unwrap().spec.suspend,
        Some(true)
    );
    assert_eq!(
        prepared.pdb.spec.as_ref().unwrap().min_available,
        awake.pdb.spec.as_ref().unwrap().min_available,
        "the budget of the members that come back"
    );
    assert_ne!(
        prepared.pdb.spec.as_ref().unwrap().min_available,
        Some(IntOrString::Int(1))
    );
    // The same template and membership record: waking starts the same pods.
    assert_eq!(
        prepared.statefulset.spec.template,
        awake.statefulset.spec.template
    );
    assert_eq!(prepared.members, awake.members);
}
