//! Tests of the HTML report, and the sample report other modules' tests use.

use super::*;
use crate::metrics::{GangCounts, JobCounts, PendingPod, PodCounts, Sample};

fn pc(count: u64, p50: f64, p95: f64, p99: f64) -> Percentiles {
    Percentiles {
        count,
        mean: (p50 + p95) / 2.0,
        p50,
        p95,
        p99,
        max: p99 * 1.5,
    }
}

/// A four-hour run on 24 nodes of 8 GPUs plus a CPU node, sampled every minute.
pub(crate) fn sample_report() -> SimReport {
    let gpu_reason = "Insufficient nvidia.com/gpu (need 8 > free 4)";
    let taint = "node(s) had untolerated taint {nvidia.com/gpu: reserved}";
    let gang = "gang incomplete: 3/8 pods placeable";
    let samples = (0..240u32)
        .map(|i| {
            let t = f64::from(i) / 240.0;
            let allocated = 192.0 * (0.45 + 0.35 * (t * 9.0).sin().abs());
            let free = 192.0 - allocated;
            let pending = (20.0 * (t * 5.0).sin().max(0.0)).round() as u32;
            let mut reasons = vec![];
            if pending > 0 {
                reasons.push((gpu_reason.to_string(), pending.div_ceil(2)));
                reasons.push((taint.to_string(), pending / 3));
                if i % 3 == 0 {
                    reasons.push((gang.to_string(), pending / 4));
                }
                if i % 7 == 0 {
                    reasons.push((format!("rare reason {}", i % 11), 1));
                }
            }
            Sample {
                at: u64::from(i) * 60_000,
                gpus_allocated: allocated,
                gpus_utilized: allocated * (0.6 + 0.2 * (t * 17.0).cos()),
                cpu_allocated: 0.3 + 0.2 * t,
                pods_pending: pending,
                pods_running: (allocated / 2.0) as u32,
                gpus_fragmented: free * 0.08 * (t * 3.0).sin().abs(),
                gpus_free: free,
                top_pending_reasons: reasons,
            }
        })
        .collect();
    let node_usage = (0..24u32)
        .map(|i| NodeUsage {
            node: format!("gpu-node-{i:02}"),
            gpus: 8,
            gpu_used_milli: (0..8u32)
                .map(|g| [0, 250, 500, 1000][((i + g) % 4) as usize])
                .collect(),
            cpu_allocated: f64::from(i) / 24.0,
            cordoned: i == 5,
        })
        .chain(std::iter::once(NodeUsage {
            node: "cpu-0".to_string(),
            gpus: 0,
            gpu_used_milli: vec![],
            cpu_allocated: 0.5,
            cordoned: false,
        }))
        .collect();
    let mut pending_at_end: Vec<PendingPod> = (0..11)
        .map(|i| PendingPod {
            pod: format!("team-research/train-{i}-0"),
            priority: 100,
            waiting_seconds: 600.0 + f64::from(i) * 30.0,
            reason: gpu_reason.to_string(),
        })
        .collect();
    pending_at_end.insert(
        0,
        PendingPod {
            pod: "<script>alert(1)</script>".to_string(),
            priority: 1000,
            waiting_seconds: 1800.0,
            reason: "Quota & <limits>".to_string(),
        },
    );
    SimReport {
        scenario: "bursty-mix".to_string(),
        policy: "binpack".to_string(),
        seed: 42,
        nodes: 25,
        gpus: 192,
        span: 14_400_000,
        pods: PodCounts {
            created: 420,
            scheduled: 400,
            completed: 350,
            evicted: 3,
            running_at_end: 38,
            pending_at_end: 12,
            gang_timed_out: 2,
            rejected_by_quota: 0,
        },
        jobs: JobCounts {
            submitted: 120,
            completed: 101,
        },
        gangs: GangCounts {
            declared: 10,
            started: 8,
            timed_out: 1,
            started_in_one_rack: 6,
            started_in_one_nvlink_domain: 3,
        },
        gpu_allocation_mean: 0.713,
        gpu_utilization_mean: 0.55,
        gpu_fragmentation_mean: 0.042,
        queue_wait: pc(400, 12.5, 330.0, 900.0),
        completion_time: pc(101, 2400.0, 7200.0, 9000.0),
        by_priority: vec![
            GroupStats {
                group: "1000".to_string(),
                queue_wait: pc(50, 1.0, 5.0, 9.0),
                completion_time: pc(20, 600.0, 1200.0, 1500.0),
            },
            GroupStats {
                group: "100".to_string(),
                queue_wait: pc(300, 20.0, 400.0, 950.0),
                completion_time: pc(70, 2400.0, 7200.0, 9000.0),
            },
            GroupStats {
                group: "0".to_string(),
                queue_wait: pc(50, 60.0, 600.0, 1200.0),
                completion_time: Percentiles::default(),
            },
        ],
        by_namespace: vec![
            GroupStats {
                group: "team-research".to_string(),
                queue_wait: pc(250, 30.0, 420.0, 1000.0),
                completion_time: pc(60, 3000.0, 8000.0, 9500.0),
            },
            GroupStats {
                group: "team-prod".to_string(),
                queue_wait: pc(150, 2.0, 20.0, 60.0),
                completion_time: pc(41, 900.0, 1800.0, 2000.0),
            },
        ],
        samples,
        pending_reasons: vec![
            (gpu_reason.to_string(), 1200),
            (taint.to_string(), 700),
            (gang.to_string(), 150),
            ("Insufficient cpu".to_string(), 40),
            ("Insufficient memory".to_string(), 12),
            (
                "node(s) didn't match Pod's node affinity/selector".to_string(),
                3,
            ),
        ],
        pending_at_end,
        node_usage,
        cycles: 1440,
        bindings: 400,
        ..Default::default()
    }
}

