//! MIG as NVIDIA's DRA driver publishes it on an 80 GB GPU with partitionable devices: each
//! GPU declares a counter set (eight memory slices and seven compute slices), the whole GPU
//! consumes all of it, and every MIG placement is a device consuming the slices it covers.
//! The counters alone then say which partitions may coexist on a GPU.
//!
//! The simulator's `gpu.partitions: mig` pools and the live tests publish these slices, and
//! read them back through [`crate::dra::SliceBook`] like any driver's.

use crate::dra::NVIDIA_GPU_DRIVER;
use serde_json::{json, Map, Value};

/// The DeviceClass NVIDIA's driver ships for MIG devices.
pub const MIG_DEVICE_CLASS: &str = "mig.nvidia.com";

/// One MIG profile of an 80 GB GPU: its memory slices (of 8), compute slices (of 7), and
/// the memory slices where an instance may start.
pub struct MigProfile {
    pub name: &'static str,
    pub memory_slices: u32,
    pub compute_slices: u32,
    pub starts: &'static [u32],
}

/// The profiles of an 80 GB A100, H100 or H200-class GPU, smallest first.
pub const MIG_PROFILES_80GB: [MigProfile; 6] = [
    MigProfile {
        name: "1g.10gb",
        memory_slices: 1,
        compute_slices: 1,
        starts: &[0, 1, 2, 3, 4, 5, 6],
    },
    MigProfile {
        name: "1g.20gb",
        memory_slices: 2,
        compute_slices: 1,
        starts: &[0, 2, 4, 6],
    },
    MigProfile {
        name: "2g.20gb",
        memory_slices: 2,
        compute_slices: 2,
        starts: &[0, 2, 4],
    },
    MigProfile {
        name: "3g.40gb",
        memory_slices: 4,
        compute_slices: 3,
        starts: &[0, 4],
    },
    MigProfile {
        name: "4g.40gb",
        memory_slices: 4,
        compute_slices: 4,
        starts: &[0],
    },
    MigProfile {
        name: "7g.80gb",
        memory_slices: 8,
        compute_slices: 7,
        starts: &[0],
    },
];

const MEMORY_SLICES: u32 = 8;
const COMPUTE_SLICES: u32 = 7;

fn counter_set(gpu: u32) -> String {
    format!("gpu-{gpu}-counter-set")
}

/// The counters a device covering memory slices `from..from + memory` and `compute`
/// compute slices consumes of GPU `gpu`'s set.
fn consumes(gpu: u32, from: u32, memory: u32, compute: u32) -> Value {
    let mut counters: Map<String, Value> = (from..from + memory)
        .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
        .collect();
    counters.insert(
        "compute-slices".into(),
        json!({"value": compute.to_string()}),
    );
    json!([{"counterSet": counter_set(gpu), "counters": counters}])
}

/// The name of the MIG device of `profile` starting at memory slice `start` on GPU `gpu`
/// (a device name is a DNS label: the profile without its dot).
pub fn mig_device_name(gpu: u32, profile: &str, start: u32) -> String {
    format!("gpu-{gpu}-mig-{}-{start}", profile.replace('.', ""))
}

