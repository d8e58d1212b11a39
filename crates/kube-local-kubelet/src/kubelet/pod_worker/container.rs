//! One run of a container: resolving its image, environment, security context and mounts, launching the process,
//! its postStart and preStop hooks, following its probes, and recording the running and terminated states.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::probes::{ProbeSet, ProbeVerdict, Probes};
use super::{
    ContainerKind, ContainerStdin, PodRuntime, StdinWriter, Stop, enforcing, facts, now, stopped,
};
use crate::kubelet::environment::{container_env, expand_all};
use crate::kubelet::image_map::ResolveError;
use crate::kubelet::sandbox::{self, ContainerProcess, Launch, Mount};
use crate::kubelet::{Shared, events, probe, security, terminal, volumes};

/// How one run of a container ended.
pub(super) enum RunEnd {
    Stopped,
    Exited {
        code: i32,
        ran: Duration,
    },
    /// The container could not start: waiting reason and message.
    NotStarted(&'static str, String),
}

/// Starts the container once and runs it (with its probes) until it exits or the pod stops.
pub(super) async fn run_once(
    shared: &Arc<Shared>,
    rt: &Arc<PodRuntime>,
    container: &Container,
    kind: ContainerKind,
    volumes: &HashMap<String, PathBuf>,
    restarts: i32,
    stop: &mut Stop,
) -> RunEnd {
    let pod = rt.pod();
    let image = container.image.clone().unwrap_or_default();
    let command = container.command.clone().unwrap_or_default();
    let args = container.args.clone().unwrap_or_default();
    // Resolve the image before the environment: an unmapped image is a pull error whatever else is wrong.
    if let Err(ResolveError::Unmapped(i)) = shared.config.image_map.resolve(&image, &[], &[]) {
        return RunEnd::NotStarted(
            "ErrImagePull",
            format!(
                "failed to pull and unpack image \"{i}\": not found in the kube-local image map"
            ),
        );
    }
    let security = if enforcing(shared) {
        let spec = pod.spec.clone().unwrap_or_default();
        let pod_ref = format!(
            "{}_{}",
            rt.name,
            pod.metadata.namespace.as_deref().unwrap_or_default()
        );
        match security::resolve(&spec, container, &pod_ref) {
            Ok(enforced) => enforced,
            Err(message) => return RunEnd::NotStarted("CreateContainerConfigError", message),
        }
    } else {
        security::Enforced::default()
    };
    let tty = container.tty == Some(true);
    let env = match container_env(&shared.client, &facts(shared, &pod, rt.ip), container).await {
        Ok(mut env) => {
            if tty {
                // Part of the container's environment, as a runtime sets it: commands exec'd into it see it too.
                terminal::add_term(&mut env);
            }
            env
        }
        Err(e) => return RunEnd::NotStarted("CreateContainerConfigError", e.to_string()),
    };
    let program = match shared.config.image_map.resolve(
        &image,
        &expand_all(&command, &env),
        &expand_all(&args, &env),
    ) {
        Ok(p) => p,
        Err(ResolveError::Unmapped(i)) => {
            return RunEnd::NotStarted("ErrImagePull", format!("image {i} is not mapped"));
        }
        Err(ResolveError::NotFound(m)) => return RunEnd::NotStarted("RunContainerError", m),
    };
    let mut mounts = Vec::new();
    for vm in container.volume_mounts.iter().flatten() {
        let Some(source) = volumes.get(&vm.name) else {
            return RunEnd::NotStarted(
                "CreateContainerConfigError",
                format!("volume \"{}\" not found", vm.name),
            );
        };
        let source = match vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) if !sub.split('/').any(|c| c == "..") => {
                let p = source.join(sub);
                if !p.exists() {
                    let _ = std::fs::create_dir_all(&p);
                }
                p
            }
            _ => source.clone(),
        };
        mounts.push(Mount {
            source,
            target: vm.mount_path.clone(),
            read_only: vm.read_only == Some(true),
        });
    }
    // The API credentials, unless the pod opted out or mounts something there itself.
    let api = shared.config.api_server.as_ref();
    let sa_taken = mounts
        .iter()
        .any(|m| m.target == volumes::SERVICE_ACCOUNT_PATH);
    if let (Some(api), false) = (api, sa_taken)
        && let Ok(Some(dir)) =
            volumes::service_account_dir(&shared.client, &pod, &rt.dir, api.ca_pem.as_deref()).await
    {
        mounts.push(Mount {
            source: dir,
            target: volumes::SERVICE_ACCOUNT_PATH.into(),
            read_only: true,
        });
    }
    let termination_path = container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    let termination_file = rt
        .dir
        .join("termination")
        .join(format!("{}-{restarts}", container.name));
    let termination_ok = sandbox::ensure_parent(&termination_file)
        .and_then(|_| std::fs::write(&termination_file, b""))
        // Writable by whatever user the container runs as, as upstream's.
        .and_then(|_| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&termination_file, std::fs::Permissions::from_mode(0o666))
        })
        .is_ok();
    // /dev/termination-log must exist to be mounted over; only root may create it on the host.
    if termination_ok
        && (termination_path != "/dev/termination-log"
            || Path::new(&termination_path).exists()
            || sandbox::is_root())
    {
        mounts.push(Mount {
            source: termination_file.clone(),
            target: termination_path,
            read_only: false,
        });
    }
    let hostname = pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .unwrap_or_else(|| rt.name.clone());
    let log = rt.log_path(&container.name, restarts);
    let launch = Launch {
        program: program.path.clone(),
        args: program.args.clone(),
        env: env.clone(),
        hosts_file: rt.hosts_file.clone(),
        hostname,
        mounts,
        working_dir: container.working_dir.clone(),
        log: log.clone(),
        stage: rt.dir.join("mounts").join(&container.name),
        security,
        stdin: container.stdin == Some(true),
        tty,
    };
    let mut process = match shared.processes.launch(&launch).await {
        Ok(p) => p,
        Err(e) => return RunEnd::NotStarted("RunContainerError", e.to_string()),
    };
    // Each run reads a pipe (or a terminal) of its own; attach writes to the current one.
    let terminal = process.terminal();
    let input: Option<StdinWriter> = match &terminal {
        Some(t) if container.stdin == Some(true) => match t.input() {
            Ok(writer) => Some(Box::new(writer)),
            Err(e) => {
                return RunEnd::NotStarted(
                    "RunContainerError",
                    format!("opening the terminal of container {}: {e}", container.name),
                );
            }
        },
        Some(_) => None,
        None => process
            .take_stdin()
            .map(|pipe| Box::new(pipe) as StdinWriter),
    };
    let stdin = input.map(|writer| {
        Arc::new(ContainerStdin {
            pipe: tokio::sync::Mutex::new(Some(writer)),
            once: container.stdin_once == Some(true),
        })
    });
    rt.set_stdin(&container.name, stdin);
    rt.set_terminal(&container.name, terminal);
    let started_at = now();
    let began = Instant::now();
    // The run's end, as the container's status and termination message say.
    let finished = |code| {
        finish(
            rt,
            container,
            kind,
            code,
            &started_at,
            &termination_file,
            &log,
        )
    };
    rt.envs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(container.name.clone(), env.clone());
    rt.pids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(container.name.clone(), process.pid());
    let target = probe::Target {
        pod_ip: IpAddr::V4(rt.ip),
        ports: container.ports.clone().unwrap_or_default(),
        pid: process.pid(),
        env: env.clone(),
    };
    let lifecycle = container.lifecycle.clone().unwrap_or_default();
    // A container is Running only once its postStart hook has completed.
    if let Some(hook) = &lifecycle.post_start
        && process.wait_exec(Duration::from_secs(10)).await
    {
        let (ok, message) = probe::run_hook(hook, &target, Duration::from_secs(30)).await;
        if !ok {
            events::record(
                &shared.client,
                &pod,
                Some(&container.name),
                true,
                "FailedPostStartHook",
                message,
                "kubelet",
            );
            let code = process.terminate(Duration::from_secs(2)).await;
            rt.pids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&container.name);
            finished(code);
            return RunEnd::Exited {
                code,
                ran: began.elapsed(),
            };
        }
    }
    // Plain init containers have no probes; sidecars probe like containers.
    let probes = Probes::of(container, kind.is_init());
    let (started, ready) = probes.at_start();
    rt.container_status(kind, &container.name, |cs| {
        if restarts > cs.restart_count {
            cs.last_state = cs
                .state
                .take()
                .filter(|s| s.terminated.is_some())
                .or(cs.last_state.take());
        }
        cs.restart_count = restarts;
        cs.container_id = Some(format!("kube-local://{}", process.pid()));
        cs.image_id = format!("kube-local://{}", program.path.display());
        cs.state = Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..ContainerState::default()
        });
        // Ephemeral containers are neither probed nor ever ready; upstream reports no `started` for them.
        if kind == ContainerKind::Ephemeral {
            cs.started = None;
            cs.ready = false;
        } else {
            cs.started = Some(started);
            cs.ready = ready;
        }
    });
    events::record(
        &shared.client,
        &pod,
        Some(&container.name),
        false,
        "Started",
        format!("Started container {}", container.name),
        "kubelet",
    );

    // preStop runs within the grace period; the signals get what is left of it.
    let pre_stop = |grace: Duration| {
        let hook = lifecycle.pre_stop.clone();
        let target = target.clone();
        async move {
            let Some(hook) = hook else { return grace };
            let began = Instant::now();
            let _ = probe::run_hook(&hook, &target, grace).await;
            grace.saturating_sub(began.elapsed())
        }
    };
    let mut probe_set = ProbeSet::start(shared, &pod, container, &target, !probes.probed);
    let end = loop {
        tokio::select! {
            code = process.wait() => break Some(code),
            grace = stopped(stop) => {
                events::record(&shared.client, &pod, Some(&container.name), false, "Killing", format!("Stopping container {}", container.name), "kubelet");
                let grace = pre_stop(grace).await;
                let code = process.terminate(grace).await;
                finish(rt, container, kind, code, &started_at, &termination_file, &log);
                break None;
            }
            verdict = probe_set.next() => match verdict {
                ProbeVerdict::Started => {
                    rt.container_status(kind, &container.name, |cs| {
                        cs.started = Some(true);
                        if let Some(ready) = probes.ready_after_startup() {
                            cs.ready = ready;
                        }
                    });
                }
                ProbeVerdict::Ready(ready) => {
                    rt.container_status(kind, &container.name, |cs| cs.ready = ready);
                }
                ProbeVerdict::Restart(which) => {
                    events::record(&shared.client, &pod, Some(&container.name), false, "Killing", format!("Container {} failed {which} probe, will be restarted", container.name), "kubelet");
                    let grace = Duration::from_secs(pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30).max(0) as u64);
                    let grace = pre_stop(grace).await;
                    break Some(process.terminate(grace).await);
                }
            }
        }
    };
    drop(probe_set);
    rt.pids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&container.name);
    // The run's terminal goes with it (nothing attaches to a container that is not running).
    rt.set_terminal(&container.name, None);
    let Some(code) = end else {
        return RunEnd::Stopped;
    };
    finished(code);
    drop(process);
    RunEnd::Exited {
        code,
        ran: began.elapsed(),
    }
}

