//! Opening an object store for a [`Location`], and the few object
//! operations backups need, with every error scrubbed of credentials.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, Checksum};
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::{GcpCredential, GoogleCloudStorageBuilder};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    ClientOptions, GetOptions, GetRange, MultipartUpload, ObjectStore, ObjectStoreExt, PutPayload,
    StaticCredentialProvider,
};
use url::Url;

use crate::credentials::{AzureKey, Credentials, GcpCredentials, Redactor};
use crate::error::{Error, Result, StoreErrorKind};
use crate::location::{Location, Scheme};

mod gcs_upload;
mod owned_files;

pub use owned_files::{FileOwner, own_created_files_as};

/// Non-secret S3 settings, for AWS and for S3-compatible servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Options {
    /// The server's URL (`AWS_ENDPOINT_URL`), e.g. `http://minio.storage:9000`;
    /// AWS itself when unset.
    pub endpoint: Option<String>,
    /// `AWS_REGION`; `us-east-1` when unset.
    pub region: Option<String>,
    /// Path-style requests (`endpoint/bucket/key`), which every
    /// S3-compatible server understands; off means virtual-hosted style
    /// (`bucket.endpoint/key`).
    pub path_style: bool,
    /// Allow a plain-HTTP endpoint (`AWS_ALLOW_HTTP=true`): a server inside
    /// the cluster or on loopback in tests.
    pub allow_http: bool,
    /// Send a SHA-256 checksum with every part and object
    /// (`x-amz-checksum-sha256`), so the server checks each part as it
    /// arrives and keeps a checksum of the object. The digest is the one
    /// the request signature already needs, so it costs the client nothing.
    /// On unless `AWS_REQUEST_CHECKSUM_CALCULATION=when_required` (the AWS
    /// SDKs' switch), for S3-compatible servers that refuse the header.
    pub checksums: bool,
}

impl Default for S3Options {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            path_style: true,
            allow_http: false,
            checksums: true,
        }
    }
}

/// Non-secret Azure Blob Storage settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AzureOptions {
    /// The blob service's URL (`AZURE_STORAGE_ENDPOINT`), containers
    /// being addressed as `<endpoint>/<container>`: a sovereign cloud's
    /// (`https://<account>.blob.core.chinacloudapi.cn`), a private
    /// endpoint, or an emulator's with the account as its path
    /// (`http://127.0.0.1:10000/<account>`). An `http://` URL is used as
    /// written: for an emulator or a server inside the cluster. When unset,
    /// `https://<account>.blob.core.windows.net`.
    pub endpoint: Option<String>,
}

/// Non-secret Google Cloud Storage settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcsOptions {
    /// A storage emulator's address (`STORAGE_EMULATOR_HOST`, the variable
    /// Google's own client libraries read): `host:port` (plain HTTP) or a
    /// URL. Requests go there without credentials, as those libraries send
    /// them; unset means Google Cloud Storage itself.
    pub emulator_host: Option<String>,
}

pub const AWS_REGION: &str = "AWS_REGION";
pub const AWS_ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
pub const AWS_ALLOW_HTTP: &str = "AWS_ALLOW_HTTP";
pub const AWS_REQUEST_CHECKSUM_CALCULATION: &str = "AWS_REQUEST_CHECKSUM_CALCULATION";
pub const AZURE_STORAGE_ENDPOINT: &str = "AZURE_STORAGE_ENDPOINT";
pub const STORAGE_EMULATOR_HOST: &str = "STORAGE_EMULATOR_HOST";

/// Whether `AWS_REQUEST_CHECKSUM_CALCULATION`'s value asks for checksums.
/// As in the AWS SDKs: `when_supported` (the default) sends them,
/// `when_required` leaves them out; anything else keeps the default.
pub fn checksums_requested(value: Option<&str>) -> bool {
    !value.is_some_and(|v| v.trim().eq_ignore_ascii_case("when_required"))
}

/// Everything needed to open the store a URI names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreConfig {
    pub credentials: Credentials,
    pub s3: S3Options,
    pub azure: AzureOptions,
    pub gcs: GcsOptions,
}

