//! `kubectl exec` on the kubelet: `/exec/{namespace}/{pod}/{container}?command=…&stdin=&stdout=&stderr=&tty=`, a
//! WebSocket upgrade speaking [`super::channels`], or a SPDY/3.1 upgrade (what kube-apiserver speaks to a kubelet)
//! carrying the same channels ([`super::transport`]).
//!
//! The command is resolved through the container's image, as the container's own program is (`etcdctl` in an etcd
//! image is the mapped etcd directory's `etcdctl`, anything else the host's), and runs inside the container's mount
//! namespace with the container's environment and working directory ([`sandbox::command_in`]). Its standard streams
//! are relayed both ways — pipes, or with `tty=true` a pseudo-terminal ([`Terminal`]) resized by channel 4; when it
//! exits and its output has drained, the exit code goes on the error channel and the connection closes. A client
//! that goes away takes the command's process group with it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use axum::extract::{Path, RawQuery, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use futures::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::channels::{self, FromClient};
use super::transport::{Incoming, Outgoing};
use super::{error, flag, query_pairs, running_container};
use crate::kubelet::Shared;
use crate::kubelet::sandbox;
use crate::kubelet::terminal::{self, Terminal};

/// What an exec request asks for.
struct ExecRequest {
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

/// The command, ready to spawn, and the terminal its streams are on (`tty=true`).
struct Prepared {
    cmd: tokio::process::Command,
    terminal: Option<Terminal>,
}

/// GET (or POST) `/exec/{namespace}/{pod}/{container}`.
pub(super) async fn exec(
    State(shared): State<Arc<Shared>>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(query): RawQuery,
    req: Request,
) -> Response {
    let pairs = query_pairs(query.as_deref());
    let tty = flag(&pairs, "tty");
    let request = ExecRequest {
        command: pairs
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect(),
        stdin: flag(&pairs, "stdin"),
        stdout: flag(&pairs, "stdout"),
        // A terminal has one output stream; upstream's kubelet drops stderr with a TTY too.
        stderr: flag(&pairs, "stderr") && !tty,
    };
    if request.command.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container".into(),
        );
    }
    let (rt, pid) = match running_container(&shared, &namespace, &pod, &container) {
        Ok(found) => found,
        Err((code, message)) => return error(code, message),
    };
    let image = rt
        .container_spec(&container)
        .and_then(|c| c.image)
        .unwrap_or_default();
    // A command the image map cannot place runs as given: nsenter reports it missing (127).
    let (program, args) = match shared
        .config
        .image_map
        .resolve(&image, &request.command, &[])
    {
        Ok(p) => (p.path, p.args),
        Err(_) => (
            PathBuf::from(&request.command[0]),
            request.command[1..].to_vec(),
        ),
    };
    let mut env = rt.env(&container);
    if tty {
        terminal::add_term(&mut env);
    }
    let mut cmd = sandbox::command_in(pid, program.as_os_str(), &args, &env, tty);
    let terminal = if tty {
        match wire_terminal(&mut cmd) {
            Ok(t) => Some(t),
            Err(e) => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("allocating a terminal for the command: {e}"),
                );
            }
        }
    } else {
        let piped = |on: bool| if on { Stdio::piped() } else { Stdio::null() };
        cmd.stdin(piped(request.stdin))
            .stdout(piped(request.stdout))
            .stderr(piped(request.stderr));
        None
    };
    let streams = super::transport::Streams {
        stdin: request.stdin,
        stdout: request.stdout,
        stderr: request.stderr,
        tty,
    };
    let prepared = Prepared { cmd, terminal };
    let relay: super::transport::Relay =
        Box::new(move |outgoing, incoming| run(outgoing, incoming, prepared, request).boxed());
    match super::transport::upgrade(req, streams, relay).await {
        Ok(response) => response,
        Err((code, message)) => error(code, message),
    }
}

