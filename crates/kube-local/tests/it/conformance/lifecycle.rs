//! generation, finalizers, deletion, garbage collection, namespaces.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};

use super::common::*;
use crate::shared::eventually_every;

/// Waits (up to 5 s, polling every 20 ms) until `f` holds.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let within = Duration::from_secs(5);
    let every = Duration::from_millis(20);
    eventually_every(what, within, every, || {
        let holds = f();
        async move { holds.await.then_some(()) }
    })
    .await;
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "f", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let deleted = api.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = deleted.left().expect("deleting object is returned");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let still = api.get("f").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    // Adding a finalizer during deletion is forbidden.
    let (code, _, msg) = api_status(
        api.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(code, 422, "{msg}");
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(!exists(&api, "f").await);
}

async fn crd_env() -> kube_local::Environment {
    let env = env().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                     "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                     "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                 "subresources": {"status": {}}},
            ]}
    });
    let crd = serde_json::from_value(crd).unwrap();
    env.install_crd(&crd).await.unwrap();
    let crd2 = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "plains.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "plains", "singular": "plain", "kind": "Plain"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    env.install_crd(&serde_json::from_value(crd2).unwrap())
        .await
        .unwrap();
    env
}

fn dynamic(
    env: &kube_local::Environment,
    plural: &str,
    kind: &str,
) -> Api<kube::api::DynamicObject> {
    let ar = kube::api::ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(env.client(), "default", &ar)
}

async fn generation(api: &Api<kube::api::DynamicObject>, name: &str) -> i64 {
    api.get(name).await.unwrap().metadata.generation.unwrap()
}

#[tokio::test]
async fn generation_with_status_subresource() {
    let env = crd_env().await;
    let api = dynamic(&env, "widgets", "Widget");
    let obj = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"n": 1}, "status": {"dropped": true}})).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create"
    );
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"n": 2}})),
    )
    .await
    .unwrap();
    assert_eq!(generation(&api, "w").await, 2);
    // Metadata changes do not bump generation.
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
    )
    .await
    .unwrap();
    assert_eq!(generation(&api, "w").await, 2);
    // Status through the main endpoint is ignored; through /status it changes only status.
    let main = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert!(main.data.get("status").is_none());
    let st = api
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}, "spec": {"n": 99}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["ready"], true);
    assert_eq!(st.data["spec"]["n"], 2);
    assert_eq!(st.metadata.generation, Some(2));
}

#[tokio::test]
async fn generation_without_status_subresource_counts_status() {
    let env = crd_env().await;
    let api = dynamic(&env, "plains", "Plain");
    let obj = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}, "spec": {"n": 1}, "status": {"kept": true}})).unwrap();
    let created = api.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.data["status"]["kept"], true);
    api.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"kept": false}})),
    )
    .await
    .unwrap();
    assert_eq!(generation(&api, "p").await, 2);
    let (code, _, _) = raw(
        &env,
        "GET",
        "/apis/example.com/v1/namespaces/default/plains/p/status",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);
}

#[tokio::test]
async fn put_without_resource_version_on_custom_resource_is_422() {
    let env = crd_env().await;
    let api = dynamic(&env, "plains", "Plain");
    let obj = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let (code, _, body) = raw(
        &env,
        "PUT",
        "/apis/example.com/v1/namespaces/default/plains/p",
        Some("application/json"),
        Some(json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
}

#[tokio::test]
async fn strategic_merge_patch_on_custom_resource_is_415() {
    let env = crd_env().await;
    let api = dynamic(&env, "plains", "Plain");
    let obj = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Plain", "metadata": {"name": "p"}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
    let (code, reason, _) = api_status(
        api.patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (415, "UnsupportedMediaType"));
}

fn owned(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": block, "controller": true
    }]}}))
    .unwrap()
}

async fn owner_and_child(env: &kube_local::Environment, block: bool) -> Api<ConfigMap> {
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let owner = configmap(env, "owner", json!({})).await;
    api.create(&PostParams::default(), &owned("child", &owner, block))
        .await
        .unwrap();
    api
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let env = env().await;
    let api = owner_and_child(&env, false).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually("child collected", || async { !exists(&api, "child").await }).await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let env = env().await;
    let api = owner_and_child(&env, true).await;
    let child = api.get("child").await.unwrap();
    // Hold the child with a finalizer so the owner must wait.
    api.patch(
        "child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();
    let resp = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = resp.left().expect("owner returned while waiting");
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    eventually("child marked for deletion", || async {
        api.get("child")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    assert!(
        exists(&api, "owner").await,
        "owner waits for its blocking dependent"
    );
    api.patch(
        "child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("owner gone", || async { !exists(&api, "owner").await }).await;
    assert_ne!(child.metadata.uid, None);
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let env = env().await;
    let api = owner_and_child(&env, false).await;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    api.delete("owner", &dp).await.unwrap();
    eventually("owner gone", || async { !exists(&api, "owner").await }).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let child = api.get("child").await.unwrap();
    assert!(
        child
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn namespace_deletion_terminates_then_purges() {
    let env = env().await;
    let nss: Api<Namespace> = Api::all(env.client());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "tmp"}})).unwrap();
    nss.create(&PostParams::default(), &ns).await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "tmp");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &cm).await.unwrap();
    let resp = nss
        .delete("tmp", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(resp.status.unwrap().phase.as_deref(), Some("Terminating"));
    // New content is refused while terminating.
    let (code, reason, _) = api_status(
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap(),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));
    eventually("content marked for deletion", || async {
        api.get("c")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    assert!(nss.get_opt("tmp").await.unwrap().is_some());
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("namespace gone", || async {
        nss.get_opt("tmp").await.unwrap().is_none()
    })
    .await;
    let _: Value = json!(null);
}
