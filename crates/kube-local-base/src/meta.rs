//! Accessors for `metadata` and other well-known paths of objects held as JSON, well-known label names, plus the
//! server's clocks and name generators.

use rand::Rng;
use serde_json::{Map, Value};

/// The label that names the Service an EndpointSlice belongs to (set by the EndpointSlice controller, read by the
/// kubelet's service proxy).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The finalizer that keeps a claim while a pod uses it (StorageObjectInUseProtection): added when a claim is
/// created, removed by `workloads::volume_protection`.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

pub fn str_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a str> {
    value_at(obj, path).and_then(Value::as_str)
}

pub fn value_at<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.get(p)?;
    }
    Some(cur)
}

pub fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"]).unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    str_at(obj, &["metadata", "namespace"]).unwrap_or("")
}

pub fn uid(obj: &Value) -> &str {
    str_at(obj, &["metadata", "uid"]).unwrap_or("")
}

pub fn resource_version(obj: &Value) -> &str {
    str_at(obj, &["metadata", "resourceVersion"]).unwrap_or("")
}

pub fn is_deleting(obj: &Value) -> bool {
    value_at(obj, &["metadata", "deletionTimestamp"]).is_some_and(|v| !v.is_null())
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    value_at(obj, &["metadata", "finalizers"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Removes `item` from the list of strings at `pointer` (a finalizer list);
/// whether it was there.
pub fn remove_from_list(obj: &mut Value, pointer: &str, item: &str) -> bool {
    let Some(list) = obj.pointer_mut(pointer).and_then(Value::as_array_mut) else {
        return false;
    };
    let before = list.len();
    list.retain(|f| f.as_str() != Some(item));
    list.len() != before
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    value_at(obj, &["metadata", "labels"]).and_then(Value::as_object)
}

/// `metadata` as a mutable map, created when missing. Non-object documents are replaced by an empty object first.
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let root = match obj {
        Value::Object(m) => m,
        _ => unreachable_object(),
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    match meta {
        Value::Object(m) => m,
        _ => unreachable_object(),
    }
}

/// `obj` as a mutable map, replacing a non-object with an empty one.
pub fn object_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    match obj {
        Value::Object(m) => m,
        _ => unreachable_object(),
    }
}

#[allow(clippy::panic)]
fn unreachable_object() -> ! {
    // Only reached if a value we just set to an object is not one.
    panic!("value was just made an object")
}

pub fn set_meta(obj: &mut Value, key: &str, v: Value) {
    meta_mut(obj).insert(key.to_string(), v);
}

pub fn remove_meta(obj: &mut Value, key: &str) {
    meta_mut(obj).remove(key);
}

/// RFC 3339 with whole seconds, the wire form of `metav1.Time`.
pub fn now_time() -> String {
    let now = jiff::Timestamp::now();
    jiff::Timestamp::from_second(now.as_second())
        .map(|t| t.to_string())
        .unwrap_or_else(|_| now.to_string())
}

/// RFC 3339 with microseconds, the wire form of `metav1.MicroTime`.
pub fn now_micro_time() -> String {
    format!("{:.6}", jiff::Timestamp::now())
}

pub fn parse_time(s: &str) -> Option<jiff::Timestamp> {
    s.parse().ok()
}

pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// Five characters from the alphabet upstream's `SimpleNameGenerator` uses (no vowels, no confusable digits).
pub fn generated_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// Upstream's `metadata.name` rule for most resources: an RFC 1123 DNS subdomain.
pub fn dns_subdomain_error(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok = !name.is_empty()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        None
    } else {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
    }
}

/// Upstream's rule for RBAC object names (`system:auth-delegator` is valid): a path segment.
pub fn path_segment_error(name: &str) -> Option<String> {
    match name {
        "." | ".." => Some(format!("may not be '{name}'")),
        _ if name.contains('/') => Some("may not contain '/'".into()),
        _ if name.contains('%') => Some("may not contain '%'".into()),
        _ => None,
    }
}

/// RFC 1123 label (namespaces, services).
pub fn dns_label_error(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        None
    } else if name.len() > 63 {
        Some("must be no more than 63 characters".into())
    } else {
        Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_has_six_fraction_digits() {
        let t = now_micro_time();
        let frac = t.split('.').nth(1).unwrap_or("");
        assert_eq!(frac.len(), 7, "{t}");
        assert!(t.ends_with('Z'));
    }

    #[test]
    fn time_has_whole_seconds() {
        let t = now_time();
        assert!(!t.contains('.'), "{t}");
    }

    #[test]
    fn uid_shape() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(u.as_bytes()[14], b'4');
    }

    #[test]
    fn subdomain_rules() {
        assert!(dns_subdomain_error("a.b-c").is_none());
        assert!(dns_subdomain_error("A").is_some());
        assert!(dns_subdomain_error("-a").is_some());
    }
}