impl StoreConfig {
    /// Credentials and S3 settings from the standard environment variables
    /// (see [`crate::credentials`]).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let get = |name: &str| lookup(name).filter(|v| !v.is_empty());
        Self {
            s3: S3Options {
                endpoint: get(AWS_ENDPOINT_URL),
                region: get(AWS_REGION),
                path_style: true,
                allow_http: get(AWS_ALLOW_HTTP).is_some_and(|v| is_true(&v)),
                checksums: checksums_requested(get(AWS_REQUEST_CHECKSUM_CALCULATION).as_deref()),
            },
            azure: AzureOptions {
                endpoint: get(AZURE_STORAGE_ENDPOINT),
            },
            gcs: GcsOptions {
                emulator_host: get(STORAGE_EMULATOR_HOST),
            },
            credentials: Credentials::from_lookup(lookup),
        }
    }
}

/// Checks a store endpoint a user set in `variable`: an `http` or `https`
/// URL with a host, and nothing that would be dropped or leaked (user
/// information, a query, a fragment). Returns it without a trailing slash,
/// as the store clients append paths to it.
fn endpoint_url(variable: &str, value: &str) -> std::result::Result<String, String> {
    let invalid = |reason: &str| format!("{variable} {value:?} is not a usable endpoint: {reason}");
    let url = Url::parse(value.trim()).map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("use an http:// or https:// URL"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("the host is missing"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Never echo credentials.
        return Err(format!(
            "{variable} carries credentials; put them in the credentials Secret's own keys"
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("query strings and fragments are not supported"));
    }
    Ok(url.as_str().trim_end_matches('/').to_owned())
}

/// `STORAGE_EMULATOR_HOST` as Google's client libraries read it: a bare
/// `host:port` means plain HTTP.
fn emulator_url(value: &str) -> std::result::Result<String, String> {
    let value = value.trim();
    if value.contains("://") {
        endpoint_url(STORAGE_EMULATOR_HOST, value)
    } else {
        endpoint_url(STORAGE_EMULATOR_HOST, &format!("http://{value}"))
    }
}

fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// One bucket (or the local file system) opened with its credentials.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    /// The bucket, for naming objects in messages and results.
    root: Location,
    redactor: Redactor,
}

impl Store {
    /// Opens the store holding `location`. Nothing is contacted yet.
    pub fn open(location: &Location, config: &StoreConfig) -> Result<Self> {
        let root = location.with_path(Path::default());
        let redactor = Redactor::new(&config.credentials);
        let open_error = |e: object_store::Error| Error::Open {
            uri: root.to_string(),
            message: redactor.scrub(&error_chain(&e)),
        };
        if location.scheme() != Scheme::File {
            // reqwest is built without a crypto provider of its own: use
            // ring, the one kube uses, unless the process already chose one.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let credentials = &config.credentials;
        let inner: Arc<dyn ObjectStore> = match location.scheme() {
            Scheme::S3 => {
                let s3 = &config.s3;
                let mut builder = AmazonS3Builder::new()
                    .with_bucket_name(location.bucket())
                    .with_region(s3.region.as_deref().unwrap_or("us-east-1"))
                    .with_virtual_hosted_style_request(!s3.path_style)
                    .with_allow_http(s3.allow_http);
                if let Some(endpoint) = &s3.endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if s3.checksums {
                    builder = builder.with_checksum_algorithm(Checksum::SHA256);
                }
                if let Some(aws) = &credentials.aws {
                    builder = builder
                        .with_access_key_id(&aws.access_key_id)
                        .with_secret_access_key(aws.secret_access_key.expose());
                    if let Some(token) = &aws.session_token {
                        builder = builder.with_token(token.expose());
                    }
                }
                Arc::new(builder.build().map_err(open_error)?)
            }
            Scheme::Gcs => {
                let mut builder =
                    GoogleCloudStorageBuilder::new().with_bucket_name(location.bucket());
                let mut base_url = gcs_upload::GOOGLE_BASE_URL.to_owned();
                if let Some(host) = &config.gcs.emulator_host {
                    let url = emulator_url(host).map_err(|message| Error::Open {
                        uri: root.to_string(),
                        message,
                    })?;
                    base_url.clone_from(&url);
                    // An emulator takes unauthenticated requests: no token
                    // is fetched from Google (or a metadata server) for it.
                    let anonymous = GcpCredential {
                        bearer: String::new(),
                    };
                    builder = builder
                        .with_base_url(&url)
                        .with_credentials(Arc::new(StaticCredentialProvider::new(anonymous)))
                        .with_client_options(
                            ClientOptions::new().with_allow_http(url.starts_with("http://")),
                        )
                        .with_skip_signature(true);
                }
                match &credentials.gcp {
                    Some(GcpCredentials::ServiceAccountKey(key)) => {
                        builder = builder.with_service_account_key(key.expose());
                    }
                    Some(GcpCredentials::ServiceAccountFile(path)) => {
                        builder = builder.with_service_account_path(path.to_string_lossy());
                    }
                    None => {}
                }
                // Writes through the JSON API (see `gcs_upload`), the rest
                // through object_store's client.
                let gcs = builder.build().map_err(open_error)?;
                Arc::new(
                    gcs_upload::GcsJsonUploads::new(gcs, &base_url, location.bucket()).map_err(
                        |message| Error::Open {
                            uri: root.to_string(),
                            message,
                        },
                    )?,
                )
            }
            Scheme::Azure => {
                let mut builder =
                    MicrosoftAzureBuilder::new().with_container_name(location.bucket());
                if let Some(endpoint) = &config.azure.endpoint {
                    let url =
                        endpoint_url(AZURE_STORAGE_ENDPOINT, endpoint).map_err(|message| {
                            Error::Open {
                                uri: root.to_string(),
                                message,
                            }
                        })?;
                    builder = builder
                        .with_allow_http(url.starts_with("http://"))
                        .with_endpoint(url);
                }
                if let Some(azure) = &credentials.azure {
                    builder = builder.with_account(&azure.account);
                    builder = match &azure.key {
                        AzureKey::AccessKey(key) => builder.with_access_key(key.expose()),
                        AzureKey::SasToken(token) => builder.with_config(
                            object_store::azure::AzureConfigKey::SasKey,
                            token.expose(),
                        ),
                    };
                }
                Arc::new(builder.build().map_err(open_error)?)
            }
            // Durable before it is reported: an artifact is only worth its
            // record if it survives a crash right after.
            Scheme::File => {
                let local = LocalFileSystem::new().with_fsync(true);
                match owned_files::process_owner() {
                    Some(owner) => Arc::new(owned_files::OwnedFiles::new(local, owner)),
                    None => Arc::new(local),
                }
            }
        };
        Ok(Self {
            inner,
            root,
            redactor,
        })
    }

    /// The location of `path` in this store.
    pub fn location(&self, path: &Path) -> Location {
        self.root.with_path(path.clone())
    }

    /// Refuses a location in another bucket (a programming error that
    /// would otherwise write to the wrong place).
    pub(crate) fn check_same_bucket(&self, location: &Location) -> Result<()> {
        if location.scheme() == self.root.scheme() && location.bucket() == self.root.bucket() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{location} is not in {}",
                self.root
            )))
        }
    }

    /// Builds the error for a failed store operation; the message never
    /// contains a credential.
    pub(crate) fn error(
        &self,
        operation: &'static str,
        path: &Path,
        err: &object_store::Error,
    ) -> Error {
        let kind = match err {
            object_store::Error::NotFound { .. } => StoreErrorKind::NotFound,
            object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. } => StoreErrorKind::AccessDenied,
            _ => {
                // Some requests report a refused key or signature as a
                // generic error carrying the HTTP status or S3's code.
                let text = error_chain(err);
                let denied = [
                    "403 Forbidden",
                    "401 Unauthorized",
                    "<Code>AccessDenied</Code>",
                    "<Code>SignatureDoesNotMatch</Code>",
                    "<Code>InvalidAccessKeyId</Code>",
                ];
                if denied.iter().any(|marker| text.contains(marker)) {
                    StoreErrorKind::AccessDenied
                } else {
                    StoreErrorKind::Other
                }
            }
        };
        let mut message = self.redactor.scrub(&error_chain(err));
        if kind == StoreErrorKind::AccessDenied {
            message.push_str(&format!(
                "; check the credentials ({}) and what they are allowed to do in {}",
                credential_variables(self.root.scheme()),
                self.root
            ));
        }
        Error::Store {
            operation,
            uri: self.location(path).to_string(),
            kind,
            message,
        }
    }

    /// Scrubs text from this store for logging.
    pub(crate) fn scrub(&self, text: &str) -> String {
        self.redactor.scrub(text)
    }

    pub async fn exists(&self, path: &Path) -> Result<bool> {
        match self.inner.head(path).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error("head", path, &e)),
        }
    }

    /// Size of an object in bytes.
    pub async fn size(&self, path: &Path) -> Result<u64> {
        self.inner
            .head(path)
            .await
            .map(|meta| meta.size)
            .map_err(|e| self.error("head", path, &e))
    }

    /// Writes a small object in one request.
    pub async fn put_small(&self, path: &Path, bytes: Bytes) -> Result<()> {
        self.inner
            .put(path, PutPayload::from_bytes(bytes))
            .await
            .map(|_| ())
            .map_err(|e| self.error("put", path, &e))
    }

    /// Reads a small object whole.
    pub async fn get_small(&self, path: &Path) -> Result<Bytes> {
        let result = self
            .inner
            .get(path)
            .await
            .map_err(|e| self.error("get", path, &e))?;
        result
            .bytes()
            .await
            .map_err(|e| self.error("get", path, &e))
    }

    /// Streams an object's content.
    pub async fn get_stream(&self, path: &Path) -> Result<BoxStream<'static, Result<Bytes>>> {
        let result = self
            .inner
            .get(path)
            .await
            .map_err(|e| self.error("get", path, &e))?;
        let this = self.clone();
        let path = path.clone();
        Ok(result
            .into_stream()
            .map_err(move |e| this.error("get", &path, &e))
            .boxed())
    }

    /// Streams the bytes of one range of an object. Whether the server
    /// sent all of them is for the caller to check (it knows where they
    /// go).
    pub async fn get_range(
        &self,
        path: &Path,
        range: std::ops::Range<u64>,
    ) -> Result<BoxStream<'static, Result<Bytes>>> {
        let options = GetOptions {
            range: Some(GetRange::Bounded(range)),
            ..GetOptions::default()
        };
        let result = self
            .inner
            .get_opts(path, options)
            .await
            .map_err(|e| self.error("get", path, &e))?;
        let this = self.clone();
        let path = path.clone();
        Ok(result
            .into_stream()
            .map_err(move |e| this.error("get", &path, &e))
            .boxed())
    }

    pub(crate) async fn start_multipart(&self, path: &Path) -> Result<Box<dyn MultipartUpload>> {
        self.inner
            .put_multipart(path)
            .await
            .map_err(|e| self.error("multipart upload start", path, &e))
    }

    /// Every object under `prefix` (at any depth), in no particular order.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<Path>> {
        self.inner
            .list(Some(prefix))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await
            .map_err(|e| self.error("list", prefix, &e))
    }

    /// The total size of the objects under `prefix`, from one listing.
    pub async fn total_size(&self, prefix: &Path) -> Result<u64> {
        self.inner
            .list(Some(prefix))
            .try_fold(0, |total, meta| async move { Ok(total + meta.size) })
            .await
            .map_err(|e| self.error("list", prefix, &e))
    }

    /// Deletes an object; an object that is already gone is not an error
    /// (deletion is retried by callers after partial failures).
    pub async fn delete(&self, path: &Path) -> Result<()> {
        match self.inner.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", path, &e)),
        }
    }
}

