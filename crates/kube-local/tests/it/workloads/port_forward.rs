//! `pods/{name}/portforward` with the real `kubectl port-forward`: a pod echoing on a port, reached through a
//! forwarded local port over both transports (SPDY tunnelled in WebSocket, kubectl's default, and plain SPDY with
//! `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`), a Service resolved by kubectl, concurrent connections, a transfer of several
//! MiB compared byte for byte, and a port nothing listens on.

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

use super::common::{Cluster, TESTAPP, eventually, ready};

const NS: &str = "pf";
/// The port the test pod echoes on.
const ECHO: u16 = 7000;

/// A running `kubectl port-forward`, stopped when dropped.
struct Forward {
    child: Child,
    /// The local port kubectl listens on.
    port: u16,
    /// What kubectl writes on stderr, collected as it comes.
    stderr: tokio::task::JoinHandle<String>,
}

impl Forward {
    /// Starts `kubectl port-forward -n pf TARGET PORTS` with `env`, and waits for its "Forwarding from" line.
    async fn start(c: &Cluster, target: &str, ports: &str, env: &[(&str, &str)]) -> Forward {
        let kubeconfig = c.env.kubeconfig_path().to_path_buf();
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(kubeconfig.parent().unwrap().join("kubectl-cache"))
            .args(["port-forward", "-n", NS, "-v=6", target, ports])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kubectl runs");
        // Collected for assertions, and echoed so a failing test shows what kubectl said.
        let mut stderr_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            while let Ok(Some(line)) = stderr_lines.next_line().await {
                eprintln!("kubectl: {line}");
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("kubectl prints where it forwards from")
            .unwrap()
            .expect("a line");
        // "Forwarding from 127.0.0.1:LOCAL -> REMOTE"
        let port = line
            .strip_prefix("Forwarding from 127.0.0.1:")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        // Keep reading stdout ("Handling connection for ...") so kubectl never blocks writing it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Forward {
            child,
            port,
            stderr,
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(("127.0.0.1", self.port)).await.unwrap()
    }

    /// Stops kubectl and returns its stderr.
    async fn stop(mut self) -> String {
        let _ = self.child.kill().await;
        self.stderr.await.unwrap()
    }
}

/// `len` bytes of a fixed pseudo-random sequence (every byte value occurs; nothing repeats at small periods).
fn payload(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 24) as u8
        })
        .collect()
}

/// Sends `data` through `conn` to the echo server while reading the echo; returns what came back once the echo
/// server closed after our half-close.
async fn echo_through(conn: TcpStream, data: Vec<u8>) -> Vec<u8> {
    let (mut reader, mut writer) = conn.into_split();
    let send = tokio::spawn(async move {
        writer.write_all(&data).await.unwrap();
        writer.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), reader.read_to_end(&mut back))
        .await
        .expect("the echo completes")
        .unwrap();
    send.await.unwrap();
    back
}

/// One exchange on an open connection: writes `text`, reads it back.
async fn ping(conn: &mut TcpStream, text: &str) {
    conn.write_all(text.as_bytes()).await.unwrap();
    let mut buf = vec![0; text.len()];
    tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut buf))
        .await
        .expect("the echo arrives")
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&buf), text);
}

/// The echo server the test pod runs (python3 is a prerequisite of the repository's checks): every connection's
/// bytes come back, and its end too (a half-close answered by one).
const ECHO_SERVER: &str = r#"
import os, socket, threading
server = socket.create_server((os.environ["POD_IP"], int(os.environ["ECHO_PORT"])))
def echo(conn):
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
while True:
    conn, _ = server.accept()
    threading.Thread(target=echo, args=(conn,), daemon=True).start()
"#;

/// A cluster with pod `echo` (echoing on [`ECHO`], labelled `app: echo`) ready, and Service `echo` (port 2379 to
/// the pod's `echo` port).
async fn echo_pod() -> Cluster {
    with_echo_pod(Cluster::start(NS).await).await
}

/// [`echo_pod`] in the cluster `c`.
async fn with_echo_pod(c: Cluster) -> Cluster {
    with_echo_pod_on(c, None).await
}

