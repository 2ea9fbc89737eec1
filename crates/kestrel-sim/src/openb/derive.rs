//! Mixes derived from a pod list the way the FGD paper's published mixes vary the default
//! one, so the packing policy can be tried on mixes nobody tuned it on.
//!
//! The artifact (alibaba/clusterdata `cluster-trace-gpu-v2023`) samples its mixes from the
//! default list, each emphasising one kind of pod; its plots state what each level means:
//! - `cpuNNN`: CPU-only pods are NNN/10 percent of the pods by count (`cpu100`: 10%,
//!   `cpu250`: 25%); the GPU pods are those of the default list.
//! - `gpushareNN`: pods asking for a fraction of one GPU make NN% of the GPU requests.
//! - `multigpuNN`: pods asking for several GPUs make NN% of the GPU requests.
//! - `gpuspecNN`: NN% of the GPU pods are limited to some GPU models.
//!
//! `KIND=LEVEL` names the same: `cpu=2.5` is `cpu250`, `gpushare=0.8` is `gpushare80`.
//! Derivation is seeded; the same list, derivations and seed give the same mix.

use super::{OpenbNode, OpenbPod};
use kestrel_core::Rng;
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// What a derivation varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MixKind {
    Cpu,
    GpuShare,
    GpuSpec,
    MultiGpu,
}

impl MixKind {
    const ALL: [MixKind; 4] = [
        MixKind::Cpu,
        MixKind::GpuShare,
        MixKind::GpuSpec,
        MixKind::MultiGpu,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MixKind::Cpu => "cpu",
            MixKind::GpuShare => "gpushare",
            MixKind::GpuSpec => "gpuspec",
            MixKind::MultiGpu => "multigpu",
        }
    }

    /// The largest level accepted: `cpu` counts in tenths (10 would leave no GPU pod).
    fn max_level(self) -> f64 {
        match self {
            MixKind::Cpu => 10.0,
            _ => 1.0,
        }
    }

    /// What a level means, for messages.
    fn meaning(self) -> &'static str {
        match self {
            MixKind::Cpu => {
                "CPU-only pods are LEVEL x 10% of the pods (cpu=2.5: 25%), 0 <= LEVEL < 10"
            }
            MixKind::GpuShare => {
                "pods asking a fraction of a GPU make this share of the GPU requests, 0..1"
            }
            MixKind::GpuSpec => "this share of the GPU pods is limited to some GPU models, 0..1",
            MixKind::MultiGpu => {
                "pods asking several GPUs make this share of the GPU requests, 0..1"
            }
        }
    }
}

/// One `KIND=LEVEL`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Derivation {
    pub kind: MixKind,
    pub level: f64,
}

impl Derivation {
    /// The published mix's name for this derivation (`cpu250`, `gpushare80`).
    pub fn mix_name(&self) -> String {
        match self.kind {
            MixKind::Cpu => format!("cpu{:03}", (self.level * 100.0).round() as u32),
            kind => format!("{}{:02}", kind.name(), (self.level * 100.0).round() as u32),
        }
    }
}

impl fmt::Display for Derivation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.kind.name(), self.level)
    }
}

impl FromStr for Derivation {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let kinds: Vec<&str> = MixKind::ALL.iter().map(|k| k.name()).collect();
        let Some((kind, level)) = s.split_once('=') else {
            return Err(format!(
                "{s:?} is not KIND=LEVEL; write e.g. cpu=2.5 or gpushare=0.8 (kinds: {})",
                kinds.join(", ")
            ));
        };
        let kind = MixKind::ALL
            .into_iter()
            .find(|k| k.name() == kind.trim())
            .ok_or_else(|| format!("unknown mix kind {kind:?}; use one of {}", kinds.join(", ")))?;
        let level: f64 = level
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: {level:?} is not a number; {}", kind.meaning()))?;
        let in_range = match kind {
            MixKind::Cpu => (0.0..kind.max_level()).contains(&level),
            _ => (0.0..=kind.max_level()).contains(&level),
        };
        if !in_range {
            return Err(format!(
                "{s:?}: {level} is out of range; {}",
                kind.meaning()
            ));
        }
        Ok(Derivation { kind, level })
    }
}

