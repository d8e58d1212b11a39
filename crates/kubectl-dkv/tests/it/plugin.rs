//! Every plugin command through the real `kubectl` (which finds
//! `kubectl-dkv` on the PATH), against kube-local with the operator, real
//! etcd members and a real S3 server (moto), a writer counting acknowledged
//! writes throughout: status, backups, a restore into a new cluster, pause,
//! resume, a rolling restart, and each kind of bad input refused with one
//! line, a non-zero exit and nothing changed.

use std::process::Command;
use std::time::Duration;

use dkv_api::DistributedKVBackup;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

use dkv_test_support as support;
use support::backups::with_object_store;

use crate::bundle::{self, read_bundle};
use crate::kubectl::{Kubectl, wait_converged};
use support::etcd_cluster::{
    Writer, assert_no_write_lost, condition_reason, connect, member_endpoints, put_retrying,
    wait_for,
};

const NS: &str = "plugin";

async fn pod_uids(client: &kube::Client, cluster: &str) -> Vec<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut uids: Vec<String> = pods
        .list(&ListParams::default().labels(&format!("dkv.io/cluster={cluster}")))
        .await
        .unwrap()
        .items
        .into_iter()
        // Member pods only: the backup Job's pod has the cluster's label too.
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "StatefulSet")
        })
        .filter_map(|p| p.metadata.uid)
        .collect();
    uids.sort();
    uids
}

