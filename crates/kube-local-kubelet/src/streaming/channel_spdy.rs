//! Exec and attach over plain SPDY/3.1, as kube-apiserver speaks them to a kubelet (and kubectl does when asked to,
//! `KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`), turned into the channel messages the WebSocket protocol carries (a
//! channel byte — 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize — then the data), so one relay serves both.
//!
//! The client opens one SPDY stream per channel, each named by its `streamType` header (`stdin`, `stdout`,
//! `stderr`, `error`, `resize`); this side answers each SYN_STREAM with a SYN_REPLY at once. Bytes the client sends
//! on `stdin` or `resize` become messages on channels 0 and 4; the client's FIN on `stdin` becomes the v5 CLOSE
//! message for channel 0 (the command reads end of file). Messages the relay sends on channels 1, 2 and 3 go out as
//! DATA on the matching stream (held back until the client has opened it); the relay's end closes every stream it
//! wrote to with FIN and the connection after them.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::spdy::{FLAG_FIN, Frame, FrameDecoder, HeaderCompressor, HeaderDecompressor, header};

/// The channel protocol version served over SPDY (the error stream carries a JSON Status).
pub(crate) const PROTOCOL: &str = "v4.channel.k8s.io";

const STDIN: u8 = 0;
const ERROR: u8 = 3;
const RESIZE: u8 = 4;
/// How long a finished relay waits for the client to open the streams its output is for (upstream's kubelet waits
/// this long for a client's streams).
const STREAM_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// v5's CLOSE signal, used here for the client's FIN on stdin.
const CLOSE: u8 = 255;

/// The channel of a `streamType`.
fn channel(stream_type: &str) -> Option<u8> {
    match stream_type {
        "stdin" => Some(0),
        "stdout" => Some(1),
        "stderr" => Some(2),
        "error" => Some(3),
        "resize" => Some(4),
        _ => None,
    }
}

/// The two ends a relay uses: messages from the client, and a sender for messages to it (dropping the sender ends
/// the session).
pub(crate) struct ChannelEnds {
    pub from_client: mpsc::Receiver<Bytes>,
    pub to_client: mpsc::Sender<Bytes>,
}

/// Runs the SPDY side of a session over `io` in the background; returns the relay's ends. `expected` are the
/// channels the client opens streams for (the error channel and those the request asked for): once the relay is
/// done, the session still answers and ends each of them that the client has yet to open.
pub(crate) fn serve<T>(io: T, expected: Vec<u8>) -> ChannelEnds
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (from_client_tx, from_client) = mpsc::channel(16);
    let (to_client, to_client_rx) = mpsc::channel(16);
    tokio::spawn(async move {
        if let Err(e) = session(io, expected, from_client_tx, to_client_rx).await {
            tracing::debug!(error = %e, "exec/attach over SPDY ended");
        }
    });
    ChannelEnds {
        from_client,
        to_client,
    }
}

/// What the reader asks of the writer, in the order the frames must go out.
enum ToWriter {
    /// The client opened `stream` for `channel` (`None`: a type not served): reply, then flush what was held.
    Opened { stream: u32, channel: Option<u8> },
    /// A frame to send as it is (a PING's answer).
    Frame(Frame),
}

/// The session: a reader and a writer of their own, so that a client flooding stdin never holds back output, nor
/// a relay that is slow to take input the client's reading.
async fn session<T>(
    io: T,
    expected: Vec<u8>,
    from_client: mpsc::Sender<Bytes>,
    to_client: mpsc::Receiver<Bytes>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (reader, writer) = tokio::io::split(io);
    let (to_writer, from_reader) = mpsc::unbounded_channel();
    let reading = tokio::spawn(read(reader, from_client, to_writer));
    write(writer, expected, from_reader, to_client, reading).await
}

