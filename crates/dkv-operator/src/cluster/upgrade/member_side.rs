//! Which dkv image runs a cluster's member-side code (the `member-init`
//! init container, and the restore steps while a restore runs), so that an
//! operator upgrade restarts no member that does not need it.
//!
//! The member pods' template carries two annotations:
//! [`MEMBER_SIDE_ANNOTATION`], a hash of the template as built with the
//! member-side image left out plus a hash of the member-side code
//! (the `dkv-member` crate and what it depends on, hashed at build time), and [`MEMBER_IMAGE_ANNOTATION`],
//! the image that runs it. The StatefulSet itself carries the cluster
//! generation it was last built for ([`GENERATION_ANNOTATION`]). Each pass:
//!
//! - the same member-side hash as the running template: the members keep
//!   their image. A new operator build whose member-side code and template
//!   did not change restarts no member, whatever its image is called;
//! - another hash, because the user changed something (a spec edit, a
//!   restart request, a reissued certificate, a restore or a membership
//!   change under way): the members move to this operator's image, as they
//!   restart anyway;
//! - another hash only because the operator changed: a rollout the user did
//!   not ask for. It waits for a turn from [`UpgradeBudget`], shared by every
//!   cluster of the installation (`--member-upgrades-per-minute`); until
//!   then the running template is kept as it is.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::parts::naming::MEMBER_SIDE_ANNOTATION;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::PodTemplateSpec;

/// On the pod template: the image that runs the member-side code (read
/// from the StatefulSet cache, which keeps no pod spec).
pub const MEMBER_IMAGE_ANNOTATION: &str = "dkv.io/member-image";
/// On the StatefulSet: the cluster generation its template was built for.
pub const GENERATION_ANNOTATION: &str = "dkv.io/built-for-generation";

/// A hash of the member-side code (the `dkv-member` crate and what it
/// depends on, `build/member_code.rs`), made by `build.rs`: part of [`MEMBER_SIDE_ANNOTATION`], so new member-side
/// code rolls out even when the template it runs from is the same.
pub const CODE_HASH: &str = env!("DKV_MEMBER_SIDE_CODE");

/// What [`CODE_HASH`] was made of: the files and directories, relative to
/// the workspace root, separated by `:` (the tests find the previous build
/// whose member side differs from this one's by them).
pub const CODE_INPUTS: &str = env!("DKV_MEMBER_SIDE_INPUTS");

/// The member-side code this operator runs: [`CODE_HASH`], and
/// `--member-side-epoch` when set (raising it rolls every cluster onto
/// this operator's image at the bounded rate, e.g. for a rebuilt image).
pub fn code(epoch: u32) -> String {
    if epoch == 0 {
        CODE_HASH.to_owned()
    } else {
        format!("{CODE_HASH}.{epoch}")
    }
}

/// The member pods' dkv containers this pass.
#[derive(Debug, Clone, PartialEq)]
pub enum MemberSide {
    /// The template as this operator builds it, stamped with its
    /// member-side `hash`; run by this operator's image, or by `keep`, the
    /// image the members run already when the member side is unchanged.
    Built { hash: String, keep: Option<String> },
    /// A rollout only this operator's upgrade asks for, waiting for its
    /// turn: the running pod template, as read from the API, kept whole.
    Held { template: Box<PodTemplateSpec> },
}

impl Default for MemberSide {
    fn default() -> Self {
        Self::Built {
            hash: String::new(),
            keep: None,
        }
    }
}

/// What the running StatefulSet says of its members' template (all from
/// the cached object: annotations only).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningTemplate {
    pub member_side: Option<String>,
    pub image: Option<String>,
    pub generation: Option<i64>,
    pub restarted_at: Option<String>,
    pub tls_serial: Option<String>,
    pub replicas: Option<i32>,
}

impl RunningTemplate {
    pub fn of(sts: &StatefulSet) -> Self {
        let template = sts.spec.template.metadata.as_ref();
        let annotation = |key: &str| {
            template
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(key))
                .cloned()
        };
        Self {
            member_side: annotation(MEMBER_SIDE_ANNOTATION),
            image: annotation(MEMBER_IMAGE_ANNOTATION),
            generation: sts
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GENERATION_ANNOTATION))
                .and_then(|g| g.parse().ok()),
            restarted_at: annotation(dkv_api::labels::RESTARTED_AT),
            tls_serial: annotation(crate::parts::naming::SERIAL_ANNOTATION),
            replicas: sts.spec.replicas,
        }
    }
}

