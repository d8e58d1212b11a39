//! Pods as processes: images, restarts, probes, init containers, environment, DNS, termination.

use std::time::Duration;

use k8s_openapi::api::core::v1::{ContainerStatus, Pod, Service};
use kube::api::DeleteParams;
use serde_json::json;

use super::common::{Cluster, TESTAPP, eventually, http_get, ready};

const NS: &str = "pods";

fn status_of(pod: &Pod, container: &str) -> Option<ContainerStatus> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)
        .cloned()
}

fn waiting_reason(pod: &Pod, container: &str) -> Option<String> {
    status_of(pod, container)?.state?.waiting?.reason
}

fn phase(pod: &Pod) -> Option<String> {
    pod.status.as_ref()?.phase.clone()
}

#[tokio::test]
async fn an_unmapped_image_backs_off_like_a_failed_pull() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "nginx"},
            "spec": {"containers": [{"name": "web", "image": "docker.io/library/nginx:1.27"}]},
        }),
    )
    .await;
    let seen_pull_error = std::sync::atomic::AtomicBool::new(false);
    let pod = eventually("ImagePullBackOff", Duration::from_secs(20), || async {
        let p = c.pod(NS, "nginx").await?;
        let reason = waiting_reason(&p, "web");
        if reason.as_deref() == Some("ErrImagePull") {
            seen_pull_error.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        (reason.as_deref() == Some("ImagePullBackOff")).then_some(p)
    })
    .await;
    assert!(seen_pull_error.into_inner(), "ErrImagePull comes first");
    assert_eq!(phase(&pod).as_deref(), Some("Pending"));
    assert!(!ready(&pod));
    assert_eq!(c.kubelet().process_count(), 0);
}

