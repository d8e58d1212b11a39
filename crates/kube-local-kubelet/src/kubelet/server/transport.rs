//! The two transports of exec (and attach): a WebSocket speaking [`super::channels`], or plain SPDY/3.1 (what
//! kube-apiserver speaks to a kubelet) adapted to the same channel messages by `crate::streaming::channel_spdy`.
//! A relay reads [`Incoming`] and writes [`Outgoing`] without knowing which it has.

use axum::body::Body;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

use super::{Refusal, channels};
use crate::streaming::channel_spdy;

/// Channel messages from the client.
pub(super) enum Incoming {
    WebSocket(SplitStream<WebSocket>),
    Spdy(mpsc::Receiver<Bytes>),
}

impl Incoming {
    /// The next binary message; `None` once the client has gone (closed, failed, or ended the connection).
    pub(super) async fn next(&mut self) -> Option<Bytes> {
        match self {
            Incoming::WebSocket(source) => loop {
                match source.next().await? {
                    Ok(Message::Binary(data)) => return Some(data),
                    Ok(Message::Close(_)) | Err(_) => return None,
                    Ok(_) => {}
                }
            },
            Incoming::Spdy(rx) => rx.recv().await,
        }
    }
}

/// Channel messages to the client.
pub(super) enum Outgoing {
    WebSocket(SplitSink<WebSocket, Message>),
    Spdy(mpsc::Sender<Bytes>),
}

impl Outgoing {
    /// Sends one message; `false` when the client is gone.
    pub(super) async fn send(&mut self, message: Bytes) -> bool {
        match self {
            Outgoing::WebSocket(sink) => sink.send(Message::Binary(message)).await.is_ok(),
            Outgoing::Spdy(tx) => tx.send(message).await.is_ok(),
        }
    }

    /// Ends the session after everything sent (a normal WebSocket closure; FIN on every SPDY stream).
    pub(super) async fn finish(self) {
        match self {
            Outgoing::WebSocket(mut sink) => {
                let _ = sink.send(channels::close()).await;
            }
            Outgoing::Spdy(tx) => drop(tx),
        }
    }
}

/// The streams a request asked for, besides the error stream every session has.
pub(super) struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl Streams {
    /// Their channels, the error channel first.
    fn channels(&self) -> Vec<u8> {
        let mut channels = vec![channels::ERROR];
        for (asked, channel) in [
            (self.stdin, channels::STDIN),
            (self.stdout, channels::STDOUT),
            (self.stderr, channels::STDERR),
            (self.tty, channels::RESIZE),
        ] {
            if asked {
                channels.push(channel);
            }
        }
        channels
    }
}

/// A relay to run once the connection is upgraded.
pub(super) type Relay =
    Box<dyn FnOnce(Outgoing, Incoming) -> futures::future::BoxFuture<'static, ()> + Send>;

/// Answers an exec or attach request: a WebSocket upgrade with a channel protocol negotiated, or a SPDY upgrade
/// offering `v4.channel.k8s.io`; `relay` runs on the upgraded connection. Anything else is refused in words the
/// client shows.
pub(super) async fn upgrade(
    req: Request,
    streams: Streams,
    relay: Relay,
) -> Result<Response, Refusal> {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if upgrade.split(',').any(|u| u.trim() == "spdy/3.1") {
        return spdy(req, streams, relay);
    }
    let (mut parts, _body) = req.into_parts();
    let ws = WebSocketUpgrade::from_request_parts(&mut parts, &()).await;
    let ws = super::negotiate(ws)?;
    Ok(ws.on_upgrade(move |socket| async move {
        let (sink, source) = socket.split();
        relay(Outgoing::WebSocket(sink), Incoming::WebSocket(source)).await;
    }))
}

/// The SPDY upgrade: `X-Stream-Protocol-Version` must offer v4 (what kube-apiserver and kubectl offer first among
/// the versions with a structured error stream).
fn spdy(mut req: Request, streams: Streams, relay: Relay) -> Result<Response, Refusal> {
    let offered: Vec<String> = req
        .headers()
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_owned())
        .collect();
    if !offered.iter().any(|p| p == channel_spdy::PROTOCOL) {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{}]",
                channel_spdy::PROTOCOL
            ),
        ));
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => TokioIo::new(u),
            Err(e) => {
                tracing::debug!(error = %e, "exec/attach: the SPDY upgrade failed");
                return;
            }
        };
        let ends = channel_spdy::serve(upgraded, streams.channels());
        relay(
            Outgoing::Spdy(ends.to_client),
            Incoming::Spdy(ends.from_client),
        )
        .await;
    });
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    headers.insert(
        "x-stream-protocol-version",
        HeaderValue::from_static(channel_spdy::PROTOCOL),
    );
    Ok(resp)
}
