//! Test harness (feature `testing`): real object store servers (moto for
//! S3; Azurite and fake-gcs-server in [`stores`]) and real etcd processes on
//! loopback, for this crate's integration tests and the `dkv backup`
//! binary's.
//!
//! Nothing here skips: a missing server or etcd fails the test with the
//! command that installs it (`scripts/install-prerequisites.sh`, and
//! `scripts/install-store-servers.sh` for Azurite and fake-gcs-server).

mod s3s_fs;
mod stores;

pub use s3s_fs::S3sFsServer;
pub use stores::{AzuriteServer, FakeGcsServer, StoreKind, StoreServer};

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use dkv_etcd::{EndpointStatus, EtcdAdmin, GrpcAdmin};
use etcd_client::{Client, GetOptions};
use jiff::{SignedDuration, Timestamp};

use crate::artifact::{Artifact, sidecar_location};
use crate::continuous::archive::BASE_RECORD;
use crate::continuous::archive::{chain_location, store_segment};
use crate::continuous::cutter::{CutSettings, Cutter};
use crate::continuous::segment::{Event, EventKind};
use crate::credentials::{AwsCredentials, Credentials, Secret};
use crate::location::Location;
use crate::store::{S3Options, Store, StoreConfig};

/// The keys and values of a range answer, as text.
pub fn text_pairs<C: FromIterator<(String, String)>>(response: &etcd_client::GetResponse) -> C {
    response
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
            )
        })
        .collect()
}

/// The repository root (this crate is `crates/dkv-backup`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const INSTALL: &str =
    "run scripts/install-prerequisites.sh (it installs moto[server] into .venv and etcd 3.4/3.5)";

fn venv() -> PathBuf {
    std::env::var_os("DKV_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv"))
}

/// Operations on an S3 server (moto, s3s-fs) done with boto3 (moto's own
/// dependency), independently of the code under test.
const BOTO3_CLIENT: &str = r#"
import hashlib, json, sys
import boto3
endpoint, key_id, secret, op = sys.argv[1:5]
args = sys.argv[5:]
kw = dict(endpoint_url=endpoint, region_name="us-east-1",
          aws_access_key_id=key_id, aws_secret_access_key=secret)
if op == "setup":
    bucket, user = args
    iam = boto3.client("iam", **kw)
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17",
         "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    key = iam.create_access_key(UserName=user)["AccessKey"]
    boto3.client("s3", **kw).create_bucket(Bucket=bucket)
    print(json.dumps({"id": key["AccessKeyId"], "secret": key["SecretAccessKey"]}))
    sys.exit(0)
s3 = boto3.client("s3", **kw)
if op == "digest":
    bucket, key = args
    h, size = hashlib.sha256(), 0
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in iter(lambda: body.read(1 << 20), b""):
        h.update(chunk)
        size += len(chunk)
    print(json.dumps({"size": size, "sha256": h.hexdigest()}))
elif op == "checksum":
    bucket, key = args
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    print(json.dumps({"sha256": head.get("ChecksumSHA256")}))
elif op == "flip":
    bucket, key, offset = args
    data = bytearray(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[int(offset)] ^= 0xFF
    s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    print("{}")
elif op == "upload":
    import time
    from boto3.s3.transfer import TransferConfig
    bucket, key, path = args
    started = time.monotonic()
    s3.upload_file(path, bucket, key, Config=TransferConfig(
        multipart_chunksize=8 << 20, max_concurrency=2))
    print(json.dumps({"seconds": time.monotonic() - started}))
elif op in ("transfer-upload", "transfer-download"):
    # boto3's managed transfers as a user runs them: default TransferConfig
    # (8 MiB parts, up to 10 at a time; ranged GETs, 10 at a time, down).
    import time
    bucket, key, path = args
    started = time.monotonic()
    if op == "transfer-upload":
        s3.upload_file(path, bucket, key)
    else:
        s3.download_file(bucket, key, path)
    print(json.dumps({"seconds": time.monotonic() - started}))
elif op == "download":
    # One GET streamed to the file, as dkv fetches: boto3's download_file
    # splits into ranged GETs, each of which moto answers by reading the
    # whole object, which would make the baseline slow for moto's sake.
    import time
    bucket, key, path = args
    started = time.monotonic()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with open(path, "wb") as out:
        for chunk in iter(lambda: body.read(1 << 20), b""):
            out.write(chunk)
    print(json.dumps({"seconds": time.monotonic() - started}))
elif op == "list":
    bucket, = args
    objects = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
               for o in p.get("Contents", [])]
    uploads = [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]
    print(json.dumps({"objects": sorted(objects), "uploads": sorted(uploads)}))
