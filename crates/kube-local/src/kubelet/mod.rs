//! The process kubelet of the single node `kube-local`: runs pods as local processes, as a client of the API server.
//!
//! It registers the Node, binds unscheduled pods to it (a trivial scheduler), and runs every pod bound to it: volumes,
//! a pod IP, cluster DNS through a hosts file, init containers, containers with restart policy and probes, status, and
//! graceful termination. See the module docs of [`sandbox`] for how a container runs and why no process outlives the
//! kubelet. Tests reach into running pods through the fault hooks on [`Kubelet`].

pub mod addresses;
mod dns;
pub mod environment;
mod events;
pub mod image_map;
mod node;
mod pod_worker;
pub mod probe;
pub mod sandbox;
pub mod security;
mod server;
mod service_proxy;
pub mod volumes;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::Api;
use tokio::sync::{Notify, watch};

pub use image_map::{ImageMap, ImageTarget};

use crate::informer::{Caches, Tasks};
use addresses::Addresses;
use pod_worker::PodRuntime;
use sandbox::Processes;

/// The name of the one node.
pub const NODE_NAME: &str = "kube-local";

/// How the kubelet runs pods.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    pub image_map: ImageMap,
    /// First delay of CrashLoopBackOff / ImagePullBackOff (upstream: 10s).
    pub backoff_initial: Duration,
    /// Longest delay (upstream: 5 minutes).
    pub backoff_max: Duration,
    /// How pods reach the API server (set by the Environment): the `kubernetes` Service, `KUBERNETES_SERVICE_*`
    /// and the service account files.
    pub api_server: Option<ApiServerAccess>,
    /// Run containers as their security context says (user, groups,
    /// `runAsNonRoot`, read-only root filesystem, no new privileges, no
    /// capabilities; `fsGroup` on volumes) — see [`security`]. Needs root;
    /// off by default because pods here see the host's filesystem, which a
    /// non-root user may not write (a `file://` backup directory).
    pub enforce_security_context: bool,
}

/// The API server as pods see it.
#[derive(Clone, Debug)]
pub struct ApiServerAccess {
    pub address: std::net::SocketAddr,
    /// The CA of a TLS API server (written as the service account's `ca.crt`).
    pub ca_pem: Option<String>,
}

impl Default for KubeletConfig {
    fn default() -> Self {
        KubeletConfig {
            image_map: ImageMap::default(),
            backoff_initial: Duration::from_secs(10),
            backoff_max: Duration::from_secs(300),
            api_server: None,
            enforce_security_context: false,
        }
    }
}

impl KubeletConfig {
    /// Maps images matching `pattern` (`*` wildcards) ahead of the existing mappings.
    pub fn image(mut self, pattern: impl Into<String>, target: ImageTarget) -> Self {
        self.image_map.insert(pattern, target);
        self
    }

    /// Reads image mappings from a TOML file; they take precedence over the defaults.
    pub fn image_map_file(mut self, path: &Path) -> Result<Self, image_map::ImageMapError> {
        self.image_map.overlay_file(path)?;
        Ok(self)
    }

    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("starting the process spawner: {0}")]
    Spawner(std::io::Error),
    #[error("creating {path}: {source}")]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no running pod {0}")]
    NoPod(String),
    #[error("no running container {container} in pod {pod}")]
    NoContainer { pod: String, container: String },
    #[error("volume of claim {0} not found")]
    NoVolume(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error("API: {0}")]
    Api(#[from] kube::Error),
}

/// Pods of one namespace/name wait for the previous pod of that name to stop: a StatefulSet pod recreated with its
/// name must not run beside its predecessor on the same volume.
#[derive(Default)]
struct Incarnations {
    holders: Mutex<HashMap<(String, String), String>>,
    released: Notify,
}

