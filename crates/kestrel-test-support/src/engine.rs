//! The engine's objects as tests build them (`kestrel_core` types), with the defaults most
//! tests share: nodes of 64 cores and 512 GiB with flat H100s (81,559 MiB each), pods of
//! 1 cpu and 1 GiB, queues with ample cpu and memory quota.
//!
//! ```
//! use kestrel_test_support::engine::{cluster_queue, gpu_node, node, pod, GpuRequest};
//! let n = gpu_node("gpu-0", 8);
//! let cpu_only = node("cpu-0").cpu_milli(16_000).memory(64 << 30).build();
//! let p = pod("team", "train").gpus(4).queue("main").priority(10).build();
//! let q = cluster_queue("team-a").cohort("org").gpus(8).borrowing_limit(4).build();
//! # let _ = (n, cpu_only, p, q, GpuRequest::None);
//! ```

pub use kestrel_core::GpuRequest;
use kestrel_core::{
    ClusterQueueSpec, Demand, FlavorQuotas, GangMembership, GangSpec, GpuTopology, LocalQueueSpec,
    NodeSpec, PodSpec, ResourceGroup, ResourceQuota, Resources, Scheduler, GPU_RESOURCE,
};

/// A node with `gpus` flat H100s, 64 cores and 512 GiB (no labels, no taints).
pub fn gpu_node(name: &str, gpus: u32) -> NodeSpec {
    node(name).gpus(gpus).build()
}

/// A node of 64 cores and 512 GiB without GPUs, to shape further.
pub fn node(name: &str) -> NodeBuilder {
    NodeBuilder {
        name: name.to_string(),
        cpu_milli: 64_000,
        memory: 512 << 30,
        gpus: None,
        labels: Vec::new(),
    }
}

/// A node being built; [`NodeBuilder::build`] gives the `NodeSpec`.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    name: String,
    cpu_milli: i64,
    memory: i64,
    gpus: Option<(GpuTopology, String, u64, u32)>,
    labels: Vec<(String, String)>,
}

impl NodeBuilder {
    pub fn cpu_milli(mut self, milli: i64) -> Self {
        self.cpu_milli = milli;
        self
    }

    /// Memory in bytes.
    pub fn memory(mut self, bytes: i64) -> Self {
        self.memory = bytes;
        self
    }

    /// `count` flat H100s of 81,559 MiB.
    pub fn gpus(self, count: u32) -> Self {
        self.devices(GpuTopology::Flat, "H100", 81_559, count)
    }

    /// `count` GPUs of `model` with `memory_mib` each, laid out as `topology` (with its
    /// NICs).
    pub fn devices(
        mut self,
        topology: GpuTopology,
        model: &str,
        memory_mib: u64,
        count: u32,
    ) -> Self {
        self.gpus = Some((topology, model.to_string(), memory_mib, count));
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    pub fn build(self) -> NodeSpec {
        let mut node = NodeSpec::new(&self.name, Resources::new(self.cpu_milli, self.memory));
        if let Some((topology, model, memory_mib, count)) = self.gpus {
            (node.gpus, node.nics) = topology.devices(&model, memory_mib, count);
        }
        for (key, value) in self.labels {
            node.labels.insert(key, value);
        }
        node
    }
}

/// A pod of 1 cpu and 1 GiB without GPUs, to shape further.
pub fn pod(namespace: &str, name: &str) -> PodBuilder {
    PodBuilder {
        namespace: namespace.to_string(),
        name: name.to_string(),
        cpu_milli: 1_000,
        memory: 1 << 30,
        gpu: GpuRequest::None,
        queue: None,
        priority: None,
        gang: None,
    }
}

/// A pod being built; [`PodBuilder::build`] gives the `PodSpec`.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    namespace: String,
    name: String,
    cpu_milli: i64,
    memory: i64,
    gpu: GpuRequest,
    queue: Option<String>,
    priority: Option<i32>,
    gang: Option<GangMembership>,
}

impl PodBuilder {
    pub fn cpu_milli(mut self, milli: i64) -> Self {
        self.cpu_milli = milli;
        self
    }

    /// Memory in bytes.
    pub fn memory(mut self, bytes: i64) -> Self {
        self.memory = bytes;
        self
    }

    /// `count` whole GPUs (none when 0).
    pub fn gpus(self, count: u32) -> Self {
        self.gpu(match count {
            0 => GpuRequest::None,
            n => GpuRequest::Whole(n),
        })
    }

    pub fn gpu(mut self, gpu: GpuRequest) -> Self {
        self.gpu = gpu;
        self
    }

