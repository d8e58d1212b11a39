//! Writes to Google Cloud Storage through its JSON API.
//!
//! `object_store`'s GCS client writes through the XML API (a single `PUT`,
//! and XML multipart uploads for large objects). Google documents and
//! recommends the JSON API for uploads, and the emulators users test with
//! (fake-gcs-server) implement only that one. So [`GcsJsonUploads`] wraps
//! the `object_store` client and replaces its two write paths:
//!
//! - a small object is one media upload
//!   (`POST /upload/storage/v1/b/{bucket}/o?uploadType=media&name=...`);
//! - a large one (a snapshot) is one resumable upload session: `POST
//!   ...?uploadType=resumable` gives a session URI, each part is `PUT` to it
//!   in order with `Content-Range: bytes a-b/*` (a multiple of 256 KiB, the
//!   server answering `308`), and the last with the total size. After a
//!   failed request the session is asked how much it holds (`Content-Range:
//!   bytes */*`) and the upload resumes from there.
//!
//! Reads, listings, copies and deletions go to the `object_store` client
//! unchanged. Requests carry the bearer token of its credential provider
//! (none for an emulator).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use futures::stream::BoxStream;
use object_store::gcp::GoogleCloudStorage;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};
use reqwest::header::{
    AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION, RANGE,
};
use reqwest::{Method, StatusCode};
use tokio::sync::oneshot;
use url::Url;

/// Google's address for the JSON API when no emulator is set.
pub(crate) const GOOGLE_BASE_URL: &str = "https://storage.googleapis.com";

/// Every chunk of a resumable upload but the last is a multiple of this.
pub(crate) const CHUNK_ALIGNMENT: usize = 256 * 1024;

const STORE: &str = "GCS";

/// Attempts of one request (or one chunk) before the error is reported.
const ATTEMPTS: u32 = 6;

/// Why a write to GCS failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UploadError {
    /// The request did not get an answer (connection refused or reset, a
    /// timeout). The error never names the URL: a session URI is a
    /// capability to write the object.
    #[error("{operation}: the request failed after {attempts} attempt(s): {source}")]
    Request {
        operation: &'static str,
        attempts: u32,
        source: reqwest::Error,
    },
    /// The server answered with an error status.
    #[error("{operation}: {status} after {attempts} attempt(s): {body}")]
    Status {
        operation: &'static str,
        status: StatusCode,
        attempts: u32,
        body: String,
    },
    /// The server answered something the protocol does not allow.
    #[error("{operation}: {message}")]
    Protocol {
        operation: &'static str,
        message: String,
    },
    /// A part before this one failed; its error is reported with it.
    #[error("an earlier part of the upload failed: {message}")]
    EarlierPart {
        /// The status the server refused that part with, if it did.
        status: Option<StatusCode>,
        message: String,
    },
}

impl UploadError {
    fn protocol(operation: &'static str, message: impl Into<String>) -> Self {
        Self::Protocol {
            operation,
            message: message.into(),
        }
    }

    /// The status the server refused the request with.
    fn status(&self) -> Option<StatusCode> {
        match self {
            Self::Status { status, .. } => Some(*status),
            Self::EarlierPart { status, .. } => *status,
            Self::Request { .. } | Self::Protocol { .. } => None,
        }
    }

    /// The `object_store` error for `path`, keeping the kinds the store
    /// layer tells apart (a refused credential, a failed precondition).
    fn into_store_error(self, path: &Path) -> object_store::Error {
        let path = path.to_string();
        match self.status() {
            Some(StatusCode::UNAUTHORIZED) => object_store::Error::Unauthenticated {
                path,
                source: Box::new(self),
            },
            Some(StatusCode::FORBIDDEN) => object_store::Error::PermissionDenied {
                path,
                source: Box::new(self),
            },
            // The bucket is missing: repeating will not help.
            Some(StatusCode::NOT_FOUND) => object_store::Error::NotFound {
                path,
                source: Box::new(self),
            },
            Some(StatusCode::PRECONDITION_FAILED) => object_store::Error::Precondition {
                path,
                source: Box::new(self),
            },
            _ => object_store::Error::Generic {
                store: STORE,
                source: Box::new(self),
            },
        }
    }
}

/// Whether a status is worth repeating the request for.
fn transient(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::TOO_MANY_REQUESTS
        || status == StatusCode::REQUEST_TIMEOUT
}

