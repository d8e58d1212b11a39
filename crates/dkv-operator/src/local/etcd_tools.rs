//! The etcd releases `dkv local` runs its members with, and the image map
//! that sends each etcd image to one of them and the dkv image to this very
//! executable.
//!
//! An image maps only to the release of exactly its version, by the tags the
//! registries publish (`registry.k8s.io/etcd:3.5.16-0`,
//! `quay.io/coreos/etcd:v3.5.16`, `gcr.io/etcd-development/etcd:v3.5.16`):
//! any other tag fails to start as one that cannot be pulled (`ErrImagePull`),
//! as it would on a real node, rather than running a neighbouring release.
//!
//! Each release lives in a per-user tools directory — `$DKV_TOOLS_DIR`, else
//! `$XDG_DATA_HOME/dkv/tools`, else `~/.local/share/dkv/tools` — as
//! `etcd-<line>/usr/bin/{etcd,etcdctl}`, unpacked from Debian's packages
//! (`etcd-server`, `etcd-client`): 3.4 from bookworm, 3.5 (3.5.16) from
//! trixie, 3.5.30 from unstable. `dkv local up` fetches what is missing on
//! first use with `apt-get download` through a private apt configuration
//! (the system's own sources are left alone) and `dpkg -x`, the way
//! `scripts/install-etcd.sh` does for a checkout. Nothing here depends on
//! the source tree the binary was built from.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use kube_local::kubelet::{ImageMap, ImageTarget};
use tracing::info;

/// One etcd release line and where Debian has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// `3.4`, `3.5` or a patch release installed on its own (`3.5.30`).
    pub line: &'static str,
    /// The Debian suite whose `etcd-server`/`etcd-client` packages carry it.
    pub suite: &'static str,
    /// The etcd version those packages carry: the images of exactly this
    /// version map to it.
    pub version: &'static str,
}

/// The releases, the patch release installed on its own before its minor
/// line (the first image pattern that matches wins).
pub const RELEASES: [Release; 3] = [
    Release {
        line: "3.5.30",
        suite: "unstable",
        version: "3.5.30",
    },
    Release {
        line: "3.5",
        suite: "trixie",
        version: "3.5.16",
    },
    Release {
        line: "3.4",
        suite: "bookworm",
        version: "3.4.23",
    },
];

/// The image every dkv pod (member-init, backups, restores) runs.
pub const DKV_IMAGE_PATTERN: &str = "ghcr.io/dkv-io/dkv:*";

/// The per-user tools directory (see the module docs).
pub fn tools_dir() -> anyhow::Result<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("DKV_TOOLS_DIR") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(data) = var("XDG_DATA_HOME") {
        return Ok(PathBuf::from(data).join("dkv/tools"));
    }
    match var("HOME") {
        Some(home) => Ok(PathBuf::from(home).join(".local/share/dkv/tools")),
        None => bail!(
            "no tools directory for etcd: set DKV_TOOLS_DIR (or XDG_DATA_HOME, or HOME) to where dkv may keep etcd releases"
        ),
    }
}

/// Where `release`'s `etcd` and `etcdctl` are under `tools`.
pub fn bin_dir(tools: &Path, release: &Release) -> PathBuf {
    tools.join(format!("etcd-{}", release.line)).join("usr/bin")
}

/// The image patterns of `release`: the registries etcd publishes to.
fn patterns(release: &Release) -> Vec<String> {
    // registry.k8s.io's tags carry a build suffix; the upstream ones a `v`.
    let version = release.version;
    vec![
        format!("registry.k8s.io/etcd:{version}-0"),
        format!("quay.io/coreos/etcd:v{version}"),
        format!("gcr.io/etcd-development/etcd:v{version}"),
    ]
}

/// The image map of `dkv local`: etcd images to the releases under
/// `tools`, the dkv image to `dkv_binary`.
pub fn image_map(tools: &Path, dkv_binary: &Path) -> ImageMap {
    let mut map = ImageMap::default();
    // `insert` puts an entry first: insert in reverse so the list reads in
    // precedence order.
    map.insert(
        DKV_IMAGE_PATTERN,
        ImageTarget {
            bin_dir: dkv_binary.parent().map(Path::to_path_buf),
            entrypoint: vec![dkv_binary.display().to_string()],
            cmd: Vec::new(),
        },
    );
    for release in RELEASES.iter().rev() {
        for pattern in patterns(release).into_iter().rev() {
            map.insert(
                pattern,
                ImageTarget {
                    bin_dir: Some(bin_dir(tools, release)),
                    entrypoint: vec!["etcd".into()],
                    cmd: Vec::new(),
                },
            );
        }
    }
    map
}

/// The releases missing under `tools`.
pub fn missing(tools: &Path) -> Vec<Release> {
    RELEASES
        .iter()
        .filter(|r| {
            let dir = bin_dir(tools, r);
            !(dir.join("etcd").is_file() && dir.join("etcdctl").is_file())
        })
        .copied()
        .collect()
}

