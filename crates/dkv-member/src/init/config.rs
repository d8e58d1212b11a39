//! The etcd configuration file of one member: its names, URLs, initial cluster, tuning and TLS.

use std::path::Path;

use anyhow::bail;
use serde_json::{Value, json};

use crate::naming::{self, CLIENT_PORT, METRICS_PORT, PEER_PORT};

use super::decision::Start;
use super::{MemberInitArgs, scheme};

/// The setting `run` adds for a quorum recovery that restarts a member
/// alone from its data.
pub(super) const FORCE_NEW_CLUSTER: &str = "force-new-cluster";

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
    if let Some(text) = &args.etcd_version {
        let Some(version) = crate::etcd_version::EtcdVersion::parse(text) else {
            bail!("--etcd-version {text:?} is not an etcd version (MAJOR.MINOR.PATCH)");
        };
        let interval = go_parse_duration::parse_duration(&args.corrupt_check_interval)
            .ok()
            .and_then(|nanos| u64::try_from(nanos).ok())
            .map(std::time::Duration::from_nanos);
        let Some(interval) = interval else {
            bail!(
                "--corrupt-check-interval {:?} is not a duration",
                args.corrupt_check_interval
            );
        };
        for (key, value) in super::corruption_checks::settings(version, interval) {
            config[key] = value;
        }
    }
    let tuning = [
        ("heartbeat-interval", args.heartbeat_interval_ms),
        ("election-timeout", args.election_timeout_ms),
        ("snapshot-count", args.snapshot_count),
        ("max-request-bytes", args.max_request_bytes),
        ("max-txn-ops", args.max_txn_ops),
    ];
    for (key, value) in tuning {
        if let Some(value) = value {
            config[key] = json!(value);
        }
    }
    if let Some(level) = &args.log_level {
        config["log-level"] = json!(level);
    }
    // Each transport's certificate (server and client usage: members dial
    // their peers with it, and etcd's gRPC gateway its own member); the
    // other side must present a certificate signed by a CA in its ca.crt.
    let security = |dir: &Path| {
        json!({
            "cert-file": dir.join(crate::layout::TLS_CERT),
            "key-file": dir.join(crate::layout::TLS_KEY),
            "trusted-ca-file": dir.join(crate::layout::CA_CERT),
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
    // Last, and never over a setting of dkv's: validation refuses extra
    // arguments that name one (etcd_flags::OWNED); this guards a pod
    // template written by another validator.
    for arg in &args.extra_args {
        let Some((name, value)) = arg.split_once('=') else {
            bail!("--extra-arg {arg:?} is not NAME=VALUE");
        };
        if config.get(name).is_some() || crate::etcd_flags::owner_of(name).is_some() {
            bail!("--extra-arg {name}: dkv sets --{name} itself");
        }
        config[name] = crate::etcd_flags::config_value(value);
    }
    Ok(config)
}
