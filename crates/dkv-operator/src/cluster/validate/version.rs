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
