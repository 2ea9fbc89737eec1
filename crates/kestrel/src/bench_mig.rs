//! `kestrel bench mig`: a MIG-heavy day on GPUs published with their MIG partitions (DRA
//! partitionable devices). Requests for 1g, 2g, 3g and 7g instances arrive at 130% of the
//! cluster's capacity and hold their instance for a while; one that finds no room is
//! turned away. Three policies see the same requests on the same nodes: Kestrel's
//! partition choice and first-fit (the first partition that fits, in the order the driver
//! publishes them), both on the first node that fits, so that they differ only in the
//! partitions taken; and spread (the emptiest node, as kube-scheduler's default scoring
//! picks, then first-fit partitions).

use anyhow::Result;
use clap::Args;
use kestrel_core::{
    DeviceClaims, GpuAssignment, NodeSpec, NodeState, PartitionChoice, Resources, Rng, Scheduler,
    SchedulerConfig,
};
use serde_json::json;
use std::collections::BinaryHeap;

#[derive(Args)]
pub struct MigArgs {
    /// Nodes of 8 H100 80GB GPUs, each published with its MIG partitions.
    #[arg(long, default_value_t = 16)]
    nodes: u32,
    /// Offered load: the instances' GPU share times their hold time, per unit of capacity.
    #[arg(long, default_value_t = 1.3)]
    load: f64,
    /// Simulated hours.
    #[arg(long, default_value_t = 24)]
    hours: u32,
    /// Seeds: the day is drawn once per seed, 1..=seeds.
    #[arg(long, default_value_t = 5)]
    seeds: u64,
    #[arg(long)]
    json: bool,
}

/// The mix: (profile, share of requests, share of a GPU's memory slices it takes).
const MIX: [(&str, f64, f64); 4] = [
    ("1g.10gb", 0.40, 0.125),
    ("2g.20gb", 0.25, 0.25),
    ("3g.40gb", 0.20, 0.5),
    ("7g.80gb", 0.15, 1.0),
];

/// Mean time an instance is held, in hours.
const MEAN_HOLD_HOURS: f64 = 1.0;

struct Outcome {
    placed: u64,
    requests: u64,
    /// Per profile of [`MIX`]: (placed, requests).
    by_profile: [(u64, u64); 4],
    /// Time-averaged share of the GPUs' capacity held (partitions' thousandths).
    allocated: f64,
}

fn mig_node(i: u32) -> Result<NodeSpec> {
    let name = format!("mig-{i:03}");
    let path = std::path::PathBuf::from("bench");
    let ctx = kestrel_objects::fields::Ctx {
        path: &path,
        object: format!("ResourceSlice of {name}"),
    };
    let mut book = kestrel_objects::dra::SliceBook::default();
    for slice in kestrel_objects::mig::nvidia_mig_slices(&name, 8, "NVIDIA H100 80GB HBM3") {
        book.insert(&ctx, &serde_json::from_value(slice)?)?;
    }
    let mut node = NodeSpec::new(&name, Resources::new(224_000, 2 << 40));
    if let Some(warning) = kestrel_objects::dra::attach_gpus(&mut node, &book.gpus_of(&name)) {
        anyhow::bail!(warning);
    }
    Ok(node)
}

/// One claim per profile of [`MIX`]: a `mig.nvidia.com` device of that profile.
fn profile_claims() -> Result<Vec<DeviceClaims>> {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec};
    let path = std::path::Path::new("bench");
    let ctx = kestrel_objects::fields::Ctx {
        path,
        object: "bench".to_string(),
    };
    let mut classes = kestrel_objects::dra::DeviceClasses::default();
    let class: DeviceClass = serde_json::from_value(kestrel_objects::mig::mig_device_class())?;
    classes.insert(&ctx, &class)?;
    MIX.iter()
        .map(|(profile, _, _)| {
            let spec: ResourceClaimSpec = serde_json::from_value(json!({
                "devices": {"requests": [{"name": "mig", "exactly": {
                    "deviceClassName": kestrel_objects::mig::MIG_DEVICE_CLASS,
                    "selectors": [{"cel": {"expression": format!(
                        "device.attributes['gpu.nvidia.com'].profile == '{profile}'"
                    )}}]}}]},
            }))?;
            let claim = kestrel_objects::dra::read_claim_spec(
                &ctx,
                "spec",
                format!("bench/{profile}"),
                Some(&spec),
                &classes,
            )?;
            Ok(DeviceClaims {
                claims: vec![claim],
            })
        })
        .collect()
}

