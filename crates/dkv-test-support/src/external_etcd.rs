//! A bare etcd cluster outside Kubernetes, as a user runs one before dkv
//! adopts it (`spec.bootstrap.join`): member processes `old-1`, `old-2`, ...
//! on loopback addresses kube-local never gives pods, optionally with TLS
//! on both transports from a CA of the test's, each in a private mount
//! namespace whose `/etc/hosts` the test controls — so the members resolve
//! dkv's members' peer names (`<pod>.<cluster>-peer.<ns>.svc`) as a real
//! cluster resolves them through cluster DNS.
//!
//! Everything (data, certificates, logs, the hosts file) lives in a scratch
//! directory; dropping the [`ExternalEtcd`] kills the processes and removes
//! it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use dkv_operator::pki::{Authority, Issued, Leaf, Usage};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use kube_local::kubelet::sandbox;

use crate::paths::etcd_bin_dir;

/// The second octet of every member address: 127.251-255.x.x are never
/// pod addresses (kube-local's `addresses.rs`), so nothing of kube-local's
/// can take them.
const ADDRESS_BLOCK: u8 = 252;
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// How long a member may take to start and know a leader.
const READY_WITHIN: Duration = Duration::from_secs(60);
/// How long the certificates are valid: longer than any test.
const VALIDITY: Duration = Duration::from_secs(24 * 3600);
/// How often [`ExternalEtcd::follow_pods`] looks at the member pods.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// What cluster to start.
#[derive(Debug, Clone)]
pub struct ExternalEtcdOptions {
    /// The etcd release, as [`etcd_bin_dir`] names it ("3.5", "3.6.16").
    pub version: String,
    /// How many members it starts with (`old-1` ... `old-N`).
    pub members: usize,
    /// TLS between members and to clients, both with client certificates
    /// required, all from one CA ([`ExternalTls`]).
    pub tls: bool,
}

impl Default for ExternalEtcdOptions {
    fn default() -> Self {
        Self {
            version: "3.5".to_owned(),
            members: 3,
            tls: false,
        }
    }
}

/// The CA a TLS [`ExternalEtcd`] was issued from, and a client certificate
/// its members accept.
pub struct ExternalTls {
    /// Signs every certificate here; the members trust it on both
    /// transports.
    pub authority: Authority,
    /// A client certificate (no names) the members accept.
    pub client: Issued,
}

impl ExternalTls {
    fn generate() -> Self {
        let authority = Authority::generate("external etcd", VALIDITY)
            .unwrap_or_else(|e| panic!("generating the external cluster's CA: {e}"));
        let client = issue_from(&authority, "external-etcd-client", &[], Usage::Client);
        Self { authority, client }
    }

    /// The CA's certificate (PEM).
    pub fn ca_pem(&self) -> &str {
        &self.authority.cert_pem
    }

    /// Issues another certificate from the same CA: `hosts` are DNS names
    /// (wildcards allowed) and IP addresses (see [`dkv_peer_names`] for the
    /// ones a dkv member's peer certificate needs).
    pub fn issue(&self, common_name: &str, hosts: &[String], usage: Usage) -> Issued {
        issue_from(&self.authority, common_name, hosts, usage)
    }

    /// etcd-client TLS options presenting the client certificate and
    /// trusting the CA; members are verified by their address (each
    /// member's certificate names its IP).
    pub fn client_options(&self) -> etcd_client::TlsOptions {
        etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(self.ca_pem()))
            .identity(etcd_client::Identity::from_pem(
                &self.client.cert_pem,
                &self.client.key_pem,
            ))
    }

    /// A `kubernetes.io/tls` Secret `name` holding `issued` (`tls.crt`,
    /// `tls.key`) and the CA (`ca.crt`).
    pub fn secret(&self, name: &str, issued: &Issued) -> Secret {
        let data = [
            ("tls.crt", &issued.cert_pem),
            ("tls.key", &issued.key_pem),
            ("ca.crt", &self.authority.cert_pem),
        ];
        Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k.to_owned(), ByteString(v.clone().into_bytes())))
                    .collect(),
            ),
            ..Secret::default()
        }
    }

    /// Creates (or replaces) the Secret [`Self::secret`] describes in
    /// `namespace`.
    pub async fn put_secret(&self, client: &Client, namespace: &str, name: &str, issued: &Issued) {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let mut secret = self.secret(name, issued);
        let existing = secrets
            .get_opt(name)
            .await
            .unwrap_or_else(|e| panic!("reading Secret {namespace}/{name}: {e}"));
        let written = match existing {
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version;
                secrets.replace(name, &PostParams::default(), &secret).await
            }
            None => secrets.create(&PostParams::default(), &secret).await,
        };
        written.unwrap_or_else(|e| panic!("writing Secret {namespace}/{name}: {e}"));
    }

    /// The client certificate as a Secret `name` in `namespace`: what
    /// `spec.bootstrap.join.clientSecretRef` names.
    pub async fn put_client_secret(&self, client: &Client, namespace: &str, name: &str) {
        self.put_secret(client, namespace, name, &self.client).await;
    }
}

