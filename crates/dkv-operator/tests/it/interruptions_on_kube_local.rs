//! The pinned operation under interruption, with real etcd on kube-local and
//! a writer whose acknowledged writes are all read back at the end:
//! - the operator killed after a member was added as a learner and before
//!   its promotion: on restart it finishes that step and only then starts
//!   the next, never two at once;
//! - the operator killed in the middle of a rolling upgrade (a member
//!   restarted on the new version): on restart it finishes that member
//!   before touching another;
//! - a spec edit during a scale-up is adopted after the current step.

use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    Observed, Observer, Writer, is_learner, settled_at, wait_for, wait_settled,
};

const V34: &str = "registry.k8s.io/etcd:3.4.23-0";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";

async fn create(client: &Client, ns: &str, size: i32, image: &str) -> Api<DistributedKV> {
    support::create_namespace(client, ns).await;
    support::create_cluster(client, ns, "orders", size, image, json!({})).await
}

async fn set_spec(dkvs: &Api<DistributedKV>, spec: serde_json::Value) {
    support::etcd_cluster::patch_spec(dkvs, "orders", spec).await;
}

/// Asserts that each operation ran as one uninterrupted stretch: no target
/// appears again after another operation started.
fn assert_one_at_a_time(observed: &Observed) {
    for (i, op) in observed.operations.iter().enumerate() {
        assert!(
            !observed.operations[i + 1..].contains(op),
            "{op} was interleaved with another operation: {:?}",
            observed.operations
        );
    }
    assert!(
        observed.max_learners <= 1,
        "at most one learner at a time: {observed:?}"
    );
}

