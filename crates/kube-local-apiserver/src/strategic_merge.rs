//! Strategic merge patch for built-in types: merge keys, `$patch`, `$setElementOrder`, `$retainKeys`, `$deleteFromPrimitiveList`.

use serde_json::{Map, Value};

use crate::type_info::{SmpList, TypeInfo};

const DELETE_FROM_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies `patch` to `original`; errors are messages for a 400/422 answer.
pub fn apply(original: &Value, patch: &Value, ti: &TypeInfo<'_>) -> Result<Value, String> {
    let (Value::Object(o), Value::Object(p)) = (original, patch) else {
        return Err("strategic merge patch must be a JSON object".into());
    };
    Ok(merge_map(o, p, &mut Vec::new(), ti)?
        .map(Value::Object)
        .unwrap_or_else(|| Value::Object(Map::new())))
}

fn directive(p: &Map<String, Value>) -> Option<&str> {
    p.get("$patch").and_then(Value::as_str)
}

/// Strips directives from a value that is inserted as-is (no original to merge with).
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), clean(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| i.as_object().is_none_or(|m| directive(m).is_none()))
                .map(clean)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn merge_map<'p>(
    orig: &Map<String, Value>,
    patch: &'p Map<String, Value>,
    names: &mut Vec<&'p str>,
    ti: &TypeInfo<'_>,
) -> Result<Option<Map<String, Value>>, String> {
    match directive(patch) {
        Some("delete") => return Ok(None),
        Some("replace") => {
            if let Value::Object(m) = clean(&Value::Object(patch.clone())) {
                return Ok(Some(m));
            }
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type: {other} in map: {patch:?}")),
    }
    let mut out = orig.clone();
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        names.push(k);
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = match (out.get(k), v) {
                (Some(Value::Object(om)), Value::Object(pm)) => {
                    merge_map(om, pm, names, ti)?.map(Value::Object)
                }
                (Some(Value::Array(oi)), Value::Array(pi)) => {
                    Some(Value::Array(merge_list(oi, pi, names, ti)?))
                }
                (_, Value::Object(pm)) if directive(pm) == Some("delete") => None,
                _ => Some(clean(v)),
            };
            match merged {
                Some(m) => {
                    out.insert(k.clone(), m);
                }
                None => {
                    out.remove(k);
                }
            }
        }
        names.pop();
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE) {
            let remove = v.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = out.get_mut(field) {
                items.retain(|i| !remove.contains(i));
            }
        }
    }
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(SET_ELEMENT_ORDER) {
            let order = v.as_array().cloned().unwrap_or_default();
            names.push(field);
            let strategy = ti.smp_list(names);
            names.pop();
            if let Some(Value::Array(items)) = out.get_mut(field) {
                reorder(items, &order, &strategy);
            }
        }
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        let keep: Vec<&str> = keep.iter().filter_map(Value::as_str).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(out))
}

fn merge_list<'p>(
    orig: &[Value],
    patch: &'p [Value],
    names: &mut Vec<&'p str>,
    ti: &TypeInfo<'_>,
) -> Result<Vec<Value>, String> {
    if patch
        .iter()
        .any(|i| i.as_object().and_then(directive) == Some("replace"))
    {
        return Ok(patch
            .iter()
            .filter(|i| {
                i.as_object()
                    .is_none_or(|m| directive(m) != Some("replace"))
            })
            .map(clean)
            .collect());
    }
    match ti.smp_list(names) {
        SmpList::Replace => Ok(patch.iter().map(clean).collect()),
        SmpList::MergePrimitives => {
            let mut out = orig.to_vec();
            for item in patch {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(out)
        }
        SmpList::MergeKey(key) => {
            let mut out = orig.to_vec();
            for item in patch {
                let Value::Object(pm) = item else {
                    return Err(format!(
                        "expected a map with merge key {key:?} in list, got {item}"
                    ));
                };
                let Some(kv) = pm.get(&key) else {
                    return Err(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    ));
                };
                let pos = out.iter().position(|o| o.get(&key) == Some(kv));
                if directive(pm) == Some("delete") {
                    out.retain(|o| o.get(&key) != Some(kv));
                    continue;
                }
                match pos {
                    Some(i) => {
                        let merged = match &out[i] {
                            Value::Object(om) => merge_map(om, pm, names, ti)?,
                            _ => Some(match clean(item) {
                                Value::Object(m) => m,
                                _ => Map::new(),
                            }),
                        };
                        match merged {
                            Some(m) => out[i] = Value::Object(m),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => out.push(clean(item)),
                }
            }
            Ok(out)
        }
    }
}

fn reorder(items: &mut Vec<Value>, order: &[Value], strategy: &SmpList) {
    let position = |item: &Value| -> Option<usize> {
        order.iter().position(|o| match strategy {
            SmpList::MergeKey(k) => o.get(k).is_some() && o.get(k) == item.get(k),
            _ => o == item,
        })
    };
    let mut listed: Vec<(usize, Value)> = Vec::new();
    let mut rest = Vec::new();
    for item in items.drain(..) {
        match position(&item) {
            Some(p) => listed.push((p, item)),
            None => rest.push(item),
        }
    }
    listed.sort_by_key(|(p, _)| *p);
    items.extend(listed.into_iter().map(|(_, v)| v));
    items.extend(rest);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"finalizers": ["a"]}, "spec": {"containers": [
            {"name": "a", "image": "x", "env": [{"name": "E", "value": "1"}], "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "y"}
        ]}})
    }

    #[test]
    fn merges_by_key() {
        let ti = TypeInfo::builtin("Pod");
        let out = apply(&pod(), &json!({"spec": {"containers": [{"name": "a", "image": "z", "env": [{"name": "F", "value": "2"}]}]}}), &ti).unwrap();
        assert_eq!(out["spec"]["containers"][0]["image"], "z");
        assert_eq!(
            out["spec"]["containers"][0]["env"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(out["spec"]["containers"][1]["name"], "b");
    }

    #[test]
    fn directives() {
        let ti = TypeInfo::builtin("Pod");
        let out = apply(
            &pod(),
            &json!({
                "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
                "spec": {"containers": [{"name": "b", "$patch": "delete"}]}
            }),
            &ti,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!([]));
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        let out = apply(
            &pod(),
            &json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
            &ti,
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"][0]["name"], "b");
        let out = apply(
            &pod(),
            &json!({"spec": {"$patch": "replace", "containers": []}}),
            &ti,
        )
        .unwrap();
        assert_eq!(out["spec"], json!({"containers": []}));
    }

    #[test]
    fn finalizers_merge_as_set() {
        let ti = TypeInfo::builtin("Pod");
        let out = apply(
            &pod(),
            &json!({"metadata": {"finalizers": ["b", "a"]}}),
            &ti,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
    }
}
