//! The `pods/{name}/exec`, `pods/{name}/attach` and `pods/{name}/portforward` subresources: the API server checks
//! the request and the pod as upstream's `ExecLocation`/`AttachLocation`/`PortForwardLocation` do, then hands the
//! connection to the pod's node's kubelet (`/exec/{namespace}/{pod}/{container}`, `/attach/…`,
//! `/portForward/{namespace}/{pod}`, see `kube_local_kubelet::kubelet`), the way kube-apiserver proxies an upgrade: the client's
//! upgrade request goes to the kubelet as it came, the kubelet's `101 Switching Protocols` comes back, and from then
//! on bytes are copied both ways. The API server does not speak the stream protocols itself; the kubelet negotiates
//! them (WebSocket `v5.channel.k8s.io`/`v4.channel.k8s.io` for exec and attach; SPDY/3.1, plain or in WebSocket, for
//! port-forward) and refuses what it does not serve in words the client shows. A pod whose node is down cannot be
//! reached: its kubelet does not answer.

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use http::{Method, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::api_error::{ApiError, ApiResult};
use crate::core::Core;
use crate::pod_log::{SEGMENT, choose_container, kubelet_address, kubelet_error};
use crate::registry::ResourceType;

/// The request headers handed to the kubelet unchanged: those that make the upgrade (the WebSocket key is answered
/// there) and the client's name.
const FORWARDED_HEADERS: [header::HeaderName; 7] = [
    header::CONNECTION,
    header::UPGRADE,
    header::SEC_WEBSOCKET_KEY,
    header::SEC_WEBSOCKET_VERSION,
    header::SEC_WEBSOCKET_PROTOCOL,
    header::USER_AGENT,
    header::HeaderName::from_static("x-stream-protocol-version"),
];

fn flag(q: &HashMap<String, String>, key: &str) -> bool {
    matches!(q.get(key).map(String::as_str), Some("true") | Some("1"))
}

/// Upstream's checks of `PodExecOptions`/`PodAttachOptions` that do not need the pod.
fn validate_options(subresource: &str, query: &str) -> ApiResult<HashMap<String, String>> {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let last: HashMap<String, String> = pairs.iter().cloned().collect();
    if subresource == "exec" && !pairs.iter().any(|(k, _)| k == "command") {
        return Err(ApiError::bad_request(
            "you must specify at least one command for the container",
        ));
    }
    if !["stdin", "stdout", "stderr"].iter().any(|k| flag(&last, k)) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    Ok(last)
}

/// GET or POST `pods/{name}/exec` or `pods/{name}/attach` (`subresource`).
pub async fn connect(
    core: &Core,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    subresource: &str,
    req: Request,
) -> ApiResult<Response> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let query = req.uri().query().unwrap_or_default().to_string();
    let options = validate_options(subresource, &query)?;
    let pod = core.get(rt, namespace, name)?;
    let container = choose_container(
        &pod,
        name,
        options
            .get("container")
            .filter(|c| !c.is_empty())
            .map(String::as_str),
    )?;
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let address = kubelet_address(core, node)?;
    let segment = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    let path = format!(
        "/{subresource}/{}/{}/{}?{query}",
        segment(namespace),
        segment(name),
        segment(&container)
    );
    forward(
        core,
        req,
        &address,
        &path,
        name,
        &format!("pods/{subresource}"),
    )
    .await
}

/// GET or POST `pods/{name}/portforward` (WebSocket-tunnelled or plain SPDY; the kubelet tells them apart).
pub async fn port_forward(
    core: &Core,
    rt: &ResourceType,
    namespace: &str,
    name: &str,
    req: Request,
) -> ApiResult<Response> {
    if req.method() != Method::GET && req.method() != Method::POST {
        return Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        ));
    }
    let pod = core.get(rt, namespace, name)?;
    let node = forwardable_node(&pod, name)?;
    let address = kubelet_address(core, node)?;
    let segment = |s: &str| percent_encoding::utf8_percent_encode(s, SEGMENT).to_string();
    let path = format!("/portForward/{}/{}", segment(namespace), segment(name));
    forward(core, req, &address, &path, name, "pods/portforward").await
}

