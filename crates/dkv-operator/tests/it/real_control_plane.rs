//! `dkv local up --kubernetes 1.37` (and 1.34): the real kube-apiserver,
//! kube-controller-manager and kube-scheduler (built from their Go modules
//! on first use, then cached in the tools directory), with kube-local's
//! kubelets joined as the nodes. Tried as a user would: the server is the
//! real release, three nodes register and stay Ready, each as its own node
//! identity (NodeRestriction refuses one node editing another), the real
//! scheduler places a pod that a kubelet runs, its volume is provisioned by
//! kube-local and bound by the real controller, its log comes back through
//! the real API server from the kubelet over TLS, and `kubectl exec` reaches
//! a container (kube-apiserver speaking SPDY to the kubelet). Stopped and
//! started again, it comes back on its state; another minor release is
//! refused on that state.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::local_mode::dkv;

/// A client from a kubeconfig, as a user's program builds it.
pub(crate) async fn client_of(kubeconfig: &Path) -> Client {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    Client::try_from(config).unwrap()
}

/// Waits (a minute at most) until `count` nodes are Ready.
async fn wait_nodes_ready(nodes: &Api<Node>, count: usize, when: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = nodes
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|n| {
                        n.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                    })
                    .count()
            })
            .unwrap_or(0);
        if ready == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ready} of {count} nodes Ready {when}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `dkv local down` of a data directory when dropped.
pub(crate) struct Down<'a>(pub(crate) &'a Path);

/// `dkv local up --detach ARGS` on the data directory `state`, which must
/// succeed; the guard runs `dkv local down` when dropped, also after a
/// failed start.
pub(crate) fn local_up<'a>(state: &'a Path, args: &[&str]) -> Down<'a> {
    let mut all = vec!["local", "up", "--detach"];
    all.extend_from_slice(args);
    let down = Down(state);
    let out = dkv(&all, state);
    assert!(
        out.status.success(),
        "dkv {all:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    down
}

impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = dkv(&["local", "down"], self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kubernetes_1_37_runs_pods_on_kube_local_nodes_that_authenticate_as_nodes() {
    runs_pods_on_kube_local_nodes("1.37", "v1.37.2").await;
}

/// The oldest release dkv supports.
#[tokio::test(flavor = "multi_thread")]
async fn kubernetes_1_34_runs_pods_on_kube_local_nodes_that_authenticate_as_nodes() {
    runs_pods_on_kube_local_nodes("1.34", "v1.34.4").await;
}

async fn runs_pods_on_kube_local_nodes(release: &str, version: &str) {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let _down = local_up(&state, &["--kubernetes", release]);
    let client = client_of(&state.join("kubeconfig")).await;
    assert_eq!(
        client.apiserver_version().await.unwrap().git_version,
        version
    );

    let nodes: Api<Node> = Api::all(client.clone());
    wait_nodes_ready(&nodes, 3, "after the start").await;
    let zones: Vec<String> = nodes
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|n| {
            n.metadata
                .labels
                .as_ref()?
                .get("topology.kubernetes.io/zone")
                .cloned()
        })
        .collect();
    assert_eq!(zones.len(), 3, "{zones:?}");
    // A kubelet never newer than its API server: the nodes report its release.
    for node in nodes.list(&Default::default()).await.unwrap().items {
        let kubelet = node
            .status
            .and_then(|s| s.node_info)
            .map(|i| i.kubelet_version);
        assert_eq!(kubelet, Some(format!("{version}-kube-local")));
    }

    // A node's own credentials (a certificate of the cluster CA for
    // system:node:node-1) may not edit another node: NodeRestriction.
    let ca = kube_local::tls::CertificateAuthority::load_or_create(
        &state.join(kube_local::PKI_DIR),
        "unused",
    )
    .unwrap();
    let issued = ca
        .issue_client_in("system:node:node-1", Some("system:nodes"))
        .unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(state.join("kubeconfig")).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    config.auth_info.client_certificate_data = Some(b64.encode(&issued.cert_pem));
    config.auth_info.client_key_data = Some(b64.encode(&issued.key_pem).into());
    let as_node_1: Api<Node> = Api::all(Client::try_from(config).unwrap());
    let label = serde_json::json!({"metadata": {"labels": {"dkv.io/probe": "x"}}});
    let own = as_node_1
        .patch("node-1", &PatchParams::default(), &Patch::Merge(&label))
        .await;
    assert!(own.is_ok(), "a node edits its own Node: {own:?}");
    match as_node_1
        .patch("node-2", &PatchParams::default(), &Patch::Merge(&label))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("node-1 edited node-2: {other:?}"),
    }

    // The real scheduler places a pod with a volume of the default class;
    // kube-local's provisioner makes the volume on the chosen node, the real
    // PersistentVolume controller binds it; a kubelet runs the pod; its log
    // comes back through kube-apiserver from the kubelet.
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "hello"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "hello", "image": "busybox",
            "command": ["sh", "-c", "echo hello from a kube-local node; echo kept > /data/file"],
            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        }], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "hello-data"}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let phase = loop {
        let phase = pods
            .get("hello")
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
            .unwrap_or_default();
        if phase == "Succeeded" || phase == "Failed" {
            break phase;
        }
        assert!(Instant::now() < deadline, "the pod is still {phase:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(phase, "Succeeded");
    let log = pods.logs("hello", &Default::default()).await.unwrap();
    assert_eq!(log.trim(), "hello from a kube-local node");

    let bound = claims.get("hello-data").await.unwrap();
    assert_eq!(bound.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    let volume = Api::<PersistentVolume>::all(client.clone())
        .get(&bound.spec.and_then(|s| s.volume_name).unwrap())
        .await
        .unwrap();
    let provisioned_by = volume
        .metadata
        .annotations
        .unwrap_or_default()
        .get("pv.kubernetes.io/provisioned-by")
        .cloned();
    assert_eq!(provisioned_by.as_deref(), Some("kube-local.io/local-path"));
    // kubectl exec: kubectl speaks WebSocket to kube-apiserver, which speaks
    // SPDY to the kubelet; output, stdin and the exit code come through.
    let shell: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "shell"},
        "spec": {"containers": [{"name": "shell", "image": "busybox", "command": ["sleep", "600"]}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &shell).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods
        .get("shell")
        .await
        .unwrap()
        .status
        .and_then(|s| s.phase)
        .as_deref()
        != Some("Running")
    {
        assert!(Instant::now() < deadline, "the shell pod never ran");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let kubeconfig = state.join("kubeconfig");
    let exec = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["exec", "-i", "shell", "--", "sh", "-c", "cat; exit 5"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"via kube-apiserver\n")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    assert_eq!(
        exec.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&exec.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&exec.stdout),
        "via kube-apiserver\n"
    );

    let path = volume
        .spec
        .and_then(|s| s.host_path)
        .map(|h| h.path)
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(Path::new(&path).join("file")).unwrap(),
        "kept\n"
    );

    // Stopped and started again on its data directory: the same cluster,
    // its nodes Ready again, its objects kept.
    let down = dkv(&["local", "down"], &state);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    // Another minor release on this state is refused, naming the one it ran.
    let other = if release == "1.37" { "1.34" } else { "1.37" };
    let refused = dkv(&["local", "up", "--detach", "--kubernetes", other], &state);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(&format!("Kubernetes {release} control plane")),
        "{said}"
    );
    let again = dkv(
        &["local", "up", "--detach", "--kubernetes", release],
        &state,
    );
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let client = client_of(&state.join("kubeconfig")).await;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_nodes_ready(&nodes, 3, "after the restart").await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    assert!(
        pods.get_opt("hello").await.unwrap().is_some(),
        "the pod survived the restart"
    );
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client);
    assert_eq!(
        claims
            .get("hello-data")
            .await
            .unwrap()
            .status
            .and_then(|s| s.phase)
            .as_deref(),
        Some("Bound")
    );
}
