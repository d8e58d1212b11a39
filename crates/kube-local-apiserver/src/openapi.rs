//! OpenAPI v3: the `/openapi/v3` index and one document per group-version (built-in schemas from
//! [`crate::builtin_schemas`], CRD schemas inline).

use serde_json::{Map, Value, json};

use crate::builtin_schemas::{Defs, OBJECT_META, builtin_defs};
use crate::discovery::KUBERNETES_VERSION;
use crate::registry::{Registry, ResourceType};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

pub fn index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    for (g, v) in reg.group_versions() {
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", doc_hash(reg, &g, &v))}),
        );
    }
    json!({"paths": paths})
}

fn doc_hash(reg: &Registry, group: &str, version: &str) -> String {
    // Changes whenever the set of served types or their schemas change, so clients refetch.
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for t in reg
        .all()
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        t.plural.hash(&mut h);
        if let Some(c) = &t.custom {
            c.schema.as_ref().map(|s| s.to_string()).hash(&mut h);
        }
    }
    format!("{:016X}", h.finish())
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn path_item(t: &ResourceType, schema_ref: &str) -> (String, Value, String, Value) {
    let prefix = if t.group.is_empty() {
        format!("/api/{}", t.version)
    } else {
        format!("/apis/{}/{}", t.group, t.version)
    };
    let ns = if t.namespaced {
        "/namespaces/{namespace}"
    } else {
        ""
    };
    let collection = format!("{prefix}{ns}/{}", t.plural);
    let item = format!("{collection}/{{name}}");
    let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
    let op_id = |verb: &str| format!("{verb}{}", t.kind);
    let ok = |r: &str| json!({"200": {"description": "OK", "content": {"application/json": {"schema": {"$ref": r}}}}});
    let writes = vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore - Warn - Strict",
        ),
    ];
    let mut patch_params = writes.clone();
    patch_params.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}));
    // kubectl decides between strategic merge and JSON merge patch by whether the PATCH operation accepts
    // strategic merge; custom resources do not (upstream lists it only for built-ins).
    let patch_ref = json!({"schema": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}});
    let mut patch_types = Map::new();
    for ct in [
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ] {
        patch_types.insert(ct.into(), patch_ref.clone());
    }
    if !t.is_custom() {
        patch_types.insert("application/strategic-merge-patch+json".into(), patch_ref);
    }
    let patch_body = json!({"content": patch_types, "required": true});
    let body = json!({"content": {"*/*": {"schema": {"$ref": schema_ref}}}, "required": true});
    let mut path_params = vec![
        json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}),
    ];
    if t.namespaced {
        path_params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    let item_value = json!({
        "parameters": path_params,
        "get": {"operationId": op_id("read"), "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk, "responses": ok(schema_ref)},
        "put": {"operationId": op_id("replace"), "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk, "parameters": writes, "requestBody": body, "responses": ok(schema_ref)},
        "delete": {"operationId": op_id("delete"), "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk, "responses": ok("#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Status")},
        "patch": {"operationId": op_id("patch"), "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk, "parameters": patch_params, "requestBody": patch_body, "responses": ok(schema_ref)},
    });
    let mut coll_params = vec![];
    if t.namespaced {
        coll_params.push(json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}));
    }
    let coll_value = json!({
        "parameters": coll_params,
        "post": {"operationId": op_id("create"), "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk,
                 "parameters": [query_param("dryRun", ""), query_param("fieldManager", ""), query_param("fieldValidation", "")],
                 "requestBody": {"content": {"*/*": {"schema": {"$ref": schema_ref}}}, "required": true},
                 "responses": {"201": {"description": "Created", "content": {"application/json": {"schema": {"$ref": schema_ref}}}}}},
    });
    (item, item_value, collection, coll_value)
}

fn crd_def_name(t: &ResourceType) -> String {
    let reversed: Vec<&str> = t.group.split('.').rev().collect();
    format!("{}.{}.{}", reversed.join("."), t.version, t.kind)
}

fn crd_schema(t: &ResourceType) -> Value {
    let mut s = t
        .custom
        .as_ref()
        .and_then(|c| c.schema.clone())
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Some(m) = s.as_object_mut() {
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values."}));
            p.insert("kind".into(), json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase."}));
            p.insert("metadata".into(), json!({"allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
        }
        m.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": t.group, "version": t.version, "kind": t.kind}]),
        );
    }
    s
}

/// Collects the definitions reachable from `root` (by `$ref`), so documents stay small.
fn reachable(defs: &Defs, roots: &[String]) -> Defs {
    let mut out = Defs::new();
    let mut stack: Vec<String> = roots.to_vec();
    while let Some(name) = stack.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(def) = defs.get(&name) else { continue };
        collect_refs(def, &mut stack);
        out.insert(name, def.clone());
    }
    out
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k == "$ref"
                    && let Some(r) = child
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/components/schemas/"))
                {
                    out.push(r.to_string());
                } else {
                    collect_refs(child, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|c| collect_refs(c, out)),
        _ => {}
    }
}

/// The document for one group-version, or None if nothing is served there.
pub fn document(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = reg
        .all()
        .into_iter()
        .filter(|t| t.group == group && t.version == version)
        .collect();
    if types.is_empty() {
        return None;
    }
    let (all_defs, kinds) = builtin_defs();
    let mut paths = Map::new();
    let mut roots = vec![
        OBJECT_META.to_string(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(),
    ];
    let mut extra = Defs::new();
    for t in &types {
        let def_name = if t.is_custom() {
            let name = crd_def_name(t);
            extra.insert(name.clone(), crd_schema(t));
            name
        } else {
            match kinds
                .iter()
                .find(|(g, v, k, _)| *g == t.group && *v == t.version && *k == t.kind)
            {
                Some((_, _, _, name)) => {
                    roots.push(name.clone());
                    name.clone()
                }
                None => continue,
            }
        };
        let (item, item_value, coll, coll_value) =
            path_item(t, &format!("#/components/schemas/{def_name}"));
        paths.insert(item, item_value);
        paths.insert(coll, coll_value);
    }
    let mut schemas = reachable(all_defs, &roots);
    for (k, kind_def) in kinds.iter().map(|(g, v, k, n)| (n, (g, v, k))) {
        if let Some(def) = schemas.get_mut(k.as_str())
            && let Some(m) = def.as_object_mut()
        {
            let (g, v, kind) = kind_def;
            m.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": g, "version": v, "kind": kind}]),
            );
        }
    }
    schemas.extend(extra);
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
