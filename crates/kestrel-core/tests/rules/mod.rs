//! Inter-pod rules drawn for property tests: pods labelled app0..app2 with required and
//! preferred (anti-)affinity, spread over hostnames or racks, host ports, and volumes
//! (ReadWriteOncePod claims, CSI volumes against nodes' limits, claims not bound yet that
//! take local disks or are provisioned).

use kestrel_core::*;
use proptest::prelude::*;

/// Inter-pod rules on app labels a, b and c: required and preferred (anti-)affinity and
/// spread over hostnames and racks, and host ports.
#[derive(Debug, Clone)]
pub struct Rules {
    app: u8,
    /// (kind 0..6, other app, over racks, max skew)
    rule: Option<(u8, u8, bool, u32)>,
    port: Option<u16>,
    /// (0: a ReadWriteOncePod claim, 1: a CSI volume, 2: a claim not bound yet; which of
    /// three)
    volume: Option<(u8, u8)>,
}

/// The CSI driver of drawn volumes, and how many of them a node attaches.
pub const DISK_DRIVER: &str = "disk.csi.example.com";
pub const DISK_LIMIT: u32 = 2;

/// Gives a node the CSI limit drawn pods' volumes count against.
pub fn limit_volumes(node: &mut NodeSpec) {
    node.volume_limits.insert(DISK_DRIVER.into(), DISK_LIMIT);
}

pub fn rules_strategy() -> impl Strategy<Value = Rules> {
    (
        0u8..3,
        proptest::option::weighted(0.3, (0u8..6, 0u8..3, any::<bool>(), 1u32..=2)),
        proptest::option::weighted(0.1, 8080u16..8082),
        proptest::option::weighted(0.2, (0u8..3, 0u8..3)),
    )
        .prop_map(|(app, rule, port, volume)| Rules {
            app,
            rule,
            port,
            volume,
        })
}

/// Claim `scratch<id>` of the namespace, not bound yet: it may take one of the local disks
/// (one on each of nodes n0..n3, one per rack r0 and r1); claim 2's class may also
/// provision on rack r2.
fn unbound_claim(namespace: &str, id: u8) -> VolumeTopology {
    let on = |key: &str, value: String| {
        Some(vec![NodeSelectorTerm {
            match_expressions: vec![Requirement {
                key: key.into(),
                operator: SelectorOperator::In,
                values: vec![value],
            }],
            match_fields: vec![],
        }])
    };
    let mut volumes: Vec<StaticVolume> = (0..4)
        .map(|n| StaticVolume {
            name: format!("local-n{n}"),
            terms: on(HOSTNAME_LABEL, format!("n{n}")),
        })
        .collect();
    volumes.extend((0..2).map(|r| StaticVolume {
        name: format!("rack-r{r}"),
        terms: on(RACK_LABEL, format!("r{r}")),
    }));
    VolumeTopology {
        claim: format!("{namespace}/scratch{id}"),
        unbound: true,
        terms: on(RACK_LABEL, "r2".into()),
        provisioner: id == 2,
        volumes,
    }
}

pub fn apply_rules(pod: &mut PodSpec, r: &Rules) {
    let app = |a: u8| format!("app{a}");
    pod.labels.insert("app".into(), app(r.app));
    if let Some(port) = r.port {
        pod.constraints.host_ports = vec![HostPort {
            protocol: "TCP".into(),
            ip: String::new(),
            port,
        }];
    }
    if let Some((kind, id)) = r.volume {
        let mut volumes = VolumeRules::default();
        match kind {
            0 => volumes
                .exclusive
                .push(format!("{}/solo{id}", pod.namespace)),
            1 => volumes.attach.push(AttachedVolume {
                driver: DISK_DRIVER.into(),
                volume: format!("disk{id}"),
            }),
            _ => volumes.topology.push(unbound_claim(&pod.namespace, id)),
        }
        pod.constraints.volumes = Some(Box::new(volumes));
    }
    let Some((kind, other, racks, max_skew)) = r.rule else {
        return;
    };
    let key = if racks { RACK_LABEL } else { HOSTNAME_LABEL }.to_string();
    let selector = vec![Requirement {
        key: "app".into(),
        operator: SelectorOperator::In,
        values: vec![app(other)],
    }];
    let term = PodAffinityTerm {
        selector: Some(selector.clone()),
        namespaces: vec![pod.namespace.clone()],
        namespace_selector: if kind == 5 { Some(vec![]) } else { None },
        topology_key: key.clone(),
    };
    let mut rules = InterPodRules::default();
    match kind {
        0 | 5 => rules.anti_affinity.push(term),
        1 => rules.affinity.push(term),
        2 => rules.preferred_anti_affinity.push((50, term)),
        3 | 4 => rules.spread.push(SpreadConstraint {
            max_skew,
            topology_key: key,
            hard: kind == 3,
            selector: Some(selector),
            min_domains: None,
            honor_node_affinity: true,
            honor_taints: false,
        }),
        _ => unreachable!(),
    }
    pod.constraints.inter_pod = Some(Box::new(rules));
}
