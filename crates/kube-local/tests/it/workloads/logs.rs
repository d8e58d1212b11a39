//! `pods/{name}/log` through the API server, streamed from the kubelet: `kubectl logs` (follow, container, tail,
//! previous) and `kube::Api::<Pod>::logs` / `log_stream`.

use std::time::{Duration, Instant};

use futures::{AsyncBufReadExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::LogParams;
use serde_json::json;

use super::common::{Cluster, TESTAPP, eventually, kubectl};

const NS: &str = "logs";

fn restarts(pod: &Pod, container: &str) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .map_or(0, |c| c.restart_count)
}

fn running(pod: &Pod, container: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .is_some_and(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
}

/// A pod with a container that exits after a while and restarts (counting its starts in an emptyDir) and one that
/// serves forever.
async fn talker(c: &Cluster) {
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "talk"},
            "spec": {
                "volumes": [{"name": "runs", "emptyDir": {}}],
                "containers": [
                    {"name": "once", "image": TESTAPP,
                     "env": [{"name": "EXIT_AFTER_MS", "value": "4000"}, {"name": "EXIT_CODE", "value": "1"},
                             {"name": "RECORD_FILE", "value": "/runs/starts"}],
                     "volumeMounts": [{"name": "runs", "mountPath": "/runs"}]},
                    {"name": "server", "image": TESTAPP,
                     "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]},
                ],
            },
        }),
    )
    .await;
}

#[tokio::test]
async fn kubectl_logs_follows_tails_picks_containers_and_shows_the_previous_run() {
    let c = Cluster::start(NS).await;
    talker(&c).await;
    eventually(
        "container once running",
        Duration::from_secs(20),
        || async {
            c.pod(NS, "talk")
                .await
                .filter(|p| running(p, "once") && running(p, "server"))
        },
    )
    .await;

    // -f follows the running container and ends when it exits (after EXIT_AFTER_MS).
    let began = Instant::now();
    let (ok, out, err) = tokio::time::timeout(
        Duration::from_secs(30),
        kubectl(&c.env, &["logs", "-n", NS, "talk", "-c", "once", "-f"]),
    )
    .await
    .expect("kubectl logs -f ends when the container exits");
    assert!(ok, "{err}");
    assert!(out.contains("testapp talk starting\n"), "{out}");
    assert!(out.ends_with("testapp exiting with 1\n"), "{out}");
    assert!(began.elapsed() < Duration::from_secs(20));

    // After a restart, --previous shows the run before the current one.
    eventually("a restart", Duration::from_secs(30), || async {
        c.pod(NS, "talk")
            .await
            .filter(|p| restarts(p, "once") >= 1 && running(p, "once"))
    })
    .await;
    let (ok, out, err) = kubectl(
        &c.env,
        &["logs", "-n", NS, "talk", "-c", "once", "--previous"],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.ends_with("testapp exiting with 1\n"), "{out}");
    let start_of = |log: &str| -> usize {
        log.lines()
            .find_map(|l| l.strip_prefix("testapp start "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no start line in {log}"))
    };
    let (ok, current, err) = kubectl(&c.env, &["logs", "-n", NS, "talk", "-c", "once"]).await;
    assert!(ok, "{err}");
    // The previous run started before the current one (another restart may have happened in between).
    assert!(start_of(&out) < start_of(&current), "{out}\n---\n{current}");

    // --tail keeps the last lines.
    let (ok, out, err) = kubectl(
        &c.env,
        &["logs", "-n", NS, "talk", "-c", "server", "--tail=1"],
    )
    .await;
    assert!(ok, "{err}");
    assert!(out.starts_with("testapp serving on 127."), "{out}");
    assert_eq!(out.lines().count(), 1, "{out}");

    // Errors come from the API server in upstream's words.
    let (ok, _, err) = kubectl(&c.env, &["logs", "-n", NS, "talk", "-c", "nope"]).await;
    assert!(!ok);
    assert!(
        err.contains("container nope is not valid for pod talk"),
        "{err}"
    );
    let (ok, _, err) = kubectl(
        &c.env,
        &["logs", "-n", NS, "talk", "-c", "server", "--previous"],
    )
    .await;
    assert!(!ok);
    assert!(
        err.contains("previous terminated container \"server\" in pod \"talk\" not found"),
        "{err}"
    );
    let (ok, _, err) = kubectl(&c.env, &["logs", "-n", NS, "gone"]).await;
    assert!(!ok);
    assert!(err.contains("pods \"gone\" not found"), "{err}");
}

#[tokio::test]
async fn the_log_subresource_serves_kube_clients() {
    let c = Cluster::start(NS).await;
    talker(&c).await;
    eventually("server running", Duration::from_secs(20), || async {
        c.pod(NS, "talk").await.filter(|p| running(p, "server"))
    })
    .await;
    let pods = c.api::<Pod>(NS);

    // Several containers and none named: 400 with the list.
    let err = pods.logs("talk", &LogParams::default()).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("expected an API error, got {err:?}")
    };
    assert_eq!(status.code, 400);
    assert_eq!(status.reason, "BadRequest");
    assert_eq!(
        status.message,
        "a container name must be specified for pod talk, choose one of: [once server]"
    );

    let server = LogParams {
        container: Some("server".into()),
        ..LogParams::default()
    };
    let text = eventually("the serving line", Duration::from_secs(10), || async {
        let text = pods.logs("talk", &server).await.unwrap();
        text.contains("serving on").then_some(text)
    })
    .await;
    assert!(text.starts_with("testapp talk starting\n"), "{text}");
    let limited = pods
        .logs(
            "talk",
            &LogParams {
                limit_bytes: Some(7),
                ..server.clone()
            },
        )
        .await
        .unwrap();
    assert_eq!(limited, "testapp");
    // Invalid options: 422 like upstream's validation.
    let err = pods
        .logs(
            "talk",
            &LogParams {
                tail_lines: Some(-1),
                ..server.clone()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("tailLines")),
        "{err:?}"
    );
    // No per-line timestamps are recorded: refused rather than answered without them.
    let err = pods
        .logs(
            "talk",
            &LogParams {
                timestamps: true,
                ..server.clone()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400 && s.message.contains("timestamps")),
        "{err:?}"
    );

    // A followed stream delivers lines while the container runs: the `once` container's next run shows up on it.
    let mut lines = pods
        .log_stream(
            "talk",
            &LogParams {
                container: Some("once".into()),
                follow: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap()
        .lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.try_next())
        .await
        .expect("a first line in time")
        .unwrap();
    assert_eq!(first.as_deref(), Some("testapp talk starting"));
    let rest: Vec<String> = tokio::time::timeout(Duration::from_secs(20), lines.try_collect())
        .await
        .expect("the stream ends when the container exits")
        .unwrap();
    assert_eq!(
        rest.last().map(String::as_str),
        Some("testapp exiting with 1"),
        "{rest:?}"
    );

    // Discovery lists the subresource.
    let (ok, out, err) = kubectl(&c.env, &["get", "--raw", "/api/v1"]).await;
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "pods/log" && r["verbs"] == json!(["get"])),
        "{out}"
    );
}
