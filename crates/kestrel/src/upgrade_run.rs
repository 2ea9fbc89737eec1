//! `kestrel upgrade run`: the live counterpart of `upgrade plan`. The plan (batches within
//! --max-nodes/--max-gpus, control plane first) and the version pre-flight are the
//! simulator's; everything is checked before the first node is cordoned. Each batch's
//! nodes are drained through NodeMaintenances (`kestrel serve` carries them out), handed
//! to what upgrades them (a command, or a label), and uncordoned once a label or a node
//! condition says they are done. Nodes already done are left out, so a rerun resumes.

use crate::drain;
use crate::runtime::Flavour;
use crate::upgrade::{checked_options, RunArgs};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kestrel_live::api::FIELD_MANAGER;
use kestrel_objects::crds::{MaintenancePhase, NodeMaintenanceSpec};
use kestrel_objects::live;
use kestrel_sim::upgrade::plan;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::time::{Duration, Instant};

/// When a node is done.
enum Done {
    Label(String, String),
    Condition(String),
}

impl Done {
    fn holds(&self, node: &Node) -> bool {
        match self {
            Done::Label(k, v) => node.labels().get(k) == Some(v),
            Done::Condition(t) => node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| &c.type_ == t && c.status == "True")),
        }
    }

    fn describe(&self) -> String {
        match self {
            Done::Label(k, v) => format!("label {k}={v}"),
            Done::Condition(t) => format!("condition {t}=True"),
        }
    }
}

fn key_value(flag: &str, given: &str) -> Result<(String, String)> {
    match given.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.trim().to_string())),
        _ => bail!(
            "{flag} {given:?}: expected KEY=VALUE, e.g. {flag} upgrade.example.com/driver=570"
        ),
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    if args.plan.start != 0 {
        bail!("--start applies to `upgrade plan` and `upgrade simulate`, not to `upgrade run`");
    }
    // Everything the user gave is checked before the cluster is touched.
    let options = checked_options(&args.plan)?;
    let set_label = args
        .set_label
        .as_deref()
        .map(|l| key_value("--set-label", l))
        .transpose()?;
    let done = match (&args.done_label, &args.done_condition) {
        (Some(l), _) => {
            let (k, v) = key_value("--done-label", l)?;
            Done::Label(k, v)
        }
        (None, Some(t)) => Done::Condition(t.clone()),
        (None, None) => bail!("give --done-label KEY=VALUE or --done-condition TYPE"),
    };
    crate::runtime::block_on(Flavour::CurrentThread, async {
        let client = crate::serve::client(args.kubeconfig.clone()).await?;
        let nodes: Vec<Node> = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("listing nodes")?
            .items;
        let mut specs = Vec::new();
        for node in nodes.iter().filter(|n| !done.holds(n)) {
            specs.push(live::node_spec(node).map_err(|e| anyhow::anyhow!("{e}"))?);
        }
        if specs.is_empty() {
            println!(
                "every node already has {}; nothing to upgrade",
                done.describe()
            );
            return Ok(());
        }
        let plan = plan(&specs, &options)?;
        for batch in &plan.batches {
            for node in &batch.nodes {
                if let Some(other) = drain::active_for(&client, node).await? {
                    if other.name_any() != maintenance_name(node) {
                        bail!("node {node} is already under maintenance by NodeMaintenance {}; end it first (`kestrel drain {node} --end`); nothing was cordoned", other.name_any());
                    }
                }
            }
        }
        print!("{}", plan.render());
        let timeout = Duration::from_millis(args.node_timeout);
        for (i, batch) in plan.batches.iter().enumerate() {
            println!("batch {}: draining {}", i + 1, batch.nodes.join(" "));
            for node in &batch.nodes {
                let spec = NodeMaintenanceSpec {
                    node_name: node.clone(),
                    checkpoint_deadline_seconds: Some((args.checkpoint_deadline / 1000) as i64),
                    reason: Some(format!("kestrel upgrade run, batch {}", i + 1)),
                    done: false,
                };
                drain::start(&client, &maintenance_name(node), spec).await?;
            }
            for node in &batch.nodes {
                drain::follow(
                    &client,
                    &maintenance_name(node),
                    MaintenancePhase::Drained,
                    timeout,
                )
                .await?;
            }
            for node in &batch.nodes {
                hand_over(&client, node, args.command.as_deref(), set_label.as_ref()).await?;
            }
            for node in &batch.nodes {
                wait_done(&client, node, &done, timeout).await?;
                let name = maintenance_name(node);
                drain::set_done(&client, &name).await?;
                drain::follow(&client, &name, MaintenancePhase::Completed, timeout).await?;
                Api::<kestrel_objects::crds::NodeMaintenance>::all(client.clone())
                    .delete(&name, &DeleteParams::default())
                    .await
                    .with_context(|| format!("deleting NodeMaintenance {name}"))?;
                // Gone once Kestrel took its finalizer off: a rerun starts afresh.
                drain::wait_gone(&client, &name, timeout).await?;
                println!("node {node} upgraded and uncordoned");
            }
        }
        println!("upgrade done: {} batches", plan.batches.len());
        Ok(())
    })?
}

/// `upgrade-NODE`: a rerun finds the maintenance it started.
fn maintenance_name(node: &str) -> String {
    format!("upgrade-{node}")
}

/// Hands a drained node to what upgrades it.
async fn hand_over(
    client: &Client,
    node: &str,
    command: Option<&str>,
    label: Option<&(String, String)>,
) -> Result<()> {
    if let Some((k, v)) = label {
        let patch = json!({"metadata": {"labels": {k: v}}});
        Api::<Node>::all(client.clone())
            .patch(
                node,
                &PatchParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..Default::default()
                },
                &Patch::Merge(&patch),
            )
            .await
            .with_context(|| format!("labelling node {node} {k}={v}"))?;
        println!("node {node}: labelled {k}={v}");
    }
    if let Some(command) = command {
        // One node at a time, so the command's output reads in order.
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .env("KESTREL_NODE", node)
            .status()
            .with_context(|| format!("running --command for node {node}"))?;
        if !status.success() {
            bail!("--command failed for node {node} ({status}); the node stays cordoned under NodeMaintenance {}; fix it and run again", maintenance_name(node));
        }
    }
    Ok(())
}

async fn wait_done(client: &Client, node: &str, done: &Done, timeout: Duration) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    loop {
        let n = api
            .get_opt(node)
            .await?
            .with_context(|| format!("node {node} was deleted during its upgrade"))?;
        if done.holds(&n) {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("node {node} has no {} after {}s; it stays cordoned under NodeMaintenance {}; run again to resume", done.describe(), timeout.as_secs(), maintenance_name(node));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