/// Reads the client's frames: stream openings go to the writer, stdin and resize data (and stdin's end) to the
/// relay. Ends with the connection; dropping its senders tells the relay and the writer the client is gone.
async fn read<R>(
    mut reader: R,
    from_client: mpsc::Sender<Bytes>,
    to_writer: mpsc::UnboundedSender<ToWriter>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    R: AsyncRead + Unpin,
{
    let mut decoder = FrameDecoder::default();
    let mut inflate = HeaderDecompressor::default();
    let mut channels: HashMap<u32, u8> = HashMap::new();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let close_stdin = || Bytes::from_static(&[CLOSE, STDIN]);
    while reader.read_buf(&mut buf).await? > 0 {
        decoder.extend(&buf.split());
        while let Some(frame) = decoder.next_frame()? {
            match frame {
                Frame::SynStream {
                    stream,
                    flags,
                    block,
                    ..
                } => {
                    let headers = inflate.decompress(&block)?;
                    let channel = header(&headers, "streamtype").and_then(channel);
                    if let Some(ch) = channel {
                        channels.insert(stream, ch);
                    }
                    if to_writer
                        .send(ToWriter::Opened { stream, channel })
                        .is_err()
                    {
                        return Ok(());
                    }
                    if channel == Some(STDIN) && flags & FLAG_FIN != 0 {
                        let _ = from_client.send(close_stdin()).await;
                    }
                }
                Frame::Data {
                    stream,
                    flags,
                    data,
                } => {
                    let Some(&ch) = channels.get(&stream) else {
                        continue;
                    };
                    if (ch == STDIN || ch == RESIZE) && !data.is_empty() {
                        let mut message = BytesMut::with_capacity(data.len() + 1);
                        message.put_u8(ch);
                        message.put_slice(&data);
                        let _ = from_client.send(message.freeze()).await;
                    }
                    if ch == STDIN && flags & FLAG_FIN != 0 {
                        let _ = from_client.send(close_stdin()).await;
                    }
                }
                Frame::Ping { id } => {
                    let _ = to_writer.send(ToWriter::Frame(Frame::Ping { id }));
                }
                Frame::Headers { block, .. } => {
                    inflate.decompress(&block)?;
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Writes the replies and the relay's output; once the relay is done, answers and ends the streams still
/// expected, then waits for the client to close the connection.
async fn write<W>(
    mut writer: W,
    expected: Vec<u8>,
    mut from_reader: mpsc::UnboundedReceiver<ToWriter>,
    mut to_client: mpsc::Receiver<Bytes>,
    reading: tokio::task::JoinHandle<Result<(), Box<dyn std::error::Error + Send + Sync>>>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    W: AsyncWrite + Unpin,
{
    let mut deflate = HeaderCompressor::new()?;
    // Channel → the client's stream for it.
    let mut streams: HashMap<u8, u32> = HashMap::new();
    // Output for a channel whose stream the client has not opened yet.
    let mut held: HashMap<u8, Vec<Bytes>> = HashMap::new();
    let mut relay_open = true;
    let mut client_open = true;
    // Once the relay is done, how long to wait for streams the client has not opened yet (a command may end before
    // the client has opened its streams; its output and exit status wait for them).
    let mut linger: Option<tokio::time::Instant> = None;
    loop {
        if !relay_open {
            let waiting = !held.is_empty()
                || !streams.contains_key(&ERROR)
                || expected.iter().any(|ch| !streams.contains_key(ch));
            let deadline = *linger.get_or_insert_with(|| tokio::time::Instant::now() + STREAM_WAIT);
            if !waiting || !client_open || tokio::time::Instant::now() >= deadline {
                break;
            }
        }
        let linger_until = linger.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            () = tokio::time::sleep_until(linger_until), if !relay_open => {}
            command = from_reader.recv(), if client_open => match command {
                Some(ToWriter::Opened { stream, channel }) => {
                    let reply = Frame::SynReply { stream, flags: 0, block: deflate.compress(&[])? };
                    writer.write_all(&reply.encode()).await?;
                    if let Some(ch) = channel {
                        streams.insert(ch, stream);
                        for data in held.remove(&ch).unwrap_or_default() {
                            writer.write_all(&Frame::Data { stream, flags: 0, data }.encode()).await?;
                        }
                    }
                    writer.flush().await?;
                }
                Some(ToWriter::Frame(frame)) => {
                    writer.write_all(&frame.encode()).await?;
                    writer.flush().await?;
                }
                None => client_open = false,
            },
            message = to_client.recv(), if relay_open => match message {
                Some(message) => {
                    let Some((&ch, data)) = message.split_first() else { continue };
                    let data = message.slice(message.len() - data.len()..);
                    match streams.get(&ch) {
                        Some(&stream) => {
                            writer.write_all(&Frame::Data { stream, flags: 0, data }.encode()).await?;
                            writer.flush().await?;
                        }
                        None => held.entry(ch).or_default().push(data),
                    }
                }
                None => relay_open = false,
            },
        }
    }
    // The relay is done: every stream this side writes ends, then the connection.
    for (&ch, &stream) in &streams {
        if ch != STDIN && ch != RESIZE {
            let fin = Frame::Data {
                stream,
                flags: FLAG_FIN,
                data: Bytes::new(),
            };
            writer.write_all(&fin.encode()).await?;
        }
    }
    writer.flush().await?;
    // The client closes the connection once it has read every stream to its end; closing first could cut off
    // output it has not taken in yet. A client that never does is left after a while.
    if client_open {
        let _ = tokio::time::timeout(STREAM_WAIT, reading).await;
    } else {
        reading.abort();
    }
    writer.shutdown().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_types_name_the_channels() {
        assert_eq!(channel("stdin"), Some(0));
        assert_eq!(channel("stdout"), Some(1));
        assert_eq!(channel("stderr"), Some(2));
        assert_eq!(channel("error"), Some(3));
        assert_eq!(channel("resize"), Some(4));
        assert_eq!(channel("data"), None);
    }
}
