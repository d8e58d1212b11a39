//! ServiceAccount tokens: issued by the TokenRequest subresource, checked by TokenReview.
//!
//! A token is a JWT (`header.claims.signature`, base64url) with the claims
//! upstream puts in a service account token (`iss`, `sub`, `aud`, `exp`,
//! `iat`, `nbf`, `jti`, `kubernetes.io`). Upstream signs with the service
//! account key pair (RS256) so that others can verify offline; here only this
//! server verifies (through TokenReview), so a random HMAC-SHA256 key is
//! enough. Without a data directory the key lives in the process and tokens
//! die with it; with one it is kept there (`pki/service-account.key`, 0600)
//! and tokens outlive a restart, as on a cluster.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use std::time::Duration;

use serde_json::{Value, json};

use crate::clock::Clock;

/// The issuer and default audience, as a cluster's API server names itself.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The service account a token stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl ServiceAccountRef {
    /// The user name the API server gives a service account.
    pub fn user_name(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// What a valid token says.
#[derive(Debug, Clone, PartialEq)]
pub struct Claims {
    pub service_account: ServiceAccountRef,
    pub audiences: Vec<String>,
    pub expires: jiff::Timestamp,
    pub id: String,
}

/// Why a bearer token is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("invalid bearer token: not a token issued by this server")]
    Malformed,
    #[error("invalid bearer token: signature does not verify")]
    Signature,
    #[error("invalid bearer token: token has expired")]
    Expired,
    #[error("invalid bearer token: token is not valid yet")]
    NotYetValid,
}

/// Issues and verifies tokens with this server's key, against its clock.
pub struct ServiceAccountTokens {
    key: ring::hmac::Key,
    clock: Clock,
}

impl Default for ServiceAccountTokens {
    fn default() -> Self {
        Self::new()
    }
}

fn base64url(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

fn from_base64url(part: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(part).ok()
}

impl ServiceAccountTokens {
    pub fn new() -> Self {
        let secret: [u8; 32] = rand::random();
        Self::with_secret(&secret)
    }

    /// Tokens signed with `secret`: those a previous run issued with it verify.
    pub fn with_secret(secret: &[u8]) -> Self {
        Self {
            key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret),
            clock: Clock::default(),
        }
    }

    /// The signing secret kept in `path`, or a new random one written there (0600).
    pub fn load_or_create(path: &std::path::Path) -> std::io::Result<Self> {
        match std::fs::read(path) {
            Ok(secret) if secret.len() >= 32 => return Ok(Self::with_secret(&secret)),
            Ok(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{} holds fewer than 32 bytes", path.display()),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let secret: [u8; 32] = rand::random();
        crate::private_files::write(path, &secret)?;
        Ok(Self::with_secret(&secret))
    }

    /// The clock tokens are issued and checked against; tests advance it to expire tokens.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// A token for `account`, valid for `lifetime` from now; returns it and its expiry.
    pub fn issue(
        &self,
        account: &ServiceAccountRef,
        audiences: &[String],
        lifetime: Duration,
    ) -> (String, jiff::Timestamp) {
        // Claims hold whole seconds.
        let now = self.clock.now();
        let now = jiff::Timestamp::from_second(now.as_second()).unwrap_or(now);
        let expires = jiff::SignedDuration::try_from(lifetime)
            .ok()
            .and_then(|d| now.checked_add(d).ok())
            .unwrap_or(jiff::Timestamp::MAX);
        let header = json!({"alg": "HS256", "typ": "JWT", "kid": "kube-local"});
        let claims = json!({
            "aud": audiences,
            "exp": expires.as_second(),
            "iat": now.as_second(),
            "nbf": now.as_second(),
            "iss": ISSUER,
            "jti": crate::meta::new_uid(),
            "sub": account.user_name(),
            "kubernetes.io": {
                "namespace": account.namespace,
                "serviceaccount": {"name": account.name, "uid": account.uid},
            },
        });
        let signed = format!(
            "{}.{}",
            base64url(header.to_string().as_bytes()),
            base64url(claims.to_string().as_bytes())
        );
        let signature = ring::hmac::sign(&self.key, signed.as_bytes());
        (
            format!("{signed}.{}", base64url(signature.as_ref())),
            expires,
        )
    }

    /// The claims of `token` if this server issued it and it is valid now.
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(claims), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let signature = from_base64url(signature).ok_or(TokenError::Malformed)?;
        let signed_len = header.len() + 1 + claims.len();
        ring::hmac::verify(&self.key, &token.as_bytes()[..signed_len], &signature)
            .map_err(|_| TokenError::Signature)?;
        let claims: Value = from_base64url(claims)
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(TokenError::Malformed)?;
        let seconds = |key: &str| {
            claims
                .get(key)
                .and_then(Value::as_i64)
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
                .ok_or(TokenError::Malformed)
        };
        let (expires, not_before) = (seconds("exp")?, seconds("nbf")?);
        let now = self.clock.now();
        if now >= expires {
            return Err(TokenError::Expired);
        }
        if now < not_before {
            return Err(TokenError::NotYetValid);
        }
        let text = |pointer: &str| {
            claims
                .pointer(pointer)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(TokenError::Malformed)
        };
        Ok(Claims {
            service_account: ServiceAccountRef {
                namespace: text("/kubernetes.io/namespace")?,
                name: text("/kubernetes.io/serviceaccount/name")?,
                uid: text("/kubernetes.io/serviceaccount/uid")?,
            },
            audiences: string_list(claims.get("aud")),
            expires,
            id: text("/jti")?,
        })
    }
}

/// The strings of a JSON array (none when it is absent or not an array).
pub(crate) fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account() -> ServiceAccountRef {
        ServiceAccountRef {
            namespace: "monitoring".into(),
            name: "prometheus".into(),
            uid: "1234".into(),
        }
    }

    #[test]
    fn issued_tokens_verify_until_they_expire() {
        let tokens = ServiceAccountTokens::new();
        let (token, expires) = tokens.issue(&account(), &[ISSUER.into()], Duration::from_secs(600));
        let claims = tokens.verify(&token).expect("fresh token verifies");
        assert_eq!(claims.service_account, account());
        assert_eq!(claims.audiences, vec![ISSUER.to_string()]);
        assert_eq!(claims.expires, expires);
        assert_eq!(
            claims.service_account.user_name(),
            "system:serviceaccount:monitoring:prometheus"
        );
        tokens.clock().advance(Duration::from_secs(601));
        assert_eq!(tokens.verify(&token), Err(TokenError::Expired));
    }

    #[test]
    fn foreign_or_altered_tokens_are_refused() {
        let tokens = ServiceAccountTokens::new();
        let other = ServiceAccountTokens::new();
        let (token, _) = other.issue(&account(), &[], Duration::from_secs(600));
        assert_eq!(tokens.verify(&token), Err(TokenError::Signature));
        let (token, _) = tokens.issue(&account(), &[], Duration::from_secs(600));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = base64url(
            json!({"exp": i64::MAX, "nbf": 0, "kubernetes.io": {}})
                .to_string()
                .as_bytes(),
        );
        parts[1] = &forged;
        assert_eq!(tokens.verify(&parts.join(".")), Err(TokenError::Signature));
        assert_eq!(tokens.verify("not-a-token"), Err(TokenError::Malformed));
        assert_eq!(tokens.verify(""), Err(TokenError::Malformed));
    }
}
