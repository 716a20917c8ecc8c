//! `memory_manager_state` (`pkg/kubelet/cm/memorymanager/state`: state.go, checkpoint.go, state_checkpoint.go):
//! `{"policyName":…,"machineState":{node:{"numberOfAssignments":…,"memoryMap":{type:{"total","systemReserved",
//! "allocatable","reserved","free"}},"cells":[…]}},"entries":{podUID:{container:[{"numaAffinity":[…],"type":…,
//! "size":…}]}},"checksum":…}` (`entries` left out when empty), written whole at every change; the checksum is
//! FNV-32a of go-spew's `%#v` of the checkpoint with the checksum zeroed. A file of another policy or with a wrong
//! checksum stops the start with upstream's texts; a missing one is written fresh.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checksum::fnv32a;

/// The file's name under the root directory (`memoryManagerStateFileName`).
pub const FILE: &str = "memory_manager_state";

/// One memory type of one NUMA node (`MemoryTable`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryTable {
    /// `total`.
    #[serde(rename = "total")]
    pub total: u64,
    /// `systemReserved`.
    #[serde(rename = "systemReserved")]
    pub system_reserved: u64,
    /// `allocatable`.
    pub allocatable: u64,
    /// `reserved`.
    pub reserved: u64,
    /// `free`.
    pub free: u64,
}

/// One NUMA node (`NUMANodeState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    /// `numberOfAssignments`.
    #[serde(rename = "numberOfAssignments")]
    pub assignments: i64,
    /// `memoryMap`, by memory type (`memory`, `hugepages-2Mi`).
    #[serde(rename = "memoryMap")]
    pub memory: BTreeMap<String, MemoryTable>,
    /// `cells`: the nodes this node's assignments span (None: JSON null).
    pub cells: Option<Vec<i64>>,
}

/// A container's memory of one type on NUMA nodes (`Block`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// `numaAffinity`.
    #[serde(rename = "numaAffinity")]
    pub numa_affinity: Vec<i64>,
    /// `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `size` in bytes.
    pub size: u64,
}

/// The machine's NUMA nodes by id.
pub type MachineState = BTreeMap<i64, NodeState>;
/// The blocks of each container, by pod UID and container name.
pub type Assignments = BTreeMap<String, BTreeMap<String, Vec<Block>>>;

/// The manager's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// `machineState`.
    pub machine: MachineState,
    /// `entries`.
    pub assignments: Assignments,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "policyName")]
    policy_name: String,
    #[serde(rename = "machineState", default)]
    machine_state: BTreeMap<String, NodeState>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: Assignments,
    checksum: u64,
}

fn ints(v: &[i64]) -> String {
    v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ")
}

/// go-spew's `%#v` of the checkpoint (`*state.MemoryManagerCheckpoint`, checksum zeroed): struct fields typed, map
/// keys and values and slice elements untyped, pointers as `<*>`, keys sorted (numbers numerically).
pub fn spew(policy: &str, s: &State) -> String {
    let node = |n: &NodeState| {
        let tables: Vec<String> = n
            .memory
            .iter()
            .map(|(k, t)| {
                format!(
                    "{k}:<*>{{TotalMemSize:(uint64){} SystemReserved:(uint64){} Allocatable:(uint64){} Reserved:(uint64){} \
                     Free:(uint64){}}}",
                    t.total, t.system_reserved, t.allocatable, t.reserved, t.free
                )
            })
            .collect();
        let cells = match &n.cells {
            Some(c) => format!("([]int)[{}]", ints(c)),
            None => "([]int)<nil>".into(),
        };
        format!(
            "<*>{{NumberOfAssignments:(int){} MemoryMap:(map[v1.ResourceName]*state.MemoryTable)map[{}] Cells:{cells}}}",
            n.assignments,
            tables.join(" ")
        )
    };
    let machine: Vec<String> = s.machine.iter().map(|(id, n)| format!("{id}:{}", node(n))).collect();
    let entries: Vec<String> = s
        .assignments
        .iter()
        .map(|(pod, cs)| {
            let cs: Vec<String> = cs
                .iter()
                .map(|(c, blocks)| {
                    let b: Vec<String> = blocks
                        .iter()
                        .map(|b| {
                            format!(
                                "{{NUMAAffinity:([]int)[{}] Type:(v1.ResourceName){} Size:(uint64){}}}",
                                ints(&b.numa_affinity),
                                b.kind,
                                b.size
                            )
                        })
                        .collect();
                    format!("{c}:[{}]", b.join(" "))
                })
                .collect();
            format!("{pod}:map[{}]", cs.join(" "))
        })
        .collect();
    format!(
        "(*state.MemoryManagerCheckpoint){{PolicyName:(string){policy} MachineState:(state.NUMANodeMap)map[{}] \
         Entries:(state.ContainerMemoryAssignments)map[{}] Checksum:(checksum.Checksum)0}}",
        machine.join(" "),
        entries.join(" ")
    )
}

