//! GPUs through Dynamic Resource Allocation in the simulator: pools that publish their GPUs
//! as NVIDIA's DRA driver does, pods that claim them from templates or share one claim,
//! claims no device matches, and the errors bad DRA objects get.

use kestrel_core::*;
use kestrel_sim::manifests::load_manifests;
use kestrel_sim::*;
use kestrel_view::explain_view::find_pod;
use std::path::PathBuf;

const MIN: Millis = 60_000;

const CLUSTER: &str = r#"
apiVersion: sim.kestrel.dev/v1alpha1
kind: SimCluster
metadata: {name: dra}
spec:
  pools:
  - name: gpu
    count: 2
    cpu: "64"
    memory: 512Gi
    gpu: {model: NVIDIA H100 80GB HBM3, count: 8, memoryMiB: 81559, publish: dra}
    topology: dgx-h100
"#;

const CLASSES: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: four-big-gpus, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 4
          selectors:
          - cel: {expression: "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"}
"#;

fn cluster() -> SimCluster {
    kestrel_sim::cluster_spec::load_cluster_spec(&PathBuf::from("cluster.yaml"), CLUSTER).unwrap()
}

fn workload(extra: &str) -> Result<Workload, kestrel_objects::LoadError> {
    load_manifests(&[
        (PathBuf::from("classes.yaml"), CLASSES.to_string()),
        (PathBuf::from("work.yaml"), extra.to_string()),
    ])
}

fn job(name: &str, pods: u32, claims: &str) -> String {
    format!(
        r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: team
  annotations: {{kestrel.dev/sim-duration: 30m}}
spec:
  parallelism: {pods}
  completions: {pods}
  template:
    spec:
      resourceClaims: {claims}
      containers:
      - name: main
        image: trainer
        resources:
          requests: {{cpu: "1"}}
          claims: [{{name: gpu}}]
---
"#
    )
}

fn bound_devices(sim: &Simulation, pod: &str) -> Option<(NodeId, Vec<u32>)> {
    let id = find_pod(sim, pod).ok()?;
    match &sim.scheduler().pod(id).phase {
        PodPhase::Bound { node, gpus, .. } => Some((*node, gpus.indices())),
        _ => None,
    }
}

#[test]
fn pods_claiming_gpus_from_templates_get_devices_of_their_node_and_none_twice() {
    let work = job(
        "one",
        12,
        "[{name: gpu, resourceClaimTemplateName: one-gpu}]",
    ) + &job(
        "four",
        1,
        "[{name: gpu, resourceClaimTemplateName: four-big-gpus}]",
    );
    let workload = workload(&work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let mut used = std::collections::BTreeSet::new();
    let mut bound = 0;
    for (id, record) in sim.scheduler().pods() {
        if let PodPhase::Bound { node, gpus, .. } = &record.phase {
            bound += 1;
            for index in gpus.indices() {
                assert!(used.insert((*node, index)), "GPU {index} given twice");
            }
            let claims = sim.scheduler().pod_claim_allocations(id);
            assert_eq!(claims.len(), 1, "{}", record.spec.name);
            let (key, allocation) = &claims[0];
            assert!(key.starts_with("team/"), "{key}");
            assert_eq!(allocation.results.len(), gpus.indices().len());
            assert!(allocation
                .results
                .iter()
                .all(|r| r.driver == "gpu.nvidia.com"));
            assert_eq!(
                allocation.node,
                sim.scheduler().cluster().node(*node).spec.name
            );
        }
    }
    assert_eq!(bound, 13, "12 one-GPU pods and the 4-GPU pod fit 16 GPUs");
    assert_eq!(used.len(), 16);
    // The 4-GPU claim sits on one NUMA node of its DGX.
    let (node, four) = bound_devices(&sim, "four-0").unwrap();
    let spec = &sim.scheduler().cluster().node(node).spec;
    let numa: std::collections::BTreeSet<u32> = four
        .iter()
        .map(|i| spec.gpus.iter().find(|g| g.index == *i).unwrap().numa_node)
        .collect();
    assert_eq!(numa.len(), 1, "{four:?}");
    // When the pods end, their claims are released and the devices free.
    sim.run_to(40 * MIN).unwrap();
    let free: u32 = sim
        .scheduler()
        .cluster()
        .iter()
        .map(|(_, n)| n.free_whole_gpus())
        .sum();
    assert_eq!(free, 16);
    assert_eq!(sim.scheduler().held_claims().count(), 0);
}

#[test]
fn one_claim_shared_by_two_pods_is_allocated_once_and_both_go_where_it_is() {
    let shared = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu, namespace: team}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, count: 2}
