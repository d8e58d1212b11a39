//! The StatefulSet that runs one etcd member per pod.
//!
//! Choices that matter for etcd's safety:
//! - `podManagementPolicy: Parallel`: a new cluster's members must all start
//!   together — with OrderedReady, member 0 would wait forever for a quorum
//!   that needs members 1 and 2 to be running.
//! - `updateStrategy: OnDelete`: the operator, not the StatefulSet
//!   controller, decides when and in which order members restart.
//! - PVC retention `Retain` on scale-down and delete: volumes are removed by
//!   the operator, after the member left etcd, never by a side effect.
//! - An init container (`dkv member-init`) writes the member's etcd config
//!   file, so the etcd container needs no shell and no templating.
//!
//! A cluster created from a backup runs two more init containers first, the
//! restore steps ([`crate::cluster::backups::restore`] resolves their source).
//!
//! Placement: by default members spread over zones, then over nodes
//! ([`default_spread`]), and prefer nodes without another member
//! ([`spread_members`]); all of it preferred, never required, so that a
//! cluster of one node (or of nodes without zone labels) still schedules.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvFromSource,
    EnvVar, EnvVarSource, HTTPGetAction, ObjectFieldSelector, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PodAffinityTerm, PodAntiAffinity, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, SecretEnvSource, TCPSocketAction, TopologySpreadConstraint, Volume,
    VolumeMount, VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::{child_labels, child_meta};
use crate::cluster::backups::restore::{self, ResolvedRestore, SNAPSHOT_FILE, STAGING_DIR};
use crate::cluster::dereference::ETCD_VERSION_ANNOTATION;
use crate::cluster::plan::{BOOTSTRAP_SIZE_ANNOTATION, Plan};
use crate::cluster::upgrade::member_side::{self, MemberSide};
use crate::cluster::validate::{EtcdSettings, ValidatedCluster};
use crate::etcd_version::EtcdVersion;
use crate::parts::backup_keys;
use crate::parts::hardening;
use crate::parts::naming::{
    self, CLIENT_PORT, FETCH_CONTAINER, METRICS_PORT, PEER_PORT, RESTORE_CONTAINER,
};
use crate::parts::node_directory;
use crate::parts::tls;

pub use crate::parts::naming::DATA_VOLUME;
/// Where things are in the pod is the member side's ([`dkv_member::layout`]).
pub use dkv_member::layout::{CONFIG_FILE, CONFIG_MOUNT, DATA_DIR, DATA_MOUNT, MEMBERS_MOUNT};
pub const CONFIG_VOLUME: &str = "etcd-config";
pub const MEMBERS_VOLUME: &str = "members";

