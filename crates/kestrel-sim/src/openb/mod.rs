//! The openb trace (Alibaba GPU cluster, FGD paper) and its packing experiment.
//!
//! Node rows: `sn,cpu_milli,memory_mib,gpu,model`. Pod rows:
//! `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time`;
//! only the first five are required (some published mixes have no others): no `gpu_spec`
//! means any GPU model, no times mean the packing protocol's order alone (replayed by
//! `kestrel sim`, such pods arrive at the start in file order and run to the end).
//! The packing experiment follows the protocol of the trace's README: inflate the pod mix
//! by seeded sampling up to 130% of GPU capacity, shuffle, place one by one, nothing
//! departs, and record the GPU allocation rate as arrivals pass 100% and 130%.

pub mod derive;

use crate::workload::{JobKind, PodSet, Workload};
use kestrel_core::{
    Demand, GpuDevice, GpuRequest, NodeAffinity, NodeSelectorTerm, NodeSpec, PlacementConstraints,
    PodSpec, Policy, Requirement, Resources, Rng, Scheduler, SchedulerConfig, SelectorOperator,
    GPU_PRODUCT_LABEL,
};
use kestrel_objects::LoadError;
use serde::Serialize;
use std::collections::HashSet;
use std::path::Path;

/// One node row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenbNode {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub gpus: u32,
    pub model: String,
}

/// One pod row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenbPod {
    pub name: String,
    pub cpu_milli: i64,
    pub memory_mib: i64,
    pub num_gpu: u32,
    pub gpu_milli: u32,
    /// GPU models the pod may run on; empty: any.
    pub gpu_spec: Vec<String>,
    /// `None` when the list has no `creation_time` column or the field is empty.
    pub creation_time: Option<u64>,
    /// `None` when the list has no `deletion_time` column or the field is empty.
    pub deletion_time: Option<u64>,
    /// Empty in the trace for pods that never ran there.
    pub scheduled_time: Option<u64>,
}

impl OpenbPod {
    /// GPU request in thousandths, as the protocol counts it.
    pub fn gpu_request_milli(&self) -> u64 {
        match self.num_gpu {
            0 => 0,
            1 => self.gpu_milli as u64,
            n => 1000 * n as u64,
        }
    }

    pub fn gpu_request(&self) -> GpuRequest {
        match (self.num_gpu, self.gpu_milli) {
            (0, _) => GpuRequest::None,
            (1, m) if m < 1000 => GpuRequest::Shared { milli: m },
            (n, _) => GpuRequest::Whole(n),
        }
    }

    pub fn to_pod_spec(&self) -> PodSpec {
        let mut spec = PodSpec::new(
            "openb",
            self.name.clone(),
            Demand {
                resources: Resources::new(self.cpu_milli, self.memory_mib << 20),
                gpu: self.gpu_request(),
            },
        );
        if !self.gpu_spec.is_empty() {
            spec.constraints = PlacementConstraints {
                affinity: NodeAffinity {
                    required: Some(vec![NodeSelectorTerm {
                        match_expressions: vec![Requirement {
                            key: GPU_PRODUCT_LABEL.to_string(),
                            operator: SelectorOperator::In,
                            values: self.gpu_spec.clone(),
                        }],
                        match_fields: vec![],
                    }]),
                    preferred: vec![],
                },
                ..Default::default()
            };
        }
        spec
    }
}

impl OpenbNode {
    pub fn to_node_spec(&self) -> NodeSpec {
        let mut node = NodeSpec::new(
            self.name.clone(),
            Resources::new(self.cpu_milli, self.memory_mib << 20),
        );
        // The trace has no pod-count limit.
        node.max_pods = u32::MAX;
        if !self.model.is_empty() {
            node.labels
                .insert(GPU_PRODUCT_LABEL.to_string(), self.model.clone());
        }
        node.gpus = (0..self.gpus)
            .map(|index| GpuDevice {
                index,
                model: self.model.clone(),
                memory_mib: 0,
                numa_node: 0,
                nvlink_island: None,
                pcie_switch: None,
                dra: None,
            })
            .collect();
        node
    }
}

