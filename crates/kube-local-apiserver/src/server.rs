//! HTTP front end: routes Kubernetes REST paths to the core, parses query options, and renders responses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderValue, Method, StatusCode, header};
use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult};
use crate::api_traffic::{ApiTraffic, Verb};
use crate::auth::authenticate::{self, Authenticator};
use crate::auth::rbac::UserInfo;
use crate::core::{
    Core, DeleteOptions, Deleted, FieldValidation, Propagation, Subresource, WriteOptions, Written,
};
use crate::discovery;
use crate::list::{self, ListQuery};
use crate::meta;
use crate::openapi;
use crate::output::{self, Format};
use crate::patch::PatchKind;
use crate::registry::ResourceType;
use crate::scale;
use crate::selector::{FieldSelector, LabelSelector};
use crate::subresource::PathSubresource;
use crate::watch::{self, WatchQuery, WatchSettings};

mod protobuf;

const MAX_BODY: usize = 3 * 1024 * 1024;

pub struct Server {
    pub core: Arc<Core>,
    pub address: String,
    pub bookmark_interval: Duration,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// Request counters and injected faults (see [`crate::api_traffic`]).
    pub traffic: Arc<ApiTraffic>,
    /// Authenticates and authorizes every request when set; otherwise every caller is the admin.
    pub auth: Option<Arc<Authenticator>>,
}

pub fn router(server: Arc<Server>) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(server)
}

fn json_response(code: u16, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// What kube-apiserver's mux answers for a path under no served API group or version: plain text, not a Status
/// (clients read the code; kubectl says "the server could not find the requested resource").
fn page_not_found() -> Response {
    let mut resp = Response::new(Body::from("404 page not found\n"));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn error_response(e: &ApiError) -> Response {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(seconds) = e.retry_after_seconds() {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    resp
}

fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w);
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append(header::WARNING, v);
        }
    }
    resp
}

async fn handle(State(server): State<Arc<Server>>, mut req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = match &server.auth {
        None => dispatch(&server, req).await,
        Some(auth) => match admit(&server.core, auth, &req) {
            Ok(Some(user)) => {
                req.extensions_mut().insert(user);
                dispatch(&server, req).await
            }
            Ok(None) => dispatch(&server, req).await,
            Err(e) => Err(e),
        },
    };
    let resp = match result {
        Ok(r) => r,
        Err(e) => error_response(&e),
    };
    tracing::debug!(%method, %path, status = resp.status().as_u16(), "request");
    resp
}

/// Authenticates and authorizes `req`: its user (`None` for the public health and version paths),
/// or the 401 or 403 to answer.
fn admit(core: &Core, auth: &Authenticator, req: &Request) -> ApiResult<Option<UserInfo>> {
    let path = req.uri().path();
    if authenticate::is_public(path) {
        return Ok(None);
    }
    let user = auth
        .authenticate(
            core,
            req.headers(),
            req.extensions().get::<authenticate::ClientCertificate>(),
        )
        .ok_or_else(ApiError::unauthorized)?;
    let attributes =
        crate::auth::attributes::of(req.method(), path, flag(&query_map(req), "watch"));
    let decision = crate::auth::rbac::authorize(core, &user, &attributes);
    if decision.allowed {
        auth.log.record_allowed(&user, &attributes, decision.grant);
        Ok(Some(user))
    } else {
        auth.log.record_forbidden(&user, &attributes);
        Err(crate::auth::forbidden(&user, &attributes))
    }
}

/// A server-side apply that creates its object needs `create` as well as `patch` (as upstream's patch handler
/// authorizes the create it turns into); checked only when the object does not exist yet.
fn authorize_create_by_apply(
    server: &Server,
    req: &Request,
    exists: impl FnOnce() -> bool,
) -> ApiResult<()> {
    let (Some(auth), Some(user)) = (&server.auth, req.extensions().get::<UserInfo>()) else {
        return Ok(());
    };
    let mut attributes = crate::auth::attributes::of(req.method(), req.uri().path(), false);
    match &mut attributes {
        crate::auth::rbac::Request::Resource {
            verb, subresource, ..
        } if subresource.is_empty() => *verb = "create".into(),
        _ => return Ok(()),
    }
    if exists() {
        return Ok(());
    }
    let decision = crate::auth::rbac::authorize(&server.core, user, &attributes);
    if decision.allowed {
        auth.log.record_allowed(user, &attributes, decision.grant);
        Ok(())
    } else {
        auth.log.record_forbidden(user, &attributes);
        Err(crate::auth::forbidden(user, &attributes))
    }
}

