//! WATCH: event order, selector enter/leave, bookmarks, streaming lists, expiry, timeouts.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;

use super::common::*;

fn label_patch(tier: &str) -> Patch<serde_json::Value> {
    Patch::Merge(json!({"metadata": {"labels": {"tier": tier}}}))
}

async fn next(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("event in time")
        .expect("stream open")
        .expect("event decodes")
}

fn describe(e: &WatchEvent<ConfigMap>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.clone().unwrap_or_default()),
        WatchEvent::Modified(o) => {
            format!("MODIFIED {}", o.metadata.name.clone().unwrap_or_default())
        }
        WatchEvent::Deleted(o) => {
            format!("DELETED {}", o.metadata.name.clone().unwrap_or_default())
        }
        WatchEvent::Bookmark(_) => "BOOKMARK".into(),
        WatchEvent::Error(e) => format!("ERROR {}", e.code),
    }
}

#[tokio::test]
async fn events_arrive_in_order_from_a_resource_version() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    configmap(&env, "a", json!({})).await;
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await
    .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let got: Vec<String> = vec![
        describe(&next(&mut stream).await),
        describe(&next(&mut stream).await),
        describe(&next(&mut stream).await),
    ];
    assert_eq!(got, ["ADDED a", "MODIFIED a", "DELETED a"]);
}

#[tokio::test]
async fn watch_without_version_starts_with_synthetic_adds() {
    let env = env().await;
    configmap(&env, "one", json!({})).await;
    configmap(&env, "two", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next(&mut stream).await), "ADDED one");
    assert_eq!(describe(&next(&mut stream).await), "ADDED two");
}

#[tokio::test]
async fn objects_entering_and_leaving_a_selector_are_added_and_deleted() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    configmap(&env, "s", json!({})).await;
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().labels("tier=web"), &rv)
        .await
        .unwrap()
        .boxed();
    api.patch("s", &PatchParams::default(), &label_patch("web"))
        .await
        .unwrap();
    api.patch(
        "s",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    api.patch("s", &PatchParams::default(), &label_patch("db"))
        .await
        .unwrap();
    assert_eq!(describe(&next(&mut stream).await), "ADDED s");
    assert_eq!(describe(&next(&mut stream).await), "MODIFIED s");
    let leave = next(&mut stream).await;
    assert_eq!(describe(&leave), "DELETED s");
    // The object sent on leaving is the last state that matched.
    if let WatchEvent::Deleted(o) = leave {
        assert_eq!(o.metadata.labels.unwrap()["tier"], "web");
    }
}

#[tokio::test]
async fn bookmarks_are_sent_when_requested() {
    let env = kube_local::Environment::builder()
        .bookmark_interval(Duration::from_millis(100))
        .build()
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(
            &WatchParams {
                bookmarks: true,
                ..Default::default()
            },
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    match next(&mut stream).await {
        WatchEvent::Bookmark(b) => assert!(!b.metadata.resource_version.is_empty()),
        other => panic!("expected a bookmark, got {}", describe(&other)),
    }
}

#[tokio::test]
async fn streaming_list_sends_adds_then_initial_events_end_bookmark() {
    let env = env().await;
    configmap(&env, "x", json!({})).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut stream = api
        .watch(&WatchParams::streaming_lists(), "")
        .await
        .unwrap()
        .boxed();
    assert_eq!(describe(&next(&mut stream).await), "ADDED x");
    match next(&mut stream).await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        other => panic!(
            "expected the initial-events-end bookmark, got {}",
            describe(&other)
        ),
    }
}

#[tokio::test]
async fn send_initial_events_without_not_older_than_is_422() {
    let env = env().await;
    let (code, _, body) = raw(&env, "GET", "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&allowWatchBookmarks=true", None, None).await;
    assert_eq!(code, 422, "{body}");
}

#[tokio::test]
async fn watch_from_compacted_version_is_200_with_one_410_error_event() {
    let env = env().await;
    configmap(&env, "old", json!({})).await;
    let (_, _, list) = raw(
        &env,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        None,
        None,
    )
    .await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    configmap(&env, "newer", json!({})).await;
    env.compact();
    let (code, _, body) = raw(
        &env,
        "GET",
        &format!(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=2"
        ),
        None,
        None,
    )
    .await;
    assert_eq!(code, 200);
    let text = body
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| body.to_string());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    let event: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(event["type"], "ERROR");
    assert_eq!(event["object"]["code"], 410);
    assert_eq!(event["object"]["reason"], "Expired");
}

#[tokio::test]
async fn watcher_recovers_from_expiry_by_relisting() {
    // With two changes of history, a burst of three deletions (one deletecollection request) leaves the
    // live watch behind the history: the server ends it with a 410 ERROR event and the watcher must relist.
    let env = kube_local::Environment::builder()
        .watch_history(2)
        .build()
        .await
        .unwrap();
    for n in ["a", "b", "c"] {
        configmap(&env, n, json!({})).await;
    }
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut inits = 0;
    let mut current = std::collections::BTreeSet::new();
    let mut expired = 0;
    loop {
        let item = tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("watcher event in time")
            .expect("stream open");
        let ev = match item {
            Ok(ev) => ev,
            // The watcher reports the 410 and relists on the next poll.
            Err(watcher::Error::WatchError(s)) if s.code == 410 => {
                expired += 1;
                continue;
            }
            Err(e) => panic!("unexpected watcher error {e:?}"),
        };
        match ev {
            watcher::Event::Init => {
                inits += 1;
                current.clear();
            }
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                current.insert(o.metadata.name.unwrap());
            }
            watcher::Event::Delete(o) => {
                current.remove(&o.metadata.name.unwrap());
            }
            watcher::Event::InitDone => {
                if inits == 1 {
                    assert_eq!(current.len(), 3);
                    api.delete_collection(&DeleteParams::default(), &ListParams::default())
                        .await
                        .unwrap();
                } else {
                    assert!(current.is_empty(), "{current:?}");
                    configmap(&env, "latest", json!({})).await;
                }
            }
        }
        if current.contains("latest") {
            break;
        }
    }
    assert_eq!(expired, 1);
    assert_eq!(inits, 2, "the watcher relisted after the 410");
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    let env = env().await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(
            &WatchParams {
                bookmarks: false,
                ..WatchParams::default().timeout(1)
            },
            &rv,
        )
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(4), stream.next())
        .await
        .expect("stream ends within the timeout");
    assert!(end.is_none(), "{:?}", end.map(|e| e.map(|e| describe(&e))));
}
