//! Decoding built-in objects through their typed (k8s-openapi) form, as the API server decodes into Go structs:
//! type errors become 400s and unknown fields are dropped (and reported for `fieldValidation`).

use serde_json::Value;

use crate::registry::ResourceType;

/// Result of decoding: the normalised object and the paths of fields the type does not have.
pub struct Decoded {
    pub object: Value,
    pub unknown: Vec<String>,
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &Value,
) -> Result<Value, String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

/// `None` for types kube-local has no typed form of (they are stored as sent).
pub fn decode(rt: &ResourceType, obj: &Value) -> Option<Result<Decoded, String>> {
    use k8s_openapi::api::{
        admissionregistration::v1 as adm, apps::v1 as apps, batch::v1 as batch,
        coordination::v1 as coord, core::v1 as core, discovery::v1 as disc, events::v1 as events,
        policy::v1 as policy, storage::v1 as storage,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    if rt.is_custom() {
        return None;
    }
    let out = match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Namespace") => roundtrip::<core::Namespace>(obj),
        ("", "Pod") => roundtrip::<core::Pod>(obj),
        ("", "Service") => roundtrip::<core::Service>(obj),
        ("", "Endpoints") => roundtrip::<core::Endpoints>(obj),
        ("", "ConfigMap") => roundtrip::<core::ConfigMap>(obj),
        ("", "Secret") => roundtrip::<core::Secret>(obj),
        ("", "ServiceAccount") => roundtrip::<core::ServiceAccount>(obj),
        ("", "Event") => roundtrip::<core::Event>(obj),
        ("", "PersistentVolumeClaim") => roundtrip::<core::PersistentVolumeClaim>(obj),
        ("", "PersistentVolume") => roundtrip::<core::PersistentVolume>(obj),
        ("", "Node") => roundtrip::<core::Node>(obj),
        ("apps", "StatefulSet") => roundtrip::<apps::StatefulSet>(obj),
        ("apps", "Deployment") => roundtrip::<apps::Deployment>(obj),
        ("apps", "ReplicaSet") => roundtrip::<apps::ReplicaSet>(obj),
        ("apps", "DaemonSet") => roundtrip::<apps::DaemonSet>(obj),
        ("apps", "ControllerRevision") => roundtrip::<apps::ControllerRevision>(obj),
        ("batch", "Job") => roundtrip::<batch::Job>(obj),
        ("batch", "CronJob") => roundtrip::<batch::CronJob>(obj),
        ("policy", "PodDisruptionBudget") => roundtrip::<policy::PodDisruptionBudget>(obj),
        ("coordination.k8s.io", "Lease") => roundtrip::<coord::Lease>(obj),
        ("events.k8s.io", "Event") => roundtrip::<events::Event>(obj),
        ("discovery.k8s.io", "EndpointSlice") => roundtrip::<disc::EndpointSlice>(obj),
        ("storage.k8s.io", "StorageClass") => roundtrip::<storage::StorageClass>(obj),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            roundtrip::<apiext::CustomResourceDefinition>(obj)
        }
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            roundtrip::<adm::ValidatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            roundtrip::<adm::MutatingWebhookConfiguration>(obj)
        }
        _ => return None,
    };
    Some(out.map(|object| {
        let mut unknown = Vec::new();
        dropped(obj, &object, "", &mut unknown);
        Decoded { object, unknown }
    }))
}

/// Paths present (non-null) in `input` but gone after decoding.
fn dropped(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    Some(ov) => dropped(v, ov, &p, out),
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                dropped(iv, ov, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_dropped_and_reported() {
        let reg = Registry::new();
        let rt = reg.find("", "v1", "configmaps").expect("configmaps served");
        let d = decode(&rt, &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}, "dta": 1}))
            .unwrap()
            .unwrap();
        assert_eq!(d.unknown, vec!["dta"]);
        assert!(d.object.get("dta").is_none());
    }

    #[test]
    fn type_errors_are_reported() {
        let reg = Registry::new();
        let rt = reg.find("apps", "v1", "statefulsets").expect("served");
        let e = decode(
            &rt,
            &json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": {"replicas": "three"}}),
        )
        .unwrap();
        assert!(e.is_err());
    }
}
