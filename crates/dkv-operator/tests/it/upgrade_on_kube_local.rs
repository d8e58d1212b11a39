//! Rolling upgrades of a real 3-member etcd cluster through dkv on
//! kube-local — 3.4 → 3.5.16, 3.4 → 3.5.30, 3.5.16 → 3.5.30 — and the
//! spec edits that roll through the members, each with a writer recording
//! every acknowledged write: every member ends on what the spec asks,
//! leadership changes at most once (the planned MoveLeader before the
//! leader restarts), writes stall for at most a couple of seconds, and
//! nothing acknowledged is lost.

use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use dkv_test_support as support;

use support::etcd_cluster::{
    LeaderMonitor, Writer, annotate, assert_upgrade_kept_serving, member_versions, patch_spec,
    wait_for,
};

pub(crate) const NS: &str = "upgrade";
const V34: &str = "registry.k8s.io/etcd:3.4.23-0";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";
const V3530: &str = "registry.k8s.io/etcd:3.5.30-0";

async fn pod_images(client: &Client) -> Vec<String> {
    let mut images: Vec<String> = support::etcd_cluster::member_images(client, NS)
        .await
        .into_iter()
        .map(|(_, image)| image)
        .collect();
    images.sort();
    images
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_3_4_to_3_5_keeps_the_cluster_serving() {
    upgrade_from_3_4(V35, "3.5.16").await;
}

/// The same from 3.4 to the newest 3.5 patch (Debian unstable's), the
/// release a 3.5 → 3.6 upgrade must start from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rolling_upgrade_3_4_to_3_5_30_keeps_the_cluster_serving() {
    upgrade_from_3_4(V3530, "3.5.30").await;
}

/// A 3-member cluster on 3.4 upgraded to `image` (etcd `version`) under a
/// writer: every member on it, at most one leader change, writes never
/// stalled for long, nothing acknowledged lost.
async fn upgrade_from_3_4(image: &str, version: &str) {
    let (_env, client, operator) = support::running_operator(NS).await;

    let dkvs = support::create_cluster(&client, NS, "orders", 3, V34, json!({})).await;
    let formed = wait_for(&dkvs, "orders", "3 healthy voters on 3.4", |d| {
        support::etcd_cluster::settled_at(d, 3) && member_versions(d).iter().all(|v| v == "3.4.23")
    })
    .await;
    eprintln!("create 3 members on 3.4: {formed:?}");

    let writer = Writer::start(client.clone(), NS, "orders");
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(2)).await;

    let started = Instant::now();
    patch_spec(&dkvs, "orders", json!({"image": image})).await;
    let upgraded = wait_for(&dkvs, "orders", "every member on the new version", |d| {
        support::etcd_cluster::settled_at(d, 3)
            && member_versions(d) == vec![version; 3]
            && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some(version)
    })
    .await;
    eprintln!("rolling upgrade 3.4 -> {version}: {upgraded:?}");
    assert_eq!(
        pod_images(&client).await,
        vec![image; 3],
        "every pod runs {image}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    assert_upgrade_kept_serving(
        &client,
        NS,
        monitor,
        writer,
        &format!("rolling upgrade 3.4 -> {version}"),
        started.elapsed(),
        50,
    )
    .await;

    operator.stop().await;
}

use support::Serving;

async fn serving_cluster(extra_spec: serde_json::Value) -> Serving {
    serving_cluster_on(V35, extra_spec).await
}

/// The same on `image`.
async fn serving_cluster_on(image: &str, extra_spec: serde_json::Value) -> Serving {
    Serving::start(NS, image, extra_spec).await
}

/// What [`RolloutWatch`] saw: the most member pods not Ready (or missing)
/// at one time, and any moment the status said Converged while a pod did
/// not yet run what the spec asks.
#[derive(Debug, Default, Clone)]
pub(crate) struct RolloutSeen {
    most_unready: usize,
    /// The members that were down when `most_unready` was seen.
    down_at_worst: Vec<String>,
    premature_converged: Vec<String>,
}

