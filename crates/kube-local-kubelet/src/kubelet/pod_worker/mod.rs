//! One pod's life on the node: sandbox (IP, volumes, hosts file), init containers in order, containers under their
//! restart policy with CrashLoopBackOff and probes, status (phase, conditions, container states), and graceful
//! termination when the pod is deleted.
//!
//! This module owns the pod's runtime state ([`PodRuntime`]), the workers that start and stop with the pods bound to
//! the node, and the status writer. The decisions are pure functions with unit tests: `status` (phase, conditions,
//! the initial status), `restart` (restart policy and back-off) and the readiness rules in `probes`; `lifecycle`
//! (the order of the containers), `supervise` (one container under the restart policy) and `container` (one run of a
//! container) carry them out; `ephemeral` runs the ephemeral containers `kubectl debug` adds to a running pod.

mod container;
mod ephemeral;
mod lifecycle;
mod probes;
mod restart;
mod status;
mod supervise;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ephemeral::as_container;
use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::Shared;
use super::environment::PodFacts;
use super::sandbox::ContainerTerminal;
use crate::informer::run_loop;
use lifecycle::lifecycle;
use status::{derive_phase_and_conditions, initial_status};

/// `Some(grace)` once the pod must stop.
type Stop = watch::Receiver<Option<Duration>>;

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Which of the pod's container lists a container is in: where its status is reported, and what the kubelet does
/// with it (init containers run first, ephemeral containers are added later and never restarted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ContainerKind {
    Init,
    Regular,
    Ephemeral,
}

impl ContainerKind {
    fn is_init(self) -> bool {
        self == ContainerKind::Init
    }
}

/// Where an attached client's input goes: the write end of a container's stdin pipe, or its terminal.
pub type StdinWriter = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// The standard input of a container with `stdin: true`, which attached clients write to: a pipe, or the terminal of
/// a container with `tty: true`.
pub struct ContainerStdin {
    /// The writer while it is open; taken when a `stdinOnce` container's first client is done with it (a pipe closes:
    /// the container reads end of file; a terminal stays, but takes no more input from attached clients).
    pub pipe: tokio::sync::Mutex<Option<StdinWriter>>,
    /// `stdinOnce`: the container sees end of file once the first attached client closes its stdin.
    pub once: bool,
}

/// What a container's current run has of `T` (its stdin, its terminal), by container name.
fn of_current_run<T: Clone>(runs: &Mutex<HashMap<String, T>>, container: &str) -> Option<T> {
    runs.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(container)
        .cloned()
}

/// Records what a container's new run has of `T`, or that it has none.
fn set_for_current_run<T>(runs: &Mutex<HashMap<String, T>>, container: &str, value: Option<T>) {
    let mut runs = runs.lock().unwrap_or_else(|e| e.into_inner());
    match value {
        Some(v) => runs.insert(container.to_string(), v),
        None => runs.remove(container),
    };
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
    /// Bumped whenever the pod object changes (the ephemeral containers' runner looks for new ones).
    pod_changed: watch::Sender<u64>,
    status: Mutex<PodStatus>,
    status_changed: watch::Sender<u64>,
    /// Main process id of each running container.
    pids: Mutex<HashMap<String, i32>>,
    /// The environment each container's current (or last) run got: what `kubectl exec` runs its commands with.
    envs: Mutex<HashMap<String, Vec<(String, String)>>>,
    /// The standard input of each container's current run that has `stdin: true`.
    stdins: Mutex<HashMap<String, Arc<ContainerStdin>>>,
    /// The terminal of each container's current run that has `tty: true`.
    terminals: Mutex<HashMap<String, Arc<ContainerTerminal>>>,
    /// Whether the init containers have all completed.
    initialized: Mutex<bool>,
    /// Set when the pod reached Succeeded or Failed.
    terminal: Mutex<Option<&'static str>>,
}

