//! Taking back an edit that did not roll out, as a user does: through the
//! admission webhook, on a real 3-member etcd cluster on kube-local, each
//! under a writer recording every acknowledged write. The version rules
//! compare an edit with what the members run, never with a spec that ran
//! nowhere, so an image tag no registry has, a binary that crash-loops or
//! an upgrade stopped half way can always be set back.

use std::time::Duration;

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

use dkv_test_support as support;

use support::Serving;
use support::etcd_cluster::{
    annotate, condition_reason, last_good_image, member_images, merge_patch, settled_at,
    try_patch_spec, wait_for,
};

const NS: &str = "take-back";
const V35: &str = "registry.k8s.io/etcd:3.5.16-0";
const V3530: &str = "registry.k8s.io/etcd:3.5.30-0";
const V36: &str = "registry.k8s.io/etcd:3.6.16-0";
/// A tag no registry has (a patch release of 3.5 that does not exist): the
/// trap of a typo. kube-local maps no image to it and reports
/// `ErrImagePull`/`ImagePullBackOff`, as a kubelet does.
const NO_SUCH_TAG: &str = "registry.k8s.io/etcd:3.5.99-0";
/// An image that holds no etcd (see rollout_on_kube_local.rs): the member's
/// container fails at start, or the PATH's etcd 3.4 joins on another minor
/// line; either way it never serves the spec.
const NOT_ETCD: &str = "ghcr.io/dkv-io/dkv:not-etcd";

