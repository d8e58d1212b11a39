//! A certificate authority for serving HTTPS (the API server, the kubelets, test webhooks) on loopback and for the
//! client certificates that authenticate to them: fresh for each run, or kept in a directory
//! ([`CertificateAuthority::load_or_create`]) so that kubeconfigs and pods' `ca.crt` stay valid across restarts.

use std::path::Path;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("building a TLS configuration: {0}")]
    Config(#[from] rustls::Error),
    #[error("building the client certificate verifier: {0}")]
    ClientVerifier(#[from] rustls::server::VerifierBuilderError),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("reading the CA kept in {path}: {source}")]
    Stored {
        path: std::path::PathBuf,
        source: rcgen::Error,
    },
}

/// A serving certificate and its key.
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

impl Issued {
    /// A rustls server configuration presenting this certificate (HTTP/1.1).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The same, also asking clients for a certificate issued by `client_ca` (DER): a client may present one
    /// (checked against that CA) or none, as kube-apiserver's `--client-ca-file` does.
    pub fn server_config_with_client_certificates(
        &self,
        client_ca: &[u8],
    ) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(client_ca.to_vec()))?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// The user a verified client certificate names, as kube-apiserver reads it: the subject's common name is the
/// user, each organization a group. `None` when the certificate cannot be parsed or has no common name.
pub fn certificate_subject(der: &[u8]) -> Option<(String, Vec<String>)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_owned))
        .collect();
    Some((name, groups))
}

/// Cheap to clone: clones share the CA's key.
#[derive(Clone)]
pub struct CertificateAuthority {
    issuer: Arc<Issuer<'static, KeyPair>>,
    cert_der: CertificateDer<'static>,
    cert_pem: String,
}

/// How long an issued certificate is valid: a kept CA outlives many runs, and a kubeconfig given out once must
/// not stay valid forever. Every run issues its own anew.
const ISSUED_VALIDITY: time::Duration = time::Duration::days(365);

fn bounded_validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    // A little in the past: clocks of the processes on one machine agree, but a certificate used in the second it
    // is made must already be valid.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + ISSUED_VALIDITY;
}

/// Where [`CertificateAuthority::load_or_create`] keeps the CA in its directory.
pub const CA_CERT_FILE: &str = "ca.crt";
pub const CA_KEY_FILE: &str = "ca.key";

/// Why a certificate request could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignRequestError {
    #[error("the request is not a PEM certificate request with a valid signature: {0}")]
    Request(rcgen::Error),
    #[error("signing the certificate: {0}")]
    Sign(rcgen::Error),
    #[error("the validity period is out of range")]
    Validity,
}