/// Whether `s` holds a number Rust prints for NaN or infinity (`NaN`, `inf`, `-inf`),
/// as opposed to words such as "info".
fn has_non_finite(s: &str) -> bool {
    if s.contains("NaN") {
        return true;
    }
    let b = s.as_bytes();
    s.match_indices("inf").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 3).copied();
        !before.is_some_and(|c| c.is_ascii_alphabetic())
            && !after.is_some_and(|c| c.is_ascii_alphabetic())
    })
}

fn balanced(html: &str, tag: &str) -> bool {
    html.matches(&format!("<{tag}")).count() == html.matches(&format!("</{tag}>")).count()
}

fn assert_self_contained(html: &str) {
    for bad in [
        "http://", "https://", "src=", "@import", "url(h", "url(/", "<script", "<link",
    ] {
        assert!(!html.contains(bad), "report contains {bad:?}");
    }
    for tag in ["svg", "table", "section", "html", "body"] {
        assert!(balanced(html, tag), "unbalanced <{tag}>");
    }
    assert!(!has_non_finite(html), "report has NaN or inf");
}

#[test]
fn report_has_every_chart_and_series() {
    let html = render_html(&sample_report());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    // GPUs, pods, fragmentation, CPU, reasons over time; the heat map; bars per group.
    assert_eq!(html.matches("<svg viewBox=\"0 0 960 250\"").count(), 5);
    assert!(html.contains("aria-label=\"GPU use per node\""));
    assert_eq!(html.matches("<svg class=\"bar\"").count(), 5);
    for name in [
        ">Total<",
        ">Allocated<",
        ">Utilized<",
        ">Running<",
        ">Pending<",
        ">Free<",
        ">Fragmented<",
        ">CPU allocated<",
        ">other<",
        "Insufficient nvidia.com/gpu (need 8 &gt; free 4)",
        "gang incomplete",
        "team-research",
        "gpu-node-23",
    ] {
        assert!(html.contains(name), "report lacks {name:?}");
    }
    // Key-figure cards.
    for card in [
        "71.3%",
        "55.0%",
        "4.2%",
        "5m30s",
        ">101<",
        "of 120 submitted",
        ">12<",
    ] {
        assert!(html.contains(card), "report lacks card value {card:?}");
    }
    // The 4-hour axis ticks every 30 minutes.
    for tick in [">30m<", ">1h<", ">1h30m<", ">4h<"] {
        assert!(html.contains(tick), "report lacks tick {tick:?}");
    }
    // The cordoned node is hatched, the CPU node left out of the heat map.
    assert_eq!(html.matches("url(#kestrel-hatch)").count(), 1);
    assert!(html.contains("class=\"cord\">gpu-node-05<"));
    assert!(!html.contains(">cpu-0<"));
    assert!(html.contains("1 CPU-only nodes not shown"));
    // 24 nodes x 8 GPUs, a cell (with a tooltip) each.
    assert_eq!(html.matches(" GPU 7: ").count(), 24);
    assert!(html.contains("gpu-node-03 GPU 1: 0/1000"));
    assert_self_contained(&html);
}

