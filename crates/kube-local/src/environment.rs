//! `Environment`: a running kube-local API server on a loopback port with a client and a kubeconfig; dropping it stops everything.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::api_error::ApiError;
use crate::api_traffic::{ApiTraffic, Fault, RequestCounts};
use crate::auth::authenticate::Authenticator;
use crate::core::{Core, WriteOptions};
use crate::server::{self, Server};

/// Where a data directory keeps the cluster's keys (0700): the CA (`ca.crt`, `ca.key`) and the ServiceAccount
/// token key.
pub const PKI_DIR: &str = "pki";
const SERVICE_ACCOUNT_KEY: &str = "service-account.key";
const CA_NAME: &str = "kube-local-ca";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding the API server to {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("creating the data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("building a client for {url}: {source}")]
    Client { url: String, source: kube::Error },
    #[error("serializing CRD {name}: {source}")]
    SerializeCrd {
        name: String,
        source: serde_json::Error,
    },
    #[error("installing CRD {name}: {source}")]
    InstallCrd { name: String, source: Box<ApiError> },
    #[error("setting up TLS: {0}")]
    Tls(crate::tls::TlsError),
    #[error("creating built-in object {what}: {source}")]
    Bootstrap { what: String, source: Box<ApiError> },
    #[error("opening the store in {path}: {source}")]
    Store {
        path: PathBuf,
        source: crate::store::persistence::PersistError,
    },
    #[error("node control: {what}: {source}")]
    NodeControl {
        what: String,
        source: std::io::Error,
    },
    #[error("starting the kubelet: {0}")]
    Kubelet(#[from] crate::kubelet::KubeletError),
}

/// Configures an [`Environment`].
pub struct EnvironmentBuilder {
    crds: Vec<CustomResourceDefinition>,
    watch_history: usize,
    bookmark_interval: Duration,
    data_dir: Option<PathBuf>,
    port: u16,
    tls: bool,
    authenticate: bool,
    kubelet: Option<crate::kubelet::KubeletConfig>,
    nodes: Option<usize>,
    zones: Option<usize>,
    node_monitor_grace: Option<Duration>,
}

impl Default for EnvironmentBuilder {
    fn default() -> Self {
        EnvironmentBuilder {
            crds: Vec::new(),
            watch_history: 10_000,
            bookmark_interval: Duration::from_secs(1),
            data_dir: None,
            port: 0,
            tls: false,
            authenticate: false,
            kubelet: None,
            nodes: None,
            zones: None,
            node_monitor_grace: None,
        }
    }
}

impl EnvironmentBuilder {
    /// CRDs installed (and established) before `build` returns.
    pub fn crds(mut self, crds: Vec<CustomResourceDefinition>) -> Self {
        self.crds.extend(crds);
        self
    }

    pub fn crd(mut self, crd: CustomResourceDefinition) -> Self {
        self.crds.push(crd);
        self
    }

    /// How many changes are kept for watches to resume from (older versions get 410 Expired).
    pub fn watch_history(mut self, events: usize) -> Self {
        self.watch_history = events;
        self
    }

    /// How often idle watches that asked for bookmarks get one.
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Keep state in this directory instead of a temporary one (kept after drop): the kubeconfig, the store
    /// (`store/`: every object survives a restart with the same directory, see the crate README for the durability
    /// guarantee), and the kubelet's pod directories and volumes.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Listen on this port instead of a random one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Serve HTTPS with a certificate for 127.0.0.1 and localhost from a fresh CA (trusted by the client and kubeconfig).
    pub fn tls(mut self, enabled: bool) -> Self {
        self.tls = enabled;
        self
    }

    /// Authenticate and authorize every request as kube-apiserver does (off by default: every caller is trusted).
    ///
    /// Implies [`EnvironmentBuilder::tls`], as clients (kubectl, in-cluster configurations) send tokens only over
    /// HTTPS. Callers present `Authorization: Bearer` with the admin token (written into the kubeconfig and used by
    /// [`Environment::client`]; user `kube-local-admin` in `system:masters`) or a ServiceAccount token this
    /// server issued; others get 401, except on `/healthz`, `/livez`, `/readyz` and `/version`. Requests are then
    /// authorized by RBAC from the stored Roles, ClusterRoles and bindings (403 when refused); see
    /// [`Environment::forbidden`] and [`Environment::allowed`].
    pub fn authenticate(mut self, enabled: bool) -> Self {
        self.authenticate = enabled;
        self
    }

    /// Run workloads: the workload controllers and the process kubelet (default configuration). Without it only the
    /// API runs, which keeps API tests fast.
    pub fn kubelet(mut self, enabled: bool) -> Self {
        self.kubelet = enabled.then(crate::kubelet::KubeletConfig::default);
        self
    }

    /// Run workloads with this kubelet configuration (image map, backoff).
    pub fn kubelet_config(mut self, config: crate::kubelet::KubeletConfig) -> Self {
        self.kubelet = Some(config);
        self
    }

    /// Run this many nodes, `node-1` … `node-N` (default 1), each with its own kubelet. Implies
    /// [`EnvironmentBuilder::kubelet`] when no kubelet configuration was given.
    pub fn nodes(mut self, count: usize) -> Self {
        self.nodes = Some(count.max(1));
        self
    }

    /// Spread the nodes over this many zones, `zone-a`, `zone-b`, … round-robin (default 3).
    pub fn zones(mut self, count: usize) -> Self {
        self.zones = Some(count);
        self
    }

    /// How long a node's heartbeats may stop before it is declared `Ready=Unknown` (default 40 s); tests shorten it.
    pub fn node_monitor_grace_period(mut self, grace: Duration) -> Self {
        self.node_monitor_grace = Some(grace);
        self
    }

    pub async fn build(mut self) -> Result<Environment, Error> {
        if self.nodes.is_some() && self.kubelet.is_none() {
            self.kubelet = Some(crate::kubelet::KubeletConfig::default());
        }
        if let Some(config) = self.kubelet.as_mut() {
            if let Some(n) = self.nodes {
                config.nodes.count = n;
            }
            if let Some(z) = self.zones {
                config.nodes.zones = z;
            }
            if let Some(g) = self.node_monitor_grace {
                config.nodes.monitor_grace = g;
            }
        }
        let (dir, temp) = match &self.data_dir {
            Some(d) => {
                // It holds the store (every Secret), the keys and the admin's kubeconfig: its owner's alone.
                crate::private_files::create_dir(d).map_err(|source| Error::DataDir {
                    path: d.clone(),
                    source,
                })?;
                (d.clone(), None)
            }
            None => {
                // Private, as a data directory is (tempfile's default follows the umask, often 0755).
                let t = tempfile::Builder::new()
                    .prefix("kube-local-")
                    .permissions(std::os::unix::fs::PermissionsExt::from_mode(
                        crate::private_files::DIR_MODE,
                    ))
                    .tempdir()
                    .map_err(|source| Error::DataDir {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                (t.path().to_path_buf(), Some(t))
            }
        };
        let mut core = match &self.data_dir {
            Some(d) => {
                let path = d.join("store");
                Core::open(self.watch_history, &path)
                    .await
                    .map_err(|source| Error::Store { path, source })?
            }
            None => Core::new(self.watch_history),
        };
        // A data directory keeps the keys, as a cluster does: the kubeconfig, pods' `ca.crt` and the tokens
        // issued before a restart stay valid after it.
        let pki = self.data_dir.as_ref().map(|d| d.join(PKI_DIR));
        if let Some(pki) = &pki {
            crate::private_files::create_dir(pki).map_err(|source| Error::DataDir {
                path: pki.clone(),
                source,
            })?;
            let path = pki.join(SERVICE_ACCOUNT_KEY);
            core.tokens =
                crate::service_account_tokens::ServiceAccountTokens::load_or_create(&path)
                    .map_err(|source| Error::DataDir { path, source })?;
        }
        let core = Arc::new(core);
        bootstrap(&core).await?;
        for crd in &self.crds {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(crd).map_err(|source| Error::SerializeCrd {
                name: name.clone(),
                source,
            })?;
            install_crd(&core, value)
                .await
                .map_err(|source| Error::InstallCrd {
                    name,
                    source: Box::new(source),
                })?;
        }
        let bind = format!("127.0.0.1:{}", self.port);
        let listener = tokio::net::TcpListener::bind(&bind)
            .await
            .map_err(|source| Error::Bind {
                addr: bind.clone(),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::Bind { addr: bind, source })?;
        let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
        let traffic = Arc::new(ApiTraffic::default());
        let auth = self.authenticate.then(|| Arc::new(Authenticator::new()));
        let server = Arc::new(Server {
            core: core.clone(),
            address: addr.to_string(),
            bookmark_interval: self.bookmark_interval,
            shutdown: shutdown_rx.clone(),
            traffic: traffic.clone(),
            auth: auth.clone(),
        });
        let app = server::router(server);
        // Credentials need HTTPS: kubectl (client-go) does not send a token to a plain HTTP server.
        let ca = if self.tls || self.authenticate {
            Some(
                match &pki {
                    Some(dir) => crate::tls::CertificateAuthority::load_or_create(dir, CA_NAME),
                    None => crate::tls::CertificateAuthority::new(CA_NAME),
                }
                .map_err(Error::Tls)?,
            )
        } else {
            None
        };
        core.set_certificate_signer(ca.as_ref());
        if let Some(ca) = &ca {
            core.set_kubelet_client(
                crate::kubelet_client::KubeletClient::tls(ca).map_err(Error::Tls)?,
            );
        }
        let serve = match &ca {
            None => {
                let mut serve_shutdown = shutdown_rx.clone();
                tokio::spawn(async move {
                    let result = axum::serve(listener, app)
                        .with_graceful_shutdown(async move {
                            let _ = serve_shutdown.wait_for(|s| *s).await;
                        })
                        .await;
                    if let Err(e) = result {
                        tracing::error!(error = %e, "kube-local server stopped");
                    }
                })
            }
            Some(ca) => {
                let issued = ca.issue(&["127.0.0.1", "localhost"]).map_err(Error::Tls)?;
                // With authentication, clients may present a certificate of this CA (the admin kubeconfig's).
                let config = if self.authenticate {
                    issued.server_config_with_client_certificates(&ca.ca_der())
                } else {
                    issued.server_config()
                }
                .map_err(Error::Tls)?;
                let mut stop = shutdown_rx.clone();
                tokio::spawn(crate::https::serve(listener, app, config, async move {
                    let _ = stop.wait_for(|s| *s).await;
                }))
            }
        };
        let controllers = tokio::spawn(kube_local_controllers::builtin::run(
            core.clone(),
            shutdown_rx,
        ));
        let scheme = if ca.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        let kubeconfig = dir.join("kubeconfig");
        let ca_pem = ca.as_ref().map(|c| c.ca_pem());
        let admin_token = auth.as_ref().map(|a| a.admin_token().to_owned());
        // The kubeconfig's user is the admin by client certificate, as on a cluster a kubeadm-style
        // `admin.conf` is; the environment's own client uses the admin token.
        let admin_certificate = match (&ca, &auth) {
            (Some(ca), Some(_)) => Some(
                ca.issue_client(
                    crate::auth::authenticate::ADMIN_USER,
                    crate::auth::authenticate::MASTERS_GROUP,
                )
                .map_err(Error::Tls)?,
            ),
            _ => None,
        };
        crate::private_files::write(
            &kubeconfig,
            kubeconfig_yaml(&url, ca_pem.as_deref(), admin_certificate.as_ref()).as_bytes(),
        )
        .map_err(|source| Error::Kubeconfig {
            path: kubeconfig.clone(),
            source,
        })?;
        let ca_der = ca.as_ref().map(|c| c.ca_der());
        let client = client_for(&url, ca_der.clone(), admin_token.as_deref())?;
        let workloads = match self.kubelet {
            Some(mut config) => {
                config.api_server = Some(crate::kubelet::ApiServerAccess {
                    address: addr,
                    ca_pem: ca_pem.clone(),
                });
                // The kubelets speak TLS where the API server does, and check their callers where it does.
                config.serving = ca.as_ref().map(|ca| crate::kubelet::KubeletServing {
                    ca: ca.clone(),
                    authorize: self.authenticate,
                });
                Some(crate::workloads::Workloads::start(client.clone(), &dir, config).await?)
            }
            None => None,
        };
        let mut tasks = vec![serve, controllers];
        // Another process (`node kill`, `node start`) powers the nodes of an environment kept in a data directory.
        if let (Some(workloads), Some(data_dir)) = (&workloads, &self.data_dir) {
            let listener =
                crate::node_control::listen(data_dir).map_err(|source| Error::NodeControl {
                    what: format!(
                        "listening on {}",
                        crate::node_control::socket_path(data_dir).display()
                    ),
                    source,
                })?;
            tasks.push(tokio::spawn(crate::node_control::serve(
                listener,
                workloads.kubelet_handle(),
            )));
        }
        Ok(Environment {
            workloads,
            addr,
            url,
            ca_der,
            auth,
            client,
            kubeconfig,
            core,
            traffic,
            shutdown: shutdown_tx,
            tasks,
            _temp: temp,
        })
    }
}

fn client_for(
    url: &str,
    ca_der: Option<Vec<u8>>,
    token: Option<&str>,
) -> Result<kube::Client, Error> {
    let parsed: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| Error::Client {
            url: url.to_string(),
            source: kube::Error::Service(Box::new(e)),
        })?;
    let mut config = kube::Config::new(parsed);
    config.default_namespace = "default".into();
    config.read_timeout = None;
    config.root_cert = ca_der.map(|d| vec![d]);
    config.auth_info.token = token.map(|t| t.to_owned().into());
    kube::Client::try_from(config).map_err(|source| Error::Client {
        url: url.to_string(),
        source,
    })
}

fn kubeconfig_yaml(
    url: &str,
    ca_pem: Option<&str>,
    admin_certificate: Option<&crate::tls::Issued>,
) -> String {
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                BASE64.encode(pem.as_bytes())
            )
        })
        .unwrap_or_default();
    // Over HTTPS kubectl prompts for a username when the user has no credentials; without authentication
    // kube-local accepts any token.
    let user = match (admin_certificate, ca_pem) {
        (Some(issued), _) => format!(
            "{{client-certificate-data: {}, client-key-data: {}}}",
            BASE64.encode(issued.cert_pem.as_bytes()),
            BASE64.encode(issued.key_pem.as_bytes())
        ),
        (None, Some(_)) => "{token: kube-local}".to_owned(),
        (None, None) => "{}".to_owned(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-local\n  cluster:\n    server: {url}{ca}\ncontexts:\n- name: kube-local\n  context:\n    cluster: kube-local\n    user: kube-local\n    namespace: default\ncurrent-context: kube-local\nusers:\n- name: kube-local\n  user: {user}\npreferences: {{}}\n"
    )
}

async fn create(core: &Core, group: &str, plural: &str, ns: &str, obj: Value) -> Result<(), Error> {
    let what = format!(
        "{plural}/{}",
        obj.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    );
    let rt = core
        .registry
        .find(group, "v1", plural)
        .ok_or_else(|| Error::Bootstrap {
            what: what.clone(),
            source: Box::new(ApiError::not_found_path()),
        })?;
    match core
        .create(&rt, ns, obj, &WriteOptions::internal("kube-apiserver"))
        .await
    {
        // Kept from an earlier run in the same data directory.
        Err(e) if e.reason == "AlreadyExists" => Ok(()),
        other => other.map(|_| ()).map_err(|source| Error::Bootstrap {
            what,
            source: Box::new(source),
        }),
    }
}

/// Objects a fresh cluster has.
async fn bootstrap(core: &Core) -> Result<(), Error> {
    for (plural, object) in crate::auth::bootstrap_roles::objects() {
        create(core, "rbac.authorization.k8s.io", plural, "", object).await?;
    }
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        create(
            core,
            "",
            "namespaces",
            "",
            json!({"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]}}),
        )
        .await?;
    }
    create(
        core,
        "",
        "services",
        "default",
        json!({
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"], "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}], "sessionAffinity": "None"}
        }),
    )
    .await?;
    for class in crate::workloads::storage_classes() {
        create(core, "storage.k8s.io", "storageclasses", "", class).await?;
    }
    Ok(())
}

