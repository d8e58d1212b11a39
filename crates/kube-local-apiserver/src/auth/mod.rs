//! Authentication and authorization: the TokenRequest subresource of
//! ServiceAccounts (`kubectl create token`), TokenReview,
//! SubjectAccessReview, SelfSubjectAccessReview (`kubectl auth can-i`),
//! SelfSubjectRulesReview (`kubectl auth can-i --list`) and
//! SelfSubjectReview (`kubectl auth whoami`). The reviews are create-only and
//! never stored, as upstream: the answer is the request with its `status`
//! filled in.
//!
//! A library environment trusts every caller (as the admin user,
//! `system:masters`) unless built with
//! `kube_local::EnvironmentBuilder::authenticate`, which the `kube-local up`
//! binary always is; then it authenticates every request but `/healthz`,
//! `/livez`, `/readyz` and `/version` ([`authenticate`]: the kubeconfig's
//! admin token or a ServiceAccount token it issued; otherwise 401) and
//! authorizes it with [`rbac`] from the request's [`attributes`] (otherwise
//! 403), recording each decision in an [`access_log`]. The default
//! ClusterRoles and bindings of a cluster are created at start either way
//! ([`bootstrap_roles`]).

pub mod access_log;
pub mod attributes;
pub mod authenticate;
pub mod bootstrap_roles;
pub mod rbac;

use std::time::Duration;

use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::core::Core;
use crate::service_account_tokens::{Claims, ISSUER, ServiceAccountRef, string_list};

/// Upstream's default lifetime of a requested token, and its bounds.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
const MIN_EXPIRATION_SECONDS: i64 = 600;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
use authenticate::AUTHENTICATED_GROUP;

fn service_account(core: &Core, namespace: &str, name: &str) -> ApiResult<ServiceAccountRef> {
    let rt = core
        .registry
        .find("", "v1", "serviceaccounts")
        .ok_or_else(ApiError::not_found_path)?;
    let sa = core.get(&rt, namespace, name)?;
    Ok(ServiceAccountRef {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: crate::meta::uid(&sa).to_owned(),
    })
}

/// `POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`: a TokenRequest answered with a new token.
pub fn token_request(core: &Core, namespace: &str, name: &str, request: Value) -> ApiResult<Value> {
    let spec = request.get("spec").cloned().unwrap_or_else(|| json!({}));
    let seconds = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "spec.expirationSeconds must be an integer, got {v}"
            ))
        })?,
    };
    let mut causes = Vec::new();
    if seconds < MIN_EXPIRATION_SECONDS {
        causes.push(FieldCause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration less than 10 minutes",
        ));
    } else if seconds > MAX_EXPIRATION_SECONDS {
        causes.push(FieldCause::invalid(
            "spec.expirationSeconds",
            &json!(seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    // A token may be bound to a Pod, Secret or Node (a kubelet binds its pods' tokens to the pod); the binding is
    // checked here and recorded nowhere: the token outlives its object (see the README's differences).
    if let Some(bound) = spec.get("boundObjectRef").filter(|b| !b.is_null()) {
        let kind = bound.get("kind").and_then(Value::as_str).unwrap_or("");
        if !["Pod", "Secret", "Node"].contains(&kind) {
            causes.push(FieldCause::invalid(
                "spec.boundObjectRef.kind",
                &json!(kind),
                "supported values: \"Pod\", \"Secret\", \"Node\"",
            ));
        }
        if bound
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            causes.push(FieldCause::required("spec.boundObjectRef.name", ""));
        }
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "authentication.k8s.io",
            "TokenRequest",
            name,
            causes,
        ));
    }
    let account = service_account(core, namespace, name)?;
    let mut audiences = string_list(spec.get("audiences"));
    if audiences.is_empty() {
        audiences.push(ISSUER.to_owned());
    }
    let lifetime = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    let (token, expires) = core.tokens.issue(&account, &audiences, lifetime);
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": crate::meta::now_time()},
        "spec": {"audiences": audiences, "expirationSeconds": seconds, "boundObjectRef": null},
        "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()},
    }))
}