fn issue_from(authority: &Authority, common_name: &str, hosts: &[String], usage: Usage) -> Issued {
    authority
        .issue(&Leaf {
            common_name,
            hosts,
            usage,
            validity: VALIDITY,
        })
        .unwrap_or_else(|e| panic!("issuing a certificate for {common_name}: {e}"))
}

/// The names a dkv member's peer certificate must carry to talk to the
/// external members: its peer names (`*.<cluster>-peer.<ns>.svc` and the
/// `.svc.cluster.local` form) and `localhost`, the name 127.0.0.1 resolves
/// back to — on kube-local every member connects from 127.0.0.1, and etcd
/// checks a connecting peer's certificate against the reverse-resolved
/// name of its address.
pub fn dkv_peer_names(namespace: &str, cluster: &str) -> Vec<String> {
    let service = dkv_member::naming::peer_service(cluster);
    vec![
        format!("*.{service}.{namespace}.svc"),
        format!("*.{service}.{namespace}.svc.cluster.local"),
        "localhost".to_owned(),
    ]
}

/// A bare etcd cluster of member processes (see the module's doc).
pub struct ExternalEtcd {
    dir: PathBuf,
    etcd: PathBuf,
    /// The third octet of every member's address (`127.252.<block>.k`).
    block: u8,
    token: String,
    tls: Option<ExternalTls>,
    hosts: Arc<HostsFile>,
    spawner: Spawner,
    members: Vec<Member>,
    /// The [`Self::follow_pods`] tasks, stopped on drop.
    followers: Mutex<Vec<tokio::task::AbortHandle>>,
}

/// One member process and how to start it (again).
struct Member {
    name: String,
    ip: Ipv4Addr,
    /// What it advertises to its peers.
    peer_url: String,
    args: Vec<String>,
    process: Option<Child>,
}

impl ExternalEtcd {
    /// Starts `options.members` members forming one new cluster and waits
    /// until each knows the leader.
    pub async fn start(options: ExternalEtcdOptions) -> Self {
        assert!(options.members > 0, "an etcd cluster needs a member");
        let binary = etcd_bin_dir(&options.version).join("etcd");
        let dir = scratch_dir();
        let block = free_block(options.members);
        let hosts = Arc::new(HostsFile::create(dir.join("hosts")));
        let mut etcd = Self {
            etcd: binary,
            block,
            token: format!("external-etcd-{}-{block}", std::process::id()),
            tls: options.tls.then(ExternalTls::generate),
            hosts,
            spawner: Spawner::start(),
            members: Vec::new(),
            followers: Mutex::new(Vec::new()),
            dir,
        };
        if let Some(tls) = &etcd.tls {
            write_file(&etcd.dir.join("ca.crt"), tls.ca_pem());
        }
        let founders: Vec<(String, Ipv4Addr)> = (1..=options.members)
            .map(|k| (format!("old-{k}"), etcd.address(k)))
            .collect();
        let initial_cluster = founders
            .iter()
            .map(|(name, ip)| format!("{name}={}", etcd.url(&ip.to_string(), PEER_PORT)))
            .collect::<Vec<_>>()
            .join(",");
        for (name, ip) in founders {
            let ip_text = ip.to_string();
            etcd.launch(name, ip, &ip_text, &initial_cluster, "new");
        }
        for name in etcd.member_names() {
            etcd.wait_ready(&name).await;
        }
        etcd
    }

    /// Whether members serve (and talk to each other) over TLS.
    pub fn tls(&self) -> Option<&ExternalTls> {
        self.tls.as_ref()
    }

