//! The nodes section's baseline workload: 3 etcd pods of a plain
//! StatefulSet, no operator — what a person deploys by hand. The same etcd
//! image (so the same binary) as dkv's members, its initial cluster given
//! statically (`--initial-cluster` over the pods' stable DNS names through a
//! headless Service), a PodDisruptionBudget of `maxUnavailable: 1` (dkv's
//! own budget, `minAvailable` 2 of 3, allows the same), and dkv's probes,
//! grace period and default spread (prefer distinct nodes and zones), so
//! that scheduling, readiness and termination are alike and the difference
//! is what the operator adds.
//!
//! Its pods carry the labels of a dkv member (`dkv.io/cluster`,
//! `app.kubernetes.io/component=etcd`) so that the writer, the read-back and
//! the readiness counts of `dkv-test-support` work on it unchanged; it runs
//! in a namespace of its own, and no operator runs while it is measured.

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The liveness and startup check of dkv's etcd 3.5 members (serializable:
/// it does not depend on quorum).
const SERIALIZABLE_HEALTH: &str = "/health?exclude=NOSPACE&serializable=true";

fn probe(path: &str, period: i32, timeout: i32, failures: i32) -> Value {
    json!({
        "httpGet": {"path": path, "port": 2381, "scheme": "HTTP"},
        "periodSeconds": period, "timeoutSeconds": timeout, "failureThreshold": failures,
    })
}

/// The headless Service, the budget and the StatefulSet of `name` in `ns`:
/// 3 members on `image`, 1Gi volumes of `storage_class`.
pub fn objects(
    ns: &str,
    name: &str,
    image: &str,
    storage_class: &str,
) -> anyhow::Result<(Service, PodDisruptionBudget, StatefulSet)> {
    let selector = json!({"dkv.io/cluster": name, "app.kubernetes.io/component": "etcd"});
    let peer = |member: &str| format!("http://{member}.{name}.{ns}.svc:2380");
    let initial_cluster = (0..3)
        .map(|i| format!("{name}-{i}={}", peer(&format!("{name}-{i}"))))
        .collect::<Vec<_>>()
        .join(",");
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "clusterIP": "None",
            // Peers must resolve each other before any is Ready.
            "publishNotReadyAddresses": true,
            "selector": selector,
            "ports": [{"name": "client", "port": 2379}, {"name": "peer", "port": 2380}],
        },
    });
    let budget = json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    });
    let spread = |key: &str| {
        json!({
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        })
    };
    let set = json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 3,
            "serviceName": name,
            // All three at once: none can be Ready before a quorum runs.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": selector},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }]}},
                    "topologySpreadConstraints": [
                        spread("topology.kubernetes.io/zone"),
                        spread("kubernetes.io/hostname"),
                    ],
                    "containers": [{
                        "name": "etcd",
                        "image": image,
                        "command": ["etcd"],
                        "args": [
                            "--name=$(POD_NAME)",
                            "--data-dir=/var/lib/etcd/data",
                            "--listen-client-urls=http://$(POD_IP):2379",
                            format!("--advertise-client-urls=http://$(POD_NAME).{name}.{ns}.svc:2379"),
                            "--listen-peer-urls=http://$(POD_IP):2380",
                            format!("--initial-advertise-peer-urls=http://$(POD_NAME).{name}.{ns}.svc:2380"),
                            "--listen-metrics-urls=http://$(POD_IP):2381",
                            format!("--initial-cluster={initial_cluster}"),
                            format!("--initial-cluster-token={name}-{ns}"),
                            "--initial-cluster-state=new",
                        ],
                        "env": [
                            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        ],
                        "ports": [
                            {"name": "client", "containerPort": 2379},
                            {"name": "peer", "containerPort": 2380},
                            {"name": "metrics", "containerPort": 2381},
                        ],
                        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                        "readinessProbe": probe("/health", 2, 3, 3),
                        "livenessProbe": probe(SERIALIZABLE_HEALTH, 10, 5, 6),
                        "startupProbe": probe(SERIALIZABLE_HEALTH, 1, 5, 300),
                    }],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": storage_class,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }],
        },
    });
    Ok((
        serde_json::from_value(service).context("building the bare Service")?,
        serde_json::from_value(budget).context("building the bare PodDisruptionBudget")?,
        serde_json::from_value(set).context("building the bare StatefulSet")?,
    ))
}

/// Creates [`objects`] in `ns` (which must exist).
pub async fn create(
    client: &Client,
    ns: &str,
    name: &str,
    image: &str,
    storage_class: &str,
) -> anyhow::Result<()> {
    let (service, budget, set) = objects(ns, name, image, storage_class)?;
    let pp = PostParams::default();
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&pp, &service)
        .await
        .with_context(|| format!("creating Service {ns}/{name}"))?;
    Api::<PodDisruptionBudget>::namespaced(client.clone(), ns)
        .create(&pp, &budget)
        .await
        .with_context(|| format!("creating PodDisruptionBudget {ns}/{name}"))?;
    Api::<StatefulSet>::namespaced(client.clone(), ns)
        .create(&pp, &set)
        .await
        .with_context(|| format!("creating StatefulSet {ns}/{name}"))?;
    Ok(())
}
