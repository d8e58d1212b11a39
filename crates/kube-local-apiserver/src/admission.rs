//! Admission webhooks: matching rules and selectors, AdmissionReview v1 calls, JSONPatch mutations, denials and failure policies.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::meta;
use crate::registry::ResourceType;
use crate::selector::LabelSelector;
use crate::store::{ObjectKey, Store};
use crate::webhook_client::{self, CallError};

/// What is being admitted.
pub struct Request<'a> {
    pub rt: &'a ResourceType,
    pub subresource: Option<&'a str>,
    pub operation: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
    pub dry_run: bool,
}

fn matches_list(list: Option<&Value>, want: &str) -> bool {
    list.and_then(Value::as_array).is_some_and(|l| {
        l.iter()
            .any(|v| v.as_str() == Some("*") || v.as_str() == Some(want))
    })
}

fn resource_matches(patterns: Option<&Value>, resource: &str, sub: Option<&str>) -> bool {
    let Some(ps) = patterns.and_then(Value::as_array) else {
        return false;
    };
    ps.iter().filter_map(Value::as_str).any(|p| {
        let (pr, ps) = p
            .split_once('/')
            .map(|(a, b)| (a, Some(b)))
            .unwrap_or((p, None));
        let res_ok = pr == "*" || pr == resource;
        let sub_ok = match (ps, sub) {
            (None, None) => true,
            (Some("*"), _) => true,
            (Some(a), Some(b)) => a == b,
            _ => false,
        };
        res_ok && sub_ok
    })
}

fn rule_matches(rule: &Value, req: &Request<'_>) -> bool {
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !req.rt.namespaced,
        "Namespaced" => req.rt.namespaced,
        _ => true,
    };
    scope_ok
        && matches_list(rule.get("operations"), req.operation)
        && matches_list(rule.get("apiGroups"), &req.rt.group)
        && matches_list(rule.get("apiVersions"), &req.rt.version)
        && resource_matches(rule.get("resources"), &req.rt.plural, req.subresource)
}

fn selector_matches(sel: Option<&Value>, labels: Option<&serde_json::Map<String, Value>>) -> bool {
    match sel {
        None => true,
        Some(s) => LabelSelector::from_object(s)
            .map(|l| l.matches_labels(labels))
            .unwrap_or(false),
    }
}

fn webhook_applies(store: &Store, hook: &Value, req: &Request<'_>) -> bool {
    let rules = hook
        .get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !rules.iter().any(|r| rule_matches(r, req)) {
        return false;
    }
    let is_namespace = req.rt.group.is_empty() && req.rt.plural == "namespaces";
    let ns_ok = if is_namespace {
        let obj = req.object.or(req.old_object);
        selector_matches(hook.get("namespaceSelector"), obj.and_then(meta::labels))
    } else if req.rt.namespaced {
        let ns = store.get(&ObjectKey::namespace(req.namespace));
        selector_matches(
            hook.get("namespaceSelector"),
            ns.as_deref().and_then(meta::labels),
        )
    } else {
        true
    };
    let obj_ok = [req.object, req.old_object]
        .into_iter()
        .flatten()
        .any(|o| selector_matches(hook.get("objectSelector"), meta::labels(o)))
        || (req.object.is_none() && req.old_object.is_none());
    ns_ok && obj_ok
}

