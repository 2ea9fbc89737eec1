use super::*;
use kestrel_core::TolerationOperator;
use kestrel_core::{
    BorrowWithinCohort, DisruptionLimit, FlavorQuotas, IntOrPercent, QueuePreemption,
    QueueingStrategy, ReclaimPolicy, Requirement, ResourceGroup, ResourceQuota, SelectorOperator,
    StopPolicy, WithinQueuePreemption,
};

fn yaml(s: &str) -> Value {
    serde_saphyr::from_str(s).unwrap()
}

fn parse(s: &str) -> Result<QueueDocument, LoadError> {
    parse_queue_document(Path::new("q.yaml"), "document 1", &yaml(s)).map(|(doc, _)| doc)
}

fn warnings(s: &str) -> Vec<String> {
    parse_queue_document(Path::new("q.yaml"), "document 1", &yaml(s))
        .unwrap_or_else(|e| panic!("{e}"))
        .1
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn cq(s: &str) -> ClusterQueueSpec {
    match parse(s).unwrap_or_else(|e| panic!("{e}")) {
        QueueDocument::ClusterQueue(q) => q,
        other => panic!("{other:?}"),
    }
}

fn err(s: &str) -> String {
    parse(s).unwrap_err().to_string()
}

fn assert_names(e: &str, parts: &[&str]) {
    assert!(e.starts_with("q.yaml: "), "{e}");
    for p in parts {
        assert!(e.contains(p), "{e:?} lacks {p:?}");
    }
}

const KUEUE_CQ: &str = r#"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: research
spec:
  cohort: ai
  namespaceSelector:
    matchLabels: {team: research}
    matchExpressions:
    - {key: tier, operator: NotIn, values: [sandbox]}
  queueingStrategy: StrictFIFO
  flavorFungibility: {whenCanBorrow: Borrow}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 64}
      - {name: memory, nominalQuota: 512Gi}
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 16
        borrowingLimit: "16"
        lendingLimit: 4
    - name: h100-spot
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 500m}
  preemption:
    withinClusterQueue: LowerPriority
    reclaimWithinCohort: Any
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
  fairSharing: {weight: "2"}
  stopPolicy: Hold
  minRuntimeSeconds: 600
  preemptionDelaySeconds: 30
"#;

