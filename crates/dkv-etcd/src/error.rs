//! Errors of etcd administration, classified so the operator can tell
//! "try again later" from "etcd refused this for a reason".

use std::time::Duration;

use tonic::Code;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No answer within the call's deadline.
    #[error("etcd did not answer {operation} within {timeout:?}")]
    Timeout {
        operation: &'static str,
        timeout: Duration,
    },

    /// The endpoint could not be reached or the connection broke.
    #[error("etcd unreachable during {operation}: {message}")]
    Unavailable {
        operation: &'static str,
        message: String,
    },

    /// etcd's strict reconfiguration check: membership may not change until
    /// every member has been connected for a while (about 5 s). Expected
    /// right after a start or a previous change; wait and retry.
    #[error("etcd refused {operation} until the cluster has been healthy for a while: {message}")]
    NotHealthyYet {
        operation: &'static str,
        message: String,
    },

    /// A learner can only be promoted once its log has nearly caught up
    /// with the leader's.
    #[error("learner {member} is not in sync with the leader yet")]
    LearnerNotReady { member: String },

    /// The member ID is not (or no longer) in the cluster.
    #[error("member {member} not found")]
    MemberNotFound { member: String },

    /// A watch asked for revisions etcd has compacted away: what happened
    /// before `compact_revision` can no longer be watched.
    #[error(
        "etcd compacted its history up to revision {compact_revision}: changes before it can no longer be watched"
    )]
    Compacted { compact_revision: i64 },

    /// Authentication is on and the credentials do not open it: the
    /// password is not the one etcd's data holds for the user.
    #[error("etcd refused the credentials during {operation}: {message}")]
    AuthenticationFailed {
        operation: &'static str,
        message: String,
    },

    /// Any other refusal by etcd.
    #[error("etcd refused {operation}: {message}")]
    Refused {
        operation: &'static str,
        message: String,
    },
}

impl Error {
    /// Whether the same call may succeed if simply repeated later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::Unavailable { .. }
                | Error::NotHealthyYet { .. }
                | Error::LearnerNotReady { .. }
        )
    }

    /// Whether this is etcd asking the caller to wait for a condition that
    /// resolves by itself (rather than a fault).
    pub fn is_waiting(&self) -> bool {
        matches!(
            self,
            Error::NotHealthyYet { .. } | Error::LearnerNotReady { .. }
        )
    }

    /// Classifies an etcd-client error from `operation`.
    pub(crate) fn from_client(
        operation: &'static str,
        err: etcd_client::Error,
        member: Option<u64>,
    ) -> Self {
        let member_name = || member.map(|m| format!("{m:x}")).unwrap_or_default();
        match err {
            etcd_client::Error::GRpcStatus(status) => {
                let message = status.message().to_owned();
                // etcd's error strings are its API: these are stable across
                // 3.4-3.6 (server/etcdserver/api/v3rpc/rpctypes).
                if message.contains("unhealthy cluster")
                    || message.contains("re-configuration failed due to not enough started members")
                {
                    Error::NotHealthyYet { operation, message }
                } else if message
                    .contains("can only promote a learner member which is in sync with leader")
                {
                    Error::LearnerNotReady {
                        member: member_name(),
                    }
                } else if message.contains("authentication failed, invalid user ID or password") {
                    Error::AuthenticationFailed { operation, message }
                } else if message.contains("member not found") {
                    Error::MemberNotFound {
                        member: member_name(),
                    }
                } else if matches!(
                    status.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                ) || message.contains("leader changed")
                    || message.contains("no leader")
                    || from_the_connection(&status)
                {
                    Error::Unavailable { operation, message }
                } else {
                    Error::Refused { operation, message }
                }
            }
            etcd_client::Error::TransportError(e) => Error::Unavailable {
                operation,
                message: e.to_string(),
            },
            etcd_client::Error::IoError(e) => Error::Unavailable {
                operation,
                message: e.to_string(),
            },
            other => Error::Refused {
                operation,
                message: other.to_string(),
            },
        }
    }
}

/// Whether tonic made this status out of a failure on the client's side
/// (the connection could not be made or broke: "transport error", code
/// Unknown) rather than receiving it from etcd. Such a status carries the
/// failure as its source; etcd's answers never have one.
fn from_the_connection(status: &tonic::Status) -> bool {
    status.code() == Code::Unknown && std::error::Error::source(status).is_some()
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_that_breaks_is_unavailable_not_a_refusal() {
        // What tonic hands back when the balanced channel's connection to a
        // member fails: code Unknown, "transport error", the cause as source.
        let broken = tonic::Status::from_error(Box::new(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        )));
        assert_eq!(broken.code(), Code::Unknown);
        let err = Error::from_client("member list", etcd_client::Error::GRpcStatus(broken), None);
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
        assert!(err.is_retryable());

        // etcd's own answer with code Unknown is a refusal.
        let answered = tonic::Status::unknown("etcdserver: some refusal");
        let err = Error::from_client(
            "member list",
            etcd_client::Error::GRpcStatus(answered),
            None,
        );
        assert!(matches!(err, Error::Refused { .. }), "{err:?}");
    }
}
