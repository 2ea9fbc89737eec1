//! Rolling upgrades of nodes in the simulator: a plan (node pools in batches bounded by
//! the nodes and GPUs allowed offline at once), a pre-flight check of the target versions
//! against a compatibility list, and drains of each batch by two strategies
//! ([`drain::Strategy`]) whose lost training work can be compared on the same run.

pub mod drain;

use kestrel_core::{Millis, NodeSpec};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

pub use drain::{run_upgrade, simulate_upgrade, DrainObserver, Strategy, StrategyReport};

/// The label that marks control-plane nodes, whose pools are upgraded first.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";

/// How to upgrade: what goes offline at once, how long a node takes, how long a drain
/// waits for checkpoints.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanOptions {
    /// Most nodes offline (cordoned for the upgrade) at once.
    pub max_nodes: u32,
    /// Most GPUs on nodes offline at once.
    pub max_gpus: u32,
    /// Pools to upgrade, in this order after control-plane pools; empty: all pools.
    pub pools: Vec<String>,
    /// Group nodes into pools by this label's value; `None`: by node name less its
    /// trailing index (`gpu-07` is in pool `gpu`, as SimCluster pools name nodes).
    pub pool_label: Option<String>,
    /// How long one node's upgrade takes once it is empty (drivers, kernel, reboot).
    pub node_duration: Millis,
    /// Longest wait of a checkpoint-aware drain for a workload's next checkpoint.
    pub checkpoint_deadline: Millis,
    /// How long a workload asked to checkpoint takes to write it (capped by its grace).
    pub checkpoint_duration: Millis,
    /// Whether a checkpoint-aware drain asks workloads that offer it
    /// (`kestrel.dev/checkpoint-grace`) for a checkpoint; off: it only waits for periodic
    /// ones.
    pub ask_for_checkpoints: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            max_nodes: 1,
            max_gpus: 8,
            pools: Vec::new(),
            pool_label: None,
            node_duration: 45 * 60_000,
            checkpoint_deadline: 30 * 60_000,
            checkpoint_duration: 20_000,
            ask_for_checkpoints: true,
        }
    }
}

/// Nodes of one pool taken offline together.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Batch {
    pub pool: String,
    pub nodes: Vec<String>,
    pub gpus: u32,
}

/// Batches in the order they are upgraded, one pool after the other.
#[derive(Debug, Clone, PartialEq)]
pub struct UpgradePlan {
    pub options: PlanOptions,
    pub batches: Vec<Batch>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error("--max-nodes is 0: no node could ever be upgraded; give at least 1")]
    NoNodesAllowed,
    #[error("node {node} (pool {pool}) has {gpus} GPUs, more than --max-gpus {max_gpus} allows offline at once; raise --max-gpus to at least {gpus} or leave pool {pool} out of --pools")]
    NodeOverGpuLimit {
        node: String,
        pool: String,
        gpus: u32,
        max_gpus: u32,
    },
    #[error("--pools names pool {pool:?}, which no node is in; known pools: {known}")]
    UnknownPool { pool: String, known: String },
    #[error("--pool-label {label:?}: no node carries this label; label the nodes or leave --pool-label out to group nodes by name")]
    UnknownPoolLabel { label: String },
    #[error("the cluster has no nodes to upgrade")]
    NoNodes,
    #[error("--target {given:?}: expected COMPONENT=VERSION with COMPONENT one of kubernetes, containerd, gpuOperator, driver")]
    BadTarget { given: String },
    #[error(
        "--target {component}={version}: {component} is given twice; give each component once"
    )]
    TargetTwice {
        component: Component,
        version: String,
    },
    #[error("{file}: field {component}: target version {version} is not in the compatibility list (allowed: {allowed}); pick an allowed version or add it to the list once it is validated")]
    NotCompatible {
        file: String,
        component: Component,
        version: String,
        allowed: String,
    },
    #[error("targets were given (--target) but no compatibility list (--compatibility FILE) to check them against; give the list")]
    NoCompatibilityList,
}

/// What the pre-flight checks versions of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Component {
    Kubernetes,
    Containerd,
    GpuOperator,
    Driver,
}

