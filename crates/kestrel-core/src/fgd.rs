//! FGD, the policy of the FGD paper (Weng et al., "Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent", ATC'23), as a baseline:
//! the figure Kestrel's own policy is measured against on any mix, not only on the mixes
//! the paper published figures for.
//!
//! # Method (as the paper and its artifact define it)
//!
//! - **Typical tasks.** The pods seen so far are counted by shape: cpu, GPUs, thousandths
//!   per GPU, and the GPU models they are limited to (memory is not part of a shape). The
//!   most common shapes, added one at a time until they cover 95% of the pods (the
//!   artifact's experiment settings), are the typical tasks; each weighs its share among
//!   them. A CPU-only task counts all of a node's free GPU capacity as fragmented.
//! - **Fragmentation of a node for a task.** When the task cannot run on the node (another
//!   GPU model, not enough free cpu, fewer usable devices than it needs) all of the node's
//!   free GPU capacity is fragmented for it. Otherwise the fragmented part is the free
//!   capacity of the devices with less free than the task asks per GPU.
//! - **Node fragmentation**: the weighted sum over the typical tasks.
//! - **Placement**: the fitting node, and on it the device for a share, where the placement
//!   grows the node's fragmentation least. Ties go to the first node in index order (the
//!   artifact maps the growth through a sigmoid to kube-scheduler's 0-100 scores and breaks
//!   the many resulting ties at random; exact comparison keeps runs deterministic).
//!
//! Only pods' GPU-model limits that are a required node affinity `In` on the GPU product
//! label are read as shape models (as openb pods have them); other constraints are not
//! part of a shape.

use crate::cluster::NodeState;
use crate::model::{Demand, GpuRequest, PlacementConstraints, SelectorOperator, GPU_PRODUCT_LABEL};
use crate::types::{GpuAssignment, NodeId};
use std::collections::BTreeMap;

/// The typical tasks cover at least this share of the pods seen.
const POPULARITY: f64 = 0.95;
/// The typical tasks are recomputed when the pods seen reach a power of two, and every
/// this many pods once past it.
const REFRESH_EVERY: u64 = 1024;
/// One device, in thousandths.
const DEVICE: u32 = 1000;

/// A task shape.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Shape {
    gpus: u32,
    /// Per GPU, in thousandths (1000 for whole GPUs).
    milli: u32,
    cpu_milli: i64,
    /// GPU models the task is limited to (sorted); `None`: any.
    models: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default)]
pub struct FgdScorer {
    counts: BTreeMap<Shape, u64>,
    seen: u64,
    next_refresh: u64,
    /// The typical tasks and their weights (summing to 1).
    typical: Vec<(Shape, f64)>,
    /// The distinct thousandths per GPU of the typical tasks, and per task its position
    /// there: a node's devices are counted once per size, not once per task.
    sizes: Vec<u32>,
    size_of: Vec<usize>,
    /// Per typical task, whether a node of a model no task names may run it.
    any_model: Vec<bool>,
    /// Per GPU model named by a typical task, which tasks a node of that model may run.
    model_access: Vec<(String, Vec<bool>)>,
    /// Per node, its fragmentation for the state it was last seen in.
    cached: Vec<Option<(NodeKey, f64)>>,
    /// Reused by [`FgdScorer::cost`] for a node's device amounts.
    scratch: Vec<u32>,
}

/// What a node's fragmentation depends on: its model's access, free cpu and each
/// device's free thousandths.
#[derive(Debug, Clone, PartialEq)]
struct NodeKey {
    model: Option<usize>,
    cpu: i64,
    free: Vec<u32>,
}

impl FgdScorer {
    /// Learns from a pod entering the queue.
    pub fn observe(&mut self, demand: &Demand, constraints: &PlacementConstraints) {
        let (gpus, milli) = match demand.gpu {
            GpuRequest::None => (0, 0),
            // Seen as the thousandths it takes on the cluster's smallest device that holds
            // it (the scheduler converts it before it shows it here).
            GpuRequest::Memory { .. } => (1, DEVICE),
            GpuRequest::Whole(n) => (n, DEVICE),
            GpuRequest::Shared { milli } => (1, milli),
        };
        let shape = Shape {
            gpus,
            milli,
            cpu_milli: demand.resources.cpu_milli,
            models: gpu_models(constraints),
        };
        *self.counts.entry(shape).or_default() += 1;
        self.seen += 1;
    }

