//! The build before this one's member side: the newest commit whose
//! member-side code (what `dkv-operator`'s `build.rs` hashes,
//! [`dkv_operator::cluster::upgrade::member_side::CODE_INPUTS`]) differs from this
//! checkout's, built from git once and kept under
//! `<tools>/dkv-previous/<commit>/`: its `dkv` binary and its source tree
//! (for its Helm chart).
//!
//! That commit is the parent of the newest commit that changed a member-side
//! file, or `HEAD` itself when the checkout has uncommitted member-side
//! changes. Cargo.lock and the workspace manifest are left out of that
//! search (they change for the operator's dependencies as often as for the
//! member side's); a dependency bump alone is then not taken for a new
//! member side, and the build found is older than it could be, never the
//! same.

use std::path::{Path, PathBuf};
use std::process::Command;

use dkv_operator::cluster::upgrade::member_side::CODE_INPUTS;

use crate::paths::{repo_root, tools_dir};

/// A build of the commit before this checkout's member side.
#[derive(Debug, Clone)]
pub struct PreviousRelease {
    pub commit: String,
    /// Its `dkv` binary.
    pub dkv: PathBuf,
    /// Its source tree (`charts/dkv`, `deploy/`).
    pub source: PathBuf,
}

fn git(args: &[&str]) -> (bool, String) {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo_root())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

/// The member-side files and directories this build was hashed from, as
/// git pathspecs.
fn member_side_paths() -> Vec<&'static str> {
    CODE_INPUTS
        .split(':')
        .filter(|p| !p.is_empty() && *p != "Cargo.toml" && *p != "Cargo.lock")
        .collect()
}

/// The commit of the previous member side (see the module docs).
pub fn commit() -> String {
    let paths = member_side_paths();
    assert!(
        !paths.is_empty(),
        "no member-side inputs in {CODE_INPUTS:?}"
    );
    let mut diff = vec!["diff", "--quiet", "HEAD", "--"];
    diff.extend(&paths);
    let (unchanged, _) = git(&diff);
    let rev = if unchanged {
        let mut log = vec!["log", "-1", "--format=%H", "HEAD", "--"];
        log.extend(&paths);
        let (ok, newest) = git(&log);
        assert!(
            ok && !newest.is_empty(),
            "git log of the member side: {newest}"
        );
        format!("{newest}^")
    } else {
        "HEAD".to_owned()
    };
    let (ok, commit) = git(&["rev-parse", "--verify", &format!("{rev}^{{commit}}")]);
    assert!(
        ok,
        "{rev}: not in this checkout's history (a shallow clone?)"
    );
    commit
}

/// The previous member side's build, made on first use and kept in
/// `<tools>/dkv-previous/<commit>/` (later runs find it). Concurrent callers
/// wait for the one that builds.
///
/// It is a debug build of `dkv` made with this test build's dependencies:
/// the same cargo command shape as the test build (every workspace crate,
/// with dev-dependencies resolved, so every dependency gets the same
/// features) in the same build directory. Cargo then compiles only the
/// previous commit's workspace crates: 82 to 139 s on two idle cores, where
/// a build in a target directory of its own compiled every dependency
/// again. It runs at the tests' own priority: at `nice -n 10` beside four
/// end-to-end tests it got so little of the two cores that it took 23
/// minutes in CI, and its scenario then ended the whole run. The binary has local mode
/// in it, which the image leaves out; neither the operator nor a member
/// runs it.
pub fn previous_release() -> PreviousRelease {
    let commit = commit();
    let root = tools_dir().join("dkv-previous");
    std::fs::create_dir_all(&root).unwrap();
    let dir = root.join(&commit[..12]);
    let release = PreviousRelease {
        commit: commit.clone(),
        dkv: dir.join("dkv"),
        source: dir.join("src"),
    };
    let lock = std::fs::File::create(root.join(".lock")).unwrap();
    lock.lock().unwrap();
    if !release.dkv.is_file() {
        build(&commit, &root, &dir);
    }
    drop(lock);
    release
}

fn build(commit: &str, root: &Path, dir: &Path) {
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let source = partial.join("src");
    std::fs::create_dir_all(&source).unwrap();
    let archive = Command::new("sh")
        .arg("-c")
        .arg(r#"git -C "$1" archive "$2" | tar -x -C "$3""#)
        .args(["sh", &repo_root().display().to_string(), commit])
        .arg(&source)
        .status()
        .unwrap();
    assert!(archive.success(), "git archive {commit}");
    let started = std::time::Instant::now();
    let target = root.join("target");
    let mut cargo = Command::new("cargo");
    cargo
        .args(["build", "--locked", "-q"])
        // `--examples` makes cargo resolve dev-dependencies, as the test
        // build does: without it some dependencies get fewer features, and
        // a different build.
        .args(["--workspace", "--bin", "dkv", "--examples"])
        .args(distinct_workspace_artifacts(&source))
        .current_dir(&source);
    // Nothing of this build's Cargo environment (the test runner's) leaks
    // into that one.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if (key.starts_with("CARGO_") && key != "CARGO_HOME") || key == "RUSTFLAGS" {
            cargo.env_remove(&key);
        }
    }
    // The binaries land in a directory of their own; what they are built
    // from is shared with this test build.
    cargo.env("CARGO_TARGET_DIR", &target);
    if let Some(build_dir) = this_build_dir() {
        cargo.env("CARGO_BUILD_BUILD_DIR", build_dir);
    }
    let out = cargo.output().unwrap();
    assert!(
        out.status.success(),
        "building dkv at {commit}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::copy(target.join("debug/dkv"), partial.join("dkv")).unwrap();
    eprintln!(
        "built dkv at {commit} (the previous member side) in {:?}",
        started.elapsed()
    );
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&partial, dir).unwrap();
}

/// The directory this test binary was built in (`<build>/<profile>/deps/`
/// holds it), when it looks like Cargo's.
fn this_build_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let build = exe.parent()?.parent()?.parent()?;
    build
        .join("CACHEDIR.TAG")
        .is_file()
        .then(|| build.to_owned())
}

/// Cargo names a workspace crate's artifacts after its path inside the
/// workspace, so the previous commit's crates would overwrite this build's
/// in the shared build directory (and make the next build of this tree
/// recompile them). A profile setting of no other consequence for a build
/// made once, no incremental cache, gives them names of their own.
fn distinct_workspace_artifacts(source: &Path) -> Vec<String> {
    let out = Command::new("cargo")
        .args(["metadata", "--no-deps", "--format-version=1"])
        .current_dir(source)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap_or_else(|e| panic!("cargo metadata in {}: {e}", source.display()));
    assert!(
        out.status.success(),
        "cargo metadata in {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    metadata["packages"]
        .as_array()
        .expect("cargo metadata lists packages")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .flat_map(|name| {
            [
                "--config".to_owned(),
                format!("profile.dev.package.{name}.incremental=false"),
            ]
        })
        .collect()
}
