//! The suite-wide secret scan: with `DKV_SECRET_SCAN_DIR` set (as
//! `scripts/test.sh` does), every test that runs the operator records what
//! must stay secret (the values of every Secret in kube-local) and where it
//! must not appear (the operator's log at debug level, every container log,
//! every Event, and the objects dkv writes — Secrets aside) into that
//! directory; `scripts/scan-secrets.py` then searches all of it at the end
//! of the run.

use std::io::Write;
use std::path::PathBuf;

use dkv_api::{DistributedKV, DistributedKVBackup};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Secret};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt};

const DIR_ENV: &str = "DKV_SECRET_SCAN_DIR";

/// Where this test's records go, when the scan is on.
fn directory() -> Option<PathBuf> {
    std::env::var_os(DIR_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// This test's name for its records: nextest runs each test in its own
/// process.
fn stem() -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "test".to_owned());
    format!("{exe}-{}", std::process::id())
}

/// Sends the operator's log (debug level) to this test's record, when the
/// scan is on and nothing else took the process's subscriber.
pub fn capture_operator_log() {
    let Some(dir) = directory() else {
        return;
    };
    let path = dir.join(format!("{}.operator.log", stem()));
    let Ok(file) = std::fs::File::create(&path) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter("debug,kube=info,tower=info,hyper=info,h2=info,rustls=info")
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false)
        .try_init();
}

/// What must never appear, from a Secret's values: the base64 lines of
/// private keys (a partial leak is a leak) and values under secret-sounding
/// keys (passwords, tokens, secret keys, Azure's account key). Certificates
/// are public.
pub fn needles(secret: &Secret) -> Vec<String> {
    let mut out = Vec::new();
    for (key, value) in secret.data.iter().flatten() {
        let value = String::from_utf8_lossy(&value.0);
        if value.contains("PRIVATE KEY") {
            out.extend(
                value
                    .lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 32)
                    .map(str::to_owned),
            );
        } else {
            let key = key.to_ascii_lowercase();
            let secretive = ["password", "secret", "token", "account_key"]
                .iter()
                .any(|w| key.contains(w));
            if secretive && !value.contains("CERTIFICATE") && value.len() >= 12 {
                out.push(value.into_owned());
            }
        }
    }
    out
}

/// Everything people and log pipelines see in namespace `ns`: container
/// logs, Events, and the objects dkv writes (Secrets aside), as text.
pub async fn visible_text(client: &Client, ns: &str) -> String {
    let mut haystack = String::new();
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    for pod in pods
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let Some(spec) = pod.spec.clone() else {
            continue;
        };
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
        super::objects_text::<Event>(client, ns).await,
        super::objects_text::<DistributedKV>(client, ns).await,
        super::objects_text::<DistributedKVBackup>(client, ns).await,
        super::objects_text::<StatefulSet>(client, ns).await,
        super::objects_text::<CronJob>(client, ns).await,
        super::objects_text::<Job>(client, ns).await,
        super::objects_text::<Pod>(client, ns).await,
        super::objects_text::<ConfigMap>(client, ns).await,
    ] {
        haystack.push_str(&objects);
    }
    haystack
}

/// Records this test's needles and haystack (every namespace), when the
/// scan is on. Best effort: a test that ends early records nothing.
pub async fn record(client: &Client) {
    let Some(dir) = directory() else {
        return;
    };
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut needles = Vec::new();
    let mut haystack = String::new();
    for ns in namespaces.iter().map(ResourceExt::name_any) {
        let secrets = Api::<Secret>::namespaced(client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        needles.extend(secrets.iter().flat_map(self::needles));
        haystack.push_str(&visible_text(client, &ns).await);
    }
    let stem = stem();
    let write = |suffix: &str, text: &str| {
        if let Ok(mut file) = std::fs::File::create(dir.join(format!("{stem}.{suffix}"))) {
            let _ = file.write_all(text.as_bytes());
        }
    };
    write("needles", &needles.join("\n"));
    write("haystack", &haystack);
}
