use super::*;
use crate::fields::Ctx;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec, ResourceSlice};
use kestrel_core::{DeviceAttribute, DraDevice, Filter, NodeSpec};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The filter of a one-request claim of class `gpu.nvidia.com` (selector `class`) with
/// its own selector `request`.
fn filter(class: &str, request: &str) -> Filter {
    let path = std::path::PathBuf::from("claims.yaml");
    let ctx = Ctx {
        path: &path,
        object: "ResourceClaim ml/c".into(),
    };
    let mut classes = DeviceClasses::default();
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": [{"cel": {"expression": class}}]},
    }))
    .unwrap();
    classes.insert(&ctx, &class).unwrap();
    let spec: ResourceClaimSpec = serde_json::from_value(json!({"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com",
         "selectors": [{"cel": {"expression": request}}]}}]}}))
    .unwrap();
    let claim = read_claim_spec(&ctx, "spec", "ml/c".into(), Some(&spec), &classes).unwrap();
    claim.requests[0].alternatives[0].filter.clone()
}

fn gpu(name: &str, attributes: &[(&str, DeviceAttribute)], memory_gib: i64) -> Arc<DraDevice> {
    Arc::new(DraDevice {
        driver: NVIDIA_GPU_DRIVER.into(),
        pool: "node-a".into(),
        name: name.into(),
        attributes: attributes
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        capacity: BTreeMap::from([("gpu.nvidia.com/memory".into(), memory_gib << 30)]),
        taints: Vec::new(),
        partitions: None,
    })
}

fn s(v: &str) -> DeviceAttribute {
    DeviceAttribute::String(v.into())
}

const TYPE_IS_GPU: &str = "device.attributes['gpu.nvidia.com'].type == 'gpu'";
const FORTY_GIB: &str = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";

#[test]
fn devices_alike_in_what_the_selectors_read_share_a_verdict_and_no_other_does() {
    let f = filter(TYPE_IS_GPU, FORTY_GIB);
    let version = |v: &str| DeviceAttribute::Version(v.into());
    let h100 = |name: &str, uuid: &str| {
        gpu(
            name,
            &[
                ("gpu.nvidia.com/type", s("gpu")),
                ("gpu.nvidia.com/uuid", s(uuid)),
                ("gpu.nvidia.com/driverVersion", version("550.54.15")),
            ],
            80,
        )
    };
    // Alike but for what no selector reads.
    assert_eq!(f.0.accepts(&h100("gpu-0", "GPU-a")), Ok(true));
    assert_eq!(f.0.accepts(&h100("gpu-1", "GPU-b")), Ok(true));
    // A part read differs: capacity, then an attribute.
    let small = gpu("gpu-2", &[("gpu.nvidia.com/type", s("gpu"))], 24);
    assert_eq!(f.0.accepts(&small), Ok(false));
    let nic = gpu("nic-0", &[("gpu.nvidia.com/type", s("nic"))], 80);
    assert_eq!(f.0.accepts(&nic), Ok(false));
    // An unqualified name is in the driver's domain, as CEL reads it.
    let bare = gpu("gpu-3", &[("type", s("nic"))], 80);
    assert_eq!(f.0.accepts(&bare), Ok(false));
    let bare = gpu("gpu-4", &[("type", s("gpu"))], 80);
    assert_eq!(f.0.accepts(&bare), Ok(true));
    // Errors are the device's own: a missing attribute, a version that does not parse
    // (CEL fails on it, read or not), though an alike device was selected.
    let missing = gpu("gpu-5", &[], 80);
    let e = f.0.accepts(&missing).unwrap_err();
    assert!(e.contains("gpu-5"), "{e}");
    let broken = gpu(
        "gpu-6",
        &[
            ("gpu.nvidia.com/type", s("gpu")),
            ("gpu.nvidia.com/driverVersion", version("not-a-version")),
        ],
        80,
    );
    let e = f.0.accepts(&broken).unwrap_err();
    assert!(e.contains("not-a-version"), "{e}");
}

#[test]
fn a_slice_changes_the_devices_of_its_pools_nodes_only() {
    let path = std::path::PathBuf::from("slices.yaml");
    let ctx = Ctx {
        path: &path,
        object: "ResourceSlice".into(),
    };
    let mut book = SliceBook::default();
    for (name, node, pool) in [
        ("a", "node-a", "p"),
        ("b", "node-b", "p"),
        ("c", "node-c", "q"),
    ] {
        let slice: ResourceSlice = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": node,
                     "pool": {"name": pool, "generation": 1, "resourceSliceCount": 2},
                     "devices": [{"name": "gpu-0"}]}}))
        .unwrap();
        book.insert(&ctx, &slice).unwrap();
    }
    let nodes = |name: &str| -> Vec<String> { book.nodes_of_pool_of(name).into_iter().collect() };
    assert_eq!(nodes("a"), ["node-a", "node-b"]);
    assert_eq!(nodes("c"), ["node-c"]);
    assert!(nodes("gone").is_empty());
}

