//! What dkv's integration tests (and the benchmark harness) share:
//! kube-local environments with dkv's CRDs and the real operator running
//! in-process against them (this module), talking to the etcd clusters it
//! runs (`etcd_cluster`, `tls`), a bare etcd cluster outside Kubernetes
//! for dkv to adopt (`external_etcd`), several nodes and their drains
//! (`nodes`), backups to a real S3 server
//! (`backups`; the server itself is `dkv_backup::testing::MotoServer`),
//! scraping `/metrics` (`http`, `metrics`), a real Prometheus evaluating the
//! shipped alerts (`prometheus`), the suite-wide secret scan
//! (`secret_scan`), waiting for a condition (`wait`) and where things are
//! (`paths`).
//!
//! A dev-dependency of dkv-operator only, for its integration tests and
//! benches: it depends on the operator's library, whose unit tests (built
//! apart, with `cfg(test)`) could not share types with it.

// Test code: a failed step fails the test, with the step's message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_member::logging::LogFormat;
use dkv_operator::operator::OperatorArgs;
use dkv_operator::server::EndpointArgs;
use dkv_operator::webhook::WebhookArgs;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::{Client, CustomResourceExt};
use kube_local::kubelet::KubeletConfig;
use tokio::sync::watch;

pub mod backups;
pub mod etcd_cluster;
pub mod external_etcd;
pub mod http;
pub mod metrics;
pub mod network;
pub mod nodes;
pub mod paths;
pub mod previous_release;
pub mod prometheus;
pub mod secret_scan;
pub mod tls;
pub mod wait;

pub use dkv_backup::testing::free_port;
pub use paths::{dkv_binary, repo_root, tools_dir};
pub use wait::{eventually, eventually_ok};

/// The plan of a new cluster's first pass, as the operator makes it (its
/// member side stamped as its planned stage stamps it).
pub fn first_plan(
    cluster: &dkv_operator::cluster::validate::ValidatedCluster,
) -> dkv_operator::cluster::plan::Plan {
    use dkv_operator::cluster::upgrade::member_side;
    use dkv_operator::cluster::{build, plan};
    let mut plan = plan::plan(cluster, None, None, &Default::default());
    plan.member_side = build::statefulset::built_member_side(cluster, &plan, &member_side::code(0));
    plan
}

/// kube-local with dkv's CRDs; with `kubelet`, pods run as local processes
/// (etcd images → local etcd, the dkv image → this build's `dkv`).
///
/// With `DKV_TEST_LOG` set, the operator's logs go to stderr (`RUST_LOG`
/// filters them).
pub async fn environment(kubelet: bool) -> kube_local::Environment {
    // DistributedKV as v1beta1 only (the version the operator works in),
    // with no conversion: the CRD `dkv crd` generates also serves v1alpha1
    // and converts through the operator's webhook, so without webhooks (the
    // default here) a v1alpha1 read would fail (kube-local answers 500
    // "conversion webhook ... failed", as upstream does). Tests of
    // conversion install that CRD themselves (`conversion_on_kube_local.rs`).
    environment_with(
        vec![DistributedKV::crd(), DistributedKVBackup::crd()],
        kubelet,
    )
    .await
}

/// kube-local with `crds` installed at start. Its kubelet runs containers
/// as their security context says (non-root user, read-only root
/// filesystem, no capabilities, `fsGroup` on volumes), so every test that
/// runs pods exercises the hardening dkv puts on them.
pub async fn environment_with(
    crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
    kubelet: bool,
) -> kube_local::Environment {
    environment_configured(crds, kubelet.then(kubelet_config)).await
}

/// The kubelet the tests use (see [`environment_with`]).
pub fn kubelet_config() -> KubeletConfig {
    // `dkv local`'s own image map, over the checkout's etcd releases.
    let mut config = KubeletConfig {
        image_map: dkv_operator::local::etcd_tools::image_map(&tools_dir(), &dkv_binary()),
        ..KubeletConfig::default()
    };
    config.enforce_security_context = true;
    config
}

/// kube-local with `crds` and, if given, a kubelet configured so.
pub async fn environment_configured(
    crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
    kubelet: Option<KubeletConfig>,
) -> kube_local::Environment {
    if std::env::var_os("DKV_TEST_LOG").is_some() {
        dkv_member::logging::init(LogFormat::Text);
    }
    let mut builder = kube_local::Environment::builder().crds(crds);
    if let Some(config) = kubelet {
        builder = builder.kubelet_config(config);
    }
    builder.build().await.unwrap()
}

