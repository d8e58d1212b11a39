//! The exact API requests of one reconcile, against a mocked API server:
//! finalizer add and removal, status written only when it changed, the
//! permanent-error path, and transient-error backoff.
//!
//! These need exact call sequences, which is what a mock is for; behaviour
//! against a real API server is covered by the kube-local integration tests.

use std::sync::Arc;
use std::time::Duration;

use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_operator::cluster::context::Context;
use dkv_operator::cluster::validate::{Defaults, Facts};
use dkv_operator::cluster::watches::{self, Stores};
use dkv_operator::cluster::{build, reconcile, retry_delay, validate};
use dkv_operator::metrics::Metrics;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::events::Reporter;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use kube::{Client, Resource};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

type ApiHandle = Handle<Request<Body>, Response<Body>>;

const DKV_PATH: &str = "/apis/dkv.io/v1beta1/namespaces/shop/distributedkvs/orders";

fn fixture(name: &str) -> DistributedKV {
    let path = format!("{}/tests/fixtures/{name}.yaml", env!("CARGO_MANIFEST_DIR"));
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn with_finalizer(mut dkv: DistributedKV) -> DistributedKV {
    dkv.metadata.finalizers = Some(vec!["dkv.io/finalizer".into()]);
    dkv
}

fn ready<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    writer.apply_watcher_event(&Event::Init);
    for obj in objects {
        writer.apply_watcher_event(&Event::InitApply(obj));
    }
    writer.apply_watcher_event(&Event::InitDone);
}

fn ready_member(ordinal: i32) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("orders-{ordinal}"), "namespace": "shop", "labels": {
            "dkv.io/cluster": "orders", "controller-revision-hash": "orders-abc"}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap()
}

