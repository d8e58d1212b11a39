//! Continuous backup and point-in-time restore end to end, on kube-local
//! with real etcd, the operator in-process and a real S3 server (moto):
//! a cluster records every change while a writer runs, through a rolling
//! restart of its members; its members are then lost abruptly (frozen, volumes wiped, pods deleted); new clusters
//! restored from the destination alone hold exactly the source's keys and
//! values at three revisions and at a time, and the newest point loses at
//! most the last interval of acknowledged writes. A point outside the
//! recoverable window starts nothing and says what is reachable.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use dkv_api::conditions::{reasons, types};
use dkv_backup::testing::MotoServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use rand::seq::SliceRandom;
use serde_json::json;

use dkv_test_support as support;

use support::backups::{create_secret, wait_stored};
use support::etcd_cluster::{
    Writer, annotate, condition_message, condition_reason, connect, lost_writes, member_endpoints,
    patch_spec, wait_for, wait_restore_refused, wait_settled,
};

const NS: &str = "continuous";
const IMAGE: &str = "registry.k8s.io/etcd:3.5.16-0";
/// The recording interval the source uses: the recovery point objective.
const INTERVAL: Duration = Duration::from_secs(2);
/// What sealing and storing a segment may add to the interval.
const STORE_ALLOWANCE: Duration = Duration::from_secs(3);
const PREFIX: &str = "/pitr/";

/// The keys under [`PREFIX`] and their values, as `etcd` holds them at
/// `revision` (0: now).
async fn state_at(etcd: &mut etcd_client::Client, revision: i64) -> BTreeMap<String, String> {
    let mut options = etcd_client::GetOptions::new().with_prefix();
    if revision > 0 {
        options = options.with_revision(revision);
    }
    let response = etcd.get(PREFIX, Some(options)).await.unwrap();
    dkv_backup::testing::text_pairs(&response)
}

/// A put or delete under [`PREFIX`]; returns the revision it made.
async fn change(etcd: &mut etcd_client::Client, i: usize) -> i64 {
    let key = format!("{PREFIX}k{:02}", i % 17);
    let header = if i % 5 == 4 {
        etcd.delete(key, None).await.unwrap().header().cloned()
    } else {
        etcd.put(key, format!("v{i}"), None)
            .await
            .unwrap()
            .header()
            .cloned()
    };
    header.expect("a response has a header").revision()
}

/// The spec of a cluster restored from `orders`' continuous backup.
fn restored(moto: &MotoServer, point: serde_json::Value) -> serde_json::Value {
    let mut restore = json!({"uri": moto.uri("pitr"), "credentialsSecret": "s3-creds", "sourceCluster": "orders"});
    if !point.is_null() {
        restore["pointInTime"] = point;
    }
    json!({"bootstrap": {"restore": restore}})
}

