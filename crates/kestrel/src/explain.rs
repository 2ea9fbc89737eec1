//! `kestrel explain` and `kestrel queue`: why pods are pending at a moment of a simulated
//! run, or on a live cluster now, and when they should start.
//!
//! Both take the inputs of `kestrel sim` (the same argument struct) plus `--at`, run the
//! simulation to that moment and read the engine's state. Start times come from
//! `kestrel_sim::predict` (the simulator run forward with estimated runtimes). With
//! `--live` they read a live cluster instead: the same listing and index as `kestrel
//! serve` and one scheduling cycle whose decisions are dropped (nothing is written).

use crate::runtime::Flavour;
use crate::{load_inputs, Inputs, SimArgs};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use kestrel_core::{Millis, PodId};
use kestrel_objects::duration::parse_duration;
use kestrel_sim::predict::{self, Deadline, Estimates, Predictions};
use kestrel_sim::{SimError, Simulation};
use kestrel_view::explain_view::ExplainState;
use kestrel_view::explain_view::{self as view, clock};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// The simulator's inputs (those of `kestrel sim`) and the moment to look at.
#[derive(Args)]
pub struct StateArgs {
    #[command(flatten)]
    sim: SimArgs,
    /// The moment to look at: a clock time from the start (`10:00` is 10 h in) or a
    /// duration (`90m`); default: the last arrival of the input.
    #[arg(long, value_parser = parse_duration)]
    at: Option<u64>,
    /// Leave out the predicted start times (three forward runs of the simulator).
    #[arg(long)]
    no_predict: bool,
    /// Wall-clock time the forward runs for predicted starts may take (e.g. `20s`); past
    /// it the answer comes without predictions. `0`: no limit.
    #[arg(long, value_parser = parse_duration, default_value = "20s")]
    predict_budget: Millis,
    /// Look at a live cluster now instead of a simulated run: list it through the API
    /// server as `kestrel serve` does and run one scheduling cycle that writes nothing.
    #[arg(long)]
    live: bool,
    /// Kubeconfig for --live; default: in-cluster config, else $KUBECONFIG or
    /// ~/.kube/config.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// With --live: the scheduler name whose pods are scheduled (as `kestrel serve
    /// --scheduler-name`).
    #[arg(long, default_value = "kestrel")]
    scheduler_name: String,
}

/// How long `--live` waits for the cluster's listings.
const LIVE_LIST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How far back `--live` reads pods' creation and start times (older ones count from then).
const LIVE_LOOKBACK: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

impl StateArgs {
    /// Refuses flags that do not go with `--live` (or need it).
    fn check_live(&self, command: &str) -> Result<()> {
        if !self.live {
            if self.kubeconfig.is_some() {
                bail!("--kubeconfig is for --live; add --live, or leave it out to read simulator inputs");
            }
            return Ok(());
        }
        let sim = &self.sim;
        for (given, what) in [
            (!sim.paths.is_empty(), "input files"),
            (sim.cluster.is_some(), "--cluster"),
            (sim.synthetic.is_some(), "--synthetic"),
            (self.at.is_some(), "--at"),
        ] {
            if given {
                bail!("`{command} --live` reads the cluster as it is now; leave out {what} (they are for simulated runs)");
            }
        }
        Ok(())
    }
}

/// A live cluster's state now: the listing, the index and one dry cycle; moments are shown
/// as UTC wall-clock times.
fn live_state(args: &StateArgs) -> Result<(crate::live_view::LiveState, f64)> {
    let started = Instant::now();
    let runtime = crate::runtime::runtime(Flavour::MultiThread(1))?;
    let kubeconfig = args.kubeconfig.clone();
    let config = kestrel_live::driver::DriverConfig::new(&args.scheduler_name);
    let unix_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let (state, now) = runtime.block_on(async {
        let cluster = crate::serve::cluster_config(kubeconfig).await?;
        let source = format!("the API server at {}", cluster.cluster_url);
        let client = kube::Client::try_from(cluster).context("building the Kubernetes client")?;
        kestrel_live::driver::snapshot(&client, &config, unix_now, LIVE_LOOKBACK, LIVE_LIST_TIMEOUT)
            .await
            .with_context(|| format!("reading the cluster from {source}"))
    })?;
    runtime.shutdown_background();
    view::show_wall_clock(unix_now - now as i64);
    let live = crate::live_view::LiveState { state, now };
    Ok((live, started.elapsed().as_secs_f64()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    Pod,
    Gang,
    Queue,
    Node,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "pod",
            Kind::Gang => "gang",
            Kind::Queue => "queue",
            Kind::Node => "node",
        }
    }
}

