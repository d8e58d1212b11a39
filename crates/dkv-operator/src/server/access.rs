//! Who may read `/metrics` in secure mode: the caller's bearer token is
//! authenticated by the API server (TokenReview) and the user it stands for
//! must be allowed `get` on the non-resource URL `/metrics`
//! (SubjectAccessReview) — what `kubectl auth can-i get /metrics` asks, and
//! what the ClusterRole `dkv-metrics-reader` grants.
//!
//! Decisions are cached for [`DECISION_TTL`] per token (keyed by its SHA-256,
//! the token itself is not kept), so a scrape every few seconds costs two API
//! calls per token and TTL, not per scrape. The price: a revoked binding or
//! token is honoured up to that long after the change. Failures to reach the
//! API are not cached.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

/// How long a decision about one token is reused.
pub const DECISION_TTL: Duration = Duration::from_secs(30);
/// At most this many tokens are remembered; beyond it, expired entries are
/// dropped, and if none expired the cache starts over.
const MAX_CACHED: usize = 1024;
/// The non-resource URL and verb a scraper must be allowed.
pub const METRICS_PATH: &str = "/metrics";
const VERB: &str = "get";

/// The answer for one scrape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScrapeVerdict {
    Allowed,
    /// No token, or one the API server does not accept: 401.
    Unauthenticated,
    /// A valid token of a user without the permission: 403.
    Forbidden {
        user: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("asking the API server to review a scraper's token: {0}")]
    TokenReview(#[source] kube::Error),
    #[error("asking the API server whether {user} may get {METRICS_PATH}: {source}")]
    SubjectAccessReview {
        user: String,
        #[source]
        source: kube::Error,
    },
}

/// Authenticates and authorizes scrapers through the API server.
pub struct ScraperAccess {
    client: Client,
    ttl: Duration,
    cache: Mutex<HashMap<[u8; 32], (Instant, ScrapeVerdict)>>,
}

fn token_key(token: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

/// The token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(authorization: Option<&str>) -> Option<&str> {
    let (scheme, token) = authorization?.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

impl ScraperAccess {
    pub fn new(client: Client) -> Self {
        Self::with_ttl(client, DECISION_TTL)
    }

    pub fn with_ttl(client: Client, ttl: Duration) -> Self {
        Self {
            client,
            ttl,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Decides a scrape that presented `token` (None: no credentials).
    pub async fn check(&self, token: Option<&str>) -> Result<ScrapeVerdict, AccessError> {
        let Some(token) = token else {
            return Ok(ScrapeVerdict::Unauthenticated);
        };
        let key = token_key(token);
        if let Some(verdict) = self.cached(&key) {
            return Ok(verdict);
        }
        let verdict = self.review(token).await?;
        self.remember(key, verdict.clone());
        Ok(verdict)
    }

    fn cached(&self, key: &[u8; 32]) -> Option<ScrapeVerdict> {
        let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, verdict)| verdict.clone())
    }

    fn remember(&self, key: [u8; 32], verdict: ScrapeVerdict) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(key, (Instant::now(), verdict));
    }

    async fn review(&self, token: &str) -> Result<ScrapeVerdict, AccessError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(AccessError::TokenReview)?;
        let Some(status) = reviewed.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(ScrapeVerdict::Unauthenticated);
        };
        let Some(user) = status.user else {
            return Ok(ScrapeVerdict::Unauthenticated);
        };
        let name = user.username.clone().unwrap_or_default();
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some(VERB.to_owned()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await
            .map_err(|source| AccessError::SubjectAccessReview {
                user: name.clone(),
                source,
            })?;
        Ok(match decided.status {
            Some(status) if status.allowed => ScrapeVerdict::Allowed,
            _ => ScrapeVerdict::Forbidden { user: name },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_from_the_authorization_header() {
        assert_eq!(bearer_token(Some("Bearer abc.def")), Some("abc.def"));
        assert_eq!(bearer_token(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer_token(Some("Basic dXNlcjpwdw==")), None);
        assert_eq!(bearer_token(Some("Bearer ")), None);
        assert_eq!(bearer_token(Some("Bearer")), None);
        assert_eq!(bearer_token(None), None);
    }
}