/// A derived mix, or why the list cannot give it.
pub fn derive_mix(
    pods: &[OpenbPod],
    nodes: &[OpenbNode],
    derivations: &[Derivation],
    seed: u64,
) -> Result<Vec<OpenbPod>, String> {
    for (i, d) in derivations.iter().enumerate() {
        if derivations[..i].iter().any(|e| e.kind == d.kind) {
            return Err(format!(
                "{} is given twice; derive each kind once",
                d.kind.name()
            ));
        }
    }
    let mut rng = Rng::new(seed);
    let mut mix = pods.to_vec();
    for d in derivations {
        mix = match d.kind {
            MixKind::Cpu => cpu_share(&mix, d.level / 10.0, &mut rng)?,
            MixKind::GpuShare => {
                gpu_request_share(&mix, d.level, is_share, "a fraction of a GPU", &mut rng)?
            }
            MixKind::MultiGpu => {
                gpu_request_share(&mix, d.level, is_multi, "several GPUs", &mut rng)?
            }
            MixKind::GpuSpec => model_limited_share(&mix, nodes, d.level, &mut rng)?,
        };
    }
    rng.shuffle(&mut mix);
    for (i, pod) in mix.iter_mut().enumerate() {
        pod.name = format!("derived-{i:05}");
    }
    Ok(mix)
}

fn is_share(pod: &OpenbPod) -> bool {
    pod.num_gpu == 1 && pod.gpu_milli < 1000
}

fn is_multi(pod: &OpenbPod) -> bool {
    pod.num_gpu > 1
}

/// `count` pods drawn from `from` without replacement, in rounds (each a fresh shuffle)
/// when more are wanted than there are: the draw keeps the set's own mix as closely as
/// its size allows.
fn draw(from: &[&OpenbPod], count: usize, rng: &mut Rng) -> Vec<OpenbPod> {
    let mut out = Vec::with_capacity(count);
    let mut round: Vec<&OpenbPod> = Vec::new();
    while out.len() < count {
        if round.is_empty() {
            round = from.to_vec();
            rng.shuffle(&mut round);
        }
        out.push(round.pop().expect("refilled").clone());
    }
    out
}

/// GPU pods kept; CPU-only pods redrawn so they are `fraction` of all pods.
fn cpu_share(pods: &[OpenbPod], fraction: f64, rng: &mut Rng) -> Result<Vec<OpenbPod>, String> {
    let (cpu, gpu): (Vec<&OpenbPod>, Vec<&OpenbPod>) = pods.iter().partition(|p| p.num_gpu == 0);
    if gpu.is_empty() {
        return Err("the pod list has no GPU pods to keep".to_string());
    }
    let wanted = (fraction / (1.0 - fraction) * gpu.len() as f64).round() as usize;
    if wanted > 0 && cpu.is_empty() {
        return Err("the pod list has no CPU-only pods (num_gpu 0) to draw from".to_string());
    }
    let mut out: Vec<OpenbPod> = gpu.into_iter().cloned().collect();
    out.extend(draw(&cpu, wanted, rng));
    Ok(out)
}

