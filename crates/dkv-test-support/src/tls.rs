//! Talking to a TLS or authenticated cluster from tests: the client
//! certificate a Secret holds, its members' endpoints, the root credentials,
//! a writer that keeps writing across certificate and membership changes,
//! and the serials members were started with.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::etcd_cluster::member_endpoints;
pub use super::etcd_cluster::options;

/// A cluster and how a test connects to it: the Secret whose client
/// certificate it presents (client TLS), the root credentials (etcd
/// authentication), or both.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: String,
    pub cluster: String,
    /// `None`: the cluster serves clients in plaintext.
    pub client_secret: Option<String>,
    /// With etcd authentication on: the Secret (`<cluster>-etcd-root`)
    /// whose root credentials every request carries.
    pub root_secret: Option<String>,
}

impl Target {
    /// The cluster's documented client Secret, `<cluster>-tls-client`.
    pub fn new(namespace: &str, cluster: &str) -> Self {
        Self::with_client_secret(namespace, cluster, &format!("{cluster}-tls-client"))
    }

    pub fn with_client_secret(namespace: &str, cluster: &str, client_secret: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
            client_secret: Some(client_secret.to_owned()),
            root_secret: None,
        }
    }

    /// A cluster without client TLS (see [`Self::as_root`] for one with
    /// authentication on).
    pub fn plaintext(namespace: &str, cluster: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            cluster: cluster.to_owned(),
            client_secret: None,
            root_secret: None,
        }
    }

    /// Authenticates as the cluster's root user too (the password read
    /// from `<cluster>-etcd-root` at each connection).
    pub fn as_root(mut self) -> Self {
        self.root_secret = Some(format!("{}-etcd-root", self.cluster));
        self
    }

    /// The connection options: the client certificate, and the root
    /// credentials when [`Self::as_root`].
    pub async fn connect_options(&self, client: &Client) -> etcd_client::ConnectOptions {
        let options = options(self.client_tls(client).await);
        match &self.root_secret {
            Some(secret) => {
                let text = |key| secret_text(client, &self.namespace, secret, key);
                options.with_user(text("username").await, text("password").await)
            }
            None => options,
        }
    }

    /// The name members are verified by: the client Service's.
    pub fn server_name(&self) -> String {
        format!("{}-client.{}.svc", self.cluster, self.namespace)
    }

    /// The members' client URLs (over https with client TLS).
    pub async fn endpoints(&self, client: &Client) -> Vec<String> {
        let endpoints = member_endpoints(client, &self.namespace, &self.cluster).await;
        if self.client_secret.is_none() {
            return endpoints;
        }
        endpoints
            .into_iter()
            .map(|e| e.replacen("http://", "https://", 1))
            .collect()
    }

    /// The client Secret as etcd-client TLS options (read anew each time:
    /// its certificate may have been renewed); `None` in plaintext.
    pub async fn client_tls(&self, client: &Client) -> Option<etcd_client::TlsOptions> {
        let secret = self.client_secret.as_deref()?;
        let text = |key| secret_text(client, &self.namespace, secret, key);
        let (ca, cert, key) = (
            text("ca.crt").await,
            text("tls.crt").await,
            text("tls.key").await,
        );
        Some(
            etcd_client::TlsOptions::new()
                .ca_certificate(etcd_client::Certificate::from_pem(ca))
                .identity(etcd_client::Identity::from_pem(cert, key))
                .domain_name(self.server_name()),
        )
    }

    /// A client of every member, presenting the client Secret and the
    /// root credentials, as the target has them.
    pub async fn connect(&self, client: &Client) -> etcd_client::Client {
        let options = self.connect_options(client).await;
        etcd_client::Client::connect(self.endpoints(client).await, Some(options))
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.cluster))
    }

    /// Writes `key-N` = N one after the other, each until etcd acknowledges
    /// it (a put is idempotent), reconnecting with the current client
    /// Secret after a failure, until `stop`. Returns the acknowledged N.
    pub fn writer(
        &self,
        client: Client,
        stop: Arc<AtomicBool>,
    ) -> tokio::task::JoinHandle<Vec<u64>> {
        let target = self.clone();
        tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut etcd: Option<etcd_client::Client> = None;
            let mut next = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if etcd.is_none() {
                    let endpoints = target.endpoints(&client).await;
                    let options = target.connect_options(&client).await;
                    etcd = etcd_client::Client::connect(endpoints, Some(options))
                        .await
                        .ok();
                }
                let Some(c) = etcd.as_mut() else {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                };
                match c
                    .put(format!("key-{next:05}"), next.to_string(), None)
                    .await
                {
                    Ok(_) => {
                        acked.push(next);
                        next += 1;
                    }
                    Err(_) => {
                        etcd = None;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            acked
        })
    }

    /// Starts [`Self::writer`]; [`Writer::finish`] stops it and checks that
    /// no acknowledged write was lost.
    pub fn start_writer(&self, client: &Client) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        Writer {
            handle: self.writer(client.clone(), stop.clone()),
            stop,
            target: self.clone(),
            client: client.clone(),
        }
    }

    /// Reads back every acknowledged write with the current client Secret
    /// (and credentials); returns the missing ones.
    pub async fn lost(&self, client: &Client, acked: &[u64]) -> Vec<u64> {
        let mut reader = self.connect(client).await;
        let mut lost = Vec::new();
        for i in acked {
            // A read may fail while a member still restarts on a loaded
            // machine: retried (reconnecting), it is idempotent.
            let mut attempt = 0;
            let response = loop {
                match reader.get(format!("key-{i:05}"), None).await {
                    Ok(response) => break response,
                    Err(e) if attempt < 30 => {
                        attempt += 1;
                        eprintln!("reading key-{i:05} (attempt {attempt}): {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        let options = self.connect_options(client).await;
                        if let Ok(fresh) = etcd_client::Client::connect(
                            self.endpoints(client).await,
                            Some(options),
                        )
                        .await
                        {
                            reader = fresh;
                        }
                    }
                    Err(e) => panic!("reading key-{i:05}: {e}"),
                }
            };
            if response.kvs().first().and_then(|kv| kv.value_str().ok()) != Some(&i.to_string()) {
                lost.push(*i);
            }
        }
        lost
    }

    /// The certificate serial the pod template carries and the serials the
    /// member pods were started with.
    pub async fn serials(&self, client: &Client) -> (String, Vec<String>) {
        const SERIAL: &str = "dkv.io/tls-member-serial";
        let sts = Api::<StatefulSet>::namespaced(client.clone(), &self.namespace)
            .get(&self.cluster)
            .await
            .unwrap_or_else(|e| panic!("StatefulSet {}: {e}", self.cluster));
        let template = sts
            .spec
            .template
            .metadata
            .and_then(|m| m.annotations)
            .and_then(|a| a.get(SERIAL).cloned())
            .unwrap_or_default();
        let pods = Api::<Pod>::namespaced(client.clone(), &self.namespace)
            .list(&ListParams::default().labels(&format!(
                "dkv.io/cluster={},{}=etcd",
                self.cluster,
                dkv_api::labels::COMPONENT_KEY
            )))
            .await
            .unwrap_or_else(|e| panic!("member pods: {e}"));
        let started = pods
            .items
            .iter()
            .map(|p| p.annotations().get(SERIAL).cloned().unwrap_or_default())
            .collect();
        (template, started)
    }

    /// Whether all `size` member pods run the template's certificates.
    pub async fn members_on_template(&self, client: &Client, size: usize) -> bool {
        let (template, started) = self.serials(client).await;
        !template.is_empty() && started.len() == size && started.iter().all(|s| *s == template)
    }
}

