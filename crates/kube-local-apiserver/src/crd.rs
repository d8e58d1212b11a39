//! CustomResourceDefinitions: validation on write and the resource types (served versions) a definition declares.
//! Registering them, `NamesAccepted`/`Established` and purging on delete happen in `core::crd_lifecycle`.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_error::FieldCause;
use crate::meta;
use crate::registry::{
    CustomVersion, PrinterColumn, ResourceType, ScalePaths, StorageResource, View,
};
use crate::schema;

fn compile_errors(c: &kube::core::cel::CompiledSchema, path: &str, out: &mut Vec<FieldCause>) {
    for e in c.compilation_errors() {
        out.push(FieldCause::invalid(
            format!("{path}.x-kubernetes-validations"),
            &json!(""),
            format!("compilation failed: {e}"),
        ));
    }
    for (k, child) in &c.properties {
        compile_errors(child, &format!("{path}.properties[{k}]"), out);
    }
    if let Some(items) = &c.items {
        compile_errors(items, &format!("{path}.items"), out);
    }
    if let Some(a) = &c.additional_properties {
        compile_errors(a, &format!("{path}.additionalProperties"), out);
    }
}

/// Checks apiextensions performs on a CRD (beyond generic metadata).
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let group = spec.get("group").and_then(Value::as_str).unwrap_or("");
    let plural = spec
        .pointer("/names/plural")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = spec
        .pointer("/names/kind")
        .and_then(Value::as_str)
        .unwrap_or("");
    if group.is_empty() {
        causes.push(FieldCause::required("spec.group", ""));
    }
    if plural.is_empty() {
        causes.push(FieldCause::required("spec.names.plural", ""));
    }
    if kind.is_empty() {
        causes.push(FieldCause::required("spec.names.kind", ""));
    }
    let name = meta::name(crd);
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(FieldCause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") | Some("Cluster") => {}
        other => causes.push(FieldCause::unsupported(
            "spec.scope",
            &json!(other.unwrap_or("")),
            &[json!("Cluster"), json!("Namespaced")],
        )),
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(FieldCause::invalid(
            "spec.versions",
            &json!([]),
            "must have exactly one version marked as storage version",
        ));
    }
    let storage = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        causes.push(FieldCause::invalid(
            "spec.versions",
            &Value::Array(versions.clone()),
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if let Some(s) = v.pointer("/schema/openAPIV3Schema") {
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            schema::structural_errors(s, &path, &mut causes);
            compile_errors(&kube::core::cel::compile_schema(s), &path, &mut causes);
        }
    }
    if let Some(old) = old {
        if old.pointer("/spec/group") != crd.pointer("/spec/group") {
            causes.push(FieldCause::invalid(
                "spec.group",
                &json!(group),
                "field is immutable",
            ));
        }
        if old.pointer("/spec/scope") != crd.pointer("/spec/scope") {
            causes.push(FieldCause::invalid(
                "spec.scope",
                spec.get("scope").unwrap_or(&Value::Null),
                "field is immutable",
            ));
        }
    }
    causes
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Served resource types for a CRD.
pub fn resource_types(crd: &Value) -> Vec<ResourceType> {
    let Some(spec) = crd.get("spec") else {
        return Vec::new();
    };
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let names = spec.get("names").cloned().unwrap_or(Value::Null);
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let namespaced = spec.get("scope").and_then(Value::as_str) == Some("Namespaced");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .unwrap_or("")
        .to_string();
    let conversion_webhook = spec
        .get("conversion")
        .filter(|c| c.get("strategy").and_then(Value::as_str) == Some("Webhook"))
        .cloned();
    versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool) != Some(false))
        .map(|v| {
            let schema_value = v.pointer("/schema/openAPIV3Schema").cloned();
            let cel = schema_value.as_ref().map(|s| Arc::new(kube::core::cel::compile_schema(s)));
            let printer_columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .map(|c| PrinterColumn {
                            name: c.get("name").and_then(Value::as_str).unwrap_or("").into(),
                            type_: c.get("type").and_then(Value::as_str).unwrap_or("string").into(),
                            format: c.get("format").and_then(Value::as_str).unwrap_or("").into(),
                            description: c.get("description").and_then(Value::as_str).unwrap_or("").into(),
                            priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                            json_path: c.get("jsonPath").and_then(Value::as_str).unwrap_or("").into(),
                        })
                        .collect()
                })
                .unwrap_or_else(|| {
                    vec![PrinterColumn {
                        name: "Age".into(),
                        type_: "date".into(),
                        format: String::new(),
                        description: "CreationTimestamp is a timestamp representing the server time when this object was created.".into(),
                        priority: 0,
                        json_path: ".metadata.creationTimestamp".into(),
                    }]
                });
            let scale = v.pointer("/subresources/scale").map(|s| ScalePaths {
                spec_replicas: s.get("specReplicasPath").and_then(Value::as_str).unwrap_or(".spec.replicas").into(),
                status_replicas: s.get("statusReplicasPath").and_then(Value::as_str).unwrap_or(".status.replicas").into(),
                label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(String::from),
            });
            let selectable_fields = v
                .get("selectableFields")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|f| f.get("jsonPath").and_then(Value::as_str).map(String::from)).collect())
                .unwrap_or_default();
            ResourceType {
                group: group.clone(),
                version: v.get("name").and_then(Value::as_str).unwrap_or("").into(),
                plural: plural.clone(),
                singular: singular.clone(),
                kind: kind.clone(),
                namespaced,
                short_names: strings(names.get("shortNames")),
                categories: strings(names.get("categories")),
                status: v.pointer("/subresources/status").is_some(),
                scale,
                generation: true,
                storage: StorageResource { group: group.clone(), resource: plural.clone() },
                view: View::Plain,
                // Custom resources answer an immediate delete with a `Status`, as upstream's CR registry.
                delete_returns_object: false,
                unconditional_update: false,
                create_only: false,
                custom: Some(CustomVersion {
                    crd_name: meta::name(crd).to_string(),
                    schema: schema_value,
                    cel,
                    printer_columns,
                    selectable_fields,
                    storage_version: storage_version.clone(),
                    conversion_webhook: conversion_webhook.clone(),
                }),
            }
        })
        .collect()
}