/// An exponential draw with mean `mean`.
fn exponential(rng: &mut Rng, mean: f64) -> f64 {
    -mean * (1.0 - rng.unit()).max(f64::MIN_POSITIVE).ln()
}

/// Which node a request goes to, among those where it fits.
#[derive(Clone, Copy)]
enum NodeOrder {
    /// The first, in name order: the same for Kestrel's partition choice and first-fit,
    /// so that they differ only in the partitions they take.
    First,
    /// The one with the least held (kube-scheduler's default scoring, LeastAllocated).
    Emptiest,
}

#[derive(Clone, Copy)]
struct Policy {
    nodes: NodeOrder,
    partitions: PartitionChoice,
}

fn day(
    nodes: &[NodeState],
    claims: &[DeviceClaims],
    args: &MigArgs,
    seed: u64,
    how: Policy,
) -> Outcome {
    let mut nodes = nodes.to_vec();
    let mut rng = Rng::new(seed);
    let gpus: f64 = nodes.iter().map(|n| n.gpus.len() as f64).sum();
    let mean_share: f64 = MIX.iter().map(|(_, p, s)| p * s).sum();
    // Requests per hour that offer `load` times the capacity.
    let rate = args.load * gpus / (mean_share * MEAN_HOLD_HOURS);
    let horizon = f64::from(args.hours);
    // Departures: (negated time, node, what it held), earliest first.
    let mut holding: BinaryHeap<(std::cmp::Reverse<u64>, usize, Held)> = BinaryHeap::new();
    let (mut now, mut held_milli, mut area) = (0.0f64, 0u64, 0.0f64);
    let mut outcome = Outcome {
        placed: 0,
        requests: 0,
        by_profile: [(0, 0); 4],
        allocated: 0.0,
    };
    let micros = |hours: f64| (hours * 3.6e9) as u64;
    loop {
        let next = now + exponential(&mut rng, 1.0 / rate);
        if next > horizon {
            break;
        }
        // Those that ended before this arrival give their partitions back.
        while let Some((std::cmp::Reverse(end), _, _)) = holding.peek() {
            if *end > micros(next) {
                break;
            }
            let (std::cmp::Reverse(end), node, Held(gpus)) = holding.pop().expect("peeked");
            let t = end as f64 / 3.6e9;
            area += held_milli as f64 * (t - now);
            now = t;
            held_milli -= gpus.milli();
            nodes[node].give_back_devices(&gpus);
        }
        area += held_milli as f64 * (next - now);
        now = next;
        let mut draw = rng.unit();
        let profile = MIX
            .iter()
            .position(|(_, p, _)| {
                draw -= p;
                draw < 0.0
            })
            .unwrap_or(MIX.len() - 1);
        let hold = exponential(&mut rng, MEAN_HOLD_HOURS);
        outcome.requests += 1;
        outcome.by_profile[profile].1 += 1;
        let fits = |n: &NodeState| {
            n.choose_devices_in(&claims[profile], None, how.partitions)
                .is_ok()
        };
        let used = |n: &NodeState| n.gpus.iter().map(|g| 1000 - g.free_milli).sum::<u32>();
        let chosen = match how.nodes {
            NodeOrder::First => nodes.iter().position(fits),
            NodeOrder::Emptiest => (0..nodes.len())
                .filter(|&i| fits(&nodes[i]))
                .min_by_key(|&i| (used(&nodes[i]), i)),
        };
        let placed = chosen.and_then(|i| {
            nodes[i]
                .take_devices(&claims[profile], how.partitions)
                .map(|g| (i, g))
        });
        if let Some((node, gpus)) = placed {
            outcome.placed += 1;
            outcome.by_profile[profile].0 += 1;
            held_milli += gpus.milli();
            holding.push((std::cmp::Reverse(micros(now + hold)), node, Held(gpus)));
        }
    }
    area += held_milli as f64 * (horizon - now);
    outcome.allocated = area / (horizon * gpus * 1000.0);
    outcome
}

