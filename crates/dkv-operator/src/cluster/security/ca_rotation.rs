//! Rotation of a cluster's CA with an overlap (pure): when to start, and
//! when each phase may give way to the next.
//!
//! A CA cannot be swapped in one step: a member that trusts only the new CA
//! refuses every member still presenting a certificate of the old one. So
//! the rotation goes through three phases, each rolled out to every member
//! (one restart at a time) before the next begins:
//! 1. [`Phase::Trust`]: a new CA exists; every member and client trusts
//!    both CAs, certificates are still the old CA's;
//! 2. [`Phase::Issue`]: the member and client certificates are reissued by
//!    the new CA; both CAs are still trusted;
//! 3. [`Phase::Finish`]: the new CA becomes the only CA and the only one
//!    trusted.
//!
//! It starts when the cluster asks for it (the annotation
//! [`crate::parts::naming::ROTATE_ANNOTATION`], once per distinct value) or when the CA comes due
//! (a third of its validity left).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Trust,
    Issue,
    Finish,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Trust => "Trust",
            Phase::Issue => "Issue",
            Phase::Finish => "Finish",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "Trust" => Some(Phase::Trust),
            "Issue" => Some(Phase::Issue),
            "Finish" => Some(Phase::Finish),
            _ => None,
        }
    }
}

/// What decides the next move.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inputs<'a> {
    /// The phase under way, if any.
    pub phase: Option<Phase>,
    /// The rotation request (annotation value) last completed.
    pub rotated_for: Option<&'a str>,
    /// The rotation request on the cluster now.
    pub requested: Option<&'a str>,
    /// The CA has a third of its validity left (or less).
    pub ca_due: bool,
    /// Every member runs the current certificates and nothing else is
    /// under way: the current phase is rolled out.
    pub settled: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    Stay,
    /// Create the next CA and enter [`Phase::Trust`].
    Start,
    /// Enter this phase.
    Enter(Phase),
    /// The rotation is complete.
    Complete,
}

pub fn next_move(inputs: &Inputs<'_>) -> Move {
    match inputs.phase {
        None => {
            let asked = inputs
                .requested
                .is_some_and(|r| Some(r) != inputs.rotated_for);
            if asked || inputs.ca_due {
                Move::Start
            } else {
                Move::Stay
            }
        }
        Some(_) if !inputs.settled => Move::Stay,
        Some(Phase::Trust) => Move::Enter(Phase::Issue),
        Some(Phase::Issue) => Move::Enter(Phase::Finish),
        Some(Phase::Finish) => Move::Complete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_runs_once_and_each_phase_waits_for_its_rollout() {
        let mut inputs = Inputs {
            requested: Some("2026-11"),
            ..Inputs::default()
        };
        assert_eq!(next_move(&inputs), Move::Start);
        inputs.phase = Some(Phase::Trust);
        assert_eq!(next_move(&inputs), Move::Stay, "not rolled out yet");
        inputs.settled = true;
        assert_eq!(next_move(&inputs), Move::Enter(Phase::Issue));
        inputs.phase = Some(Phase::Issue);
        assert_eq!(next_move(&inputs), Move::Enter(Phase::Finish));
        inputs.phase = Some(Phase::Finish);
        assert_eq!(next_move(&inputs), Move::Complete);
        inputs.phase = None;
        inputs.rotated_for = Some("2026-11");
        assert_eq!(next_move(&inputs), Move::Stay, "the same request again");
        inputs.requested = Some("2027-01");
        assert_eq!(next_move(&inputs), Move::Start);
        inputs.requested = None;
        assert_eq!(next_move(&inputs), Move::Stay);
        inputs.ca_due = true;
        assert_eq!(next_move(&inputs), Move::Start);
        assert_eq!(Phase::parse(Phase::Issue.as_str()), Some(Phase::Issue));
    }
}
