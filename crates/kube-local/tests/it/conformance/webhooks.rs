//! Admission webhooks served over HTTPS by the test, with a caBundle from kube-local's CA helper.

use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::common::*;

type Handler = fn(&str, &Value) -> Value;

/// Answers a whole review (the request path and body) with a whole response body.
pub type Respond = Arc<dyn Fn(&str, &Value) -> Value + Send + Sync>;

pub struct WebhookServer {
    pub url: String,
    pub ca_bundle: String,
    pub reviews: Arc<Mutex<Vec<(String, Value)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub fn b64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// An admission webhook: `handler` answers the AdmissionReview's request with its response.
async fn webhook_server(handler: Handler) -> WebhookServer {
    https_server(Arc::new(move |path: &str, review: &Value| {
        let mut response = handler(path, &review["request"]);
        response["uid"] = review["request"]["uid"].clone();
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
    }))
    .await
}

/// An HTTPS server with a certificate from its own CA (`ca_bundle`) that records every review it receives.
pub async fn https_server(respond: Respond) -> WebhookServer {
    let ca = kube_local::tls::CertificateAuthority::new("webhook-ca").unwrap();
    let issued = ca.issue(&["127.0.0.1", "localhost"]).unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(issued.server_config().unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reviews: Arc<Mutex<Vec<(String, Value)>>> = Arc::default();
    let recorded = reviews.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let recorded = recorded.clone();
            let respond = respond.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let recorded = recorded.clone();
                        let respond = respond.clone();
                        async move {
                            let path = req.uri().path().to_string();
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let review: Value = serde_json::from_slice(&body).unwrap();
                            recorded
                                .lock()
                                .unwrap()
                                .push((path.clone(), review.clone()));
                            let answer = respond(&path, &review);
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from(answer.to_string()),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    WebhookServer {
        url: format!("https://{addr}"),
        ca_bundle: b64(ca.ca_pem().as_bytes()),
        reviews,
        task,
    }
}

fn policy(request: &Value) -> Value {
    if request["object"]["data"].get("forbidden").is_some() {
        json!({"allowed": false, "status": {"code": 403, "reason": "Forbidden", "message": "the key \"forbidden\" is not allowed"}})
    } else {
        json!({"allowed": true, "warnings": ["checked by policy"]})
    }
}

fn handler(path: &str, request: &Value) -> Value {
    match path {
        "/validate" => policy(request),
        "/mutate" => {
            let patch =
                json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]);
            json!({"allowed": true, "patchType": "JSONPatch", "patch": b64(patch.to_string().as_bytes())})
        }
        _ => json!({"allowed": false}),
    }
}

async fn register(env: &kube_local::Environment, kind: &str, hook: Value) {
    let plural = if kind == "ValidatingWebhookConfiguration" {
        "validatingwebhookconfigurations"
    } else {
        "mutatingwebhookconfigurations"
    };
    let (code, _, body) = raw(
        env,
        "POST",
        &format!("/apis/admissionregistration.k8s.io/v1/{plural}"),
        Some("application/json"),
        Some(json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": format!("{}-config", hook["name"].as_str().unwrap())}, "webhooks": [hook]})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
}

fn hook(name: &str, server: &WebhookServer, path: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": format!("{}{path}", server.url), "caBundle": server.ca_bundle},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"]
    })
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

#[tokio::test]
async fn validating_webhook_denial_reaches_the_client() {
    let env = env().await;
    let server = webhook_server(handler).await;
    register(
        &env,
        "ValidatingWebhookConfiguration",
        hook("policy.example.com", &server, "/validate"),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let err = api
        .create(
            &PostParams::default(),
            &cm("bad", json!({"forbidden": "x"})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error")
    };
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        "admission webhook \"policy.example.com\" denied the request: the key \"forbidden\" is not allowed"
    );
    api.create(&PostParams::default(), &cm("good", json!({"ok": "x"})))
        .await
        .unwrap();
    let reviews = server.reviews.lock().unwrap().clone();
    assert_eq!(reviews.len(), 2);
    let request = &reviews[1].1["request"];
    assert_eq!(reviews[1].1["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(request["operation"], "CREATE");
    assert_eq!(
        request["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        request["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(request["namespace"], "default");
    assert_eq!(request["name"], "good");
    assert_eq!(request["object"]["data"]["ok"], "x");
    assert!(request["oldObject"].is_null());
    assert_eq!(request["uid"].as_str().unwrap().len(), 36);
}

#[tokio::test]
async fn validating_webhook_sees_updates_with_old_object_and_its_warnings_are_returned() {
    let env = env().await;
    let server = webhook_server(handler).await;
    configmap(&env, "c", json!({"v": "1"})).await;
    register(
        &env,
        "ValidatingWebhookConfiguration",
        hook("policy.example.com", &server, "/validate"),
    )
    .await;
    let (code, headers, _) = raw(
        &env,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/c",
        Some("application/merge-patch+json"),
        Some(json!({"data": {"v": "2"}})),
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(headers["warning"], "299 - \"checked by policy\"");
    let reviews = server.reviews.lock().unwrap().clone();
    let request = &reviews[0].1["request"];
    assert_eq!(request["operation"], "UPDATE");
    assert_eq!(request["oldObject"]["data"]["v"], "1");
    assert_eq!(request["object"]["data"]["v"], "2");
}

#[tokio::test]
async fn mutating_webhook_patches_are_applied() {
    let env = env().await;
    let server = webhook_server(handler).await;
    register(
        &env,
        "MutatingWebhookConfiguration",
        hook("label.example.com", &server, "/mutate"),
    )
    .await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let created = api
        .create(&PostParams::default(), &cm("m", json!({})))
        .await
        .unwrap();
    assert_eq!(created.metadata.labels.unwrap()["mutated"], "yes");
}

#[tokio::test]
async fn object_selector_limits_which_objects_are_sent() {
    let env = env().await;
    let server = webhook_server(handler).await;
    let mut h = hook("policy.example.com", &server, "/validate");
    h["objectSelector"] = json!({"matchLabels": {"checked": "true"}});
    register(&env, "ValidatingWebhookConfiguration", h).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(
        &PostParams::default(),
        &cm("unchecked", json!({"forbidden": "x"})),
    )
    .await
    .unwrap();
    let mut checked = cm("checked", json!({"forbidden": "x"}));
    checked.metadata.labels = Some([("checked".to_string(), "true".to_string())].into());
    assert!(api.create(&PostParams::default(), &checked).await.is_err());
    assert_eq!(server.reviews.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn failure_policy_decides_on_unreachable_webhooks() {
    let env = env().await;
    let server = webhook_server(handler).await;
    let mut ignored = hook("ignored.example.com", &server, "/validate");
    ignored["clientConfig"]["url"] = json!("https://127.0.0.1:1/validate");
    ignored["failurePolicy"] = json!("Ignore");
    register(&env, "ValidatingWebhookConfiguration", ignored).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    api.create(&PostParams::default(), &cm("passes", json!({})))
        .await
        .unwrap();
    let mut failing = hook("failing.example.com", &server, "/validate");
    failing["clientConfig"]["url"] = json!("https://127.0.0.1:1/validate");
    register(&env, "ValidatingWebhookConfiguration", failing).await;
    let (code, reason, message) = api_status(
        api.create(&PostParams::default(), &cm("fails", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert!(
        message.contains("failed calling webhook \"failing.example.com\""),
        "{message}"
    );
}

#[tokio::test]
async fn untrusted_certificates_fail_the_call() {
    let env = env().await;
    let server = webhook_server(handler).await;
    let mut h = hook("policy.example.com", &server, "/validate");
    let other_ca = kube_local::tls::CertificateAuthority::new("other").unwrap();
    h["caBundle"] = json!(null);
    h["clientConfig"]["caBundle"] = json!(b64(other_ca.ca_pem().as_bytes()));
    register(&env, "ValidatingWebhookConfiguration", h).await;
    let api: Api<ConfigMap> = Api::namespaced(env.client(), "default");
    let (code, _, _) = api_status(
        api.create(&PostParams::default(), &cm("x", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 500);
    assert!(server.reviews.lock().unwrap().is_empty());
}

#[tokio::test]
async fn kubectl_shows_the_denial() {
    let env = env().await;
    let server = webhook_server(handler).await;
    register(
        &env,
        "ValidatingWebhookConfiguration",
        hook("policy.example.com", &server, "/validate"),
    )
    .await;
    let out = kubectl_in(
        &env,
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: k\ndata:\n  forbidden: x\n"),
    )
    .await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("admission webhook \"policy.example.com\" denied the request: the key \"forbidden\" is not allowed"), "{}", stderr(&out));
}

/// Webhooks on `statefulsets/scale`: a Scale-kind review with the old and
/// new replicas; at most 5 replicas, a warning otherwise.
fn scale_handler(path: &str, request: &Value) -> Value {
    match path {
        "/validate-scale" if request["object"]["spec"]["replicas"].as_i64() > Some(5) => {
            json!({"allowed": false, "status": {"code": 403, "message": "at most 5 replicas"}})
        }
        "/validate-scale" => json!({"allowed": true, "warnings": ["scaled"]}),
        // Rounds 4 up to 5, as a defaulting webhook on /scale might.
        "/mutate-scale" if request["object"]["spec"]["replicas"] == 4 => {
            let patch = json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]);
            json!({"allowed": true, "patchType": "JSONPatch", "patch": b64(patch.to_string().as_bytes())})
        }
        "/mutate-scale" => json!({"allowed": true}),
        // Registered on the main resource only: must not see /scale writes.
        _ => {
            json!({"allowed": false, "status": {"code": 403, "message": "main-resource hook called"}})
        }
    }
}

#[tokio::test]
async fn scale_writes_are_admitted_as_scale_objects() {
    let env = env().await;
    let server = webhook_server(scale_handler).await;
    let (code, _, body) = raw(
        &env,
        "POST",
        "/apis/apps/v1/namespaces/default/statefulsets",
        Some("application/json"),
        Some(json!({"metadata": {"name": "s"}, "spec": {"replicas": 1, "serviceName": "s",
            "selector": {"matchLabels": {"app": "s"}},
            "template": {"metadata": {"labels": {"app": "s"}}, "spec": {"containers": [{"name": "c", "image": "etcd"}]}}}})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let on = |name: &str, path: &str, resource: &str| {
        let mut h = hook(name, &server, path);
        h["rules"] = json!([{"operations": ["UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": [resource]}]);
        h
    };
    for (kind, h) in [
        (
            "ValidatingWebhookConfiguration",
            on("scale.example.com", "/validate-scale", "statefulsets/scale"),
        ),
        (
            "MutatingWebhookConfiguration",
            on("round.example.com", "/mutate-scale", "statefulsets/scale"),
        ),
        (
            "ValidatingWebhookConfiguration",
            on("main.example.com", "/main", "statefulsets"),
        ),
    ] {
        register(&env, kind, h).await;
    }
    let scale = |replicas: i64| {
        raw(
            &env,
            "PATCH",
            "/apis/apps/v1/namespaces/default/statefulsets/s/scale",
            Some("application/merge-patch+json"),
            Some(json!({"spec": {"replicas": replicas}})),
        )
    };

    let (code, headers, body) = scale(3).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(headers["warning"], "299 - \"scaled\"");
    assert_eq!(body["kind"], "Scale");
    assert_eq!(body["spec"]["replicas"], 3);
    let reviews = server.reviews.lock().unwrap().clone();
    assert!(
        reviews.iter().all(|(path, _)| path != "/main"),
        "{reviews:?}"
    );
    let (_, validated) = reviews
        .iter()
        .find(|(path, _)| path == "/validate-scale")
        .unwrap();
    let request = &validated["request"];
    assert_eq!(
        request["kind"],
        json!({"group": "autoscaling", "version": "v1", "kind": "Scale"})
    );
    assert_eq!(request["resource"]["resource"], "statefulsets");
    assert_eq!(request["subResource"], "scale");
    assert_eq!(request["oldObject"]["spec"]["replicas"], 1);
    assert_eq!(request["object"]["spec"]["replicas"], 3);

    let (code, _, body) = scale(9).await;
    assert_eq!(code, 403, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("at most 5 replicas"),
        "{body}"
    );

    let (code, _, body) = scale(4).await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        body["spec"]["replicas"], 5,
        "the mutating webhook's patch applies"
    );
    let (_, _, sts) = raw(
        &env,
        "GET",
        "/apis/apps/v1/namespaces/default/statefulsets/s",
        None,
        None,
    )
    .await;
    assert_eq!(sts["spec"]["replicas"], 5);
}