fn query_map(req: &Request) -> HashMap<String, String> {
    req.uri()
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn header_str(req: &Request, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn flag(q: &HashMap<String, String>, key: &str) -> bool {
    matches!(q.get(key).map(String::as_str), Some("true") | Some("1"))
}

/// A parsed resource path.
struct Target {
    rt: Arc<ResourceType>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<PathSubresource>,
}

async fn dispatch(server: &Server, req: Request) -> ApiResult<Response> {
    let path = req.uri().path().to_string();
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let accept = header_str(&req, header::ACCEPT).map(String::from);
    let reg = &server.core.registry;
    let get_only = || -> ApiResult<()> {
        if req.method() == Method::GET {
            Ok(())
        } else {
            Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ))
        }
    };
    match segs.as_slice() {
        ["version"] => {
            get_only()?;
            return Ok(json_response(200, &discovery::version()));
        }
        ["metrics"] => {
            get_only()?;
            let mut r = Response::new(Body::from(server.traffic.counts().to_prometheus()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            return Ok(r);
        }
        ["healthz"] | ["livez"] | ["readyz"] => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            return Ok(r);
        }
        ["api"] => {
            get_only()?;
            if discovery::wants_aggregated(accept.as_deref()) {
                return Ok(aggregated_response(&discovery::aggregated(reg, true)));
            }
            return Ok(json_response(
                200,
                &discovery::api_versions(&server.address),
            ));
        }
        ["apis"] => {
            get_only()?;
            if discovery::wants_aggregated(accept.as_deref()) {
                return Ok(aggregated_response(&discovery::aggregated(reg, false)));
            }
            return Ok(json_response(200, &discovery::api_group_list(reg)));
        }
        ["api", "v1"] => {
            get_only()?;
            return discovery::api_resource_list(reg, "", "v1")
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::not_found_path);
        }
        ["apis", group] => {
            let Some(d) = discovery::api_group(reg, group) else {
                return Ok(page_not_found());
            };
            get_only()?;
            return Ok(json_response(200, &d));
        }
        ["apis", group, version] => {
            let Some(d) = discovery::api_resource_list(reg, group, version) else {
                return Ok(page_not_found());
            };
            get_only()?;
            return Ok(json_response(200, &d));
        }
        ["openapi", "v3"] => {
            get_only()?;
            return Ok(json_response(200, &openapi::index(reg)));
        }
        ["openapi", "v3", "api", version] => {
            get_only()?;
            return openapi::document(reg, "", version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::not_found_path);
        }
        ["openapi", "v3", "apis", group, version] => {
            get_only()?;
            return openapi::document(reg, group, version)
                .map(|d| json_response(200, &d))
                .ok_or_else(ApiError::not_found_path);
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (*g, *v, rest),
        _ => return Err(ApiError::not_found_path()),
    };
    if !group.is_empty() && discovery::api_resource_list(reg, group, version).is_none() {
        return Ok(page_not_found());
    }
    let (namespace, plural, name, sub) = match rest {
        ["namespaces", ns, plural, tail @ ..]
            if !(group.is_empty()
                && tail.is_empty()
                && matches!(*plural, "status" | "finalize")) =>
        {
            (
                Some(ns.to_string()),
                *plural,
                tail.first().map(|s| s.to_string()),
                tail.get(1).map(|s| s.to_string()),
            )
        }
        [plural, tail @ ..] => (
            None,
            *plural,
            tail.first().map(|s| s.to_string()),
            tail.get(1).map(|s| s.to_string()),
        ),
        [] => return Err(ApiError::not_found_path()),
    };
    if rest.len() > 5 {
        return Err(ApiError::not_found_path());
    }
    let rt = reg
        .find(group, version, plural)
        .ok_or_else(ApiError::not_found_path)?;
    if namespace.is_some() && !rt.namespaced {
        return Err(ApiError::not_found_path());
    }
    let sub = match sub {
        None => None,
        Some(segment) => Some(
            PathSubresource::of(&segment, &rt, name.is_some())
                .ok_or_else(ApiError::not_found_path)?,
        ),
    };
    if let Some(verb) = Verb::of(
        req.method(),
        name.is_some(),
        flag(&query_map(&req), "watch"),
        header_str(&req, header::CONTENT_TYPE),
    ) {
        let counted = match sub {
            Some(s) => format!("{}/{}", rt.plural, s.as_str()),
            None => rt.plural.clone(),
        };
        server.traffic.record(verb, &counted)?;
    }
    if rt.is_read_only() && req.method() != Method::GET {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    if rt.create_only || sub == Some(PathSubresource::Token) {
        return review(server, req, &rt, namespace, name, sub).await;
    }
    resource(
        server,
        req,
        Target {
            rt,
            namespace,
            name,
            subresource: sub,
        },
    )
    .await
}

/// The create-only APIs of [`crate::auth`]: TokenReview, SubjectAccessReview,
/// SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview (collections) and a
/// ServiceAccount's `token` subresource.
async fn review(
    server: &Server,
    req: Request,
    rt: &ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<PathSubresource>,
) -> ApiResult<Response> {
    let token_of = match (&name, subresource) {
        (Some(name), Some(PathSubresource::Token)) => Some(name.clone()),
        (None, None) => None,
        _ => return Err(ApiError::not_found_path()),
    };
    if req.method() != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    // The caller of a self review; without authentication every caller is the admin.
    let user = req
        .extensions()
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(Authenticator::admin);
    let (ct, body) = read_body(req).await?;
    let object = decode_object(rt, subresource, ct.as_deref(), &body)?;
    let core = &server.core;
    let answer = match token_of {
        Some(name) => crate::auth::token_request(
            core,
            namespace.as_deref().unwrap_or_default(),
            &name,
            object,
        )?,
        None => match rt.kind.as_str() {
            "TokenReview" => crate::auth::token_review(core, object)?,
            "SelfSubjectAccessReview" => {
                crate::auth::self_subject_access_review(core, &user, object)?
            }
            "SelfSubjectRulesReview" => {
                crate::auth::self_subject_rules_review(core, &user, object)?
            }
            "SelfSubjectReview" => crate::auth::self_subject_review(&user, object),
            _ => crate::auth::subject_access_review(core, object)?,
        },
    };
    Ok(json_response(201, &answer))
}

fn aggregated_response(body: &Value) -> Response {
    let mut r = json_response(200, body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(discovery::AGGREGATED_CONTENT_TYPE),
    );
    r
}

async fn read_body(req: Request) -> ApiResult<(Option<String>, bytes::Bytes)> {
    let ct = header_str(&req, header::CONTENT_TYPE).map(String::from);
    let body = axum::body::to_bytes(req.into_body(), MAX_BODY)
        .await
        .map_err(|e| {
            ApiError::bad_request(format!("unable to read request body: {e}"))
                .with_reason("RequestEntityTooLarge")
        })?;
    Ok((ct, body))
}

/// The apiVersion and kind a write's body is decoded as when it does not say (protobuf envelopes may not).
fn body_kind(rt: &ResourceType, subresource: Option<PathSubresource>) -> (String, String) {
    match subresource {
        Some(PathSubresource::Scale) => ("autoscaling/v1".into(), "Scale".into()),
        Some(PathSubresource::Token) => ("authentication.k8s.io/v1".into(), "TokenRequest".into()),
        Some(PathSubresource::Eviction) => ("policy/v1".into(), "Eviction".into()),
        _ if rt.group.is_empty() => (rt.version.clone(), rt.kind.clone()),
        _ => (format!("{}/{}", rt.group, rt.version), rt.kind.clone()),
    }
}

fn decode_object(
    rt: &ResourceType,
    subresource: Option<PathSubresource>,
    ct: Option<&str>,
    body: &[u8],
) -> ApiResult<Value> {
    let base = ct
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "application/json" | "" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("the object provided is unrecognized: {e}"))
        }),
        "application/yaml" => serde_saphyr::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}"))),
        // Custom resources have no protobuf form upstream either.
        protobuf::MEDIA_TYPE if !rt.is_custom() => {
            let (api_version, kind) = body_kind(rt, subresource);
            protobuf::decode(body, &api_version, &kind)
        }
        other => Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml{}; got {other:?}",
            if rt.is_custom() {
                String::new()
            } else {
                format!(", {}", protobuf::MEDIA_TYPE)
            }
        ))),
    }
}

