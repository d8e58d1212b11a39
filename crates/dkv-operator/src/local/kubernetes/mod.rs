//! `dkv local up --kubernetes 1.37`: the real Kubernetes control plane —
//! kube-apiserver on an etcd of its own, kube-controller-manager and
//! kube-scheduler of that release, built on first use ([`release`]) — with
//! kube-local's process kubelets joined to it as the nodes, each
//! authenticating as its node (`system:node:NAME`, so NodeRestriction
//! holds), then dkv installed as on any cluster.
//!
//! Every component listens on 127.0.0.1 only and authenticates its callers
//! with certificates of the local cluster's CA ([`pki`]; etcd too, over TLS
//! on its client and peer ports); state lives in
//! `DATA_DIR/control-plane` (etcd's data, the components' logs and files).

pub mod pki;
pub mod pod_network;
pub mod release;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::http;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, Patch, PatchParams};
use kube_local::private_files;

use pki::Pki;
use release::KubernetesRelease;

/// The user the nodes' shared caches and Service proxy act as: it lists and
/// watches what kube-proxy and cluster DNS read, and the pods.
const NODE_AGENT_USER: &str = "dkv-local:node-agent";
/// The user kube-local's volume provisioner acts as.
const PROVISIONER_USER: &str = "dkv-local:provisioner";
/// The user the API server reaches the kubelets as.
const KUBELET_CLIENT_USER: &str = "kube-apiserver-kubelet-client";

/// The control plane's state: etcd's data, the components' logs and files.
fn control_plane_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("control-plane")
}

/// Where the data directory records the release its control plane ran.
const RELEASE_FILE: &str = "release";

/// Refuses to start `release` on the state of another minor release: a
/// cluster's control plane moves one minor at a time and never back (its
/// etcd holds objects in the storage versions of the release that wrote
/// them), and dkv builds 1.34 and 1.37 only.
pub fn check_release(data_dir: &Path, release: &KubernetesRelease) -> anyhow::Result<()> {
    let Ok(recorded) = std::fs::read_to_string(control_plane_dir(data_dir).join(RELEASE_FILE))
    else {
        return Ok(());
    };
    let recorded = recorded.trim();
    if recorded != release.minor {
        bail!(
            "{} holds the state of a Kubernetes {recorded} control plane; starting {} on it would skip or go back minor releases, which Kubernetes does not allow. Start it with --kubernetes {recorded}, or use another --data-dir",
            data_dir.display(),
            release.minor
        );
    }
    Ok(())
}

/// A running control plane; dropping it stops its processes.
pub struct ControlPlane {
    processes: Vec<(String, Child)>,
    pub url: String,
    pub address: SocketAddr,
    pub pki: Pki,
    /// The admin (`system:masters`).
    pub admin: kube::Client,
    /// The kubeconfig written for the user (the admin).
    pub kubeconfig: PathBuf,
}

/// Where the kubelets keep their pods and the provisioner its volumes.
fn kubelet_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("kubelet")
}

/// A free port on loopback (taken back at once: the program that binds it
/// next is started right after).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr().context("finding a free port")?.port())
}

