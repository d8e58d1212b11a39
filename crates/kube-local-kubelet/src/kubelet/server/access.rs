//! Who may use the kubelet's endpoint, decided as the real kubelet's webhook modes decide: the caller is the user
//! of a client certificate the handshake verified against the cluster CA, else of a bearer token the API server
//! vouches for (TokenReview); a caller with neither gets 401. The user is then authorized by the API server
//! (SubjectAccessReview) for the `nodes` resource named after this node, with the request's verb and the
//! subresource its path maps to; a refusal is 403 in the kubelet's words.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::kubelet::Shared;
use kube_local_base::identity::ClientCertificate;

/// The authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Caller {
    name: String,
    uid: Option<String>,
    groups: Vec<String>,
}

/// What a request asks of the node, in RBAC's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attributes {
    verb: &'static str,
    subresource: &'static str,
}

/// The RBAC attributes of a request to the kubelet, as upstream maps them: the verb from the method (`create` for
/// every stream into a container: exec, attach, run, port-forward, also over a WebSocket GET), the
/// subresource from the path (`/stats` → `stats`, `/metrics` → `metrics`, `/logs` → `log`, `/spec` → `spec`,
/// anything else — `/pods`, `/containerLogs`, `/exec`, `/attach`, `/portForward`, `/healthz` — `proxy`).
fn attributes(method: &http::Method, path: &str) -> Attributes {
    let under = |prefix: &str| {
        path == prefix
            || path
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    // A stream into a container runs or reaches something in it, whatever the method: a WebSocket upgrade is a
    // GET, and `get` alone (which reads like read-only access) must not open a shell (as the API server asks
    // `create` of a WebSocket `pods/exec`).
    let stream = ["/exec", "/attach", "/run", "/portForward"]
        .iter()
        .any(|p| under(p));
    let verb = match *method {
        _ if stream => "create",
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "get",
    };
    let subresource = if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if under("/spec") {
        "spec"
    } else {
        "proxy"
    };
    Attributes { verb, subresource }
}

/// The middleware: lets through the requests of callers the API server authenticates and authorizes.
pub(super) async fn authorize(
    State(shared): State<Arc<Shared>>,
    request: Request,
    next: Next,
) -> Response {
    let credentials = Credentials::of(&request);
    let wanted = attributes(request.method(), request.uri().path());
    let caller = match authenticate(&shared.client, credentials).await {
        Ok(Some(caller)) => caller,
        Ok(None) => return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Err(e) => {
            tracing::warn!(node = %shared.node.name, error = %e, "authenticating a kubelet request");
            return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
        }
    };
    match allowed(&shared.client, &caller, &shared.node.name, &wanted).await {
        Ok(true) => next.run(request).await,
        Ok(false) => (
            StatusCode::FORBIDDEN,
            format!(
                "Forbidden (user={}, verb={}, resource=nodes, subresource={})",
                caller.name, wanted.verb, wanted.subresource
            ),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!(node = %shared.node.name, error = %e, "authorizing a kubelet request");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "Authorization error (user={}, verb={}, resource=nodes, subresource={})",
                    caller.name, wanted.verb, wanted.subresource
                ),
            )
                .into_response()
        }
    }
}

/// What a request presents to prove who sent it.
enum Credentials {
    /// The subject of the client certificate the TLS handshake verified.
    Certificate(ClientCertificate),
    /// An `Authorization: Bearer` token.
    Token(String),
    None,
}

impl Credentials {
    fn of(request: &Request) -> Self {
        if let Some(certificate) = request.extensions().get::<ClientCertificate>() {
            return Credentials::Certificate(certificate.clone());
        }
        request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .map_or(Credentials::None, |token| {
                Credentials::Token(token.to_owned())
            })
    }
}

/// The caller presenting `credentials`: a verified client certificate's subject, else a bearer token's user by
/// TokenReview; `None` when it presents neither or the token is not valid.
async fn authenticate(
    client: &kube::Client,
    credentials: Credentials,
) -> Result<Option<Caller>, kube::Error> {
    let token = match credentials {
        Credentials::Certificate(ClientCertificate(user)) => {
            return Ok(Some(Caller {
                name: user.name,
                uid: None,
                groups: user.groups,
            }));
        }
        Credentials::Token(token) => token,
        Credentials::None => return Ok(None),
    };
    let review = TokenReview {
        spec: TokenReviewSpec {
            token,
            audiences: None,
        },
        ..TokenReview::default()
    };
    let answer = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
        return Ok(None);
    };
    Ok(status.user.and_then(|user| {
        Some(Caller {
            name: user.username?,
            uid: user.uid,
            groups: user.groups.unwrap_or_default(),
        })
    }))
}

/// Whether the API server lets `caller` do `wanted` to node `node`.
async fn allowed(
    client: &kube::Client,
    caller: &Caller,
    node: &str,
    wanted: &Attributes,
) -> Result<bool, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(caller.name.clone()),
            uid: caller.uid.clone(),
            groups: Some(caller.groups.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(wanted.verb.to_owned()),
                resource: Some("nodes".to_owned()),
                subresource: Some(wanted.subresource.to_owned()),
                name: Some(node.to_owned()),
                version: Some("v1".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_the_kubelets_subresources() {
        let get = http::Method::GET;
        let post = http::Method::POST;
        for (method, path, verb, subresource) in [
            (&get, "/pods", "get", "proxy"),
            (&get, "/containerLogs/ns/p/c", "get", "proxy"),
            (&post, "/exec/ns/p/c", "create", "proxy"),
            (&get, "/exec/ns/p/c", "create", "proxy"),
            (&get, "/attach/ns/p/c", "create", "proxy"),
            (&get, "/portForward/ns/p", "create", "proxy"),
            (&get, "/exect", "get", "proxy"),
            (&get, "/stats/summary", "get", "stats"),
            (&get, "/metrics", "get", "metrics"),
            (&get, "/metricsx", "get", "proxy"),
            (&get, "/logs/syslog", "get", "log"),
            (&get, "/spec/", "get", "spec"),
            (&get, "/healthz", "get", "proxy"),
        ] {
            assert_eq!(
                attributes(method, path),
                Attributes { verb, subresource },
                "{method} {path}"
            );
        }
    }
}
