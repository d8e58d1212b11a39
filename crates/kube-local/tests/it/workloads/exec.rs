//! `pods/{name}/exec` and `pods/{name}/attach` through the API server to the kubelet, with the real `kubectl`
//! (WebSocket `v5.channel.k8s.io`) and `kube::Api::<Pod>::exec` (kube-rs' WebSocket client); and `kubectl logs -f`
//! following what a container writes after it started.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::AttachParams;
use serde_json::json;
use tokio::io::AsyncReadExt;

use super::common::{
    Cluster, KubectlOnTerminal, TESTAPP, connected, eventually, kubectl, kubectl_in, running,
};

const NS: &str = "exec";

/// A pod whose container (the test image, running a shell) prints `early`, waits for `/trigger/go` to appear in its
/// emptyDir, prints `after`, and ends. Returns once it runs.
async fn waiting_pod(c: &Cluster, name: &str) -> Pod {
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "trigger", "emptyDir": {}}],
                "containers": [{
                    "name": "main",
                    "image": TESTAPP,
                    "command": ["sh", "-c", "echo early; while [ ! -e /trigger/go ]; do sleep 0.05; done; echo after; echo done"],
                    "env": [{"name": "GREETING", "value": "hello from the container"},
                            {"name": "EXIT_AFTER_MS", "value": "0"}],
                    "volumeMounts": [{"name": "trigger", "mountPath": "/trigger"}],
                }],
            },
        }),
    )
    .await;
    eventually("the pod running", Duration::from_secs(20), || async {
        c.pod(NS, name).await.filter(running)
    })
    .await
}

/// Waits until the [`waiting_pod`] `box` has logged `early` (what an attach from then on no longer sees).
async fn logged_early(c: &Cluster) {
    let log = c.kubelet().log_path(NS, "box", "main").unwrap();
    eventually("the first line logged", Duration::from_secs(10), || async {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|t| t.contains("early"))
    })
    .await;
}

/// `kubectl exec` with its exit status, output and error output.
async fn exec(c: &Cluster, args: &[&str], stdin: Option<&str>) -> (Option<i32>, String, String) {
    let mut full = vec!["exec", "-n", NS];
    full.extend_from_slice(args);
    let out = crate::shared::kubectl_in(&c.env, &full, stdin).await;
    (
        out.status.code(),
        crate::shared::stdout(&out),
        crate::shared::stderr(&out),
    )
}

#[tokio::test]
async fn kubectl_exec_runs_in_the_container_through_its_image() {
    let c = Cluster::start(NS).await;
    let pod = waiting_pod(&c, "box").await;

    // The container's environment.
    let (code, out, err) = exec(&c, &["box", "--", "sh", "-c", "echo $GREETING"], None).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "hello from the container\n");

    // Its mount namespace: the pod's own hosts file is mounted over /etc/hosts.
    let ip = pod.status.and_then(|s| s.pod_ip).unwrap();
    let (code, out, err) = exec(&c, &["box", "--", "cat", "/etc/hosts"], None).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("{ip}\tbox\n")), "{ip} not in {out}");

    // A command resolves through the container's image: the test program is only in the mapped image directory,
    // on no PATH; with the container's EXIT_AFTER_MS=0 it starts and exits at once.
    let (code, out, err) = exec(&c, &["box", "-c", "main", "--", "kube-local-testapp"], None).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.ends_with("testapp exiting with 0\n"), "{out}");
}

#[tokio::test]
async fn kubectl_exec_pipes_stdin_keeps_streams_apart_and_returns_the_exit_code() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;

    // stdin to the command, its output back; `cat` ends when kubectl's stdin does (the v5 CLOSE signal).
    let input = "first line\nsecond line\n";
    let (code, out, err) = exec(&c, &["-i", "box", "--", "cat"], Some(input)).await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, input);

    let (code, out, err) = exec(
        &c,
        &[
            "box",
            "--",
            "sh",
            "-c",
            "echo to-stdout; echo to-stderr >&2",
        ],
        None,
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "to-stdout\n");
    assert_eq!(err, "to-stderr\n");

    // A failing command's exit code becomes kubectl's.
    let (code, out, err) = exec(&c, &["box", "--", "sh", "-c", "echo partial; exit 3"], None).await;
    assert_eq!(code, Some(3), "{err}");
    assert_eq!(out, "partial\n");
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // A command that does not exist: the shell convention, 127.
    let (code, _, err) = exec(&c, &["box", "--", "no-such-command"], None).await;
    assert_eq!(code, Some(127), "{err}");
}