impl Component {
    pub const ALL: [Component; 4] = [
        Component::Kubernetes,
        Component::Containerd,
        Component::GpuOperator,
        Component::Driver,
    ];

    /// The field name in the compatibility list and in `--target`.
    pub fn name(self) -> &'static str {
        match self {
            Component::Kubernetes => "kubernetes",
            Component::Containerd => "containerd",
            Component::GpuOperator => "gpuOperator",
            Component::Driver => "driver",
        }
    }
}

impl fmt::Display for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The versions the user has validated, per component (the compatibility list file).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CompatibilityList {
    #[serde(default)]
    pub kubernetes: Vec<String>,
    #[serde(default)]
    pub containerd: Vec<String>,
    #[serde(default)]
    pub gpu_operator: Vec<String>,
    #[serde(default)]
    pub driver: Vec<String>,
}

impl CompatibilityList {
    /// Reads the list; a file that does not parse, or has a field other than the four
    /// components, is refused with the file and what to write.
    pub fn parse(file: &Path, text: &str) -> Result<Self, crate::LoadError> {
        kestrel_objects::yaml::from_str::<CompatibilityList>(text).map_err(|e| {
            crate::LoadError::new(
                file,
                format!(
                    "not a compatibility list: {e}; write a mapping with lists of versions under \
                     kubernetes, containerd, gpuOperator and driver, e.g. `driver: [\"570.148.08\"]`"
                ),
            )
        })
    }

    pub fn allowed(&self, component: Component) -> &[String] {
        match component {
            Component::Kubernetes => &self.kubernetes,
            Component::Containerd => &self.containerd,
            Component::GpuOperator => &self.gpu_operator,
            Component::Driver => &self.driver,
        }
    }
}

/// Reads one `--target COMPONENT=VERSION`.
pub fn parse_target(given: &str) -> Result<(Component, String), PlanError> {
    let bad = || PlanError::BadTarget {
        given: given.to_string(),
    };
    let (name, version) = given.split_once('=').ok_or_else(bad)?;
    let component = Component::ALL
        .into_iter()
        .find(|c| c.name() == name.trim())
        .ok_or_else(bad)?;
    let version = version.trim();
    if version.is_empty() {
        return Err(bad());
    }
    Ok((component, version.to_string()))
}

/// Collects targets, refusing a component given twice.
pub fn parse_targets(given: &[String]) -> Result<BTreeMap<Component, String>, PlanError> {
    let mut targets = BTreeMap::new();
    for g in given {
        let (component, version) = parse_target(g)?;
        if targets.insert(component, version.clone()).is_some() {
            return Err(PlanError::TargetTwice { component, version });
        }
    }
    Ok(targets)
}

/// The pre-flight: every target version must be on the list (`file` names it in errors).
pub fn preflight(
    targets: &BTreeMap<Component, String>,
    list: Option<(&str, &CompatibilityList)>,
) -> Result<(), PlanError> {
    if targets.is_empty() {
        return Ok(());
    }
    let (file, list) = list.ok_or(PlanError::NoCompatibilityList)?;
    for (&component, version) in targets {
        let allowed = list.allowed(component);
        if !allowed.iter().any(|a| a == version) {
            return Err(PlanError::NotCompatible {
                file: file.to_string(),
                component,
                version: version.clone(),
                allowed: if allowed.is_empty() {
                    "none listed".to_string()
                } else {
                    allowed.join(", ")
                },
            });
        }
    }
    Ok(())
}

/// The pool a node belongs to.
pub fn pool_of(node: &NodeSpec, pool_label: Option<&str>) -> Option<String> {
    match pool_label {
        Some(label) => node.labels.get(label).cloned(),
        None => {
            let stem = node.name.trim_end_matches(|c: char| c.is_ascii_digit());
            let stem = stem.trim_end_matches(['-', '_', '.']);
            Some(if stem.is_empty() {
                node.name.clone()
            } else {
                stem.to_string()
            })
        }
    }
}