/// Samples the cluster every 100 ms while a rollout runs. `wanted` says
/// whether a pod runs the spec of generation `generation` or later.
struct RolloutWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<RolloutSeen>,
}

impl RolloutWatch {
    fn start(client: Client, generation: i64, wanted: fn(&Pod) -> bool) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
            let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
            let mut seen = RolloutSeen::default();
            while !flag.load(Ordering::Relaxed) {
                // Status first, pods after: pods only move towards the new
                // spec, so a pod still on the old one was so when status
                // was read.
                let converged = dkvs.get("orders").await.ok().is_some_and(|d| {
                    let status = d.status.unwrap_or_default();
                    status.observed_generation.is_some_and(|g| g >= generation)
                        && status
                            .conditions
                            .iter()
                            .any(|c| c.type_ == "Progressing" && c.reason == "Converged")
                });
                let list = pods
                    .list(&ListParams::default().labels("dkv.io/cluster=orders"))
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                let live: Vec<&Pod> = list
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .collect();
                let ready = live.iter().filter(|p| pod_ready(p)).count();
                let unready = 3usize.saturating_sub(ready);
                if unready > seen.most_unready {
                    seen.most_unready = unready;
                    seen.down_at_worst = (0..3)
                        .map(|i| format!("orders-{i}"))
                        .filter(|name| {
                            !live.iter().any(|p| {
                                p.metadata.name.as_deref() == Some(name.as_str()) && pod_ready(p)
                            })
                        })
                        .collect();
                }
                if converged && !(live.len() == 3 && live.iter().all(|p| wanted(p))) {
                    seen.premature_converged.push(format!(
                        "Converged while pods are {:?}",
                        live.iter()
                            .map(|p| (p.metadata.name.clone(), wanted(p)))
                            .collect::<Vec<_>>()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        });
        Self { stop, task }
    }

    async fn stop(self) -> RolloutSeen {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn etcd_cpu_request(p: &Pod) -> Option<String> {
    let etcd = p
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "etcd")?;
    Some(
        etcd.resources
            .as_ref()?
            .requests
            .as_ref()?
            .get("cpu")?
            .0
            .clone(),
    )
}

/// Watches the rollout of generation `generation` (a pod runs it when
/// `wanted` says so) until the cluster reports it Converged; checks that
/// it was not reported Converged early and that at most one member was
/// down at a time. Returns how long it took, what the watch saw, and the
/// member pods at the end.
pub(crate) async fn rolled_out(
    client: &Client,
    generation: i64,
    wanted: fn(&Pod) -> bool,
    what: &str,
) -> (Duration, RolloutSeen, Vec<Pod>) {
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let watch = RolloutWatch::start(client.clone(), generation, wanted);
    let took = wait_for(&dkvs, "orders", what, |d| converged_at(d, generation)).await;
    let seen = watch.stop().await;
    eprintln!("{what} in {took:?}: {seen:?}");
    assert!(seen.premature_converged.is_empty(), "{seen:?}");
    assert!(seen.most_unready <= 1, "one member at a time: {seen:?}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;
    (took, seen, list)
}

/// Whether the cluster reports Converged for generation `generation` or later.
fn converged_at(d: &DistributedKV, generation: i64) -> bool {
    d.status.as_ref().is_some_and(|s| {
        s.observed_generation.is_some_and(|g| g >= generation)
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Progressing" && c.reason == "Converged")
    }) && support::etcd_cluster::settled_at(d, 3)
}

/// A spec edit that changes what members run (`spec.resources`) and an
/// explicit restart (`dkv.io/restartedAt`) each roll through the members one
/// at a time with a writer running: every pod ends on the new template,
/// never more than one member is down, `Converged` is reported only once
/// every pod runs the edit, leadership moves at most once per rollout, and
/// no acknowledged write is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spec_edit_and_a_restart_request_roll_through_the_members_one_at_a_time() {
    let serving = serving_cluster(json!({"pod": {"labels": {"team": "payments"}}})).await;
    let (client, dkvs) = (serving.client.clone(), serving.dkvs.clone());
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. spec.resources, and a label removed from spec.pod: the
    //    StatefulSet's template changes (OnDelete), and dkv restarts each
    //    member onto it.
    let edited = patch_spec(
        &dkvs,
        "orders",
        json!({
            "resources": {"requests": {"cpu": "200m"}},
            "pod": {"labels": null},
        }),
    )
    .await;
    let generation = edited.metadata.generation.unwrap();
    let watch = RolloutWatch::start(client.clone(), generation, |p| {
        etcd_cpu_request(p).as_deref() == Some("200m")
            && p.metadata
                .labels
                .as_ref()
                .is_none_or(|l| !l.contains_key("team"))
    });
    let took = wait_for(&dkvs, "orders", "the resources edit rolled out", |d| {
        converged_at(d, generation)
    })
    .await;
    let seen = watch.stop().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let list = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;
    assert_eq!(list.len(), 3);
    for pod in &list {
        assert_eq!(
            etcd_cpu_request(pod).as_deref(),
            Some("200m"),
            "{} runs the edit",
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        assert!(
            pod.metadata
                .labels
                .as_ref()
                .is_none_or(|l| !l.contains_key("team")),
            "the label removed from spec.pod left {}",
            pod.metadata.name.as_deref().unwrap_or_default()
        );
    }
    eprintln!("resources edit rolled out in {took:?}: {seen:?}");
    assert_rolled_one_at_a_time(&seen, monitor).await;

    // 2. dkv.io/restartedAt restarts every member the same way.
    let uids: Vec<Option<String>> = list.iter().map(|p| p.metadata.uid.clone()).collect();
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    let edited = annotate(
        &dkvs,
        "orders",
        "dkv.io/restartedAt",
        "2026-11-25T07:00:00Z",
    )
    .await;
    // An annotation is no spec change: the generation stays, so wait for
    // the operator to take the request up before trusting Converged again.
    let generation = edited.metadata.generation.unwrap();
    wait_for(&dkvs, "orders", "the restart taken up", |d| {
        support::etcd_cluster::condition_reason(d, "Progressing", "True").as_deref()
            == Some("RollingOut")
    })
    .await;
    let restarted = |p: &Pod| {
        p.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("dkv.io/restartedAt"))
            .is_some_and(|v| v == "2026-11-25T07:00:00Z")
    };
    let watch = RolloutWatch::start(client.clone(), generation, restarted);
    let took = wait_for(&dkvs, "orders", "every member restarted", |d| {
        converged_at(d, generation)
    })
    .await;
    let seen = watch.stop().await;
    let list = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;
    for pod in &list {
        assert!(
            !uids.contains(&pod.metadata.uid),
            "{} was restarted",
            pod.metadata.name.as_deref().unwrap_or_default()
        );
    }
    eprintln!("restart request rolled out in {took:?}: {seen:?}");
    assert_rolled_one_at_a_time(&seen, monitor).await;

    serving.finish().await;
}

/// Growing `spec.storage.size` grows every member's volume in place (no
/// member restarts), reports `ExpandingVolumes` until each claim has the new
/// capacity and `Converged` only after; the StatefulSet is then re-created
/// with the new claim size over its running pods (adopted, not restarted);
/// the cluster still scales, its new members' volumes of the new size. Where the StorageClass cannot expand (here
/// without the webhook, so the API server refuses the claim), the cluster is
/// `Degraded/VolumeExpansionFailed` and keeps serving. A writer runs
/// throughout; nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn growing_storage_expands_every_member_volume_without_a_restart() {
    let Serving {
        env: _env,
        client,
        operator,
        dkvs,
        writer,
        ..
    } = serving_cluster(json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), NS);
    let uids = |list: &[Pod]| -> Vec<Option<String>> {
        list.iter().map(|p| p.metadata.uid.clone()).collect()
    };
    let before = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;

