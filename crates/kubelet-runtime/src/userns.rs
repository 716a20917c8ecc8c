//! User namespaces of pods with `spec.hostUsers: false` (`pkg/kubelet/userns/userns_manager.go` and
//! `pkg/kubelet/userns/types.go`; the kubelet's own ID range from `pkg/kubelet/kubelet_pods.go`
//! getKubeletMappings and parseGetSubIdsOutput; the slot search of
//! `pkg/registry/core/service/allocator/bitmap.go` randomScanStrategyWithOffset with offset 0).
//!
//! The kubelet's ID range ([`kubelet_mappings`], by default every ID from 65536 up) is cut into slots of
//! `idsPerPod` IDs. A pod gets one slot, mapped to container IDs `0..idsPerPod` for both UIDs and GIDs, and the
//! choice is kept in `<pods dir>/<pod UID>/userns` so that a restarted kubelet gives the pod the same range.
//!
//! Callers:
//! - start-up builds one [`UsernsManager`] with [`UsernsManager::new`]. That reads every pod's `userns` file, and
//!   any error (bad configuration, a corrupt file) is fatal, as upstream's `create user namespace manager: %w`;
//! - sandbox creation calls [`UsernsManager::get_or_create`] for every pod. The answer goes into the
//!   `userns_options` of the sandbox and of every container, and its mappings onto every mount. An error (the
//!   handler lacks user namespaces, no free slot, a corrupt file) fails the sandbox creation with a
//!   `FailedCreatePodSandBox` event, and the next sync of the pod tries again;
//! - pod cleanup calls [`UsernsManager::release`] once a terminated pod's cgroup is gone, and
//!   [`UsernsManager::cleanup_orphans`] on every housekeeping pass. Neither returns an error; a failure is logged.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kubelet_cri::api;
use serde_json::Value;
use tracing::{debug, warn};

/// Pod ranges are multiples of this (`userNsUnitLength`).
pub const USERNS_UNIT_LENGTH: u32 = 65536;
/// `userNamespaces.idsPerPod` when unset or 0 (`DefaultKubeletUserNamespacesIDsPerPod`).
pub const DEFAULT_IDS_PER_POD: u32 = 65536;
/// The file in the pod directory that keeps the pod's mappings (`mappingsFile`).
pub const MAPPINGS_FILE: &str = "userns";
/// The user whose subordinate IDs bound the kubelet's range (`kubeletUser`).
const KUBELET_USER: &str = "kubelet";
/// Removals after which the pod map is shrunk (`mapReInitializeThreshold`).
const MAP_SHRINK_THRESHOLD: usize = 1000;

/// What goes wrong with user namespaces. The texts quote upstream where upstream has one.
#[derive(Debug, thiserror::Error)]
pub enum UsernsError {
    /// The kubelet's ID range or `idsPerPod` cannot serve pods (start-up).
    #[error("{0}")]
    Config(String),
    /// The pod asks for a user namespace that its runtime handler cannot give.
    #[error("{0}")]
    Unsupported(String),
    /// A `userns` file or a range that cannot be recorded.
    #[error("{0}")]
    Invalid(String),
    /// Every slot is taken.
    #[error("could not find an empty slot to allocate a user namespace")]
    Full,
    /// A file system operation failed.
    #[error("{op} {}: {source}", .path.display())]
    Io { op: &'static str, path: PathBuf, source: io::Error },
    /// An error with the prefix upstream wraps it in.
    #[error("{context}: {inner}")]
    Context { context: String, inner: Box<UsernsError> },
}

fn context(context: impl Into<String>, inner: UsernsError) -> UsernsError {
    UsernsError::Context { context: context.into(), inner: Box::new(inner) }
}

fn io_error(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> UsernsError {
    UsernsError::Io { op, path: path.into(), source }
}

/// The IDs the kubelet may hand out to pods: `first_id..first_id + length`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletMappings {
    pub first_id: u32,
    pub length: u64,
}

impl KubeletMappings {
    /// Every ID from 65536 up (`defaultFirstID`, `defaultLen`).
    pub const DEFAULT: KubeletMappings = KubeletMappings { first_id: 1 << 16, length: (1 << 32) - (1 << 16) };