/// Records a terminated state with the exit code and termination message.
fn finish(
    rt: &PodRuntime,
    container: &Container,
    kind: ContainerKind,
    code: i32,
    started_at: &Time,
    termination_file: &Path,
    log: &Path,
) {
    let mut message = std::fs::read_to_string(termination_file).unwrap_or_default();
    if message.len() > 4096 {
        message.truncate(4096);
    }
    if message.is_empty()
        && code != 0
        && container.termination_message_policy.as_deref() == Some("FallbackToLogsOnError")
    {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        let start = tail.len().saturating_sub(2048);
        message = tail.get(start..).unwrap_or_default().to_string();
    }
    rt.container_status(kind, &container.name, |cs| {
        cs.ready = false;
        cs.started = (kind != ContainerKind::Ephemeral).then_some(false);
        cs.state = Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: code,
                reason: Some(if code == 0 { "Completed" } else { "Error" }.into()),
                message: (!message.is_empty()).then_some(message),
                started_at: Some(started_at.clone()),
                finished_at: Some(now()),
                container_id: cs.container_id.clone(),
                signal: (code > 128).then_some(code - 128),
            }),
            ..ContainerState::default()
        });
    });
}

#[allow(dead_code)]
fn _assert_send(p: ContainerProcess) -> impl Send {
    p
}