async fn serving(image: &str, rollout: serde_json::Value) -> Serving {
    // Plaintext for the writer: the defaulting webhook would give the
    // cluster TLS otherwise.
    let spec = json!({"rollout": rollout,
                      "tls": {"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}}});
    let serving = Serving::start_with_webhooks(NS, image, spec).await;
    wait_for(
        &serving.dkvs,
        "orders",
        "the last good spec recorded",
        |d| last_good_image(d).as_deref() == Some(image),
    )
    .await;
    serving
}

fn member_versions(d: &DistributedKV) -> Vec<Option<String>> {
    d.status
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| m.version.clone())
        .collect()
}

/// Sets the image back (with the rest of `spec`), which must be admitted.
async fn set_back(serving: &Serving, mut spec: serde_json::Value, image: &str) {
    spec["image"] = json!(image);
    if let Err(refused) = try_patch_spec(&serving.dkvs, "orders", spec).await {
        panic!("setting the image back to {image} was refused: {refused}");
    }
}

/// Waits until every member runs `image`, reports `version`, and the
/// cluster says so: Converged, not Degraded, `image` the last good spec.
async fn converged_on(serving: &Serving, image: &str, version: &str) {
    let took = wait_for(
        &serving.dkvs,
        "orders",
        &format!("converged on {image}"),
        |d| {
            // Of this generation: a status written before the edit says
            // Converged of the spec before it.
            let generation = d.metadata.generation;
            let progressing = d
                .status
                .iter()
                .flat_map(|s| &s.conditions)
                .find(|c| c.type_ == "Progressing");
            settled_at(d, 3)
                && d.status.as_ref().and_then(|s| s.observed_generation) == generation
                && progressing.is_some_and(|c| c.observed_generation == generation)
                && condition_reason(d, "Progressing", "False").as_deref() == Some("Converged")
                && condition_reason(d, "Degraded", "False").is_some()
                && last_good_image(d).as_deref() == Some(image)
                && member_versions(d)
                    .iter()
                    .all(|v| v.as_deref() == Some(version))
        },
    )
    .await;
    let images = member_images(&serving.client, NS).await;
    assert!(
        images.len() == 3 && images.iter().all(|(_, i)| i == image),
        "{images:?}"
    );
    eprintln!("converged on {image} {took:?} after it was set back");
}

/// Under `Pause`: an edit of the image to a tag no registry has, together
/// with a change of the members' resources. The member restarted onto it
/// cannot pull it; setting the image alone back is admitted, and the
/// resources change rolls out with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_pause_an_image_that_never_ran_is_set_back_and_the_other_edit_rolls_out() {
    let serving = serving(V35, json!({"progressDeadline": "30s"})).await;
    let resources = json!({"requests": {"cpu": "150m"}});
    try_patch_spec(
        &serving.dkvs,
        "orders",
        json!({"image": NO_SUCH_TAG, "resources": resources}),
    )
    .await
    .expect("an upgrade to 3.5.99 is admitted: no rule knows the tag does not exist");
    wait_for(
        &serving.dkvs,
        "orders",
        "Degraded=True/ImagePullFailed",
        |d| condition_reason(d, "Degraded", "True").as_deref() == Some("ImagePullFailed"),
    )
    .await;

    set_back(&serving, json!({}), V35).await;
    converged_on(&serving, V35, "3.5.16").await;
    let pods: Api<Pod> = Api::namespaced(serving.client.clone(), NS);
    let cpu: Vec<Option<String>> = pods
        .list(&ListParams::default().labels("dkv.io/cluster=orders"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|p| {
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
        })
        .collect();
    assert_eq!(
        cpu,
        vec![Some("150m".to_owned()); 3],
        "the resources edit rolled out"
    );
    serving.finish().await;
}

/// Under `Rollback`: the member that tried a tag no registry has is moved
/// back; the spec, still naming that tag, is set back to what runs. Then a
/// version whose binary crash-loops, rolled back and set back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_rollback_an_image_that_never_ran_and_one_that_crash_loops_are_set_back() {
    let serving = serving(
        V3530,
        json!({"onFailure": "Rollback", "progressDeadline": "30s"}),
    )
    .await;
    let rolled_back = |d: &DistributedKV| {
        condition_reason(d, "Progressing", "False").as_deref() == Some("RolledBack")
    };
    try_patch_spec(&serving.dkvs, "orders", json!({"image": NO_SUCH_TAG}))
        .await
        .expect("3.5.30 -> 3.5.99 is admitted");
    wait_for(
        &serving.dkvs,
        "orders",
        "Progressing=False/RolledBack",
        rolled_back,
    )
    .await;
    set_back(&serving, json!({}), V3530).await;
    converged_on(&serving, V3530, "3.5.30").await;

    try_patch_spec(
        &serving.dkvs,
        "orders",
        json!({"image": NOT_ETCD, "version": "3.5.31"}),
    )
    .await
    .expect("3.5.30 -> 3.5.31 is admitted");
    wait_for(
        &serving.dkvs,
        "orders",
        "Progressing=False/RolledBack",
        rolled_back,
    )
    .await;
    set_back(&serving, json!({"version": null}), V3530).await;
    converged_on(&serving, V3530, "3.5.30").await;
    serving.finish().await;
}

/// An upgrade 3.5 -> 3.6 stopped with a member on 3.6 (here by pausing the
/// cluster's reconcile): etcd's cluster version is still 3.5, so going back
/// to 3.5.30 is admitted and moves that member back; what etcd would
/// refuse of some member (3.4, or 3.7 from the 3.5 members) is refused,
/// naming the member, its version and the way back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_to_3_6_stopped_half_way_goes_back_to_3_5_by_etcd_rules() {
    let serving = serving(V3530, json!({})).await;
    let dkvs = serving.dkvs.clone();
    try_patch_spec(&dkvs, "orders", json!({"image": V36}))
        .await
        .expect("3.5.30 -> 3.6.16 is admitted");
    wait_for(&dkvs, "orders", "a member reporting 3.6.16", |d| {
        member_versions(d)
            .iter()
            .any(|v| v.as_deref() == Some("3.6.16"))
    })
    .await;
    annotate(&dkvs, "orders", "dkv.io/reconcile-paused", "true").await;
    let half = dkvs.get("orders").await.unwrap();
    let versions = member_versions(&half);
    assert!(
        versions.iter().any(|v| v.as_deref() == Some("3.5.30")),
        "a member still on 3.5.30 when the rollout was paused: {versions:?}"
    );
    eprintln!("paused with the members on {versions:?}");

    // The first member whose move etcd refuses is named (status.members
    // order), with the way back. Which member that is depends on where the
    // rollout was paused: for 3.4 a member on 3.6.16 or one on 3.5.30,
    // whichever comes first; for 3.7 only one on 3.5.30 (3.6 -> 3.7 is
    // allowed).
    for (image, any_of) in [
        (
            "registry.k8s.io/etcd:3.4.23-0",
            &[
                "runs 3.5.30 (status.members): etcd cannot be downgraded (3.5.30 -> 3.4.23): etcd supports downgrades from 3.6 on (3.7 -> 3.6, 3.6 -> 3.5), not from 3.5; set the image back to 3.5.30 or newer",
                "runs 3.6.16 (status.members): etcd downgrades move one minor version at a time (3.6.16 -> 3.4.23 skips one); downgrade to 3.5.x first; 3.5.30, the version that last ran on every member (status.rollout.lastGood), is accepted too",
            ][..],
        ),
        (
            "quay.io/coreos/etcd:v3.7.3",
            &[
                "runs 3.5.30 (status.members): etcd upgrades move one minor version at a time (3.5.30 -> 3.7.3 skips one); upgrade to 3.6.x first; 3.5.30, the version that last ran on every member (status.rollout.lastGood), is accepted too",
            ][..],
        ),
    ] {
        let refused = try_patch_spec(&dkvs, "orders", json!({"image": image}))
            .await
            .err()
            .unwrap_or_else(|| panic!("{image} was admitted on a cluster half way to 3.6"));
        assert!(
            refused.contains(": member orders-")
                && any_of.iter().any(|says| refused.ends_with(says)),
            "{image}: {refused}"
        );
    }

    set_back(&serving, json!({}), V3530).await;
    merge_patch(
        &dkvs,
        "orders",
        json!({"metadata": {"annotations": {"dkv.io/reconcile-paused": null}}}),
    )
    .await;
    converged_on(&serving, V3530, "3.5.30").await;
    // Nothing left of the upgrade: etcd's cluster version stayed 3.5.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = dkvs.get("orders").await.unwrap();
    assert_eq!(
        after.status.and_then(|s| s.current_version).as_deref(),
        Some("3.5.30")
    );
    serving.finish().await;
}
