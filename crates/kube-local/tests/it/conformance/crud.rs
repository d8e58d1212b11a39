//! Create/get/list/update/delete semantics of built-in types.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use super::common::*;

#[tokio::test]
async fn default_namespaces_exist_at_start() {
    let env = env().await;
    let api: Api<Namespace> = Api::all(env.client());
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for want in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(names.contains(&want.to_string()), "{names:?}");
    }
}

#[tokio::test]
async fn create_sets_server_fields_and_answers_201() {
    let env = env().await;
    let (code, _, body) = raw(&env, "POST", "/api/v1/namespaces/default/configmaps", Some("application/json"), Some(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}))).await;
    assert_eq!(code, 201);
    assert_eq!(body["kind"], "ConfigMap");
    assert_eq!(body["apiVersion"], "v1");
    assert_eq!(body["metadata"]["uid"].as_str().unwrap().len(), 36);
    assert!(
        body["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert!(
        body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(body["metadata"]["managedFields"][0]["operation"], "Update");
}

#[tokio::test]
async fn generate_name_appends_five_characters() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    let name = created.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
}

#[tokio::test]
async fn duplicate_create_is_409_already_exists() {
    let env = env().await;
    configmap(&env, "dup", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dup"}})).unwrap();
    let (code, reason, msg) =
        api_status(api.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(msg, "configmaps \"dup\" already exists");
}

#[tokio::test]
async fn get_missing_is_404_not_found() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let (code, reason, msg) = api_status(api.get("nope").await.unwrap_err());
    assert_eq!(
        (code, reason.as_str(), msg.as_str()),
        (404, "NotFound", "configmaps \"nope\" not found")
    );
}

#[tokio::test]
async fn create_in_missing_namespace_is_404() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "ghost");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let (code, _, msg) = api_status(api.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(code, 404);
    assert_eq!(msg, "namespaces \"ghost\" not found");
}

#[tokio::test]
async fn namespace_mismatch_between_url_and_body_is_400() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(json!({"metadata": {"name": "a", "namespace": "kube-system"}})),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(body["reason"], "BadRequest");
}

#[tokio::test]
async fn name_mismatch_on_put_is_400() {
    let env = env().await;
    let cm = configmap(&env, "n1", json!({})).await;
    let mut body = serde_json::to_value(&cm).unwrap();
    body["metadata"]["name"] = json!("other");
    let (code, _, b) = raw(
        &env,
        "PUT",
        "/api/v1/namespaces/default/configmaps/n1",
        Some("application/json"),
        Some(body),
    )
    .await;
    assert_eq!(code, 400, "{b}");
}

#[tokio::test]
async fn stale_update_is_409_conflict() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm = configmap(&env, "c", json!({"a": "1"})).await;
    let mut first = cm.clone();
    first.data = Some([("a".to_string(), "2".to_string())].into());
    api.replace("c", &PostParams::default(), &first)
        .await
        .unwrap();
    let mut stale = cm;
    stale.data = Some([("a".to_string(), "3".to_string())].into());
    let (code, reason, msg) = api_status(
        api.replace("c", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(msg.contains("the object has been modified"), "{msg}");
}

#[tokio::test]
async fn update_bumps_resource_version_and_noop_keeps_it() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm = configmap(&env, "c", json!({"a": "1"})).await;
    let same = api.replace("c", &PostParams::default(), &cm).await.unwrap();
    assert_eq!(same.metadata.resource_version, cm.metadata.resource_version);
    let mut changed = same.clone();
    changed.data = Some([("a".to_string(), "2".to_string())].into());
    let after = api
        .replace("c", &PostParams::default(), &changed)
        .await
        .unwrap();
    let before: u64 = cm.metadata.resource_version.unwrap().parse().unwrap();
    let now: u64 = after.metadata.resource_version.unwrap().parse().unwrap();
    assert!(now > before);
}

