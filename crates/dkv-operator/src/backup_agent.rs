//! `dkv backup`: the agent a backup Job runs. It takes one snapshot of the
//! cluster through `dkv_backup::take_backup` and reports the artifact
//! (JSON, camelCase) both on stdout and as the container's termination
//! message, where the operator reads it into the DistributedKVBackup
//! status. A failure exits non-zero with the reason in the termination
//! message; neither ever contains a credential.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use dkv_backup::{BackupRequest, Encoding, Location, UploadOptions};
use dkv_etcd::{ClientTls, EtcdAdmin, GrpcAdmin, UserCredentials};
use dkv_member::report::{log_peak_memory, report};
use dkv_member::store_args::ObjectStoreArgs;

use crate::parts::naming::{CLIENT_PORT, client_service};
use crate::parts::tls;
use dkv_member::logging::LogFormat;

/// `dkv backup`. Object store credentials come only from the environment
/// (the Secret named in the spec, through `envFrom`): `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`; `GOOGLE_SERVICE_ACCOUNT_KEY`
/// or `GOOGLE_APPLICATION_CREDENTIALS`; `AZURE_STORAGE_ACCOUNT_NAME` with
/// `AZURE_STORAGE_ACCOUNT_KEY` or `AZURE_STORAGE_SAS_TOKEN`. Never flags:
/// those show in the pod spec and the process list. The Azure and GCS
/// endpoints (`AZURE_STORAGE_ENDPOINT`, `STORAGE_EMULATOR_HOST`) come from
/// the environment too, beside them in the same Secret.
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
    /// How the snapshot is stored: `zstd` (compressed) or `none` (as etcd
    /// produced it).
    #[arg(long, value_enum, default_value = "zstd")]
    pub compression: CompressionArg,
    /// Encrypt the snapshot (AES-256-GCM) with the key in this file: 32
    /// bytes, raw, hexadecimal or base64 (a Secret entry mounted as a file).
    #[arg(long)]
    pub encryption_key_file: Option<PathBuf>,
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

pub async fn run(args: &BackupArgs) -> anyhow::Result<()> {
    dkv_member::logging::init(args.log_format);
    if let Some(days) = args.retention_days {
        tracing::info!(
            retention_days = days,
            "retention is applied by the operator to the backup records, not by this agent"
        );
    }
    match backup(args).await {
        Ok(json) => {
            println!("{json}");
            report(&args.termination_log, &json);
            log_peak_memory();
            Ok(())
        }
        Err(err) => {
            let message = format!(
                "backup of {}/{} to {} failed: {err:#}",
                args.namespace, args.cluster, args.destination
            );
            report(&args.termination_log, &message);
            Err(err.context(format!(
                "backup of {}/{} failed",
                args.namespace, args.cluster
            )))
        }
    }
}

/// `--compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompressionArg {
    Zstd,
    None,
}

async fn backup(args: &BackupArgs) -> anyhow::Result<String> {
    let destination = Location::parse(&args.destination)?;
    let key = args
        .encryption_key_file
        .as_deref()
        .map(dkv_backup::encryption::read_key_file)
        .transpose()?;
    let tls = args
        .client_tls_dir
        .as_deref()
        .map(|dir| client_tls(dir, &args.cluster, &args.namespace))
        .transpose()?;
    let endpoints = if args.endpoints.is_empty() {
        vec![format!(
            "{}://{}.{}.svc:{CLIENT_PORT}",
            if tls.is_some() { "https" } else { "http" },
            client_service(&args.cluster),
            args.namespace
        )]
    } else {
        args.endpoints.clone()
    };
    let admin = GrpcAdmin::new(
        endpoints.clone(),
        Duration::from_secs(args.etcd_timeout_seconds.max(1)),
    );
    let admin = match tls {
        Some(tls) => admin.with_tls(tls),
        None => admin,
    };
    let admin = authenticated(admin, args).await;
    wait_for_cluster(&admin, Duration::from_secs(args.wait_for_cluster_seconds)).await;
    let request = BackupRequest {
        namespace: args.namespace.clone(),
        cluster: args.cluster.clone(),
        destination,
        seed_endpoints: endpoints,
        taken_at: jiff::Timestamp::now(),
        upload: UploadOptions {
            part_size: args.part_size_mib.saturating_mul(1024 * 1024),
            parts_in_flight: args.parts_in_flight,
        },
        encoding: Encoding {
            compress: args.compression == CompressionArg::Zstd,
            key,
        },
    };
    // Job deletion or its deadline sends SIGTERM: abort the upload rather
    // than leave it half done.
    let artifact = dkv_backup::take_backup_until(
        &admin,
        &args.store.store_config(),
        &request,
        crate::operator::wait_for_signal(),
    )
    .await?;
    serde_json::to_string(&artifact).context("encoding the artifact")
}