#[tokio::test]
async fn kubectl_exec_into_an_unknown_container_or_pod_fails_like_upstream() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;

    let (code, _, err) = exec(&c, &["box", "-c", "nope", "--", "true"], None).await;
    assert_ne!(code, Some(0));
    assert!(
        err.contains("container nope is not valid for pod box"),
        "{err}"
    );

    let (code, _, err) = exec(&c, &["ghost", "--", "true"], None).await;
    assert_ne!(code, Some(0));
    assert!(
        err.contains(r#"Error from server (NotFound): pods "ghost" not found"#),
        "{err}"
    );

    // Once the container has ended, there is nothing to exec into. The touch ends the container at once, and
    // kubectl before 1.34 may then drop the exit status: client-go read the connection before it had created its
    // streams ("Unknown stream id 3, discarding message", then "closed all streams"; fixed upstream by
    // kubernetes/kubernetes#131203). The command ran all the same: the pod finishing below is the check.
    let (code, _, err) = exec(&c, &["box", "--", "touch", "/trigger/go"], None).await;
    assert!(
        code == Some(0) || err.contains("Unknown stream id"),
        "{code:?}: {err}"
    );
    eventually("the pod finished", Duration::from_secs(20), || async {
        c.pod(NS, "box")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
    })
    .await;
    let (code, _, err) = exec(&c, &["box", "--", "true"], None).await;
    assert_ne!(code, Some(0));
    assert!(
        err.contains("cannot exec into a container in a completed pod"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_logs_follow_shows_lines_written_after_it_started() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    // The line after `early` is written only once kubectl follows.
    let follow = tokio::time::timeout(
        Duration::from_secs(30),
        kubectl(&c.env, &["logs", "-n", NS, "-f", "box"]),
    );
    let trigger = async {
        connected(&c, "log", 1).await;
        exec(&c, &["box", "--", "touch", "/trigger/go"], None).await
    };
    let (followed, (code, _, err)) = tokio::join!(follow, trigger);
    assert_eq!(code, Some(0), "{err}");
    let (ok, out, err) = followed.expect("kubectl logs -f ends when the container does");
    assert!(ok, "{err}");
    assert_eq!(out, "early\nafter\ndone\n");
}

#[tokio::test]
async fn kubectl_attach_streams_what_the_container_writes_until_it_ends() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    logged_early(&c).await;
    let attached = tokio::time::timeout(
        Duration::from_secs(30),
        kubectl(&c.env, &["attach", "-n", NS, "box", "-c", "main"]),
    );
    let trigger = async {
        connected(&c, "attach", 1).await;
        exec(&c, &["box", "--", "touch", "/trigger/go"], None).await
    };
    let (attached, (code, _, err)) = tokio::join!(attached, trigger);
    assert_eq!(code, Some(0), "{err}");
    let (ok, out, err) = attached.expect("kubectl attach ends when the container does");
    assert!(ok, "{err}");
    // From the moment it attached: not what was written before.
    assert_eq!(out, "after\ndone\n", "{err}");
}

#[tokio::test]
async fn kubectl_attach_writes_to_the_stdin_of_a_container_that_has_one() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "reader"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main",
                    "image": TESTAPP,
                    "stdin": true,
                    "stdinOnce": true,
                    "command": ["sh", "-c", "while read line; do echo \"got $line\"; done; echo eof"],
                }],
            },
        }),
    )
    .await;
    eventually("the pod running", Duration::from_secs(20), || async {
        c.pod(NS, "reader").await.filter(running)
    })
    .await;
    // kubectl's stdin goes to the container's; when it ends, a stdinOnce container reads end of file and finishes,
    // which ends the attach.
    let (ok, out, err) = tokio::time::timeout(
        Duration::from_secs(30),
        kubectl_in(
            &c.env,
            &["attach", "-i", "-n", NS, "reader"],
            Some("a\nb\n"),
        ),
    )
    .await
    .expect("kubectl attach ends when the container does");
    assert!(ok, "{err}");
    assert_eq!(out, "got a\ngot b\neof\n", "{err}");
}

