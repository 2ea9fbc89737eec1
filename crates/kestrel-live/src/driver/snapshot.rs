//! A snapshot for `kestrel explain --live` and `kestrel queue --live`: the leader's
//! watches and index, read once, with nothing written to the API.

use super::apply::apply_change;
use super::listings::{Synced, SERVED};
use super::watches::start_watches;
use super::{Change, DriverConfig};
use crate::index::LiveIndex;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use kube::Client;
use std::sync::atomic::Ordering;
use tokio::task::JoinSet;
use tokio::time::{Duration, Instant};

/// The listings of a snapshot did not complete in time.
#[derive(Debug, thiserror::Error)]
#[error("the API server did not list {missing} within {seconds} s; check the kubeconfig's server and that its user may list them (the ClusterRole in deploy/kestrel.yaml)", missing = .missing.join(", "))]
pub struct SnapshotError {
    pub missing: Vec<&'static str>,
    pub seconds: u64,
}

/// The cluster as the scheduler sees it now, for `kestrel explain --live`: the same watches
/// and index as [`lead`](super::lead), applied once every listing is complete (nodes first, pods last),
/// then one cycle whose decisions are dropped: nothing is written to the API. Pods count
/// as arrived at their creationTimestamp and bound pods as started at `status.startTime`
/// ([`LiveIndex::use_object_times`]); driver time 0 is `unix_now_ms - lookback`, and
/// the returned moment is now on that clock.
pub async fn snapshot(
    client: &Client,
    config: &DriverConfig,
    unix_now_ms: i64,
    lookback: Duration,
    timeout: Duration,
) -> Result<(LiveIndex, kestrel_core::Millis), SnapshotError> {
    let mut watches = JoinSet::new();
    let (stores, mut changes) = start_watches(client, &mut watches);
    let mut synced = Synced::default();
    // The pods as listed, for this one reading (the scheduler keeps no store of them).
    let mut pod_writer = Writer::<Pod>::default();
    let pods = pod_writer.as_reader();
    // DRA and storage objects have no stores: their events are replayed as they came.
    let mut device_and_volume_events = Vec::new();
    let deadline = Instant::now() + timeout;
    while !synced.all() {
        match tokio::time::timeout_at(deadline, changes.recv()).await {
            Ok(Some(change)) => {
                synced.note(&change);
                match change {
                    Change::Pod(event) => pod_writer.apply_watcher_event(&event),
                    Change::Dra(_) | Change::Volume(_) => device_and_volume_events.push(change),
                    _ => {}
                }
            }
            Ok(None) | Err(_) => {
                return Err(SnapshotError {
                    missing: synced.missing(),
                    seconds: timeout.as_secs(),
                })
            }
        }
    }
    watches.abort_all();
    let now = lookback.as_millis() as kestrel_core::Millis;
    let mut state = LiveIndex::new(config.scheduler, &config.scheduler_name);
    state.set_wall_origin(unix_now_ms - now as i64);
    state.set_time(now);
    state.use_object_times();
    let init = |k: &'static str| Change::Queues {
        kind: k,
        listed: true,
    };
    let mut ordered: Vec<Change> = Vec::new();
    ordered.extend(
        stores
            .nodes
            .state()
            .iter()
            .map(|n| Change::Node(Box::new(Event::InitApply((**n).clone())))),
    );
    // Every listing is in: a WorkloadPriorityClass version not listed is not served.
    ordered.extend(
        stores
            .workload_priority_classes
            .iter()
            .filter(|w| w.served.load(Ordering::Acquire) != SERVED)
            .map(|w| Change::Unserved { kind: w.kind }),
    );
    ordered.push(Change::PriorityClasses { listed: true });
    ordered.push(Change::Topologies { listed: true });
    ordered.extend(
        stores
            .pod_groups
            .state()
            .iter()
            .map(|g| Change::PodGroup(Box::new(Event::InitApply((**g).clone())))),
    );
    for &(kind, ref store) in &stores.foreign_pod_groups {
        ordered.extend(store.state().iter().map(|g| Change::ForeignPodGroup {
            kind,
            event: Box::new(Event::InitApply((**g).clone())),
        }));
    }
    ordered.push(init("ClusterQueue"));
    ordered.extend(device_and_volume_events);
    ordered.extend(
        stores
            .resource_quotas
            .state()
            .iter()
            .map(|q| Change::ResourceQuota(Box::new(Event::InitApply((**q).clone())))),
    );
    ordered.extend(
        stores
            .limit_ranges
            .state()
            .iter()
            .map(|l| Change::LimitRange(Box::new(Event::InitApply((**l).clone())))),
    );
    ordered.extend(stores.owners().into_iter().map(|(kind, o)| Change::Owner {
        kind,
        event: Box::new(Event::InitApply(o)),
    }));
    ordered.extend(
        pods.state()
            .iter()
            .map(|p| Change::Pod(Box::new(Event::InitApply((**p).clone())))),
    );
    for change in ordered {
        apply_change(&mut state, &stores, change);
    }
    // Logged as the leader logs them; only the leader posts them as events.
    for warning in state.take_field_warnings() {
        tracing::warn!(warning = %warning, "a field of another project's object is not honoured");
    }
    let _ = state.cycle(now);
    Ok((state, now))
}