fn review(req: &Request<'_>, uid: &str) -> Value {
    let kind = if req.subresource == Some("scale") {
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    } else {
        json!({"group": req.rt.group, "version": req.rt.version, "kind": req.rt.kind})
    };
    let resource =
        json!({"group": req.rt.group, "version": req.rt.version, "resource": req.rt.plural});
    let options_kind = match req.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut r = json!({
        "uid": uid,
        "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
        "name": req.name, "operation": req.operation,
        "userInfo": {"username": "kube-local-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": req.object.cloned().unwrap_or(Value::Null),
        "oldObject": req.old_object.cloned().unwrap_or(Value::Null),
        "dryRun": req.dry_run,
        "options": {"kind": options_kind, "apiVersion": "meta.k8s.io/v1"},
    });
    if req.rt.namespaced {
        r["namespace"] = json!(req.namespace);
    }
    if let Some(s) = req.subresource {
        r["subResource"] = json!(s);
        r["requestSubResource"] = json!(s);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": r})
}

fn denied(hook_name: &str, status: Option<&Value>) -> ApiError {
    let code = status
        .and_then(|s| s.get("code"))
        .and_then(Value::as_u64)
        .unwrap_or(400)
        .max(400) as u16;
    let message = status
        .and_then(|s| s.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let reason = status
        .and_then(|s| s.get("reason"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let denied_by = format!("admission webhook {hook_name:?} denied the request");
    let text = if !message.is_empty() {
        format!("{denied_by}: {message}")
    } else if !reason.is_empty() {
        format!("{denied_by}: {reason}")
    } else {
        format!("{denied_by} without explanation")
    };
    let mut e = ApiError::bad_request(text);
    e.code = code;
    e.reason = reason.to_string().into();
    e.details = status.and_then(|s| s.get("details")).cloned().map(Box::new);
    e
}

fn call_failed(hook_name: &str, e: &CallError) -> ApiError {
    ApiError::internal(format!(
        "Internal error occurred: failed calling webhook {hook_name:?}: {e}"
    ))
}

/// Calls one webhook; returns its `response`, or None when the failure is ignored by policy.
async fn invoke(store: &Store, hook: &Value, req: &Request<'_>) -> ApiResult<Option<Value>> {
    let name = hook.get("name").and_then(Value::as_str).unwrap_or("");
    let ignore = hook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
    let timeout = Duration::from_secs(
        hook.get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(10)
            .clamp(1, 30),
    );
    let uid = meta::new_uid();
    let client_config = hook.get("clientConfig").cloned().unwrap_or(Value::Null);
    let result = webhook_client::call(store, &client_config, &review(req, &uid), timeout)
        .await
        .and_then(|answer| {
            let response = answer
                .get("response")
                .cloned()
                .ok_or_else(|| CallError::Response("missing response".into()))?;
            if response.get("uid").and_then(Value::as_str) != Some(uid.as_str()) {
                return Err(CallError::Response(format!(
                    "expected response.uid={uid:?}, got {:?}",
                    response.get("uid").and_then(Value::as_str).unwrap_or("")
                )));
            }
            Ok(response)
        });
    match result {
        Ok(r) => Ok(Some(r)),
        Err(e) if ignore => {
            tracing::warn!(webhook = name, error = %e, "webhook failed; ignored by failurePolicy");
            Ok(None)
        }
        Err(e) => Err(call_failed(name, &e)),
    }
}

fn warnings_of(response: &Value, out: &mut Vec<String>) {
    if let Some(ws) = response.get("warnings").and_then(Value::as_array) {
        out.extend(ws.iter().filter_map(|w| w.as_str().map(String::from)));
    }
}

/// The webhooks of every configuration of `resource`, in configuration order.
fn webhooks(store: &Store, resource: &str) -> Vec<Value> {
    webhook_client::configurations(store, resource)
        .iter()
        .flat_map(|config| {
            config
                .get("webhooks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// Sends `req` to `hook` if the hook applies to it. The hook's name and
/// answer when it allowed the request; a denial is the error.
async fn consult(
    store: &Store,
    hook: &Value,
    req: &Request<'_>,
    warnings: &mut Vec<String>,
) -> ApiResult<Option<(String, Value)>> {
    if !webhook_applies(store, hook, req) {
        return Ok(None);
    }
    let name = hook
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(response) = invoke(store, hook, req).await? else {
        return Ok(None);
    };
    warnings_of(&response, warnings);
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        return Err(denied(&name, response.get("status")));
    }
    Ok(Some((name, response)))
}

/// Mutating webhooks, in configuration order; each sees the previous ones' changes.
pub async fn mutate(
    store: &Store,
    req: &Request<'_>,
    obj: &mut Value,
    warnings: &mut Vec<String>,
) -> ApiResult<bool> {
    let mut changed = false;
    for hook in webhooks(store, "mutatingwebhookconfigurations") {
        let current = Request {
            object: Some(&*obj),
            ..*req
        };
        let Some((name, response)) = consult(store, &hook, &current, warnings).await? else {
            continue;
        };
        if let Some(p) = response.get("patch").and_then(Value::as_str) {
            if response.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
                return Err(call_failed(
                    &name,
                    &CallError::Response("patchType must be JSONPatch".into()),
                ));
            }
            let bytes = BASE64.decode(p).ok().ok_or_else(|| {
                call_failed(&name, &CallError::Response("patch is not base64".into()))
            })?;
            let ops: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| call_failed(&name, &CallError::Response(e.to_string())))?;
            json_patch::patch(obj, &ops).map_err(|e| {
                call_failed(&name, &CallError::Response(format!("applying patch: {e}")))
            })?;
            changed = true;
        }
    }
    Ok(changed)
}

/// Validating webhooks; any denial rejects the request.
pub async fn validate(
    store: &Store,
    req: &Request<'_>,
    warnings: &mut Vec<String>,
) -> ApiResult<()> {
    for hook in webhooks(store, "validatingwebhookconfigurations") {
        consult(store, &hook, req, warnings).await?;
    }
    Ok(())
}

/// Webhook configurations themselves are never subject to webhooks (as upstream).
pub fn exempt(rt: &ResourceType) -> bool {
    rt.group == "admissionregistration.k8s.io"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_patterns() {
        let p = json!(["pods", "deployments/*"]);
        assert!(resource_matches(Some(&p), "pods", None));
        assert!(!resource_matches(Some(&p), "pods", Some("status")));
        assert!(resource_matches(Some(&p), "deployments", Some("scale")));
        assert!(resource_matches(Some(&json!(["*/*"])), "x", Some("status")));
        assert!(!resource_matches(Some(&json!(["*"])), "x", Some("status")));
    }
}
