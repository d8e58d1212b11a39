//! `spec.auth.enabled` end to end on kube-local with real etcd: dkv turns
//! etcd authentication on once the cluster has formed, keeps the root
//! credentials in the documented Secret, refuses nobody it should not and
//! everybody it should, and still backs up, upgrades (3.4 → 3.5, and
//! 3.6 → 3.7) and scales the cluster, authenticating as root, while a
//! writer authenticated as root loses no acknowledged write. On 3.6 and
//! later a learner added by the scale-up refuses to authenticate anyone yet
//! answers its status only to a user: dkv asks it with a token a voting
//! member issued, or the scale-up would stall. A cluster restored from its
//! backup answers to the same root credentials (and one without
//! `spec.auth` is refused with the fix), and so does one restored from the
//! bare artifact URI with the documented, pre-created credentials Secret.

use dkv_test_support as support;

use k8s_openapi::api::core::v1::Secret;
use serde_json::json;
use support::backups::backup_now;
use support::etcd_cluster::{member_endpoints, patch_spec, wait_for, wait_settled};
use support::tls::Target;

const NS: &str = "ledger";
const CLUSTER: &str = "accounts";

fn value(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

/// Plaintext, with short timeouts (a refused connection must fail fast).
/// `ask` over a fresh connection to `endpoints` as `user`, retried for half
/// a minute: connecting authenticates, and on a loaded machine a member's
/// connection can still break right after the cluster settled (seen in CI
/// as a broken pipe). Clients retry; so does this.
async fn as_user<T>(
    endpoints: &[String],
    (user, password): (&str, &str),
    what: &str,
    ask: impl AsyncFn(&mut etcd_client::Client) -> Result<T, etcd_client::Error>,
) -> T {
    support::eventually_ok(
        what,
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(500),
        async || {
            let options = options().with_user(user, password);
            let mut etcd = etcd_client::Client::connect(endpoints, Some(options)).await?;
            ask(&mut etcd).await
        },
    )
    .await
}

fn options() -> etcd_client::ConnectOptions {
    support::tls::options(None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales() {
    with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales_on(
        "registry.k8s.io/etcd:3.4.23-0",
        "registry.k8s.io/etcd:3.5.16-0",
        "3.5.16",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_6_to_3_7_with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales()
 {
    with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales_on(
        "registry.k8s.io/etcd:3.6.16-0",
        "registry.k8s.io/etcd:3.7.3-0",
        "3.7.3",
    )
    .await;
}

async fn with_auth_on_strangers_are_refused_and_the_operator_still_backs_up_upgrades_and_scales_on(
    from: &str,
    to: &str,
    to_version: &str,
) {
    let setup = support::backups::with_object_store(NS).await;
    let client = setup.client.clone();
    let dkvs = support::create_cluster(
        &client,
        NS,
        CLUSTER,
        3,
        from,
        json!({"auth": {"enabled": true},
                   "backup": setup.backup_spec("auth")}),
    )
    .await;
    wait_settled(&dkvs, CLUSTER, 3).await;

    // Authentication goes on after the cluster formed.
    let secret = support::wait_auth_enabled(&client, NS, CLUSTER).await;
    let (user, password) = (value(&secret, "username"), value(&secret, "password"));
    assert_eq!(user, "root");
    assert!(password.len() >= 32);

    let endpoints = member_endpoints(&client, NS, CLUSTER).await;
    let mut stranger = etcd_client::Client::connect(&endpoints, Some(options()))
        .await
        .unwrap();
    let refused = stranger.put("k", "v", None).await;
    assert!(refused.is_err(), "an unauthenticated write was accepted");
    eprintln!("unauthenticated write: {}", refused.err().unwrap());
    let wrong = etcd_client::Client::connect(
        &endpoints,
        Some(options().with_user("root", "not-the-password")),
    )
    .await;
    assert!(wrong.is_err(), "a wrong password was accepted");
    let root = || async {
        etcd_client::Client::connect(
            member_endpoints(&client, NS, CLUSTER).await,
            Some(options().with_user(user.clone(), password.clone())),
        )
        .await
        .unwrap()
    };
    support::etcd_cluster::put_retrying(&mut root().await, "balance", "42").await;
    let writer = Target::plaintext(NS, CLUSTER)
        .as_root()
        .start_writer(&client);

    // A backup: the agent authenticates as root.
    let backup = backup_now(&client, NS, CLUSTER, "with-auth").await;
    let artifact = backup
        .status
        .and_then(|s| s.artifact)
        .map(|a| a.uri)
        .unwrap();

    // An upgrade and a scale-up: the operator authenticates as root.
    patch_spec(&dkvs, CLUSTER, json!({"image": to})).await;
    wait_for(
        &dkvs,
        CLUSTER,
        &format!("all members on {to_version}"),
        |d| {
            support::etcd_cluster::settled_at(d, 3)
                && d.status.as_ref().and_then(|s| s.current_version.as_deref()) == Some(to_version)
        },
    )
    .await;
    // Each new member joins as a learner, catches up and is promoted.
    patch_spec(&dkvs, CLUSTER, json!({"size": 5})).await;
    wait_settled(&dkvs, CLUSTER, 5).await;
    let endpoints = member_endpoints(&client, NS, CLUSTER).await;
    let root_user = (user.as_str(), password.as_str());
    let members = as_user(&endpoints, root_user, "the members as root", async |etcd| {
        etcd.member_list().await
    })
    .await;
    assert_eq!(members.members().len(), 5);
    assert!(members.members().iter().all(|m| !m.is_learner()));
    writer
        .finish(&format!(
            "a backup, a rolling upgrade {from} → {to} and a scale-up 3 → 5"
        ))
        .await;
    let read = as_user(&endpoints, root_user, "a read as root", async |etcd| {
        etcd.get("balance", None).await
    })
    .await;
    assert_eq!(read.kvs()[0].value_str().unwrap(), "42");
    // Still refused without credentials.
    let mut stranger = etcd_client::Client::connect(
        member_endpoints(&client, NS, CLUSTER).await,
        Some(options()),
    )
    .await
    .unwrap();
    assert!(stranger.get("balance", None).await.is_err());

    // The backup's snapshot keeps authentication on with the source's root
    // password: a cluster restored from it starts with those credentials.
    let restore = json!({"restore": {"backupName": "with-auth", "credentialsSecret": "s3-creds"}});
    support::create_cluster(
        &client,
        NS,
        "accounts-without-auth",
        1,
        to,
        json!({"bootstrap": restore}),
    )
    .await;
    wait_for(
        &dkvs,
        "accounts-without-auth",
        "Degraded/RestoreFailed",
        |d| {
            support::etcd_cluster::condition_reason(d, "Degraded", "True").as_deref()
                == Some("RestoreFailed")
        },
    )
    .await;
    let refusal = format!(
        "{:?}",
        dkvs.get("accounts-without-auth").await.unwrap().status
    );
    assert!(refusal.contains("set spec.auth.enabled: true"), "{refusal}");
    support::create_cluster(
        &client,
        NS,
        "accounts-restored",
        3,
        to,
        json!({"bootstrap": restore, "auth": {"enabled": true}}),
    )
    .await;
    wait_settled(&dkvs, "accounts-restored", 3).await;
    let restored = support::wait_auth_enabled(&client, NS, "accounts-restored").await;
    assert_eq!(
        value(&restored, "password"),
        password,
        "the source's root password"
    );
    let restored_endpoints = member_endpoints(&client, NS, "accounts-restored").await;
    let read = as_user(
        &restored_endpoints,
        root_user,
        "the restored cluster read as root",
        async |etcd| etcd.get("balance", None).await,
    )
    .await;
    assert_eq!(read.kvs()[0].value_str().unwrap(), "42");
    let mut stranger = etcd_client::Client::connect(&restored_endpoints, Some(options()))
        .await
        .unwrap();
    assert!(stranger.get("balance", None).await.is_err());

    // From the bare artifact, the documented way: the root credentials
    // Secret, marked enabled, created before the cluster.
    let credentials: Secret = serde_json::from_value(json!({
        "metadata": {"name": "accounts-from-uri-etcd-root",
                     "annotations": {"dkv.io/auth-enabled": "true"}},
        "type": "kubernetes.io/basic-auth",
        "stringData": {"username": user, "password": password},
    }))
    .unwrap();
    kube::Api::<Secret>::namespaced(client.clone(), NS)
        .create(&Default::default(), &credentials)
        .await
        .unwrap();
    support::create_cluster(
        &client,
        NS,
        "accounts-from-uri",
        1,
        to,
        json!({"bootstrap": {"restore": {"uri": artifact, "credentialsSecret": "s3-creds"}},
               "auth": {"enabled": true}}),
    )
    .await;
    wait_settled(&dkvs, "accounts-from-uri", 1).await;
    let read = as_user(
        &member_endpoints(&client, NS, "accounts-from-uri").await,
        (user.as_str(), password.as_str()),
        "the cluster restored from the URI read as root",
        async |etcd| etcd.get("balance", None).await,
    )
    .await;
    assert_eq!(read.kvs()[0].value_str().unwrap(), "42");

    // That the password appears nowhere else is `secrets_stay_secret`'s.
    setup.operator.stop().await;
}
