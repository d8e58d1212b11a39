//! Structural-schema handling of custom resources: pruning unknown fields, applying defaults, OpenAPI validation and CEL rules.

use serde_json::{Map, Value};

use crate::api_error::FieldCause;

const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn preserves_unknown(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn is_embedded(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true)
}

/// Removes fields the schema does not know, returning their paths (for `fieldValidation` warnings or errors).
pub fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    prune_node(schema, obj, "", true, &mut unknown);
    unknown
}

fn prune_node(
    schema: &Value,
    value: &mut Value,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    match value {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let keep_unknown = preserves_unknown(schema);
            let embedded = root || is_embedded(schema);
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = join(path, &k);
                if embedded && (k == "apiVersion" || k == "kind") {
                    continue;
                }
                if embedded && k == "metadata" {
                    if let Some(Value::Object(m)) = map.get_mut("metadata") {
                        let mkeys: Vec<String> = m.keys().cloned().collect();
                        for mk in mkeys {
                            if !OBJECT_META_FIELDS.contains(&mk.as_str()) {
                                m.remove(&mk);
                                unknown.push(join(&child_path, &mk));
                            }
                        }
                    }
                    continue;
                }
                if let Some(child_schema) = props.and_then(|p| p.get(&k)) {
                    if let Some(child) = map.get_mut(&k) {
                        prune_node(child_schema, child, &child_path, false, unknown);
                    }
                } else if let Some(add) = additional {
                    if let Some(child) = map.get_mut(&k) {
                        prune_node(add, child, &child_path, false, unknown);
                    }
                } else if !keep_unknown {
                    map.remove(&k);
                    unknown.push(child_path);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item_schema, item, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default`s for absent fields and drops nulls where the schema does not allow them, as structural defaulting does.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, child_schema) in props {
                    let nullable =
                        child_schema.get("nullable").and_then(Value::as_bool) == Some(true);
                    if map.get(k).is_some_and(Value::is_null) && !nullable {
                        map.remove(k);
                    }
                    if !map.contains_key(k)
                        && let Some(d) = child_schema.get("default")
                    {
                        map.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = map.get_mut(k) {
                        apply_defaults(child_schema, child);
                    }
                }
            }
            if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(add, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// OpenAPI v3 validation of a (pruned, defaulted) custom resource; the root's metadata is validated elsewhere.
pub fn validate(schema: &Value, obj: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    if let (Some(props), Value::Object(map)) =
        (schema.get("properties").and_then(Value::as_object), obj)
    {
        for (k, child_schema) in props {
            if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(v) = map.get(k) {
                validate_node(child_schema, v, k, &mut causes);
            }
        }
    }
    validate_required(schema, obj, "", &mut causes);
    causes
}

fn validate_required(schema: &Value, obj: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    if let (Some(req), Value::Object(map)) = (schema.get("required").and_then(Value::as_array), obj)
    {
        for r in req.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                causes.push(FieldCause::required(join(path, r), ""));
            }
        }
    }
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn format_num(v: &Value) -> String {
    v.to_string()
}

fn validate_node(schema: &Value, v: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if v.is_null() {
        if !nullable && schema.get("type").is_some() {
            causes.push(FieldCause::type_invalid(
                path,
                v,
                &format!(
                    "{path} in body must be of type {}: \"null\"",
                    schema["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let actual = type_name(v);
    if int_or_string {
        if !matches!(actual, "integer" | "string") {
            causes.push(FieldCause::type_invalid(
                path,
                v,
                &format!("{path} in body must be of type integer,string: {actual:?}"),
            ));
            return;
        }
    } else if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let ok = match want {
            "number" => matches!(actual, "integer" | "number"),
            other => other == actual,
        };
        if !ok {
            causes.push(FieldCause::type_invalid(
                path,
                v,
                &format!("{path} in body must be of type {want}: {actual:?}"),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(v)
    {
        causes.push(FieldCause::unsupported(path, v, allowed));
    }
    match v {
        Value::Number(_) => {
            let x = number(v).unwrap_or(0.0);
            let excl_max = schema.get("exclusiveMaximum").and_then(Value::as_bool) == Some(true);
            let excl_min = schema.get("exclusiveMinimum").and_then(Value::as_bool) == Some(true);
            if let Some(max) = schema.get("maximum") {
                let m = number(max).unwrap_or(f64::MAX);
                if (excl_max && x >= m) || (!excl_max && x > m) {
                    let rel = if excl_max {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    causes.push(FieldCause::invalid(
                        path,
                        v,
                        format!("{path} in body should be {rel} {}", format_num(max)),
                    ));
                }
            }
            if let Some(min) = schema.get("minimum") {
                let m = number(min).unwrap_or(f64::MIN);
                if (excl_min && x <= m) || (!excl_min && x < m) {
                    let rel = if excl_min {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    causes.push(FieldCause::invalid(
                        path,
                        v,
                        format!("{path} in body should be {rel} {}", format_num(min)),
                    ));
                }
            }
            if let Some(mult) = schema.get("multipleOf").and_then(Value::as_f64)
                && mult != 0.0
                && (x / mult).fract() != 0.0
            {
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should be a multiple of {mult}"),
                ));
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                causes.push(FieldCause {
                    reason: "FieldValueTooLong",
                    field: path.into(),
                    message: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(s) => causes.push(FieldCause::invalid(
                        path,
                        v,
                        format!("{path} in body should match '{p}'"),
                    )),
                    _ => {}
                }
            }
            if let Some(f) = schema.get("format").and_then(Value::as_str)
                && !int_or_string
                && let Some(err) = check_format(f, s)
            {
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body must be of type {f}: {s:?}{err}"),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                causes.push(FieldCause {
                    reason: "FieldValueTooMany",
                    field: path.into(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} items"),
                ));
            }
            let list_type = schema.get("x-kubernetes-list-type").and_then(Value::as_str);
            if schema.get("uniqueItems").and_then(Value::as_bool) == Some(true)
                || list_type == Some("set")
            {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].contains(item) {
                        causes.push(FieldCause::duplicate(format!("{path}[{i}]"), item));
                    }
                }
            }
            if list_type == Some("map") {
                let keys: Vec<&str> = schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let key_of = |item: &Value| -> Vec<Value> {
                    keys.iter()
                        .map(|k| item.get(*k).cloned().unwrap_or(Value::Null))
                        .collect()
                };
                for (i, item) in items.iter().enumerate() {
                    let k = key_of(item);
                    if items[..i].iter().any(|o| key_of(o) == k) {
                        let shown: Map<String, Value> = keys
                            .iter()
                            .zip(k)
                            .map(|(a, b)| (a.to_string(), b))
                            .collect();
                        causes.push(FieldCause::duplicate(
                            format!("{path}[{i}]"),
                            &Value::Object(shown),
                        ));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_node(item_schema, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => {
            let n = map.len() as u64;
            if let Some(max) = schema.get("maxProperties").and_then(Value::as_u64)
                && n > max
            {
                causes.push(FieldCause {
                    reason: "FieldValueTooMany",
                    field: path.into(),
                    message: format!("Too many: {n}: must have at most {max} items"),
                });
            }
            if let Some(min) = schema.get("minProperties").and_then(Value::as_u64)
                && n < min
            {
                causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body should have at least {min} properties"),
                ));
            }
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in map {
                let child_path = join(path, k);
                if let Some(cs) = props.and_then(|p| p.get(k)) {
                    validate_node(cs, child, &child_path, causes);
                } else if let Some(add) = additional {
                    validate_node(add, child, &child_path, causes);
                }
            }
            validate_required(schema, v, path, causes);
        }
        _ => {}
    }
    for (key, need) in [("allOf", usize::MAX), ("anyOf", 1), ("oneOf", 1)] {
        if let Some(subs) = schema.get(key).and_then(Value::as_array) {
            let results: Vec<Vec<FieldCause>> = subs
                .iter()
                .map(|s| {
                    let mut c = Vec::new();
                    validate_node(s, v, path, &mut c);
                    c
                })
                .collect();
            let passing = results.iter().filter(|c| c.is_empty()).count();
            match key {
                "allOf" => causes.extend(results.into_iter().flatten()),
                "anyOf" if passing < need => causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body must match at least one schema (anyOf)"),
                )),
                "oneOf" if passing != need => causes.push(FieldCause::invalid(
                    path,
                    v,
                    format!("{path} in body must match exactly one schema (oneOf)"),
                )),
                _ => {}
            }
        }
    }
    if let Some(not) = schema.get("not") {
        let mut c = Vec::new();
        validate_node(not, v, path, &mut c);
        if c.is_empty() {
            causes.push(FieldCause::invalid(
                path,
                v,
                format!("{path} in body must not validate the schema (not)"),
            ));
        }
    }
}

fn check_format(format: &str, s: &str) -> Option<String> {
    let ok = match format {
        "date-time" => s.parse::<jiff::Timestamp>().is_ok(),
        "date" => s.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => {
            s.len() == 36
                && s.chars().enumerate().all(|(i, c)| {
                    if [8, 13, 18, 23].contains(&i) {
                        c == '-'
                    } else {
                        c.is_ascii_hexdigit()
                    }
                })
        }
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "byte" => {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
                && s.len().is_multiple_of(4)
        }
        "duration" => {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
                && !s.is_empty()
        }
        _ => true,
    };
    if ok { None } else { Some(String::new()) }
}

/// Evaluates `x-kubernetes-validations` (with `oldSelf` on update).
pub fn validate_cel(
    compiled: &kube::core::cel::CompiledSchema,
    obj: &Value,
    old: Option<&Value>,
) -> Vec<FieldCause> {
    match kube::core::cel::validate_compiled(compiled, obj, old) {
        Ok(()) => Vec::new(),
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .map(|e| {
                let field = e.field_path.trim_start_matches('.').to_string();
                let value_type = cel_value_type(obj, &field);
                let message = if e.message.is_empty() {
                    format!("failed rule: {}", e.rule)
                } else {
                    e.message.clone()
                };
                match e.reason.as_deref() {
                    Some("FieldValueForbidden") => FieldCause::forbidden(field, message),
                    Some("FieldValueRequired") => FieldCause::required(field, message),
                    Some("FieldValueDuplicate") => FieldCause {
                        reason: "FieldValueDuplicate",
                        message: format!("Duplicate value: {message}"),
                        field,
                    },
                    _ => FieldCause::invalid(field, &Value::String(value_type.into()), message),
                }
            })
            .collect(),
    }
}

fn cel_value_type(obj: &Value, dotted: &str) -> &'static str {
    let mut cur = Some(obj);
    for part in dotted.split('.').filter(|p| !p.is_empty()) {
        let name = part.split('[').next().unwrap_or(part);
        cur = cur.and_then(|c| c.get(name));
    }
    cur.map(type_name).unwrap_or("object")
}

/// Problems that make a schema non-structural (checked on CRD create/update).
pub fn structural_errors(schema: &Value, path: &str, causes: &mut Vec<FieldCause>) {
    let is_root = path.ends_with("openAPIV3Schema");
    let has_type = schema.get("type").is_some();
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    let preserve = preserves_unknown(schema);
    if !has_type && !int_or_string && !preserve && !is_root {
        causes.push(FieldCause::required(
            join(path, "type"),
            "must not be empty for specified object fields",
        ));
    }
    if is_root
        && schema
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "object")
    {
        causes.push(FieldCause::invalid(
            join(path, "type"),
            &schema["type"],
            "must be object at the root",
        ));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        if schema
            .get("additionalProperties")
            .is_some_and(|a| a.is_object() || a == &Value::Bool(true))
        {
            causes.push(FieldCause::forbidden(
                join(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        for (k, child) in props {
            structural_errors(child, &format!("{path}.properties[{k}]"), causes);
        }
    }
    if let Some(items) = schema.get("items") {
        structural_errors(items, &format!("{path}.items"), causes);
    } else if schema.get("type").and_then(Value::as_str) == Some("array") {
        causes.push(FieldCause::required(
            join(path, "items"),
            "must be specified",
        ));
    }
    if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        structural_errors(add, &format!("{path}.additionalProperties"), causes);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 5, "default": 3},
                        "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
                    }
                }
            }
        })
    }

    #[test]
    fn prunes_unknown_but_keeps_preserved() {
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a", "bogus": 1}, "spec": {"size": 1, "nope": 2, "extra": {"anything": 1}}, "top": 1});
        let unknown = prune(&schema(), &mut o);
        assert_eq!(unknown, vec!["metadata.bogus", "spec.nope", "top"]);
        assert_eq!(o["spec"]["extra"]["anything"], 1);
    }

    #[test]
    fn defaults_fill_absent_fields() {
        let mut o = json!({"spec": {"mode": null}});
        apply_defaults(&schema(), &mut o);
        assert_eq!(o["spec"]["size"], 3);
        assert_eq!(o["spec"]["mode"], "a");
    }

    #[test]
    fn validation_reports_field_paths() {
        let o = json!({"spec": {"size": 9, "mode": "c", "tags": ["a", "b", "c"]}});
        let causes = validate(&schema(), &o);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.size", "spec.mode", "spec.tags"],
            "{causes:?}"
        );
        let missing = validate(&schema(), &json!({"spec": {}}));
        assert_eq!(missing[0].field, "spec.size");
        assert_eq!(missing[0].reason, "FieldValueRequired");
        let wrong = validate(&schema(), &json!({"spec": {"size": "x"}}));
        assert_eq!(wrong[0].reason, "FieldValueTypeInvalid");
    }
}
