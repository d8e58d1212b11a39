//! Real object store servers on loopback for the backup tests, one per kind
//! dkv writes to: moto (S3), Azurite (Azure Blob Storage) and
//! fake-gcs-server (Google Cloud Storage). Each is reached by dkv through
//! the same settings a user puts in the credentials Secret, and checked by
//! the test through a client of its own (boto3, or plain REST requests
//! here), never through dkv's [`crate::Store`].

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ring::hmac;
use sha2::{Digest, Sha256};

use super::{MotoServer, ObjectDigest, free_port, tools_dir};
use crate::StoreConfig;
use crate::credentials::{AzureCredentials, AzureKey, Credentials, Secret};
use crate::store::{AZURE_STORAGE_ENDPOINT, AzureOptions, GcsOptions, STORAGE_EMULATOR_HOST};

const INSTALL: &str = "run scripts/install-store-servers.sh (it installs Azurite from npm and builds fake-gcs-server into .tools)";

/// The kinds of object store the tests run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    S3,
    Azure,
    Gcs,
}

impl StoreKind {
    pub const ALL: [StoreKind; 3] = [StoreKind::S3, StoreKind::Azure, StoreKind::Gcs];

    /// The URI scheme of this kind of store.
    pub fn scheme(self) -> &'static str {
        match self {
            StoreKind::S3 => "s3",
            StoreKind::Azure => "az",
            StoreKind::Gcs => "gs",
        }
    }
}

/// One running store server with one bucket (container), killed on drop.
pub enum StoreServer {
    S3(MotoServer),
    Azure(AzuriteServer),
    Gcs(FakeGcsServer),
}

impl StoreServer {
    pub fn start(kind: StoreKind, bucket: &str) -> Self {
        match kind {
            StoreKind::S3 => StoreServer::S3(MotoServer::start(bucket)),
            StoreKind::Azure => StoreServer::Azure(AzuriteServer::start(bucket)),
            StoreKind::Gcs => StoreServer::Gcs(FakeGcsServer::start(bucket)),
        }
    }

    pub fn kind(&self) -> StoreKind {
        match self {
            StoreServer::S3(_) => StoreKind::S3,
            StoreServer::Azure(_) => StoreKind::Azure,
            StoreServer::Gcs(_) => StoreKind::Gcs,
        }
    }

    pub fn bucket(&self) -> &str {
        match self {
            StoreServer::S3(s) => &s.bucket,
            StoreServer::Azure(s) => &s.container,
            StoreServer::Gcs(s) => &s.bucket,
        }
    }

    /// `<scheme>://<bucket>/<prefix>`
    pub fn uri(&self, prefix: &str) -> String {
        format!("{}://{}/{prefix}", self.kind().scheme(), self.bucket())
    }

    /// The store configuration a backup gets from [`Self::env`].
    pub fn config(&self) -> StoreConfig {
        let env = self.env();
        StoreConfig::from_lookup(|name| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
    }

    /// The credentials Secret's keys (a backup Job's environment).
    pub fn env(&self) -> Vec<(String, String)> {
        match self {
            StoreServer::S3(s) => s.env(),
            StoreServer::Azure(s) => s.env(),
            StoreServer::Gcs(s) => s.env(),
        }
    }

    /// Every object in the bucket, sorted, as the server lists it.
    pub async fn objects(&self) -> Vec<String> {
        match self {
            StoreServer::S3(s) => s.list().objects,
            StoreServer::Azure(s) => s.objects().await,
            StoreServer::Gcs(s) => s.objects().await,
        }
    }

    /// Size and sha256 of an object, downloaded by the test's own client.
    pub async fn digest(&self, key: &str) -> ObjectDigest {
        match self {
            StoreServer::S3(s) => s.digest(key),
            StoreServer::Azure(s) => digest_of(&s.get(key).await),
            StoreServer::Gcs(s) => digest_of(&s.get(key).await),
        }
    }
}

fn digest_of(bytes: &[u8]) -> ObjectDigest {
    ObjectDigest {
        size: bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(bytes)),
    }
}

