//! The device manager's checkpoint, `kubelet_internal_checkpoint` in the device plugin folder
//! (`pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go`), in upstream's format so that an upgrade from, or a
//! downgrade to, the Go kubelet keeps every allocation.
//!
//! The JSON is Go's `encoding/json` of `checkpoint.Data` (fields in declaration order, map keys sorted, `[]byte` as
//! padded base64, no whitespace); the checksum is FNV-32a of go-spew's `%#v` of the data
//! (`pkg/util/hash.DeepHashObject` through `dump.ForHash`), which [`spew`] reproduces for this one type. Written by
//! the device manager after each device list, each allocation and each resource removed (write to a temporary file,
//! fsync, rename); read once at start. A missing file is an empty state; an unreadable, malformed or tampered one
//! is logged by the caller, left in place, and replaced at the next write.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use base64::Engine;
use serde::{Deserialize, Serialize};

/// The file's name in the device plugin folder (`kubeletDeviceManagerCheckpoint`).
pub const FILE: &str = "kubelet_internal_checkpoint";

/// A container's devices of one resource (`PodDevicesEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct PodDevicesEntry {
    /// The pod's UID.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The container.
    pub container_name: String,
    /// The extended resource.
    pub resource_name: String,
    /// Device IDs by NUMA node (-1: none) (`DevicesPerNUMA`).
    #[serde(rename = "DeviceIDs", with = "numa_map")]
    pub device_ids: Option<BTreeMap<i64, Vec<String>>>,
    /// The plugin's `ContainerAllocateResponse`, protobuf-encoded.
    #[serde(with = "go_bytes")]
    pub alloc_resp: Option<Vec<u8>>,
}

/// `checkpointData`: what the checksum covers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckpointData {
    /// Every allocation (`null` when there is none, as upstream writes a nil slice).
    #[serde(default = "some_vec")]
    pub pod_device_entries: Option<Vec<PodDevicesEntry>>,
    /// The healthy devices of each registered resource.
    #[serde(default = "some_map")]
    pub registered_devices: Option<BTreeMap<String, Option<Vec<String>>>>,
}

fn some_vec() -> Option<Vec<PodDevicesEntry>> {
    Some(vec![])
}

fn some_map() -> Option<BTreeMap<String, Option<Vec<String>>>> {
    Some(BTreeMap::new())
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct File {
    data: CheckpointData,
    checksum: u64,
}

/// Why the checkpoint could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing the file failed.
    #[error("device manager checkpoint {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// Not the upstream format, or its checksum does not match (`checkpoint is corrupted`).
    #[error("device manager checkpoint {path} is corrupted: {reason}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

pub use crate::checksum::fnv32a;

/// go-spew's `%#v` of the data (`ConfigState{SortKeys, DisableMethods, SpewKeys, DisablePointerAddresses,
/// DisableCapacities}`): every struct field's value after its `(type)`, elements and map entries without types,
/// strings unquoted, keys sorted (numerically for the NUMA map), nil as `<nil>`.
pub fn spew(d: &CheckpointData) -> String {
    fn strs(v: Option<&Vec<String>>) -> String {
        v.map_or_else(|| "<nil>".into(), |v| format!("[{}]", v.join(" ")))
    }
    let entries = d.pod_device_entries.as_ref().map_or_else(
        || "<nil>".to_string(),
        |es| {
            let one = |e: &PodDevicesEntry| {
                let devs = e.device_ids.as_ref().map_or_else(
                    || "<nil>".to_string(),
                    |m| {
                        let kv: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", strs(Some(v)))).collect();
                        format!("map[{}]", kv.join(" "))
                    },
                );
                let bytes = e.alloc_resp.as_ref().map_or_else(
                    || "<nil>".to_string(),
                    |b| format!("[{}]", b.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(" ")),
                );
                format!(
                    "{{PodUID:(string){} ContainerName:(string){} ResourceName:(string){} \
                     DeviceIDs:(checkpoint.DevicesPerNUMA){devs} AllocResp:([]uint8){bytes}}}",
                    e.pod_uid, e.container_name, e.resource_name
                )
            };
            format!("[{}]", es.iter().map(one).collect::<Vec<_>>().join(" "))
        },
    );
    let registered = d.registered_devices.as_ref().map_or_else(
        || "<nil>".to_string(),
        |m| {
            // BTreeMap<String, _> iterates in byte-wise order, as spew sorts string keys.
            let kv: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", strs(v.as_ref()))).collect();
            format!("map[{}]", kv.join(" "))
        },
    );
    format!(
        "(checkpoint.checkpointData){{PodDeviceEntries:([]checkpoint.PodDevicesEntry){entries} \
         RegisteredDevices:(map[string][]string){registered}}}"
    )
}

/// The checksum upstream stores (`checksum.New`).
pub fn checksum(d: &CheckpointData) -> u64 {
    u64::from(fnv32a(spew(d).as_bytes()))
}

/// The file's bytes for `d` (`MarshalCheckpoint`).
pub fn encode(d: &CheckpointData) -> Vec<u8> {
    let f = File { data: d.clone(), checksum: checksum(d) };
    // Go's encoder escapes <, > and & in strings; serde_json does not, and no field of this file holds them in
    // practice (UIDs, container and resource names, device IDs of a plugin), so the bytes agree.
    serde_json::to_vec(&f).unwrap_or_default()
}

/// Parses and verifies the file's bytes.
pub fn decode(path: &Path, bytes: &[u8]) -> Result<CheckpointData, CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt { path: path.display().to_string(), reason };
    let f: File = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
    let want = checksum(&f.data);
    if want != f.checksum {
        return Err(corrupt(format!("checksum {} does not match the data's {want}", f.checksum)));
    }
    Ok(f.data)
}

