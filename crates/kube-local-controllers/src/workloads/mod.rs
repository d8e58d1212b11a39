//! Workload controllers, as clients of the API server: Deployment, ReplicaSet, StatefulSet, Job, CronJob, the local
//! volume provisioner and binder, Endpoints and EndpointSlices, PodDisruptionBudget status, and the unschedulable taint of cordoned nodes. One module per
//! controller.

mod cronjob;
mod deployment;
mod disruption;
mod endpoint_slices;
mod endpoints;
mod hashing;
mod job;
mod node_lifecycle;
mod node_taints;
mod ownership;
mod pod_gc;
mod replicaset;
mod scheduling;
mod statefulset;
mod volume_binder;
mod volume_protection;

pub use volume_binder::{
    FIXED_SIZE_CLASS, NETWORK_CLASS, NETWORK_PROVISIONER, PROVISIONER, storage_classes,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Clock;
use crate::informer::{self, Caches, Tasks};

/// Shared by the controllers.
pub(crate) struct Context {
    pub client: kube::Client,
    pub caches: Caches,
    /// The environment's directory: volumes that follow their pod under `volumes/`, volumes bound to a node under
    /// that node's directory (see [`crate::kubelet::node_dir`]).
    pub dir: PathBuf,
    pub clock: Clock,
    /// The node lifecycle controller's grace period for missed heartbeats.
    pub node_monitor_grace: std::time::Duration,
}

/// kube-local's volume provisioners (`kube-local.io/local-path`, `kube-local.io/network-disk`) working beside a
/// real control plane, as an external provisioner and resizer do: the API server's PersistentVolume controller
/// binds, these make, grow and delete the volumes. Dropping it stops them.
pub struct ExternalProvisioner {
    _tasks: Tasks,
}

impl ExternalProvisioner {
    /// Starts provisioning with `client` (which needs to read claims, volumes, StorageClasses and Nodes, write
    /// volumes, and update claims' status); volumes go under `dir` (a node's under `dir/nodes/NAME`, as the kubelets
    /// joined with the same directory find them).
    pub async fn start(client: kube::Client, dir: &Path) -> ExternalProvisioner {
        let mut tasks = Tasks::default();
        let caches = Caches::start_for_volumes(&client, &mut tasks).await;
        let ctx = Arc::new(Context {
            client,
            caches,
            dir: dir.to_path_buf(),
            clock: Clock::default(),
            node_monitor_grace: crate::kubelet::NodeLayout::default().monitor_grace,
        });
        let changes = ctx.caches.changes();
        tasks.spawn(async move {
            informer::run_loop(changes, || volume_binder::reconcile_external(&ctx)).await;
        });
        ExternalProvisioner { _tasks: tasks }
    }
}

/// Running workload controllers; dropping stops them.
pub struct Controllers {
    _tasks: Tasks,
}

impl Controllers {
    /// Starts every controller against `client`; provisioned volumes go under `dir`.
    pub async fn start(client: kube::Client, dir: &Path, clock: Clock) -> Controllers {
        let mut tasks = Tasks::default();
        let caches = Caches::start(&client, &mut tasks).await;
        let grace = crate::kubelet::NodeLayout::default().monitor_grace;
        Self::start_with(client, dir, clock, grace, caches, tasks)
    }

    fn start_with(
        client: kube::Client,
        dir: &Path,
        clock: Clock,
        node_monitor_grace: std::time::Duration,
        caches: Caches,
        mut tasks: Tasks,
    ) -> Controllers {
        let ctx = Arc::new(Context {
            client,
            caches,
            dir: dir.to_path_buf(),
            clock,
            node_monitor_grace,
        });
        macro_rules! control_loop {
            ($reconcile:path) => {{
                let ctx = ctx.clone();
                let changes = ctx.caches.changes();
                tasks.spawn(async move {
                    informer::run_loop(changes, || $reconcile(&ctx)).await;
                });
            }};
        }
        control_loop!(deployment::reconcile);
        control_loop!(statefulset::reconcile);
        control_loop!(volume_binder::reconcile);
        control_loop!(volume_protection::reconcile);
        control_loop!(endpoints::reconcile);
        control_loop!(endpoint_slices::reconcile);
        control_loop!(job::reconcile);
        control_loop!(disruption::reconcile);
        control_loop!(node_taints::reconcile);
        // The scheduler remembers its bindings until its pod cache shows them.
        {
            let ctx = ctx.clone();
            let changes = ctx.caches.changes();
            tasks.spawn(async move {
                let scheduler = Arc::new(tokio::sync::Mutex::new(scheduling::Scheduler::default()));
                informer::run_loop(changes, || {
                    let (scheduler, ctx) = (scheduler.clone(), ctx.clone());
                    async move { scheduler.lock().await.pass(&ctx).await }
                })
                .await;
            });
        }
        // The pod garbage collector remembers since when a node has been missing.
        {
            let ctx = ctx.clone();
            let changes = ctx.caches.changes();
            tasks.spawn(async move {
                let gc = Arc::new(tokio::sync::Mutex::new(pod_gc::PodGc::default()));
                informer::run_loop(changes, || {
                    let (gc, ctx) = (gc.clone(), ctx.clone());
                    async move { gc.lock().await.pass(&ctx).await }
                })
                .await;
            });
        }
        // The node lifecycle controller reads the heartbeat Leases, which the caches do not watch.
        {
            let ctx = ctx.clone();
            let changes = ctx.caches.changes();
            tasks.spawn(async move {
                let monitor = Arc::new(tokio::sync::Mutex::new(node_lifecycle::Monitor::default()));
                informer::run_loop(changes, || {
                    let (monitor, ctx) = (monitor.clone(), ctx.clone());
                    async move { monitor.lock().await.pass(&ctx).await }
                })
                .await;
            });
        }
        // The ReplicaSet controller remembers its writes until its pod cache shows them.
        {
            let ctx = ctx.clone();
            let changes = ctx.caches.changes();
            tasks.spawn(async move {
                let expectations = replicaset::Expectations::default();
                informer::run_loop(changes, || replicaset::reconcile(&ctx, &expectations)).await;
            });
        }
        // CronJobs also wake when a test moves the clock.
        {
            let ctx = ctx.clone();
            let changes = ctx.caches.changes();
            tasks.spawn(async move {
                let clock = ctx.clock.clone();
                informer::run_loop_or(changes, || clock.moved(), || cronjob::reconcile(&ctx)).await;
            });
        }
        Controllers { _tasks: tasks }
    }
}

/// The workload controllers and the kubelet of one environment (see `EnvironmentBuilder::kubelet`).
pub struct Workloads {
    // Field order is drop order: the kubelet stops its processes first.
    kubelet: Arc<crate::kubelet::Kubelet>,
    clock: Clock,
    _controllers: Controllers,
}

impl Workloads {
    /// Starts the controllers and the kubelet against `client`; volumes and pod directories go under `dir`.
    pub async fn start(
        client: kube::Client,
        dir: &Path,
        config: crate::kubelet::KubeletConfig,
    ) -> Result<Workloads, crate::kubelet::KubeletError> {
        let clock = Clock::default();
        let grace = config.nodes.monitor_grace;
        // One set of watches serves both.
        let mut cache_tasks = Tasks::default();
        let caches = Caches::start(&client, &mut cache_tasks).await;
        let controllers = Controllers::start_with(
            client.clone(),
            dir,
            clock.clone(),
            grace,
            caches.clone(),
            Tasks::default(),
        );
        let kubelet =
            crate::kubelet::Kubelet::start_with(client, config, dir, caches, cache_tasks).await?;
        Ok(Workloads {
            kubelet: Arc::new(kubelet),
            clock,
            _controllers: controllers,
        })
    }

    pub fn kubelet(&self) -> &crate::kubelet::Kubelet {
        &self.kubelet
    }

    /// A handle on the kubelets that does not keep them running.
    pub fn kubelet_handle(&self) -> std::sync::Weak<crate::kubelet::Kubelet> {
        Arc::downgrade(&self.kubelet)
    }

    /// The clock CronJobs are scheduled by; tests move it forward.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}