    let edited = patch_spec(&dkvs, "orders", json!({"storage": {"size": "2Gi"}})).await;
    let generation = edited.metadata.generation.unwrap();
    let capacities = || async {
        let mut out: Vec<(String, String)> = claims
            .list(&ListParams::default().labels("dkv.io/cluster=orders"))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| {
                let capacity = c
                    .status
                    .and_then(|s| s.capacity)
                    .and_then(|c| c.get("storage").map(|q| q.0.clone()))
                    .unwrap_or_default();
                (c.metadata.name.unwrap_or_default(), capacity)
            })
            .collect();
        out.sort();
        out
    };
    let took = wait_for(&dkvs, "orders", "every member volume grown", |d| {
        converged_at(d, generation)
    })
    .await;
    assert_eq!(
        capacities().await,
        (0..3)
            .map(|i| (format!("data-orders-{i}"), "2Gi".to_owned()))
            .collect::<Vec<_>>(),
        "Converged only once every member volume has the new size"
    );
    let after = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;
    assert_eq!(uids(&after), uids(&before), "no member restarted");
    // The StatefulSet's claim template follows, over the running pods
    // (re-created with them orphaned, then adopted).
    let statefulsets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), NS);
    let template_size = || async {
        statefulsets.get("orders").await.ok().and_then(|sts| {
            let template = sts.spec.volume_claim_templates?.into_iter().next()?;
            Some(
                template
                    .spec?
                    .resources?
                    .requests?
                    .get("storage")?
                    .0
                    .clone(),
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while template_size().await.as_deref() != Some("2Gi") {
        assert!(
            Instant::now() < deadline,
            "the claim template still asks for {:?}",
            template_size().await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let sts = statefulsets.get("orders").await.unwrap();
    let adopted = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items;
    assert_eq!(uids(&adopted), uids(&before), "still no member restarted");
    for pod in &adopted {
        assert!(
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == sts.metadata.uid.as_ref()),
            "{:?} belongs to the re-created StatefulSet",
            pod.metadata.name
        );
    }
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("ExpandingVolumes")),
        "the growth was reported while it ran"
    );
    eprintln!("storage 1Gi -> 2Gi on 3 members: {took:?}");

    // Not wedged: the cluster still scales, and the new members get
    // volumes of the new size.
    patch_spec(&dkvs, "orders", json!({"size": 5})).await;
    wait_for(&dkvs, "orders", "5 members, every volume 2Gi", |d| {
        support::etcd_cluster::settled_at(d, 5)
            && support::etcd_cluster::condition_reason(d, "Progressing", "False").as_deref()
                == Some("Converged")
    })
    .await;
    assert!(
        capacities().await.iter().all(|(_, c)| c == "2Gi"),
        "{:?}",
        capacities().await
    );
    let report = writer.stop().await;
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;

    // A class that cannot expand: the claim refuses, the cluster says so
    // and keeps serving.
    let fixed = support::create_cluster(
        &client,
        NS,
        "fixed",
        1,
        V35,
        json!({"storage": {"storageClassName": "fixed-size", "size": "1Gi", "reclaimPolicy": "Delete"}}),
    )
    .await;
    support::etcd_cluster::wait_settled(&fixed, "fixed", 1).await;
    patch_spec(&fixed, "fixed", json!({"storage": {"size": "2Gi"}})).await;
    let refused = wait_for(&fixed, "fixed", "Degraded/VolumeExpansionFailed", |d| {
        support::etcd_cluster::condition_reason(d, "Degraded", "True").as_deref()
            == Some("VolumeExpansionFailed")
    })
    .await;
    let status = fixed.get("fixed").await.unwrap().status.unwrap();
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    assert!(
        degraded
            .message
            .contains("member volume data-fixed-0 cannot grow to 2Gi")
            && degraded
                .message
                .contains("storageclass that provisions the pvc must support resize"),
        "{}",
        degraded.message
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True"),
        "still serving: {:?}",
        status.conditions
    );
    eprintln!("fixed-size class refused after {refused:?}");
    operator.stop().await;
}

/// An upgrade (3.5.30 → 3.6.5, a step etcd allows) to an image that cannot be
/// pulled (no etcd 3.6 binary exists on this machine, so kube-local's kubelet
/// backs off as from a failed pull) stops at the first member: the cluster is `Degraded/ImagePullFailed`
/// naming that pod and quoting its status, the two other members keep
/// serving on 3.5 untouched, and the cluster stays Available.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_that_cannot_be_pulled_stops_the_rollout_and_says_which_pod() {
    let serving = serving_cluster_on(V3530, json!({})).await;
    let (client, dkvs) = (serving.client.clone(), serving.dkvs.clone());
    patch_spec(
        &dkvs,
        "orders",
        json!({"image": "registry.k8s.io/etcd:3.6.5-0"}),
    )
    .await;
    let failed = wait_for(&dkvs, "orders", "Degraded/ImagePullFailed", |d| {
        support::etcd_cluster::condition_reason(d, "Degraded", "True").as_deref()
            == Some("ImagePullFailed")
    })
    .await;
    let cluster = dkvs.get("orders").await.unwrap();
    let status = cluster.status.clone().unwrap();
    let degraded = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded")
        .unwrap();
    // The rollout stopped at the first member it restarted (a follower):
    // exactly one pod runs the new image, and it is the one named.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let mut tried = Vec::new();
    for member in ["orders-0", "orders-1", "orders-2"] {
        let pod = pods.get(member).await.unwrap();
        let image = pod
            .spec
            .as_ref()
            .unwrap()
            .containers
            .iter()
            .find(|c| c.name == "etcd")
            .and_then(|c| c.image.clone());
        if image.as_deref() == Some(V3530) {
            assert!(pod_ready(&pod), "{member} untouched and still Ready");
        } else {
            tried.push(member);
        }
    }
    assert_eq!(tried.len(), 1, "one member at a time: {tried:?}");
    assert!(
        degraded
            .message
            .starts_with(&format!("pod {}, container etcd: ", tried[0]))
            && (degraded.message.contains("ImagePullBackOff")
                || degraded.message.contains("ErrImagePull")),
        "{}",
        degraded.message
    );
    assert!(
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True"),
        "two of three members still serve: {:?}",
        status.conditions
    );
    eprintln!(
        "image pull failure reported after {failed:?}: {}",
        degraded.message
    );
    serving.finish().await;
}

/// A patch-level upgrade between two real etcd releases (3.5.16 from
/// Debian trixie to 3.5.30 from Debian unstable) under a writer: every
/// member restarts onto 3.5.30 one at a time and etcd itself reports
/// 3.5.30 for each; at most one leader change; nothing acknowledged lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_patch_upgrade_3_5_16_to_3_5_30_keeps_the_cluster_serving() {
    let serving = serving_cluster(json!({})).await;
    let (client, dkvs) = (serving.client.clone(), serving.dkvs.clone());
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    let target = V3530;
    patch_spec(&dkvs, "orders", json!({"image": target})).await;
    let took = wait_for(&dkvs, "orders", "every member on 3.5.30", |d| {
        support::etcd_cluster::settled_at(d, 3)
            && member_versions(d) == vec!["3.5.30"; 3]
            && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.30")
    })
    .await;
    assert_eq!(pod_images(&client).await, vec![target; 3]);
    let (leaders, _) = monitor.stop().await;
    eprintln!("3.5.16 -> 3.5.30 in {took:?}; leaders {leaders:x?}");
    assert!(
        leaders.len() <= 2,
        "at most one leader change (the planned MoveLeader): {leaders:x?}"
    );
    serving.finish().await;
}

