//! The order of a pod's containers: volumes first, then init containers one by one (sidecars started beside them),
//! then the containers together, each supervised under the restart policy ([`super::supervise`]) until it is done,
//! and the phase the pod ends in. Ephemeral containers ([`super::ephemeral`]) run beside all of them once the volumes are
//! ready.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tokio::sync::watch;

use super::ephemeral::EphemeralContainers;
use super::restart::init_exit_fails_pod;
use super::status::{set_condition, terminal_phase};
use super::supervise::{Outcome, supervise};
use super::{ContainerKind, PodRuntime, Stop, enforcing, facts, is_sidecar, sleep_unless_stopped};
use crate::kubelet::{Shared, events, security, volumes};

pub(super) async fn lifecycle(shared: &Arc<Shared>, rt: &Arc<PodRuntime>, stop: &mut Stop) {
    let pod = rt.pod();
    let failed_mount = |message: String| {
        events::record(
            &shared.client,
            &pod,
            None,
            true,
            "FailedMount",
            message,
            "kubelet",
        );
    };
    // Volumes: retried until they can be set up (claims bound, ConfigMaps present), as the kubelet's volume manager.
    let mut reported = None;
    let volumes = loop {
        match volumes::prepare(&shared.client, &facts(shared, &pod, rt.ip), &rt.dir).await {
            Ok(v) => break v,
            Err(e) => {
                let message = e.to_string();
                if reported.as_deref() != Some(message.as_str()) {
                    failed_mount(message.clone());
                    reported = Some(message);
                }
                if !sleep_unless_stopped(Duration::from_millis(500), stop).await {
                    return;
                }
            }
        }
    };
    if enforcing(shared)
        && let Some(spec) = pod.spec.as_ref()
        && let Some(group) = security::fs_group(spec)
    {
        for volume in spec.volumes.iter().flatten() {
            if let Some(path) = volumes.get(&volume.name)
                && let Err(e) = security::apply_fs_group(volume, path, group)
            {
                failed_mount(format!(
                    "setting fsGroup {group} on volume {}: {e}",
                    volume.name
                ));
            }
        }
    }
    rt.update(|s| set_condition(s, "PodReadyToStartContainers", true, None, None));

    let ephemeral = EphemeralContainers::start(shared, rt, &volumes, stop.clone());
    run_containers(shared, rt, stop, &volumes).await;
    let grace = stop.borrow().unwrap_or_else(|| grace_period(&pod));
    ephemeral.stop(grace).await;
}

/// The pod's termination grace period.
fn grace_period(pod: &k8s_openapi::api::core::v1::Pod) -> Duration {
    Duration::from_secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )
}

/// Init containers in order (sidecars started beside them), then the containers, until they are done or the pod
/// stops; sets the phase the pod ends in.
async fn run_containers(
    shared: &Arc<Shared>,
    rt: &Arc<PodRuntime>,
    stop: &mut Stop,
    volumes: &HashMap<String, PathBuf>,
) {
    let pod = rt.pod();
    let policy = rt.restart_policy();
    // Sidecars (init containers with restartPolicy Always) keep running beside the containers; they stop with the
    // pod, or once the containers of a pod that does not restart them have finished.
    let (sidecar_stop, sidecar_stop_rx) = watch::channel(None);
    let mut sidecars = Vec::new();
    for c in rt.spec_containers(true) {
        if is_sidecar(&c) {
            let (task_shared, task_rt, task_volumes, task_stop) = (
                shared.clone(),
                rt.clone(),
                volumes.clone(),
                sidecar_stop_rx.clone(),
            );
            let name = c.name.clone();
            sidecars.push(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
                async move {
                    supervise(
                        &task_shared,
                        &task_rt,
                        &c,
                        ContainerKind::Init,
                        &task_volumes,
                        task_stop,
                    )
                    .await;
                },
            )));
            // The next init container starts once the sidecar has started (its startup probe passed).
            loop {
                if rt.init_started(&name) {
                    break;
                }
                if !sleep_unless_stopped(Duration::from_millis(50), stop).await {
                    sidecar_stop.send_replace(stop.borrow().or(Some(Duration::ZERO)));
                    join_all(sidecars).await;
                    return;
                }
            }
            continue;
        }
        match supervise(shared, rt, &c, ContainerKind::Init, volumes, stop.clone()).await {
            Outcome::Stopped => {
                sidecar_stop.send_replace(stop.borrow().or(Some(Duration::ZERO)));
                join_all(sidecars).await;
                return;
            }
            Outcome::Exited(code) if !init_exit_fails_pod(code) => {}
            Outcome::Exited(_) => {
                // Only reached with restartPolicy Never: the pod fails.
                sidecar_stop.send_replace(Some(Duration::ZERO));
                join_all(sidecars).await;
                *rt.terminal.lock().unwrap_or_else(|e| e.into_inner()) = Some("Failed");
                rt.update(|_| {});
                return;
            }
        }
    }
    *rt.initialized.lock().unwrap_or_else(|e| e.into_inner()) = true;
    rt.update(|_| {});

    let containers = rt.spec_containers(false);
    let outcomes = join_all(
        containers
            .iter()
            .map(|c| supervise(shared, rt, c, ContainerKind::Regular, volumes, stop.clone())),
    )
    .await;
    let grace = stop.borrow().or(Some(grace_period(&pod)));
    sidecar_stop.send_replace(grace);
    join_all(sidecars).await;
    if outcomes.iter().any(|o| matches!(o, Outcome::Stopped)) {
        return;
    }
    let exit_codes: Vec<i32> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Exited(code) => Some(*code),
            Outcome::Stopped => None,
        })
        .collect();
    let phase = terminal_phase(&policy, &exit_codes);
    *rt.terminal.lock().unwrap_or_else(|e| e.into_inner()) = Some(phase);
    rt.update(|_| {});
}
