//! PATCH by content type and server-side apply.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::common::*;

async fn pod(env: &kube_local::Environment) -> Pod {
    let api: Api<Pod> = Api::namespaced(env.client(), "default");
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "b", "image": "y:1"}
    ]}}))
    .unwrap();
    api.create(&PostParams::default(), &p).await.unwrap()
}

#[tokio::test]
async fn merge_patch_sets_and_removes_fields() {
    let env = env().await;
    configmap(&env, "m", json!({"a": "1", "b": "2"})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let out = api
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": null, "c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(out.data).unwrap(),
        json!({"b": "2", "c": "3"})
    );
}

#[tokio::test]
async fn json_patch_test_of_missing_path_against_null_passes() {
    let env = env().await;
    configmap(&env, "j", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    // kube-runtime's finalizer helper sends exactly this shape when adding the first finalizer.
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["example.com/f"]}
    ]))
    .unwrap();
    let out = api
        .patch("j", &PatchParams::default(), &Patch::Json::<()>(patch))
        .await
        .unwrap();
    assert_eq!(
        out.metadata.finalizers,
        Some(vec!["example.com/f".to_string()])
    );
}

#[tokio::test]
async fn json_patch_failed_test_is_422() {
    let env = env().await;
    configmap(&env, "j", json!({"a": "1"})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let patch: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/a", "value": "2"}])).unwrap();
    let (code, reason, _) = api_status(
        api.patch("j", &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn strategic_merge_patch_merges_containers_by_name() {
    let env = env().await;
    let api: Api<StatefulSet> = Api::namespaced(env.client(), "default");
    let sts: StatefulSet = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {
    "selector": {"matchLabels": {"app": "s"}},
    "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [
        {"name": "a", "image": "x:1", "env": [{"name": "A", "value": "1"}]},
        {"name": "b", "image": "y:1"}
    ]}}}}))
    .unwrap();
    api.create(&PostParams::default(), &sts).await.unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:2", "env": [{"name": "B", "value": "2"}]}]}}}});
    let out = api
        .patch("s", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let spec = serde_json::to_value(out.spec.template.spec.unwrap()).unwrap();
    assert_eq!(spec["containers"][0]["image"], "x:2");
    assert_eq!(spec["containers"][0]["env"].as_array().unwrap().len(), 2);
    assert_eq!(spec["containers"][1]["name"], "b");
    // `$patch: delete` removes one container by its merge key.
    let del = json!({"spec": {"template": {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}}});
    let out = api
        .patch("s", &PatchParams::default(), &Patch::Strategic(del))
        .await
        .unwrap();
    assert_eq!(out.spec.template.spec.unwrap().containers.len(), 1);
}

#[tokio::test]
async fn pod_spec_updates_are_limited_like_upstream() {
    let env = env().await;
    pod(&env).await;
    let api: Api<Pod> = Api::namespaced(env.client(), "default");
    let ok = api
        .patch(
            "p",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "a", "image": "x:2"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(ok.spec.unwrap().containers[0].image.as_deref(), Some("x:2"));
    let (code, _, _) = api_status(api.patch("p", &PatchParams::default(), &Patch::Strategic(json!({"spec": {"containers": [{"name": "a", "env": [{"name": "B", "value": "2"}]}]}}))).await.unwrap_err());
    assert_eq!(code, 422);
}

#[tokio::test]
async fn unknown_patch_content_type_is_415() {
    let env = env().await;
    configmap(&env, "u", json!({})).await;
    let (code, _, body) = raw(
        &env,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/u",
        Some("application/json"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
}

#[tokio::test]
async fn apply_requires_field_manager() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        Some("application/apply-patch+yaml"),
        Some(json!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"
        )),
    )
    .await;
    assert_eq!(code, 400, "{body}");
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data})
}

