//! The ephemeral containers `kubectl debug` adds to a running pod: each one that appears in the pod's spec is
//! started once, as a process of the pod like its containers (the same volumes, hosts file, environment and
//! working-directory rules, see `container`), and never restarted; its state goes to
//! `status.ephemeralContainerStatuses`. An image that cannot be "pulled" (not in the image map) waits and is retried
//! with back-off, as a container's would.
//!
//! `targetContainerName` asks a container runtime to put the debug container in the target container's process
//! namespace. Here every container of every pod is a process in the host's process table already, so a debug
//! container sees the target's processes (`ps`, `/proc/PID/root`, signals) without anything extra; it does not enter
//! the target's mount namespace (it has its own mounts, as any container of the pod).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateTerminated, ContainerStatus, EphemeralContainer, Pod,
};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

use super::status::waiting;
use super::supervise::supervise;
use super::{ContainerKind, PodRuntime, Stop, now, stopped};
use crate::kubelet::Shared;

/// The container an ephemeral container runs as: the same fields, without the target (which only says whose
/// namespaces to share).
pub(super) fn as_container(ec: &EphemeralContainer) -> Container {
    // Destructured in full so that a field added to the API type is a decision here, not a silent drop.
    let EphemeralContainer {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        target_container_name: _,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    } = ec.clone();
    Container {
        args,
        command,
        env,
        env_from,
        image,
        image_pull_policy,
        lifecycle,
        liveness_probe,
        name,
        ports,
        readiness_probe,
        resize_policy,
        resources,
        restart_policy,
        restart_policy_rules,
        security_context,
        startup_probe,
        stdin,
        stdin_once,
        termination_message_path,
        termination_message_policy,
        tty,
        volume_devices,
        volume_mounts,
        working_dir,
    }
}

/// The ephemeral container statuses a new pod worker starts from: what the API shows of runs before it (a node's
/// kubelet that restarts finds them there). Those that ran are done — one still shown running lost its process with
/// the kubelet, and is reported as upstream reports a container that vanished; those still waiting are started.
pub(super) fn carried_statuses(pod: &Pod) -> Option<Vec<ContainerStatus>> {
    let before = pod.status.as_ref()?.ephemeral_container_statuses.as_ref()?;
    let carried: Vec<ContainerStatus> = before
        .iter()
        .filter_map(|cs| {
            let state = cs.state.as_ref()?;
            if state.terminated.is_some() {
                return Some(cs.clone());
            }
            let running = state.running.as_ref()?;
            Some(ContainerStatus {
                ready: false,
                state: Some(ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        exit_code: 137,
                        reason: Some("ContainerStatusUnknown".into()),
                        message: Some(
                            "The container could not be located when the pod was terminated".into(),
                        ),
                        started_at: running.started_at.clone(),
                        finished_at: Some(now()),
                        container_id: cs.container_id.clone(),
                        signal: None,
                    }),
                    ..ContainerState::default()
                }),
                ..cs.clone()
            })
        })
        .collect();
    (!carried.is_empty()).then_some(carried)
}

/// The ephemeral containers of the pod that have not been started yet, in spec order.
fn not_started(pod: &Pod, started: &HashSet<String>) -> Vec<EphemeralContainer> {
    pod.spec
        .iter()
        .flat_map(|s| s.ephemeral_containers.iter().flatten())
        .filter(|c| !started.contains(&c.name))
        .cloned()
        .collect()
}

/// Runs a pod's ephemeral containers from the moment its sandbox is ready (volumes set up; init containers need not
/// have finished, as upstream) until the pod stops or its containers are done.
pub(super) struct EphemeralContainers {
    finish: watch::Sender<Option<Duration>>,
    task: AbortOnDropHandle<()>,
}

impl EphemeralContainers {
    pub(super) fn start(
        shared: &Arc<Shared>,
        rt: &Arc<PodRuntime>,
        volumes: &HashMap<String, PathBuf>,
        stop: Stop,
    ) -> EphemeralContainers {
        let (finish, finish_rx) = watch::channel(None);
        let task = AbortOnDropHandle::new(tokio::spawn(run(
            shared.clone(),
            rt.clone(),
            volumes.clone(),
            stop,
            finish_rx,
        )));
        EphemeralContainers { finish, task }
    }

