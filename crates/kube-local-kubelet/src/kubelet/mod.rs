//! The process kubelets of the environment's nodes (`node-1` … `node-N`): each runs the pods bound to its node as
//! local processes, as a client of the API server.
//!
//! Each node's kubelet registers its Node (hostname and zone labels as on a cloud cluster), renews its heartbeat Lease
//! in `kube-node-lease`, and runs every pod bound to it: volumes, a pod IP, cluster DNS through a hosts file, init
//! containers, containers with restart policy and probes, status, and graceful termination. Placement is the
//! scheduler's (`kube_local_controllers::scheduler`); the nodes share the host's loopback network ([`network`]). See the module docs
//! of [`sandbox`] for how a container runs and why no process outlives its kubelet.
//!
//! Tests reach into running pods through the fault hooks on [`Kubelet`], on whichever node runs them, and cut a node's
//! power with [`Kubelet::kill_node`] (its processes get SIGKILL, its heartbeats stop, its volumes stay) and bring it
//! back with [`Kubelet::start_node`].

pub mod addresses;
mod dns;
pub mod environment;
mod events;
pub mod image_map;
mod lease;
mod network;
mod node;
mod pod_worker;
pub mod probe;
pub mod sandbox;
pub mod security;
mod server;
mod service_proxy;
mod terminal;
pub mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::Api;
use tokio::sync::{Notify, watch};

pub use addresses::PodNetwork;
pub use image_map::{ImageMap, ImageTarget};

use crate::informer::{Caches, Tasks};
use network::Network;
use pod_worker::PodRuntime;
use sandbox::Processes;

/// The label of a Node's zone, as cloud providers set it.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// How many nodes the environment has and how they are spread over zones.
#[derive(Clone, Debug)]
pub struct NodeLayout {
    /// Nodes `node-1` … `node-N` (at least one).
    pub count: usize,
    /// Zones `zone-a`, `zone-b`, … given to the nodes round-robin (0: no zone label).
    pub zones: usize,
    /// How long a node's heartbeats may stop before the node lifecycle controller declares it `Ready=Unknown`
    /// (kube-controller-manager's `--node-monitor-grace-period`, 40 s).
    pub monitor_grace: Duration,
}

impl Default for NodeLayout {
    fn default() -> Self {
        NodeLayout {
            count: 1,
            zones: 3,
            monitor_grace: Duration::from_secs(40),
        }
    }
}

/// One node: its name and labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    pub name: String,
    pub zone: Option<String>,
}

impl NodeLayout {
    /// The nodes, named `node-1` … and zoned `zone-a`, `zone-b`, … round-robin.
    pub fn nodes(&self) -> Vec<NodeIdentity> {
        (0..self.count.max(1))
            .map(|i| NodeIdentity {
                name: format!("node-{}", i + 1),
                zone: (self.zones > 0).then(|| zone_name(i % self.zones)),
            })
            .collect()
    }
}

/// `zone-a` … `zone-z`, then `zone-27` ….
fn zone_name(i: usize) -> String {
    match u8::try_from(i).ok().filter(|i| *i < 26) {
        Some(i) => format!("zone-{}", char::from(b'a' + i)),
        None => format!("zone-{}", i + 1),
    }
}

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
    /// The nodes.
    pub nodes: NodeLayout,
    /// How each kubelet's endpoint (logs, exec, attach, port-forward, `/pods`) is secured; `None` serves plain HTTP
    /// to anyone (an environment without a CA).
    pub serving: Option<KubeletServing>,
    /// The version the Nodes report (`status.nodeInfo.kubeletVersion`). A kubelet may not be newer than its API
    /// server, so [`Kubelet::join`] reports the server's own release.
    pub version: String,
    /// Where node, pod and Service proxy addresses come from.
    pub pod_network: PodNetwork,
}

/// What kube-local's own nodes report as their kubelet's version.
pub const VERSION: &str = "v1.37.0-kube-local";

