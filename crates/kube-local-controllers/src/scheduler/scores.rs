//! Choosing among the feasible nodes: an approximation of kube-scheduler's default score plugins, each giving every
//! feasible node 0–100, summed with the default plugin weights; the highest total wins and equal totals go to the
//! node whose name sorts first, so the answer is deterministic.
//!
//! | plugin (weight)                       | here                                                                  |
//! |---------------------------------------|-----------------------------------------------------------------------|
//! | TaintToleration (3)                   | fewer untolerated PreferNoSchedule taints is better                   |
//! | NodeAffinity (2)                      | sum of matched preferred node affinity weights, scaled to the best    |
//! | PodTopologySpread (2)                 | fewer matching pods in the node's domains, per ScheduleAnyway constraint |
//! | InterPodAffinity (2)                  | preferred (anti-)affinity weights both ways, placed pods' required affinity as 1 |
//! | NodeResourcesFit, LeastAllocated (1)  | share of cpu and memory left after the pod                            |
//! | NodeResourcesBalancedAllocation (1)   | cpu and memory used in equal shares                                   |
//!
//! Simplifications: spread scoring does not weigh constraints by their number of domains; a pod without requests
//! counts as kube-scheduler's non-zero defaults (100m cpu, 200Mi memory) for the resource scores, per pod rather
//! than per container; ImageLocality has nothing to score on a process kubelet and is left out.

use k8s_openapi::api::core::v1::{Node, Pod, WeightedPodAffinityTerm};

use super::filters::{
    Snapshot, affinity_term_selects, matching_pods_in_domain, preferred_node_affinity_weight,
    spread_constraints, untolerated_prefer_no_schedule,
};
use super::pod_requests::{Resources, allocatable, pod_request};

const MAX: i64 = 100;
const DEFAULT_MILLI_CPU: i64 = 100;
const DEFAULT_MEMORY: i64 = 200 * 1024 * 1024;

/// The feasible node with the best total score. `feasible` is never empty.
pub(super) fn best_node(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> String {
    let plugins: [(i64, Vec<i64>); 6] = [
        (3, taint_scores(snapshot, feasible)),
        (2, node_affinity_scores(snapshot, feasible)),
        (2, spread_scores(snapshot, feasible)),
        (2, pod_affinity_scores(snapshot, feasible)),
        (1, least_allocated_scores(snapshot, feasible)),
        (1, balanced_scores(snapshot, feasible)),
    ];
    let total = |i: usize| -> i64 { plugins.iter().map(|(w, s)| w * s[i]).sum() };
    let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
    (0..feasible.len())
        .max_by(|&a, &b| {
            total(a)
                .cmp(&total(b))
                .then_with(|| name(feasible[b]).cmp(&name(feasible[a])))
        })
        .map(|i| name(feasible[i]))
        .unwrap_or_default()
}

/// Scales raw scores to 0–100 with the highest at 100 (all 0 when none is positive).
fn scaled_to_best(raw: Vec<i64>) -> Vec<i64> {
    let max = raw.iter().copied().max().unwrap_or(0);
    raw.into_iter()
        .map(|s| if max > 0 { s * MAX / max } else { 0 })
        .collect()
}

/// Scales raw scores to 0–100 with the lowest at 100.
fn lowest_is_best(raw: Vec<i64>) -> Vec<i64> {
    let max = raw.iter().copied().max().unwrap_or(0);
    raw.into_iter()
        .map(|s| if max > 0 { MAX - s * MAX / max } else { MAX })
        .collect()
}

fn taint_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    lowest_is_best(
        feasible
            .iter()
            .map(|n| untolerated_prefer_no_schedule(snapshot.pod, n) as i64)
            .collect(),
    )
}

fn node_affinity_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    scaled_to_best(
        feasible
            .iter()
            .map(|n| preferred_node_affinity_weight(snapshot.pod, n))
            .collect(),
    )
}

/// Matching pods in the node's domain summed over the ScheduleAnyway constraints, fewer better; a node lacking a
/// constraint's key scores 0, and the rest are scaled as kube-scheduler does, `(max + min - raw) / max`.
fn spread_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    let constraints = spread_constraints(snapshot, "ScheduleAnyway");
    if constraints.is_empty() {
        return vec![0; feasible.len()];
    }
    let raw: Vec<Option<i64>> = feasible
        .iter()
        .map(|n| {
            constraints
                .iter()
                .map(|c| matching_pods_in_domain(snapshot, &constraints, c, n))
                .sum()
        })
        .collect();
    let known = raw.iter().flatten().copied();
    let max = known.clone().max().unwrap_or(0);
    let min = known.min().unwrap_or(0);
    raw.into_iter()
        .map(|r| match r {
            None => 0,
            Some(_) if max == 0 => MAX,
            Some(s) => MAX * (max + min - s) / max,
        })
        .collect()
}