    /// The pod's containers are done: the ephemeral containers still running get `grace` to stop (as every
    /// container of a finished pod is stopped), and no new one starts.
    pub(super) async fn stop(self, grace: Duration) {
        self.finish.send_replace(Some(grace));
        if let Err(e) = self.task.await {
            tracing::debug!(error = %e, "the ephemeral containers' runner ended abnormally");
        }
    }
}

async fn run(
    shared: Arc<Shared>,
    rt: Arc<PodRuntime>,
    volumes: HashMap<String, PathBuf>,
    mut pod_stop: Stop,
    mut finish: Stop,
) {
    let (stop_runs, runs_stop) = watch::channel(None);
    let mut changed = rt.pod_changed.subscribe();
    // Those the status already shows (carried over from before this worker) ran once; they never run again.
    let mut started: HashSet<String> = rt
        .status_now()
        .ephemeral_container_statuses
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let mut runs = Vec::new();
    let grace = loop {
        for ec in not_started(&rt.pod(), &started) {
            started.insert(ec.name.clone());
            let container = as_container(&ec);
            rt.update(|s| {
                s.ephemeral_container_statuses
                    .get_or_insert_with(Vec::new)
                    .push(ContainerStatus {
                        name: container.name.clone(),
                        image: container.image.clone().unwrap_or_default(),
                        state: Some(waiting("ContainerCreating", None)),
                        ..ContainerStatus::default()
                    });
            });
            let (shared, rt, volumes, stop) = (
                shared.clone(),
                rt.clone(),
                volumes.clone(),
                runs_stop.clone(),
            );
            runs.push(AbortOnDropHandle::new(tokio::spawn(async move {
                supervise(
                    &shared,
                    &rt,
                    &container,
                    ContainerKind::Ephemeral,
                    &volumes,
                    stop,
                )
                .await;
            })));
        }
        tokio::select! {
            Ok(()) = changed.changed() => {}
            grace = stopped(&mut pod_stop) => break grace,
            grace = stopped(&mut finish) => break grace,
        }
    };
    stop_runs.send_replace(Some(grace));
    join_all(runs).await;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_ephemeral_container_runs_as_the_container_it_describes() {
        let ec: EphemeralContainer = serde_json::from_value(json!({
            "name": "debugger", "image": "busybox", "command": ["sh"], "stdin": true,
            "targetContainerName": "app", "workingDir": "/data",
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }))
        .unwrap();
        let c = as_container(&ec);
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({
                "name": "debugger", "image": "busybox", "command": ["sh"], "stdin": true,
                "workingDir": "/data", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            })
        );
    }

    #[test]
    fn a_new_worker_keeps_finished_runs_and_retries_waiting_ones() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "status": {"ephemeralContainerStatuses": [
                {"name": "done", "image": "b", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "lost", "image": "b", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                {"name": "pulling", "image": "nope", "imageID": "", "ready": false, "restartCount": 0,
                 "state": {"waiting": {"reason": "ImagePullBackOff"}}},
            ]},
        }))
        .unwrap();
        let carried = carried_statuses(&pod).unwrap();
        let names: Vec<&str> = carried.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, vec!["done", "lost"]);
        let lost = carried[1]
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .unwrap();
        assert_eq!(lost.exit_code, 137);
        assert_eq!(lost.reason.as_deref(), Some("ContainerStatusUnknown"));
    }

    #[test]
    fn only_the_ones_not_started_yet_start() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "app"}], "ephemeralContainers": [
                {"name": "a", "image": "b"}, {"name": "b", "image": "b"},
            ]},
        }))
        .unwrap();
        let started = HashSet::from(["a".to_string()]);
        let names: Vec<String> = not_started(&pod, &started)
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, vec!["b".to_string()]);
    }
}