/// Reads the checkpoint in `dir`; `Ok(None)` when there is none.
pub fn read(dir: &Path) -> Result<Option<CheckpointData>, CheckpointError> {
    let path = dir.join(FILE);
    match std::fs::read(&path) {
        Ok(bytes) => decode(&path, &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CheckpointError::Io { path: path.display().to_string(), source }),
    }
}

/// Writes the checkpoint into `dir` as upstream's file store: a temporary file in the same folder, fsync, rename.
pub fn write(dir: &Path, d: &CheckpointData) -> Result<(), CheckpointError> {
    let path = dir.join(FILE);
    let io = |source| CheckpointError::Io { path: path.display().to_string(), source };
    std::fs::create_dir_all(dir).map_err(io)?;
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&encode(d)).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io)
}

/// `DevicesPerNUMA` in JSON: an object whose keys are the NUMA node IDs in decimal (sorted as strings by Go).
mod numa_map {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<BTreeMap<i64, Vec<String>>>, s: S) -> Result<S::Ok, S::Error> {
        // Go sorts map keys by their string form ("-1" < "0" < "10" < "2").
        let m: Option<BTreeMap<String, &Vec<String>>> =
            v.as_ref().map(|m| m.iter().map(|(k, v)| (k.to_string(), v)).collect());
        m.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<i64, Vec<String>>>, D::Error> {
        let m: Option<BTreeMap<String, Option<Vec<String>>>> = Option::deserialize(d)?;
        m.map(|m| {
            m.into_iter()
                .map(|(k, v)| {
                    let k = k.parse::<i64>().map_err(|e| serde::de::Error::custom(format!("NUMA node {k:?}: {e}")))?;
                    Ok((k, v.unwrap_or_default()))
                })
                .collect()
        })
        .transpose()
    }
}

/// Go's `[]byte` in JSON: padded standard base64, `null` for nil.
mod go_bytes {
    use super::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(b) => s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(b)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| base64::engine::general_purpose::STANDARD.decode(s).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> CheckpointData {
        CheckpointData {
            pod_device_entries: Some(vec![PodDevicesEntry {
                pod_uid: "pod1".into(),
                container_name: "con1".into(),
                resource_name: "domain1.com/resource1".into(),
                device_ids: Some([(0, vec!["dev1".to_string(), "dev2".to_string()])].into()),
                alloc_resp: Some(vec![1, 2, 3]),
            }]),
            registered_devices: Some(
                [("domain1.com/resource1".to_string(), Some(vec!["dev1".to_string(), "dev2".to_string()]))].into(),
            ),
        }
    }

