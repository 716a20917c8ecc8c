//! The machine's CPU topology (`pkg/kubelet/cm/cpumanager/topology`, from cadvisor's `sysinfo.GetNodesInfo`):
//! each online CPU's core, socket and NUMA node, read from sysfs: `devices/system/node/node<N>/cpu<M>` for the
//! NUMA nodes (without them, one node per socket), `devices/system/cpu/cpu<M>/topology/{core_id,
//! physical_package_id}` and `devices/system/cpu/online`. A core's id is its lowest CPU id (`getUniqueCoreID`).
//! Read once at start; pure but for the reads.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use kubelet_types::cpuset::CpuSet;

/// Where a CPU sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    /// Its core's id (the lowest CPU id of the core).
    pub core: u32,
    /// Its socket.
    pub socket: u32,
    /// Its NUMA node.
    pub numa: u32,
    /// Its last-level (uncore, L3) cache (the socket where sysfs tells none).
    pub uncore: u32,
}

/// The CPUs of the machine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Topology {
    /// Every online CPU.
    pub cpus: BTreeMap<u32, CpuInfo>,
}

impl Topology {
    /// A topology from `(cpu, core, socket, numa)` rows (core ids are made the lowest CPU of each core).
    pub fn from_rows(rows: &[(u32, u32, u32, u32)]) -> Self {
        let mut lowest: BTreeMap<(u32, u32), u32> = BTreeMap::new();
        for &(cpu, core, socket, _) in rows {
            let e = lowest.entry((socket, core)).or_insert(cpu);
            *e = (*e).min(cpu);
        }
        let cpus = rows
            .iter()
            .map(|&(cpu, core, socket, numa)| {
                (cpu, CpuInfo { core: lowest[&(socket, core)], socket, numa, uncore: socket })
            })
            .collect();
        Self { cpus }
    }

    /// Every CPU.
    pub fn all(&self) -> CpuSet {
        CpuSet::of(self.cpus.keys().copied())
    }

    fn distinct(&self, f: impl Fn(&CpuInfo) -> u32) -> usize {
        self.cpus.values().map(f).collect::<BTreeSet<_>>().len()
    }

    /// Physical cores.
    pub fn num_cores(&self) -> usize {
        self.cpus.values().map(|c| (c.socket, c.core)).collect::<BTreeSet<_>>().len()
    }

    /// Sockets.
    pub fn num_sockets(&self) -> usize {
        self.distinct(|c| c.socket)
    }

    /// NUMA nodes.
    pub fn num_numa_nodes(&self) -> usize {
        self.distinct(|c| c.numa)
    }

    /// The NUMA node ids, ascending.
    pub fn numa_nodes(&self) -> Vec<u32> {
        self.cpus.values().map(|c| c.numa).collect::<BTreeSet<_>>().into_iter().collect()
    }

    /// The CPUs of the NUMA nodes in `mask` (`CPUsInNUMANodes`).
    pub fn cpus_in_numa_mask(&self, mask: u64) -> CpuSet {
        CpuSet::of(self.cpus.iter().filter(|(_, c)| mask & (1u64 << c.numa) != 0).map(|(id, _)| *id))
    }

    /// Uncore caches (`NumUncoreCache`).
    pub fn num_uncore_caches(&self) -> usize {
        self.distinct(|c| c.uncore)
    }

    /// Hardware threads per core (`CPUsPerCore`; 0 without CPUs).
    pub fn cpus_per_core(&self) -> usize {
        self.cpus.len().checked_div(self.num_cores()).unwrap_or(0)
    }

    /// CPUs per socket (`CPUsPerSocket`).
    pub fn cpus_per_socket(&self) -> usize {
        self.cpus.len().checked_div(self.num_sockets()).unwrap_or(0)
    }

    /// Reads the topology under `sys` (`/sys`).
    pub fn discover(sys: &Path) -> Result<Self, String> {
        let read = |p: &Path| std::fs::read_to_string(p).map(|s| s.trim().to_string());
        let online = match read(&sys.join("devices/system/cpu/online")) {
            Ok(s) => {
                Some(CpuSet::parse(&s).map_err(|e| format!("parse {}/devices/system/cpu/online: {e}", sys.display()))?)
            }
            Err(_) => None,
        };
        let numbered = |dir: &Path, prefix: &str| -> Vec<u32> {
            let mut ids: Vec<u32> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok())
                .collect();
            ids.sort_unstable();
            ids
        };
        let node_dir = sys.join("devices/system/node");
        let nodes = numbered(&node_dir, "node");
        let mut cpus: Vec<(u32, Option<u32>)> = vec![];
        if nodes.is_empty() {
            cpus.extend(numbered(&sys.join("devices/system/cpu"), "cpu").into_iter().map(|c| (c, None)));
        } else {
            for n in nodes {
                cpus.extend(numbered(&node_dir.join(format!("node{n}")), "cpu").into_iter().map(|c| (c, Some(n))));
            }
        }
        let mut rows = vec![];
        for (cpu, node) in cpus {
            if online.as_ref().is_some_and(|o| !o.contains(cpu)) {
                continue;
            }
            let topo = sys.join(format!("devices/system/cpu/cpu{cpu}/topology"));
            let num = |f: &str| -> Result<u32, String> {
                let p = topo.join(f);
                read(&p)
                    .map_err(|e| format!("read {}: {e}", p.display()))?
                    .parse()
                    .map_err(|e| format!("parse {}: {e}", p.display()))
            };
            let (core, socket) = (num("core_id")?, num("physical_package_id")?);
            rows.push((cpu, core, socket, node.unwrap_or(socket)));
        }
        if rows.is_empty() {
            return Err("could not detect number of cpus".into());
        }
        let mut t = Self::from_rows(&rows);
        for (cpu, info) in t.cpus.iter_mut() {
            let id = sys.join(format!("devices/system/cpu/cpu{cpu}/cache/index3/id"));
            if let Some(u) = read(&id).ok().and_then(|v| v.parse().ok()) {
                info.uncore = u;
            }
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sysfs_tree_gives_cores_sockets_and_numa_nodes_with_offline_cpus_left_out() {
        let sys = tempfile::tempdir().unwrap();
        let w = |p: &str, v: &str| {
            let p = sys.path().join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        // 1 socket, 2 cores with 2 threads each (cpu0/cpu2 on core 0, cpu1/cpu3 on core 1), cpu3 offline.
        for (cpu, core) in [(0, 0), (1, 1), (2, 0), (3, 1)] {
            w(&format!("devices/system/cpu/cpu{cpu}/topology/core_id"), &format!("{core}\n"));
            w(&format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"), "0\n");
            std::fs::create_dir_all(sys.path().join(format!("devices/system/node/node0/cpu{cpu}"))).unwrap();
        }
        w("devices/system/cpu/online", "0-2\n");
        w("devices/system/cpu/cpu1/cache/index3/id", "7\n");
        let t = Topology::discover(sys.path()).unwrap();
        assert_eq!(
            (t.cpus[&1].uncore, t.cpus[&0].uncore, t.num_uncore_caches()),
            (7, 0, 2),
            "L3 ids, the socket without"
        );
        assert_eq!(t.all().to_string(), "0-2");
        assert_eq!(t.cpus[&2], CpuInfo { core: 0, socket: 0, numa: 0, uncore: 0 });
        assert_eq!(t.cpus[&1].core, 1);
        assert_eq!((t.num_cores(), t.num_sockets(), t.num_numa_nodes()), (2, 1, 1));
        assert_eq!(Topology::discover(&sys.path().join("none")).unwrap_err(), "could not detect number of cpus");
    }
}