---
"#;
    let work = shared.to_string()
        + &job("a", 1, "[{name: gpu, resourceClaimName: shared-gpu}]")
        + &job("b", 1, "[{name: gpu, resourceClaimName: shared-gpu}]");
    let workload = workload(&work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let a = bound_devices(&sim, "a-0").expect("a bound");
    let b = bound_devices(&sim, "b-0").expect("b bound");
    assert_eq!(a, b, "both pods use the claim's devices");
    assert_eq!(a.1.len(), 2);
    let free: u32 = sim
        .scheduler()
        .cluster()
        .iter()
        .map(|(_, n)| n.free_whole_gpus())
        .sum();
    assert_eq!(free, 14, "the shared claim holds 2 GPUs, not 4");
}

#[test]
fn a_claim_no_device_matches_stays_pending_with_its_request_named() {
    let work = r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: b200, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          selectors:
          - cel: {expression: "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA B200')"}
---
"#
    .to_string()
        + &job("b200", 1, "[{name: gpu, resourceClaimTemplateName: b200}]");
    let workload = workload(&work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let id = find_pod(&sim, "b200-0").unwrap();
    let record = sim.scheduler().pod(id);
    assert_eq!(record.phase, PodPhase::Pending);
    let reason = record.pending_reason.as_ref().unwrap().to_string();
    assert!(
        reason.starts_with("0/2 nodes are available: 2 cannot allocate all claims (ResourceClaim team/b200-0-gpu request gpu: no device matches)"),
        "{reason}"
    );
}

/// A pod written for NVIDIA's device plugin: one `nvidia.com/gpu`.
const PLUGIN_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: plugin-pod, namespace: team}
spec:
  containers:
  - name: main
    image: x
    resources: {limits: {nvidia.com/gpu: 1}}
"#;

#[test]
fn nvidia_gpu_pods_do_not_land_on_nodes_that_publish_their_gpus_through_dra() {
    let work = PLUGIN_POD;
    let workload = workload(work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let id = find_pod(&sim, "plugin-pod").unwrap();
    let record = sim.scheduler().pod(id);
    assert_eq!(record.phase, PodPhase::Pending);
    let reason = record.pending_reason.as_ref().unwrap().to_string();
    assert!(reason.contains("2 Insufficient nvidia.com/gpu"), "{reason}");
}

fn load_error(work: &str) -> String {
    workload(work).map(|_| ()).unwrap_err().to_string()
}

#[test]
fn bad_claims_are_refused_naming_the_object_field_and_fix() {
    // A class that does not exist (read when a pod uses the claim).
    let e = load_error(
        &(r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: team}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.example.com}
---
"#
        .to_string()
            + &job("p", 1, "[{name: gpu, resourceClaimName: c}]")),
    );
    for part in [
        "ResourceClaim team/c",
        "spec.devices.requests[0].exactly.deviceClassName",
        "DeviceClass gpu.example.com does not exist",
    ] {
        assert!(e.contains(part), "{part} not in: {e}");
    }
    // A selector that does not compile.
    let e = load_error(
        r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: broken}
spec:
  selectors:
  - cel: {expression: "device.driver == "}
