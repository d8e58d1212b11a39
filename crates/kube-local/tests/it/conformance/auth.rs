//! Authentication and authorization APIs: the TokenRequest subresource
//! (through kube::Client and `kubectl create token`), TokenReview and
//! SubjectAccessReview decided by the stored RBAC objects.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec, TokenReview};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use super::common::{api_status, env, kubectl, raw, stderr, stdout};

async fn service_account(env: &kube_local::Environment, ns: &str, name: &str) {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap();
    Api::<ServiceAccount>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
}

async fn token(
    env: &kube_local::Environment,
    ns: &str,
    name: &str,
    spec: TokenRequestSpec,
) -> TokenRequest {
    Api::<ServiceAccount>::namespaced(env.client(), ns)
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(spec),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap()
}

async fn review(
    env: &kube_local::Environment,
    token: &str,
    audiences: Option<Vec<String>>,
) -> TokenReview {
    let review: TokenReview =
        serde_json::from_value(json!({"spec": {"token": token, "audiences": audiences}})).unwrap();
    Api::<TokenReview>::all(env.client())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
}

fn authenticated_user(review: &TokenReview) -> Option<String> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    status.user.as_ref()?.username.clone()
}

#[tokio::test]
async fn requested_tokens_authenticate_their_service_account_until_expiry() {
    let env = env().await;
    service_account(&env, "default", "scraper").await;
    let issued = token(
        &env,
        "default",
        "scraper",
        TokenRequestSpec {
            expiration_seconds: Some(600),
            ..TokenRequestSpec::default()
        },
    )
    .await;
    let issued = serde_json::to_value(&issued).unwrap();
    let token = issued["status"]["token"].as_str().unwrap().to_string();
    assert!(!token.is_empty());
    let expires: jiff::Timestamp = issued["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let left = expires.as_second() - jiff::Timestamp::now().as_second();
    assert!((590..=601).contains(&left), "expires in {left} s");
    assert_eq!(
        issued["spec"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );

    let answer = review(&env, &token, None).await;
    let review_status = answer.status.clone().unwrap();
    assert_eq!(review_status.authenticated, Some(true), "{review_status:?}");
    let user = review_status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some("system:serviceaccount:default:scraper")
    );
    assert_eq!(
        user.groups.unwrap(),
        vec![
            "system:serviceaccounts".to_string(),
            "system:serviceaccounts:default".to_string(),
            "system:authenticated".to_string()
        ]
    );
    let sa = Api::<ServiceAccount>::namespaced(env.client(), "default")
        .get("scraper")
        .await
        .unwrap();
    assert_eq!(user.uid, sa.metadata.uid);

    // Other audiences than the token's: not for this token.
    let elsewhere = review(&env, &token, Some(vec!["https://vault.example".into()])).await;
    assert_eq!(authenticated_user(&elsewhere), None);

    // Past its expiry, the same token no longer authenticates.
    env.token_clock().advance(Duration::from_secs(601));
    let expired = review(&env, &token, None).await;
    assert_eq!(authenticated_user(&expired), None);
    let error = expired.status.unwrap().error.unwrap_or_default();
    assert!(error.contains("expired"), "{error}");
}

#[tokio::test]
async fn tokens_of_custom_audiences_and_deleted_accounts() {
    let env = env().await;
    service_account(&env, "default", "vault").await;
    let issued = token(
        &env,
        "default",
        "vault",
        TokenRequestSpec {
            audiences: Some(vec!["https://vault.example".into()]),
            ..TokenRequestSpec::default()
        },
    )
    .await;
    let issued = serde_json::to_value(&issued).unwrap();
    assert_eq!(issued["spec"]["expirationSeconds"], 3600);
    let token = issued["status"]["token"].as_str().unwrap().to_string();
    let answer = review(&env, &token, Some(vec!["https://vault.example".into()])).await;
    assert_eq!(
        authenticated_user(&answer).as_deref(),
        Some("system:serviceaccount:default:vault")
    );
    assert_eq!(
        answer.status.unwrap().audiences,
        Some(vec!["https://vault.example".to_string()])
    );
    // The API server's own audience is not among the token's.
    assert_eq!(authenticated_user(&review(&env, &token, None).await), None);

    // A token outlives nothing: deleting its ServiceAccount invalidates it,
    // and a new account of the same name (another uid) does not revive it.
    let api = Api::<ServiceAccount>::namespaced(env.client(), "default");
    api.delete("vault", &DeleteParams::default()).await.unwrap();
    let audiences = Some(vec!["https://vault.example".to_string()]);
    assert_eq!(
        authenticated_user(&review(&env, &token, audiences.clone()).await),
        None
    );
    service_account(&env, "default", "vault").await;
    assert_eq!(
        authenticated_user(&review(&env, &token, audiences).await),
        None
    );
}

#[tokio::test]
async fn unknown_tokens_are_unauthenticated_and_bad_requests_refused() {
    let env = env().await;
    for bogus in [
        "not-a-token",
        "a.b.c",
        "eyJhbGciOiJIUzI1NiJ9.e30.c2lnbmF0dXJl",
    ] {
        let answer = review(&env, bogus, None).await;
        let status = answer.status.unwrap();
        assert_ne!(status.authenticated, Some(true), "{bogus}");
        assert!(status.error.is_some(), "{bogus}");
    }
    // Upstream: a review without a token is a bad request.
    let (code, _, body) = raw(
        &env,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        Some("application/json"),
        Some(json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {}})),
    )
    .await;
    assert_eq!(code, 400, "{body}");

    // Reviews are create-only, and never stored.
    let (code, _, body) = raw(
        &env,
        "GET",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        None,
        None,
    )
    .await;
    assert_eq!(code, 405, "{body}");
    assert_eq!(body["reason"], "MethodNotAllowed");
    let (code, _, _) = raw(
        &env,
        "GET",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews/x",
        None,
        None,
    )
    .await;
    assert_eq!(code, 404);

    // TokenRequest: an unknown account is NotFound, too short a lifetime Invalid.
    let api = Api::<ServiceAccount>::namespaced(env.client(), "default");
    let request = |seconds: i64| TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(seconds),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let err = api
        .create_token_request("nobody", &PostParams::default(), &request(3600))
        .await
        .unwrap_err();
    assert_eq!(api_status(err).0, 404);
    service_account(&env, "default", "short").await;
    let err = api
        .create_token_request("short", &PostParams::default(), &request(60))
        .await
        .unwrap_err();
    let (code, reason, message) = api_status(err);
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(message.contains("spec.expirationSeconds"), "{message}");
}

