//! `spec.bootstrap.join`: the running cluster's client URLs, what reaches
//! them, and a peer TLS the running members can trust.

use dkv_api::distributedkv::v1beta1::{JoinSource, OldMembers, TlsMode, TlsSpec};

use std::time::Duration;

use super::backup::{HOUR, MINUTE, SECOND, parse_whole_duration};
use crate::cluster::validate::Problems;

/// `spec.bootstrap.join`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedJoin {
    /// The running members' client URLs, as written (trimmed).
    pub endpoints: Vec<String>,
    /// `clientSecretRef`: what the operator presents to them.
    pub client_secret: Option<String>,
    /// `credentialsSecretRef`: the running cluster's root credentials.
    pub credentials_secret: Option<String>,
    /// `oldMembers: Leave`.
    pub old_members_leave: bool,
    /// `catchUpTimeout`: how long a learner of dkv's may take to catch up
    /// before it is removed again.
    pub catch_up_limit: Duration,
}

/// `spec.bootstrap.join.catchUpTimeout` when unset.
pub const DEFAULT_CATCH_UP_LIMIT: Duration = Duration::from_secs(600);
/// Bounds of `spec.bootstrap.join.catchUpTimeout`.
const CATCH_UP_RANGE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(86_400));

/// Checks `join` against the cluster's `tls` and `auth` (`spec.auth.enabled`).
pub(super) fn check_join(
    join: &JoinSource,
    (tls, auth): (Option<&TlsSpec>, bool),
    problems: &mut Problems,
) -> Option<ValidatedJoin> {
    const FIELD: &str = "spec.bootstrap.join.endpoints";
    let endpoints: Vec<String> = join.endpoints.iter().map(|e| e.trim().to_owned()).collect();
    if endpoints.is_empty() {
        problems.add(
            FIELD,
            "name at least one client URL of the running cluster, e.g. https://10.0.0.11:2379",
        );
        return None;
    }
    let mut schemes = Vec::new();
    for endpoint in &endpoints {
        match client_url_scheme(endpoint) {
            Ok(scheme) => schemes.push(scheme),
            Err(why) => problems.add(
                FIELD,
                format!(
                    "{endpoint:?} {why}; write a member's client URL, e.g. https://10.0.0.11:2379"
                ),
            ),
        }
    }
    schemes.dedup();
    if schemes.len() > 1 {
        problems.add(
            FIELD,
            "mixes http and https: a cluster's members all serve clients the same way",
        );
    }
    let client_secret = join
        .client_secret_ref
        .as_ref()
        .map(|r| r.name.trim().to_owned())
        .filter(|name| !name.is_empty());
    if schemes.contains(&"https") && client_secret.is_none() {
        problems.add(
            "spec.bootstrap.join.clientSecretRef",
            "the endpoints are https: name the Secret with the client certificate the running members accept (tls.crt, tls.key) and the CA of their serving certificates (ca.crt)",
        );
    }
    let peer_mode = tls.map(|t| t.peer.mode).unwrap_or_default();
    if peer_mode == TlsMode::Auto {
        problems.add(
            "spec.tls.peer.mode",
            "Auto issues the members' peer certificates from a CA dkv creates, which the running members do not trust: set Provided with a certificate issued by their peer CA (or CertManager with an issuer of that CA), or Disabled if their peer URLs are http",
        );
    }
    let credentials_secret = join
        .credentials_secret_ref
        .as_ref()
        .map(|r| r.name.trim().to_owned())
        .filter(|name| !name.is_empty());
    if credentials_secret.is_some() && !auth {
        problems.add(
            "spec.auth.enabled",
            "spec.bootstrap.join.credentialsSecretRef says the running cluster has authentication on, and its data keeps it on: set spec.auth.enabled: true",
        );
    }
    let catch_up_limit = match join.catch_up_timeout.as_deref().map(str::trim) {
        None => DEFAULT_CATCH_UP_LIMIT,
        Some(text) => match parse_whole_duration(text, &[SECOND, MINUTE, HOUR]) {
            Some(limit) if limit >= CATCH_UP_RANGE.0 && limit <= CATCH_UP_RANGE.1 => limit,
            _ => {
                problems.add(
                    "spec.bootstrap.join.catchUpTimeout",
                    format!("{text:?} is not a duration from 10s to 24h; write seconds, minutes or hours, e.g. 30m"),
                );
                DEFAULT_CATCH_UP_LIMIT
            }
        },
    };
    Some(ValidatedJoin {
        endpoints,
        client_secret,
        credentials_secret,
        old_members_leave: join.old_members == OldMembers::Leave,
        catch_up_limit,
    })
}