#[tokio::test]
async fn kubectl_attach_it_reaches_the_terminal_of_a_tty_container() {
    let c = Cluster::start(NS).await;
    c.create::<Pod>(
        NS,
        json!({
            "metadata": {"name": "console"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "main",
                    "image": "busybox",
                    "command": ["sh"],
                    "stdin": true,
                    "tty": true,
                }],
            },
        }),
    )
    .await;
    eventually("the pod running", Duration::from_secs(20), || async {
        c.pod(NS, "console").await.filter(running)
    })
    .await;
    // A terminal of 100×30: kubectl sends its size on channel 4, and the container's terminal takes it (the shell
    // waits for it, whenever the resize arrives).
    let mut session =
        KubectlOnTerminal::start(&c.env, &["attach", "-it", "-n", NS, "console"], 100, 30);
    connected(&c, "attach", 1).await;
    session.type_keys(
        "until [ \"$(stty size)\" = '30 100' ]; do sleep 0.05; done; echo sized-$((2+3)) $TERM; tty; exit 3\r",
    );
    let (code, screen) = session.exit(Duration::from_secs(30)).await;
    // The container's exit code is not the attach's: the stream ends with Success when the run does.
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("sized-5 xterm\r\n/dev/pts/"), "{screen}");

    let pod = eventually(
        "the container terminated",
        Duration::from_secs(20),
        || async {
            let pod = c.pod(NS, "console").await?;
            let state = pod.status.as_ref()?.container_statuses.as_ref()?[0]
                .state
                .clone()?;
            state.terminated
        },
    )
    .await;
    assert_eq!(pod.exit_code, 3);
    let (ok, out, err) = kubectl(&c.env, &["logs", "-n", NS, "console"]).await;
    assert!(ok, "{err}");
    assert!(out.contains("sized-5 xterm\r\n"), "{out}");
}

#[tokio::test]
async fn kubectl_run_it_on_a_terminal_gives_a_shell_and_its_exit_code() {
    let c = Cluster::start(NS).await;
    // kubectl makes the pod (stdin, stdinOnce, tty), waits for it to run, attaches, and with --restart=Never
    // returns the container's exit code once the session ends.
    let mut session = KubectlOnTerminal::start(
        &c.env,
        &[
            "run",
            "-it",
            "-n",
            NS,
            "shell",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
        ],
        80,
        24,
    );
    connected(&c, "attach", 1).await;
    session.type_keys("echo run-$((3*3)); exit 4\r");
    let (code, screen) = session.exit(Duration::from_secs(30)).await;
    assert_eq!(code, Some(4), "{screen}");
    assert!(screen.contains("run-9\r\n"), "{screen}");
    let pod = c.pod(NS, "shell").await.unwrap();
    let container = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(
        (container.tty, container.stdin, container.stdin_once),
        (Some(true), Some(true), Some(true))
    );
}

#[tokio::test]
async fn an_attach_asking_for_a_tty_gets_what_the_container_has() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    logged_early(&c).await;
    // The container runs without a terminal: as upstream's kubelet, the container's setting decides, not the
    // request's, and the output comes as the container writes it (no terminal turning \n into \r\n).
    let params = AttachParams {
        tty: true,
        stdin: false,
        stdout: true,
        stderr: false,
        ..AttachParams::default()
    };
    let mut attached = c.api::<Pod>(NS).attach("box", &params).await.unwrap();
    let mut stdout = attached.stdout().unwrap();
    let status = attached.take_status().unwrap();
    connected(&c, "attach", 1).await;
    let (code, _, err) = exec(&c, &["box", "--", "touch", "/trigger/go"], None).await;
    assert_eq!(code, Some(0), "{err}");
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "after\ndone\n");
    assert_eq!(status.await.unwrap().status.as_deref(), Some("Success"));
}

