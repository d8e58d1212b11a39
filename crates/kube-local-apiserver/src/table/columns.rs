//! What the built-in printers are made of: column definitions, and the cell formats upstream's printers share
//! (label selectors, access modes, endpoints, container names and images, `<none>` for empty cells).

use serde_json::{Value, json};

use crate::meta;

pub(super) struct Col {
    pub(super) name: &'static str,
    pub(super) type_: &'static str,
    pub(super) priority: i64,
}

pub(super) const fn c(name: &'static str, type_: &'static str) -> Col {
    Col {
        name,
        type_,
        priority: 0,
    }
}

pub(super) const fn wide(name: &'static str, type_: &'static str) -> Col {
    Col {
        name,
        type_,
        priority: 1,
    }
}

pub(super) fn s(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

pub(super) fn or_none(v: String) -> Value {
    if v.is_empty() {
        json!("<none>")
    } else {
        json!(v)
    }
}

pub(super) fn count(v: Option<&Value>) -> i64 {
    v.map(|x| match x {
        Value::Object(m) => m.len() as i64,
        Value::Array(a) => a.len() as i64,
        _ => 0,
    })
    .unwrap_or(0)
}

/// Column definitions and the function computing a row's cells.
pub(super) type Printer = (Vec<Col>, fn(&Value) -> Vec<Value>);

/// upstream `layoutContainerCells`: container names and images, comma-separated.
pub(super) fn containers_and_images(o: &Value, template: &str) -> (Value, Value) {
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
pub(super) fn format_label_selector(sel: Option<&Value>) -> Value {
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
pub(super) fn access_modes(modes: Option<&Value>) -> String {
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

pub(super) fn int_or_string(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "N/A".into(),
        Some(other) => s(Some(other)),
    }
}

pub(super) fn unset_or(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => json!("<unset>"),
        some => json!(s(some)),
    }
}

/// upstream `formatEndpoints`: up to three `ip:port`, then `+ N more...`.
pub(super) fn format_endpoints(o: &Value) -> Value {
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

pub(super) fn seconds_between(from: Option<&str>, to: Option<&str>) -> Option<i64> {
    let from = meta::parse_time(from?)?;
    let to = match to {
        Some(t) => meta::parse_time(t)?,
        None => jiff::Timestamp::now(),
    };
    Some(to.as_second() - from.as_second())
}
