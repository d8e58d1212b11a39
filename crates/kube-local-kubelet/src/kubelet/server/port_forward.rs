//! `kubectl port-forward` on the kubelet: `/portForward/{namespace}/{pod}`, the upgrade the API server hands
//! through. The session itself (SPDY/3.1, plain or tunnelled in WebSocket) is `crate::streaming::port_forward`'s;
//! this route finds the pod among those this kubelet runs and forwards to the address it gave the pod.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::error;
use crate::kubelet::Shared;
use crate::streaming::port_forward::{Target, accept};

/// GET (WebSocket) or POST (SPDY) `/portForward/{namespace}/{pod}`.
pub(super) async fn port_forward(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod)): Path<(String, String)>,
    req: Request,
) -> Response {
    let Some(rt) = shared.running_pod(&namespace, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod \"{namespace}/{pod}\" does not exist"),
        );
    };
    let target = Target {
        pod: format!("{namespace}/{pod}"),
        uid: rt.pod().metadata.uid.unwrap_or_default(),
        ip: IpAddr::V4(rt.ip),
    };
    match accept(req, target).await {
        Ok(response) => response,
        Err(message) => error(StatusCode::BAD_REQUEST, message),
    }
}