    /// Recomputes the typical tasks when enough pods were seen since the last time.
    pub fn refresh(&mut self) {
        if self.seen < self.next_refresh || self.counts.is_empty() {
            return;
        }
        self.next_refresh = if self.seen < REFRESH_EVERY {
            (self.seen + 1).next_power_of_two()
        } else {
            self.seen + REFRESH_EVERY
        };
        let mut by_count: Vec<(&Shape, u64)> = self.counts.iter().map(|(s, &c)| (s, c)).collect();
        by_count.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let wanted = POPULARITY * self.seen as f64;
        let (mut taken, mut covered) = (0, 0u64);
        while (covered as f64) < wanted && taken < by_count.len() {
            covered += by_count[taken].1;
            taken += 1;
        }
        self.typical = by_count[..taken]
            .iter()
            .map(|&(s, c)| (s.clone(), c as f64 / covered as f64))
            .collect();
        self.sizes = self.typical.iter().map(|(s, _)| s.milli).collect();
        self.sizes.sort_unstable();
        self.sizes.dedup();
        self.size_of = self
            .typical
            .iter()
            .map(|(s, _)| self.sizes.binary_search(&s.milli).expect("listed"))
            .collect();
        self.any_model = self
            .typical
            .iter()
            .map(|(s, _)| s.models.is_none())
            .collect();
        self.model_access.clear();
        for (task, (shape, _)) in self.typical.iter().enumerate() {
            for model in shape.models.iter().flatten() {
                let access = match self.model_access.iter().position(|(m, _)| m == model) {
                    Some(i) => &mut self.model_access[i].1,
                    None => {
                        self.model_access
                            .push((model.clone(), self.any_model.clone()));
                        &mut self.model_access.last_mut().expect("pushed").1
                    }
                };
                access[task] = true;
            }
        }
        self.cached.clear();
    }

    /// `node`'s GPU model among those the typical tasks name.
    fn model_of(&self, node: &NodeState) -> Option<usize> {
        let model = node.spec.labels.get(GPU_PRODUCT_LABEL)?;
        self.model_access.iter().position(|(name, _)| name == model)
    }

    /// Per typical task, whether it may run on a node of `model` (from [`Self::model_of`]).
    fn access(&self, model: Option<usize>) -> &[bool] {
        model.map_or(&self.any_model, |m| &self.model_access[m].1)
    }

    /// The node's fragmentation, in thousandths of a GPU, with `cpu` millicores free and
    /// `free[i]` thousandths free on device `i`.
    fn fragmentation(&self, cpu: i64, free: &[u32], access: &[bool]) -> f64 {
        let total: u32 = free.iter().sum();
        if total == 0 {
            return 0.0;
        }
        // Per size: devices with at least that much free, and what the others hold.
        let mut usable = [0u32; 64];
        let mut short = [0u32; 64];
        let counted = self.sizes.len().min(64);
        for (i, &size) in self.sizes[..counted].iter().enumerate() {
            for &f in free {
                if f >= size {
                    usable[i] += 1;
                } else {
                    short[i] += f;
                }
            }
        }
        let mut frag = 0.0;
        for (task, (shape, weight)) in self.typical.iter().enumerate() {
            let size = self.size_of[task];
            let lost = if !access[task] || cpu < shape.cpu_milli || shape.gpus == 0 {
                total
            } else if size >= counted {
                // More distinct sizes than counted above (not seen in practice).
                let fits = free.iter().filter(|&&f| f >= shape.milli).count() as u32;
                if fits < shape.gpus {
                    total
                } else {
                    free.iter().filter(|&&f| f < shape.milli).sum()
                }
            } else if usable[size] < shape.gpus {
                total
            } else {
                short[size]
            };
            frag += weight * lost as f64;
        }
        frag
    }

    /// The node's fragmentation now, from the cache when its state has not changed.
    fn current(&mut self, id: usize, model: Option<usize>, cpu: i64, free: &[u32]) -> f64 {
        if self.cached.len() <= id {
            self.cached.resize(id + 1, None);
        }
        if let Some((key, frag)) = &self.cached[id] {
            if key.model == model && key.cpu == cpu && key.free == free {
                return *frag;
            }
        }
        let frag = self.fragmentation(cpu, free, self.access(model));
        self.cached[id] = Some((
            NodeKey {
                model,
                cpu,
                free: free.to_vec(),
            },
            frag,
        ));
        frag
    }

