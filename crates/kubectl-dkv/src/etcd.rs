//! etcdctl, run inside a member pod through the `exec` subresource.
//!
//! The members' image carries etcdctl, and a member pod has what etcdctl
//! needs to reach its cluster: the member's certificate (which is also a
//! client certificate, signed by the CA the members trust) and the cluster's
//! DNS names. So the plugin needs neither etcdctl, nor certificates, nor a
//! network path to the members on the user's machine, and the user never
//! handles a Secret. With `spec.auth.enabled`, the root user's credentials
//! are read from `<name>-etcd-root` (the Secret the API reference names)
//! and passed to etcdctl as `--user`.

use std::collections::BTreeMap;

use dkv_api::DistributedKV;
use dkv_member::layout::{MEMBER_CONTAINER as CONTAINER, MEMBER_TLS_DIR, SERVER_TLS_DIR};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::ResourceExt;
use kube::api::AttachParams;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::client::Target;
use crate::error::{Error, Result};

/// Where member pods mount the certificate etcdctl can use: one for both
/// transports, or the serving one when peers and clients have their own.
const TLS_DIRS: [&str; 2] = [MEMBER_TLS_DIR, SERVER_TLS_DIR];

/// What a finished etcdctl printed and returned.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The output, or the failure in etcdctl's own words.
    pub fn success(self, what: &str) -> Result<Self> {
        if self.code == 0 {
            return Ok(self);
        }
        let stderr = String::from_utf8_lossy(&self.stderr);
        let reason = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        Err(Error::Failed(format!(
            "{what}: etcdctl exited with {}{}",
            self.code,
            if reason.is_empty() {
                String::new()
            } else {
                format!(": {}", reason.trim())
            }
        )))
    }
}

/// How to run etcdctl against one cluster.
pub struct Etcdctl<'a> {
    target: &'a Target,
    cluster: String,
    scheme: &'static str,
    /// `--user` when authentication is on.
    user: Option<String>,
}

impl<'a> Etcdctl<'a> {
    pub async fn new(target: &'a Target, cluster: &DistributedKV) -> Result<Self> {
        let name = cluster.name_any();
        let client_tls =
            cluster.spec.tls.as_ref().is_some_and(|t| {
                t.client.mode != dkv_api::distributedkv::v1beta1::TlsMode::Disabled
            });
        let auth = cluster.spec.auth.as_ref().is_some_and(|a| a.enabled);
        let user = if auth {
            let secret_name = dkv_member::naming::auth_secret(&name);
            let secret = target
                .api::<Secret>()
                .get(&secret_name)
                .await
                .map_err(Error::api(
                    format!(
                        "reading the root credentials {}/{secret_name}",
                        target.namespace
                    ),
                    "Secret",
                    &target.namespace,
                    &secret_name,
                ))?;
            let data = secret.data.unwrap_or_default();
            let field = |key: &str| {
                data.get(key)
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    .ok_or_else(|| Error::Failed(format!("Secret {secret_name} has no {key}")))
            };
            Some(format!("{}:{}", field("username")?, field("password")?))
        } else {
            None
        };
        Ok(Self {
            target,
            cluster: name,
            scheme: if client_tls { "https" } else { "http" },
            user,
        })
    }

    /// A member's client URL, as it advertises it.
    pub fn endpoint(&self, member: &str) -> String {
        let host =
            dkv_member::naming::host_of_member(&self.cluster, &self.target.namespace, member);
        format!(
            "{}://{host}:{}",
            self.scheme,
            dkv_member::naming::CLIENT_PORT
        )
    }

    /// The flags that reach the cluster from `pod`: its certificate and
    /// the credentials.
    fn connection(&self, pod: &Pod) -> Vec<String> {
        let mut flags = Vec::new();
        if self.scheme == "https" {
            let mounts: Vec<String> = pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .filter(|c| c.name == CONTAINER)
                .flat_map(|c| c.volume_mounts.iter().flatten())
                .map(|m| m.mount_path.clone())
                .collect();
            if let Some(dir) = TLS_DIRS.iter().find(|d| mounts.iter().any(|m| m == *d)) {
                flags.push(format!("--cacert={dir}/ca.crt"));
                flags.push(format!("--cert={dir}/tls.crt"));
                flags.push(format!("--key={dir}/tls.key"));
            }
        }
        if let Some(user) = &self.user {
            flags.push(format!("--user={user}"));
        }
        flags
    }

    async fn start(&self, pod: &str, args: &[String]) -> Result<kube::api::AttachedProcess> {
        let pods = self.target.api::<Pod>();
        let found = pods.get(pod).await.map_err(Error::api(
            format!("reading pod {}/{pod}", self.target.namespace),
            "Pod",
            &self.target.namespace,
            pod,
        ))?;
        let mut command = vec!["etcdctl".to_owned()];
        command.extend(self.connection(&found));
        command.extend(args.iter().cloned());
        let params = AttachParams::default()
            .container(CONTAINER)
            .stdin(false)
            .stdout(true)
            .stderr(true);
        pods.exec(pod, command, &params)
            .await
            .map_err(|source| Error::Api {
                what: format!("running etcdctl in {}/{pod}", self.target.namespace),
                source,
            })
    }

