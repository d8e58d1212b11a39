//! The membership wiring of reconcile, pass by pass: a recording API server
//! (mocked, replying like a real one) and an in-memory etcd that refuses what
//! etcd refuses. Checks the order of effects, which is what keeps a real
//! cluster safe: pin the operation first, change etcd membership before
//! pods, update the members' record before the StatefulSet, clear the pin
//! only when the step is verified.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dkv_api::DistributedKV;
use dkv_etcd::FakeEtcd;
use dkv_operator::cluster::context::Context;
use dkv_operator::cluster::context::etcd_access::FixedConnector;
use dkv_operator::cluster::validate::{Defaults, Facts};
use dkv_operator::cluster::watches::{self, Stores};
use dkv_operator::cluster::{build, reconcile, validate};
use dkv_operator::metrics::Metrics;
use http::{Request, Response};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::client::Body;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

/// One write the operator sent: method, path (no query), body.
type Sent = (String, String, Value);

/// An API server double that records every request and answers as a real
/// one would (apply/patch → the object, event create → 201).
fn recording_api() -> (Client, Arc<Mutex<Vec<Sent>>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let sink = log.clone();
    tokio::spawn(async move {
        while let Some((request, respond)) = handle.next_request().await {
            let method = request.method().to_string();
            let sink_is_get = method == "GET";
            let path = request.uri().path().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            sink.lock()
                .unwrap()
                .push((method, path.clone(), body.clone()));
            let mut reply = body;
            // The cluster's budget, read before a serving member is evicted: one disruption allowed.
            if sink_is_get && path.contains("/poddisruptionbudgets/") {
                reply = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": "orders", "namespace": "shop"},
                    "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}});
            }
            if reply.get("metadata").is_none() && reply.is_object() {
                reply["metadata"] =
                    json!({"name": path.rsplit('/').next(), "namespace": "shop", "uid": "u"});
            }
            // A status write returns the whole object, spec included.
            if path.contains("/distributedkvs/") && reply.get("spec").is_none() && reply.is_object()
            {
                reply["spec"] = json!({"size": 1, "image": "registry.k8s.io/etcd:3.5.16-0"});
            }
            respond.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                    .unwrap(),
            );
        }
    });
    (Client::new(service, "default"), log)
}

fn ready<K: kube::Resource<DynamicType = ()> + Clone + 'static>(
    writer: &mut Writer<K>,
    objects: Vec<K>,
) {
    writer.apply_watcher_event(&Event::Init);
    for obj in objects {
        writer.apply_watcher_event(&Event::InitApply(obj));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

fn dkv(size: i32, status: Option<Value>) -> DistributedKV {
    let mut value = json!({
        "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "uid-1", "generation": 2, "finalizers": ["dkv.io/finalizer"]},
        "spec": {"size": size, "image": "registry.k8s.io/etcd:3.5.16-0"}
    });
    if let Some(status) = status {
        value["status"] = status;
    }
    serde_json::from_value(value).unwrap()
}

/// Pods as the kubelet reports them; the fake etcd's members answer at
/// `http://orders-N:2379`, so the "pod IP" is the member name.
fn pod(ordinal: i32) -> Pod {
    pod_on(ordinal, "registry.k8s.io/etcd:3.5.16-0")
}

fn pod_on(ordinal: i32, image: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("orders-{ordinal}"), "namespace": "shop", "labels": {"dkv.io/cluster": "orders"}},
        "spec": {"containers": [{"name": "etcd", "image": image}]},
        "status": {"podIP": format!("orders-{ordinal}"), "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// The client Service's EndpointSlice with `n` ready members behind it.
fn client_endpoints(n: i32) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let endpoints: Vec<Value> = (0..n)
        .map(|i| json!({"addresses": [format!("10.0.0.{i}")], "conditions": {"ready": true}}))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "orders-client-x", "namespace": "shop", "labels": {
            "kubernetes.io/service-name": "orders-client", "dkv.io/cluster": "orders"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
    }))
    .unwrap()
}

