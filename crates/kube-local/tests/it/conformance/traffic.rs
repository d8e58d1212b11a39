//! Request counters and injected API faults (kube-local's own test hooks, not upstream behaviour).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_local::api_traffic::{Fault, FaultAnswer, Verb};
use serde_json::json;

use super::common::*;

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn requests_are_counted_per_verb_and_resource() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::default_namespaced(env.client());
    let before = env.requests();
    api.create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    api.get("a").await.unwrap();
    api.patch(
        "a",
        &PatchParams::apply("test"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"applied": "w"}})),
    )
    .await
    .unwrap();
    let delta = env.requests().since(&before);
    assert_eq!(delta.count(Verb::Create, "configmaps"), 1);
    assert_eq!(delta.count(Verb::Get, "configmaps"), 1);
    assert_eq!(delta.count(Verb::Apply, "configmaps"), 1);
    assert_eq!(delta.writes(), 2);

    let (code, _, body) = raw(&env, "GET", "/metrics", None, None).await;
    assert_eq!(code, 200);
    let text = body.as_str().unwrap_or_default();
    assert!(
        text.contains("kube_local_requests_total{verb=\"create\",resource=\"configmaps\"} 1"),
        "{text}"
    );
}

#[tokio::test]
async fn injected_faults_answer_the_next_matching_requests() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::default_namespaced(env.client());
    api.create(&PostParams::default(), &config_map("a"))
        .await
        .unwrap();
    env.inject_fault(Fault::new(
        Some(Verb::Update),
        "configmaps",
        FaultAnswer::Conflict,
        1,
    ));
    // (kube's client retries 503 and 429 itself: a 500 reaches the caller.)
    env.inject_fault(Fault::new(
        Some(Verb::Get),
        "configmaps",
        FaultAnswer::InternalError,
        1,
    ));
    let current = api.get("a").await;
    assert_eq!(api_status(current.unwrap_err()).0, 500);
    let current = api.get("a").await.unwrap();
    let refused = api.replace("a", &PostParams::default(), &current).await;
    let (code, reason, _) = api_status(refused.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    // Used up: the same update now goes through.
    api.replace("a", &PostParams::default(), &current)
        .await
        .unwrap();
    assert_eq!(env.injected_faults(), 2);
}