/// What changing a spec field does (the README's "Changing a cluster").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The members restart onto the new pod template one at a time.
    RollingRestart,
    /// Applied without restarting any member: membership, volumes, the
    /// backup CronJob, or settings read at deletion or quorum loss.
    InPlace,
    /// Fixed at creation: the CRD's rules refuse any change at admission.
    Immutable,
    /// Every member stops, its data kept, or starts again on it
    /// (`hibernation_on_kube_local.rs`).
    StopsMembers,
}

/// Every field of `spec`, by path prefix; the longest prefix that matches a
/// field decides. A field added to the API without a line here fails
/// `every_spec_field_says_what_changing_it_does`.
const CHANGES: &[(&str, Change)] = &[
    ("spec.size", Change::InPlace),
    ("spec.image", Change::RollingRestart),
    ("spec.version", Change::RollingRestart),
    ("spec.resources", Change::RollingRestart),
    ("spec.pod", Change::RollingRestart),
    ("spec.etcd", Change::RollingRestart),
    ("spec.storage.size", Change::InPlace),
    ("spec.storage.reclaimPolicy", Change::InPlace),
    ("spec.storage.storageClassName", Change::Immutable),
    ("spec.bootstrap", Change::Immutable),
    ("spec.tls", Change::Immutable),
    // Turned on in place; turning it off is refused at admission.
    ("spec.auth", Change::InPlace),
    ("spec.recovery", Change::InPlace),
    ("spec.backup", Change::InPlace),
    // Read by the operator's scheduled defragmentation; no restart.
    ("spec.maintenance", Change::InPlace),
    // Read while a rollout runs; no restart.
    ("spec.rollout", Change::InPlace),
    ("spec.hibernation", Change::StopsMembers),
    // Promotion (true -> false) and demotion (false -> true, or added to
    // a running cluster), the source changing only with a demotion: no
    // member restarts.
    ("spec.standby.enabled", Change::InPlace),
    ("spec.standby.source", Change::InPlace),
];

