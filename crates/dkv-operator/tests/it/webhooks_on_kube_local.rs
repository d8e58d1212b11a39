//! The admission webhooks end to end: kube-local calls the operator's HTTPS
//! webhook server (registered by URL with the operator's own CA) for every
//! DistributedKV and DistributedKVBackup write, from `kube::Client` and from
//! the real `kubectl`. No pods run: admission needs no kubelet.

use dkv_test_support as support;
use support::etcd_cluster::patch_spec;

use std::collections::BTreeSet;
use std::process::Output;
use std::time::Duration;

use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const NS: &str = "shop";
const ETCD_35: &str = "registry.k8s.io/etcd:3.5.16-0";
const ETCD_34: &str = "registry.k8s.io/etcd:3.4.23-0";

struct Harness {
    env: kube_local::Environment,
    operator: Option<support::RunningOperator>,
}

impl Harness {
    async fn start(webhook: dkv_operator::webhook::WebhookArgs) -> Self {
        let env = support::environment(false).await;
        support::create_namespace(&env.client(), NS).await;
        let mut h = Self {
            env,
            operator: None,
        };
        h.start_operator(webhook).await;
        h
    }

    /// Admission alone: the operator's controllers watch another namespace,
    /// so no cluster here gets a status (the version rules then compare
    /// with the previous spec, as for a cluster not yet reconciled).
    async fn admission_only() -> Self {
        let env = support::environment(false).await;
        support::create_namespace(&env.client(), NS).await;
        let mut args = support::operator_args(false);
        args.webhook = support::webhook_args();
        args.namespace = Some("elsewhere".to_owned());
        let operator = Some(support::RunningOperator::start_with(env.client(), args));
        support::wait_until_admission_answers(&env.client(), NS).await;
        Self { env, operator }
    }

    async fn start_operator(&mut self, webhook: dkv_operator::webhook::WebhookArgs) {
        let mut args = support::operator_args(false);
        args.webhook = webhook;
        self.operator = Some(support::RunningOperator::start_with(self.client(), args));
        support::wait_until_admission_answers(&self.client(), NS).await;
    }

    fn client(&self) -> Client {
        self.env.client()
    }

    fn clusters(&self) -> Api<DistributedKV> {
        Api::namespaced(self.client(), NS)
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.env.kubeconfig_path())
            .args(["-n", NS])
            .args(args)
            .output()
            .unwrap()
    }

    async fn create(&self, dkv: &DistributedKV) -> Result<DistributedKV, kube::Error> {
        self.clusters().create(&PostParams::default(), dkv).await
    }
}

fn cluster(name: &str, size: i32, image: &str, extra: serde_json::Value) -> DistributedKV {
    support::cluster(NS, name, size, image, extra)
}

fn bad_cron(name: &str) -> DistributedKV {
    support::bad_cron(NS, name)
}

