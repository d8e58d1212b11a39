//! The results of one harness run and their two renderings: `results.md`
//! (tables for people) and `results.json` (the same figures for tools).

use std::fmt::Write as _;

use serde::Serialize;

/// What a figure is compared with in the same run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// What was measured (or, for an absolute target, that it is the target).
    pub what: String,
    pub value: f64,
}

/// How the ratio reads against the target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Goal {
    /// The ratio must be at most the bound (times, sizes, counts).
    AtMost(f64),
    /// The ratio must be at least the bound (throughputs).
    AtLeast(f64),
}

impl Goal {
    pub fn at_most(bound: f64) -> Goal {
        Goal::AtMost(bound)
    }

    pub fn at_least(bound: f64) -> Goal {
        Goal::AtLeast(bound)
    }

    pub fn met(self, ratio: f64) -> bool {
        match self {
            Goal::AtMost(b) => ratio <= b,
            Goal::AtLeast(b) => ratio >= b,
        }
    }
}

/// One row of the metrics table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    pub id: String,
    pub name: String,
    /// `None`: not measured (see `note`).
    pub value: Option<f64>,
    pub unit: String,
    pub baseline: Option<Baseline>,
    /// `value / baseline` (for throughputs: dkv's throughput over the
    /// baseline's).
    pub ratio: Option<f64>,
    /// The target, as the benchmark list (`METRICS` in main.rs) states it.
    pub target: String,
    pub met: Option<bool>,
    pub note: String,
}

impl Metric {
    /// A measured figure; `ratio` compared with `goal` decides `met`.
    #[allow(clippy::too_many_arguments)]
    pub fn measured(
        id: &str,
        name: &str,
        value: f64,
        unit: &str,
        baseline: Option<Baseline>,
        ratio: f64,
        goal: Goal,
        target: &str,
    ) -> Metric {
        Metric {
            id: id.to_owned(),
            name: name.to_owned(),
            value: Some(value),
            unit: unit.to_owned(),
            baseline,
            ratio: Some(ratio),
            target: target.to_owned(),
            met: Some(goal.met(ratio)),
            note: String::new(),
        }
    }

    /// A figure with an absolute target: the baseline column holds the
    /// target, the ratio is value over target.
    pub fn against_target(
        id: &str,
        name: &str,
        value: f64,
        unit: &str,
        bound: f64,
        target: &str,
    ) -> Metric {
        let ratio = if bound == 0.0 { value } else { value / bound };
        let mut m = Metric::measured(
            id,
            name,
            value,
            unit,
            Some(Baseline {
                what: "target (no same-run baseline)".to_owned(),
                value: bound,
            }),
            ratio,
            Goal::at_most(if bound == 0.0 { 0.0 } else { 1.0 }),
            target,
        );
        m.met = Some(value <= bound);
        m
    }

    pub fn not_measured(id: &str, name: &str, target: &str, why: &str) -> Metric {
        Metric {
            id: id.to_owned(),
            name: name.to_owned(),
            value: None,
            unit: String::new(),
            baseline: None,
            ratio: None,
            target: target.to_owned(),
            met: None,
            note: format!("not measured: {why}"),
        }
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Metric {
        self.note = note.into();
        self
    }
}

/// One row of the reliability table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reliability {
    pub scenario: String,
    /// Writes the writer had acknowledged while the scenario ran.
    pub acknowledged_writes: Option<u64>,
    /// Of those, how many could not be read back.
    pub lost_writes: Option<u64>,
    /// From the fault to the cluster healthy again (`None`: not measured).
    pub recovery_seconds: Option<f64>,
    pub note: String,
}

/// Everything one run produced.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Results {
    pub started_at: String,
    pub machine: String,
    pub build: String,
    pub total_seconds: f64,
    pub metrics: Vec<Metric>,
    pub reliability: Vec<Reliability>,
    /// Sections that failed or were skipped, with why.
    pub sections_not_run: Vec<String>,
    /// Extra figures for context (not targets).
    pub context: Vec<(String, String)>,
}

fn number(v: f64) -> String {
    if v == 0.0 {
        "0".to_owned()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

impl Results {
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# dkv benchmark results\n");
        let _ = writeln!(
            out,
            "Produced by `bench/run.sh` (do not edit by hand). Run started {}, took {:.0} s.\n\nMachine: {}. Build: {}.\n",
            self.started_at, self.total_seconds, self.machine, self.build
        );
        let _ = writeln!(
            out,
            "Each figure stands beside its baseline measured in the same run, as a ratio (for throughputs: dkv's throughput over the baseline's). Where BENCHMARKS.md sets an absolute target there is no same-run baseline: the baseline column then holds the target and the ratio is value / target.\n"
        );
        let _ = writeln!(out, "## Metrics\n");
        let _ = writeln!(
            out,
            "| metric | value | baseline | ratio | target | met | note |\n|---|---|---|---|---|---|---|"
        );
        for m in &self.metrics {
            let value = m
                .value
                .map(|v| format!("{} {}", number(v), m.unit))
                .unwrap_or_else(|| "—".to_owned());
            let baseline = m
                .baseline
                .as_ref()
                .map(|b| format!("{} {} ({})", number(b.value), m.unit, b.what))
                .unwrap_or_else(|| "—".to_owned());
            let ratio = m.ratio.map(number).unwrap_or_else(|| "—".to_owned());
            let met = match m.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                cell(&m.name),
                cell(&value),
                cell(&baseline),
                ratio,
                cell(&m.target),
                met,
                cell(&m.note)
            );
        }
        let _ = writeln!(out, "\n## Reliability\n");
        let _ = writeln!(
            out,
            "A writer puts one key at a time through the cluster's members and records every write etcd acknowledged; after the scenarios every acknowledged write is read back (linearizable reads). Target: 0 lost outside deliberate quorum loss.\n"
        );
        let _ = writeln!(
            out,
            "| scenario | acknowledged writes | lost | time to recover | note |\n|---|---|---|---|---|"
        );
        for r in &self.reliability {
            let opt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "—".into());
            let recovery = r
                .recovery_seconds
                .map(|s| format!("{} s", number(s)))
                .unwrap_or_else(|| "—".to_owned());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                cell(&r.scenario),
                opt(r.acknowledged_writes),
                opt(r.lost_writes),
                recovery,
                cell(&r.note)
            );
        }
        if !self.context.is_empty() {
            let _ = writeln!(out, "\n## Context\n\n| figure | value |\n|---|---|");
            for (k, v) in &self.context {
                let _ = writeln!(out, "| {} | {} |", cell(k), cell(v));
            }
        }
        if !self.sections_not_run.is_empty() {
            let _ = writeln!(out, "\n## Not measured\n");
            for s in &self.sections_not_run {
                let _ = writeln!(out, "- {}", cell(s));
            }
        }
        out
    }
}
