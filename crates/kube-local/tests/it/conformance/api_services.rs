//! `apiregistration.k8s.io/v1` APIServices: one local APIService per served group version, following CRDs, read-only.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::common::*;
use super::crds::db_env;

#[tokio::test]
async fn every_served_group_version_has_a_local_available_apiservice() {
    let env = db_env().await;
    let api: Api<APIService> = Api::all(env.client());
    let listed = api.list(&Default::default()).await.unwrap().items;
    let names: Vec<String> = listed
        .iter()
        .filter_map(|a| a.metadata.name.clone())
        .collect();
    for name in [
        "v1.",
        "v1.apps",
        "v1.policy",
        "v1.apiregistration.k8s.io",
        "v1.example.com",
    ] {
        assert!(
            names.iter().any(|n| n == name),
            "{name} missing from {names:?}"
        );
    }
    let apps = api.get("v1.apps").await.unwrap();
    let spec = apps.spec.unwrap();
    assert_eq!(
        (
            spec.group.as_deref(),
            spec.version.as_deref(),
            spec.group_priority_minimum,
            spec.version_priority
        ),
        (Some("apps"), Some("v1"), 17800, 15)
    );
    assert!(spec.service.is_none());
    let available = &apps.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (available.type_.as_str(), available.status.as_str()),
        ("Available", "True")
    );
    assert_eq!(available.reason.as_deref(), Some("Local"));
    let crd_group = api.get("v1.example.com").await.unwrap();
    assert_eq!(
        crd_group
            .metadata
            .labels
            .unwrap()
            .get("kube-aggregator.kubernetes.io/automanaged")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(crd_group.spec.unwrap().group_priority_minimum, 1000);

    let out = kubectl(&env, &["get", "apiservices"]).await;
    let table = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let apps_row = table
        .lines()
        .find(|l| l.starts_with("v1.apps "))
        .unwrap_or_default();
    assert_eq!(
        apps_row.split_whitespace().take(3).collect::<Vec<_>>(),
        ["v1.apps", "Local", "True"],
        "{table}"
    );

    // Read-only: kube-local serves no aggregated API server.
    let apiservice: APIService = serde_json::from_value(json!({
        "metadata": {"name": "v1beta1.metrics.k8s.io"},
        "spec": {"group": "metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100},
    }))
    .unwrap();
    let (code, reason, _) = api_status(
        api.create(&PostParams::default(), &apiservice)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (405, "MethodNotAllowed"));
    let (code, _, _) = api_status(
        api.delete("v1.apps", &Default::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 405);

    // A deleted CRD's group version goes away with it.
    let crds: Api<CustomResourceDefinition> = Api::all(env.client());
    crds.delete("databases.example.com", &Default::default())
        .await
        .unwrap();
    assert!(api.get_opt("v1.example.com").await.unwrap().is_none());
}