#[test]
fn report_escapes_text_from_the_run() {
    let mut r = sample_report();
    r.scenario = "a\"b<i>".to_string();
    r.by_namespace[0].group = "<img onerror=x>".to_string();
    let html = render_html(&r);
    assert!(!html.contains("<script>alert"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(html.contains("Quota &amp; &lt;limits&gt;"));
    assert!(!html.contains("<img") && html.contains("&lt;img onerror=x&gt;"));
    assert!(!html.contains("a\"b<i>") && html.contains("a&quot;b&lt;i&gt;"));
}

#[test]
fn empty_report_renders_without_non_finite_numbers() {
    let html = render_html(&SimReport::default());
    assert_self_contained(&html);
    assert_eq!(html.matches("No samples recorded").count(), 4);
    assert!(html.contains("No GPU nodes at the end of the run."));
    assert!(html.contains("No pending pods were sampled."));
    assert!(html.contains("Every pod was scheduled."));
    assert!(html.contains("Pending at the end (0 pods)"));
}

#[test]
fn non_finite_inputs_do_not_reach_the_svg() {
    let mut r = sample_report();
    r.span = 0;
    r.gpu_allocation_mean = f64::NAN;
    r.queue_wait.p95 = f64::INFINITY;
    r.by_priority[0].queue_wait.p99 = f64::NAN;
    r.samples.truncate(1);
    r.samples[0].at = 0;
    r.samples[0].gpus_allocated = f64::NAN;
    r.samples[0].gpus_free = f64::INFINITY;
    r.samples[0].cpu_allocated = f64::NEG_INFINITY;
    r.node_usage[0].gpu_used_milli = vec![5000; 20];
    let html = render_html(&r);
    assert_self_contained(&html);
    // A single sample is drawn as a point.
    assert!(html.contains("<circle"));
}

#[test]
fn many_samples_are_bucketed() {
    let mut r = sample_report();
    let base = r.samples[10].clone();
    r.samples = (0..10_000u64)
        .map(|i| Sample {
            at: i * 1000,
            ..base.clone()
        })
        .collect();
    let html = render_html(&r);
    // Five time charts, one hover strip per bucket of 14 samples in each.
    assert_eq!(
        html.matches("class=\"hov\"").count(),
        5 * 10_000usize.div_ceil(14)
    );
    assert_self_contained(&html);
}

#[test]
fn axes_get_nice_ticks() {
    assert_eq!(y_scale(0.0, false), (0.2, 1.0));
    assert_eq!(y_scale(0.0, true), (1.0, 1.0));
    assert_eq!(y_scale(f64::NAN, true), (1.0, 1.0));
    assert_eq!(y_scale(192.0, false), (50.0, 200.0));
    assert_eq!(y_scale(100.0, false), (20.0, 100.0));
    assert_eq!(y_scale(3.0, true), (1.0, 3.0));
    assert_eq!(time_step(14_400_000), 1_800_000);
    assert_eq!(time_step(0), 1_000);
    assert_eq!(time_step(100 * 86_400_000), 13 * 86_400_000);
    assert_eq!(time_label(0), "0");
    assert_eq!(time_label(45_000), "45s");
    assert_eq!(time_label(90_000), "1m30s");
    assert_eq!(time_label(1_800_000), "30m");
    assert_eq!(time_label(5_400_000), "1h30m");
    assert_eq!(time_label(7_200_000), "2h");
    assert_eq!(time_label(172_800_000), "2d");
    assert_eq!(shade(0), "#f1f5f9");
    assert_eq!(shade(1000), "#1e40af");
    assert_eq!(shade(9999), "#1e40af");
}

#[test]
fn escapes_every_special_character() {
    assert_eq!(
        esc("<a href='x'>&\"</a>"),
        "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
    );
}

/// `KESTREL_SAMPLE_REPORT=/tmp/r.html cargo test -p kestrel-sim --lib write_sample_report`
/// writes the sample report for a look in a browser; without it, to a temporary
/// directory. Either way the files are read back and checked: each is what rendering
/// gives, self-contained, and tells the run's figures.
#[test]
fn write_sample_report() {
    let path = match std::env::var("KESTREL_SAMPLE_REPORT") {
        Ok(path) => std::path::PathBuf::from(path),
        Err(_) => {
            let dir =
                std::env::temp_dir().join(format!("kestrel-sample-report-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            dir.join("report.html")
        }
    };
    let with_suffix = |suffix: &str| {
        let mut p = path.clone().into_os_string();
        p.push(suffix);
        std::path::PathBuf::from(p)
    };
    let files = [
        (path.clone(), render_html(&sample_report())),
        (
            with_suffix(".empty.html"),
            render_html(&SimReport::default()),
        ),
        (
            with_suffix(".txt"),
            crate::summary::render_summary(&sample_report()),
        ),
    ];
    for (file, text) in &files {
        std::fs::write(file, text).unwrap();
        assert_eq!(
            &std::fs::read_to_string(file).unwrap(),
            text,
            "{}",
            file.display()
        );
    }
    let (report, empty, summary) = (&files[0].1, &files[1].1, &files[2].1);
    assert_self_contained(report);
    assert_self_contained(empty);
    assert!(report.contains("bursty-mix") && report.contains("71.3%"));
    assert!(empty.contains("Every pod was scheduled."));
    assert!(
        summary.contains("bursty-mix") && summary.contains("binpack"),
        "{summary}"
    );
    assert!(summary.contains("71.3%"), "{summary}");
    if std::env::var_os("KESTREL_SAMPLE_REPORT").is_none() {
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
