//! A member whose data really differs from its peers', on kube-local with
//! real etcd (3.5 and 3.4) and a writer counting every acknowledged write:
//! - the member is stopped (its node cordoned, its pod deleted: the new pod
//!   waits Pending, as its volume is bound to the node), one value in its
//!   bbolt `key` bucket is changed at the same revisions (`bbolt-poke`),
//!   and it is started again;
//! - etcd's corruption checks (on in every member; the periodic one every
//!   5 s here) find it: the leader raises the CORRUPT alarm (the initial
//!   check, which would refuse it at start, compares nothing on a member
//!   without a raft snapshot on disk, as here: it knows its peers only from
//!   one). etcd 3.5 raises the alarm on member 0; dkv finds the member by
//!   comparing the members' hashes, and says so: `Degraded/MemberCorrupt`
//!   naming it, nothing done (etcd refuses reads and writes meanwhile);
//!   a real Prometheus with the shipped rules fires `DkvMemberCorrupt` (and
//!   `DkvCorruptAlarm` on the alarm) naming it;
//! - with `spec.recovery.corruptMember: Replace` the member is replaced from
//!   its healthy peers (removed, the alarm disarmed once the others agree,
//!   its data moved aside on its volume, added as an empty learner,
//!   promoted): 3/3 healthy, its value as the peers have it, no
//!   acknowledged write lost.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    Writer, condition_message, condition_reason, connect, member_endpoint, member_endpoints,
    patch_spec, put_retrying, settled_at, wait_for, wait_settled,
};
use support::prometheus::{self, Prometheus};

const VICTIM: &str = "orders-1";
const PROBE_KEY: &str = "corruption-probe";
const PROBE_VALUE: &str = "the value every member agrees on";

fn member_id(d: &DistributedKV, name: &str) -> Option<String> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .find(|m| m.name == name)
        .and_then(|m| m.id.clone())
}

/// The host directory of the volume bound to `claim` in namespace `ns`.
pub(crate) async fn volume_dir(client: &Client, ns: &str, claim: &str) -> PathBuf {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get(claim)
        .await
        .unwrap();
    let pv_name = pvc.spec.and_then(|s| s.volume_name).unwrap();
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get(&pv_name)
        .await
        .unwrap();
    kube_local::kubelet::volumes::volume_path(&pv).unwrap()
}

/// The node member `pod` runs on.
async fn node_of(pods: &Api<Pod>, pod: &str) -> String {
    pods.get(pod)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .unwrap()
}