#[test]
fn kueue_cluster_queue_maps_every_field() {
    let q = cq(KUEUE_CQ);
    let expected = ClusterQueueSpec {
        name: "research".into(),
        cohort: Some("ai".into()),
        namespace_selector: Some(vec![
            Requirement {
                key: "team".into(),
                operator: SelectorOperator::In,
                values: vec!["research".into()],
            },
            Requirement {
                key: "tier".into(),
                operator: SelectorOperator::NotIn,
                values: vec!["sandbox".into()],
            },
        ]),
        queueing_strategy: QueueingStrategy::StrictFifo,
        resource_groups: vec![
            ResourceGroup {
                covered: vec!["cpu".into(), "memory".into()],
                flavors: vec![FlavorQuotas {
                    flavor: "default-flavor".into(),
                    resources: vec![
                        ResourceQuota {
                            name: "cpu".into(),
                            nominal: 64_000,
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                        ResourceQuota {
                            name: "memory".into(),
                            nominal: 512 << 30,
                            borrowing_limit: None,
                            lending_limit: None,
                        },
                    ],
                }],
            },
            ResourceGroup {
                covered: vec!["nvidia.com/gpu".into()],
                flavors: vec![
                    FlavorQuotas {
                        flavor: "h100".into(),
                        resources: vec![ResourceQuota {
                            name: "nvidia.com/gpu".into(),
                            nominal: 16_000,
                            borrowing_limit: Some(16_000),
                            lending_limit: Some(4_000),
                        }],
                    },
                    FlavorQuotas {
                        flavor: "h100-spot".into(),
                        resources: vec![ResourceQuota {
                            name: "nvidia.com/gpu".into(),
                            nominal: 500,
                            borrowing_limit: None,
                            lending_limit: None,
                        }],
                    },
                ],
            },
        ],
        preemption: QueuePreemption {
            within_cluster_queue: WithinQueuePreemption::LowerPriority,
            reclaim_within_cohort: ReclaimPolicy::Any,
            borrow_within_cohort: Some(BorrowWithinCohort {
                max_priority_threshold: Some(100),
            }),
        },
        fair_weight: 2.0,
        stop_policy: StopPolicy::Hold,
        min_runtime: Some(600_000),
        preemption_delay: Some(30_000),
        inactive: None,
        cluster_scoped: false,
        borrow_in_first_fitting_flavor: true,
        keeps_borrowed_quota: false,
    };
    assert_eq!(q, expected);
}

#[test]
fn defaults_and_selector_forms() {
    let q = cq("apiVersion: kueue.x-k8s.io/v1beta2\nkind: ClusterQueue\nmetadata: {name: a}\nspec:\n  namespaceSelector: {}\n  resourceGroups: [{coveredResources: [nvidia.com/gpu], flavors: [{name: f, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}]}]\n");
    assert_eq!(q.namespace_selector, Some(vec![]), "{{}} selects all");
    assert_eq!(q.cohort, None);
    assert_eq!(q.queueing_strategy, QueueingStrategy::BestEffortFifo);
    assert_eq!(q.preemption, QueuePreemption::default());
    assert_eq!(q.fair_weight, 1.0);
    assert_eq!(q.stop_policy, StopPolicy::None);
    assert_eq!((q.min_runtime, q.preemption_delay), (None, None));
    let q = cq("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: a}\nspec: {fairSharing: {weight: 500m}, preemption: {borrowWithinCohort: {policy: Never, maxPriorityThreshold: 5}}}\n");
    assert_eq!(q.namespace_selector, None, "absent: not restricted");
    assert_eq!(q.fair_weight, 0.5);
    assert_eq!(q.preemption.borrow_within_cohort, None);
    assert!(q.resource_groups.is_empty());
}

#[test]
fn kestrel_spelling_reads_the_same_and_refuses_unknown_fields() {
    let q = cq(&KUEUE_CQ
        .replace("kueue.x-k8s.io/v1beta1", "scheduling.kestrel.dev/v1alpha1")
        .replace("cohort: ai", "cohortName: ai"));
    assert_eq!(q, cq(KUEUE_CQ));
    let e = err(&KUEUE_CQ
        .replace("kueue.x-k8s.io/v1beta1", "scheduling.kestrel.dev/v1alpha1")
        .replace(
            "  queueingStrategy:",
            "  admissionChecks: [prov]\n  queueingStrategy:",
        ));
    assert_names(
        &e,
        &[
            "ClusterQueue research",
            "spec.admissionChecks",
            "unknown field",
            "cohortName",
        ],
    );
    let e = err("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: LocalQueue\nmetadata: {name: q, namespace: ml}\nspec: {clusterQueue: a, clusterqueue: b}\n");
    assert_names(
        &e,
        &["LocalQueue ml/q", "spec.clusterqueue", "clusterQueue"],
    );
}

#[test]
fn bad_cluster_queues_name_the_field_and_the_choices() {
    let e = err(&KUEUE_CQ.replace("StrictFIFO", "FIFO"));
    assert_names(
        &e,
        &[
            "ClusterQueue research",
            "field spec.queueingStrategy",
            "\"FIFO\"",
            "StrictFIFO, BestEffortFIFO",
        ],
    );
    let e = err(&KUEUE_CQ.replace("nominalQuota: 500m", "nominalQuota: 5x"));
    assert_names(
        &e,
        &[
            "field spec.resourceGroups[1].flavors[1].resources[0].nominalQuota",
            "\"5x\"",
            "not a Kubernetes quantity",
        ],
    );
    let e = err(&KUEUE_CQ.replace("nominalQuota: 512Gi", "nominalQuota: -1Gi"));
    assert_names(
        &e,
        &[
            "field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota",
            "negative",
        ],
    );
    let e = err(&KUEUE_CQ.replace("{name: cpu, nominalQuota: 64}", "{name: cpu}"));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota",
            "missing",
        ],
    );
    let e = err(&KUEUE_CQ.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Always"));
    assert_names(
        &e,
        &[
            "spec.preemption.reclaimWithinCohort",
            "\"Always\"",
            "Never, LowerPriority, Any",
        ],
    );
    let e = err(&KUEUE_CQ.replace(
        "withinClusterQueue: LowerPriority",
        "withinClusterQueue: Lower",
    ));
    assert_names(
        &e,
        &[
            "spec.preemption.withinClusterQueue",
            "LowerOrNewerEqualPriority",
        ],
    );
    let e = err(&KUEUE_CQ.replace("policy: LowerPriority", "policy: Any"));
    assert_names(
        &e,
        &[
            "spec.preemption.borrowWithinCohort.policy",
            "Never, LowerPriority",
        ],
    );
    let e = err(&KUEUE_CQ.replace("reclaimWithinCohort: Any", "reclaimWithinCohort: Never"));
    assert_names(
        &e,
        &[
            "spec.preemption.borrowWithinCohort.policy",
            "reclaimWithinCohort",
        ],
    );
    let e = err(&KUEUE_CQ.replace("stopPolicy: Hold", "stopPolicy: Stop"));
    assert_names(&e, &["spec.stopPolicy", "None, Hold, HoldAndDrain"]);
    let e = err(&KUEUE_CQ.replace("weight: \"2\"", "weight: heavy"));
    assert_names(&e, &["spec.fairSharing.weight", "\"heavy\""]);
    let e = err(&KUEUE_CQ.replace("lendingLimit: 4", "lendingLimit: 17"));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[1].flavors[0].resources[0].lendingLimit",
            "nominalQuota",
        ],
    );
    let e = err(&KUEUE_CQ.replace("  cohort: ai\n", ""));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[1].flavors[0].resources[0].borrowingLimit",
            "cohort",
        ],
    );
    let e = err(&KUEUE_CQ.replace(
        "{name: memory, nominalQuota: 512Gi}",
        "{name: nvidia.com/gpu, nominalQuota: 1}",
    ));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[0].flavors[0].resources[1].name",
            "coveredResources",
        ],
    );
    let e = err(&KUEUE_CQ.replace(
        "coveredResources: [nvidia.com/gpu]",
        "coveredResources: [nvidia.com/gpu, cpu]",
    ));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[1].coveredResources[1]",
            "spec.resourceGroups[0]",
        ],
    );
    let e = err(&KUEUE_CQ.replace("name: h100-spot", "name: default-flavor"));
    assert_names(
        &e,
        &[
            "spec.resourceGroups[1].flavors[1].name",
            "one resource group",
        ],
    );
    let e = err(&KUEUE_CQ.replace("operator: NotIn", "operator: Gt"));
    assert_names(
        &e,
        &[
            "spec.namespaceSelector.matchExpressions[0].operator",
            "In, NotIn, Exists, DoesNotExist",
        ],
    );
    let e = err(&KUEUE_CQ.replace("minRuntimeSeconds: 600", "minRuntimeSeconds: -5"));
    assert_names(&e, &["spec.minRuntimeSeconds", "whole number of seconds"]);
    let e = err(&KUEUE_CQ.replace("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1alpha1"));
    assert_names(
        &e,
        &[
            "field apiVersion",
            "kueue.x-k8s.io/v1beta1",
            "scheduling.kestrel.dev/v1alpha1",
        ],
    );
}

