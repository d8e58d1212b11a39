//! The plugin against the cluster production users run: TLS everywhere,
//! etcd authentication on, continuous backup to S3 (moto), encrypted. A
//! writer with the client certificate counts acknowledged writes
//! throughout. What is proven here and not in `plugin.rs`: etcdctl and the
//! live member figures over TLS as the root user (`--user` from the root
//! Secret), the continuous window and certificate expiry in `status`,
//! `restore --to-revision` and `--to-time` into new clusters (which come
//! up with TLS and authentication of their own and answer the plugin the
//! same way), and a support bundle holding none of the private keys, the
//! root password, the S3 credentials or the encryption key.

use std::time::Duration;

use dkv_api::DistributedKV;
use kube::api::DeleteParams;
use serde_json::{Value, json};

use dkv_test_support as support;
use support::backups::{create_secret, with_object_store};
use support::etcd_cluster::{wait_for, wait_settled};
use support::tls::Target as TlsTarget;

use crate::bundle::{self, read_bundle};
use crate::kubectl::{Kubectl, wait_converged};

const NS: &str = "plugin-secured";
/// A 256-bit backup encryption key, hex.
const KEY_HEX: &str = "8f2a41c07d9be6135a0c4e7f92d8b3a61c5e0f7a9b2d4c6e8f1a3b5c7d9e0f21";

/// `kubectl dkv etcdctl CLUSTER -- put KEY VALUE`; the revision etcd gave it.
fn put(kubectl: &Kubectl, cluster: &str, key: &str, value: &str) -> i64 {
    let out = kubectl.ok(&["etcdctl", cluster, "--", "put", key, value, "-w", "json"]);
    let reply: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    reply["header"]["revision"]
        .as_i64()
        .unwrap_or_else(|| panic!("no revision in {reply}"))
}

/// `kubectl dkv etcdctl CLUSTER -- get KEY --print-value-only`.
fn get(kubectl: &Kubectl, cluster: &str, key: &str) -> String {
    kubectl
        .ok(&["etcdctl", cluster, "--", "get", key, "--print-value-only"])
        .trim()
        .to_owned()
}

