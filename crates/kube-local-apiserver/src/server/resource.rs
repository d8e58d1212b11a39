//! Requests on a resource path: get, list, watch, create, update, patch, apply, delete and deletecollection of a
//! resource, and its subresources (status, scale, eviction, token, log, exec, attach, port-forward, finalize, …).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{HeaderValue, Method, header};
use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::auth::authenticate::Authenticator;
use crate::auth::rbac::UserInfo;
use crate::core::{Core, Deleted, Subresource};
use crate::list::{self, ListQuery};
use crate::meta;
use crate::output;
use crate::patch::PatchKind;
use crate::registry::ResourceType;
use crate::scale;
use crate::subresource::PathSubresource;
use crate::watch::{self, WatchQuery, WatchSettings};

use super::access::authorize_create_by_apply;
use super::body::{decode_object, read_body};
use super::options::{
    delete_options, explicit_manager, flag, header_str, query_map, selectors, write_options,
};
use super::responses::{json_response, with_warnings, written_response};
use super::{Server, Target};

pub(super) async fn resource(server: &Server, req: Request, t: Target) -> ApiResult<Response> {
    let core = &server.core;
    let rt = t.rt.clone();
    let q = query_map(&req);
    if let (Some(sub), Some(name)) = (t.subresource, t.name.as_deref()) {
        let ns = t.namespace.as_deref().unwrap_or_default();
        match sub {
            PathSubresource::Exec | PathSubresource::Attach => {
                return crate::pod_exec::connect(core, &rt, ns, name, sub.as_str(), req).await;
            }
            PathSubresource::Log => {
                if req.method() != Method::GET {
                    return Err(ApiError::method_not_allowed(
                        "the server does not allow this method on the requested resource",
                    ));
                }
                return crate::pod_log::get(core, &rt, ns, name, &q).await;
            }
            PathSubresource::PortForward => {
                return crate::pod_exec::port_forward(core, &rt, ns, name, req).await;
            }
            PathSubresource::Eviction => return eviction(core, &rt, ns, name, &q, req).await,
            _ => {}
        }
    }
    let format = output::negotiate(
        header_str(&req, header::ACCEPT),
        q.get("includeObject").map(String::as_str),
    )?;
    let ua = header_str(&req, header::USER_AGENT).map(String::from);
    let ns = t.namespace.clone().unwrap_or_default();
    let method = req.method().clone();
    let sub = match t.subresource {
        Some(PathSubresource::Status) => Subresource::Status,
        Some(PathSubresource::Approval) => Subresource::Approval,
        Some(PathSubresource::EphemeralContainers) => Subresource::EphemeralContainers,
        _ => Subresource::Main,
    };
    // What is left of the subresources (status, scale, approval, finalize, ephemeralcontainers) is read and
    // written, never created or deleted: upstream serves them with get/update/patch only.
    if t.subresource.is_some() && matches!(method, Method::POST | Method::DELETE) {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    match (method, t.name.clone()) {
        (Method::GET, None) => {
            let (labels, fields) = selectors(&rt, &q)?;
            if flag(&q, "watch") {
                let wq = WatchQuery {
                    namespace: t.namespace.clone(),
                    labels,
                    fields,
                    resource_version: q.get("resourceVersion").cloned(),
                    resource_version_match: q.get("resourceVersionMatch").cloned(),
                    timeout: q
                        .get("timeoutSeconds")
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(Duration::from_secs),
                    bookmarks: flag(&q, "allowWatchBookmarks"),
                    send_initial_events: q.get("sendInitialEvents").map(|v| v == "true"),
                };
                watch::validate(&wq)?;
                let rx = watch::start(
                    core.clone(),
                    rt.clone(),
                    format,
                    wq,
                    WatchSettings {
                        bookmark_interval: server.bookmark_interval,
                        shutdown: server.shutdown.clone(),
                    },
                );
                let mut resp = Response::new(Body::from_stream(
                    tokio_stream::wrappers::ReceiverStream::new(rx),
                ));
                resp.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                resp.headers_mut().insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-cache, private"),
                );
                return Ok(resp);
            }
            let lq = ListQuery {
                labels,
                fields,
                limit: q.get("limit").and_then(|l| l.parse().ok()),
                continue_token: q.get("continue").cloned().filter(|c| !c.is_empty()),
                resource_version: q.get("resourceVersion").cloned(),
                resource_version_match: q.get("resourceVersionMatch").cloned(),
            };
            // A CRD converted by a webhook lists its stored version, then converts the page in one review.
            let listed_as = match &rt.custom {
                Some(c) if crate::conversion::uses_webhook(&rt) => core
                    .registry
                    .find(&rt.group, &c.storage_version, &rt.plural)
                    .unwrap_or_else(|| rt.clone()),
                _ => rt.clone(),
            };
            let listed = list::list(core, &listed_as, t.namespace.as_deref(), &lq)?;
            let items = if Arc::ptr_eq(&listed_as, &rt) {
                listed.items
            } else {
                core.served_all(&rt, listed.items, false).await?
            };
            Ok(json_response(
                200,
                &output::list(
                    format,
                    &rt,
                    items,
                    listed.resource_version,
                    listed.continue_token,
                    listed.remaining,
                ),
            ))
        }
        (Method::GET, Some(name)) => {
            if t.subresource == Some(PathSubresource::Scale) {
                let obj = core.get(&rt, &ns, &name)?;
                return Ok(json_response(200, &scale::to_scale(&rt, &obj)));
            }
            let obj = core.read(&rt, &ns, &name).await?;
            Ok(json_response(200, &output::object(format, &rt, obj)))
        }
        (Method::POST, None) => {
            let opts = write_options(&q, ua.as_deref())?;
            let requester = req
                .extensions()
                .get::<UserInfo>()
                .cloned()
                .unwrap_or_else(Authenticator::admin);
            let (ct, body) = read_body(req).await?;
            let mut obj = decode_object(&rt, t.subresource, ct.as_deref(), &body)?;
            if rt.has_approval() {
                crate::certificate_signing::set_requester(
                    &mut obj,
                    &requester.name,
                    &requester.groups,
                );
            }
            let w = core.create(&rt, &ns, obj, &opts).await?;
            Ok(written_response(format, &rt, w))
        }
        (Method::PUT, Some(name)) => {
            let opts = write_options(&q, ua.as_deref())?;
            let (ct, body) = read_body(req).await?;
            let obj = decode_object(&rt, t.subresource, ct.as_deref(), &body)?;
            if t.subresource == Some(PathSubresource::Scale) {
                let w = core.update_scale(&rt, &ns, &name, obj, &opts).await?;
                return Ok(with_warnings(json_response(200, &w.object), &w.warnings));
            }
            if t.subresource == Some(PathSubresource::Finalize) {
                let w = crate::namespace_finalize::finalize(core, &rt, &name, obj).await?;
                return Ok(json_response(200, &w));
            }
            let w = core.update(&rt, &ns, &name, sub, obj, &opts).await?;
            Ok(written_response(format, &rt, w))
        }
        (Method::PATCH, Some(name)) => {
            let opts = write_options(&q, ua.as_deref())?;
            let ct = header_str(&req, header::CONTENT_TYPE)
                .unwrap_or("")
                .to_string();
            let kind = PatchKind::from_content_type(&ct)?;
            if kind == PatchKind::Apply && !explicit_manager(&q) {
                return Err(ApiError::bad_request(
                    "PATCH, application/apply-patch+yaml requires fieldManager parameter",
                ));
            }
            if kind == PatchKind::Apply {
                authorize_create_by_apply(server, &req, || core.get(&rt, &ns, &name).is_ok())?;
            }
            let (_, body) = read_body(req).await?;
            if t.subresource == Some(PathSubresource::Scale) {
                let w = core
                    .patch_scale(&rt, &ns, &name, kind, &body, &opts)
                    .await?;
                return Ok(with_warnings(json_response(200, &w.object), &w.warnings));
            }
            let w = core.patch(&rt, &ns, &name, sub, kind, &body, &opts).await?;
            Ok(written_response(format, &rt, w))
        }
        (Method::DELETE, Some(name)) => {
            let (_, body) = read_body(req).await?;
            let opts = delete_options(&q, &body)?;
            match core.delete(&rt, &ns, &name, &opts).await? {
                Deleted::Now(obj) if !rt.delete_returns_object => {
                    // Every field of StatusDetails is omitted when empty (the core group).
                    let mut details =
                        json!({"name": name, "kind": rt.plural, "uid": meta::uid(&obj)});
                    if !rt.group.is_empty() {
                        details["group"] = json!(rt.group);
                    }
                    Ok(json_response(
                        200,
                        &json!({
                            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                            "details": details
                        }),
                    ))
                }
                Deleted::Now(obj) | Deleted::Pending(obj) => {
                    Ok(json_response(200, &output::object(format, &rt, obj)))
                }
            }
        }
        (Method::DELETE, None) => {
            let (labels, fields) = selectors(&rt, &q)?;
            let (_, body) = read_body(req).await?;
            let opts = delete_options(&q, &body)?;
            let lq = ListQuery {
                labels,
                fields,
                ..Default::default()
            };
            let listed = list::list(core, &rt, t.namespace.as_deref(), &lq)?;
            let mut deleted = Vec::new();
            for item in listed.items {
                match core
                    .delete(&rt, meta::namespace(&item), meta::name(&item), &opts)
                    .await
                {
                    Ok(Deleted::Now(o)) | Ok(Deleted::Pending(o)) => deleted.push(o),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let rv = core.store.current_rv();
            Ok(json_response(
                200,
                &output::list(format, &rt, deleted, rv, None, None),
            ))
        }
        (Method::POST, Some(_)) | (Method::PUT, None) | (Method::PATCH, None) => {
            Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ))
        }
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    }
}

