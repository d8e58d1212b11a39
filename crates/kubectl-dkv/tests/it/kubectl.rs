//! `kubectl` as a user runs it: the plugin found on its PATH, the test's
//! kubeconfig, one namespace.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `kubectl` with the plugin on its PATH and the test's kubeconfig.
pub struct Kubectl {
    kubeconfig: PathBuf,
    namespace: String,
    path: String,
    _plugin_dir: tempfile::TempDir,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path, namespace: &str) -> Self {
        let plugin_dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_kubectl-dkv"),
            plugin_dir.path().join("kubectl-dkv"),
        )
        .unwrap();
        let path = format!(
            "{}:{}",
            plugin_dir.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Self {
            kubeconfig: kubeconfig.to_owned(),
            namespace: namespace.to_owned(),
            path,
            _plugin_dir: plugin_dir,
        }
    }

    /// `kubectl dkv -n NAMESPACE ARGS`.
    pub fn dkv(&self, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg("dkv")
            // Before the command: after `etcdctl NAME --` it would be etcdctl's.
            .args(["-n", &self.namespace])
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", &self.path)
            .output()
            .unwrap()
    }

    /// Runs `kubectl dkv ARGS`, which must succeed; returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.dkv(args);
        assert!(
            out.status.success(),
            "kubectl dkv {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs `kubectl dkv ARGS`, which must fail with one line on stderr
    /// containing `expected`.
    pub fn refused(&self, args: &[&str], expected: &str) {
        let out = self.dkv(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "kubectl dkv {args:?} succeeded");
        assert!(
            stderr.contains(expected),
            "kubectl dkv {args:?}: {stderr:?} does not say {expected:?}"
        );
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "one line of error: {stderr:?}"
        );
        assert!(out.stdout.is_empty(), "nothing on stdout: {:?}", out.stdout);
    }

    pub fn json(&self, args: &[&str]) -> Value {
        let text = self.ok(&[args, &["-o", "json"]].concat());
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{args:?} -o json: {e}: {text}"))
    }
}

/// Every member of `name` ready and nothing in progress: what `status` then
/// shows is the steady state.
pub async fn wait_converged(dkvs: &kube::Api<dkv_api::DistributedKV>, name: &str) {
    use dkv_test_support::etcd_cluster::{condition_reason, settled_at, wait_for};
    wait_for(dkvs, name, "3 members ready, nothing in progress", |d| {
        settled_at(d, 3)
            && d.status.as_ref().is_some_and(|s| s.ready_replicas == 3)
            && condition_reason(d, "Progressing", "False").is_some()
    })
    .await;
}