/// The first wait before a retry; doubled each time, up to 5 s. Unit tests
/// exhaust the retries without waiting.
const FIRST_BACKOFF: Duration = if cfg!(test) {
    Duration::from_millis(1)
} else {
    Duration::from_millis(250)
};

/// The wait after failure number `failures` (1-based).
fn backoff(failures: u32) -> Duration {
    const CAP: Duration = Duration::from_secs(5);
    let nth = usize::try_from(failures.saturating_sub(1).min(8)).unwrap_or(8);
    ExponentialBuilder::new()
        .with_min_delay(FIRST_BACKOFF)
        .with_max_delay(CAP)
        .without_max_times()
        .build()
        .nth(nth)
        .unwrap_or(CAP)
}

/// A response's body as text for a message, cut short.
async fn body_text(response: reqwest::Response) -> String {
    let mut text = response
        .text()
        .await
        .unwrap_or_else(|e| format!("(body unreadable: {})", e.without_url()));
    if text.len() > 500 {
        let mut end = 500;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// The JSON API's connection: client, address and credentials.
#[derive(Debug, Clone)]
struct JsonApi {
    http: reqwest::Client,
    gcs: Arc<GoogleCloudStorage>,
    /// `{base}/upload/storage/v1/b/{bucket}/o`
    upload_url: Url,
}

impl JsonApi {
    async fn authorized(
        &self,
        method: Method,
        url: Url,
    ) -> object_store::Result<reqwest::RequestBuilder> {
        let credential = self.gcs.credentials().get_credential().await?;
        let request = self.http.request(method, url);
        Ok(if credential.bearer.is_empty() {
            // An emulator: Google's client libraries send nothing either.
            request
        } else {
            request.header(AUTHORIZATION, format!("Bearer {}", credential.bearer))
        })
    }

    /// The upload URL for `path` with `uploadType` and precondition.
    fn upload_url(&self, path: &Path, upload_type: &str, mode: &PutMode) -> Url {
        let mut url = self.upload_url.clone();
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("uploadType", upload_type)
                .append_pair("name", path.as_ref());
            match mode {
                PutMode::Overwrite => {}
                PutMode::Create => {
                    query.append_pair("ifGenerationMatch", "0");
                }
                PutMode::Update(version) => {
                    if let Some(generation) = &version.version {
                        query.append_pair("ifGenerationMatch", generation);
                    }
                }
            }
        }
        url
    }

    /// Sends the request `build` makes until it gets an answer that is not
    /// a transient error, at most [`ATTEMPTS`] times. The answer may be any
    /// status that is not transient; the caller checks it.
    async fn send(
        &self,
        operation: &'static str,
        method: Method,
        url: &Url,
        build: impl Fn(reqwest::RequestBuilder) -> reqwest::RequestBuilder,
    ) -> object_store::Result<Result<reqwest::Response, UploadError>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = build(self.authorized(method.clone(), url.clone()).await?);
            let failure = match request.send().await {
                Ok(response) if !transient(response.status()) => return Ok(Ok(response)),
                Ok(response) => UploadError::Status {
                    operation,
                    status: response.status(),
                    attempts: attempt,
                    body: body_text(response).await,
                },
                Err(e) => UploadError::Request {
                    operation,
                    attempts: attempt,
                    source: e.without_url(),
                },
            };
            if attempt >= ATTEMPTS {
                return Ok(Err(failure));
            }
            tracing::debug!(error = %failure, attempt, "retrying a GCS request");
            tokio::time::sleep(backoff(attempt)).await;
        }
    }

    /// The error for an answer that is not a success.
    async fn refused(operation: &'static str, response: reqwest::Response) -> UploadError {
        UploadError::Status {
            operation,
            status: response.status(),
            attempts: 1,
            body: body_text(response).await,
        }
    }
}

/// The object resource a finished upload answers with.
#[derive(Debug, serde::Deserialize)]
struct ObjectResource {
    etag: Option<String>,
    generation: Option<String>,
}

async fn put_result(
    operation: &'static str,
    response: reqwest::Response,
) -> Result<PutResult, UploadError> {
    let body = response.bytes().await.map_err(|e| UploadError::Request {
        operation,
        attempts: 1,
        source: e.without_url(),
    })?;
    let object: ObjectResource = serde_json::from_slice(&body).map_err(|e| {
        UploadError::protocol(
            operation,
            format!("the object resource in the answer is not JSON: {e}"),
        )
    })?;
    Ok(PutResult {
        e_tag: object.etag,
        version: object.generation,
        extensions: Default::default(),
    })
}