/// CPU-only pods kept; the GPU pods redrawn, as many as before, so pods of one class
/// (`in_class`) make `fraction` of the GPU requests; the other GPU pods keep their mix.
fn gpu_request_share(
    pods: &[OpenbPod],
    fraction: f64,
    in_class: fn(&OpenbPod) -> bool,
    class: &str,
    rng: &mut Rng,
) -> Result<Vec<OpenbPod>, String> {
    let (cpu, gpu): (Vec<&OpenbPod>, Vec<&OpenbPod>) = pods.iter().partition(|p| p.num_gpu == 0);
    let (inside, outside): (Vec<&OpenbPod>, Vec<&OpenbPod>) = gpu.iter().partition(|p| in_class(p));
    if fraction > 0.0 && inside.is_empty() {
        return Err(format!(
            "the pod list has no pods asking {class} to draw from"
        ));
    }
    if fraction < 1.0 && outside.is_empty() {
        return Err(format!(
            "the pod list has only pods asking {class}; nothing else to draw"
        ));
    }
    let mean = |set: &[&OpenbPod]| {
        set.iter()
            .map(|p| p.gpu_request_milli() as f64)
            .sum::<f64>()
            / set.len().max(1) as f64
    };
    let (g_in, g_out) = (mean(&inside), mean(&outside));
    // n_in * g_in / (n_in * g_in + n_out * g_out) = fraction, n_in + n_out = n.
    let n = gpu.len() as f64;
    let n_in = if fraction >= 1.0 {
        n
    } else {
        fraction * g_out * n / (fraction * g_out + (1.0 - fraction) * g_in)
    };
    let n_in = n_in.round() as usize;
    let mut out: Vec<OpenbPod> = cpu.into_iter().cloned().collect();
    out.extend(draw(&inside, n_in, rng));
    out.extend(draw(&outside, gpu.len() - n_in, rng));
    Ok(out)
}

/// GPU pods limited to some models (or freed of a limit) until `fraction` of them are.
/// A new limit is one drawn from those in the list; a list without any limits each pod
/// to one model, drawn by GPU count among the models whose nodes could hold it.
fn model_limited_share(
    pods: &[OpenbPod],
    nodes: &[OpenbNode],
    fraction: f64,
    rng: &mut Rng,
) -> Result<Vec<OpenbPod>, String> {
    let mut out = pods.to_vec();
    let gpu: Vec<usize> = (0..out.len()).filter(|&i| out[i].num_gpu > 0).collect();
    let wanted = (fraction * gpu.len() as f64).round() as usize;
    let (mut limited, mut free): (Vec<usize>, Vec<usize>) =
        gpu.iter().partition(|&&i| !out[i].gpu_spec.is_empty());
    let specs: Vec<Vec<String>> = limited.iter().map(|&i| out[i].gpu_spec.clone()).collect();
    rng.shuffle(&mut limited);
    rng.shuffle(&mut free);
    while limited.len() > wanted {
        let i = limited.pop().expect("more than wanted");
        out[i].gpu_spec.clear();
    }
    for &i in free.iter().take(wanted.saturating_sub(limited.len())) {
        let spec = if specs.is_empty() {
            vec![model_for(&out[i], nodes, rng).ok_or_else(|| {
                format!(
                    "no GPU node can hold pod {} ({} GPUs, {} cpu_milli); \
                     the node list has no model to limit it to",
                    out[i].name, out[i].num_gpu, out[i].cpu_milli
                )
            })?]
        } else {
            specs[rng.below(specs.len() as u64) as usize].clone()
        };
        out[i].gpu_spec = spec;
    }
    Ok(out)
}

/// A model for a pod, drawn in proportion to the GPUs of the nodes that could hold it.
fn model_for(pod: &OpenbPod, nodes: &[OpenbNode], rng: &mut Rng) -> Option<String> {
    let holders: Vec<&OpenbNode> = nodes
        .iter()
        .filter(|n| {
            !n.model.is_empty()
                && n.gpus >= pod.num_gpu
                && n.cpu_milli >= pod.cpu_milli
                && n.memory_mib >= pod.memory_mib
        })
        .collect();
    let total: u64 = holders.iter().map(|n| n.gpus as u64).sum();
    if total == 0 {
        return None;
    }
    let mut pick = rng.below(total);
    for node in holders {
        if pick < node.gpus as u64 {
            return Some(node.model.clone());
        }
        pick -= node.gpus as u64;
    }
    unreachable!("pick < total")
}

