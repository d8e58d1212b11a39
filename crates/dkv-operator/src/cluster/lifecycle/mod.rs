//! A cluster stopping and starting as a whole: hibernation
//! ([`hibernation`]) and what happens when it is deleted ([`cleanup`]).

pub(crate) mod cleanup;
pub mod hibernation;
