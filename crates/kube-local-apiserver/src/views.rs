//! Conversions between the stored form of an object and the version a client asked for.

use serde_json::{Map, Value};

use crate::meta;
use crate::registry::{ResourceType, View};
use crate::schema;

/// core/v1 Event field ↔ events.k8s.io/v1 Event field (upstream's conversion is a pure rename).
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &mut Value, from_to: impl Iterator<Item = (&'static str, &'static str)>) {
    if let Value::Object(m) = obj {
        for (from, to) in from_to {
            if let Some(v) = m.remove(from) {
                m.insert(to.to_string(), v);
            }
        }
    }
}

fn set_type(obj: &mut Value, api_version: String, kind: &str) {
    let m = meta::object_mut(obj);
    // Keep apiVersion/kind first, as a real server's encoder does.
    let mut out = Map::new();
    out.insert("kind".into(), Value::String(kind.to_string()));
    out.insert("apiVersion".into(), Value::String(api_version));
    for (k, v) in std::mem::take(m) {
        if k != "kind" && k != "apiVersion" {
            out.insert(k, v);
        }
    }
    *m = out;
}

/// Stored object → what a client of `rt` sees.
pub fn to_view(rt: &ResourceType, stored: &Value) -> Value {
    let mut obj = stored.clone();
    match rt.view {
        View::EventsV1 => {
            rename(&mut obj, EVENT_RENAMES.iter().copied());
            if let Value::Object(m) = &mut obj {
                // events.k8s.io requires eventTime; core events written by old clients lack it.
                if m.get("eventTime").is_none_or(Value::is_null) {
                    m.insert("eventTime".into(), Value::Null);
                }
            }
        }
        View::Plain => {}
    }
    if let Some(c) = &rt.custom
        && let Some(s) = &c.schema
    {
        schema::apply_defaults(s, &mut obj);
    }
    set_type(&mut obj, rt.api_version(), &rt.kind);
    obj
}

/// A client's object of `rt` → stored form.
pub fn from_view(rt: &ResourceType, mut obj: Value) -> Value {
    match rt.view {
        View::EventsV1 => {
            rename(&mut obj, EVENT_RENAMES.iter().map(|(a, b)| (*b, *a)));
            set_type(&mut obj, "v1".into(), "Event");
        }
        View::Plain => {
            let version = rt
                .custom
                .as_ref()
                .map(|c| c.storage_version.clone())
                .unwrap_or_else(|| rt.version.clone());
            let api_version = if rt.group.is_empty() {
                version
            } else {
                format!("{}/{}", rt.group, version)
            };
            set_type(&mut obj, api_version, &rt.kind);
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn events_round_trip_between_groups() {
        let reg = Registry::new();
        let v1 = reg
            .find("events.k8s.io", "v1", "events")
            .expect("events.k8s.io is served");
        let stored = from_view(
            &v1,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "regarding": {"name": "p"}, "note": "hi"}),
        );
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(stored["message"], "hi");
        assert_eq!(stored["apiVersion"], "v1");
        let back = to_view(&v1, &stored);
        assert_eq!(back["note"], "hi");
        assert_eq!(back["apiVersion"], "events.k8s.io/v1");
    }
}
