//! `dkv member-init`: the init container of every member pod. It writes the
//! member's etcd configuration file, so the etcd container itself needs no
//! shell, no templating and no knowledge of dkv.
//!
//! How the member starts is decided from its volume and the operator's
//! membership record (see [`crate::cluster::membership_record`]):
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

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::Args;
use serde_json::{Value, json};

use crate::cluster::membership_record::{
    ClusterState, DATA_LOST, FORCED_NEW_CLUSTER, MembershipRecord, STARTED_UNDER_EPOCH,
};
use crate::cluster::naming::{self, CLIENT_PORT, METRICS_PORT, PEER_PORT};

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

/// How this member starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Restart from the data in the volume.
    Restart { initial_cluster: String },
    /// Bootstrap a new cluster together with the other initial members.
    Bootstrap { initial_cluster: String },
    /// Join the existing cluster, which already lists this member.
    Join { initial_cluster: String },
}

/// Why this member must not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "{DATA_LOST}: member {0} has run before but its data directory is empty; it must be replaced, not restarted"
    )]
    DataLost(String),
    #[error(
        "member {0} is not in the cluster's membership record yet; it starts once the operator has added it"
    )]
    NotListed(String),
    #[error(
        "member {name} has no data and is not one of the {bootstrap_size} initial members; it can only join through a membership change"
    )]
    OutsideBootstrapSet { name: String, bootstrap_size: i32 },
    #[error(
        "member {0} has no data while the cluster is being recreated from a backup; it starts once its restore steps have run"
    )]
    AwaitingRestore(String),
    #[error("the record lists {name} with peer URL {recorded}, but this pod advertises {actual}")]
    PeerUrlMismatch {
        name: String,
        recorded: String,
        actual: String,
    },
}

/// Epochs of recoveries that recreate the cluster from a backup start with
/// this: during one, a member only ever starts from the restored data.
pub const RESTORE_EPOCH_PREFIX: &str = "restore-";

/// What a quorum recovery asks of this member (see
/// [`MembershipRecord::epoch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: no recovery concerns this member's data.
    None,
    /// This member is the survivor and has not yet restarted alone under the
    /// record's epoch: start once with `--force-new-cluster`.
    ForceNewCluster { epoch: String },
    /// The data predates the recovery: move it aside and start without it.
    StaleData { epoch: String },
}

/// The epoch marker lives beside the data directory, on the same volume.
fn epoch_file(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("dkv-epoch")
}

/// Decides what a recovery recorded in `record` means for this member.
pub fn recovery(
    member: &str,
    has_data: bool,
    data_epoch: Option<&str>,
    record: Option<&MembershipRecord>,
) -> Recovery {
    let Some(epoch) = record.and_then(|r| r.epoch.as_deref()) else {
        return Recovery::None;
    };
    if !has_data || data_epoch == Some(epoch) {
        return Recovery::None;
    }
    if record.and_then(|r| r.recover_from.as_deref()) == Some(member) {
        Recovery::ForceNewCluster {
            epoch: epoch.to_owned(),
        }
    } else {
        Recovery::StaleData {
            epoch: epoch.to_owned(),
        }
    }
}

/// Where the restore steps of a cluster created from a backup leave their
/// work, beside the data directory on the same volume (see
/// [`crate::cluster::restore`]).
pub fn restore_dir(data_dir: &Path) -> PathBuf {
    data_dir.with_file_name("dkv-restore")
}