/// The ResourceSlices of node `node` with `gpus` GPUs of `product` published with their MIG
/// partitions: one slice declaring the counter sets, one publishing the devices (pool
/// `node`, two slices, generation 1).
pub fn nvidia_mig_slices(node: &str, gpus: u32, product: &str) -> Vec<Value> {
    let pool = json!({"name": node, "generation": 1, "resourceSliceCount": 2});
    let sets: Vec<Value> = (0..gpus)
        .map(|gpu| {
            let mut counters: Map<String, Value> = (0..MEMORY_SLICES)
                .map(|s| (format!("memory-slice-{s}"), json!({"value": "1"})))
                .collect();
            counters.insert(
                "compute-slices".into(),
                json!({"value": COMPUTE_SLICES.to_string()}),
            );
            json!({"name": counter_set(gpu), "counters": counters})
        })
        .collect();
    let mut devices = Vec::new();
    for gpu in 0..gpus {
        devices.push(json!({
            "name": format!("gpu-{gpu}"),
            "attributes": {
                "type": {"string": "gpu"}, "index": {"int": gpu},
                "uuid": {"string": format!("GPU-{node}-{gpu}")},
                "productName": {"string": product},
            },
            "capacity": {"memory": {"value": "80Gi"}},
            "consumesCounters": consumes(gpu, 0, MEMORY_SLICES, COMPUTE_SLICES),
        }));
        for profile in &MIG_PROFILES_80GB {
            for &start in profile.starts {
                devices.push(json!({
                    "name": mig_device_name(gpu, profile.name, start),
                    "attributes": {
                        "type": {"string": "mig"}, "profile": {"string": profile.name},
                        "parentIndex": {"int": gpu},
                        "parentUUID": {"string": format!("GPU-{node}-{gpu}")},
                        "productName": {"string": product},
                    },
                    "capacity": {"memory": {"value": format!("{}Gi", 10 * profile.memory_slices)}},
                    "consumesCounters": consumes(gpu, start, profile.memory_slices, profile.compute_slices),
                }));
            }
        }
    }
    let slice = |suffix: &str, spec: Value| {
        let mut spec = spec;
        spec["driver"] = json!(NVIDIA_GPU_DRIVER);
        spec["nodeName"] = json!(node);
        spec["pool"] = pool.clone();
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": format!("{node}-{NVIDIA_GPU_DRIVER}-{suffix}")},
               "spec": spec})
    };
    vec![
        slice("counters", json!({"sharedCounters": sets})),
        slice("devices", json!({"devices": devices})),
    ]
}

/// The DeviceClass that selects MIG devices (`mig.nvidia.com`), as NVIDIA's driver ships it.
pub fn mig_device_class() -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
    "metadata": {"name": MIG_DEVICE_CLASS},
    "spec": {"selectors": [{"cel": {"expression": format!(
        "device.driver == '{NVIDIA_GPU_DRIVER}' && device.attributes['{NVIDIA_GPU_DRIVER}'].type == 'mig'"
    )}}]}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dra::SliceBook;
    use crate::fields::Ctx;
    use k8s_openapi::api::resource::v1::ResourceSlice;

    #[test]
    fn every_gpu_carries_every_placement_as_a_partition() {
        let path = std::path::PathBuf::from("mig");
        let ctx = Ctx {
            path: &path,
            object: "ResourceSlice".into(),
        };
        let mut book = SliceBook::default();
        for slice in nvidia_mig_slices("n", 2, "NVIDIA H100 80GB HBM3") {
            let slice: ResourceSlice = serde_json::from_value(slice).unwrap();
            book.insert(&ctx, &slice).unwrap();
        }
        let gpus = book.gpus_of("n");
        assert_eq!(gpus.len(), 2);
        let placements: usize = MIG_PROFILES_80GB.iter().map(|p| p.starts.len()).sum();
        for (i, gpu) in gpus.iter().enumerate() {
            let parts = gpu.partitions.as_ref().unwrap();
            assert_eq!(parts.devices.len(), placements);
            assert!(parts
                .devices
                .iter()
                .all(|p| p.device.name.starts_with(&format!("gpu-{i}-mig-"))));
            // Seven 1g.10gb fit together, an eighth compute slice does not exist; a 7g
            // takes everything.
            let index = |name: &str| {
                parts
                    .devices
                    .iter()
                    .position(|p| p.device.name == mig_device_name(i as u32, name, 0))
                    .unwrap()
            };
            let seven_1g: u64 = (0..7)
                .map(|s| {
                    let n = mig_device_name(i as u32, "1g.10gb", s);
                    1 << parts
                        .devices
                        .iter()
                        .position(|p| p.device.name == n)
                        .unwrap()
                })
                .sum();
            assert_eq!(parts.over_committed(seven_1g), None);
            assert!(!parts.fits(seven_1g, index("1g.20gb")));
            assert!(parts.fits(0, index("7g.80gb")));
            assert!(!parts.fits(1 << index("1g.10gb"), index("7g.80gb")));
            // 4g at 0 and 3g at 4: the whole GPU in two.
            let n3 = mig_device_name(i as u32, "3g.40gb", 4);
            let three = parts
                .devices
                .iter()
                .position(|p| p.device.name == n3)
                .unwrap();
            assert!(parts.fits(1 << index("4g.40gb"), three));
        }
    }
}
