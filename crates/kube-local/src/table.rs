//! `meta.k8s.io/v1` Table output for `kubectl get`: built-in printers, CRD printer columns, and the JSONPath subset they use.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::{PrinterColumn, ResourceType};

/// upstream `duration.HumanDuration`.
pub fn human_duration(secs: i64) -> String {
    if secs < -1 {
        return "<invalid>".into();
    }
    if secs < 0 {
        return "0s".into();
    }
    if secs < 120 {
        return format!("{secs}s");
    }
    let minutes = secs / 60;
    if minutes < 10 {
        let s = secs % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = secs / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    format!("{}y", hours / 24 / 365)
}

fn age_of(ts: Option<&str>) -> String {
    match ts.and_then(meta::parse_time) {
        Some(t) => human_duration(jiff::Timestamp::now().as_second() - t.as_second()),
        None => "<unknown>".into(),
    }
}

fn age(obj: &Value) -> Value {
    json!(age_of(meta::str_at(
        obj,
        &["metadata", "creationTimestamp"]
    )))
}

struct Col {
    name: &'static str,
    type_: &'static str,
    priority: i64,
}

const fn c(name: &'static str, type_: &'static str) -> Col {
    Col {
        name,
        type_,
        priority: 0,
    }
}

const fn wide(name: &'static str, type_: &'static str) -> Col {
    Col {
        name,
        type_,
        priority: 1,
    }
}

fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn or_none(v: String) -> Value {
    if v.is_empty() {
        json!("<none>")
    } else {
        json!(v)
    }
}

fn count(v: Option<&Value>) -> i64 {
    v.map(|x| match x {
        Value::Object(m) => m.len() as i64,
        Value::Array(a) => a.len() as i64,
        _ => 0,
    })
    .unwrap_or(0)
}

/// Column definitions and the function computing a row's cells.
type Printer = (Vec<Col>, fn(&Value) -> Vec<Value>);

/// upstream `layoutContainerCells`: container names and images, comma-separated.
fn containers_and_images(o: &Value, template: &str) -> (Value, Value) {
    let containers = o
        .pointer(template)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let field = |f: &str| -> Vec<String> { containers.iter().map(|c| s(c.get(f))).collect() };
    (
        json!(field("name").join(",")),
        json!(field("image").join(",")),
    )
}

/// upstream `metav1.FormatLabelSelector`.
fn format_label_selector(sel: Option<&Value>) -> Value {
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = sel
        .and_then(|s| s.get("matchLabels"))
        .and_then(Value::as_object)
    {
        let mut labels: Vec<(&String, &Value)> = m.iter().collect();
        labels.sort_by(|a, b| a.0.cmp(b.0));
        parts.extend(
            labels
                .into_iter()
                .map(|(k, v)| format!("{k}={}", s(Some(v)))),
        );
    }
    for e in sel
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = s(e.get("key"));
        let mut values: Vec<String> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|vs| vs.iter().map(|v| s(Some(v))).collect())
            .unwrap_or_default();
        values.sort();
        parts.push(match s(e.get("operator")).as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key,
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    or_none(parts.join(","))
}

/// upstream `GetAccessModesAsString`.
fn access_modes(modes: Option<&Value>) -> String {
    let have = |m: &str| {
        modes
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(m)))
    };
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .into_iter()
    .filter(|(m, _)| have(m))
    .map(|(_, short)| short)
    .collect::<Vec<_>>()
    .join(",")
}

fn int_or_string(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "N/A".into(),
        Some(other) => s(Some(other)),
    }
}

fn unset_or(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!("<unset>"),
        some => json!(s(some)),
    }
}

/// upstream `formatEndpoints`: up to three `ip:port`, then `+ N more...`.
fn format_endpoints(o: &Value) -> Value {
    const MAX: usize = 3;
    let mut shown: Vec<String> = Vec::new();
    let mut total = 0;
    for subset in o
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let ips: Vec<String> = subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|a| s(a.get("ip")))
            .collect();
        let ports: Vec<Option<i64>> = match subset.get("ports").and_then(Value::as_array) {
            Some(ps) if !ps.is_empty() => ps
                .iter()
                .map(|p| p.get("port").and_then(Value::as_i64))
                .collect(),
            _ => vec![None],
        };
        for port in ports {
            for ip in &ips {
                total += 1;
                if shown.len() < MAX {
                    shown.push(match port {
                        Some(p) if ip.contains(':') => format!("[{ip}]:{p}"),
                        Some(p) => format!("{ip}:{p}"),
                        None => ip.clone(),
                    });
                }
            }
        }
    }
    if shown.is_empty() {
        return json!("<none>");
    }
    let list = shown.join(",");
    if total > MAX {
        json!(format!("{list} + {} more...", total - MAX))
    } else {
        json!(list)
    }
}

fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<i64> {
    let from = meta::parse_time(from?)?;
    let to = match to {
        Some(t) => meta::parse_time(t)?,
        None => jiff::Timestamp::now(),
    };
    Some(to.as_second() - from.as_second())
}

fn builtin_columns(rt: &ResourceType) -> Option<Printer> {
    Some(match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "pods") => (
            vec![
                c("Name", "string"),
                c("Ready", "string"),
                c("Status", "string"),
                c("Restarts", "string"),
                c("Age", "string"),
                wide("IP", "string"),
                wide("Node", "string"),
                wide("Nominated Node", "string"),
                wide("Readiness Gates", "string"),
            ],
            |o| {
                let statuses = o
                    .pointer("/status/containerStatuses")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let total = o
                    .pointer("/spec/containers")
                    .and_then(Value::as_array)
                    .map(Vec::len)
                    .unwrap_or(0);
                let ready = statuses
                    .iter()
                    .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
                    .count();
                let restarts: i64 = statuses
                    .iter()
                    .filter_map(|c| c.get("restartCount").and_then(Value::as_i64))
                    .sum();
                let mut status = s(o.pointer("/status/reason"));
                if status.is_empty() {
                    status = s(o.pointer("/status/phase"));
                }
                for cs in &statuses {
                    if let Some(r) = cs.pointer("/state/waiting/reason").and_then(Value::as_str) {
                        status = r.to_string();
                    }
                }
                if meta::is_deleting(o) {
                    status = "Terminating".into();
                }
                vec![
                    json!(meta::name(o)),
                    json!(format!("{ready}/{total}")),
                    json!(status),
                    json!(restarts.to_string()),
                    age(o),
                    or_none(s(o.pointer("/status/podIP"))),
                    or_none(s(o.pointer("/spec/nodeName"))),
                    or_none(s(o.pointer("/status/nominatedNodeName"))),
                    json!("<none>"),
                ]
            },
        ),
        ("", "namespaces") => (
            vec![
                c("Name", "string"),
                c("Status", "string"),
                c("Age", "string"),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/status/phase"))),
                    age(o),
                ]
            },
        ),
        ("", "configmaps") => (
            vec![
                c("Name", "string"),
                c("Data", "integer"),
                c("Age", "string"),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(count(o.get("data")) + count(o.get("binaryData"))),
                    age(o),
                ]
            },
        ),
        ("", "secrets") => (
            vec![
                c("Name", "string"),
                c("Type", "string"),
                c("Data", "integer"),
                c("Age", "string"),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(s(o.get("type"))),
                    json!(count(o.get("data"))),
                    age(o),
                ]
            },
        ),
        ("", "serviceaccounts") => (
            vec![
                c("Name", "string"),
                c("Secrets", "integer"),
                c("Age", "string"),
            ],
            |o| vec![json!(meta::name(o)), json!(count(o.get("secrets"))), age(o)],
        ),
        ("", "services") => (
            vec![
                c("Name", "string"),
                c("Type", "string"),
                c("Cluster-IP", "string"),
                c("External-IP", "string"),
                c("Port(s)", "string"),
                c("Age", "string"),
                wide("Selector", "string"),
            ],
            |o| {
                let ports: Vec<String> = o
                    .pointer("/spec/ports")
                    .and_then(Value::as_array)
                    .map(|ps| {
                        ps.iter()
                            .map(|p| {
                                let node_port =
                                    p.get("nodePort").and_then(Value::as_i64).unwrap_or(0);
                                if node_port > 0 {
                                    format!(
                                        "{}:{node_port}/{}",
                                        s(p.get("port")),
                                        s(p.get("protocol"))
                                    )
                                } else {
                                    format!("{}/{}", s(p.get("port")), s(p.get("protocol")))
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let mut selector: Vec<String> = o
                    .pointer("/spec/selector")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", s(Some(v))))
                            .collect()
                    })
                    .unwrap_or_default();
                selector.sort();
                let strings = |p: &str| -> Vec<String> {
                    o.pointer(p)
                        .and_then(Value::as_array)
                        .map(|a| a.iter().map(|v| s(Some(v))).collect())
                        .unwrap_or_default()
                };
                let external_ips = strings("/spec/externalIPs");
                // upstream `getServiceExternalIP`
                let external = match s(o.pointer("/spec/type")).as_str() {
                    "ClusterIP" | "NodePort" if !external_ips.is_empty() => external_ips.join(","),
                    "ClusterIP" | "NodePort" => "<none>".into(),
                    "LoadBalancer" => {
                        let mut all: Vec<String> = o
                            .pointer("/status/loadBalancer/ingress")
                            .and_then(Value::as_array)
                            .map(|a| {
                                a.iter()
                                    .map(|i| {
                                        let ip = s(i.get("ip"));
                                        if ip.is_empty() {
                                            s(i.get("hostname"))
                                        } else {
                                            ip
                                        }
                                    })
                                    .filter(|x| !x.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default();
                        all.sort();
                        all.dedup();
                        all.extend(external_ips);
                        if all.is_empty() {
                            "<pending>".into()
                        } else {
                            all.join(",")
                        }
                    }
                    "ExternalName" => s(o.pointer("/spec/externalName")),
                    _ => "<unknown>".into(),
                };
                let cluster_ip = strings("/spec/clusterIPs")
                    .into_iter()
                    .next()
                    .unwrap_or_else(|| "<none>".into());
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/spec/type"))),
                    json!(cluster_ip),
                    json!(external),
                    or_none(ports.join(",")),
                    age(o),
                    or_none(selector.join(",")),
                ]
            },
        ),
        ("apps", "statefulsets") => (
            vec![
                c("Name", "string"),
                c("Ready", "string"),
                c("Age", "string"),
                wide("Containers", "string"),
                wide("Images", "string"),
            ],
            |o| {
                let (names, images) = containers_and_images(o, "/spec/template/spec/containers");
                vec![
                    json!(meta::name(o)),
                    json!(format!(
                        "{}/{}",
                        o.pointer("/status/readyReplicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(0),
                        o.pointer("/spec/replicas")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    )),
                    age(o),
                    names,
                    images,
                ]
            },
        ),
        ("apps", "deployments") => (
            vec![
                c("Name", "string"),
                c("Ready", "string"),
                c("Up-to-date", "integer"),
                c("Available", "integer"),
                c("Age", "string"),
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            |o| {
                let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
                let (names, images) = containers_and_images(o, "/spec/template/spec/containers");
                vec![
                    json!(meta::name(o)),
                    json!(format!(
                        "{}/{}",
                        n("/status/readyReplicas"),
                        n("/spec/replicas")
                    )),
                    json!(n("/status/updatedReplicas")),
                    json!(n("/status/availableReplicas")),
                    age(o),
                    names,
                    images,
                    format_label_selector(o.pointer("/spec/selector")),
                ]
            },
        ),
        ("apps", "replicasets") => (
            vec![
                c("Name", "string"),
                c("Desired", "integer"),
                c("Current", "integer"),
                c("Ready", "integer"),
                c("Age", "string"),
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            |o| {
                let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
                let (names, images) = containers_and_images(o, "/spec/template/spec/containers");
                vec![
                    json!(meta::name(o)),
                    json!(n("/spec/replicas")),
                    json!(n("/status/replicas")),
                    json!(n("/status/readyReplicas")),
                    age(o),
                    names,
                    images,
                    format_label_selector(o.pointer("/spec/selector")),
                ]
            },
        ),
        ("batch", "jobs") => (
            vec![
                c("Name", "string"),
                c("Status", "string"),
                c("Completions", "string"),
                c("Duration", "string"),
                c("Age", "string"),
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            |o| {
                let conds = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let has = |t: &str| {
                    conds.iter().any(|c| {
                        c.get("type").and_then(Value::as_str) == Some(t)
                            && c.get("status").and_then(Value::as_str) == Some("True")
                    })
                };
                let status = if has("Complete") {
                    "Complete"
                } else if has("Failed") {
                    "Failed"
                } else if meta::is_deleting(o) {
                    "Terminating"
                } else if has("Suspended") {
                    "Suspended"
                } else if has("FailureTarget") {
                    "FailureTarget"
                } else {
                    "Running"
                };
                let succeeded = o
                    .pointer("/status/succeeded")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let completions = match o.pointer("/spec/completions").and_then(Value::as_i64) {
                    Some(n) => format!("{succeeded}/{n}"),
                    None => match o.pointer("/spec/parallelism").and_then(Value::as_i64) {
                        Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
                        _ => format!("{succeeded}/1"),
                    },
                };
                let duration = seconds_between(
                    meta::str_at(o, &["status", "startTime"]),
                    meta::str_at(o, &["status", "completionTime"]),
                )
                .map(human_duration)
                .unwrap_or_default();
                let (names, images) = containers_and_images(o, "/spec/template/spec/containers");
                vec![
                    json!(meta::name(o)),
                    json!(status),
                    json!(completions),
                    json!(duration),
                    age(o),
                    names,
                    images,
                    format_label_selector(o.pointer("/spec/selector")),
                ]
            },
        ),
        ("batch", "cronjobs") => (
            vec![
                c("Name", "string"),
                c("Schedule", "string"),
                c("Timezone", "string"),
                c("Suspend", "boolean"),
                c("Active", "integer"),
                c("Last Schedule", "string"),
                c("Age", "string"),
                wide("Containers", "string"),
                wide("Images", "string"),
                wide("Selector", "string"),
            ],
            |o| {
                let last = match meta::str_at(o, &["status", "lastScheduleTime"]) {
                    Some(t) => age_of(Some(t)),
                    None => "<none>".into(),
                };
                let suspend = match o.pointer("/spec/suspend").and_then(Value::as_bool) {
                    Some(true) => "True",
                    Some(false) => "False",
                    None => "<unset>",
                };
                let (names, images) =
                    containers_and_images(o, "/spec/jobTemplate/spec/template/spec/containers");
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/spec/schedule"))),
                    json!(meta::str_at(o, &["spec", "timeZone"]).unwrap_or("<none>")),
                    json!(suspend),
                    json!(count(o.pointer("/status/active"))),
                    json!(last),
                    age(o),
                    names,
                    images,
                    format_label_selector(o.pointer("/spec/jobTemplate/spec/selector")),
                ]
            },
        ),
        ("policy", "poddisruptionbudgets") => (
            vec![
                c("Name", "string"),
                c("Min Available", "string"),
                c("Max Unavailable", "string"),
                c("Allowed Disruptions", "integer"),
                c("Age", "string"),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(int_or_string(o.pointer("/spec/minAvailable"))),
                    json!(int_or_string(o.pointer("/spec/maxUnavailable"))),
                    json!(
                        o.pointer("/status/disruptionsAllowed")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    ),
                    age(o),
                ]
            },
        ),
        ("", "endpoints") => (
            vec![
                c("Name", "string"),
                c("Endpoints", "string"),
                c("Age", "string"),
            ],
            |o| vec![json!(meta::name(o)), format_endpoints(o), age(o)],
        ),
        ("", "persistentvolumes") => (
            vec![
                c("Name", "string"),
                c("Capacity", "string"),
                c("Access Modes", "string"),
                c("Reclaim Policy", "string"),
                c("Status", "string"),
                c("Claim", "string"),
                c("StorageClass", "string"),
                c("VolumeAttributesClass", "string"),
                c("Reason", "string"),
                c("Age", "string"),
                wide("VolumeMode", "string"),
            ],
            |o| {
                let claim = match o.pointer("/spec/claimRef") {
                    Some(r) if !r.is_null() => {
                        format!("{}/{}", s(r.get("namespace")), s(r.get("name")))
                    }
                    _ => String::new(),
                };
                let phase = if meta::is_deleting(o) {
                    "Terminating".to_string()
                } else {
                    s(o.pointer("/status/phase"))
                };
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/spec/capacity/storage"))),
                    json!(access_modes(o.pointer("/spec/accessModes"))),
                    json!(s(o.pointer("/spec/persistentVolumeReclaimPolicy"))),
                    json!(phase),
                    json!(claim),
                    json!(s(o.pointer("/spec/storageClassName"))),
                    unset_or(o.pointer("/spec/volumeAttributesClassName")),
                    json!(s(o.pointer("/status/reason"))),
                    age(o),
                    unset_or(o.pointer("/spec/volumeMode")),
                ]
            },
        ),
        ("", "events") => (
            vec![
                c("Last Seen", "string"),
                c("Type", "string"),
                c("Reason", "string"),
                c("Object", "string"),
                c("Message", "string"),
            ],
            |o| {
                let last =
                    meta::str_at(o, &["lastTimestamp"]).or_else(|| meta::str_at(o, &["eventTime"]));
                let obj = format!(
                    "{}/{}",
                    s(o.pointer("/involvedObject/kind")).to_ascii_lowercase(),
                    s(o.pointer("/involvedObject/name"))
                );
                vec![
                    json!(age_of(last)),
                    json!(s(o.get("type"))),
                    json!(s(o.get("reason"))),
                    json!(obj),
                    json!(s(o.get("message"))),
                ]
            },
        ),
        ("coordination.k8s.io", "leases") => (
            vec![
                c("Name", "string"),
                c("Holder", "string"),
                c("Age", "string"),
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/spec/holderIdentity"))),
                    age(o),
                ]
            },
        ),
        ("", "persistentvolumeclaims") => (
            vec![
                c("Name", "string"),
                c("Status", "string"),
                c("Volume", "string"),
                c("Capacity", "string"),
                c("Access Modes", "string"),
                c("StorageClass", "string"),
                c("VolumeAttributesClass", "string"),
                c("Age", "string"),
                wide("VolumeMode", "string"),
            ],
            |o| {
                let phase = if meta::is_deleting(o) {
                    "Terminating".to_string()
                } else {
                    s(o.pointer("/status/phase"))
                };
                // Capacity and access modes are shown once the claim names its volume.
                let bound = !s(o.pointer("/spec/volumeName")).is_empty();
                let (capacity, modes) = if bound {
                    (
                        s(o.pointer("/status/capacity/storage")),
                        access_modes(o.pointer("/status/accessModes")),
                    )
                } else {
                    (String::new(), String::new())
                };
                vec![
                    json!(meta::name(o)),
                    json!(phase),
                    json!(s(o.pointer("/spec/volumeName"))),
                    json!(capacity),
                    json!(modes),
                    json!(s(o.pointer("/spec/storageClassName"))),
                    unset_or(o.pointer("/spec/volumeAttributesClassName")),
                    age(o),
                    unset_or(o.pointer("/spec/volumeMode")),
                ]
            },
        ),
        ("", "nodes") => (
            vec![
                c("Name", "string"),
                c("Status", "string"),
                c("Roles", "string"),
                c("Age", "string"),
                c("Version", "string"),
            ],
            |o| {
                let ready = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                    })
                    .and_then(|c| c.get("status").and_then(Value::as_str))
                    == Some("True");
                vec![
                    json!(meta::name(o)),
                    json!(if ready { "Ready" } else { "NotReady" }),
                    json!("<none>"),
                    age(o),
                    json!(s(o.pointer("/status/nodeInfo/kubeletVersion"))),
                ]
            },
        ),
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            (vec![c("Name", "string"), c("Created At", "date")], |o| {
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/metadata/creationTimestamp"))),
                ]
            })
        }
        _ => return None,
    })
}

