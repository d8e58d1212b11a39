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
//! `etcd-<line>/usr/bin/{etcd,etcdctl}`. 3.4 and 3.5 are unpacked from
//! Debian's packages (`etcd-server`, `etcd-client`): 3.4 from bookworm, 3.5
//! (3.5.16) from trixie, 3.5.30 from unstable; `dkv local up` fetches what
//! is missing on first use with `apt-get download` through a private apt
//! configuration (the system's own sources are left alone) and `dpkg -x`,
//! the way `scripts/install-etcd.sh` does for a checkout. 3.6 and 3.7 have
//! no Debian package: they are built from etcd's own Go modules by the small
//! module of each line under `go/etcd/` (built into this binary), only when
//! asked for (`dkv local up --etcd 3.6`), since that needs Go; until then
//! their images are not mapped and fail to start as images that cannot be
//! pulled. Nothing here depends on the source tree the binary was built from.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use kube_local::kubelet::{ImageMap, ImageTarget};
use tracing::info;

/// One etcd release line and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdRelease {
    /// `3.4`, `3.5` or a patch release installed on its own (`3.5.30`,
    /// `3.6.16`).
    pub line: &'static str,
    pub source: EtcdSource,
    /// The etcd version the release carries: the images of exactly this
    /// version map to it.
    pub version: &'static str,
}

