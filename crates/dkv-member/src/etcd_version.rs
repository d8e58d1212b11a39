//! etcd versions as the member side reads them: `--etcd-version` and
//! image tags. The rules for moving between versions are the operator's.

use std::fmt;

/// A released etcd version, `MAJOR.MINOR.PATCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EtcdVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl EtcdVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// Parses `3.5.16`, `v3.5.16` and image-tag forms such as `3.5.16-0`.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.strip_prefix('v').unwrap_or(text);
        let core = text.split(['-', '+']).next()?;
        let mut parts = core.split('.');
        let version = Self {
            major: parts.next()?.parse().ok()?,
            minor: parts.next()?.parse().ok()?,
            patch: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(version)
    }

    /// The version an image tag names, if the tag is a version. Digests and
    /// floating tags (`latest`) name none.
    pub fn from_image(image: &str) -> Option<Self> {
        let without_digest = image.split('@').next()?;
        let last_segment = without_digest.rsplit('/').next()?;
        let (_, tag) = last_segment.rsplit_once(':')?;
        Self::parse(tag)
    }

    /// `major.minor`, the unit etcd's upgrade rules speak in.
    pub fn minor_line(&self) -> (u32, u32) {
        (self.major, self.minor)
    }
}

impl fmt::Display for EtcdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_common_image_tags() {
        let v = |s| EtcdVersion::from_image(s);
        assert_eq!(
            v("registry.k8s.io/etcd:3.5.16-0"),
            Some(EtcdVersion::new(3, 5, 16))
        );
        assert_eq!(
            v("quay.io/coreos/etcd:v3.4.23"),
            Some(EtcdVersion::new(3, 4, 23))
        );
        assert_eq!(
            v("localhost:5000/etcd:3.6.1"),
            Some(EtcdVersion::new(3, 6, 1))
        );
        assert_eq!(v("localhost:5000/etcd"), None);
        assert_eq!(v("registry.k8s.io/etcd:latest"), None);
        assert_eq!(v("registry.k8s.io/etcd@sha256:abcd"), None);
    }
}
