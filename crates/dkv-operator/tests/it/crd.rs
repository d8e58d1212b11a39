//! The CRDs: the checked-in YAML must match the Rust types, and every schema
//! must be structural (the API server rejects non-structural CRDs).

use dkv_operator::crd;
use dkv_test_support::repo_root;
use serde_json::Value;

#[test]
fn checked_in_crds_are_current() {
    for (file, definition) in crd::all() {
        let path = repo_root().join("deploy/crds").join(file);
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        let generated = crd::to_yaml(&definition).unwrap();
        assert!(
            checked_in == generated,
            "{} is stale: regenerate with `cargo run -p dkv-operator --bin dkv -- crd` \
             (or `scripts/update-crds.sh`)",
            path.display()
        );
    }
}

#[test]
fn checked_in_crds_parse_back_to_the_same_definition() {
    for (file, definition) in crd::all() {
        let text = std::fs::read_to_string(repo_root().join("deploy/crds").join(file)).unwrap();
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_saphyr::from_str(&text).unwrap();
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            serde_json::to_value(&definition).unwrap()
        );
    }
}

/// Structural-schema rules of apiextensions.k8s.io/v1, as the API server
/// enforces them; returns every violation with its path.
fn structural_violations(
    schema: &Value,
    path: &str,
    in_value_validation: bool,
    out: &mut Vec<String>,
) {
    let Some(node) = schema.as_object() else {
        out.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in ["$ref", "definitions", "$schema", "$id", "$defs"] {
        if node.contains_key(forbidden) {
            out.push(format!("{path}: {forbidden} is not allowed"));
        }
    }
    let int_or_string = node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    let preserve = node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if in_value_validation {
        // Inside anyOf/allOf/oneOf/not only value validations may appear.
        for key in [
            "type",
            "description",
            "default",
            "additionalProperties",
            "nullable",
            "x-kubernetes-int-or-string",
            "x-kubernetes-preserve-unknown-fields",
            "x-kubernetes-embedded-resource",
        ] {
            if node.contains_key(key) {
                out.push(format!(
                    "{path}: {key} is not allowed inside anyOf/allOf/oneOf/not"
                ));
            }
        }
    } else if !node.contains_key("type") && !int_or_string && !preserve {
        out.push(format!("{path}: missing type"));
    }
    if node.contains_key("properties") && node.contains_key("additionalProperties") {
        out.push(format!(
            "{path}: properties and additionalProperties are mutually exclusive"
        ));
    }
    if node.get("type") == Some(&Value::String("array".into())) && !node.contains_key("items") {
        out.push(format!("{path}: array without items"));
    }
    if int_or_string {
        if node.contains_key("type") {
            out.push(format!("{path}: int-or-string must not set type"));
        }
        if let Some(any_of) = node.get("anyOf") {
            let types: Vec<_> = any_of
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| s.get("type").cloned())
                .collect();
            if types != vec![Some(Value::from("integer")), Some(Value::from("string"))] {
                out.push(format!(
                    "{path}: int-or-string anyOf must be [integer, string]"
                ));
            }
        }
    }
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            if path.ends_with(".metadata") {
                out.push(format!("{path}.{name}: metadata may not be constrained"));
            }
            structural_violations(sub, &format!("{path}.{name}"), in_value_validation, out);
        }
    }
    if let Some(items) = node.get("items") {
        structural_violations(items, &format!("{path}[]"), in_value_validation, out);
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        structural_violations(
            additional,
            &format!("{path}{{*}}"),
            in_value_validation,
            out,
        );
    }
    for combinator in ["anyOf", "allOf", "oneOf"] {
        for (i, sub) in node
            .get(combinator)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            structural_violations(sub, &format!("{path}.{combinator}[{i}]"), true, out);
        }
    }
    if let Some(not) = node.get("not") {
        structural_violations(not, &format!("{path}.not"), true, out);
    }
}

#[test]
fn every_crd_schema_is_structural() {
    for (file, definition) in crd::all() {
        let value = serde_json::to_value(&definition).unwrap();
        for version in value["spec"]["versions"].as_array().unwrap() {
            let schema = &version["schema"]["openAPIV3Schema"];
            let mut violations = Vec::new();
            structural_violations(
                schema,
                &format!("{file}:{}", version["name"]),
                false,
                &mut violations,
            );
            assert!(violations.is_empty(), "{}", violations.join("\n"));
        }
    }
}

#[test]
fn the_structural_check_catches_violations() {
    // The checker itself must be able to fail.
    let bad = serde_json::json!({
        "type": "object",
        "properties": {
            "a": {"description": "no type"},
            "b": {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}},
            "c": {"type": "array"},
            "d": {"anyOf": [{"type": "string"}]},
        }
    });
    let mut violations = Vec::new();
    structural_violations(&bad, "x", false, &mut violations);
    assert_eq!(violations.len(), 5, "{violations:#?}");
}

