//! Kestrel's CRDs (generated from the Rust types) and gangs in the live path: PodGroups
//! and pods through reflector stores into the engine, all-or-nothing binds, PodGroup status
//! by server-side apply, and malformed PodGroups reported instead of crashing anything.

use http::{Request, Response};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, Node, Pod, ResourceQuota};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kestrel_core::SchedulerConfig;
use kestrel_k8s::crds::{self, PodGroupPhase};
use kestrel_kube::api::{pod_group_status_patch, ApiWriter, GpuIndicesWrite};
use kestrel_kube::deploy;
use kestrel_kube::driver::{self, Change, DriverConfig, Ended, Stores};
use kestrel_kube::index::{
    BindOutcome, ClusterState, CycleOutput, GroupStatusJob, PodState, QueueStatusJob,
};
use kestrel_kube::limiter::Limiter;
use kestrel_kube::metrics::Metrics;
use kube::api::{ApiResource, DynamicObject};
use kube::client::Body;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use kube::Client;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tower_test::mock::{self, Handle};

// ---- CRD generation ---------------------------------------------------------------------

fn crd(kind: &str) -> Value {
    deploy::crd_objects()
        .into_iter()
        .find(|c| c["spec"]["names"]["kind"] == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"))
}

fn schema(kind: &str) -> Value {
    let c = crd(kind);
    let versions = c["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    versions[0]["schema"]["openAPIV3Schema"].clone()
}

#[test]
fn every_crd_has_its_group_names_scope_and_subresources() {
    let expected = [
        ("PodGroup", "podgroups", "Namespaced", Some("pg"), true),
        ("Topology", "topologies", "Cluster", None, false),
        ("ClusterQueue", "clusterqueues", "Cluster", Some("cq"), true),
        ("LocalQueue", "localqueues", "Namespaced", Some("lq"), true),
        ("Cohort", "cohorts", "Cluster", None, false),
        ("ResourceFlavor", "resourceflavors", "Cluster", None, false),
    ];
    assert_eq!(deploy::crd_objects().len(), expected.len());
    for (kind, plural, scope, short, status) in expected {
        let c = crd(kind);
        assert_eq!(c["apiVersion"], "apiextensions.k8s.io/v1");
        assert_eq!(c["kind"], "CustomResourceDefinition");
        assert_eq!(
            c["metadata"]["name"],
            format!("{plural}.scheduling.kestrel.dev")
        );
        let spec = &c["spec"];
        assert_eq!(spec["group"], "scheduling.kestrel.dev", "{kind}");
        assert_eq!(spec["scope"], scope, "{kind}");
        assert_eq!(spec["names"]["plural"], plural);
        assert_eq!(spec["names"]["singular"], kind.to_lowercase());
        match short {
            Some(s) => assert_eq!(spec["names"]["shortNames"], json!([s]), "{kind}"),
            None => assert!(
                spec["names"]["shortNames"]
                    .as_array()
                    .is_none_or(|a| a.is_empty()),
                "{kind}"
            ),
        }
        let v = &spec["versions"][0];
        assert_eq!(v["name"], "v1alpha1");
        assert_eq!(
            (v["served"].as_bool(), v["storage"].as_bool()),
            (Some(true), Some(true))
        );
        assert_eq!(
            v["subresources"]["status"].is_object(),
            status,
            "{kind}: status subresource"
        );
    }
}

/// Walks a schema and checks Kubernetes' structural-schema rules: every node has a type
/// (or is int-or-string / preserves unknown fields), objects say what they hold, no
/// `$ref` or combinators, and only formats the API server knows.
fn check_structural(path: &str, node: &Value, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: not an object schema"));
        return;
    };
    for banned in [
        "$ref",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "definitions",
        "$defs",
    ] {
        if obj.contains_key(banned) {
            problems.push(format!("{path}: {banned}"));
        }
    }
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&json!(true));
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
    match obj.get("type").and_then(Value::as_str) {
        None if int_or_string || preserve => {}
        None => problems.push(format!("{path}: no type")),
        Some("object") => {
            let props = obj.get("properties").and_then(Value::as_object);
            let extra = obj.get("additionalProperties");
            if props.is_some() && extra.is_some() {
                problems.push(format!("{path}: properties and additionalProperties"));
            }
            if props.is_none() && !extra.is_some_and(Value::is_object) && !preserve {
                problems.push(format!("{path}: a free-form object"));
            }
            for (k, v) in props.into_iter().flatten() {
                check_structural(&format!("{path}.{k}"), v, problems);
            }
            if let Some(v) = extra.filter(|v| v.is_object()) {
                check_structural(&format!("{path}.*"), v, problems);
            }
        }
        Some("array") => match obj.get("items") {
            Some(items) => check_structural(&format!("{path}[]"), items, problems),
            None => problems.push(format!("{path}: array without items")),
        },
        Some("string" | "integer" | "number" | "boolean") => {}
        Some(other) => problems.push(format!("{path}: type {other}")),
    }
    if let Some(format) = obj.get("format").and_then(Value::as_str) {
        if !["int32", "int64", "double", "float", "date-time", "byte"].contains(&format) {
            problems.push(format!("{path}: format {format}"));
        }
    }
}

#[test]
fn every_schema_is_structural_and_quantities_are_int_or_string() {
    for c in deploy::crd_objects() {
        let kind = c["spec"]["names"]["kind"].as_str().unwrap().to_string();
        let mut problems = Vec::new();
        check_structural(&kind, &schema(&kind), &mut problems);
        assert!(problems.is_empty(), "{problems:#?}");
    }
    let quantity = |kind: &str, pointer: &str| {
        let s = schema(kind);
        let node = s
            .pointer(pointer)
            .unwrap_or_else(|| panic!("{kind}: no {pointer}"));
        assert_eq!(
            node["x-kubernetes-int-or-string"], true,
            "{kind} {pointer}: {node}"
        );
        assert!(node.get("type").is_none(), "{kind} {pointer}: {node}");
        assert!(node["pattern"].is_string());
    };
    quantity(
        "PodGroup",
        "/properties/spec/properties/minResources/additionalProperties",
    );
    let quota = "/properties/spec/properties/resourceGroups/items/properties/flavors/items/properties/resources/items/properties";
    for field in ["nominalQuota", "borrowingLimit", "lendingLimit"] {
        quantity("ClusterQueue", &format!("{quota}/{field}"));
        quantity("Cohort", &format!("{quota}/{field}"));
    }
    quantity(
        "ClusterQueue",
        "/properties/spec/properties/fairSharing/properties/weight",
    );
    let usage =
        "/properties/status/properties/flavorsUsage/items/properties/resources/items/properties";
    quantity("ClusterQueue", &format!("{usage}/total"));
    quantity("ClusterQueue", &format!("{usage}/borrowed"));
}

#[test]
fn schemas_declare_enums_minimums_defaults_and_required_fields() {
    let pg = schema("PodGroup");
    let spec = &pg["properties"]["spec"];
    assert_eq!(spec["required"], json!(["minMember"]));
    assert_eq!(
        spec["properties"]["minMember"]["minimum"].as_f64(),
        Some(1.0)
    );
    assert_eq!(spec["properties"]["minMember"]["format"], "int32");
    assert_eq!(
        spec["properties"]["scheduleTimeoutSeconds"]["minimum"].as_f64(),
        Some(0.0)
    );
    assert_eq!(
        spec["properties"]["minTaskMember"]["additionalProperties"]["minimum"].as_f64(),
        Some(0.0)
    );
    assert_eq!(
        spec["properties"]["topology"]["properties"]["sliceSize"]["minimum"].as_f64(),
        Some(1.0)
    );
    let status = &pg["properties"]["status"]["properties"];
    assert_eq!(
        status["phase"]["enum"],
        json!(["Pending", "Scheduled", "Running", "TimedOut"])
    );
    assert_eq!(status["conditions"]["x-kubernetes-list-type"], "map");
    assert_eq!(
        status["conditions"]["items"]["required"],
        json!(["lastTransitionTime", "message", "reason", "status", "type"])
    );

    let topo = schema("Topology");
    assert_eq!(topo["properties"]["spec"]["required"], json!(["levels"]));
    assert_eq!(
        topo["properties"]["spec"]["properties"]["levels"]["minItems"],
        1
    );

    let cq = schema("ClusterQueue");
    let p = &cq["properties"]["spec"]["properties"];
    assert_eq!(
        p["queueingStrategy"]["enum"],
        json!(["StrictFIFO", "BestEffortFIFO"])
    );
    assert_eq!(p["queueingStrategy"]["default"], "BestEffortFIFO");
    assert_eq!(
        p["stopPolicy"]["enum"],
        json!(["None", "Hold", "HoldAndDrain"])
    );
    assert_eq!(p["stopPolicy"]["default"], "None");
    let pre = &p["preemption"]["properties"];
    assert_eq!(
        pre["withinClusterQueue"]["enum"],
        json!(["Never", "LowerPriority", "LowerOrNewerEqualPriority"])
    );
    assert_eq!(pre["withinClusterQueue"]["default"], "Never");
    assert_eq!(
        pre["reclaimWithinCohort"]["enum"],
        json!(["Never", "LowerPriority", "Any"])
    );
    assert_eq!(
        pre["borrowWithinCohort"]["properties"]["policy"]["enum"],
        json!(["Never", "LowerPriority"])
    );
    assert_eq!(p["fairSharing"]["properties"]["weight"]["default"], "1");
    for ext in ["minRuntimeSeconds", "preemptionDelaySeconds"] {
        assert_eq!(p[ext]["minimum"].as_f64(), Some(0.0), "{ext}");
    }
    assert_eq!(p["defaultRuntimeSeconds"]["minimum"].as_f64(), Some(1.0));
    let group = &p["resourceGroups"]["items"];
    assert_eq!(group["required"], json!(["coveredResources", "flavors"]));
    assert_eq!(group["properties"]["coveredResources"]["minItems"], 1);

    let lq = schema("LocalQueue");
    assert_eq!(
        lq["properties"]["spec"]["required"],
        json!(["clusterQueue"])
    );
    assert_eq!(
        lq["properties"]["spec"]["properties"]["clusterQueue"]["minLength"],
        1
    );
    let rf = schema("ResourceFlavor");
    let taint = &rf["properties"]["spec"]["properties"]["nodeTaints"]["items"];
    assert_eq!(taint["required"], json!(["effect", "key"]));
}

