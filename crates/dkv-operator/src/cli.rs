//! The `dkv` command line: one binary, one subcommand per role.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::telemetry::LogFormat;

/// The image this binary was released as; pods that run `dkv` subcommands
/// (member-init, backups) use it unless told otherwise.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/dkv-io/dkv:", env!("CARGO_PKG_VERSION"));

#[derive(Debug, Parser)]
#[command(
    name = "dkv",
    version,
    about = "Replicated etcd clusters on Kubernetes, kept safe through their whole life"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: controllers, metrics and health endpoints.
    Operator(OperatorArgs),
    /// Print the CustomResourceDefinitions as YAML.
    Crd,
    /// Prepare one etcd member's configuration (init container of each member pod).
    MemberInit(MemberInitArgs),
    /// Take one backup (runs in a backup Job pod).
    Backup(BackupArgs),
    /// Download a backup artifact and verify its sha256 (restore init step).
    RestoreFetch(RestoreFetchArgs),
    /// Turn a verified snapshot into this member's data directory with the
    /// etcd version's restore tool (restore init step, after restore-fetch).
    RestoreMember(RestoreMemberArgs),
    /// A local control plane with dkv on this machine (no Kubernetes needed).
    #[cfg(feature = "local")]
    #[command(subcommand)]
    Local(LocalCommand),
}

#[cfg(feature = "local")]
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Start kube-local with dkv's CRDs and the operator; writes DIR/kubeconfig.
    Up(crate::local::UpArgs),
    /// Stop a detached `dkv local up`.
    Down(crate::local::DownArgs),
}

#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Address of the /metrics endpoint (and of /healthz, /readyz unless
    /// --health-addr is given).
    #[arg(long, default_value = "0.0.0.0:8080", env = "DKV_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
    /// Serve /metrics over HTTPS, only to callers whose bearer token the API
    /// server authenticates (TokenReview) and allows `get` on the URL
    /// /metrics (SubjectAccessReview; ClusterRole `dkv-metrics-reader`).
    /// Off by default: plain HTTP, readable by anyone who reaches the port.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, env = "DKV_METRICS_SECURE")]
    pub metrics_secure: bool,
    /// Directory holding tls.crt and tls.key for the secure /metrics (re-read
    /// when they change); without it a self-signed certificate is generated
    /// at start.
    #[arg(long, value_name = "DIR", env = "DKV_METRICS_CERT_DIR")]
    pub metrics_cert_dir: Option<PathBuf>,
    /// Serve /healthz and /readyz in plain HTTP on this address instead of
    /// next to /metrics (probes never need credentials).
    #[arg(long, env = "DKV_HEALTH_ADDR")]
    pub health_addr: Option<SocketAddr>,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "DKV_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Clusters reconciled at the same time.
    #[arg(long, default_value_t = 8)]
    pub concurrency: u16,
    /// Image that runs member-init and backups in the pods dkv creates.
    #[arg(long, env = "DKV_OPERATOR_IMAGE", default_value = DEFAULT_IMAGE)]
    pub operator_image: String,
    /// Elect a leader among replicas through a Lease (disable only when a
    /// single replica can ever run).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_election: bool,
    #[arg(long, default_value = "dkv-operator-leader")]
    pub leader_election_lease: String,
    /// Namespace of the lease; defaults to the operator's own namespace.
    #[arg(long, env = "POD_NAMESPACE", default_value = "dkv-system")]
    pub leader_election_namespace: String,
    /// This replica's identity in the lease; defaults to the pod name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Validity of the member and client certificates issued for clusters
    /// with `spec.tls` (renewed when a third is left; at least 60).
    #[arg(long, default_value_t = 365 * 24 * 3600)]
    pub tls_certificate_validity_seconds: u64,
    #[command(flatten)]
    pub webhook: WebhookArgs,
}