/// The node of a pod that can be forwarded to, or a 400. kube-apiserver itself checks only that the pod has a node
/// (`pod P does not have a host assigned`) and leaves a pod without a running sandbox to the kubelet; here that case
/// is answered with the words kubectl uses when it checks the phase itself (`unable to forward port because pod is
/// not running. Current status=PHASE`).
fn forwardable_node<'p>(pod: &'p Value, name: &str) -> ApiResult<&'p str> {
    let text = |p: &str| pod.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let node = text("/spec/nodeName");
    if node.is_empty() {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    match text("/status/phase") {
        "Running" => Ok(node),
        phase => Err(ApiError::bad_request(format!(
            "unable to forward port because pod is not running. Current status={phase}"
        ))),
    }
}

/// Sends the client's upgrade request to the kubelet at `address`; on `101` answers the client the same and splices
/// the two upgraded connections, otherwise reports the kubelet's refusal.
async fn forward(
    core: &Core,
    mut req: Request,
    address: &str,
    path: &str,
    pod: &str,
    kind: &str,
) -> ApiResult<Response> {
    let mut sender = core.kubelet_client().connect(address).await?;
    let mut upstream = http::Request::builder()
        .method(req.method().clone())
        .uri(path)
        .header(header::HOST, address);
    for name in FORWARDED_HEADERS {
        for value in req.headers().get_all(&name) {
            upstream = upstream.header(&name, value);
        }
    }
    let upstream = upstream
        .body(Empty::new())
        .map_err(|e| ApiError::internal(format!("building the kubelet request {path}: {e}")))?;
    let mut answer = sender
        .send_request(upstream)
        .await
        .map_err(|e| ApiError::internal(format!("error dialing the kubelet at {address}: {e}")))?;
    let status = answer.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        let body = answer
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(kubelet_error(status, &body, pod, kind));
    }
    let kubelet_side = hyper::upgrade::on(&mut answer);
    let client_side = hyper::upgrade::on(&mut req);
    let mut response = Response::new(Body::empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    *response.headers_mut() = answer.headers().clone();
    tokio::spawn(async move {
        let (kubelet, client) = match tokio::join!(kubelet_side, client_side) {
            (Ok(k), Ok(c)) => (k, c),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(error = %e, "upgrading a pod stream");
                return;
            }
        };
        let (mut kubelet, mut client) = (TokioIo::new(kubelet), TokioIo::new(client));
        if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut kubelet).await {
            tracing::debug!(error = %e, "pod stream ended");
        }
    });
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked_before_the_pod() {
        let e = validate_options("exec", "stdout=true").unwrap_err();
        assert_eq!(
            e.message,
            "you must specify at least one command for the container"
        );
        let e = validate_options("exec", "command=ls").unwrap_err();
        assert_eq!(
            e.message,
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        let q = validate_options("exec", "command=ls&command=-l&stderr=true&container=c").unwrap();
        assert_eq!(q.get("container").map(String::as_str), Some("c"));
        assert!(validate_options("attach", "stdout=1").is_ok());
    }

    #[test]
    fn only_running_scheduled_pods_are_forwarded_to() {
        let pod = |node: &str, phase: &str| serde_json::json!({"spec": {"nodeName": node}, "status": {"phase": phase}});
        assert_eq!(forwardable_node(&pod("n", "Running"), "p").unwrap(), "n");
        let e = forwardable_node(&pod("", "Pending"), "p").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "pod p does not have a host assigned")
        );
        let e = forwardable_node(&pod("n", "Succeeded"), "p").unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (
                400,
                "unable to forward port because pod is not running. Current status=Succeeded"
            )
        );
    }
}