pub async fn create_namespace(client: &Client, name: &str) {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// Operator settings for tests: metrics on a free port, leader election as asked.
pub fn operator_args(leader_election: bool) -> OperatorArgs {
    OperatorArgs {
        endpoints: EndpointArgs {
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            metrics_secure: false,
            metrics_cert_dir: None,
            health_addr: None,
        },
        log_format: LogFormat::Text,
        namespace: None,
        concurrency: 4,
        operator_image: "ghcr.io/dkv-io/dkv:test".into(),
        leader_election,
        leader_election_lease: "dkv-operator-leader".into(),
        leader_election_namespace: "default".into(),
        identity: Some("test-operator".into()),
        tls_certificate_validity_seconds: 365 * 24 * 3600,
        member_upgrades_per_minute:
            dkv_operator::cluster::upgrade::member_side::DEFAULT_UPGRADES_PER_MINUTE,
        member_side_epoch: 0,
        // Opt-in (see `webhook_args`): tests that do not exercise admission
        // keep writing straight to the API.
        webhook: WebhookArgs {
            enabled: false,
            ..webhook_args()
        },
    }
}

/// The admission webhooks as `dkv local up` runs them: a server on a free
/// loopback port that registers the configurations with kube-local by URL.
pub fn webhook_args() -> WebhookArgs {
    WebhookArgs {
        // `dkv local up` keeps the certificate's Secret in dkv-system, which
        // it creates; the tests' environments have only the usual namespaces.
        namespace: "default".into(),
        ..dkv_operator::local::local_webhooks().unwrap()
    }
}

/// The operator, running in this process until [`RunningOperator::stop`].
pub struct RunningOperator {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    client: Client,
}

impl RunningOperator {
    pub fn start(client: Client, leader_election: bool) -> Self {
        Self::start_with(client, operator_args(leader_election))
    }

    /// Without leader election, its plaintext `/metrics` on a free port of
    /// 127.0.0.1 (returned), as a scraper reaches it.
    pub fn start_with_metrics(client: Client) -> (Self, std::net::SocketAddr) {
        let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut args = operator_args(false);
        args.endpoints.metrics_addr = metrics;
        (Self::start_with(client, args), metrics)
    }

    pub fn start_with(client: Client, args: OperatorArgs) -> Self {
        secret_scan::capture_operator_log();
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(dkv_operator::operator::run_with(
            client.clone(),
            args,
            stop_rx,
        ));
        Self { stop, task, client }
    }

    /// Kills it as a crash would: its task is dropped wherever it was.
    pub async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops it gracefully and checks it shut down cleanly; then records
    /// what the test left for the suite-wide secret scan.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(std::time::Duration::from_secs(20), self.task)
            .await
            .expect("operator did not shut down")
            .unwrap()
            .unwrap();
        secret_scan::record(&self.client).await;
    }
}

/// A `DistributedKV` named `name` in `ns` with `size` members on `image`,
/// storage in the `standard` class reclaimed on delete, plus `extra_spec`
/// merged into the spec.
pub fn cluster(
    ns: &str,
    name: &str,
    size: i32,
    image: &str,
    extra_spec: serde_json::Value,
) -> DistributedKV {
    let mut spec = serde_json::json!({
        "size": size, "image": image,
        "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"}
    });
    if let (Some(spec), serde_json::Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec
    }))
    .unwrap()
}

/// A spec the validating webhook refuses and nothing else does (the
/// schema accepts any schedule string).
pub fn bad_cron(ns: &str, name: &str) -> DistributedKV {
    cluster(
        ns,
        name,
        3,
        "registry.k8s.io/etcd:3.5.16-0",
        serde_json::json!({"backup": {"destination": {"uri": "s3://bucket/dkv/"}, "schedule": "every day"}}),
    )
}

/// Waits until the validating webhook answers for DistributedKV writes in
/// `ns`: a dry-run create it must refuse is refused by it.
pub async fn wait_until_admission_answers(client: &Client, ns: &str) {
    let api: Api<DistributedKV> = Api::namespaced(client.clone(), ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match api.create(&dry_run, &bad_cron(ns, "probe")).await {
            Err(err) if err.to_string().contains("spec.backup.schedule") => return,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "the validating webhook never answered; last outcome: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Diagnostics for a test that may hang: after `after`, prints the etcd log
/// lines of the named member pods that say something about leadership,
/// peers or refusals (the test's own timeout then reports the failure).
pub fn dump_etcd_logs_after(
    env: &kube_local::Environment,
    ns: &str,
    pods: &[&str],
    after: std::time::Duration,
) -> tokio::task::JoinHandle<()> {
    let paths: Vec<std::path::PathBuf> = env
        .kubelet()
        .map(|k| {
            pods.iter()
                .filter_map(|p| k.log_path(ns, p, "etcd"))
                .collect()
        })
        .unwrap_or_default();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let interesting = text.lines().filter(|l| {
                ["leader", "inactive", "reject", "elect", "term", "removed"]
                    .iter()
                    .any(|w| l.contains(w))
            });
            for line in interesting.take(60) {
                eprintln!("[log {}] {}", path.display(), &line[..line.len().min(300)]);
            }
        }
    })
}

