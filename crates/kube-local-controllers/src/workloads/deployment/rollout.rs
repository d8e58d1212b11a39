//! The arithmetic of a rollout, after upstream's `deployment/util` and `rolling.go`: how far the ReplicaSets of a
//! Deployment may surge above and drop below the desired count, how big the new ReplicaSet may grow, which old ones
//! shrink and by how much, and how a resize is shared out between ReplicaSets mid-rollout. Every function here is
//! pure: it reads ReplicaSets as the cache shows them and returns target sizes.

use std::cmp::Ordering;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::revision::{DESIRED_REPLICAS, MAX_REPLICAS};

/// What a Deployment's spec asks of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub replicas: i32,
    /// Pods allowed above `replicas` (0 for `Recreate`).
    pub max_surge: i32,
    /// Pods allowed below `replicas` (0 for `Recreate` and for no replicas).
    pub max_unavailable: i32,
    pub rolling: bool,
}

/// `intstr.GetScaledValueFromIntOrPercent`: an int as is, `"N%"` of `total` rounded up or down; anything else 0.
pub fn scaled(
    value: Option<&IntOrString>,
    default_percent: i64,
    total: i32,
    round_up: bool,
) -> i32 {
    let percent = match value {
        Some(IntOrString::Int(i)) => return *i,
        Some(IntOrString::String(s)) => match s.strip_suffix('%').and_then(|p| p.parse().ok()) {
            Some(p) => p,
            None => return 0,
        },
        None => default_percent,
    };
    let product = percent * i64::from(total);
    let value = if round_up {
        (product + 99).div_euclid(100)
    } else {
        product.div_euclid(100)
    };
    i32::try_from(value).unwrap_or(i32::MAX)
}

impl Params {
    /// Upstream's `ResolveFenceposts`, `MaxSurge` and `MaxUnavailable` (defaults 25% each; surge rounds up,
    /// unavailability down; both zero means one unavailable; unavailability never exceeds the replicas).
    pub fn of(d: &Deployment) -> Params {
        let replicas = d.spec.replicas.unwrap_or(1).max(0);
        let strategy = d.spec.strategy.as_ref();
        let rolling = strategy.and_then(|s| s.type_.as_deref()) != Some("Recreate");
        if !rolling {
            return Params {
                replicas,
                max_surge: 0,
                max_unavailable: 0,
                rolling,
            };
        }
        let ru = strategy.and_then(|s| s.rolling_update.as_ref());
        let surge = scaled(ru.and_then(|r| r.max_surge.as_ref()), 25, replicas, true);
        let mut unavailable = scaled(
            ru.and_then(|r| r.max_unavailable.as_ref()),
            25,
            replicas,
            false,
        );
        if surge == 0 && unavailable == 0 {
            unavailable = 1;
        }
        Params {
            replicas,
            max_surge: surge,
            max_unavailable: if replicas == 0 {
                0
            } else {
                unavailable.min(replicas)
            },
            rolling,
        }
    }
}

/// `spec.replicas` of a ReplicaSet (the API server defaults it to 1).
pub fn size(rs: &ReplicaSet) -> i32 {
    rs.spec.replicas.unwrap_or(1)
}

pub fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

pub fn actual(rs: &ReplicaSet) -> i32 {
    rs.status.as_ref().map(|s| s.replicas).unwrap_or(0)
}

