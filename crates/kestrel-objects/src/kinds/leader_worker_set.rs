//! `LeaderWorkerSet` (`leaderworkerset.x-k8s.io/v1`): each group, a leader and its
//! workers, a gang of its own. The simulator expands it (`kestrel-sim`'s manifests) with
//! the labels and size annotation its controller puts on pods; live, those are what
//! Kestrel reads ([`crate::gangs`]), so nothing is watched beyond pods.

use super::{GangScope, Live, WorkloadKind};

pub struct LeaderWorkerSet;

impl WorkloadKind for LeaderWorkerSet {
    fn kind(&self) -> &'static str {
        "LeaderWorkerSet"
    }
    fn group(&self) -> &'static str {
        "leaderworkerset.x-k8s.io"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "leaderworkersets"
    }
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerGroup
    }
}
