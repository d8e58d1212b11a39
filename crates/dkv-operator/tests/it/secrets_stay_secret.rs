//! No secret material where people and log pipelines look: a cluster with
//! TLS and authentication is created, written to, backed up (the agent
//! presents the client certificate and the root password) and scaled, and
//! then every line the operator logged (debug level, captured in this
//! process), every container log of every pod (member-init, etcd, the
//! backup agent), every Event, and the status and spec of every object dkv
//! wrote are searched for the private keys, the certificates' key bodies,
//! the root password and the object store's secret key.

use dkv_test_support as support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use serde_json::json;

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

/// The operator's log is captured by this test's threads, not the process:
/// the test works whether it has a process of its own (nextest) or shares
/// one with every other test of this binary (`cargo test`), where another
/// test may have set the process-wide subscriber first.
#[test]
fn no_key_password_or_token_reaches_logs_events_or_status() {
    let captured = Captured::default();
    let writer = captured.clone();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_env_filter("debug,kube=info,tower=info,hyper=info,h2=info,rustls=info")
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish(),
    );
    let _this_thread = tracing::dispatcher::set_default(&dispatch);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .on_thread_start(move || {
            // For the thread's whole life (the runtime's threads are this test's).
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        })
        .build()
        .unwrap();
    runtime.block_on(scan(captured));
}

async fn scan(captured: Captured) {
    let setup = support::backups::with_object_store(NS).await;
    support::backups::exercise_secured_cluster(&setup, NS, CLUSTER, "scanned", json!({})).await;
    let (client, moto) = (&setup.client, &setup.moto);

    // The haystack: operator logs, every container's log, Events, and every
    // object dkv wrote (its Secrets aside).
    let mut haystack = String::from_utf8_lossy(&captured.0.lock().unwrap()).into_owned();
    assert!(
        haystack.contains("etcd authentication enabled"),
        "the operator's log was captured"
    );
    haystack.push_str(&support::secret_scan::visible_text(client, NS).await);
    assert!(
        haystack.len() > 10_000,
        "too little to scan: {}",
        haystack.len()
    );

    let secrets = Api::<Secret>::namespaced(client.clone(), NS)
        .list(&Default::default())
        .await
        .unwrap();
    let mut needles: Vec<String> = secrets
        .items
        .iter()
        .flat_map(support::secret_scan::needles)
        .collect();
    // The object store's secret key is in a Secret too (s3-creds).
    assert!(
        moto.env()
            .iter()
            .filter(|(k, _)| k == "AWS_SECRET_ACCESS_KEY")
            .all(|(_, v)| v.len() < 12 || needles.contains(v)),
        "the S3 secret key is searched for"
    );
    needles.sort();
    needles.dedup();
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
    setup.operator.stop().await;
}
