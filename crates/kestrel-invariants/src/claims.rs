//! DRA claims as the API holds them, and the rules on who uses them.

use super::*;
use std::collections::BTreeMap;

/// An allocated ResourceClaim as the API holds it (DRA).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClaimView {
    /// `namespace/name`.
    pub key: String,
    /// The node its allocation names; `None`: not allocated.
    pub node: Option<String>,
    /// `pool/device` per result.
    pub devices: Vec<String>,
    /// Names of the pods in `status.reservedFor`.
    pub reserved_for: Vec<String>,
}

/// A bound pod and the claims it uses (`namespace/name`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ClaimUser {
    /// `namespace/name`.
    pub pod: String,
    pub node: String,
    pub claims: Vec<String>,
}

/// DRA's rules: no device in two allocated claims; every bound pod's claims allocated on
/// its node and reserved for it.
pub fn check_claims(claims: &[ClaimView], users: &[ClaimUser]) -> Result<(), Vec<Violation>> {
    let mut out = Vec::new();
    let mut holders: BTreeMap<(&str, &str), Vec<String>> = BTreeMap::new();
    for c in claims {
        if let Some(node) = &c.node {
            for d in &c.devices {
                holders.entry((node, d)).or_default().push(c.key.clone());
            }
        }
    }
    for ((node, device), claims) in holders {
        if claims.len() > 1 {
            out.push(Violation::DeviceInTwoClaims {
                node: node.to_string(),
                device: device.to_string(),
                claims,
            });
        }
    }
    let by_key: BTreeMap<&str, &ClaimView> = claims.iter().map(|c| (c.key.as_str(), c)).collect();
    for u in users {
        let name = u.pod.split_once('/').map_or(u.pod.as_str(), |(_, n)| n);
        for key in &u.claims {
            let why = match by_key.get(key.as_str()) {
                None => Some("does not exist".to_string()),
                Some(c) => match &c.node {
                    None => Some("is not allocated".to_string()),
                    Some(n) if *n != u.node => {
                        Some(format!("is allocated on node {n}, not {}", u.node))
                    }
                    Some(_) if !c.reserved_for.iter().any(|r| r == name) => {
                        Some("is not reserved for it".to_string())
                    }
                    Some(_) => None,
                },
            };
            if let Some(why) = why {
                out.push(Violation::ClaimNotHeld {
                    pod: u.pod.clone(),
                    claim: key.clone(),
                    why,
                });
            }
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(out)
    }
}