/// Whether `prefix` names `field` or an object or list it sits in.
fn covers(prefix: &str, field: &str) -> bool {
    field == prefix
        || field
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

fn change_of(field: &str) -> Option<Change> {
    CHANGES
        .iter()
        .filter(|(prefix, _)| covers(prefix, field))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, change)| *change)
}

/// The leaf fields of `spec` in the v1beta1 schema of the CRD dkv
/// installs: objects are walked into, lists through their items (`[]`);
/// scalars and maps are leaves.
fn spec_leaves() -> Vec<String> {
    use kube::CustomResourceExt;
    fn walk(node: &serde_json::Value, path: String, out: &mut Vec<String>) {
        if let Some(properties) = node.get("properties").and_then(|p| p.as_object()) {
            for (name, child) in properties {
                walk(child, format!("{path}.{name}"), out);
            }
        } else if node.get("type").and_then(|t| t.as_str()) == Some("array") {
            match node.get("items") {
                Some(items) if items.get("properties").is_some() => {
                    walk(items, format!("{path}[]"), out)
                }
                _ => out.push(format!("{path}[]")),
            }
        } else {
            out.push(path);
        }
    }
    let crd = serde_json::to_value(DistributedKV::crd()).unwrap();
    let version = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "v1beta1")
        .unwrap()
        .clone();
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut leaves = Vec::new();
    walk(spec, "spec".to_owned(), &mut leaves);
    leaves
}

