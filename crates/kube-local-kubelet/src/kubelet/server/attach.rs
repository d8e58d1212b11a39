//! `kubectl attach` on the kubelet: `/attach/{namespace}/{pod}/{container}?stdout=&stderr=&stdin=`, a WebSocket
//! upgrade speaking [`super::channels`], or a SPDY/3.1 upgrade carrying the same channels ([`super::transport`]).
//!
//! A container's stdout and stderr go to its log file (see [`crate::kubelet::sandbox`]), so attaching follows that
//! file from its current end, as `logs -f` does, and relays what the container writes on the stdout channel (the
//! file does not say which stream a line came from). When the container's run ends, the error channel says
//! `Success` and the connection closes.
//!
//! A container with `stdin: true` reads a pipe the kubelet keeps (see [`ContainerStdin`]): an attached client that
//! asked for stdin writes to it, and when that client's stdin ends (v5 CLOSE) or it goes away, a `stdinOnce` container
//! reads end of file while others keep the pipe open for the next client. A container without `stdin: true` reads
//! `/dev/null`, so what a client sends is discarded, as container runtimes do.
//!
//! A container with `tty: true` runs on a terminal (see [`crate::kubelet::sandbox`]) whose output the kubelet copies
//! to its log: attaching follows the log as above, woken by each copy rather than polling; input goes to the terminal
//! (with `stdin: true`) and resize messages resize it. Whether the stream is a TTY is the container's to say, not the
//! request's: as upstream's kubelet, the `tty` query parameter is ignored, since a process cannot move onto or off a
//! terminal once it runs (kubectl itself drops `-t` with a warning for a container without `tty: true`).

use std::sync::Arc;

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures::{FutureExt as _, StreamExt};
use tokio::io::AsyncWriteExt;

use super::channels::{self, FromClient};
use super::transport::{Incoming, Outgoing};
use super::{error, flag, query_pairs, running_container};
use crate::kubelet::Shared;
use crate::kubelet::pod_worker::ContainerStdin;
use crate::kubelet::sandbox::ContainerTerminal;

/// GET (or POST) `/attach/{namespace}/{pod}/{container}`.
pub(super) async fn attach(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    let output = flag(&pairs, "stdout") || flag(&pairs, "stderr");
    let (rt, _) = match running_container(&shared, &namespace, &pod, &container) {
        Ok(found) => found,
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
    let stdin = if flag(&pairs, "stdin") {
        rt.stdin(&container)
    } else {
        None
    };
    let terminal = rt.terminal(&container);
    let logged = terminal.as_ref().map(|t| t.logged());
    let written = super::logs::appended(path, offset, rt, container, None, logged);
    let streams = Streams {
        output,
        stdin,
        terminal,
    };
    let asked = super::transport::Streams {
        stdin: flag(&pairs, "stdin"),
        stdout: flag(&pairs, "stdout"),
        stderr: flag(&pairs, "stderr") && !flag(&pairs, "tty"),
        tty: flag(&pairs, "tty"),
    };
    let relay: super::transport::Relay =
        Box::new(move |outgoing, incoming| relay(outgoing, incoming, written, streams).boxed());
    match super::transport::upgrade(req, asked, relay).await {
        Ok(response) => response,
        Err((code, message)) => error(code, message),
    }
}

/// What one attached client gets of the container.
struct Streams {
    /// Whether it asked for stdout or stderr.
    output: bool,
    /// The container's input, when the client asked for stdin and the container has one.
    stdin: Option<Arc<ContainerStdin>>,
    /// The container's terminal, which resize messages resize (`tty: true`).
    terminal: Option<Arc<ContainerTerminal>>,
}

/// Sends what the container writes until its run ends, then `Success`, and hands what the client sends on stdin to
/// the container's `stdin`; stops early when the client goes away.
async fn relay(
    mut sink: Outgoing,
    mut source: Incoming,
    written: impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static,
    streams: Streams,
) {
    let Streams {
        output,
        mut stdin,
        terminal,
    } = streams;
    let mut written = std::pin::pin!(written);
    loop {
        tokio::select! {
            chunk = written.next() => match chunk {
                Some(Ok(data)) => {
                    if output && !sink.send(channels::frame(channels::STDOUT, &data)).await {
                        break;
                    }
                }
                Some(Err(_)) | None => {
                    let status = channels::exit_status(0, &[]);
                    sink.send(channels::status_frame(&status)).await;
                    sink.finish().await;
                    break;
                }
            },
            message = source.next() => match message {
                Some(data) => match channels::parse(&data) {
                    FromClient::Stdin(bytes) => {
                        if let Some(pipe) = &stdin {
                            write(pipe, &bytes).await;
                        }
                    }
                    FromClient::StdinClosed => {
                        if let Some(pipe) = stdin.take() {
                            done_with(&pipe).await;
                        }
                    }
                    FromClient::Resize(size) => {
                        if let Some(t) = &terminal {
                            t.resize(&size);
                        }
                    }
                    FromClient::Ignored => {}
                },
                None => break,
            },
        }
    }
    if let Some(pipe) = stdin {
        done_with(&pipe).await;
    }
}

/// Writes to the container's stdin; a container that closed it (or ended) takes no more.
async fn write(stdin: &ContainerStdin, data: &[u8]) {
    let mut pipe = stdin.pipe.lock().await;
    // Flushed: a terminal is written by a background task, and the client's keystrokes must not wait in it.
    if let Some(p) = pipe.as_mut()
        && (p.write_all(data).await.is_err() || p.flush().await.is_err())
    {
        *pipe = None;
    }
}

/// A client is done with the container's stdin: a `stdinOnce` container reads end of file now; others keep the
/// pipe open for the next client.
async fn done_with(stdin: &ContainerStdin) {
    if stdin.once {
        stdin.pipe.lock().await.take();
    }
}
