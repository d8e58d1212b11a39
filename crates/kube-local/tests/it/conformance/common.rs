//! Shared helpers: environments, raw requests, kubectl subprocesses.

use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

pub use crate::shared::{kubectl_in, stderr, stdout};

pub async fn env() -> kube_local::Environment {
    kube_local::Environment::builder()
        .build()
        .await
        .expect("environment starts")
}

/// Raw HTTP request against the environment; returns (status, headers, body).
pub async fn raw(
    env: &kube_local::Environment,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, http::HeaderMap, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let body = body
        .map(|b| {
            if let Value::String(s) = b {
                s.into_bytes()
            } else {
                b.to_string().into_bytes()
            }
        })
        .unwrap_or_default();
    let req = req.body(body).unwrap();
    let resp = env
        .client()
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, v)
}

pub fn api_status(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub async fn configmap(env: &kube_local::Environment, name: &str, data: Value) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap()
}

pub async fn kubectl(env: &kube_local::Environment, args: &[&str]) -> Output {
    kubectl_in(env, args, None).await
}