pub fn build(cluster: &ValidatedCluster, plan: &Plan) -> StatefulSet {
    let mut meta = child_meta(cluster, naming::statefulset(&cluster.name), "etcd");
    let mut annotations = BTreeMap::from([
        (
            BOOTSTRAP_SIZE_ANNOTATION.to_owned(),
            plan.bootstrap_size.to_string(),
        ),
        (
            ETCD_VERSION_ANNOTATION.to_owned(),
            cluster.version.to_string(),
        ),
    ]);
    if let Some(source) = plan.restore.as_ref().or(plan.replay.as_ref()) {
        annotations.insert(
            restore::SOURCE_ANNOTATION.to_owned(),
            restore::annotation_value(source),
        );
    }
    if let Some(replayed) = &plan.replayed {
        annotations.insert(restore::REPLAYED_ANNOTATION.to_owned(), replayed.clone());
    }
    if let Some(offset) = plan.standby_offset {
        annotations.insert(
            crate::cluster::backups::standby::OFFSET_ANNOTATION.to_owned(),
            offset.to_string(),
        );
    }
    if let Some(generation) = cluster.generation {
        annotations.insert(
            member_side::GENERATION_ANNOTATION.to_owned(),
            generation.to_string(),
        );
    }
    meta.annotations = Some(annotations);

    StatefulSet {
        metadata: meta,
        spec: StatefulSetSpec {
            replicas: Some(plan.replicas),
            service_name: Some(naming::peer_service(&cluster.name)),
            pod_management_policy: Some("Parallel".to_owned()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some("Retain".to_owned()),
                    when_scaled: Some("Retain".to_owned()),
                },
            ),
            selector: LabelSelector {
                match_labels: Some(dkv_api::labels::selector_labels(&cluster.name)),
                ..LabelSelector::default()
            },
            template: members_template(cluster, plan),
            volume_claim_templates: cluster.storage.as_ref().map(|storage| {
                vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some(DATA_VOLUME.to_owned()),
                        labels: Some(child_labels(cluster, "etcd")),
                        ..ObjectMeta::default()
                    },
                    spec: Some(PersistentVolumeClaimSpec {
                        access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
                        storage_class_name: Some(storage.storage_class_name.clone()),
                        resources: Some(VolumeResourceRequirements {
                            requests: Some(BTreeMap::from([(
                                "storage".to_owned(),
                                Quantity(storage.template_size.as_str().to_owned()),
                            )])),
                            ..VolumeResourceRequirements::default()
                        }),
                        ..PersistentVolumeClaimSpec::default()
                    }),
                    status: None,
                }]
            }),
            revision_history_limit: Some(10),
            ..StatefulSetSpec::default()
        },
        status: None,
    }
}

/// The member pods' template as this pass runs it: built and stamped with
/// its member-side hash and image, or the running one while an
/// operator-only rollout waits for its turn (see [`member_side`]).
fn members_template(cluster: &ValidatedCluster, plan: &Plan) -> PodTemplateSpec {
    match &plan.member_side {
        MemberSide::Held { template } => (**template).clone(),
        MemberSide::Built { hash, keep } => {
            let mut template = pod_template(cluster, plan);
            member_side::stamp(
                &mut template,
                &cluster.operator_image,
                hash,
                keep.as_deref(),
            );
            template
        }
    }
}

/// The template as this operator builds it, run by its own image (what a
/// new cluster gets).
pub fn built_member_side(cluster: &ValidatedCluster, plan: &Plan, code: &str) -> MemberSide {
    MemberSide::Built {
        hash: member_side_hash(cluster, plan, code),
        keep: None,
    }
}

/// The member-side hash of the template this pass builds, with the
/// operator's member-side `code` ([`member_side::code`]). The restore steps
/// are left out: once a restored cluster has formed, its template drops
/// them and the members, which ran them once before they first started,
/// run that template already ([`crate::cluster::plan::settled_template`]).
pub fn member_side_hash(cluster: &ValidatedCluster, plan: &Plan, code: &str) -> String {
    let steady = Plan {
        restore: None,
        ..plan.clone()
    };
    member_side::hash(
        &pod_template(cluster, &steady),
        &cluster.operator_image,
        code,
    )
}

