//! `kestrel drain NODE`: a checkpoint-coordinated drain through a `NodeMaintenance`,
//! which the leader of `kestrel serve` carries out (so a drain survives a restart of
//! either). The command checks what it can before creating anything, creates the object
//! and follows its status; `--end` ends the maintenance (the node is uncordoned).

use crate::runtime::Flavour;
use anyhow::{bail, Context, Result};
use clap::Args;
use k8s_openapi::api::core::v1::Node;
use kestrel_live::api::FIELD_MANAGER;
use kestrel_objects::crds::{MaintenancePhase, NodeMaintenance, NodeMaintenanceSpec};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct DrainArgs {
    /// The node to drain.
    node: String,
    /// Kubeconfig file; default: in-cluster config, else $KUBECONFIG or ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The NodeMaintenance's name; default: maintenance-NODE. Running the command again
    /// with the same name follows the drain already under way.
    #[arg(long)]
    name: Option<String>,
    /// Longest wait for the checkpoints asked for before pods are evicted.
    #[arg(long, default_value = "30m", value_parser = kestrel_objects::duration::parse_duration)]
    checkpoint_deadline: u64,
    /// Why (recorded on the NodeMaintenance).
    #[arg(long)]
    reason: Option<String>,
    /// Create the NodeMaintenance and return without following it.
    #[arg(long, conflicts_with = "end")]
    no_wait: bool,
    /// End the node's maintenance instead: Kestrel uncordons the node.
    #[arg(long)]
    end: bool,
    /// Give up following after this long (the drain goes on).
    #[arg(long, default_value = "2h", value_parser = kestrel_objects::duration::parse_duration)]
    timeout: u64,
}

pub fn run(args: DrainArgs) -> Result<()> {
    crate::runtime::block_on(Flavour::CurrentThread, async {
        let client = crate::serve::client(args.kubeconfig.clone()).await?;
        let name = args
            .name
            .clone()
            .unwrap_or_else(|| default_name(&args.node));
        let timeout = Duration::from_millis(args.timeout);
        if args.end {
            let nm = end(&client, &args.node).await?;
            follow(&client, &nm, MaintenancePhase::Completed, timeout).await?;
            println!("maintenance of node {} ended; node uncordoned", args.node);
            return Ok(());
        }
        let spec = NodeMaintenanceSpec {
            node_name: args.node.clone(),
            checkpoint_deadline_seconds: Some((args.checkpoint_deadline / 1000) as i64),
            reason: args.reason.clone(),
            done: false,
        };
        let created = start(&client, &name, spec).await?;
        println!(
            "{} NodeMaintenance {name} for node {}",
            if created { "created" } else { "following" },
            args.node
        );
        if !args.no_wait {
            follow(&client, &name, MaintenancePhase::Drained, timeout).await?;
            println!(
                "node {} drained; end the maintenance with `kestrel drain {} --end`",
                args.node, args.node
            );
        }
        Ok(())
    })?
}

/// `maintenance-NODE`.
pub fn default_name(node: &str) -> String {
    format!("maintenance-{node}")
}

/// Creates the NodeMaintenance after checking the node exists and no other maintenance
/// holds it; one of that name for the same node is followed as it is (`false`).
pub async fn start(client: &Client, name: &str, spec: NodeMaintenanceSpec) -> Result<bool> {
    let nodes: Api<Node> = Api::all(client.clone());
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let node = spec.node_name.clone();
    if let Some(existing) = api.get_opt(name).await? {
        let holds = MaintenancePhase::holds_node(existing.status.as_ref().and_then(|s| s.phase));
        if existing.spec.node_name == node && holds && !existing.spec.done {
            return Ok(false);
        }
        bail!(
            "NodeMaintenance {name} already exists (node {}, phase {}); delete it or pass --name",
            existing.spec.node_name,
            phase_name(&existing)
        );
    }
    if nodes.get_opt(&node).await?.is_none() {
        bail!("node {node} does not exist (NodeMaintenance {name}, spec.nodeName); name an existing node (kubectl get nodes)");
    }
    if let Some(other) = active_for(client, &node).await? {
        bail!(
            "node {node} is already under maintenance by NodeMaintenance {} (phase {}); NodeMaintenance {name} was not created; follow that one, or end it with `kestrel drain {node} --end`",
            other.name_any(),
            phase_name(&other)
        );
    }
    let nm = NodeMaintenance::new(name, spec);
    api.create(
        &PostParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        },
        &nm,
    )
    .await
    .with_context(|| format!("creating NodeMaintenance {name}"))?;
    Ok(true)
}