/// A running [`Target::writer`].
pub struct Writer {
    stop: Arc<AtomicBool>,
    handle: tokio::task::JoinHandle<Vec<u64>>,
    target: Target,
    client: Client,
}

impl Writer {
    /// Stops the writer, checks it wrote throughout and that every write
    /// etcd acknowledged reads back (`across` names what happened
    /// meanwhile, for the report). Returns how many were acknowledged.
    pub async fn finish(self, across: &str) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        let acked = self.handle.await.unwrap_or_default();
        assert!(
            acked.len() >= 5,
            "the writer wrote throughout: {}",
            acked.len()
        );
        let lost = self.target.lost(&self.client, &acked).await;
        eprintln!(
            "{} writes acknowledged across {across}, {} lost",
            acked.len(),
            lost.len()
        );
        assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
        acked.len()
    }
}

/// `key` of Secret `name`, as text.
pub async fn secret_text(client: &Client, namespace: &str, name: &str, key: &str) -> String {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("Secret {name}: {e}"));
    secret
        .data
        .and_then(|d| {
            d.get(key)
                .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        })
        .unwrap_or_else(|| panic!("Secret {name} has no {key}"))
}

/// Whether a client with `options` can read from `endpoint`.
pub async fn can_read(endpoint: &str, options: etcd_client::ConnectOptions) -> Result<(), String> {
    let mut etcd = etcd_client::Client::connect([endpoint], Some(options))
        .await
        .map_err(|e| e.to_string())?;
    etcd.get("probe", None)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}