/// One CSV row, read by column name.
struct CsvRow<'a> {
    fields: Vec<&'a str>,
    columns: &'a [&'a str],
    /// Per column, its position in the header; `None`: an optional column the file lacks.
    index: &'a [Option<usize>],
}

impl<'a> CsvRow<'a> {
    /// A required column's field.
    fn get(&self, name: &str) -> &'a str {
        self.optional(name).expect("required column")
    }

    /// An optional column's field; `None` when the file has no such column.
    fn optional(&self, name: &str) -> Option<&'a str> {
        let c = self
            .columns
            .iter()
            .position(|c| *c == name)
            .expect("known column");
        self.index[c].map(|i| self.fields[i])
    }
}

/// Reads a CSV with a header, handing each row (fields by column name) to `row`. The
/// first `required` of `columns` must be in the header; the others may be missing.
fn read_csv<T>(
    path: &Path,
    text: &str,
    columns: &[&str],
    required: usize,
    mut row: impl FnMut(&CsvRow, usize) -> Result<T, LoadError>,
) -> Result<Vec<T>, LoadError> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, header) = lines
        .next()
        .ok_or_else(|| LoadError::new(path, "the file is empty; expected a CSV header line"))?;
    let header: Vec<&str> = header.split(',').map(str::trim).collect();
    let mut index = Vec::with_capacity(columns.len());
    for (n, column) in columns.iter().enumerate() {
        let i = header.iter().position(|h| h == column);
        if i.is_none() && n < required {
            return Err(LoadError::new(
                path,
                format!(
                    "the header has no column {column:?}; expected columns {} (optional: {})",
                    columns[..required].join(","),
                    columns[required..].join(",")
                ),
            )
            .object("line 1"));
        }
        index.push(i);
    }
    let mut out = Vec::new();
    for (n, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() != header.len() {
            return Err(LoadError::new(
                path,
                format!(
                    "has {} fields, the header has {}; a quoted comma is not supported",
                    fields.len(),
                    header.len()
                ),
            )
            .object(format!("line {}", n + 1)));
        }
        let csv_row = CsvRow {
            fields,
            columns,
            index: &index,
        };
        out.push(row(&csv_row, n + 1)?);
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(
    path: &Path,
    line: usize,
    object: &str,
    field: &str,
    value: &str,
) -> Result<T, LoadError> {
    value.parse().map_err(|_| {
        LoadError::new(
            path,
            format!("{value:?} is not a non-negative integer; write a whole number"),
        )
        .object(format!("line {line} ({object})"))
        .field(field)
    })
}

/// Loads a node list (`openb_node_list_*.csv`).
pub fn load_nodes(path: &Path, text: &str) -> Result<Vec<OpenbNode>, LoadError> {
    let mut seen = HashSet::new();
    read_csv(
        path,
        text,
        &["sn", "cpu_milli", "memory_mib", "gpu", "model"],
        5,
        |row, line| {
            let get = |c: &str| row.get(c);
            let name = get("sn").to_string();
            if !seen.insert(name.clone()) {
                return Err(LoadError::new(
                    path,
                    "duplicate node name; each node row needs its own sn",
                )
                .object(format!("line {line} ({name})"))
                .field("sn"));
            }
            Ok(OpenbNode {
                cpu_milli: number(path, line, &name, "cpu_milli", get("cpu_milli"))?,
                memory_mib: number(path, line, &name, "memory_mib", get("memory_mib"))?,
                gpus: number(path, line, &name, "gpu", get("gpu"))?,
                model: get("model").to_string(),
                name,
            })
        },
    )
}

/// Loads a pod list (`openb_pod_list_*.csv`).
pub fn load_pods(path: &Path, text: &str) -> Result<Vec<OpenbPod>, LoadError> {
    read_csv(
        path,
        text,
        &[
            "name",
            "cpu_milli",
            "memory_mib",
            "num_gpu",
            "gpu_milli",
            "gpu_spec",
            "creation_time",
            "deletion_time",
            "scheduled_time",
        ],
        5,
        |row, line| {
            let get = |c: &str| row.get(c);
            let name = get("name").to_string();
            let num = |field: &str| {
                number::<u64>(path, line, &name, field, row.optional(field).unwrap_or(""))
            };
            let pod = OpenbPod {
                cpu_milli: number(path, line, &name, "cpu_milli", get("cpu_milli"))?,
                memory_mib: number(path, line, &name, "memory_mib", get("memory_mib"))?,
                num_gpu: number(path, line, &name, "num_gpu", get("num_gpu"))?,
                gpu_milli: number(path, line, &name, "gpu_milli", get("gpu_milli"))?,
                gpu_spec: row
                    .optional("gpu_spec")
                    .unwrap_or("")
                    .split('|')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
                creation_time: match row.optional("creation_time") {
                    None | Some("") => None,
                    Some(_) => Some(num("creation_time")?),
                },
                deletion_time: match row.optional("deletion_time") {
                    None | Some("") => None,
                    Some(_) => Some(num("deletion_time")?),
                },
                scheduled_time: match row.optional("scheduled_time") {
                    None | Some("") => None,
                    Some(_) => Some(num("scheduled_time")?),
                },
                name: name.clone(),
            };
            if pod.num_gpu == 1 && !(1..=1000).contains(&pod.gpu_milli) {
                return Err(LoadError::new(
                    path,
                    format!(
                        "{} is outside 1..=1000 for a one-GPU pod; use 1000 for a whole GPU",
                        pod.gpu_milli
                    ),
                )
                .object(format!("line {line} ({name})"))
                .field("gpu_milli"));
            }
            Ok(pod)
        },
    )
}

/// A pod list as CSV, in the trace's columns (times left empty when unknown); loads back
/// with [`load_pods`].
pub fn pods_csv(pods: &[OpenbPod]) -> String {
    let time = |t: Option<u64>| t.map(|t| t.to_string()).unwrap_or_default();
    let mut out = String::from(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
    );
    for p in pods {
        out.push_str(&format!(
            "{},{},{},{},{},{},,,{},{},{}\n",
            p.name,
            p.cpu_milli,
            p.memory_mib,
            p.num_gpu,
            p.gpu_milli,
            p.gpu_spec.join("|"),
            time(p.creation_time),
            time(p.deletion_time),
            time(p.scheduled_time)
        ));
    }
    out
}

/// The trace replayed as a workload: arrival from `creation_time`, runtime from
/// `scheduled_time` (or creation, when the trace never scheduled it) to `deletion_time`,
/// times relative to the earliest creation. Without a creation time a pod arrives at the
/// start; without a deletion time it runs to the end.
pub fn workload_from_pods(pods: &[OpenbPod]) -> Workload {
    let start = pods
        .iter()
        .filter_map(|p| p.creation_time)
        .min()
        .unwrap_or(0);
    Workload {
        gangs: Vec::new(),
        topology_levels: Vec::new(),
        queues: Default::default(),
        training: Vec::new(),
        gpu_backing: None,
        jobs: pods
            .iter()
            .map(|p| PodSet {
                kind: JobKind::Pod,
                source_kind: "openb".to_string(),
                namespace: "openb".to_string(),
                name: p.name.clone(),
                arrival: p.creation_time.map_or(0, |c| (c - start) * 1000),
                duration: p.deletion_time.map(|deletion| {
                    let created = p.creation_time.unwrap_or(start);
                    deletion
                        .saturating_sub(p.scheduled_time.unwrap_or(0).max(created))
                        .max(1)
                        * 1000
                }),
                parallelism: 1,
                completions: 1,
                template: p.to_pod_spec(),
                gpu_utilization: 1.0,
            })
            .collect(),
    }
}

/// One packing run's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackingRun {
    pub policy: String,
    pub seed: u64,
    /// GPU allocation rate (0..=1) when arrivals passed 100% of capacity.
    pub allocation_at_100: f64,
    /// ... and at the end (130%).
    pub allocation_at_130: f64,
    pub pods_arrived: usize,
    pub pods_placed: usize,
    pub pods_skipped: usize,
}

