//! dkv on the real Kubernetes control plane (kube-apiserver,
//! kube-controller-manager and kube-scheduler of 1.37 and of 1.34, the
//! oldest dkv supports), installed as users install it and put through what
//! users do, while a writer counts acknowledged writes (and the same on
//! kube-local, to compare):
//!
//! - `dkv local up --kubernetes X --no-operator`, then `helm install` of
//!   charts/dkv: the operator runs as two pods under the chart's RBAC, its
//!   webhooks registered with and called by the real API server through
//!   their Service; CEL rules evaluated by it.
//! - A 3-member TLS cluster with backups to a real S3 server (moto) and
//!   continuous backup; scaled 3→5→3 with `kubectl scale`; a day-2 edit
//!   rolled out; the volumes grown; etcd upgraded 3.5.16 → 3.5.30; every
//!   node drained in turn with `kubectl drain` (evictions through the real
//!   disruption controller and the PodDisruptionBudget); a node killed and
//!   started again, its member back with its data; `helm upgrade` to a new
//!   operator build.
//! - The object read and written as v1alpha1 through the conversion
//!   webhook; invalid edits refused with the field named.
//! - An on-demand backup restored into a new cluster, a point-in-time
//!   restore to a revision, and deletion through the finalizer.
//!
//! 0 acknowledged writes lost; no request of the operator refused (403) in
//! its pods' logs.
//!
//! The cluster's pods have addresses only inside the network namespace
//! `dkv local up --kubernetes` made: the test thread joins it, so the
//! writer, moto and `kubectl` run where the pods are (the API server is at
//! the same address inside and out).

use dkv_test_support as support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::backups::{backup_now, create_secret};
use support::etcd_cluster::{condition_reason, settled_at, wait_for, wait_settled};
use support::eventually;
use support::nodes::{drain_task, wait_members_ready};
use support::tls::Target;

use super::local_mode::dkv;
use super::real_control_plane::{client_of, local_up};

const OPERATOR_NS: &str = "dkv-system";
const NS: &str = "shop";
const CLUSTER: &str = "carts";
const ETCD: &str = "registry.k8s.io/etcd:3.5.16-0";
const ETCD_NEXT: &str = "registry.k8s.io/etcd:3.5.30-0";
/// The tag `helm upgrade` moves the operator to: a copy of this build,
/// mapped by the image map below.
const NEXT_TAG: &str = "0.1.1-next";

#[test]
fn on_kubernetes_1_37_dkv_installed_with_helm_keeps_every_write_through_day_2() {
    scenarios(Some("1.37"));
}

/// The oldest release dkv supports.
#[test]
fn on_kubernetes_1_34_dkv_installed_with_helm_keeps_every_write_through_day_2() {
    scenarios(Some("1.34"));
}

/// The same on kube-local, for comparison (its time against the real
/// control plane's is in the issue's report).
#[test]
fn on_kube_local_dkv_installed_with_helm_keeps_every_write_through_day_2() {
    scenarios(None);
}

/// `kubernetes`: the release of the real control plane; `None`: kube-local.
fn scenarios(kubernetes: Option<&str>) {
    let release = kubernetes.unwrap_or("kube-local");
    let dir = tempfile::tempdir().unwrap();
    // The "new operator build" of `helm upgrade`: this build's binary under
    // another file, mapped to its own tag.
    let next = dir.path().join("next");
    std::fs::create_dir_all(&next).unwrap();
    std::fs::copy(support::paths::dkv_binary(), next.join("dkv")).unwrap();
    on_local_cluster(
        kubernetes,
        &[(NEXT_TAG, &next.join("dkv"))],
        async |state| {
            scenarios_in_network(release, state).await;
        },
    );
}