/// The subset of OpenAPI validation the API server applies that these schemas use.
fn validate(path: &str, schema: &Value, value: &Value, errors: &mut Vec<String>) {
    if value.is_null() && schema["nullable"] == true {
        return;
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            errors.push(format!("{path}: {value} not in {allowed:?}"));
        }
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if !(value.is_i64() || value.is_u64() || value.is_string()) {
            errors.push(format!("{path}: {value} is not an int or a string"));
        }
        return;
    }
    match (schema["type"].as_str(), value) {
        (Some("object"), Value::Object(map)) => {
            for req in schema["required"].as_array().into_iter().flatten() {
                if !map.contains_key(req.as_str().unwrap()) {
                    errors.push(format!("{path}: {} is required", req.as_str().unwrap()));
                }
            }
            for (k, v) in map {
                let sub = schema["properties"]
                    .get(k)
                    .or_else(|| schema.get("additionalProperties"));
                // Unknown fields are pruned by the API server, not refused.
                if let Some(sub) = sub {
                    validate(&format!("{path}.{k}"), sub, v, errors);
                }
            }
        }
        (Some("array"), Value::Array(items)) => {
            if let Some(min) = schema["minItems"].as_u64() {
                if (items.len() as u64) < min {
                    errors.push(format!("{path}: fewer than {min} items"));
                }
            }
            for (i, item) in items.iter().enumerate() {
                validate(&format!("{path}[{i}]"), &schema["items"], item, errors);
            }
        }
        (Some("integer"), v) if v.is_i64() || v.is_u64() => {
            if let Some(min) = schema["minimum"].as_f64() {
                if v.as_f64().is_some_and(|n| n < min) {
                    errors.push(format!("{path}: {v} is below {min}"));
                }
            }
        }
        (Some("string"), Value::String(s)) => {
            if let Some(min) = schema["minLength"].as_u64() {
                if (s.chars().count() as u64) < min {
                    errors.push(format!("{path}: shorter than {min}"));
                }
            }
        }
        (Some("boolean"), Value::Bool(_)) | (Some("number"), Value::Number(_)) => {}
        (t, v) => errors.push(format!("{path}: {v} is not of type {t:?}")),
    }
}

fn check(kind: &str, object: Value) -> Vec<String> {
    let mut errors = Vec::new();
    validate(kind, &schema(kind), &object, &mut errors);
    errors
}

#[test]
fn schemas_accept_good_objects_and_reject_malformed_ones() {
    let pg = |spec: Value| {
        json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "PodGroup",
               "metadata": {"name": "pt", "namespace": "ml"}, "spec": spec})
    };
    // The README's example, as the simulator reads it.
    let good = pg(json!({"minMember": 5, "scheduleTimeoutSeconds": 600,
        "minTaskMember": {"master": 1, "worker": 4}, "minResources": {"nvidia.com/gpu": 40, "memory": "2Ti"},
        "topology": {"required": "topology.kestrel.dev/block", "sliceLevel": "nvidia.com/gpu.clique", "sliceSize": 5}}));
    assert_eq!(check("PodGroup", good), Vec::<String>::new());
    for (bad, why) in [
        (json!({}), "minMember is required"),
        (json!({"minMember": 0}), "below 1"),
        (json!({"minMember": "3"}), "not of type"),
        (
            json!({"minMember": 2, "scheduleTimeoutSeconds": -1}),
            "below 0",
        ),
        (
            json!({"minMember": 2, "minTaskMember": {"w": -1}}),
            "below 0",
        ),
        (
            json!({"minMember": 2, "topology": {"sliceLevel": "x", "sliceSize": 0}}),
            "below 1",
        ),
        (
            json!({"minMember": 2, "minResources": {"cpu": [1]}}),
            "not an int or a string",
        ),
    ] {
        let errors = check("PodGroup", pg(bad.clone()));
        assert!(errors.iter().any(|e| e.contains(why)), "{bad}: {errors:?}");
    }
    let status = json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "pt"}, "spec": {"minMember": 1}, "status": {"phase": "Done"}});
    assert!(check("PodGroup", status)[0].contains("not in"));

    let cq = |spec: Value| json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "team"}, "spec": spec});
    let good = cq(json!({"cohortName": "research", "namespaceSelector": {},
        "queueingStrategy": "StrictFIFO",
        "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [{"name": "h100",
            "resources": [{"name": "cpu", "nominalQuota": "512", "borrowingLimit": 64},
                          {"name": "nvidia.com/gpu", "nominalQuota": 64, "lendingLimit": "16"}]}]}],
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any",
                       "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}},
        "fairSharing": {"weight": "2"}, "stopPolicy": "Hold",
        "minRuntimeSeconds": 600, "preemptionDelaySeconds": 60, "defaultRuntimeSeconds": 3600}));
    assert_eq!(check("ClusterQueue", good), Vec::<String>::new());
    for (bad, why) in [
        (json!({"queueingStrategy": "FIFO"}), "not in"),
        (json!({"stopPolicy": "Drain"}), "not in"),
        (
            json!({"preemption": {"withinClusterQueue": "Always"}}),
            "not in",
        ),
        (
            json!({"preemption": {"borrowWithinCohort": {"policy": "Any"}}}),
            "not in",
        ),
        (
            json!({"resourceGroups": [{"coveredResources": [], "flavors": []}]}),
            "fewer than 1",
        ),
        (
            json!({"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [{"name": "f", "resources": [{"name": "cpu"}]}]}]}),
            "nominalQuota is required",
        ),
        (json!({"minRuntimeSeconds": -5}), "below 0"),
    ] {
        let errors = check("ClusterQueue", cq(bad.clone()));
        assert!(errors.iter().any(|e| e.contains(why)), "{bad}: {errors:?}");
    }
    let topo = |spec: Value| json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "Topology", "metadata": {"name": "default"}, "spec": spec});
    assert!(check(
        "Topology",
        topo(json!({"levels": [{"nodeLabel": "topology.kestrel.dev/rack"}]}))
    )
    .is_empty());
    assert!(check("Topology", topo(json!({"levels": []})))[0].contains("fewer than 1"));
    assert!(check("Topology", topo(json!({"levels": [{}]})))[0].contains("nodeLabel is required"));
    let lq = json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "LocalQueue", "metadata": {"name": "q", "namespace": "ml"}, "spec": {"clusterQueue": ""}});
    assert!(check("LocalQueue", lq)[0].contains("shorter than 1"));
    let rf = json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                 "nodeTaints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}});
    assert_eq!(check("ResourceFlavor", rf), Vec::<String>::new());
}

#[test]
fn typed_objects_round_trip_through_the_simulators_parser() {
    let yaml = "apiVersion: scheduling.kestrel.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: pt, namespace: ml}\nspec:\n  minMember: 5\n  scheduleTimeoutSeconds: 600\n  minTaskMember: {master: 1, worker: 4}\n  topology: {required: topology.kestrel.dev/block, sliceLevel: nvidia.com/gpu.clique, sliceSize: 5}\n";
    let value: Value = serde_saphyr::from_str(yaml).unwrap();
    let typed: crds::PodGroup = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(typed.spec.min_member, 5);
    assert_eq!(serde_json::to_value(&typed).unwrap(), value);
    let parsed = kestrel_k8s::gangs::parse_gang_document(std::path::Path::new("x"), &value);
    assert!(parsed.is_ok(), "{parsed:?}");
}

// ---- Gangs through the index ------------------------------------------------------------

fn node(name: &str, gpus: u32, rack: &str) -> Node {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"topology.kestrel.dev/rack": rack}},
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()}}}))
    .unwrap()
}

