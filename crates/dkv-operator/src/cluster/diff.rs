//! Whether a live object already holds everything the operator would apply.
//!
//! A server-side apply that changes nothing still costs a request (and a
//! managedFields timestamp bump on some servers), so the apply step skips it
//! when every field the operator sets already has the value it would set.
//! "Subset" rather than equality: the API server adds defaults and status
//! that the operator never sets, and those must not count as drift.

use serde_json::Value;

/// True when every field of `desired` is present in `live` with an equal
/// value. Empty objects, empty arrays and nulls in `desired` match an absent
/// field, because the API server drops them on write.
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, want_value)| match have.get(key) {
                Some(have_value) => is_subset(want_value, have_value),
                None => is_empty(want_value),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| is_subset(w, h))
        }
        (Value::Number(want), Value::Number(have)) => want.as_f64() == have.as_f64(),
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(map) => map.values().all(is_empty),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn server_defaults_are_not_drift() {
        let desired = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "etcd"}]}}}});
        let live = json!({"spec": {"replicas": 3, "revisionHistoryLimit": 10,
            "template": {"spec": {"containers": [{"name": "etcd", "imagePullPolicy": "IfNotPresent"}], "dnsPolicy": "ClusterFirst"}}},
            "status": {"replicas": 3}});
        assert!(is_subset(&desired, &live));
    }

    #[test]
    fn changed_or_missing_fields_are_drift() {
        let desired = json!({"spec": {"replicas": 3, "selector": {"app": "x"}}});
        assert!(!is_subset(
            &desired,
            &json!({"spec": {"replicas": 2, "selector": {"app": "x"}}})
        ));
        assert!(!is_subset(&desired, &json!({"spec": {"replicas": 3}})));
        assert!(!is_subset(&json!({"a": [1, 2]}), &json!({"a": [1]})));
        assert!(!is_subset(&json!({"a": [1, 2]}), &json!({"a": [2, 1]})));
    }

    #[test]
    fn empty_values_match_absent_fields() {
        assert!(is_subset(
            &json!({"a": {}, "b": [], "c": null, "d": {"e": {}}}),
            &json!({})
        ));
        assert!(!is_subset(&json!({"a": {"b": 1}}), &json!({})));
    }

    #[test]
    fn integers_and_floats_compare_by_value() {
        assert!(is_subset(&json!({"a": 1}), &json!({"a": 1.0})));
    }
}
