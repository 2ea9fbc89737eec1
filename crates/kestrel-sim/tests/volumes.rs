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