/// A JSONPath subset: `.a.b`, `[n]`, `[*]`, `['key']`, `[?(@.f=="v")]`.
pub fn json_path<'a>(obj: &'a Value, path: &str) -> Vec<&'a Value> {
    let path = path
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim_start_matches('$');
    let mut cur: Vec<&Value> = vec![obj];
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            cur = cur.into_iter().filter_map(|v| v.get(field)).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Vec::new();
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            if inner == "*" {
                cur = cur
                    .into_iter()
                    .flat_map(|v| match v {
                        Value::Array(a) => a.iter().collect::<Vec<_>>(),
                        Value::Object(m) => m.values().collect(),
                        _ => Vec::new(),
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<usize>() {
                cur = cur.into_iter().filter_map(|v| v.get(i)).collect();
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let (field, want) = match filter.split_once("==") {
                    Some((f, w)) => (
                        f.trim(),
                        Some(w.trim().trim_matches(|c| c == '"' || c == '\'')),
                    ),
                    None => (filter.trim(), None),
                };
                cur = cur
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .filter(|item| {
                        let got = field
                            .split('.')
                            .try_fold(*item, |acc, p| acc.get(p))
                            .map(|v| match v {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            });
                        match (got, want) {
                            (Some(g), Some(w)) => g == w,
                            (Some(_), None) => true,
                            (None, _) => false,
                        }
                    })
                    .collect();
            } else {
                let key = inner.trim_matches(|c| c == '\'' || c == '"');
                cur = cur.into_iter().filter_map(|v| v.get(key)).collect();
            }
        } else {
            return Vec::new();
        }
    }
    cur
}

