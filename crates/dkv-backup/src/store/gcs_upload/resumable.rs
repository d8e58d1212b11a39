//! One resumable upload session, and a snapshot's upload through it as
//! `object_store`'s [`MultipartUpload`].

use super::*;

/// The session URI a resumable upload's start answers with (`Location`),
/// resolved against the request's URL.
pub(super) fn session_uri(request: &Url, response: &reqwest::Response) -> Result<Url, UploadError> {
    const OPERATION: &str = "starting a resumable upload";
    let location = response
        .headers()
        .get(LOCATION)
        .ok_or_else(|| UploadError::protocol(OPERATION, "the answer has no Location header"))?;
    let location = location
        .to_str()
        .map_err(|_| UploadError::protocol(OPERATION, "the Location header is not text"))?;
    request.join(location).map_err(|e| {
        UploadError::protocol(OPERATION, format!("the Location header is not a URL: {e}"))
    })
}

/// The bytes the server holds, from a `308` answer's `Range: bytes=0-N`
/// (none when it has no `Range`).
fn persisted(response: &reqwest::Response) -> Result<u64, String> {
    let Some(range) = response.headers().get(RANGE) else {
        return Ok(0);
    };
    let text = range
        .to_str()
        .map_err(|_| "its Range header is not text".to_owned())?;
    let last = text
        .strip_prefix("bytes=0-")
        .and_then(|last| last.trim().parse::<u64>().ok())
        .ok_or_else(|| format!("its Range header {text:?} is not bytes=0-N"))?;
    Ok(last + 1)
}

/// One resumable upload session.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) api: JsonApi,
    pub(super) uri: Url,
    pub(super) path: Path,
}

/// `308`, which `reqwest` does not follow without a `Location`.
const RESUME_INCOMPLETE: StatusCode = StatusCode::PERMANENT_REDIRECT;

/// What the server said about a chunk.
pub(super) enum Answer {
    /// It holds bytes `0..n`; more are expected.
    Holds(u64),
    /// The object is complete.
    Finished(reqwest::Response),
}

impl Session {
    /// One `PUT` to the session: `data` from `offset`, or, with no data, the
    /// status query (`bytes */total` or `bytes */*`).
    async fn put(
        &self,
        operation: &'static str,
        offset: u64,
        data: Bytes,
        total: Option<u64>,
    ) -> object_store::Result<Result<Answer, UploadError>> {
        let total_text = total.map_or_else(|| "*".to_owned(), |t| t.to_string());
        let range = if data.is_empty() {
            format!("bytes */{total_text}")
        } else {
            format!(
                "bytes {offset}-{}/{total_text}",
                offset + data.len() as u64 - 1
            )
        };
        let request = self
            .api
            .authorized(Method::PUT, self.uri.clone())
            .await?
            .header(CONTENT_RANGE, range)
            .header(CONTENT_LENGTH, data.len())
            .body(data);
        Ok(match request.send().await {
            Ok(response) if response.status() == RESUME_INCOMPLETE => {
                persisted(&response).map(Answer::Holds).map_err(|message| {
                    UploadError::protocol(
                        operation,
                        format!("the session's answer is unusable: {message}"),
                    )
                })
            }
            Ok(response) if response.status().is_success() => Ok(Answer::Finished(response)),
            Ok(response) => Err(UploadError::Status {
                operation,
                status: response.status(),
                attempts: 1,
                body: body_text(response).await,
            }),
            Err(e) => Err(UploadError::Request {
                operation,
                attempts: 1,
                source: e.without_url(),
            }),
        })
    }

