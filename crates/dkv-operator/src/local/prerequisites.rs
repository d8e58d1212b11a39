//! What `dkv local up` needs on the machine besides itself: etcd 3.4 and 3.5
//! where the kubelet's default image map looks for them (`/usr/bin` for 3.4,
//! the workspace's `.tools/etcd-3.5/usr/bin` for 3.5). Missing ones are
//! installed with the repository's `scripts/install-etcd.sh`, the same script
//! the README's commands run (Debian packages; see DEVELOPERS notes there).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use tracing::info;

/// The workspace this binary was built from.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// etcd binaries the default image map resolves etcd images to.
pub fn etcd_binaries() -> Vec<PathBuf> {
    let etcd35 = repo_root().join(".tools/etcd-3.5/usr/bin");
    vec![
        PathBuf::from("/usr/bin/etcd"),
        PathBuf::from("/usr/bin/etcdctl"),
        etcd35.join("etcd"),
        etcd35.join("etcdctl"),
    ]
}

/// The ones not installed.
pub fn missing(binaries: &[PathBuf]) -> Vec<PathBuf> {
    binaries.iter().filter(|p| !p.is_file()).cloned().collect()
}

/// Installs etcd 3.4 and 3.5 when any of their binaries is missing.
pub fn ensure_etcd() -> anyhow::Result<()> {
    let missing = missing(&etcd_binaries());
    if missing.is_empty() {
        return Ok(());
    }
    let script = repo_root().join("scripts/install-etcd.sh");
    let listed = missing
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if !script.is_file() {
        bail!(
            "etcd is not installed ({listed} missing) and the install script {} is not there; install etcd 3.4 (Debian `etcd-server etcd-client`) and 3.5 (Debian trixie packages unpacked under .tools/etcd-3.5)",
            script.display()
        );
    }
    info!(missing = %listed, script = %script.display(), "installing etcd for local pods");
    let status = Command::new("bash")
        .arg(&script)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!(
            "{} failed ({status}); etcd is needed for local clusters ({listed} missing)",
            script.display()
        );
    }
    let still = self::missing(&etcd_binaries());
    if !still.is_empty() {
        bail!(
            "after {} these are still missing: {still:?}",
            script.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_binaries_are_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let present = dir.path().join("etcd");
        std::fs::write(&present, "").unwrap_or_else(|e| panic!("{e}"));
        let absent = dir.path().join("etcdctl");
        assert_eq!(missing(&[present, absent.clone()]), vec![absent]);
    }

    #[test]
    fn both_minor_lines_are_required() {
        let binaries = etcd_binaries();
        assert!(binaries.iter().any(|p| p.starts_with("/usr/bin")));
        assert!(
            binaries
                .iter()
                .any(|p| p.to_string_lossy().contains("etcd-3.5"))
        );
    }
}