/// The pods of one run, in arrival order: the whole list, then seeded samples with
/// replacement while the total GPU request stays within 130% of capacity; then shuffled.
pub fn inflate_and_shuffle(pods: &[OpenbPod], capacity_milli: u64, seed: u64) -> Vec<&OpenbPod> {
    let mut rng = Rng::new(seed);
    let limit = capacity_milli * 13 / 10;
    let mut total: u64 = pods.iter().map(OpenbPod::gpu_request_milli).sum();
    let mut out: Vec<&OpenbPod> = pods.iter().collect();
    if !pods.is_empty() {
        loop {
            let pick = &pods[rng.below(pods.len() as u64) as usize];
            if total + pick.gpu_request_milli() > limit {
                break;
            }
            total += pick.gpu_request_milli();
            out.push(pick);
        }
    }
    rng.shuffle(&mut out);
    out
}

/// A scheduler under `policy` with the trace's nodes.
fn scheduler_for(nodes: &[OpenbNode], policy: Policy, seed: u64) -> Scheduler {
    let mut scheduler = Scheduler::new(SchedulerConfig {
        policy,
        seed,
        ..Default::default()
    });
    for node in nodes {
        scheduler
            .add_node(node.to_node_spec())
            .expect("node names were checked unique on load");
    }
    scheduler
}

