//! The channel protocol exec and attach speak over a WebSocket, as upstream's `wsstream` and `remotecommand` define
//! it: every binary message starts with a channel byte — 0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize — followed by
//! that channel's data.
//!
//! - `v4.channel.k8s.io` (kube-rs' client offers it second): the error channel carries one JSON `metav1.Status` at the
//!   end: `Success`, or `Failure` with reason `NonZeroExitCode` and the exit code as the message of an `ExitCode`
//!   cause (what kubectl turns into its own exit code).
//! - `v5.channel.k8s.io` (what kubectl, by default from 1.31, and kube-rs prefer): v4 plus the CLOSE signal — a
//!   message `[255, n]` from the client says stream `n` (stdin) has ended, so a command reading stdin sees end of
//!   file while its output still flows back.
//!
//! The older text protocols (`channel.k8s.io`, `base64.channel.k8s.io`, v2, v3) report errors as plain text and are
//! not served: every client that speaks v4 or v5 offers it.

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, close_code};
use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

/// The subprotocols served, most preferred first.
pub(super) const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

pub(super) const STDIN: u8 = 0;
pub(super) const STDOUT: u8 = 1;
pub(super) const STDERR: u8 = 2;
pub(super) const ERROR: u8 = 3;
pub(super) const RESIZE: u8 = 4;
/// v5's CLOSE signal: the next byte names the stream the client has finished writing.
pub(super) const CLOSE: u8 = 255;

/// What one message from the client asks for.
#[derive(Debug, PartialEq)]
pub(super) enum FromClient {
    /// Bytes for the process's standard input.
    Stdin(Bytes),
    /// The client's standard input has ended (v5 CLOSE of channel 0).
    StdinClosed,
    /// A terminal size (channel 4): JSON `{"Width": …, "Height": …}`.
    Resize(Bytes),
    /// Anything else: an empty message, a CLOSE of another stream, an unknown channel.
    Ignored,
}

/// Reads one binary message from the client.
pub(super) fn parse(message: &Bytes) -> FromClient {
    match message.first() {
        Some(&STDIN) if message.len() > 1 => FromClient::Stdin(message.slice(1..)),
        Some(&CLOSE) if message.get(1) == Some(&STDIN) => FromClient::StdinClosed,
        Some(&RESIZE) => FromClient::Resize(message.slice(1..)),
        _ => FromClient::Ignored,
    }
}

/// A message carrying `data` on `channel`.
pub(super) fn frame(channel: u8, data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 1);
    out.put_u8(channel);
    out.put_slice(data);
    out.freeze()
}

/// The error channel's last word for a command that ended with `code` (upstream's kubelet and container runtimes
/// report a process killed by a signal as 128 + the signal).
pub(super) fn exit_status(code: i32, command: &[String]) -> Value {
    if code == 0 {
        return json!({"metadata": {}, "status": "Success"});
    }
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: error executing command {command:?}, exit code {code}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

/// The error channel's answer when the stream could not run at all (an internal error, as upstream's kubelet
/// reports a runtime failure).
pub(super) fn failure(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
        "code": 500,
    })
}

/// The closing handshake that ends a stream once the error channel has spoken: a normal closure (1000), which
/// client-go reads as the end of every stream (a close without a code is an error to it).
pub(super) fn close() -> Message {
    Message::Close(Some(CloseFrame {
        code: close_code::NORMAL,
        reason: Utf8Bytes::from_static(""),
    }))
}

/// [`exit_status`] or [`failure`] as the error channel's message.
pub(super) fn status_frame(status: &Value) -> Bytes {
    frame(ERROR, status.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_are_read_by_channel() {
        assert_eq!(
            parse(&Bytes::from_static(b"\x00abc")),
            FromClient::Stdin(Bytes::from_static(b"abc"))
        );
        assert_eq!(
            parse(&Bytes::from_static(&[255, 0])),
            FromClient::StdinClosed
        );
        assert_eq!(parse(&Bytes::from_static(&[255, 1])), FromClient::Ignored);
        assert_eq!(
            parse(&Bytes::from_static(b"\x04{\"Width\":80,\"Height\":24}")),
            FromClient::Resize(Bytes::from_static(b"{\"Width\":80,\"Height\":24}"))
        );
        assert_eq!(parse(&Bytes::from_static(&[0])), FromClient::Ignored);
        assert_eq!(parse(&Bytes::new()), FromClient::Ignored);
    }

    #[test]
    fn exit_codes_are_reported_like_upstream() {
        assert_eq!(
            exit_status(0, &[]),
            json!({"metadata": {}, "status": "Success"})
        );
        let failed = exit_status(3, &["sh".into()]);
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
        assert_eq!(frame(STDOUT, b"x"), Bytes::from_static(b"\x01x"));
        assert_eq!(frame(STDERR, b""), Bytes::from_static(b"\x02"));
    }
}