#[test]
fn local_queues_cohorts_and_flavors() {
    let QueueDocument::LocalQueue(lq) = parse("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: team}\nspec: {clusterQueue: research, stopPolicy: None}\n").unwrap() else {
            panic!()
        };
    assert_eq!(
        lq,
        LocalQueueSpec {
            namespace: "default".into(),
            name: "team".into(),
            cluster_queue: "research".into()
        }
    );
    let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: team, namespace: ml}\nspec: {}\n");
    assert_names(
        &e,
        &["LocalQueue ml/team", "field spec.clusterQueue", "missing"],
    );

    for (version, field) in [("v1alpha1", "parent"), ("v1beta1", "parentName")] {
        let QueueDocument::Cohort(c) = parse(&format!("apiVersion: kueue.x-k8s.io/{version}\nkind: Cohort\nmetadata: {{name: ai}}\nspec:\n  {field}: org\n  resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: h100, resources: [{{name: nvidia.com/gpu, nominalQuota: 8}}]}}]}}]\n")).unwrap() else {
                panic!()
            };
        assert_eq!(c.parent.as_deref(), Some("org"));
        assert_eq!(c.resource_groups[0].flavors[0].resources[0].nominal, 8000);
    }
    // A cohort's limits bound its subtree against its parent: none without a parent.
    let limited = |parent: &str| {
        format!("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {{name: ai}}\nspec:\n  {parent}resourceGroups: [{{coveredResources: [nvidia.com/gpu], flavors: [{{name: h100, resources: [{{name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 2, lendingLimit: 4}}]}}]}}]\n")
    };
    let QueueDocument::Cohort(c) = parse(&limited("parentName: org\n  ")).unwrap() else {
        panic!()
    };
    let q = &c.resource_groups[0].flavors[0].resources[0];
    assert_eq!(
        (q.borrowing_limit, q.lending_limit),
        (Some(2000), Some(4000))
    );
    assert_names(
        &err(&limited("")),
        &[
            "Cohort ai",
            "spec.resourceGroups[0].flavors[0].resources[0].borrowingLimit",
            "set spec.parentName or remove it",
        ],
    );
    // Fair sharing between cohorts is not Kestrel's: a warning naming the field.
    let w = warnings("apiVersion: kueue.x-k8s.io/v1beta2\nkind: Cohort\nmetadata: {name: ai}\nspec: {fairSharing: {weight: 2}}\n");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("Cohort ai: field spec.fairSharing.weight: Kestrel shares"),
        "{w:?}"
    );

    let QueueDocument::Flavor(f) = parse("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec:\n  nodeLabels: {pool: spot}\n  nodeTaints: [{key: spot, value: \"true\", effect: NoSchedule}]\n  tolerations: [{key: spot, operator: Exists, effect: NoSchedule}]\n").unwrap() else {
            panic!()
        };
    assert_eq!(f.name, "spot");
    assert_eq!(f.node_labels.get("pool").unwrap(), "spot");
    assert_eq!(f.node_taints[0].to_string(), "spot=true:NoSchedule");
    assert_eq!(f.tolerations[0].operator, TolerationOperator::Exists);
    let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec: {nodeTaints: [{key: spot, effect: Sometimes}]}\n");
    assert_names(
        &e,
        &[
            "ResourceFlavor spot",
            "spec.nodeTaints[0].effect",
            "NoExecute",
        ],
    );
    let e = err("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: spot}\nspec: {tolerations: [{key: spot, operator: Maybe}]}\n");
    assert_names(&e, &["spec.tolerations[0].operator", "Maybe"]);
}

