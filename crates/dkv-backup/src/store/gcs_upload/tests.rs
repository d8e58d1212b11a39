//! The upload rules against a small in-process server that keeps a
//! resumable session as Google documents it: chunks must start where the
//! stored bytes end, every chunk but the last is a multiple of 256 KiB, the
//! last carries the total, and a `bytes */*` query reports what is held.
//! Faults are injected by request number.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use object_store::WriteMultipart;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::error::{Error, StoreErrorKind};
use crate::location::Location;
use crate::store::{GcsOptions, Store, StoreConfig};

/// `len` bytes whose 256 KiB chunks all differ (for the few MiB these
/// tests send), so a chunk out of place shows.
fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 11) ^ (i >> 19)) as u8 ^ seed)
        .collect()
}

/// The kind of a store error.
fn kind_of(err: &Error) -> Option<StoreErrorKind> {
    match err {
        Error::Store { kind, .. } => Some(*kind),
        _ => None,
    }
}

/// What the server does with a chunk `PUT` (by its number, from 1).
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// Keeps the first `n` bytes of the chunk, then answers 503.
    KeepThen503(usize),
    /// Answers with this status, keeping nothing.
    Status(u16),
}

#[derive(Debug, Default)]
struct Server {
    /// Every request, as `METHOD path Content-Range`.
    log: Vec<String>,
    /// Sessions by id: the object name and the bytes held.
    sessions: HashMap<String, (String, Vec<u8>)>,
    cancelled: Vec<String>,
    objects: BTreeMap<String, Vec<u8>>,
    chunk_puts: usize,
    faults: HashMap<usize, Fault>,
    /// Chunks refused for breaking a rule, with why.
    violations: Vec<String>,
}

struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

struct Response {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Response {
    fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    fn object(name: &str) -> Self {
        Self {
            status: 200,
            headers: vec![("Content-Type", "application/json".to_owned())],
            body: serde_json::json!({"name": name, "etag": "CAE=", "generation": "7"}).to_string(),
        }
    }

    fn incomplete(held: usize) -> Self {
        let mut response = Self::new(308);
        if held > 0 {
            response
                .headers
                .push(("Range", format!("bytes=0-{}", held - 1)));
        }
        response
    }
}

fn query(target: &str) -> HashMap<String, String> {
    let url = Url::parse(&format!("http://x{target}")).unwrap();
    url.query_pairs().into_owned().collect()
}

impl Server {
    fn handle(&mut self, request: Request, address: &str) -> Response {
        let range = request
            .headers
            .get("content-range")
            .cloned()
            .unwrap_or_default();
        let path = request
            .target
            .split('?')
            .next()
            .unwrap_or_default()
            .to_owned();
        self.log.push(
            format!("{} {path} {range}", request.method)
                .trim_end()
                .to_owned(),
        );
        let query = query(&request.target);
        match (request.method.as_str(), path.as_str()) {
            ("POST", "/upload/storage/v1/b/bkt/o") => {
                let name = query["name"].clone();
                match query["uploadType"].as_str() {
                    "media" => {
                        self.objects.insert(name.clone(), request.body);
                        Response::object(&name)
                    }
                    "resumable" => {
                        let id = format!("s{}", self.sessions.len() + 1);
                        self.sessions.insert(id.clone(), (name, Vec::new()));
                        let mut response = Response::new(200);
                        response
                            .headers
                            .push(("Location", format!("http://{address}/session/{id}")));
                        response
                    }
                    other => Response::new(400).with_body(format!("uploadType {other}")),
                }
            }
            ("PUT", session) if session.starts_with("/session/") => {
                let id = session.trim_start_matches("/session/").to_owned();
                self.chunk(&id, &range, request.body)
            }
            ("DELETE", session) if session.starts_with("/session/") => {
                let id = session.trim_start_matches("/session/").to_owned();
                self.sessions.remove(&id);
                self.cancelled.push(id);
                Response::new(499)
            }
            _ => Response::new(404),
        }
    }

