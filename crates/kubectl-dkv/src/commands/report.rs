//! `report`: a support bundle (`.tar.gz`) with what anyone helping with a
//! cluster asks for first — its objects, its children, Events, member and
//! operator logs, the status page — and no secret.
//!
//! Secrets go in with their names, types, labels and keys only: every value
//! is replaced by `<redacted: N bytes>`. Other objects lose
//! `metadata.managedFields` and kubectl's last-applied annotation (which can
//! repeat a manifest's secret values). What could not be collected (a
//! forbidden read, a pod without logs) is listed in `errors.txt` instead of
//! failing the bundle.

use std::io::Write;
use std::path::Path;

use dkv_api::{DistributedKV, DistributedKVBackup};
use flate2::Compression;
use flate2::write::GzEncoder;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, LogParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::client::Target;
use crate::error::{Error, Result};

/// The bundle being written: entries under `<cluster>-report/`.
struct Bundle {
    tar: tar::Builder<GzEncoder<std::fs::File>>,
    root: String,
    errors: Vec<String>,
    files: usize,
}

impl Bundle {
    fn add(&mut self, name: &str, content: &[u8]) -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(jiff::Timestamp::now().as_second().max(0) as u64);
        header.set_cksum();
        self.tar
            .append_data(&mut header, format!("{}/{name}", self.root), content)
            .map_err(|e| Error::Failed(format!("writing {name} into the report: {e}")))?;
        self.files += 1;
        Ok(())
    }

    fn yaml<T: Serialize>(&mut self, name: &str, value: &T) -> Result<()> {
        let text = serde_saphyr::to_string(value).map_err(|e| Error::Output(e.to_string()))?;
        self.add(name, text.as_bytes())
    }

    fn error(&mut self, what: String) {
        self.errors.push(what);
    }
}

pub async fn run(target: &Target, name: &str, file: &Path) -> Result<()> {
    let cluster = target.cluster(name).await?;
    let out = std::fs::File::create(file)
        .map_err(|e| Error::Failed(format!("creating {}: {e}", file.display())))?;
    let mut bundle = Bundle {
        tar: tar::Builder::new(GzEncoder::new(out, Compression::default())),
        root: format!("{name}-report"),
        errors: Vec::new(),
        files: 0,
    };
    let ns = target.namespace.clone();
    let selector = format!("{}={name}", dkv_api::labels::CLUSTER_KEY);
    let by_cluster = ListParams::default().labels(&selector);

    bundle.yaml("distributedkv.yaml", &clean(cluster.clone()))?;
    let status = super::status::collect(target, &cluster).await?;
    bundle.add(
        "status.txt",
        super::status::text(&status, jiff::Timestamp::now()).as_bytes(),
    )?;
    let backups: Vec<DistributedKVBackup> = crate::lookup::backups_of(target, name).await?;
    bundle.yaml(
        "distributedkvbackups.yaml",
        &backups.into_iter().map(clean).collect::<Vec<_>>(),
    )?;
    collect::<StatefulSet>(target, &mut bundle, "statefulsets.yaml", &by_cluster).await?;
    let pods = collect::<Pod>(target, &mut bundle, "pods.yaml", &by_cluster).await?;
    collect::<PersistentVolumeClaim>(
        target,
        &mut bundle,
        "persistentvolumeclaims.yaml",
        &by_cluster,
    )
    .await?;
    collect::<Service>(target, &mut bundle, "services.yaml", &by_cluster).await?;
    collect::<ConfigMap>(target, &mut bundle, "configmaps.yaml", &by_cluster).await?;
    collect::<PodDisruptionBudget>(
        target,
        &mut bundle,
        "poddisruptionbudgets.yaml",
        &by_cluster,
    )
    .await?;
    collect::<CronJob>(target, &mut bundle, "cronjobs.yaml", &by_cluster).await?;
    collect::<Job>(target, &mut bundle, "jobs.yaml", &by_cluster).await?;
    secrets(target, &mut bundle, &cluster, &by_cluster).await?;
    events(target, &mut bundle, name, &pods).await?;
    for pod in &pods {
        pod_logs(&target.api::<Pod>(), &mut bundle, pod, "logs").await?;
    }
    // The operator: wherever it runs (not found in local mode, where it
    // is a process of `dkv local`, not a pod).
    let operators: Api<Pod> = Api::all(target.client.clone());
    match operators
        .list(&ListParams::default().labels("app.kubernetes.io/name=dkv-operator"))
        .await
    {
        Ok(list) if list.items.is_empty() => {
            bundle.error("operator logs: no pod labelled app.kubernetes.io/name=dkv-operator (in local mode the operator is not a pod)".to_owned());
        }
        Ok(list) => {
            for pod in &list.items {
                let api: Api<Pod> =
                    Api::namespaced(target.client.clone(), &pod.namespace().unwrap_or_default());
                pod_logs(&api, &mut bundle, pod, "operator-logs").await?;
            }
        }
        Err(e) => bundle.error(format!("operator logs: listing the operator's pods: {e}")),
    }
    let mut errors = bundle.errors.join("\n");
    errors.push('\n');
    let files = bundle.files + 1;
    bundle.add("errors.txt", errors.as_bytes())?;
    let gz = bundle
        .tar
        .into_inner()
        .map_err(|e| Error::Failed(format!("finishing {}: {e}", file.display())))?;
    gz.finish()
        .and_then(|mut f| f.flush())
        .map_err(|e| Error::Failed(format!("finishing {}: {e}", file.display())))?;
    println!(
        "wrote {} ({files} files for {ns}/{name}; secret values redacted)",
        file.display()
    );
    Ok(())
}