#[tokio::test]
async fn a_killed_container_restarts_immediately_then_with_backoff() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "app"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "app", "image": TESTAPP,
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        }]},
    }))
    .await;
    eventually("app ready", Duration::from_secs(20), || async {
        c.pod(NS, "app").await.filter(ready)
    })
    .await;

    c.kubelet().kill_container(NS, "app", "app").unwrap();
    let pod = eventually("first restart", Duration::from_secs(10), || async {
        let p = c.pod(NS, "app").await?;
        let s = status_of(&p, "app")?;
        (s.restart_count == 1 && s.state.as_ref()?.running.is_some()).then_some(p)
    })
    .await;
    let last = status_of(&pod, "app")
        .unwrap()
        .last_state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(last.exit_code, 137, "SIGKILL");
    assert_eq!(last.signal, Some(9));

    // The second crash waits out the back-off (500ms in these tests) in CrashLoopBackOff.
    eventually("running again", Duration::from_secs(10), || async {
        c.kubelet().pod_ip(NS, "app")?;
        c.pod(NS, "app").await.filter(ready)
    })
    .await;
    c.kubelet().kill_container(NS, "app", "app").unwrap();
    eventually("CrashLoopBackOff", Duration::from_secs(5), || async {
        let p = c.pod(NS, "app").await?;
        (waiting_reason(&p, "app").as_deref() == Some("CrashLoopBackOff")).then_some(())
    })
    .await;
    eventually("second restart", Duration::from_secs(10), || async {
        let p = c.pod(NS, "app").await?;
        (status_of(&p, "app")?.restart_count == 2 && ready(&p)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn init_containers_environment_and_cluster_dns() {
    let c = Cluster::start(NS).await;
    // A headless Service publishing the pod under its hostname, as a StatefulSet's governing Service does.
    c.create::<Service>(NS, json!({
        "metadata": {"name": "peers"},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": true, "selector": {"app": "dns"}, "ports": [{"name": "http", "port": 8080}]},
    }))
    .await;
    c.create::<Service>(NS, json!({
        "metadata": {"name": "front"},
        "spec": {"selector": {"app": "dns"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .await;
    let env = json!([
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "GREETING", "value": "hello-$(POD_NAME)"},
    ]);
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "dns-0", "labels": {"app": "dns"}},
        "spec": {
            "hostname": "dns-0", "subdomain": "peers", "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "work", "emptyDir": {}}],
            "initContainers": [
                {"name": "first", "image": TESTAPP, "command": ["sh", "-c", "echo first > /work/order"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
                {"name": "second", "image": TESTAPP, "env": env,
                 "command": ["sh", "-c", "echo second >> /work/order; echo \"$1 $GREETING $POD_IP\" > /work/env"],
                 "args": ["sh", "$(POD_NAME)"],
                 "volumeMounts": [{"name": "work", "mountPath": "/work"}]},
            ],
            "containers": [{
                "name": "app", "image": TESTAPP, "env": env,
                "ports": [{"name": "http", "containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1},
                "volumeMounts": [{"name": "work", "mountPath": "/work"}],
            }],
        },
    }))
    .await;
    let pod = eventually("dns-0 ready", Duration::from_secs(20), || async {
        c.pod(NS, "dns-0").await.filter(ready)
    })
    .await;
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert_eq!(
        http_get(&ip, 8080, "/file?path=/work/order").await.unwrap(),
        "first\nsecond\n"
    );
    assert_eq!(
        http_get(&ip, 8080, "/file?path=/work/env").await.unwrap(),
        format!("dns-0 hello-dns-0 {ip}\n"),
        "downward API, $(VAR) in env values and args"
    );
    let hosts = eventually(
        "the Services in the pod's hosts file",
        Duration::from_secs(10),
        || async {
            let hosts = http_get(&ip, 8080, "/file?path=/etc/hosts").await?;
            (hosts.contains("front.pods.svc")
                && hosts.contains("dns-0.peers.pods.svc.cluster.local"))
            .then_some(hosts)
        },
    )
    .await;
    assert!(
        hosts.contains(&format!("{ip}\tdns-0.peers.pods.svc.cluster.local")),
        "{hosts}"
    );
    // The ClusterIP Service's name resolves to its proxy, which forwards port 80 to the pod's named port.
    let front = c.kubelet().service_address(NS, "front").unwrap();
    assert!(
        hosts.contains(&format!("{front}\tfront.pods.svc.cluster.local")),
        "{hosts}"
    );
    let answer = eventually(
        "an answer through the Service",
        Duration::from_secs(5),
        || async { http_get(&front.to_string(), 80, "/").await },
    )
    .await;
    assert_eq!(answer, "dns-0");
    // A LoadBalancer Service publishes its proxy address as its ingress.
    c.create::<Service>(
        NS,
        json!({
            "metadata": {"name": "public"},
            "spec": {"type": "LoadBalancer", "selector": {"app": "dns"}, "ports": [{"port": 8080}]},
        }),
    )
    .await;
    let ingress = eventually(
        "the load balancer's ingress",
        Duration::from_secs(10),
        || async {
            let svc = c.api::<Service>(NS).get("public").await.ok()?;
            svc.status?.load_balancer?.ingress?.first()?.ip.clone()
        },
    )
    .await;
    assert_eq!(
        Some(ingress.clone()),
        c.kubelet()
            .service_address(NS, "public")
            .map(|ip| ip.to_string())
    );
    let answer = eventually(
        "an answer through the load balancer",
        Duration::from_secs(5),
        || async { http_get(&ingress, 8080, "/").await },
    )
    .await;
    assert_eq!(answer, "dns-0");
    let status = pod.status.unwrap();
    let inits = status.init_container_statuses.unwrap();
    assert!(inits.iter().all(|s| {
        s.state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code
            == 0
    }));
    assert!(
        status
            .conditions
            .unwrap()
            .iter()
            .any(|c| c.type_ == "Initialized" && c.status == "True")
    );
}

#[tokio::test]
async fn a_failed_container_reports_its_exit_code_message_and_logs() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "once"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "job", "image": TESTAPP,
                "env": [
                    {"name": "EXIT_AFTER_MS", "value": "50"}, {"name": "EXIT_CODE", "value": "3"},
                    {"name": "MESSAGE_FILE", "value": "/tmp/kube-local-message"},
                ],
                "terminationMessagePath": "/tmp/kube-local-message",
            }]},
        }),
    )
    .await;
    let pod = eventually("Failed", Duration::from_secs(20), || async {
        c.pod(NS, "once")
            .await
            .filter(|p| phase(p).as_deref() == Some("Failed"))
    })
    .await;
    let t = status_of(&pod, "job")
        .unwrap()
        .state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(t.exit_code, 3);
    assert_eq!(t.reason.as_deref(), Some("Error"));
    assert_eq!(t.message.as_deref(), Some("exiting with 3"));
    let log = std::fs::read_to_string(c.kubelet().log_path(NS, "once", "job").unwrap()).unwrap();
    assert!(log.contains("testapp exiting with 3"), "{log}");
    // `kubectl logs` goes through the kubelet's log endpoint, published in the Node status.
    let node = kube::Api::<k8s_openapi::api::core::v1::Node>::all(c.client())
        .get("node-1")
        .await
        .unwrap();
    let status = node.status.unwrap();
    let port = status
        .daemon_endpoints
        .unwrap()
        .kubelet_endpoint
        .unwrap()
        .port;
    let address = status.addresses.unwrap()[0].address.clone();
    let served = http_get(
        &address,
        port as u16,
        &format!("/containerLogs/{NS}/once/job?tailLines=1"),
    )
    .await
    .unwrap();
    assert_eq!(served, "testapp exiting with 3\n");
    let events = c
        .api::<k8s_openapi::api::core::v1::Event>(NS)
        .list(&kube::api::ListParams::default().fields("involvedObject.name=once"))
        .await
        .unwrap()
        .items;
    let reasons: Vec<String> = events.into_iter().filter_map(|e| e.reason).collect();
    assert!(
        reasons.contains(&"Scheduled".to_string()) && reasons.contains(&"Started".to_string()),
        "{reasons:?}"
    );
    // The host's file at that path was never written: the pod had its own.
    assert!(
        std::fs::read_to_string("/tmp/kube-local-message")
            .map_or(true, |s| !s.contains("exiting with 3"))
    );
}