/// Where a release's binaries come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdSource {
    /// The `etcd-server`/`etcd-client` packages of this Debian suite,
    /// fetched on first use.
    Debian { suite: &'static str },
    /// etcd's Go modules, built by this module of `go/etcd/` when asked for.
    GoModules(&'static GoModule),
}

/// One `go/etcd/vMINOR` module, its files as the repository has them.
#[derive(Debug, PartialEq, Eq)]
pub struct GoModule {
    /// `3.6`: the directory `v3.6` and what `dkv local up --etcd` takes.
    pub minor: &'static str,
    files: [(&'static str, &'static str); 4],
}

const GO_3_6: GoModule = GoModule {
    minor: "3.6",
    files: [
        ("go.mod", include_str!("../../../../go/etcd/v3.6/go.mod")),
        ("go.sum", include_str!("../../../../go/etcd/v3.6/go.sum")),
        (
            "tools.go",
            include_str!("../../../../go/etcd/v3.6/tools.go"),
        ),
        (
            "etcd/main.go",
            include_str!("../../../../go/etcd/v3.6/etcd/main.go"),
        ),
    ],
};

const GO_3_7: GoModule = GoModule {
    minor: "3.7",
    files: [
        ("go.mod", include_str!("../../../../go/etcd/v3.7/go.mod")),
        ("go.sum", include_str!("../../../../go/etcd/v3.7/go.sum")),
        (
            "tools.go",
            include_str!("../../../../go/etcd/v3.7/tools.go"),
        ),
        (
            "etcd/main.go",
            include_str!("../../../../go/etcd/v3.7/etcd/main.go"),
        ),
    ],
};

const BUILD_SCRIPT: &str = include_str!("../../../../go/etcd/build.sh");
const GO_LIB: &str = include_str!("../../../../go/lib.sh");

/// The releases, newest first, a patch release installed on its own before
/// its minor line (the first image pattern that matches wins).
pub const RELEASES: [EtcdRelease; 5] = [
    EtcdRelease {
        line: "3.7.3",
        source: EtcdSource::GoModules(&GO_3_7),
        version: "3.7.3",
    },
    EtcdRelease {
        line: "3.6.16",
        source: EtcdSource::GoModules(&GO_3_6),
        version: "3.6.16",
    },
    EtcdRelease {
        line: "3.5.30",
        source: EtcdSource::Debian { suite: "unstable" },
        version: "3.5.30",
    },
    EtcdRelease {
        line: "3.5",
        source: EtcdSource::Debian { suite: "trixie" },
        version: "3.5.16",
    },
    EtcdRelease {
        line: "3.4",
        source: EtcdSource::Debian { suite: "bookworm" },
        version: "3.4.23",
    },
];

/// The release of etcd 3.5.16, what `dkv local up --kubernetes` stores the
/// API server's data in.
pub const RELEASE_3_5: EtcdRelease = RELEASES[3];

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
pub fn bin_dir(tools: &Path, release: &EtcdRelease) -> PathBuf {
    tools.join(format!("etcd-{}", release.line)).join("usr/bin")
}

/// The image patterns of `release`: the registries etcd publishes to.
fn patterns(release: &EtcdRelease) -> Vec<String> {
    // registry.k8s.io's tags carry a build suffix; the upstream ones a `v`.
    let version = release.version;
    vec![
        format!("registry.k8s.io/etcd:{version}-0"),
        format!("quay.io/coreos/etcd:v{version}"),
        format!("gcr.io/etcd-development/etcd:v{version}"),
    ]
}

/// The image map of `dkv local`: etcd images to the releases under
/// `tools` (those built from Go modules once they are built), the dkv image
/// to `dkv_binary`.
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
        if matches!(release.source, EtcdSource::GoModules(_)) && !is_installed(tools, release) {
            // Not mapped rather than mapped to an empty directory, where the
            // kubelet would look further (PATH) and run another etcd.
            continue;
        }
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

/// Whether `release`'s `etcd` and `etcdctl` are under `tools`.
fn is_installed(tools: &Path, release: &EtcdRelease) -> bool {
    let dir = bin_dir(tools, release);
    dir.join("etcd").is_file() && dir.join("etcdctl").is_file()
}

/// The releases missing under `tools`.
pub fn missing(tools: &Path) -> Vec<EtcdRelease> {
    RELEASES
        .iter()
        .filter(|r| !is_installed(tools, r))
        .copied()
        .collect()
}

/// The release built from Go modules that `--etcd MINOR` names (`3.6`,
/// also `3.6.16` or `v3.6`), or why there is none.
pub fn find_go_release(minor: &str) -> anyhow::Result<EtcdRelease> {
    let wanted = minor.trim_start_matches('v');
    let built_from_go = || {
        RELEASES.iter().filter_map(|r| match r.source {
            EtcdSource::GoModules(module) => Some((r, module)),
            EtcdSource::Debian { .. } => None,
        })
    };
    if let Some((release, _)) =
        built_from_go().find(|(r, m)| m.minor == wanted || r.version == wanted)
    {
        return Ok(*release);
    }
    // Oldest first, as people list versions.
    let known: Vec<&str> = built_from_go().map(|(_, m)| m.minor).rev().collect();
    bail!(
        "dkv local builds etcd {} from Go modules, not {minor:?} (3.4 and 3.5 need no --etcd)",
        known.join(" and ")
    )
}

/// Fetches every Debian release missing under `tools`.
pub fn ensure(tools: &Path) -> anyhow::Result<()> {
    for release in missing(tools) {
        let EtcdSource::Debian { suite } = release.source else {
            continue;
        };
        info!(release = release.line, suite, tools = %tools.display(), "fetching etcd from Debian (first use)");
        fetch(tools, &release, suite).with_context(|| {
            format!(
                "etcd {line} is not installed under {dir} and could not be fetched from Debian {suite}. Put etcd {line}'s etcd and etcdctl there, set DKV_TOOLS_DIR to a directory that has etcd-{line}/usr/bin, or pass --image-map FILE mapping the etcd images to your etcd binaries",
                line = release.line,
                dir = bin_dir(tools, &release).display(),
            )
        })?;
        check_installed(tools, &release)?;
    }
    Ok(())
}

/// Builds each of `releases` (from [`find_go_release`]) missing under
/// `tools` from etcd's Go modules.
pub fn ensure_built(tools: &Path, releases: &[EtcdRelease]) -> anyhow::Result<()> {
    for release in releases {
        let EtcdSource::GoModules(module) = release.source else {
            continue;
        };
        if is_installed(tools, release) {
            continue;
        }
        build(tools, release, module)?;
        check_installed(tools, release)?;
    }
    Ok(())
}

/// `release` is installed under `tools` and its `etcd` reports its version.
fn check_installed(tools: &Path, release: &EtcdRelease) -> anyhow::Result<()> {
    if !is_installed(tools, release) {
        bail!(
            "etcd {}'s etcd and etcdctl are still missing from {}",
            release.version,
            bin_dir(tools, release).display()
        );
    }
    check_version(tools, release)
}

/// The installed `etcd` of `release` reports its version.
fn check_version(tools: &Path, release: &EtcdRelease) -> anyhow::Result<()> {
    let etcd = bin_dir(tools, release).join("etcd");
    let reported = Command::new(&etcd)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", etcd.display()))?;
    let wanted = format!("etcd Version: {}\n", release.version);
    if !String::from_utf8_lossy(&reported.stdout).starts_with(&wanted) {
        let from = match release.source {
            EtcdSource::Debian { suite } => format!("Debian {suite} now ships"),
            EtcdSource::GoModules(_) => "the Go modules built".to_owned(),
        };
        bail!(
            "{from} another etcd than {} ({}): dkv maps the images of {} to it; remove {} and use a dkv that knows the new release",
            release.version,
            String::from_utf8_lossy(&reported.stdout)
                .lines()
                .next()
                .unwrap_or_default(),
            release.version,
            bin_dir(tools, release).parent().unwrap_or(tools).display()
        );
    }
    Ok(())
}

/// Builds `release` from etcd's Go modules with the machine's `go`:
/// `module` and the build script are written under the release's directory
/// in `tools` and build `etcd`, `etcdctl` and `etcdutl` into `usr/bin`.
fn build(tools: &Path, release: &EtcdRelease, module: &GoModule) -> anyhow::Result<()> {
    let go = Command::new("go").arg("version").output();
    if !go.as_ref().is_ok_and(|o| o.status.success()) {
        bail!(
            "--etcd {} builds etcd {} from etcd's Go modules and needs Go 1.26 or newer: `go` is not on PATH \
             (install Go, e.g. Debian's golang-go or /usr/local/go, and retry; without --etcd, dkv local runs \
             etcd 3.4 and 3.5 and needs no Go)",
            module.minor,
            release.version
        );
    }
    let home = tools.join(format!("etcd-{}", release.line));
    let src = home.join("src");
    let module_dir = src.join("etcd").join(format!("v{}", module.minor));
    for (name, text) in module
        .files
        .iter()
        .map(|(name, text)| (module_dir.join(name), *text))
        .chain([
            (src.join("etcd/build.sh"), BUILD_SCRIPT),
            (src.join("lib.sh"), GO_LIB),
        ])
    {
        if let Some(dir) = name.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&name, text).with_context(|| format!("writing {}", name.display()))?;
    }
    // Built next to the final directory and renamed once complete: an
    // interrupted build leaves nothing that looks installed.
    let bin = bin_dir(tools, release);
    let staging = home.join("bin.partial");
    let _ = std::fs::remove_dir_all(&staging);
    eprintln!(
        "building etcd {} (etcd, etcdctl, etcdutl) from etcd's Go modules into {}: once, about a minute on 2 cores",
        release.version,
        bin.display()
    );
    let status = Command::new("bash")
        .arg(src.join("etcd/build.sh"))
        .arg(module.minor)
        .arg(&staging)
        .status()
        .context("running bash")?;
    if !status.success() {
        bail!(
            "building etcd {} from Go modules failed ({status}); the error is above",
            release.version
        );
    }
    if let Some(parent) = bin.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let _ = std::fs::remove_dir_all(&bin);
    std::fs::rename(&staging, &bin)
        .with_context(|| format!("moving the binaries to {}", bin.display()))
}