    /// Lower is better: how much placing the pod on node `id` grows the node's
    /// fragmentation (in millionths of a GPU), and the device position a share would take.
    pub fn cost(&mut self, id: NodeId, node: &NodeState, demand: &Demand) -> (i64, Option<usize>) {
        // The devices' free amounts, in a buffer kept from call to call.
        let mut free = std::mem::take(&mut self.scratch);
        free.clear();
        free.extend(
            node.gpus
                .iter()
                .map(|g| if g.held_whole { 0 } else { g.free_milli }),
        );
        let model = self.model_of(node);
        let before = self.current(id.0 as usize, model, node.free.cpu_milli, &free);
        let access = self.access(model);
        let after_cpu = node.free.cpu_milli - demand.resources.cpu_milli;
        let units = |after: f64| ((after - before) * 1000.0).round() as i64;
        let result = match demand.gpu {
            GpuRequest::None => (units(self.fragmentation(after_cpu, &free, access)), None),
            GpuRequest::Whole(n) => {
                // Which free devices a whole-GPU pod takes does not change the amounts.
                let mut left = n;
                for f in free.iter_mut() {
                    if left > 0 && *f == DEVICE {
                        *f = 0;
                        left -= 1;
                    }
                }
                (units(self.fragmentation(after_cpu, &free, access)), None)
            }
            share => {
                let mut best: Option<(i64, u32, usize)> = None;
                for i in 0..free.len() {
                    let Some(milli) = node.share_fits(i, share) else {
                        continue;
                    };
                    free[i] -= milli;
                    let cost = units(self.fragmentation(after_cpu, &free, access));
                    let candidate = (cost, free[i], i);
                    free[i] += milli;
                    if best.is_none_or(|b| candidate < b) {
                        best = Some(candidate);
                    }
                }
                match best {
                    Some((cost, _, i)) => (cost, Some(i)),
                    None => (0, None),
                }
            }
        };
        self.scratch = free;
        result
    }

    /// The devices for a pod on a node that fits it: a share on the device where it grows
    /// fragmentation least (then the fullest); whole GPUs as [`NodeState::choose_gpus`]
    /// picks them.
    pub fn choose_gpus(&mut self, id: NodeId, node: &NodeState, demand: &Demand) -> GpuAssignment {
        match demand.gpu {
            share @ (GpuRequest::Shared { .. } | GpuRequest::Memory { .. }) => {
                match self.cost(id, node, demand).1 {
                    Some(i) => GpuAssignment::Shared {
                        index: node.spec.gpus[i].index,
                        milli: node.share_fits(i, share).expect("scored as fitting"),
                    },
                    None => node.choose_gpus(share, None),
                }
            }
            gpu => node.choose_gpus(gpu, None),
        }
    }
}

