//! What `member-init` tells the operator through its termination message:
//! how its member started, when the operator waits on it, or that it
//! refused a member whose data is gone. The operator reads the message from
//! the pod status of whichever build's `member-init` wrote it, so its
//! format is part of the contract ([`crate::contract`]); every released
//! format is a fixture in `tests/contract/messages/`.

use std::fmt;

const DATA_LOST: &str = "dkv:data-lost: member ";
const FORCED_NEW_CLUSTER: &str = "dkv:force-new-cluster: ";
const STARTED_FOR_REPLACEMENT: &str = "dkv:replacement ";
const STARTED_UNDER_EPOCH: &str = "dkv:epoch ";

/// A termination message of `member-init` that the operator acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitMessage {
    /// Refused: `member` has run before but its data directory is empty
    /// (the operator replaces it).
    DataLost { member: String },
    /// `member` was configured to restart alone with
    /// `--force-new-cluster`, for the quorum recovery `epoch`.
    ForcedNewCluster { member: String, epoch: String },
    /// `member` started afresh for the replacement the record names
    /// (`token`).
    StartedForReplacement { token: String, member: String },
    /// `member` started from data of the record's `epoch` (a restore from
    /// backup, or a quorum recovery).
    StartedUnderEpoch { epoch: String, member: String },
}

impl fmt::Display for InitMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DataLost { member } => write!(
                f,
                "{DATA_LOST}{member} has run before but its data directory is empty; it must be replaced, not restarted"
            ),
            Self::ForcedNewCluster { member, epoch } => write!(
                f,
                "{FORCED_NEW_CLUSTER}{member} restarts alone from its data (quorum recovery {epoch})"
            ),
            Self::StartedForReplacement { token, member } => write!(
                f,
                "{STARTED_FOR_REPLACEMENT}{token} {member} starts for its replacement"
            ),
            Self::StartedUnderEpoch { epoch, member } => write!(
                f,
                "{STARTED_UNDER_EPOCH}{epoch} {member} starts from data of this epoch"
            ),
        }
    }
}

impl InitMessage {
    /// The refusal of a member whose data is gone.
    pub fn data_lost(member: &str) -> Self {
        Self::DataLost {
            member: member.to_owned(),
        }
    }

    /// Reads a termination message; `None` for one the operator does not
    /// act on (a plain failure, or no message).
    pub fn parse(message: &str) -> Option<Self> {
        let message = message.trim();
        let first = |rest: &str| rest.split_whitespace().next().map(str::to_owned);
        if let Some(rest) = message.strip_prefix(DATA_LOST) {
            return Some(Self::DataLost {
                member: first(rest)?,
            });
        }
        if let Some(rest) = message.strip_prefix(FORCED_NEW_CLUSTER) {
            let epoch = rest
                .rsplit_once("(quorum recovery ")
                .and_then(|(_, epoch)| epoch.strip_suffix(')'))?;
            return Some(Self::ForcedNewCluster {
                member: first(rest)?,
                epoch: epoch.to_owned(),
            });
        }
        let two = |rest: &str| {
            let mut words = rest.split_whitespace().map(str::to_owned);
            Some((words.next()?, words.next()?))
        };
        if let Some(rest) = message.strip_prefix(STARTED_FOR_REPLACEMENT) {
            let (token, member) = two(rest)?;
            return Some(Self::StartedForReplacement { token, member });
        }
        if let Some(rest) = message.strip_prefix(STARTED_UNDER_EPOCH) {
            let (epoch, member) = two(rest)?;
            return Some(Self::StartedUnderEpoch { epoch, member });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        let member = || "orders-1".to_owned();
        for message in [
            InitMessage::DataLost { member: member() },
            InitMessage::ForcedNewCluster {
                member: member(),
                epoch: "e2".into(),
            },
            InitMessage::StartedForReplacement {
                token: "r7".into(),
                member: member(),
            },
            InitMessage::StartedUnderEpoch {
                epoch: "e2".into(),
                member: member(),
            },
        ] {
            assert_eq!(InitMessage::parse(&message.to_string()), Some(message));
        }
    }

    #[test]
    fn other_messages_are_not_acted_on() {
        for text in [
            "",
            "member orders-1 is not in the cluster's membership record yet",
            "dkv:epoch",
            "dkv:replacement r7",
            "dkv:force-new-cluster: orders-0 restarts alone",
        ] {
            assert_eq!(InitMessage::parse(text), None, "{text:?}");
        }
    }
}
