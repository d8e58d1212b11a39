//! A pod's volumes as host directories: PVCs resolve to their bound PV's directory, emptyDirs live in the pod's
//! directory, and ConfigMap, Secret, downward API and projected volumes are rendered into files there.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Volume,
};
use kube::api::{Api, PostParams};

use super::environment::{PodFacts, field_ref};

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("persistentvolumeclaim \"{0}\" not found")]
    ClaimMissing(String),
    #[error("persistentvolumeclaim \"{0}\" is not bound")]
    ClaimUnbound(String),
    #[error("persistentvolume \"{0}\" has no local path")]
    NoPath(String),
    #[error("{kind} \"{name}\" not found")]
    SourceMissing { kind: &'static str, name: String },
    #[error("volume {volume}: {source}")]
    Io {
        volume: String,
        source: std::io::Error,
    },
    #[error("volume {0} has an unsupported type")]
    Unsupported(String),
}

/// Host directory of a PV provisioned by kube-local (or any PV with a hostPath or local path).
pub fn volume_path(pv: &PersistentVolume) -> Option<PathBuf> {
    let spec = pv.spec.as_ref()?;
    spec.host_path
        .as_ref()
        .map(|h| PathBuf::from(&h.path))
        .or_else(|| spec.local.as_ref().map(|l| PathBuf::from(&l.path)))
}

fn io(volume: &str) -> impl FnOnce(std::io::Error) -> VolumeError + '_ {
    move |source| VolumeError::Io {
        volume: volume.to_string(),
        source,
    }
}

fn write_file(dir: &Path, rel: &str, data: &[u8], mode: Option<i32>) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Keys are file names; refuse paths that climb out of the volume.
    if rel.split('/').any(|c| c == "..") || rel.starts_with('/') {
        return Ok(());
    }
    let path = dir.join(rel);
    super::sandbox::ensure_parent(&path)?;
    std::fs::write(&path, data)?;
    if let Some(mode) = mode {
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode((mode as u32) & 0o7777),
        )?;
    }
    Ok(())
}

/// Writes `data` keys (or the chosen `items`) into `dir`.
fn render_keys(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: Option<i32>,
) -> std::io::Result<()> {
    match items {
        Some(items) => {
            for item in items {
                if let Some(v) = data.get(&item.key) {
                    write_file(dir, &item.path, v, item.mode.or(default_mode))?;
                }
            }
        }
        None => {
            for (k, v) in data {
                write_file(dir, k, v, default_mode)?;
            }
        }
    }
    Ok(())
}

fn render_downward(
    dir: &Path,
    facts: &PodFacts<'_>,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
) -> std::io::Result<()> {
    for item in items {
        let value = item
            .field_ref
            .as_ref()
            .and_then(|f| field_ref(facts, &f.field_path))
            .unwrap_or_default();
        write_file(
            dir,
            &item.path,
            value.as_bytes(),
            item.mode.or(default_mode),
        )?;
    }
    Ok(())
}

async fn config_map_data(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<BTreeMap<String, Vec<u8>>> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?;
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    data.extend(
        cm.binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    Some(data)
}

async fn secret_data(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> Option<BTreeMap<String, Vec<u8>>> {
    let s = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .ok()
        .flatten()?;
    let mut data: BTreeMap<String, Vec<u8>> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    data.extend(
        s.string_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes())),
    );
    Some(data)
}

/// Where upstream's service account admission mounts the API credentials.
pub const SERVICE_ACCOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Lifetime of the tokens the kubelet requests for pods that do not ask for one. Upstream requests an hour
/// and refreshes the file before expiry (and its API server extends such tokens to a year); this kubelet
/// never refreshes, so it asks for the year at once.
const POD_TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// The account a pod runs as (`spec.serviceAccountName`, default `default`).
fn pod_service_account(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// A token for the pod's service account from the TokenRequest API (as upstream's kubelet gets one), or
/// `None` when it cannot be issued (e.g. the account does not exist).
async fn pod_token(
    client: &kube::Client,
    pod: &Pod,
    audience: Option<&str>,
    seconds: Option<i64>,
) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            // No audience: the API server's own (a node may ask for no other on a pod's behalf unless the pod
            // names it).
            audiences: audience
                .filter(|a| !a.is_empty())
                .map(|a| vec![a.to_owned()]),
            expiration_seconds: Some(seconds.unwrap_or(POD_TOKEN_SECONDS)),
            // Bound to the pod, as a kubelet's are: NodeRestriction lets a node ask only for tokens of its own pods.
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("Pod".to_owned()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let issued = Api::<ServiceAccount>::namespaced(client.clone(), ns)
        .create_token_request(&pod_service_account(pod), &PostParams::default(), &request)
        .await;
    match issued {
        Ok(answer) => answer.status.and_then(|s| s.token),
        Err(e) => {
            tracing::warn!(pod = ?pod.metadata.name, error = %e, "requesting the pod's service account token");
            None
        }
    }
}

/// Writes the service account files (`token`, `ca.crt`, `namespace`) a pod mounts at [`SERVICE_ACCOUNT_PATH`],
/// unless `automountServiceAccountToken` is false on the pod (or, when the pod does not say, on its
/// ServiceAccount). The token is issued for the pod's service account with the API server's audience; when it
/// cannot be (the account is missing) the file holds an opaque placeholder the API server does not accept.
/// `ca.crt` is the API server's CA when it serves TLS and an empty file over plain HTTP.
pub async fn service_account_dir(
    client: &kube::Client,
    pod: &Pod,
    pod_dir: &Path,
    ca_pem: Option<&str>,
) -> std::io::Result<Option<PathBuf>> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut automount = pod
        .spec
        .as_ref()
        .and_then(|s| s.automount_service_account_token);
    if automount.is_none() {
        automount = Api::<ServiceAccount>::namespaced(client.clone(), ns)
            .get_opt(&pod_service_account(pod))
            .await
            .ok()
            .flatten()
            .and_then(|sa| sa.automount_service_account_token);
    }
    if automount == Some(false) {
        return Ok(None);
    }
    let token = pod_token(client, pod, None, None)
        .await
        .unwrap_or_else(|| "kube-local".into());
    let dir = pod_dir.join("volumes").join("kube-api-access");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("token"), token)?;
    std::fs::write(dir.join("namespace"), ns)?;
    std::fs::write(dir.join("ca.crt"), ca_pem.unwrap_or_default())?;
    Ok(Some(dir))
}