#[tokio::test]
async fn kubectl_create_token_issues_a_token_the_review_accepts() {
    let env = env().await;
    service_account(&env, "default", "prometheus").await;
    let out = kubectl(&env, &["create", "token", "prometheus", "--duration=15m"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let token = stdout(&out).trim().to_string();
    assert_eq!(
        authenticated_user(&review(&env, &token, None).await).as_deref(),
        Some("system:serviceaccount:default:prometheus")
    );
    let out = kubectl(&env, &["create", "token", "missing"]).await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));
}

/// Creates a built-in object at `path` (its collection).
async fn apply(env: &kube_local::Environment, path: &str, object: Value) {
    let (code, _, body) = raw(env, "POST", path, Some("application/json"), Some(object)).await;
    assert_eq!(code, 201, "{body}");
}

async fn access(env: &kube_local::Environment, spec: Value) -> (bool, String) {
    let review: SubjectAccessReview = serde_json::from_value(json!({"spec": spec})).unwrap();
    let answer = Api::<SubjectAccessReview>::all(env.client())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let status = answer.status.unwrap();
    (status.allowed, status.reason.unwrap_or_default())
}

fn sa_groups(ns: &str) -> Value {
    json!([
        "system:serviceaccounts",
        format!("system:serviceaccounts:{ns}"),
        "system:authenticated"
    ])
}

