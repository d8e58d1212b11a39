//! One pod's life on the node: sandbox (IP, volumes, hosts file), init containers in order, containers under their
//! restart policy with CrashLoopBackOff and probes, status (phase, conditions, container states), and graceful
//! termination when the pod is deleted.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::environment::{PodFacts, container_env, expand_all};
use super::image_map::ResolveError;
use super::sandbox::{ContainerProcess, Launch, Mount};
use super::{NODE_NAME, Shared, events, probe, volumes};
use crate::informer::run_loop;

/// `Some(grace)` once the pod must stop.
type Stop = watch::Receiver<Option<Duration>>;

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// A pod running on this kubelet.
pub struct PodRuntime {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub ip: Ipv4Addr,
    pub dir: PathBuf,
    pub hosts_file: PathBuf,
    pod: Mutex<Pod>,
    status: Mutex<PodStatus>,
    status_changed: watch::Sender<u64>,
    /// Main process id of each running container.
    pids: Mutex<HashMap<String, i32>>,
    /// Whether the init containers have all completed.
    initialized: Mutex<bool>,
    /// Set when the pod reached Succeeded or Failed.
    terminal: Mutex<Option<&'static str>>,
}

impl PodRuntime {
    pub fn pod(&self) -> Pod {
        self.pod.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The process id of a container's current run.
    pub fn pid(&self, container: &str) -> Option<i32> {
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(container)
            .copied()
    }

    /// Kills a container's processes (fault hook).
    pub fn kill(&self, container: &str) -> bool {
        self.signal_container(container, rustix::process::Signal::KILL)
    }

    /// Sends `signal` to a container's process group (fault hooks).
    pub fn signal_container(&self, container: &str, signal: rustix::process::Signal) -> bool {
        let pid = self
            .pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(container)
            .copied();
        match pid.and_then(rustix::process::Pid::from_raw) {
            Some(pid) => rustix::process::kill_process_group(pid, signal).is_ok(),
            None => false,
        }
    }

    fn log_path(&self, container: &str, restart: i32) -> PathBuf {
        self.dir
            .join("logs")
            .join(container)
            .join(format!("{restart}.log"))
    }

    /// The log file of a container's current run, or of the run before it.
    pub fn log_file(&self, container: &str, previous: bool) -> Option<PathBuf> {
        self.log_runs(container)
            .into_iter()
            .rev()
            .nth(usize::from(previous))
    }

    /// Every run's log file of a container, oldest first.
    fn log_runs(&self, container: &str) -> Vec<PathBuf> {
        let dir = self.dir.join("logs").join(container);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut runs: Vec<(i32, PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let n: i32 = e.path().file_stem()?.to_str()?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        runs.sort_by_key(|(n, _)| *n);
        runs.into_iter().map(|(_, p)| p).collect()
    }

    /// The log a `containerLogs` request reads, chosen as a real kubelet chooses the container instance: the current
    /// one is the running (or last terminated) run; `previous` is the run before it — except while the container
    /// waits to restart, when its last terminated run is both.
    pub fn container_log(&self, container: &str, previous: bool) -> Result<PathBuf, String> {
        let status = self.container_state(container);
        let waiting_reason = status
            .as_ref()
            .and_then(|s| s.waiting.as_ref())
            .map(|w| w.reason.clone().unwrap_or_default());
        let runs = self.log_runs(container);
        let chosen = match (previous, &waiting_reason) {
            // Waiting after a run: both the current and the previous instance are that run.
            (_, Some(_)) if self.restarted(container) => runs.last(),
            (false, Some(reason)) => {
                return Err(format!(
                    "container {container:?} in pod {:?} is waiting to start: {reason}",
                    self.name
                ));
            }
            (false, None) => runs.last(),
            (true, _) => runs.iter().rev().nth(1),
        };
        match chosen {
            Some(p) => Ok(p.clone()),
            None if previous => Err(format!(
                "previous terminated container {container:?} in pod {:?} not found",
                self.name
            )),
            None => Err(format!(
                "container {container:?} in pod {:?} is waiting to start: ContainerCreating",
                self.name
            )),
        }
    }

    /// The container's current state in the pod status (containers and init containers).
    fn container_state(&self, container: &str) -> Option<ContainerState> {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status
            .container_statuses
            .iter()
            .chain(status.init_container_statuses.iter())
            .flatten()
            .find(|c| c.name == container)
            .and_then(|c| c.state.clone())
    }

    /// Whether the container has a terminated run behind it (its status has a last terminated state).
    fn restarted(&self, container: &str) -> bool {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status
            .container_statuses
            .iter()
            .chain(status.init_container_statuses.iter())
            .flatten()
            .find(|c| c.name == container)
            .is_some_and(|c| {
                c.last_state
                    .as_ref()
                    .is_some_and(|s| s.terminated.is_some())
            })
    }

    /// Whether this container's process runs now.
    pub fn container_running(&self, container: &str) -> bool {
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(container)
    }

    /// Whether an init container (a sidecar) has started.
    fn init_started(&self, name: &str) -> bool {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        status
            .init_container_statuses
            .iter()
            .flatten()
            .any(|c| c.name == name && c.started == Some(true))
    }

    fn spec_containers(&self, init: bool) -> Vec<Container> {
        let pod = self.pod.lock().unwrap_or_else(|e| e.into_inner());
        let spec = pod.spec.clone().unwrap_or_default();
        if init {
            spec.init_containers.unwrap_or_default()
        } else {
            spec.containers
        }
    }

    fn restart_policy(&self) -> String {
        let pod = self.pod.lock().unwrap_or_else(|e| e.into_inner());
        pod.spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    /// Changes the status, recomputes phase and conditions, and schedules a write.
    fn update(&self, f: impl FnOnce(&mut PodStatus)) {
        let pod = self.pod();
        {
            let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut status);
            let initialized = *self.initialized.lock().unwrap_or_else(|e| e.into_inner());
            let terminal = *self.terminal.lock().unwrap_or_else(|e| e.into_inner());
            derive_phase_and_conditions(&pod, &mut status, initialized, terminal);
        }
        self.status_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn container_status(&self, init: bool, name: &str, f: impl FnOnce(&mut ContainerStatus)) {
        self.update(|s| {
            let list = if init {
                s.init_container_statuses.get_or_insert_with(Vec::new)
            } else {
                s.container_statuses.get_or_insert_with(Vec::new)
            };
            if let Some(cs) = list.iter_mut().find(|c| c.name == name) {
                f(cs);
            }
        });
    }
}

/// An init container with `restartPolicy: Always` runs beside the containers (Kubernetes 1.29+ sidecars).
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

fn waiting(reason: &str, message: Option<String>) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message,
        }),
        ..ContainerState::default()
    }
}

