//! Baselines with no Kubernetes and no operator: the same etcd binaries the
//! kubelet runs, started as 3 processes on loopback by the harness itself —
//! what a bare script does: start them, restart one. (The rolling restart's
//! baseline is not here: it restarts the cluster's own member pods, see
//! `cluster_ops::script_rolling_restart`.)

use std::path::Path;
use std::time::{Duration, Instant};

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
}
