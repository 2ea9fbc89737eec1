//! Kestrel's packing score: how good it is to put a pod on a node, judged by what the
//! placement leaves behind for the pods that are expected to come.
//!
//! The scheduler shows the scorer every pod it is given (`observe`), so the scorer can learn
//! the workload's mix; before it ranks a shortlist it lets the scorer bring its view of the
//! mix up to date (`refresh`), then asks it to rank the fitting nodes (`score`) and to pick
//! the device of a GPU share (`choose_gpus`).
//!
//! # Method
//!
//! FGD (Weng et al., "Beware of Fragmentation", ATC'23) scores a placement by how much it
//! grows the expected fragmentation of the node: the free GPU capacity that the pods of the
//! mix cannot use. Kestrel keeps the idea, a placement costs the capacity it makes unusable
//! for the pods still to come, and measures that capacity with two terms, both in GPUs:
//!
//! 1. **Share packing, priced by linear programming.** GPU shares (fractions of one device)
//!    are a bin-packing problem per device. From the shares seen so far the scorer solves
//!    the LP relaxation of packing that mix into whole devices (Gilmore-Gomory column
//!    generation; the pricing problem is an unbounded knapsack) and keeps its dual prices:
//!    what one share of each size is worth, in devices, when the mix is packed optimally.
//!    A device with `f` thousandths free is worth `V(f)`, the most valuable set of expected
//!    shares that fits in `f`. Putting a share of size `s` and price `y(s)` on it loses
//!    `V(f) - V(f - s) - y(s) >= 0`: nothing when the placement is part of an optimal
//!    packing (on openb: 650 + 320 on one device), something when it leaves a gap the mix
//!    fills badly (470 + 320 leaves 210, which only rare shares fit, and takes the place of
//!    a second 470). FGD asks whether the *next* pod could use a gap; the prices weigh every
//!    size of the mix by how common it is and what it could pair with. A share goes on the
//!    device of the node where it loses least (then the fullest such device).
//! 2. **Stranding by CPU and memory.** Free GPUs are only usable if the node's free CPU and
//!    memory can feed them. At the mix's CPU and memory per GPU (averaged over the GPU pods
//!    seen), a node can feed `min(free cpu / cpu per GPU, free memory / memory per GPU)`
//!    GPUs; free GPU capacity beyond that is stranded. A placement is charged the stranded
//!    capacity it adds: CPU-only pods go where CPU is spare (nodes whose GPUs are taken,
//!    CPU-rich nodes), CPU-heavy GPU pods to CPU-rich nodes, CPU-light ones to CPU-poor
//!    nodes, where they un-strand GPUs. FGD only notices CPU when a pod type stops fitting
//!    on the node at all, which is too late to steer pods by their CPU per GPU.
//!
//! The score is minus the sum of both (higher is better). Whole-GPU pods lose nothing in
//! the first term (a free device is worth one device); placements that tie are ordered by
//! the policy key (GPU-first packing keeps emptier nodes whole for multi-GPU pods).
//!
//! Everything is deterministic: ordered maps, a fixed pivoting rule, and scores in integer
//! millionths of a GPU.

use crate::cluster::{Capacity, NodeState};
use crate::model::{Demand, GpuRequest};
use crate::types::GpuAssignment;
use std::collections::BTreeMap;

/// Score unit: a millionth of a GPU.
const UNITS_PER_GPU: i64 = 1_000_000;
/// One device, in thousandths.
const DEVICE: usize = 1000;
/// The LP prices the most common share sizes (at most this many); rarer sizes are valued
/// by the knapsack of the priced ones.
const PRICED_SIZES: usize = 48;
/// The prices are recomputed when the number of shares seen reaches a power of two, and
/// every this many shares once past it.
const RESOLVE_EVERY: u64 = 1024;
/// CPU-only pods' cpu (memory) counts toward what a GPU needs from none of it, when the
/// mix at full GPU use asks for this share of the cluster's cpu (memory) or less, ...
const PRESSURE_FROM: f64 = 0.95;
/// ... to all of it at this much more.
const PRESSURE_SPAN: f64 = 0.2;
/// The mix forgets: every this many GPU pods seen, the counts and totals are halved, so a
/// long-running scheduler follows a workload whose mix drifts.
const HALVE_EVERY: u64 = 1 << 16;