fn member(name: &str, group: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "labels": {"scheduling.kestrel.dev/pod-group": group}},
        "spec": {"schedulerName": "kestrel", "priority": 0, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}}))
    .unwrap()
}

fn pod_group(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("pg-{name}"), "generation": 1},
        "spec": spec}),
    )
    .unwrap()
}

/// Stores filled by hand, as the reflectors fill them, and the state they feed.
struct Harness {
    state: ClusterState,
    stores: Stores,
    groups: Writer<DynamicObject>,
    topologies: Writer<DynamicObject>,
    queues: Vec<(&'static str, Writer<DynamicObject>)>,
    namespaces: Writer<Namespace>,
    resource_quotas: Writer<ResourceQuota>,
    limit_ranges: Writer<LimitRange>,
}

impl Harness {
    fn new(nodes: &[Node]) -> Self {
        let pg = ApiResource::erase::<crds::PodGroup>(&());
        let topo = ApiResource::erase::<crds::Topology>(&());
        let node_store = Writer::<Node>::default();
        let pcs = Writer::default();
        let rcs = Writer::default();
        let groups = Writer::new(pg);
        let topologies = Writer::new(topo);
        let queues: Vec<(&'static str, Writer<DynamicObject>)> = vec![
            (
                "ClusterQueue",
                Writer::new(ApiResource::erase::<crds::ClusterQueue>(&())),
            ),
            (
                "LocalQueue",
                Writer::new(ApiResource::erase::<crds::LocalQueue>(&())),
            ),
            (
                "ResourceFlavor",
                Writer::new(ApiResource::erase::<crds::ResourceFlavor>(&())),
            ),
        ];
        let namespaces = Writer::<Namespace>::default();
        let resource_quotas = Writer::<ResourceQuota>::default();
        let limit_ranges = Writer::<LimitRange>::default();
        let stores = Stores {
            nodes: node_store.as_reader(),
            priority_classes: pcs.as_reader(),
            runtime_classes: rcs.as_reader(),
            pod_groups: groups.as_reader(),
            topologies: topologies.as_reader(),
            queues: queues.iter().map(|(k, w)| (*k, w.as_reader())).collect(),
            foreign_pod_groups: Vec::new(),
            namespaces: namespaces.as_reader(),
            disruption_budgets: Writer::default().as_reader(),
            resource_quotas: resource_quotas.as_reader(),
            limit_ranges: limit_ranges.as_reader(),
        };
        let mut state = ClusterState::new(SchedulerConfig::default(), "kestrel");
        for n in nodes {
            state.apply_node(n).unwrap();
        }
        Harness {
            state,
            stores,
            groups,
            topologies,
            queues,
            namespaces,
            resource_quotas,
            limit_ranges,
        }
    }

    fn pod(&mut self, pod: Pod) {
        self.pod_event(Event::Apply(pod));
    }

    fn pod_event(&mut self, e: Event<Pod>) {
        driver::apply_change(&mut self.state, &self.stores, Change::Pod(Box::new(e)));
    }

    fn group(&mut self, group: DynamicObject) {
        let e = Event::Apply(group);
        self.groups.apply_watcher_event(&e);
        driver::apply_change(&mut self.state, &self.stores, Change::PodGroup(Box::new(e)));
    }

    /// A queue object (as listed: no apiVersion or kind) applied or deleted.
    fn queue(&mut self, kind: &'static str, object: Value, delete: bool) {
        let o: DynamicObject = serde_json::from_value(object).unwrap();
        let e = if delete {
            Event::Delete(o)
        } else {
            Event::Apply(o)
        };
        let writer = &mut self.queues.iter_mut().find(|(k, _)| *k == kind).unwrap().1;
        writer.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Queues { kind, listed: true },
        );
    }

    /// A ResourceQuota applied or deleted; whether the state changed.
    fn resource_quota(&mut self, object: Value, delete: bool) -> bool {
        let q: ResourceQuota = serde_json::from_value(object).unwrap();
        let e = if delete {
            Event::Delete(q)
        } else {
            Event::Apply(q)
        };
        self.resource_quotas.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::ResourceQuota(Box::new(e)),
        )
    }

    /// A LimitRange event (`Apply`, `Delete` or the end of a relist that lists only what
    /// the store holds); whether the state changed.
    fn limit_range(&mut self, e: Event<LimitRange>) -> bool {
        self.limit_ranges.apply_watcher_event(&e);
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::LimitRange(Box::new(e)),
        )
    }

    fn namespace(&mut self, name: &str, labels: Value) {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
        self.namespaces.apply_watcher_event(&Event::Apply(ns));
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Queues {
                kind: "Namespace",
                listed: true,
            },
        );
    }

    fn topology(&mut self, name: &str, levels: &[&str]) {
        let levels: Vec<Value> = levels.iter().map(|l| json!({"nodeLabel": l})).collect();
        let t: DynamicObject =
            serde_json::from_value(json!({"apiVersion": "scheduling.kestrel.dev/v1alpha1",
            "kind": "Topology", "metadata": {"name": name}, "spec": {"levels": levels}}))
            .unwrap();
        self.topologies.apply_watcher_event(&Event::Apply(t));
        driver::apply_change(
            &mut self.state,
            &self.stores,
            Change::Topologies { listed: true },
        );
    }
}

fn status_of<'a>(out: &'a CycleOutput, name: &str) -> &'a GroupStatusJob {
    out.group_status
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no status for {name}: {out:#?}"))
}

#[test]
fn a_pod_relist_drops_the_members_deleted_while_the_watch_was_down() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 2})));
    h.pod_event(Event::Init);
    h.pod_event(Event::InitApply(member("pt-0", "pt", 4)));
    h.pod_event(Event::InitDone);
    h.pod(member("pt-1", "pt", 4));
    assert_eq!(h.state.tracked_pods(), 2);
    // The watch restarts; pt-0 was deleted meanwhile and the listing no longer has it.
    h.pod_event(Event::Init);
    assert_eq!(
        h.state.tracked_pods(),
        2,
        "nothing is dropped before the listing ends"
    );
    h.pod_event(Event::InitApply(member("pt-1", "pt", 4)));
    h.pod_event(Event::InitDone);
    assert_eq!(h.state.tracked_pods(), 1);
    assert!(h.state.pod_state("ml/pt-0").is_none());
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "1 of 2 members: nothing binds");
    assert!(
        status_of(&out, "pt").message.contains("1 of 2 pods exist"),
        "{:?}",
        status_of(&out, "pt")
    );
}

#[test]
fn a_gang_binds_all_or_nothing_and_its_status_says_why_it_waits() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 3})));
    // Before any pod: the status says none exist.
    let out = h.state.cycle(0);
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.condition, s.reason.as_str()),
        (PodGroupPhase::Pending, "False", "Incomplete")
    );
    assert!(s.message.contains("0 of 3 pods exist"), "{s:?}");
    assert_eq!(s.observed_generation, Some(1));

    h.pod(member("pt-0", "pt", 4));
    h.pod(member("pt-1", "pt", 4));
    let out = h.state.cycle(1);
    assert!(out.binds.is_empty(), "2 of 3: nothing binds: {out:?}");
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.scheduled, s.reason.as_str()),
        (PodGroupPhase::Pending, 0, "Incomplete")
    );
    assert!(
        s.message
            .contains("gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3)"),
        "{}",
        s.message
    );
    assert!(
        s.since.is_none(),
        "the condition's status did not change, but it was never written"
    );
    // The pods say so too.
    assert_eq!(out.unschedulable.len(), 2);
    assert!(out
        .unschedulable
        .iter()
        .all(|r| r.message.contains("2 of 3 pods exist")));
    h.state
        .group_status_result(s, Ok(Time(Timestamp::from_second(1_700_000_000).unwrap())));

    // Nothing changed: nothing is written again.
    let out = h.state.cycle(2);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    h.pod(member("pt-2", "pt", 4));
    let out = h.state.cycle(3);
    assert_eq!(out.binds.len(), 3, "the whole gang at once: {out:?}");
    let names: BTreeSet<&str> = out.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["pt-0", "pt-1", "pt-2"]));
    assert!(
        out.group_status.is_empty(),
        "no status while its binds are in flight"
    );
    for b in &out.binds {
        h.state.bind_result(b.id, BindOutcome::Bound);
    }
    assert!(h.state.groups_changed());
    let out = h.state.cycle(4);
    let s = status_of(&out, "pt");
    assert_eq!(
        (
            s.phase,
            s.scheduled,
            s.running,
            s.condition,
            s.reason.as_str()
        ),
        (PodGroupPhase::Scheduled, 3, 0, "True", "Scheduled")
    );
    assert!(s.since.is_none(), "the condition turned True now");
    // The pods start running.
    for (i, name) in ["pt-0", "pt-1", "pt-2"].iter().enumerate() {
        let mut p = member(name, "pt", 4);
        p.spec.as_mut().unwrap().node_name = Some(if i < 2 { "gpu-0" } else { "gpu-1" }.into());
        p.status.as_mut().unwrap().phase = Some("Running".into());
        h.pod(p);
    }
    let out = h.state.cycle(5);
    let s = status_of(&out, "pt");
    assert_eq!((s.phase, s.running), (PodGroupPhase::Running, 3));
}

