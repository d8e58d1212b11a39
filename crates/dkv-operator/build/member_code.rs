//! The member-side code hash: what decides whether a new operator build
//! rolls its image out to the members (`src/cluster/upgrade/member_side.rs`).
//!
//! It covers everything the member side runs: the `dkv-member` crate and
//! every workspace crate it depends on (their manifests, build scripts and
//! `src/` trees), the name, version and checksum Cargo.lock gives every
//! package those crates pull in, and the binary's entry (`src/main.rs`,
//! `src/cli.rs` of dkv-operator), which parses and dispatches every role.
//! Dev-dependencies are left out: they are not linked into the binary.
//!
//! Included by `build.rs` and by the tests that check it against what
//! cargo itself resolves, so both compute it the same way.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// The crate the member side is.
pub const MEMBER_CRATE: &str = "dkv-member";
/// The binary's entry, relative to the workspace root.
pub const ENTRY_FILES: [&str; 2] = [
    "crates/dkv-operator/src/main.rs",
    "crates/dkv-operator/src/cli.rs",
];

/// What the hash was made of.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "build.rs needs only the digest and inputs; the tests read the rest"
)]
pub struct MemberCode {
    /// Workspace crates (package name -> directory relative to the root).
    pub crates: BTreeMap<String, PathBuf>,
    /// `name version` of every other package they pull in.
    pub packages: BTreeSet<String>,
    /// Files and directories whose change changes the hash.
    pub inputs: Vec<PathBuf>,
    /// The first 8 bytes of the SHA-256, in hex.
    pub digest: String,
}

#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| Error(format!("reading {}: {e}", path.display())))
}

fn read_toml(path: &Path) -> Result<toml::Table, Error> {
    let text = String::from_utf8(read(path)?)
        .map_err(|e| Error(format!("{} is not UTF-8: {e}", path.display())))?;
    text.parse()
        .map_err(|e| Error(format!("parsing {}: {e}", path.display())))
}

/// A dependency as a manifest names it: the package's name, and its
/// directory when it is a path (workspace) dependency.
struct Named {
    package: String,
    path: Option<PathBuf>,
}

/// The normal and build dependencies a crate's manifest declares
/// (platform-specific ones included), workspace inheritance resolved.
fn dependencies(
    manifest: &toml::Table,
    crate_dir: &Path,
    workspace_deps: &toml::Table,
) -> Vec<Named> {
    let mut tables: Vec<&toml::Table> = Vec::new();
    for key in ["dependencies", "build-dependencies"] {
        if let Some(t) = manifest.get(key).and_then(|v| v.as_table()) {
            tables.push(t);
        }
    }
    if let Some(targets) = manifest.get("target").and_then(|v| v.as_table()) {
        for target in targets.values().filter_map(|v| v.as_table()) {
            for key in ["dependencies", "build-dependencies"] {
                if let Some(t) = target.get(key).and_then(|v| v.as_table()) {
                    tables.push(t);
                }
            }
        }
    }
    let mut out = Vec::new();
    for table in tables {
        for (key, spec) in table {
            let inherited = spec
                .get("workspace")
                .and_then(|v| v.as_bool())
                .unwrap_or(false);
            // The workspace's entry when inherited (paths in it are
            // relative to the root), the crate's own otherwise.
            let (entry, base) = if inherited {
                (workspace_deps.get(key), PathBuf::new())
            } else {
                (Some(spec), crate_dir.to_path_buf())
            };
            let entry = entry.and_then(|e| e.as_table());
            let package = entry
                .and_then(|e| e.get("package"))
                .and_then(|p| p.as_str())
                .unwrap_or(key)
                .to_owned();
            let path = entry
                .and_then(|e| e.get("path"))
                .and_then(|p| p.as_str())
                .map(|p| normalize(&base.join(p)));
            out.push(Named { package, path });
        }
    }
    out
}

/// `a/b/../c` as `a/c`: manifests name siblings with `..`.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Every file under `dir`, sorted, relative to `root`.
fn files_under(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), Error> {
    let full = root.join(dir);
    let entries =
        std::fs::read_dir(&full).map_err(|e| Error(format!("listing {}: {e}", full.display())))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error(format!("listing {}: {e}", full.display())))?;
        names.push(entry.file_name());
    }
    names.sort();
    for name in names {
        let relative = dir.join(&name);
        if root.join(&relative).is_dir() {
            files_under(root, &relative, out)?;
        } else {
            out.push(relative);
        }
    }
    Ok(())
}

/// One `[[package]]` of Cargo.lock.
struct Locked {
    name: String,
    version: String,
    source: String,
    checksum: String,
    dependencies: Vec<String>,
}