#[derive(Debug, Clone)]
pub struct PackingScorer {
    /// Shares (fractional GPU requests) seen, by size in thousandths, decayed.
    shares: BTreeMap<u32, u64>,
    /// Shares seen in all, and the count at which the prices are next recomputed.
    shares_seen: u64,
    next_solve: u64,
    /// Totals over the GPU pods seen (decayed): cpu millicores, memory bytes, GPU thousandths.
    gpu_cpu: f64,
    gpu_memory: f64,
    gpu_milli: f64,
    cpu_only_cpu: f64,
    cpu_only_memory: f64,
    /// GPU pods seen since the counts were last halved.
    since_halving: u64,
    /// GPUs the mix runs per millicore and per byte of memory (`None`: no limit), as of the
    /// last `refresh`.
    gpus_per_cpu: Option<f64>,
    gpus_per_byte: Option<f64>,
    /// Price of a share, by size, in devices; negative: not priced.
    price: Vec<f64>,
    /// `value[f]`: worth of a device with `f` thousandths free, in devices; empty until the
    /// first shares are priced.
    value: Vec<f64>,
}

impl Default for PackingScorer {
    fn default() -> Self {
        PackingScorer {
            shares: BTreeMap::new(),
            shares_seen: 0,
            next_solve: 1,
            gpu_cpu: 0.0,
            gpu_memory: 0.0,
            gpu_milli: 0.0,
            cpu_only_cpu: 0.0,
            cpu_only_memory: 0.0,
            since_halving: 0,
            gpus_per_cpu: None,
            gpus_per_byte: None,
            price: Vec::new(),
            value: Vec::new(),
        }
    }
}

impl PackingScorer {
    /// Learns from a pod entering the queue.
    pub fn observe(&mut self, demand: &Demand) {
        let milli = demand.gpu.milli();
        if milli == 0 {
            self.cpu_only_cpu += demand.resources.cpu_milli.max(0) as f64;
            self.cpu_only_memory += demand.resources.memory_bytes.max(0) as f64;
            return;
        }
        self.gpu_cpu += demand.resources.cpu_milli.max(0) as f64;
        self.gpu_memory += demand.resources.memory_bytes.max(0) as f64;
        self.gpu_milli += milli as f64;
        self.since_halving += 1;
        if let GpuRequest::Shared { milli } = demand.gpu {
            if (1..DEVICE as u32).contains(&milli) {
                *self.shares.entry(milli).or_default() += 1;
                self.shares_seen += 1;
            }
        }
        if self.since_halving == HALVE_EVERY {
            self.since_halving = 0;
            self.shares.retain(|_, count| {
                *count /= 2;
                *count > 0
            });
            self.gpu_cpu /= 2.0;
            self.gpu_memory /= 2.0;
            self.gpu_milli /= 2.0;
            self.cpu_only_cpu /= 2.0;
            self.cpu_only_memory /= 2.0;
        }
    }

    /// Brings the scorer's view of the mix up to date: the CPU and memory per GPU, and the
    /// share prices when enough new shares were seen since they were computed.
    pub fn refresh(&mut self, cluster: Capacity) {
        let gpus = self.gpu_milli / DEVICE as f64;
        let per = |total: f64| (total > 0.0 && gpus > 0.0).then(|| gpus / total);
        // CPU-only pods compete for the cpu and memory free GPUs need as far as the mix
        // asks the cluster for more than it has.
        let pressure = |gpu_pods: f64, cpu_pods: f64, capacity: i64| {
            if gpus <= 0.0 || capacity <= 0 {
                return 0.0;
            }
            let wanted = (gpu_pods + cpu_pods) / gpus * cluster.gpus as f64;
            ((wanted / capacity as f64 - PRESSURE_FROM) / PRESSURE_SPAN).clamp(0.0, 1.0)
        };
        let cpu_weight = pressure(self.gpu_cpu, self.cpu_only_cpu, cluster.cpu_milli);
        let memory_weight = pressure(self.gpu_memory, self.cpu_only_memory, cluster.memory_bytes);
        self.gpus_per_cpu = per(self.gpu_cpu + cpu_weight * self.cpu_only_cpu);
        self.gpus_per_byte = per(self.gpu_memory + memory_weight * self.cpu_only_memory);
        if self.shares_seen < self.next_solve || self.shares.is_empty() {
            return;
        }
        self.next_solve = if self.shares_seen < RESOLVE_EVERY {
            (self.shares_seen + 1).next_power_of_two()
        } else {
            self.shares_seen + RESOLVE_EVERY
        };
        // The most common sizes, in size order.
        let mut common: Vec<(u32, u64)> = self.shares.iter().map(|(&s, &c)| (s, c)).collect();
        common.sort_by_key(|&(size, count)| (std::cmp::Reverse(count), size));
        common.truncate(PRICED_SIZES);
        common.sort_unstable();
        let sizes: Vec<u32> = common.iter().map(|&(s, _)| s).collect();
        let counts: Vec<f64> = common.iter().map(|&(_, c)| c as f64).collect();
        let prices = share_prices(&sizes, &counts);
        self.value = knapsack_values(&sizes, &prices);
        self.price = vec![-1.0; DEVICE];
        for (&size, &price) in sizes.iter().zip(&prices) {
            self.price[size as usize] = price;
        }
    }