fn gpu_quota(name: &str, hard: &str, used: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"hard": {"requests.nvidia.com/gpu": hard, "pods": "100"}},
        "status": {"hard": {"requests.nvidia.com/gpu": hard, "pods": "100"},
                   "used": {"requests.nvidia.com/gpu": used, "pods": "3"}}})
}

#[test]
fn an_incomplete_gang_names_the_resource_quota_that_refuses_its_missing_pods() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    // Room for the fourth pod's 2 GPUs: the gang just waits for it.
    assert!(h.resource_quota(gpu_quota("gpu-quota", "8", "6"), false));
    h.group(pod_group("train", json!({"minMember": 4})));
    for i in 0..3 {
        h.pod(member(&format!("train-{i}"), "train", 2));
    }
    let out = h.state.cycle(0);
    let s = status_of(&out, "train");
    assert_eq!(s.reason, "Incomplete");
    assert_eq!(
        s.message,
        "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); waiting for the rest to be created"
    );
    assert_eq!(out.unschedulable.len(), 3);

    // The quota is used up (a malformed quota beside it is skipped, not fatal): the
    // PodGroup and its pods name it.
    let broken = json!({"apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "broken", "namespace": "ml"},
        "status": {"hard": {"requests.nvidia.com/gpu": "lots"}, "used": {"requests.nvidia.com/gpu": "0"}}});
    assert!(!h.resource_quota(broken, false), "nothing usable in it");
    assert!(h.resource_quota(gpu_quota("gpu-quota", "8", "8"), false));
    let out = h.state.cycle(1);
    let expected = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); ResourceQuota \
        ml/gpu-quota has requests.nvidia.com/gpu 8 of 8 used, so the API server refuses the \
        missing pods: raise the quota or end pods in ml";
    let s = status_of(&out, "train");
    assert_eq!(
        (s.reason.as_str(), s.message.as_str()),
        ("Incomplete", expected)
    );
    let names: BTreeSet<&str> = out.unschedulable.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["train-0", "train-1", "train-2"]));
    assert!(
        out.unschedulable
            .iter()
            .all(|r| r.reason == "Unschedulable" && r.message == expected),
        "{:?}",
        out.unschedulable
    );
    // Nothing changed: nothing is said again.
    let out = h.state.cycle(2);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    // The quota is raised: the gang waits for its pod again, saying so.
    assert!(h.resource_quota(gpu_quota("gpu-quota", "16", "8"), false));
    let out = h.state.cycle(3);
    assert!(status_of(&out, "train")
        .message
        .ends_with("(minMember 4); waiting for the rest to be created"));
    assert_eq!(out.unschedulable.len(), 3, "{out:?}");
    assert!(out
        .unschedulable
        .iter()
        .all(|r| !r.message.contains("ResourceQuota")));

    // Used up again, then deleted: the note comes and goes with it.
    h.resource_quota(gpu_quota("gpu-quota", "16", "16"), false);
    assert!(status_of(&h.state.cycle(4), "train")
        .message
        .contains("ResourceQuota ml/gpu-quota"));
    assert!(h.resource_quota(gpu_quota("gpu-quota", "16", "16"), true));
    let out = h.state.cycle(5);
    assert!(!status_of(&out, "train").message.contains("ResourceQuota"));

    // A quota used up in pods only: it refuses any pod, even before one exists.
    h.group(pod_group("empty", json!({"minMember": 2})));
    h.resource_quota(
        json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "pod-count", "namespace": "ml"},
            "status": {"hard": {"count/pods": "3"}, "used": {"count/pods": "3"}}}),
        false,
    );
    let out = h.state.cycle(6);
    assert_eq!(
        status_of(&out, "empty").message,
        "gang ml/empty is incomplete: 0 of 2 pods exist (minMember 2); ResourceQuota \
         ml/pod-count has count/pods 3 of 3 used, so the API server refuses the missing pods: \
         raise the quota or end pods in ml"
    );
}

fn gpu_limits(name: &str, item: Value) -> LimitRange {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": name, "namespace": "ml"}, "spec": {"limits": [item]}}))
    .unwrap()
}

#[test]
fn an_incomplete_gang_names_the_limit_range_that_refuses_its_missing_pods() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    h.group(pod_group("train", json!({"minMember": 4})));
    for i in 0..3 {
        // As the API server stores them: extended resources have a limit.
        let mut p = member(&format!("train-{i}"), "train", 2);
        p.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .limits = Some(BTreeMap::from([(
            "nvidia.com/gpu".to_string(),
            Quantity("2".into()),
        )]));
        h.pod(p);
    }
    let waiting = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); waiting for the rest to be created";
    assert_eq!(status_of(&h.state.cycle(0), "train").message, waiting);

    // Bounds the members keep to, and a claims item: nothing to say.
    let roomy = gpu_limits(
        "gpu-limits",
        json!({"type": "Container", "max": {"nvidia.com/gpu": "4"}, "min": {"cpu": "500m"}}),
    );
    assert!(h.limit_range(Event::Apply(roomy.clone())));
    assert!(!h.limit_range(Event::Apply(gpu_limits(
        "claims",
        json!({"type": "PersistentVolumeClaim", "max": {"storage": "1Gi"}})
    ))));
    let out = h.state.cycle(1);
    assert!(
        out.group_status.is_empty() && out.unschedulable.is_empty(),
        "{out:?}"
    );

    // Tightened below what the members ask: the PodGroup and its pods name it, ahead of a
    // used-up ResourceQuota (the API server checks LimitRanges first).
    assert!(h.resource_quota(gpu_quota("gpu-quota", "6", "6"), false));
    assert!(h.limit_range(Event::Apply(gpu_limits(
        "gpu-limits",
        json!({"type": "Container", "max": {"nvidia.com/gpu": "1"}})
    ))));
    let out = h.state.cycle(2);
    let expected = "gang ml/train is incomplete: 3 of 4 pods exist (minMember 4); LimitRange \
        ml/gpu-limits allows at most 1 nvidia.com/gpu per Container and a container of the \
        gang's pods has a limit of 2, so the API server refuses the missing pods: widen the \
        LimitRange or change the pods' resources in ml";
    assert_eq!(status_of(&out, "train").message, expected);
    assert_eq!(out.unschedulable.len(), 3, "{out:?}");
    assert!(out.unschedulable.iter().all(|r| r.message == expected));

    // Deleted: the quota is what refuses them now.
    assert!(h.limit_range(Event::Delete(gpu_limits(
        "gpu-limits",
        json!({"type": "Container"})
    ))));
    assert!(status_of(&h.state.cycle(3), "train")
        .message
        .contains("; ResourceQuota ml/gpu-quota has requests.nvidia.com/gpu 6 of 6 used"));
    h.resource_quota(gpu_quota("gpu-quota", "6", "6"), true);
    assert_eq!(status_of(&h.state.cycle(4), "train").message, waiting);

    // A Pod item bounds the containers together; a relist that no longer has it drops it.
    let per_pod = gpu_limits("per-pod", json!({"type": "Pod", "max": {"cpu": "500m"}}));
    assert!(h.limit_range(Event::Apply(per_pod.clone())));
    assert!(status_of(&h.state.cycle(5), "train").message.contains(
        "LimitRange ml/per-pod allows at most 500m cpu per Pod and a pod of the gang sets no cpu limit"
    ));
    h.limit_ranges.apply_watcher_event(&Event::Init);
    h.limit_ranges.apply_watcher_event(&Event::InitApply(roomy));
    assert!(h.limit_range(Event::InitDone));
    assert_eq!(status_of(&h.state.cycle(6), "train").message, waiting);
}