/// The offline sorted best-fit of one run: the same pods (inflated with `seed`), seen all
/// at once and placed largest GPU request first (then most cpu) by BestFit, one by one. A
/// reference, not a proof: on the default mix it is about as high as the trace allows, but
/// it ignores GPU-model limits and packs shares by size alone, so an online policy may beat
/// it on mixes with many of either.
pub fn offline_bound(nodes: &[OpenbNode], pods: &[OpenbPod], seed: u64) -> f64 {
    let capacity: u64 = nodes.iter().map(|n| 1000 * n.gpus as u64).sum();
    if capacity == 0 {
        return 0.0;
    }
    let mut order = inflate_and_shuffle(pods, capacity, seed);
    order.sort_by_key(|p| std::cmp::Reverse((p.gpu_request_milli(), p.cpu_milli)));
    let mut scheduler = scheduler_for(nodes, Policy::BestFit, seed);
    let mut placed = 0u64;
    for (i, pod) in order.iter().enumerate() {
        let id = scheduler.submit(pod.to_pod_spec(), i as u64);
        if scheduler.schedule(i as u64).bindings.is_empty() {
            scheduler.finish(id).expect("pod just submitted");
        } else {
            placed += pod.gpu_request_milli();
        }
    }
    placed as f64 / capacity as f64
}

/// The mean offline sorted best-fit over seeds.
pub fn mean_offline_bound(nodes: &[OpenbNode], pods: &[OpenbPod], seeds: &[u64]) -> f64 {
    let sum: f64 = seeds.iter().map(|&s| offline_bound(nodes, pods, s)).sum();
    sum / seeds.len().max(1) as f64
}

/// Runs the packing experiment once.
pub fn packing_run(
    nodes: &[OpenbNode],
    pods: &[OpenbPod],
    policy: Policy,
    seed: u64,
) -> PackingRun {
    packing_run_observed(nodes, pods, policy, seed, |_| {})
}