/// Flags of `kestrel sim` that do not apply here are hidden (and refused if given).
#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the answer as JSON (stable field names)")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct ExplainArgs {
    /// What to explain: pod, gang, queue (a ClusterQueue) or node.
    kind: Kind,
    /// Its name: `namespace/name` (or `name` when only one namespace has it) for pods and
    /// gangs; the ClusterQueue's or node's name.
    name: String,
    #[command(flatten)]
    state: StateArgs,
}

#[derive(Args)]
#[command(
    mut_arg("json", |a| a.help("Print the list as JSON (stable field names)")),
    mut_arg("report", |a| a.hide(true)),
    mut_arg("until", |a| a.hide(true)),
    mut_arg("sample_every", |a| a.hide(true))
)]
pub struct QueueArgs {
    /// Only pods of this ClusterQueue.
    #[arg(long = "queue", value_name = "CLUSTER_QUEUE")]
    cluster_queue: Option<String>,
    /// Only pods of this namespace.
    #[arg(long)]
    namespace: Option<String>,
    #[command(flatten)]
    state: StateArgs,
}

/// Flags of `kestrel sim` that mean nothing when looking at one moment.
pub(crate) fn refuse_run_only_flags(args: &SimArgs, command: &str) -> Result<()> {
    for (given, flag) in [
        (args.until.is_some(), "--until"),
        (args.report.is_some(), "--report"),
        (args.sample_every.is_some(), "--sample-every"),
    ] {
        if given {
            bail!(
                "{flag} applies to `kestrel sim`; `{command}` looks at one moment: use --at TIME"
            );
        }
    }
    Ok(())
}

/// The answer of `kestrel explain`: the view of one object at the simulation's moment.
// One value per command: boxing the large variants would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Explained {
    Pod(view::PodView),
    Gang(view::GangView),
    Queue(view::QueueView),
    Node(view::NodeView),
}

impl Explained {
    /// Looks `name` up and reads its view; `estimates` are the runtime estimates that
    /// "what would help" and node pods' ends use.
    pub(crate) fn of(
        sim: &dyn ExplainState,
        kind: Kind,
        name: &str,
        estimates: &Estimates,
    ) -> Result<Self> {
        Ok(match kind {
            Kind::Pod => Explained::Pod(view::pod_view(sim, view::find_pod(sim, name)?, estimates)),
            Kind::Gang => {
                let (ns, gang) = view::find_gang(sim, name)?;
                Explained::Gang(view::gang_view(sim, &ns, &gang))
            }
            Kind::Queue => Explained::Queue(view::queue_view(sim, view::find_queue(sim, name)?)),
            Kind::Node => {
                Explained::Node(view::node_view(sim, view::find_node(sim, name)?, estimates))
            }
        })
    }

    /// The pending pods whose start is predicted.
    fn pending(&self) -> Vec<PodId> {
        match self {
            Explained::Pod(v) if v.phase == "Pending" => vec![v.id],
            Explained::Gang(v) => v.pending_ids.clone(),
            Explained::Queue(v) => v.pending_list.iter().map(|e| e.id).collect(),
            Explained::Pod(_) | Explained::Node(_) => Vec::new(),
        }
    }

    fn apply_predictions(&mut self, predictions: &Predictions) {
        match self {
            Explained::Pod(v) => v.apply_predictions(predictions),
            Explained::Gang(v) => v.apply_predictions(predictions),
            Explained::Queue(v) => view::apply_list_predictions(&mut v.pending_list, predictions),
            Explained::Node(_) => {}
        }
    }

