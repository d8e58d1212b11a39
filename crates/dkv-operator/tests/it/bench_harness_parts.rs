//! Unit tests of the benchmark harness's pure parts: the harness is a
//! `harness = false` bench target (`benches/harness/`), whose own tests
//! would never run, so its modules are compiled in here as well.

// Only their pure parts are tested here: the rest is the harness's.
#[allow(dead_code)]
#[path = "../../benches/harness/operator_process.rs"]
mod operator_process;
#[allow(dead_code)]
#[path = "../../benches/harness/report.rs"]
mod report;

use operator_process::ReconcileHistogram;
use report::{Goal, Metric, Reliability, Results};

#[test]
fn the_histogram_sums_outcomes_and_finds_the_quantile_bucket() {
    let text = "\
# TYPE dkv_reconcile_duration_seconds histogram
dkv_reconcile_duration_seconds_sum{outcome=\"success\"} 0.5
dkv_reconcile_duration_seconds_count{outcome=\"success\"} 100
dkv_reconcile_duration_seconds_bucket{le=\"0.001\",outcome=\"success\"} 50
dkv_reconcile_duration_seconds_bucket{le=\"0.002\",outcome=\"success\"} 99
dkv_reconcile_duration_seconds_bucket{le=\"+Inf\",outcome=\"success\"} 100
dkv_reconcile_duration_seconds_count{outcome=\"waiting\"} 1
dkv_reconcile_duration_seconds_bucket{le=\"0.001\",outcome=\"waiting\"} 0
dkv_reconcile_duration_seconds_bucket{le=\"0.002\",outcome=\"waiting\"} 0
dkv_reconcile_duration_seconds_bucket{le=\"+Inf\",outcome=\"waiting\"} 1
";
    let h = ReconcileHistogram::parse(text);
    assert_eq!(h.count, 101.0);
    assert_eq!(h.buckets[0], (0.001, 50.0));
    assert_eq!(h.quantile_bound(0.5), Some(0.002));
    assert_eq!(h.quantile_bound(0.99), Some(f64::INFINITY));
    let later = ReconcileHistogram::parse(&text.replace(" 100\n", " 110\n"));
    assert_eq!(later.since(&h).count, 10.0);
}

#[test]
fn goals_compare_ratios_and_absolute_targets() {
    assert!(Goal::at_most(1.5).met(1.2));
    assert!(!Goal::at_most(1.5).met(1.6));
    assert!(Goal::at_least(0.8).met(0.9));
    assert!(!Goal::at_least(0.8).met(0.5));
    let zero = Metric::against_target("w", "writes", 0.0, "", 0.0, "0");
    assert_eq!(zero.met, Some(true));
    let some = Metric::against_target("w", "writes", 3.0, "", 0.0, "0");
    assert_eq!(some.met, Some(false));
    let rss = Metric::against_target("rss", "rss", 12.0, "MiB", 15.0, "≤ 15 MiB");
    assert_eq!((rss.met, rss.ratio), (Some(true), Some(0.8)));
}

#[test]
fn the_markdown_has_a_row_per_metric_and_scenario() {
    let results = Results {
        started_at: "2026-01-01T00:00:00Z".into(),
        machine: "2 CPUs".into(),
        build: "release".into(),
        total_seconds: 1.0,
        metrics: vec![
            Metric::against_target("rss", "operator RSS | idle", 12.0, "MiB", 15.0, "≤ 15 MiB"),
            Metric::not_measured("x", "something", "0", "section failed"),
        ],
        reliability: vec![Reliability {
            scenario: "member kill".into(),
            acknowledged_writes: Some(40),
            lost_writes: Some(0),
            recovery_seconds: Some(6.5),
            note: String::new(),
        }],
        sections_not_run: vec!["backup: no --backup-example given".into()],
        context: vec![],
    };
    let md = results.to_markdown();
    assert!(md.contains("| operator RSS \\| idle | 12.0 MiB |"), "{md}");
    assert!(md.contains("| something | — |"), "{md}");
    assert!(md.contains("not measured: section failed"), "{md}");
    assert!(md.contains("| member kill | 40 | 0 | 6.50 s |"), "{md}");
    assert!(md.contains("- backup: no --backup-example given"), "{md}");
}
