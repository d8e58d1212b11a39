//! Authentication of the server's own callers (opt-in, see
//! `kube_local::EnvironmentBuilder::authenticate`), in kube-apiserver's order: a
//! client certificate issued by the server's CA (the kubeconfig's admin user,
//! common name the user and organizations the groups), else a bearer token —
//! the admin token the environment's own client uses, or a ServiceAccount
//! token this server issued.

use http::HeaderMap;

use super::access_log::AccessLog;
use super::rbac::UserInfo;
use crate::core::Core;
use crate::service_account_tokens::ISSUER;
pub use kube_local_base::identity::{AUTHENTICATED_GROUP, ClientCertificate};

/// The user of the admin token (the kubeconfig's user).
pub const ADMIN_USER: &str = "kube-local-admin";
/// The privileged group: allowed everything.
pub const MASTERS_GROUP: &str = "system:masters";

/// Paths anyone may read without credentials, as upstream's
/// `system:public-info-viewer` lets unauthenticated callers.
pub fn is_public(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    ["/healthz", "/livez", "/readyz", "/version"]
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

/// Checks callers' credentials and keeps the authorizer's decisions.
pub struct Authenticator {
    admin_token: String,
    /// Refused and allowed requests, for tests.
    pub log: AccessLog,
}

impl Default for Authenticator {
    fn default() -> Self {
        Self::new()
    }
}

impl Authenticator {
    /// An authenticator with a fresh random admin token.
    pub fn new() -> Self {
        let bytes: [u8; 32] = rand::random();
        let admin_token = hex::encode(bytes);
        Authenticator {
            admin_token,
            log: AccessLog::default(),
        }
    }

    /// The token of the admin user (`system:masters`).
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The admin user's identity.
    pub fn admin() -> UserInfo {
        UserInfo {
            name: ADMIN_USER.into(),
            groups: vec![MASTERS_GROUP.into(), AUTHENTICATED_GROUP.into()],
        }
    }

    /// Who sent a request with these headers over a connection that presented `certificate`; `None` when it
    /// has no valid credentials.
    pub fn authenticate(
        &self,
        core: &Core,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificate>,
    ) -> Option<UserInfo> {
        if let Some(ClientCertificate(user)) = certificate {
            return Some(user.clone());
        }
        let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
        let (scheme, token) = value.trim().split_once(' ')?;
        if !scheme.eq_ignore_ascii_case("bearer") {
            return None;
        }
        let token = token.trim();
        if token.is_empty() {
            return None;
        }
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Some(Self::admin());
        }
        let claims = super::verify_service_account_token(core, token, &[ISSUER.to_owned()]).ok()?;
        Some(super::service_account_user(&claims.service_account))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq as _;
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_and_version_are_public_discovery_is_not() {
        for path in ["/healthz", "/livez/", "/readyz/etcd", "/version"] {
            assert!(is_public(path), "{path}");
        }
        for path in ["/api", "/apis", "/openapi/v3", "/metrics", "/healthzx"] {
            assert!(!is_public(path), "{path}");
        }
    }
}
