//! `cpu_manager_state` (`pkg/kubelet/cm/cpumanager/state/checkpoint.go`, `state_checkpoint.go`): compact JSON
//! `{"policyName":…,"defaultCpuSet":…,"entries":{podUID:{container:cpuset}},"checksum":…}` (`entries` left out when
//! empty), written whole (temporary file, fsync, rename) at every change; its checksum is FNV-32a of go-spew's
//! `%#v` of the checkpoint with the checksum zeroed. Read at start: a v1 file (entries by container ID) is refused
//! as unsupported, a file of another policy or with a wrong checksum stops the start with upstream's texts (the
//! operator drains the node and deletes the file); a missing file is a fresh state.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kubelet_types::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

use crate::checksum::fnv32a;

/// The file's name under the root directory (`cpuManagerStateFileName`).
pub const FILE: &str = "cpu_manager_state";

/// Exclusive CPUs by pod UID and container name.
pub type Assignments = BTreeMap<String, BTreeMap<String, CpuSet>>;

/// The manager's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct State {
    /// The shared pool.
    pub default_cpu_set: CpuSet,
    /// The exclusive assignments.
    pub assignments: Assignments,
}

/// Why the state could not be restored.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StateError {
    /// Upstream's restore error, with its advice.
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and delete the CPU manager \
         checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore {
        /// What is wrong.
        reason: String,
        /// The file.
        path: String,
    },
    /// The file could not be written.
    #[error("failed to write CPU manager state {path}: {reason}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "policyName", default)]
    policy_name: String,
    #[serde(rename = "defaultCpuSet", alias = "defaultCPUSet", default)]
    default_cpu_set: String,
    #[serde(rename = "entries", default, skip_serializing_if = "BTreeMap::is_empty")]
    entries: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(rename = "checksum", default)]
    checksum: u64,
}

/// go-spew's `%#v` of the checkpoint (`*state.CPUManagerCheckpoint`, the checksum zeroed).
fn spew(policy: &str, default: &str, entries: &BTreeMap<String, BTreeMap<String, String>>) -> String {
    let pods: Vec<String> = entries
        .iter()
        .map(|(pod, cs)| {
            let cs: Vec<String> = cs.iter().map(|(c, set)| format!("{c}:{set}")).collect();
            format!("{pod}:map[{}]", cs.join(" "))
        })
        .collect();
    format!(
        "(*state.CPUManagerCheckpoint){{PolicyName:(string){policy} DefaultCPUSet:(string){default} \
         Entries:(map[string]map[string]string)map[{}] Checksum:(checksum.Checksum)0}}",
        pods.join(" ")
    )
}

/// The checksum upstream stores for this content.
pub fn checksum(policy: &str, default: &str, entries: &BTreeMap<String, BTreeMap<String, String>>) -> u64 {
    u64::from(fnv32a(spew(policy, default, entries).as_bytes()))
}

fn entries_of(s: &State) -> BTreeMap<String, BTreeMap<String, String>> {
    s.assignments
        .iter()
        .filter(|(_, cs)| !cs.is_empty())
        .map(|(pod, cs)| (pod.clone(), cs.iter().map(|(c, set)| (c.clone(), set.to_string())).collect()))
        .collect()
}

/// The file's bytes for `state` under `policy` (`MarshalCheckpoint`).
pub fn encode(policy: &str, state: &State) -> Vec<u8> {
    let entries = entries_of(state);
    let default = state.default_cpu_set.to_string();
    let f = File {
        checksum: checksum(policy, &default, &entries),
        policy_name: policy.into(),
        default_cpu_set: default,
        entries,
    };
    serde_json::to_vec(&f).unwrap_or_default()
}

/// Parses a file written by `policy`'s manager (`RestoreState`'s checks, without the path in the error).
pub fn decode(policy: &str, bytes: &[u8]) -> Result<State, String> {
    let f: File = serde_json::from_slice(bytes).map_err(|e| go_json_error(&e))?;
    if f.checksum != 0 && f.checksum != checksum(&f.policy_name, &f.default_cpu_set, &f.entries) {
        return Err("checkpoint is corrupted".into());
    }
    if f.policy_name != policy {
        return Err(format!("configured policy {policy:?} differs from state checkpoint policy {:?}", f.policy_name));
    }
    let default_cpu_set = CpuSet::parse(&f.default_cpu_set)
        .map_err(|e| format!("could not parse default cpu set {:?}: {e}", f.default_cpu_set))?;
    let mut assignments = Assignments::new();
    for (pod, cs) in f.entries {
        for (c, set) in cs {
            let cpus = CpuSet::parse(&set)
                .map_err(|e| format!("could not parse cpuset {set:?} for container {c:?} in pod {pod:?}: {e}"))?;
            assignments.entry(pod.clone()).or_default().insert(c, cpus);
        }
    }
    Ok(State { default_cpu_set, assignments })
}

/// Go's text for a JSON that ends too early; serde's own text otherwise.
fn go_json_error(e: &serde_json::Error) -> String {
    if e.is_eof() { "unexpected end of JSON input".into() } else { e.to_string() }
}