#[test]
fn every_spec_field_says_what_changing_it_does() {
    let leaves = spec_leaves();
    assert!(
        leaves.len() > 100 && leaves.iter().any(|l| l == "spec.etcd.quotaBackendBytes"),
        "the walk reached the spec's fields: {leaves:?}"
    );
    let unclassified: Vec<&String> = leaves.iter().filter(|l| change_of(l).is_none()).collect();
    assert!(
        unclassified.is_empty(),
        "say in CHANGES (and in the README's \"Changing a cluster\") what changing these does: {unclassified:?}"
    );
    for (prefix, _) in CHANGES {
        assert!(
            leaves.iter().any(|l| covers(prefix, l)),
            "{prefix} names no field of the spec any more"
        );
    }
    // The README's table says the same of every line.
    let readme = std::fs::read_to_string(support::repo_root().join("README.md")).unwrap();
    for (prefix, _) in CHANGES {
        assert!(
            readme.contains(&format!("`{prefix}")),
            "the README's \"Changing a cluster\" table does not mention {prefix}"
        );
    }
}

/// The quota every member is given by the rolling-restart edit below.
const NEW_QUOTA: i64 = 3 * 1024 * 1024 * 1024;

fn runs_new_quota(p: &Pod) -> bool {
    member_init_has(p, &format!("--quota-backend-bytes={NEW_QUOTA}"))
}