fn lock_packages(lock: &toml::Table) -> Vec<Locked> {
    let text = |p: &toml::Value, key: &str| {
        p.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned()
    };
    lock.get("package")
        .and_then(|p| p.as_array())
        .map(|packages| {
            packages
                .iter()
                .map(|p| Locked {
                    name: text(p, "name"),
                    version: text(p, "version"),
                    source: text(p, "source"),
                    checksum: text(p, "checksum"),
                    dependencies: p
                        .get("dependencies")
                        .and_then(|d| d.as_array())
                        .map(|d| {
                            d.iter()
                                .filter_map(|s| s.as_str().map(str::to_owned))
                                .collect()
                        })
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The package a lock entry's dependency string (`name`, `name version` or
/// `name version (source)`) names.
fn resolve<'a>(packages: &'a [Locked], dependency: &str) -> Option<&'a Locked> {
    let mut parts = dependency.split(' ');
    let name = parts.next()?;
    let version = parts.next();
    packages
        .iter()
        .find(|p| p.name == name && version.is_none_or(|v| p.version == v))
}

/// The member-side code of the workspace at `root`.
pub fn compute(root: &Path) -> Result<MemberCode, Error> {
    let workspace = read_toml(&root.join("Cargo.toml"))?;
    let empty = toml::Table::new();
    let workspace_deps = workspace
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|d| d.as_table())
        .unwrap_or(&empty);

    // The workspace crates, from the member crate along path dependencies.
    let mut crates = BTreeMap::new();
    let mut external_names: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut queue = VecDeque::from([(
        MEMBER_CRATE.to_owned(),
        PathBuf::from("crates").join(MEMBER_CRATE),
    )]);
    while let Some((name, dir)) = queue.pop_front() {
        if crates.contains_key(&name) {
            continue;
        }
        let manifest = read_toml(&root.join(&dir).join("Cargo.toml"))?;
        let mut externals = BTreeSet::new();
        for dependency in dependencies(&manifest, &dir, workspace_deps) {
            match dependency.path {
                // A path into this same crate is how some crates turn on
                // their own features for tests; it is no new crate.
                Some(path) if path == dir => {}
                Some(path) => queue.push_back((dependency.package, path)),
                None => {
                    externals.insert(dependency.package);
                }
            }
        }
        external_names.insert(name.clone(), externals);
        crates.insert(name, dir);
    }

    // Their packages in Cargo.lock: each workspace crate's own entry lists
    // its dev-dependencies too, so only the ones its manifest declares
    // for the build are followed from it; every package below is followed
    // whole.
    let lock = read_toml(&root.join("Cargo.lock"))?;
    let packages = lock_packages(&lock);
    let mut pulled: BTreeSet<String> = BTreeSet::new();
    let mut queue: VecDeque<&Locked> = VecDeque::new();
    for (name, externals) in &external_names {
        let Some(entry) = packages
            .iter()
            .find(|p| &p.name == name && p.source.is_empty())
        else {
            return Err(Error(format!("{name} is not in Cargo.lock")));
        };
        for dependency in &entry.dependencies {
            let dep_name = dependency.split(' ').next().unwrap_or_default();
            if externals.contains(dep_name)
                && let Some(package) = resolve(&packages, dependency)
            {
                queue.push_back(package);
            }
        }
    }
    let mut locked_lines = BTreeSet::new();
    while let Some(package) = queue.pop_front() {
        let id = format!("{} {}", package.name, package.version);
        if !pulled.insert(id) || crates.contains_key(&package.name) {
            continue;
        }
        locked_lines.insert(format!(
            "{} {} {} {}",
            package.name, package.version, package.source, package.checksum
        ));
        for dependency in &package.dependencies {
            if let Some(next) = resolve(&packages, dependency) {
                queue.push_back(next);
            }
        }
    }
    pulled.retain(|id| {
        let name = id.split(' ').next().unwrap_or_default();
        !crates.contains_key(name)
    });

    // The files: each crate's manifest, build script and src/, and the
    // binary's entry.
    let mut files = Vec::new();
    let mut inputs = vec![PathBuf::from("Cargo.toml"), PathBuf::from("Cargo.lock")];
    for dir in crates.values() {
        for file in ["Cargo.toml", "build.rs"] {
            if root.join(dir).join(file).is_file() {
                files.push(dir.join(file));
            }
        }
        files_under(root, &dir.join("src"), &mut files)?;
        // Only paths that exist: cargo takes a missing one for a change and
        // would run build.rs, and so compile the operator again, on every
        // build (a crate without a build script has no `build.rs`).
        inputs.extend(
            [
                dir.join("Cargo.toml"),
                dir.join("build.rs"),
                dir.join("src"),
            ]
            .into_iter()
            .filter(|input| root.join(input).exists()),
        );
    }
    for entry in ENTRY_FILES {
        files.push(PathBuf::from(entry));
        inputs.push(PathBuf::from(entry));
    }

    let mut hasher = Sha256::new();
    for file in &files {
        let bytes = read(&root.join(file))?;
        // Paths relative to the root, with `/`: the same tree gives the same
        // hash wherever it is checked out.
        let name = file
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        hasher.update(format!("file {name} {}\n", bytes.len()).as_bytes());
        hasher.update(&bytes);
    }
    for line in &locked_lines {
        hasher.update(format!("package {line}\n").as_bytes());
    }
    let digest = hasher.finalize();
    Ok(MemberCode {
        crates,
        packages: pulled,
        inputs,
        digest: hex::encode(&digest[..8]),
    })
}
