//! Authentication and authorization of the server's own callers (opt-in with
//! `EnvironmentBuilder::authenticate`): 401 without valid credentials, RBAC
//! decides the rest with upstream's 403 wording, self reviews answer for the
//! caller; the default ClusterRoles and bindings exist either way.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{SelfSubjectReview, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{SelfSubjectAccessReview, SelfSubjectRulesReview};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

use super::common::{api_status, kubectl, stderr, stdout};

async fn secured() -> kube_local::Environment {
    kube_local::Environment::builder()
        .authenticate(true)
        .build()
        .await
        .expect("environment starts")
}

/// A raw request with `client`; returns (status, body).
async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
        .unwrap();
    let (status, _, bytes) = crate::shared::send_request(client, req).await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

/// Creates service account `name` in `ns` (as the admin) and returns a client using its token.
async fn service_account_client(
    env: &kube_local::Environment,
    ns: &str,
    name: &str,
) -> kube::Client {
    let sa: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap();
    let accounts = Api::<ServiceAccount>::namespaced(env.client(), ns);
    accounts.create(&PostParams::default(), &sa).await.unwrap();
    let answer = accounts
        .create_token_request(
            name,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec::default()),
                ..TokenRequest::default()
            },
        )
        .await
        .unwrap();
    let token = answer.status.unwrap().token.unwrap();
    env.client_with_token(Some(&token)).unwrap()
}

async fn bind_view(env: &kube_local::Environment, ns: &str, account: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{account}-view"), "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

fn forbidden_body(message: &str, details: Value) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Forbidden", "details": details, "code": 403,
    })
}

#[tokio::test]
async fn requests_without_valid_credentials_get_401_but_health_and_version_are_open() {
    let env = secured().await;
    let unauthorized = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401,
    });
    let anonymous = env.client_with_token(None).unwrap();
    let forged = env.client_with_token(Some("not-a-token")).unwrap();
    for client in [&anonymous, &forged] {
        for path in [
            "/api/v1/namespaces/default/pods",
            "/api",
            "/apis",
            "/openapi/v3",
            "/metrics",
        ] {
            assert_eq!(
                send(client, "GET", path, None).await,
                (401, unauthorized.clone()),
                "{path}"
            );
        }
        for path in ["/healthz", "/livez", "/readyz", "/version"] {
            assert_eq!(send(client, "GET", path, None).await.0, 200, "{path}");
        }
    }
    let e = Api::<Pod>::default_namespaced(anonymous)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(api_status(e).0, 401);
    assert!(
        env.forbidden().is_empty(),
        "401s are not authorization decisions"
    );
}

