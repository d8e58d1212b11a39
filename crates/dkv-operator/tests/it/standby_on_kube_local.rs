//! Standby clusters (`spec.standby`) end to end on kube-local with real
//! etcd, the operator in-process and a real S3 server (moto): a standby
//! created from a source's continuous backup holds exactly the source's
//! keys and values as the source changes, one revision of its own per
//! source revision, and refuses the writes of the source's users while
//! serving their reads; promoted, it holds everything the source stored,
//! says up to which revision, takes their writes, and follows no more.
//! On etcd 3.5 in plaintext, and on 3.7 with client and peer TLS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use dkv_api::conditions::{reasons, types};
use dkv_api::distributedkv::v1beta1::StandbyPhase;
use dkv_backup::testing::MotoServer;
use kube::api::Api;
use serde_json::json;

use dkv_test_support as support;

use support::backups::{create_secret, wait_stored};
use support::etcd_cluster::{condition_reason, options, patch_spec, wait_for, wait_settled};

const NS: &str = "standby";
const PREFIX: &str = "/dr/";

/// The keys under [`PREFIX`] and their values, as `etcd` holds them now.
async fn state(etcd: &mut etcd_client::Client) -> BTreeMap<String, String> {
    let options = etcd_client::GetOptions::new().with_prefix();
    let response = etcd.get(PREFIX, Some(options)).await.unwrap();
    dkv_backup::testing::text_pairs(&response)
}

/// A put or delete under [`PREFIX`], some of them two keys in one
/// transaction; returns the revision it made.
async fn change(etcd: &mut etcd_client::Client, i: usize) -> i64 {
    use etcd_client::{Txn, TxnOp};
    let key = |n: usize| format!("{PREFIX}k{:02}", n % 13);
    let header = match i % 6 {
        5 => etcd.delete(key(i), None).await.unwrap().header().cloned(),
        4 => etcd
            .txn(Txn::new().and_then([
                TxnOp::put(key(i), format!("t{i}"), None),
                TxnOp::put(key(i + 1), format!("t{i}"), None),
            ]))
            .await
            .unwrap()
            .header()
            .cloned(),
        _ => etcd
            .put(key(i), format!("v{i}"), None)
            .await
            .unwrap()
            .header()
            .cloned(),
    };
    header.expect("a response has a header").revision()
}

/// The standby's status, once `check` holds for it.
async fn wait_standby(
    dkvs: &Api<DistributedKV>,
    what: &str,
    check: impl Fn(&dkv_api::distributedkv::v1beta1::StandbyStatus) -> bool,
) -> dkv_api::distributedkv::v1beta1::StandbyStatus {
    wait_standby_of(dkvs, "standby", what, check).await
}

/// `name`'s `status.standby`, once `check` holds for it.
async fn wait_standby_of(
    dkvs: &Api<DistributedKV>,
    name: &str,
    what: &str,
    check: impl Fn(&dkv_api::distributedkv::v1beta1::StandbyStatus) -> bool,
) -> dkv_api::distributedkv::v1beta1::StandbyStatus {
    wait_for(dkvs, name, what, |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .is_some_and(&check)
    })
    .await;
    dkvs.get(name)
        .await
        .unwrap()
        .status
        .and_then(|s| s.standby)
        .unwrap()
}

/// A client of `cluster`'s members as `user` (over TLS with its client
/// certificate when `tls`).
async fn connect_as(
    client: &kube::Client,
    cluster: &str,
    tls: bool,
    (user, password): (&str, &str),
) -> etcd_client::Client {
    let target = if tls {
        support::tls::Target::new(NS, cluster)
    } else {
        support::tls::Target::plaintext(NS, cluster)
    };
    etcd_client::Client::connect(
        target.endpoints(client).await,
        Some(options(target.client_tls(client).await).with_user(user, password)),
    )
    .await
    .unwrap()
}

