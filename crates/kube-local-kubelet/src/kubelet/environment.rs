//! A container's environment: `env` (values, downward API, ConfigMap and Secret keys), `envFrom`, and `$(VAR)`
//! expansion in values, command and args, as the kubelet does it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;

/// Pod facts the downward API exposes that are not (yet) in the object the kubelet holds.
pub struct PodFacts<'a> {
    pub pod: &'a Pod,
    pub pod_ip: String,
    pub host_ip: String,
    pub node_name: &'a str,
    /// Where the API server listens, when pods may reach it.
    pub api_server: Option<std::net::SocketAddr>,
}

/// Resolves `metadata.name`, `status.podIP`, `metadata.labels['x']`, ...
pub fn field_ref(facts: &PodFacts<'_>, path: &str) -> Option<String> {
    let meta = &facts.pod.metadata;
    let spec = facts.pod.spec.as_ref();
    let map_entry = |map: &Option<BTreeMap<String, String>>, prefix: &str| -> Option<String> {
        let key = path
            .strip_prefix(prefix)?
            .strip_prefix("['")?
            .strip_suffix("']")?;
        map.as_ref()?.get(key).cloned()
    };
    let whole_map = |map: &Option<BTreeMap<String, String>>| -> String {
        map.as_ref()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={v:?}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    };
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => whole_map(&meta.labels),
        "metadata.annotations" => whole_map(&meta.annotations),
        "spec.nodeName" => facts.node_name.to_string(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => facts.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.clone(),
        p if p.starts_with("metadata.labels[") => map_entry(&meta.labels, "metadata.labels")?,
        p if p.starts_with("metadata.annotations[") => {
            map_entry(&meta.annotations, "metadata.annotations")?
        }
        _ => return None,
    })
}

/// Expands `$(NAME)` from `vars`; `$$` escapes a `$`; unknown references stay as written.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        if let Some(after) = tail.strip_prefix('$') {
            out.push('$');
            rest = after;
        } else if let Some(body) = tail.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("{kind} {namespace}/{name} not found")]
    Missing {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("couldn't find key {key} in {kind} {namespace}/{name}")]
    MissingKey {
        kind: &'static str,
        namespace: String,
        name: String,
        key: String,
    },
    #[error("unsupported fieldRef {0}")]
    Field(String),
}

async fn config_map(api: &Api<ConfigMap>, name: &str) -> Option<BTreeMap<String, String>> {
    let cm = api.get_opt(name).await.ok().flatten()?;
    Some(cm.data.unwrap_or_default())
}

async fn secret(api: &Api<Secret>, name: &str) -> Option<BTreeMap<String, String>> {
    let s = api.get_opt(name).await.ok().flatten()?;
    let mut out: BTreeMap<String, String> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    out.extend(s.string_data.unwrap_or_default());
    Some(out)
}

