//! The DRA manager's checkpoint (`pkg/kubelet/cm/dra/state/checkpoint.go`, `checkpointer.go`):
//! `<root-dir>/dra_manager_state`, read once at start and written after each change of the prepared claims.
//!
//! Format, as upstream's: the file is `{"Data":"<json>","Checksum":<uint32>}`, where `Data` is
//! `{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","ClaimInfoStateList":[...]}` with Go's
//! field names, sorted map keys, `{}` for each member of a set, `null` for a nil list, and `<`, `>`, `&`, U+2028 and
//! U+2029 escaped as Go escapes them; the checksum is CRC-32/IEEE of `Data`'s bytes. A file whose checksum does not
//! match is refused with upstream's "checkpoint is corrupted" (the node must be drained and the file removed, as
//! upstream says); the `apiVersion` inside is not checked. Writes go to a temporary file in the same folder, then
//! a rename.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The file's name under the root directory.
pub const FILE: &str = "dra_manager_state";
const KIND: &str = "DRACheckpoint";
const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";

/// A prepared claim (`ClaimInfoState`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ClaimInfoState {
    /// The ResourceClaim's UID.
    #[serde(rename = "ClaimUID")]
    pub claim_uid: String,
    /// Its name.
    pub claim_name: String,
    /// Its namespace.
    pub namespace: String,
    /// The pods that use it.
    #[serde(rename = "PodUIDs", serialize_with = "set_as_map", deserialize_with = "map_as_set")]
    pub pod_uids: BTreeSet<String>,
    /// What each driver prepared, by driver name.
    #[serde(deserialize_with = "null_as_default")]
    pub driver_state: BTreeMap<String, DriverState>,
}

/// One driver's devices of a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct DriverState {
    /// The devices (None: Go's nil).
    pub devices: Option<Vec<Device>>,
}

/// A prepared device.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Device {
    /// Its pool.
    pub pool_name: String,
    /// Its name in the pool.
    pub device_name: String,
    /// The claim's requests it serves (None: Go's nil).
    pub request_names: Option<Vec<String>>,
    /// The CDI devices the driver answered (None: Go's nil).
    #[serde(rename = "CDIDeviceIDs")]
    pub cdi_device_ids: Option<Vec<String>>,
}

/// Why the checkpoint cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Not upstream's JSON.
    #[error("could not read the DRA checkpoint {path}: {message}; drain the node and remove the file")]
    Malformed {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The checksum does not match (`CorruptCheckpointError`).
    #[error("checkpoint is corrupted: {path}; drain the node and remove the file")]
    Corrupted {
        /// The file.
        path: String,
    },
    /// The file system refused.
    #[error("DRA checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

#[derive(Serialize, Deserialize)]
struct Data {
    kind: String,
    #[serde(rename = "apiVersion")]
    api_version: String,
    #[serde(rename = "ClaimInfoStateList")]
    claim_info_state_list: Option<Vec<ClaimInfoState>>,
}

#[derive(Serialize, Deserialize)]
struct Checkpoint {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

fn set_as_map<S: Serializer>(set: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(set.len()))?;
    for k in set {
        m.serialize_entry(k, &serde_json::Map::new())?;
    }
    m.end()
}

fn map_as_set<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    let m: Option<BTreeMap<String, serde::de::IgnoredAny>> = Option::deserialize(d)?;
    Ok(m.unwrap_or_default().into_keys().collect())
}

fn null_as_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// JSON as Go's `encoding/json` writes it.
fn go_json<T: Serialize>(v: &T) -> String {
    kubelet_types::go_json::escape(&serde_json::to_string(v).expect("checkpoint types serialize"))
}

/// The file's text for `claims` (None: Go's nil list, as a new checkpoint has).
pub fn encode(claims: Option<&[ClaimInfoState]>) -> String {
    let data = go_json(&Data {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        claim_info_state_list: claims.map(<[ClaimInfoState]>::to_vec),
    });
    let checksum = crc32fast::hash(data.as_bytes());
    go_json(&Checkpoint { data, checksum })
}

/// The claims of a file's text (`path` names it in errors).
pub fn decode(text: &str, path: &str) -> Result<Vec<ClaimInfoState>, CheckpointError> {
    let malformed = |e: serde_json::Error| CheckpointError::Malformed { path: path.into(), message: e.to_string() };
    let c: Checkpoint = serde_json::from_str(text).map_err(malformed)?;
    if crc32fast::hash(c.data.as_bytes()) != c.checksum {
        return Err(CheckpointError::Corrupted { path: path.into() });
    }
    let d: Data = serde_json::from_str(&c.data).map_err(malformed)?;
    Ok(d.claim_info_state_list.unwrap_or_default())
}

