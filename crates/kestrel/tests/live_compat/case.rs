//! The controllers the test plays (Jobs, JobSets, PyTorchJobs, Volcano Jobs, StatefulSets,
//! Deployments, ReplicaSets and the rest) and what a case has created.

use super::*;

/// An object's (namespace, name).
pub(crate) fn key(o: &Value) -> (String, String) {
    (
        o["metadata"]["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string(),
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

pub(crate) fn owner_ref(o: &Value) -> Value {
    json!({"apiVersion": o["apiVersion"], "kind": o["kind"], "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true})
}

/// A pod from a pod template as a controller makes it: its name, namespace, labels and
/// annotations added, for `scheduler`, owned by `owner`; its template's duration sped up,
/// or `duration` (sped up already) when the template has none.
pub(crate) fn pod_from_template(
    template: &Value,
    name: &str,
    namespace: &str,
    scheduler: &str,
    extra: (&Value, &Value),
    duration: Option<&str>,
    owner: Option<&Value>,
) -> Value {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": template.get("metadata").cloned().unwrap_or(json!({})),
        "spec": template["spec"].clone()});
    pod["metadata"]["name"] = json!(name);
    pod["metadata"]["namespace"] = json!(namespace);
    for (field, more) in [("labels", extra.0), ("annotations", extra.1)] {
        let map = pod["metadata"]
            .as_object_mut()
            .unwrap()
            .entry(field)
            .or_insert(json!({}));
        for (k, v) in more.as_object().into_iter().flatten() {
            map[k] = v.clone();
        }
    }
    let annotations = &mut pod["metadata"]["annotations"];
    match annotations.get(DURATION).and_then(Value::as_str) {
        Some(own) => annotations[DURATION] = json!(faster(own)),
        None => {
            if let Some(d) = duration {
                annotations[DURATION] = json!(d);
            }
        }
    }
    if let Some(owner) = owner {
        pod["metadata"]["ownerReferences"] = json!([owner_ref(owner)]);
    }
    pod["spec"]["schedulerName"] = json!(scheduler);
    pod["spec"]["terminationGracePeriodSeconds"] = json!(0);
    pod
}

/// The kinds the compatibility set creates (its cases' objects and what the controllers
/// played here make), with their resource names.
pub(crate) const PLURALS: [(&str, &str); 28] = [
    ("Pod", "pods"),
    ("RayCluster", "rayclusters"),
    ("RayJob", "rayjobs"),
    ("MPIJob", "mpijobs"),
    ("TrainJob", "trainjobs"),
    ("TrainingRuntime", "trainingruntimes"),
    ("ClusterTrainingRuntime", "clustertrainingruntimes"),
    ("Job", "jobs"),
    ("JobSet", "jobsets"),
    ("LeaderWorkerSet", "leaderworkersets"),
    ("PyTorchJob", "pytorchjobs"),
    ("PodGroup", "podgroups"),
    ("Deployment", "deployments"),
    ("ReplicaSet", "replicasets"),
    ("StatefulSet", "statefulsets"),
    ("PriorityClass", "priorityclasses"),
    ("WorkloadPriorityClass", "workloadpriorityclasses"),
    ("ClusterQueue", "clusterqueues"),
    ("LocalQueue", "localqueues"),
    ("Cohort", "cohorts"),
    ("ResourceFlavor", "resourceflavors"),
    ("Queue", "queues"),
    ("PersistentVolumeClaim", "persistentvolumeclaims"),
    ("PersistentVolume", "persistentvolumes"),
    ("StorageClass", "storageclasses"),
    ("DeviceClass", "deviceclasses"),
    ("ResourceClaim", "resourceclaims"),
    ("ResourceClaimTemplate", "resourceclaimtemplates"),
];

/// Applies one case's objects in Kubernetes' order (queues and classes, then workloads)
/// and plays the controllers of the workloads that have none here but batch Jobs'.
pub(crate) struct Case {
    pub(crate) client: kube::Client,
    pub(crate) scheduler: String,
    /// What the case created, to delete afterwards: (resource, namespace, name).
    pub(crate) created: Vec<(kube::api::ApiResource, Option<String>, String)>,
    pub(crate) namespaces: BTreeSet<String>,
    /// StatefulSets whose pods come one at a time (`OrderedReady`): (the set as created,
    /// its pods' duration).
    pub(crate) ordered_sets: Vec<(Value, Option<String>)>,
    /// Trainer's runtimes created, by (kind, namespace or "", name), for the TrainJobs.
    pub(crate) runtimes: BTreeMap<(String, String, String), Value>,
}

impl Case {
    pub(crate) async fn create(&mut self, object: &Value) -> Value {
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        let kind = object["kind"].as_str().unwrap().to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let Some((_, plural)) = PLURALS.iter().find(|(k, _)| *k == kind) else {
            panic!(
                "{kind} ({api_version}) is not a kind the compatibility set creates here: add it \
                 and its plural to PLURALS"
            )
        };
        let resource = kube::api::ApiResource {
            group: group.to_string(),
            version: version.to_string(),
            api_version: api_version.clone(),
            kind: kind.clone(),
            plural: plural.to_string(),
        };
        let namespaced = object["metadata"].get("namespace").is_some();
        let (namespace, name) = key(object);
        let api: Api<kube::api::DynamicObject> = if namespaced {
            if self.namespaces.insert(namespace.clone()) {
                // Namespaces stay between cases: without a namespace controller here, a
                // deleted one would never finish terminating.
                let namespaces: Api<k8s_openapi::api::core::v1::Namespace> =
                    Api::all(self.client.clone());
                let ns = serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap();
                match namespaces.create(&PostParams::default(), &ns).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => panic!("creating namespace {namespace}: {e}"),
                }
            }
            Api::namespaced_with(self.client.clone(), &namespace, &resource)
        } else {
            Api::all_with(self.client.clone(), &resource)
        };
        self.created.push((
            resource.clone(),
            namespaced.then(|| namespace.clone()),
            name.clone(),
        ));
        let mut object = object.clone();
        object["metadata"]["namespace"] = if namespaced {
            json!(namespace)
        } else {
            Value::Null
        };
        if kind.ends_with("TrainingRuntime") {
            let ns = if namespaced {
                namespace.clone()
            } else {
                String::new()
            };
            self.runtimes
                .insert((kind.clone(), ns, name.clone()), object.clone());
        }
        let typed: kube::api::DynamicObject = serde_json::from_value(object).unwrap();
        // The API server serves a new CRD's kind a moment after accepting it.
        let created = eventually(
            Duration::from_secs(30),
            &format!("{kind} {name} created"),
            || {
                let (api, typed) = (api.clone(), typed.clone());
                async move { api.create(&PostParams::default(), &typed).await.ok() }
            },
        )
        .await;
        serde_json::to_value(created).unwrap()
    }

    /// A pod, created.
    pub(crate) async fn pod(&mut self, pod: Value) {
        self.create(&pod).await;
    }

    /// `count` pods from `template`, as a controller creates them, owned by `owner`: pod `i`
    /// has the name, labels and annotations `each(i)` gives.
    pub(crate) async fn pods_from_template(
        &mut self,
        template: &Value,
        count: u64,
        namespace: &str,
        duration: Option<&str>,
        owner: &Value,
        each: impl Fn(u64) -> (String, Value, Value),
    ) {
        for i in 0..count {
            let (name, labels, annotations) = each(i);
            let pod = pod_from_template(
                template,
                &name,
                namespace,
                &self.scheduler,
                (&labels, &annotations),
                duration,
                Some(owner),
            );
            self.pod(pod).await;
        }
    }

    /// A workload object and what its controller creates at once.
    pub(crate) async fn workload(&mut self, object: &Value) {
        let created = self.create(object).await;
        let created = json!({"apiVersion": object["apiVersion"], "kind": object["kind"],
            "metadata": created["metadata"], "spec": object["spec"]});
        let (namespace, name) = key(object);
        let duration = object["metadata"]["annotations"][DURATION]
            .as_str()
            .map(faster);
        let group = object["apiVersion"]
            .as_str()
            .unwrap()
            .split('/')
            .next()
            .unwrap();
        match (group, object["kind"].as_str().unwrap()) {
            ("kubeflow.org", "PyTorchJob") => {
                let specs = object["spec"]["pytorchReplicaSpecs"].as_object().unwrap();
                for (role, spec) in specs {
                    let role = role.to_lowercase();
                    let count = spec["replicas"].as_u64().unwrap_or(1);
                    let (template, duration) = (&spec["template"], duration.as_deref());
                    self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                        let labels = json!({"training.kubeflow.org/job-name": name,
                            "training.kubeflow.org/replica-type": role,
                            "training.kubeflow.org/replica-index": i.to_string()});
                        (format!("{name}-{role}-{i}"), labels, json!({}))
                    })
                    .await;
                }
            }
            ("jobset.x-k8s.io", "JobSet") => {
                for job in object["spec"]["replicatedJobs"].as_array().unwrap() {
                    let role = job["name"].as_str().unwrap();
                    for i in 0..job["replicas"].as_u64().unwrap_or(1) {
                        let labels = json!({"jobset.sigs.k8s.io/jobset-name": name,
                            "jobset.sigs.k8s.io/replicatedjob-name": role,
                            "jobset.sigs.k8s.io/job-index": i.to_string()});
                        let mut spec = job["template"]["spec"].clone();
                        for (k, v) in labels.as_object().unwrap() {
                            spec["template"]["metadata"]["labels"][k] = v.clone();
                        }
                        let mut annotations = json!({});
                        if let Some(d) = object["metadata"]["annotations"][DURATION].as_str() {
                            annotations[DURATION] = json!(d);
                        }
                        let child = json!({"apiVersion": "batch/v1", "kind": "Job",
                            "metadata": {"name": format!("{name}-{role}-{i}"),
                                "namespace": namespace, "labels": labels,
                                "annotations": annotations,
                                "ownerReferences": [owner_ref(&created)]},
                            "spec": spec});
                        self.create(&child).await;
                    }
                }
            }
            ("batch.volcano.sh", "Job") => {
                let tasks = object["spec"]["tasks"].as_array().unwrap();
                let total: u64 = tasks
                    .iter()
                    .map(|t| t["replicas"].as_u64().unwrap_or(1))
                    .sum();
                let mut group = json!({"apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"minMember": object["spec"]["minAvailable"].as_u64().unwrap_or(total),
                        "minTaskMember": tasks.iter()
                            .filter(|t| t.get("minAvailable").is_some())
                            .map(|t| (t["name"].as_str().unwrap().to_string(), t["minAvailable"].clone()))
                            .collect::<serde_json::Map<_, _>>()}});
                if let Some(queue) = object["spec"]["queue"].as_str() {
                    group["spec"]["queue"] = json!(queue);
                }
                self.create(&group).await;
                for task in tasks {
                    let task_name = task["name"].as_str().unwrap();
                    let labels = json!({"volcano.sh/job-name": name,
                        "volcano.sh/task-spec": task_name});
                    let mut annotations = json!({"scheduling.k8s.io/group-name": name,
                        "volcano.sh/task-spec": task_name});
                    if let Some(queue) = object["spec"]["queue"].as_str() {
                        annotations["volcano.sh/queue-name"] = json!(queue);
                    }
                    let count = task["replicas"].as_u64().unwrap_or(1);
                    let (template, duration) = (&task["template"], duration.as_deref());
                    self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                        let name = format!("{name}-{task_name}-{i}");
                        (name, labels.clone(), annotations.clone())
                    })
                    .await;
                }
            }
            ("apps", "StatefulSet") if object["spec"]["podManagementPolicy"] == "Parallel" => {
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                    (format!("{name}-{i}"), stateful_pod_labels(i), json!({}))
                })
                .await;
            }
            ("leaderworkerset.x-k8s.io", "LeaderWorkerSet") => {
                // Each group's leader and workers at once, with the labels and the size
                // annotation LeaderWorkerSet's controller writes.
                let groups = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let lwt = &object["spec"]["leaderWorkerTemplate"];
                let size = lwt["size"].as_u64().unwrap_or(1);
                let worker = &lwt["workerTemplate"];
                let leader = if lwt["leaderTemplate"].is_null() {
                    worker
                } else {
                    &lwt["leaderTemplate"]
                };
                for group in 0..groups {
                    for index in 0..size {
                        let template = if index == 0 { leader } else { worker };
                        let pod_name = match index {
                            0 => format!("{name}-{group}"),
                            _ => format!("{name}-{group}-{index}"),
                        };
                        let labels = json!({"leaderworkerset.sigs.k8s.io/name": name,
                            "leaderworkerset.sigs.k8s.io/group-index": group.to_string(),
                            "leaderworkerset.sigs.k8s.io/worker-index": index.to_string()});
                        let annotations =
                            json!({"leaderworkerset.sigs.k8s.io/size": size.to_string()});
                        let pod = pod_from_template(
                            template,
                            &pod_name,
                            &namespace,
                            &self.scheduler,
                            (&labels, &annotations),
                            duration.as_deref(),
                            None,
                        );
                        self.pod(pod).await;
                    }
                }
            }
            ("kubeflow.org", "MPIJob") => {
                // The MPI Operator with gang scheduling (scheduler-plugins): a PodGroup of
                // all its pods, which they name, then the launcher and the workers.
                let specs = object["spec"]["mpiReplicaSpecs"].as_object().unwrap();
                let count = |role: &str| {
                    let default = u64::from(role == "Launcher");
                    specs
                        .get(role)
                        .map_or(0, |s| s["replicas"].as_u64().unwrap_or(default))
                };
                let group = json!({"apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"minMember": count("Launcher") + count("Worker")}});
                self.create(&group).await;
                for role in ["Launcher", "Worker"] {
                    let Some(spec) = specs.get(role) else {
                        continue;
                    };
                    let role_label = role.to_lowercase();
                    let labels = json!({"training.kubeflow.org/job-name": name,
                        "training.kubeflow.org/job-role": role_label,
                        "scheduling.x-k8s.io/pod-group": name});
                    let (template, duration) = (&spec["template"], duration.as_deref());
                    self.pods_from_template(
                        template,
                        count(role),
                        &namespace,
                        duration,
                        &created,
                        |i| {
                            (
                                format!("{name}-{role_label}-{i}"),
                                labels.clone(),
                                json!({}),
                            )
                        },
                    )
                    .await;
                }
            }
            ("ray.io", "RayJob") => {
                // KubeRay: the RayJob's cluster, with its labels and annotations, owned by
                // it (the submitter Job comes once the cluster is ready; it asks no GPU).
                let cluster = json!({"apiVersion": "ray.io/v1", "kind": "RayCluster",
                    "metadata": {"name": format!("{name}-raycluster"), "namespace": namespace,
                        "labels": object["metadata"]["labels"],
                        "annotations": object["metadata"]["annotations"],
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": object["spec"]["rayClusterSpec"]});
                Box::pin(self.workload(&cluster)).await;
            }
            ("ray.io", "RayCluster") => {
                // KubeRay: the head, then each worker group's replicas times its hosts,
                // with the labels it writes.
                let spec = &object["spec"];
                let head = json!([{"groupName": "headgroup", "replicas": 1,
                    "template": spec["headGroupSpec"]["template"]}]);
                let groups = head
                    .as_array()
                    .unwrap()
                    .iter()
                    .chain(spec["workerGroupSpecs"].as_array().into_iter().flatten());
                for group in groups.cloned().collect::<Vec<_>>() {
                    let group_name = group["groupName"].as_str().unwrap().to_string();
                    let count = group["replicas"].as_u64().unwrap_or(1)
                        * group["numOfHosts"].as_u64().unwrap_or(1);
                    let node_type = if group_name == "headgroup" {
                        "head"
                    } else {
                        "worker"
                    };
                    let (template, duration) = (&group["template"], duration.as_deref());
                    self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                        let labels = json!({"ray.io/cluster": name, "ray.io/group": group_name,
                            "ray.io/node-type": node_type});
                        (format!("{name}-{group_name}-{i}"), labels, json!({}))
                    })
                    .await;
                }
            }
            ("trainer.kubeflow.org", "TrainJob") => {
                // Trainer's controller: the runtime's JobSet, named after the TrainJob and
                // owned by it, its trainer Job sized by spec.trainer.
                let reference = &object["spec"]["runtimeRef"];
                let kind = reference["kind"]
                    .as_str()
                    .unwrap_or("ClusterTrainingRuntime")
                    .to_string();
                let ns = match kind.as_str() {
                    "TrainingRuntime" => namespace.clone(),
                    _ => String::new(),
                };
                let runtime_name = reference["name"].as_str().unwrap().to_string();
                let runtime = &self.runtimes[&(kind, ns, runtime_name)];
                let mut spec = runtime["spec"]["template"]["spec"].clone();
                let trainer = &object["spec"]["trainer"];
                let nodes = trainer["numNodes"]
                    .as_u64()
                    .or_else(|| runtime["spec"]["mlPolicy"]["numNodes"].as_u64());
                for job in spec["replicatedJobs"].as_array_mut().unwrap() {
                    let ancestor = &job["template"]["metadata"]["labels"]
                        ["trainer.kubeflow.org/trainjob-ancestor-step"];
                    if ancestor != "trainer" && job["name"] != "node" {
                        continue;
                    }
                    let job_spec = &mut job["template"]["spec"];
                    if let Some(n) = nodes {
                        job_spec["parallelism"] = json!(n);
                        job_spec["completions"] = json!(n);
                    }
                    if !trainer["resourcesPerNode"].is_null() {
                        for c in job_spec["template"]["spec"]["containers"]
                            .as_array_mut()
                            .unwrap()
                        {
                            if c["name"] == "node" {
                                c["resources"] = trainer["resourcesPerNode"].clone();
                            }
                        }
                    }
                }
                let jobset = json!({"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                    "metadata": {"name": name, "namespace": namespace,
                        "labels": object["spec"]["labels"].as_object().cloned().unwrap_or_default(),
                        "annotations": object["metadata"]["annotations"],
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": spec});
                Box::pin(self.workload(&jobset)).await;
            }
            // OrderedReady: the pass below creates each pod once the one before it is ready.
            ("apps", "StatefulSet") => self.ordered_sets.push((created, duration)),
            ("apps", "ReplicaSet") => {
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &created, |i| {
                    (format!("{name}-{i}"), json!({}), json!({}))
                })
                .await;
            }
            ("apps", "Deployment") => {
                let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": {"name": format!("{name}-0"), "namespace": namespace,
                        "ownerReferences": [owner_ref(&created)]},
                    "spec": {"replicas": object["spec"]["replicas"],
                        "selector": object["spec"]["selector"],
                        "template": object["spec"]["template"]}});
                let replica_set = self.create(&replica_set).await;
                let replica_set = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "metadata": replica_set["metadata"]});
                let count = object["spec"]["replicas"].as_u64().unwrap_or(1);
                let (template, duration) = (&object["spec"]["template"], duration.as_deref());
                self.pods_from_template(template, count, &namespace, duration, &replica_set, |i| {
                    (format!("{name}-0-{i}"), json!({}), json!({}))
                })
                .await;
            }
            // batch/v1 Jobs: the Job controller below.
            _ => {}
        }
    }

    /// One pass of the Job controller over the case's namespaces: each Job keeps
    /// `min(parallelism, completions - succeeded)` pods that have not finished, and its
    /// `status.succeeded` counts its pods that did.
    pub(crate) async fn run_jobs(&self, created: &mut BTreeMap<String, u64>) {
        for namespace in &self.namespaces {
            let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
            let Ok(jobs_listed) = jobs.list(&ListParams::default()).await else {
                continue;
            };
            let Ok(pods_listed) = pods.list(&ListParams::default()).await else {
                continue;
            };
            for job in jobs_listed.items {
                let uid = job.metadata.uid.clone().unwrap_or_default();
                let name = job.metadata.name.clone().unwrap_or_default();
                let owned: Vec<&Pod> = pods_listed
                    .items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.uid == uid)
                    })
                    .collect();
                let phase = |p: &Pod| {
                    p.status
                        .as_ref()
                        .and_then(|s| s.phase.clone())
                        .unwrap_or_default()
                };
                let succeeded = owned.iter().filter(|p| phase(p) == "Succeeded").count() as i32;
                let active = owned
                    .iter()
                    .filter(|p| phase(p) != "Succeeded" && phase(p) != "Failed")
                    .count() as i32;
                let spec = job.spec.clone().unwrap_or_default();
                let parallelism = spec.parallelism.unwrap_or(1);
                let completions = spec.completions.unwrap_or(parallelism);
                if job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0) != succeeded {
                    let _ = jobs
                        .patch_status(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"status": {"succeeded": succeeded}})),
                        )
                        .await;
                }
                let want = parallelism.min(completions - succeeded).max(0);
                let job_value = serde_json::to_value(&job).unwrap();
                let job_value = json!({"apiVersion": "batch/v1", "kind": "Job",
                    "metadata": job_value["metadata"], "spec": job_value["spec"]});
                let duration = job
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(DURATION))
                    .map(|d| faster(d));
                for _ in active..want {
                    let n = created.entry(uid.clone()).or_insert(0);
                    let labels = json!({"batch.kubernetes.io/job-name": name, "job-name": name});
                    let mut labels = labels;
                    for (k, v) in job.metadata.labels.iter().flatten() {
                        if k.starts_with("jobset.sigs.k8s.io/") {
                            labels[k] = json!(v);
                        }
                    }
                    let pod = pod_from_template(
                        &job_value["spec"]["template"],
                        &format!("{name}-{n}"),
                        namespace,
                        &self.scheduler,
                        (&labels, &json!({})),
                        duration.as_deref(),
                        Some(&job_value),
                    );
                    *n += 1;
                    let typed: Pod = serde_json::from_value(pod).unwrap();
                    let _ = pods.create(&PostParams::default(), &typed).await;
                }
            }
        }
    }

    /// One pass of the StatefulSet controller over the `OrderedReady` sets: the next pod of
    /// each, once every pod before it runs and is ready.
    pub(crate) async fn run_ordered_sets(&self) {
        for (set, duration) in &self.ordered_sets {
            let (namespace, name) = key(set);
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
            let Ok(listed) = pods.list(&ListParams::default()).await else {
                continue;
            };
            let ready = |pod: &Pod| {
                pod.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            };
            let replicas = set["spec"]["replicas"].as_u64().unwrap_or(1);
            let mut next = 0;
            while next < replicas {
                let pod_name = format!("{name}-{next}");
                match listed
                    .items
                    .iter()
                    .find(|p| p.metadata.name.as_deref() == Some(&pod_name))
                {
                    Some(pod) if ready(pod) => next += 1,
                    Some(_) => break,
                    None => {
                        let pod = pod_from_template(
                            &set["spec"]["template"],
                            &pod_name,
                            &namespace,
                            &self.scheduler,
                            (&stateful_pod_labels(next), &json!({})),
                            duration.as_deref(),
                            Some(set),
                        );
                        let typed: Pod = serde_json::from_value(pod).unwrap();
                        let _ = pods.create(&PostParams::default(), &typed).await;
                        break;
                    }
                }
            }
        }
    }

    /// Pods of the case's namespaces: (bound and not finished, succeeded, pending).
    pub(crate) async fn counts(&self, runs: &mut Runs) -> (u64, u64, u64) {
        let (mut running, mut succeeded, mut pending) = (0, 0, 0);
        let now = Instant::now();
        runs.samples.push(now);
        for namespace in &self.namespaces {
            for pod in pods_in(&self.client, namespace).await {
                let phase = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.clone())
                    .unwrap_or_default();
                let key = (
                    namespace.clone(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                let bound = node_of(&pod).is_some();
                if bound || matches!(phase.as_str(), "Succeeded" | "Failed") {
                    let run = runs.pods.entry(key).or_insert((now, None));
                    if matches!(phase.as_str(), "Succeeded" | "Failed") {
                        run.1.get_or_insert(now);
                    }
                }
                match (phase.as_str(), bound) {
                    ("Succeeded", _) => succeeded += 1,
                    ("Failed", _) => {}
                    (_, true) => running += 1,
                    (_, false) => pending += 1,
                }
            }
        }
        (running, succeeded, pending)
    }

    /// Deletes what the case created (there is no garbage collector here): its pods, its
    /// nodes, then every object in reverse order.
    pub(crate) async fn clean(&self, node_prefix: &str) {
        let namespaces: Vec<&str> = self.namespaces.iter().map(String::as_str).collect();
        cleanup(&self.client, node_prefix, &namespaces).await;
        for namespace in &self.namespaces {
            let jobs: Api<Job> = Api::namespaced(self.client.clone(), namespace);
            let _ = jobs
                .delete_collection(&DeleteParams::background(), &ListParams::default())
                .await;
        }
        for (resource, namespace, name) in self.created.iter().rev() {
            let api: Api<kube::api::DynamicObject> = match namespace {
                Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
                None => Api::all_with(self.client.clone(), resource),
            };
            if matches!(
                resource.kind.as_str(),
                "PersistentVolumeClaim" | "PersistentVolume"
            ) {
                // No protection controller runs here to take the finalizer off.
                let unprotect = json!({"metadata": {"finalizers": null}});
                let _ = api
                    .patch(
                        name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&unprotect),
                    )
                    .await;
            }
            let _ = api
                .delete(name, &DeleteParams::background().grace_period(0))
                .await;
        }
    }
}