fn set_condition(
    status: &mut PodStatus,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let value = if ok { "True" } else { "False" };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Some(now());
            }
            c.status = value.into();
            c.reason = reason.map(str::to_string);
            c.message = message;
        }
        None => conditions.push(PodCondition {
            type_: type_.into(),
            status: value.into(),
            reason: reason.map(str::to_string),
            message,
            last_transition_time: Some(now()),
            ..PodCondition::default()
        }),
    }
}

/// Phase and the Initialized / ContainersReady / Ready conditions from the container states, as the kubelet's
/// `getPhase` and status manager compute them.
fn derive_phase_and_conditions(
    pod: &Pod,
    status: &mut PodStatus,
    initialized: bool,
    terminal: Option<&'static str>,
) {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let containers = status.container_statuses.clone().unwrap_or_default();
    let phase = if let Some(t) = terminal {
        t
    } else if !initialized {
        "Pending"
    } else {
        let (mut running, mut waiting_never_ran, mut succeeded, mut failed, mut waiting_restarting) =
            (0, 0, 0, 0, 0);
        for c in &containers {
            let state = c.state.clone().unwrap_or_default();
            if state.running.is_some() {
                running += 1;
            } else if let Some(t) = state.terminated {
                if t.exit_code == 0 {
                    succeeded += 1;
                } else {
                    failed += 1;
                }
            } else if c
                .last_state
                .as_ref()
                .and_then(|l| l.terminated.as_ref())
                .is_some()
            {
                waiting_restarting += 1;
            } else {
                waiting_never_ran += 1;
            }
        }
        if waiting_never_ran > 0 {
            "Pending"
        } else if running > 0 || waiting_restarting > 0 || policy == "Always" {
            "Running"
        } else if failed > 0 && policy == "Never" {
            "Failed"
        } else if failed > 0 {
            "Running"
        } else if succeeded > 0 {
            "Succeeded"
        } else {
            "Pending"
        }
    };
    status.phase = Some(phase.into());
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let pending_inits: Vec<String> = inits
        .iter()
        .filter(|c| !(c.started == Some(true) && sidecar_names_of(pod).contains(&c.name)))
        .filter(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_none_or(|t| t.exit_code != 0)
        })
        .map(|c| c.name.clone())
        .collect();
    if initialized || pending_inits.is_empty() {
        set_condition(status, "Initialized", true, None, None);
    } else {
        set_condition(
            status,
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                pending_inits.join(" ")
            )),
        );
    }
    let sidecar_names: Vec<&str> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<String> = inits
        .iter()
        .filter(|c| sidecar_names.contains(&c.name.as_str()))
        .chain(containers.iter())
        .filter(|c| !c.ready)
        .map(|c| c.name.clone())
        .collect();
    if terminal.is_some() {
        set_condition(status, "ContainersReady", false, Some("PodCompleted"), None);
        set_condition(status, "Ready", false, Some("PodCompleted"), None);
    } else if unready.is_empty() && initialized {
        set_condition(status, "ContainersReady", true, None, None);
        set_condition(status, "Ready", true, None, None);
    } else {
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        let reason = if initialized {
            "ContainersNotReady"
        } else {
            "ContainersNotInitialized"
        };
        set_condition(
            status,
            "ContainersReady",
            false,
            Some(reason),
            Some(message.clone()),
        );
        set_condition(status, "Ready", false, Some(reason), Some(message));
    }
}

