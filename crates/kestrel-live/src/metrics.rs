//! Prometheus metrics (`kestrel_` prefix) and the `/metrics`, `/healthz`, `/readyz` server.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub type Labels = Vec<(&'static str, &'static str)>;
/// Labels whose values come from the cluster (a doctor finding's node and namespace).
pub type OwnedLabels = Vec<(&'static str, String)>;

pub struct Metrics {
    registry: Registry,
    pub cycle_duration: Histogram,
    /// Time the scheduling loop spends copying its state for the dashboard.
    pub dashboard_publish_duration: Histogram,
    pub pending: Family<Labels, Gauge>,
    pub binds: Family<Labels, Counter>,
    pub status_reports: Family<Labels, Counter>,
    pub scheduled_events: Family<Labels, Counter>,
    pub evictions: Family<Labels, Counter>,
    pub leader: Gauge,
    /// The doctor's findings of the last run (`kestrel serve --doctor-interval`).
    pub doctor_findings: Family<OwnedLabels, Gauge>,
    pub doctor_runs: Family<Labels, Counter>,
    /// Set once the watches have listed everything (and, on a leader, the state is built).
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("kestrel");
        let cycle_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "scheduling_cycle_duration_seconds",
            "Time one scheduling cycle takes in the engine, API calls excluded",
            cycle_duration.clone(),
        );
        let dashboard_publish_duration = Histogram::new(exponential_buckets(0.0001, 2.0, 16));
        registry.register(
            "dashboard_publish_duration_seconds",
            "Time the leader's scheduling loop spends copying its state for the dashboard (--dashboard-addr), at most once a second",
            dashboard_publish_duration.clone(),
        );
        let pending = Family::<Labels, Gauge>::default();
        registry.register(
            "pending_pods",
            "Pods waiting for a node, by reason kind (capacity, constraints, gang, invalid, untried)",
            pending.clone(),
        );
        let binds = Family::<Labels, Counter>::default();
        registry.register(
            "binds",
            "Bind attempts by result (bound, pod_gone, conflict, retry)",
            binds.clone(),
        );
        let status_reports = Family::<Labels, Counter>::default();
        registry.register(
            "unschedulable_reports",
            "PodScheduled=False updates and FailedScheduling events, by result (ok, error)",
            status_reports.clone(),
        );
        let scheduled_events = Family::<Labels, Counter>::default();
        registry.register(
            "scheduled_events",
            "Scheduled events of bound pods, by result (ok, error)",
            scheduled_events.clone(),
        );
        let evictions = Family::<Labels, Counter>::default();
        registry.register(
            "preemption_evictions",
            "Preemption victims evicted (DisruptionTarget, then delete), by result (ok, error)",
            evictions.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "leader",
            "1 while this replica holds the lease and schedules",
            leader.clone(),
        );
        let doctor_findings = Family::<OwnedLabels, Gauge>::default();
        registry.register(
            "doctor_finding",
            "Findings of the doctor's last run, by check, signature, severity, node and namespace (the count of findings there)",
            doctor_findings.clone(),
        );
        let doctor_runs = Family::<Labels, Counter>::default();
        registry.register(
            "doctor_runs",
            "Runs of the doctor's checks by result (ok, error); on error the last findings stay",
            doctor_runs.clone(),
        );
        Metrics {
            registry,
            doctor_findings,
            doctor_runs,
            cycle_duration,
            dashboard_publish_duration,
            pending,
            binds,
            status_reports,
            scheduled_events,
            evictions,
            leader,
            ready: AtomicBool::new(false),
        }
    }

    /// Replaces the doctor's findings with those of a run: one series per check,
    /// signature (the check id for checks without signatures), severity, node and
    /// namespace ("" where a finding names none).
    pub fn set_doctor_findings(&self, findings: &[kestrel_doctor::Finding]) {
        let mut rows: std::collections::BTreeMap<OwnedLabels, i64> = Default::default();
        for f in findings {
            let signature = f.signature.clone().unwrap_or_else(|| f.id.clone());
            let places: Vec<(String, String)> = if f.subjects.is_empty() {
                vec![(String::new(), String::new())]
            } else {
                f.subjects
                    .iter()
                    .map(|s| (s.node.clone(), s.namespace.clone()))
                    .collect()
            };
            for (node, namespace) in places {
                let labels = vec![
                    ("check", f.id.clone()),
                    ("signature", signature.clone()),
                    ("severity", f.severity.as_str().to_string()),
                    ("node", node),
                    ("namespace", namespace),
                ];
                *rows.entry(labels).or_default() += 1;
            }
        }
        self.doctor_findings.clear();
        for (labels, n) in rows {
            self.doctor_findings.get_or_create(&labels).set(n);
        }
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String");
        out
    }

    fn respond(&self, path: &str) -> Response<Full<Bytes>> {
        let (code, content_type, body) = match path {
            "/metrics" => (
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                self.encode(),
            ),
            "/healthz" | "/livez" => (StatusCode::OK, "text/plain", "ok".to_string()),
            "/readyz" if self.ready.load(Ordering::Relaxed) => {
                (StatusCode::OK, "text/plain", "ok".to_string())
            }
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                "watches not synced".to_string(),
            ),
            _ => (StatusCode::NOT_FOUND, "text/plain", "not found".to_string()),
        };
        Response::builder()
            .status(code)
            .header("content-type", content_type)
            .body(Full::new(Bytes::from(body)))
            .expect("static response parts")
    }
}

