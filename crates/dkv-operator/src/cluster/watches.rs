//! The watches behind the cluster controller, and the reflector stores
//! dereference reads child objects from (so a reconcile costs no GETs).
//!
//! Child watches pass an event on only when something the controller acts on
//! changed. kube-runtime's `predicate_filter` cannot be used for this because
//! it also swallows deletions (a deleted object has the same generation as
//! before), and a deleted child is exactly the drift that must trigger a
//! repair.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

use futures::{Stream, StreamExt, future};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Container, Node, NodeSpec, NodeStatus, Pod, PodSpec};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::parts::naming::ZONE_LABEL;

/// Hash of what a controller reacts to in an object of type `K`.
pub type Relevance<K> = fn(&K) -> u64;

/// Watches `api` (objects managed by dkv only), keeps `writer`'s store
/// current, and yields objects whose [`Relevance`] hash changed or that were
/// deleted.
pub fn child_stream<K>(
    api: Api<K>,
    writer: Writer<K>,
    relevance: Relevance<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    relevant_stream(api, managed(), writer, relevance, trim::<K>)
}

/// [`child_stream`] for member pods, cached as [`trim_pod`] leaves them.
pub fn pod_stream(
    api: Api<Pod>,
    writer: Writer<Pod>,
) -> impl Stream<Item = Result<Pod, watcher::Error>> + Send + 'static {
    relevant_stream(api, managed(), writer, pod_relevance, trim_pod)
}

/// [`child_stream`] for StatefulSets, cached as [`trim_statefulset`] leaves
/// them.
pub fn statefulset_stream(
    api: Api<StatefulSet>,
    writer: Writer<StatefulSet>,
) -> impl Stream<Item = Result<StatefulSet, watcher::Error>> + Send + 'static {
    relevant_stream(
        api,
        managed(),
        writer,
        statefulset_relevance,
        trim_statefulset,
    )
}

/// The objects dkv manages.
fn managed() -> watcher::Config {
    watcher::Config::default().labels(&dkv_api::labels::managed_selector())
}

/// Watches the objects `config` selects, keeps `writer`'s store current
/// with the objects as `trimmer` leaves them, and yields those whose
/// [`Relevance`] hash changed or that were deleted.
pub fn relevant_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    relevance: Relevance<K>,
    trimmer: fn(&mut K),
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut seen: HashMap<ObjectRef<K>, u64> = HashMap::new();
    watcher(api, config)
        .default_backoff()
        .modify(trimmer)
        .reflect(writer)
        .filter_map(move |event| future::ready(relevant(&mut seen, event, relevance)))
}

/// The object of `event` if what the controller reacts to changed (per
/// `relevance`, remembered in `seen`) or it was deleted.
fn relevant<K>(
    seen: &mut HashMap<ObjectRef<K>, u64>,
    event: Result<Event<K>, watcher::Error>,
    relevance: Relevance<K>,
) -> Option<Result<K, watcher::Error>>
where
    K: Resource<DynamicType = ()>,
{
    match event {
        Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
            let hash = relevance(&obj);
            (seen.insert(ObjectRef::from_obj(&obj), hash) != Some(hash)).then_some(Ok(obj))
        }
        Ok(Event::Delete(obj)) => {
            seen.remove(&ObjectRef::from_obj(&obj));
            Some(Ok(obj))
        }
        Ok(Event::Init | Event::InitDone) => None,
        Err(err) => Some(Err(err)),
    }
}

use kube::runtime::watcher::watcher;

use crate::cache::trim;

/// StatefulSets are read for their metadata (annotations: bootstrap size,
/// restore source), replicas, claim templates and status; the pod template
/// is only ever written (server-side apply of the desired one), never read
/// back. Its spec is dropped from the cache: in bench/heap-profile.sh at
/// 1000 clusters the StatefulSets' pod specs were the largest part of the
/// heap after object metadata.
pub fn trim_statefulset(sts: &mut StatefulSet) {
    trim(sts);
    sts.spec.template.spec = None;
}