/// The kubelet endpoint's TLS and access control (set by the Environment when it has a CA).
#[derive(Clone)]
pub struct KubeletServing {
    /// Issues each kubelet's serving certificate (for its node's address and name) and verifies the client
    /// certificates callers present, as the kubelet's `--client-ca-file`.
    pub ca: crate::tls::CertificateAuthority,
    /// Authenticate every request (a client certificate of [`KubeletServing::ca`], else a bearer token checked
    /// with a TokenReview) and authorize it with a SubjectAccessReview, as the kubelet's webhook modes do:
    /// anonymous callers get 401, callers without the `nodes/proxy` (…) permission 403. `false` serves anyone.
    pub authorize: bool,
}

impl std::fmt::Debug for KubeletServing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeletServing")
            .field("authorize", &self.authorize)
            .finish_non_exhaustive()
    }
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
            nodes: NodeLayout::default(),
            serving: None,
            version: VERSION.to_owned(),
            pod_network: PodNetwork::Loopback,
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
    #[error("no node {0} (nodes: {1})")]
    NoNode(String, String),
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

/// State shared by one node's kubelet loops and pod workers.
pub(crate) struct Shared {
    client: kube::Client,
    config: KubeletConfig,
    node: NodeIdentity,
    /// Pod directories (volumes, hosts files, logs) live here.
    dir: PathBuf,
    /// The node's InternalIP: a loopback address of its own, where its kubelet endpoint listens.
    host_ip: String,
    processes: Arc<Processes>,
    network: Arc<Network>,
    caches: Caches,
    running: Mutex<HashMap<String, Arc<PodRuntime>>>,
    incarnations: Incarnations,
    /// Addresses whose traffic is cut (fault hook), restored when the kubelet stops.
    cut: Mutex<Vec<Ipv4Addr>>,
    /// Port of the kubelet's HTTP endpoint (logs, exec, attach; see [`server`]), published in the Node status.
    kubelet_port: std::sync::OnceLock<u16>,
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
        let proxies = self.network.proxy_table();
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

/// The kubelet of one running node. Dropping it is the node's power cut: every process it started gets SIGKILL, its
/// loops and pod workers stop where they are (no status written, no heartbeat), its directories stay.
struct NodeKubelet {
    shared: Arc<Shared>,
    _tasks: Tasks,
}

impl NodeKubelet {
    async fn start(
        base: &Base,
        node: NodeIdentity,
        mut tasks: Tasks,
    ) -> Result<NodeKubelet, KubeletError> {
        let dir = node_dir(&base.dir, &node.name);
        std::fs::create_dir_all(&dir).map_err(|source| KubeletError::Dir {
            path: dir.clone(),
            source,
        })?;
        let processes = Processes::new().map_err(KubeletError::Spawner)?;
        let host_ip = base.network.addresses.allocate();
        let client = match &base.node_clients {
            Some(clients) => clients(&node.name),
            None => base.client.clone(),
        };
        let shared = Arc::new(Shared {
            client,
            config: base.config.clone(),
            node,
            dir,
            host_ip: host_ip.to_string(),
            processes,
            network: base.network.clone(),
            caches: base.caches.clone(),
            running: Mutex::new(HashMap::new()),
            incarnations: Incarnations::default(),
            cut: Mutex::new(Vec::new()),
            kubelet_port: std::sync::OnceLock::new(),
        });
        let port = server::start(shared.clone(), &mut tasks)
            .await
            .map_err(|source| KubeletError::Io {
                what: "starting the kubelet endpoint".into(),
                source,
            })?;
        let _ = shared.kubelet_port.set(port);
        base.network.attach(&shared);
        node::register(&shared).await;
        tasks.spawn(lease::renew(shared.clone()));
        tasks.spawn(node::keep_ready(shared.clone()));
        tasks.spawn(pod_worker::sync_pods(shared.clone()));
        Ok(NodeKubelet {
            shared,
            _tasks: tasks,
        })
    }
}

impl Drop for NodeKubelet {
    fn drop(&mut self) {
        self.shared.processes.kill_all();
        let cut = std::mem::take(&mut *self.shared.cut.lock().unwrap_or_else(|e| e.into_inner()));
        for ip in cut {
            let _ = blackhole(ip, false);
        }
        if let Ok(ip) = self.shared.host_ip.parse() {
            self.shared.network.addresses.release(ip);
        }
    }
}

/// The client each node's kubelet uses, by node name: its own credentials (`system:node:NAME`), as a kubelet joined
/// to a real API server must have for NodeRestriction.
pub type NodeClients = Arc<dyn Fn(&str) -> kube::Client + Send + Sync>;

/// What every node's kubelet starts from.
struct Base {
    /// The caches' and the Service proxy's client; each node's kubelet uses it too unless `node_clients` is set.
    client: kube::Client,
    node_clients: Option<NodeClients>,
    config: KubeletConfig,
    caches: Caches,
    network: Arc<Network>,
    /// The environment's directory: node `N`'s pods and node-bound volumes live under `nodes/N`.
    dir: PathBuf,
}

/// The directory of a node's kubelet: its pods (volumes, hosts files, logs) and the volumes bound to the node.
pub fn node_dir(base: &Path, node: &str) -> PathBuf {
    base.join("nodes").join(node)
}

/// The kubelets of every node of the environment, and the Service proxy they share. Dropping it kills every process
/// they started.
pub struct Kubelet {
    base: Base,
    nodes: Vec<NodeIdentity>,
    running: Mutex<BTreeMap<String, NodeKubelet>>,
    _tasks: Tasks,
}

impl Kubelet {
    /// Registers the nodes and starts running pods. `dir` holds each node's pods and volumes (`dir/nodes/NAME`).
    pub async fn start(
        client: kube::Client,
        config: KubeletConfig,
        dir: &Path,
    ) -> Result<Kubelet, KubeletError> {
        let mut tasks = Tasks::default();
        let caches = Caches::start(&client, &mut tasks).await;
        Self::start_with(client, config, dir, caches, tasks).await
    }