    /// Sends `data`, the object's bytes from `start`; with `total`, the last
    /// of them, which finishes the object. A request that fails for a
    /// transient reason is followed by a status query and the upload goes
    /// on from what the server holds; the server keeping only some of a
    /// chunk is not a failure. Returns the object's resource when finished.
    async fn send(
        &self,
        start: u64,
        data: Bytes,
        total: Option<u64>,
    ) -> object_store::Result<Result<Option<PutResult>, UploadError>> {
        const OPERATION: &str = "resumable upload";
        let end = start + data.len() as u64;
        let mut offset = start;
        let mut failures = 0;
        let mut query = false;
        loop {
            let answer = if query {
                self.put("resumable upload status", offset, Bytes::new(), total)
                    .await?
            } else {
                let from =
                    usize::try_from(offset - start).map_or(data.len(), |f| f.min(data.len()));
                self.put(OPERATION, offset, data.slice(from..), total)
                    .await?
            };
            let failure = match answer {
                Ok(Answer::Holds(held)) if (start..=end).contains(&held) => {
                    let progress = held > offset || query;
                    offset = held;
                    query = false;
                    if held == end && total.is_none() {
                        return Ok(Ok(None));
                    }
                    if progress {
                        continue;
                    }
                    UploadError::protocol(
                        OPERATION,
                        format!("the server kept none of bytes {offset}..{end}"),
                    )
                }
                Ok(Answer::Holds(held)) => {
                    return Ok(Err(UploadError::protocol(
                        OPERATION,
                        format!(
                            "the server holds {held} bytes, outside the {start}..{end} being sent"
                        ),
                    )));
                }
                Ok(Answer::Finished(response)) => {
                    return Ok(if total.is_some() {
                        put_result(OPERATION, response).await.map(Some)
                    } else {
                        Err(UploadError::protocol(
                            OPERATION,
                            "the server finished the object before its last part",
                        ))
                    });
                }
                Err(UploadError::Status { status, .. })
                    if status == StatusCode::NOT_FOUND || status == StatusCode::GONE =>
                {
                    return Ok(Err(UploadError::protocol(
                        OPERATION,
                        format!(
                            "the upload session is gone ({status}): it expired or was cancelled; the upload must start again"
                        ),
                    )));
                }
                Err(e @ UploadError::Status { status, .. }) if !transient(status) => {
                    return Ok(Err(e));
                }
                Err(e) => e,
            };
            failures += 1;
            if failures >= ATTEMPTS {
                return Ok(Err(match failure {
                    UploadError::Request { source, .. } => UploadError::Request {
                        operation: OPERATION,
                        attempts: failures,
                        source,
                    },
                    UploadError::Status { status, body, .. } => UploadError::Status {
                        operation: OPERATION,
                        status,
                        attempts: failures,
                        body,
                    },
                    other => other,
                }));
            }
            tracing::debug!(error = %failure, failures, "retrying a GCS resumable upload chunk");
            tokio::time::sleep(backoff(failures)).await;
            query = true;
        }
    }

    async fn cancel(&self) -> Result<(), UploadError> {
        const OPERATION: &str = "cancelling a resumable upload";
        let answer = self
            .api
            .send(OPERATION, Method::DELETE, &self.uri, |request| {
                request.header(CONTENT_LENGTH, 0)
            })
            .await
            .map_err(|e| UploadError::protocol(OPERATION, e.to_string()))?;
        let response = answer?;
        // Google answers a cancelled session with 499; a session already
        // gone has nothing left to cancel.
        match response.status().as_u16() {
            200..=299 | 404 | 410 | 499 => Ok(()),
            _ => Err(JsonApi::refused(OPERATION, response).await),
        }
    }
}

/// How a chunk failed, for the chunks after it.
#[derive(Debug)]
pub(super) struct PartFailure {
    status: Option<StatusCode>,
    message: String,
}

