//! `kestrel bench placement --dra`: placement throughput with GPUs published and requested
//! through DRA (DeviceClasses, CEL selectors).

use super::placement::{bench_node, measure_placement, Throughput};
use super::PlacementArgs;
use anyhow::{bail, Result};
use kestrel_core::{Demand, GpuRequest, NodeSpec, PodSpec, Resources};
use serde_json::json;
use std::time::Instant;

/// The DeviceClass of NVIDIA's driver, with its CEL selector as the driver's chart
/// installs it.
pub(crate) const DRA_CLASS: &str =
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'";

/// The template's request selector: GPUs with at least 40 GiB.
pub(crate) const DRA_REQUEST: &str =
    "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0";

/// [`bench_node`] with its GPUs published through DRA as NVIDIA's driver publishes them.
pub(super) fn dra_node(i: u32) -> NodeSpec {
    let mut node = bench_node(i);
    for gpu in &mut node.gpus {
        gpu.dra = Some(std::sync::Arc::new(
            kestrel_objects::dra::nvidia_gpu_device(&node.name, gpu),
        ));
    }
    node
}

/// `count` pods each with one claim from the template `one-gpu` (one GPU of class
/// `gpu.nvidia.com`), read as the simulator and the live scheduler read them; with
/// `selectors`, the class and the request carry [`DRA_CLASS`] and [`DRA_REQUEST`]. Each
/// call compiles its own class, so no verdict of an earlier call is reused.
pub(super) fn dra_pods(count: u32, selectors: bool) -> Result<Vec<PodSpec>> {
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaimSpec};
    let mut classes = kestrel_objects::dra::DeviceClasses::default();
    let path = std::path::Path::new("bench");
    let ctx = kestrel_objects::fields::Ctx {
        path,
        object: "bench".to_string(),
    };
    let cel = |e: &str| json!([{"cel": {"expression": e}}]);
    let class: DeviceClass = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {"selectors": if selectors { cel(DRA_CLASS) } else { json!([]) }},
    }))?;
    classes.insert(&ctx, &class)?;
    let mut exactly = json!({"deviceClassName": "gpu.nvidia.com"});
    if selectors {
        exactly["selectors"] = cel(DRA_REQUEST);
    }
    let template: ResourceClaimSpec = serde_json::from_value(json!({
        "devices": {"requests": [{"name": "gpu", "exactly": exactly}]},
    }))?;
    (0..count)
        .map(|i| {
            let name = format!("pod-{i}");
            let mut claim = kestrel_objects::dra::read_claim_spec(
                &ctx,
                "spec.spec",
                format!("bench/{name}-gpu"),
                Some(&template),
                &classes,
            )?;
            claim.per_pod = Some("gpu".to_string());
            let mut pod = PodSpec::new(
                "bench",
                name,
                Demand {
                    resources: Resources::new(4_000, 8 << 30),
                    gpu: GpuRequest::None,
                },
            );
            kestrel_objects::dra::set_pod_claims(&ctx, "spec", &mut pod, vec![claim])?;
            Ok(pod)
        })
        .collect()
}

/// The CEL on its own: every device of `nodes` judged by a fresh request filter (the
/// class's selector and the request's), as a placement judges it the first time it sees
/// the device: (devices judged, seconds through the filter, seconds evaluating both
/// expressions on every device). The filter evaluates them once per kind of device.
pub(super) fn cel_cost(nodes: &[NodeSpec]) -> Result<(usize, f64, f64)> {
    use kestrel_objects::dra_cel::{CelSelector, DeviceValue, DeviceView};
    let pods = dra_pods(1, true)?;
    let claims = pods[0].constraints.devices.as_ref().expect("a claim");
    let filter = &claims.claims[0].requests[0].alternatives[0].filter;
    let devices: Vec<_> = nodes
        .iter()
        .flat_map(|n| n.gpus.iter().filter_map(|g| g.dra.clone()))
        .collect();
    let t = Instant::now();
    let mut accepted = 0;
    for device in &devices {
        if filter.0.accepts(device) == Ok(true) {
            accepted += 1;
        }
    }
    let seconds = t.elapsed().as_secs_f64();
    if accepted != devices.len() {
        bail!(
            "the selectors accepted {accepted} of {} GPUs",
            devices.len()
        );
    }
    let selectors = [
        CelSelector::compile(DRA_CLASS).map_err(anyhow::Error::msg)?,
        CelSelector::compile(DRA_REQUEST).map_err(anyhow::Error::msg)?,
    ];
    let t = Instant::now();
    for device in &devices {
        let value = DeviceValue::new(&DeviceView {
            driver: &device.driver,
            attributes: &device.attributes,
            capacity: &device.capacity,
        })
        .map_err(anyhow::Error::msg)?;
        for selector in &selectors {
            if selector.matches_value(&value) != Ok(true) {
                bail!("{selector:?} did not select {}", device.name);
            }
        }
    }
    Ok((devices.len(), seconds, t.elapsed().as_secs_f64()))
}