impl ControlPlane {
    /// Starts etcd (`etcd`: the binary), kube-apiserver (on `port`, 0: a
    /// free one), kube-controller-manager and kube-scheduler of `release`
    /// from `bin`; returns once the API server is ready.
    pub async fn start(
        release: &KubernetesRelease,
        bin: &Path,
        etcd: &Path,
        data_dir: &Path,
        port: u16,
    ) -> anyhow::Result<ControlPlane> {
        let home = control_plane_dir(data_dir);
        private_files::create_dir(&home).with_context(|| format!("creating {}", home.display()))?;
        check_release(data_dir, release)?;
        let pki = Pki::open(data_dir)?;
        let port = if port == 0 { free_port()? } else { port };
        let url = format!("https://127.0.0.1:{port}");
        let address: SocketAddr = format!("127.0.0.1:{port}").parse().context("API address")?;
        let mut plane = ControlPlane {
            processes: Vec::new(),
            url: url.clone(),
            address,
            admin: pki
                .client_for(&url, "dkv-local-admin", Some("system:masters"))
                .await?,
            kubeconfig: data_dir.join("kubeconfig"),
            pki,
        };

        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let etcd_data = home.join("etcd");
        // etcd holds every Secret: TLS on both ports, and only holders of a
        // certificate of the CA (the API server) get in.
        let [etcd_cert, etcd_key, etcd_client_cert, etcd_client_key] = plane.pki.etcd()?;
        let ca_cert = plane.pki.ca_cert.display().to_string();
        plane.spawn(
            "etcd",
            etcd,
            &[
                "--name=control-plane".into(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls=https://127.0.0.1:{etcd_client}"),
                format!("--advertise-client-urls=https://127.0.0.1:{etcd_client}"),
                format!("--listen-peer-urls=https://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=https://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=control-plane=https://127.0.0.1:{etcd_peer}"),
                "--listen-metrics-urls=".into(),
                format!("--cert-file={}", etcd_cert.display()),
                format!("--key-file={}", etcd_key.display()),
                "--client-cert-auth".into(),
                format!("--trusted-ca-file={ca_cert}"),
                format!("--peer-cert-file={}", etcd_cert.display()),
                format!("--peer-key-file={}", etcd_key.display()),
                "--peer-client-cert-auth".into(),
                format!("--peer-trusted-ca-file={ca_cert}"),
            ],
            &home,
        )?;

        let pki = &plane.pki;
        let (serving_cert, serving_key) = pki.api_server()?;
        let (sa_key, sa_pub) = pki.service_account_keys()?;
        // Not an admin: what it may do on kubelets is bound below, as
        // kubeadm binds it.
        let (kubelet_cert, kubelet_key) =
            pki.client("apiserver-kubelet-client", KUBELET_CLIENT_USER, None)?;
        let ca_key = pki.ca_key.display().to_string();
        let apiserver_args = vec![
            format!("--etcd-servers=https://127.0.0.1:{etcd_client}"),
            format!("--etcd-cafile={ca_cert}"),
            format!("--etcd-certfile={}", etcd_client_cert.display()),
            format!("--etcd-keyfile={}", etcd_client_key.display()),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", serving_cert.display()),
            format!("--tls-private-key-file={}", serving_key.display()),
            format!("--client-ca-file={ca_cert}"),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", sa_pub.display()),
            format!("--service-account-signing-key-file={}", sa_key.display()),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            // A loopback advertise address has no endpoints to reconcile.
            "--endpoint-reconciler-type=none".into(),
            format!("--kubelet-client-certificate={}", kubelet_cert.display()),
            format!("--kubelet-client-key={}", kubelet_key.display()),
            format!("--kubelet-certificate-authority={ca_cert}"),
            "--kubelet-preferred-address-types=InternalIP".into(),
            "--allow-privileged=true".into(),
            // Webhooks and aggregated APIs behind a Service are dialled at
            // an endpoint (a pod address), as no kube-proxy routes the
            // Service's cluster IP here.
            "--enable-aggregator-routing=true".into(),
        ];
        let apiserver = bin.join("kube-apiserver");
        plane.spawn("kube-apiserver", &apiserver, &apiserver_args, &home)?;
        plane.wait_ready(Duration::from_secs(120)).await?;
        bind_kubelet_client(&plane.admin).await?;

        for (name, user) in [
            ("kube-controller-manager", "system:kube-controller-manager"),
            ("kube-scheduler", "system:kube-scheduler"),
        ] {
            let kubeconfig = home.join(format!("{name}.kubeconfig"));
            plane.pki.kubeconfig(&kubeconfig, &url, user, None)?;
            let kubeconfig = kubeconfig.display().to_string();
            let mut args = vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
                format!(
                    "--cert-dir={}",
                    home.join(format!("{name}-certs")).display()
                ),
                "--leader-elect=false".into(),
            ];
            if name == "kube-controller-manager" {
                args.extend([
                    format!("--root-ca-file={ca_cert}"),
                    format!("--service-account-private-key-file={}", sa_key.display()),
                    format!("--cluster-signing-cert-file={ca_cert}"),
                    format!("--cluster-signing-key-file={ca_key}"),
                    "--use-service-account-credentials".into(),
                ]);
            }
            plane.spawn(name, &bin.join(name), &args, &home)?;
        }
        plane
            .wait_for_default_service_account(Duration::from_secs(120))
            .await?;
        plane.pki.kubeconfig(
            &plane.kubeconfig,
            &url,
            "dkv-local-admin",
            Some("system:masters"),
        )?;
        private_files::write(&home.join(RELEASE_FILE), release.minor.as_bytes())
            .context("recording the control plane's release")?;
        tracing::info!(version = release.version, url = %url, "the Kubernetes control plane is ready");
        Ok(plane)
    }