/// Lists `K` in the namespace with `params` into `name`; a refused list is
/// noted, not fatal.
async fn collect<K>(
    target: &Target,
    bundle: &mut Bundle,
    name: &str,
    params: &ListParams,
) -> Result<Vec<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match target.api::<K>().list(params).await {
        Ok(list) => {
            let items: Vec<K> = list.items.into_iter().map(clean).collect();
            bundle.yaml(name, &items)?;
            Ok(items)
        }
        Err(e) => {
            bundle.error(format!("{name}: {e}"));
            Ok(Vec::new())
        }
    }
}

/// `obj` without what only adds noise or may carry secrets.
fn clean<K: Resource>(mut obj: K) -> K {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    obj
}

/// The cluster's Secrets and those its spec names, values redacted.
async fn secrets(
    target: &Target,
    bundle: &mut Bundle,
    cluster: &DistributedKV,
    by_cluster: &ListParams,
) -> Result<()> {
    let api = target.api::<Secret>();
    let mut found: Vec<Secret> = match api.list(by_cluster).await {
        Ok(list) => list.items,
        Err(e) => {
            bundle.error(format!("secrets.yaml: {e}"));
            Vec::new()
        }
    };
    let backup = cluster.spec.backup.as_ref();
    let named = [
        backup.and_then(|b| b.destination.credentials_secret.clone()),
        backup
            .and_then(|b| b.encryption.as_ref())
            .map(|e| e.key_secret.name.clone()),
    ];
    for name in named.into_iter().flatten() {
        if found.iter().any(|s| s.name_any() == name) {
            continue;
        }
        match api.get_opt(&name).await {
            Ok(Some(secret)) => found.push(secret),
            Ok(None) => bundle.error(format!(
                "secrets.yaml: Secret {name} (named by the spec) does not exist"
            )),
            Err(e) => bundle.error(format!("secrets.yaml: Secret {name}: {e}")),
        }
    }
    let redacted: Vec<serde_json::Value> = found.into_iter().map(redact).collect();
    bundle.yaml("secrets.yaml", &redacted)
}

/// The Secret as YAML would show it, with every value replaced by its size
/// (as text: `data` would otherwise print the note in base64).
pub fn redact(secret: Secret) -> serde_json::Value {
    let mut secret = clean(secret);
    let sizes = |values: Vec<(String, usize)>| {
        values
            .into_iter()
            .map(|(key, n)| {
                (
                    key,
                    serde_json::Value::String(format!("<redacted: {n} bytes>")),
                )
            })
            .collect::<serde_json::Map<String, serde_json::Value>>()
    };
    let data = secret
        .data
        .take()
        .map(|d| sizes(d.into_iter().map(|(k, v)| (k, v.0.len())).collect()));
    let string_data = secret
        .string_data
        .take()
        .map(|d| sizes(d.into_iter().map(|(k, v)| (k, v.len())).collect()));
    let mut value = serde_json::to_value(&secret).unwrap_or_default();
    if let Some(object) = value.as_object_mut() {
        if let Some(data) = data {
            object.insert("data".to_owned(), data.into());
        }
        if let Some(string_data) = string_data {
            object.insert("stringData".to_owned(), string_data.into());
        }
    }
    value
}

/// Events about the cluster, its backups and its children (core/v1, which
/// also shows events.k8s.io Events), oldest first.
async fn events(target: &Target, bundle: &mut Bundle, name: &str, pods: &[Pod]) -> Result<()> {
    let list = match target.api::<Event>().list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(e) => {
            bundle.error(format!("events.yaml: {e}"));
            return Ok(());
        }
    };
    let pod_names: Vec<String> = pods.iter().map(ResourceExt::name_any).collect();
    let mut related: Vec<Event> = list
        .into_iter()
        .filter(|e| {
            e.involved_object.name.as_deref().is_some_and(|n| {
                n == name || n.starts_with(&format!("{name}-")) || pod_names.iter().any(|p| p == n)
            })
        })
        .map(clean)
        .collect();
    related.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    bundle.yaml("events.yaml", &related)
}

/// Each container's log (and the previous run's, after a restart) under
/// `dir/<pod>/`.
async fn pod_logs(api: &Api<Pod>, bundle: &mut Bundle, pod: &Pod, dir: &str) -> Result<()> {
    let name = pod.name_any();
    let spec = pod.spec.clone().unwrap_or_default();
    let statuses = pod.status.clone().unwrap_or_default();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
        .map(|c| c.name.clone());
    for container in containers {
        let restarted = statuses
            .container_statuses
            .iter()
            .flatten()
            .chain(statuses.init_container_statuses.iter().flatten())
            .any(|s| s.name == container && s.restart_count > 0);
        for previous in [false, true] {
            if previous && !restarted {
                continue;
            }
            let params = LogParams {
                container: Some(container.clone()),
                previous,
                ..LogParams::default()
            };
            let file = format!(
                "{dir}/{name}/{container}{}.log",
                if previous { ".previous" } else { "" }
            );
            match api.logs(&name, &params).await {
                Ok(text) => bundle.add(&file, text.as_bytes())?,
                Err(e) => bundle.error(format!("{file}: {e}")),
            }
        }
    }
    Ok(())
}