"#,
    );
    for part in [
        "DeviceClass broken",
        "spec.selectors[0].cel.expression",
        "does not compile",
    ] {
        assert!(e.contains(part), "{part} not in: {e}");
    }
    // A template that does not exist.
    let e = load_error(&job(
        "p",
        1,
        "[{name: gpu, resourceClaimTemplateName: nope}]",
    ));
    for part in [
        "Job team/p",
        "resourceClaims[0].resourceClaimTemplateName",
        "no ResourceClaimTemplate team/nope",
    ] {
        assert!(e.contains(part), "{part} not in: {e}");
    }
    // A container naming a claim the pod does not have.
    let e = load_error(&job("p", 1, "[]"));
    assert!(
        e.contains("claim \"gpu\" is not in spec.resourceClaims"),
        "{e}"
    );
    // Both nvidia.com/gpu and a claim.
    let e = load_error(
        &job("p", 1, "[{name: gpu, resourceClaimTemplateName: one-gpu}]")
            .replace("requests: {cpu: \"1\"}", "limits: {nvidia.com/gpu: 1}"),
    );
    assert!(e.contains("not both"), "{e}");
}

#[test]
fn a_cluster_dump_with_resource_slices_gives_nodes_their_dra_gpus() {
    let dump = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}
  status:
    allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: node-a-gpu.nvidia.com-abcde}
  spec:
    driver: gpu.nvidia.com
    nodeName: node-a
    pool: {name: node-a, generation: 2, resourceSliceCount: 1}
    devices:
    - name: gpu-0
      attributes:
        type: {string: gpu}
        index: {int: 0}
        productName: {string: NVIDIA A100-SXM4-40GB}
      capacity:
        memory: {value: 40Gi}
    - name: gpu-1
      attributes:
        type: {string: gpu}
        index: {int: 1}
        productName: {string: NVIDIA A100-SXM4-40GB}
      capacity:
        memory: {value: 40Gi}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: node-a-old}
  spec:
    driver: gpu.nvidia.com
    nodeName: node-a
    pool: {name: node-a, generation: 1, resourceSliceCount: 1}
    devices:
    - name: gpu-9
      attributes: {type: {string: gpu}, index: {int: 9}}
"#;
    let nodes = kestrel_objects::nodes::load_kube_nodes(&PathBuf::from("dump.yaml"), dump).unwrap();
    let gpus = &nodes[0].gpus;
    assert_eq!(gpus.len(), 2, "only the pool's newest generation counts");
    assert_eq!(gpus[1].index, 1);
    assert_eq!(gpus[1].model, "NVIDIA A100-SXM4-40GB");
    assert_eq!(gpus[1].memory_mib, 40 * 1024);
    assert_eq!(gpus[1].dra.as_ref().unwrap().name, "gpu-1");

    let twice = dump.replace("name: gpu-1", "name: gpu-0");
    let e = kestrel_objects::nodes::load_kube_nodes(&PathBuf::from("dump.yaml"), &twice)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("spec.devices[1].name") && e.contains("listed twice"),
        "{e}"
    );
}

#[test]
fn device_taint_rules_in_a_cluster_dump_keep_claims_off_the_devices_they_name() {
    let dump = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}}
  status:
    allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
- apiVersion: resource.k8s.io/v1
  kind: ResourceSlice
  metadata: {name: node-a-gpu.nvidia.com-abcde}
  spec:
    driver: gpu.nvidia.com
    nodeName: node-a
    pool: {name: node-a, generation: 1, resourceSliceCount: 1}
    devices:
    - name: gpu-0
      attributes: {type: {string: gpu}, index: {int: 0}}
    - name: gpu-1
      attributes: {type: {string: gpu}, index: {int: 1}}
- apiVersion: resource.k8s.io/v1
  kind: DeviceTaintRule
  metadata: {name: gpu-1-xid-79}
  spec:
    deviceSelector: {driver: gpu.nvidia.com, pool: node-a, device: gpu-1}
    taint: {key: gpu.nvidia.com/xid, value: "79", effect: NoSchedule}