/// Creates the CRD, or (when an earlier run in the same data directory left one) replaces its definition.
async fn install_crd(core: &Core, mut crd: Value) -> Result<(), ApiError> {
    let rt = core
        .registry
        .find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(ApiError::not_found_path)?;
    let opts = WriteOptions::internal("kube-local");
    match core.create(&rt, "", crd.clone(), &opts).await {
        Err(e) if e.reason == "AlreadyExists" => {
            let name = crate::meta::name(&crd).to_string();
            let current = core.get(&rt, "", &name)?;
            crate::meta::set_meta(
                &mut crd,
                "resourceVersion",
                json!(crate::meta::resource_version(&current)),
            );
            core.update(&rt, "", &name, crate::core::Subresource::Main, crd, &opts)
                .await
                .map(|_| ())
        }
        other => other.map(|_| ()),
    }
}

/// A running local control plane. See the crate docs.
pub struct Environment {
    /// The controllers and kubelet, if enabled; dropping them kills every pod process.
    workloads: Option<crate::workloads::Workloads>,
    addr: SocketAddr,
    url: String,
    /// The CA of a TLS server (DER), for clients built later.
    ca_der: Option<Vec<u8>>,
    /// The authenticator, when built with [`EnvironmentBuilder::authenticate`].
    auth: Option<Arc<Authenticator>>,
    client: kube::Client,
    kubeconfig: PathBuf,
    core: Arc<Core>,
    traffic: Arc<ApiTraffic>,
    shutdown: tokio::sync::watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _temp: Option<tempfile::TempDir>,
}

