//! The live scheduler's memory, cycle time and bind rate at a given size:
//!
//! ```text
//! cargo run --release -p kestrel-live --example bind_throughput
//! cargo run --release -p kestrel-live --example bind_throughput -- --nodes 5000 --pods 50000 --bound 45000
//! ```
//!
//! It holds what `kestrel serve` holds: the Node objects in a reflector store, as the watch
//! fills it (an initial list: `Init`, `InitApply` per object, `InitDone`), and the index
//! (`LiveIndex`) fed with the Nodes and, one by one as the pod watch lists them, the Pods
//! (which have no store: each is dropped once applied); then it runs one scheduling cycle
//! and carries its binds out through the binder against an in-process mock API server that
//! answers at once. The objects look like a GPU cluster's: labelled GPU nodes with
//! conditions, addresses, node info, an image list and a taint; Job-owned training pods
//! with labels, annotations, an owner reference, a container with env, mounts and
//! requests/limits including `nvidia.com/gpu`, volumes, tolerations and a status. `--bound
//! B` of the pods are already running on their nodes (two in three with one GPU, the
//! others CPU-only), the rest ask for one GPU each and wait. `--managed-fields` adds the
//! `metadata.managedFields` the API server sends with every object (unless the watch
//! strips them). The watches drop the parts of each object no reader uses
//! (`live::trim_watched`) before storing it; `--untrimmed` stores them whole.
//!
//! Decisions/s is the cycle in memory; binds/s measures Kestrel's client side
//! (serialisation, HTTP request building, as many binds in flight as `kestrel serve` keeps)
//! against a mock that answers every request after `--api-latency-ms` (default 0): a real
//! API server's write rate comes on top. Memory is read from `/proc/self/status` (Linux).

use futures::stream::{self, StreamExt};
use http::{Request, Response};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kestrel_core::SchedulerConfig;
use kestrel_live::api::{ApiWriter, GpuIndicesWrite};
use kestrel_live::driver::DriverConfig;
use kestrel_live::index::{self, BindOutcome, LiveIndex, VolumeEvent};
use kestrel_live::limiter::Limiter;
use kestrel_objects::live;
use kube::client::Body;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counts the bytes live on the heap, to tell what the structures hold from what the
/// allocator keeps resident.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Relaxed);
        System.dealloc(ptr, layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Relaxed);
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Relaxed);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live_mib() -> f64 {
    LIVE.load(Relaxed) as f64 / (1024.0 * 1024.0)
}

struct Args {
    nodes: usize,
    pods: usize,
    bound: usize,
    managed_fields: bool,
    untrimmed: bool,
    /// How long the mock API server takes to answer each request.
    latency_ms: u64,
    /// `--gpu-indices-via binding`: the indices in the Binding (one write per bind).
    in_binding: bool,
}

fn args() -> Args {
    let mut out = Args {
        nodes: 1000,
        pods: 5000,
        bound: 0,
        managed_fields: false,
        untrimmed: false,
        latency_ms: 0,
        in_binding: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut number = |name: &str| -> usize {
            it.next()
                .and_then(|v| v.replace([',', '_'], "").parse().ok())
                .unwrap_or_else(|| panic!("{name} needs a number"))
        };
        match a.as_str() {
            "--nodes" => out.nodes = number("--nodes"),
            "--pods" => out.pods = number("--pods"),
            "--bound" => out.bound = number("--bound"),
            "--managed-fields" => out.managed_fields = true,
            "--untrimmed" => out.untrimmed = true,
            "--api-latency-ms" => out.latency_ms = number("--api-latency-ms") as u64,
            "--gpu-indices-via" => match it.next().as_deref() {
                Some("patch") => out.in_binding = false,
                Some("binding") => out.in_binding = true,
                other => panic!("--gpu-indices-via is patch or binding, not {other:?}"),
            },
            other => panic!(
                "unknown argument {other:?}; use --nodes N --pods M [--bound B] [--managed-fields] [--untrimmed] [--api-latency-ms L] [--gpu-indices-via patch|binding]"
            ),
        }
    }
    assert!(out.bound <= out.pods, "--bound is at most --pods");
    assert!(out.nodes > 0, "--nodes is at least 1");
    out
}

