//! Shared helpers: environments, raw requests, kubectl subprocesses.

use std::process::Output;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

pub use crate::shared::{kubectl_in, raw, send_request, stderr, stdout};

pub async fn env() -> kube_local::Environment {
    kube_local::Environment::builder()
        .build()
        .await
        .expect("environment starts")
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