/// An assignment ordered only so that the departure heap can hold it.
#[derive(PartialEq, Eq)]
struct Held(GpuAssignment);

impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.indices().cmp(&other.0.indices())
    }
}

pub fn run_mig(args: MigArgs) -> Result<()> {
    if args.nodes == 0
        || args.seeds == 0
        || args.hours == 0
        || args.load.is_nan()
        || args.load <= 0.0
    {
        anyhow::bail!("--nodes, --seeds, --hours and --load must be more than 0");
    }
    let mut scheduler = Scheduler::new(SchedulerConfig::default());
    let mut ids = Vec::new();
    for i in 0..args.nodes {
        ids.push(scheduler.add_node(mig_node(i)?)?);
    }
    let nodes: Vec<NodeState> = ids
        .iter()
        .map(|&id| scheduler.cluster().node(id).clone())
        .collect();
    let claims = profile_claims()?;
    let mut rows = Vec::new();
    for (name, how) in [
        ("kestrel", (NodeOrder::First, PartitionChoice::Packed)),
        ("first-fit", (NodeOrder::First, PartitionChoice::FirstFit)),
        ("spread", (NodeOrder::Emptiest, PartitionChoice::FirstFit)),
    ] {
        let how = Policy {
            nodes: how.0,
            partitions: how.1,
        };
        let days: Vec<Outcome> = (1..=args.seeds)
            .map(|seed| day(&nodes, &claims, &args, seed, how))
            .collect();
        let n = days.len() as f64;
        let placed = days
            .iter()
            .map(|d| d.placed as f64 / d.requests.max(1) as f64)
            .sum::<f64>()
            / n;
        let allocated = days.iter().map(|d| d.allocated).sum::<f64>() / n;
        let by_profile: Vec<f64> = (0..MIX.len())
            .map(|p| {
                days.iter()
                    .map(|d| d.by_profile[p].0 as f64 / d.by_profile[p].1.max(1) as f64)
                    .sum::<f64>()
                    / n
            })
            .collect();
        rows.push((name, placed, allocated, by_profile));
    }
    let gain = rows[0].1 / rows[1].1 - 1.0;
    let gain_over_spread = rows[0].1 / rows[2].1 - 1.0;
    if args.json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(name, placed, allocated, by_profile)| {
                json!({"policy": name, "placed": placed, "allocated": allocated,
                       "placed_by_profile": MIX.iter().zip(by_profile)
                           .map(|((p, _, _), v)| (p.to_string(), json!(v)))
                           .collect::<serde_json::Map<_, _>>()})
            })
            .collect();
        println!(
            "{}",
            json!({"nodes": args.nodes, "gpus": args.nodes * 8, "load": args.load,
                   "hours": args.hours, "seeds": args.seeds, "policies": rows,
                   "placed_gain": gain,
                   "placed_gain_over_spread": gain_over_spread})
        );
        return Ok(());
    }
    println!(
        "MIG day: {} nodes x 8 H100 80GB (MIG partitions through DRA), {:.0}% offered load, {} h, {} seed(s)",
        args.nodes,
        args.load * 100.0,
        args.hours,
        args.seeds
    );
    print!("{:<10} {:>8} {:>10}", "policy", "placed", "allocated");
    for (profile, _, _) in MIX {
        print!(" {profile:>8}");
    }
    println!();
    for (name, placed, allocated, by_profile) in &rows {
        print!(
            "{name:<10} {:>7.1}% {:>9.1}%",
            placed * 100.0,
            allocated * 100.0
        );
        for v in by_profile {
            print!(" {:>7.1}%", v * 100.0);
        }
        println!();
    }
    println!(
        "kestrel places {:+.1}% of the requests first-fit places, {:+.1}% of those spread places",
        gain * 100.0,
        gain_over_spread * 100.0
    );
    Ok(())
}
