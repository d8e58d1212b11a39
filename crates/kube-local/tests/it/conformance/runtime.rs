//! kube-runtime against kube-local: Leases, the event Recorder, and a Controller with `owns()` and `finalizer()`.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{CustomResource, CustomResourceExt, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::common::*;

#[tokio::test]
async fn lease_updates_with_stale_versions_conflict() {
    let env = env().await;
    let api: Api<Lease> = Api::namespaced(env.client(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}})).unwrap();
    let created = api.create(&PostParams::default(), &lease).await.unwrap();
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    api.replace("leader", &PostParams::default(), &mine)
        .await
        .unwrap();
    let mut theirs = created;
    theirs.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let (code, reason, _) = api_status(
        api.replace("leader", &PostParams::default(), &theirs)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert_eq!(
        api.get("leader")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("b")
    );
}

#[tokio::test]
async fn recorder_events_are_visible_through_core_v1() {
    let env = env().await;
    let cm = configmap(&env, "target", json!({})).await;
    let recorder = Recorder::new(
        env.client(),
        Reporter {
            controller: "test-controller".into(),
            instance: Some("i-1".into()),
        },
    );
    let reference = cm.object_ref(&());
    let ev = Event {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("all good".into()),
        action: "Sync".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events: Api<CoreEvent> = Api::namespaced(env.client(), "default");
    let found = events
        .list(
            &ListParams::default()
                .fields("involvedObject.name=target,involvedObject.kind=ConfigMap"),
        )
        .await
        .unwrap();
    assert_eq!(found.items.len(), 1);
    let e = &found.items[0];
    assert_eq!(e.message.as_deref(), Some("all good"));
    assert_eq!(e.reason.as_deref(), Some("Synced"));
    assert_eq!(e.reporting_component.as_deref(), Some("test-controller"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    let none = events
        .list(&ListParams::default().fields("involvedObject.name=other"))
        .await
        .unwrap();
    assert!(none.items.is_empty());
}

#[tokio::test]
async fn kubectl_describe_shows_events() {
    let env = env().await;
    let cm = configmap(&env, "described", json!({"k": "v"})).await;
    let recorder = Recorder::new(
        env.client(),
        Reporter {
            controller: "test-controller".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Warning,
        reason: "Broken".into(),
        note: Some("something failed".into()),
        action: "Check".into(),
        secondary: None,
    };
    recorder.publish(&ev, &cm.object_ref(&())).await.unwrap();
    let out = kubectl(&env, &["describe", "configmap", "described"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let events = text.split("Events:").nth(1).unwrap_or("");
    let row = events
        .lines()
        .find(|l| l.contains("Broken"))
        .unwrap_or_else(|| panic!("{text}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[0], "Warning");
    assert!(
        row.contains("test-controller") && row.contains("something failed"),
        "{row}"
    );
}

#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    pub color: String,
}

#[derive(Deserialize, Serialize, Clone, Debug, Default, JsonSchema)]
pub struct WidgetStatus {
    pub ready: bool,
}

#[derive(Debug, thiserror::Error)]
enum ReconcileError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

struct Ctx {
    client: kube::Client,
    cleanups: std::sync::atomic::AtomicUsize,
}

const FINALIZER: &str = "example.com/cleanup";

async fn reconcile(
    w: Arc<Widget>,
    ctx: Arc<Ctx>,
) -> Result<Action, kube::runtime::finalizer::Error<ReconcileError>> {
    let ns = w.namespace().unwrap_or_default();
    let widgets: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&widgets, FINALIZER, w, |event| async {
        match event {
            Finalizer::Apply(w) => {
                let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(format!("{}-color", w.name_any())),
                        owner_references: Some(vec![w.controller_owner_ref(&()).unwrap()]),
                        ..Default::default()
                    },
                    data: Some([("color".to_string(), w.spec.color.clone())].into()),
                    ..Default::default()
                };
                cms.patch(
                    &cm.name_any(),
                    &PatchParams::apply("widget-controller").force(),
                    &Patch::Apply(&cm),
                )
                .await?;
                widgets
                    .patch_status(
                        &w.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"status": {"ready": true}})),
                    )
                    .await?;
                Ok(Action::await_change())
            }
            Finalizer::Cleanup(_) => {
                ctx.cleanups
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(Action::await_change())
            }
        }
    })
    .await
}

fn error_policy(
    _: Arc<Widget>,
    _: &kube::runtime::finalizer::Error<ReconcileError>,
    _: Arc<Ctx>,
) -> Action {
    Action::requeue(Duration::from_millis(50))
}

async fn until<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test]
async fn controller_with_owns_and_finalizer_converges() {
    let env = kube_local::Environment::builder()
        .crds(vec![Widget::crd()])
        .build()
        .await
        .unwrap();
    let client = env.client();
    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        cleanups: Default::default(),
    });
    let controller = tokio::spawn(
        Controller::new(Api::<Widget>::all(client.clone()), Default::default())
            .owns(Api::<ConfigMap>::all(client.clone()), Default::default())
            .run(reconcile, error_policy, ctx.clone())
            .for_each(|_| async {}),
    );
    widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w",
                WidgetSpec {
                    color: "blue".into(),
                },
            ),
        )
        .await
        .unwrap();
    until("configmap and status", || async {
        let ready = widgets
            .get("w")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.ready);
        ready && cms.get_opt("w-color").await.unwrap().is_some()
    })
    .await;
    let w = widgets.get("w").await.unwrap();
    assert_eq!(w.finalizers(), [FINALIZER.to_string()]);
    // The owned ConfigMap is repaired when changed behind the controller's back.
    cms.patch(
        "w-color",
        &PatchParams::apply("intruder").force(),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"color": "red"}})),
    )
    .await
    .unwrap();
    until("owned configmap repaired", || async {
        cms.get("w-color")
            .await
            .unwrap()
            .data
            .unwrap_or_default()
            .get("color")
            .map(String::as_str)
            == Some("blue")
    })
    .await;
    widgets.delete("w", &DeleteParams::default()).await.unwrap();
    until("widget deleted after cleanup", || async {
        widgets.get_opt("w").await.unwrap().is_none()
    })
    .await;
    assert_eq!(ctx.cleanups.load(std::sync::atomic::Ordering::SeqCst), 1);
    until("owned configmap collected", || async {
        cms.get_opt("w-color").await.unwrap().is_none()
    })
    .await;
    controller.abort();
}
