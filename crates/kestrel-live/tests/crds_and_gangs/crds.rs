//! Kestrel's CRDs, generated from the Rust types: names, structural schemas, validation.

use crate::common::*;

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
        (
            "NodeMaintenance",
            "nodemaintenances",
            "Cluster",
            Some("nm"),
            true,
        ),
        (
            "TrainingJob",
            "trainingjobs",
            "Namespaced",
            Some("tj"),
            true,
        ),
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
    // A PodGroup as docs/concepts/gangs-and-topology.md writes one, as the simulator reads it.
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
    let parsed = kestrel_objects::gangs::parse_gang_document(std::path::Path::new("x"), &value);
    assert!(parsed.is_ok(), "{parsed:?}");
}