/// Fetches every release missing under `tools` from Debian.
pub fn ensure(tools: &Path) -> anyhow::Result<()> {
    for release in missing(tools) {
        info!(release = release.line, suite = release.suite, tools = %tools.display(), "fetching etcd from Debian (first use)");
        fetch(tools, &release).with_context(|| {
            format!(
                "etcd {line} is not installed under {dir} and could not be fetched from Debian {suite}. Put etcd {line}'s etcd and etcdctl there, set DKV_TOOLS_DIR to a directory that has etcd-{line}/usr/bin, or pass --image-map FILE mapping the etcd images to your etcd binaries",
                line = release.line,
                suite = release.suite,
                dir = bin_dir(tools, &release).display(),
            )
        })?;
        if missing(tools).contains(&release) {
            bail!(
                "Debian {}'s etcd packages did not provide {}/etcd and etcdctl",
                release.suite,
                bin_dir(tools, &release).display()
            );
        }
        let etcd = bin_dir(tools, &release).join("etcd");
        let reported = Command::new(&etcd)
            .arg("--version")
            .output()
            .with_context(|| format!("running {} --version", etcd.display()))?;
        let wanted = format!("etcd Version: {}\n", release.version);
        if !String::from_utf8_lossy(&reported.stdout).starts_with(&wanted) {
            bail!(
                "Debian {} now ships another etcd than {} ({}): dkv maps the images of {} to it; remove {} and use a dkv that knows the new release",
                release.suite,
                release.version,
                String::from_utf8_lossy(&reported.stdout)
                    .lines()
                    .next()
                    .unwrap_or_default(),
                release.version,
                bin_dir(tools, &release).display()
            );
        }
    }
    Ok(())
}

/// `etcd-server` and `etcd-client` of `release.suite`, downloaded through an
/// apt configuration of their own under `tools` and unpacked with `dpkg -x`.
fn fetch(tools: &Path, release: &Release) -> anyhow::Result<()> {
    let apt_dir = tools.join(format!("apt-{}", release.suite));
    let archives = apt_dir.join("archives");
    let target = tools.join(format!("etcd-{}", release.line));
    for dir in [
        apt_dir.join("lists/partial"),
        archives.join("partial"),
        target.clone(),
    ] {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let sources = apt_dir.join("sources.list");
    std::fs::write(
        &sources,
        format!("deb http://deb.debian.org/debian {} main\n", release.suite),
    )
    .with_context(|| format!("writing {}", sources.display()))?;
    let mut options = vec![
        format!("Dir::Etc::SourceList={}", sources.display()),
        "Dir::Etc::SourceParts=-".to_owned(),
        format!("Dir::State::Lists={}", apt_dir.join("lists").display()),
        format!("Dir::Cache::Archives={}", archives.display()),
        "Debug::NoLocking=1".to_owned(),
    ];
    if running_as_root() {
        // apt's download sandbox user cannot write here.
        options.push("APT::Sandbox::User=root".to_owned());
    }
    let apt = |args: &[&str], dir: &Path| -> anyhow::Result<()> {
        let mut command = Command::new("apt-get");
        for option in &options {
            command.arg("-o").arg(option);
        }
        let status = command
            .args(args)
            .current_dir(dir)
            .status()
            .context("running apt-get (is this a Debian-based system?)")?;
        if !status.success() {
            bail!("apt-get {} failed ({status})", args.join(" "));
        }
        Ok(())
    };
    apt(&["update", "-qq"], tools)?;
    for old in debs(&archives)? {
        std::fs::remove_file(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    apt(
        &["download", "-qq", "etcd-server", "etcd-client"],
        &archives,
    )?;
    for deb in debs(&archives)? {
        let status = Command::new("dpkg")
            .arg("-x")
            .arg(&deb)
            .arg(&target)
            .status()
            .context("running dpkg")?;
        if !status.success() {
            bail!("dpkg -x {} failed ({status})", deb.display());
        }
    }
    Ok(())
}

/// Whether this process runs as root (`/proc/self` belongs to its user).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The etcd packages downloaded into `archives`.
fn debs(archives: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let entries =
        std::fs::read_dir(archives).with_context(|| format!("reading {}", archives.display()))?;
    let mut out = Vec::new();
    for entry in entries {
        let path = entry
            .with_context(|| format!("reading {}", archives.display()))?
            .path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("etcd-") && name.ends_with(".deb") {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_etcd_image_maps_to_its_release_and_the_patch_release_wins() {
        let tools = Path::new("/tools");
        let map = image_map(tools, Path::new("/opt/dkv/bin/dkv"));
        let dir = |image: &str| map.lookup(image).and_then(|t| t.bin_dir.clone());
        let line = |l: &str| Some(PathBuf::from(format!("/tools/etcd-{l}/usr/bin")));
        assert_eq!(dir("registry.k8s.io/etcd:3.5.30-0"), line("3.5.30"));
        assert_eq!(dir("quay.io/coreos/etcd:v3.5.30"), line("3.5.30"));
        assert_eq!(dir("registry.k8s.io/etcd:3.5.16-0"), line("3.5"));
        assert_eq!(dir("gcr.io/etcd-development/etcd:v3.5.16"), line("3.5"));
        // A tag of no installed release pulls nothing, as from a registry
        // that lacks it.
        assert_eq!(dir("gcr.io/etcd-development/etcd:v3.5.9"), None);
        assert_eq!(dir("registry.k8s.io/etcd:3.5.99-0"), None);
        assert_eq!(dir("registry.k8s.io/etcd:3.5.16-1"), None);
        assert_eq!(dir("registry.k8s.io/etcd:3.4.23-0"), line("3.4"));
        assert_eq!(dir("registry.k8s.io/etcd:3.6.5-0"), None);
        let dkv = map.lookup("ghcr.io/dkv-io/dkv:1.2.3");
        assert_eq!(
            dkv.map(|t| t.entrypoint.clone()),
            Some(vec!["/opt/dkv/bin/dkv".to_owned()])
        );
    }

    #[test]
    fn a_release_is_missing_until_both_binaries_are_there() {
        let tools = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(missing(tools.path()).len(), 3);
        let dir = bin_dir(tools.path(), &RELEASES[1]);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("etcd"), "").unwrap_or_else(|e| panic!("{e}"));
        assert!(missing(tools.path()).contains(&RELEASES[1]));
        std::fs::write(dir.join("etcdctl"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(missing(tools.path()), vec![RELEASES[0], RELEASES[2]]);
    }
}