/// [`echo_pod`] in the cluster `c`, on `node` when given.
async fn with_echo_pod_on(c: Cluster, node: Option<&str>) -> Cluster {
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "echo", "labels": {"app": "echo"}},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "app",
                    "image": TESTAPP,
                    "command": ["python3", "-c", ECHO_SERVER],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "ECHO_PORT", "value": ECHO.to_string()},
                    ],
                    "ports": [{"name": "echo", "containerPort": ECHO}],
                    "readinessProbe": {"tcpSocket": {"port": "echo"}, "periodSeconds": 1},
                }],
            },
        }),
    )
    .await;
    c.create::<Service>(
        NS,
        json!({
            "metadata": {"name": "echo"},
            "spec": {"selector": {"app": "echo"}, "ports": [{"port": 2379, "targetPort": "echo"}]},
        }),
    )
    .await;
    eventually("pod echo ready", Duration::from_secs(30), || async {
        c.pod(NS, "echo").await.filter(ready)
    })
    .await;
    c
}

/// Everything one transport must do: echo, a large transfer, two concurrent connections.
async fn exercise(f: &Forward) {
    let mut a = f.connect().await;
    ping(&mut a, "hello through the forward").await;

    // Several MiB each way: more than any flow-control window, compared byte for byte.
    let big = payload(6 << 20, 1);
    let back = echo_through(f.connect().await, big.clone()).await;
    assert_eq!(back.len(), big.len());
    assert!(back == big, "the echoed bytes differ");

    // Two connections open at once, interleaved, then both carrying MiBs at the same time.
    let mut b = f.connect().await;
    ping(&mut a, "first").await;
    ping(&mut b, "second").await;
    ping(&mut a, "first again").await;
    let (x, y) = (payload(3 << 20, 2), payload(3 << 20, 3));
    let (bx, by) = tokio::join!(echo_through(a, x.clone()), echo_through(b, y.clone()));
    assert!(bx == x && by == y, "concurrent transfers mixed up");
}

#[tokio::test]
async fn kubectl_port_forward_over_websocket_and_spdy() {
    let c = echo_pod().await;

    // kubectl 1.32's default: SPDY tunnelled through a WebSocket.
    let ws = Forward::start(&c, "pod/echo", &format!("0:{ECHO}"), &[]).await;
    exercise(&ws).await;
    let log = ws.stop().await;
    assert!(
        log.contains("GET ") && log.contains("/pods/echo/portforward 101 Switching Protocols"),
        "{log}"
    );
    assert!(
        log.contains("negotiated protocol: portforward.k8s.io"),
        "{log}"
    );
    assert!(
        !log.contains("fallback"),
        "kubectl fell back from WebSockets:\n{log}"
    );

    // Plain SPDY after an HTTP upgrade.
    let spdy = Forward::start(
        &c,
        "pod/echo",
        &format!("0:{ECHO}"),
        &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    )
    .await;
    exercise(&spdy).await;
    let log = spdy.stop().await;
    assert!(
        log.contains("POST ") && log.contains("/pods/echo/portforward 101 Switching Protocols"),
        "{log}"
    );
    assert!(!log.contains("WebSocket"), "{log}");
}

#[tokio::test]
async fn kubectl_port_forward_over_https_with_authentication() {
    // The TLS listener hands upgraded connections over too, and the admin may forward.
    let c = with_echo_pod(Cluster::with_authentication(NS).await).await;
    for env in [
        [("KUBECTL_PORT_FORWARD_WEBSOCKETS", "true")],
        [("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")],
    ] {
        let f = Forward::start(&c, "pod/echo", &format!("0:{ECHO}"), &env).await;
        let back = echo_through(f.connect().await, payload(1 << 20, 4)).await;
        assert!(back == payload(1 << 20, 4), "{env:?}");
        let log = f.stop().await;
        assert!(log.contains("https://"), "{log}");
    }
}

