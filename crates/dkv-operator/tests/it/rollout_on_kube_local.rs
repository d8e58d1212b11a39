//! Rollouts that fail (`spec.rollout`), on a real 3-member etcd cluster
//! through dkv on kube-local, each under a writer recording every
//! acknowledged write: a member restarted onto a spec that never serves —
//! an image that cannot be pulled, a binary that exits at start, an etcd
//! setting etcd refuses — is moved
//! back onto the spec that last ran on every member under `onFailure:
//! Rollback` (the user's spec untouched, `Progressing=False/RolledBack`
//! naming the pod, an Event, `Degraded` until the next edit, which rolls out
//! as usual); under `Pause` (the default) the rollout stops there and
//! says the deadline passed. Nothing acknowledged is lost.

use std::time::Duration;

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::json;

use dkv_test_support as support;

use support::Serving;
use support::etcd_cluster::{
    condition_message, condition_reason, last_good_image, member_images, patch_spec, settled_at,
    wait_for,
};

const NS: &str = "rollout";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";
const V3530: &str = "registry.k8s.io/etcd:3.5.30-0";
/// A registry that does not exist (a patch release of 3.5 by its tag, an
/// upgrade the spec allows): kube-local's kubelet maps no image of it and
/// reports `ErrImagePull`/`ImagePullBackOff`, as a kubelet does for an
/// image it cannot pull.
const UNPULLABLE: &str = "registry.invalid/etcd:3.5.30-0";
/// An image that does not hold the etcd it claims: kube-local maps dkv's own
/// image to the dkv binary's directory, which holds no etcd, so the
/// container's `etcd` command runs whatever the PATH holds (etcd 3.4 on the
/// test machines) or nothing: the member's container fails at every start
/// (3.4 mostly exits on a 3.5 cluster's data), or the 3.4 member joins and
/// serves on another minor line than the spec says. Its tag is no version:
/// the edit says `spec.version: 3.5.30`, what the cluster runs.
const NOT_ETCD: &str = "ghcr.io/dkv-io/dkv:not-etcd";

/// A settled 3-member cluster `orders` on `image` with `spec.rollout:
/// rollout`, its spec recorded as the last good one, and a writer started.
async fn serving(image: &str, rollout: serde_json::Value) -> Serving {
    let serving = Serving::start(NS, image, json!({"rollout": rollout})).await;
    // The spec that ran on every member is recorded once it converged.
    wait_for(
        &serving.dkvs,
        "orders",
        "the last good spec recorded",
        |d| last_good_image(d).as_deref() == Some(image),
    )
    .await;
    serving
}

fn generation(d: &DistributedKV) -> i64 {
    d.metadata.generation.unwrap_or_default()
}

/// The members that run `image`.
async fn running(client: &Client, image: &str) -> Vec<String> {
    member_images(client, NS)
        .await
        .into_iter()
        .filter(|(_, i)| i == image)
        .map(|(name, _)| name)
        .collect()
}

/// Edits the image to `bad` (with the rest of `edit`), whose member never
/// serves, and checks the
/// rollback: the member that tried it returns to `good`, one member at a
/// time; the spec stays `bad`; Progressing and Degraded say `RolledBack`
/// naming the pod and quoting `why`; an Event says so. Returns the pod.
async fn rolled_back_from(
    serving: &Serving,
    good: &str,
    bad: &str,
    mut edit: serde_json::Value,
    why: &[&str],
) -> String {
    let (client, dkvs) = (&serving.client, &serving.dkvs);
    edit["image"] = json!(bad);
    patch_spec(dkvs, "orders", edit).await;
    // One member tries the new image and never serves; past the 30 s
    // deadline dkv rolls back.
    let took = wait_for(dkvs, "orders", "Progressing=False/RolledBack", |d| {
        condition_reason(d, "Progressing", "False").as_deref() == Some("RolledBack")
    })
    .await;
    let cluster = dkvs.get("orders").await.unwrap();
    let status = cluster.status.clone().unwrap();
    let rolled_back = status
        .rollout
        .as_ref()
        .and_then(|r| r.rolled_back.clone())
        .expect("status.rollout.rolledBack");
    assert_eq!(rolled_back.generation, generation(&cluster));
    let message = condition_message(&cluster, "Progressing", Some("False"));
    assert!(
        message.starts_with(&format!("pod {} did not become Ready", rolled_back.pod))
            && why.iter().any(|w| message.contains(w)),
        "names the pod and why: {message}"
    );
    assert_eq!(
        condition_reason(&cluster, "Degraded", "True").as_deref(),
        Some("RolledBack"),
        "Degraded while the spec does not run: {:?}",
        status.conditions
    );
    assert_eq!(
        cluster.spec.image, bad,
        "the user's spec is never rewritten"
    );
    eprintln!("rolled back {took:?} after the edit: {message}");

    // The member returns to the last good image; every member serves again.
    wait_for(dkvs, "orders", "every member back in service", |d| {
        settled_at(d, 3)
    })
    .await;
    support::eventually(
        "every member on the last good image",
        Duration::from_secs(60),
        Duration::from_millis(500),
        async || (running(client, good).await.len() == 3).then_some(()),
    )
    .await;
    let after = dkvs.get("orders").await.unwrap();
    assert_eq!(
        condition_reason(&after, "Degraded", "True").as_deref(),
        Some("RolledBack"),
        "still Degraded: the spec asks for {bad}, the members run {good}"
    );
    assert_eq!(last_good_image(&after).as_deref(), Some(good));

    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let said = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RolledBack"))
        .filter_map(|e| e.message)
        .collect::<Vec<_>>();
    assert!(
        said.iter().any(|m| m.contains(&rolled_back.pod)),
        "an Event names the pod: {said:?}"
    );
    rolled_back.pod
}