/// Starts the server `command(port)` makes for a free port of 127.0.0.1
/// and waits until it listens there; `install` says how to install it when
/// it cannot start. The port is free when chosen, not when the server binds
/// it: another test's process can take it in between, and then answers the
/// connection check while this server exits. A server that is gone half a
/// second after the port answered is started again on another port.
pub(super) fn spawn_listening(
    what: &str,
    install: &str,
    command: impl Fn(u16) -> Command,
) -> (Child, u16) {
    const ATTEMPTS: usize = 5;
    for attempt in 1..=ATTEMPTS {
        let port = free_port();
        let mut child = command(port)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}; {install}"));
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut exited = None;
        while TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_err() {
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some(status);
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{what} did not listen on {address} within 30 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if exited.is_none() {
            std::thread::sleep(Duration::from_millis(500));
            exited = child.try_wait().ok().flatten();
        }
        match exited {
            None => return (child, port),
            Some(status) if attempt == ATTEMPTS => {
                panic!("{what} exited ({status}) on each of {ATTEMPTS} free ports; {install}")
            }
            Some(_) => {}
        }
    }
    unreachable!("the last attempt returns or panics")
}

/// Runs `future` to completion on a thread and runtime of its own: the
/// servers start from synchronous code that may itself run inside a
/// runtime.
fn block_on<F>(future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| panic!("building a runtime: {e}"))
                    .block_on(future)
            })
            .join()
            .unwrap_or_else(|_| panic!("a store server's set-up request panicked"))
    })
}

fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|e| panic!("building an HTTP client: {e}"))
}

/// The body of a response to `what`; fails the test on a transport error
/// or any status but 2xx, with the server's answer.
async fn successful_body(
    response: Result<reqwest::Response, reqwest::Error>,
    what: &str,
) -> Vec<u8> {
    body_if_successful(response, what)
        .await
        .unwrap_or_else(|refused| panic!("{refused}"))
}

/// [`successful_body`], its failure as words.
async fn body_if_successful(
    response: Result<reqwest::Response, reqwest::Error>,
    what: &str,
) -> Result<Vec<u8>, String> {
    let response = response.map_err(|e| format!("{what}: {e}"))?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| format!("{what}: reading the body: {e}"))?;
    if status.is_success() {
        Ok(body.to_vec())
    } else {
        Err(format!(
            "{what}: {status}: {}",
            String::from_utf8_lossy(&body)
        ))
    }
}

/// Azurite's blob service with one storage account of its own (a random
/// key, so a wrong key is refused as by Azure) and one container.
/// Requests are addressed path-style, `http://127.0.0.1:PORT/<account>`,
/// which dkv reaches through `AZURE_STORAGE_ENDPOINT`.
pub struct AzuriteServer {
    child: Child,
    workspace: PathBuf,
    pub account: String,
    pub access_key: String,
    pub container: String,
    /// `http://127.0.0.1:PORT/<account>`
    pub endpoint: String,
}

/// The x-ms-version the test's own requests use.
const AZURE_API_VERSION: &str = "2021-08-06";

