//! Free-capacity buckets: nodes by room for GPUs, in cells by free CPU and memory.

use super::*;
use crate::model::GpuRequest;
use crate::resources::Resources;
use std::collections::{BTreeMap, BTreeSet};
use std::iter::Peekable;

/// Where a node sits inside its bucket: the bit lengths of its free CPU (millicores) and
/// free memory (bytes).
pub(crate) type Cell = (u8, u8);

/// The bit length of a free amount (0 for none): a node with `free` can hold `need` only
/// if `magnitude(free) >= magnitude(need)`.
pub(super) fn magnitude(amount: i64) -> u8 {
    if amount <= 0 {
        0
    } else {
        (64 - amount.leading_zeros()) as u8
    }
}

pub(super) fn cell_of(free: &Resources) -> Cell {
    (magnitude(free.cpu_milli), magnitude(free.memory_bytes))
}

/// The bucket of a node: 0 when no device has room left (or it has none), else one more
/// than its free whole GPUs.
pub(super) fn bucket_of(node: &NodeState) -> usize {
    if node.gpus.iter().any(|g| !g.held_whole && g.free_milli > 0) {
        node.free_whole_gpus() as usize + 1
    } else {
        0
    }
}

/// The first bucket whose nodes may hold a GPU request (see [`bucket_of`]).
pub(crate) fn first_bucket_for(gpu: GpuRequest) -> usize {
    match gpu {
        GpuRequest::None | GpuRequest::Whole(0) => 0,
        GpuRequest::Whole(n) => n as usize + 1,
        GpuRequest::Shared { .. } | GpuRequest::Memory { .. } => 1,
    }
}

/// Nodes with the same room for GPUs (see [`bucket_of`]), in cells by the magnitude of
/// their free CPU and memory, each cell ordered by (key, node). A placement visits only the
/// cells whose nodes may have room for the pod, so nodes whose GPUs are free but whose CPU
/// or memory is spent are passed over without being looked at.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bucket {
    cells: BTreeMap<Cell, BTreeSet<(u64, NodeId)>>,
}

impl Bucket {
    pub(super) fn insert(&mut self, cell: Cell, entry: (u64, NodeId)) {
        self.cells.entry(cell).or_default().insert(entry);
    }

    pub(super) fn remove(&mut self, cell: Cell, entry: (u64, NodeId)) {
        if let Some(set) = self.cells.get_mut(&cell) {
            set.remove(&entry);
            if set.is_empty() {
                self.cells.remove(&cell);
            }
        }
    }

    /// Every node of the bucket, cell by cell.
    pub fn iter(&self) -> impl Iterator<Item = &(u64, NodeId)> {
        self.cells.values().flatten()
    }

    /// The nodes whose free CPU and memory may hold `need`, in (key, node) order.
    pub fn may_hold(&self, need: &Resources) -> MayHold<'_> {
        let (cpu, memory) = cell_of(need);
        let open = self
            .cells
            .range((cpu, 0)..)
            .filter(|((_, m), _)| *m >= memory)
            .map(|(_, set)| set.iter().peekable());
        let mut merged = MayHold {
            heads: [const { None }; FEW],
            len: 0,
            spilled: Vec::new(),
        };
        for head in open {
            if merged.len < FEW {
                merged.heads[merged.len] = Some(head);
                merged.len += 1;
            } else {
                merged.spilled.push(head);
            }
        }
        merged
    }
}

pub(super) type CellIter<'a> = Peekable<std::collections::btree_set::Iter<'a, (u64, NodeId)>>;

/// Cells merged without allocating.
pub(super) const FEW: usize = 8;

/// [`Bucket::may_hold`]: the open cells merged in key order, the first [`FEW`] of them
/// without allocating.
pub(crate) struct MayHold<'a> {
    heads: [Option<CellIter<'a>>; FEW],
    len: usize,
    spilled: Vec<CellIter<'a>>,
}

impl<'a> Iterator for MayHold<'a> {
    type Item = &'a (u64, NodeId);

    fn next(&mut self) -> Option<Self::Item> {
        if let [Some(only)] = &mut self.heads[..self.len] {
            return only.next();
        }
        let heads = self.heads[..self.len].iter_mut().flatten();
        let mut least: Option<(&mut CellIter<'a>, &'a (u64, NodeId))> = None;
        for head in heads.chain(self.spilled.iter_mut()) {
            if let Some(&entry) = head.peek() {
                if least.as_ref().is_none_or(|(_, e)| entry < *e) {
                    least = Some((head, entry));
                }
            }
        }
        least?.0.next()
    }
}