    fn chunk(&mut self, id: &str, range: &str, body: Vec<u8>) -> Response {
        let Some((name, held)) = self.sessions.get_mut(id) else {
            return Response::new(404);
        };
        let name = name.clone();
        let (span, total) = range
            .strip_prefix("bytes ")
            .and_then(|r| r.split_once('/'))
            .unwrap_or(("?", "?"));
        let total: Option<usize> = total.parse().ok();
        if span == "*" {
            // A status query, or the end of an upload whose last chunk was
            // sent before.
            if total == Some(held.len()) {
                let content = std::mem::take(held);
                self.sessions.remove(id);
                self.objects.insert(name.clone(), content);
                return Response::object(&name);
            }
            return Response::incomplete(held.len());
        }
        self.chunk_puts += 1;
        let Some((first, last)) = span
            .split_once('-')
            .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
        else {
            return Response::new(400);
        };
        let mut refuse = |why: String| {
            self.violations.push(why.clone());
            Response::new(400).with_body(why)
        };
        if first != held.len() {
            return refuse(format!("chunk {range} does not start at {}", held.len()));
        }
        if last + 1 - first != body.len() {
            return refuse(format!("chunk {range} carries {} bytes", body.len()));
        }
        if total.is_none() && !body.len().is_multiple_of(CHUNK_ALIGNMENT) {
            return refuse(format!("chunk {range} is not a multiple of 256 KiB"));
        }
        if let Some(total) = total
            && last + 1 != total
        {
            return refuse(format!("last chunk {range} does not end at the total"));
        }
        match self.faults.get(&self.chunk_puts) {
            Some(Fault::KeepThen503(keep)) => {
                held.extend_from_slice(&body[..*keep]);
                return Response::new(503);
            }
            Some(Fault::Status(status)) => return Response::new(*status),
            None => {}
        }
        held.extend_from_slice(&body);
        if total.is_some() {
            let content = std::mem::take(held);
            self.sessions.remove(id);
            self.objects.insert(name.clone(), content);
            Response::object(&name)
        } else {
            Response::incomplete(held.len())
        }
    }
}

impl Response {
    fn with_body(mut self, body: String) -> Self {
        self.body = body;
        self
    }
}

async fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).await.ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.ok()?;
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await.ok()?;
    Some(Request {
        method,
        target,
        headers,
        body,
    })
}