/// The client Service's EndpointSlice with `n` ready members behind it.
fn client_endpoints(n: i32) -> EndpointSlice {
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

/// Caches as the watches would fill them: `children` of the cluster, and the
/// StorageClasses `standard` and `fast-ssd`.
fn stores(statefulsets: Vec<StatefulSet>, extra: Option<&build::DesiredChildren>) -> Stores {
    stores_with_backups(statefulsets, extra, Vec::new())
}

/// The same, with `backups` in the DistributedKVBackup cache.
fn stores_with_backups(
    statefulsets: Vec<StatefulSet>,
    extra: Option<&build::DesiredChildren>,
    backups: Vec<DistributedKVBackup>,
) -> Stores {
    // A converged world's members are Ready and behind the client Service.
    let members = if extra.is_some() { 3 } else { 0 };
    stores_serving(statefulsets, extra, backups, members, members)
}

/// The same, with `ready_pods` member pods Ready and `serving` ready
/// endpoints behind the client Service. The pods have no IP: the pass cannot
/// reach etcd, so pod readiness stands alone.
fn stores_serving(
    statefulsets: Vec<StatefulSet>,
    extra: Option<&build::DesiredChildren>,
    backups: Vec<DistributedKVBackup>,
    ready_pods: i32,
    serving: i32,
) -> Stores {
    let records = backups;
    let (sts, mut sts_w) = watches::store();
    let (services, mut svc_w) = watches::store();
    let (pdbs, mut pdb_w) = watches::store();
    let (cronjobs, mut cj_w) = watches::store();
    let (configmaps, mut cm_w) = watches::store();
    let (pods, mut pod_w) = watches::store();
    ready(&mut pod_w, (0..ready_pods).map(ready_member).collect());
    let (storage_classes, mut sc_w) = watches::store::<StorageClass>();
    ready(&mut sts_w, statefulsets);
    ready(
        &mut svc_w,
        extra
            .map(|p| {
                [Some(p.peer_service.clone()), p.client_service.clone()]
                    .into_iter()
                    .flatten()
                    .collect()
            })
            .unwrap_or_default(),
    );
    ready(
        &mut pdb_w,
        extra.map(|p| vec![p.pdb.clone()]).unwrap_or_default(),
    );
    ready(
        &mut cj_w,
        extra
            .and_then(|p| p.backup_cronjob.clone())
            .into_iter()
            .collect(),
    );
    ready(
        &mut cm_w,
        extra.map(|p| vec![p.members.clone()]).unwrap_or_default(),
    );
    let class = |name: &str| StorageClass {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: "local".into(),
        ..Default::default()
    };
    ready(&mut sc_w, vec![class("standard"), class("fast-ssd")]);
    let (backups, mut backup_w) = watches::store();
    ready(&mut backup_w, records);
    let (claims, mut claim_w) = watches::store();
    ready(&mut claim_w, Vec::new());
    let (nodes, mut node_w) = watches::store();
    ready(&mut node_w, Vec::new());
    let (endpoint_slices, mut slice_w) = watches::store();
    ready(
        &mut slice_w,
        extra
            .map(|_| vec![client_endpoints(serving)])
            .unwrap_or_default(),
    );
    // The writers are dropped here: a store stays readable without them.
    Stores {
        statefulsets: sts,
        services,
        pdbs,
        cronjobs,
        configmaps,
        pods,
        storage_classes,
        endpoint_slices,
        claims,
        backups,
        nodes: Some(nodes),
    }
}

fn context(stores: Stores) -> (Arc<Context>, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let ctx = Context::new(
        client,
        stores,
        Defaults {
            operator_image: "ghcr.io/dkv-io/dkv:test".into(),
        },
        Arc::new(Metrics::new()),
        Reporter {
            controller: "dkv-operator".into(),
            instance: Some("test".into()),
        },
    );
    (Arc::new(ctx), handle)
}

/// One request the operator sent.
struct Sent {
    method: Method,
    uri: String,
    content_type: String,
    body: Value,
    respond: SendResponse<Response<Body>>,
}

impl Sent {
    fn reply(self, code: StatusCode, body: Value) {
        let response = Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Replies with the object the request carried (what an API server
    /// returns for a successful apply), merged over `base`.
    fn reply_echo(self, base: Value) {
        let mut object = base;
        merge(&mut object, &self.body);
        self.reply(StatusCode::OK, object);
    }
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

async fn next(handle: &mut ApiHandle) -> Sent {
    let (request, respond) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("the operator sent no further request")
        .expect("the client was dropped");
    let method = request.method().clone();
    let uri = request.uri().to_string();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    Sent {
        method,
        uri,
        content_type,
        body,
        respond,
    }
}

/// Answers the Events a pass publishes after its writes; anything else the
/// operator sends here is a failure.
async fn answer_remaining_events(api: &mut ApiHandle) {
    while let Ok(Some((request, respond))) =
        tokio::time::timeout(Duration::from_millis(200), api.next_request()).await
    {
        assert!(
            request.uri().path().contains("/events"),
            "only events may follow: {}",
            request.uri()
        );
        respond.send_response(
            Response::builder()
                .status(201)
                .body(Body::from(b"{}".to_vec()))
                .unwrap(),
        );
    }
}

/// After the reconcile finished and every client handle is gone, the API
/// server must have received nothing more.
async fn assert_no_more_requests(ctx: Arc<Context>, mut handle: ApiHandle) {
    drop(ctx);
    match tokio::time::timeout(Duration::from_secs(5), handle.next_request()).await {
        Ok(None) => {}
        Ok(Some((request, _))) => {
            panic!("unexpected request {} {}", request.method(), request.uri())
        }
        Err(_) => panic!("the client was never dropped"),
    }
}

fn expect_event(sent: Sent, reason: &str, type_: &str) {
    assert_eq!(sent.method, Method::POST);
    assert_eq!(sent.uri, "/apis/events.k8s.io/v1/namespaces/shop/events?");
    assert_eq!(sent.body["reason"], reason, "{}", sent.body);
    assert_eq!(sent.body["type"], type_);
    assert_eq!(sent.body["regarding"]["kind"], "DistributedKV");
    assert_eq!(sent.body["regarding"]["name"], "orders");
    assert_eq!(sent.body["reportingController"], "dkv-operator");
    let body = sent.body.clone();
    sent.reply(StatusCode::CREATED, body);
}

/// The children of `dkv` as an API server would hold them after a converged
/// creation: everything prepared, and a StatefulSet with all members ready.
fn converged_children(dkv: &DistributedKV) -> (build::DesiredChildren, StatefulSet) {
    let facts = Facts {
        storage_classes: Some(vec!["standard".into(), "fast-ssd".into()]),
        running: Default::default(),
        deployed_storage_size: None,
        volume_capacity: None,
    };
    let cluster = validate::validate(
        dkv,
        &facts,
        &Defaults {
            operator_image: "ghcr.io/dkv-io/dkv:test".into(),
        },
    )
    .unwrap();
    let prepared = build::build(&cluster, &dkv_test_support::first_plan(&cluster)).as_applied();
    let mut sts = prepared.statefulset.clone();
    sts.metadata.generation = Some(1);
    sts.status = Some(StatefulSetStatus {
        replicas: 3,
        ready_replicas: Some(3),
        current_replicas: Some(3),
        updated_replicas: Some(3),
        current_revision: Some("orders-abc".into()),
        update_revision: Some("orders-abc".into()),
        observed_generation: Some(1),
        ..Default::default()
    });
    (prepared, sts)
}

#[tokio::test]
async fn the_finalizer_is_added_before_anything_else() {
    let dkv = fixture("minimal");
    let (ctx, mut api) = context(stores(vec![], None));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));

    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::PATCH);
    assert_eq!(sent.uri, format!("{DKV_PATH}?"));
    assert_eq!(sent.content_type, "application/json-patch+json");
    assert_eq!(
        sent.body,
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["dkv.io/finalizer"]}
        ])
    );
    let mut updated = serde_json::to_value(with_finalizer(dkv)).unwrap();
    updated["metadata"]["resourceVersion"] = json!("2");
    sent.reply(StatusCode::OK, updated);

    let action = run.await.unwrap().unwrap();
    assert_eq!(
        action,
        Action::await_change(),
        "the finalizer patch itself triggers the next pass"
    );
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn deletion_reclaims_volumes_then_removes_the_finalizer() {
    let mut dkv = with_finalizer(fixture("full"));
    dkv.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let (ctx, mut api) = context(stores(vec![], None));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));

    // finalBackupOnDelete is set: the final backup record is looked up, and
    // only once it has completed does anything get torn down.
    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::GET);
    assert!(
        sent.uri.starts_with(
            "/apis/dkv.io/v1alpha1/namespaces/shop/distributedkvbackups/orders-final-"
        ),
        "{}",
        sent.uri
    );
    let record = sent
        .uri
        .split('/')
        .next_back()
        .unwrap_or_default()
        .to_owned();
    sent.reply(
        StatusCode::OK,
        json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": record, "namespace": "shop"},
            "spec": {"cluster": "orders"},
            "status": {"phase": "Completed", "artifact": {"uri": "s3://b/p/shop/orders/orders-1.db", "sizeBytes": 1, "sha256": "ab", "revision": 1}}
        }),
    );

    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::DELETE);
    assert_eq!(
        sent.uri,
        "/api/v1/namespaces/shop/persistentvolumeclaims?&labelSelector=dkv.io%2Fcluster%3Dorders"
    );
    sent.reply(StatusCode::OK, json!({"apiVersion": "v1", "kind": "PersistentVolumeClaimList", "metadata": {}, "items": []}));
    expect_event(next(&mut api).await, "VolumesDeleted", "Normal");

    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::PATCH);
    assert_eq!(sent.uri, format!("{DKV_PATH}?"));
    assert_eq!(sent.content_type, "application/json-patch+json");
    assert_eq!(
        sent.body,
        json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "dkv.io/finalizer"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ])
    );
    let mut released = serde_json::to_value(&dkv).unwrap();
    released["metadata"]["finalizers"] = json!([]);
    sent.reply(StatusCode::OK, released);

    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn deletion_with_retain_keeps_the_volumes() {
    let mut dkv = with_finalizer(fixture("minimal"));
    dkv.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let (ctx, mut api) = context(stores(vec![], None));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));

    let sent = next(&mut api).await;
    assert_eq!(
        sent.method,
        Method::PATCH,
        "only the finalizer removal: {}",
        sent.uri
    );
    assert_eq!(sent.body[1]["op"], "remove");
    let mut released = serde_json::to_value(&dkv).unwrap();
    released["metadata"]["finalizers"] = json!([]);
    sent.reply(StatusCode::OK, released);

    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn status_is_written_once_and_not_again_when_nothing_changed() {
    let dkv = with_finalizer(fixture("minimal"));
    let (prepared, sts) = converged_children(&dkv);

    // First pass: children exist and match, so the only write is status.
    let (ctx, mut api) = context(stores(vec![sts.clone()], Some(&prepared)));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::PATCH);
    assert_eq!(sent.uri, format!("{DKV_PATH}/status?"));
    assert_eq!(sent.content_type, "application/merge-patch+json");
    let status = sent.body["status"].clone();
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["replicas"], 3);
    assert_eq!(status["readyReplicas"], 3);
    assert_eq!(status["currentVersion"], "3.5.16");
    assert_eq!(
        status["selector"],
        "app.kubernetes.io/instance=orders,app.kubernetes.io/name=distributedkv"
    );
    let condition = |t: &str| {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap()
    };
    assert_eq!(condition("Available")["status"], "True");
    assert_eq!(condition("Available")["reason"], "QuorumHealthy");
    assert_eq!(condition("Progressing")["status"], "False");
    assert_eq!(condition("Degraded")["status"], "False");
    let mut written = serde_json::to_value(&dkv).unwrap();
    written["status"] = status.clone();
    sent.reply(StatusCode::OK, written.clone());
    // Each new condition is announced once.
    expect_event(next(&mut api).await, "QuorumHealthy", "Normal");
    expect_event(next(&mut api).await, "Converged", "Normal");
    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;

    // Second pass over the object as it now is: nothing to write at all.
    let dkv: DistributedKV = serde_json::from_value(written).unwrap();
    let (ctx, api) = context(stores(vec![sts], Some(&prepared)));
    reconcile(Arc::new(dkv), ctx.clone()).await.unwrap();
    assert_no_more_requests(ctx, api).await;
}