/// Every object of kind `K` in `ns`, as JSON text (for scans of what the
/// operator wrote).
pub async fn objects_text<K>(client: &Client, ns: &str) -> String
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let items = Api::<K>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    serde_json::to_string(&items).unwrap()
}

/// Waits (up to a minute) until the cluster's root Secret says etcd
/// authentication is on; returns the Secret.
pub async fn wait_auth_enabled(
    client: &Client,
    ns: &str,
    cluster: &str,
) -> k8s_openapi::api::core::v1::Secret {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let started = std::time::Instant::now();
    loop {
        let secret = secrets.get(&format!("{cluster}-etcd-root")).await.unwrap();
        if secret
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("dkv.io/auth-enabled"))
            .is_some_and(|v| v == "true")
        {
            return secret;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "authentication not enabled: {:?}",
            secret.metadata.annotations
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// A member's disk is lost: its etcd is frozen (so nothing writes while the
/// volume is emptied), the volume wiped, and the pod replaced at once, as
/// when its node and disk go and the pod is rescheduled.
pub async fn lose_disk(
    kubelet: &kube_local::kubelet::Kubelet,
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    ns: &str,
    member: &str,
) {
    kubelet.pause_container(ns, member, "etcd").unwrap();
    kubelet
        .wipe_volume(ns, &format!("data-{member}"))
        .await
        .unwrap();
    pods.delete(member, &kube::api::DeleteParams::default().grace_period(0))
        .await
        .unwrap();
}

/// Runs the real `kubectl` against `env` with `args`; returns its standard
/// output and fails the test, with what kubectl printed, when it fails.
pub fn kubectl(env: &kube_local::Environment, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// kube-local with the process kubelet, the namespace `ns`, and the
/// operator running against it.
pub async fn running_operator(ns: &str) -> (kube_local::Environment, Client, RunningOperator) {
    let env = environment(true).await;
    let client = env.client();
    create_namespace(&client, ns).await;
    let operator = RunningOperator::start(client.clone(), false);
    (env, client, operator)
}

/// The same with the operator's admission webhooks serving, as `dkv local
/// up` runs them: returns once they answer for `ns`.
pub async fn running_operator_with_webhooks(
    ns: &str,
) -> (kube_local::Environment, Client, RunningOperator) {
    let env = environment(true).await;
    let client = env.client();
    create_namespace(&client, ns).await;
    let mut args = operator_args(false);
    args.webhook = webhook_args();
    let operator = RunningOperator::start_with(client.clone(), args);
    wait_until_admission_answers(&client, ns).await;
    (env, client, operator)
}

/// Creates the cluster [`cluster`] describes; returns the API of `ns`.
pub async fn create_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    size: i32,
    image: &str,
    extra_spec: serde_json::Value,
) -> Api<DistributedKV> {
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), ns);
    dkvs.create(
        &PostParams::default(),
        &cluster(ns, name, size, image, extra_spec),
    )
    .await
    .unwrap();
    dkvs
}

/// A settled 3-member cluster `orders` in its own kube-local, the operator
/// running, and a writer started: what the tests of spec edits begin with.
pub struct Serving {
    /// Held for the test's duration: dropping it stops kube-local.
    pub env: kube_local::Environment,
    pub client: Client,
    pub operator: RunningOperator,
    pub dkvs: Api<DistributedKV>,
    pub writer: etcd_cluster::Writer,
    pub ns: String,
}

impl Serving {
    /// `orders` on `image` with `extra_spec`, in namespace `ns`, settled.
    pub async fn start(ns: &str, image: &str, extra_spec: serde_json::Value) -> Self {
        Self::on(running_operator(ns).await, ns, image, extra_spec).await
    }

    /// [`Serving::start`] with the operator's admission webhooks serving,
    /// so that every edit is admitted as on a real cluster.
    pub async fn start_with_webhooks(ns: &str, image: &str, extra_spec: serde_json::Value) -> Self {
        Self::on(
            running_operator_with_webhooks(ns).await,
            ns,
            image,
            extra_spec,
        )
        .await
    }

    async fn on(
        (env, client, operator): (kube_local::Environment, Client, RunningOperator),
        ns: &str,
        image: &str,
        extra_spec: serde_json::Value,
    ) -> Self {
        let dkvs = create_cluster(&client, ns, "orders", 3, image, extra_spec).await;
        etcd_cluster::wait_settled(&dkvs, "orders", 3).await;
        let writer = etcd_cluster::Writer::start(client.clone(), ns, "orders");
        Self {
            env,
            client,
            operator,
            dkvs,
            writer,
            ns: ns.to_owned(),
        }
    }

    /// Stops the writer, checks that no acknowledged write was lost, and
    /// stops the operator.
    pub async fn finish(self) {
        let report = self.writer.stop().await;
        etcd_cluster::assert_no_write_lost(&self.client, &self.ns, &report).await;
        self.operator.stop().await;
    }
}
