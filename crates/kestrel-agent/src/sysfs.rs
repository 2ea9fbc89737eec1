//! PCIe placement and RDMA NICs from sysfs. The root is configurable (`--sysfs-root`) so
//! tests build a small tree in a temporary directory.
//!
//! - A device's NUMA node is `bus/pci/devices/<bus id>/numa_node` (`-1`, a machine without
//!   NUMA, reads as node 0).
//! - Its PCIe switch is the switch whose downstream port it hangs off: the grandparent
//!   bridge in the resolved `devices/pci<domain>:<bus>/...` path, when that is not the root
//!   port itself. Devices under the same upstream port share a switch (GPUDirect RDMA
//!   between a GPU and a NIC stays inside it).
//! - GPU NICs are the RDMA devices in `class/infiniband` (InfiniBand and RoCE), virtual
//!   functions left out; speed from `ports/1/rate`, else the Ethernet interface's
//!   `class/net/<if>/speed`.
//!
//! An entry that cannot be read is a warning, never an error: the GPUs still serve.

use crate::inventory::{Gpu, Nic};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

pub const DEFAULT_ROOT: &str = "/sys";

#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn pci_device(&self, bus_id: &str) -> PathBuf {
        self.root.join("bus/pci/devices").join(bus_id)
    }

    /// The NUMA node of a PCI device; unreadable: node 0 and a warning.
    pub fn numa_node(&self, bus_id: &str, warnings: &mut Vec<String>) -> u32 {
        let path = self.pci_device(bus_id).join("numa_node");
        match fs::read_to_string(&path) {
            Ok(text) => match text.trim().parse::<i64>() {
                Ok(n) if n >= 0 => n as u32,
                Ok(_) => 0,
                Err(_) => {
                    warnings.push(format!(
                        "{}: {:?} is not a NUMA node; taking node 0",
                        path.display(),
                        text.trim()
                    ));
                    0
                }
            },
            Err(e) => {
                warnings.push(format!("{}: {e}; taking NUMA node 0", path.display()));
                0
            }
        }
    }

    /// The bridges above a PCI device, root port first (the host bridge and the device
    /// itself left out); `None` when the device is not in sysfs.
    fn bridges(&self, bus_id: &str) -> Option<Vec<String>> {
        let resolved = fs::canonicalize(self.pci_device(bus_id)).ok()?;
        let devices = fs::canonicalize(self.root.join("devices")).ok()?;
        let rel = resolved.strip_prefix(&devices).ok()?;
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        // parts: ["pci0000:00", root port, ..., device]
        if parts.len() < 2 {
            return None;
        }
        Some(parts[1..parts.len() - 1].to_vec())
    }

    /// The key of the switch a device hangs off: the path down to the switch's upstream
    /// port.
    fn switch_key(&self, bus_id: &str) -> Option<String> {
        let bridges = self.bridges(bus_id)?;
        // root port -> upstream port -> downstream port -> device
        if bridges.len() < 3 {
            return None;
        }
        Some(bridges[..bridges.len() - 1].join("/"))
    }

    /// Numbers the PCIe switches of the GPUs and NICs (in bus order of their upstream
    /// ports) and sets `pcie_switch` on each.
    pub fn assign_switches(&self, gpus: &mut [Gpu], nics: &mut [Nic]) {
        let mut keys: BTreeMap<String, u32> = BTreeMap::new();
        let gpu_keys: Vec<Option<String>> = gpus
            .iter()
            .map(|g| self.switch_key(&g.pci_bus_id))
            .collect();
        let nic_keys: Vec<Option<String>> = nics
            .iter()
            .map(|n| self.switch_key(&n.pci_bus_id))
            .collect();
        for k in gpu_keys.iter().chain(&nic_keys).flatten() {
            keys.entry(k.clone()).or_insert(0);
        }
        for (i, v) in keys.values_mut().enumerate() {
            *v = i as u32;
        }
        for (g, k) in gpus.iter_mut().zip(gpu_keys) {
            g.pcie_switch = k.map(|k| keys[&k]);
        }
        for (n, k) in nics.iter_mut().zip(nic_keys) {
            n.pcie_switch = k.map(|k| keys[&k]);
        }
    }

    /// The RDMA NICs (see the module docs), sorted by name.
    pub fn nics(&self, warnings: &mut Vec<String>) -> Vec<Nic> {
        let class = self.root.join("class/infiniband");
        let entries = match fs::read_dir(&class) {
            Ok(entries) => entries,
            // No RDMA stack: no GPU NICs, nothing to warn about.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                warnings.push(format!("{}: {e}; no NICs read", class.display()));
                return Vec::new();
            }
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let mut nics = Vec::new();
        for name in names {
            let dir = class.join(&name);
            let device = dir.join("device");
            if device.join("physfn").exists() {
                continue; // an SR-IOV virtual function
            }
            let bus_id = match fs::canonicalize(&device) {
                Ok(p) => p
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                Err(e) => {
                    warnings.push(format!("{}: {e}; NIC {name} left out", device.display()));
                    continue;
                }
            };
            let netdev = fs::read_dir(device.join("net")).ok().and_then(|d| {
                let mut names: Vec<String> = d
                    .filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect();
                names.sort();
                names.into_iter().next()
            });
            let gbps = self.rate_gbps(&dir, netdev.as_deref());
            let Some(gbps) = gbps else {
                warnings.push(format!(
                    "{}: no readable link rate; NIC {name} left out",
                    dir.join("ports/1/rate").display()
                ));
                continue;
            };
            let numa_node = self.numa_node(&bus_id, warnings);
            nics.push(Nic {
                name,
                netdev,
                gbps,
                numa_node,
                pci_bus_id: bus_id,
                pcie_switch: None,
            });
        }
        nics
    }

    fn rate_gbps(&self, dir: &Path, netdev: Option<&str>) -> Option<u32> {
        // "400 Gb/sec (4X NDR)"
        if let Ok(text) = fs::read_to_string(dir.join("ports/1/rate")) {
            if let Some(n) = text
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<f64>().ok())
            {
                return Some(n.round() as u32);
            }
        }
        // Mb/s; -1 when the link is down.
        let speed = fs::read_to_string(self.root.join("class/net").join(netdev?).join("speed"))
            .ok()?
            .trim()
            .parse::<i64>()
            .ok()?;
        (speed > 0).then_some((speed / 1000) as u32)
    }
}