pub(super) fn run_dra_placement(args: PlacementArgs) -> Result<()> {
    let count = args.pods.min(args.nodes * 4);
    let nodes: Vec<NodeSpec> = (0..args.nodes).map(dra_node).collect();
    let cel = measure_placement(
        &nodes,
        &|| dra_pods(count, true),
        true,
        args.policy,
        args.repeat,
    )?;
    let plain = measure_placement(
        &nodes,
        &|| dra_pods(count, false),
        true,
        args.policy,
        args.repeat,
    )?;
    let plugin_nodes: Vec<NodeSpec> = (0..args.nodes).map(bench_node).collect();
    let plugin_pods = || -> Result<Vec<PodSpec>> {
        Ok((0..count)
            .map(|i| {
                PodSpec::new(
                    "bench",
                    format!("pod-{i}"),
                    Demand {
                        resources: Resources::new(4_000, 8 << 30),
                        gpu: GpuRequest::Whole(1),
                    },
                )
            })
            .collect())
    };
    let plugin = measure_placement(&plugin_nodes, &plugin_pods, true, args.policy, args.repeat)?;
    let (devices, filter_seconds, cel_seconds) = cel_cost(&nodes)?;
    let rate = |secs: f64| count as f64 / secs;
    let figures = |t: &Throughput| {
        json!({
            "placed": t.placed,
            "index_build_seconds": t.index_build_seconds,
            "batch_cycle_pods_per_second": rate(t.batch_seconds),
            "one_pod_per_cycle_pods_per_second": rate(t.one_pod_per_cycle_seconds),
        })
    };
    if args.json {
        let out = json!({
            "nodes": args.nodes, "pods": count, "policy": args.policy.name(),
            "dra_cel": figures(&cel),
            "dra_without_selectors": figures(&plain),
            "device_plugin": figures(&plugin),
            "cel": {"devices_judged": devices, "filter_seconds": filter_seconds,
                    "every_device_evaluated_seconds": cel_seconds},
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "DRA placement: {} nodes x 8 GPUs published as gpu.nvidia.com, {} pods with one claim \
         each from a template, policy {}",
        args.nodes, count, args.policy
    );
    println!(
        "{:<22} {:>12} {:>14} {:>14}",
        "", "CEL", "no selectors", "nvidia.com/gpu"
    );
    println!(
        "  placed:              {:>10}   {:>12}   {:>12}",
        cel.placed, plain.placed, plugin.placed
    );
    println!(
        "  one batch cycle:     {:>10.0}/s {:>12.0}/s {:>12.0}/s  pods",
        rate(cel.batch_seconds),
        rate(plain.batch_seconds),
        rate(plugin.batch_seconds)
    );
    println!(
        "  one pod per cycle:   {:>10.0}/s {:>12.0}/s {:>12.0}/s  pods",
        rate(cel.one_pod_per_cycle_seconds),
        rate(plain.one_pod_per_cycle_seconds),
        rate(plugin.one_pod_per_cycle_seconds)
    );
    let per_device = |seconds: f64| seconds * 1e6 / devices.max(1) as f64;
    println!(
        "  CEL on its own: both expressions on each of {devices} devices: {:.1} ms, {:.2} us \
         per device; through a fresh filter (once per kind of device): {:.1} ms, {:.3} us per \
         device",
        cel_seconds * 1000.0,
        per_device(cel_seconds),
        filter_seconds * 1000.0,
        per_device(filter_seconds)
    );
    Ok(())
}