pub fn ready(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// The `deployment.kubernetes.io/desired-replicas` a ReplicaSet was last sized for.
pub fn desired_annotation(rs: &ReplicaSet) -> Option<i32> {
    annotation(rs, DESIRED_REPLICAS)
}

/// Oldest first, then by name (upstream's `ReplicaSetsByCreationTimestamp`).
pub fn by_creation(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    let t = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    t(a).cmp(&t(b))
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// How big the new ReplicaSet should be now (upstream's `reconcileNewReplicaSet` with `NewRSNewReplicas`): the full
/// count for `Recreate`; for `RollingUpdate` as far towards it as the surge allows given every ReplicaSet's size.
pub fn new_rs_size(p: &Params, all: &[&ReplicaSet], new: &ReplicaSet) -> i32 {
    let current = size(new);
    if current >= p.replicas || !p.rolling {
        return p.replicas;
    }
    let total: i32 = all.iter().map(|rs| size(rs)).sum();
    let max_total = p.replicas + p.max_surge;
    if total >= max_total {
        return current;
    }
    current + (max_total - total).min(p.replicas - current)
}

/// The old ReplicaSets to shrink, with their new sizes (upstream's `reconcileOldReplicaSets`): never below
/// `replicas - maxUnavailable` available pods counting the new ReplicaSet's unavailable ones, unhealthy old pods first
/// (`cleanupUnhealthyReplicas`), then available ones from the oldest ReplicaSet on.
pub fn old_rs_sizes(p: &Params, old: &[&ReplicaSet], new: &ReplicaSet) -> Vec<(String, i32)> {
    let old_total: i32 = old.iter().map(|rs| size(rs)).sum();
    if old_total == 0 {
        return Vec::new();
    }
    let all_total = old_total + size(new);
    let min_available = p.replicas - p.max_unavailable;
    let new_unavailable = size(new) - available(new);
    let max_scaled_down = all_total - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Vec::new();
    }
    let mut sorted: Vec<(&ReplicaSet, i32)> = old.iter().map(|rs| (*rs, size(rs))).collect();
    sorted.sort_by(|a, b| by_creation(a.0, b.0));

    // Unhealthy replicas first.
    let mut cleaned = 0;
    for (rs, target) in sorted.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let unhealthy = *target - available(rs);
        if *target == 0 || unhealthy <= 0 {
            continue;
        }
        let n = (max_scaled_down - cleaned).min(unhealthy);
        *target -= n;
        cleaned += n;
    }

    // Then available ones, as long as enough stay available.
    let available_total: i32 = old.iter().map(|rs| available(rs)).sum::<i32>() + available(new);
    if available_total > min_available {
        let to_scale_down = available_total - min_available;
        let mut scaled_down = 0;
        for (_, target) in sorted.iter_mut() {
            if scaled_down >= to_scale_down {
                break;
            }
            if *target == 0 {
                continue;
            }
            let n = (*target).min(to_scale_down - scaled_down);
            *target -= n;
            scaled_down += n;
        }
    }
    sorted
        .into_iter()
        .filter(|(rs, target)| size(rs) != *target)
        .map(|(rs, target)| (rs.metadata.name.clone().unwrap_or_default(), target))
        .collect()
}

/// Upstream's `IsSaturated`: the new ReplicaSet is sized for, and has available, every replica.
pub fn is_saturated(p: &Params, new: Option<&ReplicaSet>) -> bool {
    new.is_some_and(|rs| {
        size(rs) == p.replicas
            && desired_annotation(rs) == Some(p.replicas)
            && available(rs) == p.replicas
    })
}

/// Whether the Deployment was resized since its active ReplicaSets were last sized (upstream's `isScalingEvent`).
pub fn is_scaling_event(p: &Params, all: &[&ReplicaSet]) -> bool {
    all.iter()
        .filter(|rs| size(rs) > 0)
        .any(|rs| desired_annotation(rs).is_some_and(|d| d != p.replicas))
}

