//! Which GPUs a container gets: the scheduler's choice when a pod carries one, otherwise
//! the best-connected set. Pure functions over the inventory and the pods.

use crate::inventory::Inventory;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;

/// The annotation the scheduler writes at bind time: the node's GPU indices it chose for
/// the pod, comma-separated (`"0,1,2,3"`).
pub const GPU_INDICES_ANNOTATION: &str = "kestrel.dev/gpu-indices";
/// The annotation the agent writes at `Allocate`: the GPU indices the kubelet handed out
/// for the pod so far, in the same form.
pub const GPU_ALLOCATED_ANNOTATION: &str = "kestrel.dev/gpu-allocated";

/// Enumerating every subset costs C(n, k); past this many the choice is greedy.
const MAX_SUBSETS: u64 = 20_000;

/// The best-connected `size` GPUs among `available` (GPU indices), containing `must`:
/// fewest NVLink islands (a GPU without NVLink counts as its own), then fewest NUMA nodes,
/// then fewest PCIe switches, then the lowest indices. `None` when there are too few.
pub fn aligned(inv: &Inventory, available: &[u32], must: &[u32], size: usize) -> Option<Vec<u32>> {
    let must: BTreeSet<u32> = must.iter().copied().collect();
    let rest: Vec<u32> = available
        .iter()
        .copied()
        .filter(|i| !must.contains(i))
        .collect::<BTreeSet<u32>>()
        .into_iter()
        .collect();
    if must.len() > size || must.len() + rest.len() < size {
        return None;
    }
    let need = size - must.len();
    let islands = inv.nvlink_islands();
    let score = |set: &[u32]| {
        let island: BTreeSet<(bool, u32)> = set
            .iter()
            .map(|i| match islands.get(i).copied().flatten() {
                Some(id) => (true, id),
                None => (false, *i),
            })
            .collect();
        let numa: BTreeSet<u32> = set
            .iter()
            .filter_map(|i| inv.gpu_by_index(*i))
            .map(|g| g.numa_node)
            .collect();
        let switches: BTreeSet<Option<u32>> = set
            .iter()
            .filter_map(|i| inv.gpu_by_index(*i))
            .map(|g| g.pcie_switch)
            .collect();
        let mut sorted = set.to_vec();
        sorted.sort();
        (island.len(), numa.len(), switches.len(), sorted)
    };
    if binomial(rest.len() as u64, need as u64) > MAX_SUBSETS {
        // Greedy: grow from `must` (or from each GPU in turn when there is none) by the
        // GPU that keeps the score lowest; keep the best grown set.
        let grow = |mut set: Vec<u32>, mut pool: Vec<u32>| -> Vec<u32> {
            while set.len() < size {
                let (pos, _) = pool
                    .iter()
                    .enumerate()
                    .map(|(p, i)| {
                        let mut s = set.clone();
                        s.push(*i);
                        (p, score(&s))
                    })
                    .min_by(|a, b| a.1.cmp(&b.1))
                    .expect("enough GPUs");
                set.push(pool.remove(pos));
            }
            set.sort();
            set
        };
        let seeds: Vec<(Vec<u32>, Vec<u32>)> = if must.is_empty() && need > 0 {
            (0..rest.len())
                .map(|p| {
                    let mut pool = rest.clone();
                    let seed = pool.remove(p);
                    (vec![seed], pool)
                })
                .collect()
        } else {
            vec![(must.iter().copied().collect(), rest.clone())]
        };
        return seeds
            .into_iter()
            .map(|(set, pool)| grow(set, pool))
            .min_by_key(|set| score(set));
    }
    let mut best: Option<(_, Vec<u32>)> = None;
    let mut pick = Vec::with_capacity(need);
    combinations(&rest, need, 0, &mut pick, &mut |chosen| {
        let mut set: Vec<u32> = must.iter().copied().chain(chosen.iter().copied()).collect();
        set.sort();
        let s = score(&set);
        if best.as_ref().is_none_or(|(b, _)| s < *b) {
            best = Some((s, set));
        }
    });
    best.map(|(_, set)| set)
}

fn binomial(n: u64, k: u64) -> u64 {
    let k = k.min(n.saturating_sub(k));
    let mut r: u64 = 1;
    for i in 0..k {
        r = r.saturating_mul(n - i) / (i + 1);
    }
    r
}

fn combinations(
    items: &[u32],
    k: usize,
    from: usize,
    pick: &mut Vec<u32>,
    f: &mut dyn FnMut(&[u32]),
) {
    if pick.len() == k {
        f(pick);
        return;
    }
    for i in from..items.len() {
        if items.len() - i < k - pick.len() {
            break;
        }
        pick.push(items[i]);
        combinations(items, k, i + 1, pick, f);
        pick.pop();
    }
}

