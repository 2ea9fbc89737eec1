use super::*;
use k8s_openapi::api::core::v1 as core;
use serde_json::json;

fn names(mappings: &[ExtendedMapping]) -> Vec<(&str, &str)> {
    mappings
        .iter()
        .map(|m| (m.container.as_str(), m.request.as_str()))
        .collect()
}

#[test]
fn extended_gpu_requests_name_containers_and_let_init_containers_reuse_later_ones() {
    let spec: core::PodSpec = serde_json::from_value(json!({
        "initContainers": [
            {"name": "fetch", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "3"}}},
            {"name": "warm", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
            {"name": "sidecar", "restartPolicy": "Always",
             "resources": {"requests": {"nvidia.com/gpu": "1"}}}
        ],
        "containers": [
            {"name": "cpu-only", "resources": {"requests": {"cpu": "1"}}},
            {"name": "main", "resources": {"requests": {"memory": "1Gi", "nvidia.com/gpu": "2"}}}
        ]
    }))
    .unwrap();
    let (requests, mappings) = extended_gpu_requests(&spec, "nvidia.com/gpu");
    // The sidecar and `main` hold theirs for the pod's life; `warm` reuses the
    // sidecar's; `fetch` needs 3, finds 1 + 2 after it and reuses both.
    assert_eq!(
        requests,
        vec![
            ("container-2-request-0".to_string(), 1),
            ("container-4-request-1".to_string(), 2)
        ]
    );
    assert_eq!(
        names(&mappings),
        vec![
            ("sidecar", "container-2-request-0"),
            ("main", "container-4-request-1"),
            ("fetch", "container-2-request-0"),
            ("fetch", "container-4-request-1"),
            ("warm", "container-2-request-0"),
        ]
    );
    // An init container asking for more than the long-lived ones hold gets its own
    // request for the rest.
    let spec: core::PodSpec = serde_json::from_value(json!({
        "initContainers": [
            {"name": "big", "resources": {"requests": {"nvidia.com/gpu": "4"}}}
        ],
        "containers": [
            {"name": "main", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
        ]
    }))
    .unwrap();
    let (requests, mappings) = extended_gpu_requests(&spec, "nvidia.com/gpu");
    assert_eq!(
        requests,
        vec![
            ("container-0-request-0".to_string(), 3),
            ("container-1-request-0".to_string(), 1)
        ]
    );
    assert_eq!(
        names(&mappings),
        vec![
            ("main", "container-1-request-0"),
            ("big", "container-1-request-0"),
            ("big", "container-0-request-0"),
        ]
    );
}
