//! Leader election's exact Lease requests against a mocked API server.

use std::time::Duration;

use dkv_operator::leader::{LeaderElector, LeaseConfig};
use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

type ApiHandle = Handle<Request<Body>, Response<Body>>;
const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/dkv-system/leases/dkv-operator-leader";

fn elector(identity: &str) -> (LeaderElector, ApiHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let mut config = LeaseConfig::new(
        "dkv-operator-leader".into(),
        "dkv-system".into(),
        identity.into(),
    );
    config.lease_duration = Duration::from_millis(300);
    (
        LeaderElector::new(Client::new(service, "default"), config),
        handle,
    )
}

async fn next(handle: &mut ApiHandle) -> (Method, String, Value, SendResponse<Response<Body>>) {
    let (request, respond) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("no request")
        .expect("client dropped");
    let method = request.method().clone();
    let uri = request.uri().to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (method, uri, body, respond)
}

fn reply(respond: SendResponse<Response<Body>>, code: StatusCode, body: Value) {
    respond.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

fn lease(holder: Option<&str>, version: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "dkv-operator-leader", "namespace": "dkv-system", "resourceVersion": version},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "leaseTransitions": 3}
    })
}

fn not_found() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"})
}

fn conflict() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "conflict"})
}

#[tokio::test]
async fn the_first_candidate_creates_the_lease() {
    let (mut a, mut api) = elector("a");
    let attempt = tokio::spawn(async move { a.try_acquire_or_renew().await });
    let (method, uri, _, respond) = next(&mut api).await;
    assert_eq!((method, uri.as_str()), (Method::GET, LEASE));
    reply(respond, StatusCode::NOT_FOUND, not_found());
    let (method, uri, body, respond) = next(&mut api).await;
    assert_eq!(method, Method::POST);
    assert_eq!(
        uri,
        "/apis/coordination.k8s.io/v1/namespaces/dkv-system/leases?"
    );
    assert_eq!(body["spec"]["holderIdentity"], "a");
    assert_eq!(body["spec"]["leaseTransitions"], 0);
    reply(respond, StatusCode::CREATED, body);
    assert!(attempt.await.unwrap().unwrap());
}

#[tokio::test]
async fn losing_the_create_race_is_not_an_error() {
    let (mut a, mut api) = elector("a");
    let attempt = tokio::spawn(async move { a.try_acquire_or_renew().await });
    let (_, _, _, respond) = next(&mut api).await;
    reply(respond, StatusCode::NOT_FOUND, not_found());
    let (_, _, _, respond) = next(&mut api).await;
    reply(
        respond,
        StatusCode::CONFLICT,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists", "code": 409}),
    );
    assert!(!attempt.await.unwrap().unwrap());
}

#[tokio::test]
async fn a_standby_takes_over_only_after_the_lease_stopped_changing() {
    let (mut b, mut api) = elector("b");
    let driver = tokio::spawn(async move {
        let mut results = Vec::new();
        // Seen at version 7 (fresh), renewed to 8 (still alive), then
        // unchanged at 8 for longer than the lease duration.
        for wait in [0, 0, 0, 400] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            results.push(b.try_acquire_or_renew().await.unwrap());
        }
        results
    });
    for version in ["7", "8", "8"] {
        let (method, _, _, respond) = next(&mut api).await;
        assert_eq!(
            method,
            Method::GET,
            "a standby must not write while the holder is alive"
        );
        reply(respond, StatusCode::OK, lease(Some("a"), version));
    }
    let (_, _, _, respond) = next(&mut api).await;
    reply(respond, StatusCode::OK, lease(Some("a"), "8"));
    let (method, uri, body, respond) = next(&mut api).await;
    assert_eq!((method, uri.as_str()), (Method::PUT, &*format!("{LEASE}?")));
    assert_eq!(body["spec"]["holderIdentity"], "b");
    assert_eq!(body["spec"]["leaseTransitions"], 4);
    assert_eq!(
        body["metadata"]["resourceVersion"], "8",
        "optimistic concurrency on the version read"
    );
    reply(respond, StatusCode::OK, body);
    assert_eq!(driver.await.unwrap(), vec![false, false, false, true]);
}

#[tokio::test]
async fn two_candidates_racing_for_an_expired_lease_cannot_both_win() {
    let (mut b, mut api) = elector("b");
    let attempt = tokio::spawn(async move { b.try_acquire_or_renew().await });
    // Released lease (no holder): free to take at once...
    let (_, _, _, respond) = next(&mut api).await;
    reply(respond, StatusCode::OK, lease(None, "9"));
    // ...but another candidate wrote first.
    let (method, _, _, respond) = next(&mut api).await;
    assert_eq!(method, Method::PUT);
    reply(respond, StatusCode::CONFLICT, conflict());
    assert!(!attempt.await.unwrap().unwrap());
}

#[tokio::test]
async fn the_leader_renews_and_releases() {
    let (mut a, mut api) = elector("a");
    let driver = tokio::spawn(async move {
        let renewed = a.try_acquire_or_renew().await.unwrap();
        a.release().await.unwrap();
        renewed
    });
    let (_, _, _, respond) = next(&mut api).await;
    reply(respond, StatusCode::OK, lease(Some("a"), "10"));
    let (method, _, body, respond) = next(&mut api).await;
    assert_eq!(method, Method::PUT);
    assert_eq!(body["spec"]["holderIdentity"], "a");
    assert!(body["spec"]["renewTime"].is_string());
    reply(respond, StatusCode::OK, body);
    let (_, _, _, respond) = next(&mut api).await;
    reply(respond, StatusCode::OK, lease(Some("a"), "11"));
    let (method, _, body, respond) = next(&mut api).await;
    assert_eq!(method, Method::PUT);
    assert_eq!(body["spec"]["holderIdentity"], Value::Null, "released");
    reply(respond, StatusCode::OK, body);
    assert!(driver.await.unwrap());
}