    /// The range from the outputs of `getsubids kubelet` and `getsubids -g kubelet`, which must be the same
    /// single line such as `0: kubelet 65536 2147483648` (`parseGetSubIdsOutput`).
    pub fn from_getsubids(uid_output: &str, gid_output: &str) -> Result<KubeletMappings, UsernsError> {
        if uid_output != gid_output {
            return Err(UsernsError::Config(format!("mismatched subuids and subgids for user {KUBELET_USER:?}")));
        }
        let input = uid_output;
        let bad = |m: String| UsernsError::Config(m);
        let lines: Vec<&str> = input.trim_matches('\n').split('\n').collect();
        if lines.len() != 1 {
            return Err(bad(format!("error parsing line {input:?}: it must contain only one line")));
        }
        let parts: Vec<&str> = lines[0].split_whitespace().collect();
        if parts.len() != 4 {
            return Err(bad(format!("invalid line {input:?}")));
        }
        let num = |s: &str| parse_uint32(s).map_err(|e| bad(format!("error parsing line {input:?}: {e}")));
        Ok(KubeletMappings { first_id: num(parts[2])?, length: num(parts[3])?.into() })
    }
}

/// `strconv.ParseUint(s, 10, 32)`, with its error texts.
fn parse_uint32(s: &str) -> Result<u32, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.ParseUint: parsing {s:?}: invalid syntax"));
    }
    s.parse().map_err(|_| format!("strconv.ParseUint: parsing {s:?}: value out of range"))
}

/// The kubelet's ID range (`getKubeletMappings`): the default unless the user `kubelet` is in /etc/passwd and
/// `getsubids` is on PATH, in which case `getsubids kubelet` and `getsubids -g kubelet` name it.
pub fn kubelet_mappings() -> Result<KubeletMappings, UsernsError> {
    let passwd = fs::read("/etc/passwd").map_err(|e| io_error("open", "/etc/passwd", e))?;
    let prefix = format!("{KUBELET_USER}:");
    let user_exists = String::from_utf8_lossy(&passwd)
        .lines()
        .map(str::trim)
        .any(|l| l.starts_with(&prefix) && l.split(':').count() >= 6);
    if !user_exists {
        debug!(user = KUBELET_USER, "user namespaces: user not found, using default mappings");
        return Ok(KubeletMappings::DEFAULT);
    }
    let uids = match getsubids(&[KUBELET_USER]) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            debug!(executable = "getsubids", "user namespaces: executable not found, using default mappings");
            return Ok(KubeletMappings::DEFAULT);
        }
        r => r.map_err(|e| {
            UsernsError::Config(format!("error retrieving additional uids for user {KUBELET_USER:?}: {e}"))
        })?,
    };
    let gids = getsubids(&["-g", KUBELET_USER])
        .map_err(|_| UsernsError::Config(format!("error retrieving additional gids for user {KUBELET_USER:?}")))?;
    debug!(user = KUBELET_USER, "user namespaces: user found, using mappings from getsubids");
    KubeletMappings::from_getsubids(&uids, &gids)
}

