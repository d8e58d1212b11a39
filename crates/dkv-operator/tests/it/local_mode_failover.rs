//! Failover to a standby on another control plane: two `dkv local up`
//! data directories on this machine (each its own API server, operator,
//! kubelet and etcd members, with local mode's defaults: client and peer
//! TLS, the admission webhooks) and one real S3 server (moto) between
//! them. The source takes acknowledged writes until its whole control
//! plane is killed hard (every process of its data directory, SIGKILL),
//! the standby on the other one is promoted, and every write acknowledged
//! longer ago than the documented recovery point (the source's
//! continuous-backup interval, plus the time to store a segment) must be
//! there. Measured: what was lost and how old it was, and the time from
//! the promotion edit to the first write the promoted cluster accepts.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use dkv_api::distributedkv::v1beta1::StandbyPhase;
use dkv_backup::testing::MotoServer;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::local_mode_security::Local;
use dkv_test_support as support;
use support::backups::create_secret;
use support::etcd_cluster::{patch_spec, wait_for, wait_settled};
use support::tls::Target;

const NS: &str = "default";
/// The source's continuous-backup interval, in seconds.
const INTERVAL: u64 = 1;

/// A client of `cluster` on `client`'s control plane, as its root user,
/// over its client TLS.
async fn root_client(client: &Client, cluster: &str) -> etcd_client::Client {
    support::wait_auth_enabled(client, NS, cluster).await;
    let target = Target::new(NS, cluster).as_root();
    etcd_client::Client::connect(
        target.endpoints(client).await,
        Some(target.connect_options(client).await),
    )
    .await
    .unwrap()
}

