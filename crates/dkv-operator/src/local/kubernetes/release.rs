//! The Kubernetes releases `dkv local up --kubernetes` runs, and building
//! their control plane (kube-apiserver, kube-controller-manager,
//! kube-scheduler) from the Go module proxy on first use.
//!
//! Each release is a small Go module of this repository (`go/kubernetes/`:
//! `go.mod`, `go.sum` and a `tools.go` naming the three commands), built into
//! the binary so that an installed `dkv` needs no source tree. On first use
//! it is written into the tools directory and built there with the machine's
//! `go` by `go/kubernetes/build.sh`; the binaries stay in
//! `TOOLS/kubernetes-vX.Y.Z/bin` (remove that directory to rebuild; Go's own
//! caches, `go env GOMODCACHE GOCACHE`, hold the sources and objects, about
//! 5 GB for both releases, cleared by `go clean -modcache -cache`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// One Kubernetes release and its Go module.
#[derive(Debug)]
pub struct KubernetesRelease {
    /// `1.37`: what `--kubernetes` takes.
    pub minor: &'static str,
    /// `v1.37.2`: the patch release its go.mod pins.
    pub version: &'static str,
    go_mod: &'static str,
    go_sum: &'static str,
    tools_go: &'static str,
}

/// A release whose Go module (go.mod, go.sum and tools.go) lives in
/// `go/kubernetes/v<minor>/`.
macro_rules! release {
    ($minor:literal, $version:literal) => {
        KubernetesRelease {
            minor: $minor,
            version: $version,
            go_mod: include_str!(concat!("../../../../../go/kubernetes/v", $minor, "/go.mod")),
            go_sum: include_str!(concat!("../../../../../go/kubernetes/v", $minor, "/go.sum")),
            tools_go: include_str!(concat!(
                "../../../../../go/kubernetes/v",
                $minor,
                "/tools.go"
            )),
        }
    };
}

/// The releases dkv runs on, newest first; the last is the oldest dkv
/// supports.
pub const RELEASES: [KubernetesRelease; 2] =
    [release!("1.37", "v1.37.2"), release!("1.34", "v1.34.4")];

const BUILD_SCRIPT: &str = include_str!("../../../../../go/kubernetes/build.sh");
/// What every build script sources from the directory above its own.
const GO_LIB: &str = include_str!("../../../../../go/lib.sh");

/// The three programs of the control plane.
pub const PROGRAMS: [&str; 3] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// The release `--kubernetes MINOR` names (`1.37`, also `v1.37`), or why
/// there is none.
pub fn find(minor: &str) -> anyhow::Result<&'static KubernetesRelease> {
    let wanted = minor.trim_start_matches('v');
    RELEASES
        .iter()
        .find(|r| r.minor == wanted || r.version.trim_start_matches('v') == wanted)
        .with_context(|| {
            let known: Vec<&str> = RELEASES.iter().map(|r| r.minor).collect();
            format!(
                "dkv local runs Kubernetes {}, not {minor:?}",
                known.join(" and ")
            )
        })
}

impl KubernetesRelease {
    /// Where the release's binaries are kept under `tools`.
    pub fn bin_dir(&self, tools: &Path) -> PathBuf {
        tools
            .join(format!("kubernetes-{}", self.version))
            .join("bin")
    }

    fn built(&self, tools: &Path) -> bool {
        let bin = self.bin_dir(tools);
        PROGRAMS.iter().all(|p| bin.join(p).is_file())
    }

    /// The release's binaries, built first if they are not there yet; returns
    /// their directory. Needs `go` on PATH for a build: without it, one error
    /// says so.
    pub fn ensure(&self, tools: &Path) -> anyhow::Result<PathBuf> {
        let bin = self.bin_dir(tools);
        if self.built(tools) {
            return Ok(bin);
        }
        let go = Command::new("go").arg("version").output();
        if !go.as_ref().is_ok_and(|o| o.status.success()) {
            bail!(
                "--kubernetes {} builds Kubernetes {} from its Go modules and needs Go 1.26 or newer: \
                 `go` is not on PATH (install Go, e.g. Debian's golang-go or /usr/local/go, and retry; \
                 without --kubernetes, dkv local needs no Go)",
                self.minor,
                self.version
            );
        }
        let home = tools.join(format!("kubernetes-{}", self.version));
        // The repository's layout (go/kubernetes/build.sh sources
        // go/lib.sh).
        let src = home.join("src");
        let module = src.join("kubernetes").join(format!("v{}", self.minor));
        std::fs::create_dir_all(&module)
            .with_context(|| format!("creating {}", module.display()))?;
        for (name, text) in [
            ("go.mod", self.go_mod),
            ("go.sum", self.go_sum),
            ("tools.go", self.tools_go),
        ] {
            std::fs::write(module.join(name), text)
                .with_context(|| format!("writing {}", module.join(name).display()))?;
        }
        let script = src.join("kubernetes/build.sh");
        for (path, text) in [(&script, BUILD_SCRIPT), (&src.join("lib.sh"), GO_LIB)] {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        }
        // Built next to the final directory and renamed once complete: an
        // interrupted build leaves nothing that looks built.
        let staging = home.join("bin.partial");
        let _ = std::fs::remove_dir_all(&staging);
        eprintln!(
            "building Kubernetes {} (kube-apiserver, kube-controller-manager, kube-scheduler) from the Go module proxy into {}: \
             once, about 5-10 minutes on 2 cores",
            self.version,
            bin.display()
        );
        let status = Command::new("bash")
            .arg(&script)
            .arg(self.minor)
            .arg(&staging)
            .status()
            .context("running bash")?;
        if !status.success() {
            bail!(
                "building Kubernetes {} failed ({status}); the error is above",
                self.version
            );
        }
        let _ = std::fs::remove_dir_all(&bin);
        std::fs::rename(&staging, &bin)
            .with_context(|| format!("moving the binaries to {}", bin.display()))?;
        Ok(bin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_release_pins_the_version_it_names() {
        for release in &RELEASES {
            let line = format!("require k8s.io/kubernetes {}", release.version);
            assert!(
                release.go_mod.lines().any(|l| l.trim() == line),
                "{}: go.mod has no {line:?}",
                release.minor
            );
            assert!(release.version.starts_with(&format!("v{}.", release.minor)));
        }
    }

    #[test]
    fn versions_are_found_by_minor_or_patch_and_others_refused() {
        assert_eq!(find("1.37").map(|r| r.version).ok(), Some("v1.37.2"));
        assert_eq!(find("v1.34").map(|r| r.version).ok(), Some("v1.34.4"));
        assert_eq!(find("1.37.2").map(|r| r.version).ok(), Some("v1.37.2"));
        let refused = find("1.30").map(|r| r.version);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("1.37 and 1.34")),
            "{refused:?}"
        );
    }
}
