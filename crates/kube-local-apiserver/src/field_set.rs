//! Field sets in the `FieldsV1` encoding of `managedFields`: built from objects, compared, combined and used to remove fields.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::type_info::{ListKind, TypeInfo};

/// A set of field paths. `member` marks the path of this node itself; children are keyed `f:`/`k:`/`v:`/`i:`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSet {
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

/// A list-map key field's value, with the schema default upstream's merge logic applies to absent keys
/// (`protocol` defaults to TCP in container and service ports).
pub fn key_value<'v>(item: &'v Value, key: &str) -> Option<&'v Value> {
    match item.get(key) {
        Some(v) => Some(v),
        None if key == "protocol" => Some(&DEFAULT_PROTOCOL),
        None => None,
    }
}

static DEFAULT_PROTOCOL: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| Value::String("TCP".into()));

/// Whether a list item has the given key values.
pub fn item_has_keys(item: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter().all(|(k, v)| key_value(item, k) == Some(v))
}

fn key_element(item: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    for k in sorted {
        if let Some(v) = key_value(item, k) {
            m.insert(k.clone(), v.clone());
        }
    }
    format!("k:{}", Value::Object(m))
}

fn value_element(v: &Value) -> String {
    format!("v:{v}")
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// What an applied configuration sets: leaves and list items.
    Applied,
    /// Every path, maps included (for updates and for "what exists").
    All,
}

impl FieldSet {
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        let mut set = FieldSet::default();
        if let Some(m) = v.as_object() {
            for (k, child) in m {
                if k == "." {
                    set.member = true;
                    continue;
                }
                let mut c = FieldSet::from_fields_v1(child);
                if child.as_object().is_some_and(Map::is_empty) {
                    c.member = true;
                }
                set.children.insert(k.clone(), c);
            }
        }
        set
    }

    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, c) in &self.children {
            if c.is_empty() {
                continue;
            }
            m.insert(k.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    pub fn union(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, c) in &other.children {
            self.children.entry(k.clone()).or_default().union(c);
        }
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Whether this set has any member at or below `path`.
    pub fn has_any_under(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => !self.is_empty(),
            Some((first, rest)) => self
                .children
                .get(first)
                .is_some_and(|c| c.has_any_under(rest)),
        }
    }

    /// Paths of all members, as element lists.
    pub fn members(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect(prefix, out);
            prefix.pop();
        }
    }

    pub fn remove_path(&mut self, path: &[String]) {
        match path.split_first() {
            None => {
                self.member = false;
            }
            Some((first, rest)) => {
                if let Some(c) = self.children.get_mut(first) {
                    c.remove_path(rest);
                    if c.is_empty() {
                        self.children.remove(first);
                    }
                }
            }
        }
    }

    /// Drops the identity and bookkeeping fields upstream's field manager never tracks.
    pub fn strip_meta(&mut self) {
        self.children.remove("f:apiVersion");
        self.children.remove("f:kind");
        if let Some(m) = self.children.get_mut("f:metadata") {
            for f in [
                "name",
                "namespace",
                "creationTimestamp",
                "selfLink",
                "uid",
                "generation",
                "managedFields",
                "resourceVersion",
                "generateName",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                m.children.remove(&format!("f:{f}"));
            }
            m.member = false;
            if m.is_empty() {
                self.children.remove("f:metadata");
            }
        }
    }
}

/// Fields an applied configuration sets.
pub fn applied_set(obj: &Value, ti: &TypeInfo<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    walk(obj, &mut Vec::new(), &mut set, ti, Mode::Applied);
    set
}

/// Every path present in an object.
pub fn all_set(obj: &Value, ti: &TypeInfo<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    walk(obj, &mut Vec::new(), &mut set, ti, Mode::All);
    set
}

fn walk<'v>(
    value: &'v Value,
    names: &mut Vec<&'v str>,
    set: &mut FieldSet,
    ti: &TypeInfo<'_>,
    mode: Mode,
) {
    match value {
        Value::Object(map) if !names.is_empty() && ti.atomic_map(names) => {
            set.member = true;
        }
        Value::Object(map) => {
            if mode == Mode::All && !names.is_empty() {
                set.member = true;
            }
            for (k, v) in map {
                let child = set.children.entry(format!("f:{k}")).or_default();
                names.push(k);
                match v {
                    Value::Object(_) | Value::Array(_) => {
                        walk(v, names, child, ti, mode);
                        if v.as_object().is_some_and(Map::is_empty)
                            || v.as_array().is_some_and(Vec::is_empty)
                        {
                            child.member = true;
                        }
                    }
                    _ => child.member = true,
                }
                names.pop();
            }
        }
        Value::Array(items) => match ti.list_kind(names) {
            ListKind::Atomic => set.member = true,
            ListKind::Set => {
                if mode == Mode::All {
                    set.member = true;
                }
                for item in items {
                    set.children.entry(value_element(item)).or_default().member = true;
                }
            }
            ListKind::Map(keys) => {
                if mode == Mode::All {
                    set.member = true;
                }
                for item in items {
                    let child = set.children.entry(key_element(item, &keys)).or_default();
                    child.member = true;
                    walk(item, names, child, ti, mode);
                    child.member = true;
                }
            }
        },
        _ => set.member = true,
    }
}