/// Everything that exists for a 3-member cluster that formed, plus `pods`.
fn world(
    etcd: Arc<FakeEtcd>,
    pods: Vec<Pod>,
    record_members: i32,
    replicas: i32,
) -> (Arc<Context>, Arc<Mutex<Vec<Sent>>>) {
    let three = dkv(3, None);
    let facts = Facts {
        storage_classes: Some(vec!["standard".into()]),
        running: Default::default(),
        deployed_storage_size: None,
        volume_capacity: None,
    };
    let defaults = Defaults {
        operator_image: "dkv:test".into(),
    };
    let cluster = validate::validate(&three, &facts, &defaults).unwrap();
    let mut prepared = build::build(&cluster, &dkv_test_support::first_plan(&cluster));
    // The record as a previous pass wrote it: formed, `record_members` members.
    let record = json!({"state": "existing", "members": (0..record_members).map(|i| json!({
        "name": format!("orders-{i}"), "peerURL": format!("http://orders-{i}.orders-peer.shop.svc:2380"), "started": i < 3
    })).collect::<Vec<_>>()});
    prepared.members.data = Some([("members.json".to_owned(), record.to_string())].into());
    let prepared = prepared.as_applied();
    let mut sts: StatefulSet = prepared.statefulset.clone();
    sts.spec.replicas = Some(replicas);
    sts.status = Some(StatefulSetStatus {
        replicas: 3,
        ready_replicas: Some(3),
        ..Default::default()
    });

    let (statefulsets, mut w1) = watches::store();
    let (services, mut w2) = watches::store();
    let (pdbs, mut w3) = watches::store();
    let (cronjobs, mut w4) = watches::store();
    let (configmaps, mut w5) = watches::store();
    let (pod_store, mut w6) = watches::store();
    let (storage_classes, mut w7) = watches::store::<StorageClass>();
    ready(&mut w1, vec![sts]);
    ready(
        &mut w2,
        [
            Some(prepared.peer_service.clone()),
            prepared.client_service.clone(),
        ]
        .into_iter()
        .flatten()
        .collect(),
    );
    ready(&mut w3, vec![prepared.pdb.clone()]);
    ready(&mut w4, vec![]);
    ready(&mut w5, vec![prepared.members.clone()]);
    ready(&mut w6, pods);
    ready(
        &mut w7,
        vec![
            serde_json::from_value(
                json!({"metadata": {"name": "standard"}, "provisioner": "local"}),
            )
            .unwrap(),
        ],
    );
    let (backups, mut w8) = watches::store();
    ready(&mut w8, vec![]);
    let (endpoint_slices, mut w9) = watches::store();
    ready(&mut w9, vec![client_endpoints(3)]);
    let (claims, mut w10) = watches::store();
    ready(&mut w10, vec![]);
    let (nodes, mut w11) = watches::store();
    ready(&mut w11, vec![]);
    let stores = Stores {
        statefulsets,
        services,
        pdbs,
        cronjobs,
        configmaps,
        pods: pod_store,
        storage_classes,
        endpoint_slices,
        claims,
        backups,
        nodes: Some(nodes),
    };
    let (client, log) = recording_api();
    let ctx = Context::new(
        client,
        stores,
        defaults,
        Arc::new(Metrics::new()),
        Reporter {
            controller: "dkv-operator".into(),
            instance: None,
        },
    )
    .with_etcd(Arc::new(FixedConnector(etcd)));
    (Arc::new(ctx), log)
}

fn writes(log: &Arc<Mutex<Vec<Sent>>>) -> Vec<Sent> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|(_, path, _)| !path.contains("/events"))
        .cloned()
        .collect()
}

