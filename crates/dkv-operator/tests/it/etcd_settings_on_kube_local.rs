//! `spec.etcd`'s tuning on a real 3-member etcd 3.5 cluster through dkv on
//! kube-local, with the admission webhooks running: settings etcd would
//! refuse, and extra arguments naming a flag dkv sets, are refused naming
//! the field; a cluster created with every setting runs each one as etcd
//! reports it or behaves; an edit of one rolls through the members one at a
//! time under a writer, and no acknowledged write is lost.

use std::time::{Duration, Instant};

use dkv_api::DistributedKV;
use etcd_client::{Txn, TxnOp};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;

use dkv_test_support as support;

use super::corruption_on_kube_local::volume_dir;
use super::upgrade_on_kube_local::{NS, member_init_has, rolled_out};
use support::etcd_cluster::{Writer, connect, member_endpoint, patch_spec};

const V35: &str = "registry.k8s.io/etcd:3.5.16-0";
const MEMBERS: [&str; 3] = ["orders-0", "orders-1", "orders-2"];

/// The transaction size the edit below raises `spec.etcd.maxTxnOps` to.
const RAISED_TXN_OPS: usize = 8;

fn runs_raised_txn_ops(p: &Pod) -> bool {
    member_init_has(p, &format!("--max-txn-ops={RAISED_TXN_OPS}"))
}

/// A transaction of `ops` puts sent to member `pod` itself (etcd checks
/// `--max-txn-ops` where the request arrives): `Err` with etcd's message
/// when refused.
async fn txn_on(client: &kube::Client, pod: &str, ops: usize) -> Result<(), String> {
    let endpoint = member_endpoint(client, NS, pod).await.ok_or("no pod IP")?;
    let mut etcd = connect(vec![endpoint]).await.ok_or("no connection")?;
    let puts: Vec<TxnOp> = (0..ops)
        .map(|i| TxnOp::put(format!("txn-{pod}-{i}"), "v", None))
        .collect();
    etcd.txn(Txn::new().and_then(puts))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The `.snap` files in member `pod`'s data directory, on its volume.
async fn snapshots_of(client: &kube::Client, pod: &str) -> Vec<String> {
    let dir = volume_dir(client, NS, &format!("data-{pod}"))
        .await
        .join("data/member/snap");
    std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.ends_with(".snap"))
                .collect()
        })
        .unwrap_or_default()
}

/// Refused at admission: an election timeout etcd would refuse next to its
/// heartbeat, and extra arguments dkv owns or that are no flag name, each
/// named. Accepted and in effect: every setting on a 3-member cluster.
/// Then `maxTxnOps` raised: the members restart one at a time onto it with
/// a writer running, and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_settings_are_refused_or_in_effect_and_an_edit_rolls_out_one_member_at_a_time() {
    let (env, client, operator) = support::running_operator_with_webhooks(NS).await;
    let dkvs: Api<DistributedKV> = Api::namespaced(client.clone(), NS);
    // Plaintext (the webhook would default TLS on), so that the test talks
    // to each member as it is.
    let plaintext = json!({"peer": {"mode": "Disabled"}, "client": {"mode": "Disabled"}});

    let refused = dkvs
        .create(
            &PostParams::default(),
            &support::cluster(
                NS,
                "refused",
                3,
                V35,
                json!({"tls": plaintext, "etcd": {
                    "heartbeatInterval": "200ms",
                    "electionTimeout": "800ms",
                    "extraArgs": {"data-dir": "/tmp/elsewhere", "Max_Streams": "1"},
                }}),
            ),
        )
        .await;
    let message = match refused {
        Err(kube::Error::Api(status)) => status.message,
        other => panic!("expected a refusal, got {other:?}"),
    };
    for wanted in [
        "spec.etcd.electionTimeout",
        "\"1000ms\"",
        "spec.etcd.extraArgs.data-dir",
        "spec.storage",
        "spec.etcd.extraArgs.Max_Streams",
    ] {
        assert!(message.contains(wanted), "{wanted} in {message}");
    }

    support::create_cluster(
        &client,
        NS,
        "orders",
        3,
        V35,
        json!({"tls": plaintext, "etcd": {
            "heartbeatInterval": "150ms",
            "electionTimeout": "1500ms",
            "snapshotCount": 100,
            "maxRequestBytes": 65536,
            "maxTxnOps": 4,
            "logLevel": "debug",
            "extraArgs": {"max-concurrent-streams": "1000"},
        }}),
    )
    .await;
    let formed = support::etcd_cluster::wait_settled(&dkvs, "orders", 3).await;
    eprintln!("formed with every setting in {formed:?}");
    let writer = Writer::start(client.clone(), NS, "orders");

    for pod in MEMBERS {
        // maxRequestBytes: a 100 KiB value is refused, by etcd.
        let endpoint = member_endpoint(&client, NS, pod).await.unwrap();
        let mut etcd = connect(vec![endpoint]).await.unwrap();
        let too_large = etcd
            .put(format!("big-{pod}"), vec![b'v'; 100 * 1024], None)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        assert!(
            too_large
                .as_ref()
                .is_err_and(|e| e.contains("request is too large")),
            "{pod}: {too_large:?}"
        );
        // maxTxnOps: 4 operations pass, 5 do not.
        txn_on(&client, pod, 4).await.unwrap();
        let refused = txn_on(&client, pod, 5).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("too many operations in txn request")),
            "{pod}: {refused:?}"
        );
        // The timings, the snapshot count and the extra argument as etcd
        // logs the configuration it runs with; the level by its lines.
        let path = env
            .kubelet()
            .and_then(|k| k.log_path(NS, pod, "etcd"))
            .unwrap();
        let log = std::fs::read_to_string(&path).unwrap();
        for wanted in [
            r#""heartbeat-interval":"150ms""#,
            r#""election-timeout":"1.5s""#,
            r#""snapshot-count":100"#,
            r#""max-request-bytes":65536"#,
            r#""max-concurrent-streams":1000"#,
            r#""level":"debug""#,
        ] {
            assert!(log.contains(wanted), "{pod} logged no {wanted}");
        }
    }

    // snapshotCount: every 100 entries etcd writes a snapshot file, which
    // the writer's puts reach within seconds.
    let started = Instant::now();
    for pod in MEMBERS {
        loop {
            let snaps = snapshots_of(&client, pod).await;
            if !snaps.is_empty() {
                eprintln!("{pod}: {snaps:?} after {:?}", started.elapsed());
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "{pod} wrote no .snap with snapshotCount 100 ({} writes acknowledged)",
                writer.acknowledged().await
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    // An edit rolls through the members one at a time.
    let edited = patch_spec(
        &dkvs,
        "orders",
        json!({"etcd": {"maxTxnOps": RAISED_TXN_OPS}}),
    )
    .await;
    let generation = edited.metadata.generation.unwrap();
    let (_, _, rolled) = rolled_out(
        &client,
        generation,
        runs_raised_txn_ops,
        "maxTxnOps rolled out",
    )
    .await;
    for pod in rolled {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert!(runs_raised_txn_ops(&pod), "{name} runs the new template");
        txn_on(&client, &name, RAISED_TXN_OPS)
            .await
            .unwrap_or_else(|e| {
                panic!("{name} refuses {RAISED_TXN_OPS} operations after the edit: {e}")
            });
    }

    let report = writer.stop().await;
    support::etcd_cluster::assert_no_write_lost(&client, NS, &report).await;
    operator.stop().await;
}