fn pod_template(cluster: &ValidatedCluster, plan: &Plan) -> PodTemplateSpec {
    // User labels first so that ours win: the selector labels must match.
    let mut labels = cluster.pod.labels.clone().unwrap_or_default();
    labels.extend(child_labels(cluster, "etcd"));

    let mut volumes = vec![
        Volume {
            name: CONFIG_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        Volume {
            name: MEMBERS_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: naming::members_configmap(&cluster.name),
                optional: Some(false),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
    ];
    if cluster.storage.is_none() {
        volumes.push(Volume {
            name: DATA_VOLUME.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    volumes.extend(tls::member_mounts(&cluster.name, &cluster.tls_sources).volumes);
    // A restore from a `file://` artifact reads it from the node.
    if let Some(dir) = plan
        .restore
        .as_ref()
        .and_then(|source| node_directory::of_artifact(&source.uri))
    {
        volumes.push(node_directory::volume(&dir, false));
    }
    // The keys of an encrypted backup, for the fetch step.
    if let Some(reference) = plan
        .restore
        .as_ref()
        .and_then(|source| source.decryption_keys.as_ref())
    {
        volumes.push(backup_keys::restore_keys_volume(reference));
    }

    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: pod_annotations(cluster, plan),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            init_containers: Some(hardening::harden(init_containers(cluster, plan))),
            containers: hardening::harden(vec![etcd_container(cluster)]),
            volumes: Some(volumes),
            security_context: Some(hardening::pod()),
            // Service environment variables are useless to etcd and
            // dangerous: etcd reads every `ETCD_*` variable as a flag, and a
            // Service named `etcd` would inject `ETCD_PORT=tcp://...`.
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(30),
            affinity: Some(
                cluster
                    .pod
                    .affinity
                    .clone()
                    .unwrap_or_else(|| spread_members(&cluster.name)),
            ),
            tolerations: cluster.pod.tolerations.clone(),
            node_selector: cluster.pod.node_selector.clone(),
            // The user's list replaces ours; an empty one asks for none.
            topology_spread_constraints: Some(
                cluster
                    .pod
                    .topology_spread_constraints
                    .clone()
                    .unwrap_or_else(|| default_spread(&cluster.name)),
            )
            .filter(|constraints| !constraints.is_empty()),
            priority_class_name: cluster.pod.priority_class_name.clone(),
            ..PodSpec::default()
        }),
    }
}

/// The user's pod annotations and, with TLS, the serial of the member
/// certificate the pods start with (a reissued certificate changes the
/// template; the operator then restarts members one at a time).
fn pod_annotations(cluster: &ValidatedCluster, plan: &Plan) -> Option<BTreeMap<String, String>> {
    let mut annotations = cluster.pod.annotations.clone().unwrap_or_default();
    if let Some(at) = &cluster.restarted_at {
        annotations.insert(dkv_api::labels::RESTARTED_AT.to_owned(), at.clone());
    }
    if let Some(serial) = &plan.tls_serial {
        annotations.insert(naming::SERIAL_ANNOTATION.to_owned(), serial.clone());
    }
    (!annotations.is_empty()).then_some(annotations)
}

/// Default affinity: members prefer distinct nodes, so one node failure
/// costs at most one member where the cluster has room for it.
fn spread_members(cluster: &str) -> Affinity {
    Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some(dkv_api::labels::selector_labels(cluster)),
                            ..LabelSelector::default()
                        }),
                        topology_key: HOSTNAME_LABEL.to_owned(),
                        ..PodAffinityTerm::default()
                    },
                },
            ]),
            ..PodAntiAffinity::default()
        }),
        ..Affinity::default()
    }
}

pub use crate::parts::naming::{HOSTNAME_LABEL, ZONE_LABEL};

/// Default spread: at most one member more in any zone than in another,
/// then the same over nodes. `ScheduleAnyway`: kube-scheduler only scores
/// these (a node without the key is not filtered out, it scores lowest; when
/// no node has it the constraint changes nothing), so a cluster with fewer
/// zones or nodes than members still schedules, its members doubled up.
/// The zone constraint comes first: losing a zone costs more than losing a
/// node.
fn default_spread(cluster: &str) -> Vec<TopologySpreadConstraint> {
    [ZONE_LABEL, HOSTNAME_LABEL]
        .into_iter()
        .map(|key| TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key.to_owned(),
            when_unsatisfiable: "ScheduleAnyway".to_owned(),
            label_selector: Some(LabelSelector {
                match_labels: Some(dkv_api::labels::selector_labels(cluster)),
                ..LabelSelector::default()
            }),
            ..TopologySpreadConstraint::default()
        })
        .collect()
}

fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..VolumeMount::default()
    }
}

/// `member-init`, preceded while a cluster is created from a backup by the
/// restore steps (see [`crate::cluster::backups::restore`]).
fn init_containers(cluster: &ValidatedCluster, plan: &Plan) -> Vec<Container> {
    let mut containers = Vec::with_capacity(3);
    if let Some(source) = &plan.restore {
        containers.push(fetch_container(cluster, source));
        containers.push(restore_container(cluster, source));
    }
    containers.push(member_init_container(cluster, plan));
    containers
}

