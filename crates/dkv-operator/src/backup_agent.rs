//! `dkv backup`: the agent a backup Job runs. It takes one snapshot of the
//! cluster through `dkv_backup::take_backup` and reports the artifact
//! (JSON, camelCase) both on stdout and as the container's termination
//! message, where the operator reads it into the DistributedKVBackup
//! status. A failure exits non-zero with the reason in the termination
//! message; neither ever contains a credential.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use dkv_backup::{BackupRequest, Credentials, Location, S3Options, StoreConfig, UploadOptions};
use dkv_etcd::{ClientTls, EtcdAdmin, GrpcAdmin, UserCredentials};

use crate::cli::{BackupArgs, ObjectStoreArgs};
use crate::cluster::naming::{CLIENT_PORT, client_service};
use crate::cluster::tls;

/// Kubernetes keeps at most this much of a termination message.
const TERMINATION_MESSAGE_LIMIT: usize = 4096;

pub async fn run(args: &BackupArgs) -> anyhow::Result<()> {
    crate::telemetry::init(args.log_format);
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

async fn backup(args: &BackupArgs) -> anyhow::Result<String> {
    let destination = Location::parse(&args.destination)?;
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
    match with_user.member_list().await {
        Err(err) if err.to_string().contains("authentication is not enabled") => {
            tracing::info!("the cluster has no authentication yet; connecting without credentials");
            admin
        }
        _ => with_user,
    }
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
async fn wait_for_cluster(admin: &GrpcAdmin, patience: Duration) {
    let deadline = std::time::Instant::now() + patience;
    loop {
        match admin.member_list().await {
            Ok(_) => return,
            Err(err) if std::time::Instant::now() < deadline => {
                tracing::info!(error = %err, "etcd does not answer yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(_) => return,
        }
    }
}

impl ObjectStoreArgs {
    /// The settings from the command line, the credentials from the
    /// environment (see [`dkv_backup::credentials`]).
    pub fn store_config(&self) -> StoreConfig {
        StoreConfig {
            credentials: Credentials::from_env(),
            s3: S3Options {
                endpoint: self.s3_endpoint.clone().filter(|e| !e.is_empty()),
                region: self.s3_region.clone().filter(|r| !r.is_empty()),
                path_style: self.s3_path_style,
                allow_http: self.s3_allow_http,
            },
        }
    }
}

/// Writes the termination message; a failure to write it is logged, not
/// fatal (the exit status still tells success from failure).
pub(crate) fn report(path: &Path, message: &str) {
    let mut end = message.len().min(TERMINATION_MESSAGE_LIMIT);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    if let Err(err) = std::fs::write(path, &message[..end]) {
        tracing::warn!(path = %path.display(), error = %err, "could not write the termination message");
    }
}

/// Logs the process's peak resident memory (Linux `VmHWM`), the figure the
/// backup memory budget is checked against.
pub(crate) fn log_peak_memory() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(kib) = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
    {
        tracing::info!(peak_rss_kib = kib, "peak memory");
    }
}