async fn restored_state(
    client: &kube::Client,
    dkvs: &Api<DistributedKV>,
    name: &str,
) -> BTreeMap<String, String> {
    wait_settled(dkvs, name, 1).await;
    let mut etcd = connect(member_endpoints(client, NS, name).await)
        .await
        .unwrap();
    state_at(&mut etcd, 0).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn continuous_backup_restores_to_any_point_and_the_newest_loses_at_most_an_interval() {
    continuous_backup_restores_to_any_point_and_the_newest_loses_at_most_an_interval_on(IMAGE)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_7_continuous_backup_restores_to_any_point_and_the_newest_loses_at_most_an_interval()
 {
    continuous_backup_restores_to_any_point_and_the_newest_loses_at_most_an_interval_on(
        "registry.k8s.io/etcd:3.7.3-0",
    )
    .await;
}

async fn continuous_backup_restores_to_any_point_and_the_newest_loses_at_most_an_interval_on(
    image: &str,
) {
    let moto = MotoServer::start("dkv-continuous");
    let (env, client, operator) = support::running_operator(NS).await;
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        image,
        json!({"backup": {
            "destination": {"uri": moto.uri("pitr"), "credentialsSecret": "s3-creds"},
            "schedule": "0 0 1 1 *"
        }}),
    )
    .await;
    wait_settled(&dkvs, "orders", 3).await;
    // History from before continuous backup was turned on: no restore can
    // reach into it.
    let mut etcd = connect(member_endpoints(&client, NS, "orders").await)
        .await
        .unwrap();
    let mut before = Vec::new();
    for i in 0..10 {
        before.push(change(&mut etcd, i).await);
    }
    patch_spec(
        &dkvs,
        "orders",
        json!({"backup": {
            "continuous": {"enabled": true, "interval": "2s"}
        }}),
    )
    .await;
    // The agent took the chain's base snapshot: status shows the window.
    wait_for(
        &dkvs,
        "orders",
        "a continuous backup window in status",
        |d| {
            d.status
                .as_ref()
                .and_then(|s| s.continuous_backup.as_ref())
                .is_some_and(|c| c.oldest.is_some() && c.chain.is_some())
        },
    )
    .await;
    let window = dkvs
        .get("orders")
        .await
        .unwrap()
        .status
        .and_then(|s| s.continuous_backup)
        .unwrap();
    let base_revision = window.oldest.unwrap().revision;
    // What `kubectl get dkv -o wide` shows of it.
    let wide = support::kubectl(&env, &["get", "dkv", "orders", "-n", NS, "-o", "wide"]);
    assert!(
        wide.contains("RECOVERABLE-FROM") && wide.contains("LAST-SEGMENT"),
        "{wide}"
    );
    println!("{wide}");

    // Changes after the base, with their revisions, and the writer that
    // counts acknowledged writes running through them.
    let writer = Writer::start(client.clone(), NS, "orders");
    let mut revisions = Vec::new();
    for i in 0..60 {
        revisions.push(change(&mut etcd, i).await);
    }
    // A time between two batches of changes: restoring to it gives the
    // state after the first batch.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let between = jiff::Timestamp::now();
    let at_between = state_at(&mut etcd, 0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 60..120 {
        revisions.push(change(&mut etcd, i).await);
    }
    let mut chosen: Vec<i64> = revisions.clone();
    chosen.shuffle(&mut rand::rng());
    chosen.truncate(3);
    let mut expected = Vec::new();
    for &revision in &chosen {
        expected.push((revision, state_at(&mut etcd, revision).await));
    }

    // A rolling restart while the writer runs: every member comes back on a
    // new pod, and the agent follows them without breaking its chain (the
    // newest-point restore below needs every segment of it).
    annotate(
        &dkvs,
        "orders",
        "dkv.io/restartedAt",
        "2026-11-25T21:00:00Z",
    )
    .await;
    wait_for(&dkvs, "orders", "the restart taken up", |d| {
        condition_reason(d, types::PROGRESSING, "True").as_deref() == Some(reasons::ROLLING_OUT)
    })
    .await;
    wait_for(&dkvs, "orders", "every member restarted", |d| {
        condition_reason(d, types::PROGRESSING, "False").as_deref() == Some(reasons::CONVERGED)
    })
    .await;

    // The writer's acknowledgements over the last seconds, to tell how old
    // the lost ones were.
    let mut samples: Vec<(Instant, usize)> = Vec::new();
    for _ in 0..50 {
        samples.push((Instant::now(), writer.acknowledged().await));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Every member is lost at once: frozen, its volume wiped, its pod gone.
    let kubelet = env.kubelet().expect("the environment runs a kubelet");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let killed_at = Instant::now();
    for member in ["orders-0", "orders-1", "orders-2"] {
        kubelet.pause_container(NS, member, "etcd").unwrap();
    }
    for member in ["orders-0", "orders-1", "orders-2"] {
        kubelet
            .wipe_volume(NS, &format!("data-{member}"))
            .await
            .unwrap();
        pods.delete(member, &kube::api::DeleteParams::default().grace_period(0))
            .await
            .unwrap();
    }
    let report = writer.stop().await;
    println!(
        "writer: {} acknowledged before the members were lost",
        report.acked.len()
    );

    // The newest point: everything acknowledged up to one interval (plus
    // the upload) before the loss is there.
    dkvs.create(
        &Default::default(),
        &support::cluster(
            NS,
            "newest",
            1,
            image,
            restored(&moto, serde_json::Value::Null),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "newest", 1).await;
    let lost = lost_writes(&client, NS, "newest", &report.acked).await;
    let oldest_lost_age = lost.first().map(|&first| {
        // The first sample that had counted the oldest lost write.
        let acked_at = samples
            .iter()
            .find(|(_, count)| *count as u64 > first)
            .map_or(killed_at, |(at, _)| *at);
        killed_at.saturating_duration_since(acked_at)
    });
    println!(
        "recovery point: {} of {} acknowledged writes lost; the oldest lost was acknowledged {:?} before the members were lost (interval {INTERVAL:?})",
        lost.len(),
        report.acked.len(),
        oldest_lost_age.unwrap_or_default()
    );
    assert!(
        lost.windows(2).all(|w| w[1] == w[0] + 1)
            && lost
                .last()
                .is_none_or(|&l| l + 1 == report.acked.len() as u64),
        "only the newest writes may be lost: {lost:?}"
    );
    // One interval, plus what sealing (a 500 ms tick) and storing the
    // segment take on a loaded machine.
    assert!(
        oldest_lost_age.unwrap_or_default() <= INTERVAL + STORE_ALLOWANCE,
        "lost writes older than one interval and a store: {oldest_lost_age:?}"
    );
    let newest = dkvs.get("newest").await.unwrap();
    let newest_events =
        support::objects_text::<k8s_openapi::api::core::v1::Event>(&client, NS).await;
    assert!(
        newest_events.contains("Replayed"),
        "no Replayed event: {newest_events}"
    );
    assert_eq!(
        condition_reason(&newest, types::AVAILABLE, "True").as_deref(),
        Some(reasons::QUORUM_HEALTHY)
    );

    // Three random revisions and a time: exactly the source's keys and
    // values at that point.
    for (i, (revision, want)) in expected.iter().enumerate() {
        let name = format!("at-revision-{i}");
        dkvs.create(
            &Default::default(),
            &support::cluster(
                NS,
                &name,
                1,
                image,
                restored(&moto, json!({"revision": revision})),
            ),
        )
        .await
        .unwrap();
        let got = restored_state(&client, &dkvs, &name).await;
        assert_eq!(&got, want, "restored to revision {revision}");
        println!("revision {revision}: {} keys equal the source's", got.len());
    }
    dkvs.create(
        &Default::default(),
        &support::cluster(
            NS,
            "at-time",
            1,
            image,
            restored(&moto, json!({"time": between.to_string()})),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        restored_state(&client, &dkvs, "at-time").await,
        at_between,
        "restored to {between}"
    );

    // Before the window: refused with what is reachable; no member starts.
    let too_early = before[0];
    assert!(
        too_early < base_revision,
        "{before:?} vs the base at {base_revision}"
    );
    dkvs.create(
        &Default::default(),
        &support::cluster(
            NS,
            "too-early",
            1,
            image,
            restored(&moto, json!({"revision": too_early})),
        ),
    )
    .await
    .unwrap();
    wait_for(&dkvs, "too-early", "Degraded/RestoreFailed", |d| {
        condition_reason(d, types::DEGRADED, "True").as_deref() == Some(reasons::RESTORE_FAILED)
    })
    .await;
    let refused = dkvs.get("too-early").await.unwrap();
    let message = condition_message(&refused, types::DEGRADED, Some("True"));
    assert!(
        message.contains("before the oldest recoverable point"),
        "{message}"
    );
    let member_pods = pods
        .list(&kube::api::ListParams::default().labels("dkv.io/cluster=too-early"))
        .await
        .unwrap();
    assert!(
        member_pods.items.is_empty(),
        "pods started: {member_pods:?}"
    );

    operator.stop().await;
}

/// To a `file://` destination: while the operator is stopped, etcd compacts
/// the revisions the chain needs; the restarted agent starts a new chain,
/// status shows the gap and a Warning Event says so, and a restore into the
/// gap is refused. A segment corrupted in the store stops a restore that
/// needs it, naming the segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_compaction_gap_starts_a_new_chain_and_a_corrupted_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = format!("file://{}/", dir.path().display());
    let (_env, client, operator) = support::running_operator(NS).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "ledger",
        1,
        IMAGE,
        json!({"backup": {
            "destination": {"uri": uri},
            "schedule": "0 0 1 1 *",
            "continuous": {"enabled": true, "interval": "1s"}
        }}),
    )
    .await;
    wait_settled(&dkvs, "ledger", 1).await;
    let destination = dkv_backup::Location::parse(&uri).unwrap();
    let store = dkv_backup::Store::open(&destination, &Default::default()).unwrap();
    let mut etcd = connect(member_endpoints(&client, NS, "ledger").await)
        .await
        .unwrap();
    let mut last = 0;
    for i in 0..20 {
        last = change(&mut etcd, i).await;
    }
    wait_stored(&store, &destination, NS, "ledger", last).await;

    // The operator is down while the cluster moves on and compacts.
    operator.stop().await;
    let mut unrecorded = Vec::new();
    for i in 20..40 {
        unrecorded.push(change(&mut etcd, i).await);
    }
    let compacted_at = *unrecorded.last().unwrap();
    etcd.compact(
        compacted_at,
        Some(etcd_client::CompactionOptions::new().with_physical()),
    )
    .await
    .unwrap();
    let operator = support::RunningOperator::start(client.clone(), false);

    wait_for(&dkvs, "ledger", "a gap in status.continuousBackup", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| !c.gaps.is_empty())
    })
    .await;
    let window = dkvs
        .get("ledger")
        .await
        .unwrap()
        .status
        .and_then(|s| s.continuous_backup)
        .unwrap();
    let gap = &window.gaps[0];
    assert_eq!(gap.after_revision, last, "{window:?}");
    assert!(gap.until_revision >= compacted_at, "{window:?}");
    let events = support::objects_text::<k8s_openapi::api::core::v1::Event>(&client, NS).await;
    assert!(events.contains("ContinuousBackupGap"), "{events}");
    println!("gap: {gap:?}");

    let mut restore = json!({"uri": uri, "sourceCluster": "ledger"});
    restore["pointInTime"] = json!({"revision": unrecorded[5]});
    dkvs.create(
        &Default::default(),
        &support::cluster(
            NS,
            "in-gap",
            1,
            IMAGE,
            json!({"bootstrap": {"restore": restore}}),
        ),
    )
    .await
    .unwrap();
    let message = wait_restore_refused(&dkvs, "in-gap").await;
    assert!(message.contains("falls in a gap"), "{message}");
    println!("in the gap: {message}");

    // Changes recorded in the new chain, then one of its segments damaged.
    let mut newest = 0;
    for i in 40..50 {
        newest = change(&mut etcd, i).await;
    }
    wait_stored(&store, &destination, NS, "ledger", newest).await;
    let chain_dir = dir
        .path()
        .join(NS)
        .join("ledger")
        .join("continuous")
        .join(window.chain.as_deref().unwrap());
    let mut segments: Vec<_> = std::fs::read_dir(&chain_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.to_string_lossy()
                .ends_with(dkv_backup::continuous::segment::SEGMENT_SUFFIX)
        })
        .collect();
    segments.sort();
    let damaged = segments
        .iter()
        .find(|p| std::fs::metadata(p).unwrap().len() > 40)
        .expect("a segment with events")
        .clone();
    let mut bytes = std::fs::read(&damaged).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&damaged, bytes).unwrap();
    dkvs.create(
        &Default::default(),
        &support::cluster(
            NS,
            "from-damaged",
            1,
            IMAGE,
            json!({"bootstrap": {"restore": {"uri": uri, "sourceCluster": "ledger"}}}),
        ),
    )
    .await
    .unwrap();
    let message = wait_restore_refused(&dkvs, "from-damaged").await;
    let name = damaged.file_name().unwrap().to_string_lossy().into_owned();
    assert!(message.contains(&name), "{message} does not name {name}");
    println!("damaged segment: {message}");

    operator.stop().await;
}