impl Incarnations {
    async fn claim(
        &self,
        key: (String, String),
        uid: &str,
        stop: &mut watch::Receiver<Option<Duration>>,
    ) -> bool {
        loop {
            let released = self.released.notified();
            {
                let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
                match holders.get(&key) {
                    Some(holder) if holder != uid => {}
                    _ => {
                        holders.insert(key, uid.to_string());
                        return true;
                    }
                }
            }
            if stop.borrow().is_some() {
                return false;
            }
            tokio::select! {
                _ = released => {}
                _ = stop.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
    }

    fn release(&self, key: &(String, String), uid: &str) {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if holders.get(key).is_some_and(|h| h == uid) {
            holders.remove(key);
        }
        self.released.notify_waiters();
    }
}

/// State shared by the kubelet's loops and pod workers.
pub(crate) struct Shared {
    client: kube::Client,
    config: KubeletConfig,
    /// Pod directories (volumes, hosts files, logs) live here.
    dir: PathBuf,
    host_ip: String,
    processes: Arc<Processes>,
    addresses: Addresses,
    caches: Caches,
    running: Mutex<HashMap<String, Arc<PodRuntime>>>,
    incarnations: Incarnations,
    /// Addresses whose traffic is cut (fault hook), restored when the kubelet stops.
    cut: Mutex<Vec<Ipv4Addr>>,
    /// Port of the kubelet's HTTP endpoint (logs, exec, attach; see [`server`]), published in the Node status.
    kubelet_port: std::sync::OnceLock<u16>,
    /// Proxy addresses of ClusterIP Services.
    proxies: Mutex<HashMap<(String, String), Ipv4Addr>>,
}

impl Shared {
    fn running_pod(&self, namespace: &str, name: &str) -> Option<Arc<PodRuntime>> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find(|p| p.namespace == namespace && p.name == name)
            .cloned()
    }

    /// Rewrites every running pod's hosts file from the current records.
    fn refresh_dns(&self) {
        let proxies = self
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let records = dns::cluster_records(&self.caches, &proxies);
        let pods: Vec<Arc<PodRuntime>> = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect();
        for p in pods {
            let pod = p.pod();
            let content = dns::hosts_file(&pod, p.ip, &records);
            if let Err(e) = dns::write_in_place(&p.hosts_file, &content) {
                tracing::warn!(pod = %p.name, error = %e, "writing the pod's hosts file");
            }
        }
    }
}

/// A running kubelet. Dropping it kills every process it started.
pub struct Kubelet {
    shared: Arc<Shared>,
    _tasks: Tasks,
}

impl Kubelet {
    /// Registers the node and starts running pods. `dir` holds pod directories and logs.
    pub async fn start(
        client: kube::Client,
        config: KubeletConfig,
        dir: &Path,
    ) -> Result<Kubelet, KubeletError> {
        let mut tasks = Tasks::default();
        let caches = Caches::start(&client, &mut tasks).await;
        Self::start_with(client, config, dir, caches, tasks).await
    }

    /// [`Kubelet::start`] on caches shared with the workload controllers.
    pub(crate) async fn start_with(
        client: kube::Client,
        config: KubeletConfig,
        dir: &Path,
        caches: Caches,
        mut tasks: Tasks,
    ) -> Result<Kubelet, KubeletError> {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let processes = Processes::new().map_err(KubeletError::Spawner)?;
        let shared = Arc::new(Shared {
            client: client.clone(),
            config,
            dir: dir.to_path_buf(),
            host_ip: "127.0.0.1".into(),
            processes,
            addresses: Addresses::new(),
            caches,
            running: Mutex::new(HashMap::new()),
            incarnations: Incarnations::default(),
            cut: Mutex::new(Vec::new()),
            proxies: Mutex::new(HashMap::new()),
            kubelet_port: std::sync::OnceLock::new(),
        });
        let port = server::start(shared.clone(), &mut tasks)
            .await
            .map_err(|source| KubeletError::Io {
                what: "starting the kubelet endpoint".into(),
                source,
            })?;
        let _ = shared.kubelet_port.set(port);
        node::register(&shared).await;
        tasks.spawn(node::heartbeat(shared.clone()));
        tasks.spawn(node::schedule(shared.clone()));
        tasks.spawn(pod_worker::sync_pods(shared.clone()));
        tasks.spawn(service_proxy::run(shared.clone()));
        Ok(Kubelet {
            shared,
            _tasks: tasks,
        })
    }

    /// The pod's IP while it runs on this kubelet.
    pub fn pod_ip(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.shared.running_pod(namespace, name).map(|p| p.ip)
    }

    /// The address at which a ClusterIP Service's proxy listens (reachable from the host and from pods).
    pub fn service_address(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.shared
            .proxies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .copied()
    }

    /// How many container processes are running.
    pub fn process_count(&self) -> usize {
        self.shared.processes.count()
    }

    /// The log file of a container's current (or last) run, as `kubectl logs` would show it.
    pub fn log_path(&self, namespace: &str, pod: &str, container: &str) -> Option<PathBuf> {
        let p = self.shared.running_pod(namespace, pod)?;
        p.log_file(container, false)
    }

    /// The process id of a container's current run (to inspect what it runs as).
    pub fn container_pid(&self, namespace: &str, pod: &str, container: &str) -> Option<i32> {
        self.shared.running_pod(namespace, pod)?.pid(container)
    }