#[tokio::test]
async fn dry_run_create_is_not_persisted() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dry"}})).unwrap();
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let created = api.create(&pp, &cm).await.unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("dry"));
    assert_eq!(api_status(api.get("dry").await.unwrap_err()).0, 404);
}

#[tokio::test]
async fn invalid_name_is_422_with_field_path() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(json!({"metadata": {"name": "Bad_Name"}})),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(body["details"]["causes"][0]["field"], "metadata.name");
    assert_eq!(body["details"]["kind"], "ConfigMap");
}

#[tokio::test]
async fn delete_returns_status_with_uid_for_configmaps() {
    let env = env().await;
    let cm = configmap(&env, "del", json!({})).await;
    let (code, _, body) = raw(
        &env,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/del",
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["status"], "Success");
    assert_eq!(body["details"]["uid"].as_str(), cm.metadata.uid.as_deref());
}

#[tokio::test]
async fn delete_of_pod_returns_the_object() {
    let env = env().await;
    let api: Api<Pod> = Api::namespaced(env.client(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
    let deleted = api.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(deleted.left().is_some());
}

#[tokio::test]
async fn delete_precondition_mismatch_is_409() {
    let env = env().await;
    configmap(&env, "pre", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let (code, reason, _) = api_status(api.delete("pre", &dp).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
}

#[tokio::test]
async fn lists_have_items_and_resource_version() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "GET",
        "/api/v1/namespaces/default/secrets",
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "SecretList");
    assert_eq!(body["items"], json!([]));
    assert!(
        !body["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn label_selectors_filter_lists() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}}))
                .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier=web"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier notin (web)"))
                .await
                .unwrap()
        ),
        ["b"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("tier,tier!=db"))
                .await
                .unwrap()
        ),
        ["a", "c"]
    );
    assert_eq!(
        names(
            api.list(&ListParams::default().labels("!tier"))
                .await
                .unwrap()
        )
        .len(),
        0
    );
}