    /// Runs etcdctl `args` in `pod` and collects what it printed.
    pub async fn output(&self, pod: &str, args: &[String]) -> Result<Output> {
        let mut process = self.start(pod, args).await?;
        let status = process.take_status();
        let (stdout, stderr) = tokio::join!(read_all(process.stdout()), read_all(process.stderr()));
        let code = match status {
            Some(status) => exit_code(status.await.as_ref()),
            None => 0,
        };
        Ok(Output {
            code,
            stdout,
            stderr,
        })
    }

    /// Runs etcdctl `args` in `pod` with its output on this process's
    /// stdout and stderr as it comes; returns its exit code.
    pub async fn passthrough(&self, pod: &str, args: &[String]) -> Result<i32> {
        let mut process = self.start(pod, args).await?;
        let status = process.take_status();
        let copy = |from: Option<tokio::io::ReadHalf<tokio::io::SimplexStream>>,
                    mut to: Box<dyn tokio::io::AsyncWrite + Unpin + Send>| async move {
            if let Some(mut from) = from {
                let _ = tokio::io::copy(&mut from, &mut to).await;
                let _ = to.flush().await;
            }
        };
        tokio::join!(
            copy(process.stdout(), Box::new(tokio::io::stdout())),
            copy(process.stderr(), Box::new(tokio::io::stderr()))
        );
        Ok(match status {
            Some(status) => exit_code(status.await.as_ref()),
            None => 0,
        })
    }
}

async fn read_all(from: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let mut out = Vec::new();
    if let Some(mut from) = from {
        let _ = from.read_to_end(&mut out).await;
    }
    out
}

/// The exit code the exec's final status reports: 0 for `Success`, the
/// `ExitCode` cause of a `NonZeroExitCode`, 1 for any other failure.
pub fn exit_code(status: Option<&Status>) -> i32 {
    let Some(status) = status else {
        return 1;
    };
    if status.status.as_deref() == Some("Success") {
        return 0;
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
                .and_then(|c| c.message.as_deref())
                .and_then(|m| m.parse().ok())
        })
        .unwrap_or(1)
}

/// etcd's `endpoint status -w json` for one endpoint.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct EndpointStatus {
    #[serde(rename = "Status")]
    pub status: StatusBody,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct StatusBody {
    pub header: Header,
    #[serde(rename = "dbSize", default)]
    pub db_size: i64,
    #[serde(rename = "dbSizeInUse", default)]
    pub db_size_in_use: i64,
    #[serde(default)]
    pub leader: u64,
    #[serde(rename = "raftIndex", default)]
    pub raft_index: u64,
    #[serde(rename = "raftTerm", default)]
    pub raft_term: u64,
    #[serde(default)]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub struct Header {
    #[serde(default)]
    pub member_id: u64,
    #[serde(default)]
    pub revision: i64,
}

/// Parses `endpoint status -w json`.
pub fn parse_endpoint_status(json: &str) -> Result<Vec<EndpointStatus>> {
    serde_json::from_str(json)
        .map_err(|e| Error::Failed(format!("reading etcdctl endpoint status: {e}")))
}

/// Parses `alarm list` (`memberID:123 alarm:NOSPACE` per line) into
/// member ID (hex) → alarms.
pub fn parse_alarms(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut alarms: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let mut id = None;
        let mut alarm = None;
        for field in line.split_whitespace() {
            if let Some(v) = field.strip_prefix("memberID:") {
                id = v.parse::<u64>().ok();
            } else if let Some(v) = field.strip_prefix("alarm:") {
                alarm = Some(v.to_owned());
            }
        }
        if let (Some(id), Some(alarm)) = (id, alarm) {
            alarms.entry(format!("{id:x}")).or_default().push(alarm);
        }
    }
    alarms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_come_from_the_final_status() {
        let status = |json: serde_json::Value| serde_json::from_value::<Status>(json).ok();
        assert_eq!(
            exit_code(status(serde_json::json!({"status": "Success"})).as_ref()),
            0
        );
        let failed = status(serde_json::json!({
            "status": "Failure", "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": "3"}]}
        }));
        assert_eq!(exit_code(failed.as_ref()), 3);
        assert_eq!(
            exit_code(status(serde_json::json!({"status": "Failure"})).as_ref()),
            1
        );
        assert_eq!(exit_code(None), 1);
    }

    #[test]
    fn endpoint_status_and_alarms_parse() {
        let json = r#"[{"Endpoint":"https://orders-0.orders-peer.shop.svc:2379","Status":{"header":{"cluster_id":1,"member_id":255,"revision":42,"raft_term":3},"version":"3.5.16","dbSize":20480,"leader":255,"raftIndex":77,"raftTerm":3,"raftAppliedIndex":77,"dbSizeInUse":16384}}]"#;
        let parsed = parse_endpoint_status(json).unwrap_or_default();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].status.header.member_id, 255);
        assert_eq!(
            (parsed[0].status.db_size, parsed[0].status.db_size_in_use),
            (20480, 16384)
        );
        assert_eq!(parsed[0].status.raft_index, 77);
        let alarms = parse_alarms("memberID:255 alarm:NOSPACE\nmemberID:16 alarm:CORRUPT\n");
        assert_eq!(
            alarms.get("ff").map(Vec::as_slice),
            Some(&["NOSPACE".to_owned()][..])
        );
        assert_eq!(alarms.len(), 2);
    }
}