    /// Fault hook: kills a container's processes with SIGKILL, as an OOM kill or crash would; the kubelet then
    /// restarts it per the pod's restart policy.
    pub fn kill_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<(), KubeletError> {
        let p = self
            .shared
            .running_pod(namespace, pod)
            .ok_or_else(|| KubeletError::NoPod(format!("{namespace}/{pod}")))?;
        if p.kill(container) {
            Ok(())
        } else {
            Err(KubeletError::NoContainer {
                pod: format!("{namespace}/{pod}"),
                container: container.into(),
            })
        }
    }

    /// Fault hook: freezes a container's processes (SIGSTOP) until [`Kubelet::resume_container`], as a hung
    /// process or a host that stopped scheduling it would: nothing it serves answers, in either direction, yet it is
    /// not restarted (until a liveness probe gives up on it).
    pub fn pause_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<(), KubeletError> {
        self.signal_container(namespace, pod, container, rustix::process::Signal::STOP)
    }

    /// Undoes [`Kubelet::pause_container`] (SIGCONT).
    pub fn resume_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<(), KubeletError> {
        self.signal_container(namespace, pod, container, rustix::process::Signal::CONT)
    }

    fn signal_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        signal: rustix::process::Signal,
    ) -> Result<(), KubeletError> {
        let p = self
            .shared
            .running_pod(namespace, pod)
            .ok_or_else(|| KubeletError::NoPod(format!("{namespace}/{pod}")))?;
        if p.signal_container(container, signal) {
            Ok(())
        } else {
            Err(KubeletError::NoContainer {
                pod: format!("{namespace}/{pod}"),
                container: container.into(),
            })
        }
    }

    /// Fault hook: deletes everything in the volume bound to a claim, as a lost disk would.
    pub async fn wipe_volume(&self, namespace: &str, claim: &str) -> Result<(), KubeletError> {
        let client = &self.shared.client;
        let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
            .get(claim)
            .await?;
        let pv_name = pvc
            .spec
            .and_then(|s| s.volume_name)
            .ok_or_else(|| KubeletError::NoVolume(format!("{namespace}/{claim}")))?;
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get(&pv_name)
            .await?;
        let path = volumes::volume_path(&pv)
            .ok_or_else(|| KubeletError::NoVolume(format!("{namespace}/{claim}")))?;
        let entries = std::fs::read_dir(&path).map_err(|source| KubeletError::Io {
            what: format!("listing {}", path.display()),
            source,
        })?;
        for entry in entries.flatten() {
            let p = entry.path();
            let result = if p.is_dir() && !p.is_symlink() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            result.map_err(|source| KubeletError::Io {
                what: format!("removing {}", p.display()),
                source,
            })?;
        }
        Ok(())
    }

    /// Fault hook: makes a pod's IP unreachable (connections to and from it fail) until [`Kubelet::restore_network`].
    /// Needs root (it adds a blackhole route).
    pub fn cut_network(&self, namespace: &str, pod: &str) -> Result<(), KubeletError> {
        let p = self
            .shared
            .running_pod(namespace, pod)
            .ok_or_else(|| KubeletError::NoPod(format!("{namespace}/{pod}")))?;
        if !sandbox::is_root() {
            return Err(KubeletError::Unsupported(
                "cutting a pod's network needs root".into(),
            ));
        }
        blackhole(p.ip, true)?;
        self.shared
            .cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p.ip);
        Ok(())
    }

    pub fn restore_network(&self, namespace: &str, pod: &str) -> Result<(), KubeletError> {
        let p = self
            .shared
            .running_pod(namespace, pod)
            .ok_or_else(|| KubeletError::NoPod(format!("{namespace}/{pod}")))?;
        self.shared
            .cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|ip| *ip != p.ip);
        blackhole(p.ip, false)
    }
}

fn blackhole(ip: Ipv4Addr, add: bool) -> Result<(), KubeletError> {
    let out = std::process::Command::new("ip")
        .args(["route", if add { "add" } else { "del" }, "blackhole"])
        .arg(format!("{ip}/32"))
        .args(["table", "local"])
        .output()
        .map_err(|source| KubeletError::Io {
            what: "running ip route".into(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(KubeletError::Io {
            what: format!(
                "ip route {} blackhole {ip}",
                if add { "add" } else { "del" }
            ),
            source: std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        })
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.shared.processes.kill_all();
        let cut = std::mem::take(&mut *self.shared.cut.lock().unwrap_or_else(|e| e.into_inner()));
        for ip in cut {
            let _ = blackhole(ip, false);
        }
    }
}

/// `pods/<ns>_<name>_<uid>` under the kubelet's directory, as upstream's `/var/log/pods` layout.
pub(crate) fn pod_dir(base: &Path, pod: &Pod) -> PathBuf {
    base.join("pods").join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ))
}
