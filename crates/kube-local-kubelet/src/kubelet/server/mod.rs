//! The kubelet's HTTP endpoint, the way the API server reaches a real kubelet for a pod's streams:
//!
//! - `GET /containerLogs/{namespace}/{pod}/{container}` — a container's log ([`logs`]);
//! - `GET /exec/{namespace}/{pod}/{container}?command=…` — a command run in a container ([`exec`]);
//! - `GET /attach/{namespace}/{pod}/{container}` — a running container's output ([`attach`]);
//! - `GET`/`POST /portForward/{namespace}/{pod}` — `kubectl port-forward` to the pod's address ([`port_forward`]);
//! - `GET /healthz` — `ok` while the kubelet runs;
//! - `GET /pods` — a `v1` PodList of the pods this kubelet runs, with the status it last computed.
//!
//! With [`super::KubeletConfig::serving`] the endpoint speaks HTTPS with a certificate of the cluster CA and, when
//! asked, lets only authenticated and authorized callers in ([`access`]), as a kubelet with webhook authentication
//! and authorization does; the API server reaches it with its kubelet-client certificate (`kube_local_apiserver::kubelet_client`).
//!
//! Exec and attach are WebSocket upgrades speaking the channel protocol of [`channels`], port-forward SPDY/3.1
//! (plain, or tunnelled in WebSocket); the API server checks the request and the pod, then hands the upgraded
//! connection through (see the API server's `pod_exec`). The endpoint listens on
//! the Node's InternalIP, and its port is published in the Node's `status.daemonEndpoints.kubeletEndpoint.Port`.

mod access;
mod attach;
mod channels;
mod exec;
mod logs;
mod port_forward;
mod transport;

use std::sync::Arc;

use axum::extract::ws::WebSocketUpgrade;
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::Shared;
use super::pod_worker::PodRuntime;

/// Starts serving; returns the port.
pub async fn start(
    shared: Arc<Shared>,
    tasks: &mut crate::informer::Tasks,
) -> std::io::Result<u16> {
    let listener = tokio::net::TcpListener::bind((shared.host_ip.as_str(), 0)).await?;
    let port = listener.local_addr()?.port();
    let mut app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/pods", get(pods))
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec::exec).post(exec::exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(attach::attach).post(attach::attach),
        )
        .route(
            "/portForward/{namespace}/{pod}",
            get(port_forward::port_forward).post(port_forward::port_forward),
        )
        .with_state(shared.clone());
    let Some(serving) = &shared.config.serving else {
        tasks.spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "kubelet endpoint stopped");
            }
        });
        return Ok(port);
    };
    if serving.authorize {
        app = app.layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            access::authorize,
        ));
    }
    let tls = serving
        .ca
        .issue(&[shared.host_ip.as_str(), shared.node.name.as_str()])
        .and_then(|issued| issued.server_config_with_client_certificates(&serving.ca.ca_der()))
        .map_err(std::io::Error::other)?;
    tasks.spawn(crate::https::serve(
        listener,
        app,
        tls,
        std::future::pending(),
    ));
    Ok(port)
}

/// The pods this kubelet runs, as its pod manager knows them (the status is the kubelet's own, not the API's copy).
async fn pods(axum::extract::State(shared): axum::extract::State<Arc<Shared>>) -> Response {
    let mut items: Vec<k8s_openapi::api::core::v1::Pod> = shared
        .running
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .map(|rt| {
            let mut pod = rt.pod();
            pod.status = Some(rt.status_now());
            pod
        })
        .collect();
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    let list = serde_json::json!({
        "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items,
    });
    axum::Json(list).into_response()
}

fn error(code: StatusCode, message: String) -> Response {
    (code, message).into_response()
}

/// Why the kubelet refuses a stream: the status and text it answers with (see [`error`]).
type Refusal = (StatusCode, String);

/// The running pod and the running container a stream is for, or the kubelet's answer when there is none: 404 for
/// a pod this kubelet does not run (upstream's "pod does not exist"), 400 for a container that is not running.
fn running_container(
    shared: &Shared,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<(Arc<PodRuntime>, i32), Refusal> {
    let Some(rt) = shared.running_pod(namespace, pod) else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("pod \"{namespace}/{pod}\" does not exist"),
        ));
    };
    match rt.pid(container) {
        Some(pid) => Ok((rt, pid)),
        None => Err((
            StatusCode::BAD_REQUEST,
            format!("container {container:?} in pod {pod:?} is not running"),
        )),
    }
}

/// The query of an exec or attach request, repeated keys kept (`command=a&command=b`).
fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

/// A boolean stream option as upstream's query decoding reads it (`true`/`1`). The kubelet's own names for the
/// streams are `input`, `output` and `error` (what kube-apiserver sends); `stdin`, `stdout` and `stderr`, the pod
/// subresource's names, are read as the same options.
fn flag(pairs: &[(String, String)], key: &str) -> bool {
    let kubelet_name = match key {
        "stdin" => "input",
        "stdout" => "output",
        "stderr" => "error",
        other => other,
    };
    pairs
        .iter()
        .any(|(k, v)| (k == key || k == kubelet_name) && (v == "true" || v == "1"))
}

/// The WebSocket upgrade of an exec or attach request with its channel protocol chosen, or the answer to a request
/// that is not one (a plain request; SPDY upgrades are told apart before, see [`transport`]) or that offers none of
/// the protocols served.
fn negotiate(
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<WebSocketUpgrade, Refusal> {
    let served = channels::PROTOCOLS.join(", ");
    let upgrade = upgrade
        .map_err(|rejection| {
            (
                StatusCode::BAD_REQUEST,
                format!(
                    "kube-local's kubelet streams exec and attach over WebSockets only ({served}): {rejection}"
                ),
            )
        })?
        .protocols(channels::PROTOCOLS);
    if upgrade.selected_protocol().is_none() {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "none of the offered WebSocket subprotocols is served (kube-local's kubelet speaks {served})"
            ),
        ));
    }
    Ok(upgrade)
}
