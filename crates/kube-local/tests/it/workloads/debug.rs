//! `kubectl debug` with ephemeral containers: the `pods/{name}/ephemeralcontainers` subresource (what it accepts and
//! refuses, in discovery) and the kubelet running what it adds — status, logs, attach with stdin, an interactive
//! shell on a terminal (`kubectl debug -it`), unmapped images.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Event, Pod};
use serde_json::{Value, json};

use super::common::{
    Cluster, KubectlOnTerminal, TESTAPP, connected, eventually, kubectl, kubectl_in, running,
};
use crate::shared::raw;

const NS: &str = "debug";

fn ephemeral_status(pod: &Pod, name: &str) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .ephemeral_container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == name)
        .cloned()
}

/// A running pod `app` whose container `main` sleeps; returns it once it runs.
async fn app(c: &Cluster) -> Pod {
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "app"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{
                    "name": "main",
                    "image": TESTAPP,
                    "command": ["sh", "-c", "exec sleep 3600"],
                }],
            },
        }),
    )
    .await;
    eventually("the pod running", Duration::from_secs(20), || async {
        c.pod(NS, "app").await.filter(running)
    })
    .await
}

/// `kubectl debug -n debug app ARGS…` with `stdin`; (success, stdout, stderr).
async fn debug_app(c: &Cluster, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut full = vec!["debug", "-n", NS, "app"];
    full.extend_from_slice(args);
    kubectl_in(&c.env, &full, stdin).await
}

/// Waits until the ephemeral container `name` of `app` has terminated; returns the pod.
async fn terminated(c: &Cluster, name: &str) -> Pod {
    eventually(
        &format!("ephemeral container {name} terminated"),
        Duration::from_secs(20),
        || async {
            let pod = c.pod(NS, "app").await?;
            let state = ephemeral_status(&pod, name)?.state?;
            state.terminated.is_some().then_some(pod)
        },
    )
    .await
}

