//! OpenAPI v3: the `/openapi/v3` index and one document per group-version (built-in schemas from k8s-openapi, CRD schemas inline).

use std::sync::OnceLock;

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

use crate::registry::{Registry, ResourceType};

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

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

type Defs = Map<String, Value>;
/// (group, version, kind, definition name) of each built-in kind.
type KindDefs = Vec<(&'static str, &'static str, &'static str, String)>;

/// Built-in schemas, generated once: (definitions, [(group, version, kind) → definition name]).
fn builtin_defs() -> &'static (Defs, KindDefs) {
    static DEFS: OnceLock<(Defs, KindDefs)> = OnceLock::new();
    DEFS.get_or_init(|| {
        use k8s_openapi::api::{
            admissionregistration::v1 as adm, apps::v1 as apps, batch::v1 as batch, coordination::v1 as coord, core::v1 as core,
            discovery::v1 as disc, events::v1 as events, policy::v1 as policy, storage::v1 as storage,
            authentication::v1 as authn, authorization::v1 as authz, rbac::v1 as rbac,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
        let mut generator = SchemaGenerator::new(SchemaSettings::openapi3());
        let mut kinds = Vec::new();
        macro_rules! add {
            ($g:expr, $v:expr, $k:expr, $t:ty) => {{
                generator.subschema_for::<$t>();
                kinds.push(($g, $v, $k, <$t as JsonSchema>::schema_name().to_string()));
            }};
        }
        add!("", "v1", "Namespace", core::Namespace);
        add!("", "v1", "Pod", core::Pod);
        add!("", "v1", "Service", core::Service);
        add!("", "v1", "Endpoints", core::Endpoints);
        add!("", "v1", "ConfigMap", core::ConfigMap);
        add!("", "v1", "Secret", core::Secret);
        add!("", "v1", "ServiceAccount", core::ServiceAccount);
        add!("", "v1", "Event", core::Event);
        add!("", "v1", "PersistentVolumeClaim", core::PersistentVolumeClaim);
        add!("", "v1", "PersistentVolume", core::PersistentVolume);
        add!("", "v1", "Node", core::Node);
        add!("apps", "v1", "StatefulSet", apps::StatefulSet);
        add!("apps", "v1", "Deployment", apps::Deployment);
        add!("apps", "v1", "ReplicaSet", apps::ReplicaSet);
        add!("apps", "v1", "DaemonSet", apps::DaemonSet);
        add!("apps", "v1", "ControllerRevision", apps::ControllerRevision);
        add!("batch", "v1", "Job", batch::Job);
        add!("batch", "v1", "CronJob", batch::CronJob);
        add!("policy", "v1", "PodDisruptionBudget", policy::PodDisruptionBudget);
        add!("coordination.k8s.io", "v1", "Lease", coord::Lease);
        add!("events.k8s.io", "v1", "Event", events::Event);
        add!("discovery.k8s.io", "v1", "EndpointSlice", disc::EndpointSlice);
        add!("storage.k8s.io", "v1", "StorageClass", storage::StorageClass);
        add!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", apiext::CustomResourceDefinition);
        add!("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", adm::ValidatingWebhookConfiguration);
        add!("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", adm::MutatingWebhookConfiguration);
        add!("rbac.authorization.k8s.io", "v1", "ClusterRole", rbac::ClusterRole);
        add!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", rbac::ClusterRoleBinding);
        add!("rbac.authorization.k8s.io", "v1", "Role", rbac::Role);
        add!("rbac.authorization.k8s.io", "v1", "RoleBinding", rbac::RoleBinding);
        add!("authentication.k8s.io", "v1", "TokenReview", authn::TokenReview);
        add!("authorization.k8s.io", "v1", "SubjectAccessReview", authz::SubjectAccessReview);
        add!("authorization.k8s.io", "v1", "SelfSubjectAccessReview", authz::SelfSubjectAccessReview);
        add!("authorization.k8s.io", "v1", "SelfSubjectRulesReview", authz::SelfSubjectRulesReview);
        add!("authentication.k8s.io", "v1", "SelfSubjectReview", authn::SelfSubjectReview);
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>();
        let mut defs: Defs = generator.take_definitions(true).into_iter().collect();
        add_patch_metadata(&mut defs);
        defs.insert("io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(), json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}));
        defs.insert("io.k8s.apimachinery.pkg.apis.meta.v1.Status".into(), json!({"type": "object", "description": "Status is a return value for calls that don't return other objects."}));
        (defs, kinds)
    })
}

/// Follows `$ref` (also wrapped in a one-element `allOf`) to the definition it names.
fn resolve<'a>(defs: &'a Defs, mut node: &'a Value) -> Option<&'a Value> {
    for _ in 0..8 {
        if let Some(r) = node.get("$ref").and_then(Value::as_str) {
            node = defs.get(r.rsplit('/').next()?)?;
        } else if let Some([only]) = node
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
        {
            node = only;
        } else {
            return Some(node);
        }
    }
    None
}

/// Whether `field` is a property declared by the type found at `parent` in built-in `kind` (a struct field, not a
/// map key); list items along `parent` are stepped into. Unknown kinds or paths: false.
pub fn builtin_declares(kind: &str, parent: &[&str], field: &str) -> bool {
    let (defs, kinds) = builtin_defs();
    let Some(mut node) = kinds
        .iter()
        .find(|(_, _, k, _)| *k == kind)
        .and_then(|(_, _, _, def)| defs.get(def))
    else {
        return false;
    };
    let step_into_items = |mut n: &'static Value| -> Option<&'static Value> {
        loop {
            n = resolve(defs, n)?;
            match n.get("items") {
                Some(items) if n.get("type").and_then(Value::as_str) == Some("array") => n = items,
                _ => return Some(n),
            }
        }
    };
    for name in parent {
        let Some(n) = step_into_items(node) else {
            return false;
        };
        let next = n
            .get("properties")
            .and_then(|p| p.get(*name))
            .or_else(|| n.get("additionalProperties").filter(|a| a.is_object()));
        match next {
            Some(v) => node = v,
            None => return false,
        }
    }
    step_into_items(node)
        .and_then(|n| n.get("properties"))
        .is_some_and(|p| p.get(field).is_some())
}

/// Adds the `x-kubernetes-patch-*`/`x-kubernetes-list-*` markers kubectl uses to build strategic merge patches.
fn add_patch_metadata(defs: &mut Defs) {
    let keyed: &[(&str, &str, &[&str])] = &[
        ("containers", "name", &["name"]),
        ("initContainers", "name", &["name"]),
        ("ephemeralContainers", "name", &["name"]),
        ("env", "name", &["name"]),
        ("volumeMounts", "mountPath", &["mountPath"]),
        ("volumeDevices", "devicePath", &["devicePath"]),
        ("volumes", "name", &["name"]),
        ("imagePullSecrets", "name", &["name"]),
        ("hostAliases", "ip", &["ip"]),
        ("conditions", "type", &["type"]),
        ("ownerReferences", "uid", &["uid"]),
        ("webhooks", "name", &["name"]),
    ];
    for (def_name, def) in defs.iter_mut() {
        let Some(props) = def.get_mut("properties").and_then(Value::as_object_mut) else {
            continue;
        };
        for (field, prop) in props.iter_mut() {
            let Some(p) = prop.as_object_mut() else {
                continue;
            };
            if p.get("type").and_then(Value::as_str) != Some("array") {
                continue;
            }
            let marker = if field == "ports" && def_name.ends_with(".Container") {
                Some(("containerPort", vec!["containerPort", "protocol"]))
            } else if field == "ports" && def_name.ends_with(".ServiceSpec") {
                Some(("port", vec!["port", "protocol"]))
            } else if field == "finalizers" && def_name == OBJECT_META {
                p.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                p.insert("x-kubernetes-list-type".into(), json!("set"));
                None
            } else {
                keyed
                    .iter()
                    .find(|(f, _, _)| f == field)
                    .map(|(_, k, keys)| (*k, keys.to_vec()))
            };
            if let Some((key, keys)) = marker {
                p.insert("x-kubernetes-patch-merge-key".into(), json!(key));
                p.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
                p.insert("x-kubernetes-list-type".into(), json!("map"));
                p.insert("x-kubernetes-list-map-keys".into(), json!(keys));
            }
        }
    }
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
        "info": {"title": "Kubernetes", "version": crate::server::KUBERNETES_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

#[cfg(test)]
mod tests {
    use super::builtin_declares;

    #[test]
    fn struct_fields_are_declared_and_map_keys_are_not() {
        assert!(builtin_declares("Pod", &["spec"], "containers"));
        assert!(builtin_declares(
            "Pod",
            &["spec", "containers"],
            "resources"
        ));
        assert!(!builtin_declares("Pod", &["spec", "nodeSelector"], "disk"));
        assert!(builtin_declares("ConfigMap", &["metadata"], "labels"));
        assert!(!builtin_declares(
            "ConfigMap",
            &["metadata", "labels"],
            "app"
        ));
        assert!(!builtin_declares("ConfigMap", &["data"], "key"));
    }
}