fn status_patch(log: &Arc<Mutex<Vec<Sent>>>) -> Option<Value> {
    writes(log)
        .into_iter()
        .rev()
        .find(|(_, path, _)| path.ends_with("/status"))
        .map(|(_, _, body)| body["status"].clone())
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn scale_up_pins_adds_a_learner_records_it_then_grows_the_statefulset() {
    let etcd = Arc::new(FakeEtcd::with_members(
        &["orders-0", "orders-1", "orders-2"],
        "3.5.16",
    ));
    let pods: Vec<Pod> = (0..3).map(pod).collect();

    // Pass 1: the operation is pinned in status, nothing else happens.
    let (ctx, log) = world(etcd.clone(), pods.clone(), 3, 3);
    reconcile(Arc::new(dkv(4, None)), ctx).await.unwrap();
    settle().await;
    let sent = writes(&log);
    assert_eq!(sent.len(), 1, "only the pin: {sent:#?}");
    let status = status_patch(&log).unwrap();
    assert_eq!(status["operation"]["kind"], "AddLearner");
    assert_eq!(status["operation"]["target"], "orders-3");
    assert!(
        etcd.calls().iter().all(|c| !c.starts_with("add")),
        "etcd untouched before the pin"
    );

    // Pass 2 (status now pinned): the learner is added in etcd; the record
    // and StatefulSet follow on the next pass, once etcd lists it.
    let (ctx, log) = world(etcd.clone(), pods.clone(), 3, 3);
    reconcile(Arc::new(dkv(4, Some(status.clone()))), ctx)
        .await
        .unwrap();
    settle().await;
    assert!(
        etcd.calls()
            .contains(&"add learner http://orders-3.orders-peer.shop.svc:2380".to_owned())
    );
    assert!(
        writes(&log)
            .iter()
            .all(|(_, path, _)| !path.contains("statefulsets")),
        "no pod before membership: {:#?}",
        writes(&log)
    );

    // Pass 3: etcd lists the learner: the record names it first, then the
    // StatefulSet grows to 4.
    let (ctx, log) = world(etcd.clone(), pods.clone(), 3, 3);
    reconcile(Arc::new(dkv(4, Some(status.clone()))), ctx)
        .await
        .unwrap();
    settle().await;
    let sent = writes(&log);
    let cm = sent
        .iter()
        .position(|(_, p, _)| p.ends_with("/configmaps/orders-members"))
        .expect("record updated");
    let sts = sent
        .iter()
        .position(|(_, p, _)| p.ends_with("/statefulsets/orders"))
        .expect("statefulset grown");
    assert!(cm < sts, "record before StatefulSet: {sent:#?}");
    let record: Value =
        serde_json::from_str(sent[cm].2["data"]["members.json"].as_str().unwrap()).unwrap();
    assert_eq!(record["state"], "existing");
    assert_eq!(
        record["members"][3],
        json!({"name": "orders-3", "peerURL": "http://orders-3.orders-peer.shop.svc:2380", "started": false})
    );
    assert_eq!(sent[sts].2["spec"]["replicas"], 4);

    // The member starts and catches up; the next pass promotes it...
    etcd.start_and_catch_up("http://orders-3.orders-peer.shop.svc:2380", "orders-3");
    let mut pods4 = pods.clone();
    pods4.push(pod(3));
    let (ctx, _) = world(etcd.clone(), pods4.clone(), 4, 4);
    reconcile(Arc::new(dkv(4, Some(status.clone()))), ctx)
        .await
        .unwrap();
    assert!(
        etcd.members().iter().all(|m| !m.is_learner),
        "promoted: {:?}",
        etcd.members()
    );

    // ...and the one after verifies it and clears the pin.
    let (ctx, log) = world(etcd.clone(), pods4, 4, 4);
    reconcile(Arc::new(dkv(4, Some(status))), ctx)
        .await
        .unwrap();
    settle().await;
    let final_status = status_patch(&log).unwrap();
    assert!(
        final_status.get("operation").is_none() || final_status["operation"].is_null(),
        "{final_status:#}"
    );
    assert_eq!(final_status["members"].as_array().unwrap().len(), 4);
    assert_eq!(final_status["leader"], "orders-0");
    assert_eq!(
        etcd.calls()
            .iter()
            .filter(|c| c.starts_with("add learner"))
            .count(),
        1,
        "one learner, added once"
    );
}

#[tokio::test]
async fn a_scale_down_that_would_break_quorum_waits_and_says_why() {
    // 3 members, member 1 down, spec asks for 2: removing orders-2 would
    // leave 1 healthy voter of 2 — below quorum.
    let etcd = Arc::new(FakeEtcd::with_members(
        &["orders-0", "orders-1", "orders-2"],
        "3.5.16",
    ));
    etcd.set_healthy("orders-1", false);
    let pods: Vec<Pod> = (0..3).map(pod).collect();
    let (ctx, log) = world(etcd.clone(), pods, 3, 3);
    reconcile(Arc::new(dkv(2, None)), ctx).await.unwrap();
    settle().await;
    let status = status_patch(&log).unwrap();
    assert!(
        status.get("operation").is_none() || status["operation"].is_null(),
        "nothing pinned: {status:#}"
    );
    let progressing = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap()
        .clone();
    assert_eq!(progressing["status"], "True");
    assert_eq!(progressing["reason"], "WaitingForSafety");
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .contains("orders-1 is unhealthy"),
        "{progressing:#}"
    );
    assert!(
        etcd.calls().iter().all(|c| !c.starts_with("remove")),
        "{:?}",
        etcd.calls()
    );
}

