//! The placement cache: each distinct set of placement constraints interned once, with its
//! verdict per node class (static predicates are checked per class, not per node) and the
//! buckets placements under it visit; each pair of constraints and demand interned as a
//! signature, under which pods alike share one failure per generation.

use crate::cluster::ClusterIndex;
use crate::explain::{NodeReason, Unschedulable};
use crate::model::{Demand, PlacementConstraints};
use crate::predicates::{names_per_node_labels, static_check};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// A class-level verdict for one set of constraints.
#[derive(Debug, Clone)]
pub(crate) enum ClassVerdict {
    Feasible { score: i64 },
    Infeasible(NodeReason),
}

/// One interned constraint set and what is known of it against the cluster.
#[derive(Debug, Clone)]
pub(crate) struct ConstraintEntry {
    pub(crate) constraints: PlacementConstraints,
    /// The constraints name per-node labels or fields: check node by node.
    pub(crate) per_node: bool,
    /// By node class, for the classes seen so far.
    pub(crate) verdicts: Vec<ClassVerdict>,
    /// Where to look for nodes (unless `per_node`), as of the cluster layout in `.0`.
    pub(crate) sources: Option<(u64, Vec<Source>)>,
}

/// Buckets a placement visits, with the static score of the nodes found there.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source {
    /// One class the constraints allow.
    Class { class: usize, score: i64 },
    /// The classes of a shape the constraints allow with this score, visited as one:
    /// nodes of other classes are skipped.
    Shape { shape: usize, score: i64 },
}

/// Constraint sets and signatures by id, with what is cached about them.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConstraintBook {
    /// By constraint id.
    pub(crate) entries: Vec<ConstraintEntry>,
    ids: HashMap<PlacementConstraints, u32>,
    signature_ids: HashMap<(u32, Demand), u32>,
    /// Per signature: the generation it last failed in, whether it could use reserved
    /// nodes, and the reason.
    pub(crate) failed: Vec<Option<(u64, bool, Arc<Unschedulable>)>>,
}

impl ConstraintBook {
    pub(crate) fn intern(&mut self, constraints: &PlacementConstraints) -> u32 {
        if let Some(&id) = self.ids.get(constraints) {
            return id;
        }
        let id = self.entries.len() as u32;
        self.entries.push(ConstraintEntry {
            constraints: constraints.clone(),
            per_node: names_per_node_labels(constraints),
            verdicts: Vec::new(),
            sources: None,
        });
        self.ids.insert(constraints.clone(), id);
        id
    }

    pub(crate) fn intern_signature(&mut self, constraint: u32, demand: Demand) -> u32 {
        let next = self.signature_ids.len() as u32;
        let signature = *self
            .signature_ids
            .entry((constraint, demand))
            .or_insert(next);
        if signature == next {
            self.failed.push(None);
        }
        signature
    }

    /// Class verdicts for a constraint set, computed for classes created since last asked.
    pub(crate) fn verdicts(&mut self, constraint: u32, cluster: &ClusterIndex) -> &[ClassVerdict] {
        let entry = &mut self.entries[constraint as usize];
        for class in &cluster.classes[entry.verdicts.len()..] {
            entry.verdicts.push(
                match static_check(&entry.constraints, &class.representative) {
                    Ok(score) => ClassVerdict::Feasible { score },
                    Err(reason) => ClassVerdict::Infeasible(reason),
                },
            );
        }
        &entry.verdicts
    }

    /// Plans where placements under a constraint set look (after [`ConstraintBook::verdicts`]),
    /// unless the plan is as new as the cluster's layout. Classes of one shape the
    /// constraints allow with one score are visited as that shape when that visits fewer
    /// nodes: they hold `allowed` of the shape's `shape.len` nodes, so finding a fitting
    /// node there takes about `shape.len / allowed` visits, against one shortlist per
    /// class. Sources come best score first, so a placement can stop at the first score
    /// that found a node.
    pub(crate) fn plan_sources(&mut self, constraint: u32, cluster: &ClusterIndex) {
        let entry = &mut self.entries[constraint as usize];
        if entry.per_node
            || entry
                .sources
                .as_ref()
                .is_some_and(|(at, _)| *at == cluster.layout)
        {
            return;
        }
        let mut groups: BTreeMap<(Reverse<i64>, usize), Vec<usize>> = BTreeMap::new();
        for (ci, class) in cluster.classes.iter().enumerate() {
            if let (true, ClassVerdict::Feasible { score }) = (class.len > 0, &entry.verdicts[ci]) {
                groups
                    .entry((Reverse(*score), class.shape))
                    .or_default()
                    .push(ci);
            }
        }
        let mut sources = Vec::new();
        for ((Reverse(score), shape), classes) in groups {
            let allowed: usize = classes.iter().map(|&c| cluster.classes[c].len).sum();
            if classes.len() > 1 && cluster.shapes[shape].len < classes.len() * allowed {
                sources.push(Source::Shape { shape, score });
            } else {
                sources.extend(
                    classes
                        .into_iter()
                        .map(|class| Source::Class { class, score }),
                );
            }
        }
        entry.sources = Some((cluster.layout, sources));
    }
}