/// Puts the command's standard streams on a new pseudo-terminal's slave end.
fn wire_terminal(cmd: &mut tokio::process::Command) -> std::io::Result<Terminal> {
    let (terminal, slave) = Terminal::open()?;
    cmd.stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    Ok(terminal)
}

type Input = Box<dyn AsyncWrite + Send + Unpin>;

/// Relays one command's streams until it has exited and its output has been sent.
async fn run(mut sink: Outgoing, mut source: Incoming, prepared: Prepared, request: ExecRequest) {
    let Prepared { mut cmd, terminal } = prepared;
    let spawned = cmd.spawn();
    // The kubelet's copies of a terminal's slave end go with the command: the output ends when the command's do.
    drop(cmd);
    let (mut child, io) = match spawned.and_then(|child| {
        let io = terminal.as_ref().map(Terminal::io).transpose()?;
        Ok((child, io))
    }) {
        Ok(started) => started,
        Err(e) => {
            let status = channels::failure(&format!(
                "error executing command {:?} in the container: {e}",
                request.command
            ));
            sink.send(channels::status_frame(&status)).await;
            sink.finish().await;
            return;
        }
    };
    let group = child.id();
    // Output is read by its own tasks so that a command blocked writing never stalls its input, and the reverse.
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(16);
    let input: Option<Input> = match io {
        Some((reader, writer)) => {
            if request.stdout {
                tokio::spawn(pump(reader, channels::STDOUT, out_tx.clone()));
            }
            request.stdin.then(|| Box::new(writer) as Input)
        }
        None => {
            if let Some(stdout) = child.stdout.take() {
                tokio::spawn(pump(stdout, channels::STDOUT, out_tx.clone()));
            }
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(pump(stderr, channels::STDERR, out_tx.clone()));
            }
            child.stdin.take().map(|s| Box::new(s) as Input)
        }
    };
    drop(out_tx);
    let (in_tx, mut in_rx) = mpsc::unbounded_channel::<Bytes>();
    if let Some(mut input) = input {
        tokio::spawn(async move {
            while let Some(data) = in_rx.recv().await {
                if input.write_all(&data).await.is_err() {
                    return;
                }
            }
            // Dropping a pipe closes it: the command reads end of file. (A terminal stays open: end of input on a
            // terminal is the ^D the client types.)
        });
    }
    let mut stdin = Some(in_tx);
    let mut output_open = true;
    let code = loop {
        tokio::select! {
            chunk = out_rx.recv(), if output_open => match chunk {
                Some(data) => {
                    if !sink.send(data).await {
                        sandbox::kill_group(group);
                        return;
                    }
                }
                None => output_open = false,
            },
            status = child.wait(), if !output_open => break exit_code(status),
            message = source.next() => match message {
                Some(data) => match channels::parse(&data) {
                    FromClient::Stdin(bytes) => {
                        if let Some(tx) = &stdin && tx.send(bytes).is_err() {
                            stdin = None;
                        }
                    }
                    FromClient::StdinClosed => stdin = None,
                    FromClient::Resize(size) => {
                        if let Some(t) = &terminal {
                            t.resize(&size);
                        }
                    }
                    FromClient::Ignored => {}
                },
                None => {
                    // The client went away: nobody is left to read the output or the exit code.
                    sandbox::kill_group(group);
                    return;
                }
            },
        }
    };
    let status = channels::exit_status(code, &request.command);
    sink.send(channels::status_frame(&status)).await;
    sink.finish().await;
}

/// The exit code of a finished command; a command killed by a signal counts as 128 + the signal, as container
/// runtimes report it.
fn exit_code(status: std::io::Result<std::process::ExitStatus>) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => s
            .code()
            .or_else(|| s.signal().map(|n| 128 + n))
            .unwrap_or(128),
        Err(_) => 128,
    }
}

/// Sends what `reader` yields as messages on `channel` until it ends (or nobody listens). A terminal's master end
/// ends with EIO once the command's side is closed.
async fn pump(mut reader: impl AsyncRead + Unpin, channel: u8, tx: mpsc::Sender<Bytes>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send(channels::frame(channel, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}
