//! Kubernetes Events (`events.k8s.io/v1`) from the operator's controllers.
//!
//! An Event that repeats within [`SERIES_WINDOW`] (same type, action and
//! reason about the same objects, from the same controller) is not created
//! again: the first one's `series` is patched with the new count and time,
//! as kube-apiserver's own clients do, so a fault that recurs every pass
//! shows as one Event with a count instead of a flood.
//!
//! kube-runtime's `Recorder` does the same but keeps every Event it sent, in
//! full, for six minutes: with a thousand clusters that was the operator's
//! third-largest heap item (bench/heap-profile.sh). This recorder keeps only
//! what a repeat needs: a hash of the Event's identity, the name it was
//! created under, the count and the time.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};

pub use kube::runtime::events::{Event, EventType, Reporter};

/// How long after its last occurrence a repeat still joins an Event's
/// series (kube-runtime and client-go use the same).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Publishes Events; cheap to clone (clones share the series memory).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    series: Arc<Mutex<Series>>,
}

impl Recorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        Self {
            client,
            reporter,
            series: Arc::default(),
        }
    }

    /// Creates `event` about `regarding`, or counts it into the series of
    /// the same Event sent within [`SERIES_WINDOW`].
    ///
    /// The Event goes into `regarding`'s namespace (`default` for a
    /// cluster-scoped object); the operator needs `create` and `patch` on
    /// `events.k8s.io` events there.
    pub async fn publish(&self, event: &Event, regarding: &ObjectReference) -> kube::Result<()> {
        let now = Timestamp::now();
        let key = self.key(event, regarding);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let repeat = self.series().repeat(key, now);
        if let Some(Repeat { name, count }) = &repeat {
            let patch = serde_json::json!({
                "series": {"count": count, "lastObservedTime": MicroTime(now)},
            });
            match events
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // The first Event is gone (Events expire after an hour
                // on kube-apiserver's default): start again.
                Err(kube::Error::Api(status)) if status.is_not_found() => {
                    self.series().forget(key);
                }
                Err(err) => {
                    // Not counted: the next repeat tries the same count again.
                    self.series().uncount(key);
                    return Err(err);
                }
            }
        }
        let created = self.event(event, regarding, now);
        let name = created.metadata.name.clone().unwrap_or_default();
        events.create(&PostParams::default(), &created).await?;
        self.series().remember(key, name, now);
        Ok(())
    }

    /// [`Self::publish`], logging a failure: an Event that could not be
    /// sent never fails the work it reports on.
    pub async fn publish_or_warn(&self, event: &Event, regarding: &ObjectReference) {
        if let Err(err) = self.publish(event, regarding).await {
            let name = regarding.name.as_deref().unwrap_or_default();
            tracing::warn!(%name, reason = %event.reason, error = %err, "failed to publish event");
        }
    }

    fn series(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What makes two Events the same occurrence: who reports, what kind of
    /// thing happened and to which objects (not the note: a repeat's note
    /// may differ in detail, the first one's is kept).
    fn key(&self, event: &Event, regarding: &ObjectReference) -> u64 {
        let identity = |r: &ObjectReference| {
            (
                r.api_version.clone(),
                r.kind.clone(),
                r.namespace.clone(),
                r.name.clone(),
                r.uid.clone(),
            )
        };
        let mut hasher = DefaultHasher::new();
        (
            matches!(event.type_, EventType::Warning),
            &event.action,
            &event.reason,
            &self.reporter.controller,
            &self.reporter.instance,
            identity(regarding),
            event.secondary.as_ref().map(identity),
        )
            .hash(&mut hasher);
        hasher.finish()
    }

    fn event(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> K8sEvent {
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: event.note.clone(),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            related: event.secondary.clone(),
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            ..K8sEvent::default()
        }
    }
}

/// The Events sent recently, by identity.
#[derive(Debug, Default)]
struct Series {
    recent: HashMap<u64, Recent>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Recent {
    /// The name the first Event was created under.
    name: String,
    /// Occurrences so far, the first included.
    count: i32,
    last: Timestamp,
}

/// A repeat of a recent Event: patch `name`'s series to `count`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Repeat {
    name: String,
    count: i32,
}

impl Series {
    /// Forgets what is older than the window, then counts `key` in if it
    /// was sent within it.
    fn repeat(&mut self, key: u64, now: Timestamp) -> Option<Repeat> {
        self.recent.retain(|_, r| r.last + SERIES_WINDOW > now);
        let recent = self.recent.get_mut(&key)?;
        recent.count = recent.count.saturating_add(1);
        recent.last = now;
        Some(Repeat {
            name: recent.name.clone(),
            count: recent.count,
        })
    }

    /// Takes back the count [`Series::repeat`] added (its patch failed).
    fn uncount(&mut self, key: u64) {
        if let Some(recent) = self.recent.get_mut(&key) {
            recent.count = recent.count.saturating_sub(1).max(1);
        }
    }

    fn forget(&mut self, key: u64) {
        self.recent.remove(&key);
    }

    fn remember(&mut self, key: u64, name: String, now: Timestamp) {
        self.recent.insert(
            key,
            Recent {
                name,
                count: 1,
                last: now,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_repeat_within_the_window_counts_into_the_first_events_series() {
        let mut series = Series::default();
        assert_eq!(series.repeat(7, at(0)), None);
        series.remember(7, "orders.1".into(), at(0));
        assert_eq!(
            series.repeat(7, at(60)),
            Some(Repeat {
                name: "orders.1".into(),
                count: 2,
            })
        );
        // The window runs from the last occurrence, not the first.
        assert_eq!(series.repeat(7, at(60 + 5 * 60)).unwrap().count, 3);
        // Another identity is another Event.
        assert_eq!(series.repeat(8, at(400)), None);
    }

    #[test]
    fn after_the_window_an_event_starts_again_and_is_forgotten() {
        let mut series = Series::default();
        series.remember(7, "orders.1".into(), at(0));
        assert_eq!(series.repeat(7, at(6 * 60)), None);
        assert!(series.recent.is_empty(), "expired entries are dropped");
    }

    #[test]
    fn a_failed_patch_takes_its_count_back() {
        let mut series = Series::default();
        series.remember(7, "orders.1".into(), at(0));
        assert_eq!(series.repeat(7, at(1)).unwrap().count, 2);
        series.uncount(7);
        assert_eq!(series.repeat(7, at(2)).unwrap().count, 2);
        series.forget(7);
        assert_eq!(series.repeat(7, at(3)), None);
    }
}