/// Member pods are read only through [`crate::cluster::membership::observe::member_pods`]
/// (and the planner's relevance hash): of their spec, the containers' names
/// and images, the init containers' names and arguments, and the node. The
/// rest (volumes, environment, probes, resources, affinity) is dropped from
/// the cache: with 3 members per cluster the pods' specs were the largest
/// part of the operator's heap after the StatefulSets' (bench/heap-profile.sh).
pub fn trim_pod(pod: &mut Pod) {
    trim(pod);
    if let Some(spec) = pod.spec.take() {
        pod.spec = Some(PodSpec {
            containers: spec
                .containers
                .into_iter()
                .map(|c| Container {
                    name: c.name,
                    image: c.image,
                    ..Container::default()
                })
                .collect(),
            init_containers: spec.init_containers.map(|init| {
                init.into_iter()
                    .map(|c| Container {
                        name: c.name,
                        args: c.args,
                        ..Container::default()
                    })
                    .collect()
            }),
            node_name: spec.node_name,
            ..PodSpec::default()
        });
    }
}

fn hash_of(parts: impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish()
}

/// Children without a status the controller reads: react to spec (via
/// generation, or the object's labels/annotations/spec for kinds without one).
pub fn spec_relevance<K: Resource + serde::Serialize>(obj: &K) -> u64 {
    let meta = obj.meta();
    match meta.generation {
        Some(generation) => {
            let owners: Vec<&str> = meta
                .owner_references
                .iter()
                .flatten()
                .map(|o| o.uid.as_str())
                .collect();
            hash_of((generation, &meta.labels, &meta.annotations, owners))
        }
        // Services have no generation: hash the whole object minus
        // bookkeeping that changes on every write.
        None => {
            let mut value = serde_json::to_value(obj).unwrap_or_default();
            if let Some(meta) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.remove("resourceVersion");
                meta.remove("managedFields");
            }
            hash_of(value.to_string())
        }
    }
}

/// StatefulSets: spec changes plus the status counts the cluster status
/// reports; other status churn (observedGeneration bookkeeping, revisions of
/// pods the operator does not restart) is ignored.
pub fn statefulset_relevance(sts: &StatefulSet) -> u64 {
    let status = sts.status.as_ref();
    hash_of((
        spec_relevance(sts),
        status.map(|s| s.replicas),
        status.and_then(|s| s.ready_replicas),
        status.and_then(|s| s.available_replicas),
        status.and_then(|s| s.current_replicas),
        status.and_then(|s| s.updated_replicas),
    ))
}

/// The cluster watch reacts to spec (generation, which also moves on
/// deletion), annotations (the pause switch) and finalizers, and ignores
/// status-only updates: the operator's own status writes would otherwise echo
/// back as reconciles.
pub fn cluster_relevance(dkv: &dkv_api::DistributedKV) -> Option<u64> {
    let meta = dkv.meta();
    Some(hash_of((
        meta.generation,
        &meta.annotations,
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    )))
}

/// Backup records (created by users too, so not label-selected): what the
/// cluster's status derives from them (see `backup_catalogue`).
pub fn backup_relevance(backup: &dkv_api::DistributedKVBackup) -> u64 {
    let status = backup.status.as_ref();
    hash_of((
        &backup.spec.cluster,
        status.and_then(|s| s.phase).map(|p| format!("{p:?}")),
        status.and_then(|s| s.completion_time.as_ref()).map(|t| t.0),
        status.and_then(|s| s.artifact.as_ref()).map(|a| &a.uri),
        status.and_then(|s| s.message.as_ref()),
    ))
}

/// Member pods: what the planner reads from them (readiness, IP, image,
/// member-init's refusals).
pub fn pod_relevance(pod: &Pod) -> u64 {
    let status = pod.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.clone());
    let init_messages: Vec<Option<String>> = status
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .flat_map(|s| [s.state.as_ref(), s.last_state.as_ref()])
        .map(|state| {
            state
                .and_then(|st| st.terminated.as_ref())
                .and_then(|t| t.message.clone())
        })
        .collect();
    let images: Vec<Option<String>> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| c.image.clone()).collect())
        .unwrap_or_default();
    hash_of((
        ready,
        status.and_then(|s| s.pod_ip.clone()),
        init_messages,
        images,
        pod.metadata.deletion_timestamp.is_some(),
    ))
}

/// EndpointSlices of the cluster's Services: which endpoints are ready (what
/// clients of the client Service can reach, and so `Available`).
pub fn endpoint_slice_relevance(slice: &EndpointSlice) -> u64 {
    let endpoints: Vec<(&Vec<String>, Option<bool>)> = slice
        .endpoints
        .iter()
        .flatten()
        .map(|e| (&e.addresses, e.conditions.as_ref().and_then(|c| c.ready)))
        .collect();
    hash_of((&slice.metadata.labels, endpoints))
}