#[tokio::test]
async fn subject_access_reviews_follow_cluster_role_bindings_for_non_resource_urls() {
    let env = env().await;
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "metrics-reader"}, "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
    )
    .await;
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({
            "metadata": {"name": "prometheus-metrics"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}]
        }),
    )
    .await;
    let ask = |user: &str, path: &str, verb: &str| json!({"user": user, "groups": sa_groups("monitoring"), "nonResourceAttributes": {"path": path, "verb": verb}});
    let (allowed, reason) = access(
        &env,
        ask(
            "system:serviceaccount:monitoring:prometheus",
            "/metrics",
            "get",
        ),
    )
    .await;
    assert!(allowed);
    assert!(
        reason.contains("prometheus-metrics") && reason.contains("metrics-reader"),
        "{reason}"
    );
    assert!(
        !access(
            &env,
            ask(
                "system:serviceaccount:monitoring:prometheus",
                "/metrics",
                "post"
            )
        )
        .await
        .0
    );
    assert!(
        !access(
            &env,
            ask(
                "system:serviceaccount:monitoring:prometheus",
                "/debug",
                "get"
            )
        )
        .await
        .0
    );
    assert!(
        !access(
            &env,
            ask(
                "system:serviceaccount:monitoring:grafana",
                "/metrics",
                "get"
            )
        )
        .await
        .0
    );

    // Bound to a group: every service account qualifies; a prefix rule covers sub-paths.
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "debug-reader"}, "rules": [{"nonResourceURLs": ["/debug/*"], "verbs": ["*"]}]}),
    )
    .await;
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        json!({
            "metadata": {"name": "all-sa-debug"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "debug-reader"},
            "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]
        }),
    )
    .await;
    assert!(
        access(
            &env,
            ask(
                "system:serviceaccount:monitoring:grafana",
                "/debug/pprof",
                "get"
            )
        )
        .await
        .0
    );
    assert!(
        !access(
            &env,
            ask("system:serviceaccount:monitoring:grafana", "/debug", "get")
        )
        .await
        .0
    );
    // A user outside the group: no.
    assert!(!access(&env, json!({"user": "alice", "nonResourceAttributes": {"path": "/debug/pprof", "verb": "get"}})).await.0);
    // The privileged group may do anything.
    assert!(access(&env, json!({"user": "admin", "groups": ["system:masters"], "nonResourceAttributes": {"path": "/anything", "verb": "delete"}})).await.0);
}

#[tokio::test]
async fn subject_access_reviews_follow_role_bindings_in_their_namespace() {
    let env = env().await;
    for ns in ["team-a", "team-b"] {
        kubectl(&env, &["create", "namespace", ns]).await;
    }
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/roles",
        json!({"metadata": {"name": "pod-reader", "namespace": "team-a"}, "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]}]}),
    )
    .await;
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/namespaces/team-a/rolebindings", json!({"metadata": {"name": "read-pods", "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "ci"}]
        }),
    )
    .await;
    let ask = |user: &str, ns: &str, verb: &str, resource: &str, sub: &str| json!({"user": user, "resourceAttributes": {"namespace": ns, "verb": verb, "group": "", "resource": resource, "subresource": sub, "name": "p"}});
    let (allowed, reason) = access(&env, ask("alice", "team-a", "get", "pods", "")).await;
    assert!(allowed, "{reason}");
    assert!(reason.contains("read-pods/team-a"), "{reason}");
    assert!(
        access(&env, ask("alice", "team-a", "get", "pods", "log"))
            .await
            .0
    );
    assert!(
        !access(&env, ask("alice", "team-a", "delete", "pods", ""))
            .await
            .0
    );
    assert!(
        !access(&env, ask("alice", "team-a", "get", "pods", "exec"))
            .await
            .0
    );
    assert!(
        !access(&env, ask("alice", "team-b", "get", "pods", ""))
            .await
            .0
    );
    assert!(
        !access(&env, ask("alice", "team-a", "get", "secrets", ""))
            .await
            .0
    );
    // A ServiceAccount subject without a namespace is the binding's.
    assert!(
        access(
            &env,
            ask(
                "system:serviceaccount:team-a:ci",
                "team-a",
                "list",
                "pods",
                ""
            )
        )
        .await
        .0
    );
    assert!(
        !access(
            &env,
            ask(
                "system:serviceaccount:team-b:ci",
                "team-a",
                "list",
                "pods",
                ""
            )
        )
        .await
        .0
    );
    // A RoleBinding may grant a ClusterRole's rules, in its namespace only.
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        json!({"metadata": {"name": "secret-reader"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["p"], "verbs": ["get"]}]}),
    )
    .await;
    apply(&env, "/apis/rbac.authorization.k8s.io/v1/namespaces/team-b/rolebindings", json!({"metadata": {"name": "bob-secrets", "namespace": "team-b"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "secret-reader"},
            "subjects": [{"kind": "User", "name": "bob"}]
        }),
    )
    .await;
    assert!(
        access(&env, ask("bob", "team-b", "get", "secrets", ""))
            .await
            .0
    );
    assert!(
        !access(&env, ask("bob", "team-a", "get", "secrets", ""))
            .await
            .0
    );
    // Neither attributes, or both: Invalid. No user nor group: Invalid.
    for spec in [
        json!({"user": "alice"}),
        json!({"user": "alice", "resourceAttributes": {"verb": "get"}, "nonResourceAttributes": {"path": "/", "verb": "get"}}),
        json!({"nonResourceAttributes": {"path": "/", "verb": "get"}}),
    ] {
        let review: SubjectAccessReview = serde_json::from_value(json!({"spec": spec})).unwrap();
        let err = Api::<SubjectAccessReview>::all(env.client())
            .create(&PostParams::default(), &review)
            .await
            .unwrap_err();
        assert_eq!(api_status(err).0, 422, "{spec}");
    }
}