/// The admission webhook server (HTTPS) every replica runs.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Serve the validating and defaulting webhooks.
    #[arg(long = "webhooks", default_value_t = true, action = clap::ArgAction::Set)]
    pub enabled: bool,
    /// Address of the HTTPS webhook endpoints.
    #[arg(
        long = "webhook-addr",
        default_value = "0.0.0.0:9443",
        env = "DKV_WEBHOOK_ADDR"
    )]
    pub addr: SocketAddr,
    /// Namespace of the webhook Service and the certificate Secret.
    #[arg(
        id = "webhook_namespace",
        value_name = "NAMESPACE",
        long = "webhook-namespace",
        env = "POD_NAMESPACE",
        default_value = "dkv-system"
    )]
    pub namespace: String,
    /// The Service in front of the operator's webhook port.
    #[arg(long = "webhook-service", default_value = "dkv-operator-webhook")]
    pub service: String,
    /// Secret holding the webhook CA and serving certificate (created if absent).
    #[arg(long = "webhook-secret", default_value = "dkv-operator-webhook-tls")]
    pub secret: String,
    /// Name of the ValidatingWebhookConfiguration and of the
    /// MutatingWebhookConfiguration whose caBundle the operator maintains.
    #[arg(long = "webhook-configuration", default_value = "dkv-operator")]
    pub configuration: String,
    /// Create the webhook configurations with `url: https://<this address>`
    /// instead of updating the caBundle of installed ones (local mode, where
    /// the API server runs on this machine).
    #[arg(long = "webhook-register-url", default_value_t = false, action = clap::ArgAction::Set)]
    pub register_url: bool,
    /// Lifetime of a serving certificate.
    #[arg(long = "webhook-cert-validity-seconds", default_value_t = 90 * 24 * 3600)]
    pub cert_validity_seconds: u64,
    /// Renew the serving certificate when less than this is left.
    #[arg(long = "webhook-cert-renew-before-seconds", default_value_t = 30 * 24 * 3600)]
    pub cert_renew_before_seconds: u64,
}

#[derive(Debug, Args)]
pub struct MemberInitArgs {
    /// Name of the DistributedKV.
    #[arg(long)]
    pub cluster: String,
    /// This member's pod name (= etcd member name).
    #[arg(long, env = "POD_NAME")]
    pub member: String,
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,
    /// This pod's IP: etcd listens on it.
    #[arg(long, env = "POD_IP")]
    pub pod_ip: String,
    /// Headless Service giving members stable DNS names.
    #[arg(long)]
    pub peer_service: String,
    /// Number of members the cluster was created with.
    #[arg(long)]
    pub bootstrap_size: i32,
    #[arg(long)]
    pub initial_cluster_token: String,
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Where to write the etcd configuration file.
    #[arg(long)]
    pub config_file: PathBuf,
    #[arg(long, default_value_t = 2 * 1024 * 1024 * 1024)]
    pub quota_backend_bytes: i64,
    #[arg(long, default_value = "periodic")]
    pub auto_compaction_mode: String,
    #[arg(long, default_value = "1h")]
    pub auto_compaction_retention: String,
    /// The operator's membership record (mounted from a ConfigMap). Without
    /// it, the member set is `--bootstrap-size` members, bootstrapping new.
    #[arg(long)]
    pub members_file: Option<PathBuf>,
    /// Where a refusal is explained for the operator to read (the
    /// container's terminationMessagePath).
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    /// Peers talk TLS (`https://` peer URLs, certificates required).
    #[arg(long)]
    pub peer_tls: bool,
    /// Clients talk TLS and must present a certificate.
    #[arg(long)]
    pub client_tls: bool,
    /// The member certificate (`tls.crt`, `tls.key`, `ca.crt`) as mounted
    /// in the etcd container.
    #[arg(long, default_value = crate::cluster::tls::MEMBER_TLS_DIR)]
    pub tls_dir: PathBuf,
    /// The peer transport's certificate, when it differs (default: --tls-dir).
    #[arg(long)]
    pub peer_tls_dir: Option<PathBuf>,
    /// The client transport's certificate, when it differs (default: --tls-dir).
    #[arg(long)]
    pub client_tls_dir: Option<PathBuf>,
}