async fn names<K>(api: &Api<K>) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_plugin_command_through_kubectl() {
    let store = with_object_store(NS).await;
    let client = store.client.clone();
    let kubectl = Kubectl::new(store.env.kubeconfig_path(), NS);
    let image = "registry.k8s.io/etcd:3.5.16-0";
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        image,
        json!({"backup": store.backup_spec("plugin"),
               "maintenance": {"defrag": {"schedule": "0 0 1 1 *"}}}),
    )
    .await;
    wait_converged(&dkvs, "orders").await;
    let backups: Api<DistributedKVBackup> = Api::namespaced(client.clone(), NS);
    let writer = Writer::start(client.clone(), NS, "orders");

    // status: people's page and the same facts as JSON and YAML.
    let page = kubectl.ok(&["status", "orders"]);
    for expected in [
        "Cluster:     plugin/orders",
        "3/3 ready, etcd 3.5.16",
        "Available",
        "orders-0",
        "orders-2",
        "leader",
        "Scheduled:   0 0 1 1 *",
        "Defrag:      0 0 1 1 * (members with 25%+ free), last run never",
    ] {
        assert!(
            page.contains(expected),
            "status lacks {expected:?}:\n{page}"
        );
    }
    let status = kubectl.json(&["status", "orders"]);
    assert_eq!(status["readyReplicas"], 3, "{status}");
    assert_eq!(status["defrag"]["schedule"], "0 0 1 1 *", "{status}");
    assert_eq!(status["defrag"]["thresholdPercent"], 25, "{status}");
    let members = status["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{status}");
    let leaders = members.iter().filter(|m| m["role"] == "leader").count();
    assert_eq!(leaders, 1, "exactly one leader: {status}");
    assert!(
        members
            .iter()
            .all(|m| m["healthy"] == true && m["pod"]["ready"] == true),
        "{status}"
    );
    assert_eq!(
        status["leader"],
        members.iter().find(|m| m["role"] == "leader").unwrap()["name"]
    );
    let yaml = kubectl.ok(&["status", "orders", "-o", "yaml"]);
    assert!(yaml.contains("readyReplicas: 3"), "{yaml}");

    // backup --wait: a completed backup holding a marker written before it.
    let mut etcd = connect(member_endpoints(&client, NS, "orders").await)
        .await
        .unwrap();
    put_retrying(&mut etcd, "/plugin/marker", "before-the-backup").await;
    let taken = kubectl.ok(&["backup", "orders", "--wait"]);
    assert!(taken.contains("completed"), "{taken}");
    let listed = kubectl.json(&["backups", "orders"]);
    let listed = listed["backups"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["status"]["phase"], "Completed");
    let backup = listed[0]["metadata"]["name"].as_str().unwrap().to_owned();
    let table = kubectl.ok(&["backups", "orders"]);
    assert!(
        table.contains(&backup) && table.contains("Completed"),
        "{table}"
    );
    put_retrying(&mut etcd, "/plugin/marker", "after-the-backup").await;

    // restore --from: a new cluster with the backup's data.
    let restored = kubectl.ok(&[
        "restore",
        "orders",
        "--from",
        &backup,
        "--as",
        "orders-copy",
    ]);
    assert!(restored.contains("orders-copy created"), "{restored}");
    wait_converged(&dkvs, "orders-copy").await;
    let mut copy = connect(member_endpoints(&client, NS, "orders-copy").await)
        .await
        .unwrap();
    let marker = copy.get("/plugin/marker", None).await.unwrap();
    assert_eq!(marker.kvs()[0].value(), b"before-the-backup");
    let copy_spec = dkvs.get("orders-copy").await.unwrap().spec;
    assert!(
        copy_spec.backup.is_none(),
        "a restored copy does not back up by itself"
    );

    // etcdctl runs in a member pod: nothing of etcd is needed here.
    let value = kubectl.ok(&[
        "etcdctl",
        "orders",
        "--",
        "get",
        "/plugin/marker",
        "--print-value-only",
    ]);
    assert_eq!(value.trim(), "after-the-backup");
    let failed = kubectl.dkv(&["etcdctl", "orders", "--", "no-such-command"]);
    assert!(
        !failed.status.success(),
        "etcdctl's failure is the plugin's"
    );
    let listed = kubectl.ok(&[
        "etcdctl", "orders", "--member", "orders-2", "--", "member", "list",
    ]);
    assert_eq!(listed.lines().count(), 3, "{listed}");

    // status carries etcd's own figures for every member.
    let status = kubectl.json(&["status", "orders"]);
    assert!(status.get("liveError").is_none(), "{status}");
    for member in status["members"].as_array().unwrap() {
        let live = &member["live"];
        assert!(live["dbSize"].as_i64().unwrap() > 0, "{member}");
        assert!(live["raftIndex"].as_u64().unwrap() > 0, "{member}");
        assert_eq!(live["alarms"], json!([]), "{member}");
    }
    assert!(kubectl.ok(&["status", "orders"]).contains("RAFT INDEX"));

    // move-leader hands leadership to a follower; etcd says so.
    let follower = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "follower")
        .unwrap();
    let (follower_name, follower_id) = (
        follower["name"].as_str().unwrap().to_owned(),
        u64::from_str_radix(follower["id"].as_str().unwrap(), 16).unwrap(),
    );
    let moved = kubectl.ok(&["move-leader", "orders", "--to", &follower_name]);
    assert!(moved.contains(&format!("to {follower_name}")), "{moved}");
    let mut etcd = connect(member_endpoints(&client, NS, "orders").await)
        .await
        .unwrap();
    assert_eq!(etcd.status().await.unwrap().leader(), follower_id);
    wait_converged(&dkvs, "orders").await;

    // defrag: every member, the leader last.
    let defragmented = kubectl.ok(&["defrag", "orders"]);
    let lines: Vec<&str> = defragmented.lines().collect();
    assert_eq!(lines.len(), 3, "{defragmented}");
    assert!(
        lines[2].contains("(leader)"),
        "the leader last: {defragmented}"
    );

    // kubectl's own exec and port-forward reach the members in local mode.
    let exec = Command::new("kubectl")
        .args(["exec", "-n", NS, "orders-0", "--", "etcdctl"])
        .arg("--endpoints=http://orders-0.orders-peer.plugin.svc:2379")
        .args(["endpoint", "status"])
        .env("KUBECONFIG", store.env.kubeconfig_path())
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&exec.stdout);
    assert!(
        exec.status.success() && printed.contains("3.5.16"),
        "kubectl exec: {printed}{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    let port = support::free_port();
    let mut forward = Command::new("kubectl")
        .args([
            "port-forward",
            "-n",
            NS,
            "svc/orders-client",
            &format!("{port}:2379"),
        ])
        .env("KUBECONFIG", store.env.kubeconfig_path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // kubectl says when it listens; its stdout is read to the end (it
    // writes a line per connection, and dies on a closed pipe).
    let stdout = forward.stdout.take().unwrap();
    let (listening_tx, listening) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut listening_tx = Some(listening_tx);
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("Forwarding from")
                && let Some(tx) = listening_tx.take()
            {
                let _ = tx.send(());
            }
        }
    });
    let listening = tokio::time::timeout(Duration::from_secs(30), listening).await;
    assert!(
        matches!(listening, Ok(Ok(()))),
        "kubectl port-forward listens"
    );
    let mut through = connect(vec![format!("http://127.0.0.1:{port}")])
        .await
        .unwrap();
    let marker = through.get("/plugin/marker", None).await.unwrap();
    assert_eq!(marker.kvs()[0].value(), b"after-the-backup");
    let _ = forward.kill();
    let _ = forward.wait();

    // Bad input: one line, a non-zero exit, nothing changed.
    let clusters_before = names(&dkvs).await;
    let backups_before = names(&backups).await;
    kubectl.refused(
        &["status", "nosuch"],
        "DistributedKV plugin/nosuch not found",
    );
    kubectl.refused(
        &["backup", "nosuch"],
        "DistributedKV plugin/nosuch not found",
    );
    kubectl.refused(
        &["backups", "nosuch"],
        "DistributedKV plugin/nosuch not found",
    );
    kubectl.refused(
        &["restore", "orders", "--from", "nosuch", "--as", "orders-3"],
        "DistributedKVBackup plugin/nosuch not found",
    );
    kubectl.refused(
        &[
            "restore",
            "orders",
            "--from",
            &backup,
            "--as",
            "orders-copy",
        ],
        "already exists",
    );
    kubectl.refused(
        &[
            "restore",
            "orders",
            "--to-revision",
            "5",
            "--as",
            "orders-3",
        ],
        "no continuous backup",
    );
    kubectl.refused(
        &["move-leader", "orders", "--to", "orders-7"],
        "orders-7 is not a voting member of plugin/orders (members: orders-0, orders-1, orders-2)",
    );
    kubectl.refused(
        &[
            "etcdctl", "orders", "--member", "orders-7", "--", "member", "list",
        ],
        "orders-7 is not a voting member",
    );
    kubectl.refused(&["backup", "orders-copy"], "has no spec.backup.destination");
    assert_eq!(
        names(&dkvs).await,
        clusters_before,
        "no cluster created or removed"
    );
    assert_eq!(
        names(&backups).await,
        backups_before,
        "no backup created or removed"
    );

    // pause: the operator stops; a restart is refused while paused.
    assert!(kubectl.ok(&["pause", "orders"]).contains("paused"));
    assert!(kubectl.ok(&["status", "orders"]).contains("PAUSED"));
    let before = pod_uids(&client, "orders").await;
    kubectl.refused(&["restart", "orders"], "is paused");
    kubectl.refused(
        &["move-leader", "orders", "--to", &follower_name],
        "is paused",
    );
    kubectl.refused(&["defrag", "orders"], "is paused");
    let annotations = dkvs
        .get("orders")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(
        !annotations.contains_key("dkv.io/restartedAt"),
        "{annotations:?}"
    );
    assert!(kubectl.ok(&["resume", "orders"]).contains("resumed"));
    assert!(
        kubectl
            .ok(&["resume", "orders"])
            .contains("already resumed")
    );

    // restart: every member pod replaced, one at a time, writes go on.
    assert!(
        kubectl
            .ok(&["restart", "orders"])
            .contains("restart requested")
    );
    wait_for(&dkvs, "orders", "the restart taken up", |d| {
        condition_reason(d, "Progressing", "True").as_deref() == Some("RollingOut")
    })
    .await;
    support::eventually(
        "every member pod replaced",
        Duration::from_secs(180),
        Duration::from_millis(500),
        async || {
            let now = pod_uids(&client, "orders").await;
            (now.len() == 3 && now.iter().all(|uid| !before.contains(uid))).then_some(())
        },
    )
    .await;
    wait_converged(&dkvs, "orders").await;
    let report = writer.stop().await;
    assert_no_write_lost(&client, NS, &report).await;

    // report: a bundle with the cluster's objects, Events and member logs,
    // and none of the namespace's secret values.
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("orders-report.tar.gz");
    let wrote = kubectl.ok(&["report", "orders", "-f", bundle.to_str().unwrap()]);
    assert!(wrote.contains("secret values redacted"), "{wrote}");
    let entries = read_bundle(&bundle);
    for expected in [
        "orders-report/distributedkv.yaml",
        "orders-report/status.txt",
        "orders-report/distributedkvbackups.yaml",
        "orders-report/statefulsets.yaml",
        "orders-report/pods.yaml",
        "orders-report/persistentvolumeclaims.yaml",
        "orders-report/events.yaml",
        "orders-report/secrets.yaml",
        "orders-report/logs/orders-0/etcd.log",
        "orders-report/errors.txt",
    ] {
        assert!(
            entries.iter().any(|(name, _)| name == expected),
            "{expected} missing from {:?}",
            entries.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
    }
    let text = |name: &str| {
        entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
            .unwrap_or_default()
    };
    for (file, wanted, what) in [
        ("orders-report/logs/orders-0/etcd.log", "raft", "member log"),
        ("orders-report/events.yaml", "orders", "events"),
        (
            "orders-report/secrets.yaml",
            "s3-creds",
            "the credentials Secret, by name",
        ),
        (
            "orders-report/secrets.yaml",
            "<redacted: ",
            "values redacted",
        ),
    ] {
        assert!(text(file).contains(wanted), "{what}");
    }
    bundle::assert_no_secret_value(&client, NS, &entries).await;
    kubectl.refused(
        &["report", "nosuch", "-f", bundle.to_str().unwrap()],
        "DistributedKV plugin/nosuch not found",
    );

    // Completion scripts and help with examples need no cluster.
    let bash = kubectl.ok(&["completion", "bash"]);
    assert!(bash.contains("kubectl-dkv"), "{bash}");
    for command in [
        "status",
        "backup",
        "backups",
        "restore",
        "restart",
        "pause",
        "resume",
        "hibernate",
        "wake",
        "promote",
        "completion",
    ] {
        let help = kubectl.ok(&[command, "--help"]);
        assert!(
            help.contains("Examples:"),
            "{command} --help has examples:\n{help}"
        );
    }
}