impl Environment {
    pub fn builder() -> EnvironmentBuilder {
        EnvironmentBuilder::default()
    }

    /// The kubelet (fault hooks, pod IPs, Service addresses), when built with [`EnvironmentBuilder::kubelet`].
    pub fn kubelet(&self) -> Option<&crate::kubelet::Kubelet> {
        self.workloads.as_ref().map(|w| w.kubelet())
    }

    /// The clock CronJobs follow, when built with [`EnvironmentBuilder::kubelet`].
    pub fn clock(&self) -> Option<&crate::clock::Clock> {
        self.workloads.as_ref().map(|w| w.clock())
    }

    /// The clock ServiceAccount tokens are issued and checked against (TokenRequest, TokenReview);
    /// advance it to let tokens expire.
    pub fn token_clock(&self) -> &crate::clock::Clock {
        self.core.tokens.clock()
    }

    /// A client for this server (default namespace `default`); with authentication, the admin's.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A client for this server presenting `token` (e.g. a ServiceAccount's), or no credentials when `None`.
    pub fn client_with_token(&self, token: Option<&str>) -> Result<kube::Client, Error> {
        client_for(&self.url, self.ca_der.clone(), token)
    }

    /// The admin token of the kubeconfig, when built with [`EnvironmentBuilder::authenticate`].
    pub fn admin_token(&self) -> Option<&str> {
        self.auth.as_ref().map(|a| a.admin_token())
    }