/// The checkpoint's checksum.
pub fn checksum(policy: &str, s: &State) -> u64 {
    u64::from(fnv32a(spew(policy, s).as_bytes()))
}

/// The file's bytes (`MarshalCheckpoint`).
pub fn encode(policy: &str, s: &State) -> Vec<u8> {
    let f = File {
        policy_name: policy.into(),
        machine_state: s.machine.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        entries: s.assignments.clone(),
        checksum: checksum(policy, s),
    };
    serde_json::to_vec(&f).unwrap_or_default()
}

/// Parses a file of `policy`'s manager (`restoreState` without the path in the error).
pub fn decode(policy: &str, bytes: &[u8]) -> Result<State, String> {
    let f: File = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let mut machine = MachineState::new();
    for (k, v) in f.machine_state {
        machine.insert(k.parse().map_err(|e| format!("machine state node {k:?}: {e}"))?, v);
    }
    let s = State { machine, assignments: f.entries };
    if f.checksum != checksum(&f.policy_name, &s) {
        return Err("checkpoint is corrupted".into());
    }
    if f.policy_name != policy {
        return Err(format!(
            "[memorymanager] configured policy {policy:?} differs from state checkpoint policy {:?}",
            f.policy_name
        ));
    }
    Ok(s)
}

/// The state file of one policy in one root directory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    path: PathBuf,
    policy: String,
}

impl Checkpoint {
    /// `<root>/memory_manager_state` of `policy` (`None`, `Static`).
    pub fn new(root: &Path, policy: &str) -> Self {
        Self { path: root.join(FILE), policy: policy.into() }
    }

    /// Restores the state (`NewCheckpointState`); a missing file is written fresh.
    pub fn restore(&self) -> Result<State, String> {
        let fail = |e: String| {
            format!(
                "could not restore state from checkpoint: {e}, please drain this node and delete the memory manager \
                 checkpoint file {:?} before restarting Kubelet",
                self.path.display().to_string()
            )
        };
        match std::fs::read(&self.path) {
            Ok(bytes) => decode(&self.policy, &bytes).map_err(fail),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let fresh = State::default();
                self.store(&fresh).map_err(fail)?;
                Ok(fresh)
            }
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// Writes the state whole (temporary file, fsync, rename).
    pub fn store(&self, s: &State) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("failed to write memory manager state {}: {e}", self.path.display());
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{FILE}.tmp"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(fail)?;
            f.write_all(&encode(&self.policy, s)).map_err(fail)?;
            f.sync_all().map_err(fail)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_golden_checkpoint_is_read_and_its_checksum_reproduced() {
        // state_checkpoint_test.go "Restore valid checkpoint".
        let golden = r#"{"policyName":"static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":2048,"systemReserved":512,"allocatable":1536,"reserved":512,"free":1024}},"cells":[]}},"entries":{"pod":{"container1":[{"numaAffinity":[0],"type":"memory","size":512}]}},"checksum":4215593881}"#;
        let s = decode("static", golden.as_bytes()).unwrap();
        assert_eq!(s.assignments["pod"]["container1"][0].size, 512);
        assert_eq!(encode("static", &s), golden.as_bytes(), "written back byte for byte");
        let bad = golden.replace("4215593881", "101010");
        assert_eq!(decode("static", bad.as_bytes()).unwrap_err(), "checkpoint is corrupted");
        assert_eq!(
            decode("None", golden.as_bytes()).unwrap_err(),
            "[memorymanager] configured policy \"None\" differs from state checkpoint policy \"static\""
        );
        let dir = tempfile::tempdir().unwrap();
        let none = Checkpoint::new(dir.path(), "None");
        assert_eq!(none.restore().unwrap(), State::default());
        let text = std::fs::read_to_string(dir.path().join(FILE)).unwrap();
        assert!(text.starts_with(r#"{"policyName":"None","machineState":{},"checksum":"#), "{text}");
        let e = Checkpoint::new(dir.path(), "Static").restore().unwrap_err();
        assert!(e.starts_with("could not restore state from checkpoint: [memorymanager] configured policy"), "{e}");
    }
}
