//! The real control plane's certificates and keys, from the same CA as the
//! rest of local mode (`DATA_DIR/pki`, kept across restarts): the API
//! server's serving certificate, the ServiceAccount signing key, and a
//! client certificate and kubeconfig for each component, each user and each
//! node. Everything is written 0600 in `DATA_DIR/control-plane/pki`.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use kube_local::private_files;
use kube_local::tls::{CertificateAuthority, Issued};

/// The names the API server answers to: loopback, and the `kubernetes`
/// Service pods reach it through.
const API_SERVER_NAMES: [&str; 7] = [
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
];

/// Where one control plane's files are.
pub struct Pki {
    pub dir: PathBuf,
    pub ca: CertificateAuthority,
    /// The CA certificate and key files (`DATA_DIR/pki`).
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
}

impl Pki {
    /// The CA of `data_dir/pki` (created on first use) and a directory for
    /// the control plane's own files.
    pub fn open(data_dir: &Path) -> anyhow::Result<Pki> {
        let ca_dir = data_dir.join(kube_local::PKI_DIR);
        let ca = CertificateAuthority::load_or_create(&ca_dir, "dkv-local-ca")
            .context("the local cluster's CA")?;
        let dir = data_dir.join("control-plane/pki");
        private_files::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Pki {
            dir,
            ca,
            ca_cert: ca_dir.join(kube_local::tls::CA_CERT_FILE),
            ca_key: ca_dir.join(kube_local::tls::CA_KEY_FILE),
        })
    }

    fn write(&self, name: &str, contents: &str) -> anyhow::Result<PathBuf> {
        let path = self.dir.join(name);
        private_files::write(&path, contents.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }

    /// The API server's serving certificate and key files.
    pub fn api_server(&self) -> anyhow::Result<(PathBuf, PathBuf)> {
        let issued = self
            .ca
            .issue(&API_SERVER_NAMES)
            .context("issuing the API server's certificate")?;
        Ok((
            self.write("apiserver.crt", &issued.cert_pem)?,
            self.write("apiserver.key", &issued.key_pem)?,
        ))
    }

    /// The control plane's etcd: its serving and peer certificate (for
    /// 127.0.0.1) and the API server's client certificate, as files
    /// `(serving cert, serving key, client cert, client key)`. etcd asks
    /// every client and peer for a certificate of the CA.
    pub fn etcd(&self) -> anyhow::Result<[PathBuf; 4]> {
        let serving = self
            .ca
            .issue_peer(&["127.0.0.1", "localhost"])
            .context("issuing etcd's certificate")?;
        let (client_cert, client_key) =
            self.client("apiserver-etcd-client", "kube-apiserver-etcd-client", None)?;
        Ok([
            self.write("etcd.crt", &serving.cert_pem)?,
            self.write("etcd.key", &serving.key_pem)?,
            client_cert,
            client_key,
        ])
    }

    /// The ServiceAccount token signing key (ECDSA P-256), private and
    /// public, made once and kept: tokens outlive a restart.
    pub fn service_account_keys(&self) -> anyhow::Result<(PathBuf, PathBuf)> {
        let private = self.dir.join("sa.key");
        let public = self.dir.join("sa.pub");
        if private.is_file() && public.is_file() {
            return Ok((private, public));
        }
        let key = rcgen::KeyPair::generate().context("generating the ServiceAccount key")?;
        Ok((
            self.write("sa.key", &key.serialize_pem())?,
            self.write("sa.pub", &key.public_key_pem())?,
        ))
    }

    /// A client certificate for `user` (in `group`), as files.
    pub fn client(
        &self,
        name: &str,
        user: &str,
        group: Option<&str>,
    ) -> anyhow::Result<(PathBuf, PathBuf)> {
        let issued = self.issue(user, group)?;
        Ok((
            self.write(&format!("{name}.crt"), &issued.cert_pem)?,
            self.write(&format!("{name}.key"), &issued.key_pem)?,
        ))
    }

    fn issue(&self, user: &str, group: Option<&str>) -> anyhow::Result<Issued> {
        self.ca
            .issue_client_in(user, group)
            .with_context(|| format!("issuing a client certificate for {user}"))
    }

    /// A kubeconfig at `path` for `user` (in `group`) of the API server at
    /// `url`.
    pub fn kubeconfig(
        &self,
        path: &Path,
        url: &str,
        user: &str,
        group: Option<&str>,
    ) -> anyhow::Result<()> {
        let issued = self.issue(user, group)?;
        let text = kubeconfig_yaml(url, &self.ca.ca_pem(), &issued);
        private_files::write(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))
    }

    /// A client of the API server at `url` as `user` (in `group`).
    pub async fn client_for(
        &self,
        url: &str,
        user: &str,
        group: Option<&str>,
    ) -> anyhow::Result<kube::Client> {
        let issued = self.issue(user, group)?;
        let text = kubeconfig_yaml(url, &self.ca.ca_pem(), &issued);
        let kubeconfig =
            kube::config::Kubeconfig::from_yaml(&text).context("a client kubeconfig")?;
        let mut config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .context("a client configuration")?;
        config.default_namespace = "default".into();
        kube::Client::try_from(config).with_context(|| format!("a client for {user}"))
    }
}

fn kubeconfig_yaml(url: &str, ca_pem: &str, issued: &Issued) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dkv-local\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: dkv-local\n  context:\n    cluster: dkv-local\n    user: dkv-local\n    namespace: default\ncurrent-context: dkv-local\nusers:\n- name: dkv-local\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n",
        ca = BASE64.encode(ca_pem),
        cert = BASE64.encode(&issued.cert_pem),
        key = BASE64.encode(&issued.key_pem),
    )
}
