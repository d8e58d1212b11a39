//! The hardening dkv puts on its pods holds when enforced: kube-local's
//! kubelet (as every test's, see `support::kubelet_config`) runs each
//! container as its security context says. A cluster with TLS and
//! authentication forms, is backed up and scales with every etcd process
//! running as user and group 65532, without capabilities or a way to gain
//! privileges, on a read-only root filesystem, its data owned by that user.

use dkv_test_support as support;

use std::os::unix::fs::MetadataExt;

use serde_json::json;

const NS: &str = "hardened";
const CLUSTER: &str = "vault";

/// A line of `/proc/<pid>/status`, e.g. `Uid`.
fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The mount options of the process's root mount.
fn root_mount_options(pid: i32) -> String {
    let info = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    info.lines()
        .find(|l| l.split_whitespace().nth(4) == Some("/"))
        .and_then(|l| l.split_whitespace().nth(5).map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_runs_as_a_non_root_user_without_privileges_on_a_read_only_root() {
    // /proc/self belongs to this process's effective user.
    if std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(1)
        != 0
    {
        eprintln!("skipped: kube-local enforces security contexts only when it runs as root");
        return;
    }
    let setup = support::backups::with_object_store(NS).await;
    // The agent (non-root too) reads the client certificate and the
    // password it is given, and streams the snapshot out; members on
    // persistent volumes (given to the fsGroup).
    support::backups::exercise_secured_cluster(
        &setup,
        NS,
        CLUSTER,
        "as-nobody",
        json!({"storage": {"storageClassName": "standard", "size": "1Gi"}}),
    )
    .await;

    let kubelet = setup.env.kubelet().unwrap();
    for ordinal in 0..4 {
        let pod = format!("{CLUSTER}-{ordinal}");
        let pid = kubelet.container_pid(NS, &pod, "etcd").unwrap();
        let uid = status_field(pid, "Uid");
        let gid = status_field(pid, "Gid");
        eprintln!(
            "{pod}: Uid {uid}, Gid {gid}, Groups {}, NoNewPrivs {}, CapEff {}, root {}",
            status_field(pid, "Groups"),
            status_field(pid, "NoNewPrivs"),
            status_field(pid, "CapEff"),
            root_mount_options(pid)
        );
        assert_eq!(uid, "65532 65532 65532 65532", "{pod}");
        assert_eq!(gid, "65532 65532 65532 65532", "{pod}");
        assert!(status_field(pid, "Groups").split(' ').any(|g| g == "65532"));
        assert_eq!(status_field(pid, "NoNewPrivs"), "1");
        assert_eq!(status_field(pid, "CapEff"), "0000000000000000");
        assert_eq!(status_field(pid, "CapBnd"), "0000000000000000");
        assert!(
            root_mount_options(pid).split(',').any(|o| o == "ro"),
            "{pod}: root mounted {}",
            root_mount_options(pid)
        );
        // What etcd wrote is its own (the volume was given to its group):
        // its open WAL file, looked at through the process's descriptor.
        let wal = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| {
                let fd = e.ok()?.path();
                let target = std::fs::read_link(&fd).ok()?;
                target
                    .extension()
                    .is_some_and(|e| e == "wal")
                    .then_some((fd, target))
            })
            .next();
        let (fd, target) = wal.unwrap_or_else(|| panic!("{pod} has no WAL file open"));
        let meta = std::fs::metadata(&fd).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid()),
            (65532, 65532),
            "{pod}: {}",
            target.display()
        );
    }
    setup.operator.stop().await;
}