fn api_message(result: Result<impl std::fmt::Debug, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(status)) => (status.code, status.message),
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_below_quorum_is_refused_and_to_quorum_accepted() {
    let h = Harness::start(support::webhook_args()).await;
    h.create(&cluster("x", 5, ETCD_35, json!({})))
        .await
        .unwrap();

    let refused = h.kubectl(&["scale", "dkv/x", "--replicas=1"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "scale 5 -> 1 was accepted");
    assert!(
        stderr.contains("validate.distributedkv.dkv.io")
            && stderr.contains(
                "spec.size: scaling from 5 to 1 members in one step drops below the current quorum of 3; scale down to 3 first"
            ),
        "{stderr}"
    );
    assert_eq!(h.clusters().get("x").await.unwrap().spec.size, 5);

    let accepted = h.kubectl(&["scale", "dkv/x", "--replicas=3"]);
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert_eq!(h.clusters().get("x").await.unwrap().spec.size, 3);

    // The scale subresource is admitted as a Scale (kube-local sends what
    // upstream sends), and its warnings reach kubectl.
    let even = h.kubectl(&["scale", "dkv/x", "--replicas=4"]);
    let stderr = String::from_utf8_lossy(&even.stderr);
    assert!(even.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: spec.size: 4 members tolerate no more failures than 3"),
        "{stderr}"
    );
    assert_eq!(h.clusters().get("x").await.unwrap().spec.size, 4);

    // An even size is allowed, with a warning kubectl shows.
    let path = std::env::temp_dir().join(format!("dkv-webhooks-{}.json", std::process::id()));
    std::fs::write(
        &path,
        serde_json::to_vec(&cluster("even", 4, ETCD_35, json!({}))).unwrap(),
    )
    .unwrap();
    let even = h.kubectl(&["create", "-f", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&even.stderr);
    assert!(even.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: spec.size: 4 members tolerate no more failures than 3"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_specs_version_jumps_and_downgrades_are_refused_by_field() {
    let h = Harness::admission_only().await;
    let unreconciled = |spec: &str| {
        format!("the previous spec asks for {spec} and status records no version the members run: ")
    };

    let (code, message) = api_message(h.create(&bad_cron("cron")).await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains(
            "spec.backup.schedule: \"every day\" has 2 fields; a schedule has five (minute hour day-of-month month day-of-week)"
        ),
        "{message}"
    );

    h.create(&cluster("old", 3, ETCD_34, json!({})))
        .await
        .unwrap();
    let (_, message) = api_message(
        h.clusters()
            .patch(
                "old",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"image": "registry.k8s.io/etcd:3.6.1-0"}})),
            )
            .await,
    );
    // The defaulted spec.version follows the image, so the version field
    // is the one named.
    assert!(
        message.contains(&format!("spec.version: {}etcd upgrades move one minor version at a time (3.4.23 -> 3.6.1 skips one); upgrade to 3.5.x first", unreconciled("3.4.23"))),
        "{message}"
    );

    // Backups turned on without a schedule: the schema names the missing
    // field (the defaulting webhook lets what it cannot read through to it).
    let (code, message) = api_message(
        h.clusters()
            .patch(
                "old",
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"spec": {"backup": {"destination": {"uri": "s3://bucket/dkv/"}}}}),
                ),
            )
            .await,
    );
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains("spec.backup.schedule") && message.contains("Required"),
        "{message}"
    );

    h.create(&cluster("new", 3, ETCD_35, json!({})))
        .await
        .unwrap();
    let (_, message) = api_message(
        h.clusters()
            .patch(
                "new",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"image": ETCD_34}})),
            )
            .await,
    );
    assert!(
        message.contains(&format!("spec.version: {}etcd cannot be downgraded (3.5.16 -> 3.4.23): etcd supports downgrades from 3.6 on", unreconciled("3.5.16"))),
        "{message}"
    );
    // One minor up is fine.
    patch_spec(&h.clusters(), "old", json!({"image": ETCD_35})).await;

    // Downgrades: one minor down from 3.6 on, onto a 3.5 release a 3.6
    // cluster accepts; more is refused naming the field and the way there.
    for (name, from, to, says) in [
        (
            "six",
            "3.6.16",
            "3.5.16",
            "etcd 3.6.16 can only be downgraded to 3.5.26 or a later 3.5 release",
        ),
        (
            "seven",
            "3.7.3",
            "3.5.30",
            "etcd downgrades move one minor version at a time (3.7.3 -> 3.5.30 skips one); downgrade to 3.6.x first",
        ),
    ] {
        let image = |v: &str| format!("registry.k8s.io/etcd:{v}-0");
        h.create(&cluster(name, 3, &image(from), json!({})))
            .await
            .unwrap();
        let (code, message) = api_message(
            h.clusters()
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"image": image(to)}})),
                )
                .await,
        );
        assert_eq!(code, 403, "{message}");
        assert!(
            message.contains(&format!("spec.version: {}{says}", unreconciled(from))),
            "{message}"
        );
    }
    patch_spec(
        &h.clusters(),
        "seven",
        json!({"image": "registry.k8s.io/etcd:3.6.16-0"}),
    )
    .await;

    let (_, message) = api_message(
        h.create(&cluster(
            "restored",
            3,
            ETCD_35,
            json!({"bootstrap": {"restore": {"backupName": "nightly"}}}),
        ))
        .await,
    );
    assert!(
        message.contains("spec.bootstrap.restore.backupName: DistributedKVBackup \"nightly\" does not exist in this namespace"),
        "{message}"
    );

    let backups: Api<DistributedKVBackup> = Api::namespaced(h.client(), NS);
    let orphan: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "orphan"}, "spec": {"cluster": "nowhere"}
    }))
    .unwrap();
    let (_, message) = api_message(backups.create(&PostParams::default(), &orphan).await);
    assert!(
        message
            .contains("spec.cluster: DistributedKV \"nowhere\" does not exist in this namespace"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_objects_are_defaulted() {
    let h = Harness::start(support::webhook_args()).await;
    let created = h
        .create(&cluster(
            "orders",
            3,
            ETCD_35,
            json!({"backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "0 */6 * * *"}}),
        ))
        .await
        .unwrap();
    let spec = &created.spec;
    assert_eq!(spec.version.as_deref(), Some("3.5.16"));
    assert_eq!(
        spec.backup.as_ref().and_then(|b| b.backup_image.as_deref()),
        Some("ghcr.io/dkv-io/dkv:test"),
        "the operator's image"
    );
    let etcd = spec.etcd.clone().unwrap();
    assert_eq!(etcd.quota_backend_bytes, Some(2 * 1024 * 1024 * 1024));
    assert_eq!(
        serde_json::to_value(etcd.auto_compaction_mode).unwrap(),
        json!("periodic")
    );
    assert_eq!(etcd.auto_compaction_retention.as_deref(), Some("1h"));

    // A derived version follows the image on an upgrade.
    let upgraded = h
        .clusters()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "registry.k8s.io/etcd:3.5.30-0"}})),
        )
        .await
        .unwrap();
    assert_eq!(upgraded.spec.version.as_deref(), Some("3.5.30"));
    // 3.6 only from a recent 3.5 (etcd's upgrade guide): from 3.5.30, yes.
    let upgraded = h
        .clusters()
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": "registry.k8s.io/etcd:3.6.1-0"}})),
        )
        .await
        .unwrap();
    assert_eq!(upgraded.spec.version.as_deref(), Some("3.6.1"));

    // Backups get the cluster label.
    let backups: Api<DistributedKVBackup> = Api::namespaced(h.client(), NS);
    let backup: DistributedKVBackup = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1alpha1", "kind": "DistributedKVBackup",
        "metadata": {"name": "manual"}, "spec": {"cluster": "orders"}
    }))
    .unwrap();
    let backup = backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    assert_eq!(
        backup
            .metadata
            .labels
            .unwrap_or_default()
            .get("dkv.io/cluster"),
        Some(&"orders".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_serving_certificate_does_not_interrupt_admission() {
    // Certificates live 6 s and are renewed with 4 s left: a rotation every
    // few seconds while requests keep flowing.
    let webhook = dkv_operator::webhook::WebhookArgs {
        cert_validity_seconds: 6,
        cert_renew_before_seconds: 4,
        ..support::webhook_args()
    };
    let h = Harness::start(webhook.clone()).await;
    let secrets: Api<Secret> = Api::namespaced(h.client(), &webhook.namespace);
    let serving_cert = || async {
        let secret = secrets.get(&webhook.secret).await.unwrap();
        secret.data.unwrap().get("tls.crt").unwrap().0.clone()
    };

    let mut seen = BTreeSet::from([serving_cert().await]);
    let ca_before = secrets.get(&webhook.secret).await.unwrap().data.unwrap()["ca.crt"].clone();
    let mut requests = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "saw only {} serving certificates",
            seen.len()
        );
        let name = format!("c{requests}");
        h.create(&cluster(&name, 3, ETCD_35, json!({})))
            .await
            .unwrap_or_else(|e| panic!("request {requests} during rotation: {e}"));
        let (code, message) = api_message(h.create(&bad_cron(&format!("bad{requests}"))).await);
        assert_eq!(code, 403, "request {requests}: {message}");
        assert!(message.contains("spec.backup.schedule"), "{message}");
        requests += 1;
        seen.insert(serving_cert().await);
    }
    let ca_after = secrets.get(&webhook.secret).await.unwrap().data.unwrap()["ca.crt"].clone();
    assert_eq!(
        ca_before, ca_after,
        "rotation keeps the CA (and so the caBundle)"
    );
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(h.client());
    let config = configs.get(&webhook.configuration).await.unwrap();
    for hook in config.webhooks.unwrap() {
        assert_eq!(hook.client_config.ca_bundle.as_ref(), Some(&ca_after));
    }
    assert!(requests >= 2, "{requests} requests");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_closed_while_the_webhook_server_is_down() {
    let mut h = Harness::start(support::webhook_args()).await;
    h.create(&cluster("before", 3, ETCD_35, json!({})))
        .await
        .unwrap();

    h.operator.take().unwrap().stop().await;
    let (code, message) = api_message(h.create(&cluster("during", 3, ETCD_35, json!({}))).await);
    assert_eq!(code, 500, "{message}");
    assert!(
        message.contains("failed calling webhook \"validate.distributedkv.dkv.io\""),
        "{message}"
    );
    let (_, message) = api_message(
        h.clusters()
            .patch(
                "before",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"size": 5}})),
            )
            .await,
    );
    assert!(message.contains("failed calling webhook"), "{message}");
    assert!(
        h.clusters().get_opt("during").await.unwrap().is_none(),
        "nothing was written while admission was down"
    );
    assert_eq!(h.clusters().get("before").await.unwrap().spec.size, 3);

    h.start_operator(support::webhook_args()).await;
    h.create(&cluster("after", 3, ETCD_35, json!({})))
        .await
        .unwrap();
    patch_spec(&h.clusters(), "before", json!({"size": 5})).await;
    h.operator.take().unwrap().stop().await;
}