#[tokio::test]
async fn kubectl_debug_runs_a_debug_container_in_the_pod_and_shows_its_logs() {
    let c = Cluster::start(NS).await;
    let pod = app(&c).await;
    let ip = pod.status.and_then(|s| s.pod_ip).unwrap();
    // The target's process, which the debug container sees as a runtime's shared process namespace would show it.
    let target = c.kubelet().container_pid(NS, "app", "main").unwrap();
    let script = format!(
        "echo hello-from-debug; echo who=$WHO; grep -aq sleep /proc/{target}/cmdline && echo sees-target; cat /etc/hosts"
    );

    let (ok, _, err) = debug_app(
        &c,
        &[
            "--image=busybox",
            "--target=main",
            "-c",
            "debugger",
            "--env=WHO=the-debugger",
            "--",
            "sh",
            "-c",
            &script,
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");

    // In the spec as kubectl sent it, defaulted as upstream defaults containers.
    let pod = terminated(&c, "debugger").await;
    let spec = pod.spec.clone().unwrap();
    let debugger = &spec.ephemeral_containers.unwrap()[0];
    assert_eq!(debugger.name, "debugger");
    assert_eq!(debugger.image.as_deref(), Some("busybox"));
    assert_eq!(debugger.target_container_name.as_deref(), Some("main"));
    assert_eq!(
        debugger.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );

    // Ran once, to completion, and is not restarted; the pod's own container is untouched.
    let status = ephemeral_status(&pod, "debugger").unwrap();
    let done = status.state.unwrap().terminated.unwrap();
    assert_eq!(done.exit_code, 0);
    assert_eq!(done.reason.as_deref(), Some("Completed"));
    assert_eq!(status.restart_count, 0);
    assert!(!status.ready);
    assert!(running(&pod), "{:?}", pod.status);

    // Its output, through the API server and the kubelet: it ran in the pod's sandbox (the pod's hosts file) with
    // the environment kubectl gave it.
    let (ok, out, err) = kubectl(&c.env, &["logs", "-n", NS, "app", "-c", "debugger"]).await;
    assert!(ok, "{err}");
    assert!(
        out.starts_with("hello-from-debug\nwho=the-debugger\nsees-target\n"),
        "{out}"
    );
    assert!(out.contains(&format!("{ip}\tapp\n")), "{ip} not in {out}");

    // A name that is none of the pod's containers is refused as upstream refuses it.
    let (ok, _, err) = kubectl(&c.env, &["logs", "-n", NS, "app", "-c", "nope"]).await;
    assert!(!ok);
    assert!(
        err.contains("container nope is not valid for pod app"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_exec_reaches_a_running_debug_container_and_it_stops_with_its_pod() {
    let c = Cluster::start(NS).await;
    app(&c).await;
    let (ok, _, err) = debug_app(
        &c,
        &[
            "--image=alpine:3",
            "-c",
            "shell",
            "--env=WHO=the-shell",
            "--",
            "sh",
            "-c",
            "exec sleep 600",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    eventually(
        "the debug container running",
        Duration::from_secs(20),
        || async {
            let pod = c.pod(NS, "app").await?;
            ephemeral_status(&pod, "shell")?.state?.running
        },
    )
    .await;
    let (ok, out, err) = kubectl(
        &c.env,
        &[
            "exec",
            "-n",
            NS,
            "app",
            "-c",
            "shell",
            "--",
            "sh",
            "-c",
            "echo in:$WHO",
        ],
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "in:the-shell\n");

    // Deleting the pod stops its debug container too, and the pod goes.
    let (ok, _, err) = kubectl(&c.env, &["delete", "pod", "-n", NS, "app", "--wait=true"]).await;
    assert!(ok, "{err}");
    assert!(c.pod(NS, "app").await.is_none());
}

#[tokio::test]
async fn kubectl_debug_interactive_reads_piped_stdin_and_returns_the_output() {
    let c = Cluster::start(NS).await;
    app(&c).await;

    let (ok, out, err) = debug_app(
        &c,
        &[
            "-i",
            "--image=docker.io/library/busybox:1.36",
            "-c",
            "reader",
            "--",
            "sh",
            "-c",
            "read line; echo got:$line",
        ],
        Some("ping\n"),
    )
    .await;
    assert!(ok, "{err}");
    assert_eq!(out, "got:ping\n", "stderr: {err}");

    let pod = terminated(&c, "reader").await;
    let status = ephemeral_status(&pod, "reader").unwrap();
    assert_eq!(status.state.unwrap().terminated.unwrap().exit_code, 0);
}

#[tokio::test]
async fn kubectl_debug_it_on_a_terminal_gives_an_interactive_shell() {
    let c = Cluster::start(NS).await;
    app(&c).await;
    // As a user types it, in a terminal.
    let mut session = KubectlOnTerminal::start(
        &c.env,
        &[
            "debug",
            "-it",
            "-n",
            NS,
            "app",
            "--image=busybox",
            "--target=main",
            "--",
            "sh",
        ],
        80,
        24,
    );
    // kubectl attaches (its terminal raw by then) once the debug container runs.
    connected(&c, "attach", 1).await;
    session.type_keys("echo tty-$((6*7)); tty; exit\r");
    let (code, screen) = session.exit(Duration::from_secs(30)).await;
    assert_eq!(code, Some(0), "{screen}");
    // The shell ran the line (the terminal echoes it as typed, so only the shell's output says 42) on a terminal
    // of its own; kubectl did not fall back to the container's logs.
    assert!(screen.contains("tty-42\r\n"), "{screen}");
    assert!(screen.contains("\r\n/dev/pts/"), "{screen}");
    assert!(
        !screen.contains("falling back to streaming logs"),
        "{screen}"
    );

    let pod = c.pod(NS, "app").await.unwrap();
    let name = pod
        .spec
        .as_ref()
        .unwrap()
        .ephemeral_containers
        .as_ref()
        .unwrap()[0]
        .name
        .clone();
    let pod = terminated(&c, &name).await;
    let status = ephemeral_status(&pod, &name).unwrap();
    assert_eq!(status.state.unwrap().terminated.unwrap().exit_code, 0);
    assert_eq!(status.restart_count, 0);
    // What it printed is in its log too, as a runtime logs a TTY container's output.
    let (ok, out, err) = kubectl(&c.env, &["logs", "-n", NS, "app", "-c", &name]).await;
    assert!(ok, "{err}");
    assert!(out.contains("tty-42\r\n"), "{out}");
}

#[tokio::test]
async fn an_unmapped_debug_image_waits_like_a_failed_pull() {
    let c = Cluster::start(NS).await;
    app(&c).await;
    let (ok, _, err) = debug_app(
        &c,
        &[
            "--image=example.com/no-such-tool:1",
            "-c",
            "lost",
            "--",
            "true",
        ],
        None,
    )
    .await;
    assert!(ok, "{err}");
    let waiting = eventually("ImagePullBackOff", Duration::from_secs(20), || async {
        let pod = c.pod(NS, "app").await?;
        let waiting = ephemeral_status(&pod, "lost")?.state?.waiting?;
        (waiting.reason.as_deref() == Some("ImagePullBackOff")).then_some(waiting)
    })
    .await;
    assert!(
        waiting
            .message
            .as_deref()
            .is_some_and(|m| m.contains("example.com/no-such-tool:1")),
        "{waiting:?}"
    );
    // `kubectl describe pod` shows the failure under the ephemeral container.
    let events: kube::Api<Event> = c.api(NS);
    let params = kube::api::ListParams::default().fields("involvedObject.name=app");
    let failed = events
        .list(&params)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|e| e.reason.as_deref() == Some("Failed"))
        .unwrap();
    assert_eq!(
        failed.involved_object.field_path.as_deref(),
        Some("spec.ephemeralContainers{lost}")
    );
}

const SUBRESOURCE: &str = "/api/v1/namespaces/debug/pods/app/ephemeralcontainers";
const STRATEGIC: &str = "application/strategic-merge-patch+json";

/// The `(field, message)` causes of a 422 answer.
fn causes(body: &Value) -> Vec<(String, String)> {
    body.pointer("/details/causes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or_default().to_string(),
                c["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_subresource_adds_ephemeral_containers_and_refuses_other_changes() {
    let c = Cluster::start(NS).await;
    app(&c).await;
    let add = |containers: Value| json!({"spec": {"ephemeralContainers": containers}});

    // An addition through the subresource; the rest of the body (a label) is ignored.
    let mut body = add(json!([{"name": "d1", "image": "busybox", "command": ["true"]}]));
    body["metadata"] = json!({"labels": {"sneaked": "in"}});
    let (code, _, pod) = raw(&c.env, "PATCH", SUBRESOURCE, Some(STRATEGIC), Some(body)).await;
    assert_eq!(code, 200, "{pod}");
    assert_eq!(pod["kind"], "Pod");
    assert_eq!(
        pod.pointer("/spec/ephemeralContainers/0/name"),
        Some(&json!("d1"))
    );
    assert_eq!(pod.pointer("/metadata/labels/sneaked"), None);
    let (code, _, got) = raw(&c.env, "GET", SUBRESOURCE, None, None).await;
    assert_eq!(code, 200);
    assert_eq!(
        got["spec"]["ephemeralContainers"],
        pod["spec"]["ephemeralContainers"]
    );

    let refused = |body: Value, content_type: &'static str, method: &'static str| {
        let env = &c.env;
        async move {
            let (code, _, answer) =
                raw(env, method, SUBRESOURCE, Some(content_type), Some(body)).await;
            assert_eq!(code, 422, "{answer}");
            assert_eq!(answer["reason"], "Invalid");
            causes(&answer)
        }
    };
    // Removing one (a PUT of the pod without it).
    // (No resourceVersion: the kubelet writes the status meanwhile, and the refusal must not be a conflict.)
    let mut without = pod.clone();
    without["spec"]["ephemeralContainers"] = json!([]);
    if let Some(m) = without["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    assert_eq!(
        refused(without, "application/json", "PUT").await,
        vec![(
            "spec.ephemeralContainers".to_string(),
            "Forbidden: existing ephemeral containers \"d1\" may not be removed".to_string()
        )]
    );
    // Changing one (a JSON merge patch replaces the list).
    assert_eq!(
        refused(
            add(json!([{"name": "d1", "image": "alpine", "command": ["true"]}])),
            "application/merge-patch+json",
            "PATCH"
        )
        .await,
        vec![(
            "spec.ephemeralContainers".to_string(),
            "Forbidden: existing ephemeral containers \"d1\" may not be changed".to_string()
        )]
    );
    // A field an ephemeral container may not have.
    assert_eq!(
        refused(
            add(json!([{"name": "d2", "image": "busybox", "ports": [{"containerPort": 80}]}])),
            STRATEGIC,
            "PATCH"
        )
        .await,
        vec![(
            "spec.ephemeralContainers[1].ports".to_string(),
            "Forbidden: cannot be set for an Ephemeral Container".to_string()
        )]
    );
    // A name another container has.
    assert_eq!(
        refused(
            add(json!([{"name": "main", "image": "busybox"}])),
            STRATEGIC,
            "PATCH"
        )
        .await,
        vec![(
            "spec.ephemeralContainers[1].name".to_string(),
            "Duplicate value: \"main\"".to_string()
        )]
    );
    // A target that is no container of the pod.
    assert_eq!(
        refused(
            add(json!([{"name": "d2", "image": "busybox", "targetContainerName": "ghost"}])),
            STRATEGIC,
            "PATCH"
        )
        .await,
        vec![(
            "spec.ephemeralContainers[1].targetContainerName".to_string(),
            "Not found: \"ghost\"".to_string()
        )]
    );

    // The pod itself may not change them, nor be created with them.
    let (code, _, answer) = raw(
        &c.env,
        "PATCH",
        "/api/v1/namespaces/debug/pods/app",
        Some(STRATEGIC),
        Some(add(json!([{"name": "d3", "image": "busybox"}]))),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    assert_eq!(causes(&answer)[0].0, "spec");
    let (code, _, answer) = raw(
        &c.env,
        "POST",
        "/api/v1/namespaces/debug/pods",
        Some("application/json"),
        Some(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "born-with-one"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}],
                     "ephemeralContainers": [{"name": "d", "image": "busybox"}]},
        })),
    )
    .await;
    assert_eq!(code, 422, "{answer}");
    assert_eq!(
        causes(&answer),
        vec![(
            "spec.ephemeralContainers".to_string(),
            "Forbidden: cannot be set on create".to_string()
        )]
    );

    // The subresource is read and written, never created or deleted.
    for method in ["POST", "DELETE"] {
        let (code, _, answer) = raw(&c.env, method, SUBRESOURCE, None, None).await;
        assert_eq!(code, 405, "{method}: {answer}");
    }
    assert!(c.pod(NS, "app").await.is_some());
}

#[tokio::test]
async fn discovery_lists_the_ephemeralcontainers_subresource() {
    let c = Cluster::start(NS).await;
    let resources = c.client().list_core_api_resources("v1").await.unwrap();
    let sub = resources
        .resources
        .iter()
        .find(|r| r.name == "pods/ephemeralcontainers")
        .unwrap();
    assert_eq!(sub.kind, "Pod");
    assert!(sub.namespaced);
    assert_eq!(sub.verbs, vec!["get", "patch", "update"]);

    let req = http::Request::builder()
        .uri("/api")
        .header(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        )
        .body(Vec::new())
        .unwrap();
    let aggregated: Value = c.client().request(req).await.unwrap();
    let pods = aggregated
        .pointer("/items/0/versions/0/resources")
        .and_then(Value::as_array)
        .and_then(|rs| rs.iter().find(|r| r["resource"] == "pods"))
        .unwrap();
    let sub = pods["subresources"]
        .as_array()
        .and_then(|s| s.iter().find(|s| s["subresource"] == "ephemeralcontainers"))
        .unwrap();
    assert_eq!(sub["responseKind"]["kind"], "Pod");
    assert_eq!(sub["verbs"], json!(["get", "patch", "update"]));
}