#[tokio::test]
async fn discovery_lists_the_review_apis_and_the_token_subresource() {
    let env = env().await;
    let (_, _, authn) = raw(&env, "GET", "/apis/authentication.k8s.io/v1", None, None).await;
    let tokenreviews = authn["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "tokenreviews")
        .cloned()
        .unwrap();
    assert_eq!(tokenreviews["verbs"], json!(["create"]));
    assert_eq!(tokenreviews["namespaced"], json!(false));
    let (_, _, authz) = raw(&env, "GET", "/apis/authorization.k8s.io/v1", None, None).await;
    assert!(
        authz["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "subjectaccessreviews")
    );
    let (_, _, core) = raw(&env, "GET", "/api/v1", None, None).await;
    let token = core["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "serviceaccounts/token")
        .cloned()
        .unwrap();
    assert_eq!(token["kind"], "TokenRequest");
    assert_eq!(token["group"], "authentication.k8s.io");
    assert_eq!(token["verbs"], json!(["create"]));
    let (_, _, rbac) = raw(
        &env,
        "GET",
        "/apis/rbac.authorization.k8s.io/v1",
        None,
        None,
    )
    .await;
    let names: Vec<&str> = rbac["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for kind in [
        "clusterroles",
        "clusterrolebindings",
        "roles",
        "rolebindings",
    ] {
        assert!(names.contains(&kind), "{names:?}");
    }
}

#[tokio::test]
async fn kubectl_create_rbac_objects_grant_what_reviews_then_allow() {
    let env = env().await;
    service_account(&env, "default", "prometheus").await;
    let out = kubectl(
        &env,
        &[
            "create",
            "clusterrole",
            "metrics-reader",
            "--verb=get",
            "--non-resource-url=/metrics",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl(
        &env,
        &[
            "create",
            "clusterrolebinding",
            "prometheus-metrics",
            "--clusterrole=metrics-reader",
            "--serviceaccount=default:prometheus",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl(
        &env,
        &[
            "create",
            "role",
            "pod-reader",
            "--verb=get,list",
            "--resource=pods",
            "--resource-name=web",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl(
        &env,
        &[
            "create",
            "rolebinding",
            "alice-pods",
            "--role=pod-reader",
            "--user=alice",
            "--group=ops",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));

    let out = kubectl(
        &env,
        &[
            "get",
            "clusterrolebinding",
            "prometheus-metrics",
            "-o",
            "json",
        ],
    )
    .await;
    let binding: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "prometheus", "namespace": "default"}])
    );
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "metrics-reader"})
    );

    let metrics = |user: &str| json!({"user": user, "groups": sa_groups("default"), "nonResourceAttributes": {"path": "/metrics", "verb": "get"}});
    assert!(
        access(&env, metrics("system:serviceaccount:default:prometheus"))
            .await
            .0
    );
    assert!(
        !access(&env, metrics("system:serviceaccount:default:other"))
            .await
            .0
    );
    let pods = |user: &str, groups: Value, name: &str| json!({"user": user, "groups": groups, "resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods", "name": name}});
    assert!(access(&env, pods("alice", json!([]), "web")).await.0);
    assert!(access(&env, pods("carol", json!(["ops"]), "web")).await.0);
    assert!(!access(&env, pods("alice", json!([]), "db")).await.0);
}