    /// Starts `program` with `args`, its output appended to
    /// `dir/NAME.log`; it dies with this process (parent-death signal).
    fn spawn(
        &mut self,
        name: &str,
        program: &Path,
        args: &[String],
        dir: &Path,
    ) -> anyhow::Result<()> {
        let log_path = dir.join(format!("{name}.log"));
        let log = private_files::open(&log_path, true)
            .with_context(|| format!("opening {}", log_path.display()))?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("the log file")?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        self.processes.push((name.to_owned(), child));
        Ok(())
    }

    /// Waits until the API server answers `/readyz` with `ok`, failing early
    /// when one of the processes exited.
    async fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            // A process that exited (a port another took) fails the start,
            // before anything could answer in its place.
            for (name, child) in &mut self.processes {
                if let Some(status) = child.try_wait().context("watching the control plane")? {
                    bail!(
                        "{name} exited ({status}) before the API server was ready; see its log in the data directory's control-plane/"
                    );
                }
            }
            let request = http::Request::get("/readyz").body(Vec::new());
            if let Ok(request) = request
                && let Ok(text) = self.admin.request_text(request).await
                && text.trim() == "ok"
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the API server was not ready within {} s", limit.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until the controller manager has made the `default`
    /// ServiceAccount of namespace `default`: until then the API server
    /// refuses every pod there (kind waits for the same).
    async fn wait_for_default_service_account(&mut self, limit: Duration) -> anyhow::Result<()> {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.admin.clone(), "default");
        let deadline = Instant::now() + limit;
        loop {
            if accounts.get_opt("default").await.ok().flatten().is_some() {
                return Ok(());
            }
            for (name, child) in &mut self.processes {
                if let Some(status) = child.try_wait().context("watching the control plane")? {
                    bail!(
                        "{name} exited ({status}); see its log in the data directory's control-plane/"
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-controller-manager made no default ServiceAccount within {} s; see control-plane/kube-controller-manager.log",
                    limit.as_secs()
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// A client of this API server as `user` (in `group`), built now.
    pub fn client(&self, user: &str, group: Option<&str>) -> anyhow::Result<kube::Client> {
        let issued = self
            .pki
            .ca
            .issue_client_in(user, group)
            .with_context(|| format!("a certificate for {user}"))?;
        let mut config = kube::Config::new(self.url.parse().context("the API server's URL")?);
        config.default_namespace = "default".into();
        config.root_cert = Some(vec![self.pki.ca.ca_der()]);
        config.auth_info.client_certificate_data = Some(BASE64.encode(&issued.cert_pem));
        config.auth_info.client_key_data = Some(BASE64.encode(&issued.key_pem).into());
        kube::Client::try_from(config).with_context(|| format!("a client for {user}"))
    }

    /// A client of this API server with a bearer `token`.
    pub fn token_client(&self, token: &str) -> anyhow::Result<kube::Client> {
        let mut config = kube::Config::new(self.url.parse().context("the API server's URL")?);
        config.default_namespace = "default".into();
        config.root_cert = Some(vec![self.pki.ca.ca_der()]);
        config.auth_info.token = Some(token.to_owned().into());
        kube::Client::try_from(config).context("a client with a token")
    }

    /// kube-local's kubelets joined as `nodes` (each as `system:node:NAME`),
    /// their shared caches and Service proxy as [`NODE_AGENT_USER`], whose
    /// read access is granted here.
    pub async fn join_nodes(
        &self,
        mut config: kube_local::kubelet::KubeletConfig,
        data_dir: &Path,
    ) -> anyhow::Result<kube_local::kubelet::Kubelet> {
        grant(&self.admin, NODE_AGENT_USER, node_agent_rules()).await?;
        let mut clients = HashMap::new();
        for node in config.nodes.nodes() {
            let client =
                self.client(&format!("system:node:{}", node.name), Some("system:nodes"))?;
            clients.insert(node.name, client);
        }
        let fallback = self.client(NODE_AGENT_USER, None)?;
        let node_clients: kube_local::kubelet::NodeClients = Arc::new(move |name: &str| {
            clients
                .get(name)
                .cloned()
                .unwrap_or_else(|| fallback.clone())
        });
        config.api_server = Some(kube_local::kubelet::ApiServerAccess {
            address: self.address,
            ca_pem: Some(self.pki.ca.ca_pem()),
        });
        config.serving = Some(kube_local::kubelet::KubeletServing {
            ca: self.pki.ca.clone(),
            authorize: true,
        });
        let agent = self.client(NODE_AGENT_USER, None)?;
        kube_local::kubelet::Kubelet::join(agent, node_clients, config, &kubelet_dir(data_dir))
            .await
            .context("joining the nodes")
    }

    /// kube-local's StorageClasses (`standard`, the default, `network`,
    /// `fixed-size`) and their provisioner, beside the real PersistentVolume
    /// controller, as [`PROVISIONER_USER`].
    pub async fn start_storage(
        &self,
        data_dir: &Path,
    ) -> anyhow::Result<kube_local::workloads::ExternalProvisioner> {
        let classes: Api<k8s_openapi::api::storage::v1::StorageClass> =
            Api::all(self.admin.clone());
        for class in kube_local::workloads::storage_classes() {
            let name = class["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            classes
                .patch(
                    &name,
                    &PatchParams::apply("dkv-local").force(),
                    &Patch::Apply(&class),
                )
                .await
                .with_context(|| format!("creating StorageClass {name}"))?;
        }
        grant(&self.admin, PROVISIONER_USER, provisioner_rules()).await?;
        let client = self.client(PROVISIONER_USER, None)?;
        Ok(kube_local::workloads::ExternalProvisioner::start(client, &kubelet_dir(data_dir)).await)
    }
}

/// What the nodes' shared caches read: pods, and what kube-proxy and cluster
/// DNS read.
fn node_agent_rules() -> serde_json::Value {
    serde_json::json!([
        {"apiGroups": [""], "resources": ["pods", "services", "endpoints", "nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
    ])
}

/// What an external provisioner and resizer do: make, grow and delete
/// volumes, read the claims and report their new size.
fn provisioner_rules() -> serde_json::Value {
    serde_json::json!([
        {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["persistentvolumeclaims/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["get", "list", "watch"]},
    ])
}

/// The API server's kubelet client may use the kubelets' API (logs, exec,
/// attach, port-forward, stats): the bootstrap ClusterRole
/// `system:kubelet-api-admin`, which the kubelets check by
/// SubjectAccessReview.
async fn bind_kubelet_client(admin: &kube::Client) -> anyhow::Result<()> {
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": KUBELET_CLIENT_USER},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT_USER}],
    }))
    .context("the kubelet client's ClusterRoleBinding")?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(
            KUBELET_CLIENT_USER,
            &PatchParams::apply("dkv-local").force(),
            &Patch::Apply(&binding),
        )
        .await
        .context("granting the API server's kubelet client its access to the kubelets")?;
    Ok(())
}

/// A ClusterRole named after `user` with `rules`, bound to that user.
async fn grant(admin: &kube::Client, user: &str, rules: serde_json::Value) -> anyhow::Result<()> {
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": user},
        "rules": rules,
    }))
    .with_context(|| format!("the ClusterRole of {user}"))?;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }))
    .with_context(|| format!("the ClusterRoleBinding of {user}"))?;
    let params = PatchParams::apply("dkv-local").force();
    Api::<ClusterRole>::all(admin.clone())
        .patch(user, &params, &Patch::Apply(&role))
        .await
        .with_context(|| format!("granting {user} its permissions"))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .patch(user, &params, &Patch::Apply(&binding))
        .await
        .with_context(|| format!("granting {user} its permissions"))?;
    Ok(())
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        // The scheduler and controllers first, etcd last.
        for (_, child) in self.processes.iter_mut().rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