/// What this pass wants of the members' template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted<'a> {
    /// [`hash`] of the template this pass builds.
    pub member_side: &'a str,
    pub generation: Option<i64>,
    pub restarted_at: Option<&'a str>,
    pub tls_serial: Option<&'a str>,
    pub replicas: i32,
    /// A restore, a replay, a rollback or a membership operation is under
    /// way: the template changes for it, now.
    pub under_way: bool,
}

/// The decision, before a turn is asked for: see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Current,
    Keep {
        image: String,
    },
    /// Only the operator changed: a turn is needed.
    NeedsTurn,
}

pub fn decide(running: Option<&RunningTemplate>, wanted: &Wanted<'_>) -> Decision {
    let Some(running) = running else {
        return Decision::Current;
    };
    if running.member_side.as_deref() == Some(wanted.member_side) {
        return running
            .image
            .clone()
            .map_or(Decision::Current, |image| Decision::Keep { image });
    }
    // A template stamped by an operator before these annotations has no
    // generation: its first rollout to them waits for a turn too.
    let asked = wanted.under_way
        || running
            .generation
            .is_some_and(|g| Some(g) != wanted.generation)
        || running.restarted_at.as_deref() != wanted.restarted_at
        || running.tls_serial.as_deref() != wanted.tls_serial
        || running.replicas != Some(wanted.replicas);
    if asked {
        Decision::Current
    } else {
        Decision::NeedsTurn
    }
}

/// The member-side hash of a template built with `image` as the
/// member-side image: the template with that image and this module's
/// annotations left out, and the member-side `code` ([`code`]).
pub fn hash(template: &PodTemplateSpec, image: &str, code: &str) -> String {
    let mut template = template.clone();
    for_member_side_containers(&mut template, image, |c| c.image = None);
    if let Some(annotations) = template
        .metadata
        .as_mut()
        .and_then(|m| m.annotations.as_mut())
    {
        annotations.remove(MEMBER_SIDE_ANNOTATION);
        annotations.remove(MEMBER_IMAGE_ANNOTATION);
    }
    let mut json = serde_json::to_vec(&template).unwrap_or_default();
    json.extend_from_slice(code.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &json);
    hex::encode(&digest.as_ref()[..8])
}

/// Stamps a template built with `image` as the member-side image with its
/// member-side `hash` and the image that runs it: `keep` instead of
/// `image` when given.
pub fn stamp(template: &mut PodTemplateSpec, image: &str, hash: &str, keep: Option<&str>) {
    let runs = match keep {
        Some(kept) => {
            for_member_side_containers(template, image, |c| c.image = Some(kept.to_owned()));
            kept
        }
        None => image,
    };
    let annotations = template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(MEMBER_SIDE_ANNOTATION.to_owned(), hash.to_owned());
    annotations.insert(MEMBER_IMAGE_ANNOTATION.to_owned(), runs.to_owned());
}

/// Applies `f` to the init containers that run `image` (member-init and
/// the restore steps).
fn for_member_side_containers(
    template: &mut PodTemplateSpec,
    image: &str,
    mut f: impl FnMut(&mut k8s_openapi::api::core::v1::Container),
) {
    let containers = template
        .spec
        .as_mut()
        .and_then(|s| s.init_containers.as_mut());
    for container in containers.into_iter().flatten() {
        if container.image.as_deref() == Some(image) {
            f(container);
        }
    }
}

/// Turns for rollouts only an operator upgrade asks for, shared by every
/// cluster: `per_minute` at most, refilled evenly (a token bucket that
/// starts full).
#[derive(Debug)]
pub struct UpgradeBudget {
    per_minute: u32,
    state: Mutex<(f64, Instant)>,
}

impl UpgradeBudget {
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            state: Mutex::new((f64::from(per_minute), Instant::now())),
        }
    }

    /// Takes a turn if one is left; otherwise says how long until the next.
    pub fn take(&self) -> Result<(), Duration> {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Err(Duration::from_secs(60));
        }
        let rate = f64::from(self.per_minute) / 60.0;
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (tokens, at) = *state;
        let tokens = (tokens + now.saturating_duration_since(at).as_secs_f64() * rate)
            .min(f64::from(self.per_minute));
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            Ok(())
        } else {
            *state = (tokens, now);
            Err(Duration::from_secs_f64((1.0 - tokens) / rate))
        }
    }
}

impl Default for UpgradeBudget {
    fn default() -> Self {
        Self::new(DEFAULT_UPGRADES_PER_MINUTE)
    }
}