/// The label the StatefulSet controller puts on its pod `i`.
pub(crate) fn stateful_pod_labels(i: u64) -> Value {
    json!({"apps.kubernetes.io/pod-index": i.to_string()})
}

/// When each pod was first seen bound and first seen ended, and when the pods were
/// sampled: the most pods running at once, as the simulator counts it.
#[derive(Default)]
pub(crate) struct Runs {
    pub(crate) samples: Vec<Instant>,
    pub(crate) pods: BTreeMap<(String, String), (Instant, Option<Instant>)>,
}

impl Runs {
    /// The most pods running at any sample. A pod counts until shortly before it ended:
    /// the fake kubelet starts (and so ends) a gang's pods a few milliseconds apart, where
    /// the simulator ends them at one instant, so a gang that waits for most of another's
    /// GPUs may bind while that one's last pod is ending. What is over-committed meanwhile
    /// the invariant checker sees on its own.
    pub(crate) fn most_at_once(&self) -> usize {
        let counted_until = |bound: Instant, ended: Option<Instant>| match ended {
            None => None,
            Some(ended) => {
                let slack = ((ended - bound) / 10).min(Duration::from_millis(500));
                Some(ended - slack)
            }
        };
        self.samples
            .iter()
            .map(|&t| {
                self.pods
                    .values()
                    .filter(|&&(bound, ended)| {
                        bound <= t && counted_until(bound, ended).is_none_or(|until| t < until)
                    })
                    .count()
            })
            .max()
            .unwrap_or(0)
    }
}
