//! Tests of the HTML report.

use super::*;
use crate::metrics::Sample;
use crate::sample_report::sample_report;

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