impl AzuriteServer {
    pub fn start(container: &str) -> Self {
        let azurite = tools_dir().join("azurite/node_modules/.bin/azurite-blob");
        assert!(
            azurite.exists(),
            "{} is missing: the Azure backup tests need Azurite; {INSTALL}",
            azurite.display()
        );
        let account = "dkvbackups".to_owned();
        let mut key = [0u8; 64];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
            .unwrap_or_else(|e| panic!("generating an account key: {e}"));
        let access_key = BASE64.encode(key);
        // A directory of this server's own (not the port's: another test's
        // server may hold the port a moment).
        let mut unique = [0u8; 8];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut unique)
            .unwrap_or_else(|e| panic!("generating a directory name: {e}"));
        let unique = BASE64.encode(unique).replace(['/', '+', '='], "");
        let workspace =
            |port: u16| std::env::temp_dir().join(format!("dkv-azurite-{port}-{unique}"));
        // A port found free can still be taken by another test's Azurite
        // before this one binds it (this one then exits, maybe only after
        // the check that it listens): the other server refuses this one's
        // key. Creating the container proves the server is this one's.
        const ATTEMPTS: usize = 5;
        for attempt in 1..=ATTEMPTS {
            let (child, port) = spawn_listening("azurite-blob", INSTALL, |port| {
                let workspace = workspace(port);
                std::fs::create_dir_all(&workspace)
                    .unwrap_or_else(|e| panic!("creating {}: {e}", workspace.display()));
                let mut command = Command::new(&azurite);
                command
                    .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                    .args(["--inMemoryPersistence", "--silent", "--disableTelemetry"])
                    .args(["--disableProductStyleUrl", "--skipApiVersionCheck"])
                    // In-memory persistence refuses --location; what it still
                    // writes goes to the working directory.
                    .current_dir(&workspace)
                    .env("AZURITE_ACCOUNTS", format!("{account}:{access_key}"));
                command
            });
            let server = Self {
                child,
                workspace: workspace(port),
                endpoint: format!("http://127.0.0.1:{port}/{account}"),
                account: account.clone(),
                access_key: access_key.clone(),
                container: container.to_owned(),
            };
            match block_on(server.try_request(
                reqwest::Method::PUT,
                &[("restype", "container")],
                "",
            )) {
                Ok(_) => return server,
                Err(refused) if refused.contains("403") && attempt < ATTEMPTS => {
                    // Dropped: this one's process is stopped.
                    drop(server);
                }
                Err(refused) => panic!("creating the Azurite container: {refused}"),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// A signed request (Shared Key) to the container (`blob` empty) or a
    /// blob in it; the response body. Fails the test on any status but 2xx.
    async fn request(
        &self,
        method: reqwest::Method,
        query: &[(&str, &str)],
        blob: &str,
    ) -> Vec<u8> {
        self.try_request(method, query, blob)
            .await
            .unwrap_or_else(|refused| panic!("{refused}"))
    }

    /// [`Self::request`], its failure as the words the test would fail with.
    async fn try_request(
        &self,
        method: reqwest::Method,
        query: &[(&str, &str)],
        blob: &str,
    ) -> Result<Vec<u8>, String> {
        let mut path = format!("/{}/{}", self.account, self.container);
        if !blob.is_empty() {
            path.push('/');
            path.push_str(blob);
        }
        let date = jiff::Timestamp::now()
            .strftime("%a, %d %b %Y %H:%M:%S GMT")
            .to_string();
        let mut sorted: Vec<(&str, &str)> = query.to_vec();
        sorted.sort();
        let mut resource = format!("/{}{path}", self.account);
        for (name, value) in &sorted {
            resource.push_str(&format!("\n{name}:{value}"));
        }
        // VERB, then the eleven standard headers (all empty here; a zero
        // Content-Length counts as empty), then the x-ms- headers.
        let to_sign = format!(
            "{method}\n\n\n\n\n\n\n\n\n\n\n\nx-ms-date:{date}\nx-ms-version:{AZURE_API_VERSION}\n{resource}"
        );
        let key = BASE64
            .decode(&self.access_key)
            .unwrap_or_else(|e| panic!("decoding the account key: {e}"));
        let signature = BASE64.encode(hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &key),
            to_sign.as_bytes(),
        ));
        let mut url = format!("http://{}{path}", self.host());
        if !query.is_empty() {
            let pairs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
            url.push('?');
            url.push_str(&pairs.join("&"));
        }
        let response = http_client()
            .request(method.clone(), &url)
            .header("x-ms-date", &date)
            .header("x-ms-version", AZURE_API_VERSION)
            .header(
                "Authorization",
                format!("SharedKey {}:{signature}", self.account),
            )
            .header("Content-Length", "0")
            .send()
            .await;
        body_if_successful(response, &format!("Azurite {method} {path}")).await
    }

