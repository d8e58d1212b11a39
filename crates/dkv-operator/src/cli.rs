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
    /// A local control plane with dkv on this machine (no Kubernetes needed).
    #[command(subcommand)]
    Local(LocalCommand),
}

#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Start kube-local with dkv's CRDs and the operator; writes DIR/kubeconfig.
    Up(crate::local::UpArgs),
    /// Stop a detached `dkv local up`.
    Down(crate::local::DownArgs),
}

#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Address of the /metrics, /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8080", env = "DKV_METRICS_ADDR")]
    pub metrics_addr: SocketAddr,
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
}

#[derive(Debug, Args)]
pub struct BackupArgs {
    #[arg(long)]
    pub cluster: String,
    #[arg(long)]
    pub destination: String,
    #[arg(long)]
    pub retention_days: Option<i32>,
}
