//! The member-side code hash covers what the member side runs: what cargo
//! links into it, checked against cargo's own resolution, and a change in
//! any of it changes the hash (`build/member_code.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "../../build/member_code.rs"]
#[allow(dead_code, reason = "the test reads only some of it")]
mod member_code;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_operator_was_built_with_the_hash_of_this_tree() {
    let code = member_code::compute(&workspace_root()).expect("hashing the member side");
    assert_eq!(
        code.digest,
        dkv_operator::cluster::upgrade::member_side::CODE_HASH
    );
}

/// What `cargo metadata` says the member crate links: workspace crates by
/// directory, other packages as `name version`.
fn linked_by_cargo() -> (BTreeMap<String, PathBuf>, BTreeSet<String>) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = workspace_root();
    // This machine's platform only: packages of others are not downloaded.
    let rustc = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("running rustc -vV");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc names its host");
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version=1", "--locked", "--offline"])
        .arg(format!("--filter-platform={host}"))
        .current_dir(&root)
        .output()
        .expect("running cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let packages: BTreeMap<&str, &serde_json::Value> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("package id"), p))
        .collect();
    let workspace: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .expect("workspace members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve nodes")
        .iter()
        .map(|n| (n["id"].as_str().expect("node id"), n))
        .collect();
    let member = packages
        .iter()
        .find(|(_, p)| p["name"] == member_code::MEMBER_CRATE)
        .map(|(id, _)| *id)
        .expect("the member crate is a workspace member");
    let root = std::fs::canonicalize(&root).expect("workspace root");
    let mut seen = BTreeSet::new();
    let mut queue = vec![member];
    let (mut crates, mut others) = (BTreeMap::new(), BTreeSet::new());
    while let Some(id) = queue.pop() {
        if !seen.insert(id) {
            continue;
        }
        let package = packages[id];
        let name = package["name"].as_str().expect("name").to_owned();
        if workspace.contains(id) {
            let manifest = Path::new(package["manifest_path"].as_str().expect("manifest path"));
            let dir = manifest
                .parent()
                .and_then(|d| d.strip_prefix(&root).ok())
                .expect("a workspace crate under the root");
            crates.insert(name, dir.to_path_buf());
        } else {
            others.insert(format!(
                "{name} {}",
                package["version"].as_str().expect("version")
            ));
        }
        for dep in nodes[id]["deps"].as_array().expect("deps") {
            // Normal and build dependencies are linked into or run for the
            // binary; dev-dependencies are not.
            let linked = dep["dep_kinds"]
                .as_array()
                .expect("dep kinds")
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            if linked {
                queue.push(dep["pkg"].as_str().expect("dep id"));
            }
        }
    }
    (crates, others)
}

#[test]
fn the_hash_covers_every_crate_and_package_cargo_links_into_the_member_side() {
    let code = member_code::compute(&workspace_root()).expect("hashing the member side");
    let (crates, packages) = linked_by_cargo();
    assert_eq!(
        code.crates, crates,
        "the member side's workspace crates, as the hash and as cargo see them"
    );
    let missing: Vec<_> = packages.difference(&code.packages).collect();
    assert!(
        missing.is_empty(),
        "packages cargo links into the member side that the hash leaves out: {missing:?}"
    );
    // The member side never reaches into the operator, the control plane or
    // the API types (an API change would roll every member).
    for outside in ["dkv-operator", "dkv-api", "kube-local", "dkv-readouts"] {
        assert!(
            !code.crates.contains_key(outside),
            "the member side depends on {outside}"
        );
    }
}

