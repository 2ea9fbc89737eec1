//! `kestrel serve` on a real kube-apiserver (testenv/): installed from its own manifests,
//! running with its ServiceAccount's RBAC. Each test checks the invariants on what the API
//! server holds. Skips loudly when the control plane is not built; fails under CI=true.

// The serial lock is held for a whole test on purpose: tests share one control plane
// and run one at a time, each on its own runtime, so no task waits on another's guard.
#![allow(clippy::await_holding_lock)]

#[path = "../browser/mod.rs"]
mod browser;
#[path = "../dashboard/mod.rs"]
mod dashboard;
#[path = "../live/mod.rs"]
mod live;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};
use live::*;
use serde_json::json;
use std::time::Duration;
mod binding;
mod objects;
mod queues;

/// Test-only CRDs of another project's `kind` in each (group, version), any fields
/// (Kestrel never installs CRDs into another project's group; a cluster running those
/// projects has them).
fn foreign_crds(kind: &str, plural: &str, scope: &str, versions: &[(&str, &str)]) -> String {
    versions
        .iter()
        .map(|(group, version)| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": format!("{plural}.{group}")},
                "spec": {"group": group, "scope": scope,
                    "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                    "versions": [{"name": version, "served": true, "storage": true,
                        "subresources": {"status": {}},
                        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Volcano's and KAI's `Queue` CRDs (cluster-scoped, as in those projects).
fn foreign_queue_crds() -> String {
    foreign_crds(
        "Queue",
        "queues",
        "Cluster",
        &[
            ("scheduling.volcano.sh", "v1beta1"),
            ("scheduling.run.ai", "v2"),
        ],
    )
}

/// Installs Volcano's and KAI's Queue CRDs and applies `queues` once the API server
/// serves their kinds (a moment after it accepts a new CRD).
async fn apply_foreign_queues(client: &kube::Client, queues: &str) {
    kestrel_testenv::apply_yaml(client, &foreign_queue_crds(), false)
        .await
        .unwrap();
    eventually(Duration::from_secs(30), "the queue CRDs served", || async {
        kestrel_testenv::apply_yaml(client, queues, false)
            .await
            .ok()
    })
    .await;
}