/// [`packing_run`], showing the scheduler to `observe` after each pod's cycle (tests check
/// the cluster state there).
pub fn packing_run_observed(
    nodes: &[OpenbNode],
    pods: &[OpenbPod],
    policy: Policy,
    seed: u64,
    mut observe: impl FnMut(&Scheduler),
) -> PackingRun {
    let mut scheduler = scheduler_for(nodes, policy, seed);
    let capacity: u64 = nodes.iter().map(|n| 1000 * n.gpus as u64).sum();
    let order = inflate_and_shuffle(pods, capacity, seed);
    let (mut arrived_milli, mut placed_milli) = (0u64, 0u64);
    let mut at_100 = None;
    let (mut placed, mut skipped) = (0, 0);
    let rate = |milli: u64| {
        if capacity == 0 {
            0.0
        } else {
            milli as f64 / capacity as f64
        }
    };
    for (i, pod) in order.iter().enumerate() {
        let id = scheduler.submit(pod.to_pod_spec(), i as u64);
        let decisions = scheduler.schedule(i as u64);
        arrived_milli += pod.gpu_request_milli();
        if decisions.bindings.is_empty() {
            // Skipped: a pod that fits nowhere leaves the experiment.
            scheduler.finish(id).expect("pod just submitted");
            skipped += 1;
        } else {
            placed += 1;
            placed_milli += pod.gpu_request_milli();
        }
        observe(&scheduler);
        if at_100.is_none() && arrived_milli >= capacity {
            at_100 = Some(rate(placed_milli));
        }
    }
    PackingRun {
        policy: policy.name().to_string(),
        seed,
        allocation_at_100: at_100.unwrap_or(rate(placed_milli)),
        allocation_at_130: rate(placed_milli),
        pods_arrived: order.len(),
        pods_placed: placed,
        pods_skipped: skipped,
    }
}

/// Mean allocation rates of one policy over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PackingSummary {
    pub policy: String,
    pub seeds: Vec<u64>,
    pub mean_allocation_at_100: f64,
    pub mean_allocation_at_130: f64,
    pub runs: Vec<PackingRun>,
}