/// NVML's PCI bus id (`00000000:17:00.0`, upper case) in sysfs form (`0000:17:00.0`).
pub fn sysfs_bus_id(nvml_bus_id: &str) -> String {
    let lower = nvml_bus_id.trim().to_ascii_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: two PCIe switches under one root port, a GPU and a RoCE NIC on the
    /// first, a GPU and an InfiniBand NIC on the second, and a NIC whose rate is unreadable.
    pub(crate) fn tree(name: &str) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("kestrel-sysfs-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let dev = |path: &str, numa: &str| {
            let p = root.join("devices").join(path);
            fs::create_dir_all(&p).unwrap();
            fs::write(p.join("numa_node"), format!("{numa}\n")).unwrap();
            let bus_id = path.rsplit('/').next().unwrap();
            fs::create_dir_all(root.join("bus/pci/devices")).unwrap();
            symlink(&p, root.join("bus/pci/devices").join(bus_id)).unwrap();
            p
        };
        let sw0 = "pci0000:00/0000:00:01.0/0000:01:00.0";
        let sw1 = "pci0000:00/0000:00:01.0/0000:05:00.0";
        dev(&format!("{sw0}/0000:02:00.0/0000:03:00.0"), "0"); // GPU 0
        let nic0 = dev(&format!("{sw0}/0000:02:01.0/0000:04:00.0"), "0");
        dev(&format!("{sw1}/0000:06:00.0/0000:07:00.0"), "1"); // GPU 1
        let nic1 = dev(&format!("{sw1}/0000:06:01.0/0000:08:00.0"), "-1");
        let nic2 = dev("pci0000:80/0000:80:01.0/0000:81:00.0", "1");
        let ib = root.join("class/infiniband");
        for (name, dev) in [("mlx5_0", &nic0), ("mlx5_1", &nic1), ("mlx5_2", &nic2)] {
            fs::create_dir_all(ib.join(name)).unwrap();
            symlink(dev, ib.join(name).join("device")).unwrap();
        }
        // mlx5_0 is RoCE: no port rate file, the netdev's speed instead.
        fs::create_dir_all(nic0.join("net/ens1np0")).unwrap();
        fs::create_dir_all(root.join("class/net/ens1np0")).unwrap();
        fs::write(root.join("class/net/ens1np0/speed"), "400000\n").unwrap();
        fs::create_dir_all(ib.join("mlx5_1/ports/1")).unwrap();
        fs::write(ib.join("mlx5_1/ports/1/rate"), "200 Gb/sec (4X HDR)\n").unwrap();
        root
    }

    #[test]
    fn nics_numa_and_switches_from_a_tree() {
        let root = tree("nics");
        let sysfs = Sysfs::new(&root);
        let mut warnings = Vec::new();
        let mut nics = sysfs.nics(&mut warnings);
        let names: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["mlx5_0", "mlx5_1"]);
        assert_eq!(nics[0].gbps, 400);
        assert_eq!(nics[0].netdev.as_deref(), Some("ens1np0"));
        assert_eq!(nics[1].gbps, 200);
        assert_eq!(nics[1].numa_node, 0, "-1 reads as node 0");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("mlx5_2"), "{warnings:?}");

        let gpu = |index: u32, bus: &str| Gpu {
            index,
            uuid: format!("GPU-{index}"),
            model: "m".into(),
            memory_mib: 1,
            pci_bus_id: bus.into(),
            numa_node: sysfs.numa_node(bus, &mut Vec::new()),
            nvlink_peers: vec![],
            pcie_switch: None,
            mig_enabled: false,
            clique: None,
        };
        let mut gpus = vec![gpu(0, "0000:03:00.0"), gpu(1, "0000:07:00.0")];
        assert_eq!(gpus[1].numa_node, 1);
        sysfs.assign_switches(&mut gpus, &mut nics);
        assert_eq!(gpus[0].pcie_switch, Some(0));
        assert_eq!(nics[0].pcie_switch, Some(0));
        assert_eq!(gpus[1].pcie_switch, Some(1));
        assert_eq!(nics[1].pcie_switch, Some(1));

        // A device sysfs does not know: NUMA 0, with a warning.
        let mut w = Vec::new();
        assert_eq!(sysfs.numa_node("0000:99:00.0", &mut w), 0);
        assert_eq!(w.len(), 1);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn no_rdma_stack_means_no_nics_and_no_warning() {
        let root = std::env::temp_dir().join(format!("kestrel-sysfs-empty-{}", std::process::id()));
        fs::create_dir_all(&root).unwrap();
        let mut warnings = Vec::new();
        assert!(Sysfs::new(&root).nics(&mut warnings).is_empty());
        assert!(warnings.is_empty());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn nvml_bus_ids_in_sysfs_form() {
        assert_eq!(sysfs_bus_id("00000000:17:00.0"), "0000:17:00.0");
        assert_eq!(sysfs_bus_id("0000:AB:00.0"), "0000:ab:00.0");
    }
}
