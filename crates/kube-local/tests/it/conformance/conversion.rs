//! CRD conversion webhooks: a test-served HTTPS webhook converts `Gadget` between `v1beta1` (`spec.size`, a string)
//! and the storage version `v1` (`spec.replicas`, an integer); reads and writes in `v1beta1` go through it, and its
//! failures reach clients the way upstream reports them.

use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::common::*;
use super::webhooks::{WebhookServer, https_server};

const V1: &str = "example.com/v1";
const V1BETA1: &str = "example.com/v1beta1";

fn convert(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    out["apiVersion"] = json!(desired);
    out["spec"] = if desired == V1 {
        let size = obj["spec"]["size"].as_str().unwrap_or("0");
        json!({"replicas": size.parse::<i64>().unwrap_or(0)})
    } else {
        json!({"size": obj["spec"]["replicas"].as_i64().unwrap_or(0).to_string()})
    };
    out
}

/// The webhook; its path selects how it behaves.
fn converter(path: &str, review: &Value) -> Value {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap();
    let mut converted: Vec<Value> = request["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| convert(o, desired))
        .collect();
    let mut response = json!({"uid": request["uid"], "result": {"status": "Success"}});
    match path {
        "/convert" => {}
        "/fail" => {
            response["result"] =
                json!({"status": "Failure", "message": "gadgets cannot be converted today"})
        }
        "/wrong-uid" => response["uid"] = json!("not-the-request"),
        "/rename" => {
            for o in &mut converted {
                o["metadata"]["name"] = json!("renamed");
            }
        }
        "/drop" => converted.clear(),
        other => panic!("unexpected path {other}"),
    }
    response["convertedObjects"] = json!(converted);
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": response})
}

fn gadget_crd(server: &WebhookServer, path: &str) -> CustomResourceDefinition {
    let version = |name: &str, storage: bool, spec: Value| {
        json!({"name": name, "served": true, "storage": storage, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}}})
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "conversion": {"strategy": "Webhook", "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"url": format!("{}{path}", server.url), "caBundle": server.ca_bundle}}},
            "versions": [
                version("v1beta1", false, json!({"size": {"type": "string"}})),
                version("v1", true, json!({"replicas": {"type": "integer"}})),
            ]}
    }))
    .unwrap()
}

async fn setup(path: &str) -> (kube_local::Environment, WebhookServer) {
    let server = https_server(Arc::new(converter)).await;
    let env = kube_local::Environment::builder()
        .crds(vec![gadget_crd(&server, path)])
        .build()
        .await
        .unwrap();
    (env, server)
}

fn path(version: &str, name: Option<&str>) -> String {
    let base = format!("/apis/example.com/{version}/namespaces/default/gadgets");
    match name {
        Some(n) => format!("{base}/{n}"),
        None => base,
    }
}

fn reviews(server: &WebhookServer) -> Vec<Value> {
    server
        .reviews
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| r.clone())
        .collect()
}

#[tokio::test]
async fn clients_see_objects_converted_both_ways() {
    let (env, server) = setup("/convert").await;

    // Create in v1beta1: converted to v1 for storage, and back for the answer.
    let (code, _, created) = raw(
        &env,
        "POST",
        &path("v1beta1", None),
        Some("application/json"),
        Some(json!({"apiVersion": V1BETA1, "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": "3"}})),
    )
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["apiVersion"], V1BETA1);
    assert_eq!(created["spec"], json!({"size": "3"}));
    let seen = reviews(&server);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[0]["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(seen[0]["kind"], "ConversionReview");
    assert_eq!(seen[0]["request"]["desiredAPIVersion"], V1);
    let sent = &seen[0]["request"]["objects"];
    assert_eq!(sent.as_array().unwrap().len(), 1);
    assert_eq!(sent[0]["apiVersion"], V1BETA1);
    assert_eq!(sent[0]["spec"], json!({"size": "3"}));
    assert_eq!(seen[1]["request"]["desiredAPIVersion"], V1BETA1);
    assert_eq!(
        seen[1]["request"]["objects"][0]["spec"],
        json!({"replicas": 3})
    );
    assert_ne!(seen[0]["request"]["uid"], seen[1]["request"]["uid"]);

    // The storage version is served without the webhook.
    let (code, _, stored) = raw(&env, "GET", &path("v1", Some("g")), None, None).await;
    assert_eq!(code, 200);
    assert_eq!(stored["apiVersion"], V1);
    assert_eq!(stored["spec"], json!({"replicas": 3}));
    assert_eq!(reviews(&server).len(), 2);

    // A v1 object read and listed as v1beta1; the list goes to the webhook in one review.
    let (code, _, _) = raw(
        &env,
        "POST",
        &path("v1", None),
        Some("application/json"),
        Some(json!({"apiVersion": V1, "kind": "Gadget", "metadata": {"name": "h"}, "spec": {"replicas": 5}})),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _, got) = raw(&env, "GET", &path("v1beta1", Some("h")), None, None).await;
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        (got["apiVersion"].as_str(), &got["spec"]),
        (Some(V1BETA1), &json!({"size": "5"}))
    );
    let (code, _, list) = raw(&env, "GET", &path("v1beta1", None), None, None).await;
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["apiVersion"], V1BETA1);
    let sizes: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["spec"]["size"])
        .collect();
    assert_eq!(sizes, [&json!("3"), &json!("5")]);
    let last = reviews(&server).pop().unwrap();
    assert_eq!(last["request"]["objects"].as_array().unwrap().len(), 2);

    // A merge patch in v1beta1 applies to the converted object and is stored converted back.
    let (code, _, patched) = raw(
        &env,
        "PATCH",
        &path("v1beta1", Some("g")),
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"size": "7"}})),
    )
    .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"], json!({"size": "7"}));
    let (_, _, stored) = raw(&env, "GET", &path("v1", Some("g")), None, None).await;
    assert_eq!(stored["spec"], json!({"replicas": 7}));
    assert_eq!(
        stored["metadata"]["resourceVersion"],
        patched["metadata"]["resourceVersion"]
    );

    // Watch events carry the watched version.
    let (code, _, body) = raw(
        &env,
        "GET",
        &format!("{}?watch=1&timeoutSeconds=1", path("v1beta1", None)),
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    let events: Vec<Value> = body
        .as_str()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{events:?}");
    for e in &events {
        assert_eq!(e["type"], "ADDED");
        assert_eq!(e["object"]["apiVersion"], V1BETA1);
        assert!(e["object"]["spec"]["size"].is_string(), "{e}");
    }

    // kubectl reads the non-storage version through the webhook too.
    let out = kubectl(
        &env,
        &[
            "get",
            "gadgets.v1beta1.example.com",
            "g",
            "-o",
            "jsonpath={.apiVersion} {.spec.size}",
        ],
    )
    .await;
    assert_eq!(stdout(&out), "example.com/v1beta1 7", "{}", stderr(&out));
}