#[tokio::test]
async fn a_rolling_upgrade_restarts_followers_first_after_the_template_changed() {
    // Members run 3.4; the spec (and so the StatefulSet template) asks for 3.5.
    let etcd = Arc::new(FakeEtcd::with_members(
        &["orders-0", "orders-1", "orders-2"],
        "3.4.23",
    ));
    let pods: Vec<Pod> = (0..3)
        .map(|i| pod_on(i, "registry.k8s.io/etcd:3.4.23-0"))
        .collect();

    let (ctx, log) = world(etcd.clone(), pods.clone(), 3, 3);
    reconcile(Arc::new(dkv(3, None)), ctx).await.unwrap();
    settle().await;
    let status = status_patch(&log).unwrap();
    assert_eq!(status["operation"]["kind"], "UpgradeMember");
    assert_eq!(
        status["operation"]["target"], "orders-2",
        "highest-ordinal follower first"
    );

    let (ctx, log) = world(etcd.clone(), pods.clone(), 3, 3);
    reconcile(Arc::new(dkv(3, Some(status.clone()))), ctx)
        .await
        .unwrap();
    settle().await;
    let sent = writes(&log);
    // A serving member is restarted through the eviction API, within the budget.
    let deleted = sent
        .iter()
        .position(|(m, p, _)| m == "POST" && p.ends_with("/pods/orders-2/eviction"))
        .expect("the member's pod is evicted");
    if let Some(sts) = sent
        .iter()
        .position(|(_, p, _)| p.ends_with("/statefulsets/orders"))
    {
        assert!(
            sts < deleted,
            "the template changes before the pod restarts: {sent:#?}"
        );
    }
    assert!(
        sent.iter().all(|(_, p, _)| !(p.ends_with("/pods/orders-0")
            || p.ends_with("/pods/orders-1")
            || p.ends_with("/pods/orders-0/eviction")
            || p.ends_with("/pods/orders-1/eviction"))),
        "one member at a time: {sent:#?}"
    );
    assert_eq!(
        etcd.calls()
            .iter()
            .filter(|c| c.starts_with("move leader"))
            .count(),
        0,
        "a follower needs no leader move"
    );
}

#[tokio::test]
async fn a_removal_ends_with_the_stale_volume_and_clears_the_pin() {
    // Member 3 already left etcd and its pod is gone: what remains is its
    // volume, then the operation is complete.
    let etcd = Arc::new(FakeEtcd::with_members(
        &["orders-0", "orders-1", "orders-2"],
        "3.5.16",
    ));
    let pods: Vec<Pod> = (0..3).map(pod).collect();
    let pinned = json!({"operation": {"kind": "RemoveMember", "target": "orders-3", "startedAt": "2026-11-22T06:00:00Z"}});
    let (ctx, log) = world(etcd, pods, 3, 3);
    reconcile(Arc::new(dkv(3, Some(pinned))), ctx)
        .await
        .unwrap();
    settle().await;
    let sent = writes(&log);
    assert!(
        sent.iter()
            .any(|(m, p, _)| m == "DELETE" && p.ends_with("/persistentvolumeclaims/data-orders-3")),
        "{sent:#?}"
    );
    let status = status_patch(&log).unwrap();
    assert_eq!(status["operation"], Value::Null, "{status:#}");
}
