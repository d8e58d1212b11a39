//! A real etcd cluster under the operator, on kube-local with its process
//! kubelet: the operator's StatefulSet runs `dkv member-init` and etcd 3.5 as
//! local processes, each pod on its own loopback IP with the cluster's DNS
//! names in its hosts file. Applying a 3-member `DistributedKV` forms one
//! etcd cluster the operator reports Available; deleting it stops every
//! process and reclaims the volumes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

mod support;

const NS: &str = "shop";

fn etcdctl_binary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools/etcd-3.5/usr/bin/etcdctl")
}

/// Runs etcdctl against `endpoints` (async: the Service proxy runs on this runtime).
async fn etcdctl(endpoints: &str, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(["--command-timeout=5s", "--dial-timeout=2s"])
        .args(args)
        .output()
        .await
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn condition(dkv: &DistributedKV, type_: &str) -> Option<String> {
    dkv.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.clone())
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The last log lines of every member container, for failure messages.
fn member_logs(env: &kube_local::Environment) -> String {
    let kubelet = env.kubelet().unwrap();
    let mut out = String::new();
    for i in 0..3 {
        for container in ["member-init", "etcd"] {
            let pod = format!("orders-{i}");
            let text = kubelet
                .log_path(NS, &pod, container)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(4).collect();
            out.push_str(&format!("--- {pod}/{container}\n{}\n", tail.join("\n")));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_form_a_cluster_serve_through_the_client_service_and_go_with_the_cr() {
    assert!(
        etcdctl_binary().exists(),
        "{} is missing: run scripts/install-etcd.sh",
        etcdctl_binary().display()
    );
    let env = support::environment(true).await;
    let client: Client = env.client();
    support::create_namespace(&client, NS).await;
    let operator = support::RunningOperator::start(client.clone(), false);

    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    let dkv: DistributedKV = serde_json::from_value(json!({
        "apiVersion": "dkv.io/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": "orders", "namespace": NS},
        "spec": {
            "size": 3,
            "image": "registry.k8s.io/etcd:3.5.16-0",
            "storage": {"storageClassName": "standard", "size": "1Gi", "reclaimPolicy": "Delete"},
        },
    }))
    .unwrap();
    dkvs.create(&PostParams::default(), &dkv).await.unwrap();

    // Three member pods become ready: etcd's /health needs a leader, so ready means one cluster formed.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(90);
    let members = loop {
        let list = pods.list(&ListParams::default()).await.unwrap().items;
        if list.len() == 3 && list.iter().all(pod_ready) {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "members not ready within 90s; pods: {:?}\n{}",
            list.iter()
                .map(|p| (
                    p.metadata.name.clone(),
                    p.status.as_ref().and_then(|s| s.phase.clone())
                ))
                .collect::<Vec<_>>(),
            member_logs(&env)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };

    // `etcdctl member list` through the client Service: three started voters with their stable peer URLs.
    let kubelet = env.kubelet().unwrap();
    let client_service = eventually(
        "the client Service's address",
        Duration::from_secs(10),
        || async { kubelet.service_address(NS, "orders-client") },
    )
    .await;
    let through_service = format!("http://{client_service}:2379");
    let list = eventually(
        "member list through the Service",
        Duration::from_secs(30),
        || async {
            etcdctl(&through_service, &["member", "list", "-w", "simple"])
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(list.lines().count(), 3, "{list}");
    for i in 0..3 {
        let line = list
            .lines()
            .find(|l| l.contains(&format!(", orders-{i}, ")))
            .unwrap_or_else(|| panic!("orders-{i} missing:\n{list}"));
        assert!(line.contains(", started, "), "{line}");
        assert!(line.ends_with(", false"), "a voter, not a learner: {line}");
        assert!(
            line.contains(&format!("http://orders-{i}.orders-peer.{NS}.svc:2380")),
            "{line}"
        );
    }

    // The operator reports the cluster Available with three ready replicas.
    let reported = eventually("Available=True", Duration::from_secs(60), || async {
        let d = dkvs.get("orders").await.ok()?;
        (condition(&d, "Available").as_deref() == Some("True")).then_some(d)
    })
    .await;
    let status = reported.status.unwrap();
    assert_eq!(status.ready_replicas, 3);

    // A key written through the Service is readable from every member.
    etcdctl(&through_service, &["put", "greeting", "hello"])
        .await
        .unwrap();
    for pod in &members {
        let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
        let value = eventually(
            "the key on every member",
            Duration::from_secs(10),
            || async {
                etcdctl(
                    &format!("http://{ip}:2379"),
                    &["get", "greeting", "--print-value-only", "--consistency=s"],
                )
                .await
                .ok()
                .filter(|v| v.trim() == "hello")
            },
        )
        .await;
        assert_eq!(value.trim(), "hello");
    }

    // Deleting the cluster stops every process and, with reclaimPolicy Delete, removes the volumes.
    dkvs.delete("orders", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the CR gone", Duration::from_secs(60), || async {
        dkvs.get_opt("orders")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    eventually(
        "every member process stopped",
        Duration::from_secs(60),
        || async { (kubelet.process_count() == 0).then_some(()) },
    )
    .await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), NS);
    eventually("the claims deleted", Duration::from_secs(30), || async {
        claims
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    eventually("the volumes reclaimed", Duration::from_secs(30), || async {
        volumes
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;

    operator.stop().await;
}
