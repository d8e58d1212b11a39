//! One container under the pod's restart policy: runs it again after it exits (with CrashLoopBackOff) or when it
//! could not start (ImagePullBackOff and friends), until it is done — init containers until they succeed, ephemeral
//! containers after their one run.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Container;

use super::container::{RunEnd, run_once};
use super::restart::{CrashLoopBackoff, StartBackoff, not_started_backoff_reason, restarts};
use super::status::waiting;
use super::{ContainerKind, PodRuntime, Stop, is_sidecar, sleep_unless_stopped};
use crate::kubelet::{Shared, events};

pub(super) enum Outcome {
    /// The pod is stopping; the container was terminated.
    Stopped,
    /// The container exited and is not restarted (its code).
    Exited(i32),
}

/// Runs a container under the pod's restart policy until it is done (init containers: until success; ephemeral
/// containers: until their one run ends).
pub(super) async fn supervise(
    shared: &Arc<Shared>,
    rt: &Arc<PodRuntime>,
    container: &Container,
    kind: ContainerKind,
    volumes: &HashMap<String, PathBuf>,
    mut stop: Stop,
) -> Outcome {
    let policy = rt.restart_policy();
    let mut restart_count = 0i32;
    let mut crash_backoff =
        CrashLoopBackoff::new(shared.config.backoff_initial, shared.config.backoff_max);
    let mut start_backoff =
        StartBackoff::new(shared.config.backoff_initial, shared.config.backoff_max);
    let pod_ref = rt.pod();
    loop {
        if stop.borrow().is_some() {
            return Outcome::Stopped;
        }
        match run_once(
            shared,
            rt,
            container,
            kind,
            volumes,
            restart_count,
            &mut stop,
        )
        .await
        {
            RunEnd::Stopped => return Outcome::Stopped,
            RunEnd::NotStarted(reason, message) => {
                rt.container_status(kind, &container.name, |cs| {
                    cs.state = Some(waiting(reason, Some(message.clone())));
                });
                let backoff_reason = not_started_backoff_reason(reason);
                events::record(
                    &shared.client,
                    &pod_ref,
                    Some(&container.name),
                    true,
                    "Failed",
                    message.clone(),
                    "kubelet",
                );
                if !sleep_unless_stopped(Duration::from_millis(200), &mut stop).await {
                    return Outcome::Stopped;
                }
                rt.container_status(kind, &container.name, |cs| {
                    cs.state = Some(waiting(
                        backoff_reason,
                        Some(format!(
                            "Back-off pulling image \"{}\": {message}",
                            container.image.clone().unwrap_or_default()
                        ))
                        .filter(|_| backoff_reason == "ImagePullBackOff")
                        .or(Some(message.clone())),
                    ));
                });
                if !sleep_unless_stopped(start_backoff.next(), &mut stop).await {
                    return Outcome::Stopped;
                }
            }
            RunEnd::Exited { code, ran } => {
                // Ephemeral containers are never restarted, whatever the pod's policy.
                if kind == ContainerKind::Ephemeral
                    || !restarts(&policy, kind.is_init(), is_sidecar(container), code)
                {
                    return Outcome::Exited(code);
                }
                // Upstream backoff: the first restart is immediate, then initial, doubling, up to max; a container
                // that ran for 10 minutes starts over.
                let crash_delay = crash_backoff.next(ran);
                if !crash_delay.is_zero() {
                    let message = format!(
                        "back-off {:?} restarting failed container={} pod={}_{}({})",
                        crash_delay, container.name, rt.name, rt.namespace, rt.uid
                    );
                    rt.container_status(kind, &container.name, |cs| {
                        cs.last_state = cs.state.take();
                        cs.state = Some(waiting("CrashLoopBackOff", Some(message.clone())));
                    });
                    events::record(
                        &shared.client,
                        &pod_ref,
                        Some(&container.name),
                        true,
                        "BackOff",
                        "Back-off restarting failed container".into(),
                        "kubelet",
                    );
                    if !sleep_unless_stopped(crash_delay, &mut stop).await {
                        return Outcome::Stopped;
                    }
                }
                restart_count += 1;
            }
        }
    }
}