/// Serves the metrics and health endpoints until `shutdown` fires.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    kestrel_http::serve(listener, shutdown, move |req: Request<Incoming>| {
        let response = metrics.respond(req.uri().path());
        async move { response }
    })
    .await
}

/// Binds the metrics address.
pub async fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_named_with_the_prefix_and_units() {
        let m = Metrics::new();
        m.binds.get_or_create(&vec![("result", "bound")]).inc();
        m.pending
            .get_or_create(&vec![("reason", "capacity")])
            .set(3);
        m.cycle_duration.observe(0.002);
        m.leader.set(1);
        let text = m.encode();
        for needle in [
            "kestrel_binds_total{result=\"bound\"} 1",
            "kestrel_pending_pods{reason=\"capacity\"} 3",
            "kestrel_scheduling_cycle_duration_seconds_count 1",
            "kestrel_leader 1",
            "# EOF",
        ] {
            assert!(text.contains(needle), "{needle:?} not in\n{text}");
        }
    }

    #[test]
    fn doctor_findings_replace_the_last_run() {
        use kestrel_doctor::{Finding, Severity, Subject};
        let finding = |id: &str, signature: Option<&str>, subjects: Vec<Subject>| Finding {
            id: id.to_string(),
            severity: Severity::Critical,
            what: String::new(),
            r#where: Vec::new(),
            why: String::new(),
            fix: String::new(),
            signature: signature.map(str::to_string),
            incidents: Vec::new(),
            subjects,
        };
        let at = |node: &str, ns: &str| Subject {
            node: node.to_string(),
            namespace: ns.to_string(),
        };
        let m = Metrics::new();
        let sig = "pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf";
        m.set_doctor_findings(&[
            finding("node-not-ready", None, vec![]),
            finding(
                "pod-sandbox-failed",
                Some(sig),
                vec![at("gpu-0", "llm"), at("gpu-1", "llm")],
            ),
        ]);
        let text = m.encode();
        for needle in [
            "kestrel_doctor_finding{check=\"node-not-ready\",signature=\"node-not-ready\",severity=\"critical\",node=\"\",namespace=\"\"} 1",
            "kestrel_doctor_finding{check=\"pod-sandbox-failed\",signature=\"pod-sandbox-failed/FailedCreatePodSandBox/sriov-no-vf\",severity=\"critical\",node=\"gpu-1\",namespace=\"llm\"} 1",
        ] {
            assert!(text.contains(needle), "{needle:?} not in\n{text}");
        }
        // The next run replaces the series: a resolved finding goes away.
        m.set_doctor_findings(&[]);
        assert!(
            !m.encode().contains("kestrel_doctor_finding{"),
            "{}",
            m.encode()
        );
    }

    #[tokio::test]
    async fn http_endpoints() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let metrics = Arc::new(Metrics::new());
        let listener = listen("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = watch::channel(false);
        let server = tokio::spawn(serve(listener, metrics.clone(), rx));
        let get = |path: &'static str| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 503"));
        metrics.ready.store(true, Ordering::Relaxed);
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/metrics").await.contains("kestrel_leader 0"));
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        tx.send_replace(true);
        server.await.unwrap().unwrap();
    }
}