#[test]
fn resource_quota_maps_to_engine_units() {
    let QueueDocument::Quota(q) = parse(
        r#"
apiVersion: v1
kind: ResourceQuota
metadata: {name: compute, namespace: research}
spec:
  hard:
    requests.cpu: "64"
    cpu: "100"
    requests.memory: 256Gi
    limits.memory: 512Gi
    requests.nvidia.com/gpu: "8"
    limits.nvidia.com/gpu: "8"
    requests.rdma/ib: "4"
    requests.storage: 1Ti
    count/pods: "50"
    services: "10"
"#,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        (q.namespace.as_str(), q.name.as_str()),
        ("research", "compute")
    );
    // Each limit on pods as written, in the units of pod requests (GPUs in devices),
    // nothing used yet; limits, storage and object counts are not read.
    let limits: Vec<_> = q.limits().collect();
    assert_eq!(
        limits,
        [
            ("count/pods", 50, 0),
            ("cpu", 100_000, 0),
            ("requests.cpu", 64_000, 0),
            ("requests.memory", 256 << 30, 0),
            ("requests.nvidia.com/gpu", 8, 0),
            ("requests.rdma/ib", 4, 0),
        ]
    );
    let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {requests.cpu: lots}}\n");
    assert_names(
        &e,
        &["ResourceQuota ml/q", "spec.hard[requests.cpu]", "\"lots\""],
    );
    // Scopes the simulator can tell from a pod are read; others are refused.
    let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {pods: \"5\"}, scopes: [BestEffort, Terminating]}\n");
    assert_names(
        &e,
        &[
            "ResourceQuota ml/q",
            "spec.scopes[1]",
            "\"Terminating\"",
            "remove the scope",
        ],
    );
    let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {pods: \"5\"}, scopeSelector: {matchExpressions: [{scopeName: PriorityClass, operator: Near}]}}\n");
    assert_names(
        &e,
        &[
            "spec.scopeSelector.matchExpressions[0].operator",
            "\"Near\"",
        ],
    );
    let e = err("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec: {hard: {requests.nvidia.com/gpu: \"-1\"}}\n");
    assert_names(&e, &["spec.hard[requests.nvidia.com/gpu]", "negative"]);
    let e = err("apiVersion: v2\nkind: ResourceQuota\nmetadata: {name: q}\n");
    assert_names(&e, &["field apiVersion", "use v1"]);
}

