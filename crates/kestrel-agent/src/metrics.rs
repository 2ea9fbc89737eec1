//! The agent's Prometheus endpoint (`/metrics`, plus `/healthz` and `/readyz`).
//!
//! GPU gauges carry the DCGM exporter's names and labels (`gpu`, `UUID`, `device`,
//! `modelName`, `Hostname`, and `namespace`/`pod`/`container` while a pod holds the GPU,
//! from the kubelet's PodResources API), so dashboards built for it work unchanged. The
//! text is written by hand rather than through `prometheus-client`, which would rename the
//! DCGM counters (`..._TOTAL` gains `_total`). The agent's own series use the `kestrel_`
//! prefix.

use crate::backend::GpuSample;
use crate::health::GpuHealth;
use crate::inventory::Gpu;
use crate::kubelet::Holder;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use std::fmt::Write;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The DCGM exporter's port, so scrape configs written for it find the agent.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9400";

/// The agent's own counters.
#[derive(Debug, Default)]
pub struct Counters {
    pub registrations: AtomicU64,
    /// Allocations that handed out exactly the scheduler's choice.
    pub allocations_scheduler: AtomicU64,
    /// Allocations of any other set (no choice stamped, or it could not be used).
    pub allocations_other: AtomicU64,
    /// Registered with the kubelet now (readiness).
    pub registered: AtomicBool,
    /// Discovery has run once.
    pub discovered: AtomicBool,
}

/// One GPU's row of the exposition.
pub struct GpuRow<'a> {
    pub gpu: &'a Gpu,
    pub sample: Option<GpuSample>,
    pub health: GpuHealth,
    pub holder: Option<Holder>,
}

struct Family<'a> {
    name: &'a str,
    help: &'a str,
    kind: &'a str,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The whole exposition text.
pub fn render(hostname: &str, rows: &[GpuRow<'_>], counters: &Counters) -> String {
    let mut out = String::new();
    let row_labels: Vec<String> = rows
        .iter()
        .map(|r| {
            let gpu = r.gpu.index.to_string();
            let device = format!("nvidia{}", r.gpu.index);
            let mut pairs = vec![
                ("gpu", gpu.as_str()),
                ("UUID", r.gpu.uuid.as_str()),
                ("device", device.as_str()),
                ("modelName", r.gpu.model.as_str()),
                ("Hostname", hostname),
            ];
            if let Some(h) = &r.holder {
                pairs.push(("container", h.container.as_str()));
                pairs.push(("namespace", h.namespace.as_str()));
                pairs.push(("pod", h.pod.as_str()));
            }
            labels(&pairs)
        })
        .collect();
    let mut family = |f: Family<'_>, value: &dyn Fn(&GpuRow<'_>) -> Option<String>| {
        let values: Vec<(usize, String)> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| value(r).map(|v| (i, v)))
            .collect();
        if values.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for (i, v) in values {
            let _ = writeln!(out, "{}{} {v}", f.name, row_labels[i]);
        }
    };
    let s = |r: &GpuRow<'_>| r.sample.clone().unwrap_or_default();
    family(
        Family {
            name: "DCGM_FI_DEV_GPU_UTIL",
            help: "Share of the last sample period a kernel ran on the GPU, percent.",
            kind: "gauge",
        },
        &|r| s(r).utilization_pct.map(|v| v.to_string()),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_FB_USED",
            help: "GPU memory in use, MiB.",
            kind: "gauge",
        },
        &|r| s(r).memory_used_mib.map(|v| v.to_string()),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_GPU_TEMP",
            help: "GPU die temperature, degrees Celsius.",
            kind: "gauge",
        },
        &|r| s(r).temperature_c.map(|v| v.to_string()),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_POWER_USAGE",
            help: "GPU power draw, watts.",
            kind: "gauge",
        },
        &|r| s(r).power_watts.map(|v| format!("{v:.3}")),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_XID_ERRORS",
            help:
                "The most recent XID error code seen on the GPU (0: none since the agent started).",
            kind: "gauge",
        },
        &|r| Some(r.health.last_xid.to_string()),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            help: "Corrected (single-bit) ECC errors since the driver loaded.",
            kind: "counter",
        },
        &|r| s(r).ecc_corrected.map(|v| v.to_string()),
    );
    family(
        Family {
            name: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            help: "Uncorrected (double-bit) ECC errors since the driver loaded.",
            kind: "counter",
        },
        &|r| s(r).ecc_uncorrected.map(|v| v.to_string()),
    );
    family(
        Family {
            name: "kestrel_agent_gpu_healthy",
            help: "1 while the GPU is advertised healthy to the kubelet, 0 while it is not.",
            kind: "gauge",
        },
        &|r| Some(if r.health.healthy() { "1" } else { "0" }.to_string()),
    );
    family(
        Family {
            name: "kestrel_agent_xid_errors_total",
            help: "XID errors seen on the GPU since the agent started.",
            kind: "counter",
        },
        &|r| Some(r.health.xid_count.to_string()),
    );
    let host = labels(&[("Hostname", hostname)]);
    let scalar = |out: &mut String, name: &str, help: &str, kind: &str, l: &str, v: u64| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        let _ = writeln!(out, "{name}{l} {v}");
    };
    scalar(
        &mut out,
        "kestrel_agent_gpus",
        "GPUs discovered on the node.",
        "gauge",
        &host,
        rows.len() as u64,
    );
    scalar(
        &mut out,
        "kestrel_agent_device_plugin_registered",
        "1 while the device plugin is registered with the kubelet.",
        "gauge",
        &host,
        counters.registered.load(Ordering::Relaxed) as u64,
    );
    scalar(
        &mut out,
        "kestrel_agent_device_plugin_registrations_total",
        "Registrations with the kubelet (one more after each kubelet restart).",
        "counter",
        &host,
        counters.registrations.load(Ordering::Relaxed),
    );
    let _ = writeln!(
        out,
        "# HELP kestrel_agent_allocations_total Allocate calls, by whether they handed out \
         the scheduler's choice (scheduler) or another set (other)."
    );
    let _ = writeln!(out, "# TYPE kestrel_agent_allocations_total counter");
    for (choice, c) in [
        ("scheduler", &counters.allocations_scheduler),
        ("other", &counters.allocations_other),
    ] {
        let _ = writeln!(
            out,
            "kestrel_agent_allocations_total{} {}",
            labels(&[("Hostname", hostname), ("choice", choice)]),
            c.load(Ordering::Relaxed)
        );
    }
    out
}