/// The status a pass over a cluster whose children all exist writes, with
/// `ready_pods` Ready members and `serving` endpoints behind the client
/// Service.
async fn first_status(ready_pods: i32, serving: i32) -> Value {
    pass_status(None, ready_pods, serving).await
}

/// The status a pass writes over a cluster whose status is `status`.
async fn pass_status(status: Option<Value>, ready_pods: i32, serving: i32) -> Value {
    let mut dkv = with_finalizer(fixture("minimal"));
    dkv.status = status.map(|s| serde_json::from_value(s).unwrap());
    let (prepared, sts) = converged_children(&dkv);
    let stores = stores_serving(vec![sts], Some(&prepared), Vec::new(), ready_pods, serving);
    let (ctx, mut api) = context(stores);
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(sent.uri, format!("{DKV_PATH}/status?"));
    let status = sent.body["status"].clone();
    sent.reply_echo(serde_json::to_value(&dkv).unwrap());
    answer_remaining_events(&mut api).await;
    run.await.unwrap().unwrap();
    status
}

fn condition_of<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn available_waits_until_the_client_service_routes_to_a_quorum() {
    // Two members are Ready, but the client Service routes to one of them
    // (its EndpointSlice lags the pods): a client could not reach quorum.
    let status = pass_status(Some(creating()), 2, 1).await;
    assert_eq!(status["readyReplicas"], 2);
    let available = condition_of(&status, "Available");
    assert_eq!(available["status"], "False", "{status:#}");
    assert_eq!(available["reason"], "Creating");
    assert!(
        available["message"]
            .as_str()
            .is_some_and(|m| m.contains("Service orders-client routes to 1; quorum needs 2")),
        "{available}"
    );
    // Two of three behind the Service is quorum: Available.
    let status = pass_status(Some(creating()), 3, 2).await;
    assert_eq!(condition_of(&status, "Available")["status"], "True");
    // A cluster that formed (every member ready, or its status said so, or
    // its membership record does and the status is new) and whose Service
    // routes to too few.
    for formed in [Some(creating()), Some(available_status()), None] {
        let status = pass_status(formed, 3, 1).await;
        let available = condition_of(&status, "Available");
        assert_eq!(available["status"], "False", "{status:#}");
        assert_eq!(available["reason"], "EndpointsNotReady");
    }
}