#[tokio::test]
async fn a_failing_liveness_probe_restarts_the_container() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "live"},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "app", "image": TESTAPP,
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1, "failureThreshold": 2},
        }]},
    }))
    .await;
    let pod = eventually("live ready", Duration::from_secs(20), || async {
        c.pod(NS, "live").await.filter(ready)
    })
    .await;
    let ip = pod.status.unwrap().pod_ip.unwrap();
    eventually("the app to answer", Duration::from_secs(5), || async {
        http_get(&ip, 8080, "/fail").await
    })
    .await;
    eventually("a restart", Duration::from_secs(15), || async {
        let p = c.pod(NS, "live").await?;
        (status_of(&p, "app")?.restart_count >= 1).then_some(())
    })
    .await;
}

#[tokio::test]
async fn deleting_a_pod_stops_its_processes_and_dropping_the_environment_leaves_none() {
    let c = Cluster::start(NS).await;
    for name in ["a", "b"] {
        c.create::<Pod>(NS, json!({
            "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [{
                "name": "app", "image": TESTAPP,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            }]},
        }))
        .await;
    }
    eventually("two processes", Duration::from_secs(20), || async {
        (c.kubelet().process_count() == 2).then_some(())
    })
    .await;
    let pids: Vec<String> = {
        let mut pids = Vec::new();
        for name in ["a", "b"] {
            let p = eventually("container id", Duration::from_secs(10), || async {
                status_of(&c.pod(NS, name).await?, "app")?.container_id
            })
            .await;
            pids.push(p.trim_start_matches("kube-local://").to_string());
        }
        pids
    };
    c.api::<Pod>(NS)
        .delete("a", &DeleteParams::default())
        .await
        .unwrap();
    eventually("a's process gone", Duration::from_secs(10), || async {
        (!std::path::Path::new(&format!("/proc/{}", pids[0])).exists()).then_some(())
    })
    .await;
    assert!(std::path::Path::new(&format!("/proc/{}", pids[1])).exists());
    drop(c);
    eventually("b's process gone", Duration::from_secs(5), || async {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pids[1])).unwrap_or_default();
        // Gone, or a zombie waiting to be reaped.
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_sidecar_runs_beside_the_containers_and_stops_when_they_finish() {
    let c = Cluster::start(NS).await;
    let pod_ip =
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}});
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "with-sidecar"},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "initContainers": [{
                "name": "proxy", "image": TESTAPP, "restartPolicy": "Always",
                "env": [pod_ip, {"name": "LISTEN", "value": "$(POD_IP):8081"}],
                "startupProbe": {"tcpSocket": {"port": 8081}, "periodSeconds": 1},
            }],
            "containers": [{
                "name": "main", "image": TESTAPP,
                "command": ["sh", "-c", "sleep 1; exec kube-local-testapp"],
                "env": [{"name": "EXIT_AFTER_MS", "value": "200"}, {"name": "PATH", "value": super::common::testapp().parent().unwrap().display().to_string() + ":/usr/bin:/bin"}],
            }],
        },
    }))
    .await;
    eventually("both running", Duration::from_secs(20), || async {
        let p = c.pod(NS, "with-sidecar").await?;
        let st = p.status?;
        let sidecar = st
            .init_container_statuses?
            .into_iter()
            .find(|s| s.name == "proxy")?;
        let main = st
            .container_statuses?
            .into_iter()
            .find(|s| s.name == "main")?;
        (sidecar.started == Some(true) && main.state?.running.is_some()).then_some(())
    })
    .await;
    let pod = eventually("Succeeded", Duration::from_secs(20), || async {
        c.pod(NS, "with-sidecar")
            .await
            .filter(|p| phase(p).as_deref() == Some("Succeeded"))
    })
    .await;
    assert_eq!(
        status_of(&pod, "main")
            .unwrap()
            .state
            .unwrap()
            .terminated
            .unwrap()
            .exit_code,
        0
    );
    eventually("the sidecar stopped", Duration::from_secs(10), || async {
        (c.kubelet().process_count() == 0).then_some(())
    })
    .await;
}