/// `spec` with client and peer TLS on (mode Auto) when `tls`, else off
/// (the admission webhook's defaulting, as in local mode, would turn it
/// on).
fn secured(mut spec: serde_json::Value, tls: bool) -> serde_json::Value {
    spec["tls"] = if tls {
        json!({})
    } else {
        json!({"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}})
    };
    spec
}

/// The root user's name and password of `cluster`, once authentication is
/// on.
async fn root_of(client: &kube::Client, cluster: &str) -> (String, String) {
    let root = support::wait_auth_enabled(client, NS, cluster).await;
    let field = |key: &str| String::from_utf8(root.data.as_ref().unwrap()[key].0.clone()).unwrap();
    (field("username"), field("password"))
}

/// The source's backup destination on `moto`, opened with its credentials.
fn source_store(moto: &MotoServer) -> (dkv_backup::Store, dkv_backup::Location) {
    let destination = dkv_backup::Location::parse(&moto.uri("dr")).unwrap();
    let env = moto.env();
    let config = dkv_backup::StoreConfig::from_lookup(|k| {
        env.iter()
            .find(|(name, _)| name == k)
            .map(|(_, v)| v.clone())
    });
    (
        dkv_backup::Store::open(&destination, &config).unwrap(),
        destination,
    )
}

/// The revision offset recorded on standby `name`'s StatefulSet.
async fn recorded_offset(sts: &Api<k8s_openapi::api::apps::v1::StatefulSet>, name: &str) -> i64 {
    sts.get(name).await.unwrap().metadata.annotations.unwrap()["dkv.io/standby-revision-offset"]
        .parse()
        .unwrap()
}

/// Waits until the standby holds the source revision `last` (its own
/// revision less the recorded offset) and returns how long that took.
async fn wait_applied(
    sts: &Api<k8s_openapi::api::apps::v1::StatefulSet>,
    standby: &mut etcd_client::Client,
    last: i64,
) -> (Duration, i64) {
    let started = Instant::now();
    let offset = recorded_offset(sts, "standby").await;
    loop {
        let own = standby
            .get("/", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision();
        if own - offset >= last {
            assert_eq!(own - offset, last, "the standby applied past the source");
            return (started.elapsed(), offset);
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the standby holds source revision {} after a minute, not {last}",
            own - offset
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_follows_its_source_exactly_refuses_writes_and_once_promoted_takes_them() {
    a_standby_follows_its_source_exactly_refuses_writes_and_once_promoted_takes_them_on(
        "registry.k8s.io/etcd:3.5.16-0",
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_etcd_3_7_with_tls_a_standby_follows_its_source_exactly_refuses_writes_and_once_promoted_takes_them()
 {
    a_standby_follows_its_source_exactly_refuses_writes_and_once_promoted_takes_them_on(
        "registry.k8s.io/etcd:3.7.3-0",
        true,
    )
    .await;
}

async fn a_standby_follows_its_source_exactly_refuses_writes_and_once_promoted_takes_them_on(
    image: &str,
    tls: bool,
) {
    let moto = MotoServer::start("dkv-standby");
    let (env, client, _operator) = support::running_operator_with_webhooks(NS).await;
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    // The standbys' own credentials, to take away from them alone.
    create_secret(&client, NS, "standby-creds", moto.env()).await;
    create_secret(&client, NS, "second-creds", moto.env()).await;
    let dkvs = support::create_cluster(
        &client,
        NS,
        "primary",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "backup": {
                "destination": {"uri": moto.uri("dr"), "credentialsSecret": "s3-creds"},
                "schedule": "0 0 1 1 *"
            }}),
            tls,
        ),
    )
    .await;
    wait_settled(&dkvs, "primary", 1).await;
    let (root, password) = root_of(&client, "primary").await;
    let mut primary = connect_as(&client, "primary", tls, (&root, &password)).await;
    // An application's user, which may read and write its prefix.
    primary.role_add("app").await.unwrap();
    primary
        .role_grant_permission(
            "app",
            etcd_client::Permission::read_write(PREFIX).with_prefix(),
        )
        .await
        .unwrap();
    primary.user_add("app", "app-password", None).await.unwrap();
    primary.user_grant_role("app", "app").await.unwrap();
    patch_spec(
        &dkvs,
        "primary",
        json!({"backup": {"continuous": {"enabled": true, "interval": "1s"}}}),
    )
    .await;
    wait_for(&dkvs, "primary", "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some())
    })
    .await;
    for i in 0..40 {
        change(&mut primary, i).await;
    }
    // Keys under leases: one that ends during the test (its end reaches
    // the standby as a delete), one that outlives it (kept on the standby,
    // without a lease of its own there: none of the seed's leases may end
    // on the standby first).
    for (key, ttl) in [("ending", 15), ("kept", 3600)] {
        let lease = primary.lease_grant(ttl, None).await.unwrap().id();
        let options = etcd_client::PutOptions::new().with_lease(lease);
        primary
            .put(format!("{PREFIX}{key}"), "leased", Some(options))
            .await
            .unwrap();
    }

    // A standby: refused without authentication, with the fix.
    let source =
        json!({"uri": moto.uri("dr"), "credentialsSecret": "standby-creds", "cluster": "primary"});
    let refused = dkvs
        .create(
            &kube::api::PostParams::default(),
            &support::cluster(
                NS,
                "standby",
                1,
                image,
                secured(json!({"standby": {"enabled": true, "source": source}}), tls),
            ),
        )
        .await;
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("spec.auth.enabled: true"), "{message}");
    let created = Instant::now();
    support::create_cluster(
        &client,
        NS,
        "standby",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "standby": {"enabled": true, "source": source}}),
            tls,
        ),
    )
    .await;
    let following = wait_standby(&dkvs, "following", |s| {
        s.phase == Some(StandbyPhase::Following)
    })
    .await;
    println!(
        "standby following {:?} after it was created",
        created.elapsed()
    );
    assert_eq!(
        following.source.as_deref(),
        Some(format!("{NS}/primary in {}", moto.uri("dr")).as_str())
    );
    wait_for(&dkvs, "standby", "Available as a standby", |d| {
        condition_reason(d, types::AVAILABLE, "True").as_deref() == Some(reasons::STANDBY)
    })
    .await;
    // The source's data came with its users: the same root credentials.
    assert_eq!(
        root_of(&client, "standby").await,
        (root.clone(), password.clone())
    );
    let mut standby = connect_as(&client, "standby", tls, (&root, &password)).await;
    let wide = support::kubectl(&env, &["get", "dkv", "-n", NS, "-o", "wide"]);
    println!("{wide}");
    assert!(
        wide.contains("STANDBY") && wide.contains("Following"),
        "{wide}"
    );

    // Reads yes, writes no: the application's user reads its keys from
    // the standby and every write of its is refused at once.
    let mut app = connect_as(&client, "standby", tls, ("app", "app-password")).await;
    let sts: Api<k8s_openapi::api::apps::v1::StatefulSet> = Api::namespaced(client.clone(), NS);
    let stored = |last| {
        let (store, destination) = source_store(&moto);
        async move { wait_stored(&store, &destination, NS, "primary", last).await }
    };
    let kept = standby.get(format!("{PREFIX}kept"), None).await.unwrap();
    assert_eq!(
        kept.kvs().first().map(|kv| kv.lease()),
        Some(0),
        "a lease on the standby"
    );
    assert_eq!(
        standby.leases().await.unwrap().leases().len(),
        0,
        "the standby holds leases"
    );
    let refused = app.put(format!("{PREFIX}from-app"), "x", None).await;
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("permission denied"), "{message}");
    assert_eq!(state(&mut app).await, state(&mut primary).await);

    // The source's lease ends: its delete reaches the standby like any
    // change (the standby's copy of the key had no lease to end first).
    let ended = Instant::now();
    while primary
        .get(format!("{PREFIX}ending"), None)
        .await
        .unwrap()
        .count()
        > 0
    {
        assert!(
            ended.elapsed() < Duration::from_secs(60),
            "the lease did not end"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let expired_at = primary
        .get("/", None)
        .await
        .unwrap()
        .header()
        .unwrap()
        .revision();
    stored(expired_at).await;
    wait_applied(&sts, &mut standby, expired_at).await;
    assert_eq!(state(&mut standby).await, state(&mut primary).await);

    // The source changes on; the standby follows, change by change, one
    // revision of its own per source revision.
    for round in 0..3 {
        let mut last = 0;
        for i in 0..30 {
            last = change(&mut primary, 100 * (round + 1) + i).await;
        }
        let written = Instant::now();
        stored(last).await;
        let stored_after = written.elapsed();
        let (applied_after, offset) = wait_applied(&sts, &mut standby, last).await;
        println!(
            "round {round}: source revision {last} stored {stored_after:?} after it was written, applied {applied_after:?} after that (offset {offset})"
        );
        assert_eq!(
            state(&mut standby).await,
            state(&mut primary).await,
            "round {round}"
        );
        let status = wait_standby(&dkvs, "status showing the newest revision", |s| {
            s.applied_revision >= Some(last)
        })
        .await;
        assert_eq!(status.applied_revision, Some(last));
        assert_eq!(status.lag_revisions, Some(0));
    }

    // Its credentials gone, it says so instead of following nothing in
    // silence; back, it goes on exactly where it stopped.
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .delete("standby-creds", &Default::default())
        .await
        .unwrap();
    let failing = wait_standby(&dkvs, "failing", |s| s.phase == Some(StandbyPhase::Failing)).await;
    let message = failing.message.unwrap_or_default();
    assert!(message.contains("credentialsSecret"), "{message}");
    wait_for(&dkvs, "standby", "Degraded: not following", |d| {
        condition_reason(d, types::DEGRADED, "True").as_deref()
            == Some(reasons::STANDBY_NOT_FOLLOWING)
    })
    .await;
    let mut last = 0;
    for i in 0..10 {
        last = change(&mut primary, 500 + i).await;
    }
    stored(last).await;
    create_secret(&client, NS, "standby-creds", moto.env()).await;
    let (back_after, _) = wait_applied(&sts, &mut standby, last).await;
    println!("credentials back: caught up {back_after:?} later");
    assert_eq!(state(&mut standby).await, state(&mut primary).await);
    wait_standby(&dkvs, "following again", |s| {
        s.phase == Some(StandbyPhase::Following)
    })
    .await;

    // Promotion: everything stored is applied, status says up to which
    // revision, and the application's writes are accepted.
    for i in 0..20 {
        last = change(&mut primary, 1000 + i).await;
    }
    stored(last).await;
    let asked = Instant::now();
    patch_spec(&dkvs, "standby", json!({"standby": {"enabled": false}})).await;
    loop {
        match app
            .put(format!("{PREFIX}after-promotion"), "mine", None)
            .await
        {
            Ok(_) => break,
            Err(e) => {
                assert!(
                    asked.elapsed() < Duration::from_secs(60),
                    "no write accepted: {e}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    println!(
        "promote: the application's first write accepted {:?} after the edit",
        asked.elapsed()
    );
    let promoted = wait_standby(&dkvs, "promoted", |s| {
        s.phase == Some(StandbyPhase::Promoted)
    })
    .await;
    assert_eq!(promoted.promoted_at_revision, Some(last));
    let mut expected = state(&mut primary).await;
    assert!(
        !expected.contains_key(&format!("{PREFIX}ending")),
        "the lease did not end"
    );
    assert!(expected.contains_key(&format!("{PREFIX}kept")));
    expected.insert(format!("{PREFIX}after-promotion"), "mine".to_owned());
    assert_eq!(state(&mut standby).await, expected);
    wait_for(&dkvs, "standby", "Available as an ordinary cluster", |d| {
        condition_reason(d, types::AVAILABLE, "True").as_deref() == Some(reasons::QUORUM_HEALTHY)
    })
    .await;
    let kept: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), NS);
    assert!(
        kept.get_opt("standby-standby-grants")
            .await
            .unwrap()
            .is_none()
    );
    // Following no more: the source's next changes stay with the source.
    for i in 0..10 {
        last = change(&mut primary, 2000 + i).await;
    }
    stored(last).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(state(&mut standby).await, expected);
    // Following again would be a demotion, which makes the cluster's last
    // changes durable through a continuous backup of its own: refused
    // without one, with the fix.
    let again = support::etcd_cluster::try_patch_spec(
        &dkvs,
        "standby",
        json!({"standby": {"enabled": true}}),
    )
    .await;
    let message = again.err().unwrap_or_default();
    assert!(
        message.contains("spec.backup.continuous.enabled: true"),
        "{message}"
    );

    // A standby whose next change the source's store lost stops, says
    // why and how to seed a new one, and is Degraded: never a standby that
    // follows nothing in silence.
    // A standby whose source's credentials are missing says which of its
    // own fields to fix.
    let mut third_source = source.clone();
    third_source["credentialsSecret"] = json!("missing-creds");
    support::create_cluster(
        &client,
        NS,
        "third",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "standby": {"enabled": true, "source": third_source}}),
            tls,
        ),
    )
    .await;
    wait_for(
        &dkvs,
        "third",
        "naming spec.standby.source.credentialsSecret",
        |d| {
            let status = serde_json::to_string(&d.status).unwrap_or_default();
            status.contains("spec.standby.source.credentialsSecret: Secret")
                && status.contains("missing-creds")
                && !status.contains("spec.bootstrap")
        },
    )
    .await;
    dkvs.delete("third", &Default::default()).await.unwrap();

    let mut second_source = source.clone();
    second_source["credentialsSecret"] = json!("second-creds");
    support::create_cluster(
        &client,
        NS,
        "second",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "standby": {"enabled": true, "source": second_source}}),
            tls,
        ),
    )
    .await;
    wait_for(&dkvs, "second", "following", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.phase)
            == Some(StandbyPhase::Following)
    })
    .await;
    secrets
        .delete("second-creds", &Default::default())
        .await
        .unwrap();
    wait_for(&dkvs, "second", "failing", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.phase)
            == Some(StandbyPhase::Failing)
    })
    .await;
    let held = {
        let mut second = connect_as(&client, "second", tls, (&root, &password)).await;
        let offset = recorded_offset(&sts, "second").await;
        second
            .get("/", None)
            .await
            .unwrap()
            .header()
            .unwrap()
            .revision()
            - offset
    };
    // Three batches, stored as three segments or more; the first one after
    // what the standby holds goes missing.
    for batch in 0..3 {
        for i in 0..10 {
            last = change(&mut primary, 3000 + 10 * batch + i).await;
        }
        stored(last).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let (store, destination) = source_store(&moto);
    let continuous =
        dkv_backup::continuous::archive::continuous_location(&destination, NS, "primary");
    let mut after_held = Vec::new();
    for base in dkv_backup::continuous::archive::read_bases(&store, &continuous)
        .await
        .unwrap()
    {
        let chain = dkv_backup::continuous::archive::chain_location(&continuous, &base.chain);
        let keys = dkv_backup::Keyring::default();
        for segment in dkv_backup::continuous::archive::read_chain(&store, &chain, &keys)
            .await
            .unwrap()
        {
            if segment.header.after_revision >= held {
                let location = dkv_backup::Location::parse(&segment.uri).unwrap();
                after_held.push((segment.header.after_revision, location));
            }
        }
    }
    after_held.sort_by_key(|(after, _)| *after);
    assert!(
        after_held.len() >= 2,
        "segments stored after {held}: {after_held:?}"
    );
    store.delete(after_held[0].1.path()).await.unwrap();
    create_secret(&client, NS, "second-creds", moto.env()).await;
    wait_for(&dkvs, "second", "stopped", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.phase)
            == Some(StandbyPhase::Stopped)
    })
    .await;
    let second = dkvs.get("second").await.unwrap();
    let stopped = second
        .status
        .as_ref()
        .and_then(|s| s.standby.clone())
        .unwrap();
    let message = stopped.message.unwrap_or_default();
    assert!(
        message.contains(&format!("breaks after revision {held}"))
            && message.contains("create a new standby"),
        "{message}"
    );
    assert_eq!(
        condition_reason(&second, types::DEGRADED, "True").as_deref(),
        Some(reasons::STANDBY_NOT_FOLLOWING)
    );
}

