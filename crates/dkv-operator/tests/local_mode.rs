//! `dkv local up --detach` / `dkv local down` through the real binary, used
//! with the real kubectl the way the README's quick-start uses them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

fn dkv(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dkv"))
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .output()
        .unwrap()
}

#[test]
fn local_up_serves_kubectl_with_dkv_installed_and_down_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let up = dkv(&["local", "up", "--detach"], &state);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );
    assert!(String::from_utf8_lossy(&up.stdout).contains("export KUBECONFIG="));

    let again = dkv(&["local", "up", "--detach"], &state);
    assert!(
        !again.status.success(),
        "a second instance on the same state is refused"
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("already running"));

    let kubeconfig = state.join("kubeconfig");
    let kubectl = |args: &[&str]| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap()
    };
    let resources = kubectl(&["api-resources", "--api-group=dkv.io", "-o", "name"]);
    let names = String::from_utf8_lossy(&resources.stdout);
    assert!(
        names.contains("distributedkvs.dkv.io") && names.contains("distributedkvbackups.dkv.io"),
        "{names}"
    );

    // The README quick-start: the example cluster forms from real etcd
    // processes run by kube-local's kubelet.
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/distributedkv.yaml");
    let applied = kubectl(&["apply", "-f", example.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let out = kubectl(&[
            "get",
            "dkv",
            "example",
            "-o",
            "jsonpath={.status.readyReplicas}/{.status.conditions[?(@.type==\"Available\")].status}",
        ]);
        if String::from_utf8_lossy(&out.stdout) == "3/True" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the example never became Available: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let table = kubectl(&["get", "dkv", "example"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("QuorumHealthy") && table.contains("3.5.16"),
        "{table}"
    );
    // Local mode runs the admission webhooks: losing quorum in one step is refused.
    let scaled = kubectl(&["scale", "dkv/example", "--replicas=1"]);
    let stderr = String::from_utf8_lossy(&scaled.stderr);
    assert!(
        !scaled.status.success() && stderr.contains("drops below the current quorum of 2"),
        "{stderr}"
    );

    let down = dkv(&["local", "down"], &state);
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
    assert!(!state.join("dkv-local.pid").exists());
    let gone = kubectl(&["get", "ns", "--request-timeout=2s"]);
    assert!(!gone.status.success(), "the API server is stopped");
}