/// `admin` authenticating with the agent's credentials, if it has any and
/// the cluster has authentication on: a cluster whose authentication is not
/// on yet refuses a client that authenticates.
async fn authenticated(admin: GrpcAdmin, args: &BackupArgs) -> GrpcAdmin {
    let (Some(name), Some(password)) = (&args.etcd_username, &args.etcd_password) else {
        return admin;
    };
    let user = UserCredentials {
        name: name.clone(),
        password: password.clone(),
    };
    let with_user = admin.clone_unconnected().with_user(user);
    if auth_not_enabled(&with_user).await {
        tracing::info!("the cluster has no authentication yet; connecting without credentials");
        admin
    } else {
        with_user
    }
}

/// Whether `with_user` (a connection with credentials) is refused because
/// the cluster has no authentication on yet.
async fn auth_not_enabled(with_user: &dyn EtcdAdmin) -> bool {
    matches!(with_user.member_list().await,
        Err(err) if err.to_string().contains("authentication is not enabled"))
}

/// The client certificate mounted in `dir`, verifying members by the name
/// of the client Service (which their certificate lists).
fn client_tls(dir: &Path, cluster: &str, namespace: &str) -> anyhow::Result<ClientTls> {
    let read = |file: &str| {
        std::fs::read_to_string(dir.join(file))
            .with_context(|| format!("reading {}", dir.join(file).display()))
    };
    Ok(ClientTls {
        ca_pem: read(tls::CA_CERT)?,
        cert_pem: read(tls::TLS_CERT)?,
        key_pem: read(tls::TLS_KEY)?,
        server_name: tls::server_name(cluster, namespace),
    })
}

/// Waits up to `patience` for the cluster to list its members. A schedule
/// can fire while no member is ready yet (just created, restarting), and
/// the client Service then refuses connections; without this the attempt
/// fails at once and the Job retries only after its backoff. Whatever the
/// outcome, the backup then runs and reports its own error.
async fn wait_for_cluster(admin: &dyn EtcdAdmin, patience: Duration) {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        match admin.member_list().await {
            Ok(_) => return,
            Err(err) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %err, "etcd does not answer yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_etcd::FakeEtcd;

    #[tokio::test(start_paused = true)]
    async fn the_agent_waits_for_a_quorum_then_no_longer() {
        let etcd = FakeEtcd::with_members(&["a", "b", "c"], "3.5.16");
        etcd.set_healthy("b", false);
        etcd.set_healthy("c", false);
        let started = tokio::time::Instant::now();
        wait_for_cluster(&etcd, Duration::from_secs(5)).await;
        assert!(
            started.elapsed() >= Duration::from_secs(5),
            "it gave up early"
        );
        let asked = etcd.calls().len();
        assert!(
            (5..=7).contains(&asked),
            "asked {asked} times in 5 s, once a second"
        );

        etcd.set_healthy("b", true);
        let started = tokio::time::Instant::now();
        wait_for_cluster(&etcd, Duration::from_secs(5)).await;
        assert_eq!(
            started.elapsed(),
            Duration::ZERO,
            "a quorum answers at once"
        );
    }

    #[tokio::test]
    async fn credentials_are_kept_unless_the_cluster_says_auth_is_off() {
        let etcd = FakeEtcd::with_members(&["a"], "3.5.16");
        assert!(!auth_not_enabled(&etcd).await);
    }
}
