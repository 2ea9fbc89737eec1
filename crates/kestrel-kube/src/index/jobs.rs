//! Jobs as workloads: the pods of a Job that names a LocalQueue are one gang
//! (`job-<name>`), admitted whole against the queue's quota or down to Kueue's
//! `job-min-parallelism` ([`kestrel_k8s::workloads`]). The Job's queue is its pods' queue.
//!
//! The Job controller creates pods right after the Job, but the two watches do not keep
//! that order: a pod whose Job has not been seen yet waits outside the engine
//! ([`PodState::GangWait`]), so that it is never placed alone, bypassing the quota. Without
//! read access to Jobs (an older ClusterRole) their pods are read as they are.

use super::groups::Group;
use super::{ClusterState, GroupKey, PodState};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kestrel_core::{GangMembership, GangSpec, PodSpec};
use kestrel_k8s::live::{self, ConvertError};
use kestrel_k8s::workloads::{controlling_job, queued_job, workload_gang_name};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// What a Job says about its pods: `Ok(None)` not queued, `Ok(Some)` its queue and gang,
/// `Err` why it cannot be read.
type JobReading = Result<Option<(String, GangSpec)>, String>;

#[derive(Debug, Default)]
pub(super) struct JobBook {
    /// By (namespace, name); absent: not seen (yet).
    jobs: HashMap<GroupKey, JobReading>,
    /// The API does not let Kestrel read Jobs.
    unserved: bool,
    /// The gangs of Jobs not seen yet, whose pods wait for them.
    awaited: HashSet<GroupKey>,
}

impl ClusterState {
    /// A Job was added or changed.
    pub fn apply_job(&mut self, job: &Job) {
        let namespace = job
            .metadata
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let name = job.metadata.name.clone().unwrap_or_default();
        let reading = queued_job(Path::new(live::API_SOURCE), job).map_err(|e| {
            format!(
                "Job {namespace}/{name} is invalid: {}",
                ConvertError::from(e).message
            )
        });
        let key: GroupKey = (namespace.clone(), workload_gang_name("Job", &name));
        self.jobs.awaited.remove(&key);
        self.jobs.jobs.insert((namespace, name), reading.clone());
        let (queue, spec) = match reading {
            Ok(None) => {
                self.release_job_pods(&key);
                return;
            }
            Ok(Some((queue, gang))) => (Some(queue), Ok(gang)),
            Err(why) => (None, Err(why)),
        };
        let group = self
            .gangs
            .groups
            .entry(key.clone())
            .or_insert_with(|| Group::new(true, spec.clone()));
        // Its status is the Job's, written by the Job controller: Kestrel writes none.
        group.declared = true;
        group.foreign = true;
        group.spec = spec;
        // Pods that waited for the Job learn their queue from it.
        for member in group.members.clone() {
            if let Some(PodState::GangWait { spec, .. }) =
                self.pods.get_mut(&member).map(|t| &mut t.state)
            {
                if spec.queue.is_none() {
                    spec.queue.clone_from(&queue);
                }
            }
        }
        self.settle_group(&key);
    }

    /// A Job was deleted: its pods go with it (the garbage collector deletes them).
    pub fn delete_job(&mut self, namespace: &str, name: &str) {
        self.jobs
            .jobs
            .remove(&(namespace.to_string(), name.to_string()));
        let key: GroupKey = (namespace.to_string(), workload_gang_name("Job", name));
        if let Some(g) = self.gangs.groups.get_mut(&key) {
            g.declared = false;
            if g.members.is_empty() {
                self.gangs.groups.remove(&key);
                self.gangs.dirty_groups.remove(&key);
            }
        }
    }

    /// Jobs not in `present` were deleted while the watch was down (after a relist).
    pub fn retain_jobs(&mut self, present: &HashSet<GroupKey>) {
        let gone: Vec<GroupKey> = self
            .jobs
            .jobs
            .keys()
            .filter(|k| !present.contains(*k))
            .cloned()
            .collect();
        for (namespace, name) in gone {
            self.delete_job(&namespace, &name);
        }
    }

    /// The API does not let Kestrel read Jobs: their pods are read as they are.
    pub fn set_jobs_unserved(&mut self) {
        self.jobs.unserved = true;
        for key in std::mem::take(&mut self.jobs.awaited) {
            self.release_job_pods(&key);
        }
    }

    /// The gang of a pod its Job makes one workload with its siblings (`None`: the pod is a
    /// workload of its own); sets the pod's queue from the Job's. Only for pods that name
    /// no gang themselves.
    pub(super) fn job_gang(&mut self, pod: &Pod, spec: &mut PodSpec) -> Option<GroupKey> {
        let (key, job) = self.job_of(pod)?;
        match self
            .jobs
            .jobs
            .get(&(spec.namespace.clone(), job.to_string()))
        {
            Some(Ok(Some((queue, _)))) if spec.queue.is_none() => {
                spec.queue = Some(queue.clone());
            }
            Some(_) => {}
            None => {
                self.jobs.awaited.insert(key.clone());
            }
        }
        let job_key = format!("{}/{job}", spec.namespace);
        self.gangs.groups.entry(key.clone()).or_insert_with(|| {
            Group::new(
                false,
                Err(format!(
                    "waiting to see its Job {job_key}: a queued Job's pods are admitted together"
                )),
            )
        });
        spec.gang = Some(GangMembership {
            gang: key.1.clone(),
            role: None,
            rank: None,
        });
        Some(key)
    }

    /// The Job gang a pod of ours belongs to, if its Job is queued or not seen yet; pods
    /// that name a gang themselves keep theirs.
    pub(super) fn job_group_key(&self, pod: &Pod) -> Option<GroupKey> {
        let (key, _) = self.job_of(pod)?;
        matches!(live::pod_gang(pod), Ok(None)).then_some(key)
    }

    /// The gang of the Job that controls `pod` and that Job's name, if the Job is queued
    /// or not seen yet (whatever gang the pod names itself).
    fn job_of<'p>(&self, pod: &'p Pod) -> Option<(GroupKey, &'p str)> {
        if self.jobs.unserved {
            return None;
        }
        let job = controlling_job(pod)?;
        let namespace = live::pod_namespace(pod).to_string();
        match self.jobs.jobs.get(&(namespace.clone(), job.to_string())) {
            Some(Ok(None)) => None,
            _ => Some(((namespace, workload_gang_name("Job", job)), job)),
        }
    }

    /// The Job names no queue (or cannot be seen): its pods that waited for it go on as
    /// workloads of their own.
    fn release_job_pods(&mut self, key: &GroupKey) {
        let Some(group) = self.gangs.groups.remove(key) else {
            return;
        };
        self.gangs.dirty_groups.remove(key);
        for member in group.members {
            let Some(t) = self.pods.get_mut(&member) else {
                continue;
            };
            t.group = None;
            if !matches!(t.state, PodState::GangWait { .. }) {
                continue;
            }
            let PodState::GangWait { mut spec, .. } =
                std::mem::replace(&mut t.state, PodState::Gated)
            else {
                unreachable!("matched above")
            };
            spec.gang = None;
            let id = self.scheduler.submit(*spec, self.now);
            self.keys.insert(id, member.clone());
            t.state = PodState::Queued(id);
            self.reported.remove(&member);
        }
    }
}
