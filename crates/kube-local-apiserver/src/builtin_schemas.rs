//! Built-in kinds' OpenAPI schemas (generated from k8s-openapi once, with the patch merge keys and list markers
//! kubectl relies on), and what they declare: the model under server-side apply's field ownership and the
//! OpenAPI v3 documents.

use std::sync::OnceLock;

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde_json::{Map, Value, json};

/// The definition name of `ObjectMeta`, which every object's `metadata` refers to.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

pub type Defs = Map<String, Value>;
/// (group, version, kind, definition name) of each built-in kind.
pub type KindDefs = Vec<(&'static str, &'static str, &'static str, String)>;

/// Built-in schemas, generated once: (definitions, [(group, version, kind) → definition name]).
pub fn builtin_defs() -> &'static (Defs, KindDefs) {
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
        add!("certificates.k8s.io", "v1", "CertificateSigningRequest", k8s_openapi::api::certificates::v1::CertificateSigningRequest);
        add!("apiregistration.k8s.io", "v1", "APIService", k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService);
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