#[test]
fn limit_range_defaults_follow_the_api_server() {
    let QueueDocument::LimitRange(l) = parse(
        r#"
apiVersion: v1
kind: LimitRange
metadata: {name: defaults, namespace: research}
spec:
  limits:
  - type: Pod
    max: {cpu: "64"}
  - type: Container
    defaultRequest: {cpu: 500m}
    default: {cpu: "2", memory: 4Gi}
    max: {rdma/ib: "1"}
    min: {ephemeral-storage: 1Gi}
"#,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        l.container_requests,
        [
            ("cpu".to_string(), 500),
            ("ephemeral-storage".to_string(), 1 << 30),
            ("memory".to_string(), 4 << 30),
            ("rdma/ib".to_string(), 1),
        ]
        .into_iter()
        .collect()
    );
    let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d, namespace: ml}\nspec: {limits: [{type: Container, defaultRequest: {cpu: \"4\"}, default: {cpu: \"2\"}}]}\n");
    assert_names(
        &e,
        &[
            "LimitRange ml/d",
            "spec.limits[0].defaultRequest.cpu",
            "limit",
        ],
    );
    let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d}\nspec: {limits: [{type: Container, default: {nvidia.com/gpu: 500m}}]}\n");
    assert_names(&e, &["spec.limits[0].default.nvidia.com/gpu", "whole"]);
    let e = err("apiVersion: v1\nkind: LimitRange\nmetadata: {name: d}\nspec: {limits: [{type: Containers}]}\n");
    assert_names(&e, &["spec.limits[0].type", "Container, Pod"]);
}

#[test]
fn collector_refuses_names_defined_twice() {
    let mut c = QueueCollector::default();
    let p = Path::new("a.yaml");
    let doc = yaml("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: research}\nspec: {}\n");
    c.add_document(p, "document 1", &doc).unwrap();
    let kestrel = yaml("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ClusterQueue\nmetadata: {name: research}\nspec: {}\n");
    let e = c
        .add_document(Path::new("b.yaml"), "document 4", &kestrel)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("b.yaml: ClusterQueue research: field metadata.name")
            && e.contains("a.yaml document 1")
            && e.contains("b.yaml document 4"),
        "{e}"
    );
    // A LocalQueue may point at a ClusterQueue not (yet) defined.
    let lq = yaml("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {name: q, namespace: ml}\nspec: {clusterQueue: later}\n");
    c.add_document(p, "document 2", &lq).unwrap();
    let ns = yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: ml}}\n");
    c.add_document(p, "document 3", &ns).unwrap();
    c.add_document(p, "document 5", &ns).unwrap();
    let other = yaml("apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {team: cv}}\n");
    let e = c
        .add_document(p, "document 6", &other)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("Namespace ml") && e.contains("defined twice"),
        "{e}"
    );
    let lr = |name: &str, cpu: &str| {
        yaml(&format!("apiVersion: v1\nkind: LimitRange\nmetadata: {{name: {name}, namespace: ml}}\nspec: {{limits: [{{type: Container, defaultRequest: {{cpu: \"{cpu}\"}}}}]}}\n"))
    };
    c.add_document(p, "document 7", &lr("a", "1")).unwrap();
    c.add_document(p, "document 8", &lr("b", "2")).unwrap();
    assert_eq!(c.container_defaults()["ml"]["cpu"], 1000, "the first wins");
    let setup = c.into_setup();
    assert_eq!(setup.cluster_queues.len(), 1);
    assert_eq!(setup.local_queues[0].cluster_queue, "later");
    assert_eq!(setup.namespaces.len(), 1);
}

