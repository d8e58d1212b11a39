//! WATCH streams: newline-delimited JSON events with synthetic initial ADDEDs, selector enter/leave, bookmarks, expiry and timeouts.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::api_error::{ApiError, ApiResult, FieldCause};
use crate::core::Core;
use crate::list::parse_rv;
use crate::meta;
use crate::output::{self, Format};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Change, ChangeKind};

#[derive(Debug, Clone, Default)]
pub struct WatchQuery {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
    pub send_initial_events: Option<bool>,
}

pub struct WatchSettings {
    pub bookmark_interval: Duration,
    pub shutdown: tokio::sync::watch::Receiver<bool>,
}

fn forbidden(field: &str, why: &str) -> ApiError {
    ApiError::invalid_list_options(FieldCause::forbidden(field, why))
}

/// Checks done before the 200 is sent (they are proper HTTP errors).
pub fn validate(q: &WatchQuery) -> ApiResult<()> {
    if q.send_initial_events.is_some() {
        if q.resource_version_match.as_deref() != Some("NotOlderThan") {
            return Err(forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless resourceVersionMatch is set to NotOlderThan",
            ));
        }
        if !q.bookmarks {
            return Err(forbidden(
                "allowWatchBookmarks",
                "allowWatchBookmarks must be set to true when sendInitialEvents is set",
            ));
        }
    } else if q
        .resource_version_match
        .as_deref()
        .is_some_and(|m| !m.is_empty())
    {
        return Err(forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    if let Some(rv) = q.resource_version.as_deref().filter(|r| !r.is_empty()) {
        parse_rv(rv)?;
    }
    Ok(())
}

struct Emitter {
    core: Arc<Core>,
    rt: Arc<ResourceType>,
    format: Format,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
}

impl Emitter {
    async fn send(&self, kind: &str, object: Value) -> bool {
        let mut line = json!({"type": kind, "object": object}).to_string();
        line.push('\n');
        self.tx.send(Ok(Bytes::from(line))).await.is_ok()
    }

    /// Sends one object event; a failing conversion webhook ends the watch with an ERROR event, as upstream's
    /// watch does when it cannot decode an object.
    async fn object(&self, kind: &str, stored: &Value) -> bool {
        match self
            .core
            .served_all(&self.rt, vec![stored.clone()], false)
            .await
            .map(|mut v| v.pop())
        {
            Ok(Some(view)) => {
                self.send(kind, output::object(self.format, &self.rt, view))
                    .await
            }
            Ok(None) => false,
            Err(e) => {
                let _ = self.send("ERROR", e.to_status()).await;
                false
            }
        }
    }

    async fn bookmark(&self, rv: u64, initial_end: bool) -> bool {
        let mut metadata = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = match self.format {
            Format::Object => {
                json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": metadata})
            }
            Format::Metadata => {
                json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata})
            }
            Format::Table(_) => {
                json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": [], "rows": []})
            }
        };
        self.send("BOOKMARK", obj).await
    }
}

fn matches(q: &WatchQuery, obj: &Value) -> bool {
    q.namespace
        .as_deref()
        .is_none_or(|ns| meta::namespace(obj) == ns)
        && q.labels.matches(obj)
        && q.fields.matches(obj)
}

/// Starts the event pump; the returned receiver feeds the response body.
pub fn start(
    core: Arc<Core>,
    rt: Arc<ResourceType>,
    format: Format,
    q: WatchQuery,
    settings: WatchSettings,
) -> mpsc::Receiver<Result<Bytes, std::io::Error>> {
    let (tx, rx) = mpsc::channel(256);
    tokio::spawn(async move {
        let emitter = Emitter {
            core: core.clone(),
            rt: rt.clone(),
            format,
            tx,
        };
        run(core, emitter, q, settings).await;
    });
    rx
}

async fn run(core: Arc<Core>, out: Emitter, q: WatchQuery, mut settings: WatchSettings) {
    let deadline = q.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut latest = core.store.subscribe();
    let rv_param = q.resource_version.clone().filter(|r| !r.is_empty());
    let initial = q.send_initial_events == Some(true)
        || rv_param.is_none()
        || rv_param.as_deref() == Some("0");
    let mut last = if initial {
        let snap = core.store.list(&out.rt.storage, q.namespace.as_deref());
        for o in snap.objects.iter().filter(|o| matches(&q, o)) {
            if !out.object("ADDED", o).await {
                return;
            }
        }
        if q.send_initial_events == Some(true) && !out.bookmark(snap.rv, true).await {
            return;
        }
        snap.rv
    } else {
        rv_param
            .as_deref()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    };
    let storage = out.rt.storage.clone();
    let ns = q.namespace.clone();
    loop {
        let result = core.store.changes_since(last, |c: &Change| {
            c.key.storage == storage && ns.as_deref().is_none_or(|n| c.key.namespace == n)
        });
        match result {
            Err(e) => {
                let status = ApiError::expired(format!(
                    "too old resource version: {} ({})",
                    e.requested, e.oldest
                ))
                .to_status();
                let _ = out.send("ERROR", status).await;
                return;
            }
            Ok((changes, now)) => {
                for c in changes {
                    let now_matches = matches(&q, &c.object);
                    let before = c.prev.as_ref().is_some_and(|p| matches(&q, p));
                    let sent = match c.kind {
                        ChangeKind::Added if now_matches => out.object("ADDED", &c.object).await,
                        ChangeKind::Modified if now_matches && before => {
                            out.object("MODIFIED", &c.object).await
                        }
                        ChangeKind::Modified if now_matches => out.object("ADDED", &c.object).await,
                        ChangeKind::Modified if before => {
                            let mut prev =
                                c.prev.as_ref().map(|p| (**p).clone()).unwrap_or_default();
                            meta::set_meta(&mut prev, "resourceVersion", json!(c.rv.to_string()));
                            out.object("DELETED", &prev).await
                        }
                        ChangeKind::Deleted if before => out.object("DELETED", &c.object).await,
                        _ => true,
                    };
                    if !sent {
                        return;
                    }
                }
                last = now;
            }
        }
        let bookmark_timer = tokio::time::sleep(settings.bookmark_interval);
        tokio::select! {
            changed = latest.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = sleep_until_opt(deadline) => return,
            _ = bookmark_timer, if q.bookmarks => {
                if !out.bookmark(last, false).await {
                    return;
                }
            }
            _ = settings.shutdown.changed() => return,
            _ = out.tx.closed() => return,
        }
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
