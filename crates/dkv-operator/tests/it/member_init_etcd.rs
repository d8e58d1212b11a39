//! `dkv member-init` against real etcd: the configuration it writes for the
//! members of a new cluster forms a working 3-member cluster (etcd 3.4, 3.5,
//! 3.6 and 3.7), a member restarting from its data rejoins, every optional
//! `spec.etcd` setting is in effect on each release, and every
//! setting it writes is one each release knows (etcd ignores the keys of a
//! configuration file it does not know, so a removed flag would pass
//! silently).
//!
//! Each member runs as its own process on its own loopback address, inside a
//! private mount namespace whose `/etc/hosts` resolves the members' stable DNS
//! names — the same view a pod has through the headless peer Service.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dkv_test_support::paths::etcd_bin_dir;

const CLUSTER: &str = "orders";
const NAMESPACE: &str = "shop";

/// The etcd binary of a minor version, installed by `scripts/install-etcd.sh`.
fn etcd_binary(minor: &str) -> PathBuf {
    etcd_bin_dir(minor).join("etcd")
}

fn etcdctl() -> PathBuf {
    etcd_bin_dir("3.5").join("etcdctl")
}

/// A loopback subnet unlikely to collide with other tests running at once.
fn member_ip(base: u8, ordinal: usize) -> String {
    let pid = std::process::id();
    format!("127.{}.{}.{}", 100 + base, (pid % 250) as u8, ordinal + 1)
}

struct Member {
    ip: String,
    data_dir: PathBuf,
    config: PathBuf,
    process: Option<Child>,
}

struct Cluster {
    dir: tempfile::TempDir,
    etcd: PathBuf,
    hosts: PathBuf,
    members: Vec<Member>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for member in &mut self.members {
            stop(member);
        }
    }
}

