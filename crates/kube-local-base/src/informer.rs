//! Watch-backed caches of the objects the kubelet and the workload controllers read, and a change signal that wakes them.
//!
//! Every control loop on these caches is level-triggered: on any change it recomputes what it wants from the caches
//! and writes only the differences. The object counts of a local cluster are small, so a full pass per change is
//! cheap and avoids per-object work queues.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ControllerRevision, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    Endpoints, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Aborts its tasks when dropped, so a stopped environment leaves no loop running.
#[derive(Default)]
pub struct Tasks(Vec<JoinHandle<()>>);

impl Tasks {
    pub fn spawn(&mut self, f: impl Future<Output = ()> + Send + 'static) {
        self.0.push(tokio::spawn(f));
    }
}

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

/// Read-only caches of the cluster's workload objects, all namespaces.
#[derive(Clone)]
pub struct Caches {
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub endpoints: Store<Endpoints>,
    pub endpoint_slices: Store<EndpointSlice>,
    pub claims: Store<PersistentVolumeClaim>,
    pub volumes: Store<PersistentVolume>,
    pub storage_classes: Store<StorageClass>,
    pub statefulsets: Store<StatefulSet>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub revisions: Store<ControllerRevision>,
    pub jobs: Store<Job>,
    pub cronjobs: Store<CronJob>,
    pub disruption_budgets: Store<PodDisruptionBudget>,
    pub nodes: Store<Node>,
    changes: watch::Receiver<u64>,
}

/// A cache nothing fills: a kind this process does not watch.
fn unwatched<K>() -> Store<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    reflector::store().0
}

fn reflect<K>(client: &Client, changed: watch::Sender<u64>, tasks: &mut Tasks) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, writer) = reflector::store();
    let api: Api<K> = Api::all(client.clone());
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer);
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Ok(_) => {
                    changed.send_modify(|n| *n = n.wrapping_add(1));
                }
                Err(e) => tracing::debug!(error = %e, "kube-local informer watch error"),
            }
        }
    });
    store
}

impl Caches {
    /// The names of the nodes the cache holds, in name order.
    pub fn node_names(&self) -> std::collections::BTreeSet<String> {
        self.nodes
            .state()
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    }

