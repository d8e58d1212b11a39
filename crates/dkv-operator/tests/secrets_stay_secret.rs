//! No secret material where people and log pipelines look: a cluster with
//! TLS and authentication is created, written to, backed up (the agent
//! presents the client certificate and the root password) and scaled, and
//! then every line the operator logged (debug level, captured in this
//! process), every container log of every pod (member-init, etcd, the
//! backup agent), every Event, and the status and spec of every object dkv
//! wrote are searched for the private keys, the certificates' key bodies,
//! the root password and the object store's secret key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use dkv_api::{DistributedKV, DistributedKVBackup};
use dkv_backup::testing::MotoServer;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret};
use kube::api::{Api, ListParams, LogParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::backups::{backup_now, create_secret};
use support::etcd_cluster::wait_settled;

const NS: &str = "vault";
const CLUSTER: &str = "keys";

/// Everything the operator logs, kept for the scan.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn secret_values(client: &Client, name: &str) -> Vec<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), NS)
        .get(name)
        .await
        .unwrap();
    secret
        .data
        .unwrap()
        .into_values()
        .map(|v| String::from_utf8(v.0).unwrap())
        .collect()
}

/// What must never appear: each private key and password, and for PEM the
/// base64 lines of private keys (a partial leak is a leak).
fn needles(values: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for value in values {
        if value.contains("PRIVATE KEY") {
            out.extend(
                value
                    .lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 32)
                    .map(str::to_owned),
            );
        } else if !value.contains("CERTIFICATE") && value.len() >= 16 {
            // Passwords (certificates are public).
            out.push(value.clone());
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_key_password_or_token_reaches_logs_events_or_status() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing_subscriber::fmt()
        .with_env_filter("debug,kube=info,tower=info,hyper=info,h2=info,rustls=info")
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .try_init()
        .expect("this test binary's only subscriber");

    let moto = MotoServer::start("dkv-backups");
    let (_env, client, operator) = support::running_operator(NS).await;
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let dkvs = support::create_cluster(
        &client,
            NS,
            CLUSTER,
            3,
            "registry.k8s.io/etcd:3.5.16-0",
            json!({"tls": {}, "auth": {"enabled": true},
                   "backup": {"destination": {"uri": moto.uri("scan"), "credentialsSecret": "s3-creds"},
                              "schedule": "0 0 1 1 *"}}),
    )
    .await;
    wait_settled(&dkvs, CLUSTER, 3).await;
    support::wait_auth_enabled(&client, NS, CLUSTER).await;

    backup_now(&client, NS, CLUSTER, "scanned").await;
    dkvs.patch(
        CLUSTER,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 4}})),
    )
    .await
    .unwrap();
    wait_settled(&dkvs, CLUSTER, 4).await;

    // The haystack: operator logs, every container's log, Events, and every
    // object dkv wrote (its Secrets aside).
    let mut haystack = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        haystack.contains("etcd authentication enabled"),
        "the operator's log was captured"
    );
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    for pod in pods.list(&ListParams::default()).await.unwrap().items {
        let spec = pod.spec.clone().unwrap();
        for container in spec
            .init_containers
            .unwrap_or_default()
            .iter()
            .chain(&spec.containers)
        {
            let params = LogParams {
                container: Some(container.name.clone()),
                ..LogParams::default()
            };
            if let Ok(log) = pods.logs(&pod.name_any(), &params).await {
                haystack.push_str(&log);
            }
        }
    }
    for objects in [
        support::objects_text::<Event>(&client, NS).await,
        support::objects_text::<DistributedKV>(&client, NS).await,
        support::objects_text::<DistributedKVBackup>(&client, NS).await,
        support::objects_text::<StatefulSet>(&client, NS).await,
        support::objects_text::<CronJob>(&client, NS).await,
        support::objects_text::<Job>(&client, NS).await,
        support::objects_text::<Pod>(&client, NS).await,
        support::objects_text::<ConfigMap>(&client, NS).await,
    ] {
        haystack.push_str(&objects);
    }
    assert!(
        haystack.len() > 10_000,
        "too little to scan: {}",
        haystack.len()
    );

    let mut secrets = Vec::new();
    for name in ["tls-ca", "tls-member", "tls-client", "etcd-root"] {
        secrets.extend(secret_values(&client, &format!("{CLUSTER}-{name}")).await);
    }
    secrets.extend(
        moto.env()
            .into_iter()
            .filter(|(k, _)| k == "AWS_SECRET_ACCESS_KEY")
            .map(|(_, v)| v),
    );
    let needles = needles(&secrets);
    assert!(needles.len() >= 5, "{} needles", needles.len());
    for needle in &needles {
        assert!(
            !haystack.contains(needle.as_str()),
            "secret material found in logs, Events or objects: {}...",
            &needle[..8]
        );
    }
    assert!(!haystack.contains("PRIVATE KEY"));
    eprintln!(
        "scanned {} bytes for {} secret values: none found",
        haystack.len(),
        needles.len()
    );
    operator.stop().await;
}