#[test]
fn a_malformed_pod_group_is_reported_and_its_pods_wait_with_that_reason() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    // Role minimums add up to more than minMember: the schema cannot see it, the engine can.
    h.group(pod_group(
        "bad",
        json!({"minMember": 2, "minTaskMember": {"master": 1, "worker": 4}}),
    ));
    h.pod(member("bad-0", "bad", 1));
    h.pod(member("bad-1", "bad", 1));
    assert!(matches!(
        h.state.pod_state("ml/bad-0"),
        Some(PodState::GangWait { .. })
    ));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert_eq!(out.group_events.len(), 1, "{out:?}");
    let e = &out.group_events[0];
    assert_eq!(
        (e.name.as_str(), e.uid.as_str(), e.reason),
        ("bad", "pg-bad", "InvalidSpec")
    );
    assert!(
        e.message.contains("PodGroup ml/bad is invalid") && e.message.contains("minTaskMember"),
        "{}",
        e.message
    );
    assert_eq!(out.unschedulable.len(), 2);
    assert!(out
        .unschedulable
        .iter()
        .all(|r| r.reason == "Unschedulable" && r.message == e.message));
    let s = status_of(&out, "bad");
    assert_eq!(
        (s.phase, s.reason.as_str()),
        (PodGroupPhase::Pending, "InvalidSpec")
    );
    // The pods' own status updates do not report them again.
    h.pod(member("bad-0", "bad", 1));
    let out = h.state.cycle(1);
    assert!(
        out.unschedulable.is_empty() && out.group_events.is_empty(),
        "{out:?}"
    );
    // A field the parser does not know: the parser's message, no panic.
    h.group(pod_group("bad", json!({"minMember": 2, "minMembers": 3})));
    let out = h.state.cycle(2);
    assert!(
        out.group_events[0].message.contains("minMembers"),
        "{out:?}"
    );
    assert_eq!(out.unschedulable.len(), 2);
    // Fixed: the pods are scheduled.
    h.group(pod_group("bad", json!({"minMember": 2})));
    let out = h.state.cycle(3);
    assert_eq!(out.binds.len(), 2, "{out:?}");
    assert!(out.group_events.is_empty());
    // A pod of a PodGroup that does not exist waits, saying so.
    h.pod(member("lost-0", "lost", 1));
    let out = h.state.cycle(4);
    assert_eq!(out.unschedulable.len(), 1);
    assert!(
        out.unschedulable[0]
            .message
            .contains("gang ml/lost does not exist"),
        "{out:?}"
    );
    assert!(out.group_status.is_empty(), "no PodGroup, no status");
}

#[test]
fn topology_levels_come_from_the_topology_object_and_unknown_levels_are_reported() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r2")]);
    h.topology("default", &["topology.kestrel.dev/rack"]);
    assert_eq!(h.state.topology_levels(), ["topology.kestrel.dev/rack"]);
    h.group(pod_group(
        "blk",
        json!({"minMember": 2, "topology": {"required": "topology.kestrel.dev/block"}}),
    ));
    let problem = h.state.pod_group_problem("ml", "blk").unwrap().unwrap();
    assert!(
        problem.contains("not a level of the cluster's Topology"),
        "{problem}"
    );
    // Two 6-GPU pods need one rack: neither rack holds 12 GPUs, so nothing binds.
    h.group(pod_group(
        "blk",
        json!({"minMember": 2, "topology": {"required": "topology.kestrel.dev/rack"}}),
    ));
    assert_eq!(h.state.pod_group_problem("ml", "blk"), Some(None));
    h.pod(member("blk-0", "blk", 6));
    h.pod(member("blk-1", "blk", 6));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "{out:?}");
    let s = status_of(&out, "blk");
    assert_eq!(s.reason, "Unschedulable");
    assert!(
        s.message.contains("one topology.kestrel.dev/rack domain"),
        "{}",
        s.message
    );
}

#[test]
fn a_failed_bind_of_a_member_requeues_it_and_the_status_says_so() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.group(pod_group("pt", json!({"minMember": 2})));
    h.pod(member("pt-0", "pt", 2));
    h.pod(member("pt-1", "pt", 2));
    let out = h.state.cycle(0);
    assert_eq!(out.binds.len(), 2);
    h.state.bind_result(out.binds[0].id, BindOutcome::Bound);
    h.state.bind_result(
        out.binds[1].id,
        BindOutcome::Retry("the server is busy".into()),
    );
    assert!(matches!(
        h.state.pod_state("ml/pt-1"),
        Some(PodState::Queued(_))
    ));
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 1, "the member is placed again: {out:?}");
    let s = status_of(&out, "pt");
    assert_eq!(
        (s.phase, s.reason.as_str(), s.scheduled),
        (PodGroupPhase::Pending, "BindFailed", 1)
    );
    assert!(
        s.message
            .contains("binding pod ml/pt-1 to node gpu-0 failed (the server is busy)"),
        "{}",
        s.message
    );
    h.state.bind_result(out.binds[0].id, BindOutcome::Bound);
    let out = h.state.cycle(2);
    assert_eq!(status_of(&out, "pt").phase, PodGroupPhase::Scheduled);
}

#[test]
fn a_gang_timeout_counts_from_its_first_pod_and_is_reported() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    // The scheduler has been leading for a day when the gang arrives.
    let day = 86_400_000;
    h.state.set_time(day);
    h.group(pod_group(
        "slow",
        json!({"minMember": 2, "scheduleTimeoutSeconds": 60}),
    ));
    h.pod(member("slow-0", "slow", 1));
    let out = h.state.cycle(day);
    assert_eq!(
        status_of(&out, "slow").reason,
        "Incomplete",
        "not timed out on arrival"
    );
    // Two minutes later something changes in the cluster and the gang is tried again.
    h.state.set_time(day + 120_000);
    h.state.apply_node(&node("gpu-1", 8, "r1")).unwrap();
    let out = h.state.cycle(day + 120_000);
    assert_eq!(h.state.pod_state("ml/slow-0"), Some(&PodState::Expired));
    let s = status_of(&out, "slow");
    assert_eq!(
        (s.phase, s.reason.as_str()),
        (PodGroupPhase::TimedOut, "TimedOut")
    );
    assert!(s.message.contains("timed out after 60 s"), "{}", s.message);
    assert_eq!(out.unschedulable.len(), 1);
    assert!(out.unschedulable[0].message.contains("timed out"));
    assert_eq!(h.state.pending_by_reason()["gang"], 1);
    // Deleting the pod releases nothing and panics nowhere.
    h.state.delete_pod(&member("slow-0", "slow", 1));
    assert!(h.state.pod_state("ml/slow-0").is_none());
}

#[test]
fn kueue_plain_pod_groups_need_no_pod_group_and_others_wait_for_theirs() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    let kueue = |name: &str| {
        let mut p = member(name, "unused", 1);
        p.metadata.labels = Some(
            [(
                "kueue.x-k8s.io/pod-group-name".to_string(),
                "kq".to_string(),
            )]
            .into(),
        );
        p.metadata.annotations = Some(
            [(
                "kueue.x-k8s.io/pod-group-total-count".to_string(),
                "2".to_string(),
            )]
            .into(),
        );
        p
    };
    h.pod(kueue("kq-0"));
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert!(
        out.unschedulable[0].message.contains("1 of 2 pods exist"),
        "{out:?}"
    );
    assert!(
        out.group_status.is_empty(),
        "no PodGroup object to write to"
    );
    h.pod(kueue("kq-1"));
    assert_eq!(h.state.cycle(1).binds.len(), 2);
    // A scheduler-plugins PodGroup label without its PodGroup: the pod waits for it.
    let mut p = member("sp-0", "unused", 1);
    p.metadata.labels = Some(
        [(
            "scheduling.x-k8s.io/pod-group".to_string(),
            "sp".to_string(),
        )]
        .into(),
    );
    h.pod(p);
    let out = h.state.cycle(2);
    assert!(matches!(
        h.state.pod_state("ml/sp-0"),
        Some(PodState::GangWait { .. })
    ));
    assert_eq!(out.unschedulable[0].reason, "Unschedulable");
    assert!(
        out.unschedulable[0]
            .message
            .contains("gang ml/sp does not exist"),
        "{out:?}"
    );
}

// ---- The API: PodGroup status by server-side apply --------------------------------------

type MockHandle = Handle<Request<Body>, Response<Body>>;
/// Writes the scripted server saw: (method, path, body).
type Writes = Arc<Mutex<Vec<(String, String, Value)>>>;

fn mock_client() -> (Client, MockHandle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// A writer in `patch` mode (the annotation, then the binding), whose requests the
/// tests check.
fn writer(client: Client) -> ApiWriter {
    ApiWriter::new(
        client,
        "kestrel",
        "replica-a",
        Arc::new(Limiter::unlimited()),
    )
    .with_gpu_indices_write(GpuIndicesWrite::Patch)
}

fn query(uri: &str) -> BTreeSet<String> {
    uri.split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn pod_group_status_is_written_by_server_side_apply_of_the_status_subresource() {
    let (client, mut handle) = mock_client();
    let since = Time(Timestamp::from_second(1_700_000_000).unwrap());
    let job = GroupStatusJob {
        namespace: "ml".into(),
        name: "pt".into(),
        phase: PodGroupPhase::Pending,
        scheduled: 2,
        running: 1,
        condition: "False",
        reason: "Incomplete".into(),
        message: "gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3); waiting for the rest to be created".into(),
        observed_generation: Some(4),
        since: Some(since.clone()),
    };
    let expected = json!({
        "apiVersion": "scheduling.kestrel.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "pt", "namespace": "ml"},
        "status": {
            "phase": "Pending",
            "scheduled": 2,
            "running": 1,
            "conditions": [{
                "type": "Scheduled",
                "status": "False",
                "reason": "Incomplete",
                "message": "gang ml/pt is incomplete: 2 of 3 pods exist (minMember 3); waiting for the rest to be created",
                "lastTransitionTime": "2023-11-14T22:13:20Z",
                "observedGeneration": 4
            }]
        }
    });
    assert_eq!(pod_group_status_patch(&job, &since), expected);
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert_eq!(req.method(), "PATCH");
        let uri = req.uri().to_string();
        assert_eq!(
            uri.split('?').next().unwrap(),
            "/apis/scheduling.kestrel.dev/v1alpha1/namespaces/ml/podgroups/pt/status"
        );
        assert_eq!(
            query(&uri),
            BTreeSet::from(["fieldManager=kestrel".to_string(), "force=true".to_string()])
        );
        assert_eq!(
            req.headers().get("content-type").unwrap(),
            "application/apply-patch+yaml"
        );
        let body: Value =
            serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
        assert_eq!(body, expected);
        let mut answer = expected.clone();
        answer["spec"] = json!({"minMember": 3});
        send.send_response(
            Response::builder()
                .status(200)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap(),
        );
    });
    let written = writer(client).apply_pod_group_status(&job).await.unwrap();
    assert_eq!(written, since);
    server.await.unwrap();
}

