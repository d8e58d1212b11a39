//! StatefulSets: ordinals, stable names and volumes, scaling, and the update strategies.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use super::common::{Cluster, eventually, http_get, ready, testapp_template};

const NS: &str = "web";

fn set(
    name: &str,
    replicas: i32,
    policy: &str,
    extra_spec: serde_json::Value,
) -> serde_json::Value {
    let mut spec = json!({
        "replicas": replicas,
        "serviceName": format!("{name}-peer"),
        "podManagementPolicy": policy,
        "selector": {"matchLabels": {"app": name}},
        "template": testapp_template(json!({"app": name}), json!([
            {"name": "RECORD_FILE", "value": "/data/starts"},
        ])),
        "volumeClaimTemplates": [{
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }],
    });
    spec["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/data"}]);
    if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    json!({"metadata": {"name": name}, "spec": spec})
}

async fn ready_replicas(c: &Cluster, name: &str, want: i32) -> StatefulSet {
    eventually(
        &format!("{name} to have {want} ready replicas"),
        Duration::from_secs(60),
        || async {
            let s = c.api::<StatefulSet>(NS).get(name).await.ok()?;
            let st = s.status.clone()?;
            (st.ready_replicas == Some(want)
                && st.replicas == want
                && st.observed_generation == s.metadata.generation)
                .then_some(s)
        },
    )
    .await
}

async fn pods_of(c: &Cluster, name: &str) -> Vec<Pod> {
    let mut pods = c
        .api::<Pod>(NS)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items;
    pods.sort_by_key(|p| p.metadata.name.clone());
    pods
}