impl PodRuntime {
    pub fn pod(&self) -> Pod {
        self.pod.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The pod as the API shows it now.
    fn set_pod(&self, pod: Pod) {
        *self.pod.lock().unwrap_or_else(|e| e.into_inner()) = pod;
        self.pod_changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The spec of a container, init container or ephemeral container of the pod (the names are unique across
    /// the three).
    pub fn container_spec(&self, name: &str) -> Option<Container> {
        let pod = self.pod.lock().unwrap_or_else(|e| e.into_inner());
        let spec = pod.spec.as_ref()?;
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .find(|c| c.name == name)
            .cloned()
            .or_else(|| {
                spec.ephemeral_containers
                    .iter()
                    .flatten()
                    .find(|c| c.name == name)
                    .map(as_container)
            })
    }

    /// The status the kubelet computed last (what it writes to the API).
    pub fn status_now(&self) -> PodStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The process id of a container's current run.
    pub fn pid(&self, container: &str) -> Option<i32> {
        self.pids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(container)
            .copied()
    }

    /// The environment of a container's current run (empty before it first ran).
    pub fn env(&self, container: &str) -> Vec<(String, String)> {
        self.envs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(container)
            .cloned()
            .unwrap_or_default()
    }

    /// The standard input of a container's current run, if it has one (`stdin: true`).
    pub fn stdin(&self, container: &str) -> Option<Arc<ContainerStdin>> {
        of_current_run(&self.stdins, container)
    }

    fn set_stdin(&self, container: &str, stdin: Option<Arc<ContainerStdin>>) {
        set_for_current_run(&self.stdins, container, stdin);
    }

    /// The terminal of a container's current run, if it runs on one (`tty: true`).
    pub fn terminal(&self, container: &str) -> Option<Arc<ContainerTerminal>> {
        of_current_run(&self.terminals, container)
    }

    fn set_terminal(&self, container: &str, terminal: Option<Arc<ContainerTerminal>>) {
        set_for_current_run(&self.terminals, container, terminal);
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

    /// The container's current state in the pod status (containers, init containers and ephemeral containers).
    fn container_state(&self, container: &str) -> Option<ContainerState> {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        all_statuses(&status)
            .find(|c| c.name == container)
            .and_then(|c| c.state.clone())
    }

    /// Whether the container has a terminated run behind it (its status has a last terminated state).
    fn restarted(&self, container: &str) -> bool {
        let status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        all_statuses(&status)
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

    fn container_status(
        &self,
        kind: ContainerKind,
        name: &str,
        f: impl FnOnce(&mut ContainerStatus),
    ) {
        self.update(|s| {
            let list = match kind {
                ContainerKind::Init => &mut s.init_container_statuses,
                ContainerKind::Regular => &mut s.container_statuses,
                ContainerKind::Ephemeral => &mut s.ephemeral_container_statuses,
            };
            if let Some(cs) = list
                .get_or_insert_with(Vec::new)
                .iter_mut()
                .find(|c| c.name == name)
            {
                f(cs);
            }
        });
    }
}

/// Every container status of a pod: containers, init containers, ephemeral containers.
fn all_statuses(status: &PodStatus) -> impl Iterator<Item = &ContainerStatus> {
    status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .chain(status.ephemeral_container_statuses.iter())
        .flatten()
}

/// An init container with `restartPolicy: Always` runs beside the containers (Kubernetes 1.29+ sidecars).
fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Starts a worker for every pod bound to this node and stops the workers of pods that are deleted.
pub async fn sync_pods(shared: Arc<Shared>) {
    // A worker dropped unfinished (the node's kubelet stopped) stops where it is.
    struct Worker {
        stop: watch::Sender<Option<Duration>>,
        task: tokio_util::task::AbortOnDropHandle<()>,
    }
    let mut workers: HashMap<String, Worker> = HashMap::new();
    let changes = shared.caches.changes();
    let shared_for_loop = shared.clone();
    run_loop(changes, move || {
        let shared = shared_for_loop.clone();
        let pods = shared.caches.pods.state_filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(shared.node.name.as_str())
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
                let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(run_pod(
                    shared.clone(),
                    (**pod).clone(),
                    stop_rx,
                )));
                Worker { stop, task }
            });
            if let Some(rt) = shared
                .running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&uid)
            {
                rt.set_pod((**pod).clone());
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
        // Deleted while it waited for its predecessor: it never ran, and nothing else will finish its deletion.
        finish_deletion(&shared, &namespace, &name, &uid).await;
        return;
    }
    let ip = shared.network.addresses.allocate();
    let dir = super::pod_dir(&shared.dir, &pod);
    let hosts_file = dir.join("etc-hosts");
    let (status_changed, status_rx) = watch::channel(0u64);
    let mut initial = initial_status(&pod, ip, &shared.host_ip);
    initial.ephemeral_container_statuses = ephemeral::carried_statuses(&pod);
    let (pod_changed, _) = watch::channel(0u64);
    let rt = Arc::new(PodRuntime {
        uid: uid.clone(),
        namespace: namespace.clone(),
        name: name.clone(),
        ip,
        dir: dir.clone(),
        hosts_file: hosts_file.clone(),
        pod: Mutex::new(pod.clone()),
        pod_changed,
        status: Mutex::new(initial),
        status_changed,
        pids: Mutex::new(HashMap::new()),
        envs: Mutex::new(HashMap::new()),
        stdins: Mutex::new(HashMap::new()),
        terminals: Mutex::new(HashMap::new()),
        initialized: Mutex::new(
            pod.spec
                .as_ref()
                .is_none_or(|s| s.init_containers.as_ref().is_none_or(Vec::is_empty)),
        ),
        terminal: Mutex::new(None),
    });
    let writer = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(write_status(
        shared.clone(),
        rt.clone(),
        status_rx,
    )));
    rt.update(|_| {});
    if let Err(e) =
        std::fs::create_dir_all(&dir).and_then(|_| super::dns::write_in_place(&hosts_file, ""))
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
    shared.network.addresses.release(ip);
    // The last status write, then the pod object goes (when it is being deleted gracefully).
    tokio::time::sleep(Duration::from_millis(30)).await;
    writer.abort();
    finish_deletion(&shared, &namespace, &name, &uid).await;
    let _ = std::fs::remove_dir_all(&dir);
    shared.incarnations.release(&key, &uid);
}

/// The kubelet's last word on a pod being deleted gracefully: its containers have stopped (or never started), so the
/// object goes for good (grace 0, only this incarnation: the uid precondition).
async fn finish_deletion(shared: &Shared, namespace: &str, name: &str, uid: &str) {
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), namespace);
    if let Ok(Some(current)) = api.get_opt(name).await
        && current.metadata.uid.as_deref() == Some(uid)
        && current.metadata.deletion_timestamp.is_some()
    {
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if let Err(e) = api.delete(name, &dp).await {
            tracing::debug!(pod = %name, error = %e, "finishing a pod's deletion");
        }
    }
}

impl Shared {
    fn cut_released(&self, ip: Ipv4Addr) {
        let mut cut = self.cut.lock().unwrap_or_else(|e| e.into_inner());
        if cut.contains(&ip) {
            cut.retain(|c| *c != ip);
            let _ = super::blackhole(ip, false);
        }
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
        node_name: &shared.node.name,
        api_server: shared.config.api_server.as_ref().map(|a| a.address),
    }
}

/// Whether containers run as their security context says (see
/// [`super::security`]): asked for, and possible (the kubelet is root).
fn enforcing(shared: &Shared) -> bool {
    shared.config.enforce_security_context && super::sandbox::is_root()
}