/// `spec.storage.size` may grow only where the StorageClass lets volumes
/// expand: kube-local's `fixed-size` class does not, and the edit is refused
/// at admission naming the class and the field; the same edit on the
/// default class (`standard`, expandable) is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growing_storage_is_refused_where_the_storage_class_cannot_expand() {
    let h = Harness::start(support::webhook_args()).await;
    let storage = |class: &str, size: &str| json!({"storage": {"storageClassName": class, "size": size, "reclaimPolicy": "Delete"}});
    h.create(&cluster("fixed", 3, ETCD_35, storage("fixed-size", "1Gi")))
        .await
        .unwrap();
    let clusters = h.clusters();
    let grow = |name: &'static str| {
        let clusters = clusters.clone();
        async move {
            clusters
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"storage": {"size": "2Gi"}}})),
                )
                .await
        }
    };
    let (code, message) = api_message(grow("fixed").await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("spec.storage.size: StorageClass \"fixed-size\" does not allow volume expansion (allowVolumeExpansion is not true), so the members' volumes cannot grow to 2Gi; keep the size they have (1Gi)"),
        "{message}"
    );
    h.create(&cluster("grows", 3, ETCD_35, storage("standard", "1Gi")))
        .await
        .unwrap();
    let grown = grow("grows").await.unwrap();
    assert_eq!(grown.spec.storage.unwrap().size.0, "2Gi");
}

