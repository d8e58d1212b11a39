//! Hashes the member-side code (`src/member_init/`) into
//! `DKV_MEMBER_SIDE_CODE`: a new operator build whose member-side code is
//! the same restarts no member (see `src/cluster/member_side.rs`).

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

fn files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let root = Path::new("src/member_init");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut found = Vec::new();
    files(root, &mut found)?;
    found.sort();
    let mut hasher = Sha256::new();
    for path in &found {
        // The path relative to the crate and the bytes: the same sources
        // give the same hash on every machine.
        hasher.update(path.to_string_lossy().as_bytes());
        hasher.update(std::fs::read(path)?);
    }
    let digest = hasher.finalize();
    println!(
        "cargo:rustc-env=DKV_MEMBER_SIDE_CODE={}",
        hex::encode(&digest[..8])
    );
    Ok(())
}