#[test]
fn pod_disruption_budgets_are_read_as_policy_v1_defines_them() {
    let pdb = |spec: &str| {
        format!(
                "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {{name: db, namespace: ml}}\nspec: {spec}\n"
            )
    };
    let QueueDocument::DisruptionBudget(b) = parse(&pdb(
        "{minAvailable: 2, selector: {matchLabels: {app: db}}}",
    ))
    .unwrap() else {
        panic!()
    };
    assert_eq!((b.namespace.as_str(), b.name.as_str()), ("ml", "db"));
    assert_eq!(b.limit, DisruptionLimit::MinAvailable(IntOrPercent::Int(2)));
    let mut labels = Labels::new();
    labels.insert("app".into(), "db".into());
    assert!(b.selects("ml", &labels) && !b.selects("ml", &Labels::new()));
    let QueueDocument::DisruptionBudget(b) =
        parse(&pdb("{maxUnavailable: \"25%\", selector: {}}")).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        b.limit,
        DisruptionLimit::MaxUnavailable(IntOrPercent::Percent(25))
    );
    assert!(b.selects("ml", &Labels::new()), "{{}} selects every pod");
    let QueueDocument::DisruptionBudget(b) = parse(&pdb("{minAvailable: \"1\"}")).unwrap() else {
        panic!()
    };
    assert!(!b.selects("ml", &Labels::new()), "no selector selects none");

    assert_names(
        &err(&pdb("{minAvailable: 1, maxUnavailable: 1}")),
        &[
            "PodDisruptionBudget ml/db",
            "spec.maxUnavailable",
            "one of the two",
        ],
    );
    assert_names(
        &err(&pdb("{selector: {}}")),
        &["PodDisruptionBudget ml/db", "spec", "minAvailable: 1"],
    );
    assert_names(
        &err(&pdb("{minAvailable: \"150%\"}")),
        &["spec.minAvailable", "\"150%\"", "\"50%\""],
    );
    assert_names(
        &err(&pdb("{maxUnavailable: -1}")),
        &["spec.maxUnavailable", "-1"],
    );
    assert_names(
            &err("apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: db}\nspec: {minAvailable: 1}\n"),
            &["apiVersion", "policy/v1"],
        );
}

#[test]
fn a_volcano_queue_maps_deserved_guarantee_capability_and_weight() {
    let text = "apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: research}
spec:
  weight: 3
  deserved: {nvidia.com/gpu: 8}
  guarantee: {resource: {nvidia.com/gpu: 2}}
  capability: {nvidia.com/gpu: 12, cpu: 64}
  affinity: {nodeGroupAffinity: {}}
";
    let q = cq(text);
    assert!(q.cluster_scoped);
    assert_eq!(q.cohort.as_deref(), Some(VOLCANO_ROOT));
    assert_eq!(q.fair_weight, 3.0);
    let group = &q.resource_groups[0];
    assert_eq!(group.flavors[0].flavor, ANY_NODE_FLAVOR);
    let quota = |name: &str| {
        group.flavors[0]
            .resources
            .iter()
            .find(|r| r.name == name)
            .cloned()
            .unwrap()
    };
    let gpu = quota("nvidia.com/gpu");
    assert_eq!(
        (gpu.nominal, gpu.borrowing_limit, gpu.lending_limit),
        (8000, Some(4000), Some(6000))
    );
    let cpu = quota("cpu");
    assert_eq!((cpu.nominal, cpu.borrowing_limit), (0, Some(64_000)));
    // Memory is not named: unlimited for this queue.
    assert_eq!(quota("memory").borrowing_limit, None);
    assert_eq!(
        warnings(text),
        vec![
            "q.yaml: Queue research: field spec.affinity: is not read by Kestrel and has no effect"
        ]
    );
}