#[test]
fn distributedkv_serves_the_documented_api() {
    let crds = crd::all();
    let dkv = serde_json::to_value(&crds[0].1).unwrap();
    assert_eq!(dkv["metadata"]["name"], "distributedkvs.dkv.io");
    assert_eq!(
        dkv["spec"]["names"]["shortNames"],
        serde_json::json!(["dkv"])
    );
    assert_eq!(
        dkv["spec"]["names"]["categories"],
        serde_json::json!(["all", "dkv-all"])
    );
    // Both versions serve the same API but for spec.backup; v1beta1 is stored.
    for (index, name, stored) in [(0, "v1alpha1", false), (1, "v1beta1", true)] {
        let version = &dkv["spec"]["versions"][index];
        assert_eq!(version["name"], name);
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], stored);
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        assert_eq!(
            version["subresources"]["scale"],
            serde_json::json!({
                "specReplicasPath": ".spec.size",
                "statusReplicasPath": ".status.readyReplicas",
                "labelSelectorPath": ".status.selector"
            })
        );
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            vec![
                "Size",
                "Ready",
                "Version",
                "Status",
                "Recoverable-From",
                "Last-Segment",
                "Adoption",
                "Old-Members",
                "Standby",
                "Standby-Lag",
                "Age"
            ]
        );
        // The continuous backup, adoption and standby columns show only
        // with `-o wide`.
        let wide: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["priority"].as_i64().unwrap_or(0) > 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            wide,
            vec![
                "Recoverable-From",
                "Last-Segment",
                "Adoption",
                "Old-Members",
                "Standby",
                "Standby-Lag"
            ]
        );
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["required"], serde_json::json!(["image", "size"]));
        assert_eq!(spec["properties"]["size"]["minimum"], 1.0);
        assert_eq!(spec["properties"]["size"]["maximum"], 9.0);
        assert_eq!(
            spec["properties"]["storage"]["properties"]["reclaimPolicy"]["enum"],
            serde_json::json!(["Retain", "Delete"])
        );
        let rules: Vec<&str> = spec["x-kubernetes-validations"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["rule"].as_str().unwrap())
            .collect();
        assert!(
            rules.iter().any(|r| r.contains("oldSelf.bootstrap")),
            "{rules:?}"
        );
        let storage = &spec["properties"]["storage"]["properties"];
        assert_eq!(
            storage["storageClassName"]["x-kubernetes-validations"][0]["rule"],
            "self == oldSelf"
        );
        // No rule compares the size with the previous spec's: the webhook
        // compares it with what the members' volumes hold, so a growth
        // that never happened can be taken back.
        assert!(
            storage["size"].get("x-kubernetes-validations").is_none(),
            "{}",
            storage["size"]
        );
        let conditions = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
            ["conditions"];
        assert_eq!(conditions["x-kubernetes-list-type"], "map");
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
    }
    assert_eq!(dkv["spec"]["versions"].as_array().unwrap().len(), 2);
    let backup = |index: usize| {
        dkv["spec"]["versions"][index]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["backup"]
            .clone()
    };
    assert_eq!(
        backup(0)["required"],
        serde_json::json!(["s3Path", "schedule"])
    );
    let beta = backup(1);
    assert_eq!(
        beta["required"],
        serde_json::json!(["destination", "schedule"])
    );
    assert_eq!(
        beta["properties"]["destination"]["required"],
        serde_json::json!(["uri"])
    );
    assert_eq!(
        beta["properties"]["retention"]["properties"]["maxAge"]["pattern"],
        "^[1-9][0-9]{0,5}[hd]$"
    );
    assert_eq!(
        dkv["spec"]["conversion"],
        serde_json::json!({
            "strategy": "Webhook",
            "webhook": {
                "conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {
                    "namespace": "dkv-system", "name": "dkv-operator-webhook",
                    "path": "/convert", "port": 443
                }}
            }
        })
    );
}

/// Every description in the schemas is what `kubectl explain` shows users:
/// none may carry a remark meant for the project's engineers.
#[test]
fn schema_descriptions_speak_to_users() {
    fn descriptions(node: &Value, path: String, out: &mut Vec<(String, String)>) {
        match node {
            Value::Object(map) => {
                if let Some(Value::String(text)) = map.get("description") {
                    out.push((path.clone(), text.clone()));
                }
                for (key, child) in map {
                    descriptions(child, format!("{path}.{key}"), out);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    descriptions(child, format!("{path}[{i}]"), out);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (_, definition) in crd::all() {
        descriptions(
            &serde_json::to_value(&definition).unwrap(),
            String::new(),
            &mut found,
        );
    }
    assert!(found.len() > 50, "the walk found the descriptions");
    let internal: Vec<_> = found
        .iter()
        .filter(|(_, text)| {
            ["kubectl expands categories", "clippy", "design/", "TODO"]
                .iter()
                .any(|remark| text.contains(remark))
        })
        .collect();
    assert!(internal.is_empty(), "{internal:#?}");
}