/// The scheme of an etcd client URL: `http` or `https`, with a host and a
/// port and nothing after them.
fn client_url_scheme(endpoint: &str) -> Result<&'static str, &'static str> {
    let uri: http::Uri = endpoint.parse().map_err(|_| "is not a URL")?;
    let scheme = match uri.scheme_str() {
        Some("http") => "http",
        Some("https") => "https",
        _ => return Err("needs the scheme http:// or https://"),
    };
    if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
        return Err("needs a host and a port");
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err("has a path; a client URL is scheme, host and port");
    }
    Ok(scheme)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dkv_api::distributedkv::v1beta1::{SecretReference, TlsTransport};

    fn join(endpoints: &[&str], secret: Option<&str>) -> JoinSource {
        JoinSource {
            endpoints: endpoints.iter().map(|e| (*e).to_owned()).collect(),
            client_secret_ref: secret.map(|name| SecretReference {
                name: name.to_owned(),
            }),
            credentials_secret_ref: None,
            old_members: OldMembers::Keep,
            catch_up_timeout: None,
        }
    }

    fn peer(mode: TlsMode) -> TlsSpec {
        TlsSpec {
            peer: TlsTransport {
                mode,
                ..TlsTransport::default()
            },
            client: TlsTransport {
                mode: TlsMode::Disabled,
                ..TlsTransport::default()
            },
        }
    }

    fn problems_of(join: &JoinSource, tls: &TlsSpec) -> Vec<String> {
        let mut problems = Problems::default();
        check_join(join, (Some(tls), false), &mut problems);
        problems.into_messages()
    }

    #[test]
    fn credentials_need_authentication_on() {
        let mut source = join(&["http://10.0.0.1:2379"], None);
        source.credentials_secret_ref = Some(SecretReference {
            name: "old-root".to_owned(),
        });
        let problems = problems_of(&source, &peer(TlsMode::Disabled));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("spec.auth.enabled"));
        let mut problems = Problems::default();
        let checked = check_join(
            &source,
            (Some(&peer(TlsMode::Disabled)), true),
            &mut problems,
        );
        assert!(problems.into_messages().is_empty());
        assert_eq!(
            checked.and_then(|j| j.credentials_secret).as_deref(),
            Some("old-root")
        );
    }

    #[test]
    fn the_catch_up_timeout_is_a_duration_from_ten_seconds_to_a_day() {
        let limit_of = |timeout: Option<&str>| {
            let mut source = join(&["http://10.0.0.1:2379"], None);
            source.catch_up_timeout = timeout.map(str::to_owned);
            let mut problems = Problems::default();
            let checked = check_join(
                &source,
                (Some(&peer(TlsMode::Disabled)), false),
                &mut problems,
            );
            (
                checked.map(|j| j.catch_up_limit.as_secs()),
                problems.into_messages(),
            )
        };
        assert_eq!(limit_of(None), (Some(600), vec![]));
        assert_eq!(limit_of(Some("30m")), (Some(1800), vec![]));
        assert_eq!(limit_of(Some(" 10s ")), (Some(10), vec![]));
        assert_eq!(limit_of(Some("24h")), (Some(86_400), vec![]));
        for wrong in ["5s", "25h", "10", "1.5h", "-1m", "soon"] {
            let (_, problems) = limit_of(Some(wrong));
            assert_eq!(problems.len(), 1, "{wrong}: {problems:?}");
            assert!(
                problems[0].starts_with("spec.bootstrap.join.catchUpTimeout")
                    && problems[0].contains("e.g. 30m"),
                "{wrong}: {problems:?}"
            );
        }
    }

    #[test]
    fn plain_endpoints_with_plain_peers_pass() {
        let source = join(&["http://10.0.0.1:2379", " http://10.0.0.2:2379 "], None);
        let mut problems = Problems::default();
        let checked = check_join(
            &source,
            (Some(&peer(TlsMode::Disabled)), false),
            &mut problems,
        );
        assert_eq!(problems.into_messages(), Vec::<String>::new());
        assert_eq!(
            checked.map(|j| j.endpoints),
            Some(vec![
                "http://10.0.0.1:2379".to_owned(),
                "http://10.0.0.2:2379".to_owned()
            ])
        );
    }

    #[test]
    fn https_endpoints_need_the_client_secret() {
        let problems = problems_of(
            &join(&["https://10.0.0.1:2379"], None),
            &peer(TlsMode::Provided),
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("spec.bootstrap.join.clientSecretRef"));
        assert!(
            problems_of(
                &join(&["https://10.0.0.1:2379"], Some("old-client")),
                &peer(TlsMode::Provided)
            )
            .is_empty()
        );
    }

    #[test]
    fn peers_from_dkvs_own_ca_are_refused_with_the_fix() {
        let problems = problems_of(&join(&["http://10.0.0.1:2379"], None), &peer(TlsMode::Auto));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("spec.tls.peer.mode"));
        assert!(problems[0].contains("set Provided"));
    }

    #[test]
    fn endpoints_must_be_client_urls_of_one_scheme() {
        for (endpoint, why) in [
            ("10.0.0.1:2379", "needs the scheme"),
            ("grpc://10.0.0.1:2379", "needs the scheme"),
            ("http://10.0.0.1", "needs a host and a port"),
            ("http://10.0.0.1:2379/v3", "has a path"),
            ("", "is not a URL"),
        ] {
            let problems = problems_of(&join(&[endpoint], None), &peer(TlsMode::Disabled));
            assert!(
                problems.iter().any(|p| p.contains(why)),
                "{endpoint:?}: {problems:?}"
            );
        }
        let mixed = problems_of(
            &join(
                &["http://10.0.0.1:2379", "https://10.0.0.2:2379"],
                Some("c"),
            ),
            &peer(TlsMode::Disabled),
        );
        assert!(
            mixed.iter().any(|p| p.contains("mixes http and https")),
            "{mixed:?}"
        );
    }
}
