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
                            .map(|p| format!("{}/{}", s(p.get("port")), s(p.get("protocol"))))
                            .collect()
                    })
                    .unwrap_or_default();
                let selector: Vec<String> = o
                    .pointer("/spec/selector")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", s(Some(v))))
                            .collect()
                    })
                    .unwrap_or_default();
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/spec/type"))),
                    or_none(s(o.pointer("/spec/clusterIP"))),
                    json!("<none>"),
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
            ],
            |o| {
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
            ],
            |o| {
                let n = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
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
                } else if has("Suspended") {
                    "Suspended"
                } else {
                    "Running"
                };
                vec![
                    json!(meta::name(o)),
                    json!(status),
                    json!(format!(
                        "{}/{}",
                        o.pointer("/status/succeeded")
                            .and_then(Value::as_i64)
                            .unwrap_or(0),
                        o.pointer("/spec/completions")
                            .and_then(Value::as_i64)
                            .unwrap_or(1)
                    )),
                    json!(""),
                    age(o),
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
            ],
            |o| {
                vec![
                    json!(meta::name(o)),
                    json!(s(o.pointer("/status/phase"))),
                    json!(s(o.pointer("/spec/volumeName"))),
                    json!(s(o.pointer("/status/capacity/storage"))),
                    json!(""),
                    or_none(s(o.pointer("/spec/storageClassName"))),
                    json!("<unset>"),
                    age(o),
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
