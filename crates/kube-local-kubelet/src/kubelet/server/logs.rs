//! Container logs on the kubelet's HTTP endpoint, the way the API server's `pods/{name}/log` reaches a real kubelet:
//! `GET /containerLogs/{namespace}/{pod}/{container}?previous=&tailLines=&limitBytes=&follow=`. Following a log is
//! shared with attach (see [`super::attach`]), which streams what a container writes from the moment it attaches.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::error;
use crate::kubelet::Shared;
use crate::kubelet::pod_worker::PodRuntime;

fn tail(text: &[u8], lines: usize) -> &[u8] {
    if lines == 0 {
        return &[];
    }
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

fn flag(query: &HashMap<String, String>, key: &str) -> bool {
    query.get(key).is_some_and(|v| v == "true" || v == "1")
}

/// A non-negative integer parameter; a malformed one is a 400 like upstream's query decoding.
fn number(query: &HashMap<String, String>, key: &str) -> Result<Option<u64>, String> {
    query
        .get(key)
        .map(|v| {
            v.parse::<u64>()
                .map_err(|e| format!("invalid {key} value {v:?}: {e}"))
        })
        .transpose()
}

pub(super) async fn container_logs(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(rt) = shared.running_pod(&namespace, &pod) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("pod \"{namespace}/{pod}\" does not exist"),
        );
    };
    if rt.container_spec(&container).is_none() {
        return error(
            StatusCode::BAD_REQUEST,
            format!("container {container:?} in pod {pod:?} is not available"),
        );
    }
    // Timestamps need per-line capture times, which this kubelet does not record (processes write their log files
    // directly): refuse rather than answer without them.
    let unsupported = if flag(&query, "timestamps") {
        Some("timestamps")
    } else {
        ["sinceSeconds", "sinceTime"]
            .into_iter()
            .find(|k| query.contains_key(*k))
    };
    if let Some(option) = unsupported {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "{option} is not supported by the kube-local kubelet: container logs carry no per-line timestamps"
            ),
        );
    }
    let previous = flag(&query, "previous");
    let (tail_lines, limit_bytes) =
        match (number(&query, "tailLines"), number(&query, "limitBytes")) {
            (Ok(t), Ok(l)) => (t, l),
            (Err(message), _) | (_, Err(message)) => {
                return error(StatusCode::BAD_REQUEST, message);
            }
        };
    let path = match rt.container_log(&container, previous) {
        Ok(p) => p,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let mut text = match tokio::fs::read(&path).await {
        Ok(t) => t,
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the log of container {container:?} in pod {pod:?}: {e}"),
            );
        }
    };
    let offset = text.len() as u64;
    if let Some(lines) = tail_lines {
        text = tail(&text, usize::try_from(lines).unwrap_or(usize::MAX)).to_vec();
    }
    let mut budget = limit_bytes.map(|l| usize::try_from(l).unwrap_or(usize::MAX));
    if let Some(limit) = budget {
        text.truncate(limit);
        budget = Some(limit - text.len());
    }
    if !flag(&query, "follow") || previous || budget == Some(0) {
        return (StatusCode::OK, text).into_response();
    }
    // Follow: what is there, then what gets appended while this run of the container lasts.
    let first =
        futures::stream::once(async move { Ok::<_, std::io::Error>(bytes::Bytes::from(text)) });
    let logged = rt.terminal(&container).map(|t| t.logged());
    let rest = appended(path, offset, rt, container, budget, logged);
    use futures::StreamExt;
    Response::new(Body::from_stream(first.chain(rest)))
}

/// What the current run of `container` appends to its log at `path` after `offset`, until that run ends (at most
/// `budget` bytes when set). Polls the file: processes write their logs directly, so there is no writer to hear from —
/// except for a container on a terminal, whose output the kubelet copies to the log and announces on `logged`, which
/// wakes the follower at once (an interactive shell's echo should not wait for the next poll).
pub(super) fn appended(
    path: PathBuf,
    offset: u64,
    rt: Arc<PodRuntime>,
    container: String,
    budget: Option<usize>,
    logged: Option<tokio::sync::watch::Receiver<u64>>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures::stream::unfold(
        (path, offset, rt, container, budget, logged),
        |(path, mut offset, rt, container, mut budget, mut logged)| async move {
            if budget == Some(0) {
                return None;
            }
            loop {
                // Checked before reading: whatever the run wrote before it ended is still sent.
                let still_current = rt.container_log(&container, false).ok().as_ref()
                    == Some(&path)
                    && rt.container_running(&container);
                let mut chunk = Vec::new();
                if let Ok(mut f) = tokio::fs::File::open(&path).await
                    && f.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
                {
                    let _ = f.read_to_end(&mut chunk).await;
                }
                if !chunk.is_empty() {
                    offset += chunk.len() as u64;
                    if let Some(left) = budget {
                        chunk.truncate(left);
                        budget = Some(left - chunk.len());
                    }
                    return Some((
                        Ok(bytes::Bytes::from(chunk)),
                        (path, offset, rt, container, budget, logged),
                    ));
                }
                if !still_current {
                    return None;
                }
                let poll = tokio::time::sleep(Duration::from_millis(200));
                match logged.as_mut() {
                    // A count seen changed since the last wait returns at once: no copy is missed between the read
                    // and the wait. (A closed channel, the copy over, falls back to polling until the run ends.)
                    Some(l) => {
                        tokio::select! {
                            _ = poll => {}
                            changed = l.changed() => if changed.is_err() { logged = None; },
                        }
                    }
                    None => poll.await,
                }
            }
        },
    )
}