/// A status written while the cluster forms.
fn creating() -> Value {
    json!({"conditions": [{"type": "Available", "status": "False", "reason": "Creating",
        "message": "0/3 members ready", "lastTransitionTime": "2026-11-25T06:00:00Z"}]})
}

/// A status written once the cluster was available.
fn available_status() -> Value {
    json!({"conditions": [{"type": "Available", "status": "True", "reason": "QuorumHealthy",
        "message": "3/3 members ready", "lastTransitionTime": "2026-11-25T06:00:00Z"}]})
}

#[tokio::test]
async fn members_that_started_but_are_not_ready_yet_are_a_cluster_forming_not_a_fault() {
    // Every member has run (the record says the cluster exists) but no pod
    // is Ready yet: Creating, and nothing Degraded.
    let status = pass_status(Some(creating()), 0, 0).await;
    assert_eq!(condition_of(&status, "Available")["reason"], "Creating");
    assert_eq!(
        condition_of(&status, "Progressing")["reason"],
        "CreatingCluster"
    );
    assert_eq!(
        condition_of(&status, "Degraded")["status"],
        "False",
        "{status:#}"
    );
    // After it formed, the same is a fault.
    let status = pass_status(Some(available_status()), 0, 0).await;
    assert_eq!(condition_of(&status, "Available")["reason"], "QuorumLost");
    assert_eq!(condition_of(&status, "Degraded")["status"], "True");
}