#[test]
fn volcanos_hierarchy_by_annotations_is_warned_of_by_name() {
    let text = "apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata:
  name: prod
  annotations: {volcano.sh/hierarchy: root/eng/prod, volcano.sh/hierarchy-weights: 1/2/8}
spec: {weight: 1}
";
    let said = warnings(text);
    assert_eq!(said.len(), 2, "{said:?}");
    assert!(
        said[0].contains("Queue prod: field metadata.annotations[\"volcano.sh/hierarchy\"]")
            && said[0].contains("write spec.parent"),
        "{said:?}"
    );
}

#[test]
fn queues_read_one_by_one_get_the_structure_the_simulator_builds() {
    // What the live scheduler has: each object parsed alone, plus a Kestrel flavor.
    let docs = vec![
        parse("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: org}\nspec: {}\n").unwrap(),
        parse("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: team}\nspec: {parent: org, deserved: {nvidia.com/gpu: 2}}\n").unwrap(),
        parse("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: a100}\n").unwrap(),
    ];
    let capacity: BTreeMap<String, i64> = [("nvidia.com/gpu".to_string(), 16_000)].into();
    let (out, warnings) = cluster_wide::with_cluster_wide_structure(docs, &capacity);
    let keys: BTreeSet<(&str, String)> = out.iter().map(QueueDocument::key).collect();
    let key = |kind: &'static str, name: &str| (kind, name.to_string());
    // The parent is a cohort under the root; the flavor the queues charge is added.
    for k in [
        key("Cohort", "org"),
        key("Cohort", VOLCANO_ROOT),
        key("ClusterQueue", "team"),
        key("ResourceFlavor", ANY_NODE_FLAVOR),
        key("ResourceFlavor", "a100"),
    ] {
        assert!(keys.contains(&k), "{k:?} missing from {keys:?}");
    }
    assert!(!keys.contains(&key("ClusterQueue", "org")));
    let root = out
        .iter()
        .find_map(|d| match d {
            QueueDocument::Cohort(c) if c.name == VOLCANO_ROOT => Some(c),
            _ => None,
        })
        .unwrap();
    let gpu = root.resource_groups[0].flavors[0]
        .resources
        .iter()
        .find(|r| r.name == "nvidia.com/gpu")
        .unwrap();
    // The cluster less what the queues lend.
    assert_eq!(gpu.nominal, 14_000);
    assert!(warnings.is_empty(), "{warnings:?}");
    // Without Volcano or KAI queues nothing changes.
    let plain = vec![parse("apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: a100}\n").unwrap()];
    let (out, _) = cluster_wide::with_cluster_wide_structure(plain.clone(), &capacity);
    assert_eq!(out, plain);
}

#[test]
fn a_pods_queue_is_read_in_order_of_the_names_each_project_writes() {
    let meta = |labels: serde_json::Value, annotations: serde_json::Value| -> ObjectMeta {
        serde_json::from_value(serde_json::json!({"labels": labels, "annotations": annotations}))
            .unwrap()
    };
    let volcano_job = meta(
        serde_json::json!({}),
        serde_json::json!({"volcano.sh/queue-name": "research"}),
    );
    assert_eq!(queue_name(&[Some(&volcano_job)]), Some("research"));
    let both = meta(
        serde_json::json!({}),
        serde_json::json!({"volcano.sh/queue-name": "research", VOLCANO_QUEUE_ANNOTATION: "mine"}),
    );
    assert_eq!(queue_name(&[Some(&both)]), Some("mine"));
    let kueue = meta(
        serde_json::json!({KUEUE_QUEUE_LABEL: "team"}),
        serde_json::json!({}),
    );
    assert_eq!(queue_name(&[Some(&both), Some(&kueue)]), Some("team"));
    assert_eq!(
        queue_name(&[
            None,
            Some(&meta(serde_json::json!({}), serde_json::json!({})))
        ]),
        None
    );
}