/// Member volume claims: what they ask for and what they have (storage
/// growth waits for the capacity), and their phase.
pub fn claim_relevance(claim: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> u64 {
    let requested = claim
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    let status = claim.status.as_ref();
    let capacity = status
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .map(|q| q.0.clone());
    hash_of((requested, capacity, status.and_then(|s| s.phase.clone())))
}

/// Nodes are read for their zone label, their `Ready` condition and their
/// taints; the rest (images, addresses, capacity, other conditions, most
/// labels) is dropped: a cluster's nodes outnumber dkv's members.
pub fn trim_node(node: &mut Node) {
    trim(node);
    node.metadata.annotations = None;
    if let Some(labels) = node.metadata.labels.as_mut() {
        labels.retain(|key, _| key == ZONE_LABEL);
    }
    if let Some(spec) = node.spec.take() {
        node.spec = Some(NodeSpec {
            taints: spec.taints,
            ..NodeSpec::default()
        });
    }
    if let Some(status) = node.status.take() {
        node.status = Some(NodeStatus {
            conditions: status
                .conditions
                .map(|c| c.into_iter().filter(|c| c.type_ == "Ready").collect()),
            ..NodeStatus::default()
        });
    }
}

/// Nodes: whether and why they are lost (their Ready status, the
/// unreachable taint) and their zone, which status reports. Heartbeat times are left out:
/// every node renews them every few seconds.
pub fn node_relevance(node: &Node) -> u64 {
    hash_of((
        crate::cluster::recovery::lost_node::node_loss(Some(node)),
        node.labels().get(ZONE_LABEL),
    ))
}

/// The clusters with a member pod on `node`, as the pod cache knows them.
pub fn clusters_on(pods: &Store<Pod>, node: &str) -> Vec<ObjectRef<dkv_api::DistributedKV>> {
    let mut clusters: Vec<ObjectRef<dkv_api::DistributedKV>> = pods
        .state()
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| cluster_of(p.as_ref().clone()))
        .collect();
    clusters.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    clusters.dedup();
    clusters
}

/// The cluster an object that is not owned by it belongs to (member pods,
/// their volume claims, the Services' EndpointSlices), by its cluster label.
pub fn cluster_of<K: Resource>(obj: K) -> Option<ObjectRef<dkv_api::DistributedKV>> {
    let cluster = obj.labels().get(dkv_api::labels::CLUSTER_KEY)?.clone();
    let namespace = obj.namespace()?;
    Some(ObjectRef::new(&cluster).within(&namespace))
}

/// Read handles on every cache the reconcile needs.
#[derive(Clone)]
pub struct Stores {
    pub statefulsets: Store<StatefulSet>,
    pub services: Store<k8s_openapi::api::core::v1::Service>,
    pub pdbs: Store<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    pub cronjobs: Store<k8s_openapi::api::batch::v1::CronJob>,
    pub configmaps: Store<k8s_openapi::api::core::v1::ConfigMap>,
    /// Member pods (created by the StatefulSets, labelled by cluster).
    pub pods: Store<Pod>,
    pub storage_classes: Store<k8s_openapi::api::storage::v1::StorageClass>,
    /// The EndpointSlices of the clusters' Services (which carry their
    /// Service's labels).
    pub endpoint_slices: Store<EndpointSlice>,
    /// The members' volume claims (labelled like the StatefulSet's template).
    pub claims: Store<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    /// Every `DistributedKVBackup` (the cluster's status derives its backup
    /// facts from them).
    pub backups: Store<dkv_api::DistributedKVBackup>,
    /// Every Node, as [`trim_node`] leaves it: where members run, and
    /// whether their nodes are lost (see [`crate::cluster::recovery::lost_node`]). `None` when
    /// the operator may not list and watch Nodes (its RBAC leaves them
    /// out): members' zones and lost nodes are then not known.
    pub nodes: Option<Store<Node>>,
}

