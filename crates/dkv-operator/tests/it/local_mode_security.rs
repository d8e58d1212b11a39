//! `dkv local up` is secure by default, tried as another user of the same
//! machine would try it: every listener it opens — the API server, each
//! node's kubelet, the operator's metrics and webhook endpoints — refuses an
//! anonymous caller and a caller whose token carries no grant, and the data
//! directory (store, keys, kubeconfig) cannot be read by an unprivileged
//! user (uid 65534). The user's own tools keep working unchanged: `kubectl`
//! (logs, exec, port-forward) and `kube::Client` with the kubeconfig, and the
//! operator, running as its ServiceAccount under deploy/'s RBAC, forms the
//! example cluster without a single refused request.

use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::local_mode::dkv;
use dkv_test_support as support;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::http::plain_get;
use support::metrics::{grant_metrics_reader, https_get_unverified, service_account_token};

/// `dkv local up --detach` on a data directory, stopped when dropped.
pub(crate) struct Local {
    pub(crate) state: PathBuf,
    _dir: tempfile::TempDir,
}

impl Local {
    pub(crate) fn up() -> Local {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let up = dkv(&["local", "up", "--detach", "--log-format", "json"], &state);
        assert!(
            up.status.success(),
            "{}",
            String::from_utf8_lossy(&up.stderr)
        );
        Local { state, _dir: dir }
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.state.join("kubeconfig"))
            .args(args)
            .output()
            .unwrap()
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.state.join("dkv-local.log")).unwrap_or_default()
    }

    /// `kube::Client` from the kubeconfig, as a user's program builds it.
    pub(crate) async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(self.state.join("kubeconfig")).unwrap();
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        Client::try_from(config).unwrap()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let _ = dkv(&["local", "down"], &self.state);
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .mode()
        & 0o777
}

