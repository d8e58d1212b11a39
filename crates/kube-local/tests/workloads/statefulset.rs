//! StatefulSets: ordinals, stable names and volumes, scaling, and the update strategies.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::common::{Cluster, eventually, http_get, ready, testapp_template};

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