/// `getReplicaSetFraction`: how many replicas `rs` gains (or loses) when the Deployment is resized.
fn fraction(p: &Params, rs: &ReplicaSet, status_replicas: i32) -> i32 {
    if p.replicas == 0 {
        return -size(rs);
    }
    let deployment_replicas = p.replicas + p.max_surge;
    let annotated = annotation(rs, MAX_REPLICAS).unwrap_or(status_replicas);
    if annotated == 0 {
        return 0;
    }
    let new_size = f64::from(size(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    new_size.round() as i32 - size(rs)
}

/// The sizes a resize of the Deployment gives its ReplicaSets (upstream's `scale`): the only active (or else the
/// newest) ReplicaSet takes the whole count; a saturated new ReplicaSet leaves the old ones at zero; mid-rollout the
/// change is shared out in proportion to each ReplicaSet's size, leftovers to the largest. Returns every ReplicaSet
/// the resize concerns, with its size (possibly unchanged: its replica annotations may still need the new count).
pub fn resize(
    p: &Params,
    new: Option<&ReplicaSet>,
    old: &[&ReplicaSet],
    status_replicas: i32,
) -> Vec<(String, i32)> {
    let name = |rs: &ReplicaSet| rs.metadata.name.clone().unwrap_or_default();
    let mut old_newest_first: Vec<&ReplicaSet> = old.to_vec();
    old_newest_first.sort_by(|a, b| by_creation(b, a));
    let mut active: Vec<&ReplicaSet> = old_newest_first
        .iter()
        .copied()
        .chain(new)
        .filter(|rs| size(rs) > 0)
        .collect();
    let lone = match active.len() {
        0 => new.or(old_newest_first.first().copied()),
        1 => active.first().copied(),
        _ => None,
    };
    if let Some(rs) = lone {
        return if size(rs) == p.replicas {
            Vec::new()
        } else {
            vec![(name(rs), p.replicas)]
        };
    }
    if active.is_empty() {
        return Vec::new();
    }
    if is_saturated(p, new) {
        return old
            .iter()
            .filter(|rs| size(rs) > 0)
            .map(|rs| (name(rs), 0))
            .collect();
    }
    if !p.rolling {
        return Vec::new();
    }
    let total: i32 = active.iter().map(|rs| size(rs)).sum();
    let allowed = if p.replicas > 0 {
        p.replicas + p.max_surge
    } else {
        0
    };
    let to_add = allowed - total;
    let created = |rs: &ReplicaSet| rs.metadata.creation_timestamp.as_ref().map(|t| t.0);
    // Largest first; among equals the newest first when growing, the oldest first when shrinking.
    active.sort_by(|a, b| {
        size(b).cmp(&size(a)).then_with(|| {
            if to_add > 0 {
                created(b).cmp(&created(a))
            } else {
                created(a).cmp(&created(b))
            }
        })
    });
    let mut added = 0;
    let mut sizes: Vec<(String, i32)> = Vec::new();
    for rs in &active {
        let mut proportion = 0;
        if to_add != 0 && size(rs) != 0 && to_add != added {
            let allowed = to_add - added;
            let f = fraction(p, rs, status_replicas);
            proportion = if to_add > 0 {
                f.min(allowed)
            } else {
                f.max(allowed)
            };
        }
        sizes.push((name(rs), size(rs) + proportion));
        added += proportion;
    }
    if to_add != 0
        && let Some((_, first)) = sizes.first_mut()
    {
        *first = (*first + to_add - added).max(0);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(
        replicas: i32,
        surge: serde_json::Value,
        unavailable: serde_json::Value,
    ) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "d"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                "template": {},
            },
        }))
        .expect("a deployment")
    }

    fn rs(
        name: &str,
        created: &str,
        size: i32,
        available: i32,
        desired: Option<i32>,
    ) -> ReplicaSet {
        let mut annotations = serde_json::Map::new();
        if let Some(d) = desired {
            annotations.insert(DESIRED_REPLICAS.into(), json!(d.to_string()));
            annotations.insert(MAX_REPLICAS.into(), json!((d + 1).to_string()));
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "spec": {"replicas": size, "selector": {}},
            "status": {"replicas": size, "availableReplicas": available},
        }))
        .expect("a replicaset")
    }

    #[test]
    fn fenceposts_round_surge_up_and_unavailability_down() {
        let p = Params::of(&deployment(2, json!("25%"), json!("25%")));
        assert_eq!((p.max_surge, p.max_unavailable), (1, 0));
        let p = Params::of(&deployment(10, json!("25%"), json!("25%")));
        assert_eq!((p.max_surge, p.max_unavailable), (3, 2));
        let p = Params::of(&deployment(3, json!(0), json!(0)));
        assert_eq!((p.max_surge, p.max_unavailable), (0, 1));
        let p = Params::of(&deployment(2, json!(0), json!(5)));
        assert_eq!(p.max_unavailable, 2);
        let p = Params::of(&deployment(0, json!(1), json!(1)));
        assert_eq!(p.max_unavailable, 0);
        let recreate: Deployment = serde_json::from_value(json!({
            "metadata": {"name": "d"},
            "spec": {"replicas": 4, "selector": {}, "strategy": {"type": "Recreate"}, "template": {}},
        }))
        .expect("a deployment");
        let p = Params::of(&recreate);
        assert!(!p.rolling);
        assert_eq!((p.max_surge, p.max_unavailable), (0, 0));
    }

    #[test]
    fn a_rolling_update_of_two_surges_one_and_keeps_two_available() {
        let p = Params::of(&deployment(2, json!("25%"), json!("25%")));
        let old = rs("d-old", "2026-01-01T00:00:00Z", 2, 2, Some(2));
        let new = rs("d-new", "2026-01-01T00:01:00Z", 0, 0, Some(2));
        // The new ReplicaSet may only add the surge.
        assert_eq!(new_rs_size(&p, &[&old, &new], &new), 1);
        // Nothing old goes while the new pod is not available.
        let new = rs("d-new", "2026-01-01T00:01:00Z", 1, 0, Some(2));
        assert!(old_rs_sizes(&p, &[&old], &new).is_empty());
        assert_eq!(new_rs_size(&p, &[&old, &new], &new), 1);
        // Once it is, one old pod goes.
        let new = rs("d-new", "2026-01-01T00:01:00Z", 1, 1, Some(2));
        assert_eq!(old_rs_sizes(&p, &[&old], &new), [("d-old".to_string(), 1)]);
        let old = rs("d-old", "2026-01-01T00:00:00Z", 1, 1, Some(2));
        assert_eq!(new_rs_size(&p, &[&old, &new], &new), 2);
        let new = rs("d-new", "2026-01-01T00:01:00Z", 2, 2, Some(2));
        assert_eq!(old_rs_sizes(&p, &[&old], &new), [("d-old".to_string(), 0)]);
    }

    #[test]
    fn unhealthy_old_pods_go_first() {
        let p = Params::of(&deployment(4, json!(0), json!(1)));
        let old = rs("d-old", "2026-01-01T00:00:00Z", 4, 2, Some(4));
        let new = rs("d-new", "2026-01-01T00:01:00Z", 0, 0, Some(4));
        // With no surge and one pod allowed unavailable, one of the two unavailable old pods goes first.
        assert_eq!(old_rs_sizes(&p, &[&old], &new), [("d-old".to_string(), 3)]);
    }

    #[test]
    fn resizes_share_out_in_proportion() {
        // Scaling a settled Deployment resizes its one active ReplicaSet.
        let p = Params::of(&deployment(3, json!("25%"), json!("25%")));
        let only = rs("d-a", "2026-01-01T00:00:00Z", 2, 2, Some(2));
        assert!(is_scaling_event(&p, &[&only]));
        assert_eq!(resize(&p, Some(&only), &[], 2), [("d-a".to_string(), 3)]);
        // Mid-rollout, 10 -> 20 (surge 3 -> 5) shares 13 more between a 7 and a 5.
        let p = Params::of(&deployment(20, json!("25%"), json!("25%")));
        let old = rs("d-old", "2026-01-01T00:00:00Z", 7, 7, Some(10));
        let new = rs("d-new", "2026-01-01T00:01:00Z", 5, 0, Some(10));
        let mut sizes = resize(&p, Some(&new), &[&old], 12);
        sizes.sort();
        // max-replicas annotation is 11 here: 7 * 25 / 11 = 15.9 -> 16, 5 * 25 / 11 = 11.4 -> 11 (capped by what is left).
        assert_eq!(sizes, [("d-new".to_string(), 9), ("d-old".to_string(), 16)]);
    }
}