    /// Higher is better: minus the GPU capacity (in millionths of a GPU) the placement makes
    /// unusable for the expected pods, by share packing and by CPU/memory stranding.
    pub fn score(&self, node: &NodeState, demand: &Demand) -> i64 {
        let (loss, taken) = match demand.gpu {
            GpuRequest::None => (0, 0),
            GpuRequest::Whole(n) => (0, DEVICE as i64 * n as i64),
            share @ (GpuRequest::Shared { .. } | GpuRequest::Memory { .. }) => {
                match self.best_device(node, share) {
                    Some((_, milli, loss)) => (loss, milli as i64),
                    None => (0, share.milli() as i64),
                }
            }
        };
        if self.gpus_per_cpu.is_none() && self.gpus_per_byte.is_none() {
            return -loss;
        }
        let free = node.free_gpu_milli() as i64;
        let (cpu, memory) = (node.free.cpu_milli, node.free.memory_bytes);
        let before = self.stranded(free, cpu, memory);
        let after = self.stranded(
            free - taken,
            cpu - demand.resources.cpu_milli,
            memory - demand.resources.memory_bytes,
        );
        let stranded = ((after - before) * UNITS_PER_GPU as f64).round() as i64;
        -(loss + stranded)
    }

    /// The devices for a pod on a node that fits it: a share goes on the device where it
    /// loses least packing value (then the fullest, then the first); whole GPUs as
    /// [`NodeState::choose_gpus`] picks them. A share by memory is priced on each device
    /// at the thousandths it takes there.
    pub fn choose_gpus(&self, node: &NodeState, demand: &Demand) -> GpuAssignment {
        match demand.gpu {
            share @ (GpuRequest::Shared { .. } | GpuRequest::Memory { .. }) => {
                match self.best_device(node, share) {
                    Some((i, milli, _)) => GpuAssignment::Shared {
                        index: node.spec.gpus[i].index,
                        milli,
                    },
                    None => node.choose_gpus(share, None),
                }
            }
            gpu => node.choose_gpus(gpu, None),
        }
    }

    /// The device a share should take on this node (position in `node.gpus`), the
    /// thousandths it takes there and the packing value it loses there.
    fn best_device(&self, node: &NodeState, share: GpuRequest) -> Option<(usize, u32, i64)> {
        (0..node.gpus.len())
            .filter_map(|i| {
                let milli = node.share_fits(i, share)?;
                let free = node.gpus[i].free_milli;
                Some((self.share_loss(free, milli), free - milli, i, milli))
            })
            .min()
            .map(|(loss, _, i, milli)| (i, milli, loss))
    }

    /// Packing value lost by putting a share of `size` on a device with `free` thousandths.
    fn share_loss(&self, free: u32, size: u32) -> i64 {
        if self.value.is_empty() {
            return 0;
        }
        let (free, size) = ((free as usize).min(DEVICE), size as usize);
        let price = match self.price.get(size) {
            Some(&p) if p >= 0.0 => p,
            _ => self.value[size.min(DEVICE)],
        };
        let loss = self.value[free] - self.value[free - size] - price;
        // Prices come from floating-point duals: what an exact solution calls zero may be
        // off by rounding.
        if loss < 1e-6 {
            0
        } else {
            (loss * UNITS_PER_GPU as f64).round() as i64
        }
    }

    /// Free GPU capacity (in GPUs) that the node's free CPU and memory cannot feed at the
    /// mix's CPU and memory per GPU.
    fn stranded(&self, gpu_free_milli: i64, cpu_milli: i64, memory_bytes: i64) -> f64 {
        if gpu_free_milli <= 0 {
            return 0.0;
        }
        let gpus = gpu_free_milli as f64 / DEVICE as f64;
        let feedable =
            |free: i64, per: Option<f64>| per.map_or(gpus, |per| free.max(0) as f64 * per);
        let fed = gpus
            .min(feedable(cpu_milli, self.gpus_per_cpu))
            .min(feedable(memory_bytes, self.gpus_per_byte));
        gpus - fed
    }
}