#[tokio::test]
async fn lifecycle_hooks_run_after_start_and_before_stop() {
    let c = Cluster::start(NS).await;
    let out = tempfile::tempdir().unwrap();
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "hooks"},
        "spec": {
            "terminationGracePeriodSeconds": 5,
            "volumes": [{"name": "out", "hostPath": {"path": out.path().display().to_string()}}],
            "containers": [{
                "name": "app", "image": TESTAPP,
                "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                "lifecycle": {
                    "postStart": {"exec": {"command": ["sh", "-c", "echo started > /out/post-start"]}},
                    "preStop": {"exec": {"command": ["sh", "-c", "echo stopping > /out/pre-stop"]}},
                },
            }],
        },
    }))
    .await;
    eventually("hooks ready", Duration::from_secs(20), || async {
        c.pod(NS, "hooks").await.filter(ready)
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(out.path().join("post-start")).unwrap(),
        "started\n"
    );
    c.api::<Pod>(NS)
        .delete("hooks", &DeleteParams::default())
        .await
        .unwrap();
    eventually("preStop ran", Duration::from_secs(10), || async {
        std::fs::read_to_string(out.path().join("pre-stop"))
            .ok()
            .filter(|s| s == "stopping\n")
    })
    .await;
}

#[tokio::test]
async fn the_scheduler_honours_node_selectors() {
    let c = Cluster::start(NS).await;
    for (name, selector) in [("fits", "node-1"), ("nowhere", "elsewhere")] {
        c.create::<Pod>(NS, json!({
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": selector},
                "containers": [{"name": "app", "image": TESTAPP, "env": [{"name": "EXIT_AFTER_MS", "value": "0"}]}],
                "restartPolicy": "Never",
            },
        }))
        .await;
    }
    eventually("fits to run", Duration::from_secs(10), || async {
        let p = c.pod(NS, "fits").await?;
        (p.spec?.node_name.as_deref() == Some("node-1")).then_some(())
    })
    .await;
    let pod = eventually("nowhere unschedulable", Duration::from_secs(10), || async {
        let p = c.pod(NS, "nowhere").await?;
        let scheduled = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled")?
            .clone();
        (scheduled.status == "False").then_some((p, scheduled))
    })
    .await;
    assert_eq!(pod.1.reason.as_deref(), Some("Unschedulable"));
    assert!(pod.0.spec.unwrap().node_name.is_none());
}