fn data_mount() -> VolumeMount {
    VolumeMount {
        name: DATA_VOLUME.to_owned(),
        mount_path: DATA_MOUNT.to_owned(),
        ..VolumeMount::default()
    }
}

/// Restore init step 1: fetch and verify the artifact into the member's volume.
fn fetch_container(cluster: &ValidatedCluster, source: &ResolvedRestore) -> Container {
    let mut args = vec![
        "restore-fetch".to_owned(),
        format!("--uri={}", source.uri),
        format!("--output={SNAPSHOT_FILE}"),
        format!("--clear={STAGING_DIR}"),
    ];
    if let Some(sha) = &source.sha256 {
        args.push(format!("--sha256={sha}"));
    }
    if source.decryption_keys.is_some() {
        args.push(format!(
            "--decryption-keys-dir={}",
            backup_keys::RESTORE_KEYS_DIR
        ));
    }
    Container {
        name: FETCH_CONTAINER.to_owned(),
        image: Some(cluster.operator_image.clone()),
        args: Some(args),
        // Credentials only as environment from the Secret.
        env_from: source.credentials_secret.as_ref().map(|secret| {
            vec![EnvFromSource {
                secret_ref: Some(SecretEnvSource {
                    name: secret.clone(),
                    optional: Some(false),
                }),
                ..EnvFromSource::default()
            }]
        }),
        volume_mounts: Some(
            std::iter::once(data_mount())
                .chain(
                    node_directory::of_artifact(&source.uri)
                        .map(|dir| node_directory::mount(&dir, false)),
                )
                .chain(
                    source
                        .decryption_keys
                        .as_ref()
                        .map(|_| backup_keys::restore_keys_mount()),
                )
                .collect(),
        ),
        // What the step uses, so the scheduler counts it: hashing and
        // decoding keep a core busy, and 1 GiB artifacts peaked at 46-52 MiB
        // (eight ranges in flight, each written 1 MiB at a time).
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("100m".to_owned())),
                ("memory".to_owned(), Quantity("64Mi".to_owned())),
            ])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

/// Restore init step 2: the etcd image's own restore tool writes this member's data
/// directory (staged) from the verified snapshot.
fn restore_container(cluster: &ValidatedCluster, source: &ResolvedRestore) -> Container {
    let mut token = naming::cluster_token(&cluster.name, &cluster.namespace, &cluster.uid);
    if let Some(epoch) = &source.epoch {
        token = format!("{token}-{epoch}");
    }
    let tool = dkv_backup::RestoreTool::for_version(
        &cluster.version.to_string(),
        std::path::Path::new(""),
    )
    // Validated versions are 3.x with x >= 4; etcdutl is the safe default.
    .unwrap_or(dkv_backup::RestoreTool::Etcdutl("etcdutl".into()));
    let member = dkv_backup::MemberRestore {
        snapshot: SNAPSHOT_FILE.into(),
        name: "$(POD_NAME)".to_owned(),
        initial_cluster: naming::initial_cluster(
            cluster.tls.peer_scheme(),
            &cluster.name,
            &cluster.namespace,
            cluster.size,
        ),
        initial_advertise_peer_urls: format!(
            "{}://$(POD_NAME).{}.{}.svc:{PEER_PORT}",
            cluster.tls.peer_scheme(),
            naming::peer_service(&cluster.name),
            cluster.namespace
        ),
        initial_cluster_token: token,
        data_dir: STAGING_DIR.into(),
        // A 3.4 or older 3.5 member restores with the snapshot's revisions
        // (docs/operations.md).
        revision_bump: source.applied_revision_bump(cluster),
        // The fetch step before this one checked it.
        snapshot_checked: true,
    };
    let mut env = vec![EnvVar {
        name: "POD_NAME".to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.name".to_owned(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..EnvVar::default()
    }];
    if let Some((name, value)) = tool.env() {
        env.push(EnvVar {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            ..EnvVar::default()
        });
    }
    Container {
        name: RESTORE_CONTAINER.to_owned(),
        image: Some(cluster.image.clone()),
        command: Some(vec![tool.file_name().to_owned()]),
        args: Some(member.tool_args(std::path::Path::new(STAGING_DIR))),
        env: Some(env),
        volume_mounts: Some(vec![data_mount()]),
        ..Container::default()
    }
}