/// A workspace of three crates: the member crate, a crate it depends on,
/// a crate only its tests use; and the binary's entry.
fn small_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        std::fs::write(path, text).expect("writing");
    };
    write(
        "Cargo.toml",
        "[workspace]\nmembers = [\"crates/*\"]\n\n[workspace.dependencies]\n\
         shared = { path = \"crates/shared\" }\nserde = \"1\"\n",
    );
    write(
        "crates/dkv-member/Cargo.toml",
        "[package]\nname = \"dkv-member\"\n\n[dependencies]\nshared = { workspace = true }\n\
         serde = { workspace = true }\n\n[dev-dependencies]\nhelper = { path = \"../helper\" }\n\
         tempfile = \"3\"\n",
    );
    write("crates/dkv-member/src/lib.rs", "pub fn run() {}\n");
    write(
        "crates/dkv-member/tests/contract.rs",
        "#[test]\nfn t() {}\n",
    );
    write(
        "crates/shared/Cargo.toml",
        "[package]\nname = \"shared\"\n\n[dependencies]\nitoa = \"1\"\n",
    );
    write("crates/shared/src/lib.rs", "pub const PORT: u16 = 2380;\n");
    write("crates/helper/Cargo.toml", "[package]\nname = \"helper\"\n");
    write("crates/helper/src/lib.rs", "\n");
    write("crates/dkv-operator/src/main.rs", "fn main() {}\n");
    write("crates/dkv-operator/src/cli.rs", "\n");
    write(
        "Cargo.lock",
        "version = 4\n\n\
         [[package]]\nname = \"dkv-member\"\nversion = \"0.1.0\"\n\
         dependencies = [\"helper\", \"serde\", \"shared\", \"tempfile\"]\n\n\
         [[package]]\nname = \"helper\"\nversion = \"0.1.0\"\n\n\
         [[package]]\nname = \"itoa\"\nversion = \"1.0.15\"\nsource = \"registry\"\nchecksum = \"aa\"\n\n\
         [[package]]\nname = \"serde\"\nversion = \"1.0.219\"\nsource = \"registry\"\nchecksum = \"bb\"\n\
         dependencies = [\"serde_derive\"]\n\n\
         [[package]]\nname = \"serde_derive\"\nversion = \"1.0.219\"\nsource = \"registry\"\nchecksum = \"cc\"\n\n\
         [[package]]\nname = \"shared\"\nversion = \"0.1.0\"\ndependencies = [\"itoa\"]\n\n\
         [[package]]\nname = \"tempfile\"\nversion = \"3.20.0\"\nsource = \"registry\"\nchecksum = \"dd\"\n",
    );
    dir
}

#[test]
fn a_change_to_anything_the_member_side_runs_changes_the_hash_and_nothing_else_does() {
    let workspace = small_workspace();
    let root = workspace.path();
    let hash = || member_code::compute(root).expect("hashing").digest;
    let before = member_code::compute(root).expect("hashing");
    assert_eq!(
        before.crates.keys().collect::<Vec<_>>(),
        ["dkv-member", "shared"]
    );
    assert_eq!(
        before.packages.iter().collect::<Vec<_>>(),
        ["itoa 1.0.15", "serde 1.0.219", "serde_derive 1.0.219"]
    );
    let edit = |path: &str, from: &str, to: &str| {
        let path = root.join(path);
        let text = std::fs::read_to_string(&path).expect("reading");
        assert!(text.contains(from), "{} holds {from}", path.display());
        std::fs::write(&path, text.replace(from, to)).expect("writing");
    };

    // Not run by members: the member crate's tests, a dev-dependency's
    // code and version.
    let original = hash();
    edit("crates/dkv-member/tests/contract.rs", "fn t", "fn u");
    edit("crates/helper/src/lib.rs", "\n", "pub fn help() {}\n");
    edit("Cargo.lock", "3.20.0", "3.21.0");
    assert_eq!(
        hash(),
        original,
        "tests and dev-dependencies roll no member"
    );

    // Run by members: each changes the hash.
    let changes: [(&str, &str, &str); 6] = [
        ("crates/dkv-member/src/lib.rs", "run", "start"),
        ("crates/shared/src/lib.rs", "2380", "2390"),
        ("Cargo.lock", "1.0.15", "1.0.16"),
        ("Cargo.lock", "checksum = \"cc\"", "checksum = \"ce\""),
        ("crates/dkv-operator/src/main.rs", "{}", "{ }"),
        ("crates/shared/Cargo.toml", "itoa = \"1\"", "itoa = \"1.0\""),
    ];
    let mut seen = BTreeSet::from([original]);
    for (path, from, to) in changes {
        edit(path, from, to);
        assert!(
            seen.insert(hash()),
            "changing {path} ({from} -> {to}) changed the hash"
        );
    }
    // A new file under src/ too (an included fixture, a new module).
    std::fs::write(root.join("crates/shared/src/table.json"), "{}").expect("writing");
    assert!(
        seen.insert(hash()),
        "a new file under src/ changed the hash"
    );
}
