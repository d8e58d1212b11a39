//! `metadata.managedFields` bookkeeping for updates and server-side apply (ownership, conflicts, removal of unapplied fields).

use serde_json::{Map, Value, json};

use crate::field_set::{self, FieldSet};
use crate::meta;
use crate::type_info::{ListKind, TypeInfo};

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Value,
    subresource: Option<String>,
    set: FieldSet,
}

impl Entry {
    fn parse(v: &Value) -> Option<Entry> {
        Some(Entry {
            manager: v.get("manager")?.as_str()?.to_string(),
            operation: v
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or("Update")
                .to_string(),
            api_version: v
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            time: v.get("time").cloned().unwrap_or(Value::Null),
            subresource: v
                .get("subresource")
                .and_then(Value::as_str)
                .map(String::from),
            set: v
                .get("fieldsV1")
                .map(FieldSet::from_fields_v1)
                .unwrap_or_default(),
        })
    }

    fn render(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if !self.time.is_null() {
            m.insert("time".into(), self.time.clone());
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }
}

fn entries_of(obj: &Value) -> Vec<Entry> {
    meta::value_at(obj, &["metadata", "managedFields"])
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::parse).collect())
        .unwrap_or_default()
}

fn without_managed_fields(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    o
}

fn store_entries(obj: &mut Value, ti: &TypeInfo<'_>, mut entries: Vec<Entry>) {
    let existing = field_set::all_set(&without_managed_fields(obj), ti);
    for e in &mut entries {
        e.set = e.set.intersection(&existing);
    }
    entries.retain(|e| !e.set.is_empty());
    if entries.is_empty() {
        meta::remove_meta(obj, "managedFields");
    } else {
        meta::set_meta(
            obj,
            "managedFields",
            Value::Array(entries.iter().map(Entry::render).collect()),
        );
    }
}

/// Records a non-apply write by `manager`: it takes ownership of every field it changed.
pub fn record_update(
    ti: &TypeInfo<'_>,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
) {
    let mut entries = entries_of(new);
    let old_plain = old.map(without_managed_fields).unwrap_or_else(|| json!({}));
    let mut changed = field_set::changed_set(&old_plain, &without_managed_fields(new), ti);
    changed.strip_meta();
    if !changed.is_empty() {
        for e in entries
            .iter_mut()
            .filter(|e| !e.is(manager, "Update", subresource))
        {
            e.set = e.set.difference(&changed);
        }
        let now = json!(meta::now_time());
        match entries
            .iter_mut()
            .find(|e| e.is(manager, "Update", subresource))
        {
            Some(e) => {
                e.set.union(&changed);
                e.time = now;
                e.api_version = api_version.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now,
                subresource: subresource.map(String::from),
                set: changed,
            }),
        }
    }
    store_entries(new, ti, entries);
}

/// A field another manager owns with a different value.
#[derive(Debug, Clone)]
pub struct Conflict {
    pub manager: String,
    pub api_version: String,
    pub path: String,
}