/// (VmRSS, VmHWM) in MiB.
fn memory() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn report_memory(after: &str) -> f64 {
    let (rss, hwm) = memory();
    let live = live_mib();
    println!("  after {after}: {live:.0} MiB live on the heap, {rss:.0} MiB resident (peak so far {hwm:.0} MiB)");
    live
}

fn ts(minute: usize) -> String {
    format!(
        "2026-11-30T{:02}:{:02}:00Z",
        (minute / 60) % 24,
        minute % 60
    )
}

fn uid(kind: u32, i: usize) -> String {
    format!(
        "{kind:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i >> 16,
        i & 0xfff,
        (i >> 4) & 0xfff,
        i as u64 * 2654435761
    )
}

fn node_name(i: usize) -> String {
    format!("gpu-h100-{i:05}.us-east-1.compute.internal")
}

/// Read from JSON text, as the watch reads what the API server sends.
fn decode<T: serde::de::DeserializeOwned>(object: Value) -> T {
    let text = serde_json::to_vec(&object).unwrap();
    drop(object);
    serde_json::from_slice(&text).unwrap()
}

/// The managedFields entry of one field manager, shaped like the API server's.
fn managed(manager: &str, operation: &str, subresource: Option<&str>, fields: Value) -> Value {
    let mut e = json!({"manager": manager, "operation": operation, "apiVersion": "v1",
        "time": ts(5), "fieldsType": "FieldsV1", "fieldsV1": fields});
    if let Some(s) = subresource {
        e["subresource"] = json!(s);
    }
    e
}

