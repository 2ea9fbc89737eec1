//! PersistentVolumeClaims in workload files: a bound volume's node affinity, a
//! WaitForFirstConsumer class's allowed topologies, ReadWriteOncePod claims and generic
//! ephemeral volumes, simulated; and claims the files lack, refused with the pod's field.

mod zoned;

use kestrel_sim::SimConfig;
use zoned::{cluster, read, run};

/// A Job of `pods` pods of 1 cpu for an hour, mounting `volumes` (YAML list items).
fn job(pods: u32, volumes: &str) -> String {
    format!(
        "apiVersion: batch/v1
kind: Job
metadata: {{name: train, namespace: ml}}
spec:
  parallelism: {pods}
  completions: {pods}
  template:
    metadata:
      annotations: {{kestrel.dev/sim-duration: 1h}}
    spec:
      restartPolicy: Never
      volumes: {volumes}
      containers:
      - name: main
        image: trainer
        resources: {{requests: {{cpu: '1'}}}}
"
    )
}

const ZONAL_VOLUME: &str = "apiVersion: v1
kind: PersistentVolume
metadata: {name: disk-b}
spec:
  capacity: {storage: 10Gi}
  accessModes: [ReadOnlyMany]
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [b]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: dataset, namespace: ml}
spec:
  accessModes: [ReadOnlyMany]
  volumeName: disk-b
  resources: {requests: {storage: 10Gi}}
---
";

#[test]
fn a_bound_volumes_node_affinity_keeps_its_pods_in_its_zone() {
    let yaml = format!(
        "{ZONAL_VOLUME}{}",
        job(
            4,
            "[{name: data, persistentVolumeClaim: {claimName: dataset}}]"
        )
    );
    let (placed, reasons) = run(&["a", "a", "b", "c"], &yaml);
    assert_eq!(placed.len(), 4, "{reasons:?}");
    assert!(
        placed.values().all(|n| n == "n2"),
        "zone b is n2 alone: {placed:?}"
    );
}

#[test]
fn a_wait_for_first_consumer_claim_goes_where_its_class_may_provision() {
    let yaml = format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: zonal
  annotations: {{storageclass.kubernetes.io/is-default-class: 'true'}}
provisioner: csi.example.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
- matchLabelExpressions: [{{key: topology.kubernetes.io/zone, values: [c]}}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: scratch, namespace: ml}}
spec:
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 10Gi}}}}
---
{}",
        job(
            1,
            "[{name: s, persistentVolumeClaim: {claimName: scratch}}]"
        )
    );
    let (placed, reasons) = run(&["a", "b", "c"], &yaml);
    assert_eq!(placed.values().collect::<Vec<_>>(), ["n2"], "{reasons:?}");

    // Generic ephemeral volumes of that (default) class: each pod's own claim, in zone c.
    let yaml = yaml.replace(
        "[{name: s, persistentVolumeClaim: {claimName: scratch}}]",
        "[{name: s, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}}}]",
    ).replace("parallelism: 1", "parallelism: 3").replace("completions: 1", "completions: 3");
    let (placed, reasons) = run(&["a", "b", "c"], &yaml);
    assert_eq!(placed.len(), 3, "{reasons:?}");
    assert!(placed.values().all(|n| n == "n2"), "{placed:?}");

    // No node in the class's topologies: pending, in kube-scheduler's words.
    let (placed, reasons) = run(&["a", "b"], &yaml);
    assert!(placed.is_empty());
    assert!(
        reasons[0].contains("2 node(s) didn't find available persistent volumes to bind"),
        "{reasons:?}"
    );
}

#[test]
fn a_read_write_once_pod_claim_is_used_by_one_pod_at_a_time() {
    let yaml = format!(
        "apiVersion: v1
kind: PersistentVolume
metadata: {{name: ckpt}}
spec:
  capacity: {{storage: 10Gi}}
  accessModes: [ReadWriteOncePod]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: ckpt, namespace: ml}}
spec:
  accessModes: [ReadWriteOncePod]
  volumeName: ckpt
  resources: {{requests: {{storage: 10Gi}}}}
---
{}",
        job(2, "[{name: c, persistentVolumeClaim: {claimName: ckpt}}]")
    );
    let (placed, reasons) = run(&["a", "b"], &yaml);
    assert_eq!(placed.len(), 1, "{placed:?}");
    assert_eq!(reasons.len(), 1);
    assert!(
        reasons[0].contains("ReadWriteOncePod access mode"),
        "{reasons:?}"
    );
    // The second runs once the first has ended.
    let report = kestrel_sim::simulate(
        &cluster(&["a", "b"]),
        &read(&yaml).unwrap(),
        SimConfig::default(),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!((report.pods.completed, report.span), (2, 2 * 3_600_000));
}