#[tokio::test]
async fn ready_replicas_count_ready_pods_never_more() {
    // The StatefulSet's status still says 3 ready; one pod is Ready now.
    let status = first_status(1, 1).await;
    assert_eq!(status["readyReplicas"], 1, "{status:#}");
    assert_eq!(condition_of(&status, "Available")["status"], "False");
    assert_eq!(condition_of(&status, "Available")["reason"], "Creating");
}

#[tokio::test]
async fn backup_facts_in_status_come_from_the_records_not_from_the_cached_status() {
    let mut dkv = with_finalizer(fixture("minimal"));
    // What a stale cache might hold: an older last backup.
    dkv.status = Some(
        serde_json::from_value(json!({
            "lastBackup": {"name": "orders-older", "uri": "s3://b/p/shop/orders/orders-20261122-050000.db"},
            "lastBackupTime": "2026-11-22T05:00:00Z"
        }))
        .unwrap(),
    );
    let (prepared, sts) = converged_children(&dkv);
    let record = |name: &str, phase: &str, at: &str| -> DistributedKVBackup {
        let artifact = (phase == "Completed").then(|| {
            json!({"uri": format!("s3://b/p/shop/orders/{name}.db"), "sizeBytes": 7, "sha256": "ab", "revision": 3})
        });
        serde_json::from_value(json!({
            "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"cluster": "orders"},
            "status": {"phase": phase, "completionTime": at, "artifact": artifact,
                       "message": (phase == "Failed").then_some("access denied")}
        }))
        .unwrap()
    };
    let records = vec![
        record("orders-older", "Completed", "2026-11-22T05:00:00Z"),
        record("orders-good", "Completed", "2026-11-22T06:00:00Z"),
        record("orders-denied", "Failed", "2026-11-22T07:00:00Z"),
    ];
    let (ctx, mut api) = context(stores_with_backups(vec![sts], Some(&prepared), records));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(sent.uri, format!("{DKV_PATH}/status?"));
    let status = sent.body["status"].clone();
    assert_eq!(status["lastBackup"]["name"], "orders-good");
    assert_eq!(status["lastBackup"]["sizeBytes"], 7);
    assert_eq!(status["lastBackupTime"], "2026-11-22T06:00:00Z");
    assert_eq!(status["phase"], "Degraded");
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(
        (degraded["status"].as_str(), degraded["reason"].as_str()),
        (Some("True"), Some("BackupFailed"))
    );
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("orders-denied") && message.contains("access denied"),
        "{message}"
    );
    let mut written = serde_json::to_value(&dkv).unwrap();
    written["status"] = status;
    sent.reply(StatusCode::OK, written);
    expect_event(next(&mut api).await, "QuorumHealthy", "Normal");
    expect_event(next(&mut api).await, "Converged", "Normal");
    expect_event(next(&mut api).await, "BackupFailed", "Warning");
    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn an_invalid_spec_is_reported_in_status_and_not_retried() {
    let mut dkv = with_finalizer(fixture("minimal"));
    dkv.spec.storage = Some(dkv_api::distributedkv::v1alpha1::StorageSpec {
        storage_class_name: "gold".into(),
        size: k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
        reclaim_policy: Default::default(),
    });
    let (ctx, mut api) = context(stores(vec![], None));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));

    let sent = next(&mut api).await;
    assert_eq!(sent.uri, format!("{DKV_PATH}/status?"));
    let status = sent.body["status"].clone();
    assert_eq!(status["phase"], "Degraded");
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .cloned()
        .unwrap();
    assert_eq!(degraded["status"], "True");
    assert_eq!(degraded["reason"], "InvalidSpec");
    let message = degraded["message"].as_str().unwrap();
    assert!(
        message.contains("spec.storage.storageClassName: StorageClass \"gold\" does not exist; create it or use one of: fast-ssd, standard"),
        "{message}"
    );
    // The STATUS column (the Available condition's reason) says it too,
    // never nothing.
    let available = condition_of(&status, "Available").clone();
    assert_eq!(available["status"], "False");
    assert_eq!(available["reason"], "InvalidSpec");
    let mut written = serde_json::to_value(&dkv).unwrap();
    written["status"] = status;
    sent.reply(StatusCode::OK, written);
    expect_event(next(&mut api).await, "InvalidSpec", "Warning");
    expect_event(next(&mut api).await, "InvalidSpec", "Normal");

    let err = run.await.unwrap().unwrap_err();
    assert_eq!(
        err.category(),
        dkv_operator::cluster::error::Category::Permanent
    );
    assert_eq!(
        retry_delay(&dkv, &err, &ctx, 0.5),
        None,
        "no requeue until the spec changes"
    );
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn transient_errors_back_off_exponentially_and_reset_on_success() {
    let mut dkv = with_finalizer(fixture("minimal"));
    let (ctx, mut api) = context(stores(vec![], None));

    let mut delays = Vec::new();
    for _ in 0..3 {
        let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
        let sent = next(&mut api).await;
        assert_eq!(sent.method, Method::PATCH);
        // The membership record is always applied first.
        assert_eq!(
            sent.uri,
            "/api/v1/namespaces/shop/configmaps/orders-members?&force=true&fieldManager=dkv-operator"
        );
        assert_eq!(sent.content_type, "application/apply-patch+yaml");
        sent.reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "etcdserver: leader changed", "reason": "InternalError", "code": 500}),
        );
        if delays.is_empty() {
            // The failed pass still observed the cluster: status says what
            // it saw (nothing runs yet), once.
            let sent = next(&mut api).await;
            assert!(sent.uri.ends_with("/status?"), "{}", sent.uri);
            assert_eq!(sent.body["status"]["phase"], "Creating");
            let mut written = serde_json::to_value(&dkv).unwrap();
            written["status"] = sent.body["status"].clone();
            sent.reply(StatusCode::OK, written.clone());
            expect_event(next(&mut api).await, "Creating", "Normal");
            expect_event(next(&mut api).await, "CreatingCluster", "Normal");
            expect_event(next(&mut api).await, "ReconcileFailed", "Warning");
            dkv = serde_json::from_value(written).unwrap();
        } else {
            // Nothing new to say in status; repeats of one event become a
            // series: the recorder patches it.
            let event = next(&mut api).await;
            assert_eq!(event.method, Method::PATCH);
            assert!(
                event
                    .uri
                    .starts_with("/apis/events.k8s.io/v1/namespaces/shop/events/orders."),
                "{}",
                event.uri
            );
            assert!(
                event.body["series"]["count"].as_i64().unwrap() >= 2,
                "{}",
                event.body
            );
            event.reply(StatusCode::OK, json!({}));
        }
        let err = run.await.unwrap().unwrap_err();
        assert_eq!(
            err.category(),
            dkv_operator::cluster::error::Category::Transient
        );
        delays.push(retry_delay(&dkv, &err, &ctx, 0.0).unwrap());
    }
    assert_eq!(
        delays,
        vec![
            Duration::from_secs(1),
            Duration::from_secs(2),
            Duration::from_secs(4)
        ]
    );

    // A successful pass (the API server accepts every apply) clears the
    // count; status already says what it sees, so it is not written again.
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    for expected in [
        "configmaps/orders-members",
        "statefulsets/orders",
        "services/orders-peer",
        "services/orders-client",
        "poddisruptionbudgets/orders",
    ] {
        let sent = next(&mut api).await;
        assert!(
            sent.uri.contains(expected),
            "{} should apply {expected}",
            sent.uri
        );
        sent.reply_echo(json!({"metadata": {"uid": "child", "resourceVersion": "5"}}));
    }
    run.await.unwrap().unwrap();

    let err = dkv_operator::cluster::error::Error::CacheNotReady { what: "x" };
    assert_eq!(
        retry_delay(&dkv, &err, &ctx, 0.0),
        Some(dkv_operator::cluster::error::WAITING_DELAY),
        "waiting: short fixed delay"
    );
    assert!(dkv_operator::cluster::error::WAITING_DELAY <= Duration::from_secs(2));
    let transient = dkv_operator::cluster::error::Error::Status {
        name: "orders".into(),
        source: kube::Error::Api(Box::new(kube::core::Status {
            code: 503,
            ..Default::default()
        })),
    };
    assert_eq!(
        retry_delay(&dkv, &transient, &ctx, 0.0),
        Some(Duration::from_secs(1)),
        "backoff restarts after a success"
    );
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn an_edited_child_is_restored_and_nothing_else_is_written() {
    let dkv = with_finalizer(fixture("minimal"));
    let (prepared, mut sts) = converged_children(&dkv);
    // Someone scaled the StatefulSet by hand.
    sts.spec.replicas = Some(1);
    let mut written = serde_json::to_value(&dkv).unwrap();
    written["status"] = json!(null);

    let (ctx, mut api) = context(stores(vec![sts.clone()], Some(&prepared)));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(sent.method, Method::PATCH);
    assert_eq!(
        sent.uri,
        "/apis/apps/v1/namespaces/shop/statefulsets/orders?&force=true&fieldManager=dkv-operator"
    );
    assert_eq!(
        sent.body["spec"]["replicas"], 3,
        "the operator's value wins"
    );
    sent.reply_echo(serde_json::to_value(&sts).unwrap());
    // Status follows (first pass for this object), then its Events.
    let sent = next(&mut api).await;
    assert!(
        sent.uri.starts_with(&format!("{DKV_PATH}/status")),
        "{}",
        sent.uri
    );
    sent.reply_echo(serde_json::to_value(&dkv).unwrap());
    answer_remaining_events(&mut api).await;
    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn a_deleted_child_is_recreated() {
    let mut dkv = with_finalizer(fixture("minimal"));
    let (mut prepared, sts) = converged_children(&dkv);
    let status_source = {
        // Converge status first so that only the missing child differs.
        let (ctx, mut api) = context(stores(vec![sts.clone()], Some(&prepared)));
        let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
        let sent = next(&mut api).await;
        let status = sent.body["status"].clone();
        sent.reply_echo(serde_json::to_value(&dkv).unwrap());
        expect_event(next(&mut api).await, "QuorumHealthy", "Normal");
        expect_event(next(&mut api).await, "Converged", "Normal");
        run.await.unwrap().unwrap();
        status
    };
    dkv.status = serde_json::from_value(status_source).unwrap();

    // The client Service was deleted by hand: it is missing from the cache.
    let mut services_without_client = prepared.clone();
    services_without_client.client_service = Some(prepared.peer_service.clone());
    prepared = services_without_client;
    let (ctx, mut api) = context(stores(vec![sts], Some(&prepared)));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(
        sent.uri,
        "/api/v1/namespaces/shop/services/orders-client?&force=true&fieldManager=dkv-operator"
    );
    assert_eq!(sent.body["spec"]["type"], "ClusterIP");
    sent.reply_echo(json!({}));
    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}

#[tokio::test]
async fn a_paused_cluster_gets_status_but_no_changes() {
    let mut dkv = with_finalizer(fixture("minimal"));
    dkv.metadata.annotations =
        Some([("dkv.io/reconcile-paused".to_owned(), "true".to_owned())].into());
    // Nothing exists yet, so an unpaused pass would create four children.
    let (ctx, mut api) = context(stores(vec![], None));
    let run = tokio::spawn(reconcile(Arc::new(dkv.clone()), ctx.clone()));
    let sent = next(&mut api).await;
    assert_eq!(sent.uri, format!("{DKV_PATH}/status?"));
    let progressing = sent.body["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .unwrap();
    assert_eq!(progressing["reason"], "ReconcilePaused");
    sent.reply_echo(serde_json::to_value(&dkv).unwrap());
    answer_remaining_events(&mut api).await;
    run.await.unwrap().unwrap();
    assert_no_more_requests(ctx, api).await;
}