fn node(i: usize, managed_fields: bool) -> Node {
    let name = node_name(i);
    let rack = i / 32;
    let zone = ["us-east-1a", "us-east-1b", "us-east-1c"][i % 3];
    let images: Vec<Value> = (0..50)
        .map(|k| {
            let repo = ["nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/tritonserver", "ghcr.io/acme/train", "docker.io/library/python", "registry.k8s.io/kube-proxy"][k % 5];
            json!({"names": [format!("{repo}@sha256:{:064x}", (i * 50 + k) as u128 * 0x9e3779b97f4a7c15),
                                format!("{repo}:24.{:02}-py3-{k}", k % 12)],
                   "sizeBytes": 1_000_000_000u64 + (k as u64) * 7_654_321})
        })
        .collect();
    let condition = |t: &str, status: &str, reason: &str, message: &str| {
        json!({"type": t, "status": status, "lastHeartbeatTime": ts(30), "lastTransitionTime": ts(1),
               "reason": reason, "message": message})
    };
    let mut metadata = json!({
        "name": name, "uid": uid(1, i), "resourceVersion": format!("{}", 1_000_000 + i),
        "creationTimestamp": ts(0),
        "labels": {
            "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "kubernetes.io/hostname": name,
            "node.kubernetes.io/instance-type": "p5.48xlarge",
            "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone,
            "kestrel.dev/rack": format!("rack-{rack:04}"), "kestrel.dev/block": format!("block-{:03}", rack / 16),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8",
            "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.family": "hopper",
            "nvidia.com/gpu.machine": "p5.48xlarge", "nvidia.com/gpu.present": "true",
            "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07", "nvidia.com/cuda.runtime.major": "12",
            "nvidia.com/cuda.runtime.minor": "4", "nvidia.com/mig.capable": "true",
            "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "true",
            "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
            "feature.node.kubernetes.io/kernel-version.full": "6.1.109-118.189.amzn2023.x86_64",
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/rdma.available": "true"
        },
        "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "csi.volume.kubernetes.io/nodeid": format!("{{\"ebs.csi.aws.com\":\"i-{:017x}\",\"efs.csi.aws.com\":\"i-{:017x}\"}}", i, i),
            "nfd.node.kubernetes.io/feature-labels": "cpu-model.vendor_id,kernel-version.full,pci-10de.present,rdma.available",
            "nvidia.com/gpu-driver-upgrade-enabled": "true"
        }
    });
    if managed_fields {
        metadata["managedFields"] = json!([
            managed(
                "kubelet",
                "Update",
                None,
                json!({"f:metadata": {"f:annotations": {".": {}, "f:node.alpha.kubernetes.io/ttl": {}, "f:volumes.kubernetes.io/controller-managed-attach-detach": {}},
                "f:labels": {".": {}, "f:beta.kubernetes.io/arch": {}, "f:beta.kubernetes.io/os": {}, "f:kubernetes.io/arch": {}, "f:kubernetes.io/hostname": {}, "f:kubernetes.io/os": {}, "f:node.kubernetes.io/instance-type": {}, "f:topology.kubernetes.io/region": {}, "f:topology.kubernetes.io/zone": {}}},
                "f:spec": {"f:providerID": {}}})
            ),
            managed(
                "kube-controller-manager",
                "Update",
                None,
                json!({"f:metadata": {"f:annotations": {"f:node.alpha.kubernetes.io/ttl": {}}}, "f:spec": {"f:podCIDR": {}, "f:podCIDRs": {".": {}, "v:\"10.64.0.0/24\"": {}}}})
            ),
            managed(
                "nfd-master",
                "Update",
                None,
                json!({"f:metadata": {"f:annotations": {"f:nfd.node.kubernetes.io/feature-labels": {}},
                "f:labels": {"f:feature.node.kubernetes.io/cpu-model.vendor_id": {}, "f:feature.node.kubernetes.io/kernel-version.full": {}, "f:feature.node.kubernetes.io/pci-10de.present": {}, "f:feature.node.kubernetes.io/rdma.available": {},
                    "f:nvidia.com/cuda.driver.major": {}, "f:nvidia.com/cuda.driver.minor": {}, "f:nvidia.com/cuda.driver.rev": {}, "f:nvidia.com/cuda.runtime.major": {}, "f:nvidia.com/cuda.runtime.minor": {}, "f:nvidia.com/gpu.count": {}, "f:nvidia.com/gpu.family": {}, "f:nvidia.com/gpu.machine": {}, "f:nvidia.com/gpu.memory": {}, "f:nvidia.com/gpu.product": {}, "f:nvidia.com/mig.capable": {}}}})
            ),
            managed(
                "kubelet",
                "Update",
                Some("status"),
                json!({"f:status": {"f:allocatable": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:nvidia.com/gpu": {}, "f:rdma/ib": {}},
                "f:capacity": {"f:cpu": {}, "f:ephemeral-storage": {}, "f:memory": {}, "f:nvidia.com/gpu": {}, "f:rdma/ib": {}},
                "f:conditions": {"k:{\"type\":\"DiskPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"MemoryPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"PIDPressure\"}": {"f:lastHeartbeatTime": {}}, "k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}}},
                "f:images": {}, "f:nodeInfo": {"f:bootID": {}, "f:kernelVersion": {}, "f:kubeletVersion": {}}}})
            ),
        ]);
    }
    decode(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": metadata,
        "spec": {"podCIDR": format!("10.{}.{}.0/24", 64 + i / 256, i % 256), "podCIDRs": [format!("10.{}.{}.0/24", 64 + i / 256, i % 256)],
                 "providerID": format!("aws:///{zone}/i-{i:017x}"),
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "192", "memory": "2097152Mi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "30Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "rdma/ib": "32"},
            "allocatable": {"cpu": "191450m", "memory": "2060000Mi", "pods": "110", "nvidia.com/gpu": "8", "ephemeral-storage": "28Ti", "hugepages-1Gi": "0", "hugepages-2Mi": "0", "rdma/ib": "32"},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
            ],
            "addresses": [{"type": "InternalIP", "address": format!("10.0.{}.{}", i / 256, i % 256)},
                          {"type": "Hostname", "address": name}, {"type": "InternalDNS", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{:032x}", i as u128 * 0x9e3779b97f4a7c15), "systemUUID": uid(2, i),
                         "bootID": uid(3, i), "kernelVersion": "6.1.109-118.189.amzn2023.x86_64",
                         "osImage": "Amazon Linux 2023.5.20240916", "containerRuntimeVersion": "containerd://1.7.22",
                         "kubeletVersion": "v1.31.0-eks-a737599", "kubeProxyVersion": "v1.31.0-eks-a737599",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": images
        }
    }))
}

