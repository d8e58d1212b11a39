//! s3s-fs, an S3 server in Rust storing each object as a file, on loopback:
//! the server the backup benchmark measures against. moto, the tests' S3
//! server, is a Python process that spends more CPU taking a snapshot in
//! than dkv spends sending it; s3s-fs writes what it receives to disk at
//! about disk speed, so the comparison measures the clients.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as BASE64;

use super::stores::spawn_listening;
use super::{boto3, s3_config, s3_env, tools_dir, transfer_seconds};
use crate::StoreConfig;

const INSTALL: &str =
    "run scripts/install-s3s-fs.sh (it builds s3s-fs from crates.io into .tools/s3s-fs)";

/// s3s-fs on a free loopback port, storing under a directory of its own
/// (removed on drop) with one bucket, checking signatures against one
/// access key with a random secret. Killed on drop.
pub struct S3sFsServer {
    child: Child,
    root: PathBuf,
    endpoint: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl S3sFsServer {
    /// The binary `scripts/install-s3s-fs.sh` installs.
    pub fn binary() -> PathBuf {
        tools_dir().join("s3s-fs/bin/s3s-fs")
    }

    /// Starts the server with its objects under a new directory in `under`
    /// (the benchmark puts it beside its other copies of the database).
    pub fn start(bucket: &str, under: &Path) -> Self {
        let binary = Self::binary();
        assert!(
            binary.exists(),
            "{} is missing: the backup benchmark measures against s3s-fs; {INSTALL}",
            binary.display()
        );
        let mut secret = [0u8; 30];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
            .unwrap_or_else(|e| panic!("generating a secret key: {e}"));
        let secret_access_key = BASE64.encode(secret);
        let access_key_id = "dkv-backup".to_owned();
        let root = |port: u16| under.join(format!("s3s-fs-{port}"));
        let (child, port) = spawn_listening("s3s-fs", INSTALL, |port| {
            let root = root(port);
            // A bucket is a directory under the root.
            std::fs::create_dir_all(root.join(bucket))
                .unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
            let mut command = Command::new(&binary);
            command
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", &access_key_id])
                .args(["--secret-key", &secret_access_key])
                .arg(&root)
                .env("RUST_LOG", "error");
            command
        });
        let root = root(port);
        Self {
            child,
            root,
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: bucket.to_owned(),
            access_key_id,
            secret_access_key,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `s3://<bucket>/<prefix>`
    pub fn uri(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// A store configuration for this server with its credentials.
    pub fn config(&self) -> StoreConfig {
        s3_config(&self.endpoint, &self.access_key_id, &self.secret_access_key)
    }

    /// The environment a backup Job pod would get from its Secret.
    pub fn env(&self) -> Vec<(String, String)> {
        s3_env(&self.endpoint, &self.access_key_id, &self.secret_access_key)
    }

    /// Seconds boto3's `upload_file` takes to upload a local file with its
    /// default transfer settings (8 MiB parts, up to 10 at a time).
    pub fn boto3_upload_seconds(&self, path: &Path, key: &str) -> f64 {
        let out = self.client(&[
            "transfer-upload",
            &self.bucket,
            key,
            &path.to_string_lossy(),
        ]);
        transfer_seconds(&out, "upload")
    }

    /// Seconds boto3's `download_file` takes to download an object to a
    /// local file with its default transfer settings (8 MiB ranged GETs, up
    /// to 10 at a time).
    pub fn boto3_download_seconds(&self, key: &str, path: &Path) -> f64 {
        let out = self.client(&[
            "transfer-download",
            &self.bucket,
            key,
            &path.to_string_lossy(),
        ]);
        transfer_seconds(&out, "download")
    }

    fn client(&self, args: &[&str]) -> String {
        boto3(
            &self.endpoint,
            &self.access_key_id,
            &self.secret_access_key,
            args,
        )
    }
}

impl Drop for S3sFsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
