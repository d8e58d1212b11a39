//! `GrpcAdmin` against real etcd 3.5 processes: the whole membership cycle
//! the operator drives, leadership transfer, snapshots, alarms, and bounded
//! failure on an unreachable member; and a learner's status with
//! authentication on, on 3.5, 3.6 and 3.7.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dkv_etcd::{Error, EtcdAdmin, GrpcAdmin, MemberId};
use futures::TryStreamExt;
use sha2::{Digest, Sha256};

fn etcd_dir() -> PathBuf {
    etcd_dir_of("3.5")
}

/// A release installed in the tools directory (`DKV_TOOLS_DIR`, else the
/// checkout's `.tools`).
fn etcd_dir_of(release: &str) -> PathBuf {
    let tools = std::env::var_os("DKV_TOOLS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools"),
        PathBuf::from,
    );
    let dir = tools.join(format!("etcd-{release}/usr/bin"));
    assert!(
        dir.join("etcd").exists(),
        "run scripts/install-etcd.sh (scripts/test.sh does)"
    );
    dir
}

fn ip(ordinal: usize) -> String {
    format!(
        "127.{}.{}.{}",
        90,
        (std::process::id() % 250) as u8,
        ordinal + 1
    )
}

fn peer_url(i: usize) -> String {
    format!("http://{}:2380", ip(i))
}

fn client_url(i: usize) -> String {
    format!("http://{}:2379", ip(i))
}

