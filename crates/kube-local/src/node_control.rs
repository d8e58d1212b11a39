//! Power for the nodes of a running environment, from another process: `kube-local node kill NAME` and
//! `node start NAME` (and `dkv local node …`) reach the environment serving a data directory through a Unix socket in
//! it, `DIR/node-control.sock`.
//!
//! The protocol is one line per connection: `kill NAME` or `start NAME`, answered by `ok` or `error: <why>`.

use std::path::{Path, PathBuf};
use std::sync::Weak;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

use crate::kubelet::Kubelet;

/// The socket of the environment serving `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("node-control.sock")
}

/// What to do to a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Power {
    Kill,
    Start,
}

impl Power {
    fn verb(self) -> &'static str {
        match self {
            Power::Kill => "kill",
            Power::Start => "start",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error(
        "no environment is running with data directory {dir} (nothing listens on {socket}: start it with `up --data-dir {dir}`): {source}"
    )]
    NotRunning {
        dir: String,
        socket: String,
        source: std::io::Error,
    },
    #[error("talking to the environment at {socket}: {source}")]
    Io {
        socket: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(String),
}

/// Asks the environment serving `data_dir` to kill or start a node; returns when it is done.
pub async fn request(data_dir: &Path, power: Power, node: &str) -> Result<(), ControlError> {
    let socket = socket_path(data_dir);
    let shown = socket.display().to_string();
    let mut stream =
        UnixStream::connect(&socket)
            .await
            .map_err(|source| ControlError::NotRunning {
                dir: data_dir.display().to_string(),
                socket: shown.clone(),
                source,
            })?;
    let io = |source| ControlError::Io {
        socket: shown.clone(),
        source,
    };
    stream
        .write_all(format!("{} {node}\n", power.verb()).as_bytes())
        .await
        .map_err(io)?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .await
        .map_err(io)?;
    match answer.trim() {
        "ok" => Ok(()),
        other => Err(ControlError::Refused(
            other.strip_prefix("error: ").unwrap_or(other).to_string(),
        )),
    }
}

/// Serves requests for the kubelets until the task is dropped (or the kubelets are).
pub fn listen(data_dir: &Path) -> std::io::Result<UnixListener> {
    let socket = socket_path(data_dir);
    // A socket file left by an environment that did not stop cleanly.
    let _ = std::fs::remove_file(&socket);
    UnixListener::bind(&socket)
}

pub async fn serve(listener: UnixListener, kubelet: Weak<Kubelet>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(kubelet) = kubelet.upgrade() else {
            return;
        };
        let mut stream = BufReader::new(stream);
        let mut line = String::new();
        if stream.read_line(&mut line).await.is_err() {
            continue;
        }
        let answer = match line.trim().split_once(' ') {
            Some(("kill", node)) => kubelet.kill_node(node.trim()).map_err(|e| e.to_string()),
            Some(("start", node)) => kubelet
                .start_node(node.trim())
                .await
                .map_err(|e| e.to_string()),
            _ => Err(format!(
                "unknown request {:?}: expected `kill NODE` or `start NODE`",
                line.trim()
            )),
        };
        let reply = match answer {
            Ok(()) => "ok\n".to_string(),
            Err(e) => format!("error: {e}\n"),
        };
        let _ = stream.get_mut().write_all(reply.as_bytes()).await;
    }
}
