//! `DistributedKV` served as v1alpha1 and v1beta1 (stored) end to end:
//! kube-local calls the operator's conversion webhook (registered by URL with
//! the operator's CA, as `dkv local up` does) whenever a read or write is in
//! the other version, from `kube::Client` (typed and dynamic) and `kubectl`.
//! The operator works in v1beta1 (the storage version), so its own reads
//! never need the webhook. No pods run.

use dkv_test_support as support;

use std::time::Duration;

use dkv_api::distributedkv::convert::BACKUP_ANNOTATION;
use dkv_api::distributedkv::{v1alpha1, v1beta1};
use dkv_operator::crd::{ConversionService, distributedkv};
use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::{Client, CustomResourceExt, ResourceExt};
use serde_json::json;

const NS: &str = "shop";
const ETCD: &str = "registry.k8s.io/etcd:3.5.16-0";

/// kube-local with only v1alpha1 (as before v1beta1 existed) and a namespace.
async fn v1alpha1_only() -> kube_local::Environment {
    let env = support::environment_with(
        vec![
            v1alpha1::DistributedKV::crd(),
            dkv_api::DistributedKVBackup::crd(),
        ],
        false,
    )
    .await;
    support::create_namespace(&env.client(), NS).await;
    env
}

/// Installs the CRD `dkv crd` generates (both versions, v1beta1 stored,
/// conversion by webhook) and starts the operator with its webhooks, which
/// points the conversion at itself.
async fn serve_both_versions(env: &kube_local::Environment) -> support::RunningOperator {
    env.install_crd(&distributedkv(&ConversionService::default()))
        .await
        .unwrap();
    let mut args = support::operator_args(false);
    args.webhook = support::webhook_args();
    support::RunningOperator::start_with(env.client(), args)
}

/// Attempts `attempt` every 200 ms until it succeeds, up to a minute.
async fn eventually<T, E: std::fmt::Debug>(
    what: &str,
    attempt: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let (within, every) = (Duration::from_secs(60), Duration::from_millis(200));
    support::eventually_ok(what, within, every, attempt).await
}

fn alpha_api(client: &Client) -> Api<v1alpha1::DistributedKV> {
    Api::namespaced(client.clone(), NS)
}

fn beta_api(client: &Client) -> Api<v1beta1::DistributedKV> {
    Api::namespaced(client.clone(), NS)
}

fn alpha(name: &str, backup: serde_json::Value) -> v1alpha1::DistributedKV {
    serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"size": 3, "image": ETCD,
            "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"},
            "backup": backup}
    }))
    .unwrap()
}

fn beta(name: &str, backup: serde_json::Value) -> v1beta1::DistributedKV {
    serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"size": 3, "image": ETCD,
            "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"},
            "backup": backup}
    }))
    .unwrap()
}

fn backup_of(dkv: &v1beta1::DistributedKV) -> &v1beta1::BackupSpec {
    dkv.spec.backup.as_ref().expect("spec.backup")
}

fn alpha_backup_of(dkv: &v1alpha1::DistributedKV) -> &v1alpha1::BackupSpec {
    dkv.spec.backup.as_ref().expect("spec.backup")
}

fn retention(max_backups: Option<i32>, max_age: &str) -> Option<v1beta1::BackupRetention> {
    Some(v1beta1::BackupRetention {
        max_backups,
        max_age: Some(max_age.to_owned()),
    })
}

fn kubectl(env: &kube_local::Environment, args: &[&str]) -> String {
    let args: Vec<&str> = ["-n", NS].iter().chain(args).copied().collect();
    support::kubectl(env, &args)
}

/// The StatefulSet the operator creates for cluster `name`. Waiting for it
/// also lets the operator's first list of clusters succeed before a test
/// stops it (kube-runtime's graceful shutdown waits for that first list).
async fn statefulset_of(client: &Client, name: &str) -> StatefulSet {
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    eventually("the StatefulSet", || async {
        match statefulsets.get_opt(name).await {
            Ok(Some(sts)) => Ok(sts),
            Ok(None) => Err("not yet".to_owned()),
            Err(err) => Err(err.to_string()),
        }
    })
    .await
}