struct Etcd {
    dir: tempfile::TempDir,
    processes: Vec<Option<Child>>,
    release: &'static str,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in self.processes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Etcd {
    fn start_member(&mut self, i: usize, members: &[usize], state: &str) {
        let initial: Vec<String> = members
            .iter()
            .map(|m| format!("m{m}={}", peer_url(*m)))
            .collect();
        let log = std::fs::File::create(self.dir.path().join(format!("m{i}.log"))).unwrap();
        let child = Command::new(etcd_dir_of(self.release).join("etcd"))
            .args([
                &format!("--name=m{i}"),
                &format!(
                    "--data-dir={}",
                    self.dir.path().join(format!("m{i}")).display()
                ),
                &format!("--listen-peer-urls={}", peer_url(i)),
                &format!("--initial-advertise-peer-urls={}", peer_url(i)),
                &format!("--listen-client-urls={}", client_url(i)),
                &format!("--advertise-client-urls={}", client_url(i)),
                &format!("--initial-cluster={}", initial.join(",")),
                &format!("--initial-cluster-state={state}"),
                "--initial-cluster-token=dkv-etcd-test",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        if self.processes.len() <= i {
            self.processes.resize_with(i + 1, || None);
        }
        self.processes[i] = Some(child);
    }

    fn stop_member(&mut self, i: usize) {
        if let Some(mut child) = self.processes[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Retries `f` while etcd asks to wait (or the member is still starting).
async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Error>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match f().await {
            Ok(v) => return v,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A one-member etcd 3.5 in `dir` on `127.<net>.<pid>.1` with `extra`
/// flags; the process and its client URL.
fn start_solo(dir: &Path, net: u8, extra: &[&str]) -> (Child, String) {
    let ip = format!("127.{net}.{}.1", (std::process::id() % 250) as u8);
    let client = format!("http://{ip}:2379");
    let log = std::fs::File::create(dir.join("etcd.log")).unwrap();
    let child = Command::new(etcd_dir().join("etcd"))
        .args([
            "--name=solo",
            &format!("--data-dir={}", dir.join("data").display()),
            &format!("--listen-peer-urls=http://{ip}:2380"),
            &format!("--initial-advertise-peer-urls=http://{ip}:2380"),
            &format!("--listen-client-urls={client}"),
            &format!("--advertise-client-urls={client}"),
            &format!("--initial-cluster=solo=http://{ip}:2380"),
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    (child, client)
}

fn etcdctl(endpoints: &str, args: &[&str]) {
    let out = Command::new(etcd_dir().join("etcdctl"))
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_cycle_leadership_and_snapshot_against_real_etcd() {
    let mut etcd = Etcd {
        dir: tempfile::tempdir().unwrap(),
        processes: Vec::new(),
        release: "3.5",
    };
    for i in 0..3 {
        etcd.start_member(i, &[0, 1, 2], "new");
    }
    let endpoints: Vec<String> = (0..3).map(client_url).collect();
    let admin = GrpcAdmin::new(endpoints.clone(), Duration::from_secs(3));

    // A formed cluster: three started voters, one leader all agree on.
    let members = eventually("member list", || admin.member_list()).await;
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| m.has_started() && !m.is_learner));
    let mut statuses = Vec::new();
    for endpoint in &endpoints {
        statuses.push(eventually("status", || admin.status(endpoint)).await);
    }
    let leader = statuses[0].leader;
    assert_ne!(leader, MemberId(0));
    assert!(
        statuses
            .iter()
            .all(|s| s.leader == leader && s.cluster_id == statuses[0].cluster_id)
    );
    assert_eq!(statuses.iter().filter(|s| s.is_leader()).count(), 1);
    assert_eq!(statuses[0].version, "3.5.16");

    for i in 0..50 {
        etcdctl(
            &endpoints.join(","),
            &["put", &format!("key-{i:03}"), &format!("value-{i}")],
        );
    }

    // Scale up: learner first, then its process, then promotion once it
    // caught up (etcd refuses earlier promotion; we retry on that refusal).
    let new_peer = [peer_url(3)];
    let learner = eventually("add learner", || admin.add_learner(&new_peer)).await;
    assert!(learner.is_learner);
    assert!(!learner.has_started());
    etcd.start_member(3, &[0, 1, 2, 3], "existing");
    eventually("promote", || admin.promote(learner.id)).await;
    // MemberList is answered from the responding member's own view, which
    // may trail the leader's for a moment: poll until the promotion shows.
    let members = eventually("promotion visible", || async {
        let members = admin.member_list().await?;
        if members.iter().any(|m| m.is_learner) {
            return Err(Error::LearnerNotReady {
                member: "m3".into(),
            });
        }
        Ok(members)
    })
    .await;
    assert_eq!(members.len(), 4);

    // Leadership moves only through the leader's own endpoint.
    let leader_endpoint = statuses
        .iter()
        .find(|s| s.is_leader())
        .unwrap()
        .endpoint
        .clone();
    let follower = statuses.iter().find(|s| !s.is_leader()).unwrap().member_id;
    admin.move_leader(&leader_endpoint, follower).await.unwrap();
    let after = eventually("status", || admin.status(&endpoints[0])).await;
    assert_eq!(after.leader, follower);

    // Scale down: remove the member, then its process.
    admin.remove(learner.id).await.unwrap();
    etcd.stop_member(3);
    let members = admin.member_list().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(matches!(
        admin.remove(learner.id).await,
        Err(Error::MemberNotFound { .. })
    ));

    // A snapshot from a follower streams a valid database.
    let follower_endpoint = statuses
        .iter()
        .find(|s| s.member_id != follower)
        .unwrap()
        .endpoint
        .clone();
    let stream = admin.snapshot(&follower_endpoint).await.unwrap();
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let db: Vec<u8> = chunks.concat();
    assert!(db.len() > 16 * 1024, "snapshot of {} bytes", db.len());
    let path = etcd.dir.path().join("snapshot.db");
    std::fs::write(&path, &db).unwrap();
    let status = Command::new(etcd_dir().join("etcdutl"))
        .args(["snapshot", "status", "-w", "json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "etcdutl rejects the snapshot: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let report = String::from_utf8_lossy(&status.stdout);
    assert!(
        report.contains("\"revision\":51") || report.contains("\"revision\": 51"),
        "{report}"
    );
    assert_eq!(format!("{:x}", Sha256::digest(&db)).len(), 64);

    // Maintenance calls on a healthy cluster.
    assert!(admin.alarms().await.unwrap().is_empty());
    admin.defragment(&endpoints[1]).await.unwrap();

    // An endpoint that does not answer fails within the deadline, retryably.
    let unreachable = GrpcAdmin::new(
        vec!["http://127.0.0.1:9".into()],
        Duration::from_millis(500),
    );
    let started = Instant::now();
    let err = unreachable.member_list().await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

/// NOSPACE, the way it happens in production: history of a hot key fills the
/// backend quota, etcd raises the alarm and refuses writes; compaction,
/// defragmentation and disarming bring writes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nospace_is_cleared_by_compact_defragment_disarm() {
    use std::io::Write;

    let dir = tempfile::tempdir().unwrap();
    let (mut child, client) = start_solo(dir.path(), 91, &["--quota-backend-bytes=4194304"]);
    let admin = GrpcAdmin::new(vec![client.clone()], Duration::from_secs(3));
    eventually("status", || admin.status(&client)).await;

    let put = || {
        let mut cmd = Command::new(etcd_dir().join("etcdctl"))
            .env("ETCDCTL_API", "3")
            .args([&format!("--endpoints={client}"), "put", "hot-key"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        cmd.stdin
            .take()
            .unwrap()
            .write_all(&vec![b'x'; 100 * 1024])
            .unwrap();
        let out = cmd.wait_with_output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let mut refused = None;
    for _ in 0..400 {
        let (ok, err) = put();
        if !ok {
            refused = Some(err);
            break;
        }
    }
    let refused = refused.expect("the quota was never reached");
    assert!(refused.contains("database space exceeded"), "{refused}");
    let alarms = admin.alarms().await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].kind, dkv_etcd::AlarmKind::NoSpace);

    let revision = admin.status(&client).await.unwrap().revision;
    admin.compact(revision).await.unwrap();
    admin.defragment(&client).await.unwrap();
    admin.disarm(alarms[0]).await.unwrap();
    assert!(admin.alarms().await.unwrap().is_empty());
    let (ok, err) = put();
    assert!(ok, "writes are accepted again: {err}");

    let _ = child.kill();
    let _ = child.wait();
}

/// With authentication on, a learner refuses to authenticate anyone, and
/// from 3.6 answers its status only to a user: the admin asks it with a
/// token a voting member issued, so a scale-up can see the learner catch
/// up. Each release with members of its own (ordinals 10 + 2k).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_learner_reports_its_status_with_authentication_on() {
    for (k, release) in ["3.5", "3.6.16", "3.7.3"].into_iter().enumerate() {
        let (voter, learner) = (10 + 2 * k, 11 + 2 * k);
        let mut etcd = Etcd {
            dir: tempfile::tempdir().unwrap(),
            processes: Vec::new(),
            release,
        };
        etcd.start_member(voter, &[voter], "new");
        let timeout = Duration::from_secs(3);
        let anonymous = GrpcAdmin::new(vec![client_url(voter)], timeout);
        eventually("enable auth", || anonymous.enable_auth("secret")).await;
        let endpoints = vec![client_url(voter), client_url(learner)];
        let root = dkv_etcd::UserCredentials {
            name: "root".to_owned(),
            password: "secret".to_owned(),
        };
        let admin = GrpcAdmin::new(endpoints.clone(), timeout).with_user(root);
        let peer = [peer_url(learner)];
        let added = eventually("add learner", || admin.add_learner(&peer)).await;
        etcd.start_member(learner, &[voter, learner], "existing");

        let status = eventually("the learner's status", || admin.status(&endpoints[1])).await;
        assert!(status.is_learner, "{release}: {status:?}");
        assert_eq!(status.member_id, added.id, "{release}");
        assert!(status.raft_index > 0, "{release}: {status:?}");
        if release != "3.5" {
            // Why the token: anonymously, 3.6 and later refuse.
            let refused = GrpcAdmin::new(endpoints.clone(), timeout)
                .status(&endpoints[1])
                .await;
            assert!(refused.is_err(), "{release}: {refused:?}");
        }

        eventually("promote", || admin.promote(added.id)).await;
        let promoted = eventually("the promoted member's status", || async {
            let status = admin.status(&endpoints[1]).await?;
            if status.is_learner {
                return Err(Error::LearnerNotReady {
                    member: added.id.to_string(),
                });
            }
            Ok(status)
        })
        .await;
        assert_eq!(promoted.leader, status.leader, "{release}");
        // A voter now: asked as root over the shared connection.
        let voter_status = eventually("the voter's status", || admin.status(&endpoints[1])).await;
        assert!(!voter_status.is_learner, "{release}: {voter_status:?}");
    }
}

/// Each condition of a guarded transaction as real etcd compares it: a
/// write goes through only where every guard holds, and a transaction
/// with no changes only checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarded_transactions_write_only_where_their_guards_hold() {
    use dkv_etcd::{Change, ChangeKind, Condition, EtcdData, Guard};

    let dir = tempfile::tempdir().unwrap();
    let (mut child, client) = start_solo(dir.path(), 92, &[]);
    let admin = GrpcAdmin::new(vec![client.clone()], Duration::from_secs(3));
    eventually("status", || admin.status(&client)).await;
    let put = |key: &str, value: &str| Change {
        revision: 0,
        kind: ChangeKind::Put,
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        lease: 7,
    };
    let delete = |key: &str| Change {
        revision: 0,
        kind: ChangeKind::Delete,
        key: key.as_bytes().to_vec(),
        value: Vec::new(),
        lease: 0,
    };
    let guarded = async |changes: &[Change], guards: &[Guard]| {
        admin.apply_guarded(changes, guards).await.unwrap()
    };
    let on = |key: &str, condition: Condition| Guard::new(key.as_bytes().to_vec(), condition);

    // Revision 2: a and b, without the lease the change names.
    assert!(
        guarded(
            &[put("a", "1"), put("b", "1")],
            &[on("a", Condition::Absent)]
        )
        .await
    );
    assert_eq!(admin.current_revision().await.unwrap(), 2);
    for (condition, holds) in [
        (Condition::ChangedAt(2), true),
        (Condition::ChangedAt(3), false),
        (Condition::ChangedBefore(3), true),
        (Condition::ChangedBefore(2), false),
        (Condition::Present, true),
        (Condition::Absent, false),
        (Condition::ValueIs(b"1".to_vec()), true),
        (Condition::ValueIs(b"2".to_vec()), false),
    ] {
        assert_eq!(
            guarded(&[], &[on("a", condition.clone())]).await,
            holds,
            "a: {condition:?}"
        );
    }
    for (condition, holds) in [
        (Condition::ChangedAt(2), false),
        (Condition::ChangedBefore(1), true),
        (Condition::Present, false),
        (Condition::Absent, true),
        (Condition::ValueIs(Vec::new()), false),
    ] {
        assert_eq!(
            guarded(&[], &[on("x", condition.clone())]).await,
            holds,
            "x: {condition:?}"
        );
    }
    // A check writes nothing; a refused write neither.
    assert_eq!(admin.current_revision().await.unwrap(), 2);
    assert!(!guarded(&[delete("a")], &[on("a", Condition::ChangedAt(1))]).await);
    assert_eq!(admin.current_revision().await.unwrap(), 2);
    let both = [
        on("a", Condition::ChangedAt(2)),
        on("b", Condition::ValueIs(b"1".to_vec())),
    ];
    assert!(guarded(&[delete("a")], &both).await);
    assert_eq!(admin.current_revision().await.unwrap(), 3);
    assert!(guarded(&[], &[on("a", Condition::Absent)]).await);

    let _ = child.kill();
    let _ = child.wait();
}
