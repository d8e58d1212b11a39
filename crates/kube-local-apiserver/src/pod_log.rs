//! The `pods/{name}/log` subresource: validates `PodLogOptions`, picks the container as upstream's `LogLocation` does,
//! and streams the answer of the pod's node's kubelet (`/containerLogs/...` at the Node's InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port`), mapping kubelet errors the way upstream's response checker does.

use std::collections::HashMap;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use serde_json::{Value, json};

use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::core::Core;
use crate::registry::ResourceType;

/// The query parameters of a log request (upstream `PodLogOptions`).
#[derive(Debug, Default, PartialEq)]
struct LogOptions {
    container: Option<String>,
    follow: bool,
    previous: bool,
    timestamps: bool,
    since_seconds: Option<i64>,
    since_time: Option<String>,
    tail_lines: Option<i64>,
    limit_bytes: Option<i64>,
}

fn boolean(q: &HashMap<String, String>, key: &str) -> ApiResult<bool> {
    match q.get(key).map(String::as_str) {
        None | Some("") | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid value {other:?} for {key}: strconv.ParseBool: parsing {other:?}: invalid syntax"
        ))),
    }
}

fn integer(q: &HashMap<String, String>, key: &str) -> ApiResult<Option<i64>> {
    q.get(key)
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {v:?} for {key}: strconv.ParseInt: parsing {v:?}: invalid syntax"
                ))
            })
        })
        .transpose()
}

impl LogOptions {
    fn parse(q: &HashMap<String, String>) -> ApiResult<LogOptions> {
        Ok(LogOptions {
            container: q.get("container").filter(|c| !c.is_empty()).cloned(),
            follow: boolean(q, "follow")?,
            previous: boolean(q, "previous")?,
            timestamps: boolean(q, "timestamps")?,
            since_seconds: integer(q, "sinceSeconds")?,
            since_time: q.get("sinceTime").filter(|t| !t.is_empty()).cloned(),
            tail_lines: integer(q, "tailLines")?,
            limit_bytes: integer(q, "limitBytes")?,
        })
    }

    /// Upstream `ValidatePodLogOptions`.
    fn validate(&self, pod: &str) -> ApiResult<()> {
        let mut causes = Vec::new();
        if let Some(t) = self.tail_lines.filter(|t| *t < 0) {
            causes.push(FieldCause::invalid(
                "tailLines",
                &json!(t),
                "must be greater than or equal to 0",
            ));
        }
        if let Some(l) = self.limit_bytes.filter(|l| *l < 1) {
            causes.push(FieldCause::invalid(
                "limitBytes",
                &json!(l),
                "must be greater than 0",
            ));
        }
        if self.since_seconds.is_some() && self.since_time.is_some() {
            causes.push(FieldCause::forbidden(
                "",
                "at most one of `sinceTime` or `sinceSeconds` may be specified",
            ));
        }
        if let Some(s) = self.since_seconds.filter(|s| *s < 1) {
            causes.push(FieldCause::invalid(
                "sinceSeconds",
                &json!(s),
                "must be greater than 0",
            ));
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::invalid("", "PodLogOptions", pod, causes))
        }
    }

    /// The kubelet's query, as upstream's `LogLocation` encodes it.
    fn kubelet_query(&self) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        if self.follow {
            q.append_pair("follow", "true");
        }
        if self.previous {
            q.append_pair("previous", "true");
        }
        if self.timestamps {
            q.append_pair("timestamps", "true");
        }
        if let Some(s) = self.since_seconds {
            q.append_pair("sinceSeconds", &s.to_string());
        }
        if let Some(t) = &self.since_time {
            q.append_pair("sinceTime", t);
        }
        if let Some(t) = self.tail_lines {
            q.append_pair("tailLines", &t.to_string());
        }
        if let Some(l) = self.limit_bytes {
            q.append_pair("limitBytes", &l.to_string());
        }
        q.finish()
    }
}

fn names(containers: Option<&Value>) -> Vec<String> {
    containers
        .and_then(Value::as_array)
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The container a log, exec or attach request is for: the named one (a container, an init container or an
/// ephemeral container), or the only container.
pub(crate) fn choose_container(
    pod: &Value,
    name: &str,
    requested: Option<&str>,
) -> ApiResult<String> {
    let containers = names(pod.pointer("/spec/containers"));
    let init = names(pod.pointer("/spec/initContainers"));
    let ephemeral = names(pod.pointer("/spec/ephemeralContainers"));
    match requested {
        Some(c)
            if containers
                .iter()
                .chain(&init)
                .chain(&ephemeral)
                .any(|n| n == c) =>
        {
            Ok(c.to_string())
        }
        Some(c) => Err(ApiError::bad_request(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => match containers.as_slice() {
            [only] => Ok(only.clone()),
            [] => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}"
            ))),
            many => {
                let mut message = format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                );
                if !init.is_empty() {
                    message.push_str(&format!(
                        " or one of the init containers: [{}]",
                        init.join(" ")
                    ));
                }
                if !ephemeral.is_empty() {
                    message.push_str(&format!(
                        " or one of the ephemeral containers: [{}]",
                        ephemeral.join(" ")
                    ));
                }
                Err(ApiError::bad_request(message))
            }
        },
    }
}