// ---- The whole loop against a scripted API server ---------------------------------------

fn list(api_version: &str, kind: &str, items: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "100"}, "items": items})
}

/// Serves listings (`None`: 404, the CRD is not installed); watches hang. Writes are
/// recorded; annotation patches are answered only once `hold` of them are in flight
/// together.
async fn scripted_server(
    mut handle: MockHandle,
    nodes: Vec<Value>,
    pods: Vec<Value>,
    pod_groups: Option<Vec<Value>>,
    hold: usize,
    writes: Writes,
) {
    let mut hanging = Vec::new();
    let mut held = Vec::new();
    let ok = |v: &Value| {
        Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(v).unwrap()))
            .unwrap()
    };
    while let Some((req, send)) = handle.next_request().await {
        let method = req.method().to_string();
        let uri = req.uri().to_string();
        let path = uri.split('?').next().unwrap().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap();
        if method == "GET" && uri.contains("watch=true") {
            hanging.push(send);
            continue;
        }
        let kestrel = "scheduling.kestrel.dev/v1alpha1";
        let listing = match (method.as_str(), path.as_str()) {
            ("GET", "/api/v1/nodes") => Some(list("v1", "Node", nodes.clone())),
            ("GET", "/api/v1/pods") => Some(list("v1", "Pod", pods.clone())),
            ("GET", "/apis/scheduling.k8s.io/v1/priorityclasses") => {
                Some(list("scheduling.k8s.io/v1", "PriorityClass", vec![]))
            }
            ("GET", "/apis/node.k8s.io/v1/runtimeclasses") => {
                Some(list("node.k8s.io/v1", "RuntimeClass", vec![]))
            }
            ("GET", "/api/v1/namespaces") => Some(list("v1", "Namespace", vec![])),
            ("GET", "/apis/policy/v1/poddisruptionbudgets") => {
                Some(list("policy/v1", "PodDisruptionBudget", vec![]))
            }
            ("GET", "/api/v1/resourcequotas") => Some(list("v1", "ResourceQuota", vec![])),
            ("GET", "/api/v1/limitranges") => Some(list("v1", "LimitRange", vec![])),
            (
                "GET",
                "/apis/scheduling.x-k8s.io/v1alpha1/podgroups"
                | "/apis/scheduling.volcano.sh/v1beta1/podgroups",
            ) => {
                send.send_response(not_found());
                continue;
            }
            (
                "GET",
                "/apis/scheduling.kestrel.dev/v1alpha1/clusterqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/localqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/cohorts"
                | "/apis/scheduling.kestrel.dev/v1alpha1/resourceflavors",
            ) if pod_groups.is_some() => Some(list(kestrel, "List", vec![])),
            (
                "GET",
                "/apis/scheduling.kestrel.dev/v1alpha1/podgroups"
                | "/apis/scheduling.kestrel.dev/v1alpha1/clusterqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/localqueues"
                | "/apis/scheduling.kestrel.dev/v1alpha1/cohorts"
                | "/apis/scheduling.kestrel.dev/v1alpha1/resourceflavors",
            ) => match &pod_groups {
                Some(items) => Some(list(kestrel, "PodGroup", items.clone())),
                None => {
                    send.send_response(not_found());
                    continue;
                }
            },
            ("GET", "/apis/scheduling.kestrel.dev/v1alpha1/topologies") => {
                Some(list(kestrel, "Topology", vec![]))
            }
            _ => None,
        };
        if let Some(listing) = listing {
            send.send_response(ok(&listing));
            continue;
        }
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        writes
            .lock()
            .unwrap()
            .push((method.clone(), path.clone(), body.clone()));
        let answer = if path.ends_with("/binding") {
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
        } else if path.contains("/events") || path.contains("/podgroups/") {
            body
        } else {
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "ml"}})
        };
        let annotate = method == "PATCH"
            && path.starts_with("/api/v1/namespaces/ml/pods/")
            && !path.ends_with("/status");
        if annotate && hold > 1 {
            held.push((send, answer));
            if held.len() == hold {
                for (send, answer) in held.drain(..) {
                    send.send_response(ok(&answer));
                }
            }
            continue;
        }
        send.send_response(ok(&answer));
    }
}

/// The API server's answer for a kind it does not serve (its CRD is not installed).
fn not_found() -> Response<Body> {
    Response::builder()
        .status(404)
        .body(Body::from(serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": "NotFound", "message": "the server could not find the requested resource", "code": 404})).unwrap()))
        .unwrap()
}

fn api_node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"topology.kestrel.dev/rack": "r1"}},
        "status": {"allocatable": {"cpu": "200", "memory": "2000Gi", "pods": "110", "nvidia.com/gpu": "8"}}})
}

async fn wait_for(writes: &Writes, what: impl Fn(&[(String, String, Value)]) -> bool) {
    for _ in 0..500 {
        if what(&writes.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {:#?}", writes.lock().unwrap());
}

#[tokio::test]
async fn a_gangs_binds_go_out_together_and_its_status_follows() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let pods: Vec<Value> = (0..3)
        .map(|i| serde_json::to_value(member(&format!("pt-{i}"), "pt", 2)).unwrap())
        .collect();
    let group = serde_json::to_value(pod_group("pt", json!({"minMember": 3}))).unwrap();
    // The three annotation patches are answered only when all three are in flight.
    tokio::spawn(scripted_server(
        handle,
        vec![api_node("gpu-0")],
        pods,
        Some(vec![group]),
        3,
        writes.clone(),
    ));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let config = DriverConfig::new("kestrel");
    let w = writer(client.clone());
    let lead = tokio::spawn(async move {
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx).await
    });
    wait_for(&writes, |w| {
        w.iter().any(|(_, p, b)| {
            p.ends_with("/podgroups/pt/status") && b["status"]["phase"] == "Scheduled"
        })
    })
    .await;
    shutdown_tx.send_replace(true);
    assert_eq!(lead.await.unwrap(), Ended::Shutdown);
    let writes = writes.lock().unwrap().clone();
    let summary: Vec<(String, String)> = writes
        .iter()
        .map(|(m, p, _)| (m.clone(), p.clone()))
        .collect();
    let binds = summary
        .iter()
        .filter(|(m, p)| m == "POST" && p.ends_with("/binding"))
        .count();
    assert_eq!(binds, 3, "{summary:#?}");
    let statuses: Vec<&Value> = writes
        .iter()
        .filter(|(_, p, _)| p.ends_with("/podgroups/pt/status"))
        .map(|(_, _, b)| b)
        .collect();
    assert_eq!(
        statuses.len(),
        1,
        "one write, once the gang is bound: {statuses:#?}"
    );
    let status = &statuses[0]["status"];
    assert_eq!(status["scheduled"], 3);
    assert_eq!(status["conditions"][0]["status"], "True");
    assert_eq!(status["conditions"][0]["reason"], "Scheduled");
    let last_bind = summary
        .iter()
        .rposition(|(m, p)| m == "POST" && p.ends_with("/binding"))
        .unwrap();
    let status_at = summary
        .iter()
        .position(|(_, p)| p.ends_with("/podgroups/pt/status"))
        .unwrap();
    assert!(last_bind < status_at, "{summary:#?}");
}

#[tokio::test]
async fn without_kestrels_crds_plain_pods_are_still_scheduled() {
    let (client, handle) = mock_client();
    let writes = Arc::new(Mutex::new(Vec::new()));
    let mut plain = serde_json::to_value(member("solo", "x", 1)).unwrap();
    plain["metadata"]["labels"] = json!({});
    let gang = serde_json::to_value(member("g-0", "g", 1)).unwrap();
    tokio::spawn(scripted_server(
        handle,
        vec![api_node("gpu-0")],
        vec![plain, gang],
        None,
        1,
        writes.clone(),
    ));
    let (_leader_tx, leader_rx) = watch::channel(true);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let metrics = Metrics::new();
    let config = DriverConfig::new("kestrel");
    let w = writer(client.clone());
    let lead = tokio::spawn(async move {
        driver::lead(client, w, &config, &metrics, leader_rx, shutdown_rx).await
    });
    wait_for(&writes, |w| {
        w.iter()
            .any(|(m, p, _)| m == "POST" && p == "/api/v1/namespaces/ml/pods/solo/binding")
            && w.iter()
                .any(|(m, p, _)| m == "PATCH" && p == "/api/v1/namespaces/ml/pods/g-0/status")
    })
    .await;
    shutdown_tx.send_replace(true);
    assert_eq!(lead.await.unwrap(), Ended::Shutdown);
    let writes = writes.lock().unwrap().clone();
    let waits = writes
        .iter()
        .find(|(_, p, _)| p == "/api/v1/namespaces/ml/pods/g-0/status")
        .unwrap();
    assert!(
        waits.2["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("gang ml/g does not exist"),
        "{waits:?}"
    );
}

// ---- Queues through the index -----------------------------------------------------------

fn queued(name: &str, queue: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                     "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {"schedulerName": "kestrel", "priority": 0, "containers": [{"name": "c",
            "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": gpus.to_string()}}}]},
        "status": {"phase": "Pending"}}))
    .unwrap()
}