/// Merges an applied configuration into the live object the way server-side apply does.
#[allow(clippy::too_many_arguments)]
pub fn apply(
    ti: &TypeInfo<'_>,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    subresource: Option<&str>,
    restrict: impl Fn(&mut FieldSet),
) -> Result<Value, Vec<Conflict>> {
    let live_plain = live
        .map(without_managed_fields)
        .unwrap_or_else(|| json!({}));
    let mut entries = live.map(entries_of).unwrap_or_default();
    if live.is_some() && entries.is_empty() {
        // Objects written before any field tracking get an owner for what they hold, as upstream does.
        let mut all = field_set::all_set(&live_plain, ti);
        all.strip_meta();
        entries.push(Entry {
            manager: "before-first-apply".into(),
            operation: "Update".into(),
            api_version: api_version.into(),
            time: json!(meta::now_time()),
            subresource: None,
            set: all,
        });
    }
    let mut new_set = field_set::applied_set(applied, ti);
    new_set.strip_meta();
    restrict(&mut new_set);
    let mut merged = live_plain.clone();
    merge_applied(&mut merged, applied, &mut Vec::new(), ti);

    let mut conflicts = Vec::new();
    let mut forced: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.is(manager, "Apply", subresource) {
            continue;
        }
        for path in e.set.intersection(&new_set).members() {
            if field_set::value_at_path(&live_plain, &path)
                != field_set::value_at_path(&merged, &path)
            {
                conflicts.push(Conflict {
                    manager: e.manager.clone(),
                    api_version: e.api_version.clone(),
                    path: field_set::render_path(&path),
                });
                forced.push((i, path));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, path) in forced {
        entries[i].set.remove_path(&path);
    }

    let previous = entries
        .iter()
        .find(|e| e.is(manager, "Apply", subresource))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut others = FieldSet::default();
    for e in entries
        .iter()
        .filter(|e| !e.is(manager, "Apply", subresource))
    {
        others.union(&e.set);
    }
    let mut removed = previous.difference(&new_set).members();
    // Like structured-merge-diff, the applier also owned the declared fields on the way to its fields (not map keys
    // or list items): one it no longer applies anything under, and that nobody else owns anything under, goes too
    // instead of staying behind empty.
    for member in previous.members() {
        for depth in 1..member.len() {
            let path = &member[..depth];
            if !removed.iter().any(|r| r.as_slice() == path) && declared_field(ti, path) {
                removed.push(path.to_vec());
            }
        }
    }
    // Shallowest first: removing a list item or map takes its contents with it.
    removed.sort_by_key(Vec::len);
    let mut done: Vec<Vec<String>> = Vec::new();
    for path in removed {
        if done.iter().any(|d| path.starts_with(d)) || is_key_of_parent_item(&path) {
            continue;
        }
        if !others.has_any_under(&path) && !new_set.has_any_under(&path) {
            field_set::remove_at_path(&mut merged, &path);
            done.push(path);
        }
    }

    let now = json!(meta::now_time());
    match entries
        .iter_mut()
        .find(|e| e.is(manager, "Apply", subresource))
    {
        Some(e) => {
            e.set = new_set;
            e.time = now;
            e.api_version = api_version.to_string();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: api_version.to_string(),
            time: now,
            subresource: subresource.map(String::from),
            set: new_set,
        }),
    }
    store_entries(&mut merged, ti, entries);
    Ok(merged)
}

/// Whether a field-set path ends in a field its parent's type declares (`f:` elements; list items are stepped into).
fn declared_field(ti: &TypeInfo<'_>, path: &[String]) -> bool {
    // `metadata` itself is always owned upstream (every applied configuration names the object); kube-local strips
    // identity fields from field sets, so it must not look unowned here.
    if path == ["f:metadata"] || !path.last().is_some_and(|p| p.starts_with("f:")) {
        return false;
    }
    let names: Vec<&str> = path.iter().filter_map(|p| p.strip_prefix("f:")).collect();
    ti.declares(&names)
}

/// A list item's key field stays as long as the item does.
fn is_key_of_parent_item(path: &[String]) -> bool {
    let n = path.len();
    n >= 2
        && path[n - 2].starts_with("k:")
        && path[n - 1].strip_prefix("f:").is_some_and(|f| {
            serde_json::from_str::<Map<String, Value>>(&path[n - 2][2..])
                .is_ok_and(|keys| keys.contains_key(f))
        })
}

fn key_matches(a: &Value, b: &Value, keys: &[String]) -> bool {
    keys.iter()
        .all(|k| field_set::key_value(a, k) == field_set::key_value(b, k))
}

