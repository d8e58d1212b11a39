//! Writes refused: while a standby follows, every role but `root` can only
//! read. etcd has no read-only mode; its roles are what it enforces on
//! every request, so a client of the standby gets `etcdserver: permission
//! denied` at once for a put, delete or transaction that writes, and its
//! reads answer as before. The follower applies as `root`.
//!
//! What each role could do is kept, before anything is changed, in the
//! ConfigMap `<name>-standby-grants` (owned by the cluster), and given back
//! at promotion: a role that could read and write (`READWRITE`) reads only
//! meanwhile; one that could only write (`WRITE`) loses that grant. A role
//! created or granted anew while the standby follows is made read-only at
//! the next pass and given back at promotion like the others. Users with
//! the `root` role keep it: they are the standby's administrators.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use dkv_etcd::{ClientTls, UserCredentials};
use etcd_client::{
    Certificate, Client, ConnectOptions, Identity, Permission, PermissionType, TlsOptions,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};

use crate::cluster::error::{Error, Result};
use crate::cluster::validate::ValidatedCluster;

/// The entry of the ConfigMap that holds the kept grants (JSON).
const GRANTS_KEY: &str = "grants.json";

/// A role's grant that writes, as etcd listed it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    pub role: String,
    /// The key and range end, base64 (they are bytes).
    pub key: String,
    pub range_end: String,
    /// `Write` or `ReadWrite`.
    pub kind: GrantKind,
}

/// The kinds of grant that write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum GrantKind {
    Write,
    ReadWrite,
}

impl GrantKind {
    fn of(perm_type: i32) -> Option<Self> {
        match PermissionType::try_from(perm_type).ok()? {
            PermissionType::Write => Some(Self::Write),
            PermissionType::Readwrite => Some(Self::ReadWrite),
            PermissionType::Read => None,
        }
    }

    fn permission_type(self) -> PermissionType {
        match self {
            Self::Write => PermissionType::Write,
            Self::ReadWrite => PermissionType::Readwrite,
        }
    }
}

/// The name of the ConfigMap that keeps a standby's grants.
pub fn configmap_name(cluster: &str) -> String {
    format!("{cluster}-standby-grants")
}

/// A client of the standby's members, as `root` once authentication is
/// on.
pub async fn connect(
    endpoints: &[String],
    tls: Option<&ClientTls>,
    root: Option<&UserCredentials>,
) -> Result<Client> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(std::time::Duration::from_secs(5))
        .with_timeout(std::time::Duration::from_secs(10));
    if let Some(root) = root {
        options = options.with_user(root.name.clone(), root.password.clone());
    }
    if let Some(tls) = tls {
        options = options.with_tls(
            TlsOptions::new()
                .ca_certificate(Certificate::from_pem(&tls.ca_pem))
                .identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem))
                .domain_name(tls.server_name.clone()),
        );
    }
    Client::connect(endpoints, Some(options))
        .await
        .map_err(|e| etcd_failed("connecting as root to manage its roles", &e))
}

fn etcd_failed(what: &str, e: &etcd_client::Error) -> Error {
    Error::Standby {
        message: format!("{what}: {e}"),
        transient: true,
    }
}

/// Every grant that writes, of every role but `root`.
async fn writing_grants(etcd: &mut Client) -> Result<Vec<Grant>> {
    let roles = etcd
        .role_list()
        .await
        .map_err(|e| etcd_failed("listing roles", &e))?;
    let mut grants = Vec::new();
    for role in roles.roles().iter().filter(|r| r.as_str() != "root") {
        let found = etcd
            .role_get(role.clone())
            .await
            .map_err(|e| etcd_failed("reading a role", &e))?;
        for permission in found.permissions() {
            if let Some(kind) = GrantKind::of(permission.get_type()) {
                grants.push(Grant {
                    role: role.clone(),
                    key: STANDARD.encode(permission.key()),
                    range_end: STANDARD.encode(permission.range_end()),
                    kind,
                });
            }
        }
    }
    Ok(grants)
}