- apiVersion: resource.k8s.io/v1
  kind: DeviceTaintRule
  metadata: {name: informational}
  spec:
    taint: {key: example.com/maintenance-soon, effect: None}
"#;
    let load =
        |text: &str| kestrel_objects::nodes::load_kube_nodes(&PathBuf::from("dump.yaml"), text);
    let nodes = load(dump).unwrap();
    let taints = |i: usize| nodes[0].gpus[i].dra.as_ref().unwrap().taints.clone();
    assert!(taints(0).is_empty(), "an effect of None only informs");
    assert_eq!(taints(1).len(), 1);
    assert_eq!(taints(1)[0].key, "gpu.nvidia.com/xid");

    // Two pods claiming a GPU each: one takes gpu-0, the other waits for an untainted GPU.
    let cluster = SimCluster {
        nodes,
        ..SimCluster::default()
    };
    let work = workload(&job(
        "pair",
        2,
        "[{name: gpu, resourceClaimTemplateName: one-gpu}]",
    ))
    .unwrap();
    let mut sim = Simulation::new(&cluster, &work, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let placed: Vec<Vec<u32>> = sim
        .scheduler()
        .pods()
        .filter_map(|(_, r)| match &r.phase {
            PodPhase::Bound { gpus, .. } => Some(gpus.indices()),
            _ => None,
        })
        .collect();
    assert_eq!(placed, [vec![0]], "gpu-1 is tainted");

    let bad = dump.replace("effect: NoSchedule", "effect: PreferNoSchedule");
    let e = load(&bad).unwrap_err().to_string();
    assert!(
        e.contains("gpu-1-xid-79") && e.contains("spec.taint.effect"),
        "{e}"
    );
}

/// A class whose devices count as `whole-gpus` in queue quota, a template of 2 of them,
/// and a Kueue ClusterQueue with 6 `whole-gpus`.
const COUNTED: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: counted-gpus
  annotations: {kestrel.dev/quota-resource: whole-gpus}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-counted, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: counted-gpus, count: 2}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, whole-gpus]
    flavors:
    - name: default
      resources:
      - {name: cpu, nominalQuota: 100}
      - {name: whole-gpus, nominalQuota: 6}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: main, namespace: team}
spec: {clusterQueue: team}
---
"#;

fn queued_job(name: &str, claims: &str) -> String {
    job(name, 1, claims).replacen(
        "  namespace: team\n",
        "  namespace: team\n  labels: {kueue.x-k8s.io/queue-name: main}\n",
        1,
    )
}

#[test]
fn claims_count_against_queue_quota_as_their_class_says() {
    let mut work = COUNTED.to_string();
    for i in 0..5 {
        work += &queued_job(
            &format!("j{i}"),
            "[{name: gpu, resourceClaimTemplateName: two-counted}]",
        );
    }
    let queued = workload(&work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &queued, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let bound: Vec<String> = (0..5)
        .filter(|i| bound_devices(&sim, &format!("j{i}-0")).is_some())
        .map(|i| format!("j{i}"))
        .collect();
    let id = find_pod(&sim, "j0-0").unwrap();
    let first = format!("{:?}", sim.scheduler().pod(id).pending_reason);
    assert_eq!(
        bound,
        ["j0", "j1", "j2"],
        "6 whole-gpus hold three 2-GPU claims; j0: {first}"
    );
    let id = find_pod(&sim, "j3-0").unwrap();
    let reason = sim
        .scheduler()
        .pod(id)
        .pending_reason
        .as_ref()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("needs 2 more whole-gpus: 6 in use of nominal 6"),
        "{reason}"
    );
    let (cq, _) = sim.scheduler().cluster_queues().next().unwrap();
    let usage = sim.scheduler().queue_usage(cq);
    let whole = usage
        .iter()
        .find(|u| u.resource == "whole-gpus")
        .expect("whole-gpus usage");
    assert_eq!(whole.used, 6);
    assert!(
        usage
            .iter()
            .all(|u| u.resource != GPU_RESOURCE || u.used == 0),
        "the devices count as whole-gpus only: {usage:?}"
    );
    // A claim whose class the queue has no quota for waits, the resource named.
    let work = COUNTED.to_string()
        + &queued_job("plain", "[{name: gpu, resourceClaimTemplateName: one-gpu}]");
    let workload = workload(&work).unwrap();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let id = find_pod(&sim, "plain-0").unwrap();
    let reason = sim
        .scheduler()
        .pod(id)
        .pending_reason
        .as_ref()
        .unwrap()
        .to_string();
    assert!(
        reason.contains("ClusterQueue team has no quota for nvidia.com/gpu"),
        "{reason}"
    );
}