/// Parses `"0,1,2,3"`.
pub fn parse_indices(value: &str) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in value.split(',') {
        let part = part.trim();
        let i = part
            .parse::<u32>()
            .map_err(|_| format!("{part:?} is not a GPU index in {value:?}"))?;
        if out.contains(&i) {
            return Err(format!("GPU {i} is named twice in {value:?}"));
        }
        out.push(i);
    }
    Ok(out)
}

pub fn format_indices(indices: &[u32]) -> String {
    indices
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A pod bound to this node that still waits for its GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The scheduler's indices; `Err`: the annotation does not parse.
    pub chosen: Result<Vec<u32>, String>,
    /// Indices already recorded as allocated.
    pub allocated: Vec<u32>,
    /// The GPU count of each container that asks for GPUs, in spec order.
    pub requests: Vec<u32>,
    /// When the scheduler stamped its choice: the PodScheduled condition's time, else the
    /// pod's creation (RFC 3339; sorts as text).
    pub stamped_at: String,
}

impl Candidate {
    /// The GPU count of the next container waiting for GPUs.
    pub fn next_request(&self) -> Option<u32> {
        let mut done = self.allocated.len() as u32;
        for r in &self.requests {
            if done < *r {
                // A container partly recorded means the records are off: not a match.
                return (done == 0).then_some(*r);
            }
            done -= r;
        }
        None
    }

    /// The scheduler's indices for the next container: its chosen indices not yet
    /// allocated, in order, as many as the container asks for.
    pub fn next_chosen(&self) -> Option<Result<Vec<u32>, String>> {
        let size = self.next_request()? as usize;
        Some(self.chosen.clone().and_then(|chosen| {
            let left: Vec<u32> = chosen
                .into_iter()
                .filter(|i| !self.allocated.contains(i))
                .collect();
            if left.len() < size {
                Err(format!(
                    "it names {} GPUs not yet allocated but the container asks for {size}",
                    left.len()
                ))
            } else {
                Ok(left[..size].to_vec())
            }
        }))
    }
}

fn gpu_request(
    resources: Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
    resource: &str,
) -> u32 {
    let Some(r) = resources else { return 0 };
    // Extended resources: limits and requests are equal; either may be written.
    r.limits
        .as_ref()
        .and_then(|l| l.get(resource))
        .or_else(|| r.requests.as_ref().and_then(|l| l.get(resource)))
        .and_then(|q| q.0.trim().parse::<u32>().ok())
        .unwrap_or(0)
}