fn review_answer(mut review: Value, api_version: &str, kind: &str, status: Value) -> Value {
    let object = crate::meta::object_mut(&mut review);
    object.insert("apiVersion".into(), json!(api_version));
    object.insert("kind".into(), json!(kind));
    object
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(|m| m.entry("creationTimestamp").or_insert(Value::Null));
    object.insert("status".into(), status);
    review
}

/// The claims of a ServiceAccount `token` valid for one of `wanted_audiences`
/// whose account still exists, or why it is not accepted.
pub fn verify_service_account_token(
    core: &Core,
    token: &str,
    wanted_audiences: &[String],
) -> Result<Claims, String> {
    let claims = core.tokens.verify(token).map_err(|e| e.to_string())?;
    let granted: Vec<&String> = claims
        .audiences
        .iter()
        .filter(|a| wanted_audiences.contains(a))
        .collect();
    if granted.is_empty() {
        return Err(format!(
            "token audiences {:?} is invalid for the target audiences {wanted_audiences:?}",
            claims.audiences
        ));
    }
    let account = &claims.service_account;
    match service_account(core, &account.namespace, &account.name) {
        Ok(current) if current.uid == account.uid => {}
        Ok(current) => {
            return Err(format!(
                "service account UID ({}) does not match claim ({})",
                current.uid, account.uid
            ));
        }
        Err(_) => {
            return Err(format!(
                "service account {}/{} has been deleted",
                account.namespace, account.name
            ));
        }
    }
    Ok(claims)
}

/// The user a ServiceAccount authenticates as: its name and groups.
pub fn service_account_user(account: &ServiceAccountRef) -> rbac::UserInfo {
    rbac::UserInfo {
        name: account.user_name(),
        groups: vec![
            SERVICE_ACCOUNTS_GROUP.into(),
            format!("{SERVICE_ACCOUNTS_GROUP}:{}", account.namespace),
            AUTHENTICATED_GROUP.into(),
        ],
    }
}

/// Who `token` is, or why it is not accepted.
fn authenticate(core: &Core, token: &str, wanted_audiences: &[String]) -> Result<Value, String> {
    let claims = verify_service_account_token(core, token, wanted_audiences)?;
    let granted: Vec<&String> = claims
        .audiences
        .iter()
        .filter(|a| wanted_audiences.contains(a))
        .collect();
    let account = &claims.service_account;
    Ok(json!({
        "authenticated": true,
        "user": {
            "username": account.user_name(),
            "uid": account.uid,
            "groups": [
                SERVICE_ACCOUNTS_GROUP,
                format!("{SERVICE_ACCOUNTS_GROUP}:{}", account.namespace),
                AUTHENTICATED_GROUP,
            ],
            "extra": {"authentication.kubernetes.io/credential-id": [format!("JTI={}", claims.id)]},
        },
        "audiences": granted,
    }))
}

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub fn token_review(core: &Core, review: Value) -> ApiResult<Value> {
    let token = review
        .pointer("/spec/token")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let mut audiences = string_list(review.pointer("/spec/audiences"));
    if audiences.is_empty() {
        audiences.push(ISSUER.to_owned());
    }
    let status = authenticate(core, &token, &audiences)
        // Upstream omits `authenticated` when false.
        .unwrap_or_else(|error| json!({"user": {}, "error": error}));
    Ok(review_answer(
        review,
        "authentication.k8s.io/v1",
        "TokenReview",
        status,
    ))
}