/// POST of `pods/{name}/eviction` with a policy/v1 (or v1beta1) `Eviction`: 201 and a `Status` of `Success` once the
/// pod is deleted (see [`Core::evict`] for the refusals).
pub(super) async fn eviction(
    core: &Core,
    pods: &ResourceType,
    namespace: &str,
    name: &str,
    q: &HashMap<String, String>,
    req: Request,
) -> ApiResult<Response> {
    if req.method() != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let request_dry_run = write_options(q, None)?.dry_run;
    let (ct, body) = read_body(req).await?;
    let eviction = decode_object(pods, Some(PathSubresource::Eviction), ct.as_deref(), &body)?;
    match (
        eviction.get("apiVersion").and_then(Value::as_str),
        eviction.get("kind").and_then(Value::as_str),
    ) {
        (None | Some("policy/v1" | "policy/v1beta1"), None | Some("Eviction")) => {}
        (version, kind) => {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a Eviction: the eviction subresource accepts policy/v1 and policy/v1beta1 Evictions",
                kind.unwrap_or("Eviction"),
                version.unwrap_or_default()
            )));
        }
    }
    if meta::name(&eviction) != name {
        return Err(ApiError::bad_request(
            "name in URL does not match name in Eviction object",
        ));
    }
    let body_namespace = meta::namespace(&eviction);
    if !body_namespace.is_empty() && body_namespace != namespace {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    let delete_body = match eviction.get("deleteOptions") {
        Some(d) if !d.is_null() => d.to_string().into_bytes(),
        _ => Vec::new(),
    };
    let mut delete = delete_options(&HashMap::new(), &delete_body)?;
    delete.dry_run |= request_dry_run;
    core.evict(pods, namespace, name, &eviction, delete).await?;
    Ok(json_response(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}