fn preferred(pod: &Pod, anti: bool) -> &[WeightedPodAffinityTerm] {
    let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
    };
    terms.unwrap_or_default()
}

/// For each placed pod in a domain shared with the node: the pod's preferred terms that select it (+weight for
/// affinity, −weight for anti-affinity), and the placed pod's preferred terms and required affinity (weight 1) that
/// select the pod. Scaled between the lowest and highest node.
fn pod_affinity_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    use super::filters::same_domain;
    let incoming = snapshot.pod;
    let raw: Vec<i64> = feasible
        .iter()
        .map(|node| {
            let mut score = 0i64;
            for (placed, placed_on) in &snapshot.placed {
                let owner = placed.metadata.namespace.as_deref().unwrap_or("default");
                for (anti, sign) in [(false, 1), (true, -1)] {
                    for t in preferred(incoming, anti) {
                        let term = &t.pod_affinity_term;
                        if same_domain(node, placed_on, &term.topology_key)
                            && affinity_term_selects(term, snapshot.namespace, placed)
                        {
                            score += sign * i64::from(t.weight);
                        }
                    }
                    for t in preferred(placed, anti) {
                        let term = &t.pod_affinity_term;
                        if same_domain(node, placed_on, &term.topology_key)
                            && affinity_term_selects(term, owner, incoming)
                        {
                            score += sign * i64::from(t.weight);
                        }
                    }
                }
                let required = placed
                    .spec
                    .as_ref()
                    .and_then(|s| s.affinity.as_ref())
                    .and_then(|a| a.pod_affinity.as_ref())
                    .and_then(|a| {
                        a.required_during_scheduling_ignored_during_execution
                            .as_deref()
                    })
                    .unwrap_or_default();
                for term in required {
                    if same_domain(node, placed_on, &term.topology_key)
                        && affinity_term_selects(term, owner, incoming)
                    {
                        score += 1;
                    }
                }
            }
            score
        })
        .collect();
    let max = raw.iter().copied().max().unwrap_or(0);
    let min = raw.iter().copied().min().unwrap_or(0);
    raw.into_iter()
        .map(|s| {
            if max > min {
                (s - min) * MAX / (max - min)
            } else {
                0
            }
        })
        .collect()
}

/// A pod's request with kube-scheduler's non-zero defaults for what it leaves unset.
fn non_zero(r: Resources) -> Resources {
    Resources {
        milli_cpu: if r.milli_cpu == 0 {
            DEFAULT_MILLI_CPU
        } else {
            r.milli_cpu
        },
        memory: if r.memory == 0 {
            DEFAULT_MEMORY
        } else {
            r.memory
        },
    }
}

/// (requested with the pod, allocatable) for cpu and memory on the node.
fn usage_with_pod(snapshot: &Snapshot<'_>, node: &Node) -> [(i64, i64); 2] {
    let (offered, _) = allocatable(node);
    let used = snapshot
        .pods_on(node)
        .map(|p| non_zero(pod_request(p)))
        .chain(std::iter::once(non_zero(pod_request(snapshot.pod))))
        .fold((0, 0), |(c, m), r| (c + r.milli_cpu, m + r.memory));
    [(used.0, offered.milli_cpu), (used.1, offered.memory)]
}

fn least_allocated_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    feasible
        .iter()
        .map(|n| {
            let parts = usage_with_pod(snapshot, n).map(|(used, offered)| {
                if offered <= 0 || used > offered {
                    0
                } else {
                    (offered - used) * MAX / offered
                }
            });
            parts.iter().sum::<i64>() / parts.len() as i64
        })
        .collect()
}

fn balanced_scores(snapshot: &Snapshot<'_>, feasible: &[&Node]) -> Vec<i64> {
    feasible
        .iter()
        .map(|n| {
            let [cpu, memory] = usage_with_pod(snapshot, n).map(|(used, offered)| {
                if offered <= 0 {
                    1.0
                } else {
                    (used as f64 / offered as f64).min(1.0)
                }
            });
            // The standard deviation of two shares is half their difference.
            ((1.0 - (cpu - memory).abs() / 2.0) * MAX as f64) as i64
        })
        .collect()
}