/// The container's environment in order (later entries win), with `PATH` and `HOSTNAME` defaults.
pub async fn container_env(
    client: &kube::Client,
    facts: &PodFacts<'_>,
    container: &Container,
) -> Result<Vec<(String, String)>, EnvError> {
    let namespace = facts.pod.metadata.namespace.clone().unwrap_or_default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !order.contains(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    set(
        &mut vars,
        "PATH".into(),
        super::sandbox::DEFAULT_PATH.into(),
    );
    let hostname = facts
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.hostname.clone())
        .or_else(|| facts.pod.metadata.name.clone())
        .unwrap_or_default();
    set(&mut vars, "HOSTNAME".into(), hostname);
    set(&mut vars, "HOME".into(), "/root".into());
    // The API server's variables are in every container, service links or not (as upstream's master service).
    if let Some(api) = facts.api_server {
        let (host, port) = (api.ip().to_string(), api.port());
        for (k, v) in [
            ("KUBERNETES_SERVICE_HOST", host.clone()),
            ("KUBERNETES_SERVICE_PORT", port.to_string()),
            ("KUBERNETES_SERVICE_PORT_HTTPS", port.to_string()),
            ("KUBERNETES_PORT", format!("tcp://{host}:{port}")),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP"),
                format!("tcp://{host}:{port}"),
            ),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP_PROTO"),
                "tcp".to_string(),
            ),
            (
                &*format!("KUBERNETES_PORT_{port}_TCP_PORT"),
                port.to_string(),
            ),
            (&*format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host.clone()),
        ] {
            set(&mut vars, k.to_string(), v);
        }
    }
    let missing = |kind: &'static str, name: &str| EnvError::Missing {
        kind,
        namespace: namespace.clone(),
        name: name.to_string(),
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            let d = config_map(&cms, &r.name).await;
            if d.is_none() && r.optional != Some(true) {
                return Err(missing("configmap", &r.name));
            }
            d
        } else if let Some(r) = &from.secret_ref {
            let d = secret(&secrets, &r.name).await;
            if d.is_none() && r.optional != Some(true) {
                return Err(missing("secret", &r.name));
            }
            d
        } else {
            None
        };
        for (k, v) in data.unwrap_or_default() {
            set(&mut vars, format!("{prefix}{k}"), v);
        }
    }
    for e in container.env.iter().flatten() {
        let value = if let Some(v) = &e.value {
            expand(v, &vars)
        } else if let Some(from) = &e.value_from {
            if let Some(f) = &from.field_ref {
                field_ref(facts, &f.field_path)
                    .ok_or_else(|| EnvError::Field(f.field_path.clone()))?
            } else if let Some((kind, data, name, key, optional)) =
                if let Some(r) = &from.config_map_key_ref {
                    let data = config_map(&cms, &r.name).await;
                    Some(("configmap", data, &r.name, &r.key, r.optional))
                } else if let Some(r) = &from.secret_key_ref {
                    let data = secret(&secrets, &r.name).await;
                    Some(("secret", data, &r.name, &r.key, r.optional))
                } else {
                    None
                }
            {
                match data.and_then(|d| d.get(key).cloned()) {
                    Some(v) => v,
                    None if optional == Some(true) => continue,
                    None => {
                        return Err(EnvError::MissingKey {
                            kind,
                            namespace: namespace.clone(),
                            name: name.clone(),
                            key: key.clone(),
                        });
                    }
                }
            } else if let Some(r) = &from.resource_field_ref {
                resource_field(container, &r.resource)
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        set(&mut vars, e.name.clone(), value);
    }
    Ok(order
        .into_iter()
        .filter_map(|k| vars.get(&k).map(|v| (k, v.clone())))
        .collect())
}

/// `limits.cpu` and friends; unset limits report the node's capacity as upstream does (here: whole numbers).
fn resource_field(container: &Container, resource: &str) -> String {
    let (kind, name) = resource.split_once('.').unwrap_or(("", resource));
    let resources = container.resources.as_ref();
    let value = match kind {
        "limits" => resources.and_then(|r| r.limits.as_ref()?.get(name).cloned()),
        "requests" => resources.and_then(|r| r.requests.as_ref()?.get(name).cloned()),
        _ => None,
    };
    match (value, name) {
        (Some(q), "cpu") => {
            let s = q.0;
            match s.strip_suffix('m').and_then(|m| m.parse::<u64>().ok()) {
                Some(milli) => milli.div_ceil(1000).max(1).to_string(),
                None => s,
            }
        }
        (Some(q), _) => q.0,
        (None, "cpu") => std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_else(|_| "1".into()),
        (None, _) => "0".into(),
    }
}

/// Expands `$(VAR)` in command and args with the container's environment.
pub fn expand_all(items: &[String], env: &[(String, String)]) -> Vec<String> {
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    items.iter().map(|i| expand(i, &vars)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion() {
        let vars: BTreeMap<String, String> =
            [("A".to_string(), "x".to_string())].into_iter().collect();
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &vars), "x-$(B)-$(A)-$");
        assert_eq!(expand("--ip=$(A)", &vars), "--ip=x");
        assert_eq!(expand("$(A", &vars), "$(A");
    }
}
