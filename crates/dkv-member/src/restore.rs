//! `dkv restore-fetch` and `dkv restore-member`: the init steps that
//! bootstrap a member of a new cluster from a backup. The first downloads
//! the artifact and verifies its sha256 (only a verified snapshot is ever
//! written to the output path); the second runs the etcd version's restore
//! tool with the member's name and the new cluster's `--initial-cluster`
//! and token. Failures are reported in the termination message.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use dkv_backup::{MemberRestore, RestoreTool};

use crate::logging::LogFormat;
use crate::report::{log_peak_memory, report};
use crate::store_args::ObjectStoreArgs;

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
    /// A directory of keys (a Secret mounted as a volume) to decrypt an
    /// encrypted artifact with; the one whose id the artifact records is
    /// used.
    #[arg(long)]
    pub decryption_keys_dir: Option<PathBuf>,
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
    /// Start the restored member this many revisions above the snapshot's,
    /// and mark what lies below compacted (etcdutl 3.5.10 and later).
    #[arg(long)]
    pub bump_revision: Option<i64>,
    /// The snapshot came from `dkv restore-fetch`, which checked the
    /// sha256 etcd appends to it: the restore tool does not read it all
    /// again to check it.
    #[arg(long)]
    pub snapshot_checked: bool,
    #[arg(long, default_value = "/dev/termination-log")]
    pub termination_log: PathBuf,
    #[arg(long, value_enum, default_value = "text", env = "DKV_LOG_FORMAT")]
    pub log_format: LogFormat,
}

pub async fn fetch(args: &RestoreFetchArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_format);
    if let Some(dir) = &args.clear {
        match tokio::fs::remove_dir_all(dir).await {
            Ok(()) => println!("removed {} (left by an earlier attempt)", dir.display()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => {
                let message = format!("restore fetch: removing {}: {err}", dir.display());
                report(&args.termination_log, &message);
                anyhow::bail!(message);
            }
        }
    }
    let config = args.store.store_config();
    let keys = match args.decryption_keys_dir.as_deref() {
        None => Ok(dkv_backup::Keyring::default()),
        Some(dir) => dkv_backup::encryption::read_key_dir(dir),
    };
    let keys = match keys {
        Ok(keys) => keys,
        Err(err) => {
            let message = format!("restore fetch of {}: {err}", args.uri);
            report(&args.termination_log, &message);
            anyhow::bail!(message);
        }
    };
    match dkv_backup::fetch_artifact(
        &config,
        &args.uri,
        args.sha256.as_deref(),
        &keys,
        &args.output,
    )
    .await
    {
        Ok(fetched) => {
            let message = format!(
                "fetched {} to {} ({} bytes stored, sha256 {}; snapshot {} bytes{}{})",
                args.uri,
                fetched.path.display(),
                fetched.size_bytes,
                fetched.sha256,
                fetched.snapshot_bytes,
                if fetched.compressed {
                    ", decompressed"
                } else {
                    ""
                },
                fetched
                    .encrypted_with
                    .as_deref()
                    .map(|id| format!(", decrypted with key {id}"))
                    .unwrap_or_default()
            );
            println!("{message}");
            report(&args.termination_log, &message);
            log_peak_memory();
            Ok(())
        }
        Err(err) => {
            let message = format!("restore fetch of {} failed: {err}", args.uri);
            report(&args.termination_log, &message);
            Err(err).with_context(|| format!("restore fetch of {}", args.uri))
        }
    }
}

pub async fn restore_member(args: &RestoreMemberArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_format);
    let result = async {
        let tool = RestoreTool::for_version(&args.etcd_version, &args.etcd_bin_dir)?;
        dkv_backup::restore_member(
            &tool,
            &MemberRestore {
                snapshot: args.snapshot.clone(),
                name: args.name.clone(),
                initial_cluster: args.initial_cluster.clone(),
                initial_advertise_peer_urls: args.initial_advertise_peer_urls.clone(),
                initial_cluster_token: args.initial_cluster_token.clone(),
                data_dir: args.data_dir.clone(),
                revision_bump: args.bump_revision,
                snapshot_checked: args.snapshot_checked,
            },
        )
        .await
    }
    .await;
    match result {
        Ok(()) => {
            let message = format!(
                "member {} restored into {}",
                args.name,
                args.data_dir.display()
            );
            println!("{message}");
            report(&args.termination_log, &message);
            log_peak_memory();
            Ok(())
        }
        Err(err) => {
            let message = format!("restore of member {} failed: {err}", args.name);
            report(&args.termination_log, &message);
            Err(err).with_context(|| format!("restore of member {}", args.name))
        }
    }
}