/// Reads `<dir>/dra_manager_state`, writing a new empty one where there is none (`GetOrCreate`).
pub fn read_or_create(dir: &Path) -> Result<Vec<ClaimInfoState>, CheckpointError> {
    let path = dir.join(FILE);
    let p = path.display().to_string();
    match std::fs::read_to_string(&path) {
        Ok(text) => decode(&text, &p),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            write(dir, None)?;
            Ok(vec![])
        }
        Err(source) => Err(CheckpointError::Io { path: p, source }),
    }
}

/// Writes `claims` into `<dir>/dra_manager_state` (a temporary file, fsync, rename).
pub fn write(dir: &Path, claims: Option<&[ClaimInfoState]>) -> Result<(), CheckpointError> {
    use std::io::Write;
    let path = dir.join(FILE);
    let io = |source| CheckpointError::Io { path: path.display().to_string(), source };
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(encode(claims).as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, &path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Upstream's `checkpointer_test.go` files, byte for byte.
    const ONE: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}}]}","Checksum":1656016162}"#;
    const TWO_CLAIMS: &str = r#"{"Data":"{\"kind\":\"DRACheckpoint\",\"apiVersion\":\"checkpoint.dra.kubelet.k8s.io/v1\",\"ClaimInfoStateList\":[{\"ClaimUID\":\"067798be-454e-4be4-9047-1aa06aea63f7\",\"ClaimName\":\"example-1\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-1\",\"RequestNames\":[\"test request\"],\"CDIDeviceIDs\":[\"example.com/example=cdi-example\"]}]}}},{\"ClaimUID\":\"4cf8db2d-06c0-7d70-1a51-e59b25b2c16c\",\"ClaimName\":\"example-2\",\"Namespace\":\"default\",\"PodUIDs\":{\"139cdb46-f989-4f17-9561-ca10cfb509a6\":{}},\"DriverState\":{\"test-driver.cdi.k8s.io\":{\"Devices\":[{\"PoolName\":\"worker-1\",\"DeviceName\":\"dev-2\",\"RequestNames\":null,\"CDIDeviceIDs\":null}]}}}]}","Checksum":1582256999}"#;

    #[test]
    fn upstreams_files_read_and_write_back_byte_for_byte() {
        for (text, claims) in [(ONE, 1), (TWO_CLAIMS, 2)] {
            let got = decode(text, "f").unwrap();
            assert_eq!(got.len(), claims);
            assert_eq!(encode(Some(&got)), text, "written back exactly");
        }
        let got = decode(TWO_CLAIMS, "f").unwrap();
        let dev = &got[1].driver_state["test-driver.cdi.k8s.io"].devices.as_ref().unwrap()[0];
        assert_eq!((dev.device_name.as_str(), &dev.request_names, &dev.cdi_device_ids), ("dev-2", &None, &None));
        assert!(got[0].pod_uids.contains("139cdb46-f989-4f17-9561-ca10cfb509a6"));
    }

    #[test]
    fn a_new_and_an_emptied_checkpoint_have_upstreams_checksums() {
        let sum = |text: &str| serde_json::from_str::<serde_json::Value>(text).unwrap()["Checksum"].as_u64().unwrap();
        assert_eq!(sum(&encode(None)), 4010664294, "ClaimInfoStateList null");
        assert_eq!(sum(&encode(Some(&[]))), 2361995144, "ClaimInfoStateList []");
    }

    #[test]
    fn a_changed_file_is_corrupted_and_go_escapes_are_kept() {
        let tampered = ONE.replace("dev-1", "dev-9");
        assert!(matches!(decode(&tampered, "f"), Err(CheckpointError::Corrupted { .. })));
        assert_eq!(
            CheckpointError::Corrupted { path: "f".into() }.to_string().split(':').next(),
            Some("checkpoint is corrupted")
        );
        let claim = ClaimInfoState { claim_name: "a<b>&c".into(), ..Default::default() };
        let text = encode(Some(std::slice::from_ref(&claim)));
        assert!(text.contains(r#"a\\u003cb\\u003e\\u0026c"#), "{text}");
        assert_eq!(decode(&text, "f").unwrap(), [claim]);
    }

    #[test]
    fn a_missing_file_is_created_empty_and_written_claims_read_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_or_create(dir.path()).unwrap().is_empty());
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), encode(None));
        let claims = decode(ONE, "f").unwrap();
        write(dir.path(), Some(&claims)).unwrap();
        assert_eq!(std::fs::read_to_string(dir.path().join(FILE)).unwrap(), ONE);
        assert_eq!(read_or_create(dir.path()).unwrap(), claims);
    }
}