/// Where the node's kubelet serves: its InternalIP and the advertised kubelet port.
pub(crate) fn kubelet_address(core: &Core, node_name: &str) -> ApiResult<String> {
    let nodes = core
        .registry
        .find("", "v1", "nodes")
        .ok_or_else(|| ApiError::internal("nodes are not served"))?;
    let node = core.get(&nodes, "", node_name)?;
    let ip = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .and_then(|addrs| {
            addrs
                .iter()
                .find(|a| a.get("type").and_then(Value::as_str) == Some("InternalIP"))
        })
        .and_then(|a| a.get("address").and_then(Value::as_str))
        .ok_or_else(|| {
            ApiError::internal(format!("node {node_name:?} has no InternalIP address"))
        })?;
    let port = node
        .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
        .and_then(Value::as_i64)
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            ApiError::internal(format!(
                "node {node_name:?} does not advertise a kubelet port (status.daemonEndpoints.kubeletEndpoint.Port)"
            ))
        })?;
    Ok(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// A kubelet's non-2xx answer about `pod`'s `kind` (`pods/log`, `pods/exec`) as the API server reports it (upstream
/// `GenericHttpResponseChecker`).
pub(crate) fn kubelet_error(code: StatusCode, body: &[u8], pod: &str, kind: &str) -> ApiError {
    let text = String::from_utf8_lossy(body).trim_end().to_string();
    match code {
        StatusCode::BAD_REQUEST => ApiError::bad_request(text),
        StatusCode::INTERNAL_SERVER_ERROR => ApiError::internal(text),
        StatusCode::NOT_FOUND => ApiError {
            code: 404,
            reason: "NotFound".into(),
            message: format!("the server could not find the requested resource ( {kind} {pod})"),
            details: Some(Box::new(json!({
                "name": pod, "kind": kind,
                "causes": [{"reason": "UnexpectedServerResponse", "message": text}],
            }))),
        },
        other => ApiError {
            code: other.as_u16(),
            reason: "Unknown".into(),
            message: format!(
                "the server responded with the status code {} but did not return more information ( {kind} {pod})",
                other.as_u16()
            ),
            details: Some(Box::new(json!({
                "name": pod, "kind": kind,
                "causes": [{"reason": "UnexpectedServerResponse", "message": text}],
            }))),
        },
    }
}

fn text_response(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    resp
}

/// GET `pods/{name}/log`.
pub async fn get(
    core: &Core,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    query: &HashMap<String, String>,
) -> ApiResult<Response> {
    let opts = LogOptions::parse(query)?;
    opts.validate(name)?;
    let pod = core.get(rt, namespace, name)?;
    let container = choose_container(&pod, name, opts.container.as_deref())?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        // Upstream answers an unscheduled pod's log with an empty stream.
        return Ok(text_response(Body::empty()));
    }
    let address = kubelet_address(core, node)?;
    let path = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    let mut uri = format!(
        "/containerLogs/{}/{}/{}",
        path(namespace),
        path(name),
        path(&container)
    );
    let q = opts.kubelet_query();
    if !q.is_empty() {
        uri.push('?');
        uri.push_str(&q);
    }
    let mut sender = core.kubelet_client().connect(&address).await?;
    let req = http::Request::get(&uri)
        .header(header::HOST, &address)
        .body(Empty::new())
        .map_err(|e| ApiError::internal(format!("building the kubelet request {uri}: {e}")))?;
    let resp = sender.send_request(req).await.map_err(|e| {
        ApiError::internal(format!(
            "Get {:?}: failed to reach the kubelet of node {node:?}: {e}",
            format!("{address}{uri}")
        ))
    })?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(kubelet_error(status, &body, name, "pods/log"));
    }
    Ok(text_response(Body::new(resp.into_body())))
}

/// Characters escaped in one path segment.
pub(crate) const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_are_validated_like_upstream() {
        let opts = LogOptions::parse(&q(&[("tailLines", "-1"), ("limitBytes", "0")])).unwrap();
        let err = opts.validate("p").unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message
                .starts_with("PodLogOptions \"p\" is invalid: [tailLines: Invalid value: -1"),
            "{}",
            err.message
        );
        let both = LogOptions::parse(&q(&[("sinceSeconds", "5"), ("sinceTime", "x")])).unwrap();
        assert!(both.validate("p").is_err());
        assert_eq!(
            LogOptions::parse(&q(&[("tailLines", "x")]))
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn the_kubelet_query_carries_only_set_options() {
        let opts = LogOptions::parse(&q(&[
            ("follow", "true"),
            ("tailLines", "3"),
            ("container", "c"),
        ]))
        .unwrap();
        assert_eq!(opts.kubelet_query(), "follow=true&tailLines=3");
        assert_eq!(LogOptions::default().kubelet_query(), "");
    }

    #[test]
    fn the_container_is_chosen_like_upstream() {
        let pod = json!({"spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b"}],
            "ephemeralContainers": [{"name": "debugger"}],
        }});
        let err = choose_container(&pod, "p", None).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the init containers: [init] or one of the ephemeral containers: [debugger]"
        );
        assert_eq!(choose_container(&pod, "p", Some("init")).unwrap(), "init");
        assert_eq!(
            choose_container(&pod, "p", Some("debugger")).unwrap(),
            "debugger"
        );
        assert_eq!(
            choose_container(&pod, "p", Some("z")).unwrap_err().message,
            "container z is not valid for pod p"
        );
        let single = json!({"spec": {"containers": [{"name": "only"}]}});
        assert_eq!(choose_container(&single, "p", None).unwrap(), "only");
    }
}
