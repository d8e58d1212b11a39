//! NOSPACE on real etcd: a 3-member cluster with a small backend quota is
//! filled by overwriting a few large keys (the history is what fills it, as
//! in most real cases) until etcd refuses writes with "database space
//! exceeded". The operator compacts, defragments each member and disarms
//! the alarm by itself: writes succeed again, the alarm is gone, an Event
//! and the recovery counter say what happened, and no acknowledged write
//! (the writer's, nor the last value of each large key) is lost. Then live
//! data alone fills the quota: the NOSPACE that comes straight back is not
//! looped on but reported, `Degraded=True, NoSpace`, with the fix.

use std::collections::BTreeMap;
use std::time::Duration;

use dkv_test_support as support;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::json;

use support::etcd_cluster::{
    Writer, assert_no_write_lost, connect, member_endpoints, put_retrying, wait_for, wait_settled,
};

const NS: &str = "nospace";
/// Small enough to fill in seconds, large enough for etcd to start.
const QUOTA: i64 = 16 * 1024 * 1024;
const VALUE_BYTES: usize = 256 * 1024;
const KEYS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_backend_is_compacted_defragmented_and_disarmed_without_losing_a_write() {
    a_full_backend_is_compacted_defragmented_and_disarmed_without_losing_a_write_on(
        "registry.k8s.io/etcd:3.5.16-0",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_7_a_full_backend_is_compacted_defragmented_and_disarmed_without_losing_a_write()
{
    a_full_backend_is_compacted_defragmented_and_disarmed_without_losing_a_write_on(
        "registry.k8s.io/etcd:3.7.3-0",
    )
    .await;
}

async fn a_full_backend_is_compacted_defragmented_and_disarmed_without_losing_a_write_on(
    image: &str,
) {
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, NS).await;
    let (operator, metrics_addr) = support::RunningOperator::start_with_metrics(client.clone());
    let dkvs = support::create_cluster(
        &client,
        NS,
        "full",
        3,
        image,
        json!({"etcd": {"quotaBackendBytes": QUOTA}}),
    )
    .await;
    wait_settled(&dkvs, "full", 3).await;
    let writer = Writer::start(client.clone(), NS, "full");

    // Fill: overwrite KEYS large keys until etcd refuses.
    let mut etcd = connect(member_endpoints(&client, NS, "full").await)
        .await
        .unwrap();
    // What each key may hold: its last acknowledged value, or the value of
    // the put etcd answered NOSPACE to (etcd applies the put that crosses
    // the quota and answers the error after: an error is no proof that
    // nothing was written).
    let mut last: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut refused = None;
    for round in 0..1_000 {
        let key = format!("/fill/{}", round % KEYS);
        let value = format!("{round:06}-{}", "x".repeat(VALUE_BYTES));
        match etcd.put(key.clone(), value.clone(), None).await {
            Ok(_) => {
                last.insert(key, vec![value]);
            }
            Err(e) if e.to_string().contains("database space exceeded") => {
                last.entry(key).or_default().push(value);
                refused = Some(round);
                break;
            }
            Err(e) => panic!("put {key}: {e}"),
        }
    }
    let refused = refused.expect("etcd raises NOSPACE before 1,000 writes of 256 KiB");
    println!("etcd refused write {refused}: database space exceeded (quota {QUOTA} bytes)");

    // The operator notices (within its 30 s health look) and recovers.
    support::eventually(
        "writes accepted again",
        Duration::from_secs(120),
        Duration::from_millis(500),
        async || {
            etcd.put("/after/nospace", "accepted", None)
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let alarms = etcd
        .alarm(
            etcd_client::AlarmAction::Get,
            etcd_client::AlarmType::None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(alarms.alarms().len(), 0, "the alarm is disarmed");

    // What happened is said: an Event on the cluster, and the counter.
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let recovered = support::eventually(
        "a NoSpaceRecovered Event",
        Duration::from_secs(30),
        Duration::from_millis(500),
        async || {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("NoSpaceRecovered"))
        },
    )
    .await;
    let note = recovered.note.unwrap_or_default();
    assert!(
        note.contains("compacted") && note.contains("disarmed"),
        "{note}"
    );
    let (_, text) = support::http::plain_get(metrics_addr, "/metrics")
        .await
        .expect("the operator's metrics");
    assert!(
        text.contains("dkv_nospace_recoveries_total{namespace=\"nospace\",cluster=\"full\"} 1"),
        "{text}"
    );

    // Nothing acknowledged is lost: the writer's keys and the last value of
    // each large key.
    put_retrying(&mut etcd, "/after/marker", "ok").await;
    for (key, allowed) in &last {
        let got = etcd.get(key.as_str(), None).await.unwrap();
        let held = got.kvs().first().map(|kv| kv.value().to_vec());
        assert!(
            held.is_some_and(|held| allowed.iter().any(|v| v.as_bytes() == held.as_slice())),
            "{key} holds its last acknowledged value (or the refused put's)"
        );
    }
    // Live data that fills the quota by itself: a recovery would free
    // nothing, so a NOSPACE that comes straight back is reported with the
    // fix instead of looped on.
    let mut distinct = 0;
    loop {
        let value = "y".repeat(VALUE_BYTES);
        match etcd.put(format!("/live/{distinct:04}"), value, None).await {
            Ok(_) => distinct += 1,
            Err(e) if e.to_string().contains("database space exceeded") => break,
            Err(e) => panic!("put /live/{distinct:04}: {e}"),
        }
        assert!(distinct < 1_000, "etcd raises NOSPACE again");
    }
    println!("NOSPACE again after {distinct} distinct keys of 256 KiB");
    wait_for(&dkvs, "full", "Degraded=True NoSpace, the fix named", |d| {
        support::etcd_cluster::condition_reason(d, "Degraded", "True").as_deref() == Some("NoSpace")
            && support::etcd_cluster::condition_message(d, "Degraded", Some("True"))
                .contains("live data itself fills")
    })
    .await;
    let degraded = dkvs.get("full").await.unwrap();
    println!(
        "{}",
        support::etcd_cluster::condition_message(&degraded, "Degraded", Some("True"))
    );
    let report = writer.stop().await;
    assert_no_write_lost(&client, NS, &report).await;
    operator.stop().await;
}
