//! `dkv local up --detach` / `dkv local down` through the real binary, used
//! with the real kubectl the way the README's quick-start uses them.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use dkv_test_support as support;

/// `dkv ARGS --data-dir DIR`, with the checkout's etcd releases.
pub(crate) fn dkv(args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dkv"))
        .env("DKV_TOOLS_DIR", support::tools_dir())
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
    let kubectl = |args: &[&str]| kubectl_with(&kubeconfig, args);
    let resources = kubectl(&["api-resources", "--api-group=dkv.io", "-o", "name"]);
    let names = String::from_utf8_lossy(&resources.stdout);
    assert!(
        names.contains("distributedkvs.dkv.io") && names.contains("distributedkvbackups.dkv.io"),
        "{names}"
    );

    // The README quick-start: the example cluster forms from real etcd
    // processes run by kube-local's kubelet.
    let example = support::repo_root().join("examples/distributedkv.yaml");
    let applied = kubectl(&["apply", "-f", example.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    wait_available(&kubectl);
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

/// Waits until the example cluster has 3 ready members and is Available.
fn wait_available(kubectl: &dyn Fn(&[&str]) -> std::process::Output) {
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
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the example never became Available: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// An installed dkv works anywhere: the binary copied into an install root
/// (what `cargo install --root` produces), started from an empty directory
/// with the source tree hidden — a private mount namespace bind-mounts an
/// empty directory over the checkout, for `dkv local` and every pod it runs
/// — and a tools directory of its own, empty: it fetches etcd from Debian on
/// first use and forms the example cluster.
#[test]
fn an_installed_binary_forms_a_cluster_without_its_source_tree() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Pods run as user 65532: the install and tools must be reachable.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("root/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let installed = bin.join("dkv");
    std::fs::copy(env!("CARGO_BIN_EXE_dkv"), &installed).unwrap();
    let data_home = dir.path().join("home/.local/share");
    let work = dir.path().join("work");
    let hidden = dir.path().join("empty");
    for d in [&data_home, &work, &hidden] {
        std::fs::create_dir_all(d).unwrap();
    }
    let checkout = support::repo_root().canonicalize().unwrap();

    // As root, a mount namespace; otherwise a user namespace mapping the
    // caller to root, which may mount in it too.
    let root =
        std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0);
    let mut unshare = Command::new("unshare");
    if root.unwrap_or(false) {
        unshare.args(["--mount", "--propagation", "private"]);
    } else {
        unshare.args([
            "--user",
            "--map-root-user",
            "--mount",
            "--propagation",
            "private",
        ]);
    }
    let script = format!(
        "mount --bind {hidden} {checkout} && test ! -e {checkout}/Cargo.toml && cd {work} && exec {dkv} local up --detach --data-dir state",
        hidden = hidden.display(),
        checkout = checkout.display(),
        work = work.display(),
        dkv = installed.display(),
    );
    let up = unshare
        .args(["sh", "-c", &script])
        .env_remove("DKV_TOOLS_DIR")
        .env("XDG_DATA_HOME", &data_home)
        .output()
        .unwrap();
    assert!(
        up.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
    for line in ["3.4", "3.5", "3.5.30"] {
        let etcd = data_home.join(format!("dkv/tools/etcd-{line}/usr/bin/etcd"));
        assert!(
            etcd.is_file(),
            "etcd {line} fetched on first use: {}",
            etcd.display()
        );
    }

    let state = work.join("state");
    let kubeconfig = state.join("kubeconfig");
    let kubectl = |args: &[&str]| kubectl_with(&kubeconfig, args);
    let example = checkout.join("examples/distributedkv.yaml");
    let applied = kubectl(&["apply", "-f", example.to_str().unwrap()]);
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    wait_available(&kubectl);

    let down = Command::new(&installed)
        .args(["local", "down", "--data-dir"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        down.status.success(),
        "{}",
        String::from_utf8_lossy(&down.stderr)
    );
}

/// `kubectl --kubeconfig KUBECONFIG ARGS`, as a user runs it.
fn kubectl_with(kubeconfig: &Path, args: &[&str]) -> std::process::Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}
