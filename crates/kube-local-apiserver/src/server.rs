//! HTTP front end: routes Kubernetes REST paths to the core, parses query options, and renders responses.
//!
//! This module owns the routing (`dispatch`: discovery, OpenAPI, reviews, resource paths); its children own the
//! rest: [`access`] (authentication and authorization of each request), [`options`] (query options: write, delete,
//! selectors), [`body`] (request bodies by content type), [`resource`] (requests on a resource or one of its
//! subresources), [`responses`] (JSON, Status and discovery responses).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderValue, Method, header};

use crate::api_error::{ApiError, ApiResult};
use crate::api_traffic::{ApiTraffic, Verb};
use crate::auth::authenticate::Authenticator;
use crate::auth::rbac::UserInfo;
use crate::core::Core;
use crate::discovery;
use crate::openapi;
use crate::registry::ResourceType;
use crate::subresource::PathSubresource;

mod access;
mod body;
mod options;
mod protobuf;
mod resource;
mod responses;

use access::admit;
use body::{decode_object, read_body};
use options::{flag, header_str, query_map};
use resource::resource;
use responses::{aggregated_response, error_response, json_response, page_not_found};

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