async fn merge(
    api: &Api<
        impl kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    >,
    name: &str,
    patch: serde_json::Value,
) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name} with {patch}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_written_in_either_version_read_back_in_the_other() {
    let env = v1alpha1_only().await;
    let operator = serve_both_versions(&env).await;
    let client = env.client();

    // Stored as v1beta1, so the create waits for the conversion webhook.
    let a = alpha(
        "a",
        json!({"s3Path": "s3://bucket/a/", "schedule": "@daily", "retentionDays": 7, "credentialsSecret": "s3-creds"}),
    );
    eventually("a v1alpha1 create", || async {
        alpha_api(&client).create(&PostParams::default(), &a).await
    })
    .await;
    let a_beta = beta_api(&client).get("a").await.unwrap();
    let backup = backup_of(&a_beta);
    assert_eq!(
        backup.destination,
        v1beta1::BackupDestination {
            uri: "s3://bucket/a/".into(),
            credentials_secret: Some("s3-creds".into())
        }
    );
    assert_eq!(backup.retention, retention(None, "7d"));
    assert_eq!(backup.schedule, "@daily");
    // The defaulting webhook ran on the v1alpha1 write.
    assert_eq!(
        backup.backup_image.as_deref(),
        Some("ghcr.io/dkv-io/dkv:test")
    );

    // Written as v1beta1 with what v1alpha1 cannot say; defaulted too.
    let b = beta(
        "b",
        json!({"destination": {"uri": "s3://bucket/b/"}, "schedule": "@daily", "retention": {"maxBackups": 5, "maxAge": "36h"}}),
    );
    let created = beta_api(&client)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
    assert_eq!(
        backup_of(&created).backup_image.as_deref(),
        Some("ghcr.io/dkv-io/dkv:test")
    );
    assert_eq!(created.spec.version.as_deref(), Some("3.5.16"));
    let b_alpha = alpha_api(&client).get("b").await.unwrap();
    assert_eq!(alpha_backup_of(&b_alpha).s3_path, "s3://bucket/b/");
    assert_eq!(
        alpha_backup_of(&b_alpha).retention_days,
        Some(2),
        "36h rounds up"
    );
    assert!(
        b_alpha.annotations().contains_key(BACKUP_ANNOTATION),
        "{:?}",
        b_alpha.annotations()
    );

    // An edit through v1alpha1 keeps what only v1beta1 expresses...
    merge(
        &alpha_api(&client),
        "b",
        json!({"spec": {"backup": {"schedule": "@hourly"}}}),
    )
    .await;
    let b_beta = beta_api(&client).get("b").await.unwrap();
    assert_eq!(backup_of(&b_beta).schedule, "@hourly");
    assert_eq!(backup_of(&b_beta).retention, retention(Some(5), "36h"));
    assert!(!b_beta.annotations().contains_key(BACKUP_ANNOTATION));
    // ...unless it changes what that stood for: then the edit wins.
    merge(
        &alpha_api(&client),
        "b",
        json!({"spec": {"backup": {"retentionDays": 30}}}),
    )
    .await;
    let b_beta = beta_api(&client).get("b").await.unwrap();
    assert_eq!(backup_of(&b_beta).retention, retention(None, "30d"));

    // The dynamic API lists both in the version asked for.
    let gvk = GroupVersionKind::gvk("dkv.io", "v1beta1", "DistributedKV");
    let dynamic: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NS, &ApiResource::from_gvk(&gvk));
    let listed = dynamic.list(&Default::default()).await.unwrap();
    let names: Vec<String> = listed.items.iter().map(|o| o.name_any()).collect();
    assert_eq!(names, ["a", "b"]);
    for item in &listed.items {
        assert_eq!(
            item.types.as_ref().map(|t| t.api_version.as_str()),
            Some("dkv.io/v1beta1")
        );
        assert!(
            item.data.pointer("/spec/backup/destination/uri").is_some(),
            "{:?}",
            item.data
        );
    }

    // kubectl, naming the version. With the short name kubectl resolves
    // the preferred version whatever version is written (`dkv.v1alpha1.dkv.io`
    // requests v1beta1), so v1alpha1 needs the plural.
    let yaml = kubectl(&env, &["get", "dkv.v1beta1.dkv.io/a", "-o", "yaml"]);
    assert!(yaml.contains("apiVersion: dkv.io/v1beta1"), "{yaml}");
    assert!(yaml.contains("maxAge: 7d"), "{yaml}");
    assert!(!yaml.contains("s3Path"), "{yaml}");
    let yaml = kubectl(
        &env,
        &["get", "distributedkvs.v1alpha1.dkv.io/b", "-o", "yaml"],
    );
    assert!(yaml.contains("apiVersion: dkv.io/v1alpha1"), "{yaml}");
    assert!(yaml.contains("retentionDays: 30"), "{yaml}");
    assert!(yaml.contains("s3Path: s3://bucket/b/"), "{yaml}");

    statefulset_of(&client, "b").await;
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_stored_before_v1beta1_stay_readable_and_editable() {
    let env = v1alpha1_only().await;
    let client = env.client();
    alpha_api(&client)
        .create(
            &PostParams::default(),
            &alpha(
                "old",
                json!({"s3Path": "s3://bucket/old/", "schedule": "@daily", "retentionDays": 3}),
            ),
        )
        .await
        .unwrap();

    let operator = serve_both_versions(&env).await;
    let old = eventually("reading a v1alpha1-stored object as v1beta1", || async {
        beta_api(&client).get("old").await
    })
    .await;
    assert_eq!(backup_of(&old).destination.uri, "s3://bucket/old/");
    assert_eq!(backup_of(&old).retention, retention(None, "3d"));
    assert_eq!(
        alpha_backup_of(&alpha_api(&client).get("old").await.unwrap()).retention_days,
        Some(3)
    );

    // Edited through v1beta1 (now stored so), then through v1alpha1.
    merge(
        &beta_api(&client),
        "old",
        json!({"spec": {"backup": {"retention": {"maxBackups": 4}}}}),
    )
    .await;
    merge(&alpha_api(&client), "old", json!({"spec": {"size": 5}})).await;
    let old = beta_api(&client).get("old").await.unwrap();
    assert_eq!(old.spec.size, 5);
    assert_eq!(backup_of(&old).retention, retention(Some(4), "3d"));
    let old_alpha = alpha_api(&client).get("old").await.unwrap();
    assert_eq!(alpha_backup_of(&old_alpha).retention_days, Some(3));
    assert!(old_alpha.annotations().contains_key(BACKUP_ANNOTATION));

    // The operator, reading v1beta1, manages it at its new size.
    let sts = statefulset_of(&client, "old").await;
    assert_eq!(sts.spec.replicas, Some(5));
    operator.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_reconciles_a_cluster_created_as_v1beta1() {
    let env = v1alpha1_only().await;
    let operator = serve_both_versions(&env).await;
    let client = env.client();
    let c = beta(
        "c",
        json!({"destination": {"uri": "s3://bucket/c/"}, "schedule": "@daily", "retention": {"maxAge": "48h"}}),
    );
    eventually("a v1beta1 create", || async {
        beta_api(&client).create(&PostParams::default(), &c).await
    })
    .await;

    let sts = statefulset_of(&client, "c").await;
    assert_eq!(sts.spec.replicas, Some(3));
    // The status the operator wrote reads back in v1beta1.
    let status = eventually("status", || async {
        beta_api(&client)
            .get_status("c")
            .await
            .map_err(|e| e.to_string())?
            .status
            .filter(|s| s.observed_generation.is_some())
            .ok_or_else(|| "no status yet".to_owned())
    })
    .await;
    assert!(status.selector.is_some(), "{status:?}");
    // Its spec survived the operator's writes.
    let c = beta_api(&client).get("c").await.unwrap();
    assert_eq!(backup_of(&c).retention, retention(None, "48h"));

    // The operator works in v1beta1: any destination scheme reaches the
    // backup CronJob.
    eventually("a v1beta1 create with a gs:// destination", || async {
        beta_api(&client)
            .create(
                &PostParams::default(),
                &beta(
                    "gcs",
                    json!({"destination": {"uri": "gs://bucket/gcs/"}, "schedule": "@daily"}),
                ),
            )
            .await
    })
    .await;
    let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> = Api::namespaced(client.clone(), NS);
    let name = dkv_operator::parts::naming::backup_cronjob("gcs");
    let cronjob = eventually("the backup CronJob", || cronjobs.get(&name)).await;
    let args = cronjob
        .spec
        .job_template
        .spec
        .and_then(|j| j.template.spec)
        .and_then(|p| p.containers.into_iter().next())
        .and_then(|c| c.args)
        .unwrap_or_default();
    assert!(
        args.contains(&"--destination=gs://bucket/gcs/".to_owned()),
        "{args:?}"
    );

    // A mistake written through v1alpha1 is refused in v1alpha1's terms.
    let refused = alpha_api(&client)
        .create(
            &PostParams::default(),
            &alpha(
                "bad",
                json!({"s3Path": "s3://bucket/x/?versionId=1", "schedule": "@daily"}),
            ),
        )
        .await;
    match refused {
        Err(kube::Error::Api(status)) => assert!(
            status.code == 403
                && status.message.contains("spec.backup.s3Path")
                && !status.message.contains("destination"),
            "{status:?}"
        ),
        other => panic!("a URI with a query was not refused: {other:?}"),
    }

    operator.stop().await;
}