/// `--member-upgrades-per-minute` unless set.
pub const DEFAULT_UPGRADES_PER_MINUTE: u32 = 10;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use kube::api::ObjectMeta;

    const OLD: &str = "ghcr.io/dkv-io/dkv:1.0";
    const NEW: &str = "ghcr.io/dkv-io/dkv:1.1";

    fn template(dkv: &str, etcd: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta::default()),
            spec: Some(PodSpec {
                init_containers: Some(vec![Container {
                    name: "member-init".into(),
                    image: Some(dkv.into()),
                    ..Container::default()
                }]),
                containers: vec![Container {
                    name: "etcd".into(),
                    image: Some(etcd.into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
        }
    }

    fn running(member_side: &str, image: &str) -> RunningTemplate {
        RunningTemplate {
            member_side: Some(member_side.into()),
            image: Some(image.into()),
            generation: Some(4),
            replicas: Some(3),
            ..RunningTemplate::default()
        }
    }

    fn wanted(member_side: &str) -> Wanted<'_> {
        Wanted {
            member_side,
            generation: Some(4),
            restarted_at: None,
            tls_serial: None,
            replicas: 3,
            under_way: false,
        }
    }

    #[test]
    fn the_member_side_hash_ignores_the_dkv_image_and_sees_everything_else() {
        let etcd = "registry.k8s.io/etcd:3.5.30-0";
        let code = code(0);
        assert_eq!(
            hash(&template(OLD, etcd), OLD, &code),
            hash(&template(NEW, etcd), NEW, &code)
        );
        assert_ne!(
            hash(&template(OLD, etcd), OLD, &code),
            hash(&template(OLD, "registry.k8s.io/etcd:3.6.16-0"), OLD, &code)
        );
        // Other member-side code, or a raised epoch: another hash.
        assert_ne!(
            hash(&template(OLD, etcd), OLD, &code),
            hash(
                &template(OLD, etcd),
                OLD,
                &crate::cluster::upgrade::member_side::code(1)
            )
        );
    }

    #[test]
    fn a_new_operator_image_alone_keeps_the_members_image() {
        let built = template(NEW, "etcd");
        let side = hash(&built, NEW, &code(0));
        let decision = decide(Some(&running(&side, OLD)), &wanted(&side));
        assert_eq!(decision, Decision::Keep { image: OLD.into() });
        // Stamped as kept: the template is the running one, image and all.
        let mut kept = built;
        stamp(&mut kept, NEW, &side, Some(OLD));
        let mut was = template(OLD, "etcd");
        stamp(&mut was, OLD, &side, None);
        assert_eq!(kept, was);
    }

    #[test]
    fn an_operator_only_change_waits_for_a_turn_and_a_user_change_does_not() {
        let now = wanted("new");
        assert_eq!(
            decide(Some(&running("old", OLD)), &now),
            Decision::NeedsTurn
        );
        // Clusters built by an operator without these annotations too.
        let unstamped = RunningTemplate {
            replicas: Some(3),
            ..RunningTemplate::default()
        };
        assert_eq!(decide(Some(&unstamped), &now), Decision::NeedsTurn);
        let edited = Wanted {
            generation: Some(5),
            ..now.clone()
        };
        assert_eq!(
            decide(Some(&running("old", OLD)), &edited),
            Decision::Current
        );
        let restarted = Wanted {
            restarted_at: Some("2026-11-28T00:00:00Z"),
            ..now.clone()
        };
        assert_eq!(
            decide(Some(&running("old", OLD)), &restarted),
            Decision::Current
        );
        let scaling = Wanted {
            replicas: 5,
            ..now.clone()
        };
        assert_eq!(
            decide(Some(&running("old", OLD)), &scaling),
            Decision::Current
        );
        let busy = Wanted {
            under_way: true,
            ..now
        };
        assert_eq!(decide(Some(&running("old", OLD)), &busy), Decision::Current);
        assert_eq!(decide(None, &wanted("new")), Decision::Current);
    }

    #[test]
    fn the_budget_gives_its_turns_then_one_at_the_rate() {
        let budget = UpgradeBudget::new(2);
        let start = Instant::now();
        assert_eq!(budget.take_at(start), Ok(()));
        assert_eq!(budget.take_at(start), Ok(()));
        let wait = budget.take_at(start).unwrap_err();
        assert_eq!(wait, Duration::from_secs(30));
        assert_eq!(budget.take_at(start + Duration::from_secs(31)), Ok(()));
        assert!(budget.take_at(start + Duration::from_secs(32)).is_err());
        assert!(UpgradeBudget::new(0).take().is_err());
    }
}