/// The shares a derivation sets, measured on a mix (for tests and reports).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MixShares {
    /// CPU-only pods / pods.
    pub cpu_pods: f64,
    /// GPU requests of fractional pods / GPU requests.
    pub share_requests: f64,
    /// GPU requests of multi-GPU pods / GPU requests.
    pub multi_requests: f64,
    /// Model-limited GPU pods / GPU pods.
    pub model_limited: f64,
}

pub fn mix_shares(pods: &[OpenbPod]) -> MixShares {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let gpu: Vec<&OpenbPod> = pods.iter().filter(|p| p.num_gpu > 0).collect();
    let request = |f: fn(&OpenbPod) -> bool| {
        gpu.iter()
            .filter(|p| f(p))
            .map(|p| p.gpu_request_milli() as f64)
            .sum::<f64>()
    };
    let all = request(|_| true);
    MixShares {
        cpu_pods: ratio((pods.len() - gpu.len()) as f64, pods.len() as f64),
        share_requests: ratio(request(is_share), all),
        multi_requests: ratio(request(is_multi), all),
        model_limited: ratio(
            gpu.iter().filter(|p| !p.gpu_spec.is_empty()).count() as f64,
            gpu.len() as f64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(cpu: i64, num_gpu: u32, gpu_milli: u32) -> OpenbPod {
        OpenbPod {
            name: format!("p{cpu}-{num_gpu}-{gpu_milli}"),
            cpu_milli: cpu,
            memory_mib: 1024,
            num_gpu,
            gpu_milli,
            gpu_spec: vec![],
            creation_time: None,
            deletion_time: None,
            scheduled_time: None,
        }
    }

    /// 100 pods: 20 CPU-only, 40 shares of 500, 30 whole GPUs, 10 of 4 GPUs.
    fn list() -> Vec<OpenbPod> {
        let mut pods = Vec::new();
        pods.extend((0..20).map(|_| pod(2000, 0, 0)));
        pods.extend((0..40).map(|_| pod(4000, 1, 500)));
        pods.extend((0..30).map(|_| pod(8000, 1, 1000)));
        pods.extend((0..10).map(|_| pod(32000, 4, 1000)));
        pods
    }

    fn nodes() -> Vec<OpenbNode> {
        let node = |name: &str, gpus, model: &str| OpenbNode {
            name: name.to_string(),
            cpu_milli: 64000,
            memory_mib: 262144,
            gpus,
            model: model.to_string(),
        };
        vec![node("a", 8, "G2"), node("b", 2, "T4"), node("c", 0, "")]
    }

    fn derived(spec: &[&str], seed: u64) -> Vec<OpenbPod> {
        let d: Vec<Derivation> = spec.iter().map(|s| s.parse().unwrap()).collect();
        derive_mix(&list(), &nodes(), &d, seed).unwrap()
    }

    #[test]
    fn each_kind_reaches_its_level_and_keeps_the_rest() {
        let before = mix_shares(&list());
        let cpu = mix_shares(&derived(&["cpu=2.5"], 1));
        assert!((cpu.cpu_pods - 0.25).abs() < 0.01, "{cpu:?}");
        // The GPU pods are the list's own.
        assert_eq!(cpu.share_requests, before.share_requests);
        let none = derived(&["cpu=0"], 1);
        assert_eq!(none.len(), 80);
        assert!(none.iter().all(|p| p.num_gpu > 0));

        for level in [0.0, 0.2, 0.6, 1.0] {
            let mix = derived(&[&format!("gpushare={level}")], 3);
            let shares = mix_shares(&mix);
            assert!(
                (shares.share_requests - level).abs() < 0.03,
                "{level}: {shares:?}"
            );
            assert_eq!(mix.len(), 100);
            assert!((shares.cpu_pods - 0.2).abs() < 1e-9);
        }
        let multi = mix_shares(&derived(&["multigpu=0.5"], 4));
        assert!((multi.multi_requests - 0.5).abs() < 0.05, "{multi:?}");

        let spec = derived(&["gpuspec=0.3"], 5);
        let shares = mix_shares(&spec);
        assert!((shares.model_limited - 0.3).abs() < 0.02, "{shares:?}");
        // A list without limits pins pods to a model whose nodes could hold them: 4-GPU
        // pods only to the 8-GPU model.
        for p in spec.iter().filter(|p| !p.gpu_spec.is_empty()) {
            assert_eq!(p.gpu_spec.len(), 1);
            assert!(p.gpu_spec[0] == "G2" || (p.gpu_spec[0] == "T4" && p.num_gpu <= 2));
        }
        // Lowering the limited share frees some; raising draws from the list's limits.
        let lower = derive_mix(&spec, &nodes(), &["gpuspec=0.1".parse().unwrap()], 6).unwrap();
        assert!((mix_shares(&lower).model_limited - 0.1).abs() < 0.02);
    }

    #[test]
    fn derivation_is_seeded_and_combines() {
        assert_eq!(derived(&["gpushare=0.8"], 9), derived(&["gpushare=0.8"], 9));
        assert_ne!(
            derived(&["gpushare=0.8"], 9),
            derived(&["gpushare=0.8"], 10)
        );
        let both = mix_shares(&derived(&["cpu=3", "gpuspec=0.2"], 2));
        assert!((both.cpu_pods - 0.3).abs() < 0.01 && (both.model_limited - 0.2).abs() < 0.02);
        assert_eq!(
            "cpu=2.5".parse::<Derivation>().unwrap().mix_name(),
            "cpu250"
        );
        assert_eq!(
            "gpushare=0.4".parse::<Derivation>().unwrap().mix_name(),
            "gpushare40"
        );
    }

    #[test]
    fn a_derived_mix_saves_and_loads_back() {
        let mix = derived(&["gpuspec=0.5", "cpu=1"], 3);
        let text = crate::openb::pods_csv(&mix);
        let back = crate::openb::load_pods(std::path::Path::new("mix.csv"), &text).unwrap();
        assert_eq!(back, mix);
    }

    #[test]
    fn bad_derivations_say_what_to_write() {
        let err = |s: &str| s.parse::<Derivation>().unwrap_err();
        assert!(err("cpu").contains("KIND=LEVEL"), "{}", err("cpu"));
        assert!(err("gpus=1").contains("use one of cpu, gpushare, gpuspec, multigpu"));
        assert!(err("gpushare=lots").contains("not a number"));
        assert!(err("gpushare=1.5").contains("out of range"));
        assert!(err("cpu=10").contains("0 <= LEVEL < 10"));
        assert!(err("multigpu=-0.1").contains("out of range"));
        let twice: Vec<Derivation> = vec!["cpu=1".parse().unwrap(), "cpu=2".parse().unwrap()];
        assert!(derive_mix(&list(), &nodes(), &twice, 1)
            .unwrap_err()
            .contains("given twice"));
        // What the list lacks is named.
        let gpu_only: Vec<OpenbPod> = list().into_iter().filter(|p| p.num_gpu > 0).collect();
        let e = derive_mix(&gpu_only, &nodes(), &["cpu=1".parse().unwrap()], 1).unwrap_err();
        assert!(e.contains("no CPU-only pods"), "{e}");
        let whole: Vec<OpenbPod> = list().into_iter().filter(|p| !is_share(p)).collect();
        let e = derive_mix(&whole, &nodes(), &["gpushare=0.5".parse().unwrap()], 1).unwrap_err();
        assert!(e.contains("a fraction of a GPU"), "{e}");
        let mut huge = list();
        huge.push(pod(500_000, 1, 1000));
        let all: Vec<Derivation> = vec!["gpuspec=1".parse().unwrap()];
        let e = derive_mix(&huge, &nodes(), &all, 1).unwrap_err();
        assert!(e.contains("no GPU node can hold"), "{e}");
    }
}