    /// The view as JSON (its own fields, whatever the kind), pretty or compact.
    pub(crate) fn json(&self, pretty: bool) -> serde_json::Result<String> {
        fn write<T: Serialize>(v: &T, pretty: bool) -> serde_json::Result<String> {
            if pretty {
                serde_json::to_string_pretty(v)
            } else {
                serde_json::to_string(v)
            }
        }
        match self {
            Explained::Pod(v) => write(v, pretty),
            Explained::Gang(v) => write(v, pretty),
            Explained::Queue(v) => write(v, pretty),
            Explained::Node(v) => write(v, pretty),
        }
    }

    pub(crate) fn render(&self) -> String {
        match self {
            Explained::Pod(v) => view::render_pod(v),
            Explained::Gang(v) => view::render_gang(v),
            Explained::Queue(v) => view::render_queue(v),
            Explained::Node(v) => view::render_node(v),
        }
    }
}

/// A simulation standing at the moment asked for (default: the last arrival), and how
/// long it took to get there.
fn state_at(inputs: &Inputs, at: Option<Millis>) -> Result<(Simulation<'_>, f64)> {
    let at = at.unwrap_or_else(|| inputs.last_arrival());
    let started = Instant::now();
    let mut sim = Simulation::new(&inputs.cluster, &inputs.workload, inputs.config.clone())?;
    if !sim.run_to(at)? && at > sim.last_event_at() {
        eprintln!(
            "note: nothing happens after {} in this run; the state at {} is the state from then on",
            clock(sim.last_event_at()),
            clock(at)
        );
    }
    Ok((sim, started.elapsed().as_secs_f64()))
}

/// Predicted starts of `targets` by `predict` (a simulated or a live state's), and the
/// seconds they took; `None` when skipped or nothing is pending.
/// What became of the predicted starts.
enum Predicted {
    /// Not asked for (`--no-predict`), or nothing pending to predict.
    Left,
    /// Worked out, in this many seconds.
    Done(Predictions, f64),
    /// The forward runs went past `--predict-budget`.
    OutOfTime,
}

impl Predicted {
    fn predictions(&self) -> Option<&Predictions> {
        match self {
            Predicted::Done(p, _) => Some(p),
            _ => None,
        }
    }

    /// The timing line's end: how long predictions took, or that they were cut off.
    fn timing(&self, runs: &str) -> String {
        match self {
            Predicted::Left => String::new(),
            Predicted::Done(_, p) => format!(
                "; predicted in {p:.3} s ({} forward runs{runs})",
                predict::PREDICTION_RUNS
            ),
            Predicted::OutOfTime => "; start times not predicted: over --predict-budget".into(),
        }
    }
}

fn timed_predictions(
    targets: &[PodId],
    state: &StateArgs,
    predict: impl FnOnce(&[PodId], Option<Deadline>) -> Result<Predictions, SimError>,
) -> Result<Predicted> {
    if state.no_predict || targets.is_empty() {
        return Ok(Predicted::Left);
    }
    let deadline = (state.predict_budget > 0)
        .then(|| Deadline::after(std::time::Duration::from_millis(state.predict_budget)));
    let started = Instant::now();
    match predict(targets, deadline) {
        Ok(p) => Ok(Predicted::Done(p, started.elapsed().as_secs_f64())),
        Err(e @ SimError::PredictionOutOfTime { .. }) => {
            eprintln!("kestrel: {e}");
            Ok(Predicted::OutOfTime)
        }
        Err(e) => Err(e.into()),
    }
}

/// The last line of the human output: where the time went.
fn timing(simulated: f64, explained: f64, predicted: &Predicted) -> String {
    format!(
        "simulated to the moment in {simulated:.3} s; explained in {:.2} ms{}",
        explained * 1000.0,
        predicted.timing(": runtimes likely, shortest, longest")
    )
}

/// The last line of the human output on a live cluster.
fn live_timing(listed: f64, explained: f64, predicted: &Predicted) -> String {
    format!(
        "listed and scheduled (dry) in {listed:.2} s; explained in {:.2} ms{}",
        explained * 1000.0,
        predicted.timing(" from the cluster's state with declared runtime estimates")
    )
}