/// The variables credentials for `scheme` come from, for messages.
fn credential_variables(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::S3 => "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN",
        Scheme::Gcs => "GOOGLE_SERVICE_ACCOUNT_KEY or GOOGLE_APPLICATION_CREDENTIALS",
        Scheme::Azure => {
            "AZURE_STORAGE_ACCOUNT_NAME with AZURE_STORAGE_ACCOUNT_KEY or AZURE_STORAGE_SAS_TOKEN"
        }
        Scheme::File => "file permissions",
    }
}

/// An error and its sources, on one line.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn config_from_the_standard_variables() {
        let vars: HashMap<&str, &str> = [
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "s3cret"),
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:9000"),
            ("AWS_ALLOW_HTTP", "true"),
        ]
        .into();
        let config = StoreConfig::from_lookup(|name| vars.get(name).map(|v| (*v).to_owned()));
        assert_eq!(
            config.s3,
            S3Options {
                endpoint: Some("http://127.0.0.1:9000".to_owned()),
                region: Some("eu-west-1".to_owned()),
                path_style: true,
                allow_http: true,
                checksums: true,
            }
        );
        assert_eq!(config.credentials.aws.unwrap().access_key_id, "AKID");
    }

    #[test]
    fn checksums_are_sent_unless_only_required_ones_are_asked_for() {
        for (value, expected) in [
            (None, true),
            (Some("when_supported"), true),
            (Some("WHEN_SUPPORTED"), true),
            (Some("when_required"), false),
            (Some(" When_Required "), false),
        ] {
            assert_eq!(checksums_requested(value), expected, "{value:?}");
        }
        let config = StoreConfig::from_lookup(|name| {
            (name == AWS_REQUEST_CHECKSUM_CALCULATION).then(|| "when_required".to_owned())
        });
        assert!(!config.s3.checksums);
    }

    #[test]
    fn opens_every_scheme_without_contacting_anything() {
        let config = StoreConfig::default();
        for uri in ["s3://b/p", "gs://b/p", "file:///tmp/p"] {
            let location = Location::parse(uri).unwrap();
            Store::open(&location, &config).unwrap();
        }
        // Azure needs an account name before anything else.
        let err = Store::open(&Location::parse("az://c/p").unwrap(), &config).unwrap_err();
        assert!(matches!(err, Error::Open { .. }), "{err}");
    }

    /// Endpoints a user sets are checked before anything is contacted, and a
    /// URL with credentials in it is refused without echoing them.
    #[test]
    fn bad_custom_endpoints_are_refused_when_the_store_is_opened() {
        let open = |uri: &str, name: &str, value: &str| {
            let config = StoreConfig::from_lookup(|key| {
                match key {
                    "AZURE_STORAGE_ACCOUNT_NAME" => Some("acct".to_owned()),
                    "AZURE_STORAGE_ACCOUNT_KEY" => Some("a2V5".to_owned()),
                    _ => None,
                }
                .or_else(|| (key == name).then(|| value.to_owned()))
            });
            Store::open(&Location::parse(uri).unwrap(), &config).map(|_| ())
        };
        for (uri, name, value, why) in [
            (
                "az://c/p",
                "AZURE_STORAGE_ENDPOINT",
                "ftp://h/acct",
                "http:// or https://",
            ),
            (
                "az://c/p",
                "AZURE_STORAGE_ENDPOINT",
                "not a url",
                "relative URL",
            ),
            (
                "az://c/p",
                "AZURE_STORAGE_ENDPOINT",
                "https://h/acct?sig=1",
                "query",
            ),
            (
                "gs://b/p",
                "STORAGE_EMULATOR_HOST",
                "127.0.0.1:4443/x?y=1",
                "query",
            ),
        ] {
            let err = open(uri, name, value).unwrap_err().to_string();
            assert!(err.contains(why) && err.contains(name), "{value}: {err}");
        }
        let err = open(
            "az://c/p",
            "AZURE_STORAGE_ENDPOINT",
            "https://u:pa55w0rd@h/acct",
        )
        .unwrap_err()
        .to_string();
        assert!(!err.contains("pa55w0rd"), "{err}");
        for (uri, name, value) in [
            (
                "az://c/p",
                "AZURE_STORAGE_ENDPOINT",
                "https://acct.blob.core.chinacloudapi.cn/",
            ),
            (
                "az://c/p",
                "AZURE_STORAGE_ENDPOINT",
                "http://127.0.0.1:10000/acct",
            ),
            ("gs://b/p", "STORAGE_EMULATOR_HOST", "127.0.0.1:4443"),
            (
                "gs://b/p",
                "STORAGE_EMULATOR_HOST",
                "https://gcs.internal:4443",
            ),
        ] {
            open(uri, name, value).unwrap_or_else(|e| panic!("{value}: {e}"));
        }
    }

    #[tokio::test]
    async fn file_store_objects_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let uri = format!("file://{}/sub/x.json", dir.path().display());
        let location = Location::parse(&uri).unwrap();
        let store = Store::open(&location, &StoreConfig::default()).unwrap();
        assert!(!store.exists(location.path()).await.unwrap());
        store
            .put_small(location.path(), Bytes::from_static(b"{}"))
            .await
            .unwrap();
        assert!(store.exists(location.path()).await.unwrap());
        assert_eq!(store.size(location.path()).await.unwrap(), 2);
        assert_eq!(&store.get_small(location.path()).await.unwrap()[..], b"{}");
        let range: Vec<Bytes> = store
            .get_range(location.path(), 1..2)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(range.concat(), b"}");
        store.delete(location.path()).await.unwrap();
        store.delete(location.path()).await.unwrap();
        let err = store.get_small(location.path()).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Store {
                    kind: StoreErrorKind::NotFound,
                    ..
                }
            ),
            "{err}"
        );
    }
}