#[tokio::test]
async fn a_failing_init_container_reports_its_termination_message_and_backs_off() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "refuses"},
        "spec": {
            "initContainers": [{
                "name": "check", "image": TESTAPP,
                "command": ["sh", "-c", "echo 'data lost: replace me' > /dev/termination-log; exit 2"],
            }],
            "containers": [{"name": "app", "image": TESTAPP}],
        },
    }))
    .await;
    let status = eventually(
        "the init container in back-off",
        Duration::from_secs(15),
        || async {
            let p = c.pod(NS, "refuses").await?;
            let st = p.status?;
            let init = st.init_container_statuses.as_ref()?.first()?.clone();
            let waiting = init.state.as_ref()?.waiting.as_ref()?.reason.clone()?;
            (waiting == "CrashLoopBackOff").then_some((st, init))
        },
    )
    .await;
    let (pod_status, init) = status;
    assert_eq!(pod_status.phase.as_deref(), Some("Pending"));
    let last = init.last_state.unwrap().terminated.unwrap();
    assert_eq!(last.exit_code, 2);
    assert_eq!(last.message.as_deref(), Some("data lost: replace me\n"));
    assert!(init.restart_count >= 1);
    let app = status_of(&c.pod(NS, "refuses").await.unwrap(), "app").unwrap();
    assert_eq!(
        app.state.unwrap().waiting.unwrap().reason.as_deref(),
        Some("PodInitializing")
    );
}

#[tokio::test]
async fn pods_reach_the_api_server_through_the_kubernetes_service() {
    if !std::path::Path::new("/usr/bin/curl").exists() {
        eprintln!("skipped: needs /usr/bin/curl");
        return;
    }
    let c = Cluster::start(NS).await;
    let script = "ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace); \
        a=$(curl -sf http://kubernetes.default.svc:443/api/v1/namespaces/$ns) || exit 3; \
        b=$(curl -sf http://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/version) || exit 4; \
        printf '%s\\n%s' \"$a\" \"$b\" > /dev/termination-log";
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "client"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "curl", "image": TESTAPP, "command": ["sh", "-c", script],
            }]},
        }),
    )
    .await;
    let pod = eventually("the client to finish", Duration::from_secs(20), || async {
        c.pod(NS, "client")
            .await
            .filter(|p| matches!(phase(p).as_deref(), Some("Succeeded" | "Failed")))
    })
    .await;
    let t = status_of(&pod, "curl")
        .unwrap()
        .state
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(t.exit_code, 0, "{t:?}");
    let message = t.message.unwrap();
    assert!(
        message.contains("\"kind\":\"Namespace\"") && message.contains("gitVersion"),
        "{message}"
    );
}

#[tokio::test]
async fn a_paused_container_stops_answering_until_resumed_without_a_restart() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "frozen"},
        "spec": {"containers": [{
            "name": "app", "image": TESTAPP,
            "ports": [{"name": "http", "containerPort": 8080}],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 1, "timeoutSeconds": 1},
        }]},
    }))
    .await;
    eventually("ready", Duration::from_secs(20), || async {
        c.pod(NS, "frozen").await.filter(ready)
    })
    .await;
    let ip = c.kubelet().pod_ip(NS, "frozen").unwrap().to_string();

    c.kubelet().pause_container(NS, "frozen", "app").unwrap();
    eventually("unready while paused", Duration::from_secs(20), || async {
        c.pod(NS, "frozen").await.filter(|p| !ready(p))
    })
    .await;
    let answer =
        tokio::time::timeout(Duration::from_secs(2), http_get(&ip, 8080, "/healthz")).await;
    assert!(
        answer.is_err() || answer.is_ok_and(|a| a.is_none()),
        "a paused process does not answer"
    );

    c.kubelet().resume_container(NS, "frozen", "app").unwrap();
    let pod = eventually("ready again", Duration::from_secs(20), || async {
        c.pod(NS, "frozen").await.filter(ready)
    })
    .await;
    assert_eq!(
        status_of(&pod, "app").unwrap().restart_count,
        0,
        "not restarted"
    );
    assert!(
        c.kubelet().pause_container(NS, "frozen", "nope").is_err(),
        "an unknown container is an error"
    );
}