fn cluster_queue(gpus: u32, selector: Value) -> Value {
    json!({"metadata": {"name": "team-a"}, "spec": {
        "namespaceSelector": selector,
        "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"],
            "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 64},
                {"name": "nvidia.com/gpu", "nominalQuota": gpus}]}]}]}})
}

#[test]
fn live_queues_admit_by_quota_and_changes_apply_without_a_restart() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.pod(queued("a", "team", 4));
    // No LocalQueue yet: the pod waits and says so.
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty());
    assert!(
        out.unschedulable[0].message.contains("LocalQueue"),
        "{:?}",
        out.unschedulable
    );
    h.queue(
        "LocalQueue",
        json!({"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}),
        false,
    );
    h.queue("ClusterQueue", cluster_queue(4, json!({})), false);
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    // Queue statuses: admitted and pending workloads, usage per flavor; written once.
    let statuses = h.state.queue_statuses();
    let cq = statuses.iter().find(|j| j.kind == "ClusterQueue").unwrap();
    assert_eq!(cq.name, "team-a");
    assert_eq!(cq.namespace, None);
    assert_eq!(cq.status["admittedWorkloads"], 1);
    assert_eq!(cq.status["pendingWorkloads"], 0);
    let usage = &cq.status["flavorsUsage"][0];
    assert_eq!(usage["name"], "default");
    assert!(usage["resources"]
        .as_array()
        .unwrap()
        .contains(&json!({"name": "nvidia.com/gpu", "total": "4", "borrowed": "0"})));
    let lq = statuses.iter().find(|j| j.kind == "LocalQueue").unwrap();
    assert_eq!(
        (lq.namespace.as_deref(), lq.name.as_str()),
        (Some("ml"), "team")
    );
    assert_eq!(lq.status["admittedWorkloads"], 1);
    assert!(
        h.state.queue_statuses().is_empty(),
        "unchanged: not written again"
    );
    // The quota is full: the next pod waits for quota although the node has room, under
    // a reason cluster autoscalers do not scale up for.
    h.pod(queued("b", "team", 4));
    let out = h.state.cycle(2);
    assert!(out.binds.is_empty());
    assert_eq!(out.unschedulable[0].reason, "WaitingForQueue");
    assert!(
        out.unschedulable[0].message.contains("team-a"),
        "{:?}",
        out.unschedulable
    );
    // An invalid update is refused and the last good version stays in force.
    let mut bad = cluster_queue(8, json!({}));
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = json!("x");
    h.queue("ClusterQueue", bad, false);
    assert!(h.state.cycle(3).binds.is_empty());
    // Raising the quota lets it in.
    h.queue("ClusterQueue", cluster_queue(8, json!({})), false);
    let out = h.state.cycle(4);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    assert_eq!(out.binds[0].name, "b");
    // A namespaceSelector that the namespace's labels do not match keeps new pods out,
    // until the namespace gets the label.
    h.queue(
        "ClusterQueue",
        cluster_queue(16, json!({"matchLabels": {"team": "a"}})),
        false,
    );
    h.pod(queued("c", "team", 0));
    let out = h.state.cycle(5);
    assert!(out.binds.is_empty(), "{out:?}");
    h.namespace("ml", json!({"team": "a"}));
    let out = h.state.cycle(6);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    // The LocalQueue is deleted: new pods wait for it again.
    h.queue(
        "LocalQueue",
        json!({"metadata": {"name": "team", "namespace": "ml"}, "spec": {"clusterQueue": "team-a"}}),
        true,
    );
    h.pod(queued("d", "team", 0));
    let out = h.state.cycle(7);
    assert!(out.binds.is_empty());
    assert!(out.unschedulable[0].message.contains("LocalQueue"));
}

/// The `Active` condition of a queue's status among those written.
fn active(statuses: &[QueueStatusJob], kind: &str, name: &str) -> Value {
    let job = statuses
        .iter()
        .find(|j| j.kind == kind && j.name == name)
        .unwrap_or_else(|| panic!("no status of {kind} {name} written: {statuses:?}"));
    let conditions = job.status["conditions"].as_array().unwrap();
    assert_eq!(conditions.len(), 1, "{conditions:?}");
    assert_eq!(conditions[0]["type"], "Active");
    conditions[0].clone()
}

/// Wall time at driver time 0 in the queue condition tests (2027-01-15T08:00:00Z).
const WALL: i64 = 1_800_000_000_000;

/// `lastTransitionTime` at driver time `ms`.
fn at(ms: i64) -> Value {
    json!(Timestamp::from_millisecond(WALL + ms).unwrap().to_string())
}

fn flavor(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {}})
}

fn local_queue(name: &str, cluster_queue: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": "ml", "generation": 1},
        "spec": {"clusterQueue": cluster_queue}})
}

#[test]
fn queue_active_conditions_follow_the_stop_policy_and_keep_their_transition_time() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    h.queue("ResourceFlavor", flavor("default"), false);
    let mut cq = cluster_queue(8, json!({}));
    cq["metadata"]["generation"] = json!(3);
    h.queue("ClusterQueue", cq.clone(), false);
    h.queue("LocalQueue", local_queue("team", "team-a"), false);
    h.state.cycle(1_000);
    let statuses = h.state.queue_statuses();
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a"),
        json!({"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can admit new workloads", "lastTransitionTime": at(1_000),
            "observedGeneration": 3})
    );
    assert_eq!(
        active(&statuses, "LocalQueue", "team"),
        json!({"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can submit new workloads to ClusterQueue team-a",
            "lastTransitionTime": at(1_000), "observedGeneration": 1})
    );
    h.state.cycle(5_000);
    assert!(
        h.state.queue_statuses().is_empty(),
        "unchanged queues are not written again as time passes"
    );

    // Stopped: inactive, and the LocalQueue says why.
    cq["metadata"]["generation"] = json!(4);
    cq["spec"]["stopPolicy"] = json!("Hold");
    h.queue("ClusterQueue", cq.clone(), false);
    h.pod(queued("a", "team", 1));
    let out = h.state.cycle(10_000);
    assert!(out.binds.is_empty(), "a stopped queue admits nothing");
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (
            &c["status"],
            &c["reason"],
            &c["lastTransitionTime"],
            &c["observedGeneration"]
        ),
        (&json!("False"), &json!("Stopped"), &at(10_000), &json!(4))
    );
    assert_eq!(
        c["message"],
        "Can't admit new workloads: spec.stopPolicy is Hold; set it to None to admit workloads"
    );
    let l = active(&statuses, "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"], &l["lastTransitionTime"]),
        (
            &json!("False"),
            &json!("ClusterQueueIsInactive"),
            &at(10_000)
        )
    );
    assert_eq!(
        l["message"],
        "Can't submit new workloads: ClusterQueue team-a is inactive (Stopped): spec.stopPolicy is Hold; set it to None to admit workloads"
    );
    assert_eq!(
        statuses
            .iter()
            .find(|j| j.kind == "LocalQueue")
            .unwrap()
            .status["pendingWorkloads"],
        1
    );
    h.state.cycle(20_000);
    assert!(h.state.queue_statuses().is_empty());

    // Still stopped, another way: the message changes, the transition time does not.
    cq["spec"]["stopPolicy"] = json!("HoldAndDrain");
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(30_000);
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("Stopped"))
    );
    assert!(
        c["message"].as_str().unwrap().contains("HoldAndDrain"),
        "{c}"
    );
    assert_eq!(
        c["lastTransitionTime"],
        at(10_000),
        "status unchanged: time kept"
    );
    let l = active(&statuses, "LocalQueue", "team");
    assert!(
        l["message"].as_str().unwrap().contains("HoldAndDrain"),
        "{l}"
    );
    assert_eq!(
        l["lastTransitionTime"],
        at(10_000),
        "status unchanged: time kept"
    );

    // Running again: True, with a new transition time; the pending pod is admitted.
    cq["spec"]["stopPolicy"] = json!("None");
    h.queue("ClusterQueue", cq, false);
    let out = h.state.cycle(40_000);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    let statuses = h.state.queue_statuses();
    for (kind, name) in [("ClusterQueue", "team-a"), ("LocalQueue", "team")] {
        let c = active(&statuses, kind, name);
        assert_eq!(
            (&c["status"], &c["reason"], &c["lastTransitionTime"]),
            (&json!("True"), &json!("Ready"), &at(40_000)),
            "{kind} {name}"
        );
    }
}