/// Whether an init container of pod `p` (member-init) has argument `arg`.
pub(crate) fn member_init_has(p: &Pod, arg: &str) -> bool {
    p.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.args.iter().flatten().any(|a| a == arg))
}

/// The quota etcd itself reports running with (`/metrics` of the member).
async fn running_quota(pod: &Pod) -> Option<i64> {
    let ip: std::net::IpAddr = pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok()?;
    let (_, body) = support::http::plain_get((ip, 2379).into(), "/metrics").await?;
    body.lines()
        .find_map(|l| l.strip_prefix("etcd_server_quota_backend_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as i64)
}

/// Writes of what the operator manages (kube-local's kubelet heartbeats
/// and pod status are not the operator's), by verb and resource.
fn operator_writes(counts: &kube_local::api_traffic::RequestCounts) -> Vec<String> {
    const MANAGED: [&str; 12] = [
        "distributedkvs",
        "distributedkvs/status",
        "statefulsets",
        "services",
        "poddisruptionbudgets",
        "configmaps",
        "secrets",
        "cronjobs",
        "persistentvolumeclaims",
        "pods",
        "events",
        "distributedkvbackups",
    ];
    counts
        .iter()
        .filter(|(verb, resource, n)| verb.is_write() && *n > 0 && MANAGED.contains(resource))
        .map(|(verb, resource, n)| format!("{} {resource}: {n}", verb.as_str()))
        .collect()
}

/// An API error's code and message.
fn refusal(result: Result<DistributedKV, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected the edit to be refused, got {other:?}"),
    }
}

/// One representative edit of each kind in [`CHANGES`], on a live
/// 3-member cluster with a writer and the admission webhooks running, as
/// `dkv local up` runs them:
/// - fixed at creation (`spec.storage.storageClassName`, `spec.bootstrap`,
///   `spec.tls`): refused, naming the field, and nothing changes;
/// - refused at admission (a scale below quorum, a shrink): the same;
/// - in place (`spec.recovery`, `spec.storage.reclaimPolicy`): the status
///   describes the new generation as Converged and no member restarted;
/// - rolling restart (`spec.etcd.quotaBackendBytes`): every member's etcd
///   reports the new quota, Converged only once every pod runs it, one
///   member down at a time, at most one leader change;
///
/// then no write by the operator in the 30 s after convergence; the cluster
/// still scales 3 → 5 → 3; no acknowledged write lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_edit_of_every_kind_does_what_the_table_says() {
    let (env, client, operator) = support::running_operator_with_webhooks(NS).await;
    // Plaintext (the webhook would default TLS on), so that the test reads
    // each member's /metrics as it is.
    let dkvs = support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        V35,
        json!({"tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}}}),
    )
    .await;
    support::etcd_cluster::wait_settled(&dkvs, "orders", 3).await;
    let writer = Writer::start(client.clone(), NS, "orders");
    let generation_now = |d: &DistributedKV| d.metadata.generation.unwrap();
    let before = dkvs.get("orders").await.unwrap();

    // Fixed at creation, and refused at admission.
    for (edit, field) in [
        (
            json!({"spec": {"storage": {"storageClassName": "fixed-size"}}}),
            "storage.storageClassName",
        ),
        (
            json!({"spec": {"bootstrap": {"restore": {"backupName": "nightly"}}}}),
            "spec.bootstrap",
        ),
        (
            json!({"spec": {"tls": {"peer": {"mode": "Auto"}}}}),
            "spec.tls",
        ),
        (json!({"spec": {"size": 1}}), "spec.size"),
        (
            json!({"spec": {"storage": {"size": "512Mi"}}}),
            "storage.size",
        ),
    ] {
        let (code, message) = refusal(
            dkvs.patch("orders", &PatchParams::default(), &Patch::Merge(&edit))
                .await,
        );
        assert!(
            (code == 422 || code == 400 || code == 403) && message.contains(field),
            "{edit} refused naming {field}: {code} {message}"
        );
    }
    assert_eq!(
        generation_now(&dkvs.get("orders").await.unwrap()),
        generation_now(&before),
        "no refused edit was stored"
    );

    // In place: no member restarts, and the status describes the edit.
    let runs = support::etcd_cluster::member_runs(&client, NS).await;
    let edited = patch_spec(
        &dkvs,
        "orders",
        json!({
            "recovery": {"policy": "ForceNewCluster", "afterSeconds": 120},
            "storage": {"reclaimPolicy": "Retain"},
        }),
    )
    .await;
    let generation = generation_now(&edited);
    wait_for(&dkvs, "orders", "the in-place edit described", |d| {
        converged_at(d, generation)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        support::etcd_cluster::member_runs(&client, NS).await,
        runs,
        "no member restarted"
    );

    // Rolling restart: an etcd setting reaches every running member.
    let monitor = LeaderMonitor::start(client.clone(), NS, "orders");
    let edited = patch_spec(
        &dkvs,
        "orders",
        json!({"etcd": {"quotaBackendBytes": NEW_QUOTA}}),
    )
    .await;
    let generation = generation_now(&edited);
    let (_, _, rolled) =
        rolled_out(&client, generation, runs_new_quota, "the quota rolled out").await;
    let (leaders, _) = monitor.stop().await;
    for pod in rolled {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert!(runs_new_quota(&pod), "{name} runs the new template");
        assert_eq!(
            running_quota(&pod).await,
            Some(NEW_QUOTA),
            "etcd of {name} runs with the new quota"
        );
    }
    assert!(
        leaders.len() <= 2,
        "at most one leader change per rollout: {leaders:x?}"
    );

    // Converged means done: the operator writes nothing more.
    let quiet_from = env.requests();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let writes = operator_writes(&env.requests().since(&quiet_from));
    assert!(
        writes.is_empty(),
        "writes in the 30 s after convergence: {writes:?}"
    );

    // No edit wedged the cluster: it still scales 3 → 5 → 3.
    for size in [5, 3] {
        patch_spec(&dkvs, "orders", json!({"size": size})).await;
        let generation = generation_now(&dkvs.get("orders").await.unwrap());
        wait_for(&dkvs, "orders", &format!("{size} members"), |d| {
            support::etcd_cluster::settled_at(d, size)
                && d.status
                    .as_ref()
                    .is_some_and(|s| s.observed_generation == Some(generation))
                && support::etcd_cluster::condition_reason(d, "Progressing", "False").as_deref()
                    == Some("Converged")
        })
        .await;
    }

    let report = writer.stop().await;
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
    operator.stop().await;
}

/// A rollout that never reported Converged early, took at most one member
/// down at a time and changed the leader at most once.
async fn assert_rolled_one_at_a_time(seen: &RolloutSeen, monitor: LeaderMonitor) {
    assert!(seen.premature_converged.is_empty(), "{seen:?}");
    assert!(seen.most_unready <= 1, "one member at a time: {seen:?}");
    let (leaders, _) = monitor.stop().await;
    assert!(
        leaders.len() <= 2,
        "at most one leader change per rollout: {leaders:x?}"
    );
}