/// Produces the exposition text for a scrape.
pub type Scrape = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

/// Serves `/metrics`, `/healthz` (always 200 while the process runs) and `/readyz` (200
/// once discovery has run and, with the device plugin on, it is registered).
pub async fn serve(
    listener: TcpListener,
    scrape: Scrape,
    ready: Arc<dyn Fn() -> bool + Send + Sync>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    kestrel_http::serve(listener, shutdown, move |req: Request<Incoming>| {
        let scrape = scrape.clone();
        let ready = ready.clone();
        async move {
            match req.uri().path() {
                "/metrics" => text(StatusCode::OK, scrape().await),
                "/healthz" => text(StatusCode::OK, "ok\n".into()),
                "/readyz" if ready() => text(StatusCode::OK, "ready\n".into()),
                "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready\n".into()),
                _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::Fault;

    #[test]
    fn dcgm_names_labels_and_pods() {
        let gpu = Gpu {
            index: 2,
            uuid: "GPU-abc".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            memory_mib: 81559,
            pci_bus_id: String::new(),
            numa_node: 0,
            nvlink_peers: vec![],
            pcie_switch: None,
            mig_enabled: false,
            clique: None,
        };
        let rows = [GpuRow {
            gpu: &gpu,
            sample: Some(GpuSample {
                utilization_pct: Some(87),
                memory_used_mib: Some(40000),
                temperature_c: Some(61),
                power_watts: Some(512.5),
                ecc_corrected: Some(2),
                ecc_uncorrected: None,
            }),
            health: GpuHealth {
                fault: Some(Fault::Xid(79)),
                last_xid: 79,
                xid_count: 1,
                last_fault_at: None,
            },
            holder: Some(Holder {
                namespace: "ml".into(),
                pod: "train-0".into(),
                container: "main".into(),
            }),
        }];
        let counters = Counters::default();
        counters
            .allocations_scheduler
            .fetch_add(3, Ordering::Relaxed);
        let text = render("gpu-0", &rows, &counters);
        let l = r#"{gpu="2",UUID="GPU-abc",device="nvidia2",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-0",container="main",namespace="ml",pod="train-0"}"#;
        for needle in [
            format!("DCGM_FI_DEV_GPU_UTIL{l} 87"),
            format!("DCGM_FI_DEV_FB_USED{l} 40000"),
            format!("DCGM_FI_DEV_GPU_TEMP{l} 61"),
            format!("DCGM_FI_DEV_POWER_USAGE{l} 512.500"),
            format!("DCGM_FI_DEV_XID_ERRORS{l} 79"),
            format!("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{l} 2"),
            format!("kestrel_agent_gpu_healthy{l} 0"),
            "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter".to_string(),
            r#"kestrel_agent_allocations_total{Hostname="gpu-0",choice="scheduler"} 3"#.into(),
            r#"kestrel_agent_gpus{Hostname="gpu-0"} 1"#.into(),
        ] {
            assert!(text.contains(&needle), "{needle} not in\n{text}");
        }
        // Every alert the chart ships is over a series exported here.
        let full = render(
            "gpu-0",
            &[GpuRow {
                sample: Some(GpuSample {
                    ecc_uncorrected: Some(0),
                    ..rows[0].sample.clone().unwrap()
                }),
                health: GpuHealth::default(),
                holder: None,
                gpu: &gpu,
            }],
            &counters,
        );
        for rule in kestrel_live::deploy::AGENT_RULES {
            let metric = rule
                .expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .find(|w| w.starts_with("DCGM_") || w.starts_with("kestrel_"))
                .unwrap_or_else(|| panic!("{}: no metric in {}", rule.alert, rule.expr));
            assert!(
                full.contains(&format!("\n{metric}{{")),
                "{}: {metric} is not exported",
                rule.alert
            );
        }
        // A reading the GPU does not support is left out, family and all.
        assert!(!text.contains("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"), "{text}");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
