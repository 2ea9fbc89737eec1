//! GPU health: XID errors and lost GPUs mark a GPU unhealthy; it recovers when the source
//! says so, or when it answers again (a lost GPU) and stays quiet for the recovery window
//! (an XID).
//!
//! Application XIDs (13 graphics engine exception, 31 memory page fault, 43 stopped
//! channel, 45 preemptive cleanup, 68 video processor exception, 109 context switch
//! timeout) are a workload's own faults, not the GPU's: they are counted, not acted on.

use crate::backend::HealthEvent;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// XIDs a workload causes itself (see the module docs).
pub const DEFAULT_IGNORED_XIDS: [u64; 6] = [13, 31, 43, 45, 68, 109];
/// XID 79: the GPU has fallen off the bus.
pub const XID_FALLEN_OFF_BUS: u64 = 79;

#[derive(Debug, Clone)]
pub struct HealthPolicy {
    pub ignored_xids: BTreeSet<u64>,
    /// How long a GPU marked unhealthy by an XID must answer and stay quiet before it is
    /// healthy again; `None`: never (until the agent restarts).
    pub xid_recovery: Option<Duration>,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            ignored_xids: DEFAULT_IGNORED_XIDS.into_iter().collect(),
            xid_recovery: Some(Duration::from_secs(600)),
        }
    }
}

/// Why a GPU is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    Xid(u64),
    Lost,
}

impl Fault {
    /// Short form for events and conditions.
    pub fn reason(&self) -> &'static str {
        match self {
            Fault::Xid(XID_FALLEN_OFF_BUS) | Fault::Lost => "GpuLost",
            Fault::Xid(_) => "XidError",
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Fault::Xid(XID_FALLEN_OFF_BUS) => "XID 79 (fallen off the bus)".into(),
            Fault::Xid(x) => format!("XID {x}"),
            Fault::Lost => "not answering (fallen off the bus?)".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GpuHealth {
    pub fault: Option<Fault>,
    /// The last XID seen (0: none), as DCGM's `DCGM_FI_DEV_XID_ERRORS` reports it.
    pub last_xid: u64,
    pub xid_count: u64,
    /// When the last fault was seen.
    pub last_fault_at: Option<Instant>,
}

impl GpuHealth {
    pub fn healthy(&self) -> bool {
        self.fault.is_none()
    }
}

/// Health of every GPU, by UUID.
pub type HealthMap = BTreeMap<String, GpuHealth>;

#[derive(Debug, Clone)]
pub struct HealthTracker {
    policy: HealthPolicy,
    gpus: HealthMap,
}

/// A change of a GPU's health, for events and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Unhealthy { uuid: String, fault: Fault },
    Recovered { uuid: String },
}

impl HealthTracker {
    pub fn new(uuids: impl IntoIterator<Item = String>, policy: HealthPolicy) -> Self {
        HealthTracker {
            policy,
            gpus: uuids
                .into_iter()
                .map(|u| (u, GpuHealth::default()))
                .collect(),
        }
    }

    pub fn map(&self) -> &HealthMap {
        &self.gpus
    }

    pub fn is_healthy(&self, uuid: &str) -> bool {
        self.gpus.get(uuid).is_some_and(GpuHealth::healthy)
    }

    /// Keeps the entries of GPUs still present and adds new ones (healthy).
    pub fn retain(&mut self, uuids: &[String]) {
        self.gpus.retain(|u, _| uuids.contains(u));
        for u in uuids {
            self.gpus.entry(u.clone()).or_default();
        }
    }

    pub fn apply(&mut self, event: &HealthEvent, now: Instant) -> Option<Transition> {
        let ignored = match event {
            HealthEvent::Xid { xid, .. } => self.policy.ignored_xids.contains(xid),
            _ => false,
        };
        let gpu = self.gpus.get_mut(event.uuid())?;
        let was_healthy = gpu.healthy();
        let uuid = event.uuid().to_string();
        match event {
            HealthEvent::Xid { xid, .. } => {
                gpu.last_xid = *xid;
                gpu.xid_count += 1;
                if ignored {
                    return None;
                }
                gpu.fault = Some(Fault::Xid(*xid));
                gpu.last_fault_at = Some(now);
            }
            HealthEvent::Lost { .. } => {
                // An XID that already explains it stays the reason.
                if gpu.fault.is_none() {
                    gpu.fault = Some(Fault::Lost);
                }
                gpu.last_fault_at = Some(now);
            }
            HealthEvent::Recovered { .. } => {
                gpu.fault = None;
                return (!was_healthy).then_some(Transition::Recovered { uuid });
            }
        }
        let fault = gpu.fault.clone()?;
        was_healthy.then_some(Transition::Unhealthy { uuid, fault })
    }