/// `dkv backup`. Object store credentials come only from the environment
/// (the Secret named in the spec, through `envFrom`): `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; `GOOGLE_SERVICE_ACCOUNT_KEY`
/// or `GOOGLE_APPLICATION_CREDENTIALS`; `AZURE_STORAGE_ACCOUNT_NAME` with
/// `AZURE_STORAGE_ACCOUNT_KEY` or `AZURE_STORAGE_SAS_TOKEN`. Never flags:
/// those show in the pod spec and the process list.
#[derive(Debug, Args)]
pub struct BackupArgs {
    /// Name of the DistributedKV.
    #[arg(long)]
    pub cluster: String,
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: String,
    /// Where snapshots go: s3://bucket/prefix, gs://bucket/prefix,
    /// az://container/prefix or file:///path. The artifact is
    /// <destination>/<namespace>/<cluster>/<cluster>-<YYYYMMDD-HHMMSS>.db.
    #[arg(long)]
    pub destination: String,
    /// etcd client URLs (comma-separated); default: the cluster's client
    /// Service, http(s)://<cluster>-client.<namespace>.svc:2379.
    #[arg(long, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    #[command(flatten)]
    pub store: ObjectStoreArgs,
    /// Size of each uploaded part; memory use is about
    /// part size x (parts in flight + 1). S3 needs at least 5.
    #[arg(long, default_value_t = 8)]
    pub part_size_mib: usize,
    #[arg(long, default_value_t = 2)]
    pub parts_in_flight: usize,
    /// Deadline of each etcd call (and of each snapshot chunk).
    #[arg(long, default_value_t = 10)]
    pub etcd_timeout_seconds: u64,
    /// How long to wait for the cluster to answer at all before the backup
    /// fails: a member that just started (not yet through its readiness
    /// probe, so the client Service has no endpoint) or is restarting.
    #[arg(long, default_value_t = 30)]
    pub wait_for_cluster_seconds: u64,
    /// The cluster has client TLS: connect over https, presenting the
    /// client certificate in this directory (`tls.crt`, `tls.key`, and the
    /// cluster's CA as `ca.crt`).
    #[arg(long)]
    pub client_tls_dir: Option<PathBuf>,
    /// etcd user to authenticate as, once the cluster has authentication
    /// on (before, the agent connects without).
    #[arg(long, env = "DKV_ETCD_USERNAME")]
    pub etcd_username: Option<String>,
    /// That user's password (from the environment, never an argument).
    #[arg(skip = std::env::var("DKV_ETCD_PASSWORD").ok())]
    pub etcd_password: Option<String>,
    /// Where the artifact (JSON) or the failure is written for the operator
    /// to read (the container's terminationMessagePath).
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Accepted (and ignored) for CronJobs built by operators before 0.2,
    /// which passed it; the agent takes one backup and prunes nothing.
    /// Retention is applied by the operator to the DistributedKVBackup
    /// records (dkv_backup::select_for_pruning).
    #[arg(long, hide = true)]
    pub retention_days: Option<i32>,
}

/// Non-secret object store settings (S3 and S3-compatible servers).
#[derive(Debug, Args)]
pub struct ObjectStoreArgs {
    /// S3-compatible server URL (MinIO, Ceph, ...); AWS when unset.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    pub s3_endpoint: Option<String>,
    /// S3 region; us-east-1 when unset.
    #[arg(long, env = "AWS_REGION")]
    pub s3_region: Option<String>,
    /// Path-style requests (endpoint/bucket/key); false for virtual-hosted
    /// style (bucket.endpoint/key).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub s3_path_style: bool,
    /// Allow a plain-HTTP S3 endpoint (a server inside the cluster).
    #[arg(
        long,
        env = "AWS_ALLOW_HTTP",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub s3_allow_http: bool,
}

/// `dkv restore-fetch`: credentials as for `dkv backup`.
#[derive(Debug, Args)]
pub struct RestoreFetchArgs {
    /// The artifact, e.g. s3://bucket/prefix/shop/orders/orders-20261122-060012.db.
    #[arg(long)]
    pub uri: String,
    /// Expected sha256 (hex), from the DistributedKVBackup; default: the
    /// record dkv wrote beside the artifact (<uri>.json).
    #[arg(long)]
    pub sha256: Option<String>,
    /// Where the verified snapshot is written; nothing is there unless it
    /// verified.
    #[arg(long)]
    pub output: PathBuf,
    /// A directory removed before the fetch: the restore step that follows
    /// writes there and refuses one left by an earlier attempt.
    #[arg(long)]
    pub clear: Option<PathBuf>,
    #[command(flatten)]
    pub store: ObjectStoreArgs,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
}

/// `dkv restore-member`.
#[derive(Debug, Args)]
pub struct RestoreMemberArgs {
    /// A snapshot verified by `dkv restore-fetch`.
    #[arg(long)]
    pub snapshot: PathBuf,
    /// This member's name (= pod name).
    #[arg(long, env = "POD_NAME")]
    pub name: String,
    /// name=peerURL,... of every member of the new cluster.
    #[arg(long)]
    pub initial_cluster: String,
    #[arg(long)]
    pub initial_advertise_peer_urls: String,
    /// The new cluster's token (not the backed-up cluster's).
    #[arg(long)]
    pub initial_cluster_token: String,
    /// Must not exist or be empty; not the volume's mount point itself.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// etcd version of the members: 3.4 restores with etcdctl, 3.5+ with etcdutl.
    #[arg(long)]
    pub etcd_version: String,
    /// Directory holding etcdutl/etcdctl.
    #[arg(long, default_value = "/usr/local/bin")]
    pub etcd_bin_dir: PathBuf,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// clap checks argument definitions only in debug builds, at parse
    /// time: two arguments with the same id (`--namespace` and
    /// `--webhook-namespace` both were `namespace`) made every debug-built
    /// `dkv operator` panic at start.
    #[test]
    fn argument_definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
