//! Nodes in, the engine's nodes out; pods bound to a node the engine does not know wait
//! for it ([`PodState::Orphan`]).

use super::{LiveIndex, PodState};
use k8s_openapi::api::core::v1::Node;
use kestrel_objects::live::{self, ConvertError};
use std::collections::HashSet;

impl LiveIndex {
    /// A Node was added or changed. An unreadable node is left as it was (and returned).
    pub fn apply_node(&mut self, node: &Node) -> Result<(), ConvertError> {
        let spec = live::node_spec(node)?;
        let spec = self.with_dra_devices(spec);
        let name = spec.name.clone();
        self.scheduler.update_node(spec).map_err(|e| ConvertError {
            object: Some(format!("Node {name}")),
            field: None,
            message: e.to_string(),
        })?;
        // Pods bound to it before it was known now count.
        let waiting: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, t)| matches!(&t.state, PodState::Orphan { node, .. } if *node == name))
            .map(|(k, _)| k.clone())
            .collect();
        for key in waiting {
            let t = self.pods.get_mut(&key).expect("listed above");
            let PodState::Orphan { node, spec, gpus } =
                std::mem::replace(&mut t.state, PodState::Gated)
            else {
                unreachable!()
            };
            let state = self.restore(&key, *spec, node, gpus, self.now);
            self.pods.get_mut(&key).expect("listed above").state = state;
        }
        Ok(())
    }

    /// A Node was deleted: the pods bound to it stop counting and wait for it (the pod
    /// garbage collector deletes them); nothing is rescheduled that the API still binds.
    pub fn delete_node(&mut self, name: &str) {
        self.dra.node_bases.remove(name);
        let Ok(ids) = self.scheduler.remove_node(name) else {
            return;
        };
        for id in ids {
            let spec = self.scheduler.pod(id).spec.clone();
            let _ = self.scheduler.finish(id);
            let Some(key) = self.keys.remove(&id) else {
                continue;
            };
            if let Some(t) = self.pods.get_mut(&key) {
                t.state = PodState::Orphan {
                    node: name.to_string(),
                    spec: Box::new(spec),
                    gpus: None,
                };
            }
        }
    }

    /// Nodes not in `present` were deleted while the watch was down (after a relist).
    pub fn retain_nodes(&mut self, present: &HashSet<String>) {
        let gone: Vec<String> = self
            .scheduler
            .cluster()
            .iter()
            .map(|(_, n)| n.spec.name.clone())
            .filter(|n| !present.contains(n))
            .collect();
        for name in gone {
            self.delete_node(&name);
        }
    }
}
