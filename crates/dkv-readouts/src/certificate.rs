//! A PEM certificate's subject and expiry (`notAfter`), as the operator
//! reports it (the `dkv_certificate_expiry_timestamp_seconds` metric) and `kubectl dkv
//! status` lists it. The parsing is `x509-parser`'s.

use jiff::Timestamp;

/// What a certificate that did not read is.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    #[error("not a PEM block: {0}")]
    Pem(String),
    #[error("the PEM block is not an X.509 certificate: {0}")]
    X509(String),
    #[error("the certificate's notAfter ({0} seconds since 1970) is out of range")]
    NotAfter(i64),
}

/// The facts of one certificate both readers show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The subject, as OpenSSL prints it (`CN=orders-member`).
    pub subject: String,
    /// The end of its validity.
    pub not_after: Timestamp,
}

/// The first certificate in `pem` (a Secret's `tls.crt` or `ca.crt`; a
/// chain's first is the leaf).
pub fn read_pem(pem: &[u8]) -> Result<Certificate, Error> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem).map_err(|e| Error::Pem(e.to_string()))?;
    let certificate = block.parse_x509().map_err(|e| Error::X509(e.to_string()))?;
    let seconds = certificate.validity().not_after.timestamp();
    Ok(Certificate {
        subject: certificate.subject().to_string(),
        not_after: Timestamp::from_second(seconds).map_err(|_| Error::NotAfter(seconds))?,
    })
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, KeyPair};

    use super::*;

    fn pem(common_name: &str, not_after: time::OffsetDateTime) -> String {
        let key = KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut params = CertificateParams::new(vec!["orders.shop.svc".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.not_after = not_after;
        params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("{e}"))
            .pem()
    }

    #[test]
    fn the_subject_and_expiry_are_read_from_the_first_certificate() {
        let expiry = rcgen::date_time_ymd(2031, 5, 17);
        let chain =
            pem("orders-member", expiry) + &pem("orders-ca", rcgen::date_time_ymd(2040, 1, 1));
        assert_eq!(
            read_pem(chain.as_bytes()),
            Ok(Certificate {
                subject: "CN=orders-member".to_owned(),
                not_after: "2031-05-17T00:00:00Z"
                    .parse()
                    .unwrap_or_else(|e| panic!("{e}")),
            })
        );
    }

    #[test]
    fn what_is_not_a_certificate_says_why() {
        assert!(matches!(read_pem(b"not pem at all"), Err(Error::Pem(_))));
        let not_x509 = "-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n";
        assert!(matches!(read_pem(not_x509.as_bytes()), Err(Error::X509(_))));
    }
}