/// A writer of unique keys under `PREFIX/w/` that writes, as the
/// application's user, to whichever cluster is the primary now, counting
/// what was acknowledged and what was refused.
struct Writer {
    primary: std::sync::Arc<std::sync::Mutex<String>>,
    acknowledged: std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>,
    refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    other_errors: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    /// Starts writing to `clusters[first]`; each cluster's client is the
    /// application's user's.
    fn start(clusters: BTreeMap<String, etcd_client::Client>, first: &str) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::{Arc, Mutex};
        let primary = Arc::new(Mutex::new(first.to_owned()));
        let acknowledged = Arc::new(Mutex::new(Vec::new()));
        let refused = Arc::new(AtomicUsize::new(0));
        let other_errors = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn({
            let (primary, acknowledged) = (primary.clone(), acknowledged.clone());
            let (refused, other_errors) = (refused.clone(), other_errors.clone());
            let mut clusters = clusters;
            async move {
                let mut n = 0u32;
                while !*stopped.borrow() {
                    let target = primary.lock().unwrap().clone();
                    let key = format!("{PREFIX}w/{n:06}");
                    let value = format!("{target}-{n}");
                    let client = clusters.get_mut(&target).unwrap();
                    match client.put(key.clone(), value.clone(), None).await {
                        Ok(_) => {
                            acknowledged.lock().unwrap().push((key, value));
                            n += 1;
                        }
                        // The roles changed: a refusal as well, made at
                        // apply with nothing written (a token issued before
                        // the change is refused once).
                        Err(e)
                            if e.to_string().contains("permission denied")
                                || e.to_string().contains("revision of auth store is old") =>
                        {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => other_errors.lock().unwrap().push(e.to_string()),
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        Self {
            primary,
            acknowledged,
            refused,
            other_errors,
            stop,
            task,
        }
    }

    fn point_at(&self, cluster: &str) {
        *self.primary.lock().unwrap() = cluster.to_owned();
    }

    fn acknowledged(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// Waits for the first acknowledged write after `count` of them.
    async fn wait_acknowledged_after(&self, count: usize) -> Duration {
        let started = Instant::now();
        while self.acknowledged() <= count {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no write acknowledged for a minute"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    }

    /// Stops; returns the writes acknowledged, how many were refused, and
    /// the other errors.
    async fn finish(self) -> (Vec<(String, String)>, usize, Vec<String>) {
        let _ = self.stop.send(true);
        self.task.await.unwrap();
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        let other = self.other_errors.lock().unwrap().clone();
        (
            acknowledged,
            self.refused.load(std::sync::atomic::Ordering::Relaxed),
            other,
        )
    }
}

/// The keys and values under `PREFIX/w/` that `etcd` holds.
async fn written(etcd: &mut etcd_client::Client) -> BTreeMap<String, String> {
    let options = etcd_client::GetOptions::new().with_prefix();
    let response = etcd
        .get(format!("{PREFIX}w/"), Some(options))
        .await
        .unwrap();
    dkv_backup::testing::text_pairs(&response)
}

/// One switchover, `from` -> `to` (`to` follows `from`): `from` is
/// demoted to follow `to` (`source` names `to`'s store), `to` is promoted
/// once it holds exactly the revision `from` ended at, the writer is
/// pointed at `to`, and `from` follows it. Returns the demotion revision
/// and the time from the demotion edit to the first write `to`
/// acknowledged.
async fn switch_over(
    dkvs: &Api<DistributedKV>,
    (from, to): (&str, &str),
    source: Option<serde_json::Value>,
    writer: &Writer,
) -> (i64, Duration) {
    let asked = Instant::now();
    let mut demotion = json!({"enabled": true});
    if let Some(source) = source {
        demotion["source"] = source;
    }
    patch_spec(dkvs, from, json!({"standby": demotion})).await;
    let demoted = wait_standby_of(dkvs, from, "demoted", |s| {
        s.phase == Some(StandbyPhase::Demoted)
    })
    .await;
    let at = demoted.demoted_at_revision.unwrap();
    let demoted_after = asked.elapsed();
    let message = demoted.message.unwrap_or_default();
    assert!(
        message.contains(&format!("--at-revision {at}")),
        "{message}"
    );
    // What `kubectl dkv promote --at-revision` does: refuse if the
    // standby holds more, ask, and check the promotion held exactly that.
    // (Demoted means every change up to it is stored: the promotion
    // applies all that is stored.)
    let before = dkvs.get(to).await.unwrap().status.and_then(|s| s.standby);
    let applied = before.and_then(|s| s.applied_revision).unwrap_or_default();
    assert!(applied <= at, "{to} applied past {at}");
    let acknowledged = writer.acknowledged();
    patch_spec(dkvs, to, json!({"standby": {"enabled": false}})).await;
    let promoted = wait_standby_of(dkvs, to, "promoted", |s| {
        s.phase == Some(StandbyPhase::Promoted)
    })
    .await;
    assert_eq!(promoted.promoted_at_revision, Some(at));
    let promoted_after = asked.elapsed();
    writer.point_at(to);
    writer.wait_acknowledged_after(acknowledged).await;
    let took = asked.elapsed();
    println!(
        "{from} -> {to}: demoted {demoted_after:?}, promoted {promoted_after:?}, first write {took:?} after the demotion edit"
    );
    let following = wait_standby_of(dkvs, from, "following its new primary", |s| {
        s.phase == Some(StandbyPhase::Following)
    })
    .await;
    assert_eq!(following.demoted_at_revision, Some(at));
    (at, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_switchover_and_back_loses_no_acknowledged_write() {
    let image = "registry.k8s.io/etcd:3.5.16-0";
    let moto = MotoServer::start("dkv-standby");
    let (_env, client, _operator) = support::running_operator_with_webhooks(NS).await;
    create_secret(&client, NS, "s3-creds", moto.env()).await;
    let continuous = json!({"enabled": true, "interval": "1s"});
    let backup = |prefix: &str| {
        json!({
            "destination": {"uri": moto.uri(prefix), "credentialsSecret": "s3-creds"},
            "schedule": "0 0 1 1 *"
        })
    };
    let store_of = |cluster: &str| json!({"uri": moto.uri(cluster), "credentialsSecret": "s3-creds", "cluster": cluster});
    let dkvs = support::create_cluster(
        &client,
        NS,
        "alpha",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "backup": backup("alpha")}),
            false,
        ),
    )
    .await;
    wait_settled(&dkvs, "alpha", 1).await;
    let (root, password) = root_of(&client, "alpha").await;
    let mut alpha = connect_as(&client, "alpha", false, (&root, &password)).await;
    alpha.role_add("app").await.unwrap();
    alpha
        .role_grant_permission(
            "app",
            etcd_client::Permission::read_write(PREFIX).with_prefix(),
        )
        .await
        .unwrap();
    alpha.user_add("app", "app-password", None).await.unwrap();
    alpha.user_grant_role("app", "app").await.unwrap();
    // Recorded from here: the chain's base holds the application's user
    // (users and roles travel in snapshots, not in recorded changes).
    patch_spec(
        &dkvs,
        "alpha",
        json!({"backup": {"continuous": continuous.clone()}}),
    )
    .await;
    wait_for(&dkvs, "alpha", "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some())
    })
    .await;
    // A key under a lease the application keeps alive: alpha's demotion
    // detaches it (a lease ending on a follower would delete a key its
    // primary keeps).
    let lease = alpha.lease_grant(3600, None).await.unwrap().id();
    alpha
        .put(
            format!("{PREFIX}leased"),
            "held",
            Some(etcd_client::PutOptions::new().with_lease(lease)),
        )
        .await
        .unwrap();
    let mut beta_backup = backup("beta");
    beta_backup["continuous"] = continuous;
    support::create_cluster(
        &client,
        NS,
        "beta",
        1,
        image,
        secured(
            json!({"auth": {"enabled": true}, "backup": beta_backup,
                   "standby": {"enabled": true, "source": store_of("alpha")}}),
            false,
        ),
    )
    .await;
    wait_standby_of(&dkvs, "beta", "following", |s| {
        s.phase == Some(StandbyPhase::Following)
    })
    .await;

    let apps = BTreeMap::from([
        (
            "alpha".to_owned(),
            connect_as(&client, "alpha", false, ("app", "app-password")).await,
        ),
        (
            "beta".to_owned(),
            connect_as(&client, "beta", false, ("app", "app-password")).await,
        ),
    ]);
    let writer = Writer::start(apps, "alpha");
    writer.wait_acknowledged_after(50).await;

    // alpha -> beta: alpha demoted to follow beta's store.
    let (first_at, first_took) =
        switch_over(&dkvs, ("alpha", "beta"), Some(store_of("beta")), &writer).await;
    println!(
        "switchover alpha -> beta at alpha's revision {first_at}: {first_took:?} from the demotion edit to beta's first acknowledged write"
    );
    let leased = alpha.get(format!("{PREFIX}leased"), None).await.unwrap();
    assert_eq!(leased.kvs().first().map(|kv| kv.lease()), Some(0));
    writer
        .wait_acknowledged_after(writer.acknowledged() + 50)
        .await;

    // beta -> alpha: beta demoted again, its source alpha as before.
    let (back_at, back_took) = switch_over(&dkvs, ("beta", "alpha"), None, &writer).await;
    println!(
        "switchover beta -> alpha at beta's revision {back_at}: {back_took:?} from the demotion edit to alpha's first acknowledged write"
    );
    writer
        .wait_acknowledged_after(writer.acknowledged() + 50)
        .await;
    let (acknowledged, refused, other) = writer.finish().await;
    assert!(
        other.is_empty(),
        "writes failed other than refused: {other:?}"
    );

    // Nothing acknowledged is lost, on the primary or the standby that
    // follows it, and each holds exactly what was acknowledged.
    let mut beta = connect_as(&client, "beta", false, (&root, &password)).await;
    let expected: BTreeMap<String, String> = acknowledged.iter().cloned().collect();
    assert_eq!(written(&mut alpha).await, expected);
    let caught_up = Instant::now();
    while written(&mut beta).await != expected {
        assert!(
            caught_up.elapsed() < Duration::from_secs(60),
            "beta does not hold alpha's writes a minute later"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(state(&mut beta).await, state(&mut alpha).await);
    println!(
        "{} writes acknowledged, 0 lost; {refused} refused while no cluster took writes",
        acknowledged.len()
    );
    // Writes go to whichever is primary: the application's user is refused
    // on beta, which follows again.
    let mut app_on_beta = connect_as(&client, "beta", false, ("app", "app-password")).await;
    let refused = app_on_beta.put(format!("{PREFIX}late"), "x", None).await;
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("permission denied"), "{message}");
}