    /// The requests refused by authorization (403) so far, oldest first; empty without authentication.
    pub fn forbidden(&self) -> Vec<crate::ForbiddenRequest> {
        self.auth
            .as_ref()
            .map(|a| a.log.forbidden())
            .unwrap_or_default()
    }

    /// The distinct kinds of request each user was allowed so far (verb, group, resource, subresource,
    /// namespace or path) and the grant that allowed each; empty without authentication.
    pub fn allowed(
        &self,
    ) -> std::collections::BTreeMap<String, std::collections::BTreeSet<crate::AllowedRequest>> {
        self.auth
            .as_ref()
            .map(|a| a.log.allowed())
            .unwrap_or_default()
    }

    /// The kubeconfig file (cluster, context and user all named `kube-local`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The requests the API server received so far, per verb and resource (also served as `GET /metrics`).
    pub fn requests(&self) -> RequestCounts {
        self.traffic.counts()
    }

    /// Answers the next requests matching `fault` with its error instead of serving them.
    pub fn inject_fault(&self, fault: Fault) {
        self.traffic.inject(fault);
    }

    /// Requests answered by injected faults so far.
    pub fn injected_faults(&self) -> u64 {
        self.traffic.injected()
    }

    /// Drops the faults not used up yet.
    pub fn clear_faults(&self) {
        self.traffic.clear_faults();
    }

    /// Discards the watch history, as an etcd compaction does: watches from earlier versions get `410 Expired`.
    pub fn compact(&self) {
        self.core.store.compact();
    }

    /// Installs a CRD through the API (it is established when this returns).
    pub async fn install_crd(&self, crd: &CustomResourceDefinition) -> Result<(), Error> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let value = serde_json::to_value(crd).map_err(|source| Error::SerializeCrd {
            name: name.clone(),
            source,
        })?;
        install_crd(&self.core, value)
            .await
            .map_err(|source| Error::InstallCrd {
                name,
                source: Box::new(source),
            })
    }

    /// Stops serving (also done on drop); a persistent store writes a fresh snapshot.
    pub fn stop(&self) {
        self.shutdown.send_replace(true);
        for t in &self.tasks {
            t.abort();
        }
        self.core.store.flush();
    }
}

impl Drop for Environment {
    fn drop(&mut self) {
        self.stop();
    }
}