/// `value[f]` for `f` in `0..=DEVICE`: the most valuable set of shares (sizes with prices,
/// any number of each) that fits in `f` thousandths.
fn knapsack_values(sizes: &[u32], prices: &[f64]) -> Vec<f64> {
    let mut value = vec![0.0f64; DEVICE + 1];
    for f in 1..=DEVICE {
        let mut best = value[f - 1];
        for (&size, &price) in sizes.iter().zip(prices) {
            let size = size as usize;
            if size <= f {
                best = best.max(value[f - size] + price);
            }
        }
        value[f] = best;
    }
    value
}

/// Dual prices of the LP relaxation of packing `counts[i]` shares of `sizes[i]` thousandths
/// (distinct, each below one device) into devices: minimise devices over packing patterns,
/// each size covered `counts[i]` times. Solved by the revised simplex method with column
/// generation; the entering pattern is the most valuable knapsack under the current prices.
/// A price is what one share of that size is worth, in devices, in an optimal packing.
fn share_prices(sizes: &[u32], counts: &[f64]) -> Vec<f64> {
    const EPS: f64 = 1e-9;
    let m = sizes.len();
    if m == 0 {
        return Vec::new();
    }
    // Start from one pattern per size: as many shares of it as fit on a device.
    let mut inverse = vec![vec![0.0f64; m]; m];
    let mut x = vec![0.0f64; m];
    let mut cost = vec![1.0f64; m];
    for i in 0..m {
        let fit = (DEVICE as u32 / sizes[i].max(1)).max(1) as f64;
        inverse[i][i] = 1.0 / fit;
        x[i] = counts[i] / fit;
    }
    let duals = |inverse: &[Vec<f64>], cost: &[f64]| -> Vec<f64> {
        (0..m)
            .map(|j| (0..m).map(|r| cost[r] * inverse[r][j]).sum())
            .collect()
    };
    for _ in 0..(50 * m + 200) {
        let y = duals(&inverse, &cost);
        let (best, pattern) = best_pattern(sizes, &y);
        let (column, column_cost) = if best > 1.0 + EPS {
            (pattern, 1.0)
        } else if let Some(i) = y.iter().position(|&p| p < -EPS) {
            // A negative price: covering size i more than asked is cheaper (surplus column).
            let mut surplus = vec![0.0; m];
            surplus[i] = -1.0;
            (surplus, 0.0)
        } else {
            break;
        };
        let d: Vec<f64> = (0..m)
            .map(|r| (0..m).map(|j| inverse[r][j] * column[j]).sum())
            .collect();
        // Ratio test; ties go to the first row.
        let mut leave: Option<(usize, f64)> = None;
        for r in 0..m {
            if d[r] > EPS {
                let step = x[r] / d[r];
                if leave.is_none_or(|(_, best)| step < best - EPS) {
                    leave = Some((r, step));
                }
            }
        }
        let Some((leave, step)) = leave else { break };
        let pivot = d[leave];
        for value in inverse[leave].iter_mut() {
            *value /= pivot;
        }
        let pivot_row = inverse[leave].clone();
        for r in 0..m {
            if r != leave && d[r] != 0.0 {
                let factor = d[r];
                for (value, p) in inverse[r].iter_mut().zip(&pivot_row) {
                    *value -= factor * p;
                }
                x[r] = (x[r] - factor * step).max(0.0);
            }
        }
        x[leave] = step;
        cost[leave] = column_cost;
    }
    duals(&inverse, &cost)
        .into_iter()
        .map(|p| p.clamp(0.0, 1.0))
        .collect()
}