    #[test]
    fn the_checksum_follows_upstreams_spew_rules() {
        // The spew pipeline reproduces upstream's golden checksums of the CPU manager's checkpoint
        // (`state_checkpoint_test.go`: 354655845 for this string), so the device checkpoint's follows the same rules.
        let cpu = "(*state.CPUManagerCheckpoint){PolicyName:(string)none DefaultCPUSet:(string)4-6 \
                   Entries:(map[string]map[string]string)map[] Checksum:(checksum.Checksum)0}";
        assert_eq!(fnv32a(cpu.as_bytes()), 354_655_845);
        let d = example();
        assert_eq!(
            spew(&d),
            "(checkpoint.checkpointData){PodDeviceEntries:([]checkpoint.PodDevicesEntry)[{PodUID:(string)pod1 \
             ContainerName:(string)con1 ResourceName:(string)domain1.com/resource1 \
             DeviceIDs:(checkpoint.DevicesPerNUMA)map[0:[dev1 dev2]] AllocResp:([]uint8)[1 2 3]}] \
             RegisteredDevices:(map[string][]string)map[domain1.com/resource1:[dev1 dev2]]}"
        );
        assert_eq!(checksum(&d), 151_920_155);
        let empty = CheckpointData { pod_device_entries: None, registered_devices: Some(BTreeMap::new()) };
        assert_eq!(checksum(&empty), 3_467_439_661);
    }

    #[test]
    fn the_file_is_upstreams_json_and_reads_back() {
        let d = example();
        let bytes = encode(&d);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"con1","ResourceName":"domain1.com/resource1","DeviceIDs":{"0":["dev1","dev2"]},"AllocResp":"AQID"}],"RegisteredDevices":{"domain1.com/resource1":["dev1","dev2"]}},"Checksum":151920155}"#
        );
        assert_eq!(decode(Path::new("x"), &bytes).unwrap(), d);
        let empty = CheckpointData { pod_device_entries: None, registered_devices: Some(BTreeMap::new()) };
        assert_eq!(
            String::from_utf8(encode(&empty)).unwrap(),
            r#"{"Data":{"PodDeviceEntries":null,"RegisteredDevices":{}},"Checksum":3467439661}"#
        );
    }

    #[test]
    fn numa_keys_are_sorted_as_go_sorts_them_in_json_and_in_the_checksum() {
        let mut d = example();
        let e = &mut d.pod_device_entries.as_mut().unwrap()[0];
        e.device_ids = Some([(-1, vec!["a".into()]), (2, vec!["b".into()]), (10, vec!["c".into()])].into());
        let json = String::from_utf8(encode(&d)).unwrap();
        assert!(json.contains(r#""DeviceIDs":{"-1":["a"],"10":["c"],"2":["b"]}"#), "{json}");
        assert!(spew(&d).contains("map[-1:[a] 2:[b] 10:[c]]"), "numerically in spew: {}", spew(&d));
    }

    #[test]
    fn a_tampered_or_foreign_file_is_corrupt_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &example()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(example()));
        let path = dir.path().join(FILE);
        let text = std::fs::read_to_string(&path).unwrap().replace("dev2", "dev3");
        std::fs::write(&path, text).unwrap();
        assert!(matches!(read(dir.path()), Err(CheckpointError::Corrupt { .. })));
        // The v1 format (DeviceIDs a list) is not read, as upstream.
        std::fs::write(&path, r#"{"Data":{"PodDeviceEntries":[{"PodUID":"p","ContainerName":"c","ResourceName":"r","DeviceIDs":["a"],"AllocResp":""}],"RegisteredDevices":{}},"Checksum":1}"#).unwrap();
        assert!(matches!(read(dir.path()), Err(CheckpointError::Corrupt { .. })));
    }
}
