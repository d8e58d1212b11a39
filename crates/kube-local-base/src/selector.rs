//! Label and field selectors as the list and watch query parameters spell them, and typed `LabelSelector`s as objects
//! hold them ([`selector_matches`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as TypedLabelSelector;
use serde_json::Value;

use crate::api_error::{ApiError, ApiResult};
use crate::meta;

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
}

/// A parsed `labelSelector`; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<LabelRequirement>,
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn label_key_ok(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn label_value_ok(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn parse_set(rest: &str, raw: &str) -> ApiResult<Vec<String>> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '(' in {raw:?}"
            ))
        })?;
    let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    if vals.iter().any(|v| !label_value_ok(v)) {
        return Err(ApiError::bad_request(format!(
            "unable to parse requirement: invalid label value in {raw:?}"
        )));
    }
    Ok(vals)
}

impl LabelSelector {
    pub fn parse(raw: &str) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in split_top_level(raw) {
            let bad = || ApiError::bad_request(format!("unable to parse requirement: {part:?}"));
            let req = if let Some(key) = part.strip_prefix('!') {
                LabelRequirement {
                    key: key.trim().to_string(),
                    op: LabelOp::NotExists,
                }
            } else if let Some((k, v)) = part.split_once("!=") {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::NotEq(v.trim().into()),
                }
            } else if let Some((k, v)) = part.split_once("==") {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::Eq(v.trim().into()),
                }
            } else if let Some((k, v)) = part.split_once('=') {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::Eq(v.trim().into()),
                }
            } else if let Some((k, v)) = part.split_once('>') {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::Gt(v.trim().parse().map_err(|_| bad())?),
                }
            } else if let Some((k, v)) = part.split_once('<') {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::Lt(v.trim().parse().map_err(|_| bad())?),
                }
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::NotIn(parse_set(rest, &part)?),
                }
            } else if let Some((k, rest)) = part.split_once(" in ") {
                LabelRequirement {
                    key: k.trim().into(),
                    op: LabelOp::In(parse_set(rest, &part)?),
                }
            } else {
                LabelRequirement {
                    key: part.trim().into(),
                    op: LabelOp::Exists,
                }
            };
            if !label_key_ok(&req.key) {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label key {:?}",
                    req.key
                )));
            }
            if let LabelOp::Eq(v) | LabelOp::NotEq(v) = &req.op
                && !label_value_ok(v)
            {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label value: {v:?}"
                )));
            }
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    /// From a `metav1.LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_object(sel: &Value) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push(LabelRequirement {
                    key: k.clone(),
                    op: LabelOp::Eq(v.as_str().unwrap_or("").into()),
                });
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str) {
                    Some("In") => LabelOp::In(values),
                    Some("NotIn") => LabelOp::NotIn(values),
                    Some("Exists") => LabelOp::Exists,
                    Some("DoesNotExist") => LabelOp::NotExists,
                    other => {
                        return Err(ApiError::bad_request(format!(
                            "{other:?} is not a valid label selector operator"
                        )));
                    }
                };
                reqs.push(LabelRequirement { key, op });
            }
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches_labels(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.reqs.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match &r.op {
                LabelOp::Eq(want) => v == Some(want.as_str()),
                LabelOp::NotEq(want) => v != Some(want.as_str()),
                LabelOp::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => v.is_none_or(|v| !set.iter().any(|s| s == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::NotExists => v.is_none(),
                LabelOp::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                LabelOp::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_labels(meta::labels(obj))
    }

    /// The string form used in `/scale` `status.selector`.
    pub fn to_query(&self) -> String {
        let parts: Vec<String> = self
            .reqs
            .iter()
            .map(|r| match &r.op {
                LabelOp::Eq(v) => format!("{}={v}", r.key),
                LabelOp::NotEq(v) => format!("{}!={v}", r.key),
                LabelOp::In(s) => format!("{} in ({})", r.key, s.join(",")),
                LabelOp::NotIn(s) => format!("{} notin ({})", r.key, s.join(",")),
                LabelOp::Exists => r.key.clone(),
                LabelOp::NotExists => format!("!{}", r.key),
                LabelOp::Gt(n) => format!("{}>{n}", r.key),
                LabelOp::Lt(n) => format!("{}<{n}", r.key),
            })
            .collect();
        parts.join(",")
    }
}

#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    path: String,
    value: String,
    negate: bool,
}

/// A parsed `fieldSelector`, checked against the fields the resource supports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    reqs: Vec<FieldRequirement>,
}

/// Field selector labels upstream supports for a resource (besides `metadata.name`/`metadata.namespace`).
fn supported_fields(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "events") | ("events.k8s.io", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("", "persistentvolumeclaims") => &[],
        _ => &[],
    }
}

impl FieldSelector {
    pub fn parse(raw: &str, group: &str, resource: &str, extra: &[String]) -> ApiResult<Self> {
        let mut reqs = Vec::new();
        for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, negate) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, false)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{raw}'; can't understand '{part}'"
                )));
            };
            let path = path.trim();
            let known = matches!(path, "metadata.name" | "metadata.namespace")
                || supported_fields(group, resource).contains(&path)
                || extra.iter().any(|f| f.trim_start_matches('.') == path);
            if !known {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {path}"
                )));
            }
            reqs.push(FieldRequirement {
                path: path.into(),
                value: value.trim().into(),
                negate,
            });
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Evaluated on the core form of the object (events are stored as core/v1).
    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs.iter().all(|r| {
            let actual = field_value(obj, &r.path);
            (actual == r.value) != r.negate
        })
    }
}

fn field_value(obj: &Value, path: &str) -> String {
    let path = match path {
        p if p.starts_with("regarding.") => p.replacen("regarding.", "involvedObject.", 1),
        "source" => "source.component".to_string(),
        p => p.to_string(),
    };
    let parts: Vec<&str> = path.split('.').collect();
    match meta::value_at(obj, &parts) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Null) | None => match path.as_str() {
            "spec.unschedulable" | "spec.hostNetwork" => "false".into(),
            _ => String::new(),
        },
        Some(other) => other.to_string(),
    }
}

/// Whether `labels` match a LabelSelector (matchLabels and matchExpressions).
pub fn selector_matches(selector: &TypedLabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            "DoesNotExist" => !labels.contains_key(&e.key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web, db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier=back", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
    }

    #[test]
    fn unknown_field_label_is_rejected() {
        let e = FieldSelector::parse("spec.foo=bar", "", "configmaps", &[]).unwrap_err();
        assert_eq!(e.code, 400);
        assert!(FieldSelector::parse("spec.nodeName=n", "", "pods", &[]).is_ok());
    }

    #[test]
    fn field_selector_matches() {
        let fs =
            FieldSelector::parse("metadata.name=a,status.phase!=Running", "", "pods", &[]).unwrap();
        assert!(fs.matches(&json!({"metadata": {"name": "a"}, "status": {"phase": "Pending"}})));
        assert!(!fs.matches(&json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}})));
    }
}