#[tokio::test]
async fn kube_client_exec_streams_both_ways_and_reports_the_status() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    let pods = c.api::<Pod>(NS);

    let mut attached = pods
        .exec(
            "box",
            [
                "sh",
                "-c",
                "read line; echo got $line; echo oops >&2; exit 4",
            ],
            &AttachParams::default().stdin(true),
        )
        .await
        .unwrap();
    let mut stdin = attached.stdin().unwrap();
    let mut stdout = attached.stdout().unwrap();
    let mut stderr = attached.stderr().unwrap();
    let status = attached.take_status().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"ping\n")
        .await
        .unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let (read_out, read_err) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    read_out.unwrap();
    read_err.unwrap();
    assert_eq!(out, "got ping\n");
    assert_eq!(err, "oops\n");
    let status = status.await.unwrap();
    assert_eq!(status.status.as_deref(), Some("Failure"));
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!(cause.reason.as_deref(), Some("ExitCode"));
    assert_eq!(cause.message.as_deref(), Some("4"));
    attached.join().await.unwrap();

    let mut attached = pods
        .exec("box", ["true"], &AttachParams::default())
        .await
        .unwrap();
    let status = attached.take_status().unwrap().await.unwrap();
    assert_eq!(status.status.as_deref(), Some("Success"));

    // Errors before the upgrade come back as the API server's Status.
    let err = pods
        .exec("box", ["true"], &AttachParams::default().container("nope"))
        .await
        .err()
        .unwrap();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 400);
            assert_eq!(s.message, "container nope is not valid for pod box");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_client_exec_with_a_tty_runs_on_a_terminal_it_resizes() {
    use futures::SinkExt;
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    // The command waits for the size the client sets, so the resize is observed whenever it arrives.
    let mut attached = c
        .api::<Pod>(NS)
        .exec(
            "box",
            [
                "sh",
                "-c",
                "tty; until [ \"$(stty size)\" = '30 100' ]; do sleep 0.05; done; echo resized $TERM; exit 5",
            ],
            &AttachParams::interactive_tty(),
        )
        .await
        .unwrap();
    let mut size = attached.terminal_size().unwrap();
    let mut stdout = attached.stdout().unwrap();
    let status = attached.take_status().unwrap();
    size.send(kube::api::TerminalSize {
        width: 100,
        height: 30,
    })
    .await
    .unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    // A terminal ends its lines with CR LF.
    assert!(out.starts_with("/dev/pts/"), "{out}");
    assert!(out.ends_with("resized xterm\r\n"), "{out}");
    let status = status.await.unwrap();
    assert_eq!(status.reason.as_deref(), Some("NonZeroExitCode"));
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!(cause.message.as_deref(), Some("5"));
}

#[tokio::test]
async fn an_exec_whose_client_goes_away_is_killed() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    // The pod shares the host's filesystem outside its mounts, so the command can leave its pid where the test looks.
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());
    let attached = c
        .api::<Pod>(NS)
        .exec(
            "box",
            ["sh", "-c", script.as_str()],
            &AttachParams::default(),
        )
        .await
        .unwrap();
    let pid: u32 = eventually("the command running", Duration::from_secs(10), || async {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse().ok())
    })
    .await;
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    attached.abort();
    drop(attached);
    eventually("the command killed", Duration::from_secs(10), || async {
        // Gone, or a zombie its parent has yet to reap.
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        (stat.is_empty() || stat.contains(") Z ")).then_some(())
    })
    .await;
}

/// Sends an upgrade request for `pods/box/exec` offering `protocols` (`upgrade` names the protocol upgraded to);
/// returns the status, the chosen subprotocol and the body.
async fn upgrade_request(
    c: &Cluster,
    method: &str,
    upgrade: &str,
    protocols: &str,
) -> (u16, Option<String>, String) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!(
            "/api/v1/namespaces/{NS}/pods/box/exec?command=true&stdout=true"
        ))
        .header("connection", "Upgrade")
        .header("upgrade", upgrade)
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .header("sec-websocket-protocol", protocols)
        .header("x-stream-protocol-version", protocols)
        .body(kube::client::Body::empty())
        .unwrap();
    let response = c.client().send(request).await.unwrap();
    let status = response.status().as_u16();
    let chosen = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let body = if status == 101 {
        String::new()
    } else {
        let bytes = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (status, chosen, body)
}

