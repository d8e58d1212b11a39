//! The kubelet's HTTP endpoint for container logs, the way the API server's `pods/{name}/log` reaches a real kubelet:
//! `GET /containerLogs/{namespace}/{pod}/{container}?previous=&tailLines=&limitBytes=&follow=`. It listens on the
//! Node's InternalIP, and its port is published in the Node's `status.daemonEndpoints.kubeletEndpoint.Port`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::Shared;

/// Starts serving; returns the port.
pub async fn start(
    shared: Arc<Shared>,
    tasks: &mut crate::workloads::informer::Tasks,
) -> std::io::Result<u16> {
    let listener = tokio::net::TcpListener::bind((shared.host_ip.as_str(), 0)).await?;
    let port = listener.local_addr()?.port();
    let app = axum::Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .with_state(shared);
    tasks.spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "kubelet log endpoint stopped");
        }
    });
    Ok(port)
}

fn not_found(message: String) -> Response {
    (StatusCode::NOT_FOUND, message).into_response()
}

fn tail(text: &[u8], lines: usize) -> &[u8] {
    let mut count = 0;
    let end = if text.ends_with(b"\n") {
        text.len() - 1
    } else {
        text.len()
    };
    for i in (0..end).rev() {
        if text[i] == b'\n' {
            count += 1;
            if count == lines {
                return &text[i + 1..];
            }
        }
    }
    text
}

async fn container_logs(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(rt) = shared.running_pod(&namespace, &pod) else {
        return not_found(format!("pod {namespace}/{pod} is not running on this node"));
    };
    let previous = query
        .get("previous")
        .is_some_and(|v| v == "true" || v == "1");
    let Some(path) = rt.log_file(&container, previous) else {
        let what = if previous {
            "previous terminated container"
        } else {
            "container"
        };
        return not_found(format!("{what} \"{container}\" in pod \"{pod}\" not found"));
    };
    let mut text = tokio::fs::read(&path).await.unwrap_or_default();
    if let Some(lines) = query.get("tailLines").and_then(|l| l.parse::<usize>().ok()) {
        text = tail(&text, lines).to_vec();
    }
    if let Some(limit) = query
        .get("limitBytes")
        .and_then(|l| l.parse::<usize>().ok())
    {
        text.truncate(limit);
    }
    let follow = query.get("follow").is_some_and(|v| v == "true" || v == "1");
    if !follow || previous {
        return (StatusCode::OK, text).into_response();
    }
    // Follow: what is there, then what gets appended while this run of the container lasts.
    let offset = tokio::fs::metadata(&path)
        .await
        .map(|m| m.len())
        .unwrap_or(0);
    let first =
        futures::stream::once(async move { Ok::<_, std::io::Error>(bytes::Bytes::from(text)) });
    let rest = futures::stream::unfold(
        (path, offset, rt, container),
        |(path, mut offset, rt, container)| async move {
            loop {
                let still_current =
                    rt.log_file(&container, false).as_ref() == Some(&path) && shared_alive(&rt);
                let mut chunk = Vec::new();
                if let Ok(mut f) = tokio::fs::File::open(&path).await
                    && f.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
                {
                    let _ = f.read_to_end(&mut chunk).await;
                }
                if !chunk.is_empty() {
                    offset += chunk.len() as u64;
                    return Some((Ok(bytes::Bytes::from(chunk)), (path, offset, rt, container)));
                }
                if !still_current {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    );
    use futures::StreamExt;
    Response::new(Body::from_stream(first.chain(rest)))
}

/// Whether the pod's container still runs (its process is recorded).
fn shared_alive(rt: &super::pod_worker::PodRuntime) -> bool {
    rt.has_processes()
}
