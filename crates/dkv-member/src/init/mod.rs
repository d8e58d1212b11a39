//! `dkv member-init`: the init container of every member pod. It writes the
//! member's etcd configuration file, so the etcd container itself needs no
//! shell, no templating and no knowledge of dkv.
//!
//! How the member starts is decided from its volume and the operator's
//! membership record (see [`crate::record`]):
//! - data in the volume: restart from it;
//! - no data, listed, cluster being created: bootstrap with the listed set;
//! - no data, listed as not yet started, cluster existing: join it (the
//!   operator added it as a learner first);
//! - no data but listed as started: its data was lost. Starting it would
//!   make etcd panic (or, worse, bootstrap anew), so it refuses and says so
//!   in the termination log, for the operator to replace the member;
//! - not listed: refuse; the operator has not added it yet.
//!
//! Without a record (clusters created before it existed) the initial set is
//! `--bootstrap-size` members.
//!
//! This module holds the arguments and the run; the start is decided in
//! `decision`, what recoveries ask of the volume in `recoveries`, and the
//! etcd configuration rendered in `config`.

mod config;
pub mod corruption_checks;
mod decision;
mod recoveries;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::json;

use crate::message::InitMessage;
use crate::record::MembershipRecord;
pub use config::render_config;
pub use decision::{Refusal, Start, decide};
pub use recoveries::{RESTORE_EPOCH_PREFIX, Recovery, recovery, restore_dir};
use recoveries::{adopt_restored_data, epoch_file, set_aside_for_replacement};

/// `dkv member-init`.
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
    /// The etcd version the member runs: its corruption checks are turned
    /// on as that version spells them. Without it (a pod template older
    /// than the checks) they stay off.
    #[arg(long)]
    pub etcd_version: Option<String>,
    /// How often the leader compares the members' hashes (a Go duration).
    #[arg(long, default_value = "5m")]
    pub corrupt_check_interval: String,
    /// etcd's heartbeat interval in milliseconds (`spec.etcd.heartbeatInterval`).
    /// This and the settings below are written only when given: without
    /// them etcd keeps its own defaults.
    #[arg(long)]
    pub heartbeat_interval_ms: Option<u64>,
    /// etcd's election timeout in milliseconds (`spec.etcd.electionTimeout`).
    #[arg(long)]
    pub election_timeout_ms: Option<u64>,
    #[arg(long)]
    pub snapshot_count: Option<u64>,
    #[arg(long)]
    pub max_request_bytes: Option<u64>,
    #[arg(long)]
    pub max_txn_ops: Option<u64>,
    #[arg(long)]
    pub log_level: Option<String>,
    /// `NAME=VALUE`, once per `spec.etcd.extraArgs` entry: etcd's flag
    /// `--NAME` with its command-line value.
    #[arg(long = "extra-arg")]
    pub extra_args: Vec<String>,
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
    #[arg(long, default_value = crate::layout::MEMBER_TLS_DIR)]
    pub tls_dir: PathBuf,
    /// The peer transport's certificate, when it differs (default: --tls-dir).
    #[arg(long)]
    pub peer_tls_dir: Option<PathBuf>,
    /// The client transport's certificate, when it differs (default: --tls-dir).
    #[arg(long)]
    pub client_tls_dir: Option<PathBuf>,
}

