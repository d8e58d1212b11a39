//! `dkv member-init`: the init container of every member pod. It writes the
//! member's etcd configuration file, so the etcd container itself needs no
//! shell, no templating and no knowledge of dkv.
//!
//! What it decides today: a member with data in its volume restarts from
//! that data; a member without data that belongs to the initial member set
//! bootstraps with `initial-cluster-state: new`. A member outside the initial
//! set without data would have to join through a membership change, which
//! this version does not perform, so it fails with a clear message instead of
//! bootstrapping a second cluster.

use std::path::Path;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::cli::MemberInitArgs;
use crate::cluster::naming::{self, CLIENT_PORT, METRICS_PORT, PEER_PORT};

pub fn run(args: &MemberInitArgs) -> anyhow::Result<()> {
    let has_data = args.data_dir.join("member").is_dir();
    let config = render_config(args, has_data)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating data directory {}", args.data_dir.display()))?;
    restrict_permissions(&args.data_dir)?;
    if let Some(parent) = args.config_file.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    // JSON is valid YAML, and needs no quoting rules of its own.
    let text = serde_json::to_string_pretty(&config).context("encoding the etcd configuration")?;
    std::fs::write(&args.config_file, text)
        .with_context(|| format!("writing {}", args.config_file.display()))?;
    eprintln!(
        "member-init: {} {} (config {})",
        args.member,
        if has_data {
            "restarts from its existing data"
        } else {
            "bootstraps as part of the initial cluster"
        },
        args.config_file.display()
    );
    Ok(())
}

/// etcd refuses (3.5+) or warns about a data directory others can read.
fn restrict_permissions(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("setting permissions of {}", dir.display()))
}

/// The etcd configuration of one member.
pub fn render_config(args: &MemberInitArgs, has_data: bool) -> anyhow::Result<Value> {
    let Some(ordinal) = naming::ordinal_of(&args.cluster, &args.member) else {
        bail!(
            "pod {:?} is not a member of cluster {:?} (expected {}-<ordinal>)",
            args.member,
            args.cluster,
            args.cluster
        );
    };
    if !has_data && ordinal >= args.bootstrap_size {
        bail!(
            "member {} has no data and is not one of the {} initial members; it can only join through a membership change, which this dkv version does not perform",
            args.member,
            args.bootstrap_size
        );
    }
    if args.pod_ip.trim().is_empty() {
        bail!("POD_IP is empty: the pod's IP is needed to listen on");
    }
    let host = format!(
        "{}.{}.{}.svc",
        args.member, args.peer_service, args.namespace
    );
    let listen = |port: i32| format!("http://{}:{port}", args.pod_ip);
    let initial_cluster = (0..args.bootstrap_size)
        .map(|i| {
            let member = naming::member(&args.cluster, i);
            format!(
                "{member}=http://{member}.{}.{}.svc:{PEER_PORT}",
                args.peer_service, args.namespace
            )
        })
        .collect::<Vec<_>>()
        .join(",");
    Ok(json!({
        "name": args.member,
        "data-dir": args.data_dir,
        "listen-peer-urls": listen(PEER_PORT),
        "listen-client-urls": listen(CLIENT_PORT),
        "listen-metrics-urls": listen(METRICS_PORT),
        "initial-advertise-peer-urls": format!("http://{host}:{PEER_PORT}"),
        "advertise-client-urls": format!("http://{host}:{CLIENT_PORT}"),
        "initial-cluster": initial_cluster,
        // With data present etcd ignores the initial-* settings; "existing"
        // documents that this member is not bootstrapping.
        "initial-cluster-state": if has_data { "existing" } else { "new" },
        "initial-cluster-token": args.initial_cluster_token,
        "quota-backend-bytes": args.quota_backend_bytes,
        "auto-compaction-mode": args.auto_compaction_mode,
        "auto-compaction-retention": args.auto_compaction_retention,
        // Pre-vote keeps a member that was cut off from disrupting the
        // leader when it comes back (default on from 3.5, off in 3.4).
        "pre-vote": true,
        "logger": "zap",
        "log-outputs": ["stderr"],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
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
        }
    }

    #[test]
    fn a_fresh_initial_member_bootstraps_with_the_full_member_list() {
        let config = render_config(&args("orders-1"), false).unwrap_or_default();
        assert_eq!(config["name"], "orders-1");
        assert_eq!(config["initial-cluster-state"], "new");
        assert_eq!(config["initial-cluster-token"], "shop-orders-uid1");
        assert_eq!(
            config["initial-cluster"],
            "orders-0=http://orders-0.orders-peer.shop.svc:2380,orders-1=http://orders-1.orders-peer.shop.svc:2380,orders-2=http://orders-2.orders-peer.shop.svc:2380"
        );
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
    fn a_member_with_data_restarts_as_existing() {
        let config = render_config(&args("orders-2"), true).unwrap_or_default();
        assert_eq!(config["initial-cluster-state"], "existing");
    }

    #[test]
    fn a_member_outside_the_initial_set_never_bootstraps() {
        let err = render_config(&args("orders-3"), false)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not one of the 3 initial members"), "{err}");
        // With data it is an old member restarting: fine.
        assert!(render_config(&args("orders-3"), true).is_ok());
    }

    #[test]
    fn foreign_pod_names_are_rejected() {
        assert!(render_config(&args("billing-0"), false).is_err());
    }
}
