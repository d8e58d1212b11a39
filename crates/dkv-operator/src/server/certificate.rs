//! The secure metrics endpoint's certificate: `tls.crt`/`tls.key` from a
//! mounted directory (a Secret, e.g. from cert-manager), re-read when they
//! change, or a self-signed one generated at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use crate::pki::{Authority, Leaf, Usage};
use crate::tls_serving::{ServingCertResolver, certified_key};

pub const CERT_FILE: &str = "tls.crt";
pub const KEY_FILE: &str = "tls.key";
/// How often the directory is checked for a renewed certificate (a Secret
/// update reaches the pod's mount within about a minute anyway).
const RELOAD_INTERVAL: Duration = Duration::from_secs(10);
/// A generated certificate lives as long as the process, which may be long.
const SELF_SIGNED_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The certificate and key files' contents (PEM).
type PemPair = (Vec<u8>, Vec<u8>);

/// The PEM files of `dir`, as read now.
fn read_pair(dir: &Path) -> anyhow::Result<PemPair> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path).with_context(|| format!("reading {}", path.display()))
    };
    Ok((read(CERT_FILE)?, read(KEY_FILE)?))
}

fn load(dir: &Path) -> anyhow::Result<(PemPair, CertifiedKey)> {
    let pair = read_pair(dir)?;
    let key = certified_key(&pair.0, &pair.1)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("loading the certificate in {}", dir.display()))?;
    Ok((pair, key))
}

/// A certificate for `hosts` from a CA made for the purpose and thrown away:
/// callers cannot verify it against anything they know, which is what
/// "self-signed" means to them; scrapers of such an endpoint skip verification.
pub fn self_signed(hosts: &[String]) -> anyhow::Result<CertifiedKey> {
    let ca = Authority::generate("dkv-operator-metrics-ca", SELF_SIGNED_VALIDITY)
        .context("generating a CA for the metrics certificate")?;
    let issued = ca
        .issue(&Leaf {
            common_name: "dkv-operator-metrics",
            hosts,
            usage: Usage::Server,
            validity: SELF_SIGNED_VALIDITY,
        })
        .context("issuing the self-signed metrics certificate")?;
    let chain = format!("{}{}", issued.cert_pem, ca.cert_pem);
    certified_key(chain.as_bytes(), issued.key_pem.as_bytes()).map_err(anyhow::Error::msg)
}

/// Where the certificate comes from.
#[derive(Debug, Clone)]
pub enum ServingCertificateSource {
    Directory(PathBuf),
    SelfSigned { hosts: Vec<String> },
}

/// A loaded certificate, served through its resolver.
pub struct ServingCertificate {
    pub resolver: Arc<ServingCertResolver>,
    /// The directory it came from and what was read there.
    watched: Option<(PathBuf, PemPair)>,
}

impl ServingCertificateSource {
    /// Reads or generates the certificate now, so a missing or broken one
    /// stops the operator at start rather than leaving it without metrics.
    pub fn load(&self) -> anyhow::Result<ServingCertificate> {
        match self {
            ServingCertificateSource::SelfSigned { hosts } => {
                tracing::info!(?hosts, "serving metrics with a self-signed certificate");
                Ok(ServingCertificate {
                    resolver: Arc::new(ServingCertResolver::new(self_signed(hosts)?)),
                    watched: None,
                })
            }
            ServingCertificateSource::Directory(dir) => {
                let (pair, key) = load(dir)?;
                tracing::info!(dir = %dir.display(), "serving metrics with the mounted certificate");
                Ok(ServingCertificate {
                    resolver: Arc::new(ServingCertResolver::new(key)),
                    watched: Some((dir.clone(), pair)),
                })
            }
        }
    }
}

impl ServingCertificate {
    /// Keeps a directory's certificate current until `stop`.
    pub fn watch(&self, stop: watch::Receiver<bool>) {
        if let Some((dir, pair)) = &self.watched {
            tokio::spawn(reload(
                dir.clone(),
                pair.clone(),
                self.resolver.clone(),
                stop,
            ));
        }
    }
}

/// Swaps in the directory's certificate whenever its files change; a broken
/// pair (e.g. read between the two files' updates) keeps the current one.
async fn reload(
    dir: PathBuf,
    mut current: PemPair,
    resolver: Arc<ServingCertResolver>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(RELOAD_INTERVAL) => {}
            _ = stop.wait_for(|stop| *stop) => return,
        }
        let pair = match read_pair(&dir) {
            Ok(pair) if pair != current => pair,
            Ok(_) => continue,
            Err(err) => {
                tracing::warn!(error = %err, "re-reading the metrics certificate");
                continue;
            }
        };
        match certified_key(&pair.0, &pair.1) {
            Ok(key) => {
                resolver.set(key);
                current = pair;
                tracing::info!(dir = %dir.display(), "serving the changed metrics certificate");
            }
            Err(err) => {
                tracing::warn!(error = %err, "the changed metrics certificate is unusable; keeping the current one")
            }
        }
    }
}
