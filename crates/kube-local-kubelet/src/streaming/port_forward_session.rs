//! One `portforward.k8s.io` session: the SPDY/3.1 conversation behind `kubectl port-forward`, independent of the
//! transport that carries its bytes (a plain HTTP upgrade or WebSocket binary messages).
//!
//! For every connection accepted on its local port, the client opens two streams sharing a `requestid` header: one
//! with `streamtype: error` and one with `streamtype: data`, both naming the pod's `port`. The server answers each
//! SYN_STREAM with a SYN_REPLY at once (the client waits for it), and once both streams of a request are there it
//! connects to the pod's IP and port, then copies bytes both ways on the data stream. A failure to connect is
//! written as text on the error stream, in the kubelet's words (`error forwarding port N to pod P, uid U: ...`),
//! which kubectl prints. The error stream is closed (FIN) when the forward ends; kubectl waits for that after
//! resetting the data stream.
//!
//! Flow control: Go's spdystream, which kubectl uses, neither sends WINDOW_UPDATE frames nor honours them (its
//! frame handler has no case for them and it writes DATA without a window). So this side does not hold its DATA
//! back waiting for window updates (that would stall every transfer past 64 KiB); back-pressure is the transport's:
//! a full output queue stops reading from the pod, and a pod that does not read stops this session from reading the
//! client. It does return the window for every byte the pod took (WINDOW_UPDATE on the stream and on the session,
//! as SPDY/3.1 asks), which spdystream ignores and a client that keeps to the windows needs.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

use super::spdy::{
    FLAG_FIN, Frame, FrameDecoder, HeaderCompressor, HeaderDecompressor, SpdyError, header, rst,
};

/// Bytes read from the pod per DATA frame.
const CHUNK: usize = 32 * 1024;
/// DATA frames from the client queued for one pod connection before the session stops reading.
const TO_POD_QUEUE: usize = 16;

/// The pod a session forwards to.
#[derive(Debug, Clone)]
pub struct Target {
    /// `namespace/name`, for error messages.
    pub pod: String,
    pub uid: String,
    pub ip: IpAddr,
}