else:
    sys.exit("unknown op " + op)
"#;

/// A moto S3 server on a free loopback port with one bucket and one IAM
/// user allowed everything on S3. Signatures are checked (moto's IAM
/// authentication is on), so wrong credentials fail as on AWS. Killed on
/// drop.
pub struct MotoServer {
    child: Child,
    endpoint: String,
    pub bucket: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// Digest of an object as the S3 server has it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ObjectDigest {
    pub size: u64,
    pub sha256: String,
}

/// The checksum the S3 server keeps for an object (`HeadObject` with
/// `ChecksumMode=ENABLED`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct StoredChecksum {
    /// `x-amz-checksum-sha256`, when the object was stored with one.
    pub sha256: Option<String>,
}

/// What a bucket holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct BucketListing {
    pub objects: Vec<String>,
    /// Multipart uploads started and neither completed nor aborted.
    pub uploads: Vec<String>,
}

impl MotoServer {
    pub fn start(bucket: &str) -> Self {
        let moto = venv().join("bin/moto_server");
        assert!(
            moto.exists(),
            "{} is missing: the backup tests need a real S3 server; {INSTALL}",
            moto.display()
        );
        let port = free_port();
        let mut child = Command::new(&moto)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // The first 4 requests (the set-up below) need no signature;
            // every later one is authenticated.
            .env("INITIAL_NO_AUTH_ACTION_COUNT", "4")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", moto.display()));
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(30);
        // A TCP connection, not an HTTP request: requests count against the
        // unauthenticated allowance.
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                let mut stderr = String::new();
                if let Some(mut pipe) = child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                panic!("moto_server exited ({status}): {stderr}");
            }
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {address} within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Its log is not needed, and a full pipe would block it.
        drop(child.stderr.take());
        let mut server = Self {
            child,
            endpoint: format!("http://{address}"),
            bucket: bucket.to_owned(),
            access_key_id: "bootstrap".to_owned(),
            secret_access_key: "bootstrap".to_owned(),
        };
        let out = server.client(&["setup", bucket, "dkv-backup"]);
        let key: serde_json::Value = serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("moto setup printed {out:?}: {e}"));
        server.access_key_id = key["id"].as_str().unwrap_or_default().to_owned();
        server.secret_access_key = key["secret"].as_str().unwrap_or_default().to_owned();
        assert!(
            !server.secret_access_key.is_empty(),
            "moto setup printed {out:?}"
        );
        server
    }

    /// `http://127.0.0.1:PORT`
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// `s3://<bucket>/<prefix>`
    pub fn uri(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// A store configuration for this server with its valid credentials.
    pub fn config(&self) -> StoreConfig {
        self.config_with_secret(&self.secret_access_key)
    }

    /// The same with another secret key (for wrong-credential tests).
    pub fn config_with_secret(&self, secret: &str) -> StoreConfig {
        s3_config(&self.endpoint, &self.access_key_id, secret)
    }

    /// The environment a backup Job pod would get from its Secret.
    pub fn env(&self) -> Vec<(String, String)> {
        s3_env(&self.endpoint, &self.access_key_id, &self.secret_access_key)
    }

    /// Size and sha256 of an object, downloaded and hashed by boto3.
    pub fn digest(&self, key: &str) -> ObjectDigest {
        let out = self.client(&["digest", &self.bucket, key]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("digest printed {out:?}: {e}"))
    }

    /// The checksum the server keeps for an object.
    pub fn stored_checksum(&self, key: &str) -> StoredChecksum {
        let out = self.client(&["checksum", &self.bucket, key]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("checksum printed {out:?}: {e}"))
    }

    /// Flips every bit of the byte at `offset` of an object, in place.
    pub fn corrupt(&self, key: &str, offset: u64) {
        self.client(&["flip", &self.bucket, key, &offset.to_string()]);
    }

    /// Seconds boto3 (AWS's own Python client, 8 MiB parts, 2 at a time)
    /// takes to upload a local file: what this server can take in.
    pub fn boto3_upload_seconds(&self, path: &Path, key: &str) -> f64 {
        let out = self.client(&["upload", &self.bucket, key, &path.to_string_lossy()]);
        transfer_seconds(&out, "upload")
    }

    /// Seconds boto3 takes to download an object to a local file (one GET,
    /// streamed).
    pub fn boto3_download_seconds(&self, key: &str, path: &Path) -> f64 {
        let out = self.client(&["download", &self.bucket, key, &path.to_string_lossy()]);
        transfer_seconds(&out, "download")
    }

    pub fn list(&self) -> BucketListing {
        let out = self.client(&["list", &self.bucket]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("list printed {out:?}: {e}"))
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

/// The store configuration for an S3 server on loopback at `endpoint`
/// (path-style requests over plain HTTP, checksums on).
fn s3_config(endpoint: &str, access_key_id: &str, secret: &str) -> StoreConfig {
    StoreConfig {
        credentials: Credentials {
            aws: Some(AwsCredentials {
                access_key_id: access_key_id.to_owned(),
                secret_access_key: Secret::new(secret),
                session_token: None,
            }),
            ..Credentials::default()
        },
        s3: S3Options {
            endpoint: Some(endpoint.to_owned()),
            region: Some("us-east-1".to_owned()),
            path_style: true,
            allow_http: true,
            checksums: true,
        },
        ..StoreConfig::default()
    }
}

/// The environment a backup Job pod would get from its Secret for an S3
/// server on loopback at `endpoint`.
fn s3_env(endpoint: &str, access_key_id: &str, secret: &str) -> Vec<(String, String)> {
    [
        ("AWS_ACCESS_KEY_ID", access_key_id),
        ("AWS_SECRET_ACCESS_KEY", secret),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// Runs one operation of [`BOTO3_CLIENT`] against the S3 server at
/// `endpoint` with these credentials; returns what it printed.
fn boto3(endpoint: &str, access_key_id: &str, secret_access_key: &str, args: &[&str]) -> String {
    let python = venv().join("bin/python");
    let output = Command::new(&python)
        .arg("-c")
        .arg(BOTO3_CLIENT)
        .args([endpoint, access_key_id, secret_access_key])
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}; {INSTALL}", python.display()));
    assert!(
        output.status.success(),
        "boto3 {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The seconds a [`BOTO3_CLIENT`] transfer printed.
fn transfer_seconds(out: &str, what: &str) -> f64 {
    let value: serde_json::Value =
        serde_json::from_str(out).unwrap_or_else(|e| panic!("{what} printed {out:?}: {e}"));
    value["seconds"].as_f64().unwrap_or(f64::NAN)
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Restores `snapshot` with `tool` into `data_dir` as `name`, the one
/// member of a new cluster (token `token`) peering at `ip`:2380.
pub async fn restore_single_member(
    tool: &crate::restore::RestoreTool,
    snapshot: &Path,
    name: &str,
    ip: &str,
    token: &str,
    data_dir: &Path,
) {
    crate::restore::restore_member(
        tool,
        &crate::restore::MemberRestore {
            snapshot: snapshot.to_path_buf(),
            name: name.to_owned(),
            initial_cluster: format!("{name}=http://{ip}:2380"),
            initial_advertise_peer_urls: format!("http://{ip}:2380"),
            initial_cluster_token: token.to_owned(),
            data_dir: data_dir.to_path_buf(),
            revision_bump: None,
            snapshot_checked: false,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("restoring {} as {name}: {e}", snapshot.display()));
}

/// `len` bytes nothing can compress, the same for the same `seed`
/// (xorshift: cheap; a test needs entropy, not randomness).
pub fn incompressible(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A TCP port on 127.0.0.1 nothing listens on (at the time of asking).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap_or_else(|e| panic!("binding a free port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("reading the free port: {e}"))
        .port()
}

/// The etcd releases `scripts/install-etcd.sh` put in the checkout's
/// `.tools` (or in `DKV_TOOLS_DIR`, as it does when that is set), in
/// `dkv local`'s tools layout.
pub fn tools_dir() -> PathBuf {
    std::env::var_os("DKV_TOOLS_DIR").map_or_else(|| repo_root().join(".tools"), PathBuf::from)
}

/// The directory holding `etcd`, `etcdctl` (and from 3.5 `etcdutl`) of a
/// minor version, as `scripts/install-etcd.sh` installs them.
pub fn etcd_bin_dir(minor: &str) -> PathBuf {
    let dir = match minor {
        "3.4" => PathBuf::from("/usr/bin"),
        other => tools_dir().join(format!("etcd-{other}/usr/bin")),
    };
    assert!(
        dir.join("etcd").exists(),
        "etcd {minor} is missing from {}: {INSTALL}",
        dir.display()
    );
    dir
}

/// A loopback address for member `ordinal` of test group `group`, distinct
/// per test process so tests can run side by side.
pub fn loopback_ip(group: u8, ordinal: u8) -> String {
    format!(
        "127.{}.{}.{}",
        150 + group % 100,
        std::process::id() % 250,
        ordinal + 1
    )
}

/// Key and value number `i` written by [`EtcdProcess::put_keys`].
pub fn test_key(i: usize) -> (String, String) {
    (format!("/dkv-test/key-{i:05}"), format!("value-{i}"))
}

/// One etcd member process, killed on drop.
pub struct EtcdProcess {
    child: Option<Child>,
    pub name: String,
    pub client_url: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
}

impl EtcdProcess {
    /// Starts a single-member cluster `name` at `ip` with `data_dir`
    /// (created, or restored into by the caller first).
    pub fn start(bin_dir: &Path, name: &str, ip: &str, data_dir: &Path, token: &str) -> Self {
        let initial_cluster = format!("{name}=http://{ip}:2380");
        Self::start_member(bin_dir, name, ip, data_dir, token, &initial_cluster)
    }

    /// Starts member `name` of a new cluster `initial_cluster`
    /// (`name=http://ip:2380,...`).
    pub fn start_member(
        bin_dir: &Path,
        name: &str,
        ip: &str,
        data_dir: &Path,
        token: &str,
        initial_cluster: &str,
    ) -> Self {
        let client_url = format!("http://{ip}:2379");
        let peer_url = format!("http://{ip}:2380");
        let log_path = data_dir.with_extension("log");
        let log = std::fs::File::create(&log_path)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log_path.display()));
        let child = Command::new(bin_dir.join("etcd"))
            .args([
                format!("--name={name}"),
                format!("--data-dir={}", data_dir.display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={initial_cluster}"),
                format!("--initial-cluster-token={token}"),
                "--initial-cluster-state=new".to_owned(),
                // Room for the large-database tests.
                "--quota-backend-bytes=4294967296".to_owned(),
                "--max-request-bytes=4194304".to_owned(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting etcd from {}: {e}", bin_dir.display()));
        Self {
            child: Some(child),
            name: name.to_owned(),
            client_url,
            peer_url,
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// Waits until the member serves and knows a leader; its status.
    pub async fn wait_ready(&self) -> EndpointStatus {
        let admin = GrpcAdmin::new(vec![self.client_url.clone()], Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match admin.status(&self.client_url).await {
                Ok(status) if status.leader.0 != 0 => return status,
                _ if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                other => panic!(
                    "etcd {} never became ready: {other:?}\n{}",
                    self.name,
                    self.log()
                ),
            }
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect([self.client_url.as_str()], None)
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.client_url))
    }

    /// Writes `count` keys `/dkv-test/key-NNNNN` = `value-N`.
    pub async fn put_keys(&self, count: usize) {
        let mut client = self.client().await;
        for i in 0..count {
            let (key, value) = test_key(i);
            // A loaded machine makes etcd time a request out now and then;
            // a put is idempotent, so try again.
            let mut attempt = 0;
            loop {
                match client.put(key.clone(), value.clone(), None).await {
                    Ok(_) => break,
                    Err(e) if attempt < 5 => {
                        attempt += 1;
                        eprintln!("put {i} (attempt {attempt}): {e}; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => panic!("put {i}: {e}"),
                }
            }
        }
    }

    /// Grows the database by about `bytes` with incompressible 1 MiB values
    /// under `/dkv-fill/`.
    pub async fn fill(&self, bytes: usize) {
        let mut client = self.client().await;
        for i in 0..bytes.div_ceil(1 << 20) {
            let value = incompressible(i as u64, 1 << 20);
            client
                .put(format!("/dkv-fill/{i:05}"), value, None)
                .await
                .unwrap_or_else(|e| panic!("fill {i}: {e}"));
        }
    }

    /// Writes about `bytes` of JSON documents of about 6 KiB, 100 per
    /// transaction (under etcd's default limits on operations and request
    /// size): the kind of values a key-value store holds (configuration,
    /// records), with the fields and shape repeating and ids, versions,
    /// times and amounts varying. zstd takes such data to a few times
    /// smaller, as it does real etcd databases; [`Self::fill`] is the
    /// incompressible worst case.
    pub async fn fill_documents(&self, bytes: usize) {
        let mut client = self.client().await;
        let mut random = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            random ^= random << 13;
            random ^= random >> 7;
            random ^= random << 17;
            random
        };
        const REGIONS: [&str; 4] = ["eu-west-1", "us-east-1", "ap-south-1", "sa-east-1"];
        const STATES: [&str; 3] = ["active", "suspended", "pending-review"];
        let mut written = 0usize;
        let mut doc = 0u64;
        while written < bytes {
            let mut ops = Vec::new();
            let mut batch = 0usize;
            while ops.len() < 100 {
                let mut value = format!(
                    r#"{{"apiVersion":"shop.example.com/v1","kind":"Account","metadata":{{"name":"account-{doc:08}","namespace":"tenant-{}","uid":"{:016x}{:016x}","resourceVersion":"{}","creationTimestamp":"2026-{:02}-{:02}T{:02}:{:02}:{:02}Z","labels":{{"region":"{}","tier":"{}"}}}},"spec":{{"owner":"user-{:06}@example.com","state":"{}","limits":{{"requestsPerSecond":{},"storageGiB":{}}},"entries":["#,
                    doc % 97,
                    next(),
                    next(),
                    next() % 10_000_000,
                    1 + next() % 12,
                    1 + next() % 28,
                    next() % 24,
                    next() % 60,
                    next() % 60,
                    REGIONS[(next() % 4) as usize],
                    if next() % 5 == 0 {
                        "premium"
                    } else {
                        "standard"
                    },
                    next() % 1_000_000,
                    STATES[(next() % 3) as usize],
                    100 * (1 + next() % 50),
                    next() % 2048,
                );
                for entry in 0..48 {
                    if entry > 0 {
                        value.push(',');
                    }
                    value.push_str(&format!(
                        r#"{{"id":"{:012x}","etag":"{:016x}","sku":"SKU-{:05}","quantity":{},"priceCents":{},"currency":"EUR","note":"order line {entry} of account {doc}"}}"#,
                        next() & 0xffff_ffff_ffff,
                        next(),
                        next() % 20_000,
                        1 + next() % 9,
                        next() % 100_000,
                    ));
                }
                value.push_str("]}}");
                batch += value.len();
                ops.push(etcd_client::TxnOp::put(
                    format!("/dkv-fill/accounts/{doc:08}"),
                    value,
                    None,
                ));
                doc += 1;
            }
            written += batch;
            client
                .txn(etcd_client::Txn::new().and_then(ops))
                .await
                .unwrap_or_else(|e| panic!("fill documents up to {doc}: {e}"));
        }
    }

    /// A history around one revision, for restoring to it: 20 puts under
    /// `during/`, `before/00` deleted, `before/05` overwritten (the target
    /// revision), then 10 puts under `after/`. Returns the target and every
    /// key and value the member held at it.
    pub async fn write_around_a_target(&self) -> (i64, BTreeMap<Vec<u8>, Vec<u8>>) {
        let mut writer = self.client().await;
        for i in 0..20 {
            writer
                .put(format!("during/{i:02}"), format!("{i}"), None)
                .await
                .unwrap_or_else(|e| panic!("put during/{i:02}: {e}"));
        }
        writer
            .delete("before/00", None)
            .await
            .unwrap_or_else(|e| panic!("delete before/00: {e}"));
        let target = writer
            .put("before/05", "changed", None)
            .await
            .unwrap_or_else(|e| panic!("put before/05: {e}"))
            .header()
            .map_or(0, |h| h.revision());
        let at_target = self.key_values_at(target).await;
        for i in 0..10 {
            writer
                .put(format!("after/{i:02}"), format!("{i}"), None)
                .await
                .unwrap_or_else(|e| panic!("put after/{i:02}: {e}"));
        }
        (target, at_target)
    }

    /// Every key and value under `/dkv-test/`.
    pub async fn test_keys(&self) -> Vec<(String, String)> {
        let mut client = self.client().await;
        let response = client
            .get("/dkv-test/", Some(GetOptions::new().with_prefix()))
            .await
            .unwrap_or_else(|e| panic!("get: {e}"));
        text_pairs(&response)
    }

    /// Every key and value the member holds, at `revision` (0: now).
    pub async fn key_values_at(&self, revision: i64) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut options = GetOptions::new().with_all_keys();
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let response = self
            .client()
            .await
            .get("", Some(options))
            .await
            .unwrap_or_else(|e| panic!("get at revision {revision}: {e}"));
        response
            .kvs()
            .iter()
            .map(|kv| (kv.key().to_vec(), kv.value().to_vec()))
            .collect()
    }

    /// How many keys the member holds in all.
    pub async fn key_count(&self) -> i64 {
        let mut client = self.client().await;
        client
            .get(
                "",
                Some(GetOptions::new().with_all_keys().with_count_only()),
            )
            .await
            .unwrap_or_else(|e| panic!("count: {e}"))
            .count()
    }

    /// The member's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.with_extension("log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes a continuous backup chain `name` based at `revision` into
/// `continuous` as the agent would: a base snapshot (a few bytes) and its
/// record under `destination`, the chain's `base.json`, and two segments of
/// one put each, the newest ending at `end`. Returns the base's location.
pub async fn write_chain(
    store: &Store,
    destination: &Location,
    continuous: &Location,
    name: &str,
    revision: i64,
    end: Timestamp,
) -> Location {
    let put = |location: Location, bytes: Bytes| async move {
        store
            .put_small(location.path(), bytes)
            .await
            .unwrap_or_else(|e| panic!("writing {location}: {e}"));
    };
    let artifact = destination.join(&format!("{name}.db"));
    put(artifact.clone(), Bytes::from_static(b"snapshot")).await;
    put(sidecar_location(&artifact), Bytes::from_static(b"{}")).await;
    let taken_at = end - SignedDuration::from_hours(1);
    let record = Artifact {
        uri: artifact.to_string(),
        size_bytes: 8,
        sha256: "0".repeat(64),
        revision,
        etcd_version: "3.5.16".to_owned(),
        taken_at,
        compression: None,
        encryption_key_id: None,
        content: None,
    };
    let dir = chain_location(continuous, name);
    let record = serde_json::to_vec(&record).unwrap_or_else(|e| panic!("{e}"));
    put(dir.join(BASE_RECORD), Bytes::from(record)).await;
    let settings = CutSettings {
        interval: Duration::from_secs(10),
        max_segment_bytes: 1 << 20,
        ..CutSettings::default()
    };
    let mut cutter = Cutter::start(name, revision, settings, taken_at);
    for (i, at) in [(1, end - SignedDuration::from_mins(30)), (2, end)] {
        let event = Event {
            revision: revision + i,
            kind: EventKind::Put,
            key: b"k".to_vec(),
            value: b"v".to_vec(),
            lease: 0,
            received_ms: at.as_millisecond(),
        };
        cutter.push(event).unwrap_or_else(|e| panic!("{e:?}"));
        let sealed = cutter.seal(at).unwrap_or_else(|e| panic!("{e}"));
        store_segment(store, &dir, &sealed)
            .await
            .unwrap_or_else(|e| panic!("storing a segment of {name}: {e}"));
        cutter.stored();
    }
    artifact
}
