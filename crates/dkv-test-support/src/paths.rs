//! Where things are: the checkout, the etcd releases installed in it, and
//! this build's `dkv`.

use std::path::PathBuf;

pub use dkv_backup::testing::{etcd_bin_dir, repo_root, tools_dir};

/// This build's `dkv` binary, which the kubelet runs for the operator's
/// image: what Cargo builds beside the test (or bench) binary's `deps/`
/// directory, or `CARGO_BIN_EXE_dkv` when the runner says so (nextest sets
/// it at run time, as Cargo does at build time for dkv-operator's own
/// integration tests and benches; this crate is not one of them).
pub fn dkv_binary() -> PathBuf {
    let path = std::env::var_os("CARGO_BIN_EXE_dkv")
        .map(PathBuf::from)
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            // target/<profile>/deps/<test>-<hash> → target/<profile>/dkv
            Some(exe.parent()?.parent()?.join("dkv"))
        })
        .expect("the path of this build's dkv binary");
    assert!(
        path.exists(),
        "{} is missing: dkv-operator's tests and benches build it",
        path.display()
    );
    path
}

/// Prometheus' server binary: the one on PATH, else the Debian release
/// `scripts/install-prometheus.sh` unpacked under `.tools/prometheus`.
pub fn prometheus_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("prometheus"))
            .find(|candidate| candidate.is_file())
    });
    let path = on_path.unwrap_or_else(|| tools_dir().join("prometheus/usr/bin/prometheus"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-prerequisites.sh",
        path.display()
    );
    path
}

/// `bbolt-poke` (go/bbolt-poke), which makes a stopped member's data differ
/// from its peers': `DKV_BBOLT_POKE` when set, else
/// `<tools>/bbolt-poke/bbolt-poke`, built there with Go on first use
/// (`scripts/test.sh` builds it before the tests, so that no test spends
/// its time on it).
pub fn bbolt_poke() -> PathBuf {
    if let Some(path) = std::env::var_os("DKV_BBOLT_POKE") {
        return PathBuf::from(path);
    }
    let dir = tools_dir().join("bbolt-poke");
    let path = dir.join("bbolt-poke");
    if !path.exists() {
        let script = repo_root().join("go/bbolt-poke/build.sh");
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg(&dir)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed (it needs Go on PATH): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    path
}
