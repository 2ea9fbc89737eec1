//! The annotations Kestrel reads on pods (its own and KAI Scheduler's) and on
//! DeviceClasses, in one place.

use kestrel_core::Millis;

/// A share of one GPU in thousandths (`1`..=`1000`) for a pod without `nvidia.com/gpu`.
pub const GPU_MILLI_ANNOTATION: &str = "kestrel.dev/gpu-milli";
/// KAI Scheduler's share of one GPU as a decimal in (0, 1] (`"0.5"`); the same request as
/// [`GPU_MILLI_ANNOTATION`], rounded to thousandths.
pub const GPU_FRACTION_ANNOTATION: &str = "gpu-fraction";
/// KAI Scheduler's share of one GPU by device memory, in MiB (`"20480"`): the pod goes on a
/// device with at least that much memory and takes the share of it that the memory is
/// ([`GpuRequest::Memory`]).
pub const GPU_MEMORY_ANNOTATION: &str = "gpu-memory";
/// kubelet's Topology Manager policy, per pod: `single-numa-node` puts all its GPUs (and
/// their NICs) on one NUMA node or waits; `best-effort` and `none` only prefer that.
pub const NUMA_POLICY_ANNOTATION: &str = "kestrel.dev/numa-policy";
/// It may not be preempted before it ran this long (`30m`).
pub const MIN_RUNTIME_ANNOTATION: &str = "kestrel.dev/min-runtime";
/// It checkpoints this often from its start (`1h`).
pub const CHECKPOINT_INTERVAL_ANNOTATION: &str = "kestrel.dev/checkpoint-interval";
/// Asked to, it checkpoints within this long (`2m`); Kestrel asks before evicting it.
pub const CHECKPOINT_GRACE_ANNOTATION: &str = "kestrel.dev/checkpoint-grace";
/// How long it is expected to run (`6h`), for backfill and start-time predictions.
pub const RUNTIME_ESTIMATE_ANNOTATION: &str = "kestrel.dev/runtime-estimate";
/// On a DeviceClass: the queue quota resource its devices count as (`whole-gpus`), as
/// Kueue's `deviceClassMappings` map a class to a resource. Without it a class counts as its
/// `spec.extendedResourceName`, else as `nvidia.com/gpu` (Kestrel's DRA devices are GPUs).
pub const QUOTA_RESOURCE_ANNOTATION: &str = "kestrel.dev/quota-resource";
/// `spec.terminationGracePeriodSeconds` when a pod does not set it (Kubernetes' default).
pub const DEFAULT_TERMINATION_GRACE: Millis = 30_000;
