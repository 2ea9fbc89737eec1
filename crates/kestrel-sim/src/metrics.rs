//! What a simulation run measured. The report and the summary table render this; `--json`
//! prints it.

use kestrel_core::Millis;
use serde::Serialize;

/// Distribution of a duration, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `values` (seconds).
    pub fn of(values: &mut [f64]) -> Percentiles {
        if values.is_empty() {
            return Percentiles::default();
        }
        values.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let i = ((p / 100.0) * values.len() as f64).ceil() as usize;
            values[i.clamp(1, values.len()) - 1]
        };
        Percentiles {
            count: values.len() as u64,
            mean: values.iter().sum::<f64>() / values.len() as f64,
            p50: rank(50.0),
            p95: rank(95.0),
            p99: rank(99.0),
            max: values[values.len() - 1],
        }
    }
}

/// One point of the time series.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    /// Simulated time since the start.
    pub at: Millis,
    /// GPUs allocated to pods (shares count as fractions).
    pub gpus_allocated: f64,
    /// GPUs kept busy: allocated GPUs times each pod's utilization.
    pub gpus_utilized: f64,
    /// cpu allocated / allocatable over all nodes, 0..=1.
    pub cpu_allocated: f64,
    pub pods_pending: u32,
    pub pods_running: u32,
    /// Free whole GPUs that no pending pod can use now (on nodes none of them fits).
    pub gpus_fragmented: f64,
    /// Free GPUs (shares count as fractions).
    pub gpus_free: f64,
    /// The most common pending reasons now: (reason, pods), at most five.
    pub top_pending_reasons: Vec<(String, u32)>,
}

/// Percentiles for one group (a priority value or a namespace).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GroupStats {
    pub group: String,
    pub queue_wait: Percentiles,
    pub completion_time: Percentiles,
}

/// A pod still pending at the end, with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PendingPod {
    pub pod: String,
    pub priority: i32,
    pub waiting_seconds: f64,
    pub reason: String,
}

/// Final GPU use of one node, for the heat map.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeUsage {
    pub node: String,
    pub gpus: u32,
    /// Allocated thousandths per device, in device order.
    pub gpu_used_milli: Vec<u32>,
    pub cpu_allocated: f64,
    pub cordoned: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PodCounts {
    /// Pods created (Job pods, replicas, bare pods).
    pub created: u64,
    /// Pods that were bound at least once.
    pub scheduled: u64,
    pub completed: u64,
    /// Pods evicted by node removal or a drain and requeued (preemption victims are counted under
    /// `preemption`).
    pub evicted: u64,
    pub running_at_end: u64,
    pub pending_at_end: u64,
    /// Pod creations a namespace ResourceQuota refused (retried when quota frees up, as
    /// Job controllers do).
    pub rejected_by_quota: u64,
}

/// Preemptions and what they cost.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PreemptionStats {
    /// Preemption decisions (one per preemptor, or per draining queue).
    pub preemptions: u64,
    /// Pods evicted by them.
    pub victim_pods: u64,
    /// Victims that were bare Pods (no controller): deleted, not run again.
    pub deleted_pods: u64,
    /// Victims asked to checkpoint before eviction.
    pub checkpoint_requests: u64,
    /// GPU-hours of work lost: victims' progress since their last checkpoint.
    pub lost_gpu_hours: f64,
    /// Preemption decision to the preemptor's start, every preemption.
    pub start_latency: Percentiles,
    /// The same for reclaims only: preemptors whose victims include workloads of other
    /// ClusterQueues (lent quota taken back).
    pub reclaim_latency: Percentiles,
}

/// How one ClusterQueue fared, in its main resource (`nvidia.com/gpu` when it has GPU
/// quota, else `cpu`), in the units quotas are written in.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueStats {
    pub name: String,
    pub cohort: Option<String>,
    pub resource: String,
    pub nominal: f64,
    /// Time-weighted mean in use, and above nominal (borrowed).
    pub used_mean: f64,
    pub borrowed_mean: f64,
    /// Resource-hours used and borrowed.
    pub used_hours: f64,
    pub borrowed_hours: f64,
    pub pods_admitted: u64,
    pub queue_wait: Percentiles,
    /// Its nominal quota's share of all queues' nominal quota, and its share of what
    /// all queues used.
    pub entitled_share: f64,
    pub used_share: f64,
}

