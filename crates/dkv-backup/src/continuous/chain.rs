//! Chains of segments and what they make recoverable (pure).
//!
//! A chain starts at a full snapshot (its base, at the snapshot's revision)
//! and continues with segments, each starting where the one before ended
//! and naming that one's sha256. A chain ends where the agent could not
//! continue it (the watch revision was compacted, the agent was down too
//! long); the next full snapshot starts a new chain, and what lies between
//! two chains is a gap no restore can reach into.
//!
//! From the listing of a destination — bases and segment headers — this
//! module tells the recoverable window and plans a restore to a point: the
//! base to restore, the segments to replay, and the revision to stop at.

use jiff::Timestamp;

use super::segment::SegmentHeader;

/// A full snapshot that starts a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base {
    /// The chain it starts (see [`SegmentHeader::chain`]).
    pub chain: String,
    /// The snapshot contains every write up to this revision.
    pub revision: i64,
    pub taken_at: Timestamp,
    /// Where the snapshot is.
    pub uri: String,
}

/// A stored segment as listed: its header, where it is, and its digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSegment {
    pub header: SegmentHeader,
    pub uri: String,
    pub sha256: String,
}

/// The point a restore goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The newest point any chain reaches.
    Latest,
    /// The state right after this revision.
    Revision(i64),
    /// The state as of this time: every event received at or before it.
    Time(Timestamp),
}

/// One chain, verified as far as it is unbroken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chain {
    pub base: Base,
    /// The segments that continue the base without a break, in order.
    pub segments: Vec<StoredSegment>,
    /// Why the chain stops before its last stored segment, if it does.
    pub broken: Option<String>,
}

impl Chain {
    /// The newest revision the chain reaches.
    pub fn last_revision(&self) -> i64 {
        self.segments
            .last()
            .map_or(self.base.revision, |s| s.header.last_revision)
    }

    /// The newest time the chain vouches for.
    pub fn last_time(&self) -> Timestamp {
        self.segments
            .last()
            .map_or(self.base.taken_at, |s| s.header.last_time)
    }
}

/// The range a restore can reach: from the oldest base to the newest point
/// of any chain (with gaps between chains, see [`Window::gaps`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub oldest_revision: i64,
    pub oldest_time: Timestamp,
    pub newest_revision: i64,
    pub newest_time: Timestamp,
    /// Revisions between chains that no chain covers: `(after, until]`.
    pub gaps: Vec<(i64, i64)>,
}

/// What to restore: the base, the segments to replay, and the last revision
/// whose events are applied (events after it in the last segment are not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayPlan {
    pub base: Base,
    pub segments: Vec<StoredSegment>,
    /// Replay stops after this revision; `None` for a time target, where
    /// [`ReplayPlan::until_time`] decides event by event.
    pub until_revision: Option<i64>,
    pub until_time: Option<Timestamp>,
}

/// Why no restore to the target is possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the destination holds no full snapshot that starts a continuous backup chain")]
    NoBase,
    #[error(
        "{target} is before the oldest recoverable point (revision {oldest_revision}, {oldest_time}); choose a later point"
    )]
    TooEarly {
        target: String,
        oldest_revision: i64,
        oldest_time: Timestamp,
    },
    #[error(
        "{target} is after the newest recoverable point (revision {newest_revision}, {newest_time}); choose an earlier point or restore the newest"
    )]
    TooLate {
        target: String,
        newest_revision: i64,
        newest_time: Timestamp,
    },
    #[error(
        "{target} falls in a gap of the continuous backup (the revisions after {after} and before {until} were not recorded); choose {after} or earlier, or {until} or later"
    )]
    InGap {
        target: String,
        after: i64,
        until: i64,
    },
}

/// Builds each base's chain from the listed segments: in sequence order,
/// each must start where the previous ended and name its digest. The chain
/// stops at the first segment that does not fit (the rest is reported in
/// [`Chain::broken`]).
pub fn chains(bases: &[Base], segments: &[StoredSegment]) -> Vec<Chain> {
    let mut out: Vec<Chain> = bases
        .iter()
        .map(|base| {
            let mut mine: Vec<&StoredSegment> = segments
                .iter()
                .filter(|s| s.header.chain == base.chain)
                .collect();
            mine.sort_by_key(|s| s.header.sequence);
            let mut chain = Chain {
                base: base.clone(),
                segments: Vec::new(),
                broken: None,
            };
            let mut after = base.revision;
            let mut previous_sha = String::new();
            for (index, segment) in mine.into_iter().enumerate() {
                let h = &segment.header;
                let problem = if h.sequence != index as u64 + 1 {
                    Some(format!("segment {} is missing", index + 1))
                } else if h.after_revision != after {
                    Some(format!(
                        "segment {} starts after revision {}, the chain reached {after}",
                        h.sequence, h.after_revision
                    ))
                } else if h.previous_sha256 != previous_sha {
                    Some(format!(
                        "segment {} names {} as the segment before it, which is {}",
                        h.sequence,
                        short(&h.previous_sha256),
                        short(&previous_sha)
                    ))
                } else {
                    None
                };
                if let Some(problem) = problem {
                    chain.broken = Some(problem);
                    break;
                }
                after = h.last_revision;
                previous_sha = segment.sha256.clone();
                chain.segments.push(segment.clone());
            }
            chain
        })
        .collect();
    out.sort_by_key(|c| c.base.revision);
    out
}

