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
mod node_taints;
mod ownership;
mod replicaset;
mod statefulset;
mod volume_binder;
mod volume_protection;

/// LabelSelector matching, shared with the scheduler's pod affinity and topology spread.
pub(crate) use disruption::selector_matches;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::clock::Clock;
use crate::informer::{self, Caches, Tasks};

/// Shared by the controllers.
pub(crate) struct Context {
    pub client: kube::Client,
    pub caches: Caches,
    /// Provisioned volumes are directories here.
    pub volume_dir: PathBuf,
    pub clock: Clock,
}

/// Running workload controllers; dropping stops them.
pub struct Controllers {
    _tasks: Tasks,
}

impl Controllers {
    /// Starts every controller against `client`; provisioned volumes go under `dir/volumes`.
    pub async fn start(client: kube::Client, dir: &Path, clock: Clock) -> Controllers {
        let mut tasks = Tasks::default();
        let caches = Caches::start(&client, &mut tasks).await;
        Self::start_with(client, dir, clock, caches, tasks)
    }

    fn start_with(
        client: kube::Client,
        dir: &Path,
        clock: Clock,
        caches: Caches,
        mut tasks: Tasks,
    ) -> Controllers {
        let ctx = Arc::new(Context {
            client,
            caches,
            volume_dir: dir.join("volumes"),
            clock,
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
    kubelet: crate::kubelet::Kubelet,
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
        // One set of watches serves both.
        let mut cache_tasks = Tasks::default();
        let caches = Caches::start(&client, &mut cache_tasks).await;
        let controllers = Controllers::start_with(
            client.clone(),
            dir,
            clock.clone(),
            caches.clone(),
            Tasks::default(),
        );
        let kubelet = crate::kubelet::Kubelet::start_with(
            client,
            config,
            &dir.join("kubelet"),
            caches,
            cache_tasks,
        )
        .await?;
        Ok(Workloads {
            kubelet,
            clock,
            _controllers: controllers,
        })
    }

    pub fn kubelet(&self) -> &crate::kubelet::Kubelet {
        &self.kubelet
    }

    /// The clock CronJobs are scheduled by; tests move it forward.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }
}