    /// Recovers the unhealthy GPUs that answer `probe` again: a lost GPU at once, one with
    /// an XID once the recovery window has passed since its last fault.
    pub fn tick(&mut self, now: Instant, probe: impl Fn(&str) -> bool) -> Vec<Transition> {
        let mut out = Vec::new();
        for (uuid, gpu) in &mut self.gpus {
            let Some(fault) = &gpu.fault else { continue };
            let due = match fault {
                Fault::Lost => true,
                Fault::Xid(_) => match (self.policy.xid_recovery, gpu.last_fault_at) {
                    (Some(window), Some(at)) => now.duration_since(at) >= window,
                    (Some(_), None) => true,
                    (None, _) => false,
                },
            };
            if due && probe(uuid) {
                gpu.fault = None;
                out.push(Transition::Recovered { uuid: uuid.clone() });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid(uuid: &str, xid: u64) -> HealthEvent {
        HealthEvent::Xid {
            uuid: uuid.into(),
            xid,
        }
    }

    #[test]
    fn xids_lost_gpus_and_recovery() {
        let policy = HealthPolicy {
            xid_recovery: Some(Duration::from_secs(60)),
            ..HealthPolicy::default()
        };
        let mut h = HealthTracker::new(["a".to_string(), "b".to_string()], policy);
        let t0 = Instant::now();
        // An application XID is counted, not acted on.
        assert_eq!(h.apply(&xid("a", 13), t0), None);
        assert!(h.is_healthy("a"));
        assert_eq!(h.map()["a"].last_xid, 13);
        // XID 79 marks it unhealthy, once.
        assert_eq!(
            h.apply(&xid("a", 79), t0),
            Some(Transition::Unhealthy {
                uuid: "a".into(),
                fault: Fault::Xid(79)
            })
        );
        assert_eq!(h.apply(&xid("a", 79), t0), None);
        assert_eq!(h.map()["a"].xid_count, 3);
        // Within the window, or while it does not answer, it stays unhealthy.
        assert!(h.tick(t0 + Duration::from_secs(30), |_| true).is_empty());
        assert!(h.tick(t0 + Duration::from_secs(90), |_| false).is_empty());
        assert_eq!(
            h.tick(t0 + Duration::from_secs(90), |_| true),
            [Transition::Recovered { uuid: "a".into() }]
        );
        // A lost GPU recovers as soon as it answers.
        let lost = HealthEvent::Lost { uuid: "b".into() };
        assert!(h.apply(&lost, t0).is_some());
        assert_eq!(h.map()["b"].fault.as_ref().unwrap().reason(), "GpuLost");
        assert!(h.tick(t0, |_| false).is_empty());
        assert_eq!(h.tick(t0, |_| true).len(), 1);
        // Events about GPUs the node does not have are ignored.
        assert_eq!(h.apply(&xid("zz", 79), t0), None);
    }

    #[test]
    fn without_a_window_only_the_source_recovers_an_xid() {
        let policy = HealthPolicy {
            xid_recovery: None,
            ..HealthPolicy::default()
        };
        let mut h = HealthTracker::new(["a".to_string()], policy);
        let t0 = Instant::now();
        h.apply(&xid("a", 48), t0);
        assert!(h.tick(t0 + Duration::from_secs(86400), |_| true).is_empty());
        let back = HealthEvent::Recovered { uuid: "a".into() };
        assert_eq!(
            h.apply(&back, t0),
            Some(Transition::Recovered { uuid: "a".into() })
        );
        assert!(h.is_healthy("a"));
    }
}