#[tokio::test]
async fn kubectl_port_forward_to_a_service_and_to_a_closed_port() {
    let c = echo_pod().await;

    // kubectl resolves the Service to its pod and port 2379 to the pod's `echo` port; LOCAL:REMOTE with a chosen
    // local port.
    let local = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let svc = Forward::start(&c, "svc/echo", &format!("{local}:2379"), &[]).await;
    assert_eq!(svc.port, local);
    let mut conn = svc.connect().await;
    ping(&mut conn, "via the service").await;
    drop(conn);
    svc.stop().await;

    // Nothing listens on port 9: kubectl prints the error stream's text ("an error occurred forwarding L -> 9: ...").
    let closed = Forward::start(&c, "pod/echo", "0:9", &[]).await;
    let mut conn = closed.connect().await;
    let mut buf = Vec::new();
    // The server closes the data stream after the error; kubectl closes the local connection.
    let _ = tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf)).await;
    assert!(buf.is_empty());
    // kubectl (client-go since 1.23) then closes the whole session and exits, as it does against any cluster.
    let mut closed = closed;
    let exit = tokio::time::timeout(Duration::from_secs(10), closed.child.wait())
        .await
        .expect("kubectl exits after the error")
        .unwrap();
    assert!(!exit.success());
    let log = closed.stop().await;
    assert!(log.contains("error: lost connection to pod"), "{log}");
    let uid = c
        .pod(NS, "echo")
        .await
        .and_then(|p| p.metadata.uid)
        .unwrap();
    assert!(
        log.contains(&format!(
            " -> 9: error forwarding port 9 to pod {NS}/echo, uid {uid}: dial tcp"
        )) && log.contains(":9: connect: connection refused"),
        "{log}"
    );

    // The pod is still reachable through a new forward.
    let again = Forward::start(&c, "pod/echo", &format!("0:{ECHO}"), &[]).await;
    let mut conn = again.connect().await;
    ping(&mut conn, "still there").await;
    drop(conn);
    again.stop().await;
}

#[tokio::test]
async fn port_forward_answers_like_kube_apiserver_for_missing_and_unready_pods() {
    let c = Cluster::start(NS).await;
    let request = |pod: &str| {
        http::Request::post(format!(
            "/api/v1/namespaces/{NS}/pods/{pod}/portforward?ports=80"
        ))
        .body(Vec::new())
        .unwrap()
    };
    let status = |r: Result<String, kube::Error>| match r {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected an API error, got {other:?}"),
    };
    let (code, message) = status(c.client().request_text(request("nope")).await);
    assert_eq!((code, message.as_str()), (404, "pods \"nope\" not found"));

    // Bound to a node no kubelet runs: it never starts.
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "elsewhere"},
            "spec": {"nodeName": "no-such-node", "containers": [{"name": "app", "image": TESTAPP}]},
        }),
    )
    .await;
    let (code, message) = status(c.client().request_text(request("elsewhere")).await);
    assert_eq!(code, 400, "{message}");
    assert!(
        message.starts_with("unable to forward port because pod is not running. Current status="),
        "{message}"
    );

    // A request that asks for no upgrade.
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "plain"},
            "spec": {"containers": [{"name": "app", "image": TESTAPP,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]},
        }),
    )
    .await;
    eventually("pod plain running", Duration::from_secs(30), || async {
        c.pod(NS, "plain")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
    })
    .await;
    let (code, message) = status(c.client().request_text(request("plain")).await);
    assert_eq!(
        (code, message.as_str()),
        (400, "unable to upgrade: missing upgrade headers in request")
    );
}

#[tokio::test]
async fn port_forward_reaches_the_pod_through_its_nodes_kubelet_and_not_while_that_node_is_down() {
    let c = Cluster::with_nodes(NS, 2, Duration::from_secs(40)).await;
    let c = with_echo_pod_on(c, Some("node-2")).await;
    let f = Forward::start(&c, "pod/echo", &format!("0:{ECHO}"), &[]).await;
    let mut conn = f.connect().await;
    ping(&mut conn, "through node-2's kubelet").await;
    drop(conn);
    f.stop().await;

    // The node loses power: the pod is still Running as far as the API knows (the grace period has not run out),
    // but the kubelet the API server hands the stream to is gone.
    c.kubelet().kill_node("node-2").unwrap();
    let pod = c.pod(NS, "echo").await.unwrap();
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Running")
    );
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{NS}/pods/echo/portforward?ports={ECHO}"
    ))
    .header("connection", "Upgrade")
    .header("upgrade", "SPDY/3.1")
    .header("x-stream-protocol-version", "portforward.k8s.io")
    .body(Vec::new())
    .unwrap();
    match c.client().request_text(request).await {
        Err(kube::Error::Api(e)) => {
            assert_eq!(e.code, 500, "{}", e.message);
            assert!(
                e.message.starts_with("error dialing the kubelet at "),
                "{}",
                e.message
            );
        }
        other => panic!("expected the API server to fail reaching the kubelet, got {other:?}"),
    }
}