#[tokio::test]
async fn apply_creates_when_absent_and_records_managed_fields() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let (code, _, body) = raw(
        &env,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/ssa?fieldManager=me",
        Some("application/apply-patch+yaml"),
        Some(json!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"1\"\n"
        )),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let got = api.get("ssa").await.unwrap();
    let mf = got.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("me"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(
        serde_json::to_value(&mf[0].fields_v1).unwrap(),
        json!({"f:data": {"f:a": {}}})
    );
}

#[tokio::test]
async fn apply_conflict_is_409_unless_forced() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.patch(
        "ssa",
        &PatchParams::apply("one"),
        &Patch::Apply(cm(json!({"a": "1"}))),
    )
    .await
    .unwrap();
    let err = api
        .patch(
            "ssa",
            &PatchParams::apply("two"),
            &Patch::Apply(cm(json!({"a": "2"}))),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected API error")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        "Apply failed with 1 conflict: conflict with \"one\" using v1: .data.a"
    );
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("two").force(),
            &Patch::Apply(cm(json!({"a": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["a"], "2");
    let managers: Vec<String> = forced
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, ["two"]);
}

#[tokio::test]
async fn reapply_removes_fields_the_manager_no_longer_sets() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.patch(
        "ssa",
        &PatchParams::apply("me"),
        &Patch::Apply(cm(json!({"a": "1", "b": "2"}))),
    )
    .await
    .unwrap();
    // Another manager's field survives.
    api.patch(
        "ssa",
        &PatchParams::apply("other"),
        &Patch::Apply(cm(json!({"c": "3"}))),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "ssa",
            &PatchParams::apply("me"),
            &Patch::Apply(cm(json!({"a": "1"}))),
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(out.data).unwrap(),
        json!({"a": "1", "c": "3"})
    );
}

#[tokio::test]
async fn apply_merges_keyed_lists_of_built_ins() {
    let env = env().await;
    let api: Api<StatefulSet> = Api::namespaced(env.client(), "default");
    let sts = |image: &str, extra: bool| {
        let mut containers =
            vec![json!({"name": "main", "image": image, "ports": [{"containerPort": 80}]})];
        if extra {
            containers.push(json!({"name": "side", "image": "s:1"}));
        }
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {
            "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": containers}}}})
    };
    api.patch(
        "s",
        &PatchParams::apply("me"),
        &Patch::Apply(sts("m:1", true)),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "s",
            &PatchParams::apply("me"),
            &Patch::Apply(sts("m:2", false)),
        )
        .await
        .unwrap();
    let containers = out.spec.template.spec.unwrap().containers;
    assert_eq!(containers.len(), 1);
    assert_eq!(containers[0].image.as_deref(), Some("m:2"));
    // Defaulted port protocol does not create a second port entry.
    assert_eq!(containers[0].ports.as_ref().unwrap().len(), 1);
}

#[tokio::test]
async fn apply_to_status_subresource_changes_only_status() {
    let env = env().await;
    let api: Api<StatefulSet> = Api::namespaced(env.client(), "default");
    let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "st"}, "spec": {
        "selector": {"matchLabels": {"app": "st"}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        "template": {"metadata": {"labels": {"app": "st"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}}});
    api.patch(
        "st",
        &PatchParams::apply("operator").force(),
        &Patch::Apply(sts.clone()),
    )
    .await
    .unwrap();
    // Re-applying the same manifest is a no-op even though the server defaulted fields.
    let first = api.get("st").await.unwrap();
    let again = api
        .patch(
            "st",
            &PatchParams::apply("operator").force(),
            &Patch::Apply(sts),
        )
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        first.metadata.resource_version,
        "{}\n{}",
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    let status = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "status": {"replicas": 1, "readyReplicas": 1, "observedGeneration": 1}});
    let out = api
        .patch_status(
            "st",
            &PatchParams::apply("sts-controller").force(),
            &Patch::Apply(status),
        )
        .await
        .unwrap();
    assert_eq!(out.status.as_ref().unwrap().ready_replicas, Some(1));
    assert_eq!(out.metadata.generation, Some(1));
    let status_entry = out
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("sts-controller"))
        .unwrap();
    assert_eq!(status_entry.subresource.as_deref(), Some("status"));
}

