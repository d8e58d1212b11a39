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
                } else if message.contains("member not found") {
                    Error::MemberNotFound {
                        member: member_name(),
                    }
                } else if matches!(
                    status.code(),
                    Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled
                ) || message.contains("leader changed")
                    || message.contains("no leader")
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

pub type Result<T, E = Error> = std::result::Result<T, E>;