/// What dkv's GCS uploads do not do (nothing in dkv asks for it).
fn unsupported(what: &str) -> object_store::Error {
    object_store::Error::NotSupported {
        source: format!("GCS uploads through the JSON API do not support {what}").into(),
    }
}

/// Google Cloud Storage with uploads through the JSON API; everything else
/// through `object_store`'s client.
#[derive(Debug)]
pub(crate) struct GcsJsonUploads {
    api: JsonApi,
}

impl GcsJsonUploads {
    /// `base` is Google's address ([`GOOGLE_BASE_URL`]) or an emulator's.
    pub(crate) fn new(gcs: GoogleCloudStorage, base: &str, bucket: &str) -> Result<Self, String> {
        let mut upload_url = Url::parse(base).map_err(|e| format!("{base:?}: {e}"))?;
        upload_url
            .path_segments_mut()
            .map_err(|()| format!("{base:?} cannot take a path"))?
            .pop_if_empty()
            .extend(["upload", "storage", "v1", "b", bucket, "o"]);
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A part of a few MiB on a slow link; a stalled request is
            // retried, not waited for.
            .timeout(Duration::from_secs(300))
            // A session's `308 Resume Incomplete` is an answer, not a
            // redirect to follow.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("building the HTTP client for GCS uploads: {e}"))?;
        Ok(Self {
            api: JsonApi {
                http,
                gcs: Arc::new(gcs),
                upload_url,
            },
        })
    }

    async fn media_upload(
        &self,
        path: &Path,
        payload: PutPayload,
        mode: &PutMode,
    ) -> object_store::Result<PutResult> {
        const OPERATION: &str = "media upload";
        let url = self.api.upload_url(path, "media", mode);
        let body = Bytes::from(payload);
        let answer = self
            .api
            .send(OPERATION, Method::POST, &url, |request| {
                request
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .body(body.clone())
            })
            .await?;
        let outcome = match answer {
            Ok(response) if response.status().is_success() => put_result(OPERATION, response).await,
            Ok(response) => Err(JsonApi::refused(OPERATION, response).await),
            Err(e) => Err(e),
        };
        outcome.map_err(|e| e.into_store_error(path))
    }
}

impl fmt::Display for GcsJsonUploads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (JSON API uploads)", self.api.gcs)
    }
}

#[async_trait]
impl ObjectStore for GcsJsonUploads {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if let PutMode::Update(version) = &opts.mode
            && version.version.is_none()
        {
            return Err(unsupported("a conditional update without a generation"));
        }
        if !opts.attributes.is_empty() {
            return Err(unsupported("object attributes"));
        }
        self.media_upload(location, payload, &opts.mode).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        if !opts.attributes.is_empty() {
            return Err(unsupported("object attributes"));
        }
        const OPERATION: &str = "starting a resumable upload";
        let url = self
            .api
            .upload_url(location, "resumable", &PutMode::Overwrite);
        let answer = self
            .api
            .send(OPERATION, Method::POST, &url, |request| {
                request
                    .header(CONTENT_LENGTH, 0)
                    .header("X-Upload-Content-Type", "application/octet-stream")
            })
            .await?;
        let session = match answer {
            Ok(response) if response.status().is_success() => {
                session_uri(&url, &response).map_err(|e| e.into_store_error(location))?
            }
            Ok(response) => {
                return Err(JsonApi::refused(OPERATION, response)
                    .await
                    .into_store_error(location));
            }
            Err(e) => return Err(e.into_store_error(location)),
        };
        Ok(Box::new(ResumableUpload {
            session: Arc::new(Session {
                api: self.api.clone(),
                uri: session,
                path: location.clone(),
            }),
            sent: 0,
            carry: Bytes::new(),
            held: None,
            previous: None,
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.api.gcs.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        self.api.gcs.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.api.gcs.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.api.gcs.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.api.gcs.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.api.gcs.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.api.gcs.copy_opts(from, to, options).await
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.api.gcs.rename_opts(from, to, options).await
    }
}

mod resumable;

use resumable::{ResumableUpload, Session, session_uri};

#[cfg(test)]
mod tests;