/// Pod `i`; `on`: the node it runs on and its GPU index (`None`: CPU-only), or pending.
fn pod(i: usize, on: Option<(usize, Option<u32>)>, managed_fields: bool) -> Pod {
    let job = format!("train-llm-{:04}", i / 8);
    let name = format!("{job}-worker-{}-{:05x}", i % 8, i);
    let job_uid = uid(4, i / 8);
    let gpus = match on {
        Some((_, None)) => 0,
        _ => 1,
    };
    let mut annotations = json!({
        "kestrel.dev/runtime-estimate": "6h",
        "batch.kubernetes.io/job-completion-index": format!("{}", i % 8),
        "prometheus.io/scrape": "true", "prometheus.io/port": "9400"
    });
    if let Some((_, Some(index))) = on {
        annotations["kestrel.dev/gpu-indices"] = json!(index.to_string());
    }
    let mut metadata = json!({
        "name": name, "generateName": format!("{job}-worker-{}-", i % 8), "namespace": format!("team-{}", i % TEAMS),
        "uid": uid(5, i), "resourceVersion": format!("{}", 2_000_000 + i), "creationTimestamp": ts(i % 600),
        "labels": {"app.kubernetes.io/name": "llm-train", "app.kubernetes.io/part-of": "research",
                   "batch.kubernetes.io/controller-uid": job_uid, "batch.kubernetes.io/job-name": job,
                   "controller-uid": job_uid, "job-name": job, "team": format!("team-{}", i % TEAMS),
                   "batch.kubernetes.io/job-completion-index": format!("{}", i % 8)},
        "annotations": annotations,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid,
                             "controller": true, "blockOwnerDeletion": true}],
        "finalizers": ["batch.kubernetes.io/job-tracking"]
    });
    if managed_fields {
        let mut entries = vec![managed(
            "kube-controller-manager",
            "Update",
            None,
            json!({
                "f:metadata": {"f:annotations": {".": {}, "f:batch.kubernetes.io/job-completion-index": {}, "f:kestrel.dev/runtime-estimate": {}, "f:prometheus.io/port": {}, "f:prometheus.io/scrape": {}},
                    "f:finalizers": {".": {}, "v:\"batch.kubernetes.io/job-tracking\"": {}}, "f:generateName": {},
                    "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:app.kubernetes.io/part-of": {}, "f:batch.kubernetes.io/controller-uid": {}, "f:batch.kubernetes.io/job-completion-index": {}, "f:batch.kubernetes.io/job-name": {}, "f:controller-uid": {}, "f:job-name": {}, "f:team": {}},
                    "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"{job_uid}\"}}"): {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"trainer\"}": {".": {}, "f:args": {}, "f:command": {}, "f:env": {".": {}, "k:{\"name\":\"MASTER_ADDR\"}": {".": {}, "f:name": {}, "f:value": {}}, "k:{\"name\":\"NCCL_DEBUG\"}": {".": {}, "f:name": {}, "f:value": {}}},
                    "f:image": {}, "f:imagePullPolicy": {}, "f:name": {}, "f:ports": {".": {}, "k:{\"containerPort\":29500,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                    "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}, "f:nvidia.com/gpu": {}}, "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}, "f:nvidia.com/gpu": {}}},
                    "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}, "f:volumeMounts": {".": {}, "k:{\"mountPath\":\"/data\"}": {".": {}, "f:mountPath": {}, "f:name": {}}, "k:{\"mountPath\":\"/dev/shm\"}": {".": {}, "f:mountPath": {}, "f:name": {}}}}},
                    "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:priorityClassName": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {}, "f:subdomain": {}, "f:terminationGracePeriodSeconds": {}, "f:tolerations": {},
                    "f:volumes": {".": {}, "k:{\"name\":\"data\"}": {".": {}, "f:name": {}, "f:persistentVolumeClaim": {".": {}, "f:claimName": {}}}, "k:{\"name\":\"dshm\"}": {".": {}, "f:emptyDir": {".": {}, "f:medium": {}}, "f:name": {}}}}
            }),
        )];
        if on.is_some() {
            entries.push(managed(
                "kestrel",
                "Update",
                None,
                json!({"f:metadata": {"f:annotations": {"f:kestrel.dev/gpu-indices": {}}}}),
            ));
            entries.push(managed("kubelet", "Update", Some("status"), json!({"f:status": {
                "f:conditions": {"k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"PodReadyToStartContainers\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}, "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
                "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {".": {}, "k:{\"ip\":\"10.64.1.2\"}": {".": {}, "f:ip": {}}}, "f:startTime": {}}})));
        } else {
            entries.push(managed("kestrel", "Update", Some("status"), json!({"f:status": {"f:conditions": {".": {}, "k:{\"type\":\"PodScheduled\"}": {".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}}})));
        }
        metadata["managedFields"] = json!(entries);
    }
    let mut requests = json!({"cpu": "16", "memory": "200Gi"});
    let mut limits = json!({"memory": "200Gi"});
    if gpus > 0 {
        requests["nvidia.com/gpu"] = json!(gpus.to_string());
        limits["nvidia.com/gpu"] = json!(gpus.to_string());
    }
    let env: Vec<Value> = [
        ("MASTER_ADDR", format!("{job}-worker-0-0.{job}")),
        ("MASTER_PORT", "29500".into()),
        ("WORLD_SIZE", "8".into()),
        ("NCCL_DEBUG", "WARN".into()),
        ("NCCL_IB_HCA", "mlx5".into()),
        ("CUDA_DEVICE_MAX_CONNECTIONS", "1".into()),
        ("HF_HOME", "/data/hf-cache".into()),
        ("WANDB_PROJECT", "llm-7b".into()),
    ]
    .into_iter()
    .map(|(k, v)| json!({"name": k, "value": v}))
    .chain([json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})])
    .collect();
    let mut spec = json!({
        "schedulerName": "kestrel", "priority": 1000, "priorityClassName": "research", "preemptionPolicy": "PreemptLowerPriority",
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {}, "enableServiceLinks": true,
        "subdomain": job, "hostname": format!("{job}-worker-{}", i % 8),
        "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "imagePullPolicy": "IfNotPresent",
            "command": ["torchrun"], "args": ["--nnodes=8", "--nproc-per-node=1", "train.py", "--config", "/data/configs/llm-7b.yaml"],
            "env": env, "ports": [{"name": "rendezvous", "containerPort": 29500, "protocol": "TCP"}],
            "resources": {"requests": requests, "limits": limits},
            "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"},
                {"name": "kube-api-access", "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": format!("team-{}-datasets", i % TEAMS)}},
            {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
    });
    let condition = |t: &str, status: &str| json!({"type": t, "status": status, "lastProbeTime": null, "lastTransitionTime": ts(i % 600 + 1)});
    let status = match on {
        Some((n, _)) => {
            spec["nodeName"] = json!(node_name(n));
            let ip = format!("10.{}.{}.{}", 64 + n / 256, n % 256, 2 + i % 200);
            json!({"phase": "Running", "qosClass": "Burstable", "startTime": ts(i % 600 + 1),
                "hostIP": format!("10.0.{}.{}", n / 256, n % 256), "hostIPs": [{"ip": format!("10.0.{}.{}", n / 256, n % 256)}],
                "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [condition("PodReadyToStartContainers", "True"), condition("Initialized", "True"),
                    condition("Ready", "True"), condition("ContainersReady", "True"), condition("PodScheduled", "True")],
                "containerStatuses": [{"name": "trainer", "ready": true, "started": true, "restartCount": 0,
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "imageID": format!("nvcr.io/nvidia/pytorch@sha256:{:064x}", 0x9e3779b97f4a7c15u128),
                    "containerID": format!("containerd://{:064x}", i as u128 * 0x9e3779b97f4a7c15),
                    "state": {"running": {"startedAt": ts(i % 600 + 2)}}}]})
        }
        None => json!({"phase": "Pending", "qosClass": "Burstable",
            "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": null, "lastTransitionTime": ts(i % 600 + 1),
                "reason": "Unschedulable", "message": "kestrel: waiting in queue team-research (position 412)"}]}),
    };
    decode(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}),
    )
}