/// Serves `server` on loopback; returns its `host:port`.
async fn serve(server: Arc<Mutex<Server>>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let served = address.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (server, address) = (Arc::clone(&server), served.clone());
            tokio::spawn(async move {
                let mut reader = BufReader::new(stream);
                while let Some(request) = read_request(&mut reader).await {
                    let response = server.lock().unwrap().handle(request, &address);
                    let mut head = format!(
                        "HTTP/1.1 {} X\r\nContent-Length: {}\r\n",
                        response.status,
                        response.body.len()
                    );
                    for (name, value) in &response.headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    head.push_str("\r\n");
                    head.push_str(&response.body);
                    if reader.get_mut().write_all(head.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    address
}

async fn store_on(server: &Arc<Mutex<Server>>) -> (Store, Location) {
    let host = serve(Arc::clone(server)).await;
    let location = Location::parse("gs://bkt/backups/a b+c.db").unwrap();
    let config = StoreConfig {
        gcs: GcsOptions {
            emulator_host: Some(host),
        },
        ..StoreConfig::default()
    };
    (Store::open(&location, &config).unwrap(), location)
}

/// Streams `data` as the backup does: parts of `part_size`, up to two in
/// flight.
async fn upload(
    store: &Store,
    location: &Location,
    data: &[u8],
    part_size: usize,
) -> Result<(), object_store::Error> {
    let upload = store.start_multipart(location.path()).await.unwrap();
    let mut writer = WriteMultipart::new_with_chunk_size(upload, part_size);
    for piece in data.chunks(100_000) {
        if let Err(e) = writer.wait_for_capacity(2).await {
            writer.abort().await?;
            return Err(e);
        }
        writer.write(piece);
    }
    writer.finish().await.map(|_| ())
}

fn chunk_puts(server: &Mutex<Server>) -> Vec<String> {
    let server = server.lock().unwrap();
    server
        .log
        .iter()
        .filter(|line| line.starts_with("PUT "))
        .map(|line| line.splitn(3, ' ').nth(2).unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_go_in_order_in_256_kib_multiples_and_the_last_with_the_total() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (store, location) = store_on(&server).await;
    // Parts of 1 MiB and a bit, which are no multiple of 256 KiB: their
    // tails are carried into the next chunk.
    let data = content(7, 6 * 1024 * 1024 + 12_345);
    upload(&store, &location, &data, 1024 * 1024 + 1000)
        .await
        .unwrap();
    let state = server.lock().unwrap();
    assert_eq!(state.violations, Vec::<String>::new());
    assert_eq!(state.objects.get("backups/a b+c.db"), Some(&data));
    drop(state);
    let ranges = chunk_puts(&server);
    assert_eq!(
        ranges,
        vec![
            "0-1048575/*",
            "1048576-2097151/*",
            "2097152-3145727/*",
            "3145728-4194303/*",
            "4194304-5242879/*",
            "5242880-6291455/*",
            &format!("6291456-{}/{}", data.len() - 1, data.len()),
        ]
        .into_iter()
        .map(|r| format!("bytes {r}"))
        .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn an_object_that_fits_one_part_is_one_final_chunk_and_an_empty_one_too() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (store, location) = store_on(&server).await;
    upload(&store, &location, b"tiny", 1024 * 1024)
        .await
        .unwrap();
    assert_eq!(chunk_puts(&server), vec!["bytes 0-3/4"]);
    upload(&store, &location, b"", 1024 * 1024).await.unwrap();
    assert_eq!(chunk_puts(&server)[1], "bytes */0");
    let state = server.lock().unwrap();
    assert_eq!(state.objects.get("backups/a b+c.db"), Some(&Vec::new()));
}

/// A chunk the server kept only part of before failing is resumed from
/// what a status query reports; a failure without anything kept is sent
/// again whole.
#[tokio::test]
async fn a_failed_chunk_resumes_from_what_the_server_holds() {
    let server = Arc::new(Mutex::new(Server::default()));
    server.lock().unwrap().faults = [
        (2, Fault::KeepThen503(CHUNK_ALIGNMENT)),
        (3, Fault::Status(500)),
        (6, Fault::Status(429)),
    ]
    .into();
    let (store, location) = store_on(&server).await;
    let data = content(8, 3 * 1024 * 1024 + 5);
    upload(&store, &location, &data, 1024 * 1024).await.unwrap();
    let state = server.lock().unwrap();
    assert_eq!(state.violations, Vec::<String>::new());
    assert_eq!(state.objects.get("backups/a b+c.db"), Some(&data));
    drop(state);
    let total = data.len();
    assert_eq!(
        chunk_puts(&server),
        vec![
            "bytes 0-1048575/*".to_owned(),
            "bytes 1048576-2097151/*".to_owned(),
            "bytes */*".to_owned(),
            "bytes 1310720-2097151/*".to_owned(),
            "bytes */*".to_owned(),
            "bytes 1310720-2097151/*".to_owned(),
            "bytes 2097152-3145727/*".to_owned(),
            format!("bytes 3145728-{}/{total}", total - 1),
            format!("bytes */{total}"),
            format!("bytes 3145728-{}/{total}", total - 1),
        ]
    );
}

#[tokio::test]
async fn a_chunk_that_keeps_failing_is_reported_after_bounded_attempts() {
    let server = Arc::new(Mutex::new(Server::default()));
    server.lock().unwrap().faults = (1..=20).map(|n| (n, Fault::Status(503))).collect();
    let (store, location) = store_on(&server).await;
    let data = content(9, 3 * 1024 * 1024);
    let err = upload(&store, &location, &data, 1024 * 1024)
        .await
        .unwrap_err();
    let text = crate::store::error_chain(&err);
    assert!(text.contains("503") && text.contains("6 attempt"), "{text}");
    let state = server.lock().unwrap();
    assert_eq!(state.chunk_puts, ATTEMPTS as usize, "{:?}", state.log);
    assert_eq!(state.cancelled, vec!["s1"], "the session is cancelled");
    assert!(state.objects.is_empty());
}

#[tokio::test]
async fn a_refused_chunk_is_not_retried_and_reads_as_access_denied() {
    let server = Arc::new(Mutex::new(Server::default()));
    server.lock().unwrap().faults = [(1, Fault::Status(403))].into();
    let (store, location) = store_on(&server).await;
    let data = content(10, 2 * 1024 * 1024);
    let err = upload(&store, &location, &data, 1024 * 1024)
        .await
        .unwrap_err();
    let err = store.error("multipart upload", location.path(), &err);
    assert_eq!(kind_of(&err), Some(StoreErrorKind::AccessDenied), "{err}");
    assert_eq!(server.lock().unwrap().chunk_puts, 1);
}

#[tokio::test]
async fn small_objects_are_one_media_upload() {
    let server = Arc::new(Mutex::new(Server::default()));
    let (store, location) = store_on(&server).await;
    store
        .put_small(location.path(), Bytes::from_static(b"{\"a\":1}"))
        .await
        .unwrap();
    let state = server.lock().unwrap();
    assert_eq!(state.log, vec!["POST /upload/storage/v1/b/bkt/o"]);
    assert_eq!(
        state.objects.get("backups/a b+c.db").map(Vec::as_slice),
        Some(&b"{\"a\":1}"[..])
    );
}

#[tokio::test]
async fn a_missing_bucket_reads_as_not_found() {
    let server = Arc::new(Mutex::new(Server::default()));
    let host = serve(Arc::clone(&server)).await;
    let location = Location::parse("gs://other-bucket/x.json").unwrap();
    let config = StoreConfig {
        gcs: GcsOptions {
            emulator_host: Some(host),
        },
        ..StoreConfig::default()
    };
    let store = Store::open(&location, &config).unwrap();
    let err = store
        .put_small(location.path(), Bytes::from_static(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(kind_of(&err), Some(StoreErrorKind::NotFound), "{err}");
    let err = store.start_multipart(location.path()).await.unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
}