/// The pods on `node` waiting for `resource` devices whose GPU choice the scheduler
/// stamped, oldest stamp first: bound here, not yet running, not being deleted.
pub fn candidates(pods: &[Pod], node: &str, resource: &str) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = pods
        .iter()
        .filter_map(|pod| {
            let spec = pod.spec.as_ref()?;
            if spec.node_name.as_deref() != Some(node) || pod.metadata.deletion_timestamp.is_some()
            {
                return None;
            }
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
            if phase != "Pending" {
                return None;
            }
            let annotations = pod.metadata.annotations.as_ref()?;
            let chosen = parse_indices(annotations.get(GPU_INDICES_ANNOTATION)?);
            let allocated = annotations
                .get(GPU_ALLOCATED_ANNOTATION)
                .and_then(|v| parse_indices(v).ok())
                .unwrap_or_default();
            let requests: Vec<u32> = spec
                .containers
                .iter()
                .map(|c| gpu_request(c.resources.as_ref(), resource))
                .filter(|n| *n > 0)
                .collect();
            if requests.is_empty() {
                return None;
            }
            let scheduled = status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
                })
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0.to_string());
            let created = pod
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string());
            Some(Candidate {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                chosen,
                allocated,
                requests,
                stamped_at: scheduled.or(created).unwrap_or_default(),
            })
        })
        .filter(|c| c.next_request().is_some())
        .collect();
    out.sort_by(|a, b| {
        (&a.stamped_at, &a.namespace, &a.name).cmp(&(&b.stamped_at, &b.namespace, &b.name))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::Gpu;

    fn inv(n: u32, numa_of: impl Fn(u32) -> u32, island_size: u32) -> Inventory {
        Inventory {
            gpus: (0..n)
                .map(|i| Gpu {
                    index: i,
                    uuid: format!("GPU-{i}"),
                    model: "m".into(),
                    memory_mib: 1,
                    pci_bus_id: String::new(),
                    numa_node: numa_of(i),
                    nvlink_peers: if island_size > 1 {
                        let base = i / island_size * island_size;
                        (base..base + island_size).filter(|p| *p != i).collect()
                    } else {
                        vec![]
                    },
                    pcie_switch: Some(i / 2),
                    mig_enabled: false,
                    clique: None,
                })
                .collect(),
            ..Inventory::default()
        }
    }

    #[test]
    fn aligned_prefers_one_island_then_one_numa_node_then_one_switch() {
        // Two NVLink islands of four: 0-3 and 4-7; NUMA nodes split the same way.
        let i = inv(8, |g| g / 4, 4);
        let all: Vec<u32> = (0..8).collect();
        assert_eq!(aligned(&i, &all, &[], 4).unwrap(), [0, 1, 2, 3]);
        // 1 and 2 taken: 4-7 is the only whole island.
        assert_eq!(
            aligned(&i, &[0, 3, 4, 5, 6, 7], &[], 4).unwrap(),
            [4, 5, 6, 7]
        );
        // A pair: same switch beats same island.
        assert_eq!(aligned(&i, &[0, 2, 3, 5], &[], 2).unwrap(), [2, 3]);
        // must-include is honoured.
        assert_eq!(aligned(&i, &all, &[5], 2).unwrap(), [4, 5]);
        assert_eq!(aligned(&i, &[0, 1], &[], 3), None);
        assert_eq!(aligned(&i, &all, &[0, 1], 1), None);
        // No NVLink: NUMA decides.
        let p = inv(4, |g| g / 2, 1);
        assert_eq!(aligned(&p, &[0, 2, 3], &[], 2).unwrap(), [2, 3]);
        // Many GPUs: greedy, still aligned.
        let big = inv(32, |g| g / 16, 8);
        let all: Vec<u32> = (0..32).collect();
        let got = aligned(&big, &all[3..], &[], 8).unwrap();
        assert_eq!(got, (8..16).collect::<Vec<_>>());
    }

    #[test]
    fn indices_parse_and_reject() {
        assert_eq!(parse_indices("0,1, 2").unwrap(), [0, 1, 2]);
        assert!(parse_indices("0,x").unwrap_err().contains("\"x\""));
        assert!(parse_indices("1,1").unwrap_err().contains("twice"));
        assert!(parse_indices("").is_err());
        assert_eq!(format_indices(&[6, 7]), "6,7");
    }

    fn pod(
        name: &str,
        node: &str,
        phase: &str,
        indices: Option<&str>,
        gpus: &[u32],
        scheduled: &str,
    ) -> Pod {
        let containers: Vec<serde_json::Value> = gpus
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if *n == 0 {
                    serde_json::json!({"name": format!("c{i}")})
                } else {
                    serde_json::json!({"name": format!("c{i}"), "resources": {"limits": {"nvidia.com/gpu": n.to_string()}}})
                }
            })
            .collect();
        let mut annotations = serde_json::Map::new();
        if let Some(v) = indices {
            annotations.insert(GPU_INDICES_ANNOTATION.into(), v.into());
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                         "annotations": annotations, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node, "containers": containers},
            "status": {"phase": phase, "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]}
        }))
        .unwrap()
    }

    #[test]
    fn candidates_are_this_nodes_pending_stamped_gpu_pods_oldest_first() {
        let pods = vec![
            pod(
                "late",
                "n1",
                "Pending",
                Some("4,5"),
                &[2],
                "2026-01-01T00:00:09Z",
            ),
            pod(
                "early",
                "n1",
                "Pending",
                Some("0,1"),
                &[2],
                "2026-01-01T00:00:05Z",
            ),
            pod(
                "running",
                "n1",
                "Running",
                Some("2,3"),
                &[2],
                "2026-01-01T00:00:01Z",
            ),
            pod(
                "elsewhere",
                "n2",
                "Pending",
                Some("0,1"),
                &[2],
                "2026-01-01T00:00:01Z",
            ),
            pod(
                "unstamped",
                "n1",
                "Pending",
                None,
                &[2],
                "2026-01-01T00:00:01Z",
            ),
            pod(
                "cpu",
                "n1",
                "Pending",
                Some("0"),
                &[0],
                "2026-01-01T00:00:01Z",
            ),
            pod(
                "bad",
                "n1",
                "Pending",
                Some("0,nine"),
                &[1],
                "2026-01-01T00:00:07Z",
            ),
        ];
        let c = candidates(&pods, "n1", "nvidia.com/gpu");
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["early", "bad", "late"]);
        assert_eq!(c[0].next_chosen().unwrap().unwrap(), [0, 1]);
        assert!(c[1].next_chosen().unwrap().is_err());
    }

    #[test]
    fn containers_take_the_chosen_indices_in_turn() {
        let mut p = pod(
            "two",
            "n1",
            "Pending",
            Some("6,7,2"),
            &[2, 0, 1],
            "2026-01-01T00:00:05Z",
        );
        let c = &candidates(std::slice::from_ref(&p), "n1", "nvidia.com/gpu")[0];
        assert_eq!(c.requests, [2, 1]);
        assert_eq!(c.next_chosen().unwrap().unwrap(), [6, 7]);
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(GPU_ALLOCATED_ANNOTATION.into(), "6,7".into());
        let c = &candidates(std::slice::from_ref(&p), "n1", "nvidia.com/gpu")[0];
        assert_eq!(c.next_request(), Some(1));
        assert_eq!(c.next_chosen().unwrap().unwrap(), [2]);
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(GPU_ALLOCATED_ANNOTATION.into(), "6,7,2".into());
        assert!(candidates(&[p], "n1", "nvidia.com/gpu").is_empty());
    }
}
