//! Deployments and their ReplicaSets: availability, replacement of lost pods, scaling, rolling updates within
//! `maxSurge`/`maxUnavailable`, `Recreate`, pausing, and garbage collection, driven with the real `kubectl` where a
//! user would use it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use super::common::{Cluster, eventually, kubectl, kubectl_in, ready, testapp_template};

const NS: &str = "shop";

fn manifest(name: &str, replicas: i32, strategy: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "strategy": strategy,
            "selector": {"matchLabels": {"app": name}},
            "template": testapp_template(json!({"app": name}), json!([])),
        },
    })
}

async fn apply(c: &Cluster, manifest: &serde_json::Value) {
    let (ok, out, err) =
        kubectl_in(&c.env, &["apply", "-f", "-"], Some(&manifest.to_string())).await;
    assert!(ok, "kubectl apply: {out}{err}");
}

/// Pods of the Deployment `name` not being deleted.
async fn live_pods(c: &Cluster, name: &str) -> Vec<Pod> {
    let mut pods: Vec<Pod> = c
        .api::<Pod>(NS)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    pods.sort_by_key(|p| p.metadata.name.clone());
    pods
}

async fn replicasets(c: &Cluster, name: &str) -> Vec<ReplicaSet> {
    c.api::<ReplicaSet>(NS)
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await
        .unwrap()
        .items
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn label<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

fn condition(d: &Deployment, type_: &str) -> Option<(String, String)> {
    d.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_.as_deref() == Some(type_))
        .map(|c| {
            (
                c.status.clone().unwrap_or_default(),
                c.reason.clone().unwrap_or_default(),
            )
        })
}

/// Waits until the Deployment has `want` ready, up-to-date, available replicas and nothing else.
async fn settled(c: &Cluster, name: &str, want: i32) -> Deployment {
    eventually(
        &format!("{name} to settle at {want} replicas"),
        Duration::from_secs(60),
        || async {
            let d = c.api::<Deployment>(NS).get(name).await.ok()?;
            let st = d.status.clone()?;
            let pods = live_pods(c, name).await;
            (st.observed_generation == d.metadata.generation
                && st.replicas == Some(want)
                && st.updated_replicas == Some(want)
                && st.ready_replicas == Some(want)
                && st.available_replicas == Some(want)
                && pods.len() == want as usize
                && pods.iter().all(ready))
            .then_some(d)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_becomes_available_replaces_pods_scales_and_is_collected() {
    let c = Cluster::start(NS).await;
    apply(&c, &manifest("web", 2, json!({}))).await;
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "wait",
            "-n",
            NS,
            "--for=condition=Available",
            "deployment/web",
            "--timeout=60s",
        ],
    )
    .await;
    assert!(ok, "kubectl wait: {out}{err}");
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/web",
            "--timeout=60s",
        ],
    )
    .await;
    assert!(ok, "kubectl rollout status: {out}{err}");
    assert!(out.contains("successfully rolled out"), "{out}");
    let d = settled(&c, "web", 2).await;
    assert_eq!(
        annotation(&d.metadata, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("True".into(), "MinimumReplicasAvailable".into()))
    );
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );

    // One ReplicaSet, named and labelled by its template's hash, controlled by the Deployment.
    let sets = replicasets(&c, "web").await;
    assert_eq!(sets.len(), 1);
    let rs = &sets[0];
    let hash = label(&rs.metadata, "pod-template-hash")
        .unwrap()
        .to_string();
    let rs_name = format!("web-{hash}");
    assert_eq!(rs.metadata.name.as_deref(), Some(rs_name.as_str()));
    let selector = rs.spec.selector.match_labels.clone().unwrap();
    assert_eq!(selector.get("pod-template-hash"), Some(&hash));
    assert_eq!(
        annotation(&rs.metadata, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    assert_eq!(
        annotation(&rs.metadata, "deployment.kubernetes.io/desired-replicas"),
        Some("2")
    );
    let owner = &rs.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Deployment", "web")
    );
    assert_eq!(owner.controller, Some(true));
    let rs_status = rs.status.clone().unwrap();
    assert_eq!(rs_status.replicas, 2);
    assert_eq!(rs_status.fully_labeled_replicas, Some(2));
    assert_eq!(rs_status.available_replicas, Some(2));

    // Its pods: <rs>-<5 random>, the hash label, controlled by the ReplicaSet.
    let pods = live_pods(&c, "web").await;
    for p in &pods {
        let name = p.metadata.name.clone().unwrap();
        let suffix = name.strip_prefix(&format!("{rs_name}-")).unwrap();
        assert_eq!(suffix.len(), 5, "{name}");
        assert!(
            suffix
                .chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit())
        );
        assert_eq!(label(&p.metadata, "pod-template-hash"), Some(hash.as_str()));
        let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("ReplicaSet", rs_name.as_str())
        );
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    // A deleted pod is replaced.
    let lost = pods[0].metadata.name.clone().unwrap();
    c.api::<Pod>(NS)
        .delete(&lost, &DeleteParams::default())
        .await
        .unwrap();
    eventually("a replacement pod", Duration::from_secs(30), || async {
        let pods = live_pods(&c, "web").await;
        (pods.len() == 2
            && pods.iter().all(ready)
            && pods
                .iter()
                .all(|p| p.metadata.name.as_deref() != Some(lost.as_str())))
        .then_some(())
    })
    .await;

    // kubectl scale goes through the scale subresource, up and back down.
    let (ok, out, err) = kubectl(
        &c.env,
        &["scale", "-n", NS, "deployment/web", "--replicas=3"],
    )
    .await;
    assert!(ok, "kubectl scale: {out}{err}");
    settled(&c, "web", 3).await;
    let (ok, out, err) = kubectl(
        &c.env,
        &["scale", "-n", NS, "deployment/web", "--replicas=2"],
    )
    .await;
    assert!(ok, "kubectl scale: {out}{err}");
    settled(&c, "web", 2).await;
    let sets = replicasets(&c, "web").await;
    assert_eq!(sets.len(), 1, "scaling makes no new ReplicaSet");
    assert_eq!(
        annotation(
            &sets[0].metadata,
            "deployment.kubernetes.io/desired-replicas"
        ),
        Some("2")
    );

    // Deleting the Deployment removes its ReplicaSets and pods through their owner references.
    c.api::<Deployment>(NS)
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the ReplicaSets and pods to go",
        Duration::from_secs(30),
        || async {
            let pods = c
                .api::<Pod>(NS)
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            (replicasets(&c, "web").await.is_empty() && pods.items.is_empty()).then_some(())
        },
    )
    .await;
}