fn stop(member: &mut Member) {
    if let Some(mut child) = member.process.take() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Cluster {
    fn new(minor: &str, base: u8) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let members: Vec<Member> = (0..4)
            .map(|i| Member {
                ip: member_ip(base, i),
                data_dir: dir.path().join(format!("member-{i}/data")),
                config: dir.path().join(format!("member-{i}/etcd.conf.yml")),
                process: None,
            })
            .collect();
        let mut hosts = String::from("127.0.0.1 localhost\n");
        for (i, m) in members.iter().enumerate() {
            hosts.push_str(&format!(
                "{} {CLUSTER}-{i}.{CLUSTER}-peer.{NAMESPACE}.svc\n",
                m.ip
            ));
        }
        let hosts_path = dir.path().join("hosts");
        std::fs::write(&hosts_path, hosts).unwrap();
        Self {
            etcd: etcd_binary(minor),
            hosts: hosts_path,
            dir,
            members,
        }
    }

    /// Runs `dkv member-init` for member `i`, as its init container would.
    fn member_init(&self, i: usize) -> std::process::Output {
        self.member_init_with(i, &[])
    }

    fn member_init_with(&self, i: usize, extra: &[String]) -> std::process::Output {
        let member = &self.members[i];
        Command::new(env!("CARGO_BIN_EXE_dkv"))
            .arg("member-init")
            .args(extra)
            .args([
                &format!("--cluster={CLUSTER}"),
                &format!("--peer-service={CLUSTER}-peer"),
                "--bootstrap-size=3",
                "--initial-cluster-token=shop-orders-test-uid",
                &format!("--data-dir={}", member.data_dir.display()),
                &format!("--config-file={}", member.config.display()),
            ])
            .env("POD_NAME", format!("{CLUSTER}-{i}"))
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_IP", &member.ip)
            .output()
            .unwrap()
    }

    fn start(&mut self, i: usize) {
        self.start_with(i, &[]);
    }

    fn start_with(&mut self, i: usize, extra: &[String]) {
        let init = self.member_init_with(i, extra);
        assert!(
            init.status.success(),
            "member-init failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let log = std::fs::File::create(self.dir.path().join(format!("member-{i}.log"))).unwrap();
        // A private mount namespace with its own /etc/hosts: the member sees
        // the cluster's DNS names the way a pod would.
        let unprivileged = !nix_is_root();
        let mut command = Command::new("unshare");
        if unprivileged {
            command.arg("--map-root-user");
        }
        let child = command
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(r#"mount --bind "$1" /etc/hosts && exec "$2" --config-file "$3""#)
            .arg("sh")
            .arg(&self.hosts)
            .arg(&self.etcd)
            .arg(&self.members[i].config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.members[i].process = Some(child);
    }

    fn endpoints(&self) -> String {
        self.members
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| format!("http://{}:2379", m.ip))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn etcdctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(etcdctl())
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", self.endpoints()))
            .arg("--command-timeout=5s")
            .args(args)
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Waits until every member answers `/health` with true (a leader exists
    /// and each member serves).
    fn wait_healthy(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let healthy = self
                .members
                .iter()
                .filter(|m| m.process.is_some())
                .all(|m| health(&m.ip).is_some_and(|body| body.contains("\"health\":\"true\"")));
            if healthy {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = (0..4)
                    .map(|i| {
                        std::fs::read_to_string(self.dir.path().join(format!("member-{i}.log")))
                            .unwrap_or_default()
                    })
                    .map(|l| l.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
                    .collect();
                panic!(
                    "cluster not healthy within {within:?}; last log lines:\n{}",
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// GET http://ip:2381/health with a plain TCP client (no HTTP dependency).
fn health(ip: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(
        &format!("{ip}:2381").parse().ok()?,
        Duration::from_secs(1),
    )
    .ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(stream, "GET /health HTTP/1.0\r\nHost: {ip}\r\n\r\n").ok()?;
    let mut body = String::new();
    stream.read_to_string(&mut body).ok()?;
    Some(body)
}

fn forms_a_cluster_and_survives_a_member_restart(minor: &str, base: u8) {
    let mut cluster = Cluster::new(minor, base);
    for i in 0..3 {
        cluster.start(i);
    }
    cluster.wait_healthy(Duration::from_secs(30));

    let members = cluster.etcdctl(&["member", "list"]).unwrap();
    for i in 0..3 {
        assert!(
            members.contains(&format!(
                "{CLUSTER}-{i}, http://{CLUSTER}-{i}.{CLUSTER}-peer.{NAMESPACE}.svc:2380"
            )),
            "member {i} missing or with the wrong peer URL:\n{members}"
        );
    }
    assert_eq!(members.lines().count(), 3, "{members}");
    cluster.etcdctl(&["put", "greeting", "hello"]).unwrap();

    // Restart member 2 from its data: member-init must see the data and
    // not bootstrap, and the member rejoins with the write it had.
    stop(&mut cluster.members[2]);
    let init = cluster.member_init(2);
    assert!(String::from_utf8_lossy(&init.stderr).contains("restarts from its existing data"));
    let config = std::fs::read_to_string(&cluster.members[2].config).unwrap();
    assert!(
        config.contains("\"initial-cluster-state\": \"existing\""),
        "{config}"
    );
    cluster.start(2);
    cluster.wait_healthy(Duration::from_secs(30));
    let ip = cluster.members[2].ip.clone();
    let out = Command::new(etcdctl())
        .env("ETCDCTL_API", "3")
        .args([
            &format!("--endpoints=http://{ip}:2379"),
            "get",
            "greeting",
            "--print-value-only",
            "--consistency=s",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hello");
}

#[test]
fn etcd_3_5_members_configured_by_member_init_form_a_cluster() {
    forms_a_cluster_and_survives_a_member_restart("3.5", 0);
}

#[test]
fn etcd_3_4_members_configured_by_member_init_form_a_cluster() {
    forms_a_cluster_and_survives_a_member_restart("3.4", 1);
}

/// etcd 3.6.16 and 3.7.3, built from etcd's Go modules (`go/etcd/`).
#[test]
fn etcd_3_6_members_configured_by_member_init_form_a_cluster() {
    forms_a_cluster_and_survives_a_member_restart("3.6.16", 4);
}

#[test]
fn etcd_3_7_members_configured_by_member_init_form_a_cluster() {
    forms_a_cluster_and_survives_a_member_restart("3.7.3", 5);
}

/// Every key of the configuration member-init writes, TLS on, as the flag
/// etcd documents for it (`client-transport-security.cert-file` is
/// `--cert-file`, the peer's `--peer-cert-file`).
fn config_flags(config: &serde_json::Value) -> Vec<String> {
    let mut flags = Vec::new();
    for (key, value) in config.as_object().into_iter().flatten() {
        let prefix = match key.as_str() {
            "client-transport-security" => "",
            "peer-transport-security" => "peer-",
            _ => {
                flags.push(format!("--{key}"));
                continue;
            }
        };
        for nested in value.as_object().into_iter().flatten().map(|(k, _)| k) {
            flags.push(format!("--{prefix}{nested}"));
        }
    }
    flags
}

#[test]
fn every_setting_member_init_writes_is_a_flag_of_each_etcd_release() {
    let cluster = Cluster::new("3.5", 6);
    let tls = cluster.dir.path().join("tls");
    // Each tools directory and the release it holds: member-init spells
    // some settings (the corruption checks) per version.
    for (release, version) in [
        ("3.4", "3.4.23"),
        ("3.5", "3.5.16"),
        ("3.5.30", "3.5.30"),
        ("3.6.16", "3.6.16"),
        ("3.7.3", "3.7.3"),
    ] {
        let init = cluster.member_init_with(
            0,
            &[
                "--peer-tls".to_owned(),
                "--client-tls".to_owned(),
                format!("--tls-dir={}", tls.display()),
                format!("--etcd-version={version}"),
            ]
            .into_iter()
            .chain(tuning_args())
            .collect::<Vec<_>>(),
        );
        assert!(
            init.status.success(),
            "member-init failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let text = std::fs::read_to_string(&cluster.members[0].config).unwrap();
        let config: serde_json::Value = serde_json::from_str(&text).unwrap();
        let flags = config_flags(&config);
        for wanted in [
            "--name",
            "--quota-backend-bytes",
            "--peer-cert-file",
            "--cert-file",
            "--heartbeat-interval",
            "--election-timeout",
            "--snapshot-count",
            "--max-request-bytes",
            "--max-txn-ops",
            "--log-level",
            "--max-concurrent-streams",
            "--grpc-keepalive-interval",
        ] {
            assert!(flags.iter().any(|f| f == wanted), "{wanted} in {flags:?}");
        }
        let help = Command::new(etcd_binary(release))
            .arg("--help")
            .output()
            .unwrap();
        // etcd prints its usage to stderr (3.4, 3.5) or stdout.
        let usage = format!(
            "{}{}",
            String::from_utf8_lossy(&help.stdout),
            String::from_utf8_lossy(&help.stderr)
        );
        let known: std::collections::BTreeSet<&str> = usage
            .split_whitespace()
            .filter(|word| word.starts_with("--"))
            .collect();
        let unknown: Vec<&String> = flags
            .iter()
            .filter(|f| !known.contains(f.as_str()))
            .collect();
        assert!(
            unknown.is_empty(),
            "etcd {version} has no flag for {unknown:?} (member-init wrote:\n{text})"
        );
        // Feature gates (3.6 on) are one flag: each gate must be one the
        // release lists.
        let gates = config["feature-gates"].as_str().unwrap_or_default();
        for gate in gates.split(',').filter(|g| !g.is_empty()) {
            let name = gate.split('=').next().unwrap_or_default();
            assert!(
                usage.contains(&format!("{name}=true|false")),
                "etcd {version} has no feature gate {name}"
            );
        }
    }
}

/// member-init's arguments for every optional `spec.etcd` setting, as the
/// operator passes them: heartbeat 250ms, election 2.5s, a snapshot every
/// 20 entries, requests up to 2 KiB, transactions of up to 2 operations,
/// debug logging, and two extra arguments.
fn tuning_args() -> Vec<String> {
    [
        "--heartbeat-interval-ms=250",
        "--election-timeout-ms=2500",
        "--snapshot-count=20",
        "--max-request-bytes=2048",
        "--max-txn-ops=2",
        "--log-level=debug",
        "--extra-arg=max-concurrent-streams=100",
        "--extra-arg=grpc-keepalive-interval=1h",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A 3-member cluster of release `minor` started with [`tuning_args`]: each
/// setting is in effect as etcd reports it or behaves.
fn tuned_members_run_with_every_setting(minor: &str, base: u8) {
    let mut cluster = Cluster::new(minor, base);
    for i in 0..3 {
        cluster.start_with(i, &tuning_args());
    }
    cluster.wait_healthy(Duration::from_secs(30));

    let big = "v".repeat(3000);
    let refused = cluster.etcdctl(&["put", "big", &big]).unwrap_err();
    assert!(refused.contains("request is too large"), "{refused}");
    cluster.etcdctl(&["put", "small", "v"]).unwrap();

    let txn = |ops: usize| {
        let body: String = (0..ops).map(|i| format!("put txn-{i} v\n")).collect();
        let mut child = Command::new(etcdctl())
            .env("ETCDCTL_API", "3")
            .arg(format!("--endpoints={}", cluster.endpoints()))
            .args(["txn", "--interactive=false"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            // No comparisons, the puts on success, nothing on failure.
            let mut stdin = child.stdin.take().unwrap();
            write!(stdin, "\n{body}\n\n").unwrap();
        }
        let out = child.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, err) = txn(3);
    assert!(
        !ok && err.contains("too many operations in txn request"),
        "{err}"
    );
    let (ok, err) = txn(2);
    assert!(ok, "a transaction of 2 operations: {err}");

    // A snapshot every 20 entries: 30 writes leave one on every member.
    for i in 0..30 {
        cluster.etcdctl(&["put", &format!("k{i}"), "v"]).unwrap();
    }
    for member in &cluster.members[..3] {
        let snaps: Vec<String> = std::fs::read_dir(member.data_dir.join("member/snap"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".snap"))
            .collect();
        assert!(
            !snaps.is_empty(),
            "no .snap in {}",
            member.data_dir.display()
        );
    }

    // The timings and the extra argument, as etcd logs its configuration;
    // the debug level, by its lines.
    let log = std::fs::read_to_string(cluster.dir.path().join("member-0.log")).unwrap();
    for wanted in [
        r#""heartbeat-interval":"250ms""#,
        r#""election-timeout":"2.5s""#,
        r#""snapshot-count":20"#,
        r#""max-request-bytes":2048"#,
        r#""max-concurrent-streams":100"#,
        r#""level":"debug""#,
    ] {
        assert!(log.contains(wanted), "etcd {minor} logged no {wanted}");
    }
}

#[test]
fn etcd_3_4_members_run_with_every_etcd_setting() {
    tuned_members_run_with_every_setting("3.4", 7);
}

#[test]
fn etcd_3_5_members_run_with_every_etcd_setting() {
    tuned_members_run_with_every_setting("3.5", 8);
}

#[test]
fn etcd_3_6_members_run_with_every_etcd_setting() {
    tuned_members_run_with_every_setting("3.6.16", 9);
}

#[test]
fn etcd_3_7_members_run_with_every_etcd_setting() {
    tuned_members_run_with_every_setting("3.7.3", 10);
}

fn write_record(cluster: &Cluster, state: &str, started: &[(usize, bool)]) -> PathBuf {
    let members: Vec<serde_json::Value> = started
        .iter()
        .map(|(i, started)| {
            serde_json::json!({
                "name": format!("{CLUSTER}-{i}"),
                "peerURL": format!("http://{CLUSTER}-{i}.{CLUSTER}-peer.{NAMESPACE}.svc:2380"),
                "started": started,
            })
        })
        .collect();
    let path = cluster.dir.path().join("members.json");
    std::fs::write(
        &path,
        serde_json::json!({"state": state, "members": members}).to_string(),
    )
    .unwrap();
    path
}

/// Scale-up the way the operator drives it: add a learner, list it in the
/// membership record, start its pod (member-init joins `existing`), promote.
/// Then a member whose volume was wiped refuses to start and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_membership_record_drives_joins_and_refuses_lost_members() {
    use dkv_etcd::{EtcdAdmin, GrpcAdmin};

    let mut cluster = Cluster::new("3.5", 2);
    let record = write_record(&cluster, "new", &[(0, false), (1, false), (2, false)]);
    let members_file = format!("--members-file={}", record.display());
    for i in 0..3 {
        cluster.start_with(i, std::slice::from_ref(&members_file));
    }
    cluster.wait_healthy(Duration::from_secs(30));

    let endpoints: Vec<String> = (0..3)
        .map(|i| format!("http://{}:2379", cluster.members[i].ip))
        .collect();
    let admin = GrpcAdmin::new(endpoints, Duration::from_secs(3));
    let peer = format!("http://{CLUSTER}-3.{CLUSTER}-peer.{NAMESPACE}.svc:2380");
    let deadline = Instant::now() + Duration::from_secs(30);
    let learner = loop {
        match admin.add_learner(std::slice::from_ref(&peer)).await {
            Ok(m) => break m,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await
            }
            Err(e) => panic!("add learner: {e}"),
        }
    };
    write_record(
        &cluster,
        "existing",
        &[(0, true), (1, true), (2, true), (3, false)],
    );
    let init = cluster.member_init_with(3, std::slice::from_ref(&members_file));
    assert!(
        String::from_utf8_lossy(&init.stderr).contains("joins the existing cluster"),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    cluster.start_with(3, std::slice::from_ref(&members_file));
    loop {
        match admin.promote(learner.id).await {
            Ok(()) => break,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(300)).await
            }
            Err(e) => panic!("promote: {e}"),
        }
    }
    cluster.wait_healthy(Duration::from_secs(30));
    let members = admin.member_list().await.unwrap();
    assert_eq!(members.len(), 4);
    assert!(
        members.iter().all(|m| !m.is_learner && m.has_started()),
        "{members:?}"
    );

    // Member 1 loses its volume.
    stop(&mut cluster.members[1]);
    std::fs::remove_dir_all(&cluster.members[1].data_dir).unwrap();
    write_record(
        &cluster,
        "existing",
        &[(0, true), (1, true), (2, true), (3, true)],
    );
    let termination = cluster.dir.path().join("termination-log");
    let refused = cluster.member_init_with(
        1,
        &[
            members_file.clone(),
            format!("--termination-log={}", termination.display()),
        ],
    );
    assert!(
        !refused.status.success(),
        "a member without its data must not start"
    );
    let message = std::fs::read_to_string(&termination).unwrap();
    assert!(message.starts_with("dkv:data-lost"), "{message}");
}

/// The operator's view of a real cluster: ordinals, one leader, health —
/// and a killed member seen as unhealthy while the others still answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_observes_real_members_by_pod_ip() {
    use dkv_operator::cluster::membership::observe::{member_pods, observe_members};
    use std::sync::Arc;

    let mut cluster = Cluster::new("3.5", 3);
    for i in 0..3 {
        cluster.start(i);
    }
    cluster.wait_healthy(Duration::from_secs(30));
    let pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>> = (0..3)
        .map(|i| {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("{CLUSTER}-{i}"), "namespace": NAMESPACE},
                    "spec": {"containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.16-0"}]},
                    "status": {"podIP": cluster.members[i].ip, "conditions": [{"type": "Ready", "status": "True"}]}
                }))
                .unwrap(),
            )
        })
        .collect();
    let views = member_pods(CLUSTER, &pods, None, None, "http");
    let endpoints: Vec<String> = views.iter().filter_map(|p| p.endpoint.clone()).collect();
    let admin = dkv_etcd::GrpcAdmin::new(endpoints, Duration::from_secs(2));

    let observed = observe_members(CLUSTER, &admin, &views).await.unwrap();
    assert_eq!(
        observed.iter().map(|m| m.ordinal).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(
        observed
            .iter()
            .all(|m| m.healthy && m.started && !m.learner),
        "{observed:?}"
    );
    assert_eq!(observed.iter().filter(|m| m.leader).count(), 1);
    assert!(
        observed
            .iter()
            .all(|m| m.version == Some(dkv_operator::etcd_version::EtcdVersion::new(3, 5, 16)))
    );

    stop(&mut cluster.members[2]);
    // If member 2 led, the survivors answer "no leader" until they elect one:
    // the observation is then empty (the operator waits and looks again).
    let deadline = Instant::now() + Duration::from_secs(20);
    let observed = loop {
        let started = Instant::now();
        let observed = observe_members(CLUSTER, &admin, &views).await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "one dead member costs one deadline: {:?}",
            started.elapsed()
        );
        match observed {
            Some(members) if members[0].healthy && members[1].healthy => break members,
            _ if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            other => panic!("the survivors never answered: {other:?}"),
        }
    };
    assert!(!observed[2].healthy, "{observed:?}");
    assert_eq!(
        observed.iter().filter(|m| m.leader).count(),
        1,
        "a new leader among the survivors"
    );
}
