//! The operator as its own process (`dkv operator`), as it runs in a pod:
//! its resident memory comes from `/proc`, its reconcile counts and
//! durations from its `/metrics` endpoint, and killing it is a real crash.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, Command};

/// The operator image the bench's operators run as (kube-local's kubelet
/// runs every `ghcr.io/dkv-io/dkv:*` image as this build's `dkv`).
pub const TEST_IMAGE: &str = "ghcr.io/dkv-io/dkv:test";

/// A running `dkv operator`, killed on drop.
pub struct OperatorProcess {
    child: Child,
    metrics_addr: String,
}

impl OperatorProcess {
    /// Starts the operator against the API server of `kubeconfig`, without
    /// leader election or webhooks, logging to `log` (appended), and waits
    /// until its metrics endpoint answers.
    pub async fn start(dkv: &Path, kubeconfig: &Path, log: &Path) -> anyhow::Result<Self> {
        Self::start_as(dkv, kubeconfig, log, TEST_IMAGE, &[]).await
    }

    /// [`Self::start`] as the operator image `image`, with `extra` flags.
    pub async fn start_as(
        dkv: &Path,
        kubeconfig: &Path,
        log: &Path,
        image: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let image = format!("--operator-image={image}");
        let mut args = vec![
            "--leader-election=false",
            "--identity=bench-operator",
            &image,
        ];
        args.extend_from_slice(extra);
        Self::spawn(dkv, kubeconfig, log, &args).await
    }

    /// Starts a replica that takes part in leader election (the Lease
    /// `dkv-operator-leader` in `dkv-system`) as `identity`, as each replica
    /// of the Deployment in deploy/ does.
    pub async fn start_replica(
        dkv: &Path,
        kubeconfig: &Path,
        log: &Path,
        identity: &str,
    ) -> anyhow::Result<Self> {
        Self::spawn(
            dkv,
            kubeconfig,
            log,
            &[
                "--leader-election=true",
                &format!("--identity={identity}"),
                &format!("--operator-image={TEST_IMAGE}"),
            ],
        )
        .await
    }

    async fn spawn(
        dkv: &Path,
        kubeconfig: &Path,
        log: &Path,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        let port = dkv_test_support::free_port();
        let metrics_addr = format!("127.0.0.1:{port}");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening the operator log {}", log.display()))?;
        let err_file = log_file
            .try_clone()
            .context("duplicating the operator log handle")?;
        let child = Command::new(dkv)
            .args([
                "operator",
                &format!("--metrics-addr={metrics_addr}"),
                "--webhooks=false",
            ])
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(err_file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {} operator", dkv.display()))?;
        let operator = OperatorProcess {
            child,
            metrics_addr,
        };
        let started = Instant::now();
        while operator.metrics().await.is_err() {
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the operator's metrics endpoint did not answer within 60 s (log: {})",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(operator)
    }

    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child.id().context("the operator process has exited")
    }

    /// Resident set size now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> anyhow::Result<u64> {
        proc_status_kib(self.pid()?, "VmRSS:")
    }

    /// What the resident memory is made of: anonymous (heap, stacks) vs
    /// file-backed (the mapped binary and libraries), and the thread count.
    pub fn rss_breakdown(&self) -> anyhow::Result<String> {
        let pid = self.pid()?;
        let mib = |field: &str| proc_status_kib(pid, field).map(|k| k as f64 / 1024.0);
        let binary = binary_rss_kib(pid).map_or_else(
            |e| format!("unknown ({e:#})"),
            |k| format!("{:.1}", k as f64 / 1024.0),
        );
        Ok(format!(
            "VmRSS {:.1} MiB = anonymous {:.1} + file-backed {:.1} (of which the dkv binary's own pages {binary}) + shmem {:.1}; {} threads",
            mib("VmRSS:")?,
            mib("RssAnon:")?,
            mib("RssFile:")?,
            mib("RssShmem:")?,
            proc_status_kib(pid, "Threads:")?
        ))
    }