#[tokio::test]
async fn a_force_deleted_pod_is_killed_without_waiting_its_grace_period() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(NS, json!({
        "metadata": {"name": "stuck"},
        "spec": {"terminationGracePeriodSeconds": 120, "containers": [{
            "name": "app", "image": TESTAPP,
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        }]},
    }))
    .await;
    let pid = eventually("container id", Duration::from_secs(20), || async {
        status_of(&c.pod(NS, "stuck").await?, "app")?.container_id
    })
    .await
    .trim_start_matches("kube-local://")
    .to_string();
    // Frozen, it cannot act on SIGTERM: only SIGKILL ends it.
    c.kubelet().pause_container(NS, "stuck", "app").unwrap();
    c.api::<Pod>(NS)
        .delete("stuck", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    // Well within the 120 s the pod's own grace period would allow.
    eventually("the process killed", Duration::from_secs(30), || async {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_security_context_is_enforced_on_the_process_and_its_volumes() {
    if !kube_local::kubelet::sandbox::is_root() {
        eprintln!("skipped: security contexts are enforced only by a root kubelet");
        return;
    }
    let c = Cluster::with_config(NS, |mut config| {
        config.enforce_security_context = true;
        config
    })
    .await;
    // A root image (every host program here) with runAsNonRoot and no user:
    // refused, as upstream refuses it.
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "wants-root"},
            "spec": {"securityContext": {"runAsNonRoot": true},
                     "containers": [{"name": "app", "image": TESTAPP}]},
        }),
    )
    .await;
    let refused = eventually(
        "CreateContainerConfigError",
        Duration::from_secs(20),
        || async {
            let p = c.pod(NS, "wants-root").await?;
            let waiting = status_of(&p, "app")?.state?.waiting?;
            (waiting.reason.as_deref() == Some("CreateContainerConfigError")).then_some(waiting)
        },
    )
    .await;
    assert!(
        refused
            .message
            .unwrap_or_default()
            .contains("runAsNonRoot and image will run as root")
    );
    assert_eq!(c.kubelet().process_count(), 0);

    // A hardened pod: its process runs as 65532, may not write `/`, and
    // writes its emptyDir (given to the fsGroup).
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "nobody"},
            "spec": {
                "restartPolicy": "Never",
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                    "runAsGroup": 65532, "fsGroup": 65532},
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{
                    "name": "app", "image": TESTAPP,
                    "command": ["sh", "-c",
                        "id -u; id -G; touch /kube-local-probe 2>&1 || true; \
                         echo written > /data/file && ls -ln /data/file; grep NoNewPrivs /proc/self/status"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "securityContext": {"readOnlyRootFilesystem": true,
                                        "allowPrivilegeEscalation": false,
                                        "capabilities": {"drop": ["ALL"]}},
                }],
            },
        }),
    )
    .await;
    eventually("Succeeded", Duration::from_secs(20), || async {
        c.pod(NS, "nobody")
            .await
            .filter(|p| phase(p).as_deref() == Some("Succeeded"))
    })
    .await;
    let log = std::fs::read_to_string(c.kubelet().log_path(NS, "nobody", "app").unwrap()).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.first().copied(), Some("65532"), "{log}");
    assert!(
        lines
            .get(1)
            .is_some_and(|g| g.split(' ').any(|g| g == "65532")),
        "{log}"
    );
    assert!(log.contains("Read-only file system"), "{log}");
    assert!(
        log.contains(" 65532 65532 "),
        "the file is the user's: {log}"
    );
    assert!(log.contains("NoNewPrivs:\t1"), "{log}");
    assert!(!std::path::Path::new("/kube-local-probe").exists());
}

/// A Service's proxy listens on its address, on every port, by the time the address is published (DNS,
/// `service_address`): a client that finds it connects at once (with no ready endpoint the proxy accepts and closes,
/// as kube-proxy's reject rule answers). The listener is bound synchronously, not from the async task that serves
/// it: release builds bound that one to `0.0.0.0:<random>` instead (see `service_proxy::bind`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_proxy_listens_on_its_address_once_it_is_published() {
    let c = Cluster::start(NS).await;
    c.create::<Service>(
        NS,
        json!({
            "metadata": {"name": "early"},
            "spec": {"selector": {"app": "nobody"}, "ports": [
                {"name": "a", "port": 80}, {"name": "b", "port": 8443},
            ]},
        }),
    )
    .await;
    let address = eventually("the proxy address", Duration::from_secs(10), || async {
        c.kubelet().service_address(NS, "early")
    })
    .await;
    for port in [80, 8443] {
        let connected = tokio::net::TcpStream::connect((address, port)).await;
        assert!(
            connected.is_ok(),
            "{address}:{port} accepts as soon as it is published: {connected:?}"
        );
    }
}