#[test]
fn namespace_resource_quotas_count_the_claims_pods_make_and_their_devices() {
    for (key, hard, created) in [
        ("gpu.nvidia.com.deviceclass.resource.k8s.io/devices", 5, 2),
        ("count/resourceclaims.resource.k8s.io", 3, 3),
    ] {
        let work = format!(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {{name: dra, namespace: team}}\n\
             spec: {{hard: {{{key}: \"{hard}\"}}}}\n---\n"
        ) + &job(
            "two",
            4,
            "[{name: gpu, resourceClaimTemplateName: two-gpus}]",
        ) + r#"
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: two-gpus, namespace: team}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com, count: 2}
"#;
        let workload = workload(&work).unwrap();
        let cluster = cluster();
        let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
        sim.run_to(MIN).unwrap();
        let bound = (0..4)
            .filter(|i| bound_devices(&sim, &format!("two-{i}")).is_some())
            .count();
        assert_eq!(bound, created, "{key}: {hard}");
        sim.run_to(300 * MIN).unwrap();
        let report = sim.finish();
        assert_eq!(
            report.pods.completed, 4,
            "{key}: refused creations are retried"
        );
    }
}

#[test]
fn a_bad_quota_resource_on_a_class_is_refused_naming_the_field() {
    let e = load_error(
        r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: wrong
  annotations: {kestrel.dev/quota-resource: cpu}
spec: {}
"#,
    );
    for part in [
        "DeviceClass wrong",
        "kestrel.dev/quota-resource",
        "\"cpu\" is not a quota resource for devices",
    ] {
        assert!(e.contains(part), "{part} not in: {e}");
    }
}

#[test]
fn a_preemptor_with_a_claim_takes_the_devices_its_victims_claims_held() {
    let classes = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 1000
---
"#;
    // 16 one-GPU pods fill both nodes' DRA GPUs for 30 minutes; at 10 minutes an urgent
    // pod claims 4 GPUs on one NUMA node.
    let urgent = r#"
apiVersion: v1
kind: Pod
metadata:
  name: urgent
  namespace: team
  annotations: {kestrel.dev/sim-arrival: 10m, kestrel.dev/sim-duration: 30m}
spec:
  priorityClassName: urgent
  resourceClaims: [{name: gpu, resourceClaimTemplateName: four-big-gpus}]
  containers:
  - name: main
    image: trainer
    resources:
      requests: {cpu: "1"}
      claims: [{name: gpu}]
---
"#;
    let work = classes.to_string()
        + &job(
            "fill",
            16,
            "[{name: gpu, resourceClaimTemplateName: one-gpu}]",
        )
        + urgent;
    let workload = workload(&work).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(5 * MIN).unwrap();
    assert_eq!(sim.scheduler().held_claims().count(), 16);
    sim.run_to(12 * MIN).unwrap();
    let (node, gpus) = bound_devices(&sim, "urgent").expect("the urgent pod runs");
    assert_eq!(gpus.len(), 4);
    // Its victims are gone and their claims released: every device is held once, by
    // the claims of the pods still bound.
    let mut held = std::collections::BTreeSet::new();
    let mut bound_fill = 0;
    for (id, record) in sim.scheduler().pods() {
        if let PodPhase::Bound { node, gpus, .. } = &record.phase {
            if record.spec.name.starts_with("fill-") {
                bound_fill += 1;
            }
            for index in gpus.indices() {
                assert!(held.insert((*node, index)), "GPU {index} given twice");
            }
            assert_eq!(sim.scheduler().pod_claim_allocations(id).len(), 1);
        }
    }
    assert_eq!(bound_fill, 12, "four one-GPU pods made room, no more");
    assert_eq!(sim.scheduler().held_claims().count(), 13);
    assert!(held.contains(&(node, gpus[0])));
}

/// A DeviceClass with `spec.extendedResourceName: nvidia.com/gpu`, as NVIDIA's DRA driver
/// ships it for pods written for the device plugin.
const GPU_BACKING_CLASS: &str = r#"
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu-extended, creationTimestamp: "2026-01-02T00:00:00Z"}
spec:
  extendedResourceName: nvidia.com/gpu
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com'"}
---
"#;

#[test]
fn a_device_class_naming_nvidia_gpu_serves_plugin_pods_from_dra_gpus_and_none_twice() {
    let plugin_job = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: plugin, namespace: team, annotations: {kestrel.dev/sim-duration: 30m}}
spec:
  parallelism: 5
  completions: 5
  template:
    spec:
      containers:
      - name: main
        image: x
        resources: {limits: {nvidia.com/gpu: 2}}
---
"#;
    // Without the class the pods stay pending (see the test above); with it, five pods of
    // two GPUs and four one-GPU claims share the 16 GPUs, none twice, and a sixth claim
    // waits.
    let work = GPU_BACKING_CLASS.to_string()
        + plugin_job
        + &job(
            "one",
            7,
            "[{name: gpu, resourceClaimTemplateName: one-gpu}]",
        );
    let workload = workload(&work).unwrap();
    assert_eq!(
        workload.gpu_backing.as_ref().map(|b| b.class.as_str()),
        Some("gpu-extended")
    );
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let mut used = std::collections::BTreeSet::new();
    let mut bound = 0;
    for pod in (0..5)
        .map(|i| format!("plugin-{i}"))
        .chain((0..7).map(|i| format!("one-{i}")))
    {
        if let Some((node, gpus)) = bound_devices(&sim, &pod) {
            bound += 1;
            for gpu in gpus {
                assert!(
                    used.insert((node, gpu)),
                    "{pod}: GPU {gpu} of {node:?} twice"
                );
            }
        }
    }
    assert_eq!(used.len(), 16);
    assert_eq!(bound, 5 + 6, "every plugin pod and six claims fit");
    for i in 0..5 {
        assert!(
            bound_devices(&sim, &format!("plugin-{i}")).is_some(),
            "plugin-{i}"
        );
    }
}