/// Prepares every volume of the pod; returns volume name → host path.
pub async fn prepare(
    client: &kube::Client,
    facts: &PodFacts<'_>,
    pod_dir: &Path,
) -> Result<HashMap<String, PathBuf>, VolumeError> {
    let pod: &Pod = facts.pod;
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let mut out = HashMap::new();
    let volumes: &[Volume] = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default();
    for v in volumes {
        let name = v.name.as_str();
        let rendered = pod_dir.join("volumes").join(name);
        let path = if let Some(claim) = &v.persistent_volume_claim {
            let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
                .get_opt(&claim.claim_name)
                .await
                .ok()
                .flatten()
                .ok_or_else(|| VolumeError::ClaimMissing(claim.claim_name.clone()))?;
            let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
            let pv_name = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|_| bound)
                .ok_or_else(|| VolumeError::ClaimUnbound(claim.claim_name.clone()))?;
            let pv = Api::<PersistentVolume>::all(client.clone())
                .get_opt(&pv_name)
                .await
                .ok()
                .flatten()
                .ok_or_else(|| VolumeError::ClaimUnbound(claim.claim_name.clone()))?;
            let path = volume_path(&pv).ok_or_else(|| VolumeError::NoPath(pv_name.clone()))?;
            std::fs::create_dir_all(&path).map_err(io(name))?;
            path
        } else if v.empty_dir.is_some() {
            std::fs::create_dir_all(&rendered).map_err(io(name))?;
            rendered
        } else if let Some(h) = &v.host_path {
            let path = PathBuf::from(&h.path);
            if matches!(h.type_.as_deref(), Some("DirectoryOrCreate")) {
                std::fs::create_dir_all(&path).map_err(io(name))?;
            }
            path
        } else if let Some(c) = &v.config_map {
            let data = config_map_data(client, &ns, &c.name).await;
            if data.is_none() && c.optional != Some(true) {
                return Err(VolumeError::SourceMissing {
                    kind: "configmap",
                    name: c.name.clone(),
                });
            }
            std::fs::create_dir_all(&rendered).map_err(io(name))?;
            render_keys(
                &rendered,
                &data.unwrap_or_default(),
                c.items.as_ref(),
                c.default_mode,
            )
            .map_err(io(name))?;
            rendered
        } else if let Some(s) = &v.secret {
            let secret_name = s.secret_name.clone().unwrap_or_default();
            let data = secret_data(client, &ns, &secret_name).await;
            if data.is_none() && s.optional != Some(true) {
                return Err(VolumeError::SourceMissing {
                    kind: "secret",
                    name: secret_name,
                });
            }
            std::fs::create_dir_all(&rendered).map_err(io(name))?;
            render_keys(
                &rendered,
                &data.unwrap_or_default(),
                s.items.as_ref(),
                s.default_mode,
            )
            .map_err(io(name))?;
            rendered
        } else if let Some(d) = &v.downward_api {
            std::fs::create_dir_all(&rendered).map_err(io(name))?;
            render_downward(
                &rendered,
                facts,
                d.items.as_deref().unwrap_or_default(),
                d.default_mode,
            )
            .map_err(io(name))?;
            rendered
        } else if let Some(p) = &v.projected {
            std::fs::create_dir_all(&rendered).map_err(io(name))?;
            for source in p.sources.iter().flatten() {
                if let Some(c) = &source.config_map {
                    let data = config_map_data(client, &ns, &c.name).await;
                    if data.is_none() && c.optional != Some(true) {
                        return Err(VolumeError::SourceMissing {
                            kind: "configmap",
                            name: c.name.clone(),
                        });
                    }
                    render_keys(
                        &rendered,
                        &data.unwrap_or_default(),
                        c.items.as_ref(),
                        p.default_mode,
                    )
                    .map_err(io(name))?;
                }
                if let Some(s) = &source.secret {
                    let data = secret_data(client, &ns, &s.name).await;
                    if data.is_none() && s.optional != Some(true) {
                        return Err(VolumeError::SourceMissing {
                            kind: "secret",
                            name: s.name.clone(),
                        });
                    }
                    render_keys(
                        &rendered,
                        &data.unwrap_or_default(),
                        s.items.as_ref(),
                        p.default_mode,
                    )
                    .map_err(io(name))?;
                }
                if let Some(d) = &source.downward_api {
                    render_downward(
                        &rendered,
                        facts,
                        d.items.as_deref().unwrap_or_default(),
                        p.default_mode,
                    )
                    .map_err(io(name))?;
                }
                if let Some(t) = &source.service_account_token {
                    // A token the API server accepts; a placeholder when it cannot be issued.
                    let token = pod_token(client, pod, t.audience.as_deref(), t.expiration_seconds)
                        .await
                        .unwrap_or_else(|| "kube-local-token".into());
                    write_file(&rendered, &t.path, token.as_bytes(), p.default_mode)
                        .map_err(io(name))?;
                }
            }
            rendered
        } else {
            return Err(VolumeError::Unsupported(name.to_string()));
        };
        out.insert(name.to_string(), path);
    }
    Ok(out)
}
