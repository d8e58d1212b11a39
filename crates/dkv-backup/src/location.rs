//! Where things are in object storage: `s3://bucket/path`, `gs://bucket/path`,
//! `az://container/path` and `file:///absolute/path`, parsed once into a
//! [`Location`]. A backup destination is a location used as a prefix; an
//! artifact URI is a location naming one object.

use std::fmt;

use object_store::path::Path;
use url::Url;

use crate::error::{Error, Result};

/// The kinds of object storage dkv writes backups to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Amazon S3 or any S3-compatible server (endpoint in [`crate::S3Options`]).
    S3,
    /// Google Cloud Storage.
    Gcs,
    /// Azure Blob Storage; the storage account comes with the credentials.
    Azure,
    /// A local (or mounted) file system; the URI path is absolute.
    File,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::S3 => "s3",
            Scheme::Gcs => "gs",
            Scheme::Azure => "az",
            Scheme::File => "file",
        }
    }
}

/// A bucket (container; nothing for `file://`) and a path within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Location {
    scheme: Scheme,
    bucket: String,
    path: Path,
}

impl Location {
    /// Parses a URI. Credentials in the URI (`s3://key:secret@bucket`),
    /// query strings and fragments are refused: credentials belong in the
    /// Secret, and anything else would be silently ignored.
    pub fn parse(uri: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidUri {
            uri: uri.to_owned(),
            reason: reason.to_owned(),
        };
        let url = Url::parse(uri).map_err(|e| invalid(&e.to_string()))?;
        if !url.username().is_empty() || url.password().is_some() {
            // Never echo a URI that carries credentials.
            return Err(Error::InvalidUri {
                uri: format!("{}://[redacted]@...", url.scheme()),
                reason: "credentials do not belong in a URI; put them in the credentials Secret"
                    .to_owned(),
            });
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("query strings and fragments are not supported"));
        }
        if url.port().is_some() {
            return Err(invalid(
                "a port names a server, not a bucket; set the S3 endpoint option instead",
            ));
        }
        let scheme = match url.scheme() {
            "s3" => Scheme::S3,
            "gs" => Scheme::Gcs,
            "az" => Scheme::Azure,
            "file" => Scheme::File,
            other => {
                return Err(invalid(&format!(
                    "unsupported scheme {other:?}; use s3://, gs://, az:// or file://"
                )));
            }
        };
        let host = url.host_str().unwrap_or_default();
        let bucket = match scheme {
            Scheme::File => {
                if !(host.is_empty() || host == "localhost") {
                    return Err(invalid(
                        "a file:// URI needs an absolute path: file:///path (three slashes)",
                    ));
                }
                String::new()
            }
            _ => {
                if host.is_empty() {
                    return Err(invalid("the bucket name is missing"));
                }
                host.to_owned()
            }
        };
        let path = Path::from_url_path(url.path()).map_err(|e| invalid(&e.to_string()))?;
        if scheme == Scheme::File && path.parts_count() == 0 {
            return Err(invalid("refusing the file system root as a location"));
        }
        Ok(Self {
            scheme,
            bucket,
            path,
        })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Bucket or container name; empty for `file://`.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The path within the bucket (for `file://`, relative to `/`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// This location with one more path segment.
    pub fn join(&self, segment: &str) -> Self {
        Self {
            path: self.path.clone().join(segment),
            ..self.clone()
        }
    }

    /// The same bucket, another path.
    pub(crate) fn with_path(&self, path: Path) -> Self {
        Self {
            path,
            ..self.clone()
        }
    }

    /// The sibling object named like this one plus `suffix`
    /// (`x.db` -> `x.db.json`).
    pub fn with_suffix(&self, suffix: &str) -> Self {
        let raw = format!("{}{suffix}", self.path.as_ref());
        Self {
            path: Path::from(raw),
            ..self.clone()
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = self.path.as_ref();
        match self.scheme {
            Scheme::File => write!(f, "file:///{path}"),
            scheme if path.is_empty() => write!(f, "{}://{}", scheme.as_str(), self.bucket),
            scheme => write!(f, "{}://{}/{path}", scheme.as_str(), self.bucket),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_scheme() {
        let cases = [
            ("s3://dkv-backups/prod/", Scheme::S3, "dkv-backups", "prod"),
            ("s3://dkv-backups", Scheme::S3, "dkv-backups", ""),
            ("gs://bucket/a/b", Scheme::Gcs, "bucket", "a/b"),
            ("az://container/x", Scheme::Azure, "container", "x"),
            (
                "file:///var/backups/dkv",
                Scheme::File,
                "",
                "var/backups/dkv",
            ),
            ("file://localhost/var/b", Scheme::File, "", "var/b"),
        ];
        for (uri, scheme, bucket, path) in cases {
            let location = Location::parse(uri).unwrap();
            assert_eq!(location.scheme(), scheme, "{uri}");
            assert_eq!(location.bucket(), bucket, "{uri}");
            assert_eq!(location.path().as_ref(), path, "{uri}");
        }
    }

    #[test]
    fn display_round_trips() {
        for uri in [
            "s3://b/prefix/orders/orders-20261122-060012.db",
            "s3://b",
            "gs://b/x",
            "az://c/x/y",
            "file:///tmp/dkv/x.db",
        ] {
            let location = Location::parse(uri).unwrap();
            assert_eq!(location.to_string(), uri);
            assert_eq!(Location::parse(&location.to_string()).unwrap(), location);
        }
        // A trailing slash is not part of the prefix.
        assert_eq!(
            Location::parse("s3://b/p/").unwrap().to_string(),
            "s3://b/p"
        );
    }

    #[test]
    fn refuses_what_it_would_otherwise_ignore_or_leak() {
        for (uri, why) in [
            ("http://bucket/x", "unsupported scheme"),
            ("s3:///x", "bucket name is missing"),
            ("s3://b/x?versionId=1", "query"),
            ("s3://b:9000/x", "port"),
            ("file://relative/path", "absolute path"),
            ("file:///", "root"),
            ("s3://b/a//c", "empty"),
            ("not a uri", "relative URL"),
        ] {
            let err = Location::parse(uri).unwrap_err().to_string();
            assert!(err.contains(why), "{uri}: {err}");
        }
    }

    #[test]
    fn a_uri_with_credentials_is_refused_without_echoing_them() {
        let err = Location::parse("s3://AKID:sup3rs3cret@bucket/x")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("sup3rs3cret"), "{err}");
        assert!(!err.contains("AKID"), "{err}");
        assert!(err.contains("credentials do not belong in a URI"), "{err}");
    }

    #[test]
    fn join_and_suffix_build_object_names() {
        let prefix = Location::parse("s3://b/backups").unwrap();
        let object = prefix.join("shop").join("orders.db");
        assert_eq!(object.to_string(), "s3://b/backups/shop/orders.db");
        assert_eq!(
            object.with_suffix(".json").to_string(),
            "s3://b/backups/shop/orders.db.json"
        );
        let root = Location::parse("s3://b").unwrap().join("x.db");
        assert_eq!(root.to_string(), "s3://b/x.db");
    }
}