/// The address (field `addr`) of the JSON log line of `dkv local up` whose
/// message starts with `message`.
fn logged_address(log: &str, message: &str) -> SocketAddr {
    log.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find_map(|line| {
            line.get("message")?
                .as_str()?
                .starts_with(message)
                .then(|| line.get("addr")?.as_str()?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no {message:?} with its address in the log:\n{log}"))
}

/// Which files and directories of the data directory are not private.
fn not_private(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let name = path.display().to_string();
        if meta.is_dir() {
            // Pod directories hold what each pod needs, with the modes a
            // kubelet gives them (a Secret volume is 0644 by default): the
            // private directory above them is what keeps others out.
            if path.ends_with("nodes") {
                continue;
            }
            if meta.mode() & 0o777 != 0o700 {
                out.push(format!("{name} {:o}", meta.mode() & 0o777));
            }
            not_private(&path, out);
        } else if meta.is_file() && meta.mode() & 0o077 != 0 {
            out.push(format!("{name} {:o}", meta.mode() & 0o777));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn local_mode_refuses_strangers_on_every_listener_and_keeps_its_data_private() {
    let local = Local::up();
    let state = &local.state;

    // The data directory and everything dkv keeps in it are the owner's alone.
    assert_eq!(mode(state), 0o700);
    for file in [
        "kubeconfig",
        "dkv-local.pid",
        "dkv-local.log",
        "pki/ca.key",
        "pki/ca.crt",
        "pki/service-account.key",
        "store/snapshot.json",
        "store/journal.jsonl",
    ] {
        assert_eq!(mode(&state.join(file)), 0o600, "{file}");
    }
    let mut loose = Vec::new();
    not_private(state, &mut loose);
    assert!(loose.is_empty(), "readable by others: {loose:?}");
    // An unprivileged user (nobody, 65534) reads none of it.
    if running_as_root() {
        for (tool, path) in [
            ("ls", state.clone()),
            ("cat", state.join("kubeconfig")),
            ("cat", state.join("pki/ca.key")),
            ("cat", state.join("store/snapshot.json")),
        ] {
            let out = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(tool)
                .arg(&path)
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && stderr.contains("Permission denied"),
                "uid 65534 ran {tool} {}: {stderr}",
                path.display()
            );
        }
    } else {
        eprintln!("not root: uid 65534 cannot be tried; the modes above were checked");
    }

    // kube::Client from the kubeconfig, as a user's program builds it: an
    // admin client certificate and the cluster's CA over HTTPS.
    let kubeconfig = Kubeconfig::read_from(state.join("kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(config.cluster_url.scheme_str(), Some("https"));
    let api_addr: SocketAddr = config
        .cluster_url
        .authority()
        .unwrap()
        .as_str()
        .parse()
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let stranger = service_account_token(&client, "default", "stranger").await;

    // The API server: anonymous 401 except health and version; a token
    // without grants 403.
    let plain = plain_get(api_addr, "/api/v1/secrets").await;
    assert!(
        plain.as_ref().is_none_or(|(code, _)| *code != 200),
        "the API server answered plain HTTP: {plain:?}"
    );
    let anonymous = https_get_unverified(api_addr, "/api/v1/secrets", None)
        .await
        .unwrap();
    assert_eq!(anonymous.0, 401, "{}", anonymous.1);
    assert!(anonymous.1.contains("Unauthorized"), "{}", anonymous.1);
    for public in ["/version", "/healthz", "/readyz"] {
        let answer = https_get_unverified(api_addr, public, None).await.unwrap();
        assert_eq!(answer.0, 200, "{public}: {}", answer.1);
    }
    let refused = https_get_unverified(api_addr, "/api/v1/secrets", Some(&stranger))
        .await
        .unwrap();
    assert_eq!(refused.0, 403, "{}", refused.1);

    // Each kubelet: HTTPS only; anonymous 401; a token without nodes/proxy
    // 403; one with it is let in.
    let node_reader = service_account_token(&client, "default", "node-reader").await;
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-proxy-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(client.clone())
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-proxy-reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "node-proxy-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "node-reader", "namespace": "default"}],
    }))
    .unwrap();
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let nodes = Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(nodes.items.len(), 3);
    for node in &nodes.items {
        let status = node.status.clone().unwrap_or_default();
        let ip = status
            .addresses
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.type_ == "InternalIP")
            .map(|a| a.address)
            .unwrap();
        let port = status
            .daemon_endpoints
            .and_then(|d| d.kubelet_endpoint)
            .map(|e| e.port)
            .unwrap();
        let kubelet: SocketAddr = format!("{ip}:{port}").parse().unwrap();
        let name = node.metadata.name.clone().unwrap_or_default();
        let plain = plain_get(kubelet, "/pods").await;
        assert!(
            plain.as_ref().is_none_or(|(code, _)| *code != 200),
            "{name}'s kubelet answered plain HTTP: {plain:?}"
        );
        let anonymous = https_get_unverified(kubelet, "/pods", None).await.unwrap();
        assert_eq!(anonymous.0, 401, "{name}: {}", anonymous.1);
        let refused = https_get_unverified(kubelet, "/pods", Some(&stranger))
            .await
            .unwrap();
        assert_eq!(refused.0, 403, "{name}: {}", refused.1);
        assert!(
            refused.1.contains("resource=nodes, subresource=proxy"),
            "{}",
            refused.1
        );
        let allowed = https_get_unverified(kubelet, "/pods", Some(&node_reader))
            .await
            .unwrap();
        assert_eq!(allowed.0, 200, "{name}: {}", allowed.1);
        assert!(allowed.1.contains("PodList"), "{}", allowed.1);
        // `get` on nodes/proxy reads; it opens no stream into a container
        // (exec asks `create`, whatever the method).
        let exec = https_get_unverified(
            kubelet,
            "/exec/default/example-0/etcd?command=true&stdout=true",
            Some(&node_reader),
        )
        .await
        .unwrap();
        assert_eq!(exec.0, 403, "{name}: {}", exec.1);
        assert!(exec.1.contains("verb=create"), "{}", exec.1);
    }

    // The operator's metrics: HTTPS, authorized scrapers only.
    let metrics = logged_address(&local.log(), "serving /metrics over HTTPS");
    let anonymous = https_get_unverified(metrics, "/metrics", None)
        .await
        .unwrap();
    assert_eq!(anonymous.0, 401, "{}", anonymous.1);
    let refused = https_get_unverified(metrics, "/metrics", Some(&stranger))
        .await
        .unwrap();
    assert_eq!(refused.0, 403, "{}", refused.1);
    grant_metrics_reader(&client, "default").await;
    let prometheus = service_account_token(&client, "default", "prometheus").await;
    let scraped = https_get_unverified(metrics, "/metrics", Some(&prometheus))
        .await
        .unwrap();
    assert_eq!(scraped.0, 200, "{}", scraped.1);
    assert!(scraped.1.contains("dkv_"), "{}", scraped.1);
    // The admission webhooks: HTTPS only, at the address they registered.
    let webhooks = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("dkv-operator")
        .await
        .unwrap();
    let url = webhooks.webhooks.unwrap_or_default()[0]
        .client_config
        .url
        .clone()
        .unwrap();
    let webhook: SocketAddr = url
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let plain = plain_get(webhook, "/validate/distributedkv").await;
    assert!(
        plain.as_ref().is_none_or(|(code, _)| *code != 200),
        "the webhook answered plain HTTP: {plain:?}"
    );

    // The user's side: the example cluster forms (the operator as its
    // ServiceAccount, refused nothing), and kubectl's logs, exec and
    // port-forward reach its members through the authenticated kubelets.
    let example = support::repo_root().join("examples/distributedkv.yaml");
    local.kubectl_ok(&["apply", "-f", example.to_str().unwrap()]);
    local.kubectl_ok(&[
        "wait",
        "--for=condition=Available",
        "dkv/example",
        "--timeout=180s",
    ]);
    let logs = local.kubectl_ok(&["logs", "example-0", "-c", "etcd", "--tail=5"]);
    assert!(!logs.is_empty());
    let version = local.kubectl_ok(&["exec", "example-0", "-c", "etcd", "--", "etcd", "--version"]);
    assert!(version.contains("etcd Version: 3.5.16"), "{version}");
    let port = support::free_port();
    let mut forward = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(state.join("kubeconfig"))
        .args(["port-forward", "pod/example-0", &format!("{port}:2381")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let forwarded: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        if let Some(answer) = plain_get(forwarded, "/health").await {
            break answer;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl port-forward never served"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let _ = forward.kill();
    let _ = forward.wait();
    assert_eq!(health.0, 200, "{}", health.1);
    assert!(health.1.contains("\"health\":\"true\""), "{}", health.1);

    let log = local.log();
    let forbidden: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("forbidden") || l.contains("Forbidden"))
        .collect();
    assert!(
        forbidden.is_empty(),
        "the operator was refused requests under deploy/'s RBAC:\n{}",
        forbidden.join("\n")
    );
}

pub(crate) fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}
