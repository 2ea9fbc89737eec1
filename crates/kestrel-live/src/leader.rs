//! Leader election with a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`
//! does it (the defaults are kube-scheduler's): a candidate takes a Lease that is absent,
//! released, or not renewed for `lease_duration` as this replica observed it (local clock,
//! so clock skew between replicas does not matter); the leader renews every
//! `retry_period` and gives up when it could not renew for `renew_deadline`.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct LeaseConfig {
    pub namespace: String,
    /// The Lease's name (the scheduler name: one leader per scheduler name).
    pub name: String,
    /// This replica (`POD_NAME`, else the hostname), unique among replicas.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaseConfig {
    /// kube-scheduler's timings: 15 s lease, 10 s renew deadline, 2 s retry.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        LeaseConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Leadership as a writer must judge it, by this replica's own clock: held until the
/// start of the last successful renewal plus the renew deadline. A leader paused past
/// its lease (SIGSTOP, a frozen VM, a long GC-like stall) wakes up with its leadership
/// flag still set until its lease loop runs again; a write checked against this clock is
/// refused at once instead, before a new leader's choices can be overwritten.
#[derive(Debug, Clone, Default)]
pub struct LeaseClock(Option<Arc<Mutex<Option<Instant>>>>);

impl LeaseClock {
    /// No election (`--leader-elect=false`): always held.
    pub fn unelected() -> Self {
        LeaseClock(None)
    }

    /// Whether leadership still holds now.
    pub fn held(&self) -> bool {
        match &self.0 {
            None => true,
            Some(until) => until
                .lock()
                .expect("lease clock")
                .is_some_and(|until| Instant::now() < until),
        }
    }

    fn set(&self, until: Option<Instant>) {
        if let Some(cell) = &self.0 {
            *cell.lock().expect("lease clock") = until;
        }
    }
}

pub struct LeaderElector {
    config: LeaseConfig,
    /// Set on every renewal, cleared when leadership ends.
    clock: LeaseClock,
    api: Api<Lease>,
    /// The last record seen and when this replica first saw it.
    observed: Option<(LeaseSpec, Instant)>,
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        LeaderElector {
            config,
            api,
            observed: None,
            clock: LeaseClock(Some(Arc::default())),
        }
    }

    /// The clock writers check leadership against ([`LeaseClock`]).
    pub fn clock(&self) -> LeaseClock {
        self.clock.clone()
    }

    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    fn record(&self, acquire: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
            acquire_time: Some(acquire.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// One attempt: create, renew or take over the Lease. `Ok(true)`: this replica leads.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let now = Instant::now();
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.record(None, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observed = Some((created.spec.unwrap_or_default(), now));
                    Ok(true)
                }
                Err(e) if api_code(&e) == Some(409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|(seen, _)| *seen != spec) {
            self.observed = Some((spec.clone(), now));
        }
        let observed_at = self.observed.as_ref().map(|(_, at)| *at).unwrap_or(now);
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let mine = holder == self.config.identity;
        let duration = spec
            .lease_duration_seconds
            .map(|s| Duration::from_secs(s.max(0) as u64))
            .unwrap_or(self.config.lease_duration);
        if !holder.is_empty() && !mine && observed_at + duration > now {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        lease.spec = Some(if mine {
            self.record(spec.acquire_time.clone(), transitions)
        } else {
            self.record(None, transitions + 1)
        });
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.observed = Some((updated.spec.unwrap_or_default(), now));
                Ok(true)
            }
            Err(e) if api_code(&e) == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease up (on shutdown), so another replica takes over at once: the holder
    /// is cleared and the duration set to 1 s, as client-go's `ReleaseOnCancel` does.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return Ok(());
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: spec.lease_transitions,
            ..Default::default()
        });
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }

    /// Campaigns and renews until `shutdown` fires, publishing leadership on `leader`.
    /// Leadership is withdrawn the moment a renewal is refused or the renew deadline passes.
    pub async fn run(mut self, leader: watch::Sender<bool>, mut shutdown: watch::Receiver<bool>) {
        let mut last_renew: Option<Instant> = None;
        loop {
            // Leadership is dated from before the request: the lease may be taken over
            // `lease_duration` after the holder sent it, as others measure it.
            let sent = Instant::now();
            let attempt = self.try_acquire_or_renew().await;
            let now = Instant::now();
            let leading = match attempt {
                Ok(true) => {
                    last_renew = Some(sent);
                    true
                }
                Ok(false) => false,
                Err(e) => {
                    tracing::warn!(error = %e, lease = %self.config.name, "lease request failed");
                    last_renew.is_some_and(|t| now.duration_since(t) < self.config.renew_deadline)
                }
            };
            if !leading {
                last_renew = None;
            }
            self.clock
                .set(last_renew.map(|renewed| renewed + self.config.renew_deadline));
            if *leader.borrow() != leading {
                tracing::info!(identity = %self.config.identity, leading, "leadership changed");
                leader.send_replace(leading);
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.retry_period) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
        leader.send_replace(false);
        self.clock.set(None);
        if last_renew.is_some() {
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "could not release the lease");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leadership_lapses_by_the_clock_even_when_no_renewal_ran() {
        assert!(LeaseClock::unelected().held(), "without election: held");
        let clock = LeaseClock(Some(Arc::default()));
        assert!(!clock.held(), "never renewed: not held");
        clock.set(Some(Instant::now() + Duration::from_secs(10)));
        assert!(clock.held());
        // A pause past the renew deadline: nothing ran, yet the writer's check fails.
        tokio::time::advance(Duration::from_secs(10)).await;
        assert!(!clock.held(), "lapsed at the deadline");
        clock.set(Some(Instant::now() + Duration::from_secs(10)));
        assert!(clock.clone().held(), "a clone sees the renewal");
        clock.set(None);
        assert!(!clock.held(), "leadership ended");
    }
}