/// `dkv local up --no-operator` on the real control plane of `kubernetes`
/// (`None`: kube-local), with each `(tag, dkv binary)` of `images` mapped
/// as `ghcr.io/dkv-io/dkv:<tag>` ahead of dkv local's defaults; then
/// `scenario` with its state directory, from inside the pods' network, on
/// a runtime of its own, and what a failure leaves to read.
pub(super) fn on_local_cluster(
    kubernetes: Option<&str>,
    images: &[(&str, &Path)],
    scenario: impl AsyncFnOnce(&Path),
) {
    let release = kubernetes.unwrap_or("kube-local");
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let image_map = dir.path().join("images.toml");
    let entries: String = images
        .iter()
        .map(|(tag, dkv)| {
            format!(
                "[[image]]\npattern = \"ghcr.io/dkv-io/dkv:{tag}\"\nbin_dir = {:?}\nentrypoint = [{:?}]\n",
                dkv.parent().unwrap().display().to_string(),
                dkv.display().to_string()
            )
        })
        .collect();
    std::fs::write(&image_map, entries).unwrap();
    let started = Instant::now();
    let mut args = vec!["--no-operator", "--image-map", image_map.to_str().unwrap()];
    if let Some(version) = kubernetes {
        args.extend(["--kubernetes", version]);
    }
    let _down = local_up(&state, &args);
    eprintln!("[{release}] dkv local up: {:?}", started.elapsed());
    let pid: u32 = std::fs::read_to_string(state.join("dkv-local.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // (kube-local's pods are on the host's loopback: nothing to join.)
    if kubernetes.is_some() {
        support::network::enter_network_of(pid).unwrap();
    }
    // Built after the move: its threads share the pods' network.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(scenario(&state))
    }));
    if let Err(panic) = result {
        report_failure(&state);
        std::panic::resume_unwind(panic);
    }
}