fn write_options(q: &HashMap<String, String>, user_agent: Option<&str>) -> ApiResult<WriteOptions> {
    let dry_run = match q.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other:?}: supported values: \"All\""
            )));
        }
    };
    let field_validation = match q.get("fieldValidation").map(String::as_str) {
        None | Some("") | Some("Warn") => FieldValidation::Warn,
        Some("Strict") => FieldValidation::Strict,
        Some("Ignore") => FieldValidation::Ignore,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            )));
        }
    };
    let field_manager = q.get("fieldManager").cloned().filter(|m| !m.is_empty());
    Ok(WriteOptions {
        dry_run,
        field_manager: field_manager.unwrap_or_else(|| {
            user_agent
                .and_then(|ua| ua.split('/').next())
                .unwrap_or("unknown")
                .to_string()
        }),
        field_validation,
        force: flag(q, "force"),
        internal: false,
    })
}

fn explicit_manager(q: &HashMap<String, String>) -> bool {
    q.get("fieldManager").is_some_and(|m| !m.is_empty())
}

fn written_response(format: Format, rt: &ResourceType, w: Written) -> Response {
    let code = if w.created { 201 } else { 200 };
    with_warnings(
        json_response(code, &output::object(format, rt, w.object)),
        &w.warnings,
    )
}