#[tokio::test]
async fn the_kubelet_negotiates_v5_or_v4_and_refuses_other_protocols() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    // v5 is preferred; a client offering only v4 (older kube-rs, other clients) gets v4.
    let (status, chosen, body) = upgrade_request(
        &c,
        "GET",
        "websocket",
        "v4.channel.k8s.io, v5.channel.k8s.io",
    )
    .await;
    assert_eq!(
        (status, chosen.as_deref()),
        (101, Some("v5.channel.k8s.io")),
        "{body}"
    );
    let (status, chosen, body) = upgrade_request(&c, "GET", "websocket", "v4.channel.k8s.io").await;
    assert_eq!(
        (status, chosen.as_deref()),
        (101, Some("v4.channel.k8s.io")),
        "{body}"
    );
    // The text protocols of old clients are refused in words, over WebSocket and over SPDY.
    let (status, _, body) = upgrade_request(&c, "GET", "websocket", "channel.k8s.io").await;
    assert_eq!(status, 400);
    assert!(
        body.contains("none of the offered WebSocket subprotocols is served"),
        "{body}"
    );
    let (status, _, body) = upgrade_request(&c, "POST", "SPDY/3.1", "channel.k8s.io").await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("unable to negotiate protocol"), "{body}");
    // SPDY with v4 (what kube-apiserver speaks to a kubelet) is served.
    let (status, _, body) = upgrade_request(&c, "POST", "SPDY/3.1", "v4.channel.k8s.io").await;
    assert_eq!(status, 101, "{body}");
}

/// kubectl's SPDY transport (kube-apiserver's to a kubelet, and kubectl's own when WebSockets are turned off):
/// output, error output, the exit code and stdin, as over WebSockets.
#[tokio::test]
async fn kubectl_exec_over_spdy_relays_the_streams_and_the_exit_code() {
    let c = Cluster::start(NS).await;
    waiting_pod(&c, "box").await;
    let kubeconfig = c.env.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["exec", "-i", "-n", NS, "box", "--", "sh", "-c"])
            .arg("cat; echo to-stderr >&2; exit 7")
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"through spdy\n")
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let stderr = crate::shared::stderr(&out);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert_eq!(crate::shared::stdout(&out), "through spdy\n");
    assert!(stderr.contains("to-stderr"), "{stderr}");

    // Both directions full at once (a client sending megabytes to `cat` while it echoes them): nothing waits on
    // the other side for ever.
    let kubeconfig = c.env.kubeconfig_path().to_path_buf();
    let big = tokio::task::spawn_blocking(move || {
        use std::io::Write as _;
        let mut child = std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["exec", "-i", "-n", NS, "box", "--", "cat"])
            .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..(8 * 1024 * 1024 / chunk.len()) {
                stdin.write_all(&chunk).unwrap();
            }
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    });
    let big = tokio::time::timeout(Duration::from_secs(120), big)
        .await
        .expect("8 MiB through cat over SPDY within 2 minutes")
        .unwrap();
    assert_eq!(
        big.status.code(),
        Some(0),
        "{}",
        crate::shared::stderr(&big)
    );
    assert_eq!(big.stdout.len(), 8 * 1024 * 1024);

    // Commands that end before the client has opened all its streams: their exit code still comes through.
    for (command, code) in [("true", 0), ("exit 3", 3)] {
        for _ in 0..3 {
            let kubeconfig = c.env.kubeconfig_path().to_path_buf();
            let out = tokio::task::spawn_blocking(move || {
                std::process::Command::new("kubectl")
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["exec", "-n", NS, "box", "--", "sh", "-c", command])
                    .env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false")
                    .output()
                    .unwrap()
            })
            .await
            .unwrap();
            assert_eq!(
                out.status.code(),
                Some(code),
                "{command}: {}",
                crate::shared::stderr(&out)
            );
        }
    }
}

#[tokio::test]
async fn kubectl_exec_works_over_https_with_rbac() {
    // HTTPS, authentication and RBAC: the kubeconfig's admin certificate may create pods/exec.
    let c = Cluster::with_authentication(NS).await;
    waiting_pod(&c, "box").await;
    let (code, out, err) = exec(
        &c,
        &["-i", "box", "--", "sh", "-c", "cat; exit 7"],
        Some("over tls\n"),
    )
    .await;
    assert_eq!(code, Some(7), "{err}");
    assert_eq!(out, "over tls\n");
}
