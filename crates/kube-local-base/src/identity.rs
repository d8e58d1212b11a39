//! Who a caller is: the user and groups that the API server's authenticator and each kubelet's endpoint decide
//! requests for, and the identity a verified client certificate carries.

/// Every authenticated caller is in this group.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// Who asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

/// The identity of the verified client certificate a TLS connection presented, attached to each of its
/// requests.
#[derive(Debug, Clone)]
pub struct ClientCertificate(pub UserInfo);

impl ClientCertificate {
    /// The user of a certificate the TLS handshake verified (see [`crate::tls::certificate_subject`]).
    pub fn from_der(der: &[u8]) -> Option<Self> {
        let (name, mut groups) = crate::tls::certificate_subject(der)?;
        groups.push(AUTHENTICATED_GROUP.into());
        Some(ClientCertificate(UserInfo { name, groups }))
    }
}