fn sidecar_names_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .filter(|c| is_sidecar(c))
        .map(|c| c.name.clone())
        .collect()
}

/// Starts a worker for every pod bound to this node and stops the workers of pods that are deleted.
pub async fn sync_pods(shared: Arc<Shared>) {
    struct Worker {
        stop: watch::Sender<Option<Duration>>,
        task: tokio::task::JoinHandle<()>,
    }
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let changes = shared.caches.changes();
    let shared_for_loop = shared.clone();
    run_loop(changes, move || {
        let shared = shared_for_loop.clone();
        let pods = shared.caches.pods.state_filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(NODE_NAME)
        });
        let mut seen = std::collections::HashSet::new();
        for pod in &pods {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            seen.insert(uid.clone());
            let grace = Duration::from_secs(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30)
                    .max(0) as u64,
            );
            let worker = workers.entry(uid.clone()).or_insert_with(|| {
                let (stop, stop_rx) = watch::channel(None);
                let task = tokio::spawn(run_pod(shared.clone(), (**pod).clone(), stop_rx));
                Worker { stop, task }
            });
            if let Some(rt) = shared
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&uid)
            {
                *rt.pod.lock().unwrap_or_else(|e| e.into_inner()) = (**pod).clone();
            }
            if pod.metadata.deletion_timestamp.is_some() && worker.stop.borrow().is_none() {
                let deletion_grace = pod
                    .metadata
                    .deletion_grace_period_seconds
                    .map(|g| Duration::from_secs(g.max(0) as u64))
                    .unwrap_or(grace);
                worker.stop.send_replace(Some(deletion_grace.min(grace)));
            }
        }
        // A pod gone from the API before it was seen terminating was deleted with grace period 0 (a force delete,
        // e.g. `kubectl delete --grace-period=0 --force`): like upstream's kubelet, which takes the deleted object's
        // deletionGracePeriodSeconds, kill it at once instead of waiting the spec's grace period (30 s by default,
        // all of it for a process that ignores or cannot take SIGTERM).
        for (uid, worker) in &workers {
            if !seen.contains(uid) && worker.stop.borrow().is_none() {
                worker.stop.send_replace(Some(Duration::ZERO));
            }
        }
        workers.retain(|uid, w| seen.contains(uid) || !w.task.is_finished());
        shared.refresh_dns();
        async { None }
    })
    .await;
}