fn custom_cell(col: &PrinterColumn, obj: &Value) -> Value {
    let Some(v) = json_path(obj, &col.json_path).into_iter().next() else {
        return Value::Null;
    };
    match col.type_.as_str() {
        "date" => match v.as_str() {
            Some(ts) => json!(age_of(Some(ts))),
            None => Value::Null,
        },
        "integer" => v
            .as_i64()
            .map(|i| json!(i))
            .or_else(|| v.as_f64().map(|f| json!(f as i64)))
            .unwrap_or(Value::Null),
        "number" => v.as_f64().map(|f| json!(f)).unwrap_or(Value::Null),
        "boolean" => v.as_bool().map(|b| json!(b)).unwrap_or(Value::Null),
        _ => match v {
            Value::String(s) => json!(s),
            Value::Null => Value::Null,
            other => json!(other.to_string()),
        },
    }
}

fn partial_metadata(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata").cloned().unwrap_or(json!({}))})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncludeObject {
    None,
    Metadata,
    Object,
}

/// Builds a Table of `objects`.
pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    include: IncludeObject,
    rv: Option<String>,
    cont: Option<String>,
) -> Value {
    let name_col = json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names", "priority": 0});
    let (columns, rows): (Vec<Value>, Vec<Vec<Value>>) = if let Some(custom) = &rt.custom {
        let mut cols = vec![name_col];
        cols.extend(custom.printer_columns.iter().map(|c| {
            json!({"name": c.name, "type": if c.type_ == "date" { "string" } else { c.type_.as_str() }, "format": c.format, "description": c.description, "priority": c.priority})
        }));
        let rows = objects
            .iter()
            .map(|o| {
                let mut cells = vec![json!(meta::name(o))];
                cells.extend(custom.printer_columns.iter().map(|c| custom_cell(c, o)));
                cells
            })
            .collect();
        (cols, rows)
    } else if let Some((cols, cells)) = builtin_columns(rt) {
        let defs = cols
            .iter()
            .map(|c| {
                if c.name == "Name" {
                    name_col.clone()
                } else {
                    json!({"name": c.name, "type": c.type_, "format": "", "description": "", "priority": c.priority})
                }
            })
            .collect();
        (defs, objects.iter().map(cells).collect())
    } else {
        let cols = vec![
            name_col,
            json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}),
        ];
        (
            cols,
            objects
                .iter()
                .map(|o| vec![json!(meta::name(o)), age(o)])
                .collect(),
        )
    };
    let rows: Vec<Value> = rows
        .into_iter()
        .zip(objects)
        .map(|(cells, o)| {
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let mut metadata = json!({});
    if let Some(rv) = rv {
        metadata["resourceVersion"] = json!(rv);
    }
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_match_upstream() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 60), "3h1m");
        assert_eq!(human_duration(50 * 3600), "2d2h");
    }

    #[test]
    fn json_path_subset() {
        let o = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "False"}]}, "spec": {"n": 3}});
        assert_eq!(json_path(&o, ".spec.n"), vec![&json!(3)]);
        assert_eq!(
            json_path(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![&json!("True")]
        );
        assert_eq!(
            json_path(&o, ".status.conditions[1].type"),
            vec![&json!("X")]
        );
    }
}
