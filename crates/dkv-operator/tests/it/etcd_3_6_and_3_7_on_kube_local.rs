//! etcd 3.6 and 3.7 run by dkv on kube-local: the releases built from
//! etcd's own Go modules (`go/etcd/`, cached in the tools directory by
//! scripts/test.sh), each with a writer recording every acknowledged write.
//! New 3-member clusters on 3.6.16 and on 3.7.3 become Available and report
//! the version etcd reports (per member, `status.currentVersion`, and the
//! VERSION column of `kubectl get`); a cluster on 3.5.30 is upgraded to
//! 3.6.16 and then to 3.7.3, one minor at a time, each upgrade with at most
//! one leader change (the planned MoveLeader before the leader restarts
//! last); nothing acknowledged is lost.
//!
//! Downgrades go the other way, one minor at a time through etcd's
//! downgrade API (3.7.3 → 3.6.16 → 3.5.30), under the same writer and with
//! the same rules; the operator is killed during the first and its
//! successor finishes it.
//!
//! etcd 3.7 cannot replay a log entry that 3.5 wrote: a member whose log
//! since its last snapshot still holds one panics on 3.7 ("unmarshal should
//! never fail", found here; etcd snapshots every 10,000 entries). So before
//! 3.6 → 3.7 each member must have taken a snapshot on 3.6, and dkv holds
//! each member on 3.6 until it surely has (`WaitingForSnapshot`, see
//! docs/operations.md, "Upgrade etcd"). The upgrade test asks for 3.7 right
//! after 3.6, sees dkv hold every member there, then drives enough writes;
//! another restarts the members on 3.6 with `snapshotCount: 1` first.

use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use kube::Client;
use kube::api::Api;
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    LeaderMonitor, Writer, assert_upgrade_kept_serving, condition_reason, member_versions,
    patch_spec, settled_at, wait_for,
};

const NS: &str = "releases";
const V3530: &str = "registry.k8s.io/etcd:3.5.30-0";
const V36: &str = "registry.k8s.io/etcd:3.6.16-0";
const V37: &str = "quay.io/coreos/etcd:v3.7.3";

fn current_version(d: &DistributedKV) -> Option<&str> {
    d.status.as_ref()?.current_version.as_deref()
}

/// Every member healthy and reporting `version`, and the cluster's running
/// version `version`.
fn settled_on(d: &DistributedKV, version: &str) -> bool {
    settled_at(d, 3)
        && member_versions(d) == vec![version; 3]
        && current_version(d) == Some(version)
}

/// The VERSION column `kubectl get dkv` prints for cluster `orders`.
fn version_column(env: &kube_local::Environment) -> String {
    let table = support::kubectl(env, &["get", "dkv", "orders", "-n", NS]);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let column = header
        .iter()
        .position(|h| *h == "VERSION")
        .unwrap_or_else(|| panic!("no VERSION column in:\n{table}"));
    row.get(column)
        .unwrap_or_else(|| panic!("no VERSION value in:\n{table}"))
        .to_string()
}

