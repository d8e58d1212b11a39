//! Merge semantics of lists and maps per field: upstream's patch merge keys for built-in types, or a CRD's `x-kubernetes-list-*` markers.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum ListKind {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// How strategic merge patch treats a list (upstream `patchStrategy`/`patchMergeKey`).
#[derive(Debug, Clone, PartialEq)]
pub enum SmpList {
    Replace,
    MergeKey(String),
    MergePrimitives,
}

/// Type knowledge for one object kind.
#[derive(Debug, Clone)]
pub struct TypeInfo<'a> {
    kind: &'a str,
    schema: Option<&'a Value>,
    custom: bool,
}

struct KeyedList {
    suffix: &'static [&'static str],
    keys: &'static [&'static str],
    smp_key: &'static str,
}

const KEYED_LISTS: &[KeyedList] = &[
    KeyedList {
        suffix: &["containers", "ports"],
        keys: &["containerPort", "protocol"],
        smp_key: "containerPort",
    },
    KeyedList {
        suffix: &["initContainers", "ports"],
        keys: &["containerPort", "protocol"],
        smp_key: "containerPort",
    },
    KeyedList {
        suffix: &["containers"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["initContainers"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["ephemeralContainers"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["env"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["volumeMounts"],
        keys: &["mountPath"],
        smp_key: "mountPath",
    },
    KeyedList {
        suffix: &["volumeDevices"],
        keys: &["devicePath"],
        smp_key: "devicePath",
    },
    KeyedList {
        suffix: &["volumes"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["imagePullSecrets"],
        keys: &["name"],
        smp_key: "name",
    },
    KeyedList {
        suffix: &["hostAliases"],
        keys: &["ip"],
        smp_key: "ip",
    },
    KeyedList {
        suffix: &["resizePolicy"],
        keys: &["resourceName"],
        smp_key: "resourceName",
    },
    KeyedList {
        suffix: &["topologySpreadConstraints"],
        keys: &["topologyKey", "whenUnsatisfiable"],
        smp_key: "topologyKey",
    },
    KeyedList {
        suffix: &["status", "conditions"],
        keys: &["type"],
        smp_key: "type",
    },
    KeyedList {
        suffix: &["podIPs"],
        keys: &["ip"],
        smp_key: "ip",
    },
    KeyedList {
        suffix: &["hostIPs"],
        keys: &["ip"],
        smp_key: "ip",
    },
    KeyedList {
        suffix: &["metadata", "ownerReferences"],
        keys: &["uid"],
        smp_key: "uid",
    },
    KeyedList {
        suffix: &["webhooks"],
        keys: &["name"],
        smp_key: "name",
    },
];

fn ends_with(path: &[&str], suffix: &[&str]) -> bool {
    path.len() >= suffix.len() && &path[path.len() - suffix.len()..] == suffix
}

fn is_metadata_path(path: &[&str]) -> bool {
    path.first() == Some(&"metadata")
}

impl<'a> TypeInfo<'a> {
    pub fn builtin(kind: &'a str) -> Self {
        TypeInfo {
            kind,
            schema: None,
            custom: false,
        }
    }

    pub fn custom(kind: &'a str, schema: Option<&'a Value>) -> Self {
        TypeInfo {
            kind,
            schema,
            custom: true,
        }
    }

    fn builtin_list(&self, path: &[&str]) -> Option<(ListKind, SmpList)> {
        if path == ["metadata", "finalizers"] {
            return Some((ListKind::Set, SmpList::MergePrimitives));
        }
        if self.kind == "Service" && path == ["spec", "ports"] {
            return Some((
                ListKind::Map(vec!["port".into(), "protocol".into()]),
                SmpList::MergeKey("port".into()),
            ));
        }
        if self.custom && !is_metadata_path(path) {
            return None;
        }
        KEYED_LISTS
            .iter()
            .find(|k| ends_with(path, k.suffix))
            .map(|k| {
                (
                    ListKind::Map(k.keys.iter().map(|s| s.to_string()).collect()),
                    SmpList::MergeKey(k.smp_key.into()),
                )
            })
    }

    fn schema_node(&self, path: &[&str]) -> Option<&'a Value> {
        let mut node = self.schema?;
        for name in path {
            while node.get("type").and_then(Value::as_str) == Some("array") {
                node = node.get("items")?;
            }
            node = node
                .get("properties")
                .and_then(|p| p.get(*name))
                .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()))?;
        }
        Some(node)
    }

    pub fn list_kind(&self, path: &[&str]) -> ListKind {
        if let Some((k, _)) = self.builtin_list(path) {
            return k;
        }
        if self.custom
            && !is_metadata_path(path)
            && let Some(node) = self.schema_node(path)
        {
            return match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListKind::Set,
                Some("map") => ListKind::Map(
                    node.get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|k| k.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                _ => ListKind::Atomic,
            };
        }
        ListKind::Atomic
    }

    pub fn smp_list(&self, path: &[&str]) -> SmpList {
        self.builtin_list(path)
            .map(|(_, s)| s)
            .unwrap_or(SmpList::Replace)
    }

    /// Whether the last element of `path` (field names; list items are stepped into) is a field its parent's type
    /// declares (structured-merge-diff's "named field"), not a key of a map. Server-side apply owns such fields along
    /// with what is under them.
    pub fn declares(&self, path: &[&str]) -> bool {
        let Some((field, parent)) = path.split_last() else {
            return false;
        };
        if !self.custom || is_metadata_path(path) {
            // Custom resources share ObjectMeta with every built-in kind.
            let kind = if self.custom { "ConfigMap" } else { self.kind };
            return crate::builtin_schemas::builtin_declares(kind, parent, field);
        }
        let Some(mut node) = self.schema_node(parent) else {
            return false;
        };
        while node.get("type").and_then(Value::as_str) == Some("array") {
            let Some(items) = node.get("items") else {
                return false;
            };
            node = items;
        }
        node.get("properties").and_then(|p| p.get(*field)).is_some()
    }

    /// Maps/structs that are replaced as a whole (label selectors, service selectors, `x-kubernetes-map-type: atomic`).
    pub fn atomic_map(&self, path: &[&str]) -> bool {
        if self.custom && !is_metadata_path(path) {
            return self
                .schema_node(path)
                .and_then(|n| n.get("x-kubernetes-map-type"))
                .and_then(Value::as_str)
                == Some("atomic");
        }
        matches!(
            path.last(),
            Some(&"selector")
                | Some(&"labelSelector")
                | Some(&"namespaceSelector")
                | Some(&"objectSelector")
        ) && !is_metadata_path(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtin_keys() {
        let t = TypeInfo::builtin("StatefulSet");
        assert_eq!(
            t.list_kind(&["spec", "template", "spec", "containers"]),
            ListKind::Map(vec!["name".into()])
        );
        assert_eq!(
            t.smp_list(&["spec", "template", "spec", "containers", "ports"]),
            SmpList::MergeKey("containerPort".into())
        );
        assert_eq!(
            t.list_kind(&["spec", "template", "spec", "containers", "args"]),
            ListKind::Atomic
        );
        assert_eq!(t.list_kind(&["metadata", "finalizers"]), ListKind::Set);
        assert!(t.atomic_map(&["spec", "selector"]));
    }

    #[test]
    fn schema_markers() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"],
                      "items": {"type": "object", "properties": {"tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}}}}
        }}}});
        let t = TypeInfo::custom("X", Some(&schema));
        assert_eq!(
            t.list_kind(&["spec", "items"]),
            ListKind::Map(vec!["id".into()])
        );
        assert_eq!(t.list_kind(&["spec", "items", "tags"]), ListKind::Set);
        assert_eq!(t.list_kind(&["spec", "other"]), ListKind::Atomic);
        assert!(t.declares(&["spec", "items", "tags"]));
        assert!(!t.declares(&["spec", "undeclared"]));
        assert!(t.declares(&["metadata", "labels"]));
        assert!(!t.declares(&["metadata", "labels", "app"]));
    }
}
