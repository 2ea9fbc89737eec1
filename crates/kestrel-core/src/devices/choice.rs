//! What a claim got or missed on a node: device references, choices and shortfalls.

use std::fmt;
use std::hash::Hash;

/// One published device of a node: a GPU (its position in `NodeSpec::gpus`) or one of
/// its partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceRef {
    pub position: usize,
    pub partition: Option<u8>,
}

impl DeviceRef {
    pub fn whole(position: usize) -> DeviceRef {
        DeviceRef {
            position,
            partition: None,
        }
    }
}

/// Devices chosen for a pod on one node: per claim, its results (request and device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceChoiceOnNode {
    pub per_claim: Vec<Vec<(String, DeviceRef)>>,
}

impl DeviceChoiceOnNode {
    /// Every device chosen, claim by claim.
    pub fn devices(&self) -> Vec<DeviceRef> {
        self.per_claim.iter().flatten().map(|(_, d)| *d).collect()
    }
}

/// How partitions are chosen among those that fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionChoice {
    /// GPUs already partitioned first, then the placement that leaves the largest
    /// partition (then the most) still possible on the GPU: whole GPUs and large profiles
    /// stay free for later requests.
    Packed,
    /// The first that fits, GPU by GPU: the baseline the packing is measured against.
    FirstFit,
}

/// Devices a choice has taken so far: GPUs whole, partitions (a bit each) per GPU.
#[derive(Clone)]
pub(super) struct Trial {
    pub(super) whole: Vec<bool>,
    pub(super) parts: Vec<u64>,
}

impl Trial {
    pub(super) fn take(&mut self, device: DeviceRef) {
        match device.partition {
            None => self.whole[device.position] = true,
            Some(k) => self.parts[device.position] |= 1 << k,
        }
    }
}

/// Why a node cannot serve a pod's claims, for explanations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimShortfall {
    /// The claim is allocated on another node.
    AllocatedElsewhere { claim: String, node: String },
    /// The claim's allocation names devices the node does not publish.
    AllocationGone { claim: String },
    /// No alternative of the request found enough devices.
    Request {
        claim: String,
        request: String,
        /// Devices that matched (free or not) and how many were free.
        matching: u32,
        free: u32,
        /// The first selector error met, if any.
        error: Option<String>,
        /// A matching partition is taken or blocked on a GPU with room enough for it:
        /// the room is split between the partitions held (MIG fragmentation).
        fragmented: bool,
    },
}

impl fmt::Display for ClaimShortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimShortfall::AllocatedElsewhere { claim, node } => {
                write!(f, "ResourceClaim {claim} is allocated on node {node}")
            }
            ClaimShortfall::AllocationGone { claim } => write!(
                f,
                "ResourceClaim {claim} is allocated to devices the node no longer publishes"
            ),
            ClaimShortfall::Request {
                claim,
                request,
                matching,
                free,
                error,
                fragmented,
            } => {
                write!(
                    f,
                    "ResourceClaim {claim} request {request}: {matching} matching device(s), {free} free"
                )?;
                if *fragmented {
                    write!(f, " (free GPU room split between MIG partitions)")?;
                }
                if let Some(e) = error {
                    write!(f, " (selector error: {e})")?;
                }
                Ok(())
            }
        }
    }
}
