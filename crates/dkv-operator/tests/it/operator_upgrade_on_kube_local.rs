//! Upgrading the operator, on kube-local with real etcd: two clusters of
//! three members, a writer counting acknowledged writes on one.
//!
//! - A new operator image whose member-side code is the same (this build
//!   under another tag) restarts no member pod: every pod keeps its UID,
//!   and the members keep running `member-init` from the old image.
//! - A spec edit afterwards rolls out as always, onto the new image.
//! - An operator whose member side differs (`--member-side-epoch` raised,
//!   as for an image rebuilt for a fix) rolls the clusters onto its image
//!   at `--member-upgrades-per-minute` (1 here): one cluster at once, the
//!   other a turn later, each one member at a time; no acknowledged write
//!   lost.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use kube::Client;
use kube::api::Api;
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    Writer, assert_no_write_lost, patch_spec, settled_at, wait_for, wait_settled,
};

const NS: &str = "operator-upgrade";
const ETCD: &str = "registry.k8s.io/etcd:3.5.30-0";
const OLD: &str = "ghcr.io/dkv-io/dkv:test";
const NEW: &str = "ghcr.io/dkv-io/dkv:next";

/// Every member pod: name → (UID, the image its member-init runs).
async fn member_pods(client: &Client) -> BTreeMap<String, (String, String)> {
    support::nodes::member_pods_and_images(client, NS).await
}

fn operator(client: &Client, image: &str, epoch: u32) -> support::RunningOperator {
    let mut args = support::operator_args(false);
    args.operator_image = image.to_owned();
    args.member_side_epoch = epoch;
    args.member_upgrades_per_minute = 1;
    support::RunningOperator::start_with(client.clone(), args)
}

/// Whether every member of `cluster` runs `image` and the cluster is
/// settled at three members.
async fn rolled_onto(
    client: &Client,
    dkvs: &Api<DistributedKV>,
    cluster: &str,
    image: &str,
) -> bool {
    let pods = member_pods(client).await;
    let members: Vec<_> = pods
        .iter()
        .filter(|(name, _)| name.starts_with(&format!("{cluster}-")))
        .collect();
    members.len() == 3
        && members.iter().all(|(_, (_, runs))| runs == image)
        && dkvs.get(cluster).await.is_ok_and(|d| settled_at(&d, 3))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_upgrade_restarts_no_member_unless_its_member_side_changed() {
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let first = operator(&client, OLD, 0);
    let dkvs = support::create_cluster(&client, NS, "orders", 3, ETCD, json!({})).await;
    support::create_cluster(&client, NS, "carts", 3, ETCD, json!({})).await;
    wait_settled(&dkvs, "orders", 3).await;
    wait_settled(&dkvs, "carts", 3).await;
    let writer = Writer::start(client.clone(), NS, "orders");
    let before = member_pods(&client).await;
    assert_eq!(before.len(), 6, "{before:?}");
    assert!(before.values().all(|(_, image)| image == OLD), "{before:?}");
    first.stop().await;

    // The same member side under another image: nothing restarts. The
    // new operator looks at each cluster many times meanwhile (every
    // HEALTH_LOOK, and at start).
    let second = operator(&client, NEW, 0);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(45) {
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(member_pods(&client).await, before, "no member pod changed");
    }
    eprintln!("same member side: 0 of 6 member pods restarted in 45 s");

    // A spec edit rolls out as always, onto the new operator's image.
    patch_spec(
        &dkvs,
        "carts",
        json!({"resources": {"requests": {"cpu": "150m"}}}),
    )
    .await;
    support::eventually(
        "carts rolled onto the new image after its edit",
        Duration::from_secs(180),
        Duration::from_secs(1),
        async || {
            rolled_onto(&client, &dkvs, "carts", NEW)
                .await
                .then_some(())
        },
    )
    .await;
    let orders = |pods: &BTreeMap<String, (String, String)>| {
        pods.iter()
            .filter(|(name, _)| name.starts_with("orders-"))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
    };
    assert_eq!(
        orders(&member_pods(&client).await),
        orders(&before),
        "orders was not edited: untouched"
    );
    second.stop().await;

    // Another member side: both clusters roll onto it, one turn a minute.
    let before = member_pods(&client).await;
    let third = operator(&client, NEW, 1);
    let began = Instant::now();
    let (first_done, other) = support::eventually(
        "one cluster rolled onto the new member side",
        Duration::from_secs(180),
        Duration::from_secs(1),
        async || {
            for (done, other) in [("orders", "carts"), ("carts", "orders")] {
                if rolled_onto(&client, &dkvs, done, NEW).await
                    && member_pods(&client)
                        .await
                        .iter()
                        .filter(|(n, _)| n.starts_with(&format!("{done}-")))
                        .all(|(n, (uid, _))| before.get(n).is_some_and(|(was, _)| was != uid))
                {
                    return Some((done, other));
                }
            }
            None
        },
    )
    .await;
    let first_took = began.elapsed();
    // The other waits for the next turn: none of its members restarted.
    let now = member_pods(&client).await;
    for (name, (uid, _)) in now
        .iter()
        .filter(|(n, _)| n.starts_with(&format!("{other}-")))
    {
        assert_eq!(
            Some(uid),
            before.get(name).map(|(u, _)| u),
            "{other} waits its turn"
        );
    }
    support::eventually(
        "the other cluster rolled a turn later",
        Duration::from_secs(240),
        Duration::from_secs(1),
        async || {
            let pods = member_pods(&client).await;
            let restarted = pods
                .iter()
                .filter(|(n, _)| n.starts_with(&format!("{other}-")))
                .all(|(n, (uid, _))| before.get(n).is_some_and(|(was, _)| was != uid));
            (restarted && rolled_onto(&client, &dkvs, other, NEW).await).then_some(())
        },
    )
    .await;
    let second_took = began.elapsed();
    eprintln!(
        "member side changed: {first_done} rolled in {first_took:?}, {other} by {second_took:?} (1 turn a minute)"
    );
    assert!(
        second_took >= Duration::from_secs(55),
        "the second cluster waited for the next turn: {second_took:?}"
    );
    wait_for(&dkvs, "orders", "orders settled", |d| settled_at(d, 3)).await;
    let report = writer.stop().await;
    assert_no_write_lost(&client, NS, &report).await;
    third.stop().await;
}
