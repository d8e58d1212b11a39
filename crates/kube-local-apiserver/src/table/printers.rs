//! Upstream's built-in printers: the columns `kubectl get` shows for each built-in resource type, and how each
//! object's cells are computed.

use serde_json::{Value, json};

use super::columns::{
    Printer, access_modes, c, containers_and_images, count, format_endpoints,
    format_label_selector, int_or_string, or_none, s, seconds_between, unset_or, wide,
};
use super::human_duration;
use super::{age, age_of};
use crate::meta;
use crate::registry::ResourceType;

pub(super) fn builtin_columns(rt: &ResourceType) -> Option<Printer> {
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
                // As upstream's printer: the Ready condition (Unknown without one), then SchedulingDisabled
                // for a cordoned node; roles from the node-role labels.
                let ready = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
                    })
                    .map(|c| c.get("status").and_then(Value::as_str) == Some("True"));
                let mut status = vec![match ready {
                    Some(true) => "Ready",
                    Some(false) => "NotReady",
                    None => "Unknown",
                }];
                if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
                    status.push("SchedulingDisabled");
                }
                let mut roles: Vec<&str> = meta::labels(o)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, v)| match k.strip_prefix("node-role.kubernetes.io/") {
                        Some(role) if !role.is_empty() => Some(role),
                        _ if k == "kubernetes.io/role" => v.as_str().filter(|r| !r.is_empty()),
                        _ => None,
                    })
                    .collect();
                roles.sort_unstable();
                roles.dedup();
                vec![
                    json!(meta::name(o)),
                    json!(status.join(",")),
                    json!(if roles.is_empty() {
                        "<none>".to_string()
                    } else {
                        roles.join(",")
                    }),
                    age(o),
                    json!(s(o.pointer("/status/nodeInfo/kubeletVersion"))),
                ]
            },
        ),
        // Upstream's CertificateSigningRequest printer: the condition reads Denied/Approved/Pending, then
        // `,Failed` and `,Issued`.
        ("certificates.k8s.io", "certificatesigningrequests") => (
            vec![
                c("Name", "string"),
                c("Age", "string"),
                c("SignerName", "string"),
                c("Requestor", "string"),
                c("RequestedDuration", "string"),
                c("Condition", "string"),
            ],
            |o| {
                let types: Vec<String> = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .map(|cs| cs.iter().map(|c| s(c.get("type"))).collect())
                    .unwrap_or_default();
                let has = |t: &str| types.iter().any(|x| x == t);
                let mut condition = if has("Denied") {
                    "Denied".to_string()
                } else if has("Approved") {
                    "Approved".to_string()
                } else {
                    "Pending".to_string()
                };
                if has("Failed") {
                    condition.push_str(",Failed");
                }
                if !s(o.pointer("/status/certificate")).is_empty() {
                    condition.push_str(",Issued");
                }
                let duration = o
                    .pointer("/spec/expirationSeconds")
                    .and_then(Value::as_i64)
                    .map_or_else(|| "<none>".to_string(), human_duration);
                vec![
                    json!(meta::name(o)),
                    age(o),
                    json!(s(o.pointer("/spec/signerName"))),
                    json!(s(o.pointer("/spec/username"))),
                    json!(duration),
                    json!(condition),
                ]
            },
        ),
        // Upstream's APIService printer: the service (`Local` without one) and the Available condition.
        ("apiregistration.k8s.io", "apiservices") => (
            vec![
                c("Name", "string"),
                c("Service", "string"),
                c("Available", "string"),
                c("Age", "string"),
            ],
            |o| {
                let service = match (
                    o.pointer("/spec/service/namespace").and_then(Value::as_str),
                    o.pointer("/spec/service/name").and_then(Value::as_str),
                ) {
                    (Some(ns), Some(name)) => format!("{ns}/{name}"),
                    _ => "Local".to_string(),
                };
                let available = o
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c.get("type").and_then(Value::as_str) == Some("Available"))
                    })
                    .map(|c| {
                        let status = s(c.get("status"));
                        if status == "True" {
                            status
                        } else {
                            format!("{status} ({})", s(c.get("reason")))
                        }
                    })
                    .unwrap_or_else(|| "Unknown".to_string());
                vec![
                    json!(meta::name(o)),
                    json!(service),
                    json!(available),
                    age(o),
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