    /// Node agents joined to an API server of another kind (the real kube-apiserver, whose controllers run the
    /// workloads): each node registers and runs its pods with the client `node_clients` gives for its name, and the
    /// caches and Service proxy use `client` (which needs to list and watch pods, Services, Endpoints,
    /// EndpointSlices and Nodes).
    pub async fn join(
        client: kube::Client,
        node_clients: NodeClients,
        config: KubeletConfig,
        dir: &Path,
    ) -> Result<Kubelet, KubeletError> {
        let mut config = config;
        config.version = format!(
            "{}-kube-local",
            client.apiserver_version().await?.git_version
        );
        let mut tasks = Tasks::default();
        let caches = Caches::start_for_nodes(&client, &mut tasks).await;
        Self::start_on(client, Some(node_clients), config, dir, caches, tasks).await
    }

    /// [`Kubelet::start`] on caches shared with the workload controllers.
    pub async fn start_with(
        client: kube::Client,
        config: KubeletConfig,
        dir: &Path,
        caches: Caches,
        tasks: Tasks,
    ) -> Result<Kubelet, KubeletError> {
        Self::start_on(client, None, config, dir, caches, tasks).await
    }

    async fn start_on(
        client: kube::Client,
        node_clients: Option<NodeClients>,
        config: KubeletConfig,
        dir: &Path,
        caches: Caches,
        mut tasks: Tasks,
    ) -> Result<Kubelet, KubeletError> {
        std::fs::create_dir_all(dir).map_err(|source| KubeletError::Dir {
            path: dir.to_path_buf(),
            source,
        })?;
        let network = Arc::new(Network::new(
            client.clone(),
            caches.clone(),
            config.api_server.as_ref().map(|a| a.address),
            config.pod_network,
        ));
        tasks.spawn(service_proxy::run(network.clone()));
        let nodes = config.nodes.nodes();
        let kubelet = Kubelet {
            base: Base {
                client,
                node_clients,
                config,
                caches,
                network,
                dir: dir.to_path_buf(),
            },
            nodes,
            running: Mutex::new(BTreeMap::new()),
            _tasks: tasks,
        };
        for node in kubelet.nodes.clone() {
            kubelet.start_node(&node.name).await?;
        }
        Ok(kubelet)
    }