fn task_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "tasks.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "tasks", "singular": "task", "kind": "Task"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "tags": {"type": "object", "additionalProperties": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"},
                        "operation": {"type": "object", "properties": {
                            "name": {"type": "string"}, "note": {"type": "string"}}}}}}}}}]}
    }))
    .unwrap()
}

async fn apply_task(
    env: &kube_local::Environment,
    manager: &str,
    status: bool,
    body: Value,
) -> Value {
    let sub = if status { "/status" } else { "" };
    let mut applied =
        json!({"apiVersion": "example.com/v1", "kind": "Task", "metadata": {"name": "t"}});
    for (k, v) in body.as_object().unwrap() {
        applied[k] = v.clone();
    }
    let (code, _, out) = raw(
        env,
        "PATCH",
        &format!("/apis/example.com/v1/namespaces/default/tasks/t{sub}?fieldManager={manager}"),
        Some("application/apply-patch+yaml"),
        Some(applied),
    )
    .await;
    assert!(code == 200 || code == 201, "{out}");
    out
}

/// structured-merge-diff owns the declared struct fields on the way to an applied field: when the manager stops
/// applying everything under one (and nobody else owns anything there), the field goes instead of staying `{}`.
#[tokio::test]
async fn a_struct_field_no_longer_applied_is_removed_not_left_empty() {
    let env = kube_local::Environment::builder()
        .crd(task_crd())
        .build()
        .await
        .unwrap();
    apply_task(&env, "op", false, json!({"spec": {}})).await;
    let first = apply_task(
        &env,
        "op",
        true,
        json!({"status": {"phase": "Running", "operation": {"name": "backup"}}}),
    )
    .await;
    assert_eq!(first["status"]["operation"], json!({"name": "backup"}));
    let second = apply_task(&env, "op", true, json!({"status": {"phase": "Idle"}})).await;
    assert_eq!(second["status"], json!({"phase": "Idle"}), "{second}");

    // Another manager owning a field under it keeps the struct (with only that field).
    apply_task(
        &env,
        "op",
        true,
        json!({"status": {"phase": "Running", "operation": {"name": "restore"}}}),
    )
    .await;
    apply_task(
        &env,
        "watcher",
        true,
        json!({"status": {"operation": {"note": "seen"}}}),
    )
    .await;
    let shared = apply_task(&env, "op", true, json!({"status": {"phase": "Idle"}})).await;
    assert_eq!(
        shared["status"],
        json!({"phase": "Idle", "operation": {"note": "seen"}}),
        "{shared}"
    );

    // Keys of a map are not declared fields: the map (a declared field) goes with its last key, but an empty value
    // under a key that another manager still owns stays.
    apply_task(
        &env,
        "op",
        false,
        json!({"spec": {"tags": {"a": {"x": 1}}}}),
    )
    .await;
    let dropped = apply_task(&env, "op", false, json!({"spec": {}})).await;
    assert!(dropped["spec"].get("tags").is_none(), "{dropped}");
}

/// The same for built-ins: a ConfigMap's `data` goes when its manager stops applying every key of it.
#[tokio::test]
async fn a_built_in_map_field_no_longer_applied_is_removed() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.patch(
        "gone",
        &PatchParams::apply("me"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}, "data": {"a": "1"}})),
    )
    .await
    .unwrap();
    let out = api
        .patch(
            "gone",
            &PatchParams::apply("me"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone", "labels": {"kept": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(out.data, None, "{out:?}");
    assert_eq!(
        out.metadata.labels.unwrap().get("kept").map(String::as_str),
        Some("yes")
    );
    let out = api
        .patch(
            "gone",
            &PatchParams::apply("me"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gone"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(out.metadata.labels, None, "{out:?}");
    assert_eq!(out.metadata.name.as_deref(), Some("gone"));
}
