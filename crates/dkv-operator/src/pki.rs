//! A small certificate authority (rcgen on ring): a self-signed CA that
//! issues leaf certificates for servers and clients. Used for the webhook's
//! serving certificate and for each cluster's etcd certificates.
//!
//! Issuing parses no X.509: an [`Authority`] is rebuilt from its common
//! name and key (the issuer name and key identifier a leaf carries derive
//! from those), and expiry is tracked by the caller next to the PEM.
//! [`check`] verifies certificates someone else issued (user-provided or
//! cert-manager's) the way their TLS peers will: with rustls's verifiers.

use std::time::Duration;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Tolerated clock skew between the issuer and whoever verifies.
const BACKDATE: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("certificate validity {0:?} is out of range")]
    Validity(Duration),
}

/// A CA: its common name, certificate and key (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Authority {
    pub common_name: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: jiff::Timestamp,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Authority")
            .field("common_name", &self.common_name)
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// What a leaf certificate is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// TLS server only (the webhook).
    Server,
    /// Server and client: an etcd member serves clients and dials peers.
    ServerAndClient,
    /// TLS client only (the operator, backup agents, applications).
    Client,
}

/// A certificate to issue.
#[derive(Debug, Clone)]
pub struct Leaf<'a> {
    pub common_name: &'a str,
    /// DNS names (wildcards allowed) and IP addresses.
    pub hosts: &'a [String],
    pub usage: Usage,
    pub validity: Duration,
}

/// An issued certificate and its key (PEM).
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    pub not_after: jiff::Timestamp,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

impl Authority {
    /// A new self-signed CA valid for `validity`.
    pub fn generate(common_name: &str, validity: Duration) -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let (not_before, not_after) = validity_window(validity)?;
        let mut params = ca_params(common_name);
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params.self_signed(&key)?;
        Ok(Self {
            common_name: common_name.to_owned(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after: timestamp(not_after)?,
        })
    }

    /// Issues `leaf`, signed by this CA.
    pub fn issue(&self, leaf: &Leaf<'_>) -> Result<Issued, PkiError> {
        let issuer = Issuer::new(
            ca_params(&self.common_name),
            KeyPair::from_pem(&self.key_pem)?,
        );
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(leaf.hosts.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, leaf.common_name);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = match leaf.usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::ServerAndClient => vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
        };
        let (not_before, not_after) = validity_window(leaf.validity)?;
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            not_after: timestamp(not_after)?,
        })
    }
}

/// What a certificate must be good for, checked by [`check`].
#[derive(Debug, Clone, Copy)]
pub enum Role<'a> {
    /// A TLS server reached by each of these names.
    Server(&'a [String]),
    /// A TLS client.
    Client,
}

/// Why a certificate cannot be used, in words for the user.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unusable(pub String);

/// Checks that `cert_pem` (a leaf, optionally followed by intermediates)
/// and `key_pem` belong together and that the leaf verifies, for each of
/// `roles`, against the CAs in `trusted_ca_pem` — as the other side of the
/// connection will verify it (chain, validity period, key usage, names).
pub fn check(
    cert_pem: &str,
    key_pem: &str,
    trusted_ca_pem: &str,
    roles: &[Role<'_>],
) -> Result<(), Unusable> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| Unusable(format!("tls.crt is not PEM: {e}")))?;
    let Some((leaf, intermediates)) = chain.split_first() else {
        return Err(Unusable("tls.crt holds no certificate".to_owned()));
    };
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|e| Unusable(format!("tls.key holds no private key: {e}")))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::sign::CertifiedKey::from_der(chain.clone(), key, &provider)
        .map_err(|e| Unusable(format!("tls.key does not belong to tls.crt: {e}")))?;

    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(trusted_ca_pem.as_bytes()) {
        let ca = ca.map_err(|e| Unusable(format!("ca.crt is not PEM: {e}")))?;
        roots
            .add(ca)
            .map_err(|e| Unusable(format!("ca.crt holds an unusable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(Unusable("ca.crt holds no CA certificate".to_owned()));
    }
    let roots = std::sync::Arc::new(roots);
    let now = UnixTime::now();
    for role in roles {
        match role {
            Role::Server(names) => {
                let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    roots.clone(),
                    provider.clone(),
                )
                .build()
                .map_err(|e| Unusable(format!("ca.crt: {e}")))?;
                for name in *names {
                    let server = ServerName::try_from(name.as_str())
                        .map_err(|e| Unusable(format!("{name}: {e}")))?;
                    use rustls::client::danger::ServerCertVerifier;
                    verifier
                        .verify_server_cert(leaf, intermediates, &server, &[], now)
                        .map_err(|e| Unusable(format!("as a server for {name}: {e}")))?;
                }
            }
            Role::Client => {
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.clone(),
                    provider.clone(),
                )
                .build()
                .map_err(|e| Unusable(format!("ca.crt: {e}")))?;
                verifier
                    .verify_client_cert(leaf, intermediates, now)
                    .map_err(|e| Unusable(format!("as a client: {e}")))?;
            }
        }
    }
    Ok(())
}

fn ca_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn validity_window(
    validity: Duration,
) -> Result<(time::OffsetDateTime, time::OffsetDateTime), PkiError> {
    let now = time::OffsetDateTime::now_utc();
    let to_time = |d: Duration| time::Duration::try_from(d).unwrap_or(time::Duration::MAX);
    let not_before = now.checked_sub(to_time(BACKDATE)).unwrap_or(now);
    let not_after = now
        .checked_add(to_time(validity))
        .ok_or(PkiError::Validity(validity))?;
    Ok((not_before, not_after))
}

