//! What both suites use: kubectl as a subprocess, raw requests and waiting for a condition.

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Polls `check` every `every` until it returns `Some`, or fails with `what`
/// after `within`.
pub async fn eventually_every<T, F, Fut>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        tokio::time::sleep(every).await;
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs kubectl (with a private cache directory) on a blocking thread, so
/// the server keeps running; `stdin` is its standard input (`kubectl apply
/// -f -`).
pub async fn kubectl_in(
    env: &kube_local::Environment,
    args: &[&str],
    stdin: Option<&str>,
) -> Output {
    use std::io::Write;
    let kubeconfig = env.kubeconfig_path().to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let stdin = stdin.map(String::from);
    tokio::task::spawn_blocking(move || {
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(kubeconfig.parent().unwrap().join("kubectl-cache"))
            .args(&args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .unwrap();
        }
        drop(child.stdin.take());
        child.wait_with_output().expect("kubectl finishes")
    })
    .await
    .unwrap()
}

/// Sends a request with `client`; returns the status, headers and whole body.
pub async fn send_request(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
) -> (u16, http::HeaderMap, Vec<u8>) {
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let bytes = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (status, headers, bytes.to_vec())
}

/// Raw HTTP request against the environment; returns (status, headers, body).
pub async fn raw(
    env: &kube_local::Environment,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, http::HeaderMap, Value) {
    let mut req = http::Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let body = body
        .map(|b| {
            if let Value::String(s) = b {
                s.into_bytes()
            } else {
                b.to_string().into_bytes()
            }
        })
        .unwrap_or_default();
    let (status, headers, bytes) = send_request(&env.client(), req.body(body).unwrap()).await;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, headers, v)
}

/// Runs the `kube-local` binary with `args` (e.g. `up --data-dir DIR`), as a
/// user starts it, and waits up to `wait` for the path of the kubeconfig it
/// prints first. The process dies with the returned child.
pub async fn kube_local_up(
    args: &[&std::ffi::OsStr],
    wait: Duration,
) -> (tokio::process::Child, String) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-local"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let kubeconfig = tokio::time::timeout(wait, lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    (child, kubeconfig)
}