impl Stores {
    /// Whether every cache has completed its initial list, so that "not in
    /// the cache" means "does not exist".
    pub fn ready(&self) -> Result<(), &'static str> {
        // `wait_until_ready` is async; the non-blocking check is whether the
        // ready future resolves immediately.
        let checks: [(&'static str, bool); 11] = [
            ("Pod cache", is_ready(&self.pods)),
            ("ConfigMap cache", is_ready(&self.configmaps)),
            ("StatefulSet cache", is_ready(&self.statefulsets)),
            ("Service cache", is_ready(&self.services)),
            ("PodDisruptionBudget cache", is_ready(&self.pdbs)),
            ("CronJob cache", is_ready(&self.cronjobs)),
            ("StorageClass cache", is_ready(&self.storage_classes)),
            ("EndpointSlice cache", is_ready(&self.endpoint_slices)),
            ("PersistentVolumeClaim cache", is_ready(&self.claims)),
            ("DistributedKVBackup cache", is_ready(&self.backups)),
            ("Node cache", self.nodes.as_ref().is_none_or(is_ready)),
        ];
        match checks.into_iter().find(|(_, ready)| !ready) {
            Some((what, _)) => Err(what),
            None => Ok(()),
        }
    }
}

fn is_ready<K>(store: &Store<K>) -> bool
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
}

/// A fresh store pair, for wiring and for tests.
pub fn store<K>() -> (Store<K>, Writer<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    reflector::store()
}