/// The cluster's nodes as they stand at `at`: those at the start, with the nodes its
/// events add or remove by then.
pub fn nodes_at(cluster: &crate::SimCluster, at: Millis) -> Vec<NodeSpec> {
    let mut nodes = cluster.nodes.clone();
    for event in cluster.events.iter().filter(|e| e.at <= at) {
        match &event.change {
            crate::ClusterChange::AddNode(spec) => nodes.push(spec.clone()),
            crate::ClusterChange::RemoveNode(name) => nodes.retain(|n| n.name != *name),
            crate::ClusterChange::Cordon(_) | crate::ClusterChange::Uncordon(_) => {}
        }
    }
    nodes
}

/// Plans the upgrade of `nodes`: control-plane pools first, then the pools in the order
/// asked (or by name), each cut into batches of consecutive nodes (by name) within the
/// limits. Checks everything before returning, so a refused plan touches nothing.
pub fn plan(nodes: &[NodeSpec], options: &PlanOptions) -> Result<UpgradePlan, PlanError> {
    if options.max_nodes == 0 {
        return Err(PlanError::NoNodesAllowed);
    }
    if nodes.is_empty() {
        return Err(PlanError::NoNodes);
    }
    let label = options.pool_label.as_deref();
    let mut pools: BTreeMap<String, Vec<&NodeSpec>> = BTreeMap::new();
    for node in nodes {
        if let Some(pool) = pool_of(node, label) {
            pools.entry(pool).or_default().push(node);
        }
    }
    if let (Some(label), true) = (label, pools.is_empty()) {
        return Err(PlanError::UnknownPoolLabel {
            label: label.to_string(),
        });
    }
    let mut order: Vec<String> = if options.pools.is_empty() {
        pools.keys().cloned().collect()
    } else {
        for pool in &options.pools {
            if !pools.contains_key(pool) {
                return Err(PlanError::UnknownPool {
                    pool: pool.clone(),
                    known: pools.keys().cloned().collect::<Vec<_>>().join(", "),
                });
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        let mut asked = options.pools.clone();
        asked.retain(|p| seen.insert(p.clone()));
        asked
    };
    // The control plane goes first: workers must not run a newer kubelet than it.
    let is_control_plane = |pool: &String| {
        pools[pool]
            .iter()
            .any(|n| n.labels.contains_key(CONTROL_PLANE_LABEL))
    };
    order.sort_by_key(|p| !is_control_plane(p));
    let mut batches = Vec::new();
    for pool in order {
        let mut members = pools[&pool].clone();
        members.sort_by(|a, b| a.name.cmp(&b.name));
        let mut current = Batch {
            pool: pool.clone(),
            nodes: Vec::new(),
            gpus: 0,
        };
        for node in members {
            let gpus = node.gpus.len() as u32;
            if gpus > options.max_gpus {
                return Err(PlanError::NodeOverGpuLimit {
                    node: node.name.clone(),
                    pool,
                    gpus,
                    max_gpus: options.max_gpus,
                });
            }
            let full = current.nodes.len() as u32 >= options.max_nodes
                || current.gpus + gpus > options.max_gpus;
            if full {
                let next = Batch {
                    pool: pool.clone(),
                    nodes: Vec::new(),
                    gpus: 0,
                };
                batches.push(std::mem::replace(&mut current, next));
            }
            current.nodes.push(node.name.clone());
            current.gpus += gpus;
        }
        if !current.nodes.is_empty() {
            batches.push(current);
        }
    }
    Ok(UpgradePlan {
        options: options.clone(),
        batches,
    })
}

impl UpgradePlan {
    /// The plan as text: one line per batch.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let nodes: usize = self.batches.iter().map(|b| b.nodes.len()).sum();
        out.push_str(&format!(
            "{} batches, {} nodes; at most {} nodes and {} GPUs offline at once; {} per node\n",
            self.batches.len(),
            nodes,
            self.options.max_nodes,
            self.options.max_gpus,
            kestrel_objects::duration::format_duration(self.options.node_duration),
        ));
        for (i, b) in self.batches.iter().enumerate() {
            out.push_str(&format!(
                "batch {:>3}  pool {:<16} {:>2} nodes {:>4} GPUs  {}\n",
                i + 1,
                b.pool,
                b.nodes.len(),
                b.gpus,
                b.nodes.join(" ")
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