/// Waits until stop is requested; returns the grace period.
async fn stopped(stop: &mut Stop) -> Duration {
    loop {
        if let Some(g) = *stop.borrow_and_update() {
            return g;
        }
        if stop.changed().await.is_err() {
            return Duration::ZERO;
        }
    }
}

/// Sleeps for `d`; false when stop was requested meanwhile.
async fn sleep_unless_stopped(d: Duration, stop: &mut Stop) -> bool {
    if stop.borrow().is_some() {
        return false;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => true,
        _ = stopped(stop) => false,
    }
}

async fn run_pod(shared: Arc<Shared>, pod: Pod, mut stop: Stop) {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let key = (namespace.clone(), name.clone());
    if !shared
        .incarnations
        .claim(key.clone(), &uid, &mut stop)
        .await
    {
        return;
    }
    let ip = shared.addresses.allocate();
    let dir = super::pod_dir(&shared.dir, &pod);
    let hosts_file = dir.join("etc-hosts");
    let (status_changed, status_rx) = watch::channel(0u64);
    let initial = initial_status(&pod, ip, &shared.host_ip);
    let rt = Arc::new(PodRuntime {
        uid: uid.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        ip,
        dir: dir.clone(),
        hosts_file: hosts_file.clone(),
        pod: Mutex::new(pod.clone()),
        status: Mutex::new(initial),
        status_changed,
        pids: Mutex::new(HashMap::new()),
        initialized: Mutex::new(
            pod.spec
                .as_ref()
                .is_none_or(|s| s.init_containers.as_ref().is_none_or(Vec::is_empty)),
        ),
        terminal: Mutex::new(None),
    });
    let writer = tokio::spawn(write_status(shared.clone(), rt.clone(), status_rx));
    rt.update(|_| {});
    if let Err(e) = std::fs::create_dir_all(&dir).and_then(|_| dns::write_in_place(&hosts_file, ""))
    {
        tracing::warn!(pod = %name, error = %e, "creating the pod directory");
    }
    shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(uid.clone(), rt.clone());
    shared.refresh_dns();

    lifecycle(&shared, &rt, &mut stop).await;
    // Finished or stopped: wait for the stop (deletion) before releasing the sandbox, as a terminal pod keeps its IP
    // in status until it is deleted.
    let _ = stopped(&mut stop).await;

    shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&uid);
    shared.cut_released(ip);
    shared.addresses.release(ip);
    // The last status write, then the pod object goes (when it is being deleted gracefully).
    tokio::time::sleep(Duration::from_millis(30)).await;
    writer.abort();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    if let Ok(Some(current)) = api.get_opt(&name).await
        && current.metadata.uid.as_deref() == Some(uid.as_str())
        && current.metadata.deletion_timestamp.is_some()
    {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let _ = api.delete(&name, &dp).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    shared.incarnations.release(&key, &uid);
}

use super::dns;

impl Shared {
    fn cut_released(&self, ip: Ipv4Addr) {
        let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        if cut.contains(&ip) {
            cut.retain(|c| *c != ip);
            let _ = super::blackhole(ip, false);
        }
    }
}