/// Why a session ended other than by the client closing it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("reading the port-forward stream: {0}")]
    Transport(#[from] io::Error),
    #[error("port-forward session: {0}")]
    Protocol(#[from] SpdyError),
    #[error("port-forward session: the connection's writer is gone")]
    WriterGone,
}

/// What is known of one request id while its two streams arrive.
#[derive(Default)]
struct Pending {
    error: Option<u32>,
    data: Option<u32>,
    port: Option<String>,
    to_pod: Option<mpsc::Receiver<Bytes>>,
}

/// The client's half of an open data stream.
struct DataStream {
    /// Where the client's bytes go; `None` once the client sent FIN.
    to_pod: Option<mpsc::Sender<Bytes>>,
    /// Tells the forward that the client reset the stream; taken when used.
    reset: Option<oneshot::Sender<()>>,
    /// The receiving end of `reset`, until the forward starts.
    reset_rx: Option<oneshot::Receiver<()>>,
}

/// Runs a session: `input` yields the client's bytes (in pieces of any size), `output` takes whole encoded frames
/// in the order they must be sent. Returns when the client's bytes end; forwards still running are stopped.
pub async fn run<I>(
    mut input: I,
    output: mpsc::Sender<Bytes>,
    target: Arc<Target>,
) -> Result<(), SessionError>
where
    I: Stream<Item = io::Result<Bytes>> + Unpin,
{
    let mut decoder = FrameDecoder::default();
    let mut inflate = HeaderDecompressor::default();
    let mut deflate = HeaderCompressor::new()?;
    let mut pending: HashMap<String, Pending> = HashMap::new();
    let mut data_streams: HashMap<u32, DataStream> = HashMap::new();
    let mut forwards = JoinSet::new();
    loop {
        let chunk = tokio::select! {
            chunk = input.next() => chunk,
            Some(_) = forwards.join_next(), if !forwards.is_empty() => continue,
        };
        let Some(chunk) = chunk else { return Ok(()) };
        decoder.extend(&chunk?);
        while let Some(frame) = decoder.next_frame()? {
            match frame {
                Frame::SynStream {
                    stream,
                    flags,
                    block,
                    ..
                } => {
                    let headers = inflate.decompress(&block)?;
                    let reply = Frame::SynReply {
                        stream,
                        flags: 0,
                        block: deflate.compress(&[])?,
                    };
                    send(&output, reply).await?;
                    let Some(request) = header(&headers, "requestid").map(str::to_owned) else {
                        refuse(&output, stream).await?;
                        continue;
                    };
                    let entry = pending.entry(request.clone()).or_default();
                    if let Some(port) = header(&headers, "port") {
                        entry.port = Some(port.to_owned());
                    }
                    match header(&headers, "streamtype") {
                        Some("error") if entry.error.is_none() => entry.error = Some(stream),
                        Some("data") if entry.data.is_none() => {
                            entry.data = Some(stream);
                            let (tx, rx) = mpsc::channel(TO_POD_QUEUE);
                            entry.to_pod = Some(rx);
                            let (reset, reset_rx) = oneshot::channel();
                            data_streams.insert(
                                stream,
                                DataStream {
                                    // A SYN_STREAM with FIN carries no data at all.
                                    to_pod: (flags & FLAG_FIN == 0).then_some(tx),
                                    reset: Some(reset),
                                    reset_rx: Some(reset_rx),
                                },
                            );
                        }
                        _ => {
                            refuse(&output, stream).await?;
                            continue;
                        }
                    }
                    let complete = pending
                        .get(&request)
                        .is_some_and(|p| p.error.is_some() && p.data.is_some());
                    if !complete {
                        continue;
                    }
                    if let Some(Pending {
                        error: Some(error),
                        data: Some(data),
                        port,
                        to_pod: Some(to_pod),
                    }) = pending.remove(&request)
                        && let Some(reset) =
                            data_streams.get_mut(&data).and_then(|d| d.reset_rx.take())
                    {
                        forwards.spawn(forward(
                            target.clone(),
                            port.unwrap_or_default(),
                            Streams { error, data },
                            to_pod,
                            reset,
                            output.clone(),
                        ));
                    }
                }
                Frame::Data {
                    stream,
                    flags,
                    data,
                } => {
                    let Some(s) = data_streams.get_mut(&stream) else {
                        continue; // the error stream's FIN, or a stream already gone
                    };
                    if !data.is_empty()
                        && let Some(tx) = &s.to_pod
                        && tx.send(data).await.is_err()
                    {
                        // The pod's side is gone; what the client still sends is dropped.
                        s.to_pod = None;
                    }
                    if flags & FLAG_FIN != 0 {
                        s.to_pod = None;
                    }
                }
                Frame::RstStream { stream, .. } => {
                    if let Some(mut s) = data_streams.remove(&stream)
                        && let Some(reset) = s.reset.take()
                    {
                        let _ = reset.send(());
                    }
                }
                Frame::Ping { id } => send(&output, Frame::Ping { id }).await?,
                Frame::Headers { block, .. } => {
                    // Decoded only to keep the decompressor in step with the client's compressor.
                    inflate.decompress(&block)?;
                }
                Frame::SynReply { .. }
                | Frame::Settings { .. }
                | Frame::GoAway { .. }
                | Frame::WindowUpdate { .. }
                | Frame::Unknown { .. } => {}
            }
        }
    }
}

async fn send(output: &mpsc::Sender<Bytes>, frame: Frame) -> Result<(), SessionError> {
    output
        .send(frame.encode())
        .await
        .map_err(|_| SessionError::WriterGone)
}

/// Resets a stream the client opened wrongly.
async fn refuse(output: &mpsc::Sender<Bytes>, stream: u32) -> Result<(), SessionError> {
    let status = rst::PROTOCOL_ERROR;
    send(output, Frame::RstStream { stream, status }).await
}

/// The two streams of one forwarded connection.
#[derive(Clone, Copy)]
struct Streams {
    error: u32,
    data: u32,
}

/// Connects to the pod and copies both ways until both directions ended or the client reset the data stream; then
/// closes the error stream, as the kubelet does.
async fn forward(
    target: Arc<Target>,
    port: String,
    streams: Streams,
    to_pod: mpsc::Receiver<Bytes>,
    reset: oneshot::Receiver<()>,
    output: mpsc::Sender<Bytes>,
) {
    let fin = |stream| Frame::Data {
        stream,
        flags: FLAG_FIN,
        data: Bytes::new(),
    };
    match connect(&target, &port).await {
        Err(message) => {
            let text = format!(
                "error forwarding port {port} to pod {}, uid {}: {message}",
                target.pod, target.uid
            );
            tracing::debug!(%text, "port-forward");
            let error = Frame::Data {
                stream: streams.error,
                flags: 0,
                data: Bytes::from(text),
            };
            for frame in [error, fin(streams.error), fin(streams.data)] {
                if output.send(frame.encode()).await.is_err() {
                    return;
                }
            }
        }
        Ok(conn) => {
            tokio::select! {
                () = copy(conn, to_pod, streams.data, &output) => {}
                _ = reset => {}
            }
            let _ = output.send(fin(streams.error).encode()).await;
        }
    }
}

/// Dials the pod, describing a failure as Go's dialer does (`dial tcp IP:PORT: connect: connection refused`).
async fn connect(target: &Target, port: &str) -> Result<TcpStream, String> {
    let port: u16 = match port.parse() {
        Ok(p) if p > 0 => p,
        _ => return Err(format!("invalid port {port:?}")),
    };
    let address = std::net::SocketAddr::new(target.ip, port);
    TcpStream::connect(address).await.map_err(|e| {
        let reason = match e.kind() {
            io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
            _ => e.to_string(),
        };
        format!("dial tcp {address}: connect: {reason}")
    })
}

/// Copies the client's bytes to the pod (half-closing it at the client's FIN) and the pod's bytes to the client
/// (sending FIN at the pod's end of stream); returns when both are done.
async fn copy(
    conn: TcpStream,
    mut to_pod: mpsc::Receiver<Bytes>,
    stream: u32,
    output: &mpsc::Sender<Bytes>,
) {
    let (mut reader, mut writer) = conn.into_split();
    let upstream = async move {
        while let Some(data) = to_pod.recv().await {
            if writer.write_all(&data).await.is_err() {
                return;
            }
            let delta = data.len() as u32;
            for window in [stream, 0] {
                let update = Frame::WindowUpdate {
                    stream: window,
                    delta,
                };
                if output.send(update.encode()).await.is_err() {
                    return;
                }
            }
        }
        let _ = writer.shutdown().await;
    };
    let downstream = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match reader.read(&mut buf).await {
                Ok(0) | Err(_) => 0,
                Ok(n) => n,
            };
            let frame = Frame::Data {
                stream,
                flags: if n == 0 { FLAG_FIN } else { 0 },
                data: Bytes::copy_from_slice(&buf[..n]),
            };
            if output.send(frame.encode()).await.is_err() || n == 0 {
                return;
            }
        }
    };
    tokio::join!(upstream, downstream);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::spdy::Headers;

    /// A client end of a session: compresses its headers and decodes the server's frames.
    struct Client {
        deflate: HeaderCompressor,
        inflate: HeaderDecompressor,
        input: mpsc::Sender<io::Result<Bytes>>,
        output: mpsc::Receiver<Bytes>,
        decoder: FrameDecoder,
    }

    impl Client {
        async fn open(&mut self, stream: u32, kind: &str, port: u16, request: &str) {
            let port = port.to_string();
            let block = self
                .deflate
                .compress(&[
                    ("streamtype", kind),
                    ("port", &port),
                    ("requestid", request),
                ])
                .unwrap();
            self.send(Frame::SynStream {
                stream,
                associated: 0,
                priority: 0,
                flags: 0,
                block,
            })
            .await;
        }

        async fn send(&mut self, frame: Frame) {
            self.input.send(Ok(frame.encode())).await.unwrap();
        }

        async fn next(&mut self) -> Frame {
            loop {
                if let Some(f) = self.decoder.next_frame().unwrap() {
                    return f;
                }
                let bytes = self.output.recv().await.expect("a frame");
                self.decoder.extend(&bytes);
            }
        }

        async fn reply_headers(&mut self, want: u32) -> Headers {
            match self.next().await {
                Frame::SynReply { stream, block, .. } if stream == want => {
                    self.inflate.decompress(&block).unwrap()
                }
                other => panic!("expected SYN_REPLY for {want}, got {other:?}"),
            }
        }
    }

    fn session(ip: IpAddr) -> Client {
        let (input, rx) = mpsc::channel(16);
        let (tx, output) = mpsc::channel(16);
        let target = Arc::new(Target {
            pod: "ns/p".into(),
            uid: "u-1".into(),
            ip,
        });
        tokio::spawn(run(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            tx,
            target,
        ));
        Client {
            deflate: HeaderCompressor::new().unwrap(),
            inflate: HeaderDecompressor::default(),
            input,
            output,
            decoder: FrameDecoder::default(),
        }
    }

    #[tokio::test]
    async fn a_pair_of_streams_reaches_the_pod_and_back() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).await.unwrap();
            got.reverse();
            s.write_all(&got).await.unwrap();
        });
        let mut c = session("127.0.0.1".parse().unwrap());
        c.open(1, "error", port, "0").await;
        assert_eq!(c.reply_headers(1).await, []);
        c.open(3, "data", port, "0").await;
        c.reply_headers(3).await;
        c.send(Frame::Ping { id: 1 }).await;
        assert_eq!(c.next().await, Frame::Ping { id: 1 });
        c.send(Frame::Data {
            stream: 3,
            flags: FLAG_FIN,
            data: Bytes::from_static(b"abc"),
        })
        .await;
        // Until the error stream closes: the echo, its end, and the windows returned (in any order between them).
        let (mut echoed, mut fin, mut windows) = (Vec::new(), false, HashMap::new());
        loop {
            match c.next().await {
                Frame::Data {
                    stream: 3,
                    flags,
                    data,
                } => {
                    assert!(!fin, "data after FIN");
                    echoed.extend_from_slice(&data);
                    fin = flags & FLAG_FIN != 0;
                }
                Frame::WindowUpdate { stream, delta } => {
                    *windows.entry(stream).or_insert(0) += delta;
                }
                Frame::Data {
                    stream: 1,
                    flags: FLAG_FIN,
                    data,
                } if data.is_empty() => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((echoed.as_slice(), fin), (&b"cba"[..], true));
        assert_eq!(windows, HashMap::from([(3, 3), (0, 3)]));
    }

    #[tokio::test]
    async fn a_refused_connection_is_reported_on_the_error_stream() {
        // Bound then dropped: nothing listens there any more.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut c = session("127.0.0.1".parse().unwrap());
        c.open(1, "error", port, "7").await;
        c.reply_headers(1).await;
        c.open(3, "data", port, "7").await;
        c.reply_headers(3).await;
        let Frame::Data {
            stream: 1, data, ..
        } = c.next().await
        else {
            panic!("expected the error text")
        };
        assert_eq!(
            String::from_utf8_lossy(&data),
            format!(
                "error forwarding port {port} to pod ns/p, uid u-1: dial tcp 127.0.0.1:{port}: connect: connection refused"
            )
        );
    }

    #[tokio::test]
    async fn a_malformed_frame_ends_the_session_with_an_error() {
        let (input, rx) = mpsc::channel(1);
        let (tx, _output) = mpsc::channel(1);
        let target = Arc::new(Target {
            pod: "ns/p".into(),
            uid: String::new(),
            ip: "127.0.0.1".parse().unwrap(),
        });
        let s = tokio::spawn(run(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            tx,
            target,
        ));
        input
            .send(Ok(Bytes::from_static(&[
                0x80, 0x03, 0, 1, 0, 0, 0, 10, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0,
            ])))
            .await
            .unwrap();
        assert!(matches!(s.await.unwrap(), Err(SessionError::Protocol(_))));
    }
}
