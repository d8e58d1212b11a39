//! Changing what the members run, safely: a rollout that stalls and its
//! rollback ([`rollout`]), etcd's downgrade ([`downgrade`]), and which
//! image runs dkv's own member side ([`member_side`]). The members' log
//! that etcd 3.5 may have written is tracked with the membership
//! ([`crate::cluster::membership::etcd35_log`]); the tests of the contract
//! with the member side are beside what builds the member pods
//! (`build/member_contract.rs`).

pub(crate) mod downgrade;
pub mod member_side;
pub mod rollout;