/// A new 3-member cluster on `image` reaches Available, reports etcd's
/// `version`, and serves a writer without losing an acknowledged write.
async fn new_cluster_serves(image: &str, version: &str) {
    let (env, client, operator, _) = settled_cluster(image, version).await;
    assert_eq!(version_column(&env), version);

    let writer = Writer::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let report = writer.stop().await;
    assert!(
        report.acked.len() > 20,
        "the writer wrote: {}",
        report.acked.len()
    );
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_cluster_on_etcd_3_6_serves_and_reports_its_version() {
    new_cluster_serves(V36, "3.6.16").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_cluster_on_etcd_3_7_serves_and_reports_its_version() {
    new_cluster_serves(V37, "3.7.3").await;
}

/// Upgrades (or downgrades) `orders` to `image` (etcd `version`) under a
/// writer and a leader monitor: every member on it, at most one leader
/// change, writes never stalled for long, nothing acknowledged lost.
async fn upgrade(client: &Client, dkvs: &Api<DistributedKV>, image: &str, version: &str) {
    let writer = Writer::start(client.clone(), NS, "orders");
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let started = Instant::now();
    patch_spec(dkvs, "orders", json!({"image": image})).await;
    wait_for(dkvs, "orders", &format!("every member on {version}"), |d| {
        settled_on(d, version)
    })
    .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;

    assert_upgrade_kept_serving(
        client,
        NS,
        monitor,
        writer,
        &format!("move to {version}"),
        took,
        20,
    )
    .await;
}

/// etcd's default `--snapshot-count` (3.6, 3.7): a member takes a snapshot
/// once it has applied more entries than this since its last one.
const SNAPSHOT_COUNT: usize = 10_000;

/// Writes enough entries that every member of `orders` takes a snapshot
/// (many writes in flight at once: one at a time would take minutes).
async fn write_past_a_snapshot(client: &Client) {
    let started = Instant::now();
    let endpoints = support::etcd_cluster::member_endpoints(client, NS, "orders").await;
    let etcd = support::etcd_cluster::connect(endpoints)
        .await
        .expect("connecting to the members");
    const IN_FLIGHT: usize = 32;
    let writers: Vec<_> = (0..IN_FLIGHT)
        .map(|lane| {
            let mut etcd = etcd.clone();
            tokio::spawn(async move {
                for i in (lane..=SNAPSHOT_COUNT + 100).step_by(IN_FLIGHT) {
                    support::etcd_cluster::put_retrying(
                        &mut etcd,
                        &format!("/snapshot-filler/{}", i % 64),
                        "x",
                    )
                    .await;
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    eprintln!(
        "{} writes for a snapshot on every member: {:?}",
        SNAPSHOT_COUNT + 100,
        started.elapsed()
    );
}

/// Asks for 3.7 before any member took a snapshot past 3.5's entries: dkv
/// reports `WaitingForSnapshot` naming a member, and for a while restarts
/// none (every member still runs 3.6.16, each pod its first run on it).
async fn held_on_3_6_until_a_snapshot(client: &Client, dkvs: &Api<DistributedKV>) {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), NS);
    let uids = |list: Vec<k8s_openapi::api::core::v1::Pod>| {
        let mut uids: Vec<String> = list.into_iter().filter_map(|p| p.metadata.uid).collect();
        uids.sort();
        uids
    };
    let before = uids(pods.list(&Default::default()).await.unwrap().items);
    patch_spec(dkvs, "orders", json!({"image": V37})).await;
    let held = wait_for(
        dkvs,
        "orders",
        "Progressing=True, WaitingForSnapshot",
        |d| condition_reason(d, "Progressing", "True").as_deref() == Some("WaitingForSnapshot"),
    )
    .await;
    let message = support::etcd_cluster::condition_message(
        &dkvs.get("orders").await.unwrap(),
        "Progressing",
        Some("True"),
    );
    assert!(
        message.contains("orders-") && message.contains("snapshot"),
        "{message}"
    );
    eprintln!("held on 3.6 after {held:?}: {message}");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let d = dkvs.get("orders").await.unwrap();
    assert!(settled_on(&d, "3.6.16"), "{:?}", d.status);
    assert_eq!(
        uids(pods.list(&Default::default()).await.unwrap().items),
        before,
        "no member pod restarted while held"
    );
}

/// How a cluster born on 3.5 and now on 3.6 is readied for 3.7: each member
/// must take a snapshot past every entry 3.5 wrote.
enum Readying {
    /// More writes than etcd's snapshot count.
    Writes,
    /// A rolling restart with `spec.etcd.snapshotCount: 1`: each member
    /// takes a snapshot as it starts on 3.6 (it has applied more than one
    /// entry since its last). (The reported `storageVersion` is 3.6 before
    /// either, and without them 3.7 crash-loops on the first member: it is
    /// no guard.)
    SnapshotCountOne,
}

/// The operator, and a new 3-member cluster `orders` on `image` settled
/// with every member on etcd `version` (how long that took is printed).
async fn settled_cluster(
    image: &str,
    version: &str,
) -> (
    kube_local::Environment,
    Client,
    support::RunningOperator,
    Api<DistributedKV>,
) {
    let (env, client, operator) = support::running_operator(NS).await;
    let started = Instant::now();
    let dkvs = support::create_cluster(&client, NS, "orders", 3, image, json!({})).await;
    wait_for(
        &dkvs,
        "orders",
        &format!("3 healthy voters on {version}"),
        |d| settled_on(d, version),
    )
    .await;
    eprintln!(
        "create 3 members on etcd {version}: {:?}",
        started.elapsed()
    );
    (env, client, operator, dkvs)
}

/// A cluster on 3.5.30 upgraded to 3.6.16, readied, then upgraded to 3.7.3.
async fn upgrades_3_5_30_to_3_6_to_3_7(readying: Readying) {
    let (env, client, operator, dkvs) = settled_cluster(V3530, "3.5.30").await;

    upgrade(&client, &dkvs, V36, "3.6.16").await;
    assert_eq!(version_column(&env), "3.6.16");
    let recorded = dkvs.get("orders").await.unwrap();
    let log = recorded
        .status
        .as_ref()
        .and_then(|s| s.rollout.as_ref())
        .and_then(|r| r.etcd35_log.as_ref())
        .expect("status records how far 3.5 wrote the log");
    assert!(log.through_index.is_some(), "{log:?}");
    match readying {
        Readying::Writes => {
            held_on_3_6_until_a_snapshot(&client, &dkvs).await;
            write_past_a_snapshot(&client).await;
        }
        Readying::SnapshotCountOne => restart_with_snapshot_count_one(&env, &dkvs).await,
    }
    upgrade(&client, &dkvs, V37, "3.7.3").await;
    assert_eq!(version_column(&env), "3.7.3");

    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrades_3_5_30_to_3_6_to_3_7_keep_the_cluster_serving() {
    upgrades_3_5_30_to_3_6_to_3_7(Readying::Writes).await;
}

/// Sets `spec.etcd.snapshotCount: 1` and waits until every member runs
/// with it, has saved a snapshot, and the cluster is settled again.
async fn restart_with_snapshot_count_one(env: &kube_local::Environment, dkvs: &Api<DistributedKV>) {
    patch_spec(dkvs, "orders", json!({"etcd": {"snapshotCount": 1}})).await;
    let kubelet = env.kubelet().expect("kube-local's kubelet");
    support::eventually(
        "every member restarted with snapshot-count 1 and saved a snapshot",
        Duration::from_secs(300),
        Duration::from_secs(1),
        async || {
            let done = ["orders-0", "orders-1", "orders-2"].iter().all(|pod| {
                kubelet
                    .log_path(NS, pod, "etcd")
                    .and_then(|path| std::fs::read_to_string(path).ok())
                    .is_some_and(|log| {
                        log.contains(r#""snapshot-count":1,"#)
                            && log.contains("saved snapshot to disk")
                    })
            });
            let d = dkvs.get("orders").await.ok()?;
            (done && settled_on(&d, "3.6.16")).then_some(())
        },
    )
    .await;
}

/// The other way there, without 10,000 writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_with_a_small_snapshot_count_on_3_6_readies_a_3_5_born_cluster_for_3_7() {
    upgrades_3_5_30_to_3_6_to_3_7(Readying::SnapshotCountOne).await;
}

/// Downgrades `orders` to `image` (see [`upgrade`]): afterwards every
/// member pod runs `image`, etcd reports `version` for each member and the
/// cluster, and `kubectl get` shows it.
async fn downgrade(
    env: &kube_local::Environment,
    client: &Client,
    dkvs: &Api<DistributedKV>,
    image: &str,
    version: &str,
) {
    let from = current_version(&dkvs.get("orders").await.unwrap())
        .unwrap_or_default()
        .to_owned();
    upgrade(client, dkvs, image, version).await;
    assert_eq!(version_column(env), version);
    let images = support::etcd_cluster::member_images(client, NS).await;
    assert_eq!(images.len(), 3, "{images:?}");
    assert!(images.iter().all(|(_, i)| i == image), "{images:?}");
    // Through etcd's downgrade API, and told member by member.
    let events = support::objects_text::<k8s_openapi::api::core::v1::Event>(client, NS).await;
    let minor = version.rsplit_once('.').map_or(version, |(m, _)| m);
    assert!(
        events.contains(&format!("enabled the downgrade to {minor}")),
        "no DowngradeEnabled Event for {minor}: {events}"
    );
    for member in 0..3 {
        let told = format!("orders-{member} restarts from etcd {from} onto {image}");
        assert!(events.contains(&told), "no Event {told:?}: {events}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downgrades_3_7_to_3_6_to_3_5_30_keep_the_cluster_serving() {
    let (env, client, operator, dkvs) = settled_cluster(V37, "3.7.3").await;
    // The operator is killed as soon as it reports the first downgrade
    // under way (etcd's downgrade enabled, or a member moving): the next
    // one reads where it stands from etcd and carries on.
    let killer = {
        let (client, dkvs) = (client.clone(), dkvs.clone());
        tokio::spawn(async move {
            wait_for(&dkvs, "orders", "Progressing=True, Downgrading", |d| {
                condition_reason(d, "Progressing", "True").as_deref() == Some("Downgrading")
            })
            .await;
            operator.kill().await;
            support::RunningOperator::start(client, false)
        })
    };
    downgrade(&env, &client, &dkvs, V36, "3.6.16").await;
    let operator = killer.await.unwrap();
    downgrade(&env, &client, &dkvs, V3530, "3.5.30").await;

    operator.stop().await;
}
