//! `spec.image` and `spec.version`: the etcd version a spec asks for, and whether this operator supports it.

use super::Problems;
use crate::etcd_version::{self, EtcdVersion};

pub(super) fn resolve_version(
    image: &str,
    explicit: Option<&str>,
    problems: &mut Problems,
) -> Option<EtcdVersion> {
    if image.trim().is_empty() {
        problems.add(
            "spec.image",
            "must name an etcd image, e.g. registry.k8s.io/etcd:3.5.16-0",
        );
        return None;
    }
    let (field, version) = match explicit {
        Some(text) => match EtcdVersion::parse(text) {
            Some(v) => ("spec.version", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("{text:?} is not a version; write MAJOR.MINOR.PATCH, e.g. 3.5.16"),
                );
                return None;
            }
        },
        None => match EtcdVersion::from_image(image) {
            Some(v) => ("spec.image", v),
            None => {
                problems.add(
                    "spec.version",
                    format!("the tag of image {image:?} is not a version; set spec.version to the etcd version the image runs, e.g. 3.5.16"),
                );
                return None;
            }
        },
    };
    if version < etcd_version::MIN_SUPPORTED {
        problems.add(
            field,
            format!(
                "etcd {version} is not supported; dkv needs {} or newer (learner members)",
                etcd_version::MIN_SUPPORTED
            ),
        );
        return None;
    }
    if version.minor_line() > etcd_version::MAX_SUPPORTED_MINOR {
        let (major, minor) = etcd_version::MAX_SUPPORTED_MINOR;
        problems.add(
            field,
            format!(
                "etcd {version} is newer than this operator supports (up to {major}.{minor}.x)"
            ),
        );
        return None;
    }
    Some(version)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(image: &str) -> (Option<EtcdVersion>, Vec<String>) {
        let mut problems = Problems::default();
        let version = resolve_version(image, None, &mut problems);
        (version, problems.0.into_iter().map(|p| p.message).collect())
    }

    #[test]
    fn etcd_3_4_through_3_7_are_supported_and_3_8_is_not() {
        for (image, version) in [
            ("registry.k8s.io/etcd:3.4.23-0", EtcdVersion::new(3, 4, 23)),
            ("registry.k8s.io/etcd:3.6.16-0", EtcdVersion::new(3, 6, 16)),
            ("quay.io/coreos/etcd:v3.7.3", EtcdVersion::new(3, 7, 3)),
        ] {
            assert_eq!(resolved(image), (Some(version), Vec::new()), "{image}");
        }
        let (version, problems) = resolved("gcr.io/etcd-development/etcd:v3.8.0");
        assert_eq!(version, None);
        assert_eq!(
            problems,
            vec!["etcd 3.8.0 is newer than this operator supports (up to 3.7.x)".to_owned()]
        );
    }
}