/// Looks up a namespaced object in a store.
pub fn get<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<std::sync::Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// Every object in a store whose controller owner is the cluster with `uid`.
pub fn owned_by<K>(store: &Store<K>, uid: &str) -> Vec<std::sync::Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .into_iter()
        .filter(|obj| {
            obj.owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use kube::api::ObjectMeta;

    fn sts(generation: i64, ready: i32, observed: i64) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("orders".into()),
                generation: Some(generation),
                resource_version: Some(format!("{generation}{ready}{observed}")),
                ..ObjectMeta::default()
            },
            spec: StatefulSetSpec::default(),
            status: Some(StatefulSetStatus {
                replicas: 3,
                ready_replicas: Some(ready),
                observed_generation: Some(observed),
                ..StatefulSetStatus::default()
            }),
        }
    }

    #[test]
    fn statefulset_triggers_on_spec_and_readiness_only() {
        let base = statefulset_relevance(&sts(1, 2, 1));
        assert_eq!(
            base,
            statefulset_relevance(&sts(1, 2, 2)),
            "observedGeneration churn is ignored"
        );
        assert_ne!(
            base,
            statefulset_relevance(&sts(2, 2, 1)),
            "a spec change triggers"
        );
        assert_ne!(
            base,
            statefulset_relevance(&sts(1, 3, 1)),
            "readiness changes trigger"
        );
    }

    #[test]
    fn services_without_generation_trigger_on_content_not_resource_version() {
        let mut svc = k8s_openapi::api::core::v1::Service::default();
        svc.metadata.resource_version = Some("1".into());
        let a = spec_relevance(&svc);
        svc.metadata.resource_version = Some("2".into());
        assert_eq!(a, spec_relevance(&svc));
        svc.spec = Some(k8s_openapi::api::core::v1::ServiceSpec {
            type_: Some("NodePort".into()),
            ..Default::default()
        });
        assert_ne!(a, spec_relevance(&svc));
    }

    #[test]
    fn cluster_status_writes_do_not_trigger() {
        let mut dkv = dkv_api::DistributedKV::new(
            "orders",
            serde_json::from_value(serde_json::json!({"size": 3, "image": "etcd:3.5.16"}))
                .unwrap_or_else(|_| unreachable!()),
        );
        dkv.metadata.generation = Some(1);
        let before = cluster_relevance(&dkv);
        dkv.status = Some(Default::default());
        dkv.metadata.resource_version = Some("9".into());
        assert_eq!(before, cluster_relevance(&dkv));
        dkv.metadata.annotations = Some([("dkv.io/reconcile-paused".into(), "true".into())].into());
        assert_ne!(before, cluster_relevance(&dkv));
    }

    #[test]
    fn a_trimmed_member_pod_reads_as_the_whole_pod_does() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "orders-1", "namespace": "shop",
                "labels": {"dkv.io/cluster": "orders", "controller-revision-hash": "orders-7f9"},
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
            },
            "spec": {
                "nodeName": "node-2",
                "initContainers": [{
                    "name": "member-init", "image": "ghcr.io/dkv-io/dkv:0.1.0",
                    "args": ["member-init", "--bootstrap-size=3", "--data-dir=/var/lib/etcd"],
                    "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
                }],
                "containers": [{
                    "name": "etcd", "image": "registry.k8s.io/etcd:3.5.16-0",
                    "command": ["etcd"], "args": ["--config-file=/var/lib/etcd/etcd.conf"],
                    "readinessProbe": {"httpGet": {"path": "/health", "port": 2379}},
                    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                }],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-orders-1"}}],
                "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            },
            "status": {
                "podIP": "10.0.0.7",
                "conditions": [{"type": "Ready", "status": "True"}],
                "initContainerStatuses": [{
                    "name": "member-init", "image": "dkv", "imageID": "", "ready": true, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 0, "message": "started under epoch recovery-1"}},
                }],
            },
        }))
        .unwrap();
        let mut trimmed = pod.clone();
        trim_pod(&mut trimmed);

        let read = |p: &Pod| {
            crate::cluster::membership::observe::member_pods(
                "orders",
                &[std::sync::Arc::new(p.clone())],
                None,
                None,
                "https",
            )
        };
        assert_eq!(read(&trimmed), read(&pod));
        assert_eq!(pod_relevance(&trimmed), pod_relevance(&pod));
        // Of the spec, only what is read is left.
        let spec = |p: &Pod| serde_json::to_value(&p.spec).unwrap();
        assert_eq!(
            spec(&trimmed),
            serde_json::json!({
                "nodeName": "node-2",
                "initContainers": [{"name": "member-init",
                    "args": ["member-init", "--bootstrap-size=3", "--data-dir=/var/lib/etcd"]}],
                "containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.16-0"}],
            })
        );
        assert!(trimmed.metadata.managed_fields.is_none());
    }

    fn node(ready: &str, taints: serde_json::Value, heartbeat: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "node-2",
                "labels": {ZONE_LABEL: "zone-b", "kubernetes.io/os": "linux"},
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": {"podCIDR": "10.0.2.0/24", "taints": taints},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat},
                    {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": heartbeat},
                ],
                "images": [{"names": ["registry.k8s.io/etcd:3.5.16-0"], "sizeBytes": 1}],
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_trimmed_node_keeps_what_says_it_is_lost_and_its_zone() {
        let unreachable = serde_json::json!([
            {"key": crate::cluster::recovery::lost_node::UNREACHABLE_TAINT, "effect": "NoExecute"}
        ]);
        for whole in [
            node("True", serde_json::json!([]), "2026-11-26T08:00:00Z"),
            node("Unknown", unreachable.clone(), "2026-11-26T08:00:00Z"),
            node("True", unreachable, "2026-11-26T08:00:00Z"),
        ] {
            let mut trimmed = whole.clone();
            trim_node(&mut trimmed);
            assert_eq!(
                crate::cluster::recovery::lost_node::node_loss(Some(&trimmed)),
                crate::cluster::recovery::lost_node::node_loss(Some(&whole))
            );
            assert_eq!(
                trimmed.labels().get(ZONE_LABEL).map(String::as_str),
                Some("zone-b")
            );
            assert_eq!(node_relevance(&trimmed), node_relevance(&whole));
            let status = trimmed.status.unwrap_or_default();
            assert_eq!(status.conditions.map(|c| c.len()), Some(1));
            assert_eq!(status.images, None);
            assert_eq!(trimmed.metadata.annotations, None);
        }
    }

    #[test]
    fn a_node_triggers_on_being_lost_or_back_not_on_heartbeats() {
        let fine = node_relevance(&node("True", serde_json::json!([]), "2026-11-26T08:00:00Z"));
        assert_eq!(
            fine,
            node_relevance(&node("True", serde_json::json!([]), "2026-11-26T08:00:10Z")),
            "a heartbeat is no change"
        );
        assert_ne!(
            fine,
            node_relevance(&node(
                "Unknown",
                serde_json::json!([]),
                "2026-11-26T08:00:00Z"
            ))
        );
    }

    #[test]
    fn a_node_maps_to_the_clusters_with_a_member_on_it() {
        let (pods, mut writer) = store::<Pod>();
        writer.apply_watcher_event(&Event::InitDone);
        for (name, cluster, node) in [
            ("orders-0", "orders", "node-1"),
            ("orders-1", "orders", "node-2"),
            ("orders-2", "orders", "node-2"),
            ("carts-0", "carts", "node-2"),
            ("users-0", "users", "node-3"),
        ] {
            let pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "shop", "labels": {"dkv.io/cluster": cluster}},
                "spec": {"containers": [], "nodeName": node},
            }))
            .unwrap_or_else(|e| panic!("{e}"));
            writer.apply_watcher_event(&Event::Apply(pod));
        }
        let names: Vec<String> = clusters_on(&pods, "node-2")
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["carts", "orders"]);
        assert!(clusters_on(&pods, "node-9").is_empty());
    }
}