/// Guaranteed when every container limits CPU and memory with requests equal to the limits, BestEffort when none
/// requests or limits anything, Burstable otherwise (upstream's `GetPodQOS`).
fn qos_class(spec: &k8s_openapi::api::core::v1::PodSpec) -> &'static str {
    let containers: Vec<&Container> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .collect();
    let resources = |c: &Container| c.resources.clone().unwrap_or_default();
    let any = containers.iter().any(|c| {
        let r = resources(c);
        r.requests.is_some_and(|m| !m.is_empty()) || r.limits.is_some_and(|m| !m.is_empty())
    });
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let r = resources(c);
        let limits = r.limits.unwrap_or_default();
        // Requests default to limits.
        let requests = r.requests.unwrap_or_else(|| limits.clone());
        ["cpu", "memory"].iter().all(|k| match limits.get(*k) {
            Some(limit) => requests.get(*k).unwrap_or(limit) == limit,
            None => false,
        })
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn initial_status(pod: &Pod, ip: Ipv4Addr, host_ip: &str) -> PodStatus {
    let spec = pod.spec.clone().unwrap_or_default();
    let fresh = |c: &Container, reason: &str| ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(waiting(reason, None)),
        ..ContainerStatus::default()
    };
    let has_init = spec.init_containers.as_ref().is_some_and(|i| !i.is_empty());
    let mut conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    conditions.retain(|c| c.type_ == "PodScheduled");
    if conditions.is_empty() {
        conditions.push(PodCondition {
            type_: "PodScheduled".into(),
            status: "True".into(),
            last_transition_time: Some(now()),
            ..PodCondition::default()
        });
    }
    PodStatus {
        phase: Some("Pending".into()),
        host_ip: Some(host_ip.into()),
        host_ips: Some(vec![HostIP { ip: host_ip.into() }]),
        pod_ip: Some(ip.to_string()),
        pod_ips: Some(vec![PodIP { ip: ip.to_string() }]),
        start_time: Some(now()),
        qos_class: Some(qos_class(&spec).into()),
        conditions: Some(conditions),
        init_container_statuses: has_init.then(|| {
            spec.init_containers
                .iter()
                .flatten()
                .map(|c| fresh(c, "PodInitializing"))
                .collect()
        }),
        container_statuses: Some(
            spec.containers
                .iter()
                .map(|c| {
                    fresh(
                        c,
                        if has_init {
                            "PodInitializing"
                        } else {
                            "ContainerCreating"
                        },
                    )
                })
                .collect(),
        ),
        ..PodStatus::default()
    }
}

/// Writes the pod status whenever it changes (bursts coalesce), until the pod is gone.
async fn write_status(shared: Arc<Shared>, rt: Arc<PodRuntime>, mut changed: watch::Receiver<u64>) {
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &rt.namespace);
    let params = PatchParams {
        field_manager: Some("kubelet".into()),
        ..PatchParams::default()
    };
    let mut last: Option<Value> = None;
    loop {
        if changed.changed().await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
        changed.borrow_and_update();
        let status = rt.status.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Ok(value) = serde_json::to_value(&status) else {
            continue;
        };
        if last.as_ref() == Some(&value) {
            continue;
        }
        // The uid test makes the write conditional: a pod recreated under the same name (a StatefulSet pod) is a
        // different pod, which this worker must not touch.
        let patch: json_patch::Patch = match serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/uid", "value": rt.uid},
            {"op": "add", "path": "/status", "value": value},
        ])) {
            Ok(p) => p,
            Err(_) => continue,
        };
        match api
            .patch_status(&rt.name, &params, &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => {
                last = Some(value);
            }
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) => {
                // Gone or replaced by a namesake: this pod's status has nowhere to go.
                let current = api.get_opt(&rt.name).await;
                if matches!(&current, Ok(None))
                    || matches!(&current, Ok(Some(p)) if p.metadata.uid.as_deref() != Some(rt.uid.as_str()))
                {
                    return;
                }
                tracing::warn!(pod = %rt.name, error = %e, "the API refused a pod status");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                tracing::debug!(pod = %rt.name, error = %e, "writing pod status");
                tokio::time::sleep(Duration::from_millis(200)).await;
                rt.status_changed.send_modify(|n| *n = n.wrapping_add(1));
            }
        }
    }
}

fn facts<'a>(shared: &'a Shared, pod: &'a Pod, ip: Ipv4Addr) -> PodFacts<'a> {
    PodFacts {
        pod,
        pod_ip: ip.to_string(),
        host_ip: shared.host_ip.clone(),
        node_name: NODE_NAME,
        api_server: shared.config.api_server.as_ref().map(|a| a.address),
    }
}

/// Whether containers run as their security context says (see
/// [`super::security`]): asked for, and possible (the kubelet is root).
fn enforcing(shared: &Shared) -> bool {
    shared.config.enforce_security_context && super::sandbox::is_root()
}