pub fn run(args: &MemberInitArgs) -> anyhow::Result<()> {
    let record = match &args.members_file {
        Some(path) => Some(read_record(path)?),
        None => None,
    };
    let mut has_data = args.data_dir.join("member").is_dir();
    let marker = epoch_file(&args.data_dir);
    let data_epoch = std::fs::read_to_string(&marker)
        .ok()
        .map(|e| e.trim().to_owned());
    let recovery = recovery(
        &args.member,
        has_data,
        data_epoch.as_deref(),
        record.as_ref(),
    );
    if let Recovery::StaleData { epoch } = &recovery {
        // Kept, not deleted: it is the only copy of whatever it held.
        let aside = args.data_dir.with_file_name(format!(
            "data.before-{epoch}-{}",
            data_epoch.as_deref().unwrap_or("unrecorded")
        ));
        std::fs::rename(&args.data_dir, &aside).with_context(|| {
            format!(
                "moving data that predates recovery {epoch} aside to {}",
                aside.display()
            )
        })?;
        eprintln!(
            "member-init: {}'s data predates the quorum recovery {epoch}; moved to {} and starting without it",
            args.member,
            aside.display()
        );
    }
    let replacement = set_aside_for_replacement(&args.member, &args.data_dir, record.as_ref())?;
    // After setting stale data aside: a restored backup may replace it.
    adopt_restored_data(&args.member, &args.data_dir, record.as_ref())?;
    has_data = args.data_dir.join("member").is_dir();
    let start = match decide(args, has_data, record.as_ref()) {
        Ok(start) => start,
        Err(refusal) => {
            // The operator reads this from the pod status.
            let _ = std::fs::write(&args.termination_log, refusal.to_string());
            bail!(refusal);
        }
    };
    let mut config = render_config(args, &start)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data directory {}", args.data_dir.display()))?;
    restrict_permissions(&args.data_dir)?;
    let forced = matches!(recovery, Recovery::ForceNewCluster { .. });
    if forced {
        config[config::FORCE_NEW_CLUSTER] = json!(true);
    }
    // Every member that starts under an epoch records it with its data.
    if let Some(epoch) = record.as_ref().and_then(|r| r.epoch.as_deref())
        && data_epoch.as_deref() != Some(epoch)
    {
        std::fs::write(&marker, epoch).with_context(|| format!("writing {}", marker.display()))?;
    }
    if let Some(parent) = args.config_file.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // JSON is valid YAML, and needs no quoting rules of its own.
    let text = serde_json::to_string_pretty(&config).context("encoding the etcd configuration")?;
    std::fs::write(&args.config_file, text)
        .with_context(|| format!("writing {}", args.config_file.display()))?;
    if let Some(token) = &replacement {
        // The operator reads this to know the member started afresh for
        // the replacement pinned now.
        let message = InitMessage::StartedForReplacement {
            token: token.clone(),
            member: args.member.clone(),
        }
        .to_string();
        std::fs::write(&args.termination_log, &message)
            .with_context(|| format!("writing {}", args.termination_log.display()))?;
    } else if let Recovery::ForceNewCluster { epoch } = &recovery {
        let message = InitMessage::ForcedNewCluster {
            member: args.member.clone(),
            epoch: epoch.clone(),
        }
        .to_string();
        eprintln!("member-init: {message}");
        // The operator reads this to know the running etcd was forced.
        std::fs::write(&args.termination_log, &message)
            .with_context(|| format!("writing {}", args.termination_log.display()))?;
    } else if let (true, Some(epoch)) = (has_data, record.as_ref().and_then(|r| r.epoch.as_deref()))
    {
        // The operator reads this to know the member runs this epoch's data
        // (for a restore from backup: the restored data).
        let message = InitMessage::StartedUnderEpoch {
            epoch: epoch.to_owned(),
            member: args.member.clone(),
        }
        .to_string();
        std::fs::write(&args.termination_log, &message)
            .with_context(|| format!("writing {}", args.termination_log.display()))?;
    }
    eprintln!(
        "member-init: {} {} (config {})",
        args.member,
        match start {
            Start::Restart { .. } => "restarts from its existing data",
            Start::Bootstrap { .. } => "bootstraps as part of the initial cluster",
            Start::Join { .. } => "joins the existing cluster",
        },
        args.config_file.display()
    );
    Ok(())
}

fn read_record(path: &Path) -> anyhow::Result<MembershipRecord> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the membership record {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("parsing the membership record {}", path.display()))
}

/// etcd refuses (3.5+) or warns about a data directory others can read.
fn restrict_permissions(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting permissions of {}", dir.display()))
}

fn scheme(tls: bool) -> &'static str {
    if tls { "https" } else { "http" }
}

#[cfg(test)]
mod tests;
