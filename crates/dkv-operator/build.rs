//! Hashes the member side (`build/member_code.rs` says what that covers)
//! into `DKV_MEMBER_SIDE_CODE`: a new operator build whose member-side code
//! is the same restarts no member (see `src/cluster/upgrade/member_side.rs`), and
//! what it was made of into `DKV_MEMBER_SIDE_INPUTS`.

use std::path::Path;

#[path = "build/member_code.rs"]
mod member_code;

fn main() -> Result<(), member_code::Error> {
    let root = Path::new("../..");
    let code = member_code::compute(root)?;
    for input in &code.inputs {
        println!("cargo:rerun-if-changed={}", root.join(input).display());
    }
    println!("cargo:rustc-env=DKV_MEMBER_SIDE_CODE={}", code.digest);
    let inputs: Vec<String> = code
        .inputs
        .iter()
        .map(|i| i.display().to_string())
        .collect();
    println!(
        "cargo:rustc-env=DKV_MEMBER_SIDE_INPUTS={}",
        inputs.join(":")
    );
    Ok(())
}