/// The GPU models a pod is limited to: a required node affinity of one term with an `In`
/// on the GPU product label.
fn gpu_models(constraints: &PlacementConstraints) -> Option<Vec<String>> {
    let terms = constraints.affinity.required.as_ref()?;
    let [term] = terms.as_slice() else {
        return None;
    };
    let requirement = term
        .match_expressions
        .iter()
        .find(|r| r.key == GPU_PRODUCT_LABEL && r.operator == SelectorOperator::In)?;
    let mut models = requirement.values.clone();
    models.sort();
    models.dedup();
    Some(models)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NodeAffinity, NodeSelectorTerm, NodeSpec, Requirement};
    use crate::{ClusterIndex, GpuDevice, Resources};

    fn demand(cpu: i64, gpu: GpuRequest) -> Demand {
        Demand {
            resources: Resources::new(cpu, 1 << 30),
            gpu,
        }
    }

    fn limited_to(models: &[&str]) -> PlacementConstraints {
        PlacementConstraints {
            affinity: NodeAffinity {
                required: Some(vec![NodeSelectorTerm {
                    match_expressions: vec![Requirement {
                        key: GPU_PRODUCT_LABEL.to_string(),
                        operator: SelectorOperator::In,
                        values: models.iter().map(|m| m.to_string()).collect(),
                    }],
                    match_fields: vec![],
                }]),
                preferred: vec![],
            },
            ..Default::default()
        }
    }

    fn node(model: &str, gpus: u32) -> NodeState {
        let mut spec = NodeSpec::new(format!("{model}-node"), Resources::new(64_000, 256 << 30));
        spec.labels
            .insert(GPU_PRODUCT_LABEL.to_string(), model.to_string());
        spec.gpus = (0..gpus)
            .map(|index| GpuDevice {
                index,
                model: model.to_string(),
                memory_mib: 0,
                numa_node: 0,
                nvlink_island: None,
                pcie_switch: None,
                dra: None,
            })
            .collect();
        let mut index = ClusterIndex::default();
        let id = index.insert(spec, |_, _| 0);
        index.node(id).clone()
    }

    fn scorer(pods: &[(Demand, PlacementConstraints)]) -> FgdScorer {
        let mut s = FgdScorer::default();
        for (d, c) in pods {
            s.observe(d, c);
        }
        s.refresh();
        s
    }

    #[test]
    fn a_share_goes_where_the_gap_stays_useful() {
        // The mix: shares of 500 only. A 500 on a device with 500 left closes it (no
        // fragment); on a fresh device it leaves 500, which a 500 can still use.
        let half = demand(1000, GpuRequest::Shared { milli: 500 });
        let mut s = scorer(&vec![(half.clone(), PlacementConstraints::default()); 4]);
        let mut n = node("G2", 2);
        n.gpus[0].free_milli = 700;
        // On device 0 (700 free) the 500 leaves 200 that no 500 can use: 200 fragmented.
        // On device 1 it leaves 500 beside 700: nothing fragmented.
        let (cost, device) = s.cost(NodeId(0), &n, &half);
        assert_eq!(device, Some(1));
        assert_eq!(cost, 0);
        n.gpus[0].free_milli = 500;
        assert_eq!(s.cost(NodeId(0), &n, &half).1, Some(0));
        assert_eq!(
            s.choose_gpus(NodeId(0), &n, &half),
            GpuAssignment::Shared {
                index: 0,
                milli: 500
            }
        );
    }

    #[test]
    fn whole_gpu_pods_and_models_count_all_free_capacity() {
        let whole = demand(8000, GpuRequest::Whole(4));
        // Typical: 4-GPU pods limited to G2.
        let mut s = scorer(&vec![(whole.clone(), limited_to(&["G2"])); 3]);
        let g2 = node("G2", 8);
        let t4 = node("T4", 8);
        // On a T4 node every free GPU is a fragment for G2-only tasks.
        let frag = |s: &FgdScorer, n: &NodeState| {
            s.fragmentation(64_000, &[1000; 8], s.access(s.model_of(n)))
        };
        assert_eq!(frag(&s, &t4), 8000.0);
        assert_eq!(frag(&s, &g2), 0.0);
        // Taking 4 of 8 on G2 leaves 4 usable: no fragment; taking 6 would leave 2.
        assert_eq!(s.cost(NodeId(0), &g2, &whole).0, 0);
        let six = demand(8000, GpuRequest::Whole(6));
        assert_eq!(s.cost(NodeId(0), &g2, &six).0, 2_000_000);
        // Not enough cpu left for a typical task: all its free GPUs are fragments.
        let hungry = demand(60_000, GpuRequest::Whole(1));
        assert_eq!(s.cost(NodeId(0), &g2, &hungry).0, 7_000_000);
        // The same node id with another model is not mistaken for the cached state.
        assert_eq!(s.cost(NodeId(0), &t4, &hungry).0, -1_000_000);
    }

    #[test]
    fn typical_tasks_cover_the_common_shapes() {
        let plain = PlacementConstraints::default();
        let mut pods = vec![(demand(1000, GpuRequest::Whole(1)), plain.clone()); 30];
        for cpu in 0..15 {
            pods.push((demand(2000 + cpu, GpuRequest::Whole(1)), plain.clone()));
        }
        let s = scorer(&pods);
        // The common shape and rare ones, one at a time, until 95% of the 45 pods: 43.
        assert_eq!(s.typical.len(), 14);
        let sum: f64 = s.typical.iter().map(|(_, w)| w).sum();
        assert!((sum - 1.0).abs() < 1e-9);
        assert!((s.typical[0].1 - 30.0 / 43.0).abs() < 1e-9);
        assert_eq!(
            gpu_models(&limited_to(&["T4", "G2", "T4"])),
            Some(vec!["G2".into(), "T4".into()])
        );
        assert_eq!(gpu_models(&plain), None);
    }
}