fn member_init_container(cluster: &ValidatedCluster, plan: &Plan) -> Container {
    let args = [
        "member-init".to_owned(),
        format!("--cluster={}", cluster.name),
        format!("--peer-service={}", naming::peer_service(&cluster.name)),
        format!("--bootstrap-size={}", plan.bootstrap_size),
        format!(
            "--initial-cluster-token={}",
            naming::cluster_token(&cluster.name, &cluster.namespace, &cluster.uid)
        ),
        format!("--data-dir={DATA_DIR}"),
        format!("--config-file={CONFIG_FILE}"),
        format!("--quota-backend-bytes={}", cluster.etcd.quota_backend_bytes),
        format!(
            "--auto-compaction-mode={}",
            cluster.etcd.auto_compaction_mode
        ),
        format!(
            "--auto-compaction-retention={}",
            cluster.etcd.auto_compaction_retention
        ),
        // Its corruption checks are this version's (member_init::corruption_checks).
        format!("--etcd-version={}", cluster.version),
        format!(
            "--corrupt-check-interval={}",
            cluster.etcd.corrupt_check_interval
        ),
        format!(
            "--members-file={MEMBERS_MOUNT}/{}",
            dkv_member::record::RECORD_KEY
        ),
    ];
    let tls_flags = [
        (cluster.tls.peer, "--peer-tls"),
        (cluster.tls.client, "--client-tls"),
    ];
    let args: Vec<String> = args
        .into_iter()
        .chain(etcd_tuning_args(&cluster.etcd))
        .chain(
            tls_flags
                .into_iter()
                .filter(|(on, _)| *on)
                .map(|(_, flag)| flag.to_owned()),
        )
        .chain(tls::member_mounts(&cluster.name, &cluster.tls_sources).args)
        .collect();
    Container {
        name: "member-init".to_owned(),
        image: Some(cluster.operator_image.clone()),
        args: Some(args),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_NAMESPACE", "metadata.namespace"),
            field_env("POD_IP", "status.podIP"),
        ]),
        volume_mounts: Some(vec![
            mount(DATA_VOLUME, DATA_MOUNT),
            mount(CONFIG_VOLUME, CONFIG_MOUNT),
            mount(MEMBERS_VOLUME, MEMBERS_MOUNT),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), Quantity("10m".to_owned())),
                ("memory".to_owned(), Quantity("16Mi".to_owned())),
            ])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

/// member-init's arguments for the `spec.etcd` settings that are written
/// only when set: a cluster that sets none keeps the pod template it had.
fn etcd_tuning_args(etcd: &EtcdSettings) -> Vec<String> {
    let millis = |d: Option<std::time::Duration>| d.map(|d| d.as_millis());
    let numbers = [
        ("--heartbeat-interval-ms", millis(etcd.heartbeat_interval)),
        ("--election-timeout-ms", millis(etcd.election_timeout)),
        ("--snapshot-count", etcd.snapshot_count.map(u128::from)),
        (
            "--max-request-bytes",
            etcd.max_request_bytes.map(u128::from),
        ),
        ("--max-txn-ops", etcd.max_txn_ops.map(u128::from)),
    ];
    numbers
        .into_iter()
        .filter_map(|(flag, value)| Some(format!("{flag}={}", value?)))
        .chain(etcd.log_level.map(|level| format!("--log-level={level}")))
        .chain(
            etcd.extra_args
                .iter()
                .map(|(name, value)| format!("--extra-arg={name}={value}")),
        )
        .collect()
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

fn http_probe(path: &str, period: i32, timeout: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::Int(METRICS_PORT),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(timeout),
        failure_threshold: Some(failures),
        ..Probe::default()
    }
}