fn merge_applied<'v>(
    live: &mut Value,
    applied: &'v Value,
    names: &mut Vec<&'v str>,
    ti: &TypeInfo<'_>,
) {
    match applied {
        Value::Object(am) if names.is_empty() || !ti.atomic_map(names) => {
            if !live.is_object() {
                *live = Value::Object(Map::new());
            }
            let lm = meta::object_mut(live);
            for (k, v) in am {
                if v.is_null() {
                    lm.remove(k);
                    continue;
                }
                names.push(k);
                let slot = lm.entry(k.clone()).or_insert(Value::Null);
                merge_applied(slot, v, names, ti);
                names.pop();
            }
        }
        Value::Array(ai) => {
            let kind = ti.list_kind(names);
            let Value::Array(li) = live else {
                *live = applied.clone();
                return;
            };
            // As the API server (structured-merge-diff 4.2+, Kubernetes
            // 1.22+): the merged list follows the applied order, then the
            // live items the applier did not mention, in their order. Order
            // matters (init containers run in it).
            match kind {
                ListKind::Atomic => *li = ai.clone(),
                ListKind::Set => {
                    let rest: Vec<Value> = li.drain(..).filter(|l| !ai.contains(l)).collect();
                    li.extend(ai.iter().cloned());
                    li.extend(rest);
                }
                ListKind::Map(keys) => {
                    let mut rest = std::mem::take(li);
                    for item in ai {
                        match rest.iter().position(|l| key_matches(l, item, &keys)) {
                            Some(i) => {
                                let mut existing = rest.remove(i);
                                merge_applied(&mut existing, item, names, ti);
                                li.push(existing);
                            }
                            None => li.push(item.clone()),
                        }
                    }
                    li.extend(rest);
                }
            }
        }
        other => *live = other.clone(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn apply_removes_fields_no_longer_applied() {
        let ti = TypeInfo::builtin("ConfigMap");
        let first = apply(
            &ti,
            None,
            &cm(json!({"a": "1", "b": "2"})),
            "m",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        let second = apply(
            &ti,
            Some(&first),
            &cm(json!({"a": "1"})),
            "m",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        assert_eq!(second["data"], json!({"a": "1"}));
        assert_eq!(
            second["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:a": {}}})
        );
    }

    #[test]
    fn merged_lists_follow_the_applied_order() {
        let ti = TypeInfo::builtin("Pod");
        let pod = |names: &[&str]| {
            let inits: Vec<Value> = names
                .iter()
                .map(|n| json!({"name": n, "image": "i"}))
                .collect();
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                   "spec": {"initContainers": inits, "containers": [{"name": "c", "image": "i"}]}})
        };
        let first = apply(&ti, None, &pod(&["init"]), "m", "v1", false, None, |_| {}).unwrap();
        let second = apply(
            &ti,
            Some(&first),
            &pod(&["fetch", "restore", "init"]),
            "m",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        let names: Vec<&str> = second["spec"]["initContainers"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        assert_eq!(names, ["fetch", "restore", "init"]);
    }

    #[test]
    fn conflicting_managers() {
        let ti = TypeInfo::builtin("ConfigMap");
        let first = apply(
            &ti,
            None,
            &cm(json!({"a": "1"})),
            "one",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        let conflicts = apply(
            &ti,
            Some(&first),
            &cm(json!({"a": "2"})),
            "two",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap_err();
        assert_eq!(conflicts[0].path, ".data.a");
        assert_eq!(conflicts[0].manager, "one");
        // Same value: shared ownership, no conflict.
        let shared = apply(
            &ti,
            Some(&first),
            &cm(json!({"a": "1"})),
            "two",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        assert_eq!(
            shared["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let forced = apply(
            &ti,
            Some(&first),
            &cm(json!({"a": "2"})),
            "two",
            "v1",
            true,
            None,
            |_| {},
        )
        .unwrap();
        assert_eq!(forced["data"]["a"], "2");
        let managers: Vec<&str> = forced["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["two"]);
    }

    #[test]
    fn updates_take_ownership() {
        let ti = TypeInfo::builtin("ConfigMap");
        let first = apply(
            &ti,
            None,
            &cm(json!({"a": "1"})),
            "applier",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap();
        let mut edited = first.clone();
        edited["data"]["a"] = json!("9");
        record_update(&ti, Some(&first), &mut edited, "editor", "v1", None);
        let conflicts = apply(
            &ti,
            Some(&edited),
            &cm(json!({"a": "1"})),
            "applier",
            "v1",
            false,
            None,
            |_| {},
        )
        .unwrap_err();
        assert_eq!(conflicts[0].manager, "editor");
    }
}