#[tokio::test]
async fn field_selectors_filter_and_unknown_fields_are_400() {
    let env = env().await;
    configmap(&env, "x", json!({})).await;
    configmap(&env, "y", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let l = api
        .list(&ListParams::default().fields("metadata.name=y"))
        .await
        .unwrap();
    assert_eq!(l.items.len(), 1);
    let (code, reason, msg) = api_status(
        api.list(&ListParams::default().fields("data.x=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert!(msg.contains("field label not supported"), "{msg}");
}

#[tokio::test]
async fn pagination_walks_a_consistent_snapshot() {
    let env = env().await;
    for i in 0..5 {
        configmap(&env, &format!("p{i}"), json!({})).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().unwrap();
    // A change after the first page must not show up in later pages.
    configmap(&env, "p9", json!({})).await;
    api.delete("p4", &DeleteParams::default()).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    let third = api
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    let names: Vec<String> = first
        .items
        .iter()
        .chain(&second.items)
        .chain(&third.items)
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p0", "p1", "p2", "p3", "p4"]);
    assert!(third.metadata.continue_.is_none() || third.metadata.continue_.as_deref() == Some(""));
    assert_eq!(
        first.metadata.resource_version,
        third.metadata.resource_version
    );
}

#[tokio::test]
async fn invalid_list_option_combination_is_422() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "GET",
        "/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact",
        None,
        None,
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
}

#[tokio::test]
async fn unsupported_method_is_405_and_unknown_resource_404() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "PUT",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (405, Some("MethodNotAllowed"))
    );
    // Under no served group, kube-apiserver's mux answers in plain text, not
    // with a Status.
    let (code, _, body) = raw(&env, "GET", "/apis/nope.io/v1/things", None, None).await;
    assert_eq!((code, body["reason"].as_str()), (404, None), "{body}");
    // A served group without the resource: a NotFound Status.
    let (code, _, body) = raw(&env, "GET", "/apis/apps/v1/things", None, None).await;
    assert_eq!((code, body["reason"].as_str()), (404, Some("NotFound")));
}

#[tokio::test]
async fn cbor_bodies_are_415_and_malformed_protobuf_400() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/cbor"),
        Some(json!("x")),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    // Protobuf bodies are decoded (see protobuf.rs); one without the `k8s\0` envelope is a bad request.
    let (code, _, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf"),
        Some(json!("x")),
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
}

#[tokio::test]
async fn metadata_only_lists_for_partial_object_metadata() {
    let env = env().await;
    configmap(&env, "m", json!({"big": "value"})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let list = api.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("m"));
    let one = api.get_metadata("m").await.unwrap();
    assert_eq!(
        one.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
}

#[tokio::test]
async fn environment_starts_fast() {
    let t = std::time::Instant::now();
    let env = env().await;
    let elapsed = t.elapsed();
    assert!(
        elapsed < std::time::Duration::from_millis(500),
        "{elapsed:?}"
    );
    drop(env);
}

#[tokio::test]
async fn unknown_fields_of_built_ins_are_dropped_with_a_warning() {
    let env = env().await;
    let (code, headers, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(json!({"metadata": {"name": "u"}, "data": {"a": "1"}, "dataa": {"b": "2"}})),
    )
    .await;
    assert_eq!(code, 201);
    assert!(body.get("dataa").is_none(), "{body}");
    assert_eq!(headers["warning"], "299 - \"unknown field \\\"dataa\\\"\"");
    let (code, _, body) = raw(
        &env,
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        Some("application/json"),
        Some(json!({"metadata": {"name": "s"}, "dataa": {}})),
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body["message"],
        "strict decoding error: unknown field \"dataa\""
    );
}

#[tokio::test]
async fn wrongly_typed_fields_are_400() {
    let env = env().await;
    let (code, _, body) = raw(
        &env,
        "POST",
        "/apis/apps/v1/namespaces/default/statefulsets",
        Some("application/json"),
        Some(json!({"metadata": {"name": "s"}, "spec": {"replicas": "three"}})),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
}

#[tokio::test]
async fn kubectl_apply_rejects_typos_in_built_ins() {
    let env = env().await;
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: typo\ndatta:\n  a: \"1\"\n";
    let out = kubectl_in(&env, &["apply", "-f", "-"], Some(manifest)).await;
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown field \"datta\""),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn services_get_a_cluster_ip_that_survives_updates() {
    let env = env().await;
    let (code, _, svc) = raw(&env, "POST", "/api/v1/namespaces/default/services", Some("application/json"), Some(json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}], "selector": {"app": "s"}}}))).await;
    assert_eq!(code, 201);
    let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.96."), "{ip}");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);
    assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
    let (_, _, after) = raw(
        &env,
        "PATCH",
        "/api/v1/namespaces/default/services/s",
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"selector": {"app": "t"}}})),
    )
    .await;
    assert_eq!(after["spec"]["clusterIP"], ip.as_str());
}

#[tokio::test]
async fn statefulset_spec_is_immutable_outside_the_allowed_fields() {
    let env = env().await;
    let sts = json!({"metadata": {"name": "s"}, "spec": {"serviceName": "a", "selector": {"matchLabels": {"app": "s"}}, "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let (code, _, _) = raw(
        &env,
        "POST",
        "/apis/apps/v1/namespaces/default/statefulsets",
        Some("application/json"),
        Some(sts),
    )
    .await;
    assert_eq!(code, 201);
    let (code, _, body) = raw(
        &env,
        "PATCH",
        "/apis/apps/v1/namespaces/default/statefulsets/s",
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"serviceName": "b"}})),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec");
    let (code, _, _) = raw(
        &env,
        "PATCH",
        "/apis/apps/v1/namespaces/default/statefulsets/s",
        Some("application/merge-patch+json"),
        Some(json!({"spec": {"replicas": 3}})),
    )
    .await;
    assert_eq!(code, 200);
}