fn delete_options(q: &HashMap<String, String>, body: &[u8]) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions::default();
    let parsed: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("unable to decode DeleteOptions: {e}")))?
    };
    let get = |k: &str| -> Option<String> {
        q.get(k).cloned().or_else(|| {
            parsed.get(k).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
    };
    opts.propagation = match get("propagationPolicy").as_deref() {
        None | Some("") | Some("null") => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::invalid(
                "meta.k8s.io",
                "DeleteOptions",
                "",
                vec![crate::api_error::FieldCause::unsupported(
                    "propagationPolicy",
                    &json!(other),
                    &[
                        json!("Foreground"),
                        json!("Background"),
                        json!("Orphan"),
                        json!("nil"),
                    ],
                )],
            ));
        }
    };
    if opts.propagation.is_none() {
        match get("orphanDependents").as_deref() {
            Some("true") => opts.propagation = Some(Propagation::Orphan),
            Some("false") => opts.propagation = Some(Propagation::Background),
            _ => {}
        }
    }
    opts.grace_period_seconds = get("gracePeriodSeconds").and_then(|g| g.parse().ok());
    opts.dry_run = match get("dryRun").as_deref() {
        None | Some("") | Some("[]") => false,
        Some(v) if v.contains("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid dry run value: {other}"
            )));
        }
    };
    if let Some(p) = parsed.get("preconditions") {
        opts.precondition_uid = p.get("uid").and_then(Value::as_str).map(String::from);
        opts.precondition_rv = p
            .get("resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
    }
    Ok(opts)
}

fn selectors(
    rt: &ResourceType,
    q: &HashMap<String, String>,
) -> ApiResult<(LabelSelector, FieldSelector)> {
    let labels = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let extra: Vec<String> = rt
        .custom
        .as_ref()
        .map(|c| c.selectable_fields.clone())
        .unwrap_or_default();
    let fields = FieldSelector::parse(
        q.get("fieldSelector").map(String::as_str).unwrap_or(""),
        &rt.group,
        &rt.plural,
        &extra,
    )?;
    Ok((labels, fields))
}

async fn resource(server: &Server, req: Request, t: Target) -> ApiResult<Response> {
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
async fn eviction(
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