fn short(sha: &str) -> &str {
    if sha.is_empty() {
        "nothing"
    } else {
        &sha[..sha.len().min(12)]
    }
}

/// The recoverable window of `chains` (sorted by base revision, as
/// [`chains`] returns them); `None` without any.
pub fn window(chains: &[Chain]) -> Option<Window> {
    let first = chains.first()?;
    let newest = chains.iter().max_by_key(|c| c.last_revision())?;
    let mut gaps = Vec::new();
    let mut reached = first.last_revision();
    for chain in &chains[1..] {
        if chain.base.revision > reached {
            gaps.push((reached, chain.base.revision));
        }
        reached = reached.max(chain.last_revision());
    }
    Some(Window {
        oldest_revision: first.base.revision,
        oldest_time: first.base.taken_at,
        newest_revision: newest.last_revision(),
        newest_time: newest.last_time(),
        gaps,
    })
}

/// Plans a restore of `chains` to `target`: the newest base at or before the
/// target whose chain reaches it, and its segments up to the target.
pub fn plan(chains: &[Chain], target: Target) -> Result<ReplayPlan, PlanError> {
    let window = window(chains).ok_or(PlanError::NoBase)?;
    let described = describe(target);
    let too_early = || PlanError::TooEarly {
        target: described.clone(),
        oldest_revision: window.oldest_revision,
        oldest_time: window.oldest_time,
    };
    let too_late = || PlanError::TooLate {
        target: described.clone(),
        newest_revision: window.newest_revision,
        newest_time: window.newest_time,
    };
    let reaches = |chain: &Chain| match target {
        Target::Latest => chain.last_revision() == window.newest_revision,
        Target::Revision(r) => chain.base.revision <= r && r <= chain.last_revision(),
        Target::Time(t) => chain.base.taken_at <= t && t <= chain.last_time(),
    };
    let Some(chain) = chains.iter().rev().find(|c| reaches(c)) else {
        return Err(match target {
            Target::Latest => PlanError::NoBase,
            Target::Revision(r) if r < window.oldest_revision => too_early(),
            Target::Revision(r) if r > window.newest_revision => too_late(),
            Target::Time(t) if t < window.oldest_time => too_early(),
            Target::Time(t) if t > window.newest_time => too_late(),
            _ => {
                let (after, until) = gap_around(&window, chains, target);
                PlanError::InGap {
                    target: described,
                    after,
                    until,
                }
            }
        });
    };
    let segments: Vec<StoredSegment> = chain
        .segments
        .iter()
        .take_while(|s| match target {
            Target::Latest => true,
            Target::Revision(r) => s.header.after_revision < r,
            Target::Time(t) => s.header.first_time <= t,
        })
        .cloned()
        .collect();
    Ok(ReplayPlan {
        base: chain.base.clone(),
        segments,
        until_revision: match target {
            Target::Latest => Some(chain.last_revision()),
            Target::Revision(r) => Some(r),
            Target::Time(_) => None,
        },
        until_time: match target {
            Target::Time(t) => Some(t),
            _ => None,
        },
    })
}

fn gap_around(window: &Window, chains: &[Chain], target: Target) -> (i64, i64) {
    match target {
        Target::Revision(r) => window
            .gaps
            .iter()
            .copied()
            .find(|(after, until)| *after < r && r <= *until)
            .unwrap_or((r, r)),
        // Between the end of one chain and the base of the next in time.
        Target::Time(t) => chains
            .windows(2)
            .find(|pair| pair[0].last_time() < t && t < pair[1].base.taken_at)
            .map_or((0, 0), |pair| {
                (pair[0].last_revision(), pair[1].base.revision)
            }),
        Target::Latest => (0, 0),
    }
}

fn describe(target: Target) -> String {
    match target {
        Target::Latest => "the newest point".to_owned(),
        Target::Revision(r) => format!("revision {r}"),
        Target::Time(t) => format!("time {t}"),
    }
}