/// The termination message of the etcd container's current or last run.
fn etcd_termination(pod: &Pod) -> String {
    pod.status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .filter(|c| c.name == "etcd")
        .flat_map(|c| [c.state.as_ref(), c.last_state.as_ref()])
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .filter_map(|t| t.message.clone())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_whose_data_differs_is_refused_reported_and_replaced_by_policy() {
    corrupt_member_found_and_replaced(
        "corrupt-member",
        "registry.k8s.io/etcd:3.5.16-0",
        json!({}),
        FoundBy::Alarm,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_4_a_member_whose_data_differs_is_reported_and_replaced_by_policy() {
    corrupt_member_found_and_replaced(
        "corrupt-member-34",
        "registry.k8s.io/etcd:3.4.23-0",
        json!({}),
        FoundBy::Alarm,
    )
    .await;
}

/// With a raft snapshot on the member's disk (a small `snapshotCount`),
/// etcd's initial check knows its peers and refuses to start it: the
/// others keep serving, and the member is named and replaced the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_a_raft_snapshot_on_disk_the_initial_check_refuses_the_member_at_start() {
    corrupt_member_found_and_replaced(
        "corrupt-member-initial",
        "registry.k8s.io/etcd:3.5.16-0",
        json!({"snapshotCount": 50}),
        FoundBy::InitialCheck,
    )
    .await;
}

/// Which of etcd's checks the scenario expects to find the member.
#[derive(Debug, PartialEq, Eq)]
enum FoundBy {
    Alarm,
    InitialCheck,
}

/// The scenario of the module documentation, in namespace `ns` with etcd
/// image `image` and `etcd` added to `spec.etcd`; `found_by` is the check
/// expected to find the member.
async fn corrupt_member_found_and_replaced(
    ns: &str,
    image: &str,
    etcd: serde_json::Value,
    found_by: FoundBy,
) {
    let poke = support::paths::bbolt_poke();
    let env = support::environment(true).await;
    let client = env.client();
    support::create_namespace(&client, ns).await;
    let (operator, metrics) = support::RunningOperator::start_with_metrics(client.clone());
    let mut etcd_spec = json!({"corruptCheckInterval": "5s"});
    if let (Some(spec), Some(extra)) = (etcd_spec.as_object_mut(), etcd.as_object()) {
        spec.extend(extra.clone());
    }
    let dkvs = support::create_cluster(
        &client,
        ns,
        "orders",
        3,
        image,
        json!({ "etcd": etcd_spec }),
    )
    .await;
    let formed = wait_settled(&dkvs, "orders", 3).await;
    eprintln!("[{ns}] 3 healthy voters after {formed:?}");
    // A real Prometheus evaluates the shipped alerts on the operator's
    // metrics throughout.
    let dir = tempfile::tempdir().unwrap();
    let rules = prometheus::rules_file(dir.path(), &[], "");
    let config = prometheus::config_file(dir.path(), &rules, metrics.port(), &[]);
    let prometheus = Prometheus::start(dir.path(), &config);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let old_id = member_id(&dkvs.get("orders").await.unwrap(), VICTIM).unwrap();

    let mut etcd = connect(member_endpoints(&client, ns, "orders").await)
        .await
        .unwrap();
    // More entries than a small snapshotCount: such members write a raft
    // snapshot (the initial check then knows their peers).
    for i in 0..120 {
        put_retrying(&mut etcd, &format!("filler/{i:03}"), "x").await;
    }
    put_retrying(&mut etcd, PROBE_KEY, PROBE_VALUE).await;
    // The victim has applied it before it stops.
    let victim_endpoint = member_endpoint(&client, ns, VICTIM).await.unwrap();
    support::eventually(
        "the victim holds the probe",
        Duration::from_secs(30),
        Duration::from_millis(200),
        async || {
            let mut member = connect(vec![victim_endpoint.clone()]).await?;
            let got = member
                .get(
                    PROBE_KEY,
                    Some(etcd_client::GetOptions::new().with_serializable()),
                )
                .await
                .ok()?;
            got.kvs()
                .first()
                .is_some_and(|kv| kv.value() == PROBE_VALUE.as_bytes())
                .then_some(())
        },
    )
    .await;

    let writer = Writer::start(client.clone(), ns, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Stop the victim: its node cordoned, its pod deleted; the new pod
    // cannot be scheduled (its volume is bound to that node).
    let started = Instant::now();
    let node = node_of(&pods, VICTIM).await;
    support::kubectl(&env, &["cordon", &node]);
    let old_uid = pods.get(VICTIM).await.unwrap().uid();
    pods.delete(VICTIM, &DeleteParams::default()).await.unwrap();
    support::eventually(
        "the victim stopped (a new pod, Pending)",
        Duration::from_secs(60),
        Duration::from_millis(200),
        async || {
            let pod = pods.get(VICTIM).await.ok()?;
            let pending = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
            (pod.uid() != old_uid && pending).then_some(())
        },
    )
    .await;

    // Its data now differs from its peers' at the same revisions.
    let volume = volume_dir(&client, ns, &format!("data-{VICTIM}")).await;
    let db = volume.join("data/member/snap/db");
    let out = std::process::Command::new(&poke)
        .arg(&db)
        .arg(PROBE_KEY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bbolt-poke {}: {}{}",
        db.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "[{ns}] {VICTIM} stopped after {:?}; {}",
        started.elapsed(),
        String::from_utf8_lossy(&out.stdout).trim()
    );
    support::kubectl(&env, &["uncordon", &node]);

    // etcd's checks find it; the cluster names it.
    let reported = wait_for(
        &dkvs,
        "orders",
        "Degraded/MemberCorrupt naming the victim",
        |d| {
            condition_reason(d, "Degraded", "True").as_deref() == Some("MemberCorrupt")
                && condition_message(d, "Degraded", Some("True")).contains(VICTIM)
        },
    )
    .await;
    let message = condition_message(&dkvs.get("orders").await.unwrap(), "Degraded", Some("True"));
    eprintln!("[{ns}] reported {reported:?} after the restart: {message}");
    assert!(message.contains("corruptMember: Replace"), "{message}");
    let alarmed = message.contains("CORRUPT alarm");
    let refused = message.contains("initial corruption check");
    assert!(alarmed || refused, "{message}");
    if found_by == FoundBy::InitialCheck {
        assert!(refused, "found by the initial check: {message}");
    }
    if refused {
        let refusal = etcd_termination(&pods.get(VICTIM).await.unwrap());
        assert!(
            refusal.contains("found data inconsistency with peers"),
            "etcd's own words: {refusal}"
        );
    }
    if alarmed {
        // etcd's own record of it: the CORRUPT alarm (asked of a peer: the
        // victim's pod may be between runs).
        let raised: Vec<String> = support::eventually(
            "etcd's alarm list",
            Duration::from_secs(30),
            Duration::from_millis(500),
            async || {
                let endpoint = member_endpoint(&client, ns, "orders-0").await?;
                let mut peer = connect(vec![endpoint]).await?;
                let alarms = peer
                    .alarm(
                        etcd_client::AlarmAction::Get,
                        etcd_client::AlarmType::None,
                        None,
                    )
                    .await
                    .ok()?;
                Some(
                    alarms
                        .alarms()
                        .iter()
                        .map(|a| format!("{:x}/{:?}", a.member_id(), a.alarm()))
                        .collect::<Vec<_>>(),
                )
            },
        )
        .await;
        // etcd 3.5 raises it on member 0; dkv found the victim by comparing
        // the members' hashes.
        eprintln!("[{ns}] etcd's alarms: {raised:?}");
        assert!(raised.iter().any(|a| a.ends_with("/Corrupt")), "{raised:?}");
        // What DkvCorruptAlarm fires on, from that alarm, naming the member.
        let series = format!(
            "dkv_cluster_alarm{{namespace=\"{ns}\",cluster=\"orders\",member=\"{VICTIM}\",alarm=\"CORRUPT\"}} 1"
        );
        support::eventually(
            "the operator's dkv_cluster_alarm names the victim",
            Duration::from_secs(30),
            Duration::from_millis(500),
            async || {
                let (_, text) = support::http::plain_get(metrics, "/metrics").await?;
                text.contains(&series).then_some(())
            },
        )
        .await;
    }
    // The shipped alert names the member: DkvMemberCorrupt on either
    // path, DkvCorruptAlarm too while etcd's alarm is active.
    let firing = support::eventually(
        "DkvMemberCorrupt firing for the victim",
        Duration::from_secs(60),
        Duration::from_millis(500),
        async || {
            let firing = prometheus.firing("orders").await;
            firing
                .contains(&("DkvMemberCorrupt".to_owned(), VICTIM.to_owned()))
                .then_some(firing)
        },
    )
    .await;
    eprintln!("[{ns}] firing: {firing:?}");
    if alarmed {
        support::eventually(
            "DkvCorruptAlarm firing for the victim",
            Duration::from_secs(60),
            Duration::from_millis(500),
            async || {
                let firing = prometheus.firing("orders").await;
                firing
                    .contains(&("DkvCorruptAlarm".to_owned(), VICTIM.to_owned()))
                    .then_some(())
            },
        )
        .await;
    }
    // Report only: nothing is done about it.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let d = dkvs.get("orders").await.unwrap();
        assert!(
            d.status.as_ref().is_some_and(|s| s.operation.is_none()),
            "no operation without the policy"
        );
        assert_eq!(member_id(&d, VICTIM).as_deref(), Some(old_id.as_str()));
    }

    // With the policy, the victim is replaced from its peers.
    let replacing = Instant::now();
    patch_spec(
        &dkvs,
        "orders",
        json!({"recovery": {"corruptMember": "Replace"}}),
    )
    .await;
    wait_for(&dkvs, "orders", "the victim being replaced", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.operation.as_ref())
            .is_some_and(|op| format!("{:?}", op.kind) == "ReplaceMember" && op.target == VICTIM)
    })
    .await;
    let healed = wait_for(
        &dkvs,
        "orders",
        "3 healthy voters, the victim replaced",
        |d| {
            settled_at(d, 3)
                && member_id(d, VICTIM).is_some_and(|id| id != old_id)
                && condition_reason(d, "Degraded", "False").is_some()
        },
    )
    .await;
    eprintln!(
        "[{ns}] replaced {healed:?} after the policy was set ({:?} after its restart)",
        replacing.elapsed() + reported
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = writer.stop().await;
    // Replaced: the corruption alerts resolve.
    support::eventually(
        "the corruption alerts resolved",
        Duration::from_secs(60),
        Duration::from_millis(500),
        async || {
            let firing = prometheus.firing("orders").await;
            (!firing
                .iter()
                .any(|(alert, _)| alert == "DkvMemberCorrupt" || alert == "DkvCorruptAlarm"))
            .then_some(())
        },
    )
    .await;

    // Its old data was moved aside on its volume, not deleted.
    let aside: Vec<PathBuf> = std::fs::read_dir(&volume)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("data.before-replace-"))
        })
        .collect();
    assert_eq!(
        aside.len(),
        1,
        "{:?}",
        std::fs::read_dir(&volume)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .collect::<Vec<_>>()
    );
    assert!(aside[0].join("member/snap/db").is_file());
    // Every member now holds the value its peers agreed on.
    for pod in ["orders-0", "orders-1", "orders-2"] {
        let endpoint = member_endpoint(&client, ns, pod).await.unwrap();
        let mut member = connect(vec![endpoint]).await.unwrap();
        let got = member
            .get(
                PROBE_KEY,
                Some(etcd_client::GetOptions::new().with_serializable()),
            )
            .await
            .unwrap();
        assert_eq!(
            got.kvs().first().map(|kv| kv.value().to_vec()),
            Some(PROBE_VALUE.as_bytes().to_vec()),
            "{pod}"
        );
    }
    eprintln!(
        "[{ns}] writer: {} acknowledged, {} failed attempts, longest gap {:?}",
        report.acked.len(),
        report.failures,
        report.longest_gap
    );
    support::etcd_cluster::assert_no_write_lost(&client, ns, &report).await;
    operator.stop().await;
}