pub fn explain(args: ExplainArgs) -> Result<()> {
    refuse_run_only_flags(&args.state.sim, "kestrel explain")?;
    args.state.check_live("kestrel explain")?;
    if args.state.live {
        let (live, listed) = live_state(&args.state)?;
        let started = Instant::now();
        let mut answer = Explained::of(&live, args.kind, &args.name, &Estimates::declared())?;
        let explained = started.elapsed().as_secs_f64();
        let predicted =
            timed_predictions(&answer.pending(), &args.state, |t, d| live.predict(t, d))?;
        if let Some(p) = predicted.predictions() {
            answer.apply_predictions(p);
        }
        let timing = live_timing(listed, explained, &predicted);
        return print_answer(&answer, args.state.sim.json, timing);
    }
    let inputs = load_inputs(&args.state.sim)?;
    let (sim, simulated) = state_at(&inputs, args.state.at)?;
    let estimates = predict::known(&inputs.workload, inputs.config.seed);
    let started = Instant::now();
    let mut answer = Explained::of(&sim, args.kind, &args.name, &estimates)?;
    let explained = started.elapsed().as_secs_f64();
    let targets = answer.pending();
    let predicted = timed_predictions(&targets, &args.state, |t, d| {
        predict::predict(sim, t, &estimates, d)
    })?;
    if let Some(p) = predicted.predictions() {
        answer.apply_predictions(p);
    }
    let timing = timing(simulated, explained, &predicted);
    print_answer(&answer, args.state.sim.json, timing)
}

fn print_answer(answer: &Explained, json: bool, timing: String) -> Result<()> {
    if json {
        println!("{}", answer.json(true)?);
    } else {
        print!("{}", answer.render());
        println!("{timing}");
    }
    Ok(())
}

pub fn queue(args: QueueArgs) -> Result<()> {
    refuse_run_only_flags(&args.state.sim, "kestrel queue")?;
    args.state.check_live("kestrel queue")?;
    if args.state.live {
        let (live, listed) = live_state(&args.state)?;
        let started = Instant::now();
        let mut list = pending_list(&live, &args, |ns| {
            live.scheduler().pods().any(|(_, r)| r.spec.namespace == ns)
        })?;
        let explained = started.elapsed().as_secs_f64();
        let targets: Vec<PodId> = list.pending.iter().map(|e| e.id).collect();
        let predicted = timed_predictions(&targets, &args.state, |t, d| live.predict(t, d))?;
        if let Some(p) = predicted.predictions() {
            view::apply_list_predictions(&mut list.pending, p);
        }
        let timing = live_timing(listed, explained, &predicted);
        return print_list(&list, args.state.sim.json, timing);
    }
    let inputs = load_inputs(&args.state.sim)?;
    let (sim, simulated) = state_at(&inputs, args.state.at)?;
    let started = Instant::now();
    let mut list = pending_list(&sim, &args, |ns| {
        sim.scheduler().pods().any(|(_, r)| r.spec.namespace == ns)
            || inputs.workload.jobs.iter().any(|j| j.namespace == ns)
    })?;
    let explained = started.elapsed().as_secs_f64();
    let targets: Vec<PodId> = list.pending.iter().map(|e| e.id).collect();
    let estimates = predict::known(&inputs.workload, inputs.config.seed);
    let predicted = timed_predictions(&targets, &args.state, |t, d| {
        predict::predict(sim, t, &estimates, d)
    })?;
    if let Some(p) = predicted.predictions() {
        view::apply_list_predictions(&mut list.pending, p);
    }
    let timing = timing(simulated, explained, &predicted);
    print_list(&list, args.state.sim.json, timing)
}

/// The pending list `args` asks for; `known_namespace` says whether the input has the
/// namespace at all.
fn pending_list(
    state: &dyn ExplainState,
    args: &QueueArgs,
    known_namespace: impl Fn(&str) -> bool,
) -> Result<view::QueueListView> {
    let cq = match &args.cluster_queue {
        Some(name) => Some(view::find_queue(state, name)?),
        None => None,
    };
    if let Some(ns) = &args.namespace {
        if !known_namespace(ns) {
            bail!("namespace {ns:?} has no pods in this input");
        }
    }
    Ok(view::queue_list(state, cq, args.namespace.as_deref()))
}

fn print_list(list: &view::QueueListView, json: bool, timing: String) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(list)?);
    } else {
        print!("{}", view::render_queue_list(list));
        println!("{timing}");
    }
    Ok(())
}