/// Whether replay applies an event of `revision` received at `received_ms`
/// under `plan`.
pub fn applies(plan: &ReplayPlan, revision: i64, received_ms: i64) -> bool {
    if let Some(until) = plan.until_revision
        && revision > until
    {
        return false;
    }
    match plan.until_time {
        Some(t) => received_ms <= t.as_millisecond(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::super::segment::FORMAT;
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap_or_default()
    }

    fn base(chain: &str, revision: i64, time: i64) -> Base {
        Base {
            chain: chain.to_owned(),
            revision,
            taken_at: at(time),
            uri: format!("s3://b/{chain}.db"),
        }
    }

    /// Segments of `chain` from `after`, each `(last_revision, seconds)`.
    fn segments(chain: &str, after: i64, start: i64, parts: &[(i64, i64)]) -> Vec<StoredSegment> {
        let mut out = Vec::new();
        let (mut after, mut time, mut previous) = (after, start, String::new());
        for (index, (last, until)) in parts.iter().enumerate() {
            let sha = format!("{chain}-sha-{index}");
            out.push(StoredSegment {
                header: SegmentHeader {
                    format: FORMAT.to_owned(),
                    chain: chain.to_owned(),
                    sequence: index as u64 + 1,
                    after_revision: after,
                    last_revision: *last,
                    previous_sha256: previous.clone(),
                    first_time: at(time),
                    last_time: at(*until),
                    events: (*last - after) as u64,
                },
                uri: format!("s3://b/{chain}/{index}"),
                sha256: sha.clone(),
            });
            after = *last;
            time = *until;
            previous = sha;
        }
        out
    }

    /// Chain A: base at revision 100 (t=0), segments to 150 (t=10), 200
    /// (t=20). Chain B after a gap: base at 260 (t=60), segment to 300 (t=70).
    fn two_chains() -> Vec<Chain> {
        let mut all = segments("a", 100, 0, &[(150, 10), (200, 20)]);
        all.extend(segments("b", 260, 60, &[(300, 70)]));
        chains(&[base("b", 260, 60), base("a", 100, 0)], &all)
    }

    #[test]
    fn the_window_spans_the_chains_and_names_the_gap_between_them() {
        let w = window(&two_chains()).unwrap();
        assert_eq!((w.oldest_revision, w.newest_revision), (100, 300));
        assert_eq!((w.oldest_time, w.newest_time), (at(0), at(70)));
        assert_eq!(w.gaps, vec![(200, 260)]);
    }

    #[test]
    fn a_revision_target_replays_its_chain_up_to_the_segment_that_holds_it() {
        let chains = two_chains();
        let p = plan(&chains, Target::Revision(170)).unwrap();
        assert_eq!(p.base.revision, 100);
        assert_eq!(p.segments.len(), 2);
        assert_eq!(p.until_revision, Some(170));
        assert!(applies(&p, 170, 0) && !applies(&p, 171, 0));
        // Exactly a base: no segment.
        let p = plan(&chains, Target::Revision(260)).unwrap();
        assert_eq!((p.base.revision, p.segments.len()), (260, 0));
        let p = plan(&chains, Target::Revision(150)).unwrap();
        assert_eq!(p.segments.len(), 1);
    }

    #[test]
    fn latest_takes_the_chain_that_reaches_furthest() {
        let p = plan(&two_chains(), Target::Latest).unwrap();
        assert_eq!((p.base.revision, p.segments.len()), (260, 1));
        assert_eq!(p.until_revision, Some(300));
    }

    #[test]
    fn a_time_target_stops_at_the_events_received_by_then() {
        let p = plan(&two_chains(), Target::Time(at(15))).unwrap();
        assert_eq!((p.base.revision, p.segments.len()), (100, 2));
        assert_eq!(p.until_revision, None);
        let cut = at(15).as_millisecond();
        assert!(applies(&p, 190, cut) && !applies(&p, 191, cut + 1));
    }

    #[test]
    fn targets_outside_the_window_or_in_a_gap_say_what_is_reachable() {
        let chains = two_chains();
        assert!(matches!(
            plan(&chains, Target::Revision(50)),
            Err(PlanError::TooEarly {
                oldest_revision: 100,
                ..
            })
        ));
        assert!(matches!(
            plan(&chains, Target::Revision(301)),
            Err(PlanError::TooLate {
                newest_revision: 300,
                ..
            })
        ));
        assert_eq!(
            plan(&chains, Target::Revision(230)),
            Err(PlanError::InGap {
                target: "revision 230".into(),
                after: 200,
                until: 260
            })
        );
        let in_gap = plan(&chains, Target::Time(at(40))).unwrap_err();
        assert!(
            in_gap
                .to_string()
                .contains("the revisions after 200 and before 260 were not recorded"),
            "{in_gap}"
        );
        assert_eq!(plan(&[], Target::Latest), Err(PlanError::NoBase));
    }

    #[test]
    fn a_chain_stops_at_a_segment_that_does_not_continue_it() {
        let mut all = segments("a", 100, 0, &[(150, 10), (200, 20), (250, 30)]);
        // The second segment was replaced by one that the third does not name.
        all[1].sha256 = "other".into();
        let c = chains(&[base("a", 100, 0)], &all);
        assert_eq!(c[0].segments.len(), 2);
        assert!(c[0].broken.as_deref().unwrap().contains("segment 3 names"));
        assert_eq!(c[0].last_revision(), 200);

        let mut missing = segments("a", 100, 0, &[(150, 10), (200, 20), (250, 30)]);
        missing.remove(1);
        let c = chains(&[base("a", 100, 0)], &missing);
        assert_eq!(c[0].segments.len(), 1);
        assert_eq!(c[0].broken.as_deref(), Some("segment 2 is missing"));
    }
}