fn phase_name(nm: &NodeMaintenance) -> &'static str {
    nm.status
        .as_ref()
        .and_then(|s| s.phase)
        .map_or("Pending", |p| p.as_str())
}

/// The maintenance that holds `node`, if any.
pub async fn active_for(client: &Client, node: &str) -> Result<Option<NodeMaintenance>> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let list = api
        .list(&ListParams::default())
        .await
        .context("listing NodeMaintenances (are Kestrel's CRDs installed? `kestrel crds`)")?;
    Ok(list.items.into_iter().find(|nm| {
        nm.spec.node_name == node
            && !nm.spec.done
            && nm.metadata.deletion_timestamp.is_none()
            && MaintenancePhase::holds_node(nm.status.as_ref().and_then(|s| s.phase))
    }))
}

/// Ends the maintenance of `node` (`spec.done`); returns its name.
pub async fn end(client: &Client, node: &str) -> Result<String> {
    let Some(nm) = active_for(client, node).await? else {
        bail!("node {node} is under no maintenance; nothing to end");
    };
    set_done(client, &nm.name_any()).await?;
    Ok(nm.name_any())
}

pub async fn set_done(client: &Client, name: &str) -> Result<()> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    api.patch(
        name,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        },
        &Patch::Merge(json!({"spec": {"done": true}})),
    )
    .await
    .with_context(|| format!("ending NodeMaintenance {name}"))?;
    Ok(())
}

/// Prints the maintenance's progress as it changes until it reaches `goal`; a refusal
/// is an error with its message.
pub async fn follow(
    client: &Client,
    name: &str,
    goal: MaintenancePhase,
    timeout: Duration,
) -> Result<()> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let started = Instant::now();
    let mut last = String::new();
    loop {
        let Some(nm) = api.get_opt(name).await? else {
            if goal == MaintenancePhase::Completed {
                return Ok(());
            }
            bail!("NodeMaintenance {name} was deleted");
        };
        let status = nm.status.clone().unwrap_or_default();
        let message = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Drained")
            .map(|c| c.message.clone())
            .unwrap_or_else(|| "waiting for kestrel serve to take it up".into());
        let line = format!(
            "{}: {} pods left, {} checkpoints awaited, {} evictions refused: {message}",
            phase_name(&nm),
            status.pods_left,
            status.checkpoints_awaited,
            status.evictions_refused
        );
        if line != last {
            println!("{line}");
            last = line;
        }
        match status.phase {
            Some(MaintenancePhase::Refused) => bail!("{message}"),
            Some(p) if p == goal => return Ok(()),
            Some(MaintenancePhase::Completed) if goal == MaintenancePhase::Drained => {
                bail!("NodeMaintenance {name} ended before the node was drained")
            }
            _ => {}
        }
        if started.elapsed() > timeout {
            bail!(
                "NodeMaintenance {name} is not {} after {}s; it goes on (follow it with `kubectl get nm {name} -w`)",
                goal.as_str(),
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until the NodeMaintenance is gone (Kestrel removes its finalizer once the node
/// is uncordoned).
pub async fn wait_gone(client: &Client, name: &str, timeout: Duration) -> Result<()> {
    let api: Api<NodeMaintenance> = Api::all(client.clone());
    let started = Instant::now();
    while api.get_opt(name).await?.is_some() {
        if started.elapsed() > timeout {
            bail!("NodeMaintenance {name} is still there {}s after its deletion; is kestrel serve running?", timeout.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}