/// A snapshot's upload as `object_store`'s [`MultipartUpload`], so the
/// backup streams it as it does to S3 and Azure.
///
/// Parts go to the session strictly in order, one request at a time: each
/// part's future waits for the one before it. The newest part is held back
/// until the next arrives or [`MultipartUpload::complete`] is called, so the
/// last one can be sent with the object's total size; a chunk's length must
/// be a multiple of 256 KiB, so the few bytes of a part beyond that are
/// carried into the next. Memory: the part held back, under 256 KiB
/// carried, and the parts whose futures the caller keeps in flight.
#[derive(Debug)]
pub(super) struct ResumableUpload {
    pub(super) session: Arc<Session>,
    /// Bytes handed to chunk futures so far: where the next chunk starts.
    pub(super) sent: u64,
    /// The tail of the parts sent, short of a 256 KiB multiple.
    pub(super) carry: Bytes,
    pub(super) held: Option<PutPayload>,
    /// How the last chunk handed out ended: `Err` with its error's text.
    pub(super) previous: Option<oneshot::Receiver<Result<(), PartFailure>>>,
}

impl ResumableUpload {
    /// The carried bytes followed by `part`, in one buffer.
    fn after_carry(&mut self, part: PutPayload) -> Bytes {
        let carry = std::mem::take(&mut self.carry);
        if carry.is_empty() {
            return Bytes::from(part);
        }
        let mut joined = BytesMut::with_capacity(carry.len() + part.content_length());
        joined.extend_from_slice(&carry);
        for piece in part.iter() {
            joined.extend_from_slice(piece);
        }
        joined.freeze()
    }

    /// Waits for the chunk before, reporting its failure.
    async fn wait_for(
        previous: Option<oneshot::Receiver<Result<(), PartFailure>>>,
    ) -> Result<(), UploadError> {
        let Some(previous) = previous else {
            return Ok(());
        };
        match previous.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(PartFailure { status, message })) => {
                Err(UploadError::EarlierPart { status, message })
            }
            Err(_) => Err(UploadError::EarlierPart {
                status: None,
                message: "it was cancelled before it finished".to_owned(),
            }),
        }
    }
}

#[async_trait]
impl MultipartUpload for ResumableUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        let Some(ready) = self.held.replace(data) else {
            return futures::future::ready(Ok(())).boxed();
        };
        let bytes = self.after_carry(ready);
        let aligned = bytes.len() - bytes.len() % CHUNK_ALIGNMENT;
        self.carry = bytes.slice(aligned..);
        if aligned == 0 {
            return futures::future::ready(Ok(())).boxed();
        }
        let chunk = bytes.slice(..aligned);
        let start = self.sent;
        self.sent += aligned as u64;
        let (done, next) = oneshot::channel();
        let previous = self.previous.replace(next);
        let session = Arc::clone(&self.session);
        async move {
            let result = match Self::wait_for(previous).await {
                Ok(()) => session.send(start, chunk, None).await,
                Err(e) => Ok(Err(e)),
            };
            let result = match result {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err((e.status(), e.into_store_error(&session.path))),
                Err(e) => Err((None, e)),
            };
            let _ = done.send(match &result {
                Ok(()) => Ok(()),
                Err((status, e)) => Err(PartFailure {
                    status: *status,
                    message: e.to_string(),
                }),
            });
            result.map_err(|(_, e)| e)
        }
        .boxed()
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let path = self.session.path.clone();
        Self::wait_for(self.previous.take())
            .await
            .map_err(|e| e.into_store_error(&path))?;
        let held = self.held.take().unwrap_or_default();
        let last = self.after_carry(held);
        let total = self.sent + last.len() as u64;
        let start = self.sent;
        self.sent = total;
        match self.session.send(start, last, Some(total)).await? {
            Ok(Some(result)) => Ok(result),
            Ok(None) => Err(UploadError::protocol(
                "resumable upload",
                "the server did not finish the object after its last part",
            )
            .into_store_error(&path)),
            Err(e) => Err(e.into_store_error(&path)),
        }
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.held = None;
        self.carry = Bytes::new();
        self.session
            .cancel()
            .await
            .map_err(|e| e.into_store_error(&self.session.path))
    }
}