    /// The metrics endpoint's text.
    pub async fn metrics(&self) -> anyhow::Result<String> {
        http_get(&self.metrics_addr, "/metrics").await
    }

    /// Reconciles finished so far (every outcome) and their duration
    /// histogram.
    pub async fn reconciles(&self) -> anyhow::Result<ReconcileHistogram> {
        Ok(ReconcileHistogram::parse(&self.metrics().await?))
    }

    /// Kills it with SIGKILL, as a crash or an OOM kill would.
    pub async fn kill(mut self) -> anyhow::Result<()> {
        self.child
            .kill()
            .await
            .context("killing the operator process")
    }
}

/// A `/proc/<pid>/status` field in KiB.
pub fn proc_status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no {field} in {path}"))
}

/// Resident KiB of the mappings of the process's own executable
/// (`/proc/<pid>/smaps`).
fn binary_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).context("reading the exe link")?;
    let exe = exe.to_string_lossy().into_owned();
    let path = format!("/proc/{pid}/smaps");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut in_binary = false;
    let mut total = 0;
    for line in text.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if first.contains('-') && first.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            in_binary = line.ends_with(exe.as_str());
        } else if in_binary && let Some(rest) = line.strip_prefix("Rss:") {
            total += rest
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

/// `MemTotal` of `/proc/meminfo`, in KiB.
pub fn proc_meminfo_total_kib() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .context("no MemTotal in /proc/meminfo")
}

/// A plain HTTP/1.0 GET (the harness needs nothing more).
async fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    let mut stream =
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
            .await
            .with_context(|| format!("connecting to {addr}: timed out"))?
            .with_context(|| format!("connecting to {addr}"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .with_context(|| format!("sending GET {path} to {addr}"))?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .with_context(|| format!("reading GET {path} from {addr}: timed out"))?
        .with_context(|| format!("reading GET {path} from {addr}"))?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("a malformed answer to GET {path} from {addr}"))?;
    let ok = head.starts_with("HTTP/1.") && head.split_whitespace().nth(1) == Some("200");
    if !ok {
        bail!(
            "GET {path} from {addr}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    Ok(body.to_owned())
}

/// `dkv_reconcile_duration_seconds`, summed over outcomes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileHistogram {
    pub count: f64,
    /// Upper bound (seconds) → cumulative count, ascending.
    pub buckets: Vec<(f64, f64)>,
}

impl ReconcileHistogram {
    pub fn parse(text: &str) -> ReconcileHistogram {
        let mut hist = ReconcileHistogram::default();
        for line in text.lines() {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            if series.starts_with("dkv_reconcile_duration_seconds_count") {
                hist.count += value;
            } else if series.starts_with("dkv_reconcile_duration_seconds_bucket") {
                let Some(le) = series
                    .split_once("le=\"")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(le, _)| le)
                else {
                    continue;
                };
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    match le.parse::<f64>() {
                        Ok(b) => b,
                        Err(_) => continue,
                    }
                };
                match hist.buckets.iter_mut().find(|(b, _)| *b == bound) {
                    Some((_, n)) => *n += value,
                    None => hist.buckets.push((bound, value)),
                }
            }
        }
        hist.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        hist
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &ReconcileHistogram) -> ReconcileHistogram {
        ReconcileHistogram {
            count: self.count - earlier.count,
            buckets: self
                .buckets
                .iter()
                .map(|(b, n)| {
                    let before = earlier
                        .buckets
                        .iter()
                        .find(|(e, _)| e == b)
                        .map_or(0.0, |(_, m)| *m);
                    (*b, n - before)
                })
                .collect(),
        }
    }

    /// The upper bound of the bucket holding quantile `q` (seconds): the
    /// histogram only knows that much.
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        let wanted = self.count * q;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= wanted && *n > 0.0)
            .map(|(b, _)| *b)
    }
}