pub fn packing_summary(
    nodes: &[OpenbNode],
    pods: &[OpenbPod],
    policy: Policy,
    seeds: &[u64],
) -> PackingSummary {
    let runs: Vec<PackingRun> = seeds
        .iter()
        .map(|&seed| packing_run(nodes, pods, policy, seed))
        .collect();
    let n = runs.len().max(1) as f64;
    PackingSummary {
        policy: policy.name().to_string(),
        seeds: seeds.to_vec(),
        mean_allocation_at_100: runs.iter().map(|r| r.allocation_at_100).sum::<f64>() / n,
        mean_allocation_at_130: runs.iter().map(|r| r.allocation_at_130).sum::<f64>() / n,
        runs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: &str =
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,P100\nn1,96000,786432,8,G2\n";
    const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
p0,12000,16384,1,1000,,LS,Running,0,100,0\n\
p1,6000,12288,1,460,G2|T4,LS,Running,10,50,12\n\
p2,4000,8192,0,0,,BE,Running,20,40,20\n\
p3,8000,8192,4,1000,,LS,Running,30,90,31\n\
p4,8000,8192,1,1000,,BE,Pending,30,90,\n";

    /// Every rule of the invariant checker on the engine's state. Inflated runs sample
    /// pods with replacement, so names repeat: each pod gets its own key.
    pub(crate) fn check_cluster_state(s: &Scheduler) {
        let mut snapshot = kestrel_invariants::Snapshot::from_engine(s, &[]);
        for (i, p) in snapshot.pods.iter_mut().enumerate() {
            p.key = format!("{}#{i}", p.key);
        }
        if let Err(v) = kestrel_invariants::check(&snapshot) {
            panic!("{}", kestrel_invariants::describe(&v));
        }
    }

    #[test]
    fn loads_rows_and_maps_requests() {
        let nodes = load_nodes(Path::new("n.csv"), NODES).unwrap();
        assert_eq!(nodes[1].gpus, 8);
        assert_eq!(nodes[1].to_node_spec().gpus.len(), 8);
        let pods = load_pods(Path::new("p.csv"), PODS).unwrap();
        assert_eq!(pods[0].gpu_request(), GpuRequest::Whole(1));
        assert_eq!(pods[1].gpu_request(), GpuRequest::Shared { milli: 460 });
        assert_eq!(pods[1].gpu_spec, vec!["G2", "T4"]);
        assert_eq!(pods[3].gpu_request_milli(), 4000);
        assert_eq!(pods[2].gpu_request(), GpuRequest::None);
        let w = workload_from_pods(&pods);
        assert_eq!(w.jobs[1].arrival, 10_000);
        assert_eq!(w.jobs[1].duration, Some(38_000));
    }

    /// Some published mixes list only what a pod asks for: no GPU model, no times.
    #[test]
    fn pod_lists_without_models_or_times_load() {
        let short = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
            q0,12000,16384,1,1000\n\
            q1,6000,12288,1,460\n\
            q2,4000,8192,0,0\n";
        let pods = load_pods(Path::new("short.csv"), short).unwrap();
        assert_eq!(pods.len(), 3);
        assert!(pods.iter().all(|p| p.gpu_spec.is_empty()
            && p.creation_time.is_none()
            && p.deletion_time.is_none()
            && p.scheduled_time.is_none()));
        assert_eq!(pods[1].gpu_request(), GpuRequest::Shared { milli: 460 });
        // Replayed: all arrive at the start, in file order, and run to the end.
        let w = workload_from_pods(&pods);
        assert!(w
            .jobs
            .iter()
            .all(|j| j.arrival == 0 && j.duration.is_none()));
        // The packing protocol needs no times.
        let nodes = load_nodes(Path::new("n.csv"), NODES).unwrap();
        let run = packing_run_observed(&nodes, &pods, Policy::BestFit, 42, check_cluster_state);
        assert!(run.allocation_at_130 > 0.5, "{run:?}");
        // A required column still missing is named, with what is optional.
        let e = load_pods(
            Path::new("p.csv"),
            "name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("no column \"gpu_milli\"") && e.contains("optional: gpu_spec"),
            "{e}"
        );
    }

    #[test]
    fn bad_rows_name_file_line_and_field() {
        let bad = NODES.replace("64000", "lots");
        let e = load_nodes(Path::new("nodes.csv"), &bad)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nodes.csv") && e.contains("line 2") && e.contains("cpu_milli"),
            "{e}"
        );
        let dup = format!("{NODES}n0,1,1,0,\n");
        let e = load_nodes(Path::new("nodes.csv"), &dup)
            .unwrap_err()
            .to_string();
        assert!(e.contains("duplicate") && e.contains("n0"), "{e}");
        let e = load_pods(Path::new("pods.csv"), "name,cpu_milli\np,1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no column \"memory_mib\""), "{e}");
        let short = PODS.replace("p2,4000,8192,0,0,,BE,Running,20,40,20", "p2,4000");
        let e = load_pods(Path::new("pods.csv"), &short)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("fields"), "{e}");
        let frac = PODS.replace("460", "1500");
        let e = load_pods(Path::new("pods.csv"), &frac)
            .unwrap_err()
            .to_string();
        assert!(e.contains("gpu_milli") && e.contains("p1"), "{e}");
        assert!(load_nodes(Path::new("e.csv"), "")
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn inflation_stays_within_130_percent_and_is_seeded() {
        let pods = load_pods(Path::new("p.csv"), PODS).unwrap();
        let a = inflate_and_shuffle(&pods, 10_000, 7);
        let b = inflate_and_shuffle(&pods, 10_000, 7);
        assert_eq!(a, b);
        let total: u64 = a.iter().map(|p| p.gpu_request_milli()).sum();
        assert!(total <= 13_000 && total > 13_000 - 4000, "{total}");
        assert_ne!(a, inflate_and_shuffle(&pods, 10_000, 8));
    }

    #[test]
    fn packing_respects_models_and_never_overcommits() {
        let nodes = load_nodes(Path::new("n.csv"), NODES).unwrap();
        let pods = load_pods(Path::new("p.csv"), PODS).unwrap();
        for policy in Policy::ALL {
            let mut checked = 0;
            let run = packing_run_observed(&nodes, &pods, policy, 42, |s| {
                // The cluster state itself, recomputed from the bound pods: no node over
                // its cpu, memory or GPUs, no device handed out twice or over-shared.
                check_cluster_state(s);
                checked += 1;
            });
            assert_eq!(checked, run.pods_arrived);
            assert!(run.allocation_at_130 <= 1.0, "{policy}: {run:?}");
            assert!(run.allocation_at_130 > 0.5, "{policy}: {run:?}");
            assert_eq!(run.pods_placed + run.pods_skipped, run.pods_arrived);
        }
    }
}
