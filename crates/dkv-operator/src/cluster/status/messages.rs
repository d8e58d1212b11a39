//! The reason of the Progressing condition for each operation kind (its words, for operations, steps and waits,
//! are `membership::words`').

use dkv_api::conditions::reasons;
use dkv_api::distributedkv::v1beta1::OperationKind;

pub(super) fn operation_reason(kind: OperationKind) -> &'static str {
    match kind {
        OperationKind::AddLearner => reasons::SCALING_UP,
        OperationKind::PromoteLearner => reasons::PROMOTING_LEARNER,
        OperationKind::RemoveMember => reasons::REMOVING_MEMBER,
        OperationKind::UpgradeMember => reasons::ROLLING_UPGRADE,
        OperationKind::RenewCertificate => reasons::RENEWING_CERTIFICATES,
        OperationKind::ReplaceMember => reasons::REPLACING_MEMBER,
        OperationKind::RecoverQuorum => reasons::RECOVERING_QUORUM,
        OperationKind::RestoreFromBackup => reasons::RESTORING,
        OperationKind::RestartMember => reasons::ROLLING_OUT,
        OperationKind::RelocateMember => reasons::RELOCATING_MEMBER,
    }
}