/// Makes every role but `root` read-only, keeping first what it could do.
/// Returns how many grants it changed (0 once they are all read-only).
pub async fn hold_read_only(
    client: &kube::Client,
    cluster: &ValidatedCluster,
    etcd: &mut Client,
) -> Result<usize> {
    let grants = writing_grants(etcd).await?;
    if grants.is_empty() {
        return Ok(0);
    }
    let mut kept = read_kept(client, cluster).await?.unwrap_or_default();
    kept.extend(grants.iter().cloned());
    kept.sort();
    kept.dedup();
    write_kept(client, cluster, &kept).await?;
    for grant in &grants {
        let (key, range_end) = decode(grant)?;
        let result = match grant.kind {
            // A grant of the same range replaces the one there.
            GrantKind::ReadWrite => etcd
                .role_grant_permission(
                    grant.role.clone(),
                    Permission::read(key).with_range_end(range_end),
                )
                .await
                .map(drop),
            GrantKind::Write => etcd
                .role_revoke_permission(
                    grant.role.clone(),
                    key,
                    Some(etcd_client::RoleRevokePermissionOptions::new().with_range_end(range_end)),
                )
                .await
                .map(drop),
        };
        result.map_err(|e| etcd_failed("making a role read-only", &e))?;
    }
    Ok(grants.len())
}

/// Gives every role back what it could do before the standby followed,
/// then forgets it. A role deleted meanwhile stays deleted.
pub async fn give_back(
    client: &kube::Client,
    cluster: &ValidatedCluster,
    etcd: &mut Client,
) -> Result<usize> {
    let Some(kept) = read_kept(client, cluster).await? else {
        return Ok(0);
    };
    for grant in &kept {
        let (key, range_end) = decode(grant)?;
        let permission =
            Permission::new(grant.kind.permission_type(), key).with_range_end(range_end);
        match etcd
            .role_grant_permission(grant.role.clone(), permission)
            .await
        {
            Ok(_) => {}
            Err(e) if e.to_string().contains("role name not found") => {}
            Err(e) => return Err(etcd_failed("giving a role its grants back", &e)),
        }
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = configmap_name(&cluster.name);
    match api.delete(&name, &Default::default()).await {
        Ok(_) => Ok(kept.len()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(kept.len()),
        Err(source) => Err(Error::Apply {
            kind: "ConfigMap".to_owned(),
            name,
            source,
        }),
    }
}

fn decode(grant: &Grant) -> Result<(Vec<u8>, Vec<u8>)> {
    let bytes = |text: &str| {
        STANDARD.decode(text).map_err(|e| Error::Standby {
            message: format!(
                "a kept grant of role {:?} is not base64 ({e}); the ConfigMap was edited by hand",
                grant.role
            ),
            transient: false,
        })
    };
    Ok((bytes(&grant.key)?, bytes(&grant.range_end)?))
}

async fn read_kept(
    client: &kube::Client,
    cluster: &ValidatedCluster,
) -> Result<Option<Vec<Grant>>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = configmap_name(&cluster.name);
    let found = api.get_opt(&name).await.map_err(|source| Error::Read {
        kind: "ConfigMap",
        name: name.clone(),
        source,
    })?;
    let Some(text) = found
        .as_ref()
        .and_then(|c| c.data.as_ref())
        .and_then(|d| d.get(GRANTS_KEY))
    else {
        return Ok(None);
    };
    serde_json::from_str(text)
        .map(Some)
        .map_err(|e| Error::Standby {
            message: format!(
                "ConfigMap {name} does not hold the kept grants ({e}); it was edited by hand"
            ),
            transient: false,
        })
}

async fn write_kept(
    client: &kube::Client,
    cluster: &ValidatedCluster,
    kept: &[Grant],
) -> Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &cluster.namespace);
    let name = configmap_name(&cluster.name);
    // A list of plain structs always serializes.
    let text = serde_json::to_string(kept).unwrap_or_default();
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cluster.namespace.clone()),
            owner_references: Some(vec![cluster.owner.clone()]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(GRANTS_KEY.to_owned(), text)])),
        ..ConfigMap::default()
    };
    let written = match api.get_opt(&name).await {
        Ok(Some(existing)) => {
            let replacement = ConfigMap {
                metadata: ObjectMeta {
                    resource_version: existing.metadata.resource_version,
                    ..configmap.metadata
                },
                ..configmap
            };
            api.replace(&name, &PostParams::default(), &replacement)
                .await
        }
        Ok(None) => api.create(&PostParams::default(), &configmap).await,
        Err(source) => {
            return Err(Error::Read {
                kind: "ConfigMap",
                name,
                source,
            });
        }
    };
    written.map(drop).map_err(|source| Error::Apply {
        kind: "ConfigMap".to_owned(),
        name,
        source,
    })
}