/// The standard output of `getsubids` found on PATH, which must exit 0 (`exec.Command(...).Output()`).
fn getsubids(args: &[&str]) -> io::Result<String> {
    let out = std::process::Command::new("getsubids").args(args).output()?;
    if !out.status.success() {
        let status = out.status.code().map_or_else(|| out.status.to_string(), |c| format!("exit status {c}"));
        return Err(io::Error::other(status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Picks where the search for a free slot among `n` starts (`rand.Intn(n)` upstream); taken modulo `n`.
pub type RandomStart = Box<dyn Fn(usize) -> usize + Send + Sync>;

/// A random start index in `0..n` for the slot search (not for cryptography).
pub fn random_start() -> RandomStart {
    Box::new(|n| (rand_u64() % n.max(1) as u64) as usize)
}

/// A random number (each `RandomState` is seeded at random; a counter keeps values apart).
fn rand_u64() -> u64 {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::collections::hash_map::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed))
}

struct State {
    /// One flag per slot (the allocation bitmap).
    used: Vec<bool>,
    /// Pod UID to the first host ID of its slot (`usedBy`). Its size is the number of set flags.
    used_by: HashMap<String, u32>,
    removed: usize,
}

/// Hands out and remembers the ID ranges of pods with their own user namespace (`UsernsManager`).
pub struct UsernsManager {
    pods_dir: PathBuf,
    ids_per_pod: u32,
    /// The slot of `first_id` (`off`): slot `i` of `used` starts at ID `(i + off) * ids_per_pod`.
    off: u64,
    random_start: RandomStart,
    state: Mutex<State>,
}

impl UsernsManager {
    /// Checks the range and `ids_per_pod` (0 means 65536) against `max_pods` and records the `userns` file of
    /// every directory in `pods_dir` (`MakeUserNsManager`). `random_start(n)` picks where the search for a free
    /// slot among `n` starts.
    pub fn new(
        pods_dir: PathBuf,
        ids_per_pod: u32,
        mappings: KubeletMappings,
        max_pods: u32,
        random_start: RandomStart,
    ) -> Result<UsernsManager, UsernsError> {
        let l = if ids_per_pod == 0 { DEFAULT_IDS_PER_POD } else { ids_per_pod };
        let (id, len) = (mappings.first_id, mappings.length);
        let config = |m: String| Err(UsernsError::Config(m));
        if !l.is_multiple_of(USERNS_UNIT_LENGTH) {
            return config(format!("kubelet user namespace length {l} is not a multiple of {USERNS_UNIT_LENGTH}"));
        }
        if !id.is_multiple_of(l) {
            return config(format!("kubelet user assigned ID {id} is not a multiple of {l}"));
        }
        if id < l {
            // Mapping ID 0 would circumvent security.
            return config(format!("kubelet user assigned ID {id} must be greater or equal to {l}"));
        }
        if !len.is_multiple_of(u64::from(l)) {
            return config(format!("kubelet user assigned IDs length {len} is not a multiple of {l}"));
        }
        if len / u64::from(l) < u64::from(max_pods) {
            return config(format!("kubelet user assigned IDs are not enough to support {max_pods} pods"));
        }
        let end = u64::from(id).saturating_add(len);
        if end > 1 << 32 {
            // Not checked upstream, where the IDs are uint32 and would wrap around.
            return config(format!("kubelet user assigned IDs {id} to {end} do not fit in 32 bits"));
        }
        let slots = (len / u64::from(l)) as usize;
        debug!(offset = id / l, length = slots, idsPerPod = l, "User namespace manager mapping");
        let m = UsernsManager {
            pods_dir,
            ids_per_pod: l,
            off: u64::from(id / l),
            random_start,
            state: Mutex::new(State { used: vec![false; slots], used_by: HashMap::new(), removed: 0 }),
        };
        let found = match list_pods(&m.pods_dir) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(m),
            Err(e) => return Err(context("read pods from disk", io_error("read", &m.pods_dir, e))),
        };
        {
            let mut st = m.lock();
            for uid in found {
                debug!(podUID = %uid, "reading pod from disk for user namespace");
                let path = m.pods_dir.join(&uid).join(MAPPINGS_FILE);
                let res = match fs::read(&path) {
                    Ok(c) if c.is_empty() => Ok(()),
                    Ok(c) => m.parse_and_record(&mut st, &uid, &c).map(drop),
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(io_error("read", &path, e)),
                };
                res.map_err(|e| context(format!("record pod mappings: {}", path.display()), e))?;
            }
        }
        Ok(m)
    }

    /// The user namespace of a pod's sandbox (`GetOrCreateUserNamespaceMappings`): the node's when `host_users`
    /// is unset or true; otherwise, if `handler_supports` (the runtime handler's `user_namespaces` feature, or
    /// why it is unknown) allows it, the pod's recorded range or a newly allocated and recorded one.
    pub fn get_or_create(
        &self,
        pod_uid: &str,
        host_users: Option<bool>,
        handler: &str,
        handler_supports: Result<bool, String>,
    ) -> Result<api::UserNamespace, UsernsError> {
        if host_users != Some(false) {
            return Ok(namespace(api::NamespaceMode::Node, None));
        }
        if handler_supports != Ok(true) {
            let mut msg = if handler.is_empty() {
                "can't set `spec.hostUsers: false`, runtime does not support user namespaces".to_string()
            } else {
                format!(
                    "can't set `spec.hostUsers: false`, RuntimeClass handler {handler:?} does not support user namespaces"
                )
            };
            if let Err(reason) = handler_supports {
                msg = format!("{msg}: {reason}");
            }
            return Err(UsernsError::Unsupported(msg));
        }
        if pod_uid.is_empty() || pod_uid == "." || pod_uid == ".." || pod_uid.contains(['/', '\0']) {
            return Err(UsernsError::Invalid(format!("invalid pod UID {pod_uid:?}")));
        }
        let dir = self.pods_dir.join(pod_uid);
        let mut st = self.lock();
        mkdir(&dir).map_err(|e| context("create user namespace store", e))?;
        let path = dir.join(MAPPINGS_FILE);
        let content = match fs::read(&path) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_error("read", &path, e)),
        };
        let mapping = if content.is_empty() {
            self.create(&mut st, pod_uid, &dir).map_err(|e| context("create user namespace", e))?
        } else {
            self.parse_and_record(&mut st, pod_uid, &content).map_err(|e| context("user namespace", e))?
        };
        Ok(namespace(api::NamespaceMode::Pod, Some(mapping)))
    }

    /// Frees the pod's slot and removes its `userns` file, errors ignored (`Release`). Nothing happens for a pod
    /// with no allocation.
    pub fn release(&self, pod_uid: &str) {
        let mut st = self.lock();
        self.release_locked(&mut st, pod_uid);
    }

    /// Releases orphaned allocations (`CleanupOrphanedPodUsernsAllocations`): those of pod directories whose
    /// UID is not in `known_pod_uids` (the pods of the pod manager and those the runtime runs), and those
    /// whose pod directory is gone.
    pub fn cleanup_orphans(&self, known_pod_uids: &HashSet<String>) {
        let mut st = self.lock();
        let found = match list_pods(&self.pods_dir) {
            Ok(found) => found,
            Err(e) => {
                let err = context("user namespace: read pods from disk", io_error("read", &self.pods_dir, e));
                warn!(error = %err, "Failed cleaning up orphaned pod user namespaces allocations");
                return;
            }
        };
        for uid in found.iter().filter(|uid| !known_pod_uids.contains(*uid)) {
            debug!(podUID = %uid, "Clean up orphaned pod user namespace possible allocation");
            self.release_locked(&mut st, uid);
        }
        let on_disk: HashSet<&str> = found.iter().map(String::as_str).collect();
        let gone: Vec<String> = st.used_by.keys().filter(|uid| !on_disk.contains(uid.as_str())).cloned().collect();
        for uid in gone {
            debug!(podUID = %uid, "Clean up orphaned pod user namespace possible allocation");
            self.release_locked(&mut st, &uid);
        }
    }

    /// How many pods hold a range.
    pub fn allocated(&self) -> usize {
        self.lock().used_by.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of a first ID, if it is not below the range.
    fn index(&self, id: u32) -> Option<usize> {
        u64::from(id / self.ids_per_pod).checked_sub(self.off).map(|i| i as usize)
    }

    /// Checks a `userns` file and records its range for the pod (`parseUserNsFileAndRecord`).
    fn parse_and_record(&self, st: &mut State, pod: &str, content: &[u8]) -> Result<api::IdMapping, UsernsError> {
        let invalid = |m: &str| Err(UsernsError::Invalid(format!("invalid user namespace configuration: {m}")));
        let (uids, gids) =
            decode(content).map_err(|e| UsernsError::Invalid(format!("invalid user namespace mappings file: {e}")))?;
        if uids.len() != 1 {
            return invalid("no more than one mapping allowed.");
        }
        if uids.len() != gids.len() {
            return invalid("GID and UID mappings should be identical.");
        }
        if uids[0] != gids[0] {
            return invalid("GID and UID mapping should be identical");
        }
        // Only files as the kubelet writes them, with root mapped, which some runtimes assume.
        if uids[0].container_id != 0 {
            return invalid("UID 0 must be mapped");
        }
        if gids[0].container_id != 0 {
            return invalid("GID 0 must be mapped");
        }
        self.record(st, pod, uids[0].host_id, uids[0].length)?;
        Ok(uids[0])
    }

    /// Takes the slot starting at `from` for the pod (`record`).
    fn record(&self, st: &mut State, pod: &str, from: u32, length: u32) -> Result<(), UsernsError> {
        let invalid = |m: String| Err(UsernsError::Invalid(m));
        if length != self.ids_per_pod {
            return invalid(format!("wrong user namespace length {length}"));
        }
        if !from.is_multiple_of(self.ids_per_pod) {
            return invalid(format!("wrong user namespace offset specified {from}"));
        }
        let prev = st.used_by.get(pod).copied();
        if prev.is_some_and(|p| p != from) {
            return invalid(format!("different user namespace range already used by pod {pod:?}"));
        }
        let Some(index) = self.index(from).filter(|&i| i < st.used.len()) else {
            return invalid(format!("id {from} is out of range"));
        };
        if prev.is_some() {
            return Ok(());
        }
        if st.used[index] {
            return invalid(format!("range picked for pod {pod:?} already taken"));
        }
        debug!(podUID = pod, "new pod user namespace allocation");
        st.used[index] = true;
        st.used_by.insert(pod.to_string(), from);
        Ok(())
    }

    /// Allocates a free slot and writes the pod's file; the slot is freed again if the write fails
    /// (`createUserNs`). A pod whose file vanished keeps its range (upstream allocates another, leaking the first,
    /// although it maps the pod's next containers).
    fn create(&self, st: &mut State, pod: &str, dir: &Path) -> Result<api::IdMapping, UsernsError> {
        let recorded = st.used_by.get(pod).copied();
        let host_id = match recorded {
            Some(host_id) => host_id,
            None => self.allocate(st, pod)?,
        };
        let mapping = api::IdMapping { host_id, container_id: 0, length: self.ids_per_pod };
        if let Err(e) = write_atomic(dir, mappings_json(&mapping).as_bytes()) {
            self.release_locked(st, pod);
            return Err(e);
        }
        Ok(mapping)
    }

    /// Takes a free slot for the pod and returns its first ID (`allocateOne`, whose `AllocateNext` starts at a
    /// random slot and takes the first free one forward, wrapping around).
    fn allocate(&self, st: &mut State, pod: &str) -> Result<u32, UsernsError> {
        let slots = st.used.len();
        if st.used_by.len() >= slots {
            return Err(UsernsError::Full);
        }
        let start = (self.random_start)(slots) % slots;
        let index = (0..slots).map(|i| (start + i) % slots).find(|&at| !st.used[at]).ok_or(UsernsError::Full)?;
        debug!(podUID = pod, "new pod user namespace allocation");
        let host_id = ((index as u64 + self.off) * u64::from(self.ids_per_pod)) as u32;
        st.used[index] = true;
        st.used_by.insert(pod.to_string(), host_id);
        Ok(host_id)
    }

    /// `releaseWithLock`.
    fn release_locked(&self, st: &mut State, pod: &str) {
        let Some(from) = st.used_by.remove(pod) else {
            debug!(podUID = pod, "pod user namespace allocation not present");
            return;
        };
        debug!(podUID = pod, "releasing pod user namespace allocation");
        st.removed += 1;
        let _ = fs::remove_file(self.pods_dir.join(pod).join(MAPPINGS_FILE));
        if st.removed.is_multiple_of(MAP_SHRINK_THRESHOLD) {
            st.used_by.shrink_to_fit();
            st.removed = 0;
        }
        if let Some(i) = self.index(from)
            && let Some(flag) = st.used.get_mut(i)
        {
            *flag = false;
        }
    }
}