/// How gangs fared, and how well connected the GPUs they started on were.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GangCounts {
    pub declared: u64,
    pub started: u64,
    /// Gangs that waited past their scheduleTimeoutSeconds at least once (their pods
    /// waited on, tried again after the back-off).
    pub timed_out: u64,
    /// Timeouts in all (a gang can time out again after its back-off).
    pub timeouts: u64,
    /// Started gangs whose pods all sat in one rack: one domain of the narrowest level of
    /// the workload's Topology above hosts and NVLink domains, else of
    /// `topology.kestrel.dev/rack`.
    pub started_in_one_rack: u64,
    /// Started gangs of GPU pods only whose pods shared one NVLink domain (one node, or
    /// one `nvidia.com/gpu.clique`).
    pub started_in_one_nvlink_domain: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobCounts {
    pub submitted: u64,
    pub completed: u64,
}

/// Everything a run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SimReport {
    pub scenario: String,
    pub policy: String,
    pub seed: u64,
    pub nodes: u32,
    pub gpus: u32,
    /// Simulated time covered.
    pub span: Millis,
    pub pods: PodCounts,
    pub jobs: JobCounts,
    pub gangs: GangCounts,
    /// Time-weighted mean of allocated / total GPUs, 0..=1.
    pub gpu_allocation_mean: f64,
    /// Time-weighted mean of utilized / total GPUs, 0..=1.
    pub gpu_utilization_mean: f64,
    /// Time-weighted mean of fragmented / free GPUs, 0..=1.
    pub gpu_fragmentation_mean: f64,
    /// Pod arrival to bind.
    pub queue_wait: Percentiles,
    /// Job arrival to its last pod's completion.
    pub completion_time: Percentiles,
    pub by_priority: Vec<GroupStats>,
    pub by_namespace: Vec<GroupStats>,
    pub samples: Vec<Sample>,
    /// Pending reasons counted over all samples: (reason, pod-samples), most first.
    pub pending_reasons: Vec<(String, u64)>,
    pub pending_at_end: Vec<PendingPod>,
    pub node_usage: Vec<NodeUsage>,
    /// Scheduling cycles run and bindings made.
    pub cycles: u64,
    pub bindings: u64,
    pub preemption: PreemptionStats,
    pub queues: Vec<QueueStats>,
    /// How gangs fared in a second run of the same workload with their topology requests
    /// dropped (`kestrel sim --compare-topology-blind`); `None` when not asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_blind_gangs: Option<GangCounts>,
    /// Jain's fairness index over queues of used share / entitled share (1 = each queue
    /// got exactly its entitlement); `None` without queues.
    pub queue_fairness: Option<f64>,
    /// Per TrainingJob, in input order (left out when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub training_jobs: Vec<TrainingJobReport>,
}

/// How a TrainingJob fared under its controller's decisions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TrainingJobReport {
    /// `namespace/name`.
    pub job: String,
    /// Its state at the end: `Succeeded`, `Failed`, `Running`, `Queued`, `Restarting`,
    /// `Created`, or `NotCreated` (it had not arrived).
    pub state: String,
    /// The reason and message of that state's condition (`BackoffLimitExceeded`,
    /// `PermanentFailure`, `DeadlineExceeded` for a failed job).
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Gang restarts.
    pub restarts: i32,
    /// From its arrival to its whole gang's first run; `None`: it never ran.
    pub queue_wait_seconds: Option<f64>,
    /// GPU-hours its pods held running, and the part of them whose work restarts threw
    /// away (beyond the last checkpoint every member had reached).
    pub gpu_hours: f64,
    pub lost_gpu_hours: f64,
}