    /// The LocalQueue the pod names.
    pub fn queue(mut self, queue: &str) -> Self {
        self.queue = Some(queue.to_string());
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// A member of gang `gang` (in the pod's namespace), with a rank or none.
    pub fn member_of(mut self, gang: &str, rank: Option<u32>) -> Self {
        self.gang = Some(GangMembership {
            gang: gang.into(),
            role: None,
            rank,
        });
        self
    }

    pub fn build(self) -> PodSpec {
        let mut pod = PodSpec::new(
            &self.namespace,
            &self.name,
            Demand {
                resources: Resources::new(self.cpu_milli, self.memory),
                gpu: self.gpu,
            },
        );
        if let Some(queue) = self.queue {
            pod.queue = Some(queue);
        }
        if let Some(priority) = self.priority {
            pod.priority = priority;
        }
        if let Some(gang) = self.gang {
            pod.gang = Some(gang);
        }
        pod
    }
}

/// A gang `namespace/name` of at least `min_member` pods, nothing else set.
pub fn gang(namespace: &str, name: &str, min_member: u32) -> GangSpec {
    GangSpec {
        namespace: namespace.into(),
        name: name.into(),
        min_member,
        ..Default::default()
    }
}

/// The one resource group of a ClusterQueue: flavor `default` covering cpu (1,000 cores),
/// memory (1 PiB) and `nvidia.com/gpu` with `gpu_milli` thousandths of GPU nominal and a
/// borrowing limit in thousandths, if any.
pub fn gpu_quota(gpu_milli: i64, borrowing_limit_milli: Option<i64>) -> ResourceGroup {
    let quota = |name: &str, nominal: i64, borrowing_limit: Option<i64>| ResourceQuota {
        name: name.into(),
        nominal,
        borrowing_limit,
        lending_limit: None,
    };
    ResourceGroup {
        covered: vec!["cpu".into(), "memory".into(), GPU_RESOURCE.into()],
        flavors: vec![FlavorQuotas {
            flavor: "default".into(),
            resources: vec![
                quota("cpu", 1_000_000, None),
                quota("memory", 1 << 50, None),
                quota(GPU_RESOURCE, gpu_milli, borrowing_limit_milli),
            ],
        }],
    }
}

/// A ClusterQueue of fair weight 1 with no quota yet, to shape further.
pub fn cluster_queue(name: &str) -> QueueBuilder {
    QueueBuilder {
        name: name.to_string(),
        cohort: None,
        gpu_milli: 0,
        borrowing_limit_milli: None,
    }
}

/// A ClusterQueue being built; [`QueueBuilder::build`] gives the `ClusterQueueSpec`.
#[derive(Clone, Debug)]
pub struct QueueBuilder {
    name: String,
    cohort: Option<String>,
    gpu_milli: i64,
    borrowing_limit_milli: Option<i64>,
}

impl QueueBuilder {
    pub fn cohort(mut self, cohort: &str) -> Self {
        self.cohort = Some(cohort.to_string());
        self
    }

    /// Nominal quota in whole GPUs.
    pub fn gpus(self, gpus: i64) -> Self {
        self.gpu_milli(gpus * 1000)
    }

    /// Nominal quota in thousandths of a GPU.
    pub fn gpu_milli(mut self, milli: i64) -> Self {
        self.gpu_milli = milli;
        self
    }

    /// Borrowing limit in whole GPUs.
    pub fn borrowing_limit(self, gpus: i64) -> Self {
        self.borrowing_limit_milli(gpus * 1000)
    }

    /// Borrowing limit in thousandths of a GPU.
    pub fn borrowing_limit_milli(mut self, milli: i64) -> Self {
        self.borrowing_limit_milli = Some(milli);
        self
    }

    pub fn build(self) -> ClusterQueueSpec {
        ClusterQueueSpec {
            name: self.name,
            cohort: self.cohort,
            resource_groups: vec![gpu_quota(self.gpu_milli, self.borrowing_limit_milli)],
            fair_weight: 1.0,
            ..Default::default()
        }
    }
}

/// Adds the ClusterQueue and a LocalQueue `main` for it in the namespace of its name.
pub fn add_queue(s: &mut Scheduler, queue: ClusterQueueSpec) {
    let name = queue.name.clone();
    s.add_cluster_queue(queue).unwrap();
    s.add_local_queue(LocalQueueSpec {
        namespace: name.clone(),
        name: "main".into(),
        cluster_queue: name,
    });
}
