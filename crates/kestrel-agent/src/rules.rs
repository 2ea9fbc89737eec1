//! The alerting rules for the agent's signals (`kestrel agent --prometheus-rules`, and the
//! chart's PrometheusRule when `agent.prometheusRule.enabled`).

use serde_json::{json, Value};

pub struct Rule {
    pub alert: &'static str,
    pub expr: &'static str,
    pub for_: &'static str,
    pub severity: &'static str,
    pub summary: &'static str,
    pub description: &'static str,
}

pub const RULES: [Rule; 5] = [
    Rule {
        alert: "KestrelGpuUnhealthy",
        expr: "kestrel_agent_gpu_healthy == 0",
        for_: "1m",
        severity: "critical",
        summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is unhealthy",
        description: "The agent no longer offers GPU {{ $labels.gpu }} ({{ $labels.UUID }}) to the kubelet after an XID error or because it stopped answering; `kubectl describe node {{ $labels.Hostname }}` shows the GPUUnhealthy condition and the event with the XID.",
    },
    Rule {
        alert: "KestrelGpuXidError",
        expr: "increase(kestrel_agent_xid_errors_total[10m]) > 0",
        for_: "0m",
        severity: "warning",
        summary: "XID errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
        description: "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) reported XID errors in the last 10 minutes. Application XIDs (13, 31, 43, 45, 68, 109) point at the workload; others at the GPU, its driver or its bus.",
    },
    Rule {
        alert: "KestrelGpuUncorrectableEcc",
        expr: "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0",
        for_: "0m",
        severity: "critical",
        summary: "Uncorrectable ECC errors on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
        description: "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) counted uncorrectable (double-bit) memory errors; the job on it may have read bad data. Drain the node and reset the GPU.",
    },
    Rule {
        alert: "KestrelDevicePluginNotRegistered",
        expr: "kestrel_agent_device_plugin_registered == 0",
        for_: "5m",
        severity: "warning",
        summary: "The Kestrel device plugin on {{ $labels.Hostname }} is not registered with the kubelet",
        description: "The node advertises no GPUs through Kestrel until the agent registers; check the agent's log and that the kubelet's device plugin directory is mounted.",
    },
    Rule {
        alert: "KestrelGpuHot",
        expr: "DCGM_FI_DEV_GPU_TEMP > 85",
        for_: "10m",
        severity: "warning",
        summary: "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} has run above 85 C for 10 minutes",
        description: "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) is hot enough to throttle its clocks; check the node's cooling.",
    },
];

/// A PrometheusRule (`monitoring.coreos.com/v1`) with the rules above.
pub fn prometheus_rule() -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            json!({
                "alert": r.alert,
                "expr": r.expr,
                "for": r.for_,
                "labels": {"severity": r.severity},
                "annotations": {"summary": r.summary, "description": r.description},
            })
        })
        .collect();
    json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "kestrel-agent",
            "labels": {"app.kubernetes.io/name": "kestrel", "app.kubernetes.io/component": "agent"},
        },
        "spec": {"groups": [{"name": "kestrel-agent", "rules": rules}]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rule is over a series the agent exports.
    #[test]
    fn rules_use_the_agents_metric_names() {
        let exported = [
            "kestrel_agent_gpu_healthy",
            "kestrel_agent_xid_errors_total",
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "kestrel_agent_device_plugin_registered",
            "DCGM_FI_DEV_GPU_TEMP",
        ];
        for r in &RULES {
            assert!(exported.iter().any(|m| r.expr.contains(m)), "{}", r.alert);
        }
        let rule = prometheus_rule();
        assert_eq!(rule["spec"]["groups"][0]["rules"].as_array().unwrap().len(), RULES.len());
    }
}