#[test]
fn claims_the_files_lack_are_refused_with_the_pods_field() {
    let err = read(&job(
        1,
        "[{name: cfg, configMap: {name: x}}, {name: d, persistentVolumeClaim: {claimName: nope}}]",
    ))
    .unwrap_err();
    assert!(err.contains("spec.template.spec.volumes[1]"), "{err}");
    assert!(
        err.contains("persistentvolumeclaim \"nope\" not found"),
        "{err}"
    );
    assert!(err.contains("kind: PersistentVolumeClaim"), "{err}");

    let err = read(&job(
        1,
        "[{name: d, persistentVolumeClaim: {claimName: other/data}}]",
    ))
    .unwrap_err();
    assert!(err.contains("its own namespace"), "{err}");

    let err = read(&format!(
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: data, namespace: ml}}
spec:
  storageClassName: missing
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: 1Gi}}}}
---
{}",
        job(1, "[{name: d, persistentVolumeClaim: {claimName: data}}]")
    ))
    .unwrap_err();
    assert!(
        err.contains("names StorageClass \"missing\", which does not exist"),
        "{err}"
    );
}

#[test]
fn csi_volume_limits_cap_the_volumes_a_node_attaches() {
    let yaml = format!(
        "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: block
  annotations: {{storageclass.kubernetes.io/is-default-class: 'true'}}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
---
{}",
        job(
            3,
            "[{name: s, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}}}}]"
        )
    );
    let mut cluster = cluster(&["a", "a"]);
    for n in &mut cluster.nodes {
        n.volume_limits.insert("ebs.csi.aws.com".into(), 1);
    }
    let workload = read(&yaml).unwrap();
    let mut sim = kestrel_sim::Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(60_000).unwrap();
    let placed = sim.placements();
    let nodes: std::collections::BTreeSet<&str> =
        placed.iter().map(|(_, n, _)| n.as_str()).collect();
    assert_eq!(placed.len(), 2, "one volume per node");
    assert_eq!(nodes.len(), 2);
    let reasons: Vec<String> = sim
        .scheduler()
        .pods()
        .filter_map(|(_, r)| r.pending_reason.as_ref().map(|u| u.to_string()))
        .collect();
    assert_eq!(
        reasons,
        ["0/2 nodes are available: 2 node(s) exceed max volume count."]
    );
    // When a pod ends, its volume is detached and the third pod goes.
    sim.run_to(3_700_000).unwrap();
    assert_eq!(sim.placements().len(), 1);
    sim.run_to(8_000_000).unwrap();
    assert_eq!(sim.finish().pods.completed, 3);
}

/// A pod of 1 cpu for an hour mounting claims `claims` (`ml/<claim>`).
fn pod_with(name: &str, claims: &[&str]) -> String {
    let volumes: Vec<String> = claims
        .iter()
        .map(|c| format!("{{name: {c}, persistentVolumeClaim: {{claimName: {c}}}}}"))
        .collect();
    format!(
        "apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  annotations: {{kestrel.dev/sim-duration: 1h}}
spec:
  volumes: [{}]
  containers:
  - name: main
    image: trainer
    resources: {{requests: {{cpu: '1'}}}}
---
",
        volumes.join(", ")
    )
}

/// The class of local disks (no provisioner), a local volume on `node` of `size`, and
/// claims of `size` in it.
const LOCAL_CLASS: &str = "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: local}
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
";

fn local_volume(name: &str, node: &str, size: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata: {{name: {name}}}
spec:
  storageClassName: local
  capacity: {{storage: {size}}}
  accessModes: [ReadWriteOnce]
  local: {{path: /mnt/disks/{name}}}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{{key: kubernetes.io/hostname, operator: In, values: [{node}]}}]
---
"
    )
}

fn local_claim(name: &str, size: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: ml}}
spec:
  storageClassName: local
  accessModes: [ReadWriteOnce]
  resources: {{requests: {{storage: {size}}}}}
---
"
    )
}

