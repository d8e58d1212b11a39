//! A real Prometheus (Debian's release) evaluating the shipped alerts
//! (`deploy/monitoring/prometheusrule.yaml`) against a kube-local cluster:
//! it scrapes the operator's `/metrics` and the member pods' etcd metrics,
//! labelled as `deploy/monitoring/podmonitor-members.yaml` labels them
//! (static targets: Debian's Prometheus has no Kubernetes discovery).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The shipped rule groups (the PrometheusRule's `spec`) as a Prometheus
/// rule file (JSON is YAML), with the `for:` of the alerts in `shortened`
/// set to `short_for` and nothing else changed.
pub fn rules_file(dir: &Path, shortened: &[&str], short_for: &str) -> PathBuf {
    let path = crate::paths::repo_root().join("deploy/monitoring/prometheusrule.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let rule: Value = serde_saphyr::from_str(&text).unwrap();
    let mut spec = rule["spec"].clone();
    let mut changed = 0;
    for group in spec["groups"].as_array_mut().unwrap() {
        for rule in group["rules"].as_array_mut().unwrap() {
            let exercised = rule["alert"]
                .as_str()
                .is_some_and(|name| shortened.contains(&name));
            if exercised && rule.get("for").is_some() {
                rule["for"] = json!(short_for);
                changed += 1;
            }
        }
    }
    assert_eq!(
        changed,
        shortened.len(),
        "the shipped rules have these alerts: {shortened:?}"
    );
    let out = dir.join("dkv-rules.json");
    std::fs::write(&out, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    out
}

/// The scrape targets of member pods: (pod, IP) → a static target on the
/// metrics port with the labels the PodMonitor gives it.
pub fn members_of(ns: &str, cluster: &str, members: &[(String, String)]) -> Vec<Value> {
    members
        .iter()
        .map(|(pod, ip)| {
            json!({"targets": [format!("{ip}:2381")],
                   "labels": {"namespace": ns, "cluster": cluster, "pod": pod}})
        })
        .collect()
}

/// Scrapes and evaluates every second: the operator on `operator` (a local
/// port) and the member targets of [`members_of`].
pub fn config_file(dir: &Path, rules: &Path, operator: u16, members: &[Value]) -> PathBuf {
    let config = json!({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "900ms"},
        "rule_files": [rules],
        "scrape_configs": [
            {"job_name": "dkv-operator", "honor_labels": true,
             "static_configs": [{"targets": [format!("127.0.0.1:{operator}")]}]},
            {"job_name": "dkv-members", "static_configs": members},
        ]
    });
    let out = dir.join("prometheus.json");
    std::fs::write(&out, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
    out
}

/// A Prometheus process, stopped on drop.
pub struct Prometheus {
    child: Child,
    port: u16,
}

impl Prometheus {
    /// Starts Prometheus with `config`, its data and log under `dir`.
    pub fn start(dir: &Path, config: &Path) -> Self {
        let port = crate::free_port();
        let child = Command::new(crate::paths::prometheus_binary())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .unwrap();
        Self { child, port }
    }

    /// GET `path`, JSON. HTTP/1.0, so the answer is never chunked.
    async fn get(&self, path: &str) -> Option<Value> {
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .ok()?;
        tcp.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut raw))
            .await
            .ok()?
            .ok()?;
        let text = String::from_utf8_lossy(&raw);
        let (_, body) = text.split_once("\r\n\r\n")?;
        serde_json::from_str(body).ok()
    }

    /// The firing alerts of `cluster`: (alertname, pod label).
    pub async fn firing(&self, cluster: &str) -> BTreeSet<(String, String)> {
        let Some(answer) = self.get("/api/v1/alerts").await else {
            return BTreeSet::new();
        };
        answer["data"]["alerts"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|a| a["state"] == "firing" && a["labels"]["cluster"] == cluster)
            .map(|a| {
                (
                    a["labels"]["alertname"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    a["labels"]["pod"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }

    /// The value of an instant query's first sample.
    pub async fn value(&self, query: &str) -> Option<f64> {
        let answer = self
            .get(&format!("/api/v1/query?query={}", encode(query)))
            .await?;
        answer["data"]["result"][0]["value"][1]
            .as_str()?
            .parse()
            .ok()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percent-encodes a query for a URL.
fn encode(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