/// Teams, each a namespace with its dataset claim.
const TEAMS: usize = 20;

/// The teams' dataset claims (`team-N/team-N-datasets`, read-only many) and the volumes
/// they are bound to, listed by the storage watches as `kestrel serve` lists them.
fn apply_datasets(state: &mut LiveIndex) {
    let volumes: Vec<PersistentVolume> = (0..TEAMS)
        .map(|t| {
            decode(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": format!("team-{t}-datasets")},
                "spec": {"capacity": {"storage": "10Ti"}, "accessModes": ["ReadOnlyMany"],
                    "nfs": {"server": "datasets.internal", "path": format!("/team-{t}")},
                    "claimRef": {"namespace": format!("team-{t}"), "name": format!("team-{t}-datasets")}},
            }))
        })
        .collect();
    let claims: Vec<PersistentVolumeClaim> = (0..TEAMS)
        .map(|t| {
            decode(json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": format!("team-{t}-datasets"), "namespace": format!("team-{t}"),
                    "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
                "spec": {"storageClassName": "", "accessModes": ["ReadOnlyMany"],
                    "resources": {"requests": {"storage": "10Ti"}},
                    "volumeName": format!("team-{t}-datasets")},
            }))
        })
        .collect();
    list(state, volumes, |e| VolumeEvent::Volume(Box::new(e)));
    list(state, claims, |e| VolumeEvent::Claim(Box::new(e)));
}