fn text(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The attributes a review's `spec` asks about, or the causes it is invalid.
fn reviewed_request(spec: &Value, causes: &mut Vec<FieldCause>) -> rbac::Request {
    let present = |key: &str| spec.get(key).is_some_and(|v| !v.is_null());
    if present("resourceAttributes") == present("nonResourceAttributes") {
        causes.push(FieldCause::invalid(
            "spec.resourceAttributes",
            &spec
                .get("resourceAttributes")
                .cloned()
                .unwrap_or(Value::Null),
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    }
    if present("nonResourceAttributes") {
        rbac::Request::NonResource {
            path: text(spec, "/nonResourceAttributes/path"),
            verb: text(spec, "/nonResourceAttributes/verb"),
        }
    } else {
        rbac::Request::Resource {
            namespace: text(spec, "/resourceAttributes/namespace"),
            verb: text(spec, "/resourceAttributes/verb"),
            group: text(spec, "/resourceAttributes/group"),
            resource: text(spec, "/resourceAttributes/resource"),
            subresource: text(spec, "/resourceAttributes/subresource"),
            name: text(spec, "/resourceAttributes/name"),
        }
    }
}

fn access_status(decision: &rbac::Decision) -> Value {
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    status
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`.
pub fn subject_access_review(core: &Core, review: Value) -> ApiResult<Value> {
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut causes = Vec::new();
    let request = reviewed_request(&spec, &mut causes);
    let user = rbac::UserInfo {
        name: text(&spec, "/user"),
        groups: string_list(spec.get("groups")),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        causes.push(FieldCause::invalid(
            "spec.user",
            &json!(""),
            "at least one of user or group must be specified",
        ));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "",
            causes,
        ));
    }
    let decision = rbac::authorize(core, &user, &request);
    Ok(review_answer(
        review,
        "authorization.k8s.io/v1",
        "SubjectAccessReview",
        access_status(&decision),
    ))
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`: may the caller `user` do this?
pub fn self_subject_access_review(
    core: &Core,
    user: &rbac::UserInfo,
    review: Value,
) -> ApiResult<Value> {
    let spec = review.get("spec").cloned().unwrap_or_else(|| json!({}));
    let mut causes = Vec::new();
    let request = reviewed_request(&spec, &mut causes);
    if !causes.is_empty() {
        return Err(ApiError::invalid(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "",
            causes,
        ));
    }
    let decision = rbac::authorize(core, user, &request);
    Ok(review_answer(
        review,
        "authorization.k8s.io/v1",
        "SelfSubjectAccessReview",
        access_status(&decision),
    ))
}

/// `POST /apis/authorization.k8s.io/v1/selfsubjectrulesreviews`: what the caller `user` may do in
/// `spec.namespace` (`kubectl auth can-i --list`).
pub fn self_subject_rules_review(
    core: &Core,
    user: &rbac::UserInfo,
    review: Value,
) -> ApiResult<Value> {
    let namespace = text(&review, "/spec/namespace");
    if namespace.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for rule in rbac::rules_for(core, user, &namespace) {
        if let Some(urls) = rule.non_resource_urls.filter(|u| !u.is_empty()) {
            non_resource_rules.push(json!({"verbs": rule.verbs, "nonResourceURLs": urls}));
        }
        if let Some(resources) = rule.resources.filter(|r| !r.is_empty()) {
            let mut entry = json!({
                "verbs": rule.verbs,
                "apiGroups": rule.api_groups.unwrap_or_default(),
                "resources": resources,
            });
            if let Some(names) = rule.resource_names.filter(|n| !n.is_empty()) {
                entry["resourceNames"] = json!(names);
            }
            resource_rules.push(entry);
        }
    }
    Ok(review_answer(
        review,
        "authorization.k8s.io/v1",
        "SelfSubjectRulesReview",
        json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": false,
        }),
    ))
}

/// `POST /apis/authentication.k8s.io/v1/selfsubjectreviews`: who the caller `user` is.
pub fn self_subject_review(user: &rbac::UserInfo, review: Value) -> Value {
    review_answer(
        review,
        "authentication.k8s.io/v1",
        "SelfSubjectReview",
        json!({"userInfo": {"username": user.name, "groups": user.groups}}),
    )
}

/// The 403 for `user` refused `request`, worded as upstream's authorization filter.
pub fn forbidden(user: &rbac::UserInfo, request: &rbac::Request) -> ApiError {
    match request {
        rbac::Request::NonResource { path, verb } => ApiError::access_denied(
            crate::api_error::Subject::default(),
            format!("User {:?} cannot {verb} path {path:?}", user.name),
        ),
        rbac::Request::Resource {
            namespace,
            verb,
            group,
            resource,
            subresource,
            name,
        } => {
            let shown = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let scope = if namespace.is_empty() {
                "at the cluster scope".to_owned()
            } else {
                format!("in the namespace {namespace:?}")
            };
            ApiError::access_denied(
                crate::api_error::Subject {
                    group,
                    resource,
                    name,
                },
                format!(
                    "User {:?} cannot {verb} resource {shown:?} in API group {group:?} {scope}",
                    user.name
                ),
            )
        }
    }
}
