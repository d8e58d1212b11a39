//! `kubectl attach` on the kubelet: `/attach/{namespace}/{pod}/{container}?stdout=&stderr=&stdin=`, a WebSocket
//! upgrade speaking [`super::channels`].
//!
//! A container's stdout and stderr go to its log file (see [`crate::kubelet::sandbox`]), so attaching follows that
//! file from its current end, as `logs -f` does, and relays what the container writes on the stdout channel (the
//! file does not say which stream a line came from). When the container's run ends, the error channel says
//! `Success` and the connection closes. Containers here read no standard input (they are started with
//! `/dev/null`), so whatever a client sends on stdin is discarded, as a runtime does for a container without
//! `stdin: true`.

use std::sync::Arc;

use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures::{SinkExt, StreamExt};

use super::channels;
use super::{error, flag, query_pairs, running_container};
use crate::kubelet::Shared;

/// GET (or POST) `/attach/{namespace}/{pod}/{container}`.
pub(super) async fn attach(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    if flag(&pairs, "tty") {
        return error(StatusCode::BAD_REQUEST, super::NO_TTY.into());
    }
    let output = flag(&pairs, "stdout") || flag(&pairs, "stderr");
    let (rt, _) = match running_container(&shared, &namespace, &pod, &container) {
        Ok(found) => found,
        Err((code, message)) => return error(code, message),
    };
    let upgrade = match super::negotiate(upgrade) {
        Ok(u) => u,
        Err((code, message)) => return error(code, message),
    };
    let path = match rt.container_log(&container, false) {
        Ok(p) => p,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    // From the current end: an attached client sees what is written from now on.
    let offset = match tokio::fs::metadata(&path).await {
        Ok(m) => m.len(),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the log of container {container:?} in pod {pod:?}: {e}"),
            );
        }
    };
    let written = super::logs::appended(path, offset, rt, container, None);
    upgrade.on_upgrade(move |socket| relay(socket, written, output))
}

/// Sends what the container writes until its run ends, then `Success`; stops early when the client goes away.
async fn relay(
    socket: WebSocket,
    written: impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
    output: bool,
) {
    let (mut sink, mut source) = socket.split();
    let mut written = std::pin::pin!(written);
    loop {
        tokio::select! {
            chunk = written.next() => match chunk {
                Some(Ok(data)) => {
                    if output
                        && sink
                            .send(Message::Binary(channels::frame(channels::STDOUT, &data)))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                Some(Err(_)) | None => break,
            },
            message = source.next() => match message {
                // Standard input has nowhere to go (see the module docs).
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                Some(Ok(_)) => {}
            },
        }
    }
    let status = channels::exit_status(0, &[]);
    let _ = sink
        .send(Message::Binary(channels::status_frame(&status)))
        .await;
    let _ = sink.send(channels::close()).await;
}