/// Liveness must not depend on quorum: restarting members because the
/// *cluster* has no leader only makes a quorum loss worse. etcd 3.5 offers a
/// serializable health check for this; 3.4 does not, so there liveness is
/// whether the client port accepts connections.
fn liveness_probe(version: EtcdVersion, period: i32, failures: i32) -> Probe {
    if version.minor_line() >= (3, 5) {
        http_probe(
            "/health?exclude=NOSPACE&serializable=true",
            period,
            5,
            failures,
        )
    } else {
        Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(CLIENT_PORT),
                ..TCPSocketAction::default()
            }),
            period_seconds: Some(period),
            timeout_seconds: Some(5),
            failure_threshold: Some(failures),
            ..Probe::default()
        }
    }
}

fn etcd_container(cluster: &ValidatedCluster) -> Container {
    Container {
        name: dkv_member::layout::MEMBER_CONTAINER.to_owned(),
        image: Some(cluster.image.clone()),
        command: Some(vec!["etcd".to_owned()]),
        args: Some(vec![format!("--config-file={CONFIG_FILE}")]),
        ports: Some(vec![
            container_port("client", CLIENT_PORT),
            container_port("peer", PEER_PORT),
            container_port("metrics", METRICS_PORT),
        ]),
        volume_mounts: Some(
            [
                mount(DATA_VOLUME, DATA_MOUNT),
                mount(CONFIG_VOLUME, CONFIG_MOUNT),
            ]
            .into_iter()
            .chain(tls::member_mounts(&cluster.name, &cluster.tls_sources).mounts)
            .collect(),
        ),
        resources: cluster.resources.clone(),
        // Ready only when this member sees a leader and can serve a
        // linearizable read: only such members get client traffic.
        // Every 2 s: a restarted or promoted member gets client traffic
        // (and the rollout moves on) soon after it serves.
        readiness_probe: Some(http_probe("/health", 2, 3, 3)),
        liveness_probe: Some(liveness_probe(cluster.version, 10, 6)),
        // A member catching up from a large snapshot may take minutes before
        // it answers at all (300 s here); liveness waits for this to pass
        // first. Checked every second: readiness (and so the client Service
        // and `Available`) is only evaluated once it passes, and a new
        // member answers within a second or two.
        startup_probe: Some(liveness_probe(cluster.version, 1, 300)),
        // etcd writes no termination message; the end of its log says why
        // it stopped, e.g. that its initial corruption check found its data
        // differs from its peers' (read by `observe_members`).
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn built(pod: serde_json::Value) -> PodSpec {
        let cluster = crate::cluster::validate::validated_for_tests(
            json!({"size": 3, "image": "quay.io/coreos/etcd:v3.5.16", "pod": pod}),
        );
        let plan = crate::cluster::plan::plan(&cluster, None, None, &Default::default());
        build(&cluster, &plan)
            .spec
            .template
            .spec
            .unwrap_or_else(|| panic!("no pod spec"))
    }

    /// member-init's arguments for a cluster with `etcd` as `spec.etcd`.
    fn member_init_args(etcd: serde_json::Value) -> Vec<String> {
        let cluster = crate::cluster::validate::validated_for_tests(
            json!({"size": 3, "image": "quay.io/coreos/etcd:v3.5.16", "etcd": etcd}),
        );
        let plan = crate::cluster::plan::plan(&cluster, None, None, &Default::default());
        member_init_container(&cluster, &plan)
            .args
            .unwrap_or_default()
    }

    #[test]
    fn etcd_settings_reach_member_init_only_when_set() {
        // Left out: the pod template is the one dkv built before these
        // settings existed, so no member restarts on an operator upgrade.
        let plain = member_init_args(json!({}));
        let new_flags = [
            "--heartbeat-interval-ms",
            "--election-timeout-ms",
            "--snapshot-count",
            "--max-request-bytes",
            "--max-txn-ops",
            "--log-level",
            "--extra-arg",
        ];
        for flag in new_flags {
            assert!(
                !plain.iter().any(|a| a.starts_with(flag)),
                "{flag} in {plain:?}"
            );
        }
        let tuned = member_init_args(json!({
            "heartbeatInterval": "200ms",
            "electionTimeout": "2s",
            "snapshotCount": 5000,
            "maxRequestBytes": 65536,
            "maxTxnOps": 16,
            "logLevel": "error",
            "extraArgs": {"grpc-keepalive-interval": "1h", "max-concurrent-streams": "100"},
        }));
        for arg in [
            "--heartbeat-interval-ms=200",
            "--election-timeout-ms=2000",
            "--snapshot-count=5000",
            "--max-request-bytes=65536",
            "--max-txn-ops=16",
            "--log-level=error",
            "--extra-arg=grpc-keepalive-interval=1h",
            "--extra-arg=max-concurrent-streams=100",
        ] {
            assert!(tuned.iter().any(|a| a == arg), "{arg} in {tuned:?}");
        }
    }

    fn spread_keys(spec: &PodSpec) -> Vec<(String, String, i32)> {
        spec.topology_spread_constraints
            .iter()
            .flatten()
            .map(|c| {
                (
                    c.topology_key.clone(),
                    c.when_unsatisfiable.clone(),
                    c.max_skew,
                )
            })
            .collect()
    }

    fn anti_affinity_keys(spec: &PodSpec) -> Vec<String> {
        spec.affinity
            .iter()
            .filter_map(|a| a.pod_anti_affinity.as_ref())
            .flat_map(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
            })
            .map(|t| t.pod_affinity_term.topology_key.clone())
            .collect()
    }

    #[test]
    fn members_spread_over_zones_then_nodes_by_preference_by_default() {
        let spec = built(json!({}));
        assert_eq!(
            spread_keys(&spec),
            [
                (ZONE_LABEL.to_owned(), "ScheduleAnyway".to_owned(), 1),
                (HOSTNAME_LABEL.to_owned(), "ScheduleAnyway".to_owned(), 1),
            ]
        );
        // Every constraint counts this cluster's members, and only them.
        for constraint in spec.topology_spread_constraints.iter().flatten() {
            assert_eq!(
                constraint
                    .label_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.clone()),
                Some(dkv_api::labels::selector_labels("orders"))
            );
            assert_eq!(constraint.min_domains, None);
            assert_eq!(constraint.match_label_keys, None);
        }
        assert_eq!(anti_affinity_keys(&spec), [HOSTNAME_LABEL]);
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        assert_eq!(required, None, "nothing is required: one node must do");
    }

    #[test]
    fn user_constraints_replace_the_default_spread_and_keep_the_anti_affinity() {
        let spec = built(json!({"topologySpreadConstraints": [{
            "maxSkew": 2,
            "topologyKey": "example.com/rack",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }]}));
        assert_eq!(
            spread_keys(&spec),
            [("example.com/rack".to_owned(), "DoNotSchedule".to_owned(), 2)]
        );
        assert_eq!(anti_affinity_keys(&spec), [HOSTNAME_LABEL]);
    }

    #[test]
    fn an_empty_constraint_list_turns_the_default_spread_off() {
        let spec = built(json!({"topologySpreadConstraints": []}));
        assert_eq!(spec.topology_spread_constraints, None);
    }

    #[test]
    fn user_affinity_replaces_the_default_anti_affinity_and_keeps_the_spread() {
        let spec = built(json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}
            ]}
        }}}));
        assert!(anti_affinity_keys(&spec).is_empty());
        assert!(
            spec.affinity
                .as_ref()
                .is_some_and(|a| a.node_affinity.is_some())
        );
        assert_eq!(spread_keys(&spec).len(), 2);
    }
}
