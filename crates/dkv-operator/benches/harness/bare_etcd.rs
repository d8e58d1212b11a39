//! Baselines with no Kubernetes and no operator: the same etcd binaries the
//! kubelet runs, started as 3 processes on loopback by the harness itself —
//! what a bare script does: start them, restart one, restart each in turn.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use dkv_backup::testing::{EtcdProcess, etcd_bin_dir, loopback_ip};

/// Loopback group of the baselines' addresses (the kubelet's pods use
/// other 127.x ranges).
const GROUP: u8 = 77;

/// A bare 3-member cluster.
pub struct BareCluster {
    pub members: Vec<EtcdProcess>,
    names: Vec<String>,
    ips: Vec<String>,
    initial_cluster: String,
    token: String,
}

impl BareCluster {
    /// Starts 3 members of a new cluster under `dir` and waits until each
    /// serves and knows a leader; returns it with how long that took.
    pub async fn start(
        minor: &str,
        dir: &Path,
        round: u8,
    ) -> std::io::Result<(BareCluster, Duration)> {
        std::fs::create_dir_all(dir)?;
        let bin = etcd_bin_dir(minor);
        let names: Vec<String> = (0..3).map(|i| format!("bare{round}-{i}")).collect();
        let ips: Vec<String> = (0..3).map(|i| loopback_ip(GROUP + round, i)).collect();
        let initial_cluster = names
            .iter()
            .zip(&ips)
            .map(|(n, ip)| format!("{n}=http://{ip}:2380"))
            .collect::<Vec<_>>()
            .join(",");
        let token = format!("bare-{round}");
        let started = Instant::now();
        let members: Vec<EtcdProcess> = names
            .iter()
            .zip(&ips)
            .map(|(n, ip)| {
                EtcdProcess::start_member(&bin, n, ip, &dir.join(n), &token, &initial_cluster)
            })
            .collect();
        for m in &members {
            m.wait_ready().await;
        }
        let took = started.elapsed();
        Ok((
            BareCluster {
                members,
                names,
                ips,
                initial_cluster,
                token,
            },
            took,
        ))
    }

    /// Kills member `i` (SIGKILL), starts it again on its data directory
    /// at once, as a process supervisor would, and waits until it serves
    /// and knows a leader again; how long that took.
    pub async fn kill_and_restart(&mut self, minor: &str, i: usize) -> Duration {
        let bin = etcd_bin_dir(minor);
        let started = Instant::now();
        let data_dir = self.members[i].data_dir.clone();
        self.members[i].stop();
        self.members[i] = EtcdProcess::start_member(
            &bin,
            &self.names[i],
            &self.ips[i],
            &data_dir,
            &self.token,
            &self.initial_cluster,
        );
        self.members[i].wait_ready().await;
        started.elapsed()
    }

    /// Restarts the members one after the other, as a bare script rolls a
    /// change through a cluster: each is killed (SIGKILL), started again on
    /// its data directory, and waited for until it serves with a leader and
    /// answers a linearizable read (what `etcdctl endpoint health` checks)
    /// before the next one goes; how long the whole roll took.
    pub async fn rolling_restart(&mut self, minor: &str) -> anyhow::Result<Duration> {
        let started = Instant::now();
        for i in 0..self.members.len() {
            self.kill_and_restart(minor, i).await;
            self.wait_healthy(i, Duration::from_secs(30)).await?;
        }
        Ok(started.elapsed())
    }

    /// Waits until member `i` answers a linearizable read (its request goes
    /// through the leader, so the member is connected and caught up).
    async fn wait_healthy(&self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let url = self.members[i].client_url.clone();
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(1))
            .with_timeout(Duration::from_secs(2));
        let started = Instant::now();
        loop {
            let answer =
                match etcd_client::Client::connect([url.as_str()], Some(options.clone())).await {
                    Ok(mut c) => c.get("health", None).await.map(|_| ()),
                    Err(e) => Err(e),
                };
            match answer {
                Ok(()) => return Ok(()),
                Err(e) if started.elapsed() > timeout => {
                    bail!(
                        "bare member {} was not healthy within {timeout:?} of its restart: {e}",
                        self.names[i]
                    )
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}