    /// `127.0.0.1:PORT`
    fn host(&self) -> &str {
        let rest = self.endpoint.trim_start_matches("http://");
        rest.split('/').next().unwrap_or(rest)
    }

    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AZURE_STORAGE_ACCOUNT_NAME", self.account.as_str()),
            ("AZURE_STORAGE_ACCOUNT_KEY", self.access_key.as_str()),
            (AZURE_STORAGE_ENDPOINT, self.endpoint.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    /// This server's configuration with another account key.
    pub fn config_with_key(&self, key: &str) -> StoreConfig {
        StoreConfig {
            credentials: Credentials {
                azure: Some(AzureCredentials {
                    account: self.account.clone(),
                    key: AzureKey::AccessKey(Secret::new(key)),
                }),
                ..Credentials::default()
            },
            azure: AzureOptions {
                endpoint: Some(self.endpoint.clone()),
            },
            ..StoreConfig::default()
        }
    }

    /// Every blob in the container (List Blobs; fewer than 5000 in tests).
    pub async fn objects(&self) -> Vec<String> {
        let body = self
            .request(
                reqwest::Method::GET,
                &[("comp", "list"), ("restype", "container")],
                "",
            )
            .await;
        let text = String::from_utf8_lossy(&body);
        let mut names: Vec<String> = text
            .split("<Name>")
            .skip(1)
            .filter_map(|part| part.split("</Name>").next())
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    }

    /// A blob's content.
    pub async fn get(&self, key: &str) -> Vec<u8> {
        self.request(reqwest::Method::GET, &[], key).await
    }
}

impl Drop for AzuriteServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.workspace);
    }
}

/// fake-gcs-server over plain HTTP, in memory, with one bucket. It takes
/// unauthenticated requests, as Google's client libraries send them to
/// `STORAGE_EMULATOR_HOST`.
pub struct FakeGcsServer {
    child: Child,
    pub bucket: String,
    /// `127.0.0.1:PORT`
    pub host: String,
}

impl FakeGcsServer {
    pub fn start(bucket: &str) -> Self {
        let binary = tools_dir().join("fake-gcs-server/fake-gcs-server");
        assert!(
            binary.exists(),
            "{} is missing: the GCS backup tests need fake-gcs-server; {INSTALL}",
            binary.display()
        );
        let (child, port) = spawn_listening("fake-gcs-server", INSTALL, |port| {
            let host = format!("127.0.0.1:{port}");
            let mut command = Command::new(&binary);
            command
                .args(["-scheme", "http", "-host", "127.0.0.1", "-port"])
                .arg(port.to_string())
                .args(["-backend", "memory", "-log-level", "error"])
                .args(["-public-host", &host, "-external-url"])
                .arg(format!("http://{host}"));
            command
        });
        let host = format!("127.0.0.1:{port}");
        let server = Self {
            child,
            bucket: bucket.to_owned(),
            host,
        };
        server.create_bucket();
        server
    }

    fn create_bucket(&self) {
        let url = format!("http://{}/storage/v1/b", self.host);
        let body = serde_json::json!({ "name": self.bucket }).to_string();
        block_on(async {
            let response = http_client()
                .post(&url)
                .header("Content-Type", "application/json")
                .body(body)
                .send()
                .await;
            successful_body(response, &format!("creating the bucket at {url}")).await;
        });
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![(STORAGE_EMULATOR_HOST.to_owned(), self.host.clone())]
    }

    /// This server's configuration (no credentials: the emulator takes none).
    pub fn config(&self) -> StoreConfig {
        StoreConfig {
            gcs: GcsOptions {
                emulator_host: Some(self.host.clone()),
            },
            ..StoreConfig::default()
        }
    }

    async fn get_ok(&self, url: &str) -> Vec<u8> {
        let response = http_client().get(url).send().await;
        successful_body(response, &format!("GET {url}")).await
    }

    /// Every object in the bucket (JSON API listing; one page is enough in
    /// tests).
    pub async fn objects(&self) -> Vec<String> {
        let url = format!(
            "http://{}/storage/v1/b/{}/o?maxResults=1000",
            self.host, self.bucket
        );
        let body = self.get_ok(&url).await;
        let listing: serde_json::Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("listing {url}: {e}: {}", String::from_utf8_lossy(&body)));
        let mut names: Vec<String> = listing["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// An object's content (JSON API media download).
    pub async fn get(&self, key: &str) -> Vec<u8> {
        let name: String = url::form_urlencoded::byte_serialize(key.as_bytes()).collect();
        let url = format!(
            "http://{}/download/storage/v1/b/{}/o/{name}?alt=media",
            self.host, self.bucket
        );
        self.get_ok(&url).await
    }
}

impl Drop for FakeGcsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