/// One watch's initial list of `objects`.
fn list<K>(state: &mut LiveIndex, objects: Vec<K>, wrap: impl Fn(Event<K>) -> VolumeEvent) {
    state.apply_volume_event(wrap(Event::Init));
    for o in objects {
        state.apply_volume_event(wrap(Event::InitApply(o)));
    }
    state.apply_volume_event(wrap(Event::InitDone));
}

fn main() {
    let args = args();
    let pending = args.pods - args.bound;
    println!(
        "{} nodes x 8 H100, {} pods ({} running, {} pending, one GPU each){}{}",
        args.nodes,
        args.pods,
        args.bound,
        pending,
        if args.managed_fields {
            ", with managedFields"
        } else {
            ""
        },
        if args.untrimmed {
            ", objects stored whole"
        } else {
            ""
        }
    );
    let base = report_memory("start");

    // The watches' initial lists: Nodes fill a reflector store (trimmed, then cloned by the
    // reflector into an Arc) and feed the index; Pods have no store: the driver applies
    // each event to the index, then drops it.
    let mut state = LiveIndex::new(SchedulerConfig::default(), "kestrel");
    let mut nodes = Writer::<Node>::default();
    let node_store = nodes.as_reader();
    let t = Instant::now();
    nodes.apply_watcher_event(&Event::Init);
    for i in 0..args.nodes {
        let mut object = node(i, args.managed_fields);
        if !args.untrimmed {
            live::trim_watched(&mut object);
        }
        nodes.apply_watcher_event(&Event::InitApply(object));
    }
    nodes.apply_watcher_event(&Event::InitDone);
    for n in node_store.state() {
        state.apply_node(&n).unwrap();
    }
    state.retain_nodes(&index::node_names(&node_store.state()));
    let nodes_in = t.elapsed();
    let nodes_live = report_memory("storing and indexing the Nodes");
    let sample_node = serde_json::to_vec(&*node_store.state()[0]).unwrap().len();

    // Each team's dataset claim, bound to its volume, as the storage watches list them.
    apply_datasets(&mut state);

    // Running pods spread round-robin; on each node two in three take the next GPU index.
    let mut next_gpu = vec![0u32; args.nodes];
    let (mut build, mut ingest) = (Duration::ZERO, Duration::ZERO);
    let (mut sample_running, mut sample_pending) = (0, 0);
    state.begin_pod_relist();
    for i in 0..args.pods {
        let t = Instant::now();
        let on = (i < args.bound).then(|| {
            let n = i % args.nodes;
            let gpu = (i / args.nodes % 3 != 2).then(|| {
                next_gpu[n] += 1;
                (next_gpu[n] - 1) % 8
            });
            (n, gpu)
        });
        let mut object = pod(i, on, args.managed_fields);
        if !args.untrimmed {
            live::trim_watched(&mut object);
        }
        if i == 0 || i == args.bound {
            let size = serde_json::to_vec(&object).unwrap().len();
            *if on.is_some() {
                &mut sample_running
            } else {
                &mut sample_pending
            } = size;
        }
        build += t.elapsed();
        let t = Instant::now();
        state.apply_pod(&object);
        drop(object);
        ingest += t.elapsed();
    }
    let t = Instant::now();
    state.end_pod_relist();
    ingest += t.elapsed();
    assert_eq!(state.tracked_pods(), args.pods, "every Pod object was read");
    println!(
        "index: {} Nodes stored and indexed in {:.0} ms; {} Pod objects built in {:.0} ms and turned into engine pods in {:.0} ms ({:.1} us each)",
        args.nodes,
        nodes_in.as_secs_f64() * 1e3,
        args.pods,
        build.as_secs_f64() * 1e3,
        ingest.as_secs_f64() * 1e3,
        ingest.as_secs_f64() * 1e6 / args.pods as f64
    );
    let indexed = report_memory("indexing the Pods");
    println!(
        "  as JSON: a Node {sample_node} B, a running Pod {sample_running} B, a pending Pod {sample_pending} B; on the heap: {:.1} KiB per Node (store and index), {:.1} KiB per Pod (index only)",
        (nodes_live - base) * 1024.0 / args.nodes as f64,
        (indexed - nodes_live) * 1024.0 / args.pods.max(1) as f64
    );

    let t = Instant::now();
    let out = state.cycle(0);
    let cycle = t.elapsed();
    assert_eq!(
        out.binds.len(),
        pending,
        "every pending pod fits; give more --nodes or fewer pending pods"
    );
    println!(
        "in memory: one cycle over {} pending pods placed {} in {:.1} ms = {:.0} decisions/s",
        pending,
        out.binds.len(),
        cycle.as_secs_f64() * 1e3,
        out.binds.len() as f64 / cycle.as_secs_f64()
    );
    report_memory("the cycle");

    // What the next cycles cost: nothing changed; then a running pod ends and a new one
    // arrives (the index and engine are not rebuilt: the cycle looks at what changed).
    let t = Instant::now();
    let idle = state.cycle(1);
    let idle_time = t.elapsed();
    assert!(idle.binds.is_empty());
    let mut ended = pod(0, Some((0, Some(0))), false);
    live::trim_watched(&mut ended);
    state.delete_pod(&ended);
    let mut arrived = pod(args.pods, None, false);
    live::trim_watched(&mut arrived);
    state.apply_pod(&arrived);
    let t = Instant::now();
    let next = state.cycle(2);
    let next_time = t.elapsed();
    assert_eq!(
        next.binds.len(),
        1,
        "the new pod takes the room the ended one left"
    );
    println!(
        "next cycles: nothing changed {:.3} ms; one pod ended and one arrived {:.3} ms",
        idle_time.as_secs_f64() * 1e3,
        next_time.as_secs_f64() * 1e3
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let args = &args;
    rt.block_on(async move {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let latency = Duration::from_millis(args.latency_ms);
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                // Each request answered after the latency, many at once, as a server does.
                tokio::spawn(async move {
                    // A merge patch answers with the pod, a binding with a Status.
                    let body: &[u8] = if req.method() == http::Method::PATCH {
                        br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ml"}}"#
                    } else {
                        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}"#
                    };
                    let _ = req.into_body().collect_bytes().await;
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    send.send_response(
                        Response::builder()
                            .status(if body.starts_with(b"{\"apiV") { 200 } else { 201 })
                            .body(Body::from(body.to_vec()))
                            .unwrap(),
                    );
                });
            }
        });
        let client = kube::Client::new(service, "default");
        let writer = ApiWriter::new(client, "kestrel", "bench", Arc::new(Limiter::unlimited()))
            .with_gpu_indices_write(if args.in_binding {
                GpuIndicesWrite::Binding
            } else {
                GpuIndicesWrite::Patch
            });
        // As many binds in flight as `kestrel serve` keeps by default (--max-in-flight).
        let in_flight = DriverConfig::new("kestrel").max_in_flight;
        let t = Instant::now();
        let outcomes: Vec<BindOutcome> = stream::iter(out.binds)
            .map(|job| {
                let writer = writer.clone();
                async move { writer.bind(&job, || true).await }
            })
            .buffer_unordered(in_flight)
            .collect()
            .await;
        let took = t.elapsed();
        let done = outcomes.len();
        assert!(
            outcomes.iter().all(|o| *o == BindOutcome::Bound),
            "every bind goes through: {:?}",
            outcomes.iter().find(|o| **o != BindOutcome::Bound)
        );
        println!(
            "binder vs mock API answering in {} ms: {done} binds ({}, {in_flight} in flight) in {:.0} ms = {:.0} binds/s",
            args.latency_ms,
            if args.in_binding {
                "one binding POST with the GPU indices each"
            } else {
                "annotation PATCH + binding POST each"
            },
            took.as_secs_f64() * 1e3,
            done as f64 / took.as_secs_f64()
        );
    });
    let (rss, hwm) = memory();
    println!("peak resident memory (VmHWM): {hwm:.0} MiB; resident now (VmRSS): {rss:.0} MiB");
    drop((node_store, nodes, state));
}