/// NVIDIA's partitionable layout on one node: pool `node-a` with two slices, one
/// declaring GPU 0's counter set (8 memory slices), one publishing the GPU (consuming
/// all of them) and two MIG devices, `1g` at slice 0 and `3g` at slices 4-7.
fn mig_slices(mig_3g_slices: i64) -> Vec<ResourceSlice> {
    let consume = |from: i64, to: i64| -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> = (from..to)
            .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
            .collect();
        json!([{"counterSet": "gpu-0-counter-set", "counters": counters}])
    };
    let counters: serde_json::Map<String, serde_json::Value> = (0..8)
        .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
        .collect();
    let pool = json!({"name": "node-a", "generation": 1, "resourceSliceCount": 2});
    let mig = |name: &str, profile: &str, from: i64, to: i64| {
        json!({"name": name,
               "attributes": {"type": {"string": "mig"}, "profile": {"string": profile},
                              "parentIndex": {"int": 0}},
               "consumesCounters": consume(from, to)})
    };
    [
        json!({"metadata": {"name": "counters"},
               "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": "node-a", "pool": pool,
                        "sharedCounters": [{"name": "gpu-0-counter-set",
                                            "counters": counters}]}}),
        json!({"metadata": {"name": "devices"},
        "spec": {"driver": NVIDIA_GPU_DRIVER, "nodeName": "node-a", "pool": pool,
                 "devices": [
                     {"name": "gpu-0",
                      "attributes": {"type": {"string": "gpu"}, "index": {"int": 0},
                                     "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                      "consumesCounters": consume(0, 8)},
                     mig("gpu-0-mig-1g10gb-0", "1g.10gb", 0, 1),
                     mig("gpu-0-mig-3g40gb-4", "3g.40gb", 4, 4 + mig_3g_slices),
                 ]}}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).unwrap())
    .collect()
}

#[test]
fn mig_devices_over_a_gpus_counters_are_its_partitions() {
    let path = std::path::PathBuf::from("slices.yaml");
    let ctx = Ctx {
        path: &path,
        object: "ResourceSlice".into(),
    };
    let mut book = SliceBook::default();
    let slices = mig_slices(4);
    book.insert(&ctx, &slices[1]).unwrap();
    // Until the pool's counter set is there (its other slice), the pool is incomplete.
    assert!(book.gpus_of("node-a").is_empty());
    book.insert(&ctx, &slices[0]).unwrap();
    let gpus = book.gpus_of("node-a");
    assert_eq!(gpus.len(), 1, "MIG devices are partitions, not GPUs");
    let parts = gpus[0].partitions.as_ref().expect("partitions");
    assert_eq!(parts.counter_set, "gpu-0-counter-set");
    assert_eq!(parts.capacity.len(), 8);
    let names: Vec<&str> = parts
        .devices
        .iter()
        .map(|p| p.device.name.as_str())
        .collect();
    assert_eq!(names, ["gpu-0-mig-1g10gb-0", "gpu-0-mig-3g40gb-4"]);
    assert_eq!(
        parts.devices.iter().map(|p| p.milli).collect::<Vec<_>>(),
        [125, 500]
    );
    // The whole GPU still lays out as a node's GPU, with its partitions.
    let mut node = NodeSpec::new("node-a", kestrel_core::Resources::new(1000, 1 << 30));
    assert_eq!(attach_gpus(&mut node, &gpus), None);
    assert!(node.has_partitions());
}

#[test]
fn a_device_consuming_more_than_its_counter_set_is_refused_by_field() {
    let path = std::path::PathBuf::from("slices.yaml");
    let ctx = Ctx {
        path: &path,
        object: "ResourceSlice devices".into(),
    };
    // Both in one slice: the set is checked where it is declared.
    let mut slices = mig_slices(4);
    let counters = slices[0].spec.shared_counters.clone();
    slices[1].spec.shared_counters = counters;
    if let Some(devices) = slices[1].spec.devices.as_mut() {
        let c = devices[2].consumes_counters.as_mut().unwrap();
        c[0].counters.insert(
            "memory-slice-4".into(),
            k8s_openapi::api::resource::v1::Counter {
                value: k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            },
        );
    }
    let e = SliceBook::default()
        .insert(&ctx, &slices[1])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spec.devices[2].consumesCounters[0].counters[\"memory-slice-4\"]")
            && e.contains("consumes 2")
            && e.contains("has 1"),
        "{e}"
    );
    // A counter the set does not have.
    let mut slices = mig_slices(5);
    let counters = slices[0].spec.shared_counters.clone();
    slices[1].spec.shared_counters = counters;
    let e = SliceBook::default()
        .insert(&ctx, &slices[1])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("memory-slice-8") && e.contains("no such counter"),
        "{e}"
    );
}

#[test]
fn a_selector_reading_a_whole_domain_judges_each_device() {
    let f = filter("'type' in device.attributes['gpu.nvidia.com']", "true");
    let with = gpu("gpu-0", &[("gpu.nvidia.com/type", s("gpu"))], 80);
    let without = gpu(
        "gpu-1",
        &[("gpu.nvidia.com/index", DeviceAttribute::Int(1))],
        80,
    );
    assert_eq!(f.0.accepts(&with), Ok(true));
    assert_eq!(f.0.accepts(&without), Ok(false));
}
