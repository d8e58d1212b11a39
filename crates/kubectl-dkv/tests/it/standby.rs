//! `kubectl dkv promote` and the standby section of `status` through the
//! real `kubectl`, against kube-local with the operator, real etcd members
//! and a real S3 server (moto): a cluster that is no standby is refused in
//! one line; a standby following its source shows what it holds in
//! `status`; `promote --wait` returns once it is promoted, saying the
//! source revision it holds, which it then does; asked again, it says it
//! is promoted already and changes nothing.

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::StandbyPhase;
use serde_json::{Value, json};

use dkv_test_support as support;
use support::backups::with_object_store;
use support::etcd_cluster::{wait_for, wait_settled};

use crate::kubectl::Kubectl;

const NS: &str = "plugin-standby";

/// `kubectl dkv etcdctl CLUSTER -- put KEY VALUE` (as root); the revision
/// etcd gave it.
fn put(kubectl: &Kubectl, cluster: &str, key: &str, value: &str) -> i64 {
    let out = kubectl.ok(&["etcdctl", cluster, "--", "put", key, value, "-w", "json"]);
    let reply: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    reply["header"]["revision"]
        .as_i64()
        .unwrap_or_else(|| panic!("no revision in {reply}"))
}

fn standby_phase(d: &DistributedKV) -> Option<StandbyPhase> {
    d.status.as_ref()?.standby.as_ref()?.phase
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn promote_a_standby_through_kubectl() {
    let store = with_object_store(NS).await;
    let client = store.client.clone();
    let kubectl = Kubectl::new(store.env.kubeconfig_path(), NS);
    let image = "registry.k8s.io/etcd:3.5.16-0";
    let mut backup = store.backup_spec("standby");
    backup["continuous"] = json!({"enabled": true, "interval": "1s"});
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        1,
        image,
        json!({"auth": {"enabled": true}, "backup": backup}),
    )
    .await;
    wait_settled(&dkvs, "orders", 1).await;
    support::wait_auth_enabled(&client, NS, "orders").await;
    wait_for(&dkvs, "orders", "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some())
    })
    .await;
    put(&kubectl, "orders", "/dr/seeded", "yes");

    // Not a standby: refused in one line, with where to find one.
    kubectl.refused(
        &["promote", "orders"],
        "DistributedKV plugin-standby/orders is not a standby (it has no spec.standby)",
    );
    kubectl.refused(&["promote", "orders", "--wait"], "is not a standby");
    assert!(dkvs.get("orders").await.unwrap().spec.standby.is_none());

    let source = json!({"uri": store.moto.uri("standby"), "credentialsSecret": "s3-creds",
                        "cluster": "orders"});
    support::create_cluster(
        &client,
        NS,
        "orders-dr",
        1,
        image,
        json!({"auth": {"enabled": true}, "standby": {"enabled": true, "source": source}}),
    )
    .await;
    wait_for(&dkvs, "orders-dr", "following", |d| {
        standby_phase(d) == Some(StandbyPhase::Following)
    })
    .await;

    // status: what a following standby holds, as text and as JSON.
    let last = put(&kubectl, "orders", "/dr/last", "before-promotion");
    wait_for(&dkvs, "orders-dr", "the last change applied", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.applied_revision)
            >= Some(last)
    })
    .await;
    let page = kubectl.ok(&["status", "orders-dr"]);
    eprintln!("{page}");
    for expected in [
        "Standby:     Following — reads only",
        &format!(
            "  Source:      {NS}/orders in {}",
            store.moto.uri("standby")
        ),
        &format!("  Applied:     source revision {last}, recorded by the source's backup "),
        "  Lag:         ",
        "  Checked:     the source's store, ",
    ] {
        assert!(
            page.contains(expected),
            "status lacks {expected:?}:\n{page}"
        );
    }
    let status = kubectl.json(&["status", "orders-dr"]);
    assert_eq!(status["standby"]["phase"], "Following", "{status}");
    assert_eq!(status["standby"]["appliedRevision"], last, "{status}");
    assert!(
        kubectl.json(&["status", "orders"]).get("standby").is_none(),
        "the source is no standby"
    );

    // promote --wait: returns promoted, with the source revision it holds.
    let promoted = kubectl.ok(&["promote", "orders-dr", "--wait", "--timeout", "3m"]);
    eprintln!("{promoted}");
    assert!(
        promoted.contains("distributedkv.dkv.io/orders-dr promoted in ")
            && promoted.contains(&format!("up to source revision {last}, and takes writes")),
        "{promoted}"
    );
    let cluster = dkvs.get("orders-dr").await.unwrap();
    assert_eq!(cluster.spec.standby.map(|s| s.enabled), Some(false));
    let recorded = cluster.status.and_then(|s| s.standby).unwrap();
    assert_eq!(recorded.phase, Some(StandbyPhase::Promoted));
    assert_eq!(recorded.promoted_at_revision, Some(last));
    let page = kubectl.ok(&["status", "orders-dr"]);
    assert!(
        page.contains(&format!("  Promoted at: source revision {last}, ")),
        "{page}"
    );
    assert!(page.contains("Standby:     Promoted"), "{page}");
    // What it holds, and it takes writes.
    let value = kubectl.ok(&[
        "etcdctl",
        "orders-dr",
        "--",
        "get",
        "/dr/last",
        "--print-value-only",
    ]);
    assert_eq!(value.trim(), "before-promotion");
    put(&kubectl, "orders-dr", "/dr/after", "mine");

    // Asked again: promoted already, exit 0, nothing patched.
    // The generation: status goes on being written, the spec is not.
    let generation = dkvs.get("orders-dr").await.unwrap().metadata.generation;
    let again = kubectl.ok(&["promote", "orders-dr"]);
    assert!(
        again.contains(&format!(
            "distributedkv.dkv.io/orders-dr already promoted at source revision {last}"
        )),
        "{again}"
    );
    assert_eq!(
        dkvs.get("orders-dr").await.unwrap().metadata.generation,
        generation,
        "the spec is not patched again"
    );
    store.operator.stop().await;
}