#[test]
fn queue_conditions_name_missing_flavors_queues_and_unreadable_specs() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    // A flavor that does not exist: the engine admits in it all the same (without node
    // labels), so the queue is active and says what is missing.
    h.queue("ClusterQueue", cluster_queue(8, json!({})), false);
    h.queue("LocalQueue", local_queue("team", "team-a"), false);
    h.pod(queued("a", "team", 1));
    let out = h.state.cycle(1_000);
    assert_eq!(out.binds.len(), 1, "{out:?}");
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("True"), &json!("FlavorNotFound"))
    );
    assert_eq!(
        c["message"],
        "Can admit new workloads; spec.resourceGroups[0].flavors[0].name: ResourceFlavor \"default\" does not exist, so workloads admitted in it get no node labels or tolerations; create it, or fix the name"
    );
    assert!(
        c.get("observedGeneration").is_none(),
        "no generation listed"
    );
    assert_eq!(active(&statuses, "LocalQueue", "team")["reason"], "Ready");
    h.queue("ResourceFlavor", flavor("default"), false);
    h.state.cycle(2_000);
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "team-a");
    assert_eq!(
        (&c["reason"], &c["lastTransitionTime"]),
        (&json!("Ready"), &at(1_000))
    );

    // An unreadable update: the previous version stays in force, and the condition says so.
    let mut bad = cluster_queue(8, json!({}));
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"] = json!("x");
    h.queue("ClusterQueue", bad.clone(), false);
    h.state.cycle(3_000);
    let c = active(&h.state.queue_statuses(), "ClusterQueue", "team-a");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("True"), &json!("InvalidSpec"))
    );
    let message = c["message"].as_str().unwrap();
    assert!(
        message.starts_with("Can admit new workloads; its current spec cannot be used, so the previous one stays in force: field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"),
        "{message}"
    );

    // A ClusterQueue never readable is inactive, and so are its LocalQueues.
    bad["metadata"]["name"] = json!("broken");
    h.queue("ClusterQueue", bad, false);
    h.queue("LocalQueue", local_queue("via-broken", "broken"), false);
    // A LocalQueue whose ClusterQueue does not exist.
    h.queue("LocalQueue", local_queue("lost", "nope"), false);
    h.state.cycle(4_000);
    let statuses = h.state.queue_statuses();
    let c = active(&statuses, "ClusterQueue", "broken");
    assert_eq!(
        (&c["status"], &c["reason"]),
        (&json!("False"), &json!("InvalidSpec"))
    );
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("Can't admit new workloads: its spec cannot be used: field spec.resourceGroups[0].flavors[0].resources[1].nominalQuota"),
        "{c}"
    );
    let l = active(&statuses, "LocalQueue", "via-broken");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("False"), &json!("ClusterQueueIsInactive"))
    );
    assert!(
        l["message"]
            .as_str()
            .unwrap()
            .contains("ClusterQueue broken is inactive (InvalidSpec)"),
        "{l}"
    );
    let l = active(&statuses, "LocalQueue", "lost");
    assert_eq!(
        l,
        json!({"type": "Active", "status": "False", "reason": "ClusterQueueDoesNotExist",
            "message": "Can't submit new workloads: ClusterQueue \"nope\" (spec.clusterQueue) does not exist; create it, or fix spec.clusterQueue",
            "lastTransitionTime": at(4_000), "observedGeneration": 1})
    );
    // Creating it activates the LocalQueue.
    let mut nope = cluster_queue(8, json!({}));
    nope["metadata"]["name"] = json!("nope");
    h.queue("ClusterQueue", nope, false);
    h.state.cycle(5_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "lost");
    assert_eq!(
        (&l["status"], &l["reason"], &l["lastTransitionTime"]),
        (&json!("True"), &json!("Ready"), &at(5_000))
    );

    // A namespaceSelector that does not select the LocalQueue's namespace, until it does.
    h.queue(
        "ClusterQueue",
        cluster_queue(8, json!({"matchLabels": {"team": "a"}})),
        false,
    );
    h.state.cycle(6_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("False"), &json!("NamespaceNotSelected"))
    );
    assert!(
        l["message"]
            .as_str()
            .unwrap()
            .contains("ClusterQueue team-a does not admit namespace ml"),
        "{l}"
    );
    h.namespace("ml", json!({"team": "a"}));
    h.state.cycle(7_000);
    let l = active(&h.state.queue_statuses(), "LocalQueue", "team");
    assert_eq!(
        (&l["status"], &l["reason"]),
        (&json!("True"), &json!("Ready"))
    );
}

#[test]
fn a_queue_status_already_on_the_object_is_kept_and_not_written_again() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1")]);
    h.state.set_wall_origin(WALL);
    h.queue("ResourceFlavor", flavor("default"), false);
    // Written by an earlier leader an hour before: Active since then, counts stale.
    let mut cq = cluster_queue(8, json!({}));
    cq["status"] = json!({"pendingWorkloads": 7, "admittedWorkloads": 0,
        "conditions": [{"type": "Active", "status": "True", "reason": "Ready",
            "message": "Can admit new workloads", "lastTransitionTime": at(-3_600_000)}]});
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(1_000);
    let statuses = h.state.queue_statuses();
    let job = statuses.iter().find(|j| j.name == "team-a").unwrap();
    assert_eq!(job.status["pendingWorkloads"], 0);
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a")["lastTransitionTime"],
        at(-3_600_000),
        "the condition's status did not change"
    );
    // The watch brings the written status back: nothing to write.
    cq["status"] = job.status.clone();
    h.queue("ClusterQueue", cq.clone(), false);
    h.state.cycle(2_000);
    assert!(h.state.queue_statuses().is_empty());
    // Another replica (or a restart) that finds this status writes nothing either.
    let mut other = Harness::new(&[node("gpu-0", 8, "r1")]);
    other.state.set_wall_origin(WALL);
    other.queue("ResourceFlavor", flavor("default"), false);
    other.queue("ClusterQueue", cq.clone(), false);
    other.state.cycle(60_000);
    assert!(other.state.queue_statuses().is_empty());
    // Deleted and created again (without a status): written afresh.
    other.queue("ClusterQueue", cq.clone(), true);
    cq.as_object_mut().unwrap().remove("status");
    other.queue("ClusterQueue", cq, false);
    other.state.cycle(61_000);
    let statuses = other.state.queue_statuses();
    assert_eq!(
        active(&statuses, "ClusterQueue", "team-a")["lastTransitionTime"],
        at(61_000)
    );
}

#[test]
fn scheduler_plugins_and_volcano_pod_groups_make_gangs_without_status_writes() {
    let mut h = Harness::new(&[node("gpu-0", 8, "r1"), node("gpu-1", 8, "r1")]);
    let plugins = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "sp", "namespace": "ml", "uid": "pg-sp"}, "spec": {"minMember": 2}});
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::ForeignPodGroup {
            kind: "scheduler-plugins PodGroup",
            event: Box::new(Event::Apply(serde_json::from_value(plugins).unwrap())),
        },
    );
    let mut first: Value = serde_json::to_value(member("sp-0", "x", 4)).unwrap();
    first["metadata"]["labels"] = json!({"scheduling.x-k8s.io/pod-group": "sp"});
    h.pod(serde_json::from_value(first.clone()).unwrap());
    let out = h.state.cycle(0);
    assert!(out.binds.is_empty(), "1 of 2: {out:?}");
    assert!(
        out.group_status.is_empty(),
        "its status is not Kestrel's to write"
    );
    let mut second = first.clone();
    second["metadata"]["name"] = json!("sp-1");
    second["metadata"]["uid"] = json!("uid-sp-1");
    h.pod(serde_json::from_value(second).unwrap());
    let out = h.state.cycle(1);
    assert_eq!(out.binds.len(), 2, "the whole gang: {out:?}");
    assert!(out.group_status.is_empty() && out.group_events.is_empty());

    // Volcano: pods name their PodGroup by annotation.
    let volcano = json!({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "vc", "namespace": "ml", "uid": "pg-vc"}, "spec": {"minMember": 2}});
    driver::apply_change(
        &mut h.state,
        &h.stores,
        Change::ForeignPodGroup {
            kind: "Volcano PodGroup",
            event: Box::new(Event::Apply(serde_json::from_value(volcano).unwrap())),
        },
    );
    for i in 0..2 {
        let mut p: Value = serde_json::to_value(member(&format!("vc-{i}"), "x", 4)).unwrap();
        p["metadata"]["labels"] = json!({});
        p["metadata"]["annotations"] = json!({"scheduling.k8s.io/group-name": "vc"});
        h.pod(serde_json::from_value(p).unwrap());
    }
    let out = h.state.cycle(2);
    assert_eq!(out.binds.len(), 2, "{out:?}");
}