async fn check_writes(client: &Client, ns: &str, writer: Writer) {
    support::etcd_cluster::assert_no_write_lost(client, ns, &writer.stop().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_killed_between_add_and_promote_finishes_the_step_on_restart() {
    const NS: &str = "kill-scale";
    let env = support::environment(true).await;
    let client = env.client();
    let operator = support::RunningOperator::start(client.clone(), false);
    let dkvs = create(&client, NS, 1, V35).await;
    wait_settled(&dkvs, "orders", 1).await;
    let writer = Writer::start(client.clone(), NS, "orders");
    let observer = Observer::start(client.clone(), NS, "orders");

    set_spec(&dkvs, json!({"size": 3})).await;
    // Kill the operator the moment etcd lists orders-1 as a learner.
    let started = Instant::now();
    loop {
        if is_learner(&client, NS, "orders", "orders-1").await == Some(true) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no learner appeared"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    operator.kill().await;
    assert_eq!(
        is_learner(&client, NS, "orders", "orders-1").await,
        Some(true),
        "killed before the promotion"
    );
    let pinned = dkvs.get("orders").await.unwrap().status.unwrap().operation;
    assert_eq!(
        pinned.map(|op| (format!("{:?}", op.kind), op.target)),
        Some(("AddLearner".to_owned(), "orders-1".to_owned())),
        "the step is pinned in status"
    );
    // Nobody promotes it while the operator is down.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        is_learner(&client, NS, "orders", "orders-1").await,
        Some(true)
    );

    let restarted = Instant::now();
    let operator = support::RunningOperator::start(client.clone(), false);
    let took = wait_settled(&dkvs, "orders", 3).await;
    eprintln!(
        "[{NS}] restarted operator -> 3 healthy voters after {took:?} ({:?})",
        restarted.elapsed()
    );
    let observed = observer.stop().await;
    eprintln!("[{NS}] operations: {:?}", observed.operations);
    assert_one_at_a_time(&observed);
    assert_eq!(
        observed.operations.first().map(String::as_str),
        Some("AddLearner/orders-1")
    );
    assert!(
        observed
            .operations
            .iter()
            .any(|op| op.ends_with("/orders-2")),
        "the second member came after the first"
    );
    check_writes(&client, NS, writer).await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_operator_killed_mid_upgrade_finishes_that_member_first() {
    const NS: &str = "kill-upgrade";
    let env = support::environment(true).await;
    let client = env.client();
    let operator = support::RunningOperator::start(client.clone(), false);
    let dkvs = create(&client, NS, 3, V34).await;
    wait_settled(&dkvs, "orders", 3).await;
    let writer = Writer::start(client.clone(), NS, "orders");
    let observer = Observer::start(client.clone(), NS, "orders");

    set_spec(&dkvs, json!({"image": V35})).await;
    // Kill the operator once the first member's pod was restarted on 3.5.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let image = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "etcd"))
            .and_then(|c| c.image.clone())
    };
    let started = Instant::now();
    let target = loop {
        let op = dkvs
            .get("orders")
            .await
            .unwrap()
            .status
            .and_then(|s| s.operation);
        if let Some(op) = op
            && let Ok(pod) = pods.get(&op.target).await
            && image(&pod).as_deref() == Some(V35)
        {
            break op.target;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no member was restarted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    operator.kill().await;
    eprintln!("[{NS}] killed the operator while upgrading {target}");
    tokio::time::sleep(Duration::from_secs(3)).await;

    let restarted = Instant::now();
    let operator = support::RunningOperator::start(client.clone(), false);
    let took = wait_for(&dkvs, "orders", "every member on 3.5", |d| {
        settled_at(d, 3)
            && d.status
                .iter()
                .flat_map(|s| &s.members)
                .all(|m| m.version.as_deref() == Some("3.5.16"))
    })
    .await;
    eprintln!(
        "[{NS}] restarted operator -> upgrade complete after {took:?} ({:?})",
        restarted.elapsed()
    );
    let observed = observer.stop().await;
    eprintln!("[{NS}] operations: {:?}", observed.operations);
    assert_one_at_a_time(&observed);
    let upgrades: Vec<&String> = observed.operations.iter().collect();
    assert_eq!(
        upgrades.first().map(|s| s.as_str()),
        Some(format!("UpgradeMember/{target}").as_str()),
        "the interrupted member is finished first"
    );
    assert_eq!(upgrades.len(), 3, "each member upgraded once: {upgrades:?}");
    check_writes(&client, NS, writer).await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spec_edit_during_a_scale_up_waits_for_the_current_step() {
    const NS: &str = "edit-scale";
    let env = support::environment(true).await;
    let client = env.client();
    let operator = support::RunningOperator::start(client.clone(), false);
    let dkvs = create(&client, NS, 1, V35).await;
    wait_settled(&dkvs, "orders", 1).await;
    let writer = Writer::start(client.clone(), NS, "orders");
    let observer = Observer::start(client.clone(), NS, "orders");

    set_spec(&dkvs, json!({"size": 3})).await;
    let started = Instant::now();
    loop {
        if observer
            .snapshot()
            .await
            .operations
            .first()
            .map(String::as_str)
            == Some("AddLearner/orders-1")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no scale-up started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-step, ask for 5 members instead (and back down would be as valid).
    set_spec(&dkvs, json!({"size": 5})).await;
    let took = wait_settled(&dkvs, "orders", 5).await;
    eprintln!("[{NS}] edited 3 -> 5 mid-step: 5 healthy voters after {took:?}");
    let observed = observer.stop().await;
    eprintln!("[{NS}] operations: {:?}", observed.operations);
    assert_one_at_a_time(&observed);
    let targets: Vec<&str> = observed
        .operations
        .iter()
        .filter_map(|op| op.split('/').nth(1))
        .collect();
    let mut ordered = targets.clone();
    ordered.dedup();
    assert_eq!(
        ordered,
        vec!["orders-1", "orders-2", "orders-3", "orders-4"],
        "members added one at a time, in order: {:?}",
        observed.operations
    );
    check_writes(&client, NS, writer).await;
    operator.stop().await;
}