#[tokio::test]
async fn service_accounts_are_refused_with_upstreams_message_until_a_binding_grants_view() {
    let env = secured().await;
    let client = service_account_client(&env, "default", "reader").await;
    let user = "system:serviceaccount:default:reader";

    let (code, body) = send(&client, "GET", "/api/v1/namespaces/default/pods", None).await;
    assert_eq!(code, 403);
    assert_eq!(
        body,
        forbidden_body(
            &format!(
                "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
            ),
            json!({"kind": "pods"}),
        )
    );
    let (_, body) = send(&client, "GET", "/api/v1/namespaces/default/pods/x", None).await;
    assert_eq!(
        body,
        forbidden_body(
            &format!(
                "pods \"x\" is forbidden: User \"{user}\" cannot get resource \"pods\" in API group \"\" in the namespace \"default\""
            ),
            json!({"name": "x", "kind": "pods"}),
        )
    );
    let (_, body) = send(&client, "GET", "/api/v1/nodes", None).await;
    assert_eq!(
        body["message"],
        json!(format!(
            "nodes is forbidden: User \"{user}\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        ))
    );
    let (_, body) = send(
        &client,
        "GET",
        "/apis/apps/v1/namespaces/default/deployments?watch=true",
        None,
    )
    .await;
    assert_eq!(
        body,
        forbidden_body(
            &format!(
                "deployments.apps is forbidden: User \"{user}\" cannot watch resource \"deployments\" in API group \"apps\" in the namespace \"default\""
            ),
            json!({"group": "apps", "kind": "deployments"}),
        )
    );
    let (_, body) = send(
        &client,
        "GET",
        "/api/v1/namespaces/default/pods/x/log",
        None,
    )
    .await;
    assert_eq!(
        body["message"],
        json!(format!(
            "pods \"x\" is forbidden: User \"{user}\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"default\""
        ))
    );
    let (_, body) = send(&client, "GET", "/metrics", None).await;
    assert_eq!(
        body,
        forbidden_body(
            &format!("forbidden: User \"{user}\" cannot get path \"/metrics\""),
            json!({}),
        )
    );
    // Discovery is every authenticated user's (system:discovery).
    assert_eq!(send(&client, "GET", "/apis", None).await.0, 200);

    let pods = Api::<Pod>::namespaced(client.clone(), "default");
    let (code, reason, _) = api_status(pods.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (403, "Forbidden"));

    bind_view(&env, "default", "reader").await;
    assert!(
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // view reads, it does not write, and it does not reach other namespaces or Secrets.
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    let e = Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_err();
    let (code, _, message) = api_status(e);
    assert_eq!(code, 403);
    assert_eq!(
        message,
        format!(
            "configmaps is forbidden: User \"{user}\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
        )
    );
    assert_eq!(
        send(&client, "GET", "/api/v1/namespaces/kube-system/pods", None)
            .await
            .0,
        403
    );
    assert_eq!(
        send(&client, "GET", "/api/v1/namespaces/default/secrets", None)
            .await
            .0,
        403
    );

    let refused = env.forbidden();
    assert!(refused.iter().all(|r| r.user == user), "{refused:?}");
    assert!(
        refused.iter().any(|r| r.verb == "create"
            && r.resource == "configmaps"
            && r.namespace == "default"
            && r.name.is_empty()),
        "{refused:?}"
    );
    assert!(
        refused
            .iter()
            .any(|r| r.verb == "get" && r.path == "/metrics"),
        "{refused:?}"
    );
    let allowed = env.allowed();
    let mine = &allowed[user];
    let list_pods = mine
        .iter()
        .find(|a| a.verb == "list" && a.resource == "pods" && a.namespace == "default")
        .expect("the list allowed after the binding");
    let grant = list_pods.grant.as_ref().unwrap();
    assert_eq!(
        (
            grant.binding_kind.as_str(),
            grant.binding_name.as_str(),
            grant.role_name.as_str()
        ),
        ("RoleBinding", "reader-view", "view")
    );
    assert!(
        mine.iter().any(|a| a.path == "/apis"
            && a.grant.as_ref().map(|g| g.role_name.as_str()) == Some("system:discovery")),
        "{mine:?}"
    );
}

#[tokio::test]
async fn self_subject_access_reviews_answer_for_the_caller() {
    let env = secured().await;
    let client = service_account_client(&env, "default", "asker").await;
    let can_list_pods = || async {
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({
            "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}}
        }))
        .unwrap();
        Api::<SelfSubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .unwrap()
            .status
            .unwrap()
            .allowed
    };
    assert!(!can_list_pods().await);
    bind_view(&env, "default", "asker").await;
    assert!(can_list_pods().await);

    let rules: SelfSubjectRulesReview =
        serde_json::from_value(json!({"spec": {"namespace": "default"}})).unwrap();
    let status = Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &rules)
        .await
        .unwrap()
        .status
        .unwrap();
    assert!(
        status.resource_rules.iter().any(|r| r
            .resources
            .as_ref()
            .is_some_and(|rs| rs.iter().any(|r| r == "pods"))
            && r.verbs.iter().any(|v| v == "list")),
        "{status:?}"
    );
    assert!(
        status.non_resource_rules.iter().any(|r| r
            .non_resource_urls
            .as_ref()
            .is_some_and(|u| u.iter().any(|u| u == "/apis"))),
        "{status:?}"
    );

    let whoami: SelfSubjectReview = serde_json::from_value(json!({})).unwrap();
    let answer = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &whoami)
        .await
        .unwrap();
    let info = answer.status.unwrap().user_info.unwrap();
    assert_eq!(
        info.username.as_deref(),
        Some("system:serviceaccount:default:asker")
    );
    assert_eq!(
        info.groups.unwrap(),
        vec![
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
}

#[tokio::test]
async fn the_admin_kubeconfig_may_do_everything() {
    let env = secured().await;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    Api::<Namespace>::all(env.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    Api::<Node>::all(env.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    let out = kubectl(
        &env,
        &[
            "-n",
            "team",
            "create",
            "configmap",
            "c",
            "--from-literal=a=b",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = kubectl(&env, &["auth", "can-i", "delete", "nodes"]).await;
    assert_eq!(stdout(&out).trim(), "yes", "{}", stderr(&out));
    let out = kubectl(
        &env,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
    .await;
    assert_eq!(stdout(&out).trim(), "kube-local-admin", "{}", stderr(&out));
    assert!(env.forbidden().is_empty(), "{:?}", env.forbidden());
    assert!(env.allowed().contains_key("kube-local-admin"));
}

#[tokio::test]
async fn default_cluster_roles_bindings_and_service_accounts_exist_without_authentication() {
    let env = super::common::env().await;
    let roles = Api::<ClusterRole>::all(env.client());
    for name in [
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:auth-delegator",
        "system:basic-user",
        "system:discovery",
        "system:public-info-viewer",
    ] {
        let role = roles.get(name).await.unwrap();
        assert_eq!(
            role.metadata.labels.unwrap()["kubernetes.io/bootstrapping"],
            "rbac-defaults",
            "{name}"
        );
    }
    let admin = roles.get("cluster-admin").await.unwrap();
    assert!(
        admin
            .rules
            .unwrap()
            .iter()
            .any(|r| r.non_resource_urls.as_deref() == Some(&["*".to_string()][..]))
    );
    let binding = Api::<ClusterRoleBinding>::all(env.client())
        .get("cluster-admin")
        .await
        .unwrap();
    let subjects = binding.subjects.unwrap();
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("Group", "system:masters")
    );
    // The self reviews are in discovery as upstream lists them: create-only, cluster-scoped.
    for (path, resource) in [
        ("/apis/authorization.k8s.io/v1", "selfsubjectaccessreviews"),
        ("/apis/authentication.k8s.io/v1", "selfsubjectreviews"),
    ] {
        let (code, list) = send(&env.client(), "GET", path, None).await;
        assert_eq!(code, 200);
        let entry = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == resource)
            .unwrap_or_else(|| panic!("{resource} in {list}"));
        assert_eq!(entry["verbs"], json!(["create"]));
        assert_eq!(entry["namespaced"], json!(false));
    }
    // Without authentication every caller is the admin.
    let review: SelfSubjectAccessReview = serde_json::from_value(json!({
        "spec": {"nonResourceAttributes": {"path": "/anything", "verb": "get"}}
    }))
    .unwrap();
    let answer = Api::<SelfSubjectAccessReview>::all(env.client())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    assert!(answer.status.unwrap().allowed);

    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap();
    Api::<Namespace>::all(env.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    for namespace in ["default", "kube-system", "fresh"] {
        let accounts = Api::<ServiceAccount>::namespaced(env.client(), namespace);
        let mut found = false;
        for _ in 0..50 {
            if accounts.get_opt("default").await.unwrap().is_some() {
                found = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(found, "the default service account of {namespace}");
    }
}

#[tokio::test]
async fn a_server_side_apply_that_creates_needs_create_as_well_as_patch() {
    let env = secured().await;
    let ns = "default";
    let patcher = service_account_client(&env, ns, "patcher").await;
    let grant = |name: &str, verbs: Value| {
        json!({"metadata": {"name": name, "namespace": ns},
               "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]})
    };
    let roles = Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(env.client(), ns);
    let role = serde_json::from_value(grant("patch-configmaps", json!(["patch"]))).unwrap();
    roles.create(&PostParams::default(), &role).await.unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "patcher", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "patch-configmaps"},
        "subjects": [{"kind": "ServiceAccount", "name": "patcher", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let apply = |name: &str| {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": name}, "data": {"k": "v"}});
        let patcher = patcher.clone();
        let path = format!("/api/v1/namespaces/{ns}/configmaps/{name}?fieldManager=test");
        async move {
            let req = http::Request::builder()
                .method("PATCH")
                .uri(path)
                .header("content-type", "application/apply-patch+yaml")
                .body(body.to_string().into_bytes())
                .unwrap();
            let (status, _, bytes) = crate::shared::send_request(&patcher, req).await;
            (status, String::from_utf8_lossy(&bytes).into_owned())
        }
    };

    // patch alone does not create.
    let (status, body) = apply("new").await;
    assert_eq!(status, 403, "{body}");
    let message: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        message["message"],
        "configmaps \"new\" is forbidden: User \"system:serviceaccount:default:patcher\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"default\""
    );
    assert!(
        env.forbidden()
            .iter()
            .any(|f| f.verb == "create" && f.resource == "configmaps" && f.name == "new")
    );

    // It does change an object that exists.
    let existing: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "old", "namespace": ns}})).unwrap();
    Api::<ConfigMap>::namespaced(env.client(), ns)
        .create(&PostParams::default(), &existing)
        .await
        .unwrap();
    let (status, body) = apply("old").await;
    assert_eq!(status, 200, "{body}");

    // With create granted too, apply creates.
    let both =
        serde_json::from_value(grant("patch-configmaps", json!(["patch", "create"]))).unwrap();
    roles
        .replace("patch-configmaps", &PostParams::default(), &both)
        .await
        .unwrap();
    let (status, body) = apply("new").await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn the_admin_kubeconfig_authenticates_with_a_client_certificate_in_system_masters() {
    let env = secured().await;
    let kubeconfig = std::fs::read_to_string(env.kubeconfig_path()).unwrap();
    assert!(
        kubeconfig.contains("client-certificate-data"),
        "{kubeconfig}"
    );
    assert!(kubeconfig.contains("client-key-data"), "{kubeconfig}");
    assert!(!kubeconfig.contains("token"), "{kubeconfig}");

    // kubectl presents the certificate: user from its common name, groups
    // from its organization.
    let out = kubectl(
        &env,
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo}"],
    )
    .await;
    let who: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(who["username"], "kube-local-admin", "{}", stderr(&out));
    assert_eq!(
        who["groups"],
        json!(["system:masters", "system:authenticated"])
    );

    // So does a kube-rs client configured from the kubeconfig file.
    let options = kube::config::KubeConfigOptions::default();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(env.kubeconfig_path()).unwrap(),
        &options,
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap();

    // A certificate from another authority is not accepted.
    let stranger = kube_local::tls::CertificateAuthority::new("someone-else")
        .unwrap()
        .issue_client("kube-local-admin", "system:masters")
        .unwrap();
    let forged = kubeconfig
        .lines()
        .map(|line| {
            if line.contains("client-certificate-data") {
                use base64::Engine as _;
                let engine = base64::engine::general_purpose::STANDARD;
                format!(
                    "  user: {{client-certificate-data: {}, client-key-data: {}}}",
                    engine.encode(&stranger.cert_pem),
                    engine.encode(&stranger.key_pem)
                )
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let forged_path = env.kubeconfig_path().with_file_name("forged-kubeconfig");
    std::fs::write(&forged_path, forged).unwrap();
    // Off the test's runtime thread, which also serves the API.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&forged_path)
            .args(["get", "nodes", "--request-timeout=10s"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(!out.status.success(), "a forged certificate was accepted");
    assert!(
        stderr(&out).contains("certificate") || stderr(&out).contains("tls"),
        "{}",
        stderr(&out)
    );
}