/// Stores `g` in the storage version (no webhook call), then reads and writes in v1beta1.
async fn failing(path_of_webhook: &str) -> (kube_local::Environment, (u16, Value), (u16, Value)) {
    let (env, _server) = setup(path_of_webhook).await;
    let (code, _, body) = raw(
        &env,
        "POST",
        &path("v1", None),
        Some("application/json"),
        Some(json!({"apiVersion": V1, "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"replicas": 1}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let (read_code, _, read) = raw(&env, "GET", &path("v1beta1", Some("g")), None, None).await;
    let (write_code, _, write) = raw(
        &env,
        "POST",
        &path("v1beta1", None),
        Some("application/json"),
        Some(json!({"apiVersion": V1BETA1, "kind": "Gadget", "metadata": {"name": "new"}, "spec": {"size": "2"}})),
    )
    .await;
    (env, (read_code, read), (write_code, write))
}

#[tokio::test]
async fn a_failing_webhook_gives_upstreams_errors() {
    let (env, (code, read), (wcode, write)) = failing("/fail").await;
    // Reads: the converter's error as is (500, no reason); writes: an InternalError.
    assert_eq!(code, 500, "{read}");
    assert!(read.get("reason").is_none(), "{read}");
    assert_eq!(
        read["message"],
        "conversion webhook for example.com/v1, Kind=Gadget failed: gadgets cannot be converted today"
    );
    assert_eq!(wcode, 500, "{write}");
    assert_eq!(write["reason"], "InternalError");
    assert_eq!(
        write["message"],
        "Internal error occurred: conversion webhook for example.com/v1beta1, Kind=Gadget failed: gadgets cannot be converted today"
    );
    // Nothing was stored by the failed write.
    let (code, _, _) = raw(&env, "GET", &path("v1", Some("new")), None, None).await;
    assert_eq!(code, 404);

    let (_, (code, read), _) = failing("/wrong-uid").await;
    assert_eq!(code, 500);
    let message = read["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "conversion webhook for example.com/v1, Kind=Gadget failed: expected response.uid="
        ) && message.ends_with("got \"not-the-request\""),
        "{message}"
    );

    let (_, (code, read), _) = failing("/rename").await;
    assert_eq!(code, 500);
    assert_eq!(
        read["message"],
        "conversion webhook for example.com/v1, Kind=Gadget returned invalid object at index 0: must have the same name: g != renamed"
    );

    let (_, (code, read), _) = failing("/drop").await;
    assert_eq!(code, 500);
    assert_eq!(
        read["message"],
        "conversion webhook for example.com/v1, Kind=Gadget returned 0 objects, expected 1"
    );
}

#[tokio::test]
async fn an_unreachable_or_untrusted_webhook_fails_the_request() {
    let server = https_server(Arc::new(converter)).await;
    let mut crd = serde_json::to_value(gadget_crd(&server, "/convert")).unwrap();
    crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"] = json!(super::webhooks::b64(
        kube_local::tls::CertificateAuthority::new("other")
            .unwrap()
            .ca_pem()
            .as_bytes()
    ));
    let env = kube_local::Environment::builder()
        .crds(vec![serde_json::from_value(crd).unwrap()])
        .build()
        .await
        .unwrap();
    let (code, _, body) = raw(&env, "GET", &path("v1beta1", None), None, None).await;
    // An empty list needs no conversion.
    assert_eq!(code, 200, "{body}");
    let (code, _, body) = raw(
        &env,
        "POST",
        &path("v1beta1", None),
        Some("application/json"),
        Some(json!({"apiVersion": V1BETA1, "kind": "Gadget", "metadata": {"name": "g"}, "spec": {"size": "1"}})),
    )
    .await;
    assert_eq!(code, 500, "{body}");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "Internal error occurred: conversion webhook for example.com/v1beta1, Kind=Gadget failed: Post \"{}/convert\"",
            server.url
        )),
        "{message}"
    );
    assert!(reviews(&server).is_empty());
}