#[test]
fn a_class_that_does_not_accept_a_nodes_gpus_does_not_serve_nvidia_gpu_there() {
    let class = GPU_BACKING_CLASS.replace("'gpu.nvidia.com'", "'other.example.com'");
    let workload = workload(&(class + PLUGIN_POD)).unwrap();
    let cluster = cluster();
    let mut sim = Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(MIN).unwrap();
    let id = find_pod(&sim, "plugin-pod").unwrap();
    assert_eq!(sim.scheduler().pod(id).phase, PodPhase::Pending);
}

#[test]
fn two_classes_naming_nvidia_gpu_the_newest_serves_it_and_a_warning_names_the_other() {
    let older = GPU_BACKING_CLASS
        .replace("gpu-extended", "gpu-older")
        .replace("2026-01-02", "2025-06-01");
    let workload = workload(&(GPU_BACKING_CLASS.to_string() + &older)).unwrap();
    assert_eq!(
        workload.gpu_backing.as_ref().map(|b| b.class.as_str()),
        Some("gpu-extended")
    );
    let warning = workload
        .queues
        .warnings
        .iter()
        .map(|w| w.to_string())
        .find(|w| w.contains("extendedResourceName"))
        .expect("a warning on the clash");
    assert!(
        warning.contains("gpu-older") && warning.contains("gpu-extended"),
        "{warning}"
    );
}