/// Pod counts seen while watching a rollout.
#[derive(Debug, Default, Clone, Copy)]
struct Extremes {
    /// Most pods not being deleted at once.
    max_live: usize,
    /// Fewest ready pods not being deleted at once.
    min_available: usize,
}

/// Watches the pods of `app` and records the extremes of every state the watch shows, until `stop` fires.
async fn watch_extremes(
    api: Api<Pod>,
    app: &str,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Extremes {
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    let mut seen = Extremes {
        max_live: 0,
        min_available: usize::MAX,
    };
    let stream = watcher(
        api,
        watcher::Config::default().labels(&format!("app={app}")),
    );
    let mut stream = std::pin::pin!(stream);
    let mut stop = std::pin::pin!(stop);
    let mut initialised = false;
    let mut init: BTreeMap<String, Pod> = BTreeMap::new();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = &mut stop => return seen,
        };
        match event {
            Some(Ok(watcher::Event::Init)) => init.clear(),
            Some(Ok(watcher::Event::InitApply(p))) => {
                init.insert(p.metadata.name.clone().unwrap_or_default(), p);
            }
            Some(Ok(watcher::Event::InitDone)) => {
                pods = std::mem::take(&mut init);
                initialised = true;
            }
            Some(Ok(watcher::Event::Apply(p))) => {
                pods.insert(p.metadata.name.clone().unwrap_or_default(), p);
            }
            Some(Ok(watcher::Event::Delete(p))) => {
                pods.remove(p.metadata.name.as_deref().unwrap_or_default());
            }
            Some(Err(e)) => panic!("watching pods: {e}"),
            None => return seen,
        }
        if initialised {
            let live = pods
                .values()
                .filter(|p| p.metadata.deletion_timestamp.is_none());
            let (n, available) = live.fold((0, 0), |(n, a), p| (n + 1, a + usize::from(ready(p))));
            seen.max_live = seen.max_live.max(n);
            seen.min_available = seen.min_available.min(available);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_change_rolls_out_within_surge_and_unavailability_and_undo_rolls_back() {
    let c = Cluster::start(NS).await;
    // 25% of 2: a surge of 1 (rounded up), no unavailability (rounded down).
    apply(&c, &manifest("api", 2, json!({"type": "RollingUpdate"}))).await;
    let before = settled(&c, "api", 2).await;
    let old_rs = replicasets(&c, "api").await[0]
        .metadata
        .name
        .clone()
        .unwrap();

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_extremes(c.api::<Pod>(NS), "api", stop_rx));
    // Let the watch list the settled pods first.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (ok, out, err) = kubectl(&c.env, &["rollout", "restart", "-n", NS, "deployment/api"]).await;
    assert!(ok, "kubectl rollout restart: {out}{err}");
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/api",
            "--timeout=90s",
        ],
    )
    .await;
    assert!(ok, "kubectl rollout status: {out}{err}");
    assert!(out.contains("successfully rolled out"), "{out}");
    let after = settled(&c, "api", 2).await;
    // Let the last pod deletions reach the watch, then stop it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    let seen = watch.await.unwrap();
    assert_eq!(
        seen.max_live, 3,
        "the rollout surges by exactly one pod: {seen:?}"
    );
    assert_eq!(
        seen.min_available, 2,
        "no pod is unavailable during the rollout: {seen:?}"
    );

    assert!(after.metadata.generation > before.metadata.generation);
    assert_eq!(
        annotation(&after.metadata, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    assert_eq!(
        condition(&after, "Progressing"),
        Some(("True".into(), "NewReplicaSetAvailable".into()))
    );
    let sets = replicasets(&c, "api").await;
    assert_eq!(sets.len(), 2, "the old ReplicaSet is kept as history");
    let size = |rs: &ReplicaSet| rs.spec.replicas;
    let old = sets
        .iter()
        .find(|rs| rs.metadata.name.as_deref() == Some(old_rs.as_str()))
        .unwrap();
    let new = sets
        .iter()
        .find(|rs| rs.metadata.name.as_deref() != Some(old_rs.as_str()))
        .unwrap();
    assert_eq!(size(old), Some(0));
    assert_eq!(size(new), Some(2));
    assert_eq!(
        annotation(&new.metadata, "deployment.kubernetes.io/revision"),
        Some("2")
    );
    assert_eq!(
        annotation(&old.metadata, "deployment.kubernetes.io/revision"),
        Some("1")
    );
    assert!(
        new.spec
            .template
            .as_ref()
            .unwrap()
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()
            .contains_key("kubectl.kubernetes.io/restartedAt")
    );
    let new_hash = label(&new.metadata, "pod-template-hash").unwrap();
    for p in live_pods(&c, "api").await {
        assert_eq!(label(&p.metadata, "pod-template-hash"), Some(new_hash));
    }

    // kubectl rollout undo copies the first template back: the first ReplicaSet is new again, at revision 3.
    let (ok, out, err) = kubectl(&c.env, &["rollout", "undo", "-n", NS, "deployment/api"]).await;
    assert!(ok, "kubectl rollout undo: {out}{err}");
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/api",
            "--timeout=90s",
        ],
    )
    .await;
    assert!(ok, "kubectl rollout status: {out}{err}");
    let undone = settled(&c, "api", 2).await;
    assert_eq!(
        annotation(&undone.metadata, "deployment.kubernetes.io/revision"),
        Some("3")
    );
    let sets = replicasets(&c, "api").await;
    assert_eq!(sets.len(), 2, "undo reuses the first ReplicaSet");
    let first = sets
        .iter()
        .find(|rs| rs.metadata.name.as_deref() == Some(old_rs.as_str()))
        .unwrap();
    assert_eq!(first.spec.replicas, Some(2));
    assert_eq!(
        annotation(&first.metadata, "deployment.kubernetes.io/revision"),
        Some("3")
    );

    // kubectl get rs prints upstream's columns.
    let (ok, out, err) = kubectl(&c.env, &["get", "rs", "-n", NS]).await;
    assert!(ok, "kubectl get rs: {out}{err}");
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]);
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().take(4).collect::<Vec<_>>()
                == [old_rs.as_str(), "2", "2", "2"]),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_stops_old_pods_first_pause_holds_rollouts_and_history_is_trimmed() {
    let c = Cluster::start(NS).await;
    let mut m = manifest("batch", 2, json!({"type": "Recreate"}));
    m["spec"]["revisionHistoryLimit"] = json!(1);
    apply(&c, &m).await;
    settled(&c, "batch", 2).await;

    // Paused: a template change makes no new ReplicaSet.
    let deployments = c.api::<Deployment>(NS);
    let cluster = &c;
    let patch = |v: serde_json::Value| async move {
        cluster
            .api::<Deployment>(NS)
            .patch("batch", &PatchParams::default(), &Patch::Merge(v))
            .await
            .unwrap()
    };
    let (ok, out, err) = kubectl(&c.env, &["rollout", "pause", "-n", NS, "deployment/batch"]).await;
    assert!(ok, "kubectl rollout pause: {out}{err}");
    patch(json!({"spec": {"template": {"metadata": {"annotations": {"v": "2"}}}}})).await;
    eventually(
        "the pause to be recorded",
        Duration::from_secs(20),
        || async {
            let d = deployments.get("batch").await.ok()?;
            (condition(&d, "Progressing")?.1 == "DeploymentPaused"
                && d.status.as_ref()?.observed_generation == d.metadata.generation)
                .then_some(())
        },
    )
    .await;
    assert_eq!(replicasets(&c, "batch").await.len(), 1);

    // Resumed: Recreate never runs old and new pods together.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(watch_pod_generations(c.api::<Pod>(NS), stop_rx));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, out, err) =
        kubectl(&c.env, &["rollout", "resume", "-n", NS, "deployment/batch"]).await;
    assert!(ok, "kubectl rollout resume: {out}{err}");
    settled(&c, "batch", 2).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = stop_tx.send(());
    assert!(
        !watch.await.unwrap(),
        "old and new pods ran at the same time"
    );

    // A third template: with a history of one, the first ReplicaSet is deleted.
    patch(json!({"spec": {"template": {"metadata": {"annotations": {"v": "3"}}}}})).await;
    eventually("revision 3", Duration::from_secs(60), || async {
        let d = deployments.get("batch").await.ok()?;
        (annotation(&d.metadata, "deployment.kubernetes.io/revision") == Some("3")).then_some(())
    })
    .await;
    settled(&c, "batch", 2).await;
    let sets = eventually(
        "history trimmed to one",
        Duration::from_secs(30),
        || async {
            let sets = replicasets(&c, "batch").await;
            (sets.len() == 2).then_some(sets)
        },
    )
    .await;
    let mut revisions: Vec<&str> = sets
        .iter()
        .filter_map(|rs| annotation(&rs.metadata, "deployment.kubernetes.io/revision"))
        .collect();
    revisions.sort();
    assert_eq!(revisions, ["2", "3"]);
}