    /// `https` with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// Every member this harness started (running or not), in order.
    pub fn member_names(&self) -> Vec<String> {
        self.members.iter().map(|m| m.name.clone()).collect()
    }

    /// The members' client URLs (`http(s)://127.252.x.k:2379`), in order:
    /// what `spec.bootstrap.join.endpoints` lists.
    pub fn client_endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| self.url(&m.ip.to_string(), CLIENT_PORT))
            .collect()
    }

    /// One member's client URL.
    pub fn client_endpoint(&self, name: &str) -> String {
        self.url(&self.member(name).ip.to_string(), CLIENT_PORT)
    }

    /// The peer URLs the members advertise, in order.
    pub fn peer_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| m.peer_url.clone()).collect()
    }

    /// A peer URL at `host` (a name [`Self::set_hosts`] resolves, say).
    pub fn peer_url_at(&self, host: &str) -> String {
        self.url(host, PEER_PORT)
    }

    /// One member's address.
    pub fn address_of(&self, name: &str) -> Ipv4Addr {
        self.member(name).ip
    }

    /// The address the next member [`Self::start_joining`] starts listens
    /// on.
    pub fn next_address(&self) -> Ipv4Addr {
        self.address(self.members.len() + 1)
    }

    /// Where the data directories, certificates, logs and the hosts file
    /// are (removed on drop).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Short timeouts, and the client certificate with TLS.
    pub fn connect_options(&self) -> etcd_client::ConnectOptions {
        crate::tls::options(self.tls.as_ref().map(ExternalTls::client_options))
    }

    /// A client of every running member.
    pub async fn connect(&self) -> etcd_client::Client {
        let running = self
            .members
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| self.url(&m.ip.to_string(), CLIENT_PORT))
            .collect();
        self.connect_to(running).await
    }

    /// A client of the given client URLs, with [`Self::connect_options`].
    pub async fn connect_to(&self, endpoints: Vec<String>) -> etcd_client::Client {
        etcd_client::Client::connect(&endpoints, Some(self.connect_options()))
            .await
            .unwrap_or_else(|e| panic!("connecting to the external cluster at {endpoints:?}: {e}"))
    }

    /// Each member's name and id as etcd lists them, sorted by name (a
    /// member added but not started yet has no name).
    pub async fn member_ids(&self) -> Vec<(String, u64)> {
        let list = self
            .connect()
            .await
            .member_list()
            .await
            .unwrap_or_else(|e| panic!("listing the external cluster's members: {e}"));
        let mut ids: Vec<(String, u64)> = list
            .members()
            .iter()
            .map(|m| (m.name().to_owned(), m.id()))
            .collect();
        ids.sort();
        ids
    }

    /// Makes every member resolve each name to its address, beside what
    /// [`Self::follow_pods`] keeps there (replacing what the last call
    /// set). The members see the change at once in the file; etcd (Go)
    /// reads it again within 5 s.
    pub fn set_hosts(&self, entries: &[(&str, IpAddr)]) {
        let entries = entries
            .iter()
            .map(|(name, ip)| ((*name).to_owned(), *ip))
            .collect();
        self.hosts.update(|e| e.set = entries);
    }

    /// Keeps the members' hosts file in step with the member pods of the
    /// `DistributedKV` `cluster` in `namespace`: every 500 ms, each pod
    /// `<cluster>-<ordinal>` with an IP is resolved from
    /// `<pod>.<cluster>-peer.<namespace>.svc` and its `.svc.cluster.local`
    /// form. Runs until aborted or the cluster is dropped.
    pub fn follow_pods(
        &self,
        client: Client,
        namespace: &str,
        cluster: &str,
    ) -> tokio::task::JoinHandle<()> {
        let hosts = self.hosts.clone();
        let (namespace, cluster) = (namespace.to_owned(), cluster.to_owned());
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client, &namespace);
            let selector = ListParams::default().labels(&format!(
                "{}={cluster},{}=etcd",
                dkv_api::labels::CLUSTER_KEY,
                dkv_api::labels::COMPONENT_KEY
            ));
            loop {
                match pods.list(&selector).await {
                    Ok(list) => {
                        let entries = pod_entries(&namespace, &cluster, &list.items);
                        hosts.update(|e| e.pods = entries);
                    }
                    Err(e) => {
                        eprintln!("[external etcd] listing pods of {namespace}/{cluster}: {e}")
                    }
                }
                tokio::time::sleep(FOLLOW_EVERY).await;
            }
        });
        self.followers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task.abort_handle());
        task
    }

    /// What `host` resolves to inside member `name`'s mount namespace, as
    /// its `/etc/hosts` says (looked up with `getent hosts`); `None` when
    /// it resolves to nothing or the member is not running.
    pub async fn resolves_in(&self, name: &str, host: &str) -> Option<IpAddr> {
        let pid = self.member(name).process.as_ref()?.id();
        let out = sandbox::command_in(
            i32::try_from(pid).ok()?,
            std::ffi::OsStr::new("getent"),
            &["hosts".to_owned(), host.to_owned()],
            &[],
            false,
        )
        .stdin(Stdio::null())
        .output()
        .await
        .ok()?;
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Kills member `name` at once, as a crash would.
    pub fn kill(&mut self, name: &str) {
        if let Some(mut child) = self.member_mut(name).process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops member `name` as an operator would (SIGTERM; a leader hands
    /// leadership over first), killing it after 10 s.
    pub async fn stop(&mut self, name: &str) {
        let Some(mut child) = self.member_mut(name).process.take() else {
            return;
        };
        if let Some(pid) = i32::try_from(child.id())
            .ok()
            .and_then(rustix::process::Pid::from_raw)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts member `name` again from its data (it must have been killed
    /// or stopped) and waits until it knows the leader.
    pub async fn start_again(&mut self, name: &str) {
        let member = self.member(name);
        assert!(member.process.is_none(), "{name} is still running");
        let process = self.spawn(member);
        self.member_mut(name).process = Some(process);
        self.wait_ready(name).await;
    }

    /// Starts a member `name` that joins the running cluster, listening on
    /// [`Self::next_address`] and advertising the peer URL
    /// [`Self::peer_url_at`] `peer_host`: the member must have been added
    /// with that URL (`member add`, as a learner or not), and `peer_host`
    /// must resolve to its address ([`Self::set_hosts`]). Its certificate
    /// (with TLS) names its address, `peer_host` and `localhost`. Waits
    /// until it knows the leader.
    pub async fn start_joining(&mut self, name: &str, peer_host: &str) {
        let ip = self.next_address();
        let peer_url = self.peer_url_at(peer_host);
        // The membership as it is now: a member that joins is given every
        // member's peer URLs, itself among them.
        let list = self
            .connect()
            .await
            .member_list()
            .await
            .unwrap_or_else(|e| panic!("listing members before {name} joins: {e}"));
        assert!(
            list.members()
                .iter()
                .any(|m| m.peer_urls().contains(&peer_url)),
            "no member has the peer URL {peer_url}: add it first"
        );
        let initial_cluster = list
            .members()
            .iter()
            .flat_map(|m| {
                let member_name = if m.peer_urls().contains(&peer_url) {
                    name.to_owned()
                } else if m.name().is_empty() {
                    format!("unstarted-{:x}", m.id())
                } else {
                    m.name().to_owned()
                };
                m.peer_urls()
                    .iter()
                    .map(move |url| format!("{member_name}={url}"))
            })
            .collect::<Vec<_>>()
            .join(",");
        self.launch(name.to_owned(), ip, peer_host, &initial_cluster, "existing");
        self.wait_ready(name).await;
    }

    /// Member `name`'s log so far.
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log_path(name)).unwrap_or_default()
    }

    /// Address `k` (from 1) of this cluster's block.
    fn address(&self, k: usize) -> Ipv4Addr {
        let k = u8::try_from(k)
            .ok()
            .filter(|k| *k < 255)
            .unwrap_or_else(|| panic!("no address for member {k}"));
        Ipv4Addr::new(127, ADDRESS_BLOCK, self.block, k)
    }

    fn url(&self, host: &str, port: u16) -> String {
        format!("{}://{host}:{port}", self.scheme())
    }

    fn member(&self, name: &str) -> &Member {
        self.members
            .iter()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("the external cluster has no member {name}"))
    }

    fn member_mut(&mut self, name: &str) -> &mut Member {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("the external cluster has no member {name}"))
    }

    fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// Writes member `name`'s certificate (with TLS), records it and
    /// starts its process.
    fn launch(
        &mut self,
        name: String,
        ip: Ipv4Addr,
        peer_host: &str,
        initial_cluster: &str,
        state: &str,
    ) {
        let home = self.dir.join(&name);
        std::fs::create_dir_all(&home)
            .unwrap_or_else(|e| panic!("creating {}: {e}", home.display()));
        let client_url = self.url(&ip.to_string(), CLIENT_PORT);
        let peer_url = self.peer_url_at(peer_host);
        let mut args = vec![
            format!("--name={name}"),
            format!("--data-dir={}", home.join("data").display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!(
                "--listen-peer-urls={}",
                self.url(&ip.to_string(), PEER_PORT)
            ),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster={initial_cluster}"),
            format!("--initial-cluster-token={}", self.token),
            format!("--initial-cluster-state={state}"),
        ];
        if let Some(tls) = &self.tls {
            let mut hosts = vec![ip.to_string(), "localhost".to_owned()];
            if peer_host != ip.to_string() {
                hosts.push(peer_host.to_owned());
            }
            let issued = tls.issue(&name, &hosts, Usage::ServerAndClient);
            let (cert, key, ca) = (
                home.join("member.crt"),
                home.join("member.key"),
                self.dir.join("ca.crt"),
            );
            write_file(&cert, &issued.cert_pem);
            write_file(&key, &issued.key_pem);
            for prefix in ["", "peer-"] {
                args.extend([
                    format!("--{prefix}cert-file={}", cert.display()),
                    format!("--{prefix}key-file={}", key.display()),
                    format!("--{prefix}trusted-ca-file={}", ca.display()),
                    format!("--{prefix}client-cert-auth"),
                ]);
            }
        }
        let mut member = Member {
            name,
            ip,
            peer_url,
            args,
            process: None,
        };
        member.process = Some(self.spawn(&member));
        self.members.push(member);
    }

    /// Starts `member`'s etcd in a mount namespace of its own with the
    /// cluster's hosts file over `/etc/hosts` (a bind mount of the file,
    /// hence [`HostsFile`] writes in place); its output is appended to
    /// its log.
    fn spawn(&self, member: &Member) -> Child {
        let log_path = self.log_path(&member.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let err = log
            .try_clone()
            .unwrap_or_else(|e| panic!("opening {}: {e}", log_path.display()));
        let mut command = Command::new("unshare");
        if !sandbox::is_root() {
            command.arg("--map-root-user");
        }
        command
            .args(["--mount", "--propagation", "private", "--"])
            .args(["setpriv", "--pdeathsig", "KILL", "--", "/bin/sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/hosts && shift && exec "$@""#)
            .arg("sh")
            .arg(&self.hosts.path)
            .arg(&self.etcd)
            .args(&member.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err);
        self.spawner
            .spawn(command)
            .unwrap_or_else(|e| panic!("starting {} of the external cluster: {e}", member.name))
    }

    /// Waits until member `name` answers a status request and knows the
    /// leader; fails the test with the end of its log otherwise.
    async fn wait_ready(&self, name: &str) {
        let endpoint = self.client_endpoint(name);
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let connected =
                etcd_client::Client::connect([&endpoint], Some(self.connect_options())).await;
            let last = match connected {
                Ok(mut client) => match client.status().await {
                    Ok(status) if status.leader() != 0 => return,
                    Ok(_) => "no leader yet".to_owned(),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() > deadline {
                let log = self.log(name);
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                panic!(
                    "external etcd member {name} did not become ready within {READY_WITHIN:?} \
                     ({last}); end of its log:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for ExternalEtcd {
    fn drop(&mut self) {
        for follower in self
            .followers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            follower.abort();
        }
        for member in &mut self.members {
            if let Some(mut child) = member.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The hosts-file entries of the member pods of `cluster` that have an IP
/// (and are not being deleted).
fn pod_entries(namespace: &str, cluster: &str, pods: &[Pod]) -> Vec<(String, IpAddr)> {
    let mut entries = Vec::new();
    for pod in pods {
        let Some(name) = pod.metadata.name.as_deref() else {
            continue;
        };
        if pod.metadata.deletion_timestamp.is_some()
            || dkv_member::naming::ordinal_of(cluster, name).is_none()
        {
            continue;
        }
        let Some(ip) = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        else {
            continue;
        };
        let host = dkv_member::naming::host_of_member(cluster, namespace, name);
        entries.push((format!("{host}.cluster.local"), ip));
        entries.push((host, ip));
    }
    entries.sort();
    entries
}

/// The `/etc/hosts` every member sees, rewritten in place (same inode: the
/// members' bind mounts pin it, so a replaced file would go unseen).
struct HostsFile {
    path: PathBuf,
    entries: Mutex<HostsEntries>,
}

/// What the hosts file resolves besides `localhost`.
#[derive(Default)]
struct HostsEntries {
    /// [`ExternalEtcd::set_hosts`]'s.
    set: Vec<(String, IpAddr)>,
    /// [`ExternalEtcd::follow_pods`]'s.
    pods: Vec<(String, IpAddr)>,
}

impl HostsFile {
    fn create(path: PathBuf) -> Self {
        let file = Self {
            path,
            entries: Mutex::new(HostsEntries::default()),
        };
        file.update(|_| {});
        file
    }

    /// Changes the entries and writes the file if its text changes.
    fn update(&self, change: impl FnOnce(&mut HostsEntries)) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut entries);
        // 127.0.0.1 must resolve back to `localhost`: every connection
        // between loopback addresses comes from it, and etcd checks a
        // peer's certificate against that name.
        let mut text = String::from(
            "# external etcd (dkv-test-support)\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        );
        let mut by_ip: BTreeMap<IpAddr, Vec<&str>> = BTreeMap::new();
        for (name, ip) in entries.set.iter().chain(&entries.pods) {
            by_ip.entry(*ip).or_default().push(name);
        }
        for (ip, names) in by_ip {
            text.push_str(&format!("{ip}\t{}\n", names.join("\t")));
        }
        if std::fs::read_to_string(&self.path).ok().as_deref() == Some(text.as_str()) {
            return;
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&self.path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.path.display()));
        file.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("writing {}: {e}", self.path.display()));
    }
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Starts the member processes from one thread that lives as long as the
/// cluster: each gets a parent-death signal (`setpriv --pdeathsig`), which
/// fires when the thread that started it ends, so a test binary that dies
/// without dropping the cluster takes its members with it (a short-lived
/// thread, such as tokio's blocking ones, would kill them early).
struct Spawner {
    requests: mpsc::Sender<SpawnRequest>,
}

impl Spawner {
    fn start() -> Self {
        let (requests, received) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("external-etcd-spawner".to_owned())
            .spawn(move || {
                while let Ok((mut command, reply)) = received.recv() {
                    let _ = reply.send(command.spawn());
                }
            })
            .unwrap_or_else(|e| panic!("starting the external etcd spawner thread: {e}"));
        Self { requests }
    }

    fn spawn(&self, command: Command) -> std::io::Result<Child> {
        let (reply, answer) = mpsc::channel();
        self.requests
            .send((command, reply))
            .map_err(|_| std::io::Error::other("the spawner thread stopped"))?;
        answer
            .recv()
            .map_err(|_| std::io::Error::other("the spawner thread stopped"))?
    }
}

/// A block (third octet) whose first `members` addresses have both ports
/// free, starting from one that depends on the process so that tests
/// running side by side (nextest runs each in its own process) take
/// different ones.
fn free_block(members: usize) -> u8 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id();
    for _ in 0..256 {
        let block = (start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % 256) as u8;
        let free = (1..=members).all(|k| {
            let ip = Ipv4Addr::new(127, ADDRESS_BLOCK, block, k as u8);
            [CLIENT_PORT, PEER_PORT]
                .iter()
                .all(|port| std::net::TcpListener::bind((ip, *port)).is_ok())
        });
        if free {
            return block;
        }
    }
    panic!("no free block of addresses in 127.{ADDRESS_BLOCK}.0.0/16");
}

/// A new empty directory under the system's temporary directory, named
/// after this process. Those of processes that are gone (a test killed
/// before it could drop its cluster; etcd preallocates 64 MiB of log per
/// member) are removed first.
fn scratch_dir() -> PathBuf {
    const PREFIX: &str = "dkv-external-etcd-";
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let temp = std::env::temp_dir();
    for entry in std::fs::read_dir(&temp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        let owner = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = temp.join(format!(
        "{PREFIX}{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

fn write_file(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}