/// Kills every process of the `dkv local` instance on `state` at once:
/// the API server, operator and kubelet process and the etcd members its
/// kubelet runs (its descendants), as a machine or a region going away
/// would.
fn kill_hard(state: &std::path::Path) {
    let pid = std::fs::read_to_string(state.join("dkv-local.pid")).unwrap();
    let mut pending = vec![pid.trim().to_owned()];
    let mut all = Vec::new();
    while let Some(pid) = pending.pop() {
        let children = Command::new("pgrep").args(["-P", &pid]).output().unwrap();
        pending.extend(
            String::from_utf8_lossy(&children.stdout)
                .lines()
                .map(str::to_owned),
        );
        all.push(pid);
    }
    let killed = Command::new("kill")
        .arg("-KILL")
        .args(&all)
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL {all:?}");
    println!("killed {} processes of {}", all.len(), state.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standby_on_another_control_plane_takes_over_when_its_source_is_lost() {
    let moto = MotoServer::start("dkv-failover");
    let primary_site = Local::up();
    let standby_site = Local::up();
    let (a, b) = (primary_site.client().await, standby_site.client().await);
    for client in [&a, &b] {
        support::wait_until_admission_answers(client, NS).await;
        create_secret(client, NS, "s3-creds", moto.env()).await;
    }
    let sources: Api<DistributedKV> = Api::namespaced(a.clone(), NS);
    sources
        .create(
            &PostParams::default(),
            &support::cluster(
                NS,
                "orders",
                1,
                "registry.k8s.io/etcd:3.5.16-0",
                json!({"auth": {"enabled": true}, "backup": {
                    "destination": {"uri": moto.uri("orders"), "credentialsSecret": "s3-creds"},
                    "schedule": "0 0 1 1 *",
                    "continuous": {"enabled": true, "interval": format!("{INTERVAL}s")}
                }}),
            ),
        )
        .await
        .unwrap();
    wait_settled(&sources, "orders", 1).await;
    wait_for(&sources, "orders", "a continuous backup window", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.continuous_backup.as_ref())
            .is_some_and(|c| c.oldest.is_some())
    })
    .await;
    // What the standby needs of the source's credentials, copied to its
    // control plane as the operations guide says.
    let kept: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(a.clone(), NS);
    let mut root = kept.get("orders-continuous-etcd-root").await.unwrap();
    root.metadata = kube::api::ObjectMeta {
        name: root.metadata.name.clone(),
        ..Default::default()
    };
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(b.clone(), NS)
        .create(&PostParams::default(), &root)
        .await
        .unwrap();
    let standbys: Api<DistributedKV> = Api::namespaced(b.clone(), NS);
    standbys
        .create(
            &PostParams::default(),
            &support::cluster(
                NS,
                "orders-dr",
                1,
                "registry.k8s.io/etcd:3.5.16-0",
                json!({"auth": {"enabled": true}, "standby": {"enabled": true, "source": {
                    "uri": moto.uri("orders"), "credentialsSecret": "s3-creds", "cluster": "orders"
                }}}),
            ),
        )
        .await
        .unwrap();
    wait_for(&standbys, "orders-dr", "following", |d| {
        d.status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.phase)
            == Some(StandbyPhase::Following)
    })
    .await;

    // A writer of unique keys on the source, each acknowledgement timed.
    let acknowledged: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn({
        let acknowledged = acknowledged.clone();
        let mut source = root_client(&a, "orders").await;
        async move {
            let mut n = 0u32;
            while !*stopped.borrow() {
                let key = format!("/failover/{n:06}");
                let put = source.put(key.clone(), "v", None);
                if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), put).await {
                    acknowledged.lock().unwrap().push((key, Instant::now()));
                    n += 1;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    support::eventually(
        "500 acknowledged writes",
        Duration::from_secs(120),
        Duration::from_millis(200),
        async || (acknowledged.lock().unwrap().len() >= 500).then_some(()),
    )
    .await;

    // The source's whole control plane is gone.
    kill_hard(&primary_site.state);
    let lost_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = stop.send(true);
    writer.await.unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let after_kill = acknowledged.iter().filter(|(_, at)| *at > lost_at).count();
    assert_eq!(after_kill, 0, "writes acknowledged after the kill");

    // Promote the standby; the source's store is still there.
    let asked = Instant::now();
    patch_spec(
        &standbys,
        "orders-dr",
        json!({"standby": {"enabled": false}}),
    )
    .await;
    let mut standby = root_client(&b, "orders-dr").await;
    loop {
        // Root can write to a standby: the first write of an application
        // user is what promotion gives back; here the role grants are
        // root's, so the promotion is read from status.
        let status = standbys.get("orders-dr").await.unwrap();
        if status
            .status
            .as_ref()
            .and_then(|s| s.standby.as_ref())
            .and_then(|s| s.phase)
            == Some(StandbyPhase::Promoted)
        {
            break;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(120),
            "not promoted after two minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let promoted_after = asked.elapsed();
    standby.put("/failover/after", "mine", None).await.unwrap();
    let held: BTreeSet<String> = standby
        .get(
            "/failover/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap()
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect();
    let lost: Vec<&(String, Instant)> = acknowledged
        .iter()
        .filter(|(key, _)| !held.contains(key))
        .collect();
    let oldest_lost = lost
        .iter()
        .map(|(_, at)| lost_at.duration_since(*at))
        .max()
        .unwrap_or_default();
    println!(
        "failover: {} writes acknowledged, {} lost (acknowledged at most {oldest_lost:?} before the source was killed); promoted {promoted_after:?} after the edit",
        acknowledged.len(),
        lost.len()
    );
    // The recovery point: what the source had not stored yet, at most one
    // interval plus a segment's upload.
    let recovery_point = Duration::from_secs(INTERVAL + 2);
    assert!(
        oldest_lost <= recovery_point,
        "a write acknowledged {oldest_lost:?} before the loss is missing (recovery point {recovery_point:?})"
    );
    // Nothing lost out of order: what the standby holds is a prefix.
    let first_lost = acknowledged.iter().position(|(key, _)| !held.contains(key));
    if let Some(first) = first_lost {
        assert!(
            acknowledged[first..]
                .iter()
                .all(|(key, _)| !held.contains(key)),
            "the standby holds writes acknowledged after one it lacks"
        );
    }
}