/// Paths whose value differs between `old` and `new` (including everything newly added).
pub fn changed_set(old: &Value, new: &Value, ti: &TypeInfo<'_>) -> FieldSet {
    let mut set = FieldSet::default();
    diff(Some(old), new, &mut Vec::new(), &mut set, ti);
    set
}

fn diff<'v>(
    old: Option<&Value>,
    new: &'v Value,
    names: &mut Vec<&'v str>,
    set: &mut FieldSet,
    ti: &TypeInfo<'_>,
) {
    if old == Some(new) {
        return;
    }
    let Some(old) = old else {
        walk(new, names, set, ti, Mode::All);
        set.member = true;
        return;
    };
    match (old, new) {
        (Value::Object(om), Value::Object(nm)) if names.is_empty() || !ti.atomic_map(names) => {
            for (k, v) in nm {
                let child = set.children.entry(format!("f:{k}")).or_default();
                names.push(k);
                diff(om.get(k), v, names, child, ti);
                names.pop();
            }
        }
        (Value::Array(oi), Value::Array(ni)) => match ti.list_kind(names) {
            ListKind::Atomic => set.member = true,
            ListKind::Set => {
                for item in ni {
                    if !oi.contains(item) {
                        set.children.entry(value_element(item)).or_default().member = true;
                    }
                }
            }
            ListKind::Map(keys) => {
                for item in ni {
                    let k = key_element(item, &keys);
                    let prev = oi.iter().find(|o| key_element(o, &keys) == k);
                    let child = set.children.entry(k).or_default();
                    diff(prev, item, names, child, ti);
                }
            }
        },
        _ => {
            walk(new, names, set, ti, Mode::All);
            set.member = true;
        }
    }
}

/// The value at a field-set path, if present.
pub fn value_at_path<'v>(obj: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = obj;
    for el in path {
        cur = if let Some(f) = el.strip_prefix("f:") {
            cur.get(f)?
        } else if let Some(k) = el.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).ok()?;
            cur.as_array()?
                .iter()
                .find(|item| item_has_keys(item, &keys))?
        } else if let Some(v) = el.strip_prefix("v:") {
            let want: Value = serde_json::from_str(v).ok()?;
            cur.as_array()?.iter().find(|item| **item == want)?
        } else if let Some(i) = el.strip_prefix("i:") {
            cur.as_array()?.get(i.parse::<usize>().ok()?)?
        } else {
            return None;
        };
    }
    Some(cur)
}

/// Removes the value at a field-set path (a field, a keyed list item, or a set value).
pub fn remove_at_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for el in parents {
        let next = if let Some(f) = el.strip_prefix("f:") {
            cur.get_mut(f)
        } else if let Some(k) = el.strip_prefix("k:") {
            let Ok(keys) = serde_json::from_str::<Map<String, Value>>(k) else {
                return;
            };
            cur.as_array_mut()
                .and_then(|a| a.iter_mut().find(|item| item_has_keys(item, &keys)))
        } else {
            None
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(k) = last.strip_prefix("k:") {
        if let (Ok(keys), Some(a)) = (
            serde_json::from_str::<Map<String, Value>>(k),
            cur.as_array_mut(),
        ) {
            a.retain(|item| !item_has_keys(item, &keys));
        }
    } else if let Some(v) = last.strip_prefix("v:")
        && let (Ok(want), Some(a)) = (serde_json::from_str::<Value>(v), cur.as_array_mut())
    {
        a.retain(|item| *item != want);
    }
}

/// `.spec.containers[name="a"].image`, as upstream prints conflicting fields.
pub fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            out.push('.');
            out.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let keys: Map<String, Value> = serde_json::from_str(k).unwrap_or_default();
            let parts: Vec<String> = keys.iter().map(|(a, b)| format!("{a}={b}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = el.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn applied_set_encodes_keys_and_leaves() {
        let ti = TypeInfo::builtin("Pod");
        let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut set = applied_set(&obj, &ti);
        set.strip_meta();
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
        let round = FieldSet::from_fields_v1(&set.to_fields_v1());
        assert_eq!(round, set);
    }

    #[test]
    fn changed_set_marks_new_maps() {
        let ti = TypeInfo::builtin("ConfigMap");
        let old = json!({"data": {"a": "1"}});
        let new = json!({"data": {"a": "2"}, "metadata": {"labels": {"x": "y"}}});
        let set = changed_set(&old, &new, &ti);
        assert_eq!(
            set.to_fields_v1(),
            json!({"f:data": {"f:a": {}}, "f:metadata": {".": {}, "f:labels": {".": {}, "f:x": {}}}})
        );
    }

    #[test]
    fn remove_keyed_item() {
        let mut obj = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        remove_at_path(
            &mut obj,
            &[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"a\"}".into(),
            ],
        );
        assert_eq!(obj, json!({"spec": {"containers": [{"name": "b"}]}}));
        assert_eq!(
            render_path(&[
                "f:spec".into(),
                "f:containers".into(),
                "k:{\"name\":\"b\"}".into(),
                "f:image".into()
            ]),
            ".spec.containers[name=\"b\"].image"
        );
    }
}