/// The newest revision the continuous backup has made durable, as status
/// says.
fn newest_durable(d: &DistributedKV) -> i64 {
    d.status
        .as_ref()
        .and_then(|s| s.continuous_backup.as_ref())
        .and_then(|c| c.newest.as_ref())
        .map_or(0, |p| p.revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plugin_on_a_tls_cluster_with_authentication_and_continuous_backup() {
    secured_on("registry.k8s.io/etcd:3.5.16-0").await;
}

/// etcd 3.7 answers a member's status only to a user once authentication
/// is on: the plugin's live figures come as root there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_7_the_plugin_on_a_tls_cluster_with_authentication_and_continuous_backup() {
    secured_on("registry.k8s.io/etcd:3.7.3-0").await;
}

/// The scenario, on the etcd release `image` runs.
async fn secured_on(image: &str) {
    let store = with_object_store(NS).await;
    let client = store.client.clone();
    let kubectl = Kubectl::new(store.env.kubeconfig_path(), NS);
    create_secret(
        &client,
        NS,
        "ledger-backup-key",
        vec![("key".to_owned(), KEY_HEX.to_owned())],
    )
    .await;
    let mut backup = store.backup_spec("secured");
    backup["continuous"] = json!({"enabled": true, "interval": "2s"});
    backup["encryption"] = json!({"keySecret": {"name": "ledger-backup-key"}});
    let dkvs = support::create_cluster(
        &client,
        NS,
        "ledger",
        3,
        image,
        json!({"tls": {}, "auth": {"enabled": true}, "backup": backup}),
    )
    .await;
    wait_settled(&dkvs, "ledger", 3).await;
    support::wait_auth_enabled(&client, NS, "ledger").await;
    wait_for(&dkvs, "ledger", "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some() && c.chain.is_some())
    })
    .await;
    wait_converged(&dkvs, "ledger").await;
    let tls = TlsTarget::new(NS, "ledger").as_root();
    let writer = tls.start_writer(&client);

    // status: etcd's figures for every member, read over TLS as root; the
    // continuous window; the certificates and when they expire.
    let status = kubectl.json(&["status", "ledger"]);
    assert!(status.get("liveError").is_none(), "{status}");
    let members = status["members"].as_array().unwrap();
    assert_eq!(members.len(), 3, "{status}");
    for member in members {
        assert!(member["live"]["dbSize"].as_i64().unwrap() > 0, "{member}");
        assert_eq!(member["live"]["alarms"], json!([]), "{member}");
    }
    let continuous = &status["backups"]["continuous"];
    assert!(
        continuous["oldest"]["revision"].as_i64().unwrap() > 0,
        "{status}"
    );
    let certificates = status["certificates"].as_array().unwrap();
    assert!(
        certificates
            .iter()
            .any(|c| c["secret"] == "ledger-tls-client" && c["notAfter"].is_string()),
        "{status}"
    );
    let page = kubectl.ok(&["status", "ledger"]);
    for expected in [
        "Continuous:",
        "ledger-tls-client",
        "NOT AFTER",
        "RAFT INDEX",
    ] {
        assert!(
            page.contains(expected),
            "status lacks {expected:?}:\n{page}"
        );
    }

    // etcdctl as root: authentication is on, and the plugin passes the
    // root credentials without the user reading a Secret.
    let users = kubectl.ok(&["etcdctl", "ledger", "--", "user", "list"]);
    assert!(users.lines().any(|l| l.trim() == "root"), "{users}");
    let auth = kubectl.ok(&["etcdctl", "ledger", "--", "auth", "status"]);
    assert!(auth.contains("Authentication Status: true"), "{auth}");

    // Three states of one key, a time between the second and the third.
    let first = put(&kubectl, "ledger", "/pitr/balance", "one");
    let _second = put(&kubectl, "ledger", "/pitr/balance", "two");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let between = jiff::Timestamp::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let third = put(&kubectl, "ledger", "/pitr/balance", "three");
    wait_for(&dkvs, "ledger", "the third change durable", |d| {
        newest_durable(d) >= third
    })
    .await;

    // restore --to-revision: the key as it was at the first change.
    let restored = kubectl.ok(&[
        "restore",
        "ledger",
        "--to-revision",
        &first.to_string(),
        "--as",
        "ledger-r1",
    ]);
    assert!(restored.contains("ledger-r1 created"), "{restored}");
    wait_converged(&dkvs, "ledger-r1").await;
    let copy = dkvs.get("ledger-r1").await.unwrap().spec;
    assert!(copy.tls.is_some(), "the copy keeps TLS");
    assert!(copy.auth.is_some_and(|a| a.enabled), "and authentication");
    assert_eq!(get(&kubectl, "ledger-r1", "/pitr/balance"), "one");
    dkvs.delete("ledger-r1", &DeleteParams::default())
        .await
        .unwrap();

    // restore --to-time: the key as it was between the second and third.
    let restored = kubectl.ok(&[
        "restore",
        "ledger",
        "--to-time",
        &between.to_string(),
        "--as",
        "ledger-t",
    ]);
    assert!(restored.contains("ledger-t created"), "{restored}");
    wait_converged(&dkvs, "ledger-t").await;
    assert_eq!(get(&kubectl, "ledger-t", "/pitr/balance"), "two");
    assert_eq!(get(&kubectl, "ledger", "/pitr/balance"), "three");

    let lost = writer
        .finish("the plugin's commands and two restores")
        .await;
    println!("acknowledged writes, none lost: {lost}");

    // report: the bundle holds no private key, password, S3 credential or
    // encryption key of the namespace, and says how much it redacted.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.tar.gz");
    let wrote = kubectl.ok(&["report", "ledger", "-f", path.to_str().unwrap()]);
    assert!(wrote.contains("secret values redacted"), "{wrote}");
    let entries = read_bundle(&path);
    let status_txt = entries
        .iter()
        .find(|(name, _)| name == "ledger-report/status.txt")
        .map(|(_, body)| String::from_utf8_lossy(body).into_owned())
        .unwrap_or_default();
    assert!(
        status_txt.contains("RAFT INDEX"),
        "the bundle has etcd's own figures: {status_txt}"
    );
    bundle::assert_no_secret_value(&client, NS, &entries).await;
}