async fn lifecycle(shared: &Arc<Shared>, rt: &Arc<PodRuntime>, stop: &mut Stop) {
    let pod = rt.pod();
    // Volumes: retried until they can be set up (claims bound, ConfigMaps present), as the kubelet's volume manager.
    let mut reported = None;
    let volumes = loop {
        match volumes::prepare(&shared.client, &facts(shared, &pod, rt.ip), &rt.dir).await {
            Ok(v) => break v,
            Err(e) => {
                let message = e.to_string();
                if reported.as_deref() != Some(message.as_str()) {
                    events::record(
                        &shared.client,
                        &pod,
                        None,
                        true,
                        "FailedMount",
                        message.clone(),
                        "kubelet",
                    );
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
        && let Some(group) = super::security::fs_group(spec)
    {
        for volume in spec.volumes.iter().flatten() {
            if let Some(path) = volumes.get(&volume.name)
                && let Err(e) = super::security::apply_fs_group(volume, path, group)
            {
                events::record(
                    &shared.client,
                    &pod,
                    None,
                    true,
                    "FailedMount",
                    format!("setting fsGroup {group} on volume {}: {e}", volume.name),
                    "kubelet",
                );
            }
        }
    }
    rt.update(|s| set_condition(s, "PodReadyToStartContainers", true, None, None));

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
            sidecars.push(tokio::spawn(async move {
                supervise(&task_shared, &task_rt, &c, true, &task_volumes, task_stop).await;
            }));
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
        match supervise(shared, rt, &c, true, &volumes, stop.clone()).await {
            Outcome::Stopped => {
                sidecar_stop.send_replace(stop.borrow().or(Some(Duration::ZERO)));
                join_all(sidecars).await;
                return;
            }
            Outcome::Exited(0) => {}
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
            .map(|c| supervise(shared, rt, c, false, &volumes, stop.clone())),
    )
    .await;
    let grace = stop.borrow().or(Some(Duration::from_secs(
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64,
    )));
    sidecar_stop.send_replace(grace);
    join_all(sidecars).await;
    if outcomes.iter().any(|o| matches!(o, Outcome::Stopped)) {
        return;
    }
    let failed = outcomes
        .iter()
        .any(|o| matches!(o, Outcome::Exited(c) if *c != 0));
    let phase = if failed || policy == "Always" {
        "Failed"
    } else {
        "Succeeded"
    };
    *rt.terminal.lock().unwrap_or_else(|e| e.into_inner()) = Some(phase);
    rt.update(|_| {});
}

enum Outcome {
    /// The pod is stopping; the container was terminated.
    Stopped,
    /// The container exited and is not restarted (its code).
    Exited(i32),
}

/// How one run of a container ended.
enum RunEnd {
    Stopped,
    Exited {
        code: i32,
        ran: Duration,
    },
    /// The container could not start: waiting reason and message.
    NotStarted(&'static str, String),
}

/// Runs a container under the pod's restart policy until it is done (init containers: until success).
async fn supervise(
    shared: &Arc<Shared>,
    rt: &Arc<PodRuntime>,
    container: &Container,
    init: bool,
    volumes: &HashMap<String, PathBuf>,
    mut stop: Stop,
) -> Outcome {
    let policy = rt.restart_policy();
    let mut restarts = 0i32;
    let mut crash_delay = Duration::ZERO;
    let mut pull_delay = shared.config.backoff_initial;
    let pod_ref = rt.pod();
    loop {
        if stop.borrow().is_some() {
            return Outcome::Stopped;
        }
        match run_once(shared, rt, container, init, volumes, restarts, &mut stop).await {
            RunEnd::Stopped => return Outcome::Stopped,
            RunEnd::NotStarted(reason, message) => {
                rt.container_status(init, &container.name, |cs| {
                    cs.state = Some(waiting(reason, Some(message.clone())));
                });
                let (backoff_reason, warning_reason) = if reason == "ErrImagePull" {
                    ("ImagePullBackOff", "Failed")
                } else {
                    ("CrashLoopBackOff", "Failed")
                };
                events::record(
                    &shared.client,
                    &pod_ref,
                    Some(&container.name),
                    true,
                    warning_reason,
                    message.clone(),
                    "kubelet",
                );
                if !sleep_unless_stopped(Duration::from_millis(200), &mut stop).await {
                    return Outcome::Stopped;
                }
                rt.container_status(init, &container.name, |cs| {
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
                if !sleep_unless_stopped(pull_delay, &mut stop).await {
                    return Outcome::Stopped;
                }
                pull_delay = (pull_delay * 2).min(shared.config.backoff_max);
            }
            RunEnd::Exited { code, ran } => {
                let restart = match (init, policy.as_str()) {
                    _ if is_sidecar(container) => true,
                    (_, "Never") => false,
                    (true, _) | (false, "OnFailure") => code != 0,
                    _ => true,
                };
                if !restart {
                    return Outcome::Exited(code);
                }
                // Upstream backoff: the first restart is immediate, then initial, doubling, up to max; a container
                // that ran for 10 minutes starts over.
                if ran > Duration::from_secs(600) {
                    crash_delay = Duration::ZERO;
                }
                if !crash_delay.is_zero() {
                    let message = format!(
                        "back-off {:?} restarting failed container={} pod={}_{}({})",
                        crash_delay, container.name, rt.name, rt.namespace, rt.uid
                    );
                    rt.container_status(init, &container.name, |cs| {
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
                crash_delay = if crash_delay.is_zero() {
                    shared.config.backoff_initial
                } else {
                    (crash_delay * 2).min(shared.config.backoff_max)
                };
                restarts += 1;
            }
        }
    }
}

/// Starts the container once and runs it (with its probes) until it exits or the pod stops.
async fn run_once(
    shared: &Arc<Shared>,
    rt: &Arc<PodRuntime>,
    container: &Container,
    init: bool,
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
        match super::security::resolve(&spec, container, &pod_ref) {
            Ok(enforced) => enforced,
            Err(message) => return RunEnd::NotStarted("CreateContainerConfigError", message),
        }
    } else {
        super::security::Enforced::default()
    };
    let env = match container_env(&shared.client, &facts(shared, &pod, rt.ip), container).await {
        Ok(env) => env,
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
    let termination_ok = super::sandbox::ensure_parent(&termination_file)
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
            || super::sandbox::is_root())
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
    };
    let mut process = match shared.processes.launch(&launch).await {
        Ok(p) => p,
        Err(e) => return RunEnd::NotStarted("RunContainerError", e.to_string()),
    };
    let started_at = now();
    let began = Instant::now();
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
            finish(
                rt,
                container,
                init,
                code,
                &started_at,
                &termination_file,
                &log,
            );
            return RunEnd::Exited {
                code,
                ran: began.elapsed(),
            };
        }
    }
    // Plain init containers have no probes; sidecars probe like containers.
    let probed = !init || is_sidecar(container);
    let has_startup = container.startup_probe.is_some() && probed;
    let has_readiness = container.readiness_probe.is_some() && probed;
    rt.container_status(init, &container.name, |cs| {
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
        cs.started = Some(!has_startup);
        cs.ready = !has_startup && !has_readiness && probed;
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
    let mut probes = ProbeSet::start(shared, &pod, container, &target, !probed);
    let end = loop {
        tokio::select! {
            code = process.wait() => break Some(code),
            grace = stopped(stop) => {
                events::record(&shared.client, &pod, Some(&container.name), false, "Killing", format!("Stopping container {}", container.name), "kubelet");
                let grace = pre_stop(grace).await;
                let code = process.terminate(grace).await;
                finish(rt, container, init, code, &started_at, &termination_file, &log);
                break None;
            }
            verdict = probes.next() => match verdict {
                ProbeVerdict::Started => {
                    rt.container_status(init, &container.name, |cs| {
                        cs.started = Some(true);
                        if !has_readiness {
                            cs.ready = true;
                        }
                    });
                }
                ProbeVerdict::Ready(ready) => {
                    rt.container_status(init, &container.name, |cs| cs.ready = ready);
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
    drop(probes);
    rt.pids
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&container.name);
    let Some(code) = end else {
        return RunEnd::Stopped;
    };
    finish(
        rt,
        container,
        init,
        code,
        &started_at,
        &termination_file,
        &log,
    );
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
    init: bool,
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
    rt.container_status(init, &container.name, |cs| {
        cs.ready = false;
        cs.started = Some(false);
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

enum ProbeVerdict {
    Started,
    Ready(bool),
    /// Liveness or startup failed: the container is restarted.
    Restart(&'static str),
}

/// The probe tasks of one container run; dropped, they stop.
struct ProbeSet {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    startup: Option<watch::Receiver<Option<bool>>>,
    readiness: Option<watch::Receiver<Option<bool>>>,
    liveness: Option<watch::Receiver<Option<bool>>>,
    /// Probe templates not yet running (readiness and liveness wait for startup).
    pending: Vec<(&'static str, k8s_openapi::api::core::v1::Probe)>,
    shared: Arc<Shared>,
    pod: Pod,
    container: String,
    target: probe::Target,
    last_ready: Option<bool>,
}

impl ProbeSet {
    fn start(
        shared: &Arc<Shared>,
        pod: &Pod,
        container: &Container,
        target: &probe::Target,
        init: bool,
    ) -> ProbeSet {
        let mut set = ProbeSet {
            tasks: Vec::new(),
            startup: None,
            readiness: None,
            liveness: None,
            pending: Vec::new(),
            shared: shared.clone(),
            pod: pod.clone(),
            container: container.name.clone(),
            target: target.clone(),
            last_ready: None,
        };
        if init {
            return set;
        }
        if let Some(p) = &container.readiness_probe {
            set.pending.push(("readiness", p.clone()));
        }
        if let Some(p) = &container.liveness_probe {
            set.pending.push(("liveness", p.clone()));
        }
        match &container.startup_probe {
            Some(p) => set.startup = Some(set.spawn("startup", p.clone())),
            None => set.start_pending(),
        }
        set
    }

    fn spawn(
        &mut self,
        which: &'static str,
        p: k8s_openapi::api::core::v1::Probe,
    ) -> watch::Receiver<Option<bool>> {
        let (tx, rx) = watch::channel(None);
        let client = self.shared.client.clone();
        let pod = self.pod.clone();
        let container = self.container.clone();
        let target = self.target.clone();
        self.tasks.push(tokio::spawn(async move {
            let on_failure = move |message: String| {
                events::record(
                    &client,
                    &pod,
                    Some(&container),
                    true,
                    "Unhealthy",
                    format!("{} probe failed: {message}", capitalize(which)),
                    "kubelet",
                );
            };
            probe::run(p, target, tx, None, on_failure).await;
        }));
        rx
    }

    fn start_pending(&mut self) {
        for (which, p) in std::mem::take(&mut self.pending) {
            let rx = self.spawn(which, p);
            match which {
                "readiness" => self.readiness = Some(rx),
                _ => self.liveness = Some(rx),
            }
        }
    }

    /// The next decision of any probe (pending forever when there are no probes).
    async fn next(&mut self) -> ProbeVerdict {
        loop {
            if let Some(rx) = &mut self.startup {
                let value = *rx.borrow_and_update();
                match value {
                    Some(true) => {
                        self.startup = None;
                        self.start_pending();
                        return ProbeVerdict::Started;
                    }
                    Some(false) => return ProbeVerdict::Restart("startup"),
                    None => {}
                }
            }
            if let Some(rx) = &mut self.liveness
                && *rx.borrow_and_update() == Some(false)
            {
                return ProbeVerdict::Restart("liveness");
            }
            if let Some(rx) = &mut self.readiness {
                let ready = *rx.borrow_and_update() == Some(true);
                if self.last_ready != Some(ready) {
                    self.last_ready = Some(ready);
                    return ProbeVerdict::Ready(ready);
                }
            }
            let wait_startup = async {
                match &mut self.startup {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => futures::future::pending().await,
                }
            };
            // (A fresh borrow per branch keeps the receivers' change tracking independent.)
            tokio::select! {
                _ = wait_startup => {}
                _ = async { match &mut self.liveness { Some(rx) => { let _ = rx.changed().await; } None => futures::future::pending::<()>().await } } => {}
                _ = async { match &mut self.readiness { Some(rx) => { let _ = rx.changed().await; } None => futures::future::pending::<()>().await } } => {}
            }
        }
    }
}

impl Drop for ProbeSet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

#[allow(dead_code)]
fn _assert_send(p: ContainerProcess) -> impl Send {
    p
}