/// What a failed scenario leaves to read: the pods, the Events, the
/// operator's pods described, and `dkv local`'s log.
pub(super) fn report_failure(state: &Path) {
    let kubeconfig = state.join("kubeconfig");
    for args in [
        &["get", "pods", "-A", "-o", "wide"][..],
        &["get", "events", "-A", "--sort-by=.lastTimestamp"][..],
        &["-n", OPERATOR_NS, "describe", "pods"][..],
    ] {
        let out = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output();
        if let Ok(out) = out {
            eprintln!(
                "--- kubectl {} ---\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    eprintln!("--- dkv local's log ---");
    eprintln!(
        "{}",
        std::fs::read_to_string(state.join("dkv-local.log")).unwrap_or_default()
    );
}

async fn scenarios_in_network(release: &str, state: &Path) {
    let kubeconfig = state.join("kubeconfig");
    let client = client_of(&kubeconfig).await;
    let started = Instant::now();
    let moto = dkv_backup::testing::MotoServer::start("dkv-backups");

    // Installed as the README says, with Helm, listening on the pod IPs (the
    // nodes' pods share one network here).
    let chart = support::repo_root().join("charts/dkv");
    helm(
        &kubeconfig,
        &[
            "install",
            "dkv",
            chart.to_str().unwrap(),
            "--namespace",
            OPERATOR_NS,
            "--create-namespace",
            "--set",
            "listenOn=podIP",
        ],
    );
    wait_operator_available(&client, None).await;
    // `kubectl port-forward` to a replica's health endpoint, through the API
    // server and the kubelet.
    let replica = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels("app.kubernetes.io/name=dkv-operator"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .unwrap();
    let health = port_forwarded_get(&kubeconfig, &replica, 8081, "/healthz").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    support::create_namespace(&client, NS).await;
    support::wait_until_admission_answers(&client, NS).await;

    // A 3-member cluster; TLS by default (the defaulting webhook).
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let backup = json!({"destination": {"uri": moto.uri("real"), "credentialsSecret": "s3-creds"},
                        "schedule": "0 0 1 1 *",
                        "continuous": {"enabled": true, "interval": "2s"}});
    let dkvs =
        support::create_cluster(&client, NS, CLUSTER, 3, ETCD, json!({"backup": backup})).await;
    let formed = wait_settled(&dkvs, CLUSTER, 3).await;
    eprintln!("[{release}] 3 members formed in {formed:?}");
    let created = dkvs.get(CLUSTER).await.unwrap();
    assert!(
        created.spec.tls.is_some(),
        "the defaulting webhook turned TLS on: {:?}",
        created.spec
    );
    let source = Target::new(NS, CLUSTER);
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = source.writer(client.clone(), stop_writer.clone());

    // Read and written as v1alpha1 through the conversion webhook.
    let alpha = kubectl(
        &kubeconfig,
        &[
            "-n",
            NS,
            "get",
            "distributedkvs.v1alpha1.dkv.io",
            CLUSTER,
            "-o",
            "json",
        ],
    )
    .await;
    let alpha: serde_json::Value = serde_json::from_str(&alpha).unwrap();
    assert_eq!(alpha["apiVersion"], "dkv.io/v1alpha1");
    assert_eq!(alpha["spec"]["size"], 3);
    kubectl(
        &kubeconfig,
        &[
            "-n",
            NS,
            "annotate",
            "distributedkvs.v1alpha1.dkv.io",
            CLUSTER,
            "example.com/owner=team-carts",
        ],
    )
    .await;
    let stored = dkvs.get(CLUSTER).await.unwrap();
    assert_eq!(
        stored
            .metadata
            .annotations
            .unwrap_or_default()
            .get("example.com/owner")
            .map(String::as_str),
        Some("team-carts")
    );
    assert!(stored.spec.tls.is_some(), "a v1alpha1 write kept TLS");

    // Invalid edits are refused with the field and the fix.
    let refused = refused_patch(
        &kubeconfig,
        r#"{"spec":{"image":"registry.k8s.io/etcd:3.4.23-0"}}"#,
    )
    .await;
    assert!(refused.contains("spec.version"), "{refused}");
    let refused = refused_patch(
        &kubeconfig,
        r#"{"spec":{"backup":{"schedule":"every day"}}}"#,
    )
    .await;
    assert!(refused.contains("spec.backup.schedule"), "{refused}");
    // Below what the members' volumes hold: the webhook reads their claims.
    let refused = refused_patch(&kubeconfig, r#"{"spec":{"storage":{"size":"100Mi"}}}"#).await;
    assert!(
        refused.contains("spec.storage.size") && refused.contains("never shrink"),
        "{refused}"
    );

    // Scale 3→5→3 through the scale subresource, as `kubectl scale` does.
    for size in [5, 3] {
        kubectl(
            &kubeconfig,
            &[
                "-n",
                NS,
                "scale",
                &format!("dkv/{CLUSTER}"),
                &format!("--replicas={size}"),
            ],
        )
        .await;
        let took = wait_settled(&dkvs, CLUSTER, size).await;
        eprintln!("[{release}] scaled to {size} in {took:?}");
    }

    // A day-2 edit rolls out: a larger quota, one member at a time.
    let t = Instant::now();
    let generation = patch(
        &dkvs,
        json!({"spec": {"etcd": {"quotaBackendBytes": 3_221_225_472_i64}}}),
    )
    .await;
    wait_converged(&dkvs, generation, 3).await;
    eprintln!("[{release}] day-2 edit rolled out in {:?}", t.elapsed());

    // The volumes grown: the claims expanded by the provisioner's resizer
    // beside the real PersistentVolume controller.
    let t = Instant::now();
    let generation = patch(&dkvs, json!({"spec": {"storage": {"size": "2Gi"}}})).await;
    wait_converged(&dkvs, generation, 3).await;
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), NS);
    eventually(
        "every member claim at 2Gi",
        Duration::from_secs(120),
        Duration::from_millis(500),
        async || {
            let list = claims
                .list(&ListParams::default().labels(&format!("dkv.io/cluster={CLUSTER}")))
                .await
                .ok()?;
            let grown = list
                .items
                .iter()
                .filter(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.capacity.as_ref())
                        .and_then(|c| c.get("storage"))
                        .is_some_and(|q| q.0 == "2Gi")
                })
                .count();
            (grown >= 3).then_some(())
        },
    )
    .await;
    eprintln!("[{release}] volumes grown in {:?}", t.elapsed());

    // etcd upgraded, leader last.
    let t = Instant::now();
    let generation = patch(&dkvs, json!({"spec": {"image": ETCD_NEXT}})).await;
    wait_converged(&dkvs, generation, 3).await;
    wait_for(&dkvs, CLUSTER, "status.currentVersion 3.5.30", |d| {
        d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some("3.5.30")
    })
    .await;
    eprintln!("[{release}] upgraded to 3.5.30 in {:?}", t.elapsed());

    // Every node drained in turn, as a node upgrade does.
    let t = Instant::now();
    for node in ["node-1", "node-2", "node-3"] {
        let (ok, out) = drain_task(&kubeconfig, node).await.unwrap().unwrap();
        assert!(ok, "kubectl drain {node}: {out}");
        kubectl(&kubeconfig, &["uncordon", node]).await;
        wait_members_ready(&client, NS, 3).await;
        wait_settled(&dkvs, CLUSTER, 3).await;
    }
    eprintln!("[{release}] drained every node in {:?}", t.elapsed());

    // A node killed, then started: its member comes back with its data.
    let victim = member_node(&client, &format!("{CLUSTER}-1")).await;
    let t = Instant::now();
    dkv_node(state, "kill", &victim);
    // Seen down by the operator (through etcd) before the node comes back.
    wait_for(&dkvs, CLUSTER, "the killed member unhealthy", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.members
                .iter()
                .any(|m| m.name == format!("{CLUSTER}-1") && !m.healthy)
        })
    })
    .await;
    dkv_node(state, "start", &victim);
    wait_settled(&dkvs, CLUSTER, 3).await;
    eprintln!("[{release}] {victim} killed and back in {:?}", t.elapsed());

    // The operator upgraded with Helm to a new build.
    let before_upgrade = operator_logs(&kubeconfig).await;
    let t = Instant::now();
    helm(
        &kubeconfig,
        &[
            "upgrade",
            "dkv",
            chart.to_str().unwrap(),
            "--namespace",
            OPERATOR_NS,
            "--reuse-values",
            "--set",
            &format!("image.tag={NEXT_TAG}"),
        ],
    );
    wait_operator_available(&client, Some(NEXT_TAG)).await;
    // Its image runs in every member (member-init): they roll onto it.
    wait_for(&dkvs, CLUSTER, "members on the new operator image", |d| {
        condition_reason(d, "Progressing", "False").as_deref() == Some("Converged")
            && settled_at(d, 3)
    })
    .await;
    eprintln!("[{release}] helm upgrade rolled out in {:?}", t.elapsed());

    // Backed up on demand and restored into a new cluster.
    stop_writer.store(true, Ordering::Relaxed);
    let acked = writer.await.unwrap();
    assert!(
        acked.len() >= 50,
        "the writer wrote throughout: {}",
        acked.len()
    );
    let lost = source.lost(&client, &acked).await;
    eprintln!(
        "[{release}] {} writes acknowledged across all of it, {} lost",
        acked.len(),
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    backup_now(&client, NS, CLUSTER, "carts-1").await;
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "carts-restored",
            3,
            ETCD_NEXT,
            json!({"bootstrap": {"restore": {"backupName": "carts-1"}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "carts-restored", 3).await;
    assert_eq!(
        Target::new(NS, "carts-restored")
            .lost(&client, &acked)
            .await,
        Vec::<u64>::new(),
        "writes acknowledged before the backup are missing from the restore"
    );

    // A point-in-time restore to the revision of a marker: it has the
    // marker, and not what was written after.
    let mut etcd = source.connect(&client).await;
    let marker = etcd
        .put("pitr-marker", "in", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    etcd.put("pitr-after", "out", None).await.unwrap();
    wait_for(&dkvs, CLUSTER, "the marker in the continuous backup", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .and_then(|c| c.newest.as_ref())
            .is_some_and(|p| p.revision >= marker)
    })
    .await;
    dkvs.create(
        &PostParams::default(),
        &support::cluster(
            NS,
            "carts-pitr",
            1,
            ETCD_NEXT,
            json!({"bootstrap": {"restore": {"uri": moto.uri("real"), "credentialsSecret": "s3-creds",
                "sourceCluster": CLUSTER, "pointInTime": {"revision": marker}}}}),
        ),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, "carts-pitr", 1).await;
    let mut pitr = Target::new(NS, "carts-pitr").connect(&client).await;
    assert!(
        has(&mut pitr, "pitr-marker").await,
        "the restore reached the marker"
    );
    assert!(
        !has(&mut pitr, "pitr-after").await,
        "the restore stopped at the marker"
    );

    // Deleted through the finalizer: the objects and their pods go.
    for name in ["carts-pitr", "carts-restored", CLUSTER] {
        dkvs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    eventually(
        "every cluster and member pod gone",
        Duration::from_secs(180),
        Duration::from_millis(500),
        async || {
            let clusters = dkvs.list(&ListParams::default()).await.ok()?.items.len();
            let members = pods
                .list(&ListParams::default().labels(support::nodes::MEMBER_SELECTOR))
                .await
                .ok()?
                .items
                .len();
            (clusters == 0 && members == 0).then_some(())
        },
    )
    .await;

    // Nothing the operator asked for was refused.
    let logs = format!("{before_upgrade}\n{}", operator_logs(&kubeconfig).await);
    let refused: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden") || l.contains("code: 403"))
        .collect();
    assert!(
        refused.is_empty(),
        "RBAC refused the operator: {refused:#?}"
    );
    eprintln!("[{release}] every scenario in {:?}", started.elapsed());
}

/// `GET path` through `kubectl port-forward` to `port` of operator pod
/// `pod`: the raw HTTP answer.
async fn port_forwarded_get(kubeconfig: &Path, pod: &str, port: u16, path: &str) -> String {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
    let mut forward = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "-n",
            OPERATOR_NS,
            "port-forward",
            &format!("pod/{pod}"),
            &format!(":{port}"),
        ])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    // "Forwarding from 127.0.0.1:LOCAL -> PORT"
    let mut lines = tokio::io::BufReader::new(forward.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("kubectl port-forward said where it listens")
        .unwrap()
        .unwrap();
    let local = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let mut stream = tokio::net::TcpStream::connect(&local).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut answer))
        .await
        .expect("the forwarded answer")
        .unwrap();
    answer
}