/// Watches all pods until `stop`; whether pods of two pod-template hashes were ever live at once.
async fn watch_pod_generations(api: Api<Pod>, stop: tokio::sync::oneshot::Receiver<()>) -> bool {
    let mut pods: BTreeMap<String, Pod> = BTreeMap::new();
    let stream = watcher(api, watcher::Config::default().labels("app=batch"));
    let mut stream = std::pin::pin!(stream);
    let mut stop = std::pin::pin!(stop);
    let mut overlapped = false;
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = &mut stop => return overlapped,
        };
        match event {
            Some(Ok(watcher::Event::InitApply(p) | watcher::Event::Apply(p))) => {
                pods.insert(p.metadata.name.clone().unwrap_or_default(), p);
            }
            Some(Ok(watcher::Event::Delete(p))) => {
                pods.remove(p.metadata.name.as_deref().unwrap_or_default());
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => panic!("watching pods: {e}"),
            None => return overlapped,
        }
        // Any pod still present counts as running: Recreate waits for old pods to be gone entirely.
        let hashes: std::collections::BTreeSet<&str> = pods
            .values()
            .filter(|p| {
                !matches!(
                    p.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
            })
            .filter_map(|p| label(&p.metadata, "pod-template-hash"))
            .collect();
        overlapped |= hashes.len() > 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_that_cannot_progress_exceeds_its_deadline() {
    let c = Cluster::start(NS).await;
    let mut m = manifest("stuck", 1, json!({}));
    m["spec"]["progressDeadlineSeconds"] = json!(2);
    // An image the kubelet cannot resolve: the pod never becomes ready.
    m["spec"]["template"]["spec"]["containers"][0]["image"] = json!("kube-local.test/missing:1");
    apply(&c, &m).await;
    let d = eventually(
        "the progress deadline to pass",
        Duration::from_secs(30),
        || async {
            let d = c.api::<Deployment>(NS).get("stuck").await.ok()?;
            (condition(&d, "Progressing")?.1 == "ProgressDeadlineExceeded").then_some(d)
        },
    )
    .await;
    assert_eq!(
        condition(&d, "Progressing"),
        Some(("False".into(), "ProgressDeadlineExceeded".into()))
    );
    assert_eq!(
        condition(&d, "Available"),
        Some(("False".into(), "MinimumReplicasUnavailable".into()))
    );
    assert_eq!(d.status.as_ref().unwrap().unavailable_replicas, Some(1));
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "rollout",
            "status",
            "-n",
            NS,
            "deployment/stuck",
            "--timeout=20s",
        ],
    )
    .await;
    assert!(!ok, "{out}");
    assert!(err.contains("exceeded its progress deadline"), "{err}");
}