/// An upgrade to an image that cannot be pulled, under `onFailure:
/// Rollback` and a 30 s deadline: the member that tried it returns to the
/// old image and the cluster says so; the next edit, to an image that runs,
/// rolls out as usual and ends the rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_image_that_cannot_be_pulled_is_rolled_back_and_the_next_edit_rolls_out() {
    let serving = serving(
        V35,
        json!({"onFailure": "Rollback", "progressDeadline": "30s"}),
    )
    .await;
    let (client, dkvs) = (serving.client.clone(), serving.dkvs.clone());
    rolled_back_from(
        &serving,
        V35,
        UNPULLABLE,
        json!({}),
        &["ImagePullBackOff", "ErrImagePull"],
    )
    .await;

    // A new edit starts a new rollout.
    patch_spec(&dkvs, "orders", json!({"image": V3530})).await;
    let took = wait_for(&dkvs, "orders", "every member on 3.5.30, Converged", |d| {
        settled_at(d, 3)
            && condition_reason(d, "Progressing", "False").as_deref() == Some("Converged")
            && condition_reason(d, "Degraded", "False").is_some()
            && last_good_image(d).as_deref() == Some(V3530)
            && d.status
                .as_ref()
                .and_then(|s| s.rollout.as_ref())
                .is_some_and(|r| r.rolled_back.is_none())
    })
    .await;
    assert_eq!(running(&client, V3530).await.len(), 3);
    eprintln!("the next edit rolled out in {took:?}");
    serving.finish().await;
}

/// A member restarted onto an image that cannot run the member (its
/// container fails at start, again and again) is moved back under
/// `onFailure: Rollback`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_that_crash_loops_on_the_new_spec_is_rolled_back() {
    let serving = serving(
        V3530,
        json!({"onFailure": "Rollback", "progressDeadline": "30s"}),
    )
    .await;
    rolled_back_from(
        &serving,
        V3530,
        NOT_ETCD,
        json!({"version": "3.5.30"}),
        &[
            "CrashLoopBackOff",
            "RunContainerError",
            "CreateContainerError",
            "exited with code",
            "not healthy",
            // The PATH's etcd 3.4 may also join on 3.5's data (etcd
            // documents rolling downgrades 3.5 → 3.4): it then serves, on
            // another minor line than the spec's, which is no progress.
            "etcd reports version 3.4",
        ],
    )
    .await;
    serving.finish().await;
}

/// An etcd setting every member refuses at start (`spec.etcd.extraArgs`,
/// which dkv passes on unchecked: a number etcd cannot read) is rolled
/// back: the member that tried it starts again with the settings that last
/// ran everywhere, and the spec keeps the setting as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_setting_the_members_cannot_start_with_is_rolled_back() {
    let serving = serving(
        V35,
        json!({"onFailure": "Rollback", "progressDeadline": "30s"}),
    )
    .await;
    let setting = json!({"extraArgs": {"max-concurrent-streams": "lots"}});
    rolled_back_from(
        &serving,
        V35,
        V35,
        json!({"etcd": setting}),
        &[
            "CrashLoopBackOff",
            "RunContainerError",
            "exited with code",
            "not healthy",
            // Between two of its crashes the container runs for a moment:
            // seen then, etcd runs and fails its health check.
            "its /health fails",
        ],
    )
    .await;
    let cluster = serving.dkvs.get("orders").await.unwrap();
    assert_eq!(
        cluster
            .spec
            .etcd
            .as_ref()
            .and_then(|e| e.extra_args.as_ref())
            .and_then(|a| a.get("max-concurrent-streams"))
            .map(String::as_str),
        Some("lots"),
        "the spec keeps the setting as written"
    );
    serving.finish().await;
}

/// Under `Pause` (the default) a rollout that missed its deadline stops
/// where it is: the member that tried the new image keeps it, the others
/// serve on the old one, nothing is rolled back, and Progressing says the
/// deadline passed, naming the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_pause_a_rollout_that_misses_its_deadline_stops_and_says_so() {
    let serving = serving(V35, json!({"progressDeadline": "30s"})).await;
    let (client, dkvs) = (serving.client.clone(), serving.dkvs.clone());
    patch_spec(&dkvs, "orders", json!({"image": UNPULLABLE})).await;
    let took = wait_for(
        &dkvs,
        "orders",
        "Progressing=False/ProgressDeadlineExceeded",
        |d| {
            condition_reason(d, "Progressing", "False").as_deref()
                == Some("ProgressDeadlineExceeded")
        },
    )
    .await;
    let cluster = dkvs.get("orders").await.unwrap();
    let message = condition_message(&cluster, "Progressing", Some("False"));
    let tried: Vec<String> = member_images(&client, NS)
        .await
        .into_iter()
        .filter(|(_, image)| image == UNPULLABLE)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(tried.len(), 1, "one member at a time: {tried:?}");
    assert!(
        message.starts_with(&format!("pod {} is not Ready", tried[0]))
            && message.contains("onFailure: Pause"),
        "{message}"
    );
    // Paused, not rolled back: still so a while later.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = dkvs.get("orders").await.unwrap();
    assert_eq!(running(&client, UNPULLABLE).await, tried);
    assert!(
        later
            .status
            .as_ref()
            .and_then(|s| s.rollout.as_ref())
            .is_some_and(|r| r.rolled_back.is_none()),
        "nothing rolled back under Pause"
    );
    assert_eq!(
        condition_reason(&later, "Available", "True").as_deref(),
        Some("QuorumHealthy"),
        "two of three members still serve"
    );
    eprintln!("deadline reported {took:?} after the edit: {message}");
    serving.finish().await;
}