    /// The environment's nodes, running or not.
    pub fn nodes(&self) -> &[NodeIdentity] {
        &self.nodes
    }

    /// Whether a node's kubelet runs (not killed).
    pub fn node_running(&self, name: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(name)
    }

    fn identity(&self, name: &str) -> Result<NodeIdentity, KubeletError> {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .ok_or_else(|| {
                let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
                KubeletError::NoNode(name.to_string(), names.join(", "))
            })
    }

    /// Cuts a node's power: its pods' processes get SIGKILL, its kubelet stops (no more heartbeats or pod status),
    /// its volumes stay on disk. The API still shows its pods as they were until the node lifecycle controller acts.
    /// Killing a node that is down does nothing.
    pub fn kill_node(&self, name: &str) -> Result<(), KubeletError> {
        self.identity(name)?;
        let killed = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(name);
        drop(killed);
        Ok(())
    }

    /// Powers a node back on: its kubelet registers, heartbeats again and runs the pods still bound to it, with their
    /// data. Starting a running node does nothing.
    pub async fn start_node(&self, name: &str) -> Result<(), KubeletError> {
        let node = self.identity(name)?;
        if self.node_running(name) {
            return Ok(());
        }
        let started = NodeKubelet::start(&self.base, node, Tasks::default()).await?;
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), started);
        Ok(())
    }

    /// The running node that runs a pod, and the pod.
    fn running_pod(&self, namespace: &str, name: &str) -> Option<(Arc<Shared>, Arc<PodRuntime>)> {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .find_map(|n| {
                n.shared
                    .running_pod(namespace, name)
                    .map(|p| (n.shared.clone(), p))
            })
    }

    fn pod(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(Arc<Shared>, Arc<PodRuntime>), KubeletError> {
        self.running_pod(namespace, name)
            .ok_or_else(|| KubeletError::NoPod(format!("{namespace}/{name}")))
    }

    /// The pod's IP while it runs.
    pub fn pod_ip(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.running_pod(namespace, name).map(|(_, p)| p.ip)
    }

    /// The address at which a ClusterIP Service's proxy listens (reachable from the host and from pods).
    pub fn service_address(&self, namespace: &str, name: &str) -> Option<Ipv4Addr> {
        self.base.network.proxy_address(namespace, name)
    }

    /// How many container processes are running, on every node.
    pub fn process_count(&self) -> usize {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|n| n.shared.processes.count())
            .sum()
    }

    /// The log file of a container's current (or last) run, as `kubectl logs` would show it.
    pub fn log_path(&self, namespace: &str, pod: &str, container: &str) -> Option<PathBuf> {
        let (_, p) = self.running_pod(namespace, pod)?;
        p.log_file(container, false)
    }

    /// The process id of a container's current run (to inspect what it runs as).
    pub fn container_pid(&self, namespace: &str, pod: &str, container: &str) -> Option<i32> {
        self.running_pod(namespace, pod)?.1.pid(container)
    }

    /// Fault hook: kills a container's processes with SIGKILL, as an OOM kill or crash would; the kubelet then
    /// restarts it per the pod's restart policy.
    pub fn kill_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<(), KubeletError> {
        let (_, p) = self.pod(namespace, pod)?;
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
        let (_, p) = self.pod(namespace, pod)?;
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
        let client = &self.base.client;
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
        let (node, p) = self.pod(namespace, pod)?;
        if !sandbox::is_root() {
            return Err(KubeletError::Unsupported(
                "cutting a pod's network needs root".into(),
            ));
        }
        blackhole(p.ip, true)?;
        node.cut
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p.ip);
        Ok(())
    }

    pub fn restore_network(&self, namespace: &str, pod: &str) -> Result<(), KubeletError> {
        let (node, p) = self.pod(namespace, pod)?;
        node.cut
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

/// `pods/<ns>_<name>_<uid>` under the kubelet's directory, as upstream's `/var/log/pods` layout.
pub(crate) fn pod_dir(base: &Path, pod: &Pod) -> PathBuf {
    base.join("pods").join(format!(
        "{}_{}_{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    ))
}
