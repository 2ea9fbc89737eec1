//! Kubernetes' own workload kinds. Their pods are expanded by the simulator's readers for
//! their typed objects; live, a queued Job, StatefulSet or ReplicaSet is found by its pods'
//! controller owner reference.

use super::{GangScope, Live, WorkloadKind};

pub struct Job;

impl WorkloadKind for Job {
    fn kind(&self) -> &'static str {
        "Job"
    }
    fn group(&self) -> &'static str {
        "batch"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "jobs"
    }
    fn live(&self) -> Live {
        Live::Typed
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObjectWhenQueued
    }
}

pub struct CronJob;

impl WorkloadKind for CronJob {
    fn kind(&self) -> &'static str {
        "CronJob"
    }
    fn group(&self) -> &'static str {
        "batch"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "cronjobs"
    }
    /// Live, its Jobs are watched as any Job.
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerCreatedObject
    }
}

pub struct Deployment;

impl WorkloadKind for Deployment {
    fn kind(&self) -> &'static str {
        "Deployment"
    }
    fn group(&self) -> &'static str {
        "apps"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "deployments"
    }
    /// Its pods stay workloads of their own (as in Kueue): nothing to watch.
    fn live(&self) -> Live {
        Live::NotWatched
    }
    fn gang(&self) -> GangScope {
        GangScope::PerPod
    }
}

pub struct StatefulSet;

impl WorkloadKind for StatefulSet {
    fn kind(&self) -> &'static str {
        "StatefulSet"
    }
    fn group(&self) -> &'static str {
        "apps"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "statefulsets"
    }
    fn live(&self) -> Live {
        Live::Typed
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObjectWhenQueued
    }
}

pub struct ReplicaSet;

impl WorkloadKind for ReplicaSet {
    fn kind(&self) -> &'static str {
        "ReplicaSet"
    }
    fn group(&self) -> &'static str {
        "apps"
    }
    fn versions(&self) -> &'static [&'static str] {
        &["v1"]
    }
    fn plural(&self) -> &'static str {
        "replicasets"
    }
    fn live(&self) -> Live {
        Live::Typed
    }
    fn gang(&self) -> GangScope {
        GangScope::PerObjectWhenQueued
    }
}
