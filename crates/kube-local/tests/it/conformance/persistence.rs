//! A data directory keeps the store: a restart with the same directory brings back every object (CRDs and their
//! objects included) and resourceVersions continue after the last one used.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

use super::common::*;

fn widget_crd(
    group: &str,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}}}}}}]}
    }))
    .unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": name}})).unwrap()
}

async fn start(dir: &std::path::Path) -> kube_local::Environment {
    kube_local::Environment::builder()
        .crds(vec![widget_crd("built.example.com")])
        .data_dir(dir)
        .build()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_restart_with_the_same_data_dir_keeps_every_object_and_versions_move_on() {
    let dir = tempfile::tempdir().unwrap();
    let (kept, last_rv) = {
        let env = start(dir.path()).await;
        let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
        let kept = cms
            .create(&PostParams::default(), &cm("kept"))
            .await
            .unwrap();
        cms.create(&PostParams::default(), &cm("gone"))
            .await
            .unwrap();
        cms.delete("gone", &DeleteParams::default()).await.unwrap();
        // A CRD created through the API, and objects of both CRDs.
        let (code, _, body) = raw(
            &env,
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Some("application/json"),
            Some(serde_json::to_value(widget_crd("api.example.com")).unwrap()),
        )
        .await;
        assert_eq!(code, 201, "{body}");
        for group in ["built.example.com", "api.example.com"] {
            let path = format!("/apis/{group}/v1/namespaces/default/widgets");
            let (code, _, body) = raw(
                &env,
                "POST",
                &path,
                Some("application/json"),
                Some(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 3}})),
            )
            .await;
            assert_eq!(code, 201, "{body}");
        }
        let rv = list_version(&cms).await;
        (kept, rv)
    };

    let env = start(dir.path()).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(env.client());
    let again = cms.get("kept").await.unwrap();
    assert_eq!(again.metadata.uid, kept.metadata.uid);
    assert_eq!(
        again.metadata.resource_version,
        kept.metadata.resource_version
    );
    assert_eq!(again.data, kept.data);
    assert!(cms.get_opt("gone").await.unwrap().is_none());
    for group in ["built.example.com", "api.example.com"] {
        let (code, _, w) = raw(
            &env,
            "GET",
            &format!("/apis/{group}/v1/namespaces/default/widgets/w"),
            None,
            None,
        )
        .await;
        assert_eq!(code, 200, "{group}: {w}");
        assert_eq!(w["spec"]["size"], 3);
    }
    let out = kubectl(&env, &["get", "widgets.api.example.com", "-o", "name"]).await;
    assert_eq!(
        stdout(&out).trim(),
        "widget.api.example.com/w",
        "{}",
        stderr(&out)
    );
    // The list's version is the newest one used before the restart; the next write gets a newer one.
    let listed = list_version(&cms).await;
    assert!(listed >= last_rv);
    let fresh = cms
        .create(&PostParams::default(), &cm("fresh"))
        .await
        .unwrap();
    let fresh_rv: u64 = fresh.metadata.resource_version.unwrap().parse().unwrap();
    assert!(fresh_rv > listed, "{fresh_rv} after {listed}");
    // A watch from before the restart is told to relist, like after an etcd compaction.
    let (code, _, body) = raw(
        &env,
        "GET",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={}&timeoutSeconds=1",
            last_rv - 1
        ),
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    // One event: `raw` hands back a single JSON line already parsed.
    let first: Value = match body {
        Value::String(text) => serde_json::from_str(text.lines().next().unwrap()).unwrap(),
        event => event,
    };
    assert_eq!(
        (first["type"].as_str(), &first["object"]["code"]),
        (Some("ERROR"), &json!(410))
    );
}

/// The binary: objects written before the process is killed (no shutdown) are there after `up` again.
#[tokio::test]
async fn kube_local_up_keeps_acknowledged_writes_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let up = || async {
        crate::shared::kube_local_up(
            &["up".as_ref(), "--data-dir".as_ref(), dir.path().as_os_str()],
            std::time::Duration::from_secs(10),
        )
        .await
    };
    let kubectl_at = |kubeconfig: String, args: &'static [&'static str]| async move {
        tokio::task::spawn_blocking(move || {
            std::process::Command::new("kubectl")
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let (mut child, kubeconfig) = up().await;
    let out = kubectl_at(
        kubeconfig.clone(),
        &["create", "configmap", "survivor", "--from-literal=a=b"],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    // Credentials given out before the restart: a copy of this kubeconfig
    // (its admin certificate) and a ServiceAccount token.
    let kept = dir.path().join("kubeconfig-before-restart");
    std::fs::copy(&kubeconfig, &kept).unwrap();
    let out = kubectl_at(kubeconfig.clone(), &["create", "serviceaccount", "keeper"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl_at(kubeconfig.clone(), &["create", "token", "keeper"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_owned();
    child.kill().await.unwrap();

    let (mut child, kubeconfig) = up().await;
    let out = kubectl_at(
        kubeconfig.clone(),
        &["get", "configmap", "survivor", "-o", "jsonpath={.data.a}"],
    )
    .await;
    assert_eq!(stdout(&out), "b", "{}", stderr(&out));
    // The CA and the token key are kept in the data directory: both still
    // authenticate after the restart.
    // (The port is new: the old kubeconfig is pointed at it.)
    let server = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: ").map(str::to_owned))
        .unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kept)
            .arg(format!("--server={server}"))
            .args(["get", "configmap", "survivor", "-o", "jsonpath={.data.a}"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert_eq!(stdout(&out), "b", "{}", stderr(&out));
    // The token's account has no grant: a 403 (not a 401) says the token
    // itself was accepted.
    let mut config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    let as_keeper: Api<ConfigMap> =
        Api::default_namespaced(kube::Client::try_from(config).unwrap());
    match as_keeper.get("survivor").await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("keeper without grants read the ConfigMap: {other:?}"),
    }
    child.kill().await.unwrap();
}

/// The resourceVersion of a list of ConfigMaps, as a number.
async fn list_version(cms: &Api<ConfigMap>) -> u64 {
    let list = cms.list(&ListParams::default()).await.unwrap();
    list.metadata.resource_version.unwrap().parse().unwrap()
}