/// Takes the data directory the restore steps staged, if there is one: it
/// becomes the member's data only when the member has none (a member that
/// already started keeps what it has). Once the cluster exists, the
/// restore's leftovers (the snapshot) are removed.
fn adopt_restored_data(
    member: &str,
    data_dir: &Path,
    record: Option<&MembershipRecord>,
) -> anyhow::Result<()> {
    let work = restore_dir(data_dir);
    let staged = work.join("data");
    if staged.join("member").is_dir() {
        if data_dir.join("member").is_dir() {
            std::fs::remove_dir_all(&staged)
                .with_context(|| format!("removing {}", staged.display()))?;
            eprintln!("member-init: {member} already has data; the restored copy is not used");
        } else {
            if data_dir.exists() {
                // No etcd data in it (checked above): set aside, never lost.
                let aside = data_dir.with_file_name("data.before-restore");
                std::fs::rename(data_dir, &aside).with_context(|| {
                    format!("moving {} aside to {}", data_dir.display(), aside.display())
                })?;
            }
            std::fs::rename(&staged, data_dir).with_context(|| {
                format!(
                    "moving the restored data {} to {}",
                    staged.display(),
                    data_dir.display()
                )
            })?;
            eprintln!(
                "member-init: {member} starts from the restored backup ({})",
                data_dir.display()
            );
        }
    }
    if record.is_some_and(|r| r.state == ClusterState::Existing) && work.exists() {
        std::fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    }
    Ok(())
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
        config["force-new-cluster"] = json!(true);
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
    if let Recovery::ForceNewCluster { epoch } = &recovery {
        let message = format!(
            "{FORCED_NEW_CLUSTER}: {} restarts alone from its data (quorum recovery {epoch})",
            args.member
        );
        eprintln!("member-init: {message}");
        // The operator reads this to know the running etcd was forced.
        std::fs::write(&args.termination_log, &message)
            .with_context(|| format!("writing {}", args.termination_log.display()))?;
    } else if let (true, Some(epoch)) = (has_data, record.as_ref().and_then(|r| r.epoch.as_deref()))
    {
        // The operator reads this to know the member runs this epoch's data
        // (for a restore from backup: the restored data).
        let message = format!(
            "{STARTED_UNDER_EPOCH}{epoch} {} starts from data of this epoch",
            args.member
        );
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

fn own_peer_url(args: &MemberInitArgs) -> String {
    format!(
        "{}://{}.{}.{}.svc:{PEER_PORT}",
        scheme(args.peer_tls),
        args.member,
        args.peer_service,
        args.namespace
    )
}

/// The legacy initial set: members `0..bootstrap_size`.
fn bootstrap_set(args: &MemberInitArgs) -> String {
    (0..args.bootstrap_size)
        .map(|i| {
            let member = naming::member(&args.cluster, i);
            format!(
                "{member}={}://{member}.{}.{}.svc:{PEER_PORT}",
                scheme(args.peer_tls),
                args.peer_service,
                args.namespace
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Decides how this member starts (see the module documentation).
pub fn decide(
    args: &MemberInitArgs,
    has_data: bool,
    record: Option<&MembershipRecord>,
) -> Result<Start, Refusal> {
    let name = args.member.clone();
    let Some(record) = record else {
        let ordinal = naming::ordinal_of(&args.cluster, &name).unwrap_or(i32::MAX);
        return if has_data {
            Ok(Start::Restart {
                initial_cluster: bootstrap_set(args),
            })
        } else if ordinal < args.bootstrap_size {
            Ok(Start::Bootstrap {
                initial_cluster: bootstrap_set(args),
            })
        } else {
            Err(Refusal::OutsideBootstrapSet {
                name,
                bootstrap_size: args.bootstrap_size,
            })
        };
    };
    if has_data {
        return Ok(Start::Restart {
            initial_cluster: record.initial_cluster(),
        });
    }
    let Some(entry) = record.member(&name) else {
        return Err(Refusal::NotListed(name));
    };
    let actual = own_peer_url(args);
    if entry.peer_url != actual {
        return Err(Refusal::PeerUrlMismatch {
            name,
            recorded: entry.peer_url.clone(),
            actual,
        });
    }
    if entry.started {
        return Err(Refusal::DataLost(name));
    }
    if record.state == ClusterState::New
        && record
            .epoch
            .as_deref()
            .is_some_and(|e| e.starts_with(RESTORE_EPOCH_PREFIX))
    {
        // Never bootstrap an empty member into a cluster that is being
        // recreated from a backup.
        return Err(Refusal::AwaitingRestore(name));
    }
    let initial_cluster = record.initial_cluster();
    Ok(match record.state {
        ClusterState::New => Start::Bootstrap { initial_cluster },
        ClusterState::Existing => Start::Join { initial_cluster },
    })
}

/// The etcd configuration of one member.
pub fn render_config(args: &MemberInitArgs, start: &Start) -> anyhow::Result<Value> {
    if naming::ordinal_of(&args.cluster, &args.member).is_none() {
        bail!(
            "pod {:?} is not a member of cluster {:?} (expected {}-<ordinal>)",
            args.member,
            args.cluster,
            args.cluster
        );
    }
    if args.pod_ip.trim().is_empty() {
        bail!("POD_IP is empty: the pod's IP is needed to listen on");
    }
    let host = format!(
        "{}.{}.{}.svc",
        args.member, args.peer_service, args.namespace
    );
    let listen = |tls: bool, port: i32| format!("{}://{}:{port}", scheme(tls), args.pod_ip);
    let (initial_cluster, state) = match start {
        Start::Bootstrap { initial_cluster } => (initial_cluster, "new"),
        // With data present etcd ignores the initial-* settings; "existing"
        // documents that this member is not bootstrapping.
        Start::Restart { initial_cluster } | Start::Join { initial_cluster } => {
            (initial_cluster, "existing")
        }
    };
    let mut config = json!({
        "name": args.member,
        "data-dir": args.data_dir,
        "listen-peer-urls": listen(args.peer_tls, PEER_PORT),
        "listen-client-urls": listen(args.client_tls, CLIENT_PORT),
        // Plaintext whatever the client TLS: the kubelet probes /health here.
        "listen-metrics-urls": listen(false, METRICS_PORT),
        "initial-advertise-peer-urls": format!("{}://{host}:{PEER_PORT}", scheme(args.peer_tls)),
        "advertise-client-urls": format!("{}://{host}:{CLIENT_PORT}", scheme(args.client_tls)),
        "initial-cluster": initial_cluster,
        "initial-cluster-state": state,
        "initial-cluster-token": args.initial_cluster_token,
        "quota-backend-bytes": args.quota_backend_bytes,
        "auto-compaction-mode": args.auto_compaction_mode,
        "auto-compaction-retention": args.auto_compaction_retention,
        // Pre-vote keeps a member that was cut off from disrupting the
        // leader when it comes back (default on from 3.5, off in 3.4).
        "pre-vote": true,
        "logger": "zap",
        "log-outputs": ["stderr"],
    });
    // Each transport's certificate (server and client usage: members dial
    // their peers with it, and etcd's gRPC gateway its own member); the
    // other side must present a certificate signed by a CA in its ca.crt.
    let security = |dir: &Path| {
        json!({
            "cert-file": dir.join(crate::cluster::tls::TLS_CERT),
            "key-file": dir.join(crate::cluster::tls::TLS_KEY),
            "trusted-ca-file": dir.join(crate::cluster::tls::CA_CERT),
            "client-cert-auth": true,
        })
    };
    if args.peer_tls {
        config["peer-transport-security"] =
            security(args.peer_tls_dir.as_deref().unwrap_or(&args.tls_dir));
    }
    if args.client_tls {
        config["client-transport-security"] =
            security(args.client_tls_dir.as_deref().unwrap_or(&args.tls_dir));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::membership_record::RecordedMember;
    use std::path::PathBuf;

    fn args(member: &str) -> MemberInitArgs {
        MemberInitArgs {
            cluster: "orders".into(),
            member: member.into(),
            namespace: "shop".into(),
            pod_ip: "10.0.0.7".into(),
            peer_service: "orders-peer".into(),
            bootstrap_size: 3,
            initial_cluster_token: "shop-orders-uid1".into(),
            data_dir: PathBuf::from("/var/lib/etcd/data"),
            config_file: PathBuf::from("/var/run/dkv/etcd.conf.yml"),
            quota_backend_bytes: 1024,
            auto_compaction_mode: "periodic".into(),
            auto_compaction_retention: "1h".into(),
            members_file: None,
            termination_log: PathBuf::from("/dev/null"),
            peer_tls: false,
            client_tls: false,
            tls_dir: PathBuf::from("/etc/dkv/tls/member"),
            peer_tls_dir: None,
            client_tls_dir: None,
        }
    }

    #[test]
    fn the_configuration_uses_no_flag_etcd_3_6_removed_or_deprecated() {
        // etcd 3.6 removed the v2 store and v2v3 flags and deprecated the
        // experimental- ones: members must start on 3.6 with the same file.
        let mut tls = args("orders-1");
        tls.peer_tls = true;
        tls.client_tls = true;
        for member in [args("orders-0"), tls] {
            let start = decide(&member, false, None).unwrap_or_else(|e| panic!("{e}"));
            let config = render_config(&member, &start).unwrap_or_else(|e| panic!("{e}"));
            let keys: Vec<&String> = config
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            assert!(!keys.is_empty());
            for key in keys {
                assert!(
                    !key.starts_with("experimental-")
                        && !key.starts_with("enable-v2")
                        && !key.starts_with("proxy"),
                    "{key}"
                );
            }
        }
    }

    #[test]
    fn tls_transports_get_https_urls_and_require_certificates() {
        let mut tls = args("orders-1");
        tls.peer_tls = true;
        tls.client_tls = true;
        let start = decide(&tls, false, None).unwrap_or_else(|e| panic!("{e}"));
        let config = render_config(&tls, &start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config["listen-peer-urls"], "https://10.0.0.7:2380");
        assert_eq!(config["listen-client-urls"], "https://10.0.0.7:2379");
        assert_eq!(config["listen-metrics-urls"], "http://10.0.0.7:2381");
        assert_eq!(
            config["initial-advertise-peer-urls"],
            "https://orders-1.orders-peer.shop.svc:2380"
        );
        assert!(
            config["initial-cluster"].as_str().is_some_and(
                |c| c.starts_with("orders-0=https://orders-0.orders-peer.shop.svc:2380,")
            ),
            "{config}"
        );
        for side in ["peer-transport-security", "client-transport-security"] {
            assert_eq!(config[side]["client-cert-auth"], true, "{side}");
            assert_eq!(config[side]["cert-file"], "/etc/dkv/tls/member/tls.crt");
            assert_eq!(
                config[side]["trusted-ca-file"],
                "/etc/dkv/tls/member/ca.crt"
            );
        }

        // Two certificates: each transport reads its own directory.
        tls.peer_tls_dir = Some(PathBuf::from("/etc/dkv/tls/peer"));
        tls.client_tls_dir = Some(PathBuf::from("/etc/dkv/tls/server"));
        let split = render_config(&tls, &start).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            split["peer-transport-security"]["key-file"],
            "/etc/dkv/tls/peer/tls.key"
        );
        assert_eq!(
            split["client-transport-security"]["trusted-ca-file"],
            "/etc/dkv/tls/server/ca.crt"
        );

        let plain = render_config(&args("orders-1"), &start).unwrap_or_else(|e| panic!("{e}"));
        assert!(plain.get("peer-transport-security").is_none());
        assert!(plain.get("client-transport-security").is_none());
    }

    fn recorded(ordinal: i32, started: bool) -> RecordedMember {
        RecordedMember {
            name: format!("orders-{ordinal}"),
            peer_url: format!("http://orders-{ordinal}.orders-peer.shop.svc:2380"),
            started,
        }
    }

    fn record(state: ClusterState, members: Vec<RecordedMember>) -> MembershipRecord {
        MembershipRecord {
            state,
            members,
            epoch: None,
            recover_from: None,
        }
    }

    const THREE: &str = "orders-0=http://orders-0.orders-peer.shop.svc:2380,orders-1=http://orders-1.orders-peer.shop.svc:2380,orders-2=http://orders-2.orders-peer.shop.svc:2380";

    #[test]
    fn the_restore_steps_stage_where_member_init_looks() {
        use crate::cluster::build::statefulset::DATA_DIR;
        use crate::cluster::restore::{RESTORE_DIR, STAGING_DIR};
        assert_eq!(restore_dir(Path::new(DATA_DIR)), Path::new(RESTORE_DIR));
        assert_eq!(
            restore_dir(Path::new(DATA_DIR)).join("data"),
            Path::new(STAGING_DIR)
        );
    }

    /// A volume laid out as the restore steps leave it.
    fn volume(staged: bool, data: bool) -> tempfile::TempDir {
        let volume = tempfile::tempdir().unwrap();
        if staged {
            std::fs::create_dir_all(volume.path().join("dkv-restore/data/member/snap")).unwrap();
            std::fs::write(volume.path().join("dkv-restore/data/member/restored"), "r").unwrap();
            std::fs::write(volume.path().join("dkv-restore/snapshot.db"), "s").unwrap();
        }
        if data {
            std::fs::create_dir_all(volume.path().join("data/member/snap")).unwrap();
            std::fs::write(volume.path().join("data/member/own"), "o").unwrap();
        }
        volume
    }

    #[test]
    fn restored_data_becomes_the_data_of_a_member_without_any() {
        let v = volume(true, false);
        let data = v.path().join("data");
        let new = record(ClusterState::New, vec![recorded(0, false)]);
        adopt_restored_data("orders-0", &data, Some(&new)).unwrap();
        assert!(data.join("member/restored").is_file());
        assert!(!v.path().join("dkv-restore/data").exists());
        // Still creating: the snapshot stays for a pod that restarts.
        assert!(v.path().join("dkv-restore/snapshot.db").is_file());
    }

    #[test]
    fn a_member_that_has_data_keeps_it_and_the_restored_copy_goes() {
        let v = volume(true, true);
        let data = v.path().join("data");
        let new = record(ClusterState::New, vec![recorded(0, true)]);
        adopt_restored_data("orders-0", &data, Some(&new)).unwrap();
        assert!(data.join("member/own").is_file());
        assert!(!data.join("member/restored").exists());
        assert!(!v.path().join("dkv-restore/data").exists());
    }

    #[test]
    fn once_the_cluster_exists_the_restore_leftovers_are_removed() {
        let v = volume(false, true);
        std::fs::create_dir_all(v.path().join("dkv-restore")).unwrap();
        std::fs::write(v.path().join("dkv-restore/snapshot.db"), "s").unwrap();
        let data = v.path().join("data");
        let existing = record(ClusterState::Existing, vec![recorded(0, true)]);
        adopt_restored_data("orders-0", &data, Some(&existing)).unwrap();
        assert!(!v.path().join("dkv-restore").exists());
        assert!(data.join("member/own").is_file());
    }

    #[test]
    fn an_unfinished_staging_directory_is_never_adopted() {
        // The restore tool failed halfway: no member/ directory in staging.
        let v = volume(false, false);
        std::fs::create_dir_all(v.path().join("dkv-restore/data/partial")).unwrap();
        let data = v.path().join("data");
        adopt_restored_data("orders-0", &data, None).unwrap();
        assert!(!data.exists());
    }

    #[test]
    fn a_fresh_initial_member_bootstraps_with_the_full_member_list() {
        let start = decide(&args("orders-1"), false, None).unwrap_or_else(|e| panic!("{e}"));
        let config = render_config(&args("orders-1"), &start).unwrap_or_default();
        assert_eq!(config["name"], "orders-1");
        assert_eq!(config["initial-cluster-state"], "new");
        assert_eq!(config["initial-cluster-token"], "shop-orders-uid1");
        assert_eq!(config["initial-cluster"], THREE);
        assert_eq!(config["listen-client-urls"], "http://10.0.0.7:2379");
        assert_eq!(config["listen-peer-urls"], "http://10.0.0.7:2380");
        assert_eq!(config["listen-metrics-urls"], "http://10.0.0.7:2381");
        assert_eq!(
            config["advertise-client-urls"],
            "http://orders-1.orders-peer.shop.svc:2379"
        );
        assert_eq!(
            config["initial-advertise-peer-urls"],
            "http://orders-1.orders-peer.shop.svc:2380"
        );
        assert_eq!(config["quota-backend-bytes"], 1024);
    }

    #[test]
    fn the_record_decides_bootstrap_and_join() {
        let new = record(
            ClusterState::New,
            (0..3).map(|i| recorded(i, false)).collect(),
        );
        assert_eq!(
            decide(&args("orders-2"), false, Some(&new)),
            Ok(Start::Bootstrap {
                initial_cluster: THREE.into()
            })
        );
        let mut members: Vec<_> = (0..3).map(|i| recorded(i, true)).collect();
        members.push(recorded(3, false));
        let existing = record(ClusterState::Existing, members);
        let Ok(start) = decide(&args("orders-3"), false, Some(&existing)) else {
            panic!("a listed learner joins");
        };
        let config = render_config(&args("orders-3"), &start).unwrap_or_default();
        assert_eq!(config["initial-cluster-state"], "existing");
        assert!(
            config["initial-cluster"]
                .as_str()
                .unwrap_or_default()
                .ends_with("orders-3=http://orders-3.orders-peer.shop.svc:2380")
        );
    }

    #[test]
    fn a_member_that_ran_before_but_has_no_data_refuses_to_start() {
        let existing = record(
            ClusterState::Existing,
            (0..3).map(|i| recorded(i, true)).collect(),
        );
        let refusal = decide(&args("orders-1"), false, Some(&existing));
        assert_eq!(refusal, Err(Refusal::DataLost("orders-1".into())));
        assert!(
            refusal
                .err()
                .map(|r| r.to_string())
                .unwrap_or_default()
                .starts_with(DATA_LOST)
        );
        // With its data it restarts.
        assert!(matches!(
            decide(&args("orders-1"), true, Some(&existing)),
            Ok(Start::Restart { .. })
        ));
    }

    #[test]
    fn a_recovery_forces_the_survivor_once_and_sets_stale_data_aside() {
        let mut r = record(ClusterState::Existing, vec![recorded(0, true)]);
        assert_eq!(recovery("orders-0", true, None, Some(&r)), Recovery::None);
        r.epoch = Some("e1".into());
        r.recover_from = Some("orders-0".into());
        let force = Recovery::ForceNewCluster { epoch: "e1".into() };
        let stale = Recovery::StaleData { epoch: "e1".into() };
        assert_eq!(recovery("orders-0", true, None, Some(&r)), force);
        assert_eq!(recovery("orders-0", true, Some("e0"), Some(&r)), force);
        assert_eq!(
            recovery("orders-0", true, Some("e1"), Some(&r)),
            Recovery::None,
            "forced once: a restart under the same epoch starts normally"
        );
        assert_eq!(recovery("orders-1", true, None, Some(&r)), stale);
        assert_eq!(
            recovery("orders-1", true, Some("e1"), Some(&r)),
            Recovery::None
        );
        assert_eq!(
            recovery("orders-1", false, None, Some(&r)),
            Recovery::None,
            "nothing to set aside"
        );
        r.recover_from = None;
        assert_eq!(recovery("orders-0", true, Some("e0"), Some(&r)), stale);
    }

    #[test]
    fn a_member_not_yet_added_waits() {
        let existing = record(
            ClusterState::Existing,
            (0..3).map(|i| recorded(i, true)).collect(),
        );
        assert_eq!(
            decide(&args("orders-4"), false, Some(&existing)),
            Err(Refusal::NotListed("orders-4".into()))
        );
    }

    #[test]
    fn without_a_record_members_outside_the_bootstrap_set_never_bootstrap() {
        assert!(matches!(
            decide(&args("orders-3"), false, None),
            Err(Refusal::OutsideBootstrapSet { .. })
        ));
        assert!(matches!(
            decide(&args("orders-3"), true, None),
            Ok(Start::Restart { .. })
        ));
    }

    #[test]
    fn a_peer_url_mismatch_is_refused() {
        let mut member = recorded(0, false);
        member.peer_url = "http://elsewhere:2380".into();
        let bad = record(ClusterState::New, vec![member]);
        assert!(matches!(
            decide(&args("orders-0"), false, Some(&bad)),
            Err(Refusal::PeerUrlMismatch { .. })
        ));
    }

    #[test]
    fn foreign_pod_names_are_rejected() {
        let start = Start::Bootstrap {
            initial_cluster: String::new(),
        };
        assert!(render_config(&args("billing-0"), &start).is_err());
    }
}