/// `spec.auth.enabled` back to false: admitted while dkv has not turned
/// etcd's authentication on (here no member ever runs: no kubelet), refused
/// once the root Secret says it did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_that_never_turned_on_can_be_turned_off_and_once_on_cannot() {
    let h = Harness::start(support::webhook_args()).await;
    h.create(&cluster(
        "locked",
        3,
        ETCD_35,
        json!({"auth": {"enabled": true}}),
    ))
    .await
    .unwrap();
    let clusters = h.clusters();
    let off_patch = Patch::Merge(json!({"spec": {"auth": {"enabled": false}}}));
    let params = PatchParams::default();
    let off = || clusters.patch("locked", &params, &off_patch);
    off()
        .await
        .expect("authentication never turned on: turning it off is admitted");

    // dkv turns it on: its root Secret records so.
    patch_spec(&h.clusters(), "locked", json!({"auth": {"enabled": true}})).await;
    let secrets: Api<Secret> = Api::namespaced(h.client(), NS);
    let marked = json!({"metadata": {"annotations": {"dkv.io/auth-enabled": "true"}}});
    if secrets.get_opt("locked-etcd-root").await.unwrap().is_some() {
        secrets
            .patch(
                "locked-etcd-root",
                &PatchParams::default(),
                &Patch::Merge(&marked),
            )
            .await
            .unwrap();
    } else {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "locked-etcd-root", "namespace": NS,
                         "annotations": {"dkv.io/auth-enabled": "true"}},
            "stringData": {"username": "root", "password": "not-used-here"},
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
    }
    let (code, message) = api_message(off().await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains(
            "spec.auth.enabled: etcd authentication is on in this cluster (dkv turned it on) and dkv does not turn it off; set it back to true"
        ),
        "{message}"
    );
}