#[test]
fn claims_of_a_class_without_a_provisioner_take_local_volumes_one_claim_each() {
    // Local disks on n0, n1 and n2; none on n3. Four pods, each with a claim of its own,
    // and a fifth sharing the first one's claim.
    let mut yaml = LOCAL_CLASS.to_string();
    for i in 0..3 {
        yaml += &local_volume(&format!("disk-n{i}"), &format!("n{i}"), "10Gi");
    }
    for i in 0..4 {
        yaml += &local_claim(&format!("c{i}"), "5Gi");
        yaml += &pod_with(&format!("p{i}"), &[&format!("c{i}")]);
    }
    yaml += &pod_with("p0-reader", &["c0"]);
    let cluster = cluster(&["a"; 4]);
    let workload = read(&yaml).unwrap();
    let mut sim = kestrel_sim::Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(60_000).unwrap();
    let placed: std::collections::BTreeMap<String, String> = sim
        .placements()
        .into_iter()
        .map(|(pod, node, _)| (pod, node))
        .collect();
    let mut nodes: Vec<&String> = ["ml/p0", "ml/p1", "ml/p2"]
        .iter()
        .filter_map(|p| placed.get(*p))
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["n0", "n1", "n2"], "one disk each: {placed:?}");
    for (pod, claim) in [("ml/p0", "ml/c0"), ("ml/p1", "ml/c1"), ("ml/p2", "ml/c2")] {
        let binding = sim.scheduler().claim_binding(claim).expect("bound");
        assert_eq!(
            binding.target,
            kestrel_core::ClaimTarget::Volume(format!("disk-{}", placed[pod])),
            "the disk of the pod's node"
        );
    }
    assert_eq!(
        placed.get("ml/p0-reader"),
        placed.get("ml/p0"),
        "a pod sharing a claim follows the volume it was bound to"
    );
    assert_eq!(placed.get("ml/p3"), None, "no disk left: {placed:?}");
    let reason = sim
        .scheduler()
        .pods()
        .find(|(_, r)| r.spec.name == "p3")
        .and_then(|(_, r)| r.pending_reason.as_ref().map(|u| u.to_string()))
        .expect("p3 pending");
    assert!(
        reason.contains("4 node(s) didn't find available persistent volumes to bind"),
        "{reason}"
    );
    assert!(sim.scheduler().claim_binding("ml/c3").is_none());
}

#[test]
fn a_pods_claims_take_the_smallest_volumes_that_fit_and_immediate_claims_bind_at_once() {
    // n0 has a small and a big disk, n1 a big one only: the pod's two claims need both of
    // n0's, the small claim the small disk.
    let yaml = format!(
        "{LOCAL_CLASS}{}{}{}{}{}{}",
        local_volume("big-n0", "n0", "1Ti"),
        local_volume("small-n0", "n0", "20Gi"),
        local_volume("big-n1", "n1", "1Ti"),
        local_claim("small", "10Gi"),
        local_claim("large", "500Gi"),
        pod_with("p", &["small", "large"]),
    );
    let cluster = cluster(&["a", "a"]);
    let workload = read(&yaml).unwrap();
    let mut sim = kestrel_sim::Simulation::new(&cluster, &workload, SimConfig::default()).unwrap();
    sim.run_to(60_000).unwrap();
    assert_eq!(sim.placements()[0].1, "n0");
    let target = |claim: &str| sim.scheduler().claim_binding(claim).unwrap().target.clone();
    assert_eq!(
        target("ml/small"),
        kestrel_core::ClaimTarget::Volume("small-n0".into())
    );
    assert_eq!(
        target("ml/large"),
        kestrel_core::ClaimTarget::Volume("big-n0".into())
    );

    // A class with Immediate binding: the volume controller binds the claim to the
    // smallest volume that matches before any pod runs, so the pod follows that volume.
    let immediate = yaml
        .replace(
            "volumeBindingMode: WaitForFirstConsumer",
            "volumeBindingMode: Immediate",
        )
        .replace(
            &pod_with("p", &["small", "large"]),
            &pod_with("p", &["small"]),
        );
    let (placed, reasons) = run(&["a", "a"], &immediate);
    assert_eq!(
        placed.get("ml/p").map(String::as_str),
        Some("n0"),
        "{reasons:?}"
    );

    // Without a volume that matches, an Immediate claim of such a class stays unbound.
    let err = read(&immediate.replace("storage: 10Gi", "storage: 2Ti")).unwrap_err();
    assert!(
        err.contains("pod has unbound immediate PersistentVolumeClaims"),
        "{err}"
    );
}