impl CertificateAuthority {
    pub fn new(common_name: &str) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(CertificateAuthority {
            issuer: Arc::new(Issuer::new(params, key)),
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
        })
    }

    /// The CA kept in `dir` (`ca.crt`, `ca.key`), or a new one written there: the key readable by its owner only
    /// (0600) in a directory only its owner may enter (0700).
    pub fn load_or_create(dir: &Path, common_name: &str) -> Result<Self, TlsError> {
        let cert_path = dir.join(CA_CERT_FILE);
        let key_path = dir.join(CA_KEY_FILE);
        if cert_path.exists() != key_path.exists() {
            let (present, missing) = if cert_path.exists() {
                (&cert_path, &key_path)
            } else {
                (&key_path, &cert_path)
            };
            return Err(TlsError::Io {
                what: "the CA is incomplete: found",
                path: present.clone(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "{} is missing; restore it, or remove {} to start over with a new CA (every kubeconfig and token given out becomes invalid)",
                        missing.display(),
                        dir.display()
                    ),
                ),
            });
        }
        if cert_path.exists() {
            let read = |path: &Path| {
                std::fs::read_to_string(path).map_err(|source| TlsError::Io {
                    what: "reading",
                    path: path.to_path_buf(),
                    source,
                })
            };
            let stored = |source| TlsError::Stored {
                path: dir.to_path_buf(),
                source,
            };
            let cert_pem = read(&cert_path)?;
            let key = KeyPair::from_pem(&read(&key_path)?).map_err(stored)?;
            let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(|_| {
                TlsError::Stored {
                    path: cert_path.clone(),
                    source: rcgen::Error::CouldNotParseCertificate,
                }
            })?;
            let stored_key = x509_parser::parse_x509_certificate(&cert_der)
                .map(|(_, cert)| cert.public_key().subject_public_key.data.to_vec())
                .unwrap_or_default();
            if stored_key != key.public_key_raw() {
                return Err(TlsError::Stored {
                    path: dir.to_path_buf(),
                    source: rcgen::Error::CouldNotParseKeyPair,
                });
            }
            let issuer = Issuer::from_ca_cert_der(&cert_der, key).map_err(stored)?;
            return Ok(CertificateAuthority {
                issuer: Arc::new(issuer),
                cert_der,
                cert_pem,
            });
        }
        let ca = Self::new(common_name)?;
        crate::private_files::create_dir(dir).map_err(|source| TlsError::Io {
            what: "creating",
            path: dir.to_path_buf(),
            source,
        })?;
        for (path, contents) in [
            (&key_path, ca.issuer.key().serialize_pem()),
            (&cert_path, ca.cert_pem.clone()),
        ] {
            crate::private_files::write(path, contents.as_bytes()).map_err(|source| {
                TlsError::Io {
                    what: "writing",
                    path: path.clone(),
                    source,
                }
            })?;
        }
        Ok(ca)
    }

    /// The CA certificate (DER).
    pub fn ca_der(&self) -> Vec<u8> {
        self.cert_der.to_vec()
    }

    /// The CA certificate (PEM), e.g. for a `caBundle` (base64 of this) or a kubeconfig.
    pub fn ca_pem(&self) -> String {
        self.cert_pem.clone()
    }

    /// A rustls client configuration that trusts this CA's servers and presents `client` (HTTP/1.1): how the API
    /// server reaches the kubelets.
    pub fn client_config(&self, client: &Issued) -> Result<rustls::ClientConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert_der.clone())?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(client.key_der.clone()));
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![client.cert_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// A client certificate for `user` in `group` (subject common name and organization), for TLS client
    /// authentication.
    pub fn issue_client(&self, user: &str, group: &str) -> Result<Issued, TlsError> {
        self.issue_client_in(user, Some(group))
    }

    /// A client certificate for `user`, in `group` if given (rcgen writes one organization at most).
    pub fn issue_client_in(&self, user: &str, group: Option<&str>) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(group) = group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        bounded_validity(&mut params);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        })
    }

    /// Signs a PEM certificate request: the request's subject and names, `key_usages` and `extended_key_usages`,
    /// valid from `not_before` to `not_after` (Unix seconds). Returns the certificate as PEM.
    pub fn sign_request(
        &self,
        request_pem: &str,
        key_usages: Vec<KeyUsagePurpose>,
        extended_key_usages: Vec<ExtendedKeyUsagePurpose>,
        not_before: i64,
        not_after: i64,
    ) -> Result<String, SignRequestError> {
        let mut request = rcgen::CertificateSigningRequestParams::from_pem(request_pem)
            .map_err(SignRequestError::Request)?;
        let at = |secs| {
            time::OffsetDateTime::from_unix_timestamp(secs).map_err(|_| SignRequestError::Validity)
        };
        request.params.not_before = at(not_before)?;
        request.params.not_after = at(not_after)?;
        request.params.is_ca = IsCa::ExplicitNoCa;
        request.params.key_usages = key_usages;
        request.params.extended_key_usages = extended_key_usages;
        request.params.use_authority_key_identifier_extension = true;
        let cert = request
            .signed_by(&self.issuer)
            .map_err(SignRequestError::Sign)?;
        Ok(cert.pem())
    }

    /// A serving certificate for DNS names and IP addresses (IPs become IP SANs).
    pub fn issue(&self, names: &[&str]) -> Result<Issued, TlsError> {
        // For serving only: without an extended key usage a certificate would also pass as a client's.
        self.issue_for(names, vec![ExtendedKeyUsagePurpose::ServerAuth])
    }

    /// A certificate for a peer that both serves and connects (an etcd member's peer port): serving and client
    /// usage, for `names`.
    pub fn issue_peer(&self, names: &[&str]) -> Result<Issued, TlsError> {
        self.issue_for(
            names,
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        )
    }

    fn issue_for(
        &self,
        names: &[&str],
        usages: Vec<ExtendedKeyUsagePurpose>,
    ) -> Result<Issued, TlsError> {
        let key = KeyPair::generate()?;
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("kube-local"),
        );
        params.extended_key_usages = usages;
        bounded_validity(&mut params);
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().clone(),
            key_der: key.serialize_der(),
        })
    }
}