fn namespace(mode: api::NamespaceMode, mapping: Option<api::IdMapping>) -> api::UserNamespace {
    api::UserNamespace { mode: mode as i32, uids: mapping.into_iter().collect(), gids: mapping.into_iter().collect() }
}

/// The directories in the pods directory (`ListPodsFromDisk`).
fn list_pods(dir: &Path) -> io::Result<Vec<String>> {
    let mut pods = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type().is_ok_and(|t| t.is_dir())
            && let Ok(name) = entry.file_name().into_string()
        {
            pods.push(name);
        }
    }
    Ok(pods)
}

/// The file content, as Go's `json.Marshal` of upstream's `userNamespace` writes it.
fn mappings_json(m: &api::IdMapping) -> String {
    let one = format!(r#"{{"hostId":{},"containerId":{},"length":{}}}"#, m.host_id, m.container_id, m.length);
    format!(r#"{{"uidMappings":[{one}],"gidMappings":[{one}]}}"#)
}

/// The UID and GID mappings of a file, decoded as Go's `json.Unmarshal` decodes them into upstream's
/// `userNamespace`: missing or null lists and fields are empty or 0, unknown fields are ignored.
fn decode(content: &[u8]) -> Result<(Vec<api::IdMapping>, Vec<api::IdMapping>), String> {
    let v: Value = serde_json::from_slice(content).map_err(|e| e.to_string())?;
    if !(v.is_object() || v.is_null()) {
        return Err("the content is not a JSON object".into());
    }
    let list = |name: &str| -> Result<Vec<api::IdMapping>, String> {
        let items = match v.get(name) {
            None | Some(Value::Null) => return Ok(vec![]),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(format!("{name} is not a list")),
        };
        let mapping = |m: &Value| -> Result<api::IdMapping, String> {
            if !(m.is_object() || m.is_null()) {
                return Err(format!("an element of {name} is not an object"));
            }
            let number = |f: &str| match m.get(f) {
                None | Some(Value::Null) => Ok(0),
                Some(n) => n
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| format!("{name}.{f}: {n} is not a 32-bit unsigned integer")),
            };
            Ok(api::IdMapping {
                host_id: number("hostId")?,
                container_id: number("containerId")?,
                length: number("length")?,
            })
        };
        items.iter().map(mapping).collect()
    };
    Ok((list("uidMappings")?, list("gidMappings")?))
}

fn mkdir(dir: &Path) -> Result<(), UsernsError> {
    fs::DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|e| io_error("create", dir, e))
}

/// Writes `dir/userns` atomically and durably (`utilstore.FileStore.Write`, then an fsync of the directory):
/// a `.<random>` file (mode 0600) in `dir`, written, fsynced and renamed over the target.
fn write_atomic(dir: &Path, data: &[u8]) -> Result<(), UsernsError> {
    mkdir(dir)?;
    let path = dir.join(MAPPINGS_FILE);
    let (tmp, mut file) = loop {
        let tmp = dir.join(format!(".{}", rand_u64() as u32));
        match fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp) {
            Ok(file) => break (tmp, file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_error("create temporary file", tmp, e)),
        }
    };
    let res = file.write_all(data).and_then(|()| file.sync_all());
    drop(file);
    if let Err(e) = res.and_then(|()| fs::rename(&tmp, &path)) {
        let _ = fs::remove_file(&tmp);
        return Err(io_error("write", path, e));
    }
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_error("sync", dir, e))
}

#[cfg(test)]
#[path = "userns_tests.rs"]
mod tests;
