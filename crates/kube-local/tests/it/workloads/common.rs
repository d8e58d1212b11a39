//! One environment per test: the API server, the workload controllers and the kubelet, with a test image mapped to
//! `kube-local-testapp`.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use kube_local::api_traffic::Verb;
use kube_local::clock::Clock;
use kube_local::kubelet::{ImageTarget, Kubelet, KubeletConfig};
use serde_json::{Value, json};

/// The image the test program runs as.
pub const TESTAPP: &str = "kube-local.test/testapp:1";

pub struct Cluster {
    pub env: kube_local::Environment,
}

pub fn testapp() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kube-local-testapp"))
}

impl Cluster {
    pub async fn start(namespace: &str) -> Cluster {
        Self::with_config(namespace, |c| c).await
    }

    pub async fn with_config(
        namespace: &str,
        f: impl FnOnce(KubeletConfig) -> KubeletConfig,
    ) -> Cluster {
        Self::with_builder(namespace, f, |b| b).await
    }

    /// An environment that authenticates and authorizes its callers (over HTTPS).
    pub async fn with_authentication(namespace: &str) -> Cluster {
        Self::with_builder(namespace, |c| c, |b| b.authenticate(true)).await
    }

    /// `count` nodes over three zones; a node whose heartbeats stop is declared lost after `grace`.
    pub async fn with_nodes(namespace: &str, count: usize, grace: Duration) -> Cluster {
        Self::with_builder(
            namespace,
            |c| c,
            |b| b.nodes(count).node_monitor_grace_period(grace),
        )
        .await
    }

    async fn with_builder(
        namespace: &str,
        f: impl FnOnce(KubeletConfig) -> KubeletConfig,
        builder: impl FnOnce(kube_local::EnvironmentBuilder) -> kube_local::EnvironmentBuilder,
    ) -> Cluster {
        let config = KubeletConfig::default()
            .image(
                "kube-local.test/testapp:*",
                ImageTarget {
                    bin_dir: testapp().parent().map(|p| p.to_path_buf()),
                    entrypoint: vec![testapp().display().to_string()],
                    cmd: Vec::new(),
                },
            )
            .backoff(Duration::from_millis(500), Duration::from_secs(4));
        let env = builder(kube_local::Environment::builder().kubelet_config(f(config)))
            .build()
            .await
            .unwrap();
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
        Api::<Namespace>::all(env.client())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        Cluster { env }
    }

    pub fn kubelet(&self) -> &Kubelet {
        self.env.kubelet().unwrap()
    }

    pub fn clock(&self) -> &Clock {
        self.env.clock().unwrap()
    }

    pub fn client(&self) -> kube::Client {
        self.env.client()
    }

    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client(), ns)
    }

    /// Creates an object of kind `K` from JSON.
    pub async fn create<K>(&self, ns: &str, value: Value) -> K
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let obj: K = serde_json::from_value(value).unwrap();
        self.api::<K>(ns)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap()
    }

    pub async fn pod(&self, ns: &str, name: &str) -> Option<Pod> {
        self.api::<Pod>(ns).get_opt(name).await.unwrap()
    }
}

/// Polls `check` (every 100 ms) until it returns `Some`, or fails with `what` after `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    crate::shared::eventually_every(what, within, Duration::from_millis(100), check).await
}

/// Waits until the API server has received `n` GETs of `pods/{subresource}` (kubectl has connected).
pub async fn connected(c: &Cluster, subresource: &str, n: u64) {
    let resource = format!("pods/{subresource}");
    eventually(
        &format!("kubectl requesting {resource}"),
        Duration::from_secs(20),
        || async { (c.env.requests().count(Verb::Get, &resource) >= n).then_some(()) },
    )
    .await;
}

/// Whether every container of the pod runs.
pub fn running(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        })
}

pub fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// GET http://ip:port/path; the body of a 200 answer, or None on any failure. (Async: the kubelet's Service proxy
/// runs on the test's runtime.)
pub async fn http_get(ip: &str, port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let run = async {
        let mut stream = tokio::net::TcpStream::connect(format!("{ip}:{port}"))
            .await
            .ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        (head.split_whitespace().nth(1) == Some("200")).then(|| body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .ok()
        .flatten()
}

/// A pod template running the test program with an HTTP readiness probe on /healthz.
pub fn testapp_template(labels: Value, extra_env: Value) -> Value {
    let mut env =
        vec![json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})];
    if let Some(extra) = extra_env.as_array() {
        env.extend(extra.iter().cloned());
    }
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "app",
                "image": TESTAPP,
                "env": env,
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
            }],
        },
    })
}

/// Runs `kubectl` against the cluster; returns (success, stdout, stderr). Blocking, so it runs off the runtime.
pub async fn kubectl(env: &kube_local::Environment, args: &[&str]) -> (bool, String, String) {
    kubectl_in(env, args, None).await
}

/// [`kubectl`] with `stdin` as its standard input (`kubectl apply -f -`).
pub async fn kubectl_in(
    env: &kube_local::Environment,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let out = crate::shared::kubectl_in(env, args, stdin).await;
    (
        out.status.success(),
        crate::shared::stdout(&out),
        crate::shared::stderr(&out),
    )
}

/// `kubectl` as a user runs it in a terminal emulator: its standard streams on a pseudo-terminal of a given size,
/// which the test types into and reads (kubectl's `-t` needs a terminal on its stdin).
pub struct KubectlOnTerminal {
    child: std::process::Child,
    keyboard: std::fs::File,
    screen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    reader: std::thread::JoinHandle<()>,
}

impl KubectlOnTerminal {
    /// Starts `kubectl ARGS…` on a new terminal of `cols`×`rows`.
    pub fn start(env: &kube_local::Environment, args: &[&str], cols: u16, rows: u16) -> Self {
        use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let master = openpt(flags).unwrap();
        grantpt(&master).unwrap();
        unlockpt(&master).unwrap();
        let size = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&master, size).unwrap();
        let slave = ioctl_tiocgptpeer(&master, flags).unwrap();
        let kubeconfig = env.kubeconfig_path().to_path_buf();
        let child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--cache-dir")
            .arg(kubeconfig.parent().unwrap().join("kubectl-cache"))
            .args(args)
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .expect("kubectl runs");
        // The terminal's output ends (EIO) once kubectl, the only holder of the slave end, has exited.
        let screen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut display = std::fs::File::from(master.try_clone().unwrap());
        let shown = screen.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = display.read(&mut buf) {
                shown.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        KubectlOnTerminal {
            child,
            keyboard: std::fs::File::from(master),
            screen,
            reader,
        }
    }

    /// Types `keys` (a raw terminal takes Enter as `\r`).
    pub fn type_keys(&mut self, keys: &str) {
        use std::io::Write;
        self.keyboard.write_all(keys.as_bytes()).unwrap();
    }

    /// What the terminal has shown so far.
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits (at most `within`) for kubectl to exit; its exit code and everything the terminal showed.
    pub async fn exit(mut self, within: Duration) -> (Option<i32>, String) {
        let waited = tokio::time::timeout(within, async {
            loop {
                if let Some(status) = self.child.try_wait().unwrap() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let Ok(status) = waited else {
            let _ = self.child.kill();
            panic!(
                "kubectl did not exit; the terminal shows:\n{}",
                self.screen()
            );
        };
        let screen = self.screen.clone();
        let _ = tokio::task::spawn_blocking(move || self.reader.join()).await;
        let shown = String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
        (status.code(), shown)
    }
}