async fn has(etcd: &mut etcd_client::Client, key: &str) -> bool {
    !etcd.get(key, None).await.unwrap().kvs().is_empty()
}

/// The helm the chart checks build (scripts/check-helm.sh).
pub(super) fn helm_binary() -> PathBuf {
    let helm = std::env::var_os("HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| support::tools_dir().join("helm/bin/helm"));
    assert!(
        helm.is_file(),
        "{} is missing: scripts/check-helm.sh builds it (scripts/test.sh runs it before the tests)",
        helm.display()
    );
    helm
}

pub(super) fn helm(kubeconfig: &Path, args: &[&str]) {
    let out = std::process::Command::new(helm_binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl ARGS`, which must succeed; its output.
pub(super) async fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, out) = support::nodes::kubectl_task(kubeconfig, args)
        .await
        .unwrap()
        .unwrap();
    assert!(ok, "kubectl {args:?}: {out}");
    out
}

/// `kubectl patch` of the cluster with a merge `patch` that must be
/// refused; what kubectl said.
async fn refused_patch(kubeconfig: &Path, patch: &str) -> String {
    kubectl_fails(
        kubeconfig,
        &[
            "-n",
            NS,
            "patch",
            "dkv",
            CLUSTER,
            "--type=merge",
            "-p",
            patch,
        ],
    )
    .await
}

/// `kubectl ARGS`, which must fail; what it said.
async fn kubectl_fails(kubeconfig: &Path, args: &[&str]) -> String {
    let (ok, out) = support::nodes::kubectl_task(kubeconfig, args)
        .await
        .unwrap()
        .unwrap();
    assert!(!ok, "kubectl {args:?} succeeded: {out}");
    out
}

fn dkv_node(state: &Path, power: &str, node: &str) {
    let out = dkv(&["local", "node", power, node], state);
    assert!(
        out.status.success(),
        "dkv local node {power} {node}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Both operator replicas available, on the image with `tag` if given.
pub(super) async fn wait_operator_available(client: &Client, tag: Option<&str>) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NS);
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    eventually(
        "2 available operator replicas",
        Duration::from_secs(240),
        Duration::from_millis(500),
        async || {
            let d = deployments.get("dkv-operator").await.ok()?;
            let status = d.status?;
            let rolled = status.updated_replicas == Some(2)
                && status.available_replicas == Some(2)
                && status.replicas == Some(2);
            let on_tag = match tag {
                None => true,
                Some(tag) => pods
                    .list(&ListParams::default().labels("app.kubernetes.io/name=dkv-operator"))
                    .await
                    .ok()?
                    .items
                    .iter()
                    .all(|p| {
                        p.spec.as_ref().is_some_and(|s| {
                            s.containers[0]
                                .image
                                .as_deref()
                                .is_some_and(|i| i.ends_with(tag))
                        })
                    }),
            };
            (rolled && on_tag).then_some(())
        },
    )
    .await;
}

/// Everything the operator's pods logged.
pub(super) async fn operator_logs(kubeconfig: &Path) -> String {
    kubectl(
        kubeconfig,
        &[
            "-n",
            OPERATOR_NS,
            "logs",
            "-l",
            "app.kubernetes.io/name=dkv-operator",
            "--tail=-1",
            "--prefix",
        ],
    )
    .await
}

pub(super) async fn patch(dkvs: &Api<DistributedKV>, patch: serde_json::Value) -> i64 {
    dkvs.patch(CLUSTER, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap()
}

pub(super) async fn wait_converged(dkvs: &Api<DistributedKV>, generation: i64, size: usize) {
    wait_for(dkvs, CLUSTER, "the edit rolled out, Converged", |d| {
        d.status.as_ref().is_some_and(|s| {
            s.observed_generation.is_some_and(|g| g >= generation)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "Progressing" && c.reason == "Converged")
        }) && settled_at(d, size)
    })
    .await;
}

/// The node member pod `pod` runs on.
async fn member_node(client: &Client, pod: &str) -> String {
    Api::<Pod>::namespaced(client.clone(), NS)
        .get(pod)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.node_name)
        .unwrap()
}
