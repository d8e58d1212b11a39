//! The wiring of the cluster controller: the caches it reads, the watches
//! that trigger a reconcile, and the controller loop that runs
//! [`super::reconcile`].

use std::future::Future;
use std::sync::Arc;

use dkv_api::{DistributedKV, DistributedKVBackup};
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use tracing::info;

use super::recovery::node_access;
use super::validate;
use super::{error_policy, reconcile};
use crate::cluster::context::Context;
use crate::cluster::watches::{self, Stores, child_stream, spec_relevance};

/// Settings of the cluster controller.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Watch only this namespace (all when `None`).
    pub namespace: Option<String>,
    /// Reconciles running at once.
    pub concurrency: u16,
    /// Validity of the TLS certificates the operator issues.
    pub certificate_lifetime: crate::cluster::security::certificates::CertificateLifetime,
    /// Clusters that may start a rollout only an operator upgrade asks
    /// for, per minute, across the installation.
    pub member_upgrades_per_minute: u32,
    /// Raised to roll every cluster onto this operator's image.
    pub member_side_epoch: u32,
}

fn api_for<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until `shutdown` resolves, then lets in-flight
/// reconciles finish.
pub async fn run(
    client: Client,
    settings: Settings,
    defaults: validate::Defaults,
    metrics: Arc<crate::metrics::Metrics>,
    reporter: crate::events::Reporter,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let ns = settings.namespace.as_deref();
    let (stores, writers) = stores(&client).await;

    // The cluster watch ignores status-only updates (our own status writes
    // would otherwise echo back as reconciles); generation covers spec and
    // deletion, and the pause annotation and finalizers are watched too.
    let (dkv_reader, dkv_writer) = reflector::store::<DistributedKV>();
    let dkv_stream = watcher(
        api_for::<DistributedKV>(&client, ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(crate::cache::trim)
    .reflect(dkv_writer)
    .applied_objects()
    .predicate_filter(watches::cluster_relevance, Default::default());

    // StorageClasses are not ours: watched unfiltered, and a class appearing
    // re-triggers the clusters that name it (their InvalidSpec may clear).
    let sc_stream = watcher(
        Api::<StorageClass>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(crate::cache::trim)
    .reflect(writers.storage_classes)
    .applied_objects();
    let clusters = dkv_reader.clone();
    let by_storage_class = move |sc: StorageClass| naming_class(&clusters, &sc.name_any());

    // Nodes are not ours either: a node that is lost or back (its Ready
    // status, the unreachable taint) re-triggers the clusters with a member
    // pod on it.
    let node_stream = if stores.nodes.is_some() {
        watches::relevant_stream(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            writers.nodes,
            watches::node_relevance,
            watches::trim_node,
        )
        .boxed()
    } else {
        futures::stream::empty().boxed()
    };
    let member_pods = stores.pods.clone();
    let by_node = move |node: Node| watches::clusters_on(&member_pods, &node.name_any());

    let ctx = Arc::new(
        Context::new(client.clone(), stores, defaults, metrics, reporter)
            .with_certificate_lifetime(settings.certificate_lifetime)
            .with_member_upgrades_per_minute(settings.member_upgrades_per_minute)
            .with_member_side_epoch(settings.member_side_epoch),
    );
    info!(
        namespace = ns.unwrap_or("(all)"),
        concurrency = settings.concurrency,
        "starting DistributedKV controller"
    );
    let agent_changes = agent_changes(&ctx);
    Controller::for_stream(dkv_stream, dkv_reader)
        .reconcile_on(agent_changes)
        .owns_stream(watches::statefulset_stream(
            api_for::<StatefulSet>(&client, ns),
            writers.statefulsets,
        ))
        .owns_stream(child_stream(
            api_for::<Service>(&client, ns),
            writers.services,
            spec_relevance::<Service>,
        ))
        .owns_stream(child_stream(
            api_for::<PodDisruptionBudget>(&client, ns),
            writers.pdbs,
            spec_relevance::<PodDisruptionBudget>,
        ))
        .owns_stream(child_stream(
            api_for::<CronJob>(&client, ns),
            writers.cronjobs,
            spec_relevance::<CronJob>,
        ))
        .owns_stream(child_stream(
            api_for::<ConfigMap>(&client, ns),
            writers.configmaps,
            spec_relevance::<ConfigMap>,
        ))
        .watches_stream(sc_stream, by_storage_class)
        .watches_stream(node_stream, by_node)
        // Member pods belong to the StatefulSet, not to the cluster: map
        // them back through their cluster label.
        .watches_stream(
            watches::pod_stream(api_for::<Pod>(&client, ns), writers.pods),
            watches::cluster_of::<Pod>,
        )
        // Whether clients reach the members: the client Service's
        // EndpointSlices (labelled like their Service) decide `Available`.
        .watches_stream(
            child_stream(
                api_for::<EndpointSlice>(&client, ns),
                writers.endpoint_slices,
                watches::endpoint_slice_relevance,
            ),
            watches::cluster_of::<EndpointSlice>,
        )
        // Member volumes: storage growth waits for their capacity.
        .watches_stream(
            child_stream(
                api_for::<PersistentVolumeClaim>(&client, ns),
                writers.claims,
                watches::claim_relevance,
            ),
            watches::cluster_of::<PersistentVolumeClaim>,
        )
        // The status's backup facts come from the records: a record that
        // finishes, or goes, re-derives its cluster's.
        .watches_stream(
            watches::relevant_stream(
                api_for::<DistributedKVBackup>(&client, ns),
                watcher::Config::default(),
                writers.backups,
                watches::backup_relevance,
                crate::cache::trim,
            ),
            |backup: DistributedKVBackup| {
                backup
                    .namespace()
                    .map(|ns| ObjectRef::new(&backup.spec.cluster).within(&ns))
            },
        )
        .with_config(ControllerConfig::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                // Reconcile errors are reported inside reconcile; what
                // reaches here are queue/watch errors.
                tracing::debug!(error = %err, "controller event");
            }
        })
        .await;
    info!("DistributedKV controller stopped");
}

/// The watches' halves of [`Stores`]: what fills each cache.
struct Writers {
    statefulsets: Writer<StatefulSet>,
    services: Writer<Service>,
    pdbs: Writer<PodDisruptionBudget>,
    cronjobs: Writer<CronJob>,
    configmaps: Writer<ConfigMap>,
    pods: Writer<Pod>,
    storage_classes: Writer<StorageClass>,
    endpoint_slices: Writer<EndpointSlice>,
    claims: Writer<PersistentVolumeClaim>,
    backups: Writer<DistributedKVBackup>,
    nodes: Writer<Node>,
}

/// The caches the controller reads, and their writers. Nodes are cached
/// only when the operator may watch them.
async fn stores(client: &Client) -> (Stores, Writers) {
    let (statefulsets, sts_writer) = watches::store::<StatefulSet>();
    let (services, svc_writer) = watches::store::<Service>();
    let (pdbs, pdb_writer) = watches::store::<PodDisruptionBudget>();
    let (cronjobs, cronjob_writer) = watches::store::<CronJob>();
    let (configmaps, configmap_writer) = watches::store::<ConfigMap>();
    let (pods, pod_writer) = watches::store::<Pod>();
    let (storage_classes, sc_writer) = watches::store::<StorageClass>();
    let (endpoint_slices, slice_writer) = watches::store::<EndpointSlice>();
    let (claims, claim_writer) = watches::store::<PersistentVolumeClaim>();
    let (backups, backup_writer) = watches::store::<DistributedKVBackup>();
    let (node_store, node_writer) = watches::store::<Node>();
    let nodes = node_access::may_watch_nodes(client)
        .await
        .then_some(node_store);
    (
        Stores {
            statefulsets,
            services,
            pdbs,
            cronjobs,
            configmaps,
            pods,
            storage_classes,
            endpoint_slices,
            claims,
            backups,
            nodes,
        },
        Writers {
            statefulsets: sts_writer,
            services: svc_writer,
            pdbs: pdb_writer,
            cronjobs: cronjob_writer,
            configmaps: configmap_writer,
            pods: pod_writer,
            storage_classes: sc_writer,
            endpoint_slices: slice_writer,
            claims: claim_writer,
            backups: backup_writer,
            nodes: node_writer,
        },
    )
}

/// The clusters whose members' volumes use StorageClass `class`.
fn naming_class(clusters: &Store<DistributedKV>, class: &str) -> Vec<ObjectRef<DistributedKV>> {
    clusters
        .state()
        .into_iter()
        .filter(|d| {
            d.spec
                .storage
                .as_ref()
                .is_some_and(|s| s.storage_class_name == class)
        })
        .map(|d| ObjectRef::from_obj(d.as_ref()))
        .collect()
}

/// The clusters whose continuous backup agent's report changed (a new
/// chain, a gap, a failure): their status is derived again at once.
fn agent_changes(ctx: &Context) -> BoxStream<'static, ObjectRef<DistributedKV>> {
    ctx.take_agent_changes()
        .map(|changes| {
            futures::stream::unfold(changes, |mut changes| async move {
                changes.recv().await.map(|change| (change, changes))
            })
            .map(|(namespace, name)| ObjectRef::<DistributedKV>::new(&name).within(&namespace))
            .boxed()
        })
        .unwrap_or_else(|| futures::stream::empty().boxed())
}
