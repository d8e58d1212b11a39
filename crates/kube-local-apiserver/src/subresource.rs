//! The subresource a request path names (`pods/NAME/log`, `deployments/NAME/scale`, …), parsed once when the path
//! is routed: the handlers match on it, never on its text.

use crate::registry::ResourceType;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathSubresource {
    Status,
    Scale,
    /// A namespace's `finalize`.
    Finalize,
    Log,
    Exec,
    Attach,
    /// A ServiceAccount's `token` (a TokenRequest).
    Token,
    PortForward,
    Eviction,
    EphemeralContainers,
    /// A CertificateSigningRequest's `approval`.
    Approval,
}

impl PathSubresource {
    const ALL: [PathSubresource; 11] = [
        PathSubresource::Status,
        PathSubresource::Scale,
        PathSubresource::Finalize,
        PathSubresource::Log,
        PathSubresource::Exec,
        PathSubresource::Attach,
        PathSubresource::Token,
        PathSubresource::PortForward,
        PathSubresource::Eviction,
        PathSubresource::EphemeralContainers,
        PathSubresource::Approval,
    ];

    /// The path segment, as in URLs, RBAC rules and traffic counts.
    pub fn as_str(self) -> &'static str {
        match self {
            PathSubresource::Status => "status",
            PathSubresource::Scale => "scale",
            PathSubresource::Finalize => "finalize",
            PathSubresource::Log => "log",
            PathSubresource::Exec => "exec",
            PathSubresource::Attach => "attach",
            PathSubresource::Token => "token",
            PathSubresource::PortForward => "portforward",
            PathSubresource::Eviction => "eviction",
            PathSubresource::EphemeralContainers => "ephemeralcontainers",
            PathSubresource::Approval => "approval",
        }
    }

    /// The subresource `segment` names on `rt` (a request for one object when `named`), if `rt` serves it.
    pub fn of(segment: &str, rt: &ResourceType, named: bool) -> Option<PathSubresource> {
        let sub = Self::ALL.into_iter().find(|s| s.as_str() == segment)?;
        let pods = rt.group.is_empty() && rt.plural == "pods";
        let served = match sub {
            PathSubresource::Status => rt.status,
            PathSubresource::Scale => rt.scale.is_some(),
            PathSubresource::Finalize => rt.group.is_empty() && rt.plural == "namespaces",
            // Pods stream their containers' logs, commands and output.
            PathSubresource::Log | PathSubresource::Exec | PathSubresource::Attach => {
                rt.has_log() && named
            }
            PathSubresource::Token => rt.has_token() && named,
            PathSubresource::PortForward
            | PathSubresource::Eviction
            | PathSubresource::EphemeralContainers => pods && named,
            PathSubresource::Approval => rt.has_approval() && named,
        };
        served.then_some(sub)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subresource_reads_back_as_its_segment() {
        for sub in PathSubresource::ALL {
            assert_eq!(
                PathSubresource::ALL
                    .into_iter()
                    .find(|s| s.as_str() == sub.as_str()),
                Some(sub)
            );
        }
    }
}
