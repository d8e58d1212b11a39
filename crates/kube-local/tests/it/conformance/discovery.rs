//! Discovery, /version, OpenAPI v3, Table output, and the `kube-local up` binary.

use serde_json::{Value, json};

use super::common::*;

async fn get_accept(
    env: &kube_local::Environment,
    path: &str,
    accept: &str,
) -> (u16, http::HeaderMap, Value) {
    let req = http::Request::builder()
        .uri(path)
        .header("accept", accept)
        .body(Vec::new())
        .unwrap();
    let (status, headers, bytes) = send_request(&env.client(), req).await;
    (status, headers, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn version_endpoint() {
    let env = env().await;
    let v = env.client().apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "32"));
}

#[tokio::test]
async fn legacy_discovery_documents() {
    let env = env().await;
    let (_, _, api) = raw(&env, "GET", "/api", None, None).await;
    assert_eq!(api["kind"], "APIVersions");
    assert_eq!(api["versions"], json!(["v1"]));
    let (_, _, apis) = raw(&env, "GET", "/apis", None, None).await;
    assert_eq!(apis["kind"], "APIGroupList");
    let apps = apis["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "apps")
        .unwrap();
    assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
    let (_, _, list) = raw(&env, "GET", "/apis/apps/v1", None, None).await;
    let scale = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "statefulsets/scale")
        .unwrap();
    assert_eq!(
        (
            scale["group"].as_str(),
            scale["version"].as_str(),
            scale["kind"].as_str()
        ),
        (Some("autoscaling"), Some("v1"), Some("Scale"))
    );
    let kube_discovery = kube::Discovery::new(env.client()).run().await.unwrap();
    assert!(kube_discovery.has_group("coordination.k8s.io"));
}

#[tokio::test]
async fn aggregated_discovery_uses_its_content_type() {
    let env = env().await;
    let accept =
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json";
    let (code, headers, body) = get_accept(&env, "/apis", accept).await;
    assert_eq!(code, 200);
    assert_eq!(
        headers["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(body["kind"], "APIGroupDiscoveryList");
    let apps = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["metadata"]["name"] == "apps")
        .unwrap();
    let sts = apps["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == "statefulsets")
        .unwrap();
    assert_eq!(sts["scope"], "Namespaced");
    let subs: Vec<&str> = sts["subresources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subresource"].as_str().unwrap())
        .collect();
    assert_eq!(subs, ["status", "scale"]);
    let (_, _, core) = get_accept(&env, "/api", accept).await;
    assert_eq!(core["items"][0]["versions"][0]["version"], "v1");
}

#[tokio::test]
async fn openapi_v3_patch_operations_carry_field_validation() {
    let env = env().await;
    let (_, _, index) = raw(&env, "GET", "/openapi/v3", None, None).await;
    let url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, doc) = raw(&env, "GET", &url, None, None).await;
    assert_eq!(code, 200);
    let patch = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"]["patch"];
    assert_eq!(
        patch["x-kubernetes-group-version-kind"],
        json!({"group": "apps", "version": "v1", "kind": "StatefulSet"})
    );
    let params: Vec<&str> = patch["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(params.contains(&"fieldValidation"), "{params:?}");
    let schema = &doc["components"]["schemas"]["io.k8s.api.apps.v1.StatefulSet"];
    assert_eq!(
        schema["x-kubernetes-group-version-kind"][0]["kind"],
        "StatefulSet"
    );
}

#[tokio::test]
async fn table_output_for_kubectl() {
    let env = env().await;
    configmap(&env, "t", json!({"a": "1", "b": "2"})).await;
    let (code, _, table) = get_accept(
        &env,
        "/api/v1/namespaces/default/configmaps",
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Data", "Age"]);
    assert_eq!(table["rows"][0]["cells"][0], "t");
    assert_eq!(table["rows"][0]["cells"][1], 2);
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

#[tokio::test]
async fn events_share_one_store_across_both_apis() {
    let env = env().await;
    let (code, _, _) = raw(&env, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", Some("application/json"), Some(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e1"},
        "eventTime": "2026-01-01T00:00:00.000001Z", "reportingController": "me", "reportingInstance": "me-1",
        "action": "Do", "reason": "Done", "type": "Normal", "note": "hello", "regarding": {"kind": "Pod", "name": "p", "namespace": "default"}
    }))).await;
    assert_eq!(code, 201);
    let (_, _, core) = raw(
        &env,
        "GET",
        "/api/v1/namespaces/default/events/e1",
        None,
        None,
    )
    .await;
    assert_eq!(core["apiVersion"], "v1");
    assert_eq!(core["message"], "hello");
    assert_eq!(core["involvedObject"]["name"], "p");
    assert_eq!(
        core["eventTime"], "2026-01-01T00:00:00.000001Z",
        "MicroTime keeps microseconds"
    );
}

#[tokio::test]
async fn kube_local_up_serves_and_writes_kubeconfig() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, printed) = crate::shared::kube_local_up(
        &["up".as_ref(), "--data-dir".as_ref(), dir.path().as_os_str()],
        std::time::Duration::from_secs(5),
    )
    .await;
    assert_eq!(
        std::path::PathBuf::from(&printed),
        dir.path().join("kubeconfig")
    );
    let kubeconfig = printed.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args([
                "--kubeconfig",
                &kubeconfig,
                "get",
                "ns",
                "default",
                "-o",
                "name",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "namespace/default",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    let status = tokio::time::timeout(std::time::Duration::from_secs(5), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn tls_serving_is_trusted_by_client_and_kubeconfig() {
    let env = kube_local::Environment::builder()
        .tls(true)
        .build()
        .await
        .unwrap();
    assert!(env.url().starts_with("https://127.0.0.1:"));
    let nss: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(env.client());
    assert!(nss.get_opt("default").await.unwrap().is_some());
    let out = kubectl(&env, &["get", "ns", "kube-system", "-o", "name"]).await;
    assert_eq!(
        stdout(&out).trim(),
        "namespace/kube-system",
        "{}",
        stderr(&out)
    );
}