/// The most valuable packing pattern of one device under `prices`: its value and how many
/// shares of each size it holds.
fn best_pattern(sizes: &[u32], prices: &[f64]) -> (f64, Vec<f64>) {
    let mut value = vec![0.0f64; DEVICE + 1];
    let mut last = vec![usize::MAX; DEVICE + 1];
    for f in 1..=DEVICE {
        value[f] = value[f - 1];
        last[f] = usize::MAX;
        for (i, (&size, &price)) in sizes.iter().zip(prices).enumerate() {
            let size = size as usize;
            if size <= f && price > 0.0 && value[f - size] + price > value[f] + 1e-12 {
                value[f] = value[f - size] + price;
                last[f] = i;
            }
        }
    }
    let mut pattern = vec![0.0; sizes.len()];
    let mut f = DEVICE;
    while f > 0 {
        match last[f] {
            usize::MAX => f -= 1,
            i => {
                pattern[i] += 1.0;
                f -= sizes[i] as usize;
            }
        }
    }
    (value[DEVICE], pattern)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClassId, GpuUse};
    use crate::model::{GpuDevice, NodeSpec};
    use crate::resources::Resources;

    const GIB: i64 = 1 << 30;
    const GPU: i64 = UNITS_PER_GPU;

    /// A node with `free` thousandths free on each device (1000: a free device, 0: held by
    /// a whole-GPU pod) and `cpu` cores free of `cpu_total`.
    fn node(free: &[u32], cpu: i64, cpu_total: i64) -> NodeState {
        let mut spec = NodeSpec::new("n", Resources::new(cpu_total * 1000, 1024 * GIB));
        spec.gpus = (0..free.len() as u32)
            .map(|index| GpuDevice {
                index,
                model: "G".into(),
                memory_mib: 0,
                numa_node: 0,
                nvlink_island: None,
                pcie_switch: None,
                dra: None,
            })
            .collect();
        NodeState {
            free: Resources::new(cpu * 1000, 1024 * GIB),
            free_pods: 110,
            gpus: free.iter().map(|&f| GpuUse::with_free(f)).collect(),
            pods: Default::default(),
            spec,
            class: ClassId(0),
            slot: (0, 0),
            cell: (0, 0),
            dra: false,
        }
    }

    fn pod(cores: i64, gpu: GpuRequest) -> Demand {
        Demand {
            resources: Resources::new(cores * 1000, GIB),
            gpu,
        }
    }

    fn share(milli: u32) -> Demand {
        pod(4, GpuRequest::Shared { milli })
    }

    fn learned(mix: &[(Demand, usize)]) -> PackingScorer {
        let mut scorer = PackingScorer::default();
        for (demand, count) in mix {
            for _ in 0..*count {
                scorer.observe(demand);
            }
        }
        scorer.refresh(Capacity::default());
        scorer
    }

    fn device(gpus: &GpuAssignment) -> u32 {
        match gpus {
            GpuAssignment::Shared { index, .. } => *index,
            other => panic!("expected a share, got {other:?}"),
        }
    }

    #[test]
    fn lp_prices_are_the_worth_of_a_share_in_an_optimal_packing() {
        let close = |got: Vec<f64>, want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() < 1e-6, "{got:?} != {want:?}");
            }
        };
        close(share_prices(&[500], &[10.0]), &[0.5]);
        close(share_prices(&[320], &[7.0]), &[1.0 / 3.0]);
        // 650 + 320 fill a device; the 320s left over go three to a device.
        close(
            share_prices(&[320, 650], &[30.0, 10.0]),
            &[1.0 / 3.0, 2.0 / 3.0],
        );
        // Far more 810s than 160s: every 810 costs a device, a 160 rides in its gap for free.
        close(share_prices(&[160, 810], &[5.0, 100.0]), &[0.0, 1.0]);
        let sizes = [320, 470];
        let value = knapsack_values(&sizes, &share_prices(&sizes, &[30.0, 60.0]));
        assert!((value[1000] - 1.0).abs() < 1e-9);
        assert!((value[530] - 0.5).abs() < 1e-9, "a 530 gap holds one 470");
        assert!(
            (value[680] - 2.0 / 3.0).abs() < 1e-9,
            "a 680 gap holds two 320s"
        );
        assert_eq!(value[319], 0.0);
    }

    #[test]
    fn a_share_avoids_leaving_a_gap_the_mix_cannot_fill() {
        // Mostly 470s (two to a device), some 320s (three to a device).
        let scorer = learned(&[(share(470), 60), (share(320), 30)]);
        let pod = share(320);
        let fresh = node(&[1000], 64, 64);
        let gap_340 = node(&[340], 64, 64);
        let gap_530 = node(&[530], 64, 64);
        // 320 in a 340 gap or on a fresh device: as an optimal packing would do.
        assert_eq!(scorer.score(&gap_340, &pod), 0);
        assert_eq!(scorer.score(&fresh, &pod), 0);
        // 320 in a 530 gap leaves 210 that no common share fits, and takes the place of a
        // 470 (worth half a device) while being worth a third: a sixth of a device lost.
        let loss = -scorer.score(&gap_530, &pod);
        assert!((loss - GPU / 6).abs() <= 1, "{loss}");
        // On one node, best fit would take the 530 device; the scorer keeps it for a 470.
        let both = node(&[530, 1000], 64, 64);
        assert_eq!(device(&scorer.choose_gpus(&both, &pod)), 1);
        let three = node(&[530, 1000, 340], 64, 64);
        assert_eq!(device(&scorer.choose_gpus(&three, &pod)), 2);
        // A 470 fills the 530 gap at no loss.
        assert_eq!(device(&scorer.choose_gpus(&both, &share(470))), 0);
    }

    #[test]
    fn the_learned_mix_changes_the_ranking() {
        let pod = share(320);
        let fresh = node(&[1000], 64, 64);
        let gap_530 = node(&[530], 64, 64);
        let both = node(&[530, 1000], 64, 64);
        // Only 320s: a 530 gap holds one 320 either way, so filling it loses nothing and
        // best fit picks it.
        let only_320 = learned(&[(share(320), 90)]);
        assert_eq!(only_320.score(&gap_530, &pod), only_320.score(&fresh, &pod));
        assert_eq!(device(&only_320.choose_gpus(&both, &pod)), 0);
        // Mostly 470s: the 530 gap is worth a 470 and the 320 goes elsewhere.
        let mostly_470 = learned(&[(share(470), 60), (share(320), 30)]);
        assert!(mostly_470.score(&gap_530, &pod) < mostly_470.score(&fresh, &pod));
        assert_eq!(device(&mostly_470.choose_gpus(&both, &pod)), 1);
    }

    #[test]
    fn before_any_share_is_seen_shares_go_best_fit() {
        let mut scorer = PackingScorer::default();
        let both = node(&[530, 1000, 340], 64, 64);
        assert_eq!(device(&scorer.choose_gpus(&both, &share(320))), 2);
        assert_eq!(scorer.score(&node(&[530], 64, 64), &share(320)), 0);
        // Prices follow only after `refresh`.
        scorer.observe(&share(470));
        scorer.observe(&share(470));
        assert_eq!(scorer.score(&node(&[530], 64, 64), &share(320)), 0);
        scorer.refresh(Capacity::default());
        assert!(scorer.score(&node(&[530], 64, 64), &share(320)) < 0);
    }

    #[test]
    fn cpu_only_pods_go_where_they_strand_no_gpu() {
        // GPU pods of the mix take 12 cores per GPU.
        let scorer = learned(&[(pod(12, GpuRequest::Whole(1)), 10)]);
        let cpu_pod = pod(16, GpuRequest::None);
        // Every GPU taken: its CPU feeds nothing else.
        let gpus_taken = node(&[0; 8], 40, 96);
        // CPU-rich: 104 cores for 2 GPUs.
        let cpu_rich = node(&[1000, 1000], 104, 104);
        // 8 free GPUs and 96 cores: exactly enough to feed them; 16 cores fewer strand 4/3.
        let balanced = node(&[1000; 8], 96, 96);
        assert_eq!(scorer.score(&gpus_taken, &cpu_pod), 0);
        assert_eq!(scorer.score(&cpu_rich, &cpu_pod), 0);
        let stranded = -scorer.score(&balanced, &cpu_pod);
        assert!((stranded - 4 * GPU / 3).abs() <= 1, "{stranded}");
    }

    #[test]
    fn cpu_light_gpu_pods_go_to_cpu_poor_nodes_and_heavy_ones_to_cpu_rich_nodes() {
        let scorer = learned(&[(pod(12, GpuRequest::Whole(1)), 10)]);
        // 16 cores for 2 GPUs: at 12 cores per GPU, a third of a GPU is stranded.
        let cpu_poor = node(&[1000, 1000], 16, 16);
        let cpu_rich = node(&[1000, 1000], 104, 104);
        let light = pod(4, GpuRequest::Whole(1));
        let heavy = pod(16, GpuRequest::Whole(1));
        assert!(scorer.score(&cpu_poor, &light) > scorer.score(&cpu_rich, &light));
        assert!(scorer.score(&cpu_poor, &heavy) < scorer.score(&cpu_rich, &heavy));
        assert_eq!(scorer.score(&cpu_rich, &heavy), 0);
    }

    #[test]
    fn the_mix_is_forgotten_slowly() {
        let mut scorer = PackingScorer::default();
        for _ in 0..HALVE_EVERY {
            scorer.observe(&share(500));
        }
        assert_eq!(scorer.shares[&500], HALVE_EVERY / 2);
        assert_eq!(scorer.gpu_milli, (HALVE_EVERY / 2 * 500) as f64);
    }
}