/// The state file of one policy in one root directory.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    path: PathBuf,
    policy: String,
}

impl Checkpoint {
    /// `<root>/cpu_manager_state` of `policy`.
    pub fn new(root: &Path, policy: &str) -> Self {
        Self { path: root.join(FILE), policy: policy.into() }
    }

    /// Restores the state (`RestoreState`): a missing file is written fresh (the shared pool empty, as upstream's
    /// first `storeState`).
    pub fn restore(&self) -> Result<State, StateError> {
        let fail = |reason: String| StateError::Restore { reason, path: self.path.display().to_string() };
        match std::fs::read(&self.path) {
            Ok(bytes) => decode(&self.policy, &bytes).map_err(fail),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let fresh = State::default();
                self.store(&fresh)?;
                Ok(fresh)
            }
            Err(e) => Err(fail(e.to_string())),
        }
    }

    /// Writes `state` whole (temporary file, fsync, rename).
    pub fn store(&self, state: &State) -> Result<(), StateError> {
        let fail =
            |e: std::io::Error| StateError::Write { path: self.path.display().to_string(), reason: e.to_string() };
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = dir.join(format!(".{FILE}.tmp"));
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp).map_err(fail)?;
            f.write_all(&encode(&self.policy, state)).map_err(fail)?;
            f.sync_all().map_err(fail)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(fail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(e: &[(&str, &[(&str, &str)])]) -> BTreeMap<String, BTreeMap<String, String>> {
        e.iter()
            .map(|(p, cs)| (p.to_string(), cs.iter().map(|(c, s)| (c.to_string(), s.to_string())).collect()))
            .collect()
    }

    #[test]
    fn checksums_are_upstreams_golden_values() {
        // pkg/kubelet/cm/cpumanager/state/state_checkpoint_test.go.
        assert_eq!(checksum("none", "4-6", &entries(&[])), 354_655_845);
        let two = entries(&[("pod", &[("container1", "4-6"), ("container2", "1-3")])]);
        assert_eq!(checksum("none", "1-3", &two), 3_610_638_499);
        assert_eq!(checksum("other", "1-3", &entries(&[])), 1_394_507_217);
        assert_eq!(checksum("none", "1.3", &entries(&[])), 3_021_697_696);
        // The file the Go kubelet writes with the none policy, as found on real nodes.
        assert_eq!(
            String::from_utf8(encode("none", &State::default())).unwrap(),
            r#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#
        );
        // Real static files.
        assert_eq!(checksum("static", "0-1", &entries(&[])), 1_636_926_438);
        let real = entries(&[(
            "28c11c89-3493-4972-bb67-7090b9d75e0d",
            &[("mytestclient", "2-3,14-15"), ("mytestclient2", "4-5,16-17")],
        )]);
        assert_eq!(checksum("static", "0-1,6-13,18-23", &real), 1_684_933_537);
    }

    #[test]
    fn a_file_round_trips_and_a_bad_one_is_refused_with_upstreams_texts() {
        let mut s = State { default_cpu_set: CpuSet::parse("0,2-4,6-7").unwrap(), ..Default::default() };
        s.assignments
            .entry("6f1e2d3c-0000-4000-8000-000000000001".into())
            .or_default()
            .insert("app".into(), CpuSet::parse("1,5").unwrap());
        let bytes = encode("static", &s);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"policyName":"static","defaultCpuSet":"0,2-4,6-7","entries":{"6f1e2d3c-0000-4000-8000-000000000001":{"app":"1,5"}},"checksum":2808210711}"#
        );
        assert_eq!(decode("static", &bytes).unwrap(), s);
        assert_eq!(
            decode("static", br#"{"policyName":"none","defaultCpuSet":"","checksum":1353318690}"#).unwrap_err(),
            "configured policy \"static\" differs from state checkpoint policy \"none\""
        );
        assert_eq!(
            decode("none", br#"{"policyName":"none","defaultCPUSet":"4-6","checksum":1337}"#).unwrap_err(),
            "checkpoint is corrupted"
        );
        assert_eq!(
            decode("none", br#"{"policyName":"none","defaultCPUSet":"1.3","checksum":3021697696}"#).unwrap_err(),
            "could not parse default cpu set \"1.3\": strconv.Atoi: parsing \"1.3\": invalid syntax"
        );
        assert_eq!(decode("none", b"{").unwrap_err(), "unexpected end of JSON input");
        let dir = tempfile::tempdir().unwrap();
        let cp = Checkpoint::new(dir.path(), "static");
        assert_eq!(cp.restore().unwrap(), State::default(), "a missing file is a fresh state, written");
        assert!(dir.path().join(FILE).exists());
        cp.store(&s).unwrap();
        assert_eq!(cp.restore().unwrap(), s);
        let e = Checkpoint::new(dir.path(), "none").restore().unwrap_err().to_string();
        assert!(e.starts_with("could not restore state from checkpoint: configured policy \"none\" differs"), "{e}");
        assert!(e.ends_with("before restarting Kubelet"), "{e}");
    }
}
