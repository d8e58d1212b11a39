//! What can go wrong, each worded as the one line a user reads.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    #[error("loading the kubeconfig: {0}")]
    Config(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    /// A request that would change nothing or the wrong thing: the message
    /// says why and what to do instead.
    #[error("{0}")]
    Refused(String),
    #[error("printing the result: {0}")]
    Output(String),
    #[error("{0}")]
    Failed(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An API call's error, or [`Error::NotFound`] for a 404.
    pub fn api(
        what: impl Into<String>,
        kind: &'static str,
        namespace: &str,
        name: &str,
    ) -> impl FnOnce(kube::Error) -> Error {
        let what = what.into();
        let (namespace, name) = (namespace.to_owned(), name.to_owned());
        move |source| match &source {
            kube::Error::Api(status) if status.code == 404 => Error::NotFound {
                kind,
                namespace,
                name,
            },
            _ => Error::Api { what, source },
        }
    }
}
