//! The cluster's credentials (the first half of the connected stage, see
//! [`crate::cluster::stage::connected`]). Its TLS CA and
//! certificates exist before any pod needs them, and its etcd root user
//! before authentication goes on; the operator's own identity towards etcd
//! comes from them.

use dkv_etcd::{ClientTls, UserCredentials};
use kube::{Client, ResourceExt};

use crate::cluster::error::{Error, Result};
use crate::cluster::security::auth::{self, AuthState};
use crate::cluster::security::certificates::{self, CertificateLifetime, TlsState};
use crate::cluster::validate::ValidatedCluster;

/// The credentials of one cluster as this pass ensured them.
pub struct Credentials {
    /// TLS material (`None`: every transport is plaintext).
    pub tls: Option<TlsState>,
    /// The root user (`None`: `spec.auth` is off).
    pub auth: Option<AuthState>,
    client_tls: bool,
}

impl Credentials {
    /// The operator's certificate on the client transport, when clients
    /// must present one.
    pub fn client_identity(&self) -> Option<&ClientTls> {
        self.tls
            .as_ref()
            .filter(|_| self.client_tls)
            .and_then(|t| t.client.as_ref())
    }

    /// The user the operator talks to etcd as, once authentication is on.
    pub fn user(&self) -> Option<&UserCredentials> {
        self.auth.as_ref().filter(|a| a.enabled).map(|a| &a.root)
    }

    /// No TLS and no authentication (for tests of what follows).
    #[cfg(test)]
    pub fn plaintext() -> Self {
        Self {
            tls: None,
            auth: None,
            client_tls: false,
        }
    }

    /// The root user exists but authentication is not on yet.
    pub fn auth_pending(&self) -> Option<&AuthState> {
        self.auth.as_ref().filter(|a| !a.enabled)
    }
}

/// Ensures the credentials of `cluster`. `exists`: the cluster has run (its
/// StatefulSet exists, or its membership record says it formed); a new CA
/// is created only for a cluster that never has.
/// `pod_serials`: the certificate serial each member pod was started
/// with. `idle`: status records no operation in progress. Certificates
/// issued are valid for `lifetime`.
pub async fn ensure(
    cluster: &ValidatedCluster,
    pod_serials: Vec<Option<String>>,
    exists: bool,
    idle: bool,
    client: &Client,
    lifetime: CertificateLifetime,
) -> Result<Credentials> {
    let tls = if cluster.tls.any() {
        let seen = certificates::CertificateInputs {
            rotation_requested: cluster.ca_rotation_request.as_deref(),
            pod_serials,
            idle,
        };
        let may_create_ca = !exists && !cluster.paused;
        Some(certificates::ensure(client, cluster, lifetime, may_create_ca, &seen).await?)
    } else {
        None
    };
    // A restore of a backup taken with authentication on keeps it on.
    if !cluster.auth
        && !exists
        && let Some(copy) = auth::restored_credentials(client, cluster).await?
    {
        return Err(Error::RestoreSource {
            message: format!(
                "the backup was taken with etcd authentication on, and its data keeps it on: set spec.auth.enabled: true (the restored cluster then answers to the root credentials kept in Secret {})",
                copy.name_any()
            ),
            waiting: false,
        });
    }
    let auth = if cluster.auth {
        Some(auth::ensure(client, cluster).await?)
    } else {
        None
    };
    Ok(Credentials {
        tls,
        auth,
        client_tls: cluster.tls.client,
    })
}
