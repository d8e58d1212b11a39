//! Exec, HTTP and TCP probes, and the loop that applies a probe's delay, period and thresholds.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerPort, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

/// Where a probe runs: the pod's address and the container's process (for exec probes).
#[derive(Clone)]
pub struct Target {
    pub pod_ip: IpAddr,
    pub ports: Vec<ContainerPort>,
    pub pid: i32,
    pub env: Vec<(String, String)>,
}

fn port(target: &Target, port: &IntOrString) -> Option<u16> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).ok(),
        IntOrString::String(name) => target
            .ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .or_else(|| name.parse().ok()),
    }
}

/// One probe attempt: success and a message for failures.
pub async fn attempt(probe: &Probe, target: &Target) -> (bool, String) {
    let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
    if let Some(exec) = &probe.exec {
        let command = exec.command.clone().unwrap_or_default();
        return super::sandbox::exec_in(target.pid, &command, &target.env, timeout).await;
    }
    if let Some(http) = &probe.http_get {
        let Some(p) = port(target, &http.port) else {
            return (false, format!("invalid port {:?}", http.port));
        };
        if http.scheme.as_deref() == Some("HTTPS") {
            // The kubelet does not verify probe certificates; a TCP connect is the closest check without TLS here.
            return tcp(host(http.host.as_deref(), target), p, timeout).await;
        }
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let mut headers = String::new();
        for h in http.http_headers.iter().flatten() {
            headers.push_str(&format!("{}: {}\r\n", h.name, h.value));
        }
        return http_get(
            host(http.host.as_deref(), target),
            p,
            &path,
            &headers,
            timeout,
        )
        .await;
    }
    if let Some(t) = &probe.tcp_socket {
        let Some(p) = port(target, &t.port) else {
            return (false, format!("invalid port {:?}", t.port));
        };
        return tcp(host(t.host.as_deref(), target), p, timeout).await;
    }
    if probe.grpc.is_some() {
        return (false, "gRPC probes are not supported by kube-local".into());
    }
    (false, "probe has no handler".into())
}

fn host(explicit: Option<&str>, target: &Target) -> IpAddr {
    explicit
        .and_then(|h| h.parse().ok())
        .unwrap_or(target.pod_ip)
}

async fn tcp(ip: IpAddr, port: u16, timeout: Duration) -> (bool, String) {
    match tokio::time::timeout(
        timeout,
        tokio::net::TcpStream::connect(SocketAddr::new(ip, port)),
    )
    .await
    {
        Ok(Ok(_)) => (true, String::new()),
        Ok(Err(e)) => (false, format!("dial tcp {ip}:{port}: {e}")),
        Err(_) => (false, format!("dial tcp {ip}:{port}: i/o timeout")),
    }
}

async fn http_get(
    ip: IpAddr,
    port: u16,
    path: &str,
    headers: &str,
    timeout: Duration,
) -> (bool, String) {
    let url = format!("http://{ip}:{port}{path}");
    let run = async {
        let mut stream = tokio::net::TcpStream::connect(SocketAddr::new(ip, port)).await?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {ip}:{port}\r\nUser-Agent: kube-probe/1.37\r\nAccept: */*\r\nConnection: close\r\n{headers}\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut buf = vec![0u8; 1024];
        let mut got = Vec::new();
        // The status line is all a probe needs.
        while !got.windows(2).any(|w| w == b"\r\n") && got.len() < 4096 {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        Ok::<Vec<u8>, std::io::Error>(got)
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok(bytes)) => {
            let text = String::from_utf8_lossy(&bytes);
            let code = text
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse::<u16>().ok());
            match code {
                Some(c) if (200..400).contains(&c) => (true, String::new()),
                Some(c) => (false, format!("HTTP probe failed with statuscode: {c}")),
                None => (false, format!("Get \"{url}\": malformed HTTP response")),
            }
        }
        Ok(Err(e)) => (false, format!("Get \"{url}\": {e}")),
        Err(_) => (
            false,
            format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            ),
        ),
    }
}

/// Runs a probe for as long as the returned receiver's task lives: the value is `Some(true|false)` once the
/// thresholds decide, `None` before. Failure messages go to `on_failure`.
pub async fn run(
    probe: Probe,
    target: Target,
    result: watch::Sender<Option<bool>>,
    initial: Option<bool>,
    on_failure: impl Fn(String) + Send,
) {
    let delay = Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
    let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
    let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
    let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
    result.send_replace(initial);
    tokio::time::sleep(delay).await;
    let (mut successes, mut failures) = (0, 0);
    loop {
        let (ok, message) = attempt(&probe, &target).await;
        if ok {
            successes += 1;
            failures = 0;
            if successes >= success_threshold {
                result.send_replace(Some(true));
            }
        } else {
            failures += 1;
            successes = 0;
            on_failure(message);
            if failures >= failure_threshold {
                result.send_replace(Some(false));
                failures = 0;
            }
        }
        tokio::time::sleep(period).await;
    }
}

/// Runs a lifecycle hook (`postStart` / `preStop`): exec, HTTP GET or sleep, within `timeout`.
pub async fn run_hook(
    handler: &k8s_openapi::api::core::v1::LifecycleHandler,
    target: &Target,
    timeout: Duration,
) -> (bool, String) {
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64).min(timeout)).await;
        return (true, String::new());
    }
    let probe = Probe {
        exec: handler.exec.clone(),
        http_get: handler.http_get.clone(),
        tcp_socket: handler.tcp_socket.clone(),
        timeout_seconds: Some(timeout.as_secs().clamp(1, i32::MAX as u64) as i32),
        ..Probe::default()
    };
    attempt(&probe, target).await
}