fn timestamp(at: time::OffsetDateTime) -> Result<jiff::Timestamp, PkiError> {
    jiff::Timestamp::from_second(at.unix_timestamp()).map_err(|_| PkiError::Validity(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_chain_to_their_authority_and_keys_stay_out_of_debug_output() {
        let ca = Authority::generate("test-ca", Duration::from_secs(3600))
            .unwrap_or_else(|e| panic!("{e}"));
        let hosts = vec!["*.orders-peer.shop.svc".to_owned(), "127.0.0.1".to_owned()];
        let leaf = ca
            .issue(&Leaf {
                common_name: "orders",
                hosts: &hosts,
                usage: Usage::ServerAndClient,
                validity: Duration::from_secs(600),
            })
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        let left = leaf.not_after.as_second() - jiff::Timestamp::now().as_second();
        assert!((590..=600).contains(&left), "{left}");
        assert!(ca.not_after > leaf.not_after);

        // A chain rustls accepts: the leaf verifies against the CA as a
        // server certificate for a name the wildcard covers.
        use rustls::client::danger::ServerCertVerifier;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
        let mut roots = rustls::RootCertStore::empty();
        let ca_der = CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        roots.add(ca_der).unwrap_or_else(|e| panic!("{e}"));
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            std::sync::Arc::new(roots),
            std::sync::Arc::new(rustls::crypto::ring::default_provider()),
        )
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
        let leaf_der = CertificateDer::from_pem_slice(leaf.cert_pem.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let name =
            ServerName::try_from("orders-1.orders-peer.shop.svc").unwrap_or_else(|e| panic!("{e}"));
        verifier
            .verify_server_cert(&leaf_der, &[], &name, &[], UnixTime::now())
            .unwrap_or_else(|e| panic!("{e}"));
        let elsewhere =
            ServerName::try_from("orders-1.other.shop.svc").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            verifier
                .verify_server_cert(&leaf_der, &[], &elsewhere, &[], UnixTime::now())
                .is_err()
        );

        let shown = format!("{ca:?} {leaf:?}");
        assert!(!shown.contains("PRIVATE"), "{shown}");
    }

    fn issue(ca: &Authority, hosts: &[String], usage: Usage) -> Issued {
        ca.issue(&Leaf {
            common_name: "leaf",
            hosts,
            usage,
            validity: Duration::from_secs(600),
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn check_accepts_what_peers_accept_and_says_why_it_refuses() {
        let ca =
            Authority::generate("ca", Duration::from_secs(3600)).unwrap_or_else(|e| panic!("{e}"));
        let other = Authority::generate("other", Duration::from_secs(3600))
            .unwrap_or_else(|e| panic!("{e}"));
        let hosts = vec!["*.orders-peer.shop.svc".to_owned()];
        let member = issue(&ca, &hosts, Usage::ServerAndClient);
        let names = vec!["orders-0.orders-peer.shop.svc".to_owned()];
        let peer = [Role::Server(&names), Role::Client];
        assert_eq!(
            check(&member.cert_pem, &member.key_pem, &ca.cert_pem, &peer),
            Ok(())
        );
        // A bundle of two CAs (a rotation's overlap) trusts both.
        let bundle = format!("{}{}", other.cert_pem, ca.cert_pem);
        assert_eq!(
            check(&member.cert_pem, &member.key_pem, &bundle, &peer),
            Ok(())
        );

        let refused = |cert: &Issued, key: &str, cas: &str, roles: &[Role<'_>]| {
            check(&cert.cert_pem, key, cas, roles)
                .err()
                .map(|e| e.0)
                .unwrap_or_default()
        };
        let elsewhere = vec!["orders-0.orders-peer.other.svc".to_owned()];
        assert!(
            refused(
                &member,
                &member.key_pem,
                &ca.cert_pem,
                &[Role::Server(&elsewhere)]
            )
            .contains("as a server for orders-0.orders-peer.other.svc"),
        );
        assert!(refused(&member, &member.key_pem, &other.cert_pem, &peer).contains("as a server"));
        let client_only = issue(&ca, &[], Usage::Client);
        assert_eq!(
            check(
                &client_only.cert_pem,
                &client_only.key_pem,
                &ca.cert_pem,
                &[Role::Client]
            ),
            Ok(())
        );
        assert!(
            refused(&client_only, &client_only.key_pem, &ca.cert_pem, &peer)
                .contains("as a server")
        );
        let server_only = issue(&ca, &hosts, Usage::Server);
        assert!(
            refused(&server_only, &server_only.key_pem, &ca.cert_pem, &peer)
                .contains("as a client")
        );
        assert!(
            refused(&member, &client_only.key_pem, &ca.cert_pem, &peer).contains("does not belong")
        );
        assert!(refused(&member, "", &ca.cert_pem, &peer).contains("tls.key"));
        assert!(refused(&member, &member.key_pem, "", &peer).contains("ca.crt holds no CA"));
        let empty = Issued {
            cert_pem: String::new(),
            ..member.clone()
        };
        assert!(
            refused(&empty, &member.key_pem, &ca.cert_pem, &peer)
                .contains("tls.crt holds no certificate")
        );
    }
}
