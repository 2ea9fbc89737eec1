//! DRA: GPUs published as ResourceSlices, claims that wait, missing or stale slices.

use super::*;

/// A ResourceSlice of NVIDIA's DRA driver for `node` with `gpus` devices, of pool
/// generation `generation` (one of `count` slices).
fn gpu_slice(name: &str, node: &str, gpus: usize, generation: i64, count: i64) -> String {
    let devices: Vec<String> = (0..gpus).map(|i| format!("{{name: gpu-{i}}}")).collect();
    format!(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: {name}}}\n\
         spec: {{driver: gpu.nvidia.com, nodeName: {node}, pool: {{name: {node}, generation: \
         {generation}, resourceSliceCount: {count}}}, devices: [{}]}}\n---\n",
        devices.join(", ")
    )
}

#[test]
fn gpus_published_through_dra_count_as_the_nodes_gpus() {
    // A DRA-only GPU node: GFD's labels, no nvidia.com/gpu, its GPUs in a ResourceSlice.
    let dra_node = node("d0", GPU_LABELS, GPU_TAINT, "", "");
    let d = run(&(dra_node.clone() + &gpu_slice("d0-gpus", "d0", 8, 1, 1)));
    assert!(!ids(&d).contains(&"gpu-node-without-gpus"), "{:?}", ids(&d));
    // A slice of an empty pool, or of another node, does not.
    let d = run(&(dra_node + &gpu_slice("d9-gpus", "d9", 8, 1, 1)));
    assert_eq!(finding(&d, "gpu-node-without-gpus").r#where.len(), 1);
}

#[test]
fn claims_pending_pods_wait_on_and_never_allocated_are_reported() {
    let claim = |name: &str, created: &str, allocated: bool| {
        let status = if allocated {
            "status: {allocation: {devices: {results: [{request: gpu, driver: gpu.nvidia.com, \
             pool: d0, device: gpu-0}]}}}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {{name: {name}, \
             namespace: ml, creationTimestamp: \"{created}\"}}\nspec: {{devices: {{requests: \
             [{{name: gpu, exactly: {{deviceClassName: gpu.nvidia.com}}}}]}}}}\n{status}---\n"
        )
    };
    let user = |pod_name: &str, claim: &str| {
        pod(
            pod_name,
            None,
            "",
            &format!("  resourceClaims: [{{name: gpu, resourceClaimName: {claim}}}]\n"),
        )
    };
    let event_now = "apiVersion: v1\nkind: Event\nmetadata: {name: e, namespace: ml}\n\
                     involvedObject: {kind: Pod, name: w0, namespace: ml}\nreason: Scheduled\n\
                     type: Normal\nmessage: m\nlastTimestamp: \"2026-12-06T12:00:00Z\"\n---\n";
    let text = node("g0", "", "", "", "")
        + event_now
        + &claim("old", "2026-12-06T10:00:00Z", false)
        + &claim("young", "2026-12-06T11:59:00Z", false)
        + &claim("done", "2026-12-06T10:00:00Z", true)
        + &claim("unused", "2026-12-06T10:00:00Z", false)
        + &user("w0", "old")
        + &user("w1", "young")
        + &user("w2", "done");
    let d = run(&text);
    let f = finding(&d, "dra-claim-unallocated");
    assert_eq!(f.severity, Severity::Warning);
    // Only the claim older than --pending-for (15m) that a pending pod waits on.
    assert_eq!(f.r#where.len(), 1, "{:?}", f.r#where);
    assert!(
        f.r#where[0].starts_with("ml/old (2h")
            && f.r#where[0].contains("class gpu.nvidia.com")
            && f.r#where[0].contains("pods ml/w0"),
        "{:?}",
        f.r#where
    );
    assert!(f.what.contains("1 ResourceClaim"), "{}", f.what);
}

#[test]
fn pools_with_missing_or_stale_slices_are_reported() {
    let text = node("g0", "", "", "", "")
        // Complete.
        + &gpu_slice("a", "n1", 8, 2, 1)
        // Generation 3 says two slices; one is there, and one of generation 2 lingers.
        + &gpu_slice("b-old", "n2", 4, 2, 2)
        + &gpu_slice("b-new", "n2", 4, 3, 2);
    let d = run(&text);
    let f = finding(&d, "dra-pool-incomplete");
    assert_eq!(
        f.r#where,
        vec!["gpu.nvidia.com pool n2 (generation 3: 1 of 2 slices, 1 slice of older generations)"]
    );
    let complete = node("g0", "", "", "", "") + &gpu_slice("a", "n1", 8, 2, 1);
    assert!(!ids(&run(&complete)).contains(&"dra-pool-incomplete"));
}