/// `etcd-server` and `etcd-client` of `release.suite`, downloaded through an
/// apt configuration of their own under `tools` and unpacked with `dpkg -x`.
fn fetch(tools: &Path, release: &EtcdRelease, suite: &str) -> anyhow::Result<()> {
    let apt_dir = tools.join(format!("apt-{suite}"));
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
        format!("deb http://deb.debian.org/debian {suite} main\n"),
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
        // Releases built from Go modules are mapped only once built.
        assert_eq!(dir("registry.k8s.io/etcd:3.6.16-0"), None);
        assert_eq!(dir("quay.io/coreos/etcd:v3.7.3"), None);
        let dkv = map.lookup("ghcr.io/dkv-io/dkv:1.2.3");
        assert_eq!(
            dkv.map(|t| t.entrypoint.clone()),
            Some(vec!["/opt/dkv/bin/dkv".to_owned()])
        );
    }

    fn install_empty(tools: &Path, release: &EtcdRelease, programs: &[&str]) {
        let dir = bin_dir(tools, release);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        for program in programs {
            std::fs::write(dir.join(program), "").unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn a_release_is_missing_until_both_binaries_are_there() {
        let tools = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(missing(tools.path()).len(), RELEASES.len());
        install_empty(tools.path(), &RELEASE_3_5, &["etcd"]);
        assert!(missing(tools.path()).contains(&RELEASE_3_5));
        install_empty(tools.path(), &RELEASE_3_5, &["etcdctl"]);
        assert!(!missing(tools.path()).contains(&RELEASE_3_5));
        assert_eq!(missing(tools.path()).len(), RELEASES.len() - 1);
    }

    #[test]
    fn releases_built_from_go_map_their_images_once_built() {
        let tools = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let v36 = find_go_release("3.6").unwrap_or_else(|e| panic!("{e}"));
        let v37 = find_go_release("v3.7.3").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((v36.version, v37.version), ("3.6.16", "3.7.3"));
        install_empty(tools.path(), &v36, &["etcd", "etcdctl"]);
        install_empty(tools.path(), &v37, &["etcd", "etcdctl"]);
        let map = image_map(tools.path(), Path::new("/opt/dkv/bin/dkv"));
        let dir = |image: &str| map.lookup(image).and_then(|t| t.bin_dir.clone());
        for image in [
            "registry.k8s.io/etcd:3.6.16-0",
            "quay.io/coreos/etcd:v3.6.16",
            "gcr.io/etcd-development/etcd:v3.6.16",
        ] {
            assert_eq!(dir(image), Some(bin_dir(tools.path(), &v36)), "{image}");
        }
        for image in [
            "registry.k8s.io/etcd:3.7.3-0",
            "quay.io/coreos/etcd:v3.7.3",
            "gcr.io/etcd-development/etcd:v3.7.3",
        ] {
            assert_eq!(dir(image), Some(bin_dir(tools.path(), &v37)), "{image}");
        }
        assert_eq!(dir("registry.k8s.io/etcd:3.6.15-0"), None);
    }

    #[test]
    fn only_3_6_and_3_7_are_built_from_go() {
        for refused in ["3.5", "3.4", "3.8", "3.6.15"] {
            let message = find_go_release(refused)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(message.contains("3.6 and 3.7"), "{refused}: {message}");
        }
    }

    #[test]
    fn each_go_module_pins_the_release_it_names() {
        for release in RELEASES {
            let EtcdSource::GoModules(module) = release.source else {
                continue;
            };
            let go_mod = module.files[0].1;
            for name in ["server", "etcdctl", "etcdutl"] {
                let line = format!("go.etcd.io/etcd/{name}/v3 v{}\n", release.version);
                assert!(go_mod.contains(&line), "{}: {line}", release.line);
            }
            assert!(release.version.starts_with(&format!("{}.", module.minor)));
        }
    }
}
