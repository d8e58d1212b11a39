//! `meta.k8s.io/v1` Table output for `kubectl get`: built-in printers, CRD printer columns, and the JSONPath subset they use.
//!
//! This module builds the Table and the cells of CRD printer columns; the built-in printers are in `printers`, built from
//! the columns and cell formats in `columns`; the JSONPath subset is in `jsonpath`.

mod columns;
mod jsonpath;
mod printers;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::{PrinterColumn, ResourceType};
pub use jsonpath::json_path;
use printers::builtin_columns;

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
}