    /// Starts one watch per kind; returns when every cache has its initial list.
    pub async fn start(client: &Client, tasks: &mut Tasks) -> Caches {
        let (tx, rx) = watch::channel(0u64);
        let caches = Caches {
            pods: reflect(client, tx.clone(), tasks),
            services: reflect(client, tx.clone(), tasks),
            endpoints: reflect(client, tx.clone(), tasks),
            endpoint_slices: reflect(client, tx.clone(), tasks),
            claims: reflect(client, tx.clone(), tasks),
            volumes: reflect(client, tx.clone(), tasks),
            storage_classes: reflect(client, tx.clone(), tasks),
            statefulsets: reflect(client, tx.clone(), tasks),
            deployments: reflect(client, tx.clone(), tasks),
            replicasets: reflect(client, tx.clone(), tasks),
            revisions: reflect(client, tx.clone(), tasks),
            jobs: reflect(client, tx.clone(), tasks),
            cronjobs: reflect(client, tx.clone(), tasks),
            disruption_budgets: reflect(client, tx.clone(), tasks),
            nodes: reflect(client, tx, tasks),
            changes: rx,
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = caches.pods.wait_until_ready().await;
            let _ = caches.services.wait_until_ready().await;
            let _ = caches.endpoints.wait_until_ready().await;
            let _ = caches.endpoint_slices.wait_until_ready().await;
            let _ = caches.claims.wait_until_ready().await;
            let _ = caches.volumes.wait_until_ready().await;
            let _ = caches.storage_classes.wait_until_ready().await;
            let _ = caches.statefulsets.wait_until_ready().await;
            let _ = caches.deployments.wait_until_ready().await;
            let _ = caches.replicasets.wait_until_ready().await;
            let _ = caches.revisions.wait_until_ready().await;
            let _ = caches.jobs.wait_until_ready().await;
            let _ = caches.cronjobs.wait_until_ready().await;
            let _ = caches.disruption_budgets.wait_until_ready().await;
            let _ = caches.nodes.wait_until_ready().await;
        })
        .await;
        caches
    }

    /// The caches a node agent needs (pods, Services, Endpoints, EndpointSlices, Nodes), watched with `client`; the
    /// workload kinds stay empty. For kubelets joined to an API server whose own controllers run the workloads.
    pub async fn start_for_nodes(client: &Client, tasks: &mut Tasks) -> Caches {
        let (tx, rx) = watch::channel(0u64);
        let caches = Caches {
            pods: reflect(client, tx.clone(), tasks),
            services: reflect(client, tx.clone(), tasks),
            endpoints: reflect(client, tx.clone(), tasks),
            endpoint_slices: reflect(client, tx.clone(), tasks),
            claims: unwatched(),
            volumes: unwatched(),
            storage_classes: unwatched(),
            statefulsets: unwatched(),
            deployments: unwatched(),
            replicasets: unwatched(),
            revisions: unwatched(),
            jobs: unwatched(),
            cronjobs: unwatched(),
            disruption_budgets: unwatched(),
            nodes: reflect(client, tx, tasks),
            changes: rx,
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = caches.pods.wait_until_ready().await;
            let _ = caches.services.wait_until_ready().await;
            let _ = caches.endpoints.wait_until_ready().await;
            let _ = caches.endpoint_slices.wait_until_ready().await;
            let _ = caches.nodes.wait_until_ready().await;
        })
        .await;
        caches
    }

    /// The caches a volume provisioner needs (claims, volumes, StorageClasses, Nodes), watched with `client`.
    pub async fn start_for_volumes(client: &Client, tasks: &mut Tasks) -> Caches {
        let (tx, rx) = watch::channel(0u64);
        let caches = Caches {
            pods: unwatched(),
            services: unwatched(),
            endpoints: unwatched(),
            endpoint_slices: unwatched(),
            claims: reflect(client, tx.clone(), tasks),
            volumes: reflect(client, tx.clone(), tasks),
            storage_classes: reflect(client, tx.clone(), tasks),
            statefulsets: unwatched(),
            deployments: unwatched(),
            replicasets: unwatched(),
            revisions: unwatched(),
            jobs: unwatched(),
            cronjobs: unwatched(),
            disruption_budgets: unwatched(),
            nodes: reflect(client, tx, tasks),
            changes: rx,
        };
        let _ = tokio::time::timeout(Duration::from_secs(10), async {
            let _ = caches.claims.wait_until_ready().await;
            let _ = caches.volumes.wait_until_ready().await;
            let _ = caches.storage_classes.wait_until_ready().await;
            let _ = caches.nodes.wait_until_ready().await;
        })
        .await;
        caches
    }

    /// A receiver that wakes on any change to any cache.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }
}

/// Runs `pass` whenever the caches change (bursts settle into one pass), and at the latest after the delay the last
/// pass asked for.
pub async fn run_loop<F, Fut>(changes: watch::Receiver<u64>, pass: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<Duration>>,
{
    run_loop_or(changes, futures::future::pending::<()>, pass).await;
}

/// [`run_loop`] that also runs a pass whenever `wake` completes.
pub async fn run_loop_or<F, Fut, W, WFut>(
    mut changes: watch::Receiver<u64>,
    mut wake: W,
    mut pass: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<Duration>>,
    W: FnMut() -> WFut,
    WFut: Future<Output = ()>,
{
    loop {
        let next = pass().await.unwrap_or(Duration::from_secs(30));
        tokio::select! {
            _ = wake() => {}
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
                changes.borrow_and_update();
            }
            _ = tokio::time::sleep(next) => {}
        }
    }
}

pub fn get<K>(store: &Store<K>, namespace: &str, name: &str) -> Option<std::sync::Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    store.get(&reflector::ObjectRef::new(name).within(namespace))
}