fn pod_ip(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_become_ready_keep_their_volumes_and_scale_down_from_the_top() {
    let c = Cluster::start(NS).await;
    c.create::<StatefulSet>(NS, set("web", 3, "OrderedReady", json!({})))
        .await;
    let s = ready_replicas(&c, "web", 3).await;
    let status = s.status.unwrap();
    assert_eq!(status.current_revision, status.update_revision);
    assert_eq!(status.updated_replicas, Some(3));

    let pods = pods_of(&c, "web").await;
    let names: Vec<_> = pods
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web-0", "web-1", "web-2"]);
    for (i, p) in pods.iter().enumerate() {
        assert_eq!(
            p.spec.as_ref().unwrap().hostname.as_deref(),
            Some(names[i].as_str())
        );
        assert_eq!(
            p.spec.as_ref().unwrap().subdomain.as_deref(),
            Some("web-peer")
        );
        // Each pod serves on its own IP, reachable from the host.
        assert_eq!(
            http_get(&pod_ip(p), 8080, "/").await.as_deref(),
            Some(names[i].as_str())
        );
    }
    // OrderedReady: web-1 started only once web-0 was ready.
    let started = |p: &Pod| p.status.as_ref().unwrap().start_time.clone().unwrap().0;
    assert!(started(&pods[0]) <= started(&pods[1]) && started(&pods[1]) <= started(&pods[2]));
    let claims = c
        .api::<PersistentVolumeClaim>(NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut claim_names: Vec<_> = claims
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    claim_names.sort();
    assert_eq!(claim_names, ["data-web-0", "data-web-1", "data-web-2"]);
    assert!(
        claims
            .iter()
            .all(|c| c.status.as_ref().unwrap().phase.as_deref() == Some("Bound"))
    );

    // A deleted pod comes back with its name and its volume's data.
    let old_uid = pods[1].metadata.uid.clone();
    c.api::<Pod>(NS)
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    let back = eventually(
        "web-1 to come back ready",
        Duration::from_secs(30),
        || async {
            let p = c.pod(NS, "web-1").await?;
            (p.metadata.uid != old_uid && ready(&p)).then_some(p)
        },
    )
    .await;
    let starts = http_get(&pod_ip(&back), 8080, "/file?path=/data/starts")
        .await
        .unwrap();
    assert_eq!(
        starts, "web-1\nweb-1\n",
        "the recreated pod sees the first run's data"
    );

    // A lost disk: the volume's data is wiped; the next pod of that ordinal starts on an empty volume.
    c.kubelet().wipe_volume(NS, "data-web-1").await.unwrap();
    let old_uid = back.metadata.uid.clone();
    c.api::<Pod>(NS)
        .delete("web-1", &DeleteParams::default())
        .await
        .unwrap();
    let fresh = eventually(
        "web-1 back on an empty volume",
        Duration::from_secs(30),
        || async {
            let p = c.pod(NS, "web-1").await?;
            (p.metadata.uid != old_uid && ready(&p)).then_some(p)
        },
    )
    .await;
    let starts = http_get(&pod_ip(&fresh), 8080, "/file?path=/data/starts")
        .await
        .unwrap();
    assert_eq!(starts, "web-1\n");

    // Scaling down removes the highest ordinal; its claim stays (whenScaled: Retain).
    c.api::<StatefulSet>(NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    ready_replicas(&c, "web", 2).await;
    eventually("web-2 to go", Duration::from_secs(20), || async {
        c.pod(NS, "web-2").await.is_none().then_some(())
    })
    .await;
    let names: Vec<_> = pods_of(&c, "web")
        .await
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["web-0", "web-1"]);
    assert!(
        c.api::<PersistentVolumeClaim>(NS)
            .get_opt("data-web-2")
            .await
            .unwrap()
            .is_some()
    );
}

fn revision(p: &Pod) -> String {
    p.metadata.labels.as_ref().unwrap()["controller-revision-hash"].clone()
}

async fn set_template_env(c: &Cluster, name: &str, value: &str) {
    let set = c.api::<StatefulSet>(NS).get(name).await.unwrap();
    let mut template = serde_json::to_value(&set.spec.template).unwrap();
    template["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "VERSION", "value": value}));
    c.api::<StatefulSet>(NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": template}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_update_respects_the_partition_and_on_delete_waits_for_deletions() {
    let c = Cluster::start(NS).await;
    c.create::<StatefulSet>(
        NS,
        set(
            "roll",
            3,
            "Parallel",
            json!({
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}},
            }),
        ),
    )
    .await;
    c.create::<StatefulSet>(
        NS,
        set(
            "manual",
            2,
            "Parallel",
            json!({"updateStrategy": {"type": "OnDelete"}}),
        ),
    )
    .await;
    ready_replicas(&c, "roll", 3).await;
    ready_replicas(&c, "manual", 2).await;
    let old_roll = revision(&pods_of(&c, "roll").await[0]);
    let old_manual = revision(&pods_of(&c, "manual").await[0]);

    set_template_env(&c, "roll", "2").await;
    set_template_env(&c, "manual", "2").await;

    // RollingUpdate with partition 2: only ordinal 2 moves to the new revision.
    let s = eventually("roll-2 updated", Duration::from_secs(30), || async {
        let s = c.api::<StatefulSet>(NS).get("roll").await.ok()?;
        let st = s.status.clone()?;
        (st.updated_replicas == Some(1)
            && st.ready_replicas == Some(3)
            && st.update_revision.as_deref() != Some(&old_roll))
        .then_some(s)
    })
    .await;
    let status = s.status.unwrap();
    assert_eq!(status.current_revision.as_deref(), Some(old_roll.as_str()));
    let update = status.update_revision.unwrap();
    let revisions: Vec<String> = pods_of(&c, "roll").await.iter().map(revision).collect();
    assert_eq!(
        revisions,
        [old_roll.clone(), old_roll.clone(), update.clone()]
    );
    let history = c
        .api::<k8s_openapi::api::apps::v1::ControllerRevision>(NS)
        .list(&ListParams::default().labels("app=roll"))
        .await
        .unwrap()
        .items;
    assert_eq!(history.len(), 2);

    // Partition 0: the rest follow, highest first, and the update revision becomes current.
    c.api::<StatefulSet>(NS)
        .patch(
            "roll",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 0}}}})),
        )
        .await
        .unwrap();
    eventually("roll fully updated", Duration::from_secs(60), || async {
        let st = c.api::<StatefulSet>(NS).get("roll").await.ok()?.status?;
        (st.updated_replicas == Some(3)
            && st.ready_replicas == Some(3)
            && st.current_revision.as_deref() == Some(&update))
        .then_some(())
    })
    .await;

    // OnDelete: nothing moves until a pod is deleted; the recreated pod gets the new template.
    let manual = pods_of(&c, "manual").await;
    assert!(manual.iter().all(|p| revision(p) == old_manual));
    let old_uid = manual[1].metadata.uid.clone();
    c.api::<Pod>(NS)
        .delete("manual-1", &DeleteParams::default())
        .await
        .unwrap();
    let recreated = eventually("manual-1 recreated", Duration::from_secs(30), || async {
        let p = c.pod(NS, "manual-1").await?;
        (p.metadata.uid != old_uid && ready(&p)).then_some(p)
    })
    .await;
    assert_ne!(revision(&recreated), old_manual);
    assert_eq!(revision(&c.pod(NS, "manual-0").await.unwrap()), old_manual);
    let st = c
        .api::<StatefulSet>(NS)
        .get("manual")
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(st.updated_replicas, Some(1));
    assert_eq!(
        st.current_revision.as_deref(),
        Some(old_manual.as_str()),
        "OnDelete never completes a rollout (as upstream)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_retention_delete_removes_claims_on_scale_down_and_with_the_set() {
    let c = Cluster::start(NS).await;
    c.create::<StatefulSet>(NS, set("tmp", 2, "Parallel", json!({
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"},
                "minReadySeconds": 2,
    })))
    .await;
    ready_replicas(&c, "tmp", 2).await;
    // Available once ready for minReadySeconds.
    eventually("two available", Duration::from_secs(10), || async {
        let st = c.api::<StatefulSet>(NS).get("tmp").await.ok()?.status?;
        (st.available_replicas == Some(2)).then_some(())
    })
    .await;
    let claims = || async {
        let mut names: Vec<String> = c
            .api::<PersistentVolumeClaim>(NS)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect();
        names.sort();
        names
    };
    assert_eq!(claims().await, ["data-tmp-0", "data-tmp-1"]);
    c.api::<StatefulSet>(NS)
        .patch(
            "tmp",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    eventually("data-tmp-1 gone", Duration::from_secs(30), || async {
        (claims().await == ["data-tmp-0"]).then_some(())
    })
    .await;
    c.api::<StatefulSet>(NS)
        .delete("tmp", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "every claim and volume gone",
        Duration::from_secs(30),
        || async {
            let volumes =
                kube::Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(c.client())
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items;
            (claims().await.is_empty() && volumes.is_empty()).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_slices_and_disruption_budgets_follow_ready_pods() {
    use k8s_openapi::api::core::v1::{Endpoints, Service};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;

    let c = Cluster::start(NS).await;
    c.create::<Service>(NS, json!({
        "metadata": {"name": "api"},
        "spec": {"selector": {"app": "api"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .await;
    c.create::<PodDisruptionBudget>(
        NS,
        json!({
            "metadata": {"name": "api"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "api"}}},
        }),
    )
    .await;
    c.create::<StatefulSet>(NS, set("api", 2, "Parallel", json!({})))
        .await;
    ready_replicas(&c, "api", 2).await;

    let ips: Vec<String> = pods_of(&c, "api").await.iter().map(pod_ip).collect();
    let ep = eventually("two ready addresses", Duration::from_secs(10), || async {
        let ep = c.api::<Endpoints>(NS).get("api").await.ok()?;
        let subset = ep.subsets.as_ref()?.first()?.clone();
        (subset.addresses.as_ref()?.len() == 2).then_some(subset)
    })
    .await;
    let mut got: Vec<String> = ep.addresses.unwrap().into_iter().map(|a| a.ip).collect();
    got.sort();
    let mut want = ips.clone();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        ep.ports.unwrap()[0].port,
        8080,
        "the named target port resolved"
    );
    let slices = c
        .api::<EndpointSlice>(NS)
        .list(&ListParams::default().labels("kubernetes.io/service-name=api"))
        .await
        .unwrap()
        .items;
    assert_eq!(slices.len(), 1);
    assert_eq!(slices[0].endpoints.as_ref().map(Vec::len), Some(2));

    let pdb = eventually("PDB status", Duration::from_secs(10), || async {
        let st = c
            .api::<PodDisruptionBudget>(NS)
            .get("api")
            .await
            .ok()?
            .status?;
        (st.current_healthy == Some(2)).then_some(st)
    })
    .await;
    assert_eq!(
        (
            pdb.expected_pods,
            pdb.desired_healthy,
            pdb.disruptions_allowed
        ),
        (Some(2), Some(1), Some(1))
    );
    let allowed = pdb
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .unwrap();
    assert_eq!(
        (allowed.status.as_str(), allowed.reason.as_str()),
        ("True", "SufficientPods")
    );

    // A pod that stops being ready leaves the addresses and the budget.
    c.kubelet().cut_network(NS, "api-1").unwrap();
    eventually("api-1 unready", Duration::from_secs(20), || async {
        let ep = c.api::<Endpoints>(NS).get("api").await.ok()?;
        let subset = ep.subsets.as_ref()?.first()?.clone();
        (subset.addresses.as_ref()?.len() == 1 && subset.not_ready_addresses.as_ref()?.len() == 1)
            .then_some(())
    })
    .await;
    eventually("no disruption allowed", Duration::from_secs(10), || async {
        let st = c
            .api::<PodDisruptionBudget>(NS)
            .get("api")
            .await
            .ok()?
            .status?;
        (st.disruptions_allowed == Some(0)).then_some(())
    })
    .await;
    c.kubelet().restore_network(NS, "api-1").unwrap();
    ready_replicas(&c, "api", 2).await;
}

/// Volume expansion as on a cluster whose CSI driver expands online: a bound
/// claim of the default class (`allowVolumeExpansion: true`) that asks for
/// more gets it (the volume's and the claim's capacity grow); shrinking is
/// invalid (422); growing a claim of the `fixed-size` class is forbidden
/// (403) with upstream's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_claims_grow_where_their_class_allows_expansion() {
    let c = Cluster::start(NS).await;
    c.create::<StatefulSet>(NS, set("grows", 1, "Parallel", json!({})))
        .await;
    let mut fixed = set("fixed", 1, "Parallel", json!({}));
    fixed["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"] = json!("fixed-size");
    c.create::<StatefulSet>(NS, fixed).await;
    ready_replicas(&c, "grows", 1).await;
    ready_replicas(&c, "fixed", 1).await;
    let claims = c.api::<PersistentVolumeClaim>(NS);
    let ask = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});

    claims
        .patch(
            "data-grows-0",
            &PatchParams::default(),
            &Patch::Merge(ask("2Gi")),
        )
        .await
        .unwrap();
    let capacity = |claim: &PersistentVolumeClaim| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage"))
            .map(|q| q.0.clone())
    };
    let grown = eventually(
        "the claim's capacity grows",
        Duration::from_secs(10),
        || async {
            let claim = claims.get("data-grows-0").await.ok()?;
            (capacity(&claim).as_deref() == Some("2Gi")).then_some(claim)
        },
    )
    .await;
    let volume = kube::Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(c.client())
        .get(grown.spec.as_ref().unwrap().volume_name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(
        volume.spec.unwrap().capacity.unwrap()["storage"].0,
        "2Gi",
        "the volume grows with its claim"
    );

    let refusal = |result: Result<PersistentVolumeClaim, kube::Error>| match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let (code, message) = refusal(
        claims
            .patch(
                "data-grows-0",
                &PatchParams::default(),
                &Patch::Merge(ask("1Gi")),
            )
            .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains(
            "spec.resources.requests.storage: Forbidden: field can not be less than previous value"
        ),
        "{message}"
    );
    let (code, message) = refusal(
        claims
            .patch(
                "data-fixed-0",
                &PatchParams::default(),
                &Patch::Merge(ask("2Gi")),
            )
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"),
        "{message}"
    );
}

/// A set deleted with `propagationPolicy: Orphan` leaves its pods running (their owner reference gone); a set
/// re-created with the same selector and template — here with a larger volumeClaimTemplate, the reason to do it —
/// adopts them and their revision without restarting anything, and scales with the new claim template.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_recreated_over_its_orphaned_pods_adopts_them_without_restarting_them() {
    let c = Cluster::start(NS).await;
    let spec = |size: &str, replicas: i32| {
        let mut s = set(
            "kept",
            replicas,
            "Parallel",
            json!({"updateStrategy": {"type": "OnDelete"}}),
        );
        s["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] =
            json!(size);
        s
    };
    c.create::<StatefulSet>(NS, spec("1Gi", 2)).await;
    let before = ready_replicas(&c, "kept", 2).await;
    let old_uid = before.metadata.uid.clone().unwrap();
    let revision_before = before.status.unwrap().update_revision.unwrap();
    let pods_before: Vec<(Option<String>, String)> = pods_of(&c, "kept")
        .await
        .iter()
        .map(|p| (p.metadata.uid.clone(), revision(p)))
        .collect();

    c.api::<StatefulSet>(NS)
        .delete(
            "kept",
            &DeleteParams {
                propagation_policy: Some(kube::api::PropagationPolicy::Orphan),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    eventually("the set gone", Duration::from_secs(30), || async {
        c.api::<StatefulSet>(NS)
            .get_opt("kept")
            .await
            .ok()
            .and_then(|s| s.is_none().then_some(()))
    })
    .await;
    let orphans = pods_of(&c, "kept").await;
    assert_eq!(orphans.len(), 2, "the pods outlive their set");
    for pod in &orphans {
        assert!(
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .all(|o| o.uid != old_uid),
            "{:?} no longer names the deleted set",
            pod.metadata.name
        );
    }

    c.create::<StatefulSet>(NS, spec("2Gi", 2)).await;
    let after = ready_replicas(&c, "kept", 2).await;
    let new_uid = after.metadata.uid.clone().unwrap();
    assert_ne!(new_uid, old_uid);
    let status = after.status.unwrap();
    assert_eq!(
        status.update_revision.as_deref(),
        Some(revision_before.as_str()),
        "the same template is the same revision"
    );
    assert_eq!(status.current_replicas, Some(2));
    let pods_after: Vec<(Option<String>, String)> = pods_of(&c, "kept")
        .await
        .iter()
        .map(|p| (p.metadata.uid.clone(), revision(p)))
        .collect();
    assert_eq!(pods_after, pods_before, "no pod was replaced");
    for pod in pods_of(&c, "kept").await {
        assert!(
            pod.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == new_uid && o.controller == Some(true)),
            "{:?} adopted",
            pod.metadata.name
        );
    }

    // A new ordinal gets its claim from the new template.
    c.api::<StatefulSet>(NS)
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    ready_replicas(&c, "kept", 3).await;
    let claim = c
        .api::<PersistentVolumeClaim>(NS)
        .get("data-kept-2")
        .await
        .unwrap();
    assert_eq!(
        claim.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "2Gi"
    );
}
