//! The authorization attributes of an HTTP request, derived from its method,
//! path and query as upstream's `RequestInfoFactory` does: a resource request
//! (`/api/v1/...`, `/apis/{group}/{version}/...`) names a verb, API group,
//! resource, subresource, namespace and name; anything else (discovery,
//! `/version`, `/metrics`) is a non-resource request of a path and the
//! lower-cased HTTP method.

use http::Method;

use super::rbac::Request;

/// Namespace subresources that are not resources of their own (`/api/v1/namespaces/{ns}/status`).
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

/// The attributes of `method path?query`; `watch` is whether the query asks to watch.
pub fn of(method: &Method, path: &str, watch: bool) -> Request {
    let parts: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let non_resource = || Request::NonResource {
        path: path.to_owned(),
        verb: method.as_str().to_ascii_lowercase(),
    };
    // `/api/{version}/{resource...}` or `/apis/{group}/{version}/{resource...}`; shorter paths are discovery.
    let (group, rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return non_resource(),
    };
    let mut verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let mut namespace = "";
    let mut rest = rest;
    if let ["namespaces", ns, tail @ ..] = rest {
        namespace = ns;
        if let Some(next) = tail.first()
            && !NAMESPACE_SUBRESOURCES.contains(next)
        {
            rest = tail;
        }
    }
    let resource = rest.first().copied().unwrap_or_default();
    let name = rest.get(1).copied().unwrap_or_default();
    let subresource = rest.get(2).copied().unwrap_or_default();
    if rest.len() < 2 && verb == "get" {
        verb = if watch { "watch" } else { "list" };
    }
    // A WebSocket exec or attach is a GET, yet it needs `create` on the subresource as a SPDY POST does: upstream's
    // AuthorizePodWebsocketUpgradeCreatePermission (beta and on by default from 1.35; the 1.32 this server reports
    // authorized the GET as `get`, which let a role that may only read pods/exec run commands).
    if group.is_empty()
        && resource == "pods"
        && matches!(subresource, "exec" | "attach")
        && verb == "get"
    {
        verb = "create";
    }
    if verb == "delete" && rest.len() < 2 {
        verb = "deletecollection";
    }
    Request::Resource {
        namespace: namespace.to_owned(),
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource: resource.to_owned(),
        subresource: subresource.to_owned(),
        name: name.to_owned(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A resource request, its fields in the order kubectl's messages give them.
    pub(crate) fn resource(
        verb: &str,
        group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Request {
        Request::Resource {
            namespace: namespace.into(),
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
        }
    }

    #[test]
    fn collections_list_watch_create_and_deletecollection() {
        let path = "/api/v1/namespaces/default/pods";
        assert_eq!(
            of(&Method::GET, path, false),
            resource("list", "", "pods", "", "default", "")
        );
        assert_eq!(
            of(&Method::GET, path, true),
            resource("watch", "", "pods", "", "default", "")
        );
        assert_eq!(
            of(&Method::POST, path, false),
            resource("create", "", "pods", "", "default", "")
        );
        assert_eq!(
            of(&Method::DELETE, path, false),
            resource("deletecollection", "", "pods", "", "default", "")
        );
        assert_eq!(
            of(&Method::GET, "/apis/apps/v1/deployments", false),
            resource("list", "apps", "deployments", "", "", "")
        );
    }

    #[test]
    fn named_objects_and_subresources() {
        assert_eq!(
            of(&Method::GET, "/api/v1/namespaces/ns/pods/p/log", false),
            resource("get", "", "pods", "log", "ns", "p")
        );
        // A WebSocket exec or attach (GET) needs create, as a SPDY one (POST) does.
        for sub in ["exec", "attach"] {
            let path = format!("/api/v1/namespaces/ns/pods/p/{sub}");
            for method in [Method::GET, Method::POST] {
                assert_eq!(
                    of(&method, &path, false),
                    resource("create", "", "pods", sub, "ns", "p")
                );
            }
        }
        assert_eq!(
            of(
                &Method::PUT,
                "/apis/apps/v1/namespaces/ns/statefulsets/s/scale",
                false
            ),
            resource("update", "apps", "statefulsets", "scale", "ns", "s")
        );
        assert_eq!(
            of(
                &Method::POST,
                "/api/v1/namespaces/ns/serviceaccounts/sa/token",
                false
            ),
            resource("create", "", "serviceaccounts", "token", "ns", "sa")
        );
        assert_eq!(
            of(&Method::PATCH, "/api/v1/nodes/n/status", false),
            resource("patch", "", "nodes", "status", "", "n")
        );
        assert_eq!(
            of(&Method::DELETE, "/api/v1/namespaces/ns", false),
            resource("delete", "", "namespaces", "", "ns", "ns")
        );
        assert_eq!(
            of(&Method::PUT, "/api/v1/namespaces/ns/finalize", false),
            resource("update", "", "namespaces", "finalize", "ns", "ns")
        );
    }

    #[test]
    fn discovery_and_other_paths_are_non_resource_requests() {
        for path in [
            "/api",
            "/api/v1",
            "/apis",
            "/apis/apps",
            "/apis/apps/v1",
            "/version",
        ] {
            assert_eq!(
                of(&Method::GET, path, false),
                Request::NonResource {
                    path: path.into(),
                    verb: "get".into()
                }
            );
        }
        assert_eq!(
            of(&Method::POST, "/metrics", false),
            Request::NonResource {
                path: "/metrics".into(),
                verb: "post".into()
            }
        );
    }
}
